#pragma once
// A chart with the behaviour every chart of the app shares: named line series (or histograms,
// drawn as bars) updated through a
// coalescing timer (setSeries marks them dirty; a 40 ms timer applies QXYSeries::replace), hover
// values, rubber-band zoom and reset, log axes, integer ticks for counts, labels with four
// significant digits, a hint while empty, legend markers that toggle series (full names in their
// tooltips), and export to PNG, SVG and CSV. Ticks are spaced so that their labels fit the plot's
// width, a log axis carries at least three labelled ticks, series that share x values can be drawn
// side by side (setDodge), and values far above the rest can be left off the axis and named
// instead (setClipOutliers). GUI thread only. The axes' fitting is in chart_axes.cpp, the exports in chart_export.cpp.

#include "core/base/stats.h"

#include <QChartView>
#include <QColor>
#include <QHash>
#include <QList>
#include <QPair>
#include <QPointF>
#include <QSet>
#include <QTimer>
#include <QWidget>

#include <optional>

class QLabel;
class QAreaSeries;
class QLineSeries;
class QValueAxis;
class QLogValueAxis;
class QAbstractAxis;

namespace gsrq::views {

// A histogram's bins as points (bin centre, count), for a chart.
QList<QPointF> histogramPoints(const Histogram& h);

// Where an axis should stop so that a few values far above the rest do not flatten it: the largest
// value below a gap of a factor of 10 or more (on a log scale; on a linear one, a gap of 10 times the
// span below it), with at most a quarter of the values above it (one, where there are fewer than
// eight; three values at least). Nothing when no value stands out so.
std::optional<double> outlierCut(QList<double> values, bool logScale);

class ChartPanel : public QWidget {
    Q_OBJECT

public:
    explicit ChartPanel(const QString& title, const QString& xTitle, const QString& yTitle, QWidget* parent = nullptr);

    // Replaces a series' points (creating it on first use); drawn on the next timer tick.
    void setSeries(const QString& name, const QList<QPointF>& points);
    void appendPoint(const QString& name, QPointF p);
    // A histogram: its bins drawn as touching bars from zero (translucent, so several overlay);
    // points() and the CSV export give its bins as (centre, count).
    void setHistogram(const QString& name, const Histogram& h);
    bool isHistogram(const QString& name) const { return m_histograms.contains(name); }
    // A series' colour: the palette's, by the order the series were first set (error bars take none
    // of it; a reference line keeps its place though it is drawn gray), so that no two of the first
    // ten series share one.
    QColor seriesColor(const QString& name) const;
    // Error bars of a series: one (low, high) interval of y per point, in the points' order, drawn as
    // vertical whiskers in the series' colour (a 95% interval, say); cleared by an empty list and
    // by setSeries. The axes fit them; the CSV export gives them as columns low and high.
    void setIntervals(const QString& name, const QList<QPair<double, double>>& intervals);
    QList<QPair<double, double>> intervals(const QString& name) const { return m_intervals.value(name); }
    // A reference line (FP32's perplexity, say): dashed, gray, without point markers.
    void setReference(const QString& name);
    bool isReference(const QString& name) const { return m_references.contains(name); }
    void removeSeries(const QString& name);
    void clear();
    void setLogY(bool on);
    void setLogX(bool on);
    void setAxisTitles(const QString& xTitle, const QString& yTitle);
    void setTitle(const QString& title);
    QString title() const;
    // x counts something (iterations, stages, layers): ticks at whole numbers, labelled without decimals.
    void setIntegerX(bool on);
    // Series that share x values (methods at the same bits) are drawn side by side: each is moved by
    // a fixed share of the x axis's span (a ratio on a log axis), in the order they were set, so that
    // no point hides another. The data (points(), CSV, hover) keep their own x.
    void setDodge(bool on);
    // Values above outlierCut() of every series' y are drawn at the top of the plot, the axis fitted to
    // the others, and named in a line under the title ("Above the axis: kivi-1 at 1.06: 7.65e+04");
    // title() stays the title as set.
    void setClipOutliers(bool on);
    // What is drawn above the axis: "<series> at <x>: <y>", one entry a point; empty when nothing is.
    QStringList clippedPoints() const { return m_clipped; }
    // What the chart says while it has no points: how to fill it ("Run a comparison to see…").
    void setEmptyText(const QString& text);
    QString emptyText() const;
    bool emptyTextShown() const; // the hint is up (no series has a point)

    // What the chart shows once pending updates are applied (tests and CSV export read this).
    QStringList seriesNames() const;
    // A series' points as data (in order; on a log y axis, those above zero); a reference drawn across
    // the plot, as drawn. drawnPoints() gives where they are drawn (dodged, clipped).
    QList<QPointF> points(const QString& name) const;
    QList<QPointF> drawnPoints(const QString& name) const;
    bool pointsDrawn(const QString& name) const; // markers at each point (sparse series), not only a line
    void flush();                                // apply pending updates now

    bool exportPng(const QString& path);
    bool exportSvg(const QString& path);
    bool exportCsv(const QString& path);
    QChartView* view() const { return m_view; }

signals:
    void redrawn(); // after a coalesced update reached the chart

protected:
    void resizeEvent(QResizeEvent* e) override;

private slots:
    void onTick();
    void onExport();

private:
    void rebuildAxes();
    QLineSeries* seriesFor(const QString& name);

    QChartView* m_view = nullptr;
    QLabel* m_hover = nullptr;
    QTimer m_timer;
    QHash<QString, QList<QPointF>> m_data;
    QList<QString> m_order;
    QHash<QString, bool> m_dirty;
    QHash<QString, QLineSeries*> m_series; // what is drawn; a histogram's is its bars' outline
    QHash<QString, QAreaSeries*> m_areas;  // a histogram's bars (their upper edge is m_series')
    QSet<QString> m_histograms;
    QHash<QString, QList<QPair<double, double>>> m_intervals;
    QHash<QString, QList<QLineSeries*>> m_whiskers; // drawn error bars, one series each
    void drawWhiskers(const QString& name);
    QSet<QString> m_references;
    void placeLegend();
    QAbstractSeries* drawnSeries(const QString& name) const;
    void updateEmptyHint();
    void fitIntegerTicks(double x0, double x1);
    // The axes to the data (x0..x1, y0..y1 of what is drawn); the labels' spacing to the plot's width.
    void fitAxes(double x0, double x1, double y0, double y1);
    void fitTicks();
    double dodged(const QString& name, double x) const; // where x of series `name` is drawn
    double plotWidth() const;

    QLabel* m_empty = nullptr;
    QString m_titleBase, m_titleShown; // the title as set, and as drawn with the clipped points' note
    QString m_xTitle, m_yTitle;
    bool m_logX = false, m_logY = false, m_integerX = false, m_dodge = false, m_clip = false;
    QHash<QString, double> m_dodgeSlot; // a dodged series' offset, in shares of the x span (log: of its octaves)
    double m_dodgeSpan = 0;             // the x span the offsets are shares of (log: in octaves)
    QStringList m_clipped;
    double m_fittedWidth = -1;                   // the plot width the x ticks were last spaced for
    static constexpr double kDodgeShare = 0.015; // a dodged series' step: 1.5% of the x span
    double m_intX0 = 0, m_intX1 = 0;             // the integer x axis's data range, for refitting on resize
};

} // namespace gsrq::views
