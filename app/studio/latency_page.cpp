// The Latency page: its controls, the run store's latency runs, the backend's defaults. The sweep
// and the real model's decode run in latency_runs.cpp, the frontier and speed-quality tables in
// latency_results.cpp.
#include "latency_page.h"
#include "latency_page_parts.h"

#include "core/base/error.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/decode_bench.h"
#include "core/decode/generate.h"
#include "core/jobs/decode_frontier.h"
#include "core/jobs/run_records.h"
#include "core/lm/sequences.h"
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

using namespace latency;

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
    // The model follows Preferences (and the open dump's model) until the user types another here.
    const auto followModel = [this] {
        if (!m_genModel->isModified())
            m_genModel->setText(m_ctx.pplModelPath());
    };
    connect(&m_ctx, &StudioContext::pplModelChanged, this, followModel);
    connect(&m_ctx, &StudioContext::dumpChanged, this, followModel);
    m_genBooks = new QLineEdit(this);
    m_genBooks->setObjectName("genCodebooks");
    m_genBooks->setPlaceholderText(
        tr("codebooks of every layer's keys after RoPE and values (the GSRQ page, Keys: after RoPE)"));
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
    m_genWeights->addItem(tr("GGUF blocks, 8-bit activations"), "blocks-q8");
    m_genWeights->addItem(tr("GGUF blocks, FP32 activations"), "blocks");
    m_genWeights->addItem(tr("FP32"), "fp32");
    m_genWeights->setToolTip(tr("What the step's products read: a GGUF model's quantized blocks (Q4_0, Q4_1, Q8_0, "
                                "Q4_K, Q6_K) with the activations rounded to 8 bits and integer dot products "
                                "(llama.cpp's arithmetic; the fastest step measured), the same blocks with FP32 "
                                "activations, or the dequantized FP32 matrices. The prefill multiplies through the "
                                "FP32 matrices of the blocks' values (the fastest prefill measured)"));
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
    m_genTrain = new QPushButton(tr("Train them…"), this);
    m_genTrain->setToolTip(tr("Open the GSRQ training page set for these codebooks: every layer's keys and values, "
                              "keys after RoPE (the lookup path's); train, export, and choose the file here"));
    connect(m_genTrain, &QPushButton::clicked, this, &LatencyPage::trainCodebooksRequested);
    auto* booksRow = new QHBoxLayout;
    booksRow->addWidget(m_genBooks, 1);
    booksRow->addWidget(m_genTrain);
    genForm->addRow(tr("Codebooks"), booksRow);
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

} // namespace gsrq::studio
