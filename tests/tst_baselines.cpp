// The paper's baselines: KIVI (core/cluster/kivi.h), CQ through the product quantizer, and the
// comparison table of gsrq ppl --methods (core/jobs/method_table.h), in the engine and end to end.

#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/kivi.h"
#include "core/cluster/quantizer.h"
#include "core/decode/decode_bench.h"
#include "core/io/kv_dump.h"
#include "core/io/safetensors.h"
#include "core/jobs/method_table.h"
#include "core/jobs/run_records.h"
#include "core/store/run_store.h"
#include "test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <Eigen/Core>

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

using namespace gsrq;

namespace {

using test::gsrqRun;
using test::Run;

const QString kSample = QStringLiteral(GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors");
const QString kModel = QStringLiteral(GSRQ_SOURCE_DIR "/resources/models/stories260K/stories260K.bin");
const QString kTokenizer = QStringLiteral(GSRQ_SOURCE_DIR "/resources/models/stories260K/tok512.bin");

QJsonObject json(const Run& r)
{
    return QJsonDocument::fromJson(r.out).object();
}

float half(float v)
{
    return float(Eigen::half(v));
}

template <class F> QString invalidMessage(F&& f)
{
    try {
        f();
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::InvalidInput)
            return QString::fromUtf8(e.what());
        return QStringLiteral("runtime error: ") + QString::fromUtf8(e.what());
    }
    return QStringLiteral("no error");
}

} // namespace

class TestBaselines : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { qputenv("XDG_DATA_HOME", m_dir.filePath("xdg").toUtf8()); }
    void kiviKeysShareAChannelValuesShareATokenGroup();
    void kiviErrorWithinHalfAStepAndFallsWithBits();
    void kiviWindowAndSequences();
    void kiviRefusesBadSettings();
    void codebookFilesNamedByTheirSettings();
    void methodNames();
    void methodsTrainAsThePapersSay();
    void kiviEvalEndToEnd();
    void evalBadFlags_data();
    void evalBadFlags();
    void cqIsTheProductQuantizerWithFisherWeights();
    void emaUpdateStartsAsLloydAndZeroDecayIsLloyd();
    void stridedCodebooksRoundTrip();
    void vqllmTrainsDeterministicallyAndEvalsInItsOrder();
    void pplMethodTable();
    void pplMethodTableBadInput_data();
    void pplMethodTableBadInput();
    void runsCompareOfPplRunsShowsPerplexities();
    void runsAddPplRecordsATable();
    void quietOnEveryProgressCommand();
    void bpaPresetsFollowHeadDim();

private:
    QTemporaryDir m_dir;
    QString m_oneLayer;
};

void TestBaselines::kiviKeysShareAChannelValuesShareATokenGroup()
{
    // 4 tokens × 2 channels, 2 bits (levels 0..3), groups of 2, every range a multiple of 3 so that
    // the FP16 scale is exact.
    MatrixRF x(4, 2);
    x << 0, 10, //
        3, 40,  //
        1, 10,  //
        4, 70;
    KiviSettings s;
    s.bits = 2;
    s.group = 2;
    // Keys, per channel over 2 tokens: [0, 3] step 1, [10, 40] step 10, [1, 4] step 1, [10, 70]
    // step 20: every value is a range end.
    const auto k = kiviQuantize(x, KiviAxis::Key, s);
    QCOMPARE(k.reconstruction, x);
    QCOMPARE(k.groups, std::int64_t(4)); // 2 token groups × 2 channels
    // Values, per token over its 2 channels: both are the row's range ends.
    MatrixRF xv(4, 2);
    xv << 0, 30, //
        3, 6,    //
        1, 4,    //
        4, 70;
    const auto v = kiviQuantize(xv, KiviAxis::Value, s);
    QCOMPARE(v.reconstruction, xv);
    QCOMPARE(v.groups, std::int64_t(4)); // 4 tokens × 1 channel group
    // A value inside a range snaps to the nearest of the 4 levels, with the FP16 scale and zero.
    MatrixRF y(2, 2);
    y << 0, 0.9f, //
        3, 3;
    const auto q = kiviQuantize(y, KiviAxis::Value, s);
    const float scale = half(0.9f / 3);
    QCOMPARE(q.reconstruction(0, 1), 3 * scale); // 0.9 is level 3 (the max) of [0, 0.9]
    QCOMPARE(q.reconstruction(1, 0), 3.0f);      // a constant group: its zero
    // Keys group per channel: channel 1's outlier does not widen channel 0's steps.
    MatrixRF z = test::randomRows(64, 4, 3);
    MatrixRF z2 = z;
    z2.col(1) *= 100;
    s.group = 16;
    const auto a = kiviQuantize(z, KiviAxis::Key, s), b = kiviQuantize(z2, KiviAxis::Key, s);
    QCOMPARE(a.reconstruction.col(0), b.reconstruction.col(0));
    // Values group per token: the same outlier coarsens its row's other channels.
    const auto c = kiviQuantize(z, KiviAxis::Value, {2, 4, 0}), d = kiviQuantize(z2, KiviAxis::Value, {2, 4, 0});
    QVERIFY((c.reconstruction.col(0) - z.col(0)).norm() < (d.reconstruction.col(0) - z.col(0)).norm());
}

void TestBaselines::kiviErrorWithinHalfAStepAndFallsWithBits()
{
    const MatrixRF x = test::randomRows(256, 64, 7);
    double last = 1e300;
    for (int bits = 1; bits <= 8; ++bits) {
        for (auto axis : {KiviAxis::Key, KiviAxis::Value}) {
            KiviSettings s{bits, 32, 0};
            const auto r = kiviQuantize(x, axis, s);
            // Each value is within half a step of its group's grid, plus the FP16 rounding of the scale
            // and zero (relative 2^-11 each; the top level is levels × scale away from the zero).
            double worst = 0;
            const auto check = [&](const auto& block, const auto& rec) {
                const double lo = block.minCoeff(), range = block.maxCoeff() - lo;
                const double bound = range / ((1 << bits) - 1) / 2 + (range + std::abs(lo)) / 1024 + 1e-30;
                worst = std::max(worst, double((rec - block).cwiseAbs().maxCoeff()) / bound);
            };
            for (Eigen::Index g = 0; g < x.rows(); g += 32)
                for (Eigen::Index c = 0; c < x.cols(); ++c)
                    if (axis == KiviAxis::Key)
                        check(x.block(g, c, 32, 1), r.reconstruction.block(g, c, 32, 1));
            for (Eigen::Index t = 0; t < x.rows(); ++t)
                for (Eigen::Index c = 0; c < x.cols(); c += 32)
                    if (axis == KiviAxis::Value)
                        check(x.block(t, c, 1, 32), r.reconstruction.block(t, c, 1, 32));
            QVERIFY2(worst <= 1.0, qPrintable(QStringLiteral("bits %1: %2 of the bound").arg(bits).arg(worst)));
            QCOMPARE(r.bits, bits + 32.0 / 32); // B plus an FP16 scale and zero per 32 values
        }
        const double nmse =
            (kiviQuantize(x, KiviAxis::Key, {bits, 32, 0}).reconstruction - x).squaredNorm() / x.squaredNorm();
        QVERIFY2(nmse < last,
                 qPrintable(QStringLiteral("bits %1: nmse %2 not below %3").arg(bits).arg(nmse).arg(last)));
        last = nmse;
    }
    QVERIFY(last < 1e-4); // 8 bits: 255 levels over about 5σ of Gaussian rows, nmse ≈ (5/255)²/12 ≈ 3e-5
}

void TestBaselines::kiviWindowAndSequences()
{
    // Two sequences of 10 tokens (ids 4 and 9), groups of 4, the last 3 tokens in FP16.
    const MatrixRF x = test::randomRows(20, 8, 11);
    std::vector<std::int64_t> ids(20, 4);
    std::fill(ids.begin() + 10, ids.end(), 9);
    const KiviSettings s{2, 4, 3};
    const auto k = kiviQuantize(x, KiviAxis::Key, s, ids);
    // Keys: 10 − 3 = 7 tokens before the window, one full group of 4 quantized; tokens 4-9 in FP16.
    for (int seq : {0, 10}) {
        for (int t = 4; t < 10; ++t)
            for (int c = 0; c < 8; ++c)
                QCOMPARE(k.reconstruction(seq + t, c), half(x(seq + t, c)));
        QVERIFY((k.reconstruction.middleRows(seq, 4) - x.middleRows(seq, 4)).norm() > 1e-3);
    }
    QCOMPARE(k.quantizedValues, std::int64_t(2 * 4 * 8));
    QCOMPARE(k.fp16Values, std::int64_t(2 * 6 * 8));
    QCOMPARE(k.groups, std::int64_t(2 * 8));
    QCOMPARE(k.bits, (64.0 * 2 + 16 * 32 + 96 * 16) / 160);
    // The second sequence starts its own groups: quantizing it alone gives the same rows.
    const auto alone = kiviQuantize(x.bottomRows(10), KiviAxis::Key, s);
    QCOMPARE(MatrixRF(k.reconstruction.bottomRows(10)), alone.reconstruction);
    // Values: every token before the window, 7 per sequence, each in 8/4 = 2 groups.
    const auto v = kiviQuantize(x, KiviAxis::Value, s, ids);
    QCOMPARE(v.quantizedValues, std::int64_t(2 * 7 * 8));
    QCOMPARE(v.groups, std::int64_t(2 * 7 * 2));
    for (int c = 0; c < 8; ++c)
        QCOMPARE(v.reconstruction(7, c), half(x(7, c)));
    // No ids: one sequence of 20.
    QCOMPARE(kiviQuantize(x, KiviAxis::Value, s).quantizedValues, std::int64_t(17 * 8));
}

void TestBaselines::kiviRefusesBadSettings()
{
    const MatrixRF x = test::randomRows(8, 12, 1);
    QVERIFY(invalidMessage([&] { kiviQuantize(x, KiviAxis::Key, {0, 4, 0}); }).contains("--bits 0"));
    QVERIFY(invalidMessage([&] { kiviQuantize(x, KiviAxis::Key, {9, 4, 0}); }).contains("--bits 9"));
    QVERIFY(invalidMessage([&] { kiviQuantize(x, KiviAxis::Value, {2, 5, 0}); }).contains("--group 5"));
    QVERIFY(invalidMessage([&] { kiviQuantize(x, KiviAxis::Key, {2, 0, 0}); }).contains("--group 0"));
    QVERIFY(invalidMessage([&] { kiviQuantize(x, KiviAxis::Key, {2, 4, -1}); }).contains("--residual -1"));
    // Keys group tokens, so any group size works for them.
    QCOMPARE(kiviQuantize(x, KiviAxis::Key, {2, 5, 0}).quantizedValues, std::int64_t(5 * 12));
}

void TestBaselines::methodNames()
{
    const auto ms = parseMethods("fp32, kivi-2,kivi-1g128r64,cq-2c8b,km-rq@1,gsrq@0.75");
    QCOMPARE(ms.size(), std::size_t(6));
    QCOMPARE(int(ms[1].kind), int(TableMethod::Kivi));
    QCOMPARE(ms[1].kivi.bits, 2);
    QCOMPARE(ms[1].kivi.group, 32);
    QCOMPARE(ms[2].kivi.group, 128);
    QCOMPARE(ms[2].kivi.residual, 64);
    QCOMPARE(kiviName(ms[2].kivi), std::string("kivi-1g128r64"));
    QCOMPARE(ms[3].channels, 2);
    QCOMPARE(ms[3].blockBits, 8);
    QCOMPARE(int(ms[4].kind), int(TableMethod::KmRq));
    QCOMPARE(ms[5].bpa, 0.75);
    QCOMPARE(ms[5].refine, 0);
    // +rN: N rounds of joint refinement after the greedy stages.
    const auto refined = parseMethods("gsrq@1+r3");
    QCOMPARE(refined[0].bpa, 1.0);
    QCOMPARE(refined[0].refine, 3);
    QCOMPARE(methodTrainSettings(refined[0], 256, true, 10, 1, nullptr).rq.refine, 3);
    for (const char* bad : {"kivi-0", "kivi-9", "kivi-2x", "cq-0c8b", "cq-2c17b", "gsrq@0", "gsrq@x", "pq@1",
                            "fp32,fp32", "missing.safetensors", "", "gsrq@1+r0", "gsrq@1+r", "km-rq@1+3"}) {
        const QString m = invalidMessage([&] { parseMethods(bad); });
        QVERIFY2(m.startsWith("--methods"), qPrintable(QStringLiteral("%1: %2").arg(bad, m)));
    }
}

void TestBaselines::methodsTrainAsThePapersSay()
{
    std::string note;
    // CQ-2c8b: 2 channels, 256 centroids, one stage of K-means with squared-gradient weights.
    auto s = methodTrainSettings(parseMethods("cq-2c8b")[0], 256, true, 10, 1, &note);
    QCOMPARE(s.rq.dim, 2);
    QCOMPARE(s.rq.stages, 1);
    QCOMPARE(s.rq.k, 256);
    QCOMPARE(int(s.rq.method), int(Method::KMeans));
    QCOMPARE(int(s.weights), int(WeightMode::GradSq));
    QCOMPARE(s.methodLabel, std::string("cq"));
    // GSRQ@1 on whole heads of 128: the paper's D = 128, R = 16, K = 256, GSKM, grad-log.
    s = methodTrainSettings(parseMethods("gsrq@1")[0], 256, true, 10, 1, &note);
    QCOMPARE(s.rq.dim, 128);
    QCOMPARE(s.rq.stages, 16);
    QCOMPARE(int(s.rq.method), int(Method::GainShape));
    QCOMPARE(int(s.weights), int(WeightMode::GradLog));
    QVERIFY(note.empty());
    // 32 features: the paper's D does not divide; the closest exact setting (D = 32, R = 4, K = 256).
    s = methodTrainSettings(parseMethods("km-rq@1")[0], 32, false, 10, 1, &note);
    QCOMPARE(s.rq.dim, 32);
    QCOMPARE(s.rq.stages, 4);
    QCOMPARE(s.rq.k, 256);
    QCOMPARE(int(s.weights), int(WeightMode::None));
    // Without gradients a weighted method trains unweighted, and says so.
    s = methodTrainSettings(parseMethods("gsrq@1")[0], 32, false, 10, 1, &note);
    QCOMPARE(int(s.weights), int(WeightMode::None));
    QVERIFY(note.find("no gradients") != std::string::npos);
    QVERIFY(invalidMessage([&] {
                methodTrainSettings(parseMethods("cq-3c8b")[0], 32, true, 10, 1, nullptr);
            }).contains("do not divide"));
}

void TestBaselines::kiviEvalEndToEnd()
{
    auto r = gsrqRun({"eval", kSample, "--method", "kivi", "--bits", "2", "--group", "32", "--residual", "64",
                      "--layers", "1", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = json(r);
    QCOMPARE(j["settings"].toObject()["method"].toString(), QStringLiteral("kivi"));
    const auto ts = j["tensors"].toArray();
    QCOMPARE(ts.size(), 2);
    for (const auto& tv : ts) {
        const auto t = tv.toObject();
        // 4 sequences of 512: 448 quantized tokens (14 key groups of 32), 64 in FP16; 32 channels.
        const bool key = t["tensor"].toString().endsWith("key");
        const double groups = key ? 4.0 * 14 * 32 : 4.0 * 448 * 1;
        const double want = (4.0 * 448 * 32 * 2 + groups * 32 + 4.0 * 64 * 32 * 16) / (2048.0 * 32);
        QVERIFY2(std::abs(t["bpa"].toDouble() - want) < 1e-12, qPrintable(t["tensor"].toString()));
        QVERIFY(t["nmse"].toDouble() > 0 && t["nmse"].toDouble() < 0.5);
        QVERIFY(t["cosine"].toDouble() > 0.8);
    }
    const auto att = j["attention"].toArray();
    QCOMPARE(att.size(), 1);
    QVERIFY(att[0].toObject()["relative_l2"].toDouble() > 0);
    // More bits, less error: 4 bits against 2 on the same tensors.
    r = gsrqRun({"eval", kSample, "--method", "kivi", "--bits", "4", "--layers", "1", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(json(r)["tensors"].toArray()[0].toObject()["nmse"].toDouble() < ts[0].toObject()["nmse"].toDouble());
}

void TestBaselines::evalBadFlags_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("phrase");
    QTest::newRow("bits") << QStringList{"eval", kSample, "--method", "kivi", "--bits", "9"} << "--bits 9";
    QTest::newRow("group") << QStringList{"eval", kSample, "--method", "kivi", "--group", "5"} << "--group 5";
    QTest::newRow("residual") << QStringList{"eval", kSample, "--method", "kivi", "--residual", "-2"}
                              << "--residual -2";
    QTest::newRow("method") << QStringList{"eval", kSample, "--method", "kiwi"} << "--method";
    QTest::newRow("codebooks with kivi") << QStringList{"eval", kSample, "--method", "kivi", "-c", kSample}
                                         << "--codebooks";
    QTest::newRow("kivi flag without kivi") << QStringList{"eval", kSample, "-c", kSample, "--group", "8"} << "--group";
    QTest::newRow("no codebooks") << QStringList{"eval", kSample} << "--codebooks";
    QTest::newRow("cq without channels") << QStringList{"train", kSample, "--method", "cq", "--bits", "4"}
                                         << "--channels";
    QTest::newRow("cq channels") << QStringList{"train", kSample, "--method", "cq", "--channels", "5", "--bits", "4"}
                                 << "--channels 5";
    QTest::newRow("cq bits") << QStringList{"train", kSample, "--method", "cq", "--channels", "4", "--bits", "17"}
                             << "--bits 17";
    QTest::newRow("cq with dim") << QStringList{"train", kSample,  "--method", "cq",    "--channels",
                                                "4",     "--bits", "4",        "--dim", "4"}
                                 << "--method cq";
    QTest::newRow("channels without cq") << QStringList{"train", kSample, "--channels", "4", "--bpa", "1"}
                                         << "--channels";
}

void TestBaselines::evalBadFlags()
{
    QFETCH(QStringList, args);
    QFETCH(QString, phrase);
    const auto r = gsrqRun(QStringList{"--no-db"} + args);
    QCOMPARE(r.code, 2);
    QVERIFY2(QString::fromUtf8(r.err).contains(phrase), r.err.constData());
    QCOMPARE(r.err.count('\n'), 1); // one line
}

void TestBaselines::cqIsTheProductQuantizerWithFisherWeights()
{
    // CQ with C channels and B bits is the product quantizer with D = C, one stage, K = 2^B, K-means
    // and squared-gradient weights: the same training gives the same metrics to the last digit.
    const QString a = m_dir.filePath("cq.safetensors"), b = m_dir.filePath("pq.safetensors");
    auto r = gsrqRun({"--no-db", "train", kSample, "--layers", "3", "--method", "cq", "--channels", "4", "--bits", "6",
                      "--iters", "8", "--out", a, "--json", "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto cq = json(r);
    r = gsrqRun({"--no-db", "train",   kSample,    "--layers", "3",   "--method", "km",
                 "--dim",   "4",       "--stages", "1",        "--k", "64",       "--weights",
                 "grad-sq", "--iters", "8",        "--out",    b,     "--json",   "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto pq = json(r);
    QCOMPARE(cq["settings"].toObject()["method"].toString(), QStringLiteral("cq"));
    QCOMPARE(cq["settings"].toObject()["weights"].toString(), QStringLiteral("grad-sq"));
    QCOMPARE(cq["tensors"].toArray().size(), 2);
    for (int i = 0; i < 2; ++i) {
        const auto x = cq["tensors"].toArray()[i].toObject(), y = pq["tensors"].toArray()[i].toObject();
        QCOMPARE(x["bpa"].toDouble(), 1.5); // 6 bits per 4 channels
        for (const char* m : {"mse", "nmse", "cosine", "gain_error", "shrinkage"})
            QCOMPARE(x["train"].toObject()[m].toDouble(), y["train"].toObject()[m].toDouble());
    }
    // The codebooks file says it is CQ; gsrq eval reproduces its training metrics.
    r = gsrqRun({"codebooks", "info", a, "--json"});
    QCOMPARE(json(r)["metadata"].toObject()["method"].toString(), QStringLiteral("cq"));
    r = gsrqRun({"--no-db", "eval", kSample, "-c", a, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    for (int i = 0; i < 2; ++i)
        QCOMPARE(json(r)["tensors"].toArray()[i].toObject()["mse"].toDouble(),
                 cq["tensors"].toArray()[i].toObject()["train"].toObject()["mse"].toDouble());
    // Squared-gradient weights differ from none: the training is weighted.
    r = gsrqRun({"--no-db", "train", kSample, "--layers", "3", "--method", "cq", "--channels", "4", "--bits", "6",
                 "--iters", "8", "--weights", "none", "--json", "-q"});
    QVERIFY(json(r)["tensors"].toArray()[0].toObject()["train"].toObject()["mse"].toDouble() !=
            cq["tensors"].toArray()[0].toObject()["train"].toObject()["mse"].toDouble());
}

void TestBaselines::emaUpdateStartsAsLloydAndZeroDecayIsLloyd()
{
    const MatrixRF x = test::randomRows(2000, 8, 21);
    auto be = makeCpuBackend(1);
    ClusteringParams p;
    p.k = 16;
    p.seed = 3;
    p.maxIterations = 12;
    const auto lloyd = cluster(x, nullptr, Method::KMeans, p, *be);
    p.emaDecay = 0.0; // explicit zero: the same update
    QCOMPARE(cluster(x, nullptr, Method::KMeans, p, *be).centroids, lloyd.centroids);
    // After one update the moving average has one pass: Lloyd's mean.
    p.maxIterations = 1;
    const auto lloyd1 = cluster(x, nullptr, Method::KMeans, p, *be);
    p.emaDecay = 0.5;
    QCOMPARE(cluster(x, nullptr, Method::KMeans, p, *be).centroids, lloyd1.centroids);
    // Later updates remember earlier passes: the centroids differ from Lloyd's, and the moving
    // average still lowers the objective from the first pass to the last.
    p.maxIterations = 12;
    const auto ema = cluster(x, nullptr, Method::KMeans, p, *be);
    QVERIFY(ema.centroids != lloyd.centroids);
    QVERIFY(ema.history.back().objective < ema.history.front().objective);
    // Two updates by hand: pass 0 assigns the rows to the sampled starting rows and Lloyd's mean
    // follows; pass 1 assigns to those means; the moving average then weighs pass 0's sums by γ:
    // c = (γ·S0 + S1) / (γ·W0 + W1).
    {
        const MatrixRF y = test::randomRows(400, 3, 31);
        const int K = 6;
        const double g = 0.5;
        const auto sums = [&](const MatrixRD& c, MatrixRD& S, Eigen::VectorXd& W) {
            S = MatrixRD::Zero(K, 3);
            W = Eigen::VectorXd::Zero(K);
            for (Eigen::Index i = 0; i < y.rows(); ++i) {
                Eigen::Index best = 0;
                (c.rowwise() - y.row(i).cast<double>()).rowwise().squaredNorm().minCoeff(&best);
                S.row(best) += y.row(i).cast<double>();
                W[best] += 1;
            }
        };
        MatrixRD c0(K, 3);
        const auto start = sampleRows(y.rows(), K, 2);
        for (int k = 0; k < K; ++k)
            c0.row(k) = y.row(start[std::size_t(k)]).cast<double>();
        MatrixRD S0, S1;
        Eigen::VectorXd W0, W1;
        sums(c0, S0, W0);
        MatrixRD c1 = c0;
        for (int k = 0; k < K; ++k)
            if (W0[k] > 0)
                c1.row(k) = S0.row(k) / W0[k];
        sums(c1, S1, W1);
        ClusteringParams q;
        q.k = K;
        q.seed = 2;
        q.maxIterations = 2;
        q.emaDecay = g;
        const auto got = cluster(y, nullptr, Method::KMeans, q, *be);
        for (int k = 0; k < K; ++k) {
            const Eigen::RowVector3d want = (g * S0.row(k) + S1.row(k)) / (g * W0[k] + W1[k]);
            QVERIFY2((got.centroids.row(k).cast<double>() - want).norm() <= 1e-5 * (1 + want.norm()),
                     qPrintable(QStringLiteral("centroid %1").arg(k)));
        }
    }
    // A decay outside [0, 1) is refused by name.
    p.emaDecay = 1.0;
    QVERIFY(invalidMessage([&] { cluster(x, nullptr, Method::KMeans, p, *be); }).contains("--ema-decay 1"));
}

void TestBaselines::stridedCodebooksRoundTrip()
{
    // 2 subspaces of 3: subspace 0 takes features 0, 2, 4 and subspace 1 features 1, 3, 5.
    QCOMPARE(stridedOrder(3, 2), (std::vector<std::int32_t>{0, 2, 4, 1, 3, 5}));
    const MatrixRF x = test::randomRows(600, 6, 5);
    auto be = makeCpuBackend(1);
    RqSettings s;
    s.dim = 3;
    s.stages = 2;
    s.k = 16;
    s.method = Method::KMeans;
    s.stridedGroups = true;
    const auto r = trainResidualQuantizer(x, nullptr, s, *be);
    QCOMPARE(r.codebooks.order, stridedOrder(3, 2));
    // Encoding the rows again gives the training codes, and decoding puts the features back in
    // the data's order (the metrics of the round trip are the training's).
    const Codes c = encode(x, r.codebooks, 1, *be);
    QCOMPARE(c, r.codes);
    const auto m = computeMetrics(x, decode(c, r.codebooks));
    QCOMPARE(m.mse, r.metrics.mse);
    // Subspace 0's first stage sees only features 0, 2, 4: changing feature 1 leaves its code alone.
    MatrixRF y = x;
    y.col(1).array() += 50;
    QCOMPARE(encode(y, r.codebooks, 1, *be).col(0), c.col(0));
    // The file keeps the order; a file whose order is not a permutation is refused by name.
    const std::string path = test::pathIn(m_dir, "strided.safetensors");
    CodebookFile f;
    f.metadata = {{"dim", "3"}, {"stages", "2"}, {"k", "16"}, {"method", "vqllm"}};
    f.entries.push_back({"t", r.codebooks, {}});
    writeCodebookFile(path, f, DType::F32);
    QCOMPARE(readCodebookFile(path).entries[0].codebooks.order, r.codebooks.order);
    f.entries[0].codebooks.order = {0, 0, 4, 1, 3, 5};
    writeCodebookFile(path, f, DType::F32);
    const QString why = invalidMessage([&] { readCodebookFile(path); });
    QVERIFY2(why.contains("t.order") && why.contains("not a permutation"), qPrintable(why));
}

void TestBaselines::vqllmTrainsDeterministicallyAndEvalsInItsOrder()
{
    const QString a = m_dir.filePath("vq-a.safetensors"), b = m_dir.filePath("vq-b.safetensors");
    for (const QString& out : {a, b}) {
        const auto r = gsrqRun({"--no-db", "train", kSample, "--layers", "1", "--method", "vqllm", "--dim", "8",
                                "--stages", "3", "--k", "32", "--seed", "4", "--out", out, "--force", "-q"});
        QVERIFY2(r.code == 0, r.err.constData());
    }
    // The same seed, the same file, byte for byte.
    QFile fa(a), fb(b);
    QVERIFY(fa.open(QIODevice::ReadOnly) && fb.open(QIODevice::ReadOnly));
    QCOMPARE(fa.readAll(), fb.readAll());
    const auto f = readCodebookFile(a.toStdString());
    QCOMPARE(f.metadata.at("method"), std::string("vqllm"));
    QCOMPARE(f.entries[0].codebooks.order, stridedOrder(8, 4));
    QVERIFY(f.metadata.at("settings").find("\"ema_decay\":0.5") != std::string::npos);
    // gsrq eval encodes in the file's order: its metrics are the training's.
    auto r = gsrqRun({"--no-db", "train", kSample, "--layers", "1", "--method", "vqllm", "--dim", "8", "--stages", "3",
                      "--k", "32", "--seed", "4", "--json", "-q"});
    const auto train = json(r)["tensors"].toArray()[1].toObject()["train"].toObject();
    r = gsrqRun({"--no-db", "eval", kSample, "-c", a, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto ev = json(r)["tensors"].toArray()[1].toObject();
    QCOMPARE(ev["nmse"].toDouble(), train["nmse"].toDouble());
    // The decode paths take contiguous subspaces only, and say so.
    const auto& books = f.entries[0].codebooks;
    QVERIFY(invalidMessage([&] { checkDecodeBooks(DecodeShape{8, 4, 8}, books, books); }).contains("strided"));
    // --ema-decay belongs to vqllm, and must be below 1.
    r = gsrqRun({"--no-db", "train", kSample, "--layers", "1", "--method", "vqllm", "--bpa", "1", "--ema-decay", "1"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--ema-decay 1"), r.err.constData());
    r = gsrqRun({"--no-db", "train", kSample, "--layers", "1", "--dim", "8", "--stages", "1", "--k", "8", "--ema-decay",
                 "0.5"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--ema-decay"), r.err.constData());
}

void TestBaselines::pplMethodTable()
{
    auto r = gsrqRun({"ppl", kModel, "--tokenizer", kTokenizer, "--generate", "--seq-len", "128", "--sequences", "4",
                      "--methods", "fp32,kivi-8,kivi-2,kivi-1,cq-4c8b,km-rq@1,gsrq@1,vqllm@1", "--train-dump", kSample,
                      "--iters", "6", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = json(r);
    const auto ms = j["methods"].toArray();
    QCOMPARE(ms.size(), 8);
    QMap<QString, QJsonObject> by;
    for (const auto& m : ms)
        by[m.toObject()["method"].toString()] = m.toObject();
    QCOMPARE(ms[0].toObject()["method"].toString(), QStringLiteral("fp32"));
    const double fp32 = by["fp32"]["perplexity"].toDouble();
    QVERIFY(fp32 > 1 && std::isfinite(fp32));
    // 8-bit KIVI is close to lossless: 255 levels per group of 32 keep perplexity within 1%.
    QVERIFY2(std::abs(by["kivi-8"]["perplexity"].toDouble() / fp32 - 1) < 0.01,
             qPrintable(QString::number(by["kivi-8"]["perplexity"].toDouble())));
    // Fewer bits cost more: 8 > 2 > 1 in perplexity order for KIVI.
    QVERIFY(by["kivi-2"]["perplexity"].toDouble() > by["kivi-8"]["perplexity"].toDouble());
    QVERIFY(by["kivi-1"]["perplexity"].toDouble() > by["kivi-2"]["perplexity"].toDouble());
    // Honest bits: B + one FP16 scale and zero per 32 values (keys: 32 tokens of a channel, the model's
    // 128-token sequences hold 4 such groups; values: the 32 channels of a token).
    QCOMPARE(by["kivi-2"]["bits"].toDouble(), 3.0);
    QCOMPARE(by["cq-4c8b"]["bits"].toDouble(), 2.0);
    QCOMPARE(by["gsrq@1"]["bits"].toDouble(), 1.0);
    QVERIFY(by["gsrq@1"]["effective_bits"].toDouble() > 1.0); // codewords spread over 512 tokens
    QCOMPARE(by["gsrq@1"]["family"].toString(), QStringLiteral("gsrq"));
    QCOMPARE(by["vqllm@1"]["bits"].toDouble(), 1.0);
    QCOMPARE(by["vqllm@1"]["family"].toString(), QStringLiteral("vqllm"));
    for (const char* m : {"kivi-2", "cq-4c8b", "km-rq@1", "gsrq@1", "vqllm@1"})
        QVERIFY2(by[m]["attention_rel_l2"].toDouble() > 0, m);
    // Recorded as a ppl run: every method's perplexity, and a perplexity-against-bits series per
    // family (the Runs page's chart of it), KIVI's two points at its honest bits.
    QVERIFY(j.contains("run_id"));
    RunStore store(m_dir.filePath("xdg/gsrq/runs.db").toStdString());
    const auto run = store.requireRun(j["run_id"].toInteger());
    QCOMPARE(nlohmann::json::parse(run.summaryJson)["methods"].size(), std::size_t(8));
    std::map<std::string, int> points;
    for (const auto& p : store.series(run.id))
        ++points[p.name];
    QCOMPARE(points["kivi.perplexity_vs_bpa"], 3); // kivi-8, kivi-2, kivi-1
    QCOMPARE(points["gsrq.perplexity_vs_bpa"], 1);
    QCOMPARE(points["cq.perplexity_vs_bpa"], 1);
}

void TestBaselines::pplMethodTableBadInput_data()
{
    // Layer 2 of the sample alone, as a dump of its own.
    if (m_oneLayer.isEmpty()) {
        m_oneLayer = m_dir.filePath("one-layer.safetensors");
        std::vector<TensorBlob> blobs;
        for (const char* name : {"layers.2.key", "layers.2.value", "layers.2.key_grad", "layers.2.value_grad"}) {
            const auto sample = KvDump::open(kSample.toStdString());
            blobs.push_back(makeFloatBlob(name, toMatrix(sample.get(name).view), DType::F32));
        }
        writeSafetensors(m_oneLayer.toStdString(), blobs);
    }
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<QString>("phrase");
    QTest::newRow("unknown") << QStringList{"--methods", "fp32,pq@1"} << "--methods: unknown method 'pq@1'";
    QTest::newRow("no dump") << QStringList{"--methods", "gsrq@1"} << "--train-dump";
    QTest::newRow("kivi group") << QStringList{"--methods", "kivi-2g5"} << "--methods kivi-2g5: group 5";
    QTest::newRow("cq channels") << QStringList{"--methods", "cq-3c8b", "--train-dump", kSample} << "cq-3c8b";
    QTest::newRow("dump without methods") << QStringList{"--train-dump", kSample} << "--train-dump";
    // The sample holds every layer of stories260K; one layer's dump of it would leave four exact.
    QTest::newRow("dump of fewer layers")
        << QStringList{"--methods", "gsrq@1", "--train-dump", m_oneLayer} << "has no keys and values of layers 0,1,3,4";
    QTest::newRow("other model's dump") << QStringList{"--methods", "gsrq@1", "--train-dump",
                                                       QStringLiteral(GSRQ_SOURCE_DIR
                                                                      "/resources/samples/pydocs-hd128")}
                                        << "--train-dump";
}

void TestBaselines::pplMethodTableBadInput()
{
    QFETCH(QStringList, extra);
    QFETCH(QString, phrase);
    const auto r = gsrqRun(QStringList{"--no-db", "ppl", kModel, "--tokenizer", kTokenizer, "--generate", "--seq-len",
                                       "32", "--sequences", "1"} +
                           extra);
    QCOMPARE(r.code, 2);
    QVERIFY2(QString::fromUtf8(r.err).contains(phrase), r.err.constData());
}

void TestBaselines::runsCompareOfPplRunsShowsPerplexities()
{
    // Two ppl tables of the same model and text, one method apart: the comparison prints FP32 and each
    // method's perplexity with its Δ against that run's FP32, bits and effective bits, as the Runs
    // page compares them (not just the settings and an empty metric table).
    const QStringList common{"ppl", kModel,        "--tokenizer", kTokenizer, "--generate", "--seq-len",
                             "64",  "--sequences", "2",           "--json",   "-q"};
    const auto a = gsrqRun(common + QStringList{"--methods", "fp32,kivi-2"});
    const auto b = gsrqRun(common + QStringList{"--methods", "fp32,kivi-1"});
    QVERIFY2(a.code == 0 && b.code == 0, (a.err + b.err).constData());
    const auto ja = json(a), jb = json(b);
    const QString ida = QString::number(ja["run_id"].toInteger()), idb = QString::number(jb["run_id"].toInteger());
    const auto r = gsrqRun({"runs", "compare", ida, idb});
    QVERIFY2(r.code == 0, r.err.constData());
    const QString out = QString::fromUtf8(r.out);
    QVERIFY2(out.contains("perplexity"), qPrintable(out));
    auto method = [](const QJsonObject& j, const char* name) {
        for (const auto& m : j["methods"].toArray())
            if (m.toObject()["method"].toString() == QLatin1String(name))
                return m.toObject();
        return QJsonObject();
    };
    const double fp32 = method(ja, "fp32")["perplexity"].toDouble();
    const double k2 = method(ja, "kivi-2")["perplexity"].toDouble();
    const double k1 = method(jb, "kivi-1")["perplexity"].toDouble();
    // Each row shows its run's value to 4 decimals, and KIVI-2's its Δ% against run A's FP32.
    QVERIFY2(out.contains(QString::number(fp32, 'f', 4)), qPrintable(out));
    QVERIFY2(out.contains(QString::number(k2, 'f', 4)), qPrintable(out));
    QVERIFY2(out.contains(QString::number(k1, 'f', 4)), qPrintable(out));
    const QString delta = QString::asprintf("%+.2f%%", 100 * (k2 - fp32) / fp32);
    QVERIFY2(out.contains(delta), qPrintable(out + " lacks " + delta));
    // KIVI-2's row carries its honest bits (3: 2 bits + an FP16 scale and zero per 32 values).
    const auto lines = out.split('\n');
    bool kiviRow = false;
    for (const auto& l : lines)
        if (l.startsWith("kivi-2 ") && l.split(' ', Qt::SkipEmptyParts).value(1) == "3")
            kiviRow = true;
    QVERIFY2(kiviRow, qPrintable(out));
}

void TestBaselines::runsAddPplRecordsATable()
{
    // tools/real_table.py's table.json (a transformers model measured by tools/hf_ppl.py) becomes a
    // ppl run with the rows and perplexity-against-bits series the Runs page draws.
    const QString path = m_dir.filePath("table.json");
    {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"model": "/models/x.gguf", "model_type": "llama", "eval_text": "/texts/e.txt", "seq_len": 512,
 "eval_sequences": 4, "calib_samples": 8, "iters": 8, "budget": "quick", "calibration_dump": "/d",
 "sequence_tokens": [511, 511, 511, 511],
 "rows": [{"name": "fp32", "family": "fp32", "bits": 32, "effective_bits": 32, "perplexity": 10.0,
           "sequence_nll": [2.0, 2.2, 2.4, 2.6]},
          {"name": "kivi-2", "family": "kivi", "bits": 3, "effective_bits": 3, "perplexity": 12.5},
          {"name": "gsrq@1", "family": "gsrq", "bits": 1, "effective_bits": 1.5, "perplexity": 11.0,
           "delta_percent_interval": [8.5, 11.5], "sequence_nll": [2.1, 2.3, 2.5, 2.7],
           "settings": "D=64 R=8 K=256 gskm grad-log"},
          {"name": "km-rq@1", "family": "km-rq", "bits": 1, "effective_bits": 1.5, "perplexity": 12.0,
           "delta_percent_interval": [15, 25], "sequence_nll": [2.2, 2.4, 2.6, 2.8]}]})");
    }
    RunStore store(m_dir.filePath("xdg/gsrq/runs.db").toStdString());
    const std::size_t before = store.listRuns({"ppl", std::nullopt, "", 0}).size();
    const auto r = gsrqRun({"runs", "add-ppl", path});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto runs = store.listRuns({"ppl", std::nullopt, "", 1});
    QCOMPARE(runs.size(), std::size_t(1));
    const auto p = runPerplexities(store.metrics(runs[0].id), store.series(runs[0].id));
    QVERIFY(p.fp32 && *p.fp32 == 10.0);
    QCOMPARE(p.points.size(), std::size_t(3));
    QCOMPARE(p.points[1].family, std::string("gsrq"));
    QCOMPARE(p.points[1].perplexity, 11.0);
    QCOMPARE(p.points[1].effectiveBits, 1.5);
    // The table's intervals and sequences are the run's: `runs compare` shows each Δ% with its
    // interval, and the gap of the two 1-BPA methods (gsrq 0.1 nat better than km-rq on every one of
    // the 4 sequences: 100·(e^0.1 − e^0.2) = −11.62 points, every replicate the same).
    QCOMPARE(p.points[1].deltaInterval.lo, 8.5);
    QCOMPARE(p.points[1].deltaInterval.hi, 11.5);
    QCOMPARE(p.fp32SequenceNll.size(), std::size_t(4));
    QCOMPARE(p.sequenceTokens.size(), std::size_t(4));
    QVERIFY(!p.points[0].deltaInterval.valid()); // kivi-2's row had none
    const QString id = QString::number(runs[0].id);
    const auto cmp = gsrqRun({"runs", "compare", id, id});
    QVERIFY2(cmp.code == 0, cmp.err.constData());
    const QString text = QString::fromUtf8(cmp.out);
    QVERIFY2(text.contains("(+10.00% [+8.50, +11.50])"), qPrintable(text));
    QVERIFY2(text.contains("gsrq@1 − km-rq@1 at 1 bits: -11.62 [-11.62, -11.62]"), qPrintable(text));
    // Bad input: exit 2, one line naming the file (and the field), nothing recorded.
    {
        QFile f(m_dir.filePath("bad.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"model": "m", "seq_len": 8, "eval_sequences": 1, "rows": [{"name": "kivi-2", "family": "kivi",
 "bits": 3, "perplexity": 12}]})");
    }
    {
        QFile f(m_dir.filePath("badseq.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"model": "m", "seq_len": 8, "eval_sequences": 2, "sequence_tokens": [7, 7],
 "rows": [{"name": "fp32", "family": "fp32", "bits": 32, "perplexity": 10, "sequence_nll": [1.0]}]})");
    }
    for (const auto& [file, phrase] : {std::pair{QString("bad.json"), QString("first row must be fp32")},
                                       std::pair{QString("badseq.json"), QString("1 sequences' NLL for 2")},
                                       std::pair{QString("missing.json"), QString("no such file")}}) {
        const auto bad = gsrqRun({"runs", "add-ppl", m_dir.filePath(file)});
        QCOMPARE(bad.code, 2);
        QVERIFY2(QString::fromUtf8(bad.err).contains(file) && QString::fromUtf8(bad.err).contains(phrase),
                 bad.err.constData());
    }
    QCOMPARE(store.listRuns({"ppl", std::nullopt, "", 0}).size(), before + 1);
}

void TestBaselines::quietOnEveryProgressCommand()
{
    // Every command that prints progress or backend notes takes -q, as compare and train do.
    for (const char* c : {"compare", "sweep", "train", "eval", "ppl", "bench-cluster", "bench-train", "paper-check"}) {
        const auto h = gsrqRun({c, "--help"});
        QVERIFY2(h.code == 0 && QString::fromUtf8(h.out).contains("--quiet"), c);
    }
    const QString books = m_dir.filePath("quiet-books.safetensors");
    auto r = gsrqRun({"--no-db", "train", kSample, "--tensors", "layers.0.*", "--dim", "8", "--stages", "1", "--k", "8",
                      "--iters", "3", "--out", books, "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    r = gsrqRun({"--no-db", "eval", kSample, "-c", books, "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY2(r.err.isEmpty(), r.err.constData()); // nothing on standard error
    QVERIFY(r.out.contains("layers.0.key"));
    r = gsrqRun({"--no-db", "eval", kSample, "--method", "kivi", "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
}

void TestBaselines::bpaPresetsFollowHeadDim()
{
    // The paper's rates carried to a model's heads: D = head_dim, K = 256, R = BPA·D/8; the lowest
    // rate spans two heads where they divide the features (the paper's D = 256 over heads of 128).
    const auto c64 = paperBpa(1, 64, 192);
    QVERIFY(c64 && c64->dim == 64 && c64->stages == 8 && c64->k == 256);
    QVERIFY(bitsPerActivation(c64->dim, c64->stages, c64->k) == 1);
    const auto low64 = paperBpa(0.375, 64, 192); // 3 heads: two do not divide them
    QVERIFY(low64 && low64->dim == 64 && low64->stages == 3);
    const auto low64x2 = paperBpa(0.375, 64, 256);
    QVERIFY(low64x2 && low64x2->dim == 128 && low64x2->stages == 6);
    const auto two64 = paperBpa(2, 64, 192);
    QVERIFY(two64 && two64->dim == 64 && two64->stages == 16);
    // head_dim 128 is the paper's own; unknown (0) and toy heads keep it too.
    for (std::int64_t hd : {128, 0, 8}) {
        const auto c = paperBpa(0.375, hd, 512);
        QVERIFY(c && c->dim == 256 && c->stages == 12);
    }
    // End to end (gsrq train --bpa on SmolLM2's dump of heads of 64): tests/python/test_real_model.py.
}

// A codebooks file in the methods table joins its method's series, named from its own settings:
// two files of different methods are told apart on the chart (not both "codebooks").
void TestBaselines::codebookFilesNamedByTheirSettings()
{
    CodebookFile f;
    f.metadata = {{"method", "gskm"}, {"weights", "grad-log"}};
    QCOMPARE(codebooksFamily(f), std::string("gsrq"));
    f.metadata = {{"method", "km"}, {"weights", "none"}};
    QCOMPARE(codebooksFamily(f), std::string("km-rq"));
    f.metadata = {{"method", "cq"}, {"weights", "grad-sq"}};
    QCOMPARE(codebooksFamily(f), std::string("cq"));
    f.metadata = {{"method", "gskm"}, {"weights", "none"}};
    QCOMPARE(codebooksFamily(f), std::string("gskm"));
    f.metadata = {{"method", "km"}, {"weights", "grad-log"}};
    QCOMPARE(codebooksFamily(f), std::string("km grad-log"));
    f.metadata.clear();
    QCOMPARE(codebooksFamily(f), std::string("codebooks"));
}

QTEST_GUILESS_MAIN(TestBaselines)
#include "tst_baselines.moc"
