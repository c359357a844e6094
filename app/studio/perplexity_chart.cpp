#include "perplexity_chart.h"

#include "core/store/run_store.h"
#include "views/chart_panel.h"

#include <QFileInfo>
#include <QObject>

#include <cmath>
#include <map>

namespace gsrq::studio {

namespace {

// What a ppl run measured, from its settings: the model and the tokens it was given.
std::string measuredOn(const std::string& settingsJson, QString* name, QStringList* parts = nullptr)
{
    const auto s = nlohmann::json::parse(settingsJson, nullptr, false);
    if (!s.is_object())
        return {};
    const auto get = [&](const char* k) { return s.contains(k) ? s[k].dump() : std::string(); };
    const std::string model = s.value("model", std::string());
    const std::string text = s.value("text", std::string());
    const QStringList p{QFileInfo(QString::fromStdString(model)).fileName(),
                        text.empty() ? QObject::tr("own samples (seed %1)").arg(QString::fromStdString(get("seed")))
                                     : QFileInfo(QString::fromStdString(text)).fileName(),
                        QObject::tr("%1×%2 tokens")
                            .arg(QString::fromStdString(get("sequences")), QString::fromStdString(get("seq_len")))};
    *name = p.join(QStringLiteral(", "));
    if (parts)
        *parts = p;
    return model + "\n" + get("source") + "\n" + text + "\n" + get("seed") + "\n" + get("seq_len") + "\n" +
           get("sequences");
}

} // namespace

std::vector<PerplexitySet> perplexitySets(RunStore& store, const std::vector<std::int64_t>& ids)
{
    std::vector<PerplexitySet> sets;
    std::map<std::string, std::size_t> at;
    for (auto id : ids) {
        const auto run = store.requireRun(id);
        if (run.kind != "ppl")
            continue;
        QString name;
        QStringList parts;
        const std::string key = measuredOn(run.settingsJson, &name, &parts);
        auto it = at.find(key);
        if (it == at.end()) {
            it = at.emplace(key, sets.size()).first;
            sets.push_back({name, parts, std::nullopt, {}, {}, {}});
        }
        PerplexitySet& set = sets[it->second];
        // Two sets whose names read the same (the same file names in other folders) stay apart.
        if (set.runs.empty())
            for (std::size_t other = 0; other + 1 < sets.size(); ++other)
                if (sets[other].name == set.name)
                    set.name += QStringLiteral(" [%1]").arg(sets.size());
        const auto p = runPerplexities(store.metrics(id), store.series(id));
        if (!set.fp32)
            set.fp32 = p.fp32;
        set.points.insert(set.points.end(), p.points.begin(), p.points.end());
        const auto settings = nlohmann::json::parse(run.settingsJson, nullptr, false);
        const QString calibration =
            settings.is_object() && settings.contains("train_dump") && settings["train_dump"].is_string()
                ? QFileInfo(QString::fromStdString(settings["train_dump"].get<std::string>())).fileName()
                : QString();
        set.calibration.insert(set.calibration.end(), p.points.size(), calibration);
        set.runs.push_back(id);
    }
    return sets;
}

std::vector<PerplexitySet> perplexitySetOf(RunStore& store, std::int64_t like)
{
    QString name;
    const std::string key = measuredOn(store.requireRun(like).settingsJson, &name);
    std::vector<std::int64_t> ids;
    for (const auto& r : store.listRuns({"ppl", RunStatus::Done, "", 0}))
        if (measuredOn(r.settingsJson, &name) == key)
            ids.push_back(r.id);
    std::sort(ids.begin(), ids.end());
    return perplexitySets(store, ids);
}

QStringList shortSetNames(const std::vector<PerplexitySet>& sets)
{
    QStringList names;
    for (const auto& set : sets) {
        QStringList kept;
        for (int i = 0; i < set.parts.size(); ++i)
            if (std::any_of(sets.begin(), sets.end(),
                            [&](const PerplexitySet& o) { return o.parts.value(i) != set.parts[i]; }))
                kept << set.parts[i];
        names << (kept.isEmpty() ? set.name : kept.join(QStringLiteral(", ")));
    }
    // Sets whose differing parts read the same (the same file names in other folders) stay apart.
    for (int i = 0; i < names.size(); ++i)
        if (names.count(names[i]) > 1)
            names[i] += QStringLiteral(" [%1]").arg(i + 1);
    return names;
}

bool drawPerplexity(views::ChartPanel& chart, const std::vector<PerplexitySet>& sets)
{
    chart.clear();
    chart.setDodge(true);
    chart.setClipOutliers(true);
    const QStringList setNames = shortSetNames(sets);
    QList<double> perplexities; // of every point: the body the y axis is fitted to
    std::map<QString, QList<QPointF>> series;
    // Each point's perplexity interval (its Δ% interval on its set's FP32), keyed by the point.
    std::map<QString, std::map<std::pair<double, double>, QPair<double, double>>> whiskers;
    bool anyInterval = false;
    double lo = INFINITY, hi = -INFINITY, pLo = INFINITY, pHi = -INFINITY;
    for (std::size_t si = 0; si < sets.size(); ++si) {
        const auto& set = sets[si];
        const QString prefix = sets.size() > 1 ? setNames[int(si)] + QStringLiteral(": ") : QString();
        // Runs of one evaluation calibrated on different dumps (in and out of domain): a series each,
        // named by the part of the dump's name that tells them apart ("debian-reference" of
        // calib-debian-reference-32x512 beside calib-32x512; the whole name where that part is empty).
        const bool splitByCalibration = std::any_of(set.calibration.begin(), set.calibration.end(),
                                                    [&](const QString& c) { return c != set.calibration.front(); });
        const auto calibrationLabel = [&](const QString& c) {
            const QStringList mine = c.split('-');
            qsizetype prefix = mine.size(), suffix = mine.size();
            for (const auto& o : set.calibration) {
                const QStringList other = o.split('-');
                qsizetype p = 0;
                while (p < prefix && p < other.size() && mine[p] == other[p])
                    ++p;
                prefix = p;
                qsizetype q = 0;
                while (q < suffix && q < other.size() && mine[mine.size() - 1 - q] == other[other.size() - 1 - q])
                    ++q;
                suffix = q;
            }
            const QStringList middle = mine.mid(prefix, std::max<qsizetype>(0, mine.size() - prefix - suffix));
            return middle.isEmpty() ? c : middle.join('-');
        };
        for (std::size_t pi = 0; pi < set.points.size(); ++pi) {
            const auto& p = set.points[pi];
            if (!std::isfinite(p.effectiveBits) || !(p.perplexity > 0))
                continue;
            // Runs recorded before effective bits were have only their nominal bits: a series apart.
            QString family =
                QString::fromStdString(p.family) + (p.effectiveRecorded ? QString() : QObject::tr(" (nominal bits)"));
            // KIVI calibrates nothing: its runs stay one series.
            if (splitByCalibration && p.family != "kivi" && pi < set.calibration.size() &&
                !set.calibration[pi].isEmpty())
                family += QStringLiteral(" [%1]").arg(calibrationLabel(set.calibration[pi]));
            series[prefix + family] << QPointF(p.effectiveBits, p.perplexity);
            QPair<double, double> w(p.perplexity, p.perplexity);
            if (set.fp32 && p.deltaInterval.valid()) {
                w = {*set.fp32 * (1 + p.deltaInterval.lo / 100), *set.fp32 * (1 + p.deltaInterval.hi / 100)};
                anyInterval = true;
                pLo = std::min(pLo, w.first);
                pHi = std::max(pHi, w.second);
            }
            whiskers[prefix + family][{p.effectiveBits, p.perplexity}] = w;
            perplexities << p.perplexity;
            lo = std::min(lo, p.effectiveBits);
            hi = std::max(hi, p.effectiveBits);
            pLo = std::min(pLo, p.perplexity);
            pHi = std::max(pHi, p.perplexity);
        }
        if (set.fp32) {
            pLo = std::min(pLo, *set.fp32);
            pHi = std::max(pHi, *set.fp32);
        }
    }
    if (series.empty())
        return false;
    const bool logX = lo > 0 && hi / lo >= 4;
    chart.setLogX(logX);
    // Log y where the perplexities the axis shows span a decade; one far above them (a 1-bit KIVI)
    // is named above the axis instead (the chart's outlier cut, on a log scale as the gap is a ratio).
    if (const auto cut = views::outlierCut(perplexities, true))
        pHi = std::min(pHi, *cut);
    chart.setLogY(pLo > 0 && pHi / pLo > 10);
    chart.setTitle(anyInterval ? QObject::tr("Perplexity against effective bits, 95% intervals")
                               : QObject::tr("Perplexity against effective bits (codewords counted)"));
    chart.setAxisTitles(QObject::tr("effective bits per activation"), QObject::tr("perplexity"));
    for (auto& [name, points] : series) {
        std::sort(points.begin(), points.end(), [](const QPointF& a, const QPointF& b) {
            return a.x() < b.x() || (a.x() == b.x() && a.y() < b.y());
        });
        chart.setSeries(name, points);
        if (anyInterval) { // whiskers: the 95% interval of each point's Δ% against FP32
            QList<QPair<double, double>> in;
            for (const auto& pt : points)
                in << whiskers[name][{pt.x(), pt.y()}];
            chart.setIntervals(name, in);
        }
    }
    // FP32 across the bits drawn, and a little beyond, so that no point sits on the plot's edge.
    const double x0 = logX ? lo / 1.25 : lo - std::max(0.1 * (hi - lo), 0.1 * lo);
    const double x1 = logX ? hi * 1.25 : hi + std::max(0.1 * (hi - lo), 0.1 * lo);
    for (std::size_t si = 0; si < sets.size(); ++si)
        if (const auto& set = sets[si]; set.fp32) {
            const QString name = QStringLiteral("%1FP32 %2")
                                     .arg(sets.size() > 1 ? setNames[int(si)] + QStringLiteral(": ") : QString())
                                     .arg(*set.fp32, 0, 'f', 3);
            chart.setSeries(name, {QPointF(x0, *set.fp32), QPointF(x1, *set.fp32)});
            chart.setReference(name);
        }
    return true;
}

} // namespace gsrq::studio
