// The compressed cache decode reads (packed layout) and the CPU references the GPU decode kernels
// are held to: the paper path (decode, RoPE, attention) and the lookup path (tables of q·codeword)
// against naive attention on decoded keys and values; GQA mapping; RoPE far past 64K positions.

#include "core/base/error.h"
#include "core/decode/decode_sweep.h"
#include "core/lm/decode_cache.h"
#include "test_util.h"

#include <QtTest>

#include <random>

using namespace gsrq;

namespace {

Codes randomCodes(std::int64_t n, int cols, int k, std::uint64_t seed)
{
    std::mt19937_64 rng(seed);
    Codes c(n, cols);
    for (std::int64_t i = 0; i < n; ++i)
        for (int j = 0; j < cols; ++j)
            c(i, j) = int(rng() % std::uint64_t(k));
    return c;
}

Codebooks randomBooks(int dim, int stages, int k, int subspaces, std::uint64_t seed)
{
    Codebooks cb;
    cb.allocate(dim, stages, k, subspaces);
    const MatrixRF r = test::randomRows(std::int64_t(subspaces) * stages * k, dim, seed);
    std::copy(r.data(), r.data() + r.size(), cb.data.begin());
    for (int s = 1; s < stages; ++s) // later stages smaller, as residual stages are
        for (int m = 0; m < subspaces; ++m)
            cb.book(m, s) *= float(std::pow(0.5, s));
    return cb;
}

double relErr(const Eigen::VectorXd& a, const Eigen::VectorXd& b)
{
    return (a - b).norm() / b.norm();
}

} // namespace

class TestDecode : public QObject {
    Q_OBJECT

private slots:
    void packedRoundTrip()
    {
        for (int k : {2, 16, 256, 1024, 65536})
            for (int r : {1, 3, 16}) {
                const Codes c = randomCodes(37, 3 * r, k, std::uint64_t(k + r));
                PackedCodes p = packCodes(c, 3, r, k, 50);
                QCOMPARE(p.bytesPerToken % 4, 0);
                QVERIFY(p.bytesPerToken * 8 >= r * PackedCodes::bitsFor(k));
                QVERIFY(p.bytesPerToken * 8 < r * PackedCodes::bitsFor(k) + 32); // no more than the padding
                QCOMPARE(unpackCodes(p), c);
                // Appending more tokens keeps the earlier ones and fills the room left.
                const Codes more = randomCodes(13, 3 * r, k, 99);
                appendCodes(p, more);
                QCOMPARE(p.tokens, std::int64_t(50));
                const Codes all = unpackCodes(p);
                QCOMPARE(Codes(all.topRows(37)), c);
                QCOMPARE(Codes(all.bottomRows(13)), more);
                QVERIFY_THROWS_EXCEPTION(Error, appendCodes(p, randomCodes(1, 3 * r, k, 1)));
            }
        // The paper's 1 BPA (D=128, R=16, K=256): 16 bytes per token and head, one byte per code.
        const PackedCodes p = packCodes(randomCodes(4, 16, 256, 5), 1, 16, 256);
        QCOMPARE(p.bytesPerToken, 16);
        QCOMPARE(int(p.data[std::size_t(p.bytesPerToken + 3)]), packedCode(p, 0, 1, 3));
        QVERIFY_THROWS_EXCEPTION(Error, packCodes(randomCodes(4, 2, 4, 5), 1, 2, 3));
    }

    void paperPathMatchesNaiveOnDecodedRows()
    {
        // Keys stored before RoPE: the reference decodes, rotates at each token's position and
        // attends. Here the same from the quantizer's float decode and core's float RoPE, so the
        // two differ by float rounding of R-term sums and rotations: 1e-5 relative.
        const DecodeShape s{8, 2, 16};
        const int D = 16, R = 3, K = 16, M = 2, T = 200;
        const Codebooks kb = randomBooks(D, R, K, M, 1), vb = randomBooks(D, R, K, M, 2);
        const Codes kcodes = randomCodes(T, M * R, K, 3), vcodes = randomCodes(T, M * R, K, 4);
        std::vector<std::int64_t> pos(T);
        for (int t = 0; t < T; ++t)
            pos[std::size_t(t)] = 100 + t;
        const auto inv = ropeInvFreq(10000.0, s.headDim);
        const Eigen::VectorXf q = test::randomRows(1, s.heads * s.headDim, 5).row(0).transpose();
        const auto out =
            decodeAttention(q, 100 + T, packCodes(kcodes, M, R, K), kb, packCodes(vcodes, M, R, K), vb, pos, inv, s);
        const MatrixRF keys = applyRope(decode(kcodes, kb), s.headDim, pos, inv, RopePairing::RotateHalf);
        const MatrixRF qr = applyRope(MatrixRF(q.transpose()), s.headDim, {100 + T}, inv, RopePairing::RotateHalf);
        const auto ref = naiveAttention(qr.row(0).transpose().cast<double>(), keys.cast<double>(),
                                        decode(vcodes, vb).cast<double>(), s);
        QVERIFY2(relErr(out, ref) < 1e-5, qPrintable(QString::number(relErr(out, ref))));
    }

    void lookupPathMatchesDecodedAttention()
    {
        // Keys stored after RoPE: scores from tables of q·codeword, values from the weight each
        // codeword collected. Algebraically the same as decoding; both in double, so 1e-12.
        // D = head_dim, a subspace spanning two heads (D = 32) and a head over two subspaces (D = 8).
        for (int D : {16, 32, 8}) {
            const DecodeShape s{8, 2, 16};
            const int R = 4, K = 32, M = 32 / D, T = 150;
            const Codebooks kb = randomBooks(D, R, K, M, 11), vb = randomBooks(D, R, K, M, 12);
            const Codes kcodes = randomCodes(T, M * R, K, 13), vcodes = randomCodes(T, M * R, K, 14);
            const Eigen::VectorXf q = test::randomRows(1, s.heads * s.headDim, 15).row(0).transpose();
            const auto out = lookupAttention(q, packCodes(kcodes, M, R, K), kb, packCodes(vcodes, M, R, K), vb, s);
            // Decoded in double here, summed stage by stage.
            MatrixRD keys = MatrixRD::Zero(T, 32), values = MatrixRD::Zero(T, 32);
            for (int t = 0; t < T; ++t)
                for (int m = 0; m < M; ++m)
                    for (int r = 0; r < R; ++r) {
                        keys.block(t, m * D, 1, D) += kb.book(m, r).row(kcodes(t, m * R + r)).cast<double>();
                        values.block(t, m * D, 1, D) += vb.book(m, r).row(vcodes(t, m * R + r)).cast<double>();
                    }
            const auto ref = naiveAttention(q.cast<double>(), keys, values, s);
            QVERIFY2(relErr(out, ref) < 1e-12, qPrintable(QString("D=%1: %2").arg(D).arg(relErr(out, ref))));
        }
    }

    void gqaHeadsShareTheirKvHead()
    {
        // Every query head asks the same question; heads 0–3 read KV head 0, heads 4–7 KV head 1,
        // so outputs agree within a group (exactly: the same arithmetic) and differ across groups.
        const DecodeShape s{8, 2, 16};
        const int D = 16, R = 2, K = 8, M = 2, T = 40;
        const Codebooks kb = randomBooks(D, R, K, M, 21), vb = randomBooks(D, R, K, M, 22);
        const auto kc = packCodes(randomCodes(T, M * R, K, 23), M, R, K);
        const auto vc = packCodes(randomCodes(T, M * R, K, 24), M, R, K);
        const Eigen::VectorXf one = test::randomRows(1, 16, 25).row(0).transpose();
        Eigen::VectorXf q(8 * 16);
        for (int h = 0; h < 8; ++h)
            q.segment(h * 16, 16) = one;
        const auto out = lookupAttention(q, kc, kb, vc, vb, s);
        for (int h = 1; h < 4; ++h) {
            QCOMPARE(Eigen::VectorXd(out.segment(h * 16, 16)), Eigen::VectorXd(out.segment(0, 16)));
            QCOMPARE(Eigen::VectorXd(out.segment((4 + h) * 16, 16)), Eigen::VectorXd(out.segment(64, 16)));
        }
        QVERIFY((out.segment(0, 16) - out.segment(64, 16)).norm() > 1e-3);
    }

    void ropeFarPast64K()
    {
        // RoPE makes q·k depend on the distance only: the same pair shifted by Δ scores the same.
        // In double the angles at 10^6 carry ~1e-10 rounding: 1e-8 relative. Also norms kept.
        const auto inv = ropeInvFreq(500000.0, 128);
        const Eigen::VectorXd q = test::randomRows(1, 128, 31).row(0).transpose().cast<double>();
        const Eigen::VectorXd k = test::randomRows(1, 128, 32).row(0).transpose().cast<double>();
        const double near = ropeRow(q, 128, 130, inv).dot(ropeRow(k, 128, 100, inv));
        for (std::int64_t base : {65536, 70000, 131072, 1000000}) {
            const double far = ropeRow(q, 128, base + 30, inv).dot(ropeRow(k, 128, base, inv));
            QVERIFY2(std::abs(far - near) <= 1e-8 * q.norm() * k.norm(), qPrintable(QString::number(base)));
            QVERIFY(std::abs(ropeRow(k, 128, base, inv).norm() - k.norm()) <= 1e-12 * k.norm());
        }
    }

    // One decode step's bytes, the one definition every backend's points carry: FP16 rows, or the codes
    // of keys and values plus both codebooks once; and the FP32 queries in and outputs out.
    void layerBytesAreTheCacheBooksAndIo()
    {
        const DecodeStepCase c{{32, 8, 128}, 128, 16, 256, 32768, 4};
        const auto cb = cacheBytes(32768 * 4, c.shape, 128, 16, 256);
        const auto fp16 = layerBytes(DecodePath::Fp16, c), lookup = layerBytes(DecodePath::Lookup, c);
        QCOMPARE(fp16.cache, cb.fp16);
        QCOMPARE(fp16.codebooks, 0.0);
        QCOMPARE(fp16.io, 2.0 * 4 * 32 * 128 * 4);
        QCOMPARE(lookup.cache, cb.codes);
        QCOMPARE(lookup.codebooks, cb.codebooks);
        QCOMPARE(layerBytes(DecodePath::Paper, c).total(), lookup.total());
        QCOMPARE(fp16.total(), fp16.cache + fp16.io);
    }

    // The driver: batches outside, contexts inside; a cell's skip reason on every path; a failed check
    // reported at once and not timed; bytes from layerBytes; speed-ups paired by repetition or as the
    // ratio of medians, as the backend says; the roofline fraction from the backend's model.
    void sweepDriverWalksTheGridAndFillsEachPoint()
    {
        struct Fake final : DecodeSweepBackend {
            bool paired = true;
            std::vector<std::pair<int, std::int64_t>> cells;
            std::string prepare(int batch, std::int64_t ctx) override
            {
                cells.emplace_back(batch, ctx);
                return ctx == 64 ? "too long for this machine" : "";
            }
            bool check(DecodeBenchPoint& p) override
            {
                if (p.path != DecodePath::Paper)
                    return true;
                p.skipped = "failed verification";
                return false;
            }
            // FP16 takes 4, 4, 8 and every other path 1, 8, 2 (per repetition): medians 4 and 2.
            std::vector<std::vector<double>> time(const std::vector<DecodeBenchPoint>& points,
                                                  const std::function<bool()>&) override
            {
                std::vector<std::vector<double>> t;
                for (const auto& p : points)
                    t.push_back(p.path == DecodePath::Fp16 ? std::vector<double>{4, 4, 8}
                                                           : std::vector<double>{1, 8, 2});
                return t;
            }
            void model(DecodeBenchPoint& p) override { p.roofline.seconds = 1; }
            bool pairsRepetitions() const override { return paired; }
        } fake;
        DecodeBenchOptions o;
        o.shape = {8, 2, 64};
        o.batches = {1, 2};
        o.contexts = {16, 64};
        o.paths = {DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup};
        DecodeBenchReport rep;
        rep.dim = 64;
        rep.stages = 4;
        rep.k = 256;
        int seen = 0;
        runDecodeSweep(o, rep, fake, [&](const DecodeBenchPoint&) { ++seen; }, {});
        QCOMPARE(fake.cells, (std::vector<std::pair<int, std::int64_t>>{{1, 16}, {1, 64}, {2, 16}, {2, 64}}));
        QCOMPARE(rep.points.size(), std::size_t(12));
        QCOMPARE(seen, 12);
        // Cell (1, 16): the failed check first (reported at once), then the timed ones.
        QCOMPARE(rep.points[0].path, DecodePath::Paper);
        QCOMPARE(rep.points[0].seconds, 0.0);
        const auto& f = rep.points[1];
        const auto& l = rep.points[2];
        QVERIFY(f.path == DecodePath::Fp16 && l.path == DecodePath::Lookup);
        // Medians and extremes of the runs: FP16 4 (4 to 8), the lookup path 2 (1 to 8).
        QVERIFY(f.seconds == 4 && f.minSeconds == 4 && f.maxSeconds == 8);
        QVERIFY(l.seconds == 2 && l.minSeconds == 1 && l.maxSeconds == 8);
        QCOMPARE(f.speedupVsFp16, 1.0);
        // Paired: the median of 4/1, 4/8, 8/2 = 4, 0.5, 4 → 4; the ratio of medians would be 2.
        QCOMPARE(l.speedupVsFp16, 4.0);
        const DecodeStepCase c{o.shape, 64, 4, 256, 16, 1};
        QCOMPARE(f.bytes, layerBytes(DecodePath::Fp16, c).total());
        QCOMPARE(l.bytes, layerBytes(DecodePath::Lookup, c).total());
        QCOMPARE(l.bytesPerSecond, l.bytes / 2.0);
        QCOMPARE(l.rooflineFraction, 0.5);
        // Cell (1, 64): skipped on every path, with the backend's reason.
        for (int i = 3; i < 6; ++i)
            QCOMPARE(rep.points[std::size_t(i)].skipped, std::string("too long for this machine"));
        // Ratio of medians where the backend does not pair repetitions.
        fake.paired = false;
        DecodeBenchReport rep2 = rep;
        rep2.points.clear();
        runDecodeSweep(o, rep2, fake, {}, {});
        QCOMPARE(rep2.points[2].speedupVsFp16, 2.0);
        // A stop before the first cell leaves the report empty.
        DecodeBenchReport rep3 = rep2;
        rep3.points.clear();
        runDecodeSweep(o, rep3, fake, {}, [] { return true; });
        QVERIFY(rep3.points.empty());
    }

    void cacheBytesOfOneBpa()
    {
        // 1 BPA: R·log2 K = 128 bits per 128 features = 16 bytes vs 256 bytes of FP16: 16× smaller.
        const auto b = cacheBytes(32768, {32, 8, 128}, 128, 16, 256);
        QCOMPARE(b.fp16 / b.codes, 16.0);
        QCOMPARE(b.codebooks, 2.0 * 8 * 16 * 256 * 128 * 2);
    }
};

QTEST_APPLESS_MAIN(TestDecode)
#include "tst_decode.moc"
