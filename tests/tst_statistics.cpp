// The statistics every comparison's interval rests on (core/base/bootstrap.h): the quantile, the
// paired percentile bootstrap against cases whose distribution is known in closed form, and the
// refusals.
#include "core/base/bootstrap.h"
#include "core/base/error.h"
#include "test_util.h"

#include <QtTest>

#include <cmath>
#include <vector>

using namespace gsrq;

namespace {

// P(X ≤ x) for X ~ Binomial(n, p).
double binomialCdf(int n, double p, int x)
{
    double cdf = 0;
    for (int i = 0; i <= x; ++i)
        cdf += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + i * std::log(p) +
                        (n - i) * std::log1p(-p));
    return cdf;
}

// The smallest x with P(X ≤ x) ≥ q, and how far the CDF stays from q on both sides of it.
std::pair<int, double> binomialQuantile(int n, double p, double q)
{
    int x = 0;
    while (x < n && binomialCdf(n, p, x) < q)
        ++x;
    return {x, std::min(binomialCdf(n, p, x) - q, x > 0 ? q - binomialCdf(n, p, x - 1) : 1.0)};
}

} // namespace

class TestStatistics : public QObject {
    Q_OBJECT
private slots:
    void quantileInterpolatesAsNumPy();
    void bootstrapOfABinaryMeanIsBinomial();
    void deltaPercentIsThePerplexitiesRatio();
    void pairingCancelsWhatTheSequencesShare();
    void gapOfTwoMethods();
    void refusesUnpairedInput();
};

void TestStatistics::quantileInterpolatesAsNumPy()
{
    // numpy.quantile([1, 2, 3, 4], [0, 0.25, 0.5, 0.9, 1]) = [1, 1.75, 2.5, 3.7, 4].
    const std::vector<double> v{4, 1, 3, 2};
    QCOMPARE(quantile(v, 0), 1.0);
    QCOMPARE(quantile(v, 0.25), 1.75);
    QCOMPARE(quantile(v, 0.5), 2.5);
    QVERIFY(std::abs(quantile(v, 0.9) - 3.7) < 1e-12);
    QCOMPARE(quantile(v, 1), 4.0);
    QVERIFY(std::isnan(quantile({}, 0.5)));
}

// Sequences whose NLL differs from the reference by 0 or 1 nat: a replicate's mean difference is
// Binomial(n, k/n)/n, so the percentile interval's ends are known exactly. n and k are chosen so that
// the binomial's CDF steps over 0.025 and 0.975 with at least 0.007 to spare on each side: with
// 20,000 replicates the empirical CDF's standard error there is 0.0011, so the empirical quantiles
// equal the exact ones unless a 6-sigma event happens (and the seed is fixed: the run is reproducible).
void TestStatistics::bootstrapOfABinaryMeanIsBinomial()
{
    const int n = 20, k = 6;
    std::vector<double> method(n, 0), reference(n, 0), tokens(n, 100);
    for (int i = 0; i < k; ++i)
        method[std::size_t(i * 3)] = 1; // spread: the pairing must not depend on order
    const auto [xLo, spareLo] = binomialQuantile(n, double(k) / n, 0.025);
    const auto [xHi, spareHi] = binomialQuantile(n, double(k) / n, 0.975);
    QVERIFY2(spareLo > 0.007 && spareHi > 0.007, qPrintable(QString("%1 %2").arg(spareLo).arg(spareHi)));
    BootstrapSettings s;
    s.resamples = 20000;
    const Interval in = deltaPercentInterval(method, reference, tokens, s);
    const double expLo = 100 * std::expm1(double(xLo) / n), expHi = 100 * std::expm1(double(xHi) / n);
    QVERIFY2(std::abs(in.lo - expLo) < 1e-9 && std::abs(in.hi - expHi) < 1e-9,
             qPrintable(QString("[%1, %2] against [%3, %4]").arg(in.lo).arg(in.hi).arg(expLo).arg(expHi)));
    // The point estimate: 6 of 20 sequences one nat worse is exp(0.3) − 1 of perplexity.
    QVERIFY(std::abs(deltaPercent(method, reference, tokens) - 100 * std::expm1(0.3)) < 1e-12);
    // A 90% interval is inside the 95% one.
    s.level = 0.9;
    const Interval narrow = deltaPercentInterval(method, reference, tokens, s);
    QVERIFY(narrow.lo >= in.lo && narrow.hi <= in.hi && narrow.hi - narrow.lo < in.hi - in.lo);
}

void TestStatistics::deltaPercentIsThePerplexitiesRatio()
{
    // Two sequences of 3 and 1 predicted tokens: perplexity is exp of the token-weighted mean NLL.
    const std::vector<double> a{2.0, 4.0}, r{1.0, 1.0}, t{3, 1};
    const double pplA = std::exp((3 * 2.0 + 4.0) / 4), pplR = std::exp(1.0);
    QVERIFY(std::abs(deltaPercent(a, r, t) - 100 * (pplA - pplR) / pplR) < 1e-9);
    // Identical methods: Δ% 0 and a degenerate interval at 0, whatever the sequences.
    const Interval same = deltaPercentInterval(r, r, t);
    QCOMPARE(same.lo, 0.0);
    QCOMPARE(same.hi, 0.0);
}

// The paired interval sees only the methods' difference: sequences of very different difficulty
// (NLL 1 to 8) with a constant +0.01 nat give an interval of width 0 at exp(0.01) − 1, where
// unpaired resampling of each method alone would span tens of percent.
void TestStatistics::pairingCancelsWhatTheSequencesShare()
{
    std::vector<double> r, m, t;
    for (int i = 0; i < 16; ++i) {
        r.push_back(1 + 7.0 * i / 15);
        m.push_back(r.back() + 0.01);
        t.push_back(511);
    }
    const Interval in = deltaPercentInterval(m, r, t);
    QVERIFY(std::abs(in.lo - 100 * std::expm1(0.01)) < 1e-9 && std::abs(in.hi - in.lo) < 1e-9);
}

void TestStatistics::gapOfTwoMethods()
{
    // a is 0.1 nat worse than b on every sequence: the gap is exactly that in points, with a
    // degenerate interval, and it changes sign with the order.
    std::vector<double> r{2, 3, 4, 5}, b{2.1, 3.2, 4.1, 5.3}, a, t{10, 10, 10, 10};
    for (double x : b)
        a.push_back(x + 0.1);
    const Interval g = gapInterval(a, b, r, t), back = gapInterval(b, a, r, t);
    QVERIFY(g.lo > 0 && g.hi >= g.lo);
    QVERIFY(std::abs(back.lo + g.hi) < 1e-9 && std::abs(back.hi + g.lo) < 1e-9);
    // Mixed signs: a better on two sequences, worse on two by as much: the interval holds 0.
    const std::vector<double> c{2.05, 2.95, 4.05, 4.95};
    const Interval mixed = gapInterval(c, r, r, t);
    QVERIFY2(mixed.lo < 0 && mixed.hi > 0, qPrintable(QString("[%1, %2]").arg(mixed.lo).arg(mixed.hi)));
}

void TestStatistics::refusesUnpairedInput()
{
    const auto msg = test::invalidInputMessage([] { deltaPercentInterval({1, 2}, {1, 2, 3}, {1, 1, 1}); });
    QVERIFY2(msg.find("per sequence") != std::string::npos, msg.c_str());
    const auto zero = test::invalidInputMessage([] { deltaPercentInterval({1, 2}, {1, 2}, {3, 0}); });
    QVERIFY2(zero.find("positive count") != std::string::npos, zero.c_str());
    QVERIFY(std::isnan(quantile({1, std::nan(""), 2}, 0.5)));
    QVERIFY(!pairedBootstrap(0, [](const std::vector<std::size_t>&) { return 0.0; }).valid());
}

QTEST_GUILESS_MAIN(TestStatistics)
#include "tst_statistics.moc"
