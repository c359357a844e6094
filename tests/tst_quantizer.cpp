// The residual quantizer: BPA arithmetic, a two-stage case by hand, stages never adding error,
// beam against greedy, joint refinement (the weighted objective never rising, the best held-out round
// kept, the form and file of refined codebooks), the codebooks file (round trip, merge, version checks, the NumPy
// decoder), RoPE against a direct computation, and attention fidelity.

#include "core/base/error.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/quantizer.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "core/io/synth.h"
#include "core/jobs/train_job.h"
#include "core/lm/attention.h"
#include "core/lm/rope.h"
#include "test_util.h"

#include <QProcess>
#include <QtTest>

#include <algorithm>
#include <complex>

using namespace gsrq;

class TestQuantizer : public QObject {
    Q_OBJECT

private slots:
    void bpaArithmetic();
    void settingsAreValidated();
    void twoStagesByHand();
    void stagesNeverIncreaseTrainingError_data();
    void stagesNeverIncreaseTrainingError();
    void beamIsAtLeastAsGoodAsGreedy();
    void beamTrainingRunsOnEveryBeam();
    void gskmRqBeatsKmRqAtOneBit();
    void gskmRqNearTheShannonBound();
    void holdoutIsASeededRandomSubset();
    void trainingCodesAreTheGreedyEncoding();
    void exportImportReconstructsIdentically();
    void refinementNeverRaisesTheWeightedObjective_data();
    void refinementNeverRaisesTheWeightedObjective();
    void refinementKeepsTheBestHeldOutRound();
    void refinedCodebooksKeepTheirFormAndFile();
    void mergeJoinsAndRefusesMismatches();
    void otherFormatVersionRefused();
    void numpyDecoderMatches();
    void ropeMatchesComplexRotation();
    void attentionExactIsPerfect();
};

void TestQuantizer::bpaArithmetic()
{
    QCOMPARE(bitsPerActivation(128, 16, 256), 1.0);
    QCOMPARE(bitsPerActivation(128, 12, 256), 0.75);
    QCOMPARE(bitsPerActivation(256, 12, 256), 0.375);
    QCOMPARE(paperBpa(2)->stages, 32);
    QCOMPARE(paperBpa(0.375)->dim, 256);
    QVERIFY(!paperBpa(0.5));
    const auto s = suggestBpa(1, 32);
    QVERIFY(!s.empty());
    for (const auto& c : s) {
        QCOMPARE(32 % c.dim, 0);
        QCOMPARE(bitsPerActivation(c.dim, c.stages, c.k), 1.0);
    }
    QVERIFY(suggestBpa(0.3, 7).empty()); // D = 1 or 7 would need R·log2(K) = 0.3 or 2.1
}

void TestQuantizer::settingsAreValidated()
{
    RqSettings s;
    s.dim = 4;
    s.stages = 2;
    s.k = 6; // not a power of two
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 100, 8));
    s.k = 8;
    validateRq(s, 100, 8);
    s.dim = 3;
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 100, 8));
    s.dim = 4;
    s.beam = 0;
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 100, 8));
    s.beam = 1;
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 4, 8)); // K > rows
    s.refine = -1;
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 100, 8));
    s.refine = 2;
    s.refineBeam = 300;
    QVERIFY_THROWS_EXCEPTION(Error, validateRq(s, 100, 8));
    s.refineBeam = 0;
    validateRq(s, 100, 8);
}

void TestQuantizer::twoStagesByHand()
{
    // 1-D values −3, −1, 1, 3 (eight copies each), K = 2: stage 1 finds ±2, its residuals are
    // ±1, and stage 2 finds ±1, so two stages reconstruct every value exactly.
    MatrixRF X(32, 1);
    const float v[4] = {-3, -1, 1, 3};
    for (int i = 0; i < 32; ++i)
        X(i, 0) = v[i % 4];
    auto be = makeCpuBackend(1);
    RqSettings s;
    s.stages = 2;
    s.k = 2;
    s.method = Method::KMeans;
    // K-means can stop in a poor local optimum from a poor start (e.g. seeds 1 and 3 give
    // centroids −1 and 3), so pick the seed whose starts make the hand derivation hold: stage 1
    // starts from −3 and 3, stage 2 (seeded seed + 7919) from residuals of opposite signs.
    auto value = [&](std::int64_t row) { return X(row, 0); };
    auto residual = [&](std::int64_t row) { return value(row) - (value(row) < 0 ? -2.0f : 2.0f); };
    for (s.seed = 0;; ++s.seed) {
        const auto a = sampleRows(32, 2, s.seed), b = sampleRows(32, 2, s.seed + 7919);
        if (std::abs(value(a[0])) == 3 && value(a[0]) == -value(a[1]) && residual(b[0]) == -residual(b[1]))
            break;
    }
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    auto sorted = [](Eigen::Map<const MatrixRF> b) {
        std::vector<float> c{b(0, 0), b(1, 0)};
        std::sort(c.begin(), c.end());
        return c;
    };
    const Codebooks& cb = r.codebooks;
    QCOMPARE(sorted(cb.book(0, 0)), (std::vector<float>{-2, 2}));
    QCOMPARE(sorted(cb.book(0, 1)), (std::vector<float>{-1, 1}));
    QCOMPARE(r.afterStage.size(), size_t(2));
    QCOMPARE(r.afterStage[0].mse, 1.0); // each residual is ±1
    QCOMPARE(r.afterStage[1].mse, 0.0);
    QCOMPARE(decode(r.codes, cb), X);
}

void TestQuantizer::stagesNeverIncreaseTrainingError_data()
{
    QTest::addColumn<int>("method");
    QTest::newRow("km") << int(Method::KMeans);
    QTest::newRow("gskm") << int(Method::GainShape);
}

void TestQuantizer::stagesNeverIncreaseTrainingError()
{
    // Each stage subtracts, per cluster, either the members' mean (KM) or their optimal gain on a
    // shape (GSKM): both remove energy (Pythagoras), and re-assigning to the nearest codeword can
    // only remove more. 1e-6 relative absorbs float rounding.
    QFETCH(int, method);
    const MatrixRF X = test::randomRows(3000, 16, 31);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 8;
    s.stages = 6;
    s.k = 16;
    s.method = Method(method);
    s.iterations = 15;
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    QCOMPARE(r.afterStage.size(), size_t(6));
    QCOMPARE(r.clusterings.size(), size_t(12)); // 2 subspaces × 6 stages
    for (std::size_t i = 1; i < r.afterStage.size(); ++i)
        QVERIFY2(r.afterStage[i].mse <= r.afterStage[i - 1].mse * (1 + 1e-6),
                 qPrintable(QString("stage %1").arg(i + 1)));
    QVERIFY(r.afterStage.back().nmse < 0.5 * r.afterStage.front().nmse);
    // The reported metrics are those of the codes' reconstruction.
    const auto m = computeMetrics(X, decode(r.codes, r.codebooks));
    QVERIFY(std::abs(m.mse - r.metrics.mse) <= 1e-9 * m.mse);
}

void TestQuantizer::beamIsAtLeastAsGoodAsGreedy()
{
    const MatrixRF X = test::randomRows(1500, 8, 41);
    const MatrixRF H = test::randomRows(500, 8, 42);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.stages = 4;
    s.k = 16;
    s.method = Method::KMeans;
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    const auto greedy = computeMetrics(H, decode(encode(H, r.codebooks, 1, *be), r.codebooks));
    const auto beam = computeMetrics(H, decode(encode(H, r.codebooks, 8, *be), r.codebooks));
    // Beam search keeps the greedy path among its candidates at the first stage and ranks every
    // later extension by exact error, so on average it cannot lose; on 4 stages it wins clearly.
    QVERIFY2(beam.mse < greedy.mse, qPrintable(QString("%1 vs %2").arg(beam.mse).arg(greedy.mse)));
    // Training with the beam extends the beams by each stage: its training error is no worse either,
    // training the stages on every beam's residual or on the best beam's.
    s.beam = 8;
    for (bool all : {true, false}) {
        s.trainOnAllBeams = all;
        const auto rb = trainResidualQuantizer(X, nullptr, s, *be);
        QVERIFY(rb.metrics.mse <= r.metrics.mse * 1.02); // different codebooks; allow 2% of training noise
    }
}

// With a beam, each stage's K-means runs on every row's surviving beams (N·min(B, K^r) rows from the
// second stage on: the first pass's "changed" counts every row it labels) or on each row's best beam
// (N rows); either way the training's codes are the beam search's with the final codebooks, and its
// stage metrics those codes' reconstruction, with and without row weights.
void TestQuantizer::beamTrainingRunsOnEveryBeam()
{
    const MatrixRF X = test::randomRows(600, 8, 51);
    std::vector<float> w(600);
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = 0.5f + float(i % 7);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.stages = 3;
    s.k = 4;
    s.beam = 3;
    s.iterations = 5;
    s.method = Method::KMeans;
    for (bool all : {true, false}) {
        s.trainOnAllBeams = all;
        for (const float* weights : {static_cast<const float*>(nullptr), static_cast<const float*>(w.data())}) {
            const auto r = trainResidualQuantizer(X, weights, s, *be);
            QCOMPARE(r.clusterings.size(), std::size_t(3));
            for (const auto& c : r.clusterings) {
                const std::int64_t beams = c.stage == 0 || !all ? 1 : 3; // min(B, K^r): 1, then 3
                QCOMPARE(c.history.front().changed, 600 * beams);
            }
            const Codes again = encode(X, r.codebooks, 3, *be);
            QVERIFY(again == r.codes);
            const auto m = computeMetrics(X, decode(r.codes, r.codebooks));
            QVERIFY(std::abs(m.mse - r.metrics.mse) <= 1e-9 * m.mse);
            QCOMPARE(r.afterStage.size(), std::size_t(3));
            QVERIFY(r.afterStage[2].mse < r.afterStage[0].mse);
        }
    }
}

namespace {

// Held-out NMSE of codebooks trained on the first `train` rows of X, on the rows after them.
double heldOutNmse(const MatrixRF& X, Eigen::Index train, const RqSettings& s, ClusterBackend& be)
{
    const MatrixRF T = X.topRows(train);
    const MatrixRF H = X.bottomRows(X.rows() - train);
    const auto r = trainResidualQuantizer(T, nullptr, s, be);
    return computeMetrics(H, decode(encode(H, r.codebooks, s.beam, be), r.codebooks)).nmse;
}

} // namespace

void TestQuantizer::gskmRqBeatsKmRqAtOneBit()
{
    // 1 bit per activation on synthetic i.i.d. Gaussian rows: D = 64, R = 8, K = 256, 10,000
    // training rows, 4,000 held out. Each stage starts from fresh rows; KM's means shrink and
    // its later stages fit the training rows' noise, GSKM's do not. Measured with data seeds 2,
    // 12, 13, 14: GSKM-RQ 0.3638-0.3650, KM-RQ 0.435-0.458, so GSKM-RQ is 16-20% below; the test
    // asks for 12%.
    const MatrixRF X = synthesize(SynthKind::Gaussian, 14000, 64, 2);
    auto be = makeCpuBackend(0);
    RqSettings s;
    s.dim = 64;
    s.stages = 8;
    s.k = 256;
    s.method = Method::KMeans;
    const double km = heldOutNmse(X, 10000, s, *be);
    s.method = Method::GainShape;
    const double gskm = heldOutNmse(X, 10000, s, *be);
    QVERIFY2(gskm <= 0.88 * km, qPrintable(QString("held-out NMSE: GSKM-RQ %1, KM-RQ %2").arg(gskm).arg(km)));
}

void TestQuantizer::gskmRqNearTheShannonBound()
{
    // At 1 bit per dimension no quantizer of an i.i.d. Gaussian source gets below NMSE 2^-2 = 0.25
    // (the distortion-rate bound σ²·2^(−2·BPA)). GSKM-RQ at the paper's 1 BPA (D = 128, R = 16,
    // K = 256) on 20,000 synthetic training rows, held-out NMSE on 4,000 more: measured
    // 0.3662-0.3670 (1.47×) with data seeds 3, 12, 13, 14; the limit is 1.5× = 0.375. KM-RQ
    // measures 0.61 here.
    const MatrixRF X = synthesize(SynthKind::Gaussian, 24000, 128, 3);
    auto be = makeCpuBackend(0);
    RqSettings s;
    s.dim = 128;
    s.stages = 16;
    s.k = 256;
    s.method = Method::GainShape;
    const double shannon = std::exp2(-2.0 * bitsPerActivation(s.dim, s.stages, s.k));
    QCOMPARE(shannon, 0.25);
    const double gskm = heldOutNmse(X, 20000, s, *be);
    QVERIFY2(gskm <= 1.5 * shannon, qPrintable(QString("held-out NMSE %1, bound %2").arg(gskm).arg(shannon)));
    QVERIFY(gskm > shannon); // a held-out figure below the bound would mean a broken measurement
}

void TestQuantizer::holdoutIsASeededRandomSubset()
{
    // A quarter of 1,000 rows: 750 train, 250 held out, disjoint, covering, ascending.
    const auto a = splitHoldout(1000, 0.25, false, 3);
    QCOMPARE(a.train.size(), std::size_t(750));
    QCOMPARE(a.heldout.size(), std::size_t(250));
    std::vector<Eigen::Index> all(a.train);
    all.insert(all.end(), a.heldout.begin(), a.heldout.end());
    std::sort(all.begin(), all.end());
    for (Eigen::Index i = 0; i < 1000; ++i)
        QCOMPARE(all[std::size_t(i)], i);
    QVERIFY(std::is_sorted(a.heldout.begin(), a.heldout.end()));
    // Spread over the dump, not its end: about half of the held-out rows lie in the first half
    // (binomial, n = 250: 125 ± 8 for one σ; 90 is over 4σ below).
    const auto firstHalf = std::count_if(a.heldout.begin(), a.heldout.end(), [](Eigen::Index i) { return i < 500; });
    QVERIFY2(firstHalf > 90 && firstHalf < 160, qPrintable(QString::number(firstHalf)));
    QVERIFY(splitHoldout(1000, 0.25, false, 3).heldout == a.heldout); // seeded
    QVERIFY(splitHoldout(1000, 0.25, false, 4).heldout != a.heldout);
    // --holdout-tail: the last rows, as before.
    const auto t = splitHoldout(1000, 0.25, true, 3);
    QCOMPARE(t.heldout.front(), Eigen::Index(750));
    QCOMPARE(t.heldout.back(), Eigen::Index(999));
    QVERIFY(splitHoldout(1000, 0, false, 3).heldout.empty());
}

void TestQuantizer::trainingCodesAreTheGreedyEncoding()
{
    const MatrixRF X = test::randomRows(1000, 12, 43);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 4;
    s.stages = 3;
    s.k = 8;
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    const Codes again = encode(X, r.codebooks, 1, *be);
    QCOMPARE(int((again.array() != r.codes.array()).count()), 0);
    // 1,000 rows: the codes are gathered 64 rows at a time, so the last tile is partial; every column
    // must hold its own clustering's labels (a column swapped or shifted would not match the encoding).
    QVERIFY((r.codes.array() > 0).count() > 0);

    // Cancelled in the second stage: the first stage's codes are kept and the rest are zeros (the
    // encoding of one stage), none half-written.
    const auto cancelled =
        trainResidualQuantizer(X, nullptr, s, *be, [](const ProgressEvent& e) { return e.stage < 1; });
    QVERIFY(cancelled.cancelled);
    const Codes oneStage = encode(X, cancelled.codebooks, 1, *be, 1);
    QCOMPARE(int((oneStage.array() != cancelled.codes.array()).count()), 0);
    QVERIFY((oneStage.col(0).array() > 0).count() > 0);
    QCOMPARE(int((oneStage.col(1).array() != 0).count()), 0);
}

void TestQuantizer::exportImportReconstructsIdentically()
{
    const MatrixRF X = test::randomRows(800, 16, 44);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 8;
    s.stages = 2;
    s.k = 512; // codes above 255: U16
    s.iterations = 3;
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    QTemporaryDir dir;
    CodebookFile f;
    f.metadata = {{"dim", "8"}, {"stages", "2"}, {"k", "512"}, {"method", "gskm"}};
    f.entries.push_back({"layers.0.value", r.codebooks, r.codes});
    for (DType dt : {DType::F32, DType::F16}) {
        const auto path = test::pathIn(dir, dt == DType::F32 ? "f32.safetensors" : "f16.safetensors");
        writeCodebookFile(path, f, dt);
        const auto g = readCodebookFile(path);
        const auto& e = *g.find("layers.0.value");
        QCOMPARE(e.codes->rows(), 800);
        QCOMPARE(int((e.codes->array() != r.codes.array()).count()), 0);
        const MatrixRF a = decode(r.codes, r.codebooks), b = decode(*e.codes, e.codebooks);
        if (dt == DType::F32)
            QCOMPARE(a, b); // identical
        else                // two F16-rounded codewords summed: within 2 × 2^-11 of the largest magnitude
            QVERIFY((a - b).cwiseAbs().maxCoeff() <= 2 * std::ldexp(1.0f, -11) * a.cwiseAbs().maxCoeff() * 2);
        QCOMPARE(g.metadata.at("format"), std::string(kCodebookFormat));
    }
}

void TestQuantizer::refinementNeverRaisesTheWeightedObjective_data()
{
    QTest::addColumn<int>("method");
    QTest::addColumn<bool>("strided");
    QTest::addColumn<int>("beam");
    QTest::newRow("gskm, greedy re-encode") << int(Method::GainShape) << false << 1;
    QTest::newRow("km, beam 4") << int(Method::KMeans) << false << 4;
    QTest::newRow("km, strided subspaces") << int(Method::KMeans) << true << 1;
}

void TestQuantizer::refinementNeverRaisesTheWeightedObjective()
{
    // Each round solves the least-squares codewords for the codes it has (the old codewords are one
    // candidate), so the solve itself must lower the weighted objective or leave it: the round
    // reverts an update that raised it, and none may have needed to (a wrong solve would). The
    // re-encode keeps a row's new codes only where they lower its error; 1e-9 relative allows for
    // the objective's float sums.
    QFETCH(int, method);
    QFETCH(bool, strided);
    QFETCH(int, beam);
    const MatrixRF X = test::randomRows(900, 16, 51);
    std::vector<float> w(900);
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = 0.2f + float((i * 7919) % 13) / 4.f; // uneven, positive
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 8;
    s.stages = 3;
    s.k = 16;
    s.iterations = 10;
    s.method = Method(method);
    s.stridedGroups = strided;
    s.refine = 4;
    s.refineBeam = beam;
    const auto r = trainResidualQuantizer(X, w.data(), s, *be);
    QCOMPARE(int(r.refinement.size()), 4);
    QCOMPARE(r.keptRound, 4); // no held-out rows: the last round
    QCOMPARE(r.codebooks.order.empty(), !strided);
    Codes greedy = r.codes;
    double previous = r.objectiveBeforeRefine;
    for (const auto& rr : r.refinement) {
        QVERIFY2(!rr.updateReverted, qPrintable(QString("round %1's solve raised the objective").arg(rr.round)));
        QVERIFY2(rr.objectiveAfterUpdate <= previous * (1 + 1e-9),
                 qPrintable(
                     QString("round %1 update: %2 after %3").arg(rr.round).arg(rr.objectiveAfterUpdate).arg(previous)));
        QVERIFY(rr.objective <= rr.objectiveAfterUpdate * (1 + 1e-9));
        previous = rr.objective;
    }
    // The first round's update alone lowers it (the greedy stages never fitted stage 0 to what the
    // later stages express), and the kept result is the last round's.
    QVERIFY(r.refinement.front().objectiveAfterUpdate < r.objectiveBeforeRefine * 0.999);
    QCOMPARE(weightedObjective(X, w.data(), r.codes, r.codebooks), r.refinement.back().objective);
    QCOMPARE(r.metrics.nmse, computeMetrics(X, decode(r.codes, r.codebooks)).nmse);
}

void TestQuantizer::refinementKeepsTheBestHeldOutRound()
{
    // Few rows per codeword: the joint fit lowers the training error and raises the held-out error
    // (it over-fits), so the round kept is the one with the lowest held-out NMSE, the greedy stages'
    // (round 0) included, and the result's codebooks, codes and metrics are that round's.
    const MatrixRF X = test::randomRows(400, 8, 52), H = test::randomRows(400, 8, 53);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 8;
    s.stages = 4;
    s.k = 32;
    s.iterations = 10;
    s.refine = 3;
    std::vector<double> seen;
    const HeldoutFn heldout = [&](const Codebooks& cb) {
        const QuantMetrics m = computeMetrics(H, decode(encode(H, cb, 1, *be), cb));
        seen.push_back(m.nmse);
        return m;
    };
    const auto r = trainResidualQuantizer(X, nullptr, s, *be, {}, heldout);
    QCOMPARE(int(seen.size()), 4); // the greedy stages', then each round's
    QVERIFY(r.heldoutBeforeRefine.has_value());
    QCOMPARE(r.heldoutBeforeRefine->nmse, seen[0]);
    const int best = int(std::min_element(seen.begin(), seen.end()) - seen.begin());
    QCOMPARE(r.keptRound, best);
    QVERIFY2(r.keptRound < 3, "the data over-fit: a round before the last is kept, restored after the last ran");
    QCOMPARE(computeMetrics(H, decode(encode(H, r.codebooks, 1, *be), r.codebooks)).nmse, seen[std::size_t(best)]);
    QVERIFY(r.refinement.back().train.nmse < r.afterStage.back().nmse); // the training error did fall
}

void TestQuantizer::refinedCodebooksKeepTheirFormAndFile()
{
    // GSKM's codewords are a gain times a unit shape, one gain per codeword, and the file stores each
    // as that product, one vector; refined codewords are stored the same way (their gain is their
    // norm), so the form holds by representation. What is checked: refinement moved the codewords
    // (it is not a no-op on GSKM's), and the refined ones go through the codebooks file and the
    // NumPy decoder's arithmetic (Σ of the stored codewords) exactly as decode() reads them.
    const MatrixRF X = test::randomRows(700, 16, 54);
    auto be = makeCpuBackend(2);
    RqSettings s;
    s.dim = 16;
    s.stages = 3;
    s.k = 16;
    s.iterations = 8;
    s.method = Method::GainShape;
    s.refine = 2;
    const auto r = trainResidualQuantizer(X, nullptr, s, *be);
    RqSettings greedy = s;
    greedy.refine = 0;
    const auto unrefined = trainResidualQuantizer(X, nullptr, greedy, *be);
    QVERIFY(r.codebooks.data != unrefined.codebooks.data);
    QVERIFY(r.metrics.nmse < unrefined.metrics.nmse);
    QVERIFY(std::all_of(r.codebooks.data.begin(), r.codebooks.data.end(), [](float v) { return std::isfinite(v); }));
    QTemporaryDir dir;
    CodebookFile f;
    f.metadata = {{"dim", "16"}, {"stages", "3"}, {"k", "16"}, {"method", "gskm"}};
    f.entries.push_back({"layers.0.key", r.codebooks, r.codes});
    const auto path = test::pathIn(dir, "refined.safetensors");
    writeCodebookFile(path, f, DType::F32);
    const auto g = readCodebookFile(path);
    const auto& e = *g.find("layers.0.key");
    QCOMPARE(decode(*e.codes, e.codebooks), decode(r.codes, r.codebooks));
    MatrixRF byHand = MatrixRF::Zero(700, 16);
    for (Eigen::Index i = 0; i < 700; ++i)
        for (int st = 0; st < 3; ++st)
            byHand.row(i) += e.codebooks.book(0, st).row((*e.codes)(i, st));
    QVERIFY((byHand - decode(r.codes, r.codebooks)).cwiseAbs().maxCoeff() < 1e-6f);
}

void TestQuantizer::mergeJoinsAndRefusesMismatches()
{
    QTemporaryDir dir;
    Codebooks cb;
    cb.allocate(4, 2, 4, 2);
    CodebookFile a, b;
    a.metadata = b.metadata = {{"dim", "4"}, {"stages", "2"}, {"k", "4"}, {"method", "gskm"}, {"source_sha256", "x"}};
    a.entries.push_back({"layers.0.key", cb, {}});
    b.entries.push_back({"layers.1.key", cb, {}});
    const auto pa = test::pathIn(dir, "a.safetensors"), pb = test::pathIn(dir, "b.safetensors");
    writeCodebookFile(pa, a, DType::F32);
    writeCodebookFile(pb, b, DType::F32);
    const auto m = mergeCodebookFiles({pa, pb});
    QCOMPARE(m.entries.size(), size_t(2));
    QVERIFY(m.find("layers.1.key"));

    QVERIFY_THROWS_EXCEPTION(Error, mergeCodebookFiles({pa, pa})); // the same tensor twice
    b.metadata["method"] = "km";
    writeCodebookFile(pb, b, DType::F32);
    try {
        mergeCodebookFiles({pa, pb});
        QFAIL("different methods must not merge");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("method") != std::string::npos, e.what());
    }
}

void TestQuantizer::otherFormatVersionRefused()
{
    QTemporaryDir dir;
    Codebooks cb;
    cb.allocate(2, 1, 2, 1);
    const auto path = test::pathIn(dir, "v3.safetensors");
    writeSafetensors(
        path, {makeFloatBlob("x.codebooks", MatrixRF::Zero(1, 4), DType::F32, {1, 1, 2, 2})},
        {{"format", "gsrq-codebooks"}, {"format_version", "3"}, {"dim", "2"}, {"stages", "1"}, {"k", "2"}});
    try {
        readCodebookFile(path);
        QFAIL("version 3 must be refused");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("version 3") != std::string::npos, e.what());
    }
    writeSafetensors(path, {makeFloatBlob("x", MatrixRF::Zero(1, 4), DType::F32)});
    QVERIFY_THROWS_EXCEPTION(Error, readCodebookFile(path)); // a dump is not a codebooks file
}

void TestQuantizer::numpyDecoderMatches()
{
    QString python;
    for (const QString& candidate : {QStringLiteral("python3"), QStringLiteral("/usr/bin/python3")}) {
        QProcess p;
        p.start(candidate, {"-c", "import numpy"});
        if (p.waitForFinished(30000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0) {
            python = candidate;
            break;
        }
    }
    if (python.isEmpty())
        QSKIP("no Python with NumPy found (python3-numpy); the decoder in docs/ was not run");
    const MatrixRF X = test::randomRows(300, 8, 45);
    auto be = makeCpuBackend(2);
    // Contiguous subspaces, and strided ones whose file carries the order (format version 2).
    for (bool strided : {false, true}) {
        RqSettings s;
        s.dim = 4;
        s.stages = 3;
        s.k = 16;
        s.stridedGroups = strided;
        const auto r = trainResidualQuantizer(X, nullptr, s, *be);
        QCOMPARE(r.codebooks.order.empty(), !strided);
        QTemporaryDir dir;
        CodebookFile f;
        f.metadata = {{"dim", "4"}, {"stages", "3"}, {"k", "16"}};
        f.entries.push_back({"layers.3.value", r.codebooks, r.codes});
        const auto cbPath = test::pathIn(dir, "cb.safetensors"), outPath = test::pathIn(dir, "xhat.npy");
        writeCodebookFile(cbPath, f, DType::F16);
        QProcess p;
        p.start(python, {GSRQ_SOURCE_DIR "/docs/gsrq_decode.py", QString::fromStdString(cbPath), "layers.3.value",
                         QString::fromStdString(outPath)});
        QVERIFY(p.waitForFinished(60000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const MatrixRF py = toMatrix(readNpy(outPath));
        const auto g = readCodebookFile(cbPath);
        QCOMPARE(g.metadata.at("format_version"), std::string(strided ? "2" : "1"));
        const MatrixRF cpp = decode(*g.find("layers.3.value")->codes, g.find("layers.3.value")->codebooks);
        QCOMPARE(py.rows(), cpp.rows());
        // The same F16 codewords summed in float32 in the same order: equal to float rounding.
        QVERIFY((py - cpp).cwiseAbs().maxCoeff() <= 1e-6f * cpp.cwiseAbs().maxCoeff());
        // And both are the rows' reconstruction in the data's order (NMSE well below 1 at 12 bits/row).
        QVERIFY((cpp - X).squaredNorm() < 0.5 * X.squaredNorm());
    }
}

void TestQuantizer::ropeMatchesComplexRotation()
{
    // Two heads of head_dim 4; a pair (a, b) rotated by θ is the complex number (a + ib)·e^{iθ}.
    const MatrixRF X = test::randomRows(3, 8, 46);
    const std::vector<std::int64_t> pos{0, 5, 17};
    const auto f = ropeInvFreq(10000.0, 4);
    QCOMPARE(f[1], std::pow(10000.0, -0.5));
    for (RopePairing pairing : {RopePairing::Interleaved, RopePairing::RotateHalf}) {
        const MatrixRF Y = applyRope(X, 4, pos, f, pairing);
        for (int t = 0; t < 3; ++t)
            for (int h = 0; h < 2; ++h)
                for (int i = 0; i < 2; ++i) {
                    const int i0 = h * 4 + (pairing == RopePairing::Interleaved ? 2 * i : i);
                    const int i1 = h * 4 + (pairing == RopePairing::Interleaved ? 2 * i + 1 : i + 2);
                    const std::complex<double> z(X(t, i0), X(t, i1));
                    const auto w = z * std::polar(1.0, double(pos[std::size_t(t)]) * f[std::size_t(i)]);
                    QVERIFY(std::abs(Y(t, i0) - w.real()) < 1e-5);
                    QVERIFY(std::abs(Y(t, i1) - w.imag()) < 1e-5);
                }
        QCOMPARE(Y.row(0), X.row(0)); // position 0: no rotation
    }
}

void TestQuantizer::attentionExactIsPerfect()
{
    const int N = 64, hd = 4;
    const MatrixRF q = test::randomRows(N, 4 * hd, 47), k = test::randomRows(N, 2 * hd, 48),
                   v = test::randomRows(N, 2 * hd, 49);
    AttentionInputs in;
    in.q = &q;
    in.k = &k;
    in.v = &v;
    in.kHat = &k;
    in.vHat = &v;
    in.heads = 4;
    in.kvHeads = 2;
    in.headDim = hd;
    for (int i = 0; i < N; ++i) {
        in.positions.push_back(i % 32);
        in.sequenceIds.push_back(i / 32);
    }
    const auto exact = attentionFidelity(in, 16, 0);
    QCOMPARE(exact.queries, 16);
    QCOMPARE(exact.relativeL2, 0.0);
    QCOMPARE(exact.top8Overlap, 1.0);
    const MatrixRF vNoisy = v + 0.3f * test::randomRows(N, 2 * hd, 50);
    in.vHat = &vNoisy;
    const auto noisy = attentionFidelity(in, 16, 0);
    QVERIFY(noisy.relativeL2 > 0.01);
    QCOMPARE(noisy.top8Overlap, 1.0); // keys exact: the same attention weights
}

QTEST_GUILESS_MAIN(TestQuantizer)
#include "tst_quantizer.moc"
