#pragma once
// The paper's figures on the user's data: a metric against D (K fixed) or against K (D fixed),
// KM and GSKM on the same axes, on the original data and on the 1st residual; and the shrinkage
// study: E‖μ‖²/E‖x‖² of KM against D for the keys and values of a layer at several K.

#include "compare_job.h"
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
    QLineEdit* shrinkageKsEdit() const { return m_shrinkKs; }
    views::ChartPanel* sweepChart() const { return m_chart; }
    views::ChartPanel* shrinkageChart() const { return m_shrinkChart; }

signals:
    void runFinished(bool ok);

private:
    void onDumpChanged();
    void startSweep();
    void startShrinkage();
    void redraw();
    void finishUi(bool ok, const QString& text);

    StudioContext& m_ctx;
    QComboBox *m_tensor, *m_axis, *m_metric;
    QLineEdit *m_values, *m_shrinkKs;
    QSpinBox *m_fixed, *m_iters, *m_layer;
    QCheckBox* m_residual;
    QPushButton *m_run, *m_cancel, *m_shrinkRun;
    QProgressBar* m_progress;
    QLabel* m_status;
    views::ChartPanel *m_chart, *m_shrinkChart;
    // series name -> (x, metrics) for the sweep shown, kept to redraw another metric
    std::map<QString, std::vector<std::pair<double, QuantMetrics>>> m_points;
    int m_job = 0;
};

} // namespace gsrq::studio
