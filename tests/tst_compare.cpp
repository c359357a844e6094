// The compare and sweep jobs: subspace blocks, averaging, the 1st-residual experiment, progress
// and cancellation.

#include "compare_job.h"
#include "error.h"
#include "test_util.h"

#include <QtTest>

using namespace gsrq;

class TestCompare : public QObject {
    Q_OBJECT

private slots:
    void blocksAreClusteredAloneAndAveraged();
    void residualIsSmallerThanTheData();
    void progressIsMonotoneAndEndsAtOne();
    void cancelStopsTheJob();
    void sweepChecksEveryValueFirst();
    void sweepOverK();
};

void TestCompare::blocksAreClusteredAloneAndAveraged()
{
    const MatrixRF X = test::randomRows(600, 12, 2);
    auto be = makeCpuBackend(2);
    CompareSettings s;
    s.dim = 4;
    s.k = 8;
    s.iterations = 15;
    const auto r = runCompare(X, nullptr, s, *be);
    QCOMPARE(r.blocks, 3);
    for (const auto& m : r.methods) {
        QCOMPARE(m.blocks.size(), size_t(3));
        double nmse = 0;
        for (const auto& b : m.blocks)
            nmse += b.metrics.nmse;
        QVERIFY(std::abs(m.metrics.nmse - nmse / 3) < 1e-12);
    }
    // Block 1 alone equals a compare on columns 4..7 with D = 4: blocks do not see each other.
    CompareSettings one = s;
    one.dim = 0;
    const MatrixRF cols = X.middleCols(4, 4);
    const auto alone = runCompare(cols, nullptr, one, *be);
    QCOMPARE(alone.find(Method::GainShape)->metrics.mse, r.find(Method::GainShape)->blocks[1].metrics.mse);
}

void TestCompare::residualIsSmallerThanTheData()
{
    const MatrixRF X = test::randomRows(1000, 8, 3);
    auto be = makeCpuBackend(2);
    CompareSettings s;
    s.k = 16;
    s.iterations = 20;
    const auto plain = runCompare(X, nullptr, s, *be);
    s.residual = true;
    const auto res = runCompare(X, nullptr, s, *be);
    // The residual's energy is the first stage's error: the mse of quantizing it again must be
    // below the first stage's mse (a second stage of 16 codewords removes part of it).
    const double firstStageMse = plain.find(Method::KMeans)->metrics.mse;
    const double secondStageMse = res.find(Method::KMeans)->metrics.mse;
    QVERIFY(secondStageMse < firstStageMse);
    // nmse is relative to the residual: E‖r − r̂‖²/E‖r‖² = mse₂/mse₁ (same K-means first stage,
    // same seed, so the residual is exactly the one measured above).
    QVERIFY(std::abs(res.find(Method::KMeans)->metrics.nmse - secondStageMse / firstStageMse) < 1e-6);
}

void TestCompare::progressIsMonotoneAndEndsAtOne()
{
    const MatrixRF X = test::randomRows(500, 8, 4);
    auto be = makeCpuBackend(2);
    CompareSettings s;
    s.dim = 4;
    s.k = 8;
    s.iterations = 10;
    double last = 0;
    int events = 0;
    bool monotone = true;
    runCompare(X, nullptr, s, *be, [&](const ProgressEvent& e) {
        monotone = monotone && e.fraction >= last - 1e-12;
        last = e.fraction;
        ++events;
        return true;
    });
    QVERIFY(monotone);
    QVERIFY(events > 4);
    QVERIFY(last > 0.99);
}

void TestCompare::cancelStopsTheJob()
{
    const MatrixRF X = test::randomRows(2000, 16, 5);
    auto be = makeCpuBackend(2);
    CompareSettings s;
    s.dim = 4;
    s.k = 32;
    s.iterations = 50;
    int events = 0;
    const auto r = runCompare(X, nullptr, s, *be, [&](const ProgressEvent&) { return ++events < 5; });
    QVERIFY(r.cancelled);
    QCOMPARE(events, 5); // nothing ran after the cancel
    QCOMPARE(r.find(Method::KMeans)->blocks.size(), size_t(1));
    QVERIFY(r.find(Method::GainShape)->blocks.empty());
}

void TestCompare::sweepChecksEveryValueFirst()
{
    const MatrixRF X = test::randomRows(100, 12, 6);
    auto be = makeCpuBackend(1);
    CompareSettings s;
    s.k = 4;
    int events = 0;
    try {
        runSweep(X, nullptr, s, SweepAxis::Dim, {4, 6, 5}, *be, [&](const ProgressEvent&) { return ++events, true; });
        QFAIL("D = 5 does not divide 12");
    } catch (const Error& e) {
        QVERIFY(std::string(e.what()).find("--dim 5") != std::string::npos);
    }
    QCOMPARE(events, 0); // refused before any work
}

void TestCompare::sweepOverK()
{
    const MatrixRF X = test::randomRows(800, 8, 7);
    auto be = makeCpuBackend(2);
    CompareSettings s;
    s.iterations = 20;
    const auto pts = runSweep(X, nullptr, s, SweepAxis::K, {4, 16, 64}, *be);
    QCOMPARE(pts.size(), size_t(3));
    // More codewords, less error (K-means++-free seeding still nests well on 800 rows).
    for (std::size_t i = 1; i < pts.size(); ++i)
        QVERIFY(pts[i].result.find(Method::KMeans)->metrics.mse < pts[i - 1].result.find(Method::KMeans)->metrics.mse);
}

QTEST_APPLESS_MAIN(TestCompare)
#include "tst_compare.moc"
