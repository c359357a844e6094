#include "views/chart_panel.h"

#include <QAreaSeries>
#include <QChart>
#include <QFile>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPainter>
#include <QToolButton>
#include <QVBoxLayout>
#include <QValueAxis>

#include <cmath>

namespace gsrq::views {

QList<QPointF> histogramPoints(const Histogram& h)
{
    QList<QPointF> out;
    for (std::size_t b = 0; b < h.centres.size(); ++b)
        out << QPointF(h.centres[b], double(h.counts[b]));
    return out;
}

ChartPanel::ChartPanel(const QString& title, const QString& xTitle, const QString& yTitle, QWidget* parent)
    : QWidget(parent), m_xTitle(xTitle), m_yTitle(yTitle)
{
    auto* chart = new QChart();
    chart->setTitle(title);
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->legend()->setShowToolTips(true); // a name cut short by the legend's width shows in full on hover
    chart->setAnimationOptions(QChart::NoAnimation);
    m_view = new QChartView(chart, this);
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setRubberBand(QChartView::RectangleRubberBand);
    m_view->setMinimumSize(320, 220);

    auto* reset = new QToolButton(this);
    reset->setText(tr("Reset zoom"));
    connect(reset, &QToolButton::clicked, this, [this] {
        m_view->chart()->zoomReset();
        for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it) // fitted to the data as it is now
            it.value() = true;
        if (!m_timer.isActive())
            m_timer.start();
    });
    auto* logY = new QToolButton(this);
    logY->setText(tr("Log y"));
    logY->setCheckable(true);
    connect(logY, &QToolButton::toggled, this, &ChartPanel::setLogY);
    auto* exportButton = new QToolButton(this);
    exportButton->setText(tr("Export…"));
    connect(exportButton, &QToolButton::clicked, this, &ChartPanel::onExport);
    m_hover = new QLabel(this);
    m_empty = new QLabel(m_view->viewport());
    m_empty->setAlignment(Qt::AlignCenter);
    m_empty->setWordWrap(true);
    m_empty->setAttribute(Qt::WA_TransparentForMouseEvents);
    m_empty->setStyleSheet(QStringLiteral("color: gray;"));
    auto* emptyLayout = new QVBoxLayout(m_view->viewport());
    emptyLayout->addWidget(m_empty, 0, Qt::AlignCenter);
    m_empty->hide();

    auto* bar = new QHBoxLayout();
    bar->addWidget(reset);
    bar->addWidget(logY);
    bar->addWidget(exportButton);
    bar->addStretch();
    bar->addWidget(m_hover);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(bar);
    layout->addWidget(m_view, 1);

    // Progress events mark series dirty; this timer draws at most 25 times a second.
    m_timer.setInterval(40);
    m_timer.setSingleShot(true);
    connect(&m_timer, &QTimer::timeout, this, &ChartPanel::onTick);
    // A new width may want other ticks (their labels side by side): the axes are fitted again.
    connect(chart, &QChart::plotAreaChanged, this, [this](const QRectF& area) {
        // A zoomed chart keeps the user's zoom (a redraw fits the axes to the data again).
        if (m_fittedWidth >= 0 && std::abs(area.width() - m_fittedWidth) >= 1 && !m_view->chart()->isZoomed()) {
            for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
                it.value() = true;
            if (!m_timer.isActive())
                m_timer.start();
        }
    });
    rebuildAxes();
}

QAbstractSeries* ChartPanel::drawnSeries(const QString& name) const
{
    if (auto* a = m_areas.value(name))
        return a;
    return m_series.value(name);
}

bool ChartPanel::pointsDrawn(const QString& name) const
{
    const auto* s = m_series.value(name);
    return s && s->pointsVisible();
}

QColor ChartPanel::seriesColor(const QString& name) const
{
    // Tableau 10: ten hues told apart on screen and in print. The theme's own palette cycles over
    // every series the chart holds, whiskers included, and gave two methods one colour.
    static const QColor palette[] = {QColor(0x4e79a7), QColor(0xf28e2b), QColor(0xe15759), QColor(0x76b7b2),
                                     QColor(0x59a14f), QColor(0xedc948), QColor(0xb07aa1), QColor(0xff9da7),
                                     QColor(0x9c755f), QColor(0xbab0ac)};
    const auto at = m_order.indexOf(name);
    return palette[std::size_t(std::max<qsizetype>(at, 0)) % std::size(palette)];
}

QLineSeries* ChartPanel::seriesFor(const QString& name)
{
    if (auto* s = m_series.value(name))
        return s;
    auto* s = new QLineSeries();
    s->setName(name);
    QPen pen = s->pen();
    pen.setColor(seriesColor(name));
    pen.setWidthF(2);
    s->setPen(pen);
    s->setBrush(seriesColor(name)); // the point markers
    QAbstractSeries* drawn = s;
    if (m_histograms.contains(name)) {
        // Bars: the area between the outline and a baseline (zero, or below the smallest count
        // on a log axis); both lines belong to the area series.
        auto* lower = new QLineSeries();
        auto* area = new QAreaSeries(s, lower);
        s->setParent(area);
        lower->setParent(area);
        area->setName(name);
        m_view->chart()->addSeries(area);
        QColor c = seriesColor(name);
        area->setBorderColor(c);
        c.setAlpha(110);
        area->setColor(c);
        m_areas.insert(name, area);
        drawn = area;
        connect(area, &QAreaSeries::hovered, this, [this, name](const QPointF& p, bool state) {
            // The bar under the pointer: its bin from the data.
            QString text;
            const auto bins = m_data.value(name);
            if (state && bins.size() > 0) {
                const double w = bins.size() > 1 ? (bins.back().x() - bins.front().x()) / double(bins.size() - 1) : 1;
                for (const auto& b : bins)
                    if (std::abs(p.x() - b.x()) <= w / 2)
                        text = QStringLiteral("%1: %2 to %3, count %4")
                                   .arg(name)
                                   .arg(b.x() - w / 2, 0, 'g', 4)
                                   .arg(b.x() + w / 2, 0, 'g', 4)
                                   .arg(b.y(), 0, 'f', 0);
            }
            m_hover->setText(text);
        });
    } else {
        m_view->chart()->addSeries(s);
    }
    m_series.insert(name, s); // the legend is placed once the tick has made every new series
    connect(s, &QLineSeries::hovered, this, [this, name](const QPointF& p, bool state) {
        // The data's own point nearest to where the pointer is (a dodged or clipped one is drawn elsewhere).
        QPointF at = p;
        const auto drawn = m_series.value(name) ? m_series.value(name)->points() : QList<QPointF>();
        const auto data = points(name);
        double best = INFINITY;
        for (int i = 0; i < std::min(drawn.size(), data.size()); ++i)
            if (const double d = std::hypot(drawn[i].x() - p.x(), drawn[i].y() - p.y()); d < best) {
                best = d;
                at = data[i];
            }
        m_hover->setText(
            state ? QStringLiteral("%1: x = %2, y = %3").arg(name).arg(at.x(), 0, 'g', 6).arg(at.y(), 0, 'g', 4)
                  : QString());
    });
    // Clicking a legend marker hides or shows its series.
    for (auto* marker : m_view->chart()->legend()->markers(drawn))
        connect(marker, &QLegendMarker::clicked, this, [s = drawn, marker] {
            s->setVisible(!s->isVisible());
            marker->setVisible(true);
            marker->setLabelBrush(s->isVisible() ? QBrush(Qt::black) : QBrush(Qt::gray));
        });
    rebuildAxes();
    return s;
}

void ChartPanel::placeLegend()
{
    // A row under the chart cuts every name to a few letters once they do not fit its width; a column
    // beside it gives each its own line. The row while the names fit in it (marker, name, spacing).
    auto* legend = m_view->chart()->legend();
    const QFontMetrics fm(legend->font());
    int row = 0;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it)
        row += fm.horizontalAdvance(it.key()) + fm.height() + 24;
    const bool column = row > width() - 40;
    legend->setAlignment(column ? Qt::AlignRight : Qt::AlignBottom);
    // In a column (about a third of the chart wide), a name too wide for it is wrapped at its spaces
    // rather than cut, where the wrapped names still fit the chart's height; the tooltip has it whole.
    const int widest = std::max(80, int(width() * 0.3) - 30);
    int lines = 0;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it)
        lines += 1 + fm.horizontalAdvance(it.key()) / widest;
    const bool wrap = column && lines * fm.lineSpacing() * 1.3 < height() - 80;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it) {
        QString label = it.key();
        if (wrap && fm.horizontalAdvance(label) > widest) {
            QStringList lines{QString()};
            for (const auto& word : it.key().split(' ')) {
                const QString joined = lines.back().isEmpty() ? word : lines.back() + ' ' + word;
                if (!lines.back().isEmpty() && fm.horizontalAdvance(joined) > widest)
                    lines << word;
                else
                    lines.back() = joined;
            }
            for (auto& l : lines)
                l = l.toHtmlEscaped();
            label = lines.join(QStringLiteral("<br>"));
        }
        for (auto* marker : legend->markers(drawnSeries(it.key())))
            if (marker->label() != label)
                marker->setLabel(label);
    }
}

void ChartPanel::resizeEvent(QResizeEvent* e)
{
    QWidget::resizeEvent(e);
    placeLegend(); // the names that fit a row, and where a column wraps them, follow the width
}

void ChartPanel::setReference(const QString& name)
{
    m_references.insert(name);
    if (!m_data.contains(name))
        return;
    m_dirty[name] = true;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::setSeries(const QString& name, const QList<QPointF>& points)
{
    m_intervals.remove(name);
    if (!m_data.contains(name))
        m_order.append(name);
    m_data[name] = points;
    m_dirty[name] = true;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::setHistogram(const QString& name, const Histogram& h)
{
    if (!m_histograms.contains(name) && m_series.contains(name))
        removeSeries(name); // it was a line until now
    m_histograms.insert(name);
    setSeries(name, histogramPoints(h));
}

void ChartPanel::setIntervals(const QString& name, const QList<QPair<double, double>>& intervals)
{
    if (intervals.isEmpty())
        m_intervals.remove(name);
    else
        m_intervals.insert(name, intervals);
    if (!m_data.contains(name)) // drawn with its series, once it has one
        return;
    m_dirty[name] = true;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::drawWhiskers(const QString& name)
{
    for (auto* w : m_whiskers.take(name)) {
        m_view->chart()->removeSeries(w);
        delete w;
    }
    const auto bars = m_intervals.value(name);
    auto* s = m_series.value(name);
    const auto pts = m_data.value(name);
    if (!s || bars.isEmpty())
        return;
    const auto clipped = [&](const QPointF& p) {
        return m_clipped.contains(QStringLiteral("%1 at %2: %3").arg(name).arg(p.x(), 0, 'g', 4).arg(p.y(), 0, 'g', 4));
    };
    QPen pen(s->color());
    pen.setWidthF(1.5);
    const auto axes = m_view->chart()->axes();
    for (int i = 0; i < std::min<int>(int(bars.size()), int(pts.size())); ++i) {
        if ((m_logY && !(bars[i].first > 0)) || clipped(pts[i])) // a point off the axis has no bar on it
            continue;
        auto* w = new QLineSeries();
        w->append(dodged(name, pts[i].x()), bars[i].first);
        w->append(dodged(name, pts[i].x()), bars[i].second);
        m_view->chart()->addSeries(w);
        w->setPen(pen);
        for (auto* a : axes)
            w->attachAxis(a);
        for (auto* marker : m_view->chart()->legend()->markers(w))
            marker->setVisible(false);
        m_whiskers[name].append(w);
    }
}

void ChartPanel::appendPoint(const QString& name, QPointF p)
{
    if (!m_data.contains(name))
        m_order.append(name);
    m_data[name].append(p);
    m_dirty[name] = true;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::removeSeries(const QString& name)
{
    if (auto* a = m_areas.take(name)) {
        m_view->chart()->removeSeries(a);
        delete a; // with its lines
        m_series.remove(name);
    } else if (auto* s = m_series.take(name)) {
        m_view->chart()->removeSeries(s);
        delete s;
    }
    for (auto* w : m_whiskers.take(name)) {
        m_view->chart()->removeSeries(w);
        delete w;
    }
    m_intervals.remove(name);
    m_histograms.remove(name);
    m_references.remove(name);
    m_data.remove(name);
    m_dirty.remove(name);
    m_order.removeAll(name);
    updateEmptyHint();
    if ((m_dodge || m_clip) && !m_order.isEmpty()) { // the others' places and the clipped note change
        for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
            it.value() = true;
        if (!m_timer.isActive())
            m_timer.start();
    }
}

void ChartPanel::clear()
{
    m_timer.stop();
    m_view->chart()->zoomReset(); // other data: fitted anew
    m_view->chart()->removeAllSeries();
    m_series.clear();
    m_areas.clear();
    m_whiskers.clear(); // removed with every series above
    m_intervals.clear();
    m_histograms.clear();
    m_references.clear();
    m_data.clear();
    m_order.clear();
    m_dirty.clear();
    rebuildAxes();
    updateEmptyHint();
}

void ChartPanel::flush()
{
    onTick();
}

void ChartPanel::onTick()
{
    bool anyDirty = false;
    for (auto it = m_dirty.cbegin(); it != m_dirty.cend(); ++it)
        anyDirty = anyDirty || it.value();
    if (!anyDirty) // nothing to redraw: what is drawn (and clippedPoints()) stays as it is
        return;
    // A dodged series' place, and what lies above a clipped axis, depend on every series: all are redrawn.
    if (m_dodge || m_clip)
        for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
            it.value() = true;
    // A reference line across the plot (two points at one y, as the perplexity chart's FP32) takes
    // part in the fit by its data, as given, and is then drawn across the whole x axis as fitted.
    const auto across = [&](const QString& name) {
        const QList<QPointF> d = m_data.value(name);
        return m_references.contains(name) && d.size() == 2 && d[0].y() == d[1].y() && d[0].x() != d[1].x();
    };
    const auto plain = [&](const QString& name) {
        return !m_histograms.contains(name) && !m_references.contains(name);
    };
    const auto shown = [&](const QPointF& p) { return !m_logY || p.y() > 0; }; // a log axis cannot show values ≤ 0
    // Dodging: each plain series with points gets its slot, in the order they were set.
    m_dodgeSlot.clear();
    if (m_dodge) {
        QStringList dodgedNames;
        double lo = INFINITY, hi = -INFINITY;
        for (const QString& name : m_order)
            if (plain(name) && !m_data.value(name).isEmpty()) {
                dodgedNames << name;
                for (const auto& p : m_data.value(name))
                    lo = std::min(lo, p.x()), hi = std::max(hi, p.x());
            }
        m_dodgeSpan = m_logX ? (lo > 0 && hi > lo ? std::log2(hi / lo) : 2.0) : (hi > lo ? hi - lo : 1.0);
        for (int i = 0; i < dodgedNames.size(); ++i)
            m_dodgeSlot.insert(dodgedNames[i], kDodgeShare * (i - (dodgedNames.size() - 1) / 2.0));
    }
    // Clipping: the cut over every plain series' values.
    std::optional<double> cut;
    if (m_clip) {
        QList<double> ys;
        for (const QString& name : m_order)
            if (plain(name))
                for (const auto& p : m_data.value(name))
                    if (shown(p) && std::isfinite(p.y()))
                        ys << p.y();
        cut = outlierCut(ys, m_logY);
    }
    m_clipped.clear();
    QHash<QString, QList<int>> clippedAt; // the drawn points to lift to the axis's top once it is fitted
    bool any = false;
    for (const QString& name : m_order) { // in the order the series were first set: the legend's
        auto it = m_dirty.find(name);
        if (it == m_dirty.end() || !it.value())
            continue;
        QList<QPointF> pts = m_data.value(it.key());
        if (m_histograms.contains(it.key())) {
            // Touching bars, each a bin's width wide (the bins are evenly spaced), from the baseline.
            const double w = pts.size() > 1 ? (pts.back().x() - pts.front().x()) / double(pts.size() - 1) : 1;
            double base = 0;
            if (m_logY) { // a log axis has no zero: bars rise from half the smallest count
                base = INFINITY;
                for (const auto& p : pts)
                    if (p.y() > 0)
                        base = std::min(base, p.y() / 2);
                base = std::isfinite(base) ? base : 0.5;
            }
            QList<QPointF> outline;
            // An edge within rounding of zero is zero (bins of non-negative data start there).
            const auto edge = [w](double x) { return std::abs(x) < 1e-9 * w ? 0.0 : x; };
            for (const auto& p : pts) {
                const double y = std::max(p.y(), base), x0 = edge(p.x() - w / 2), x1 = edge(p.x() + w / 2);
                outline << QPointF(x0, base) << QPointF(x0, y) << QPointF(x1, y) << QPointF(x1, base);
            }
            seriesFor(it.key())->replace(outline);
            if (auto* a = m_areas.value(it.key()); a && !pts.isEmpty())
                a->lowerSeries()->replace(
                    {QPointF(pts.front().x() - w / 2, base), QPointF(pts.back().x() + w / 2, base)});
        } else {
            pts.erase(std::remove_if(pts.begin(), pts.end(), [&](const QPointF& p) { return !shown(p); }), pts.end());
            for (int i = 0; i < pts.size(); ++i) {
                if (cut && plain(name) && pts[i].y() > *cut) {
                    m_clipped << QStringLiteral("%1 at %2: %3")
                                     .arg(name)
                                     .arg(pts[i].x(), 0, 'g', 4)
                                     .arg(pts[i].y(), 0, 'g', 4);
                    clippedAt[name] << i;
                    pts[i].setY(*cut); // lifted to the axis's top below
                }
                pts[i].setX(dodged(name, pts[i].x()));
            }
            auto* s = seriesFor(it.key());
            s->replace(pts);
            // A line of one point draws nothing, and a few points are read one by one (a run's
            // perplexity at its bits): they are drawn as points too.
            s->setPointsVisible(pts.size() < 32 && !m_references.contains(it.key()));
            drawWhiskers(it.key());
            if (m_references.contains(it.key())) {
                // Gray, each reference in a dash of its own (several evaluations' FP32 lines).
                static const Qt::PenStyle dashes[] = {Qt::DashLine, Qt::DotLine, Qt::DashDotLine, Qt::DashDotDotLine};
                int nth = 0;
                for (const QString& other : m_order)
                    if (other == it.key())
                        break;
                    else
                        nth += m_references.contains(other);
                QPen pen(Qt::darkGray);
                pen.setStyle(dashes[nth % 4]);
                pen.setWidthF(1.5);
                s->setPen(pen);
            }
        }
        it.value() = false;
        any = true;
    }
    if (!any)
        return;
    placeLegend();
    updateEmptyHint();
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (auto it = m_series.cbegin(); it != m_series.cend(); ++it)
        for (const auto& p : across(it.key()) ? m_data.value(it.key()) : it.value()->points()) {
            x0 = std::min(x0, p.x());
            x1 = std::max(x1, p.x());
            y0 = std::min(y0, p.y());
            y1 = std::max(y1, p.y());
        }
    for (auto it = m_intervals.cbegin(); it != m_intervals.cend(); ++it)
        for (const auto& b : it.value()) {
            if (!m_logY || b.first > 0)
                y0 = std::min(y0, b.first);
            if (!cut || b.second <= *cut)
                y1 = std::max(y1, b.second);
        }
    // A chart the user zoomed keeps the zoom (Reset zoom returns to the data's fit, clear() too).
    if (std::isfinite(x0) && !m_view->chart()->isZoomed()) {
        fitAxes(x0, x1, y0, y1);
        double lo = 0, hi = 0, top = 0;
        const auto range = [](QAbstractAxis* a, double* from, double* to) {
            if (auto* l = qobject_cast<QLogValueAxis*>(a))
                *from = l->min(), *to = l->max();
            else if (auto* v = qobject_cast<QValueAxis*>(a))
                *from = v->min(), *to = v->max();
        };
        range(m_view->chart()->axes(Qt::Horizontal).value(0), &lo, &hi);
        double bottom = 0;
        range(m_view->chart()->axes(Qt::Vertical).value(0), &bottom, &top);
        for (auto it = m_series.begin(); it != m_series.end(); ++it) {
            if (hi > lo && across(it.key())) {
                const double y = m_data.value(it.key()).front().y();
                it.value()->replace({QPointF(lo, y), QPointF(hi, y)});
            }
            if (const auto at = clippedAt.value(it.key()); !at.isEmpty()) {
                auto pts = it.value()->points();
                for (int i : at)
                    pts[i].setY(top);
                it.value()->replace(pts);
            }
        }
    }
    // What a clipped axis leaves out, named under the title (so exports carry it too).
    const QString base = title();
    if (m_clipped.isEmpty()) {
        m_titleShown.clear();
        if (m_view->chart()->title() != base)
            m_view->chart()->setTitle(base);
    } else {
        m_titleBase = base;
        m_titleShown = base.toHtmlEscaped() + QStringLiteral("<br><font color=\"#7a1f1f\">") +
                       tr("Above the axis: %1").arg(m_clipped.join(QStringLiteral("; "))).toHtmlEscaped() +
                       QStringLiteral("</font>");
        m_view->chart()->setTitle(m_titleShown);
    }
    emit redrawn();
}

void ChartPanel::setAxisTitles(const QString& xTitle, const QString& yTitle)
{
    m_xTitle = xTitle;
    m_yTitle = yTitle;
    for (auto* a : m_view->chart()->axes(Qt::Horizontal))
        a->setTitleText(xTitle);
    for (auto* a : m_view->chart()->axes(Qt::Vertical))
        a->setTitleText(yTitle);
}

QString ChartPanel::title() const
{
    const QString shown = m_view->chart()->title();
    return !m_titleShown.isEmpty() && shown == m_titleShown ? m_titleBase : shown;
}

void ChartPanel::setTitle(const QString& title)
{
    m_titleShown.clear();
    m_view->chart()->setTitle(title);
}

void ChartPanel::setEmptyText(const QString& text)
{
    m_empty->setText(text);
    updateEmptyHint();
}

QString ChartPanel::emptyText() const
{
    return m_empty->text();
}

bool ChartPanel::emptyTextShown() const
{
    return !m_empty->isHidden();
}

void ChartPanel::updateEmptyHint()
{
    bool empty = true;
    for (const auto& pts : m_data)
        empty = empty && pts.isEmpty();
    m_empty->setVisible(empty && !m_empty->text().isEmpty());
}

QStringList ChartPanel::seriesNames() const
{
    return m_order;
}

QList<QPointF> ChartPanel::points(const QString& name) const
{
    const auto* s = m_series.value(name);
    if (!s)
        return {};
    if (m_histograms.contains(name))
        return m_data.value(name);
    const auto data = m_data.value(name);
    if (m_references.contains(name) && data.size() == 2 && data[0].y() == data[1].y() && data[0].x() != data[1].x())
        return s->points(); // drawn across the plot
    QList<QPointF> out;
    for (const auto& p : data)
        if (!m_logY || p.y() > 0)
            out << p;
    return out;
}

QList<QPointF> ChartPanel::drawnPoints(const QString& name) const
{
    const auto* s = m_series.value(name);
    return s ? s->points() : QList<QPointF>();
}

} // namespace gsrq::views
