#include "latency_page.h"

#include "chart_panel.h"

#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace gsrq::studio {

LatencyPage::LatencyPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setTextFormat(Qt::RichText);
    auto* refreshButton = new QPushButton(tr("Refresh"), this);
    m_chart = new views::ChartPanel(tr("Decode latency per token and layer"), tr("context length"), tr("µs"), this);
    m_chart->setLogX(true);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_message);
    layout->addWidget(refreshButton, 0, Qt::AlignLeft);
    layout->addWidget(m_chart, 1);
    connect(refreshButton, &QPushButton::clicked, this, &LatencyPage::refresh);
}

QString LatencyPage::messageText() const
{
    return m_message->text();
}

void LatencyPage::refresh()
{
    m_chart->clear();
    int shown = 0;
    try {
        RunStore store(m_ctx.storePath().toStdString());
        for (const auto& run : store.listRuns({"bench-decode", "done", 5})) {
            std::map<std::string, QList<QPointF>> curves;
            for (const auto& p : store.series(run.id))
                curves[p.name] << QPointF(p.x, p.y);
            for (const auto& [name, pts] : curves)
                m_chart->setSeries(tr("run %1: %2").arg(run.id).arg(QString::fromStdString(name)), pts);
            ++shown;
        }
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
    m_message->setText(
        shown ? tr("The latest %1 decode-latency benchmark run(s) from the run store.").arg(shown)
              : tr("<b>No decode-latency results in the run store yet.</b> They come from the fused CUDA decode "
                   "benchmark (<code>gsrq bench-decode</code>), which needs a CUDA GPU and is not part of this "
                   "build; its runs will appear here, context length against per-token latency for the FP16 and "
                   "GSRQ paths."));
    m_chart->flush();
}

} // namespace gsrq::studio
