#pragma once
// The model at a glance: one job runs KM and GSKM (same D, K, iterations, seed and weights) on
// every layer's keys and values a selection names, and optionally on their 1st residuals, and
// draws, per metric, a heatmap of layers × tensors of GSKM's relative change against KM, coloured
// by which method is better (GSKM orange, KM blue, white for no difference). Hovering a cell gives
// the absolute values; clicking it opens that tensor on the KM vs GSKM page with the same settings.
// The job runs off the GUI thread, cells fill in as tensors finish, and it is recorded as one
// `compare` run (the same settings keys as `gsrq compare --tensors`).

#include "compare_controls.h"
#include "core/jobs/model_compare.h"
#include "studio_context.h"

#include <QWidget>

#include <map>
#include <memory>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QStandardItemModel;

namespace gsrq::views {
class HeatmapView;
}

namespace gsrq::studio {

class ModelPage : public QWidget {
    Q_OBJECT

public:
    explicit ModelPage(StudioContext& ctx, QWidget* parent = nullptr);

    // The metrics drawn, in order: nmse, cosine, gain_error, shrinkage.
    static const QStringList& metrics();

    QLineEdit* tensorsEdit() const { return m_tensors; }
    QSpinBox* dimBox() const { return m_controls.dim; }
    // The head_dim D and K last followed (CompareControls::followHeads), kept across restarts.
    int headsFollowed() const { return m_controls.headsFollowed; }
    void setHeadsFollowed(int headDim) { m_controls.headsFollowed = headDim; }
    QSpinBox* kBox() const { return m_controls.k; }
    QSpinBox* itersBox() const { return m_controls.iters; }
    QSpinBox* seedBox() const { return m_controls.seed; }
    QComboBox* weightsBox() const { return m_controls.weights; }
    QCheckBox* plainBox() const { return m_plain; }
    QCheckBox* residualsBox() const { return m_residuals; }
    QPushButton* runButton() const { return m_run; }
    QPushButton* cancelButton() const { return m_cancel; }
    QProgressBar* progressBar() const { return m_progress; }
    QLabel* statusLabel() const { return m_status; }
    views::HeatmapView* heatmap(const QString& metric) const;
    QString summaryText() const;
    std::int64_t lastRunId() const { return m_runId; }
    // The cells finished so far (the last job's; all of them once it is done).
    const std::vector<ModelCell>& cells() const { return m_cells; }
    // The heatmaps' column of a target: "key", "value", "key, 1st residual", "value, 1st residual".
    static QString columnOf(const ModelTarget& t);
    // The last job's settings, heatmaps, summary and a table of every tensor's metrics with GSKM's
    // change; false (nothing added) before any job finished a tensor.
    bool addToReport(class Report& report) const;
    // Shows a finished model run from the run store (the window's last one, after a restart): its
    // heatmaps, summary and settings, as when it finished. False (nothing changed) where the store has
    // no such finished `compare` run with KM and GSKM results per tensor.
    bool showRun(std::int64_t id);

signals:
    void runFinished(bool ok);
    // A cell was clicked: open this tensor (its 1st residual) with these settings.
    void openTensorRequested(const QString& tensor, bool residual, const gsrq::CompareSettings& settings,
                             const QString& weights);

private:
    void onDumpChanged();
    void start();
    void layoutGrid(const std::vector<ModelTarget>& targets);
    void addCell(const ModelCell& cell);
    void onCellClicked(int row, int column);

    StudioContext& m_ctx;
    QLineEdit* m_tensors;
    CompareControls m_controls;
    QCheckBox *m_plain, *m_residuals;
    QPushButton *m_run, *m_cancel;
    QProgressBar* m_progress;
    QLabel *m_status, *m_summary;
    std::map<QString, views::HeatmapView*> m_maps;
    std::vector<ModelCell> m_cells;
    std::vector<int> m_layers; // heatmap rows
    QStringList m_columns;
    CompareSettings m_settings; // of the last job
    QString m_weightsUsed, m_globsUsed;
    bool m_residualsUsed = false;
    std::int64_t m_runId = 0;
    int m_job = 0;
};

} // namespace gsrq::studio
