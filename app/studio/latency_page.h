#pragma once
// Decode latency: the results of decode-latency benchmarks recorded in the run store (context
// length against per-token latency per path, speedups). Until a benchmark has been recorded it
// says how to make one.

#include "studio_context.h"

#include <QWidget>

class QLabel;

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

private:
    StudioContext& m_ctx;
    QLabel* m_message;
    views::ChartPanel* m_chart;
};

} // namespace gsrq::studio
