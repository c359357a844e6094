// The Latency page's jobs: the decode-latency sweep and a real model's decode with its codebooks.
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
        g.weights = parseStepWeights(m_genWeights->currentData().toString().toStdString())
                        .value_or(TransformerModel::StepWeights::BlocksQ8);
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
        SequenceSource src;
        src.text = text;
        src.generate = text.empty();
        src.seqLen = prefillTokens;
        src.sequences = 1;
        src.lengthFlag = "Prefill tokens";
        const auto opened = openWithSequences(model, tokenizer, src);
        const auto& setup = opened.opened;
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
            setup.model, opened.seqs.sequences.front(), books, booksPath, g,
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
            m_genLog->appendPlainText(tr("prefill: %1 tokens in %2 s, %3 tokens/s")
                                          .arg(report.prefillTokens)
                                          .arg(report.prefillSeconds, 0, 'f', 2)
                                          .arg(report.prefillTokensPerSecond(), 0, 'f', 1));
            m_genLog->appendPlainText(tr("context: %1; kernels %2, %3 thread(s); weights: %4")
                                          .arg(QString::fromStdString(report.contextNote))
                                          .arg(QString::fromStdString(report.isa))
                                          .arg(report.threads)
                                          .arg(QString::fromStdString(report.weights)));
            m_modelChart->flush();
        });
    });
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
