#pragma once
// A chart with the behaviour every chart of the app shares: named line series (or histograms,
// drawn as bars) updated through a
// coalescing timer (setSeries marks them dirty; a 40 ms timer applies QXYSeries::replace), hover
// values, rubber-band zoom and reset, log axes, integer ticks for counts, labels with four
// significant digits, a hint while empty, legend markers that toggle series (full names in their
// tooltips), and export to PNG, SVG and CSV. GUI thread only.

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

class QLabel;
class QAreaSeries;
class QLineSeries;
class QValueAxis;
class QLogValueAxis;
class QAbstractAxis;

namespace gsrq::views {

// A histogram's bins as points (bin centre, count), for a chart.
QList<QPointF> histogramPoints(const Histogram& h);

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
    // What the chart says while it has no points: how to fill it ("Run a comparison to see…").
    void setEmptyText(const QString& text);
    QString emptyText() const;
    bool emptyTextShown() const; // the hint is up (no series has a point)

    // What the chart shows once pending updates are applied (tests and CSV export read this).
    QStringList seriesNames() const;
    QList<QPointF> points(const QString& name) const;
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

    QLabel* m_empty = nullptr;
    QString m_xTitle, m_yTitle;
    bool m_logX = false, m_logY = false, m_integerX = false;
};

} // namespace gsrq::views
