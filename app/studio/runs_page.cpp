#include "runs_page.h"

#include "perplexity_chart.h"

#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"

#include "views/chart_panel.h"
#include "views/metrics_table_model.h"
#include "views/runs_table_model.h"

#include "core/base/bootstrap.h"
#include "core/base/error.h"
#include "core/jobs/pass_curves.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>
#include <map>
#include <set>

namespace gsrq::studio {

RunsPage::RunsPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_model = new views::RunsTableModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_table = new QTableView(this);
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(views::RunsTableModel::Id, Qt::DescendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->verticalHeader()->hide();

    m_kind = new QComboBox(this);
    m_kind->addItem(tr("all kinds"));
    for (const auto& k : runKinds())
        m_kind->addItem(QString::fromStdString(k));
    m_status = new QComboBox(this);
    m_status->addItem(tr("any status"));
    for (RunStatus st : allRunStatuses())
        m_status->addItem(runStatusName(st));
    m_group = new QComboBox(this);
    m_group->addItem(tr("all groups"));
    m_group->setToolTip(tr("Runs recorded under one group: a plan's tasks (gsrq plan), or gsrq --group NAME"));
    m_filter = new QLineEdit(this);
    m_filter->setPlaceholderText(tr("filter: tensor, dump, result…"));
    auto* refreshButton = new QPushButton(tr("Refresh"), this);
    auto* deleteButton = new QPushButton(tr("Delete"), this);
    auto* importButton = new QPushButton(tr("Import…"), this);
    importButton->setToolTip(tr("Copy the runs of other run stores into this one, e.g. a plan's stores/*.sqlite"));
    m_note = new QLineEdit(this);
    m_note->setPlaceholderText(tr("a note for the selected run"));
    auto* noteButton = new QPushButton(tr("Add note"), this);
    m_details = new QPlainTextEdit(this);
    m_details->setReadOnly(true);
    m_overlay = new views::ChartPanel(tr("Selected runs: nmse"), tr("x"), tr("nmse"), this);
    m_overlay->setLogY(true);
    m_overlay->setEmptyText(tr("Select runs in the table to draw their curves here."));
    m_overlayMetric = new QComboBox(this);
    for (const auto& name : passMetricNames())
        m_overlayMetric->addItem(QString::fromStdString(name));
    m_overlayMetric->addItem(QStringLiteral("perplexity")); // of `ppl` runs, against bits per activation
    m_overlayMetric->setCurrentText(QStringLiteral("nmse"));
    m_overlayMetric->setToolTip(tr("The metric the selected runs' curves show"));
    auto* overlayPane = new QWidget(this);
    auto* overlayLayout = new QVBoxLayout(overlayPane);
    overlayLayout->setContentsMargins(0, 0, 0, 0);
    auto* metricBar = new QHBoxLayout();
    metricBar->addWidget(new QLabel(tr("Curves of"), this));
    metricBar->addWidget(m_overlayMetric);
    auto* allPpl = new QPushButton(tr("Perplexity of every evaluation"), this);
    allPpl->setToolTip(tr("Every recorded perplexity run against its bits per activation, beside FP32"));
    metricBar->addWidget(allPpl);
    m_everyCurve = new QCheckBox(tr("Every curve"), this);
    m_everyCurve->setToolTip(
        tr("Draw every tensor's curve; unticked, a run with many is drawn as their median and interquartile range"));
    metricBar->addWidget(m_everyCurve);
    metricBar->addStretch();
    connect(allPpl, &QPushButton::clicked, this, &RunsPage::showAllPerplexity);
    overlayLayout->addLayout(metricBar);
    overlayLayout->addWidget(m_overlay, 1);

    auto* bar = new QHBoxLayout();
    bar->addWidget(m_kind);
    bar->addWidget(m_status);
    bar->addWidget(m_group);
    bar->addWidget(m_filter, 1);
    bar->addWidget(refreshButton);
    bar->addWidget(deleteButton);
    bar->addWidget(importButton);
    auto* noteBar = new QHBoxLayout();
    noteBar->addWidget(m_note, 1);
    noteBar->addWidget(noteButton);
    auto* left = new QWidget(this);
    auto* l = new QVBoxLayout(left);
    l->addLayout(bar);
    l->addWidget(m_table, 1);
    l->addLayout(noteBar);
    auto* right = new QSplitter(Qt::Vertical, this);
    right->addWidget(m_details);
    right->addWidget(overlayPane);
    right->setStretchFactor(0, 1); // the chart two thirds of the height: its legend has room to wrap names
    right->setStretchFactor(1, 2);
    auto* split = new QSplitter(this);
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(split);

    connect(refreshButton, &QPushButton::clicked, this, &RunsPage::refresh);
    connect(deleteButton, &QPushButton::clicked, this, &RunsPage::deleteSelected);
    connect(importButton, &QPushButton::clicked, this, &RunsPage::chooseStoresToImport);
    connect(m_group, &QComboBox::currentIndexChanged, this, &RunsPage::refresh);
    connect(noteButton, &QPushButton::clicked, this, &RunsPage::addNote);
    connect(m_kind, &QComboBox::currentIndexChanged, this, &RunsPage::refresh);
    connect(m_status, &QComboBox::currentIndexChanged, this, &RunsPage::refresh);
    connect(m_overlayMetric, &QComboBox::currentIndexChanged, this, &RunsPage::onSelectionChanged);
    connect(m_everyCurve, &QCheckBox::toggled, this, &RunsPage::onSelectionChanged);
    connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunsPage::onSelectionChanged);
    // A job that ends in the window shows up at once; CLI runs on Refresh.
    connect(&m_ctx.runner(), &JobRunner::finished, this, &RunsPage::refresh);
    connect(&m_ctx.runner(), &JobRunner::cancelled, this, &RunsPage::refresh);
}

void RunsPage::refresh()
{
    try {
        RunStore store(m_ctx.storePath().toStdString());
        RunFilter f;
        f.kind = m_kind->currentIndex() > 0 ? m_kind->currentText().toStdString() : std::string();
        if (m_status->currentIndex() > 0)
            f.status = allRunStatuses()[std::size_t(m_status->currentIndex() - 1)];
        f.group = m_group->currentIndex() > 0 ? m_group->currentText().toStdString() : std::string();
        m_model->setRuns(store.listRuns(f));
        // The groups on offer follow the store; the one chosen stays chosen.
        const QString chosen = m_group->currentText();
        const QSignalBlocker block(m_group);
        while (m_group->count() > 1)
            m_group->removeItem(1);
        for (const auto& g : store.groups())
            m_group->addItem(QString::fromStdString(g));
        if (const int at = m_group->findText(chosen); at > 0)
            m_group->setCurrentIndex(at);
    } catch (const std::exception& e) {
        m_model->setRuns({});
        m_ctx.showStoreError(QString::fromUtf8(e.what()));
    }
    onSelectionChanged();
}

QString RunsPage::importStores(const QStringList& paths)
{
    int added = 0, present = 0;
    QStringList problems;
    try {
        RunStore store(m_ctx.storePath().toStdString());
        for (const auto& p : paths) {
            try {
                const auto rep = store.importRuns(p.toStdString());
                added += rep.added;
                present += rep.alreadyPresent;
            } catch (const Error& e) {
                problems << QString::fromUtf8(e.what());
            }
        }
    } catch (const std::exception& e) {
        m_ctx.showStoreError(QString::fromUtf8(e.what()));
        return {};
    }
    refresh();
    QString summary = tr("Imported %n run(s) from %1 store(s)", nullptr, added).arg(paths.size());
    if (present)
        summary += tr("; %n already here", nullptr, present);
    if (!problems.isEmpty())
        summary += tr(". Not imported: %1").arg(problems.join(QStringLiteral("; ")));
    m_details->setPlainText(summary);
    return summary;
}

void RunsPage::chooseStoresToImport()
{
    const auto paths = QFileDialog::getOpenFileNames(this, tr("Import runs from stores"), QString(),
                                                     tr("Run stores (*.sqlite *.db);;All files (*)"));
    if (!paths.isEmpty())
        importStores(paths);
}

std::vector<std::int64_t> RunsPage::selectedIds() const
{
    std::vector<std::int64_t> ids;
    for (const auto& index : m_table->selectionModel()->selectedRows())
        ids.push_back(index.data(Qt::UserRole).toLongLong());
    std::sort(ids.begin(), ids.end());
    return ids;
}

void RunsPage::selectRuns(const QList<qint64>& ids)
{
    m_table->clearSelection();
    for (int row = 0; row < m_proxy->rowCount(); ++row)
        if (ids.contains(m_proxy->index(row, 0).data(Qt::UserRole).toLongLong()))
            m_table->selectionModel()->select(m_proxy->index(row, 0),
                                              QItemSelectionModel::Select | QItemSelectionModel::Rows);
}

QString RunsPage::detailsText() const
{
    return m_details->toPlainText();
}

QString RunsPage::metricDeltasText(const std::vector<std::int64_t>& ids,
                                   const std::vector<std::map<std::string, double>>& finals)
{
    // The final metrics every selected run has, each run against the first: value, Δ and Δ%,
    // with a mark for the better of the two (core's betterOf: lower nmse, higher cosine...).
    QString text =
        tr("\nFinal metrics, each run against run %1 (Δ = run − run %1; * the better of the two):\n").arg(ids.front());
    int shown = 0, common = 0;
    for (const auto& entry : finals.front()) {
        const std::string& key = entry.first;
        const double first = entry.second;
        if (!std::all_of(finals.begin(), finals.end(), [&](const auto& f) { return f.count(key); }))
            continue;
        ++common;
        if (shown == 60)
            continue;
        ++shown;
        const std::string metric = key.substr(key.rfind(' ') + 1);
        QString line = QStringLiteral("  %1: %2").arg(QString::fromStdString(key), views::formatMetric(first));
        for (std::size_t i = 1; i < finals.size(); ++i) {
            const double v = finals[i].at(key), d = v - first;
            const int better = betterOf(metric, first, v);
            line += tr("  |  run %1 %2, Δ %3%4 (%5%)%6")
                        .arg(ids[i])
                        .arg(views::formatMetric(v))
                        .arg(d >= 0 ? "+" : "")
                        .arg(views::formatMetric(d))
                        .arg(first != 0 ? QString::number(100 * d / std::abs(first), 'f', 2) : QStringLiteral("—"))
                        .arg(better > 0   ? tr(" *run %1").arg(ids[i])
                             : better < 0 ? tr(" *run %1").arg(ids.front())
                                          : QString());
        }
        text += line + "\n";
    }
    if (common == 0)
        return tr("\nThe selected runs have no final metric in common.\n");
    if (shown < common)
        text += tr("  … and %1 more\n").arg(common - shown);
    return text;
}

void RunsPage::onSelectionChanged()
{
    const auto ids = selectedIds();
    // Perplexity runs have no passes: a selection of only those shows perplexity against bits, and
    // one without any of them leaves perplexity for nmse.
    if (!ids.empty()) {
        int ppl = 0;
        try {
            RunStore store(m_ctx.storePath().toStdString());
            for (auto id : ids)
                ppl += store.requireRun(id).kind == "ppl";
        } catch (const std::exception&) {
            ppl = -1; // the details below say what went wrong
        }
        const bool onPerplexity = m_overlayMetric->currentText() == QStringLiteral("perplexity");
        const QSignalBlocker block(m_overlayMetric);
        if (ppl == int(ids.size()) && !onPerplexity)
            m_overlayMetric->setCurrentText(QStringLiteral("perplexity"));
        else if (ppl == 0 && onPerplexity)
            m_overlayMetric->setCurrentText(QStringLiteral("nmse"));
    }
    const std::string metric = m_overlayMetric->currentText().toStdString();
    m_overlay->clear();
    m_overlay->setDodge(false); // the perplexity chart's (drawPerplexity sets them again)
    m_overlay->setClipOutliers(false);
    // Errors (and perplexities across methods) span decades; cosine and shrinkage sit near 1.
    m_overlay->setLogY(metric == "nmse" || metric == "objective");
    m_overlay->setEmptyText(tr("Select runs in the table to draw their curves here."));
    m_overlay->setTitle(tr("Selected runs: %1").arg(QString::fromStdString(metric)));
    if (ids.empty()) {
        m_details->setPlainText(tr("Select a run for its details; select two or more to compare them."));
        return;
    }
    try {
        RunStore store(m_ctx.storePath().toStdString());
        QString text;
        std::vector<std::map<std::string, std::string>> settings;
        // Each run's final metrics by "tensor method metric", for the deltas between runs.
        std::vector<std::map<std::string, double>> finals;
        bool passCurves = false, ownCurves = false;
        struct Curve {
            std::int64_t run;
            QString name;
            QList<QPointF> points;
        };
        std::vector<Curve> drawn;
        bool wholeX = true; // passes, stages, D and K: counts get whole-number ticks
        for (auto id : ids) {
            const auto r = store.requireRun(id);
            // Runs with curves of their own (sweeps: metric vs D or K; trainings: metric vs stage)
            // show those; the others their assignment passes, averaged over blocks pass by pass.
            std::map<std::string, QList<QPointF>> curves;
            const std::string tag = metric + "_vs_";
            for (const auto& p : metric == "perplexity" ? std::vector<SeriesPoint>{} : store.series(id))
                if (const auto at = p.name.find(tag); at != std::string::npos) {
                    // "layers.0.key.nmse_vs_stage" → "layers.0.key vs stage": the metric is the chart's.
                    std::string name = p.name.substr(0, at);
                    while (!name.empty() && (name.back() == '.' || name.back() == '_'))
                        name.pop_back();
                    name += (name.empty() ? "vs " : " vs ") + p.name.substr(at + tag.size());
                    curves[name] << QPointF(p.x, p.y);
                }
            if (metric == "perplexity") {
                ownCurves = true; // drawn below, every selected run's evaluations together
            } else if (curves.empty()) {
                passCurves = true;
                for (const auto& c : meanPassCurves(store.iterations(id), metric)) {
                    QList<QPointF> pts;
                    for (std::size_t i = 0; i < c.values.size(); ++i)
                        if (!std::isnan(c.values[i]))
                            pts << QPointF(double(i), c.values[i]);
                    if (!pts.isEmpty())
                        curves[c.label()] = pts;
                }
            } else {
                ownCurves = true;
            }
            for (const auto& [name, pts] : curves) {
                drawn.push_back({id, QString::fromStdString(name), pts});
                for (const auto& p : pts)
                    wholeX = wholeX && p.x() == std::round(p.x());
            }
            settings.push_back(flattenSettings(r.settingsJson));
            auto& final = finals.emplace_back();
            for (const auto& m : store.metrics(id))
                if (m.scope == "final" && m.name != "seconds" && m.name != "iterations")
                    final[cat(m.tensor.empty() ? "" : m.tensor + " ", m.method, " ", m.name)] = m.value;
            if (r.kind == "ppl") {
                // A run of one codebooks file compares with another by its perplexity and bits; a
                // comparison's methods by name.
                const auto p = runPerplexities(store.metrics(id), store.series(id));
                if (p.fp32)
                    final["FP32 perplexity"] = *p.fp32;
                if (p.points.size() == 1) {
                    final["perplexity"] = p.points.front().perplexity;
                    final["effective bits"] = p.points.front().effectiveBits;
                } else {
                    for (const auto& pt : p.points)
                        final[pt.label + " perplexity"] = pt.perplexity;
                }
            }
            if (ids.size() == 1) {
                text += tr("Run %1: %2, %3\nstarted %4, finished %5\n%6 (%7)\ndump %8\nsha256 %9\n")
                            .arg(id)
                            .arg(QString::fromStdString(r.kind), QString(runStatusName(r.status)),
                                 QString::fromStdString(r.startedAt), QString::fromStdString(r.finishedAt),
                                 QString::fromStdString(r.backend), QString::fromStdString(r.device),
                                 QString::fromStdString(r.dumpPath), QString::fromStdString(r.dumpSha256));
                if (!r.error.empty())
                    text += tr("error: %1\n").arg(QString::fromStdString(r.error));
                text += tr("\nsettings %1\n\nfinal metrics\n").arg(QString::fromStdString(r.settingsJson));
                int perSequence = 0; // each evaluation's sequences: the intervals' data, not a figure to read
                for (const auto& m : store.metrics(id))
                    if (m.scope == "perplexity" && m.stage >= 0)
                        ++perSequence;
                    else if (m.scope == "final" || m.scope == "heldout" || m.scope == "attention" ||
                             m.scope == "perplexity")
                        text += QStringLiteral("  %1 %2 %3 %4 = %5\n")
                                    .arg(QString::fromStdString(m.scope), QString::fromStdString(m.tensor),
                                         QString::fromStdString(m.method), QString::fromStdString(m.name))
                                    .arg(m.value, 0, 'g', 6);
                if (perSequence > 0)
                    text += tr("  (and %1 per-sequence figures behind the intervals: gsrq runs show %2 --json)\n")
                                .arg(perSequence)
                                .arg(id);
                for (const auto& a : store.artifacts(id))
                    text += tr("artifact %1 (sha256 %2)\n")
                                .arg(QString::fromStdString(a.path), QString::fromStdString(a.sha256));
                for (const auto& n : store.notes(id))
                    text +=
                        tr("note (%1): %2\n").arg(QString::fromStdString(n.createdAt), QString::fromStdString(n.text));
            }
        }
        if (ids.size() > 1) {
            text = tr("Settings that differ between runs");
            for (auto id : ids)
                text += QStringLiteral(" %1").arg(id);
            text += ":\n";
            for (const auto& k : settingsThatDiffer(settings)) {
                QStringList values;
                for (const auto& s : settings)
                    values << QString::fromStdString(s.count(k) ? s.at(k) : std::string("-"));
                text +=
                    QStringLiteral("  %1: %2\n").arg(QString::fromStdString(k), values.join(QStringLiteral("  |  ")));
            }
            text += metricDeltasText(ids, finals);
        }
        // Names as short as they can be: "run N: " only where several runs are drawn, and no
        // " vs stage" where every curve has it (the axis says it).
        QString suffix;
        if (!drawn.empty() && drawn.front().name.contains(QStringLiteral(" vs "))) {
            suffix = drawn.front().name.mid(drawn.front().name.lastIndexOf(QStringLiteral(" vs ")));
            for (const auto& c : drawn)
                if (!c.name.endsWith(suffix) || c.name == suffix)
                    suffix.clear();
        }
        // Many curves overlaid are a tangle: each run's are drawn as their median at each x, with their
        // interquartile range as bars (a run of one curve as it is), unless every curve is asked for.
        const bool aggregate = !m_everyCurve->isChecked() && int(drawn.size()) > kMostCurves;
        m_everyCurve->setEnabled(int(drawn.size()) > kMostCurves);
        for (auto id : ids) {
            std::vector<const Curve*> mine;
            for (const auto& c : drawn)
                if (c.run == id)
                    mine.push_back(&c);
            if (!aggregate || mine.size() < 2) {
                for (const auto* c : mine) {
                    const QString name = c->name.left(c->name.size() - suffix.size());
                    m_overlay->setSeries(ids.size() > 1 ? tr("run %1: %2").arg(c->run).arg(name) : name, c->points);
                }
                continue;
            }
            std::map<double, std::vector<double>> atX;
            for (const auto* c : mine)
                for (const auto& p : c->points)
                    atX[p.x()].push_back(p.y());
            QList<QPointF> mid;
            QList<QPair<double, double>> iqr;
            for (const auto& [x, ys] : atX) {
                mid << QPointF(x, quantile(ys, 0.5));
                iqr << qMakePair(quantile(ys, 0.25), quantile(ys, 0.75));
            }
            const QString name = tr("median of %1 curves").arg(mine.size());
            const QString series = ids.size() > 1 ? tr("run %1: %2").arg(id).arg(name) : name;
            m_overlay->setSeries(series, mid);
            m_overlay->setIntervals(series, iqr);
        }
        if (aggregate)
            m_overlay->setTitle(tr("Selected runs: %1 (each run's median, bars from the 25th to the 75th percentile)")
                                    .arg(QString::fromStdString(metric)));
        m_details->setPlainText(text);
        if (metric == "perplexity") {
            m_overlay->setIntegerX(false);
            if (!drawPerplexity(*m_overlay, perplexitySets(store, ids)))
                m_overlay->setEmptyText(tr("None of the selected runs is a perplexity run (kind ppl)."));
        } else {
            m_overlay->setLogX(false);
            m_overlay->setIntegerX(wholeX);
            m_overlay->setAxisTitles(passCurves && !ownCurves ? tr("assignment pass")
                                     : passCurves             ? tr("pass, stage, D or K")
                                                              : tr("stage, D or K"),
                                     QString::fromStdString(metric));
        }
        m_overlay->flush();
    } catch (const std::exception& e) {
        m_ctx.showStoreError(QString::fromUtf8(e.what()));
    }
}

void RunsPage::showAllPerplexity()
{
    QList<qint64> ids;
    for (int row = 0; row < m_proxy->rowCount(); ++row)
        if (m_proxy->index(row, views::RunsTableModel::Kind).data().toString() == "ppl")
            ids << m_proxy->index(row, 0).data(Qt::UserRole).toLongLong();
    if (ids.isEmpty()) {
        m_ctx.showMessage(tr("No perplexity runs yet: measure one on the GSRQ training page or with gsrq ppl."), false);
        return;
    }
    const QSignalBlocker block(m_overlayMetric); // one redraw, after the selection
    m_overlayMetric->setCurrentText(QStringLiteral("perplexity"));
    selectRuns(ids);
    onSelectionChanged();
}

void RunsPage::addNote()
{
    const auto ids = selectedIds();
    if (ids.size() != 1 || m_note->text().trimmed().isEmpty())
        return;
    try {
        RunStore store(m_ctx.storePath().toStdString());
        store.addNote(ids.front(), m_note->text().trimmed().toStdString());
        m_note->clear();
    } catch (const std::exception& e) {
        m_ctx.showStoreError(QString::fromUtf8(e.what()));
    }
    onSelectionChanged();
}

void RunsPage::deleteSelected()
{
    const auto ids = selectedIds();
    try {
        RunStore store(m_ctx.storePath().toStdString());
        for (auto id : ids)
            store.deleteRun(id);
    } catch (const std::exception& e) {
        m_ctx.showStoreError(QString::fromUtf8(e.what()));
    }
    refresh();
}

} // namespace gsrq::studio
