#pragma once
// Decode latency: runs the decode-latency sweep of the fused CUDA kernels (gsrq bench-decode) when a
// CUDA device is present, filling the chart point by point (context length against per-layer
// latency for each path and batch), and shows the benchmark runs recorded in the run store.

#include "studio_context.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

class LatencyPage : public QWidget {
    Q_OBJECT

public:
    explicit LatencyPage(StudioContext& ctx, QWidget* parent = nullptr);
    void refresh();
    QString messageText() const;
    views::ChartPanel* chart() const { return m_chart; }
    QPushButton* runButton() const { return m_run; }

private:
    void start();

    StudioContext& m_ctx;
    QLabel* m_message;
    QLineEdit* m_contexts;
    QLineEdit* m_batches;
    QSpinBox* m_heads;
    QSpinBox* m_kvHeads;
    QComboBox* m_headDim;
    QComboBox* m_bpa;
    QSpinBox* m_layers;
    QPushButton* m_run;
    QPushButton* m_cancel;
    QPlainTextEdit* m_log;
    views::ChartPanel* m_chart;
    int m_job = 0;
    QString m_deviceProblem; // why Run is off (empty when a device is there)
};

} // namespace gsrq::studio
