#pragma once
// The paper's figures on the user's data: a metric against D (K fixed) or against K (D fixed),
// KM and GSKM on the same axes, on the original data and on the 1st residual; and the shrinkage
// study: E‖μ‖²/E‖x‖² of KM against D for the keys and values of a layer at several K. The paper
// check runs the paper's random-normal sweeps on synthetic Gaussian data (over D in the upper
// chart, over K in the lower) and lists each claim as holding or not, with GSKM-RQ's held-out
// NMSE beside the Shannon bound.

#include "core/jobs/compare_job.h"
#include "core/jobs/paper_check.h"
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
class QTextBrowser;

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

class SweepsPage : public QWidget {
    Q_OBJECT

public:
    explicit SweepsPage(StudioContext& ctx, QWidget* parent = nullptr);

    QComboBox* tensorBox() const { return m_tensor; }
    QComboBox* axisBox() const { return m_axis; }
    QLineEdit* valuesEdit() const { return m_values; }
    QSpinBox* fixedBox() const { return m_fixed; }
    QSpinBox* itersBox() const { return m_iters; }
    QCheckBox* residualBox() const { return m_residual; }
    QComboBox* metricBox() const { return m_metric; }
    QPushButton* runButton() const { return m_run; }
    QPushButton* shrinkageButton() const { return m_shrinkRun; }
    QPushButton* paperCheckButton() const { return m_paperRun; }
    QTextBrowser* paperCheckReport() const { return m_paperReport; }
    // The paper check's size (default: PaperCheckSettings{}, about half a minute on two cores).
    void setPaperCheckSettings(const PaperCheckSettings& s) { m_paperSettings = s; }
    QLineEdit* shrinkageKsEdit() const { return m_shrinkKs; }
    views::ChartPanel* sweepChart() const { return m_chart; }
    views::ChartPanel* shrinkageChart() const { return m_shrinkChart; }

signals:
    void runFinished(bool ok);

private:
    void onDumpChanged();
    void startSweep();
    void startShrinkage();
    void startPaperCheck();
    void showPaperCheck(const PaperCheckResult& r);
    void setRunning(const QString& status); // a job starts: progress reset, buttons off, Cancel on
    void redraw();
    void finishUi(bool ok, const QString& text);

    StudioContext& m_ctx;
    QComboBox *m_tensor, *m_axis, *m_metric;
    QLineEdit *m_values, *m_shrinkKs;
    QSpinBox *m_fixed, *m_iters, *m_layer;
    QCheckBox* m_residual;
    QPushButton *m_run, *m_cancel, *m_shrinkRun, *m_paperRun;
    QProgressBar* m_progress;
    QLabel* m_status;
    QTextBrowser* m_paperReport;
    views::ChartPanel *m_chart, *m_shrinkChart;
    // series name -> (x, metrics) for the sweep shown, kept to redraw another metric
    std::map<QString, std::vector<std::pair<double, QuantMetrics>>> m_points;
    // the paper check's K sweep, drawn in the lower chart while it is shown (empty otherwise)
    std::map<QString, std::vector<std::pair<double, QuantMetrics>>> m_paperK;
    PaperCheckSettings m_paperSettings;
    int m_job = 0;
};

} // namespace gsrq::studio
