#include "train_page.h"

#include "compare_controls.h"
#include "train_page_parts.h"

#include "core/base/error.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/quantizer.h"
#include "core/jobs/codebook_perplexity.h"
#include "core/jobs/method_table.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"
#include "core/lm/sequences.h"
#include "perplexity_chart.h"
#include "views/chart_panel.h"
#include "views/metrics_table_model.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>
#include <set>

namespace gsrq::studio {

TrainPage::TrainPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    auto spin = [this](int lo, int hi, int v) {
        auto* s = new QSpinBox(this);
        s->setRange(lo, hi);
        s->setValue(v);
        return s;
    };
    m_preset = new QComboBox(this);
    m_preset->addItems({tr("custom D, R, K"), "2 bits (D=128, R=32, K=256)", "1 bit (D=128, R=16, K=256)",
                        "0.75 bits (D=128, R=12, K=256)", "0.375 bits (D=256, R=12, K=256)"});
    m_dim = spin(1, 4096, 8);
    m_stages = spin(1, 1024, 4);
    m_k = spin(2, 65536, 64);
    m_iters = spin(0, 10000, 25);
    m_beam = spin(1, 256, 1);
    m_refine = spin(0, 100, 0);
    m_refine->setToolTip(tr("Rounds of joint refinement after the greedy stages: every stage's codewords by least "
                            "squares with the codes fixed, then a re-encode (gsrq train --refine)"));
    m_method = new QComboBox(this);
    for (Method m : {Method::GainShape, Method::KMeans})
        m_method->addItem(methodName(m));
    m_weights = new QComboBox(this);
    m_weights->addItems({"none", "grad-raw", "grad-log", "grad-sq"});
    m_tau = new QDoubleSpinBox(this);
    m_tau->setRange(0.001, 1000);
    m_tau->setValue(1.0);
    m_keyRope = new QComboBox(this);
    m_keyRope->addItem(tr("as dumped (before RoPE: the paper's path)"), "as-dumped");
    m_keyRope->addItem(tr("after RoPE (the lookup path; Latency ▸ A real model)"), "post");
    m_keyRope->setToolTip(tr("Keys after RoPE are rotated at their positions before training, as a model's cache "
                             "holds them; the dump must record its RoPE (tools/dump_kv.py does)"));
    m_holdout = new QDoubleSpinBox(this);
    m_holdout->setRange(0, 0.9);
    m_holdout->setSingleStep(0.05);
    m_holdout->setValue(0.25);
    m_tensors = new QLineEdit(this);
    m_tensors->setPlaceholderText(tr("layers.*.value, layers.2.key … (empty: every key and value)"));
    m_run = new QPushButton(tr("Train"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    m_export = new QPushButton(tr("Export codebooks…"), this);
    m_stageMetric = new QComboBox(this);
    m_stageMetric->addItems({"nmse", "cosine", "gain_error"});
    m_export->setEnabled(false);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);

    auto* form = new QFormLayout();
    form->addRow(tr("Bits per activation"), m_preset);
    form->addRow(tr("Subspace width D"), m_dim);
    form->addRow(tr("Stages R"), m_stages);
    form->addRow(tr("Codewords K"), m_k);
    form->addRow(tr("Method"), m_method);
    form->addRow(tr("Weights"), m_weights);
    form->addRow(tr("τ"), m_tau);
    form->addRow(tr("Beam"), m_beam);
    form->addRow(tr("Refinement rounds"), m_refine);
    form->addRow(tr("Iterations (max)"), m_iters);
    form->addRow(tr("Tensors"), m_tensors);
    form->addRow(tr("Keys"), m_keyRope);
    form->addRow(tr("Held out (random rows)"), m_holdout);
    auto* buttons = new QHBoxLayout();
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    form->addRow(buttons);
    form->addRow(m_export);
    form->addRow(tr("After each stage, show"), m_stageMetric);
    form->addRow(m_progress);
    form->addRow(m_status);
    m_ppl = new QPushButton(tr("Perplexity with these codebooks"), this);
    m_ppl->setEnabled(false);
    m_ppl->setToolTip(tr("The model of Settings ▸ Preferences, in FP32 and with its keys and values replaced by "
                         "these codebooks' reconstructions"));
    m_pplText = new QLineEdit(this);
    m_pplText->setPlaceholderText(tr("text file (empty: the model's own samples)"));
    m_pplResult = new QLabel(this);
    m_pplResult->setWordWrap(true);
    m_pplResult->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* pplTitle = new QLabel(tr("<b>Perplexity</b> (what the codebooks cost the model's predictions)"), this);
    pplTitle->setWordWrap(true);
    form->addRow(pplTitle);
    form->addRow(tr("On"), m_pplText);
    m_pplCancel = new QPushButton(tr("Cancel"), this);
    m_pplCancel->setEnabled(false);
    m_pplBar = new QProgressBar(this);
    m_pplBar->setRange(0, 1000);
    m_pplBar->setVisible(false);
    auto* pplRow = new QHBoxLayout();
    pplRow->addWidget(m_ppl, 1);
    pplRow->addWidget(m_pplCancel);
    form->addRow(pplRow);
    form->addRow(m_pplBar);
    form->addRow(m_pplResult);
    connect(m_pplCancel, &QPushButton::clicked, this, [this] {
        if (m_pplJob && m_ctx.runner().currentId() == m_pplJob)
            m_ctx.runner().cancel();
    });
    m_compareMethods = new QLineEdit(QStringLiteral("fp32,kivi-2,kivi-1,cq-2c8b,km-rq@1,gsrq@1,gsrq@0.75"), this);
    m_compareMethods->setCursorPosition(0); // the list from its start (fp32 first), not its end
    m_compareMethods->setToolTip(
        tr("fp32, kivi-B[gG][rN], cq-<C>c<B>b, km-rq@BPA, gsrq@BPA, vqllm@BPA, or codebooks files: the trained "
           "methods learn on the open dump, which must be the model's"));
    m_compare = new QPushButton(tr("Compare methods on the model"), this);
    m_compare->setToolTip(tr("The paper's table: every method's bits, perplexity and attention error, on the model "
                             "of Settings ▸ Preferences and the text above"));
    m_compareCancel = new QPushButton(tr("Cancel"), this);
    m_compareCancel->setEnabled(false);
    m_compareBar = new QProgressBar(this);
    m_compareBar->setRange(0, 1000);
    m_compareBar->setVisible(false);
    auto* compareRow = new QHBoxLayout();
    compareRow->addWidget(m_compare, 1);
    compareRow->addWidget(m_compareCancel);
    form->addRow(tr("Methods"), m_compareMethods);
    form->addRow(compareRow);
    form->addRow(m_compareBar);
    connect(m_compareCancel, &QPushButton::clicked, this, [this] {
        if (m_compareJob && m_ctx.runner().currentId() == m_compareJob)
            m_ctx.runner().cancel();
    });
    // A cancelled perplexity or comparison posts nothing more: its end is the runner's notice.
    connect(&m_ctx.runner(), &JobRunner::cancelled, this, [this](int id) {
        if (id != 0 && id == m_pplJob) {
            m_pplJob = 0;
            m_ppl->setEnabled(bool(m_last));
            m_pplCancel->setEnabled(false);
            m_pplBar->setVisible(false);
            m_pplResult->setText(tr("Perplexity cancelled; recorded as a cancelled run"));
            emit pplFinished(false);
            return;
        }
        if (id != m_compareJob)
            return;
        m_compareJob = 0;
        m_compare->setEnabled(true);
        m_compareCancel->setEnabled(false);
        m_compareBar->setVisible(false);
        m_pplResult->setText(tr("Comparison cancelled; what it finished is recorded as a cancelled run"));
        emit compareFinished(false);
    });

    m_live = new views::ChartPanel(tr("Clustering in progress"), tr("iteration"), tr("nmse"), this);
    m_stageChart = new views::ChartPanel(tr("After each stage"), tr("stage"), tr("nmse"), this);
    m_stageChart->setLogY(true);
    m_live->setIntegerX(true);
    m_stageChart->setIntegerX(true);
    m_live->setEmptyText(tr("Press Train: each clustering's passes are drawn here as they happen."));
    m_stageChart->setEmptyText(tr("Each stage's metric appears here once the stage is trained."));
    m_model = new views::MetricsTableModel(this);
    auto* table = new QTableView(this);
    table->setModel(m_model);
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    table->setMaximumHeight(160);
    // Shown once a training has results, so that a comparison alone gets the room.
    table->setVisible(false);
    connect(m_model, &QAbstractItemModel::modelReset, table,
            [this, table] { table->setVisible(m_model->rowCount() > 0); });

    m_compareModel = new QStandardItemModel(this);
    m_compareTable = new QTableView(this);
    m_compareTable->setModel(m_compareModel);
    m_compareTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_compareTable->setMinimumHeight(200);
    m_compareTable->setVisible(false);
    m_compareChart =
        new views::ChartPanel(tr("Perplexity against bits"), tr("bits per cached value"), tr("perplexity"), this);
    m_compareChart->setLogX(true);
    m_compareChart->setVisible(false);

    auto* charts = new QHBoxLayout();
    charts->addWidget(m_live, 1);
    charts->addWidget(m_stageChart, 1);
    charts->addWidget(m_compareChart, 1);
    auto* right = new QVBoxLayout();
    right->addLayout(charts, 1);
    right->addWidget(table);
    right->addWidget(m_compareTable);
    auto* formBox = new QWidget(this);
    formBox->setLayout(form);
    formBox->setMaximumWidth(360);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(formBox);
    layout->addLayout(right, 1);

    connect(m_preset, &QComboBox::currentIndexChanged, this, &TrainPage::applyPreset);
    connect(&m_ctx, &StudioContext::dumpChanged, this, [this] {
        // A model's dump (heads of 32 features or more) while the page still holds its toy defaults
        // (custom D = 8, R = 4, K = 64): the paper's 1 bit at its heads, as the other pages follow them.
        const auto dump = m_ctx.dump();
        const KvTensor* key = headedKey(dump.get());
        if (key && key->view.shape[2] >= 32 && m_preset->currentIndex() == 0 && m_dim->value() == 8 &&
            m_stages->value() == 4 && m_k->value() == 64)
            m_preset->setCurrentIndex(2); // applies it
        else
            applyPreset();
    });
    connect(m_stageMetric, &QComboBox::currentIndexChanged, this, &TrainPage::drawStages);
    connect(m_run, &QPushButton::clicked, this, &TrainPage::start);
    connect(m_ppl, &QPushButton::clicked, this, &TrainPage::evaluatePerplexity);
    connect(m_compare, &QPushButton::clicked, this, &TrainPage::compareMethods);
    connect(m_export, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export codebooks"), "codebooks.safetensors",
                                                          tr("Codebooks (*.safetensors)"));
        if (!path.isEmpty())
            exportCodebooks(path);
    });
    connectJobControls(m_ctx, this, &m_job, m_cancel, [this](const QString& text) {
        m_status->setText(text);
        m_run->setEnabled(true);
        m_cancel->setEnabled(false);
        if (m_last) { // the training before this one, as it finished
            showResult(*m_last);
            m_export->setEnabled(true);
            m_ppl->setEnabled(true);
            m_status->setText(tr("%1 The table shows the last finished training.").arg(text));
        }
        emit runFinished(false);
    });
}

void TrainPage::applyPreset()
{
    // The paper's four rates, carried to the open dump's heads (paperBpa): D = head_dim where its
    // keys are [tokens, heads, head_dim], so a model with heads of 64 trains at the paper's rates too.
    static const double rates[] = {2, 1, 0.75, 0.375};
    const auto dump = m_ctx.dump();
    const KvTensor* key = headedKey(dump.get());
    const std::int64_t headDim = key ? key->view.shape[2] : 0, features = key ? key->view.features() : 0;
    std::optional<BpaChoice> choice[4];
    for (int r = 0; r < 4; ++r) {
        choice[r] = headDim > 0 ? paperBpa(rates[r], headDim, features) : paperBpa(rates[r]);
        if (!choice[r])
            choice[r] = paperBpa(rates[r]);
        const QString label = QStringLiteral("%1 %2 (D=%3, R=%4, K=%5)")
                                  .arg(rates[r])
                                  .arg(rates[r] == 1 ? tr("bit") : tr("bits"))
                                  .arg(choice[r]->dim)
                                  .arg(choice[r]->stages)
                                  .arg(choice[r]->k);
        if (m_preset->itemText(r + 1) != label)
            m_preset->setItemText(r + 1, label);
    }
    const int i = m_preset->currentIndex();
    const bool custom = i == 0;
    m_dim->setEnabled(custom);
    m_stages->setEnabled(custom);
    m_k->setEnabled(custom);
    if (!custom) {
        m_dim->setValue(choice[i - 1]->dim);
        m_stages->setValue(choice[i - 1]->stages);
        m_k->setValue(choice[i - 1]->k);
    }
}

void TrainPage::start()
{
    const auto dump = m_ctx.dump();
    if (!dump) {
        m_ctx.showMessage(tr("Open a dump first."));
        return;
    }
    TrainSettings s;
    s.rq.dim = m_dim->value();
    s.rq.stages = m_stages->value();
    s.rq.k = m_k->value();
    s.rq.iterations = m_iters->value();
    s.rq.beam = m_beam->value();
    s.rq.refine = m_refine->value();
    s.rq.method = methodFromName(m_method->currentText().toStdString()).value_or(Method::GainShape);
    s.weights = *weightModeFromName(m_weights->currentText().toStdString());
    s.tau = m_tau->value();
    s.holdout = m_holdout->value();
    s.keyRope = m_keyRope->currentData().toString() == "post" ? KeyRope::Post : KeyRope::AsDumped;
    for (const auto& p : m_tensors->text().split(',', Qt::SkipEmptyParts))
        s.tensorPatterns.push_back(p.trimmed().toStdString());
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();

    s.rq.reportStages = true; // "After each stage" fills as the stages end
    m_liveStagePoints = 0;
    m_live->clear();
    m_stageChart->clear();
    m_stageChart->setLogY(m_stageMetric->currentText() == "nmse");
    m_stageChart->setTitle(tr("%1 after each stage").arg(m_stageMetric->currentText()));
    m_model->setTable({}, {}, {});
    m_progress->setValue(0);
    m_status->setText(tr("Training…"));
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    // The last finished training stays (m_last) until this one finishes: a cancel or a failure shows it
    // again; meanwhile nothing may export or measure it under the new run's settings.
    m_export->setEnabled(false);
    m_ppl->setEnabled(false);
    m_clock.start();

    m_job = 0; // the runner cancels whatever runs; that notice is not about this run
    m_job = m_ctx.runner().start(tr("GSRQ training"), [=, this](const JobRunner::Context& job) {
        auto backend = gpu::makeBackend(backendRequest).backend;
        RunInfo info = jobRunInfo("train", *backend, *dump);
        info.settingsJson = trainRunSettings(s, "", backend->name(), backend->device()).dump();
        WorkerRecording rec(storePath, info, "", job, &m_ctx, dump->files());
        auto current = std::make_shared<std::string>();
        ProgressBatcher batch(job, [this, current](const std::vector<ProgressEvent>& events) {
            for (const auto& e : events) {
                if (e.afterStage) { // a stage done: its point on "After each stage", as it happens
                    ++m_liveStagePoints;
                    m_stageChart->appendPoint(
                        QString::fromStdString(e.tensor),
                        QPointF(e.stage + 1, metricByName(*e.afterStage, m_stageMetric->currentText().toStdString())));
                    continue;
                }
                const std::string key = e.tensor + cat(" stage ", e.stage + 1, " subspace ", e.subspace + 1);
                if (key != *current) { // a new clustering: its own curve
                    *current = key;
                    m_live->clear();
                }
                m_live->appendPoint(QString::fromStdString(key), QPointF(e.iteration.iteration, e.iteration.nmse));
                m_progress->setValue(int(e.fraction * 1000));
                const double elapsed = m_clock.elapsed() / 1000.0;
                const double eta = e.fraction > 0.01 ? elapsed * (1 - e.fraction) / e.fraction : 0;
                m_status->setText(tr("%1 — %2 s, about %3 s left")
                                      .arg(QString::fromStdString(e.what))
                                      .arg(elapsed, 0, 'f', 1)
                                      .arg(eta, 0, 'f', 0));
            }
        });
        auto result = std::make_shared<TrainJobResult>(runTrain(*dump, s, *backend, [&](const ProgressEvent& e) {
            rec.progress(e);
            return batch.add(e);
        }));
        batch.flush();
        if (rec)
            rec->recordTrain(*result);
        rec.finish(result->cancelled ? RunStatus::Cancelled : RunStatus::Done, trainRunSummary(*result).dump());
        if (result->cancelled)
            return;
        const qint64 runId = rec ? rec->id() : 0;
        job.post([this, result, runId] {
            m_last = result;
            showResult(*result);
            m_status->setText(runId ? tr("Done; recorded as run %1.").arg(runId) : tr("Done (not recorded)."));
            m_run->setEnabled(true);
            m_cancel->setEnabled(false);
            m_export->setEnabled(true);
            m_ppl->setEnabled(true);
            m_pplResult->clear();
            m_progress->setValue(1000);
            emit runFinished(true);
        });
    });
}

void TrainPage::prepareLookupCodebooks()
{
    m_tensors->setText(QStringLiteral("layers.*.key,layers.*.value"));
    m_keyRope->setCurrentIndex(m_keyRope->findData("post"));
    m_status->setText(tr("Set for the Latency page's real model: every layer's keys (after RoPE) and values. Choose "
                         "the rate, Train, Export, then give the file to the Latency page."));
}

void TrainPage::showResult(const TrainJobResult& r)
{
    QStringList rows;
    std::vector<std::vector<double>> values;
    for (const auto& t : r.tensors) {
        rows << QString::fromStdString(t.tensor);
        const auto& m = t.train.metrics;
        const double held = t.heldout ? t.heldout->nmse : std::nan("");
        values.push_back({t.bpa, t.effectiveBpa, double(t.codebookBytes), m.nmse, held, m.cosine, m.gainError,
                          m.shrinkage, t.train.seconds});
    }
    m_model->setTable(rows,
                      {"bits", "effective bits", "codebook bytes", "train nmse", "held-out nmse", "cosine",
                       "gain_error", "shrinkage", "seconds"},
                      values);
    drawStages();
}

void TrainPage::drawStages()
{
    m_stageChart->clear();
    if (!m_last)
        return;
    const QString metric = m_stageMetric->currentText();
    m_stageChart->setLogY(metric == "nmse");
    bool refined = false;
    for (const auto& t : m_last->tensors) {
        QList<QPointF> line;
        for (std::size_t s = 0; s < t.train.afterStage.size(); ++s) {
            const auto& m = t.train.afterStage[s];
            line << QPointF(double(s + 1), metricByName(m, metric.toStdString()));
        }
        m_stageChart->setSeries(QString::fromStdString(t.tensor), line);
        if (t.train.refinement.empty() || t.train.afterStage.empty())
            continue;
        // Each refinement round after the last stage (x = R + round), the training rows' metric and
        // the held-out rows', so over-fitting shows.
        refined = true;
        const double R = double(t.train.afterStage.size());
        QList<QPointF> train{QPointF(R, metricByName(t.train.afterStage.back(), metric.toStdString()))}, held;
        if (t.train.heldoutBeforeRefine)
            held << QPointF(R, metricByName(*t.train.heldoutBeforeRefine, metric.toStdString()));
        for (const auto& rr : t.train.refinement) {
            train << QPointF(R + rr.round, metricByName(rr.train, metric.toStdString()));
            if (rr.heldout)
                held << QPointF(R + rr.round, metricByName(*rr.heldout, metric.toStdString()));
        }
        m_stageChart->setSeries(QString::fromStdString(t.tensor) + tr(" refined"), train);
        if (!held.isEmpty())
            m_stageChart->setSeries(QString::fromStdString(t.tensor) + tr(" held-out"), held);
    }
    m_stageChart->view()->chart()->setTitle(refined ? tr("%1 after each stage, then each refinement round").arg(metric)
                                                    : tr("%1 after each stage").arg(metric));
    m_stageChart->flush();
}

bool TrainPage::exportCodebooks(const QString& path)
{
    if (!m_last) {
        m_ctx.showMessage(tr("Nothing to export: train first."));
        return false;
    }
    try {
        writeCodebookFile(path.toStdString(), m_last->file, DType::F32);
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        return false;
    }
    m_ctx.showMessage(tr("Wrote %1").arg(path), false);
    return true;
}

QString TrainPage::pplResultText() const
{
    return m_pplResult->text();
}

void TrainPage::postFailure(const JobRunner::Context& job, const std::exception& e, QPushButton* button,
                            void (TrainPage::*finished)(bool))
{
    const QString why = QString::fromUtf8(e.what());
    job.post([this, why, button, finished] {
        m_pplResult->setText(why);
        button->setEnabled(true);
        // The failed job's Cancel and progress go with it.
        if (button == m_ppl) {
            m_pplJob = 0;
            m_pplCancel->setEnabled(false);
            m_pplBar->setVisible(false);
        } else if (button == m_compare) {
            m_compareJob = 0;
            m_compareCancel->setEnabled(false);
            m_compareBar->setVisible(false);
        }
        m_ctx.showMessage(why);
        emit(this->*finished)(false);
    });
}

void TrainPage::evaluatePerplexity()
{
    if (!m_last) {
        m_ctx.showMessage(tr("Train first: perplexity is measured with the codebooks of a training."));
        return;
    }
    const QString modelPath = m_ctx.pplModelPath(), tokPath = m_ctx.pplTokenizerPath();
    if (modelPath.isEmpty()) {
        m_ctx.showMessage(tr("Set a model (GGUF, or llama2.c with its tokenizer) in Settings ▸ Preferences to "
                             "measure perplexity."));
        return;
    }
    const auto last = m_last;
    const QString textPath = m_pplText->text().trimmed();
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    m_ppl->setEnabled(false);
    m_pplCancel->setEnabled(true);
    m_pplBar->setValue(0);
    m_pplBar->setVisible(true);
    m_pplResult->setText(tr("Measuring…"));
    m_pplJob = 0; // the runner cancels whatever runs; that notice is not about this job
    m_pplJob = m_ctx.runner().start(tr("perplexity"), [=, this](const JobRunner::Context& job) {
        try {
            auto backend = gpu::makeBackend(backendRequest).backend;
            // Recorded from the start: the run's start and finish span the job (loading the model and
            // its text, then the measurement); a model that cannot be read fails the run.
            PplRunSettings ps;
            RunInfo info = pagePplRun(modelPath, tokPath, textPath, *backend, ps);
            ps.codebookSettings = {last->file.metadata};
            info.settingsJson = pplRunSettings(ps).dump();
            WorkerRecording rec(storePath, info, "", job, &m_ctx, {modelPath.toStdString()});
            const auto setup = pageSequences(modelPath, tokPath, textPath);
            const auto& model = setup.opened.model;
            const auto& seqs = setup.seqs.sequences;
            ProgressBatcher progress(job, [this](const std::vector<ProgressEvent>& es) {
                if (es.empty())
                    return;
                m_pplResult->setText(tr("Measuring: %1").arg(QString::fromStdString(es.back().what)));
                m_pplBar->setValue(int(1000 * es.back().fraction));
            });
            const auto r = runCodebookPerplexity(model, seqs, {{"trained codebooks", last->file}}, {}, *backend,
                                                 [&](const ProgressEvent& e) { return progress.add(e); });
            if (r.cancelled) { // the page heard it from the runner; the run says so
                rec.finish(RunStatus::Cancelled);
                return;
            }
            const double fp32 = r.fp32();
            const auto& measured = r.rows.back();
            const double ppl = measured.perplexity;
            if (rec) {
                rec->recordMetrics(codebookPerplexityMetrics(r));
                rec->recordSeries(codebookPerplexitySeries(r));
            }
            rec.finish(RunStatus::Done, codebookPerplexitySummary(r).dump());
            const QString text =
                tr("FP32 %1; with these %2 codebooks at %3 BPA %4 (%5%6%); %7 sequences × %8 tokens of %9%10")
                    .arg(fp32, 0, 'f', 3)
                    .arg(QString::fromStdString(measured.method))
                    .arg(measured.bpa, 0, 'g', 3)
                    .arg(ppl, 0, 'f', 3)
                    .arg(ppl >= fp32 ? "+" : "")
                    .arg(100 * (ppl - fp32) / fp32, 0, 'f', 1)
                    .arg(kSequences)
                    .arg(kSeqLen)
                    .arg(textPath.isEmpty() ? tr("the model's own samples") : textPath)
                    .arg(rec ? tr("; recorded as run %1").arg(rec->id()) : QString());
            const std::int64_t runId = rec ? rec->id() : 0;
            job.post([this, text, runId, storePath] {
                m_pplResult->setText(text);
                m_ppl->setEnabled(true);
                m_pplJob = 0;
                m_pplCancel->setEnabled(false);
                m_pplBar->setVisible(false);
                // The paper's figure: this evaluation beside every earlier one of the same model and text.
                if (runId > 0) {
                    try {
                        RunStore store(storePath.toStdString());
                        m_compareChart->setVisible(drawPerplexity(*m_compareChart, perplexitySetOf(store, runId)));
                    } catch (const std::exception& e) {
                        m_ctx.showStoreError(QString::fromUtf8(e.what()));
                    }
                }
                emit pplFinished(true);
            });
        } catch (const std::exception& e) {
            postFailure(job, e, m_ppl, &TrainPage::pplFinished);
        }
    });
}

} // namespace gsrq::studio
