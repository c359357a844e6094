#include "latency_page.h"

#include "core/base/error.h"
#include "core/jobs/run_records.h"
#include "gpu/decode/bench.h"
#include "gpu/decode/decode.h"
#include "views/chart_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

namespace gsrq::studio {

namespace {

QString pointLine(const gpu::DecodeBenchPoint& p)
{
    const QString head = QString("ctx %1  batch %2  %3").arg(p.context).arg(p.batch).arg(gpu::decodePathName(p.path));
    if (!p.skipped.empty())
        return head + "  skipped: " + QString::fromStdString(p.skipped);
    QString s = head + QString("  %1 µs  %2 GB/s  %3")
                           .arg(p.seconds * 1e6, 0, 'f', 2)
                           .arg(p.bytesPerSecond / 1e9, 0, 'f', 0)
                           .arg(p.verified ? QString("err %1").arg(p.relError, 0, 'e', 1) : QString("unverified"));
    if (p.path != gpu::DecodePath::Fp16 && p.speedupVsFp16 > 0)
        s += QString("  %1× vs fp16").arg(p.speedupVsFp16, 0, 'f', 2);
    return s;
}

std::vector<std::int64_t> parseList(const QString& text, const QString& what)
{
    std::vector<std::int64_t> out;
    for (const auto& part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const qlonglong v = part.trimmed().toLongLong(&ok);
        if (!ok || v < 1)
            throwInvalid(what.toStdString(), ": '", part.trimmed().toStdString(), "' is not a positive whole number");
        out.push_back(v);
    }
    if (out.empty())
        throwInvalid(what.toStdString(), ": give at least one value");
    return out;
}

} // namespace

LatencyPage::LatencyPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setTextFormat(Qt::RichText);
    m_contexts = new QLineEdit("1024,8192,32768,65536,131072", this);
    m_contexts->setObjectName("contexts");
    m_batches = new QLineEdit("1,8,16,32", this);
    m_batches->setObjectName("batches");
    m_heads = new QSpinBox(this);
    m_heads->setObjectName("heads");
    m_heads->setRange(1, 256);
    m_heads->setValue(32);
    m_kvHeads = new QSpinBox(this);
    m_kvHeads->setObjectName("kvHeads");
    m_kvHeads->setRange(1, 256);
    m_kvHeads->setValue(8);
    m_headDim = new QComboBox(this);
    m_headDim->addItems({"64", "128", "256"});
    m_headDim->setCurrentText("128");
    m_bpa = new QComboBox(this);
    m_bpa->addItems({"0.75", "1", "2", "0.5", "0.25"});
    m_bpa->setToolTip(tr("Bits per activation with D = head_dim and K = 256: R = bits · D / 8 stages "
                         "(synthetic codebooks; timing does not depend on their values)"));
    m_layers = new QSpinBox(this);
    m_layers->setRange(1, 128);
    m_layers->setValue(1);
    m_run = new QPushButton(tr("Run"), this);
    m_run->setObjectName("runDecodeBench");
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    auto* refreshButton = new QPushButton(tr("Show stored runs"), this);
    m_log = new QPlainTextEdit(this);
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(2000);
    m_log->setMaximumHeight(140);
    m_chart = new views::ChartPanel(tr("Decode latency per step and layer"), tr("context length"), tr("µs"), this);
    m_chart->setLogX(true);
    m_chart->setLogY(true);
    m_chart->setEmptyText(tr("Press Run to time each decode path at the context lengths above."));

    auto* form = new QFormLayout;
    form->addRow(tr("Context lengths"), m_contexts);
    form->addRow(tr("Batch sizes"), m_batches);
    auto* shape = new QHBoxLayout;
    shape->addWidget(new QLabel(tr("heads"), this));
    shape->addWidget(m_heads);
    shape->addWidget(new QLabel(tr("KV heads"), this));
    shape->addWidget(m_kvHeads);
    shape->addWidget(new QLabel(tr("head dim"), this));
    shape->addWidget(m_headDim);
    shape->addWidget(new QLabel(tr("bits per activation"), this));
    shape->addWidget(m_bpa);
    shape->addWidget(new QLabel(tr("layers"), this));
    shape->addWidget(m_layers);
    shape->addStretch(1);
    form->addRow(tr("Model"), shape);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    buttons->addWidget(refreshButton);
    buttons->addStretch(1);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_message);
    layout->addLayout(form);
    layout->addLayout(buttons);
    layout->addWidget(m_log);
    layout->addWidget(m_chart, 1);

    const auto devices = gpu::queryDevices();
    if (devices.devices.empty())
        m_deviceProblem = QString::fromStdString(devices.message);
    m_run->setEnabled(m_deviceProblem.isEmpty());
    if (!m_deviceProblem.isEmpty()) {
        m_run->setToolTip(tr("Needs a CUDA device: %1").arg(m_deviceProblem));
        m_chart->setEmptyText(tr("Nothing can be timed here (%1). Recorded decode-latency runs appear here: "
                                 "Show stored runs.")
                                  .arg(m_deviceProblem));
    }

    connect(refreshButton, &QPushButton::clicked, this, &LatencyPage::refresh);
    connect(m_run, &QPushButton::clicked, this, &LatencyPage::start);
    connect(m_cancel, &QPushButton::clicked, this, [this] { m_ctx.runner().cancel(); });
    auto onEnd = [this](int id) {
        if (id != m_job)
            return;
        m_run->setEnabled(m_deviceProblem.isEmpty());
        m_cancel->setEnabled(false);
    };
    connect(&m_ctx.runner(), &JobRunner::finished, this, onEnd);
    connect(&m_ctx.runner(), &JobRunner::cancelled, this, onEnd);
    connect(&m_ctx.runner(), &JobRunner::failed, this, [this, onEnd](int id, const QString& msg) {
        if (id == m_job)
            m_log->appendPlainText(tr("failed: %1").arg(msg));
        onEnd(id);
    });
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
        for (const auto& run : store.listRuns({"bench-decode", RunStatus::Done, "", 5})) {
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
    QString text = shown ? tr("The latest %1 decode-latency benchmark run(s) from the run store: per-layer latency "
                              "of one decode step for each path and batch.")
                               .arg(shown)
                         : tr("<b>No decode-latency results in the run store yet.</b>");
    if (m_deviceProblem.isEmpty())
        text += tr(" Press <b>Run</b> to measure the fused decode kernels (paper path, lookup path) against the FP16 "
                   "split-K kernel on this machine's GPU; each path is checked against the CPU reference first.");
    else
        text += tr(" Running the benchmark needs a CUDA device (%1); results recorded on another machine "
                   "(<code>gsrq bench-decode</code> with the same run store) appear here.")
                    .arg(m_deviceProblem.toHtmlEscaped());
    m_message->setText(text);
    m_chart->flush();
}

void LatencyPage::start()
{
    gpu::DecodeBenchOptions o;
    Codebooks kb, vb;
    try {
        o.contexts = parseList(m_contexts->text(), tr("Context lengths"));
        o.batches.clear(); // the form's batches replace the defaults
        for (auto b : parseList(m_batches->text(), tr("Batch sizes")))
            o.batches.push_back(int(b));
        o.shape = {m_heads->value(), m_kvHeads->value(), m_headDim->currentText().toInt()};
        o.layers = m_layers->value();
        const int D = o.shape.headDim, R = gpu::decodeStagesForBpa(m_bpa->currentText().toDouble(), D);
        if (const auto why = gpu::decodeShapeProblem(o.shape, D, R, 256); !why.empty())
            throwInvalid(why);
        kb = gpu::syntheticDecodeBooks(o.shape, D, R, 256, o.seed);
        vb = gpu::syntheticDecodeBooks(o.shape, D, R, 256, o.seed + 1);
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        return;
    }
    const QString storePath = m_ctx.storePath();
    const int device = m_ctx.backendRequest().device;
    o.device = device;
    m_chart->clear();
    m_log->clear();
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    m_job = 0;
    m_job = m_ctx.runner().start(tr("Decode latency"), [=, this](const JobRunner::Context& job) {
        RunInfo info;
        info.kind = "bench-decode";
        info.backend = "cuda";
        const auto devices = gpu::queryDevices();
        info.device = device >= 0 && std::size_t(device) < devices.devices.size()
                          ? decodeDeviceName(devices.devices[std::size_t(device)])
                          : cat("device ", device);
        info.settingsJson = benchDecodeRunSettings(o, kb, "synthetic").dump();
        WorkerRecording rec(storePath, info, "", job, &m_ctx, {});
        const auto report = gpu::runDecodeBench(
            o, kb, vb, "synthetic",
            [&](const gpu::DecodeBenchPoint& p) {
                if (rec) {
                    rec->recordMetrics(decodeMetrics(p));
                    rec->recordSeries(decodeSeries(p));
                }
                job.post([this, p] {
                    m_log->appendPlainText(pointLine(p));
                    for (const auto& s : decodeSeries(p))
                        m_chart->appendPoint(QString::fromStdString(s.name), QPointF(s.x, s.y));
                });
            },
            [&] { return job.cancelled(); });
        const auto summary = benchDecodeRunSummary(report);
        rec.finish(job.cancelled() ? RunStatus::Cancelled : RunStatus::Done, summary.dump());
        job.post([this, report] {
            m_log->appendPlainText(tr("%1: copy %2 GB/s measured; %3")
                                       .arg(QString::fromStdString(report.device.name))
                                       .arg(report.copyBytesPerSecond / 1e9, 0, 'f', 0)
                                       .arg(report.allVerified() ? tr("every path matched the CPU reference")
                                                                 : tr("a path did NOT match the CPU reference")));
        });
    });
}

} // namespace gsrq::studio
