#include "latency_page.h"

#include "core/base/error.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/decode_bench.h"
#include "core/decode/generate.h"
#include "core/jobs/decode_frontier.h"
#include "core/jobs/run_records.h"
#include "core/lm/perplexity.h"
#include "gpu/decode/decode.h"
#include "views/chart_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace gsrq::studio {

namespace {

QString pointLine(const DecodeBenchPoint& p)
{
    const QString head = QString("ctx %1  batch %2  %3").arg(p.context).arg(p.batch).arg(decodePathName(p.path));
    if (!p.skipped.empty())
        return head + "  skipped: " + QString::fromStdString(p.skipped);
    QString s = head + QString("  %1 µs  %2 GB/s  %3")
                           .arg(p.seconds * 1e6, 0, 'f', 2)
                           .arg(p.bytesPerSecond / 1e9, 0, 'f', 0)
                           .arg(p.verified ? QString("err %1").arg(p.relError, 0, 'e', 1) : QString("unverified"));
    if (p.path != DecodePath::Fp16 && p.speedupVsFp16 > 0)
        s += QString("  %1× vs fp16").arg(p.speedupVsFp16, 0, 'f', 2);
    if (p.roofline.seconds > 0)
        s += QString("  %1% of its roofline (%2-bound)")
                 .arg(100 * p.rooflineFraction, 0, 'f', 0)
                 .arg(QString::fromStdString(p.roofline.bound));
    if (p.readRowsSeconds > 0)
        s += QString("  %1% of a plain read of its rows").arg(100 * p.readRowsSeconds / p.seconds, 0, 'f', 0);
    if (p.eigenFp32Seconds > 0)
        s += QString("  (Eigen FP32 %1 µs)").arg(p.eigenFp32Seconds * 1e6, 0, 'f', 0);
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

// The sweep's defaults per backend: a CPU step at 128K tokens already takes tens of milliseconds.
constexpr const char* kCpuContexts = "4096,32768,131072";
constexpr const char* kCpuBatches = "1";
constexpr const char* kGpuContexts = "1024,8192,32768,65536,131072";
constexpr const char* kGpuBatches = "1,8,16,32";

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
    m_backend = new QComboBox(this);
    m_backend->setObjectName("backend");
    m_backend->addItem(tr("CPU"), "cpu");
    m_threads = new QSpinBox(this);
    m_threads->setObjectName("threads");
    m_threads->setRange(0, 1024);
    m_threads->setSpecialValueText(tr("one per core"));
    m_threads->setToolTip(tr("CPU threads: over (sequence, KV head), and over tokens when they outnumber those"));
    m_table = new QTableWidget(this);
    m_table->setObjectName("speedQuality");
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setVisible(false);
    m_table->setMaximumHeight(170);
    m_table->setToolTip(tr("Per recorded run and path: latency per layer and decode step at each context, its "
                           "speed-up over the FP16 path of the same run, and the attention-output error of the "
                           "latest train run with the same D, R and K and the path's keys (after RoPE for the lookup "
                           "path, before it for the paper path): its relative L2 over sampled queries of the dump it "
                           "trained on"));
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
    m_frontierAt = new QComboBox(this);
    m_frontierAt->setObjectName("frontierAt");
    for (auto [ctx, batch] : {std::pair<int, int>{32768, 1}, {32768, 8}, {131072, 1}, {131072, 8}, {8192, 1}})
        m_frontierAt->addItem(tr("%1K tokens, batch %2").arg(ctx / 1024).arg(batch), QPoint(ctx, batch));
    m_frontier = new views::ChartPanel(tr("Speed–quality frontier on a GPU (recorded runs)"),
                                       tr("µs per decode step and layer"), tr("attention-output error"), this);
    m_frontier->setObjectName("frontier");
    m_frontier->setLogX(true);
    m_frontier->setEmptyText(
        tr("No GPU decode runs with a train run of the same D, R and K in the run store: tools/bench/frontier.sh "
           "records both (the times from gsrq bench-decode --model-device, the counted-bytes roofline of an "
           "H100 or H200, where no GPU is at hand; a GPU's measured runs take their place)."));
    m_frontier->setToolTip(tr("Per path and subspace width D, a point per bit rate: the attention-output error of "
                              "the latest train run of that shape against the path's time per decode step in the "
                              "latest GPU run of that shape at the chosen context and batch; measured points "
                              "replace modelled ones. The dashed line is the FP16 path (exact cache) at the same "
                              "point."));

    auto* form = new QFormLayout;
    auto* where = new QHBoxLayout;
    where->addWidget(m_backend);
    where->addWidget(new QLabel(tr("threads"), this));
    where->addWidget(m_threads);
    where->addStretch(1);
    form->addRow(tr("Run on"), where);
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

    auto* kernels = new QWidget(this);
    auto* layout = new QVBoxLayout(kernels);
    layout->addWidget(m_message);
    layout->addLayout(form);
    layout->addLayout(buttons);
    layout->addWidget(m_log);
    // The latency chart and the frontier side by side, the frontier's point chosen over it.
    auto* frontierRow = new QHBoxLayout;
    frontierRow->addWidget(new QLabel(tr("Frontier at"), this));
    frontierRow->addWidget(m_frontierAt);
    frontierRow->addStretch(1);
    auto* frontierColumn = new QVBoxLayout;
    frontierColumn->addLayout(frontierRow);
    frontierColumn->addWidget(m_frontier, 1);
    auto* charts = new QHBoxLayout;
    charts->addWidget(m_chart, 1);
    charts->addLayout(frontierColumn, 1);
    layout->addLayout(charts, 1);
    layout->addWidget(new QLabel(tr("Speed and quality at equal bits (recorded runs)"), this));
    layout->addWidget(m_table);

    // A real model, token by token (gsrq generate): the whole step, not one layer's kernel.
    m_genModel = new QLineEdit(m_ctx.pplModelPath(), this);
    m_genModel->setObjectName("genModel");
    m_genModel->setToolTip(tr("A GGUF model (llama, qwen2) or a llama2.c checkpoint (its tokenizer: the one set in "
                              "Preferences)"));
    m_genText = new QLineEdit(this);
    m_genText->setObjectName("genText");
    m_genText->setPlaceholderText(tr("text file whose first tokens are the prefill (a llama2.c model: empty for its "
                                     "own samples)"));
    m_genBooks = new QLineEdit(this);
    m_genBooks->setObjectName("genCodebooks");
    m_genBooks->setPlaceholderText(tr("codebooks of every layer's keys (gsrq train --key-rope post) and values"));
    m_genContexts = new QLineEdit("4096,16384,32768", this);
    m_genContexts->setObjectName("genContexts");
    m_genPrefill = new QSpinBox(this);
    m_genPrefill->setObjectName("genPrefill");
    m_genPrefill->setRange(2, 1 << 20);
    m_genPrefill->setValue(256);
    m_genPrefill->setToolTip(tr("Tokens of the text run through the forward pass; the context repeats them to length "
                                "(keys and values copied, labelled so)"));
    m_genTokens = new QSpinBox(this);
    m_genTokens->setObjectName("genTokens");
    m_genTokens->setRange(1, 4096);
    m_genTokens->setValue(8);
    m_genTokens->setToolTip(tr("Timed decode steps per context and path (the medians are shown)"));
    m_genThreads = new QSpinBox(this);
    m_genThreads->setObjectName("genThreads");
    m_genThreads->setRange(0, 1024);
    m_genThreads->setSpecialValueText(tr("one per core"));
    m_genThreads->setToolTip(tr("The decode kernels' threads (the products use OpenMP's)"));
    m_genWeights = new QComboBox(this);
    m_genWeights->setObjectName("genWeights");
    m_genWeights->addItem(tr("GGUF blocks"), "blocks");
    m_genWeights->addItem(tr("FP32"), "fp32");
    m_genWeights->setToolTip(tr("What the step's products read: a GGUF model's quantized blocks (Q4_0, Q4_1, Q8_0, "
                                "Q4_K, Q6_K; the same weight values, FP32 activations), or the dequantized FP32 "
                                "matrices"));
    m_genRun = new QPushButton(tr("Decode the model"), this);
    m_genRun->setObjectName("runGenerate");
    auto* genCancel = new QPushButton(tr("Cancel"), this);
    genCancel->setEnabled(false);
    m_genLog = new QPlainTextEdit(this);
    m_genLog->setReadOnly(true);
    m_genLog->setMaximumBlockCount(2000);
    m_genLog->setMaximumHeight(140);
    m_modelChart = new views::ChartPanel(tr("A real model's decode step"), tr("context length"), tr("ms"), this);
    m_modelChart->setObjectName("modelChart");
    m_modelChart->setLogX(true);
    m_modelChart->setEmptyText(tr("Choose a model, a text and codebooks, and press Decode the model: each path's "
                                  "whole step (ms a token) and its attention, at each context."));
    auto* genForm = new QFormLayout;
    genForm->addRow(tr("Model"), m_genModel);
    genForm->addRow(tr("Text"), m_genText);
    genForm->addRow(tr("Codebooks"), m_genBooks);
    auto* genSizes = new QHBoxLayout;
    genSizes->addWidget(m_genContexts, 1);
    genSizes->addWidget(new QLabel(tr("prefill"), this));
    genSizes->addWidget(m_genPrefill);
    genSizes->addWidget(new QLabel(tr("timed tokens"), this));
    genSizes->addWidget(m_genTokens);
    genSizes->addWidget(new QLabel(tr("threads"), this));
    genSizes->addWidget(m_genThreads);
    genSizes->addWidget(new QLabel(tr("weights"), this));
    genSizes->addWidget(m_genWeights);
    genForm->addRow(tr("Context lengths"), genSizes);
    auto* genButtons = new QHBoxLayout;
    genButtons->addWidget(m_genRun);
    genButtons->addWidget(genCancel);
    genButtons->addStretch(1);
    auto* modelTab = new QWidget(this);
    auto* genLayout = new QVBoxLayout(modelTab);
    auto* genNote = new QLabel(tr("The model decoded token by token with its KV cache in FP16 and compressed (the "
                                  "lookup path), on this CPU: the step, the "
                                  "attention's share of it, tokens per second and the cache's bytes, recorded as a "
                                  "<b>generate</b> run (as <tt>gsrq generate</tt>)."),
                               this);
    genNote->setWordWrap(true);
    genLayout->addWidget(genNote);
    genLayout->addLayout(genForm);
    genLayout->addLayout(genButtons);
    genLayout->addWidget(m_genLog);
    genLayout->addWidget(m_modelChart, 1);
    auto* tabs = new QTabWidget(this);
    tabs->setObjectName("latencyTabs");
    tabs->addTab(kernels, tr("Decode kernels"));
    tabs->addTab(modelTab, tr("A real model"));
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(tabs);

    const auto devices = gpu::queryDevices();
    if (devices.devices.empty()) {
        m_deviceProblem = QString::fromStdString(devices.message);
        m_backend->setToolTip(tr("The CPU decode paths; CUDA is not offered: %1").arg(m_deviceProblem));
    } else {
        m_backend->addItem(tr("CUDA: %1").arg(QString::fromStdString(devices.devices.front().name)), "cuda");
        m_backend->setCurrentIndex(1);
    }
    backendChanged();
    connect(m_backend, &QComboBox::currentIndexChanged, this, &LatencyPage::backendChanged);

    connect(refreshButton, &QPushButton::clicked, this, &LatencyPage::refresh);
    connect(m_frontierAt, &QComboBox::currentIndexChanged, this, &LatencyPage::fillFrontier);
    connect(m_run, &QPushButton::clicked, this, &LatencyPage::start);
    connect(m_cancel, &QPushButton::clicked, this, [this] { m_ctx.runner().cancel(); });
    connect(m_genRun, &QPushButton::clicked, this, &LatencyPage::startGenerate);
    connect(genCancel, &QPushButton::clicked, this, [this] { m_ctx.runner().cancel(); });
    connect(m_genRun, &QPushButton::clicked, this, [this, genCancel] { genCancel->setEnabled(m_job != 0); });
    auto onEnd = [this, genCancel](int id, bool ok) {
        if (id != m_job)
            return;
        m_run->setEnabled(true);
        m_cancel->setEnabled(false);
        m_genRun->setEnabled(true);
        genCancel->setEnabled(false);
        emit runFinished(ok);
    };
    connect(&m_ctx.runner(), &JobRunner::finished, this, [onEnd](int id) { onEnd(id, true); });
    connect(&m_ctx.runner(), &JobRunner::cancelled, this, [onEnd](int id) { onEnd(id, false); });
    connect(&m_ctx.runner(), &JobRunner::failed, this, [this, onEnd](int id, const QString& msg) {
        if (id == m_job)
            (m_generating ? m_genLog : m_log)->appendPlainText(tr("failed: %1").arg(msg));
        onEnd(id, false);
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
    setMessage(shown);
    m_chart->flush();
    fillSpeedQuality();
    fillFrontier();
    fillModelChart();
}

QString LatencyPage::modelLog() const
{
    return m_genLog->toPlainText();
}

void LatencyPage::fillModelChart()
{
    m_modelChart->clear();
    try {
        RunStore store(m_ctx.storePath().toStdString());
        for (const auto& run : store.listRuns({"generate", RunStatus::Done, "", 3})) {
            std::map<std::string, QList<QPointF>> curves;
            for (const auto& p : store.series(run.id))
                curves[p.name] << QPointF(p.x, p.y);
            for (const auto& [name, pts] : curves)
                m_modelChart->setSeries(tr("run %1: %2").arg(run.id).arg(QString::fromStdString(name)), pts);
        }
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
    m_modelChart->flush();
}

void LatencyPage::startGenerate()
{
    m_job = 0;
    GenerateOptions g;
    const std::string model = m_genModel->text().trimmed().toStdString();
    const std::string text = m_genText->text().trimmed().toStdString();
    const std::string booksPath = m_genBooks->text().trimmed().toStdString();
    const int prefillTokens = m_genPrefill->value();
    // A llama2.c model reads its tokenizer from Preferences; a GGUF model carries its own.
    const std::string tokenizer = m_ctx.pplTokenizerPath().toStdString();
    try {
        if (model.empty())
            throwInvalid("Model: choose a GGUF model or a llama2.c checkpoint");
        if (booksPath.empty())
            throwInvalid("Codebooks: choose the codebooks of every layer's keys and values");
        g.contexts = parseList(m_genContexts->text(), tr("Context lengths"));
        g.steps = m_genTokens->value();
        g.weights = m_genWeights->currentData().toString() == "fp32" ? Llama2cModel::StepWeights::Fp32
                                                                     : Llama2cModel::StepWeights::Blocks;
        g.threads = m_genThreads->value();
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        emit runFinished(false);
        return;
    }
    const QString storePath = m_ctx.storePath();
    m_modelChart->clear();
    m_genLog->clear();
    m_run->setEnabled(false);
    m_genRun->setEnabled(false);
    m_generating = true;
    m_job = m_ctx.runner().start(tr("Decode a model"), [=, this](const JobRunner::Context& job) {
        // Loading a 1.5B model and its prefill take seconds: done on the worker, their errors the job's.
        const auto books = readCodebookFile(booksPath);
        PerplexitySetup setup = perplexitySetup(model, tokenizer, text, prefillTokens, 1, 0);
        for (auto n : g.contexts)
            if (n + g.steps + 1 > setup.model.config().maxSeq)
                throwInvalid("Context lengths: ", n, " with ", g.steps, " timed tokens passes the model's ",
                             setup.model.config().maxSeq, " positions");
        if (job.cancelled()) // stopped while the model loaded: nothing to record
            return;
        const auto& cfg = setup.model.config();
        job.post([this, cfg] {
            m_genLog->appendPlainText(tr("%1 layers, %2 heads on %3 KV heads × %4")
                                          .arg(cfg.layers)
                                          .arg(cfg.heads)
                                          .arg(cfg.kvHeads)
                                          .arg(cfg.headDim()));
        });
        RunInfo info;
        info.kind = "generate";
        info.backend = "cpu";
        info.device = cpuDecodeDeviceName(cpuModelName(), cpuDecodeThreads(g.threads));
        info.settingsJson = generateRunSettings(model, text, booksPath, prefillTokens, g).dump();
        WorkerRecording rec(storePath, info, "", job, &m_ctx, {model});
        const auto report = runGenerate(
            setup.model, setup.sequences.front(), books, booksPath, g,
            [&](const GeneratePoint& p) {
                if (rec) {
                    rec->recordMetrics(generateMetrics(p));
                    rec->recordSeries(generateSeries(p));
                }
                job.post([this, p] {
                    m_genLog->appendPlainText(tr("%1 tokens, %2: %3 ms a token (attention %4 ms, %5%), %6 tokens/s, "
                                                 "cache %7 MB")
                                                  .arg(p.context)
                                                  .arg(decodePathName(p.path))
                                                  .arg(p.stepMs, 0, 'f', 2)
                                                  .arg(p.attentionMs, 0, 'f', 2)
                                                  .arg(p.stepMs > 0 ? 100 * p.attentionMs / p.stepMs : 0.0, 0, 'f', 0)
                                                  .arg(p.tokensPerSecond, 0, 'f', 1)
                                                  .arg(p.cacheBytes / 1e6, 0, 'f', 1));
                    for (const auto& s : generateSeries(p))
                        m_modelChart->appendPoint(QString::fromStdString(s.name), QPointF(s.x, s.y));
                });
            },
            [&] { return job.cancelled(); });
        rec.finish(job.cancelled() ? RunStatus::Cancelled : RunStatus::Done, generateRunSummary(report).dump());
        job.post([this, report] {
            m_genLog->appendPlainText(tr("context: %1; kernels %2, %3 thread(s); weights: %4")
                                          .arg(QString::fromStdString(report.contextNote))
                                          .arg(QString::fromStdString(report.isa))
                                          .arg(report.threads)
                                          .arg(QString::fromStdString(report.weights)));
            m_modelChart->flush();
        });
    });
}

void LatencyPage::fillFrontier()
{
    m_frontier->clear();
    try {
        RunStore store(m_ctx.storePath().toStdString());
        const QPoint at = m_frontierAt->currentData().toPoint();
        const DecodeFrontier f = decodeFrontier(store, at.x(), at.y());
        // A series per path and D (its points the bit rates, by time), named by where its times come from.
        std::map<QString, QList<QPointF>> series;
        double maxError = 0;
        for (const auto& p : f.points) {
            // "lookup, D=128 (measured)", or "(model of the NVIDIA H200)": models of two GPUs stay apart.
            const QString name = tr("%1, D=%2 (%3)")
                                     .arg(QString::fromStdString(p.path))
                                     .arg(p.dim)
                                     .arg(p.measured ? tr("measured") : QString::fromStdString(p.device));
            series[name] << QPointF(p.seconds * 1e6, p.error);
            maxError = std::max(maxError, p.error);
        }
        for (auto& [name, pts] : series) {
            std::sort(pts.begin(), pts.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
            m_frontier->setSeries(name, pts);
        }
        if (f.fp16Seconds > 0 && !series.empty()) {
            const QString name = tr("fp16, exact cache (%1)").arg(QString::fromStdString(f.fp16Device));
            m_frontier->setSeries(name, {QPointF(f.fp16Seconds * 1e6, 0), QPointF(f.fp16Seconds * 1e6, maxError)});
            m_frontier->setReference(name);
        }
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
    m_frontier->flush();
}

void LatencyPage::setMessage(int storedRuns)
{
    QString text = storedRuns ? tr("The latest %1 decode-latency benchmark run(s) in the run store: per-layer "
                                   "latency of one decode step for each path and batch.")
                                    .arg(storedRuns)
                              : tr("<b>No decode-latency results in the run store yet.</b>");
    text += tr(" Press <b>Run</b> to time the decode paths over the compressed cache (lookup, and the paper path for "
               "reference) against FP16 flash-decoding, on this machine's CPU");
    if (m_deviceProblem.isEmpty())
        text += tr(" or its GPU (fused kernels against the FP16 split-K kernel)");
    text += tr("; each path is checked against the double reference first, and each point's roofline is drawn "
               "beside it.");
    if (!m_deviceProblem.isEmpty())
        text += tr(" No CUDA device here (%1): GPU runs recorded on another machine with the same run store "
                   "appear here too.")
                    .arg(m_deviceProblem.toHtmlEscaped());
    m_message->setText(text);
}

void LatencyPage::backendChanged()
{
    const bool cpu = m_backend->currentData().toString() == "cpu";
    m_threads->setEnabled(cpu);
    m_contexts->setText(cpu ? kCpuContexts : kGpuContexts);
    m_batches->setText(cpu ? kCpuBatches : kGpuBatches);
    m_chart->setEmptyText(cpu ? tr("Press Run to time each decode path on this CPU at the context lengths above.")
                              : tr("Press Run to time each decode path on the GPU at the context lengths above."));
}

void LatencyPage::fillSpeedQuality()
{
    m_table->clear();
    m_table->setRowCount(0);
    try {
        RunStore store(m_ctx.storePath().toStdString());
        // Attention-output error per (D, R, K, keys after RoPE): the latest train run of that shape with
        // attention fidelity. The lookup path reads keys stored after RoPE, the paper path before.
        const AttentionErrors quality = latestAttentionErrors(store);
        struct Row {
            std::int64_t run;
            QString backend, bpa, quality, path;
            std::map<std::int64_t, QString> cells;
        };
        std::vector<Row> rows;
        std::set<std::int64_t> contexts;
        for (const auto& run : store.listRuns({"bench-decode", RunStatus::Done, "", 5}))
            try {
                const auto set = nlohmann::json::parse(run.settingsJson, nullptr, false);
                if (!set.is_object() || !set.contains("dim") || !set.contains("stages") || !set.contains("k"))
                    continue;
                // Codebooks the decode paths refuse (strided channel groups) time nothing here.
                if (set.value("strided_groups", false))
                    continue;
                const int D = set["dim"].get<int>(), R = set["stages"].get<int>(), K = set["k"].get<int>();
                const auto qualityOf = [&](const std::string& path) {
                    if (path == "fp16")
                        return tr("— (FP16 cache)");
                    const bool post = path == "lookup";
                    if (auto it = quality.find({D, R, K, post}); it != quality.end())
                        return tr("%1 (train run %2)").arg(it->second.first, 0, 'f', 4).arg(it->second.second);
                    return tr("no train run with D=%1 R=%2 K=%3, keys %4 RoPE")
                        .arg(D)
                        .arg(R)
                        .arg(K)
                        .arg(post ? tr("after") : tr("before"));
                };
                // Batch 1: per path, per context, the latency and the speed-up over the same run's FP16.
                std::map<std::string, std::map<std::int64_t, std::pair<double, double>>> byPath;
                for (const auto& m : store.metrics(run.id)) {
                    const auto at = m.tensor.find(" ctx=");
                    if (m.scope != "decode" || m.tensor.rfind("b=1 ", 0) != 0 || at == std::string::npos)
                        continue;
                    const std::int64_t ctx = std::stoll(m.tensor.substr(at + 5));
                    if (m.name == "seconds")
                        byPath[m.method][ctx].first = m.value;
                    else if (m.name == "speedup_vs_fp16")
                        byPath[m.method][ctx].second = m.value;
                }
                for (const auto& [path, points] : byPath) {
                    Row r{run.id,
                          QString::fromStdString(run.backend),
                          QString("%1 (D=%2 R=%3 K=%4)").arg(set.value("bpa", 0.0), 0, 'g', 3).arg(D).arg(R).arg(K),
                          qualityOf(path),
                          QString::fromStdString(path),
                          {}};
                    for (const auto& [ctx, v] : points) {
                        if (v.first <= 0)
                            continue;
                        contexts.insert(ctx);
                        QString cell = v.first >= 1e-3 ? QString("%1 ms").arg(v.first * 1e3, 0, 'f', 2)
                                                       : QString("%1 µs").arg(v.first * 1e6, 0, 'f', 1);
                        if (path != "fp16" && v.second > 0)
                            cell += QString(" (%1×)").arg(v.second, 0, 'f', 2);
                        r.cells[ctx] = cell;
                    }
                    rows.push_back(r);
                }
            } catch (const std::exception&) {
                continue;
            }
        QStringList headers{tr("run"), tr("backend"), tr("bits per activation"), tr("attention error"), tr("path")};
        for (std::int64_t c : contexts)
            headers << tr("ctx %1 (batch 1)").arg(c);
        m_table->setColumnCount(int(headers.size()));
        m_table->setHorizontalHeaderLabels(headers);
        m_table->setRowCount(int(rows.size()));
        for (int i = 0; i < int(rows.size()); ++i) {
            const auto& r = rows[std::size_t(i)];
            const QStringList fixed{QString::number(r.run), r.backend, r.bpa, r.quality, r.path};
            for (int c = 0; c < int(fixed.size()); ++c)
                m_table->setItem(i, c, new QTableWidgetItem(fixed[c]));
            int c = int(fixed.size());
            for (std::int64_t ctx : contexts) {
                auto it = r.cells.find(ctx);
                m_table->setItem(i, c++, new QTableWidgetItem(it == r.cells.end() ? QString("–") : it->second));
            }
        }
        m_table->resizeColumnsToContents();
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
}

void LatencyPage::start()
{
    DecodeBenchOptions o;
    Codebooks kb, vb;
    const bool cpu = m_backend->currentData().toString() == "cpu";
    try {
        o.backend = cpu ? DecodeBackend::Cpu : DecodeBackend::Cuda;
        o.threads = m_threads->value();
        o.contexts = parseList(m_contexts->text(), tr("Context lengths"));
        o.batches.clear(); // the form's batches replace the defaults
        for (auto b : parseList(m_batches->text(), tr("Batch sizes")))
            o.batches.push_back(int(b));
        o.shape = {m_heads->value(), m_kvHeads->value(), m_headDim->currentText().toInt()};
        o.layers = m_layers->value();
        const int D = o.shape.headDim, R = decodeStagesForBpa(m_bpa->currentText().toDouble(), D);
        const auto why = cpu ? cpuDecodeShapeProblem(o.shape, D, R, 256) : gpu::decodeShapeProblem(o.shape, D, R, 256);
        if (!why.empty())
            throwInvalid(why);
        kb = syntheticDecodeBooks(o.shape, D, R, 256, o.seed);
        vb = syntheticDecodeBooks(o.shape, D, R, 256, o.seed + 1);
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        emit runFinished(false); // nothing started
        return;
    }
    const QString storePath = m_ctx.storePath();
    const int device = m_ctx.backendRequest().device;
    o.device = device;
    m_chart->clear();
    m_log->clear();
    m_run->setEnabled(false);
    m_genRun->setEnabled(false);
    m_cancel->setEnabled(true);
    m_generating = false;
    m_job = 0;
    m_job = m_ctx.runner().start(tr("Decode latency"), [=, this](const JobRunner::Context& job) {
        RunInfo info;
        info.kind = "bench-decode";
        info.backend = decodeBackendName(o.backend);
        if (cpu) {
            info.device = cpuDecodeDeviceName(cpuModelName(), cpuDecodeThreads(o.threads));
        } else {
            const auto devices = gpu::queryDevices();
            info.device = device >= 0 && std::size_t(device) < devices.devices.size()
                              ? decodeDeviceName(devices.devices[std::size_t(device)].name, device)
                              : cat("device ", device);
        }
        info.settingsJson = benchDecodeRunSettings(o, kb, "synthetic").dump();
        WorkerRecording rec(storePath, info, "", job, &m_ctx, {});
        const auto runner = cpu ? runCpuDecodeBench : gpu::runDecodeBench;
        const auto report = runner(
            o, kb, vb, "synthetic",
            [&](const DecodeBenchPoint& p) {
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
            const QString verdict = report.allVerified() ? tr("every path matched the double reference")
                                                         : tr("a path did NOT match the double reference");
            if (report.backend == DecodeBackend::Cpu)
                m_log->appendPlainText(tr("%1, %2 thread(s), %3 kernels: DRAM read %4 GB/s, L2 read %5 GB/s, %6 G "
                                          "lookups/s, %7 GFLOP/s, measured in this run; %8")
                                           .arg(QString::fromStdString(report.device))
                                           .arg(report.threads)
                                           .arg(QString::fromStdString(report.isa))
                                           .arg(report.readBytesPerSecond / 1e9, 0, 'f', 1)
                                           .arg(report.rates.l2 / 1e9, 0, 'f', 0)
                                           .arg(report.rates.lookups / 1e9, 0, 'f', 2)
                                           .arg(report.rates.flops / 1e9, 0, 'f', 0)
                                           .arg(verdict));
            else
                m_log->appendPlainText(tr("%1: copy %2 GB/s measured; %3")
                                           .arg(QString::fromStdString(report.device))
                                           .arg(report.copyBytesPerSecond / 1e9, 0, 'f', 0)
                                           .arg(verdict));
            fillSpeedQuality();
            try {
                RunStore store(m_ctx.storePath().toStdString());
                setMessage(int(store.listRuns({"bench-decode", RunStatus::Done, "", 5}).size()));
            } catch (const std::exception& e) {
                m_ctx.showMessage(QString::fromUtf8(e.what()));
            }
        });
    });
}

} // namespace gsrq::studio
