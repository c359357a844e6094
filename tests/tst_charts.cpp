// The charts and heatmaps every page draws with (views/), on the offscreen platform: their axes'
// ticks against the plot's size, series that share x values, values far above the rest, and a
// heatmap's row labels on a 30-layer model. Each checks what a reader of the chart would see: the
// widths and places the widgets computed, from the font they draw with.

#include "views/chart_panel.h"
#include "views/heatmap_view.h"

#include <QApplication>
#include <QChart>
#include <QFile>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QtTest>

#include <cmath>

using namespace gsrq;

namespace {

// Labelled ticks of a log axis: the powers of its base within its range.
int labelledLogTicks(const QLogValueAxis* a)
{
    const double l = std::log(a->base());
    return int(std::floor(std::log(a->max()) / l + 1e-9) - std::ceil(std::log(a->min()) / l - 1e-9)) + 1;
}

// The widest label a value axis prints over its range, in its labels' font.
double widestLabel(const QValueAxis* a)
{
    const QFontMetrics fm(a->labelsFont());
    double w = 0;
    for (double v = a->min(); v <= a->max() + 1e-9; v += (a->max() - a->min()) / 8)
        w = std::max(w, double(fm.horizontalAdvance(QString::asprintf(a->labelFormat().toLatin1().constData(), v))));
    return w;
}

// Pixels between two neighbouring labelled ticks of a linear x axis, in the plot as laid out.
double tickSpacing(views::ChartPanel& chart)
{
    auto* a = qobject_cast<QValueAxis*>(chart.view()->chart()->axes(Qt::Horizontal).value(0));
    const double width = chart.view()->chart()->plotArea().width();
    if (a->tickType() == QValueAxis::TicksDynamic)
        return width * a->tickInterval() / (a->max() - a->min());
    return width / (a->tickCount() - 1);
}

} // namespace

class TestCharts : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { QApplication::setStyle("Fusion"); }
    void logAxesLabelThreeTicksOrMore();
    void xTickLabelsFitSideBySide();
    void seriesAtTheSameBitsAreDrawnSideBySide();
    void outliersAreNamedAboveTheAxis();
    void outlierCutNeedsAClearGap();
    void heatmapLabelsEveryLayerOfADeepModel();
    void zoomSurvivesAResize();

private:
    QTemporaryDir m_dir;
};

// A log y axis over perplexities 20 to 200 (a factor of 10): base 10 labels only 100, one tick; the
// axis takes base 2 (32, 64, 128) or a finer one, and so labels three or more. Over four decades it
// keeps base 10. A log x axis of bits 0.375 to 16 keeps base 2 (0.5, 1, ... 16).
void TestCharts::logAxesLabelThreeTicksOrMore()
{
    views::ChartPanel chart("c", "bits", "perplexity");
    chart.resize(640, 420);
    chart.show();
    chart.setLogY(true);
    chart.setLogX(true);
    chart.setSeries("kivi", {{0.375, 20}, {2, 60}, {16, 200}});
    chart.flush();
    auto* y = qobject_cast<QLogValueAxis*>(chart.view()->chart()->axes(Qt::Vertical).value(0));
    auto* x = qobject_cast<QLogValueAxis*>(chart.view()->chart()->axes(Qt::Horizontal).value(0));
    QVERIFY(y && x);
    QVERIFY2(labelledLogTicks(y) >= 3,
             qPrintable(QString("base %1 over %2..%3").arg(y->base()).arg(y->min()).arg(y->max())));
    QCOMPARE(x->base(), 2.0);
    QVERIFY(labelledLogTicks(x) >= 5);
    // Within a factor of 1.6 (base 2 would label one): a fractional base, three ticks or more.
    chart.setSeries("kivi", {{0.375, 70}, {2, 80}, {16, 95}});
    chart.flush();
    QVERIFY2(labelledLogTicks(y) >= 3,
             qPrintable(QString("base %1 over %2..%3").arg(y->base()).arg(y->min()).arg(y->max())));
    chart.setSeries("kivi", {{0.375, 1}, {2, 100}, {16, 10000}});
    chart.flush();
    QCOMPARE(y->base(), 10.0);
}

// A run comparison's x axis (0 to 2,000) at 380 pixels with a legend column beside it: every
// labelled tick has room for its label (at the old ten ticks, 20 pixels apart, "2000" did not fit and
// Qt drew the labels as "…"). The
// same for a linear axis of fractional values, and again after the chart is made narrower.
void TestCharts::xTickLabelsFitSideBySide()
{
    views::ChartPanel chart("runs", "assignment pass", "nmse");
    chart.resize(380, 360);
    chart.show();
    chart.setIntegerX(true);
    for (int i = 0; i < 6; ++i) {
        QList<QPointF> pts;
        for (int x = 0; x <= 2000; x += 100)
            pts << QPointF(x, 1.0 / (x + i + 1));
        chart.setSeries(QStringLiteral("run %1: layers.%1.key (1st residual)").arg(i), pts);
    }
    chart.flush();
    QCoreApplication::processEvents();
    chart.flush();
    auto* ax = qobject_cast<QValueAxis*>(chart.view()->chart()->axes(Qt::Horizontal).value(0));
    QVERIFY(ax);
    QVERIFY2(tickSpacing(chart) >= widestLabel(ax),
             qPrintable(QString("%1 px between ticks, labels %2 px").arg(tickSpacing(chart)).arg(widestLabel(ax))));

    views::ChartPanel frac("f", "x", "y");
    frac.resize(300, 300);
    frac.show();
    frac.setSeries("a", {{0.000123, 1}, {12345.678, 2}});
    frac.flush();
    QCoreApplication::processEvents();
    frac.flush();
    auto* fx = qobject_cast<QValueAxis*>(frac.view()->chart()->axes(Qt::Horizontal).value(0));
    QVERIFY2(tickSpacing(frac) >= widestLabel(fx),
             qPrintable(QString("%1 px between ticks, labels %2 px").arg(tickSpacing(frac)).arg(widestLabel(fx))));
    frac.resize(200, 300); // narrower: the axis is fitted again
    QCoreApplication::processEvents();
    QTest::qWait(100);
    frac.flush();
    QVERIFY2(tickSpacing(frac) >= widestLabel(fx),
             qPrintable(QString("%1 px between ticks, labels %2 px").arg(tickSpacing(frac)).arg(widestLabel(fx))));
}

// GSRQ and KM-RQ at the same bits with nearly the same perplexity: drawn side by side (no drawn point
// of one at the place of the other's), within a few percent of the x axis of their bits; the data
// (points(), the CSV) keep the bits as given. On a log axis the same, as a ratio.
void TestCharts::seriesAtTheSameBitsAreDrawnSideBySide()
{
    for (bool logX : {false, true}) {
        views::ChartPanel chart("c", "bits", "perplexity");
        chart.setLogX(logX);
        chart.setDodge(true);
        const QList<QPointF> km{{0.375, 120}, {1, 95}, {2, 80}};
        const QList<QPointF> gsrq{{0.375, 119.5}, {1, 94.8}, {2, 80}};
        chart.setSeries("km-rq", km);
        chart.setSeries("gsrq", gsrq);
        chart.setSeries("FP32 74", {{0.3, 74}, {2.5, 74}});
        chart.setReference("FP32 74");
        chart.flush();
        QCOMPARE(chart.points("km-rq"), km);
        QCOMPARE(chart.points("gsrq"), gsrq);
        const auto a = chart.drawnPoints("km-rq"), b = chart.drawnPoints("gsrq");
        QCOMPARE(a.size(), 3);
        for (int i = 0; i < 3; ++i) {
            QVERIFY2(a[i].x() != b[i].x(), qPrintable(QString("point %1 at %2").arg(i).arg(a[i].x())));
            // Close to its bits: within 5% of the span (log: of the octaves) either way.
            const double off = logX ? std::abs(std::log2(a[i].x() / km[i].x())) / std::log2(2 / 0.375)
                                    : std::abs(a[i].x() - km[i].x()) / (2 - 0.375);
            QVERIFY2(off > 0 && off < 0.05, qPrintable(QString::number(off)));
        }
        // The reference is not moved: drawn across the whole x axis as fitted, at its own y.
        const auto ref = chart.drawnPoints("FP32 74");
        auto* ax = chart.view()->chart()->axes(Qt::Horizontal).value(0);
        const double axMin = logX ? qobject_cast<QLogValueAxis*>(ax)->min() : qobject_cast<QValueAxis*>(ax)->min();
        const double axMax = logX ? qobject_cast<QLogValueAxis*>(ax)->max() : qobject_cast<QValueAxis*>(ax)->max();
        QCOMPARE(ref, QList<QPointF>({{axMin, 74}, {axMax, 74}}));
        const QString csv = m_dir.filePath("dodge.csv");
        QVERIFY(chart.exportCsv(csv));
        QFile f(csv);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.readAll().contains("\"gsrq\",0.375,119.5\n"));
    }
}

// Perplexities of 74 to 120 and a 1-bit KIVI's 76,531: the axis is fitted to the others (it ends
// below 200, where it reached past 76,531 and flattened them), KIVI's point is drawn at its top, and
// a line under the title names it with its value; its data keep the value. Off, the axis has it all.
void TestCharts::outliersAreNamedAboveTheAxis()
{
    views::ChartPanel chart("c", "bits", "perplexity");
    chart.resize(600, 400);
    chart.show();
    chart.setClipOutliers(true);
    chart.setSeries("gsrq", {{0.375, 120}, {1, 92}, {2, 80}});
    chart.setSeries("km-rq", {{0.375, 118}, {1, 95}, {2, 81}});
    chart.setSeries("kivi", {{1, 76531}, {2, 74.9}});
    chart.flush();
    auto* y = qobject_cast<QValueAxis*>(chart.view()->chart()->axes(Qt::Vertical).value(0));
    QVERIFY(y);
    QVERIFY2(y->max() < 200, qPrintable(QString::number(y->max())));
    QCOMPARE(chart.clippedPoints(), QStringList{"kivi at 1: 7.653e+04"});
    QCOMPARE(chart.drawnPoints("kivi")[0].y(), y->max());
    QCOMPARE(chart.points("kivi")[0].y(), 76531.0);
    // Named under the title (the exports draw it too); the title as set is unchanged.
    QVERIFY(chart.view()->chart()->title().contains("Above the axis: kivi at 1: 7.653e+04"));
    QCOMPARE(chart.title(), QString("c"));
    chart.setClipOutliers(false);
    chart.flush();
    QVERIFY(y->max() >= 76531);
    QVERIFY(chart.clippedPoints().isEmpty());
    QCOMPARE(chart.view()->chart()->title(), QString("c"));
}

void TestCharts::outlierCutNeedsAClearGap()
{
    // A ratio of 10 on a log scale; at most a quarter of the values above the cut (here 1 of 5).
    QCOMPARE(views::outlierCut({70, 80, 90, 100, 76531}, true), std::optional<double>(100));
    QCOMPARE(views::outlierCut({70, 80, 90, 100, 900}, true), std::nullopt); // ×9: not a decade
    // Two values far out of eight: both above the cut, the lowest cut that qualifies.
    QCOMPARE(views::outlierCut({70, 72, 75, 80, 85, 100, 9000, 76531}, true), std::optional<double>(100));
    // Linear: a jump of ten times the span below it, and at least half the value below it.
    QCOMPARE(views::outlierCut({1, 1, 1, 1.01}, false), std::nullopt);
    QCOMPARE(views::outlierCut({0.5, 0.52, 0.55, 0.6, 9}, false), std::optional<double>(0.6));
    QCOMPARE(views::outlierCut({1, 2}, true), std::nullopt); // too few to call one out
}

// The model page's maps on a 30-layer model (SmolLM2's): at the map's minimum size every layer is
// labelled, each label a whole line of text tall (no "laver" with its descender cut off), as wide as
// its text, and no two labels overlap. Squeezed below that, every n-th layer is labelled, still whole
// and apart.
void TestCharts::heatmapLabelsEveryLayerOfADeepModel()
{
    views::HeatmapView map("NMSE");
    QStringList rows;
    for (int l = 0; l < 30; ++l)
        rows << QStringLiteral("layer %1").arg(l);
    map.setGrid(rows, {"key", "value"}, {});
    map.resize(360, map.minimumSizeHint().height());
    map.show();
    const QFontMetrics fm(map.font());
    const auto check = [&](const QList<int>& labelled) {
        for (int i = 0; i < labelled.size(); ++i) {
            const QRect r = map.rowLabelRect(labelled[i]);
            QVERIFY2(r.height() >= fm.height(), qPrintable(QString("row %1: %2 px").arg(labelled[i]).arg(r.height())));
            QVERIFY(r.width() >= fm.horizontalAdvance(rows[labelled[i]]));
            if (i > 0)
                QVERIFY2(!r.intersects(map.rowLabelRect(labelled[i - 1])), qPrintable(rows[labelled[i]]));
        }
    };
    QList<int> every;
    for (int l = 0; l < 30; ++l)
        every << l;
    QCOMPARE(map.labelledRows(), every);
    check(map.labelledRows());
    map.resize(360, 260);
    const auto some = map.labelledRows();
    QVERIFY(some.size() < 30 && some.size() >= 5);
    check(some);
}

// A zoomed chart made narrower keeps the user's zoom (the ticks refit on a new width must not fit
// the axes to the data again).
void TestCharts::zoomSurvivesAResize()
{
    views::ChartPanel chart("z", "x", "y");
    chart.resize(600, 400);
    chart.show();
    QList<QPointF> pts;
    for (int i = 0; i <= 100; ++i)
        pts << QPointF(i, i * i);
    chart.setSeries("s", pts);
    chart.flush();
    QTest::qWait(100); // the first layout's refit lands before the user zooms
    auto* ax = qobject_cast<QValueAxis*>(chart.view()->chart()->axes(Qt::Horizontal).value(0));
    const QRectF area = chart.view()->chart()->plotArea();
    chart.view()->chart()->zoomIn(QRectF(area.left(), area.top(), area.width() / 4, area.height()));
    const double zoomedMax = ax->max();
    QVERIFY(zoomedMax < 50);
    chart.resize(420, 400);
    QCoreApplication::processEvents();
    QTest::qWait(100); // a pending redraw would have run
    QCOMPARE(ax->max(), zoomedMax);
}

QTEST_MAIN(TestCharts)
#include "tst_charts.moc"
