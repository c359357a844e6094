// The GSRQ page's method comparison on the Preferences' model (train_page.h): the paper's table,
// its progress and Cancel, and its table and chart.
#include "core/base/error.h"
#include "core/jobs/method_table.h"
#include "core/jobs/run_records.h"
#include "perplexity_chart.h"
#include "train_page.h"
#include "train_page_parts.h"
#include "views/chart_panel.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QStandardItemModel>
#include <QTableView>

#include <cmath>
#include <set>

namespace gsrq::studio {

QAbstractItemModel* TrainPage::compareModel() const
{
    return m_compareModel;
}

void TrainPage::compareMethods()
{
    const QString modelPath = m_ctx.pplModelPath(), tokPath = m_ctx.pplTokenizerPath();
    if (modelPath.isEmpty()) {
        m_ctx.showMessage(tr("Set a model (GGUF, or llama2.c with its tokenizer) in Settings ▸ Preferences to "
                             "compare methods."));
        emit compareFinished(false);
        return;
    }
    MethodTableSettings ts;
    try {
        ts.methods = parseMethods(m_compareMethods->text().trimmed().toStdString(), "Methods");
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        emit compareFinished(false);
        return;
    }
    const auto dump = m_ctx.dump();
    std::int64_t dumpKvFeatures = 0; // the open dump's keys' width (its model's kv_dim) and last layer
    int dumpLastLayer = -1;
    if (dump) {
        for (const auto& t : dump->tensors())
            if (t.kind == KvKind::Key) {
                if (!dumpKvFeatures)
                    dumpKvFeatures = t.view.features();
                dumpLastLayer = std::max(dumpLastLayer, t.layer);
            }
        ts.trainDump = dump->path();
        // The layers the open dump has keys and values of: every method compresses those.
        std::set<int> both;
        for (const auto& t : dump->tensors())
            if (t.kind == KvKind::Key && dump->find(cat("layers.", t.layer, ".value")))
                both.insert(t.layer);
        for (int l : both)
            ts.layers += cat(ts.layers.empty() ? "" : ",", l);
    }
    const QString textPath = m_pplText->text().trimmed();
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    const MethodTableSettings tsForDump = ts;
    m_compare->setEnabled(false);
    m_compareCancel->setEnabled(true);
    m_compareBar->setValue(0);
    m_compareBar->setVisible(true);
    m_pplResult->setText(tr("Comparing %1 methods…").arg(ts.methods.size()));
    m_compareJob = m_ctx.runner().start(tr("method comparison"), [=, this](const JobRunner::Context& job) {
        try {
            const auto setup = pageSequences(modelPath, tokPath, textPath);
            const auto& model = setup.opened.model;
            const auto& seqs = setup.seqs.sequences;
            // The open dump serves the table (its layers, the trained methods' rows) only when it is of
            // this model: another model's keys (a GGUF model beside the bundled sample) have another
            // width or layers this model lacks.
            MethodTableSettings settings = tsForDump;
            if (dumpKvFeatures != model.config().kvDim() || dumpLastLayer >= model.config().layers) {
                settings.trainDump.clear();
                settings.layers.clear();
            }
            validateMethods(settings.methods, model.config(), "Methods");
            auto backend = gpu::makeBackend(backendRequest).backend;
            PplRunSettings ps;
            RunInfo info = pagePplRun(modelPath, tokPath, textPath, *backend, ps);
            for (const auto& m : settings.methods)
                ps.methods.push_back(m.name);
            ps.trainDump = settings.trainDump;
            ps.layers = settings.layers;
            ps.trainIterations = settings.iterations;
            ps.trainSeed = settings.seed;
            info.settingsJson = pplRunSettings(ps).dump();
            WorkerRecording rec(storePath, info, "", job, &m_ctx, {modelPath.toStdString()});
            ProgressBatcher progress(job, [this](const std::vector<ProgressEvent>& es) {
                if (es.empty())
                    return;
                m_pplResult->setText(tr("Comparing: %1").arg(QString::fromStdString(es.back().what)));
                m_compareBar->setValue(int(1000 * es.back().fraction));
            });
            // As gsrq ppl --methods: the table is recorded, not its trainings' passes.
            const auto r = runMethodTable(model, seqs, settings, *backend,
                                          [&](const ProgressEvent& e) { return progress.add(e); });
            if (r.cancelled) {
                rec.finish(RunStatus::Cancelled);
                job.post([this] {
                    m_compare->setEnabled(true);
                    emit compareFinished(false);
                });
                return;
            }
            if (rec) {
                rec->recordMetrics(methodTableMetrics(r));
                rec->recordSeries(methodTableSeries(r));
            }
            rec.finish(RunStatus::Done, methodTableSummary(r).dump());
            const QString where = textPath.isEmpty() ? tr("the model's own samples") : textPath;
            const QString recorded = rec ? tr("; recorded as run %1").arg(rec->id()) : QString();
            const QString layersText = settings.layers.empty()
                                           ? tr("every layer")
                                           : tr("layers %1").arg(QString::fromStdString(settings.layers));
            job.post([this, r, where, recorded, layersText] {
                showComparison(r);
                m_compareJob = 0;
                m_compareCancel->setEnabled(false);
                m_compareBar->setVisible(false);
                m_pplResult->setText(tr("%1 methods, %2 sequences × %3 tokens of %4, %5 compressed%6")
                                         .arg(r.rows.size())
                                         .arg(kSequences)
                                         .arg(kSeqLen)
                                         .arg(where, layersText, recorded));
                m_compare->setEnabled(true);
                emit compareFinished(true);
            });
        } catch (const std::exception& e) {
            job.post([this] {
                m_compareJob = 0;
                m_compareCancel->setEnabled(false);
                m_compareBar->setVisible(false);
            });
            postFailure(job, e, m_compare, &TrainPage::compareFinished);
        }
    });
}

namespace {

QString signedNumber(double v)
{
    return QStringLiteral("%1%2").arg(v >= 0 ? "+" : "").arg(v, 0, 'f', 2);
}

} // namespace

void TrainPage::showComparison(const MethodTableResult& r)
{
    m_compareModel->clear();
    m_compareModel->setHorizontalHeaderLabels({tr("method"), tr("bits"), tr("perplexity"), tr("Δ%"),
                                               tr("Δ% 95% interval"), tr("attention rel. L2"), tr("effective bits"),
                                               tr("as")});
    if (auto* h = m_compareModel->horizontalHeaderItem(4))
        h->setToolTip(tr("a paired bootstrap over the %1 sequences (percentile, 95%): with so few sequences it is "
                         "wide; an interval that holds 0 is not a change")
                          .arg(kSequences));
    // Effective bits spread the codewords over this comparison's few tokens: more than a deployment's.
    if (auto* h = m_compareModel->horizontalHeaderItem(6))
        h->setToolTip(tr("bits + the codewords (F16) spread over the %1 × %2 tokens compared here: a cache of "
                         "more tokens pays less per token (the README's first job: 4 × 512)")
                          .arg(kSequences)
                          .arg(kSeqLen));
    const double fp32 = r.rows.empty() ? 0 : r.rows.front().perplexity;
    PerplexitySet set;
    if (!r.rows.empty())
        set.fp32 = fp32;
    for (const auto& row : r.rows) {
        const double dp = 100 * (row.perplexity - fp32) / fp32;
        QList<QStandardItem*> items{
            new QStandardItem(QString::fromStdString(row.name).endsWith(".safetensors")
                                  ? QFileInfo(QString::fromStdString(row.name)).fileName()
                                  : QString::fromStdString(row.name)),
            new QStandardItem(QString::number(row.bits, 'g', 4)),
            new QStandardItem(QString::number(row.perplexity, 'f', 3)),
            new QStandardItem(QStringLiteral("%1%2%").arg(dp >= 0 ? "+" : "").arg(dp, 0, 'f', 2)),
            new QStandardItem(row.deltaInterval.valid() ? QStringLiteral("[%1, %2]")
                                                              .arg(signedNumber(row.deltaInterval.lo))
                                                              .arg(signedNumber(row.deltaInterval.hi))
                                                        : QStringLiteral("-")),
            new QStandardItem(row.attentionRelL2 ? QString::number(*row.attentionRelL2, 'f', 4) : QStringLiteral("-")),
            new QStandardItem(QString::number(row.effectiveBits, 'g', 4)),
            new QStandardItem(QString::fromStdString(row.settings))};
        for (auto* it : items)
            it->setEditable(false);
        m_compareModel->appendRow(items);
        if (row.family != "fp32" && std::isfinite(row.bits))
            set.points.push_back(
                {row.family, row.name, row.bits, row.effectiveBits, row.perplexity, true, row.deltaInterval, {}});
    }
    drawPerplexity(*m_compareChart, {set});
    m_compareTable->setVisible(true);
    m_compareChart->setVisible(true);
}

} // namespace gsrq::studio
