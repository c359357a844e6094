#include "model_page.h"

#include "core/base/stats.h"
#include "core/jobs/run_records.h"
#include "core/store/run_store.h"

#include "core/jobs/result_json.h"
#include "core/jobs/train_job.h"
#include "report.h"
#include "views/heatmap_view.h"
#include "views/metrics_table_model.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace gsrq::studio {

namespace {

// A relative change with the digits it warrants: +12.3%, +1.82%, −0.021%.
QString percentText(double v)
{
    if (!std::isfinite(v))
        return QStringLiteral("—");
    const double a = std::abs(v);
    const int decimals = a >= 10 ? 1 : a >= 0.1 ? 2 : a >= 0.001 ? 3 : 4;
    return (v > 0 ? "+" : v < 0 ? "−" : "") + QString::number(a, 'f', decimals) + "%";
}

QString metricTitle(const QString& m)
{
    return m == "nmse"         ? QObject::tr("NMSE (lower is better)")
           : m == "cosine"     ? QObject::tr("Cosine (higher is better)")
           : m == "gain_error" ? QObject::tr("Gain error (lower is better)")
                               : QObject::tr("Shrinkage (nearer 1 is better)");
}

} // namespace

const QStringList& ModelPage::metrics()
{
    static const QStringList names{"nmse", "cosine", "gain_error", "shrinkage"};
    return names;
}

QString ModelPage::columnOf(const ModelTarget& t)
{
    const QString kind = QString::fromUtf8(kvKindName(t.kind));
    return t.residual ? kind + tr(", 1st residual") : kind;
}

ModelPage::ModelPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx), m_controls(this)
{
    m_tensors = new QLineEdit(QStringLiteral("layers.*.*"), this);
    m_tensors->setToolTip(tr("Comma-separated globs; every layer's keys and values they match are clustered"));
    m_plain = new QCheckBox(tr("the tensors"), this);
    m_plain->setChecked(true);
    m_residuals = new QCheckBox(tr("their 1st residuals"), this);
    m_residuals->setToolTip(
        tr("Also cluster what a KM pass on each block leaves (the paper's 1st-residual experiment)"));
    m_run = new QPushButton(tr("Run"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);
    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* form = new QFormLayout();
    form->addRow(tr("Tensors"), m_tensors);
    m_controls.addRows(form);
    form->addRow(tr("Cluster"), m_plain);
    form->addRow(QString(), m_residuals);
    auto* buttons = new QHBoxLayout();
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    form->addRow(buttons);
    form->addRow(m_progress);
    form->addRow(m_status);
    form->addRow(m_summary);
    auto* formBox = new QWidget(this);
    formBox->setLayout(form);
    formBox->setMaximumWidth(340);

    auto* grid = new QGridLayout();
    for (int i = 0; i < metrics().size(); ++i) {
        auto* map = new views::HeatmapView(metricTitle(metrics()[i]), this);
        map->setObjectName("heatmap_" + metrics()[i]);
        map->setScale(views::MetricsTableModel::methodColor(-1), views::MetricsTableModel::methodColor(+1),
                      tr("KM better by"), tr("GSKM better by"), "%");
        connect(map, &views::HeatmapView::cellClicked, this, &ModelPage::onCellClicked);
        m_maps[metrics()[i]] = map;
        grid->addWidget(map, i / 2, i % 2);
    }
    auto* legend = new QLabel(tr("Each cell: GSKM's change against KM, 100·(GSKM − KM)/|KM|, for one layer's tensor. "
                                 "Orange where GSKM is better, blue where KM is, deeper the larger the change "
                                 "(full colour at the largest change of the map). Hover for the values; click to "
                                 "open the tensor on the KM vs GSKM page."),
                              this);
    legend->setWordWrap(true);
    // The maps keep a line of text a layer (every layer labelled): a deep model scrolls rather than
    // squeezing its rows.
    auto* maps = new QWidget(this);
    maps->setLayout(grid);
    auto* scroll = new QScrollArea(this);
    scroll->setObjectName("heatmapScroll");
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidget(maps);
    auto* right = new QVBoxLayout();
    right->addWidget(legend);
    right->addWidget(scroll, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(formBox);
    layout->addLayout(right, 1);

    connect(&m_ctx, &StudioContext::dumpChanged, this, &ModelPage::onDumpChanged);
    connect(m_run, &QPushButton::clicked, this, &ModelPage::start);
    connectJobControls(m_ctx, this, &m_job, m_cancel, [this](const QString& text) {
        m_status->setText(text);
        m_run->setEnabled(bool(m_ctx.dump()));
        m_cancel->setEnabled(false);
        emit runFinished(false);
    });
    onDumpChanged();
}

views::HeatmapView* ModelPage::heatmap(const QString& metric) const
{
    const auto it = m_maps.find(metric);
    return it == m_maps.end() ? nullptr : it->second;
}

QString ModelPage::summaryText() const
{
    return m_summary->text();
}

void ModelPage::onDumpChanged()
{
    const auto dump = m_ctx.dump();
    m_run->setEnabled(bool(dump));
    if (dump) // D and K follow the dump's heads, as on the KM vs GSKM page
        m_controls.followHeads(dump.get());
    bool grads = false;
    if (dump)
        for (const auto& t : dump->tensors())
            grads = grads || t.kind == KvKind::KeyGrad || t.kind == KvKind::ValueGrad;
    m_controls.weights->setEnabled(grads);
    if (!grads)
        m_controls.weights->setCurrentIndex(0);
    if (!dump)
        m_status->setText(tr("Open a dump to compare KM and GSKM on every layer."));
    else
        m_status->clear();
}

void ModelPage::layoutGrid(const std::vector<ModelTarget>& targets)
{
    std::set<int> layers;
    m_columns.clear();
    for (const auto& t : targets) {
        layers.insert(t.layer);
        if (!m_columns.contains(columnOf(t)))
            m_columns << columnOf(t);
    }
    m_layers.assign(layers.begin(), layers.end());
    QStringList rows;
    for (int l : m_layers)
        rows << tr("layer %1").arg(l);
    for (auto& [name, map] : m_maps)
        map->setGrid(rows, m_columns, {});
}

void ModelPage::addCell(const ModelCell& cell)
{
    m_cells.push_back(cell);
    const auto* km = cell.result.find(Method::KMeans);
    const auto* gs = cell.result.find(Method::GainShape);
    const int row = int(std::find(m_layers.begin(), m_layers.end(), cell.target.layer) - m_layers.begin());
    const int column = int(m_columns.indexOf(columnOf(cell.target)));
    if (!km || !gs)
        return;
    for (const auto& d : metricDeltas(km->metrics, gs->metrics)) {
        auto* map = heatmap(QString::fromUtf8(d.name));
        if (!map)
            continue;
        const double magnitude = std::isfinite(d.deltaPercent) ? std::abs(d.deltaPercent) : 0.0;
        views::HeatmapView::Cell c;
        c.score = d.better * magnitude;
        c.text = percentText(d.deltaPercent);
        const QString better = d.better > 0 ? tr("GSKM is better") : d.better < 0 ? tr("KM is better") : tr("a tie");
        c.tooltip = tr("<b>%1</b><br>%2: KM %3, GSKM %4<br>Δ GSKM − KM %5 (%6): %7<br><i>Click to open it on the "
                       "KM vs GSKM page</i>")
                        .arg(QString::fromStdString(cell.target.label()).toHtmlEscaped(), QString::fromUtf8(d.name),
                             views::formatMetric(d.a), views::formatMetric(d.b), views::formatMetric(d.delta),
                             percentText(d.deltaPercent), better);
        map->setCell(row, column, c);
    }
    // The summary: for each metric, on how many tensors GSKM is better, and the median change.
    QStringList lines;
    for (const auto& metric : metrics()) {
        int better = 0, worse = 0;
        std::vector<double> changes;
        for (const auto& x : m_cells) {
            const auto* a = x.result.find(Method::KMeans);
            const auto* b = x.result.find(Method::GainShape);
            if (!a || !b)
                continue;
            for (const auto& d : metricDeltas(a->metrics, b->metrics))
                if (metric == d.name) {
                    better += d.better > 0;
                    worse += d.better < 0;
                    if (std::isfinite(d.deltaPercent))
                        changes.push_back(d.deltaPercent);
                }
        }
        if (changes.empty())
            continue;
        lines << tr("%1: GSKM better on %2 of %3, KM on %4; median change %5")
                     .arg(metric)
                     .arg(better)
                     .arg(m_cells.size())
                     .arg(worse)
                     .arg(percentText(median(changes)));
    }
    m_summary->setText(lines.join("\n"));
}

void ModelPage::start()
{
    const auto dump = m_ctx.dump();
    if (!dump)
        return;
    ModelCompareSettings s;
    s.compare = m_controls.settings();
    s.weights = *weightModeFromName(m_controls.weights->currentText().toStdString());
    std::vector<ModelTarget> targets;
    std::vector<std::string> globs;
    for (const auto& g : m_tensors->text().split(',', Qt::SkipEmptyParts))
        globs.push_back(g.trimmed().toStdString());
    try {
        targets = modelTargets(*dump, globs, m_plain->isChecked(), m_residuals->isChecked(), "Tensors");
        validateModelCompare(*dump, targets, s);
    } catch (const std::exception& e) {
        m_status->setText(QString::fromUtf8(e.what()));
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        emit runFinished(false);
        return;
    }
    m_settings = s.compare;
    m_weightsUsed = m_controls.weights->currentText();
    m_globsUsed = m_tensors->text();
    m_residualsUsed = m_residuals->isChecked();
    m_cells.clear();
    m_runId = 0;
    m_summary->clear();
    layoutGrid(targets);
    m_progress->setValue(0);
    m_status->setText(tr("Running…"));
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    const std::string globText = m_tensors->text().toStdString();
    const bool plain = m_plain->isChecked(), residuals = m_residuals->isChecked();

    m_job = 0; // the runner cancels whatever runs; that notice is not about this run
    m_job = m_ctx.runner().start(
        tr("model: KM vs GSKM on %1 tensors").arg(targets.size()), [=, this](const JobRunner::Context& job) {
            auto backend = gpu::makeBackend(backendRequest).backend;
            RunInfo info = jobRunInfo("compare", *backend, *dump);
            info.settingsJson = modelCompareRunSettings(s, globText, plain, residuals, *backend).dump();
            WorkerRecording rec(storePath, info, "", job, &m_ctx, dump->files());
            ProgressBatcher batch(job, [this](const std::vector<ProgressEvent>& events) {
                if (events.empty())
                    return;
                m_progress->setValue(int(events.back().fraction * 1000));
                m_status->setText(QString::fromStdString(events.back().what));
            });
            const auto r = runModelCompare(
                *dump, targets, s, *backend,
                [&](const ProgressEvent& e) {
                    rec.progress(e);
                    return batch.add(e);
                },
                [&](const ModelCell& cell) {
                    if (rec)
                        rec->recordCompare(cell.result, cell.target.label());
                    batch.flush();
                    job.post([this, cell] { addCell(cell); });
                });
            batch.flush();
            rec.finish(r.cancelled ? RunStatus::Cancelled : RunStatus::Done, modelCompareRunSummary(r).dump());
            if (r.cancelled)
                return;
            const std::int64_t id = rec ? rec->id() : 0;
            const std::size_t n = r.cells.size();
            job.post([this, id, n] {
                m_runId = id;
                m_progress->setValue(1000);
                m_status->setText(tr("%1 tensors, D=%2, K=%3; recorded as run %4")
                                      .arg(n)
                                      .arg(m_settings.dim)
                                      .arg(m_settings.k)
                                      .arg(id ? QString::number(id) : tr("— (not recorded)")));
                m_run->setEnabled(true);
                m_cancel->setEnabled(false);
                emit runFinished(true);
            });
        });
}

bool ModelPage::showRun(std::int64_t id)
{
    try {
        RunStore store(m_ctx.storePath().toStdString());
        const auto run = store.requireRun(id);
        if (run.kind != "compare" || run.status != RunStatus::Done)
            return false;
        const auto settings = nlohmann::json::parse(run.settingsJson, nullptr, false);
        if (!settings.is_object() || !settings.contains("tensors"))
            return false; // a KM vs GSKM run of one tensor, not the model page's
        // Each tensor's final metrics by method, in the order recorded.
        std::vector<std::string> order;
        std::map<std::string, std::map<std::string, QuantMetrics>> found;
        for (const auto& m : store.metrics(id)) {
            if (m.scope != "final" || m.tensor.empty())
                continue;
            if (!found.count(m.tensor))
                order.push_back(m.tensor);
            QuantMetrics& q = found[m.tensor][m.method];
            if (m.name == "mse")
                q.mse = m.value;
            else if (m.name == "nmse")
                q.nmse = m.value;
            else if (m.name == "gain_error")
                q.gainError = m.value;
            else if (m.name == "cosine")
                q.cosine = m.value;
            else if (m.name == "shrinkage")
                q.shrinkage = m.value;
        }
        std::vector<ModelCell> cells;
        std::vector<ModelTarget> targets;
        const std::string residualTag = " (1st residual)";
        for (const auto& label : order) {
            const auto& byMethod = found[label];
            if (!byMethod.count(methodName(Method::KMeans)) || !byMethod.count(methodName(Method::GainShape)))
                continue;
            ModelCell c;
            c.target.residual = label.size() > residualTag.size() && label.ends_with(residualTag);
            c.target.tensor = c.target.residual ? label.substr(0, label.size() - residualTag.size()) : label;
            const KvName n = parseKvName(c.target.tensor);
            c.target.layer = n.layer;
            c.target.kind = n.kind;
            for (Method m : {Method::KMeans, Method::GainShape})
                c.result.methods.push_back({m, byMethod.at(methodName(m)), 0, 0, 0, {}});
            targets.push_back(c.target);
            cells.push_back(std::move(c));
        }
        if (cells.empty())
            return false;
        m_settings.dim = settings.value("dim", 0);
        m_settings.k = settings.value("k", 0);
        m_settings.iterations = settings.value("iters", 0);
        m_settings.seed = settings.value("seed", std::uint64_t(0));
        m_weightsUsed = QString::fromStdString(settings.value("weights", std::string("none")));
        m_globsUsed = QString::fromStdString(settings.value("tensors", std::string()));
        m_residualsUsed = settings.value("with_residuals", false) || settings.value("residual", false);
        m_cells.clear();
        m_summary->clear();
        layoutGrid(targets);
        for (const auto& c : cells)
            addCell(c);
        m_runId = id;
        m_progress->setValue(1000);
        m_status->setText(tr("Run %1 (%2 tensors, D=%3, K=%4), from the run store; started %5")
                              .arg(id)
                              .arg(cells.size())
                              .arg(m_settings.dim)
                              .arg(m_settings.k)
                              .arg(QString::fromStdString(run.startedAt).replace('T', ' ').left(19)));
        return true;
    } catch (const std::exception&) {
        return false; // another store, or the run deleted: the page stays as it is
    }
}

bool ModelPage::addToReport(Report& report) const
{
    if (m_cells.empty())
        return false;
    report.heading(tr("Model: KM against GSKM on every layer"));
    report.facts({{tr("tensors"), m_globsUsed + (m_residualsUsed ? tr(" and their 1st residuals") : QString())},
                  {tr("subspace width D"), QString::number(m_settings.dim)},
                  {tr("codewords K"), QString::number(m_settings.k)},
                  {tr("iterations (max)"), QString::number(m_settings.iterations)},
                  {tr("seed"), QString::number(m_settings.seed)},
                  {tr("weights"), m_weightsUsed},
                  {tr("tensors done"), QString::number(m_cells.size())},
                  {tr("recorded as run"), m_runId ? QString::number(m_runId) : tr("— (not recorded, or running)")}});
    report.paragraph(tr("Each cell of a map is GSKM's change against KM, 100·(GSKM − KM)/|KM|, for one layer's "
                        "tensor; orange where GSKM is better, blue where KM is, deeper the larger the change.\n") +
                     m_summary->text());
    // The four maps two by two in one figure, as on the page.
    const auto* first = heatmap(metrics().front());
    const QSize cell(160 + 130 * std::max(1, first->columnCount()), 90 + std::clamp(first->rowCount(), 2, 40) * 20);
    QImage figure(cell.width() * 2, cell.height() * int((metrics().size() + 1) / 2), QImage::Format_ARGB32);
    figure.fill(Qt::white);
    {
        QPainter p(&figure);
        for (int i = 0; i < metrics().size(); ++i)
            p.drawImage(QPoint((i % 2) * cell.width(), (i / 2) * cell.height()), heatmap(metrics()[i])->toImage(cell));
    }
    report.image(figure, tr("GSKM's change against KM per layer and tensor: %1").arg(metrics().join(", ")));
    // Every tensor: each metric's KM and GSKM values and the change, coloured by the better.
    QStandardItemModel table(int(m_cells.size()), 3 * int(metrics().size()));
    for (int m = 0; m < metrics().size(); ++m) {
        table.setHeaderData(3 * m, Qt::Horizontal, metrics()[m] + " km");
        table.setHeaderData(3 * m + 1, Qt::Horizontal, metrics()[m] + " gskm");
        table.setHeaderData(3 * m + 2, Qt::Horizontal, QStringLiteral("Δ%"));
    }
    for (std::size_t i = 0; i < m_cells.size(); ++i) {
        const int row = int(i);
        table.setHeaderData(row, Qt::Vertical, QString::fromStdString(m_cells[i].target.label()));
        const auto* km = m_cells[i].result.find(Method::KMeans);
        const auto* gs = m_cells[i].result.find(Method::GainShape);
        if (!km || !gs)
            continue;
        for (const auto& d : metricDeltas(km->metrics, gs->metrics)) {
            const int m = int(metrics().indexOf(QString::fromUtf8(d.name)));
            if (m < 0)
                continue;
            table.setData(table.index(row, 3 * m), views::formatMetric(d.a));
            table.setData(table.index(row, 3 * m + 1), views::formatMetric(d.b));
            table.setData(table.index(row, 3 * m + 2), percentText(d.deltaPercent));
            if (d.better != 0)
                table.setData(table.index(row, 3 * m + 2), views::MetricsTableModel::methodColor(d.better),
                              Qt::ForegroundRole);
        }
    }
    report.heading(tr("Every tensor"), 3);
    report.table(table);
    return true;
}

void ModelPage::onCellClicked(int row, int column)
{
    if (row < 0 || row >= int(m_layers.size()) || column < 0 || column >= m_columns.size())
        return;
    for (const auto& c : m_cells)
        if (c.target.layer == m_layers[std::size_t(row)] && columnOf(c.target) == m_columns[column]) {
            emit openTensorRequested(QString::fromStdString(c.target.tensor), c.target.residual, m_settings,
                                     m_weightsUsed);
            return;
        }
}

} // namespace gsrq::studio
