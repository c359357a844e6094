#pragma once
// KM vs GSKM: pick a tensor, D, K, iterations, seed and weights; run; both methods' convergence
// drawn live (the chosen metric of every assignment pass of the block in progress), then as the mean
// over blocks pass by pass, and their metrics side by side.

#include "compare_controls.h"
#include "core/jobs/compare_job.h"
#include "studio_context.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QCheckBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;

namespace gsrq::views {
class ChartPanel;
class MetricsTableModel;
} // namespace gsrq::views

namespace gsrq::studio {

class ComparePage : public QWidget {
    Q_OBJECT

public:
    explicit ComparePage(StudioContext& ctx, QWidget* parent = nullptr);

    // Controls, for the main window's --run option and the tests.
    QComboBox* tensorBox() const { return m_tensor; }
    QSpinBox* dimBox() const { return m_controls.dim; }
    // The head_dim D and K last followed (CompareControls::followHeads), kept across restarts.
    int headsFollowed() const { return m_controls.headsFollowed; }
    void setHeadsFollowed(int headDim) { m_controls.headsFollowed = headDim; }
    QSpinBox* kBox() const { return m_controls.k; }
    QSpinBox* itersBox() const { return m_controls.iters; }
    QPushButton* runButton() const { return m_run; }
    QPushButton* cancelButton() const { return m_cancel; }
    views::ChartPanel* convergenceChart() const { return m_chart; }
    QComboBox* convergenceMetricBox() const { return m_curveMetric; }
    views::MetricsTableModel* resultsModel() const { return m_model; }
    QTableView* resultsTable() const { return m_table; }

    // Picks a tensor and these settings (D, K, iterations, seed, weights, 1st residual or not),
    // without running: what a click on the model page's heatmaps opens.
    void openTensor(const QString& tensor, bool residual, const CompareSettings& s, const QString& weights);
    QComboBox* weightsBox() const { return m_controls.weights; }
    QCheckBox* residualBox() const { return m_residual; }
    QString statusText() const;

signals:
    void runFinished(bool ok);

private:
    void onDumpChanged();
    void onTensorChanged();
    void start();
    void drawConvergence(); // the mean curves of the last result for the chosen metric

    StudioContext& m_ctx;
    QComboBox* m_tensor;
    CompareControls m_controls;
    QComboBox* m_curveMetric;
    std::shared_ptr<const CompareResult> m_last;
    // The tensor (and whether its first residual) the chart and table are of: empty when they show none.
    QString m_resultsTensor;
    bool m_resultsResidual = false;
    void clearResultsOf(const QString& tensor, bool residual);
    QCheckBox* m_residual;
    QPushButton *m_run, *m_cancel;
    QProgressBar* m_progress;
    QLabel* m_status;
    views::ChartPanel* m_chart;
    views::MetricsTableModel* m_model;
    QTableView* m_table;
    int m_job = 0;
};

} // namespace gsrq::studio
