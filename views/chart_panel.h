#pragma once
// A chart with the behaviour every chart of the app shares: named line series updated through a
// coalescing timer (setSeries marks them dirty; a 40 ms timer applies QXYSeries::replace), hover
// values, rubber-band zoom and reset, log axes, legend markers that toggle series, and export to
// PNG, SVG and CSV. GUI thread only.

#include <QChartView>
#include <QHash>
#include <QList>
#include <QPointF>
#include <QTimer>
#include <QWidget>

class QLabel;
class QLineSeries;
class QValueAxis;
class QLogValueAxis;
class QAbstractAxis;

namespace gsrq::views {

class ChartPanel : public QWidget {
    Q_OBJECT

public:
    explicit ChartPanel(const QString& title, const QString& xTitle, const QString& yTitle, QWidget* parent = nullptr);

    // Replaces a series' points (creating it on first use); drawn on the next timer tick.
    void setSeries(const QString& name, const QList<QPointF>& points);
    void appendPoint(const QString& name, QPointF p);
    void clear();
    void setLogY(bool on);
    void setLogX(bool on);
    void setAxisTitles(const QString& xTitle, const QString& yTitle);

    // What the chart shows once pending updates are applied (tests and CSV export read this).
    QStringList seriesNames() const;
    QList<QPointF> points(const QString& name) const;
    void flush(); // apply pending updates now

    bool exportPng(const QString& path);
    bool exportSvg(const QString& path);
    bool exportCsv(const QString& path);
    QChartView* view() const { return m_view; }

signals:
    void redrawn(); // after a coalesced update reached the chart

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
    QHash<QString, QLineSeries*> m_series;
    QString m_xTitle, m_yTitle;
    bool m_logX = false, m_logY = false;
};

} // namespace gsrq::views
