// ChartPanel's axes: their kind (linear, log, whole numbers), their fit to the data, their ticks'
// spacing against the plot's size, dodged series and clipped outliers.

#include "views/chart_panel.h"

#include <QChart>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

namespace gsrq::views {

namespace {
// A log x axis reaches this factor past the data at each end: a point at the end keeps its whole
// marker (at the data's exact range, half of it was cut off).
constexpr double kLogAxisMargin = 1.1;
// Pixels between two tick labels, beyond the labels' own width.
constexpr double kLabelGap = 14;

// The width of the widest label an axis from `lo` to `hi` prints in `format` (printf style).
double labelWidth(const QFontMetrics& fm, const QString& format, double lo, double hi)
{
    double w = 0;
    for (double v : {lo, hi, (lo + hi) / 2})
        w = std::max(w, double(fm.horizontalAdvance(QString::asprintf(format.toLatin1().constData(), v))));
    return w;
}

// The labelled ticks of a log axis of `base` from lo to hi: the powers of the base between them.
int logTicks(double lo, double hi, double base)
{
    const double l = std::log(base);
    return int(std::floor(std::log(hi) / l + 1e-9) - std::ceil(std::log(lo) / l - 1e-9)) + 1;
}
} // namespace

std::optional<double> outlierCut(QList<double> values, bool logScale)
{
    values.erase(std::remove_if(values.begin(), values.end(),
                                [&](double v) { return !std::isfinite(v) || (logScale && !(v > 0)); }),
                 values.end());
    const int n = int(values.size());
    if (n < 3)
        return std::nullopt;
    std::sort(values.begin(), values.end());
    // The lowest cut with at most a quarter of the values above it (one, where there are fewer than
    // eight): a gap of ×10 on a log scale; on a linear one, ten times the span below it and half the
    // value below it.
    std::optional<double> cut;
    for (int k = 1; k <= std::max(1, n / 4); ++k) {
        const double below = values[n - k - 1], above = values[n - k];
        const bool gap = logScale ? above >= 10 * below
                                  : above - below >= 10 * (below - values.front()) &&
                                        above - below >= 0.5 * std::abs(below) && above > below;
        if (gap)
            cut = below;
    }
    return cut;
}

void ChartPanel::rebuildAxes()
{
    auto* chart = m_view->chart();
    for (auto* a : chart->axes()) {
        chart->removeAxis(a); // hands the axis back to us
        delete a;
    }
    QAbstractAxis* ax = nullptr;
    QAbstractAxis* ay = nullptr;
    if (m_logX) {
        auto* l = new QLogValueAxis();
        l->setBase(2);
        l->setLabelFormat("%g");
        ax = l;
    } else {
        auto* v = new QValueAxis();
        v->setLabelFormat(m_integerX ? "%.0f" : "%.4g");
        ax = v;
    }
    if (m_logY) {
        auto* l = new QLogValueAxis();
        l->setLabelFormat("%.3g");
        l->setMinorTickCount(8);
        ay = l;
    } else {
        auto* v = new QValueAxis();
        v->setLabelFormat("%.4g"); // 0.000507 rather than 0.000507339
        ay = v;
    }
    ax->setTitleText(m_xTitle);
    ay->setTitleText(m_yTitle);
    chart->addAxis(ax, Qt::AlignBottom);
    chart->addAxis(ay, Qt::AlignLeft);
    for (auto it = m_series.begin(); it != m_series.end(); ++it) {
        auto* s = drawnSeries(it.key());
        s->attachAxis(ax);
        s->attachAxis(ay);
    }
    for (const auto& whiskers : std::as_const(m_whiskers))
        for (auto* w : whiskers) {
            w->attachAxis(ax);
            w->attachAxis(ay);
        }
    for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
        it.value() = true;
    m_fittedWidth = -1;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::setLogY(bool on)
{
    m_logY = on;
    rebuildAxes();
}

void ChartPanel::setLogX(bool on)
{
    m_logX = on;
    rebuildAxes();
}

void ChartPanel::setIntegerX(bool on)
{
    if (m_integerX == on)
        return;
    m_integerX = on;
    rebuildAxes();
}

void ChartPanel::setDodge(bool on)
{
    m_dodge = on;
    for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
        it.value() = true;
    if (!m_timer.isActive())
        m_timer.start();
}

void ChartPanel::setClipOutliers(bool on)
{
    m_clip = on;
    for (auto it = m_dirty.begin(); it != m_dirty.end(); ++it)
        it.value() = true;
    if (!m_timer.isActive())
        m_timer.start();
}

double ChartPanel::dodged(const QString& name, double x) const
{
    const double slot = m_dodgeSlot.value(name, 0.0);
    if (slot == 0)
        return x;
    return m_logX ? x * std::exp2(slot * m_dodgeSpan) : x + slot * m_dodgeSpan;
}

double ChartPanel::plotWidth() const
{
    // A chart never shown has no layout yet: its ticks keep the defaults.
    return isVisible() ? m_view->chart()->plotArea().width() : 0.0;
}

// Ticks at whole numbers, every 1, 2, 5, 10, 20, ... so that at most about ten are drawn, and no more
// than the plot's width has room for with their labels side by side.
void ChartPanel::fitIntegerTicks(double x0, double x1)
{
    auto* axis = qobject_cast<QValueAxis*>(m_view->chart()->axes(Qt::Horizontal).value(0));
    if (!axis)
        return;
    m_intX0 = x0;
    m_intX1 = x1;
    // One x (a single stage): a step either side, so that its points are not on the plot's edge.
    const bool one = x1 == x0;
    const double lo = one && x0 >= 1 ? std::floor(x0) - 1 : std::floor(x0);
    const double hi = std::max(std::ceil(x1), one ? std::floor(x0) + 1 : lo + 1);
    const double width = plotWidth();
    const double label = labelWidth(QFontMetrics(axis->labelsFont()), QStringLiteral("%.0f"), lo, hi) + kLabelGap;
    const double most = width > 0 ? std::clamp(std::floor(width / label), 1.0, 10.0) : 10.0;
    double step = 1;
    for (int i = 0; (hi - lo) / step > most; ++i)
        step *= (i % 3 == 1) ? 2.5 : 2; // 1, 2, 5, 10, 20, 50, ...
    axis->setRange(lo, hi);
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(0);
    axis->setTickInterval(step);
    axis->setMinorTickCount(0);
}

void ChartPanel::fitAxes(double x0, double x1, double y0, double y1)
{
    const auto axesX = m_view->chart()->axes(Qt::Horizontal);
    const auto axesY = m_view->chart()->axes(Qt::Vertical);
    const double padY = (y1 - y0) * 0.05 + (y1 == y0 ? std::abs(y0) * 0.05 + 1e-12 : 0);
    if (m_integerX && !m_logX)
        fitIntegerTicks(x0, x1);
    else if (!axesX.isEmpty() && x1 > x0 && m_logX) // a margin, so the end points' markers are whole
        axesX.first()->setRange(x0 / kLogAxisMargin, x1 * kLogAxisMargin);
    else if (!axesX.isEmpty() && x1 > x0)
        axesX.first()->setRange(x0, x1);
    else if (!axesX.isEmpty()) // one x: centred, not at the left edge
        axesX.first()->setRange(m_logX ? x0 / 2 : x0 - 0.5, m_logX ? x0 * 2 : x0 + 0.5);
    // Counts and other non-negative data keep their axis at zero.
    const double lowY = m_logY ? y0 / 1.2 : (y0 >= 0 && y0 - padY < 0 ? 0.0 : y0 - padY);
    if (!axesY.isEmpty())
        axesY.first()->setRange(lowY, m_logY ? y1 * 1.2 : y1 + padY);
    if (auto* vy = qobject_cast<QValueAxis*>(axesY.value(0)))
        vy->applyNiceNumbers();
    m_fittedWidth = -1;
    fitTicks();
}

// The ticks' spacing: a linear x axis on round numbers (0.2, 0.25; applyNiceNumbers) with no more
// ticks than the plot's width has room for side by side; a log axis labelled at least three times
// (base 2 for the bits axes, fewer powers where the labels would not fit, a fractional base where
// the data span less than a factor of 4; base 10 for y where it gives three, else 2).
void ChartPanel::fitTicks()
{
    const double width = plotWidth();
    if (width == m_fittedWidth)
        return;
    m_fittedWidth = width;
    auto* chart = m_view->chart();
    auto* ax = chart->axes(Qt::Horizontal).value(0);
    if (auto* v = qobject_cast<QValueAxis*>(ax); v && m_integerX) {
        if (m_intX1 >= m_intX0)
            fitIntegerTicks(m_intX0, m_intX1);
    } else if (v) {
        const double label =
            labelWidth(QFontMetrics(v->labelsFont()), v->labelFormat(), v->min(), v->max()) + kLabelGap;
        const int ticks = width > 0 ? std::clamp(int(width / label) + 1, 2, 6) : 5;
        v->setTickType(QValueAxis::TicksFixed);
        v->setTickCount(ticks);
        v->applyNiceNumbers();
        // Nice numbers may add a tick: take ticks off until the labels fit.
        while (width > 0 && v->tickCount() > 2 && width / (v->tickCount() - 1) < label)
            v->setTickCount(v->tickCount() - 1);
    } else if (auto* l = qobject_cast<QLogValueAxis*>(ax); l && l->min() > 0 && l->max() > l->min()) {
        const double lo = l->min(), hi = l->max();
        const double label = labelWidth(QFontMetrics(l->labelsFont()), QStringLiteral("%g"), lo, hi) + kLabelGap;
        const auto fits = [&](double b) { return width <= 0 || width / std::max(1, logTicks(lo, hi, b)) >= label; };
        double base = 0;
        for (double b : {2.0, 4.0, 16.0, 256.0})
            if (logTicks(lo, hi, b) >= 3 && fits(b)) {
                base = b;
                break;
            }
        if (base == 0 && logTicks(lo, hi, 2) < 3)
            base = std::pow(hi / lo, 1 / 3.5); // a span of 3.5 powers holds three or four whole ones
        else if (base == 0)
            base = 256; // a span of many octaves in a narrow plot
        l->setBase(base);
        l->setLabelFormat(base == std::round(base) ? QStringLiteral("%g") : QStringLiteral("%.3g"));
        l->setMinorTickCount(0);
    }
    if (auto* l = qobject_cast<QLogValueAxis*>(chart->axes(Qt::Vertical).value(0));
        l && l->min() > 0 && l->max() > l->min()) {
        const double lo = l->min(), hi = l->max();
        const double base = logTicks(lo, hi, 10) >= 3  ? 10.0
                            : logTicks(lo, hi, 2) >= 3 ? 2.0
                                                       : std::pow(hi / lo, 1 / 3.5); // three or four ticks
        l->setBase(base);
        l->setMinorTickCount(base == 10 ? 8 : 0);
    }
}

} // namespace gsrq::views
