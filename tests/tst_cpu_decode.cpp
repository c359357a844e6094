// Decode over the compressed cache on the CPU (core/decode): every path against the double
// references of core/lm/decode_cache.h on shapes with GQA (1 to 8 query heads per KV head), several
// subspaces per head, codes narrower than a byte, token splits, a sharp softmax and far positions;
// every kernel build (AVX2, and AVX-512 where the CPU has it) against the plain C++ one; appending real rows as the
// quantizer encodes them; the cost model; and `gsrq bench-decode --backend cpu` end to end into the run store.

#include "core/base/cpu_features.h"
#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/nearest_kernels.h"
#include "core/cluster/nearest_screened.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/cpu_panel_kernels.h"
#include "core/lm/rope.h"
#include "core/store/run_store.h"
#include "test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace gsrq;

namespace {

// Outputs against the double references: FP32 accumulation over FP16-rounded keys, values and
// codewords, with a 2^x within 6e-9 of exact, lands near 1e-6 over thousands of tokens; 1e-5 is
// the target the paths are held to (a wrong index, lane or rescale gives errors of order 1).
constexpr double kTol = 1e-5;

double relErr(const Eigen::VectorXd& a, const Eigen::VectorXd& b)
{
    if (!a.allFinite())
        return std::numeric_limits<double>::infinity();
    return (a - b).norm() / b.norm();
}

struct Case {
    const char* name;
    DecodeShape shape;
    int dim, stages, k;
    std::int64_t tokens;
    int batch, threads;
};

Eigen::VectorXd reference(CpuDecodeCache& c, DecodePath path, const MatrixRF& q, int b, std::int64_t offset)
{
    const DecodeShape& s = c.config().shape;
    const Eigen::VectorXf qb = q.row(b).transpose();
    if (path == DecodePath::Fp16)
        return naiveAttention(qb.cast<double>(), c.fp16Keys(b).cast<double>(), c.fp16Values(b).cast<double>(), s);
    if (path == DecodePath::Lookup)
        return lookupAttention(qb, c.keyCodes(b), c.keyBooks16(), c.valueCodes(b), c.valueBooks16(), s);
    std::vector<std::int64_t> pos(std::size_t(c.tokens()));
    for (std::size_t t = 0; t < pos.size(); ++t)
        pos[t] = offset + std::int64_t(t);
    return decodeAttention(qb, offset + c.tokens(), c.keyCodes(b), c.keyBooks16(), c.valueCodes(b), c.valueBooks16(),
                           pos, ropeInvFreq(c.config().ropeTheta, s.headDim), s);
}

} // namespace

class TestCpuDecode : public QObject {
    Q_OBJECT

private slots:
    void everyPathMatchesItsReference_data()
    {
        QTest::addColumn<int>("index");
        QTest::newRow("GQA 4, one subspace per head, bytes") << 0;
        QTest::newRow("GQA 3, two subspaces per head, 4-bit codes") << 1;
        QTest::newRow("GQA 8, four subspaces per head") << 2;
        QTest::newRow("no GQA, 1-bit codes, odd stages") << 3;
        QTest::newRow("token splits: more threads than heads") << 4;
        QTest::newRow("GQA 2, token splits over two heads") << 5;
        QTest::newRow("GQA 6 in 8 lanes, token splits") << 6;
        QTest::newRow("GQA 4, R = 12: stage groups of 8 and 4, blocks and a partial one") << 7;
        QTest::newRow("R = 16 in two stage groups, two subspaces per head, GQA 8") << 8;
        QTest::newRow("R = 8, one stage group, two blocks and a partial one") << 9;
        QTest::newRow("R = 32: four stage groups") << 10;
        QTest::newRow("K = 16, R = 16: 4-bit codes read packed, GQA 3 (SmolLM2's 1 bit)") << 11;
        QTest::newRow("K = 16, R = 32: 4-bit codes read packed, GQA 6 in 8 lanes (Qwen's 1 bit)") << 12;
        QTest::newRow("K = 16, R = 8: 4-bit codes read packed, two subspaces per head") << 13;
        QTest::newRow("K = 16, R = 16: 4-bit codes read packed from a token split's first token") << 14;
    }
    void everyPathMatchesItsReference()
    {
        QFETCH(int, index);
        const Case cases[] = {
            {"gqa4", {8, 2, 64}, 64, 3, 256, 300, 2, 2},
            {"gqa3", {6, 2, 32}, 16, 2, 16, 171, 2, 1},
            {"gqa8", {8, 1, 128}, 32, 4, 256, 129, 1, 2},
            {"mha", {4, 4, 16}, 8, 5, 2, 77, 3, 2},
            // 4 threads over 1 × 1 (sequence, KV head): the FP16 path splits in 4 (≥ 512 tokens each),
            // the binned paths in 2 (≥ 2,048 each), and the combine merges them.
            {"splits", {4, 1, 64}, 64, 4, 256, 5000, 1, 4},
            // 4 threads over 2 heads: 2 splits each; 3 threads over one head of 6 query heads (8 lanes).
            {"gqa2 splits", {4, 2, 32}, 32, 3, 256, 4300, 1, 4},
            {"gqa6 splits", {6, 1, 64}, 64, 2, 16, 4500, 1, 3},
            // The lookup path's compiled shapes (K = 256; R = 12 and 16): scores and bins a group of
            // eight stages at a time, then the rest, over blocks of 256 tokens and a partial last one.
            {"r12", {8, 2, 64}, 64, 12, 256, 700, 2, 2},
            {"r16", {8, 1, 64}, 32, 16, 256, 600, 1, 1},
            {"r8", {8, 2, 128}, 128, 8, 256, 520, 1, 2},
            {"r32", {4, 1, 64}, 64, 32, 256, 300, 1, 1},
            // K = 16 at R = 8, 16, 32: the lookup path reads the codes two a byte, as the cache packs
            // them (the paper path's copy a byte per code is the other reading of the same bytes).
            {"k16 r16", {9, 3, 64}, 64, 16, 16, 600, 1, 2},
            {"k16 r32", {12, 2, 128}, 128, 32, 16, 530, 2, 2},
            {"k16 r8", {8, 2, 64}, 32, 8, 16, 300, 1, 2},
            {"k16 splits", {4, 1, 64}, 64, 16, 16, 4500, 1, 3},
        };
        const Case& cs = cases[index];
        const auto kb = syntheticDecodeBooks(cs.shape, cs.dim, cs.stages, cs.k, 11);
        const auto vb = syntheticDecodeBooks(cs.shape, cs.dim, cs.stages, cs.k, 12);
        for (const std::string& isa : cpuDecodeIsas()) { // every kernel build this CPU runs
            CpuDecodeConfig cfg{cs.shape, cs.batch, cs.tokens + 3, true, 10000, cs.threads, isa};
            CpuDecodeCache c(cfg, kb, vb);
            c.appendRandom(cs.tokens, 5);
            QCOMPARE(c.tokens(), cs.tokens);
            const MatrixRF q = decodeBenchQuery(cs.batch, cs.shape, 21);
            const std::int64_t offset = index == 0 ? 70000 : 0; // RoPE far past 64K positions
            for (DecodePath path : {DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup}) {
                const MatrixRF out = c.decode(path, q, offset);
                for (int b = 0; b < cs.batch; ++b) {
                    const double e = relErr(out.row(b).transpose().cast<double>(), reference(c, path, q, b, offset));
                    QVERIFY2(e < kTol, qPrintable(QString("%1 %2 %3 sequence %4: relative error %5")
                                                      .arg(cs.name)
                                                      .arg(c.isa())
                                                      .arg(decodePathName(path))
                                                      .arg(b)
                                                      .arg(e)));
                }
            }
            if (index == 4) {
                QCOMPARE(c.splits(DecodePath::Fp16), 4);
                QCOMPARE(c.splits(DecodePath::Lookup), 2);
                QCOMPARE(c.splits(DecodePath::Paper), 2);
            } else if (index == 5) {
                QCOMPARE(c.splits(DecodePath::Fp16), 2);
                QCOMPARE(c.splits(DecodePath::Lookup), 2);
            } else if (index == 6) {
                QCOMPARE(c.splits(DecodePath::Fp16), 3);
                QCOMPARE(c.splits(DecodePath::Lookup), 2);
            } else if (cs.threads <= cs.batch * cs.shape.kvHeads) {
                QCOMPARE(c.splits(DecodePath::Lookup), 1);
            }
        }
    }

    void tablesFromTheAppendsPanels()
    {
        // The lookup tables from the append's FP16 panels (cpu_panel_kernels.h) against the kernels'
        // own, from the same FP16 codewords row by row: every query group G = 1..8 (the groups in
        // flight and their tail), K = 64, 128, 256, one and two subspaces a head. Both are FP32 sums
        // of the same D products in two orders, so an entry differs by at most about D·u·Σ|q·c|
        // (u = 2⁻²⁴; 64·6e-8 = 4e-6): 1e-5 of Σ|q·c| per entry. Lanes past G are exactly 0.
        const cpudecode::Kernels* wide = cpudecode::avx512Kernels();
        if (!wide || !cpudecode::panelKernelsRun({1, 4, 64, 64, 1, 1, 64}))
            QSKIP("this CPU has no AVX-512: the append's FP16 panels, and the tables from them, do not exist here");
        std::mt19937 rng(5);
        std::normal_distribution<float> normal;
        for (int G = 1; G <= 8; ++G)
            for (const int K : {64, 128, 256})
                for (const int P : {1, 2}) {
                    cpudecode::HeadDims d;
                    d.G = G;
                    d.Gp = G <= 4 ? 4 : 8;
                    d.hd = 64;
                    d.D = 64 / P;
                    d.P = P;
                    d.R = 3;
                    d.K = K;
                    std::vector<float> q(std::size_t(G) * d.hd);
                    for (auto& x : q)
                        x = normal(rng);
                    std::vector<std::uint16_t> halves(std::size_t(P) * d.R * K * d.D);
                    std::vector<nearest::ScreenedPanels> packed;
                    std::vector<const std::uint16_t*> panels;
                    for (int p = 0; p < P; ++p)
                        for (int r = 0; r < d.R; ++r) {
                            MatrixRF C(K, d.D);
                            for (Eigen::Index i = 0; i < C.size(); ++i)
                                C.data()[i] = normal(rng);
                            for (int c = 0; c < K; ++c)
                                for (int f = 0; f < d.D; ++f)
                                    halves[((std::size_t(p) * d.R + r) * K + c) * d.D + f] =
                                        Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(C(c, f)));
                            packed.push_back(nearest::packScreened(C));
                            QVERIFY(bool(packed.back()));
                        }
                    for (const auto& pn : packed)
                        panels.push_back(pn.first());
                    const std::size_t entries = std::size_t(P) * d.R * K * d.Gp;
                    std::vector<float> a(entries, -1.f), b(entries, -1.f);
                    cpudecode::tablesFromPanels(d, q.data(), panels.data(), a.data());
                    wide->tables(d, q.data(), halves.data(), b.data());
                    for (std::size_t e = 0; e < entries; ++e) {
                        const int g = int(e % std::size_t(d.Gp));
                        const std::size_t row = e / std::size_t(d.Gp);
                        const int p = int(row / (std::size_t(d.R) * K));
                        if (g >= G) {
                            QCOMPARE(a[e], 0.f);
                            continue;
                        }
                        double mag = 0;
                        for (int f = 0; f < d.D; ++f)
                            mag += std::fabs(double(q[std::size_t(g) * d.hd + std::size_t(p) * d.D + f]) *
                                             double(float(Eigen::numext::bit_cast<Eigen::half>(
                                                 halves[row * std::size_t(d.D) + std::size_t(f)]))));
                        QVERIFY2(std::fabs(double(a[e]) - double(b[e])) <= 1e-5 * mag,
                                 qPrintable(QString("G %1 K %2 P %3 entry %4: %5 against %6")
                                                .arg(G)
                                                .arg(K)
                                                .arg(P)
                                                .arg(e)
                                                .arg(a[e])
                                                .arg(b[e])));
                    }
                }
    }

    void vectorKernelsAgreeWithPortableOnes()
    {
        // The same cache through every kernel build: the vector code (AVX2, and AVX-512 where the CPU
        // has it) and the plain C++ differ only in rounding (summation order, 2^x), far below 1e-6.
        const auto isas = cpuDecodeIsas();
        QCOMPARE(isas.front(), std::string("portable"));
        QCOMPARE(isas.back(), std::string(cpuDecodeIsa())); // the default is the widest
        if (isas.size() == 1)
            QSKIP("this CPU runs no vector build (not x86-64, or no AVX2): only the plain C++ runs");
        const DecodeShape s{8, 2, 128};
        const auto kb = syntheticDecodeBooks(s, 128, 8, 256, 1), vb = syntheticDecodeBooks(s, 128, 8, 256, 2);
        CpuDecodeCache plain({s, 2, 2100, true, 10000, 2, "portable"}, kb, vb);
        plain.appendRandom(2049, 3);
        QCOMPARE(plain.isa(), "portable");
        const MatrixRF q = decodeBenchQuery(2, s, 4);
        for (std::size_t i = 1; i < isas.size(); ++i) {
            CpuDecodeCache vec({s, 2, 2100, true, 10000, 2, isas[i]}, kb, vb);
            vec.appendRandom(2049, 3);
            QCOMPARE(std::string(vec.isa()), isas[i]);
            for (DecodePath path : {DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup}) {
                const MatrixRF a = vec.decode(path, q), b = plain.decode(path, q);
                const double e = (a - b).norm() / b.norm();
                QVERIFY2(e < 1e-6, qPrintable(QString("%1 %2: %3").arg(vec.isa()).arg(decodePathName(path)).arg(e)));
            }
        }
        // A build this CPU cannot run (or that does not exist) is refused by name.
        try {
            CpuDecodeCache bad({s, 1, 10, true, 10000, 1, "neon"}, kb, vb);
            QFAIL("an unknown kernel build was accepted");
        } catch (const Error& e) {
            QVERIFY2(std::string(e.what()).find("--isa neon") != std::string::npos, e.what());
        }
    }

    void sharpSoftmaxRaisesTheReferenceMidContext()
    {
        // One late token's key is the query's direction, scaled so its score is about 40 (natural
        // units; 58 in the kernels' log2 units) against scores near 0 for the others: the running
        // reference must be raised far past the lazy threshold (2^8) long after the first block, with
        // sums, outputs and bins rescaled. Codeword 0 of stage 0 is that key and codeword 0 of stage 1
        // is zero, so its codes (and the lookup and paper paths' key) are exact. The query lives in
        // the slowest-turning RoPE pairs (angles under 0.3 rad over the 300 positions between that
        // token and the query), so the paper path, which rotates both, sees nearly the same score.
        // With R = 2 the lookup path runs its any-shape loop; with R = 12 (K = 256) its compiled one,
        // where the raise happens in the block of 256 tokens that starts at token 2,048.
        const DecodeShape s{4, 1, 64};
        for (const int stages : {2, 12}) {
            Codebooks kb = syntheticDecodeBooks(s, 64, stages, 256, 7),
                      vb = syntheticDecodeBooks(s, 64, stages, 256, 8);
            Eigen::VectorXf q0 = Eigen::VectorXf::Zero(64);
            for (int i = 26; i < 32; ++i) { // pairs (i, i + 32): inverse frequencies ≤ 10000^(−52/64)
                q0[i] = 0.5f + 0.1f * float(i - 26);
                q0[i + 32] = 0.3f;
            }
            const Eigen::VectorXf k0 = q0 * (40.f * 8.f / q0.squaredNorm()); // q0·k0 / √64 = 40
            kb.book(0, 0).row(0) = k0.transpose();
            for (int r = 1; r < stages; ++r)
                kb.book(0, r).row(0).setZero();
            for (const std::string& isa : cpuDecodeIsas()) {
                CpuDecodeCache c({s, 1, 3000, true, 10000, 1, isa}, kb, vb);
                MatrixRF keys = test::randomRows(2500, 64, 31, 0.3f);
                const MatrixRF values = test::randomRows(2500, 64, 32);
                keys.row(2200) = k0.transpose();
                c.append(keys, values);
                for (int r = 0; r < stages; ++r)
                    QCOMPARE(packedCode(c.keyCodes(0), 0, 2200, r), 0);
                MatrixRF q(1, 4 * 64);
                for (int h = 0; h < 4; ++h)
                    q.block(0, h * 64, 1, 64) = q0.transpose();
                const Codes vcodes = unpackCodes(c.valueCodes(0));
                for (DecodePath path : {DecodePath::Fp16, DecodePath::Lookup, DecodePath::Paper}) {
                    const MatrixRF out = c.decode(path, q);
                    const double e = relErr(out.row(0).transpose().cast<double>(), reference(c, path, q, 0, 0));
                    QVERIFY2(e < kTol,
                             qPrintable(QString("R = %1, %2: %3").arg(stages).arg(decodePathName(path)).arg(e)));
                    // The other 2,499 tokens weigh under e^−25 of it together: the output is its value
                    // (as stored: FP16, or decoded from its codes), to well within 1e-3.
                    const Eigen::VectorXf v =
                        path == DecodePath::Fp16
                            ? Eigen::VectorXf(c.fp16Values(0).row(2200).transpose())
                            : Eigen::VectorXf(decode(Codes(vcodes.row(2200)), c.valueBooks16()).row(0).transpose());
                    QVERIFY2((out.row(0).segment(0, 64).transpose() - v).norm() < 1e-3 * v.norm(),
                             decodePathName(path));
                }
            }
        }
    }

    // A decode step's new token is encoded through FP16 copies of the codewords and an exact second
    // look (nearest_screened.h): the label and score must be every vector kernel build's bit for bit
    // (AVX-512 and AVX2 score a pair alike), on random rows and on rows built to defeat the screen:
    // codewords in pairs up to 1.5 FP16 steps (3·2⁻¹² relative) apart or equal (their FP16 scores can
    // order them the other way round from their FP32 ones), rows halfway between a pair, exact
    // duplicates (a tie goes to the lower index), codewords FP16 holds only as subnormals, rows of
    // very different sizes, and a NaN row (every kernel: codeword 0 at −∞). K not a multiple of 16 or
    // 128 and D not a multiple of 16 exercise the padding. The screen must also screen: on random rows
    // it scores few codewords again.
    void screenedNearestIsTheKernelsBitForBit()
    {
        if (!cpuFeatures().avx512)
            QSKIP("the FP16 screen runs where the CPU has AVX-512; this one has not");
        std::mt19937 rng(17);
        std::normal_distribution<float> normal;
        for (const auto& shape : {std::pair{256, 64}, {256, 16}, {100, 24}, {7, 80}}) {
            const int K = shape.first, D = shape.second; // named, not bound: the lambda below captures them
            MatrixRF C = test::randomRows(K, D, std::uint64_t(K * D), 0.6f);
            const int pairs = std::min(64, K - K % 2);
            for (int c = 1; c < pairs; c += 2)
                for (int d = 0; d < D; ++d)
                    C(c, d) = C(c - 1, d) * (1.0f + std::ldexp(float(int(rng() % 7) - 3), -12));
            if (K > 100)
                C.row(K - 1) = C.row(K / 2);
            if (K > 4)
                C.row(3) *= 1e-6f; // below FP16's normal range (6.1e-5): subnormal halves
            const nearest::ScreenedPanels screened = nearest::packScreened(C);
            QVERIFY(screened);
            std::vector<float> scratch;
            for (const nearest::NearestKernels* kernel : nearest::availableNearest()) {
                if (kernel->width == 0)
                    continue; // the portable build's GEMM rounds otherwise; append does not use it
                const nearest::NearestPanels panels = nearest::packCodewords(C, *kernel);
                nearest::screenedCounts() = {};
                const auto check = [&](const Eigen::RowVectorXf& x, const char* what) {
                    std::int32_t a = -1, b = -1;
                    float sa = 0, sb = 0;
                    nearest::nearestScreened(x.data(), screened, &a, &sa, scratch);
                    kernel->nearest(x.data(), 1, D, panels, &b, &sb);
                    QVERIFY2(a == b && std::memcmp(&sa, &sb, sizeof sa) == 0,
                             qPrintable(QString("%1, K %2, D %3, %4: screened %5 (%6), the kernel %7 (%8)")
                                            .arg(kernel->isa)
                                            .arg(K)
                                            .arg(D)
                                            .arg(what)
                                            .arg(a)
                                            .arg(double(sa), 0, 'g', 9)
                                            .arg(b)
                                            .arg(double(sb), 0, 'g', 9)));
                };
                for (int t = 0; t < 300; ++t)
                    check(test::randomRows(1, D, 1000 + std::uint64_t(t), 0.6f).row(0), "a random row");
                const auto random = nearest::screenedCounts();
                QVERIFY2(double(random.rescored) < 4.0 * double(random.calls),
                         qPrintable(QString("%1 rescored in %2 calls").arg(random.rescored).arg(random.calls)));
                for (int t = 0; t < 400 && pairs > 0; ++t) {
                    const int c = 2 * int(rng() % std::uint32_t(pairs / 2));
                    Eigen::RowVectorXf x = 0.5f * (C.row(c) + C.row(c + 1));
                    for (int d = 0; d < D; ++d)
                        x[d] += std::ldexp(normal(rng), -16) * std::fabs(x[d]);
                    check(x, "a row halfway between a pair");
                }
                for (int t = 0; t < 20; ++t) {
                    Eigen::RowVectorXf x = C.row(K / 2);
                    x[t % D] += 1e-3f;
                    check(x, "a row at a duplicated codeword");
                }
                for (const float scale : {1e-6f, 1e-3f, 30.0f, 3e4f}) {
                    check(scale * test::randomRows(1, D, 77, 1.0f).row(0), "a row far from the codewords' size");
                    check(scale * C.row(3), "a row at a subnormal codeword");
                }
                Eigen::RowVectorXf nan = C.row(0);
                nan[D / 2] = std::numeric_limits<float>::quiet_NaN();
                check(nan, "a NaN row");
            }
        }
        // Codewords FP16 cannot hold, or not finite: no panels (the FP32 kernel is used).
        MatrixRF big = test::randomRows(32, 16, 3);
        big(5, 7) = 70000.0f;
        QVERIFY(!nearest::packScreened(big));
        big(5, 7) = std::numeric_limits<float>::quiet_NaN();
        QVERIFY(!nearest::packScreened(big));
    }

    void appendEncodesAsTheQuantizerDoes()
    {
        // Real rows appended in two steps: the codes are the quantizer's greedy encoding, the FP16
        // copies the rows rounded, and the lookup path then reads exactly those.
        const DecodeShape s{4, 2, 32};
        Codebooks kb = syntheticDecodeBooks(s, 16, 3, 16, 5), vb = syntheticDecodeBooks(s, 16, 3, 16, 6);
        CpuDecodeCache c({s, 2, 40, true, 10000, 2, ""}, kb, vb);
        const MatrixRF k1 = test::randomRows(2 * 7, 64, 1, 0.5f), v1 = test::randomRows(2 * 7, 64, 2, 0.5f);
        const MatrixRF k2 = test::randomRows(2 * 5, 64, 3, 0.5f), v2 = test::randomRows(2 * 5, 64, 4, 0.5f);
        const auto [ck1, cv1] = c.append(k1, v1);
        c.append(k2, v2);
        QCOMPARE(c.tokens(), std::int64_t(12));
        auto backend = makeCpuBackend(1);
        QCOMPARE(ck1, encode(k1, kb, 1, *backend));
        QCOMPARE(cv1, encode(v1, vb, 1, *backend));
        // Sequence 1's codes: its rows of each step, in order.
        const Codes all = unpackCodes(c.keyCodes(1));
        QCOMPARE(Codes(all.topRows(7)), Codes(encode(k1, kb, 1, *backend).bottomRows(7)));
        QCOMPARE(Codes(all.bottomRows(5)), Codes(encode(k2, kb, 1, *backend).bottomRows(5)));
        const MatrixRF f = c.fp16Values(1);
        QCOMPARE(f.rows(), Eigen::Index(12));
        QCOMPARE(f(0, 3), float(Eigen::half(v1(7, 3))));
        QCOMPARE(f(11, 63), float(Eigen::half(v2(9, 63))));
        // A decode step's rows, one token at a time, through a wider codebook (K = 256, 4 stages):
        // the step encoder's codes are the quantizer's, row after row.
        {
            const DecodeShape s1{2, 1, 64};
            const Codebooks kb1 = syntheticDecodeBooks(s1, 32, 4, 256, 7),
                            vb1 = syntheticDecodeBooks(s1, 32, 4, 256, 8);
            CpuDecodeCache one({s1, 1, 64, true, 10000, 2, ""}, kb1, vb1);
            for (int t = 0; t < 40; ++t) {
                const MatrixRF k = test::randomRows(1, 64, 100 + t, 0.7f), v = test::randomRows(1, 64, 200 + t, 0.7f);
                const auto [ck, cv] = one.append(k, v);
                QCOMPARE(ck, encode(k, kb1, 1, *backend));
                QCOMPARE(cv, encode(v, vb1, 1, *backend));
            }
        }
        // A K = 256 book with one codeword past FP16's range: the FP16 screen refuses it, and the
        // append searches the FP32 panels, eight of 32 codewords (16 on AVX2) a stage, taking each
        // chosen codeword back out of its panel: the quantizer's codes still, for labels in any panel.
        {
            const DecodeShape s1{2, 1, 64};
            Codebooks kb1 = syntheticDecodeBooks(s1, 32, 4, 256, 9);
            const Codebooks vb1 = syntheticDecodeBooks(s1, 32, 4, 256, 10);
            kb1.book(1, 2)(255, 5) = 70000.f;
            CpuDecodeCache one({s1, 1, 64, true, 10000, 2, ""}, kb1, vb1);
            std::vector<int> panels(8, 0);
            for (int t = 0; t < 40; ++t) {
                const MatrixRF k = test::randomRows(1, 64, 300 + t, 0.7f), v = test::randomRows(1, 64, 400 + t, 0.7f);
                const auto [ck, cv] = one.append(k, v);
                QCOMPARE(ck, encode(k, kb1, 1, *backend));
                QCOMPARE(cv, encode(v, vb1, 1, *backend));
                for (Eigen::Index j = 0; j < ck.cols(); ++j)
                    ++panels[std::size_t(ck(0, j) / 32)];
            }
            QVERIFY2(std::count_if(panels.begin(), panels.end(), [](int n) { return n > 0; }) >= 6,
                     "the labels should fall in most of the eight panels");
        }
        // FP16 copies only: the rows rounded, their codes 0, the FP16 path reads them as append's.
        {
            const DecodeShape s1{2, 1, 64};
            const Codebooks kb1 = syntheticDecodeBooks(s1, 32, 2, 16, 3), vb1 = syntheticDecodeBooks(s1, 32, 2, 16, 4);
            CpuDecodeCache a({s1, 1, 16, true, 10000, 1, ""}, kb1, vb1), b({s1, 1, 16, true, 10000, 1, ""}, kb1, vb1);
            const MatrixRF k = test::randomRows(9, 64, 11, 0.5f), v = test::randomRows(9, 64, 12, 0.5f);
            a.append(k, v);
            b.appendFp16(k, v);
            QCOMPARE(b.tokens(), std::int64_t(9));
            QCOMPARE(b.fp16Keys(0), a.fp16Keys(0));
            QCOMPARE(b.fp16Values(0), a.fp16Values(0));
            QVERIFY((unpackCodes(b.keyCodes(0)).array() == 0).all());
            const MatrixRF q = test::randomRows(1, 128, 13);
            QCOMPARE(b.decode(DecodePath::Fp16, q), a.decode(DecodePath::Fp16, q));
        }
        // Full: refused, nothing half-written.
        QVERIFY_THROWS_EXCEPTION(Error, c.append(test::randomRows(2 * 30, 64, 9), test::randomRows(2 * 30, 64, 9)));
        QCOMPARE(c.tokens(), std::int64_t(12));
        // Repeated to 40 tokens: token t is token t mod 12, codes and FP16 rows, in every sequence;
        // one token more does not fit, and is refused before anything is copied.
        QVERIFY_THROWS_EXCEPTION(Error, c.appendRepeat(29));
        c.appendRepeat(28);
        QCOMPARE(c.tokens(), std::int64_t(40));
        for (int b = 0; b < 2; ++b) {
            const Codes k = unpackCodes(c.keyCodes(b)), v = unpackCodes(c.valueCodes(b));
            const MatrixRF fk = c.fp16Keys(b), fv = c.fp16Values(b);
            for (int t = 12; t < 40; ++t) {
                QCOMPARE(Codes(k.row(t)), Codes(k.row(t % 12)));
                QCOMPARE(Codes(v.row(t)), Codes(v.row(t % 12)));
                QCOMPARE(MatrixRF(fk.row(t)), MatrixRF(fk.row(t % 12)));
                QCOMPARE(MatrixRF(fv.row(t)), MatrixRF(fv.row(t % 12)));
            }
        }
    }

    void badInputIsRefusedWithItsName()
    {
        const DecodeShape s{8, 2, 64};
        const auto kb = syntheticDecodeBooks(s, 64, 2, 256, 1);
        auto problem = [](const DecodeShape& sh, int D, int R, int K) {
            return QString::fromStdString(cpuDecodeShapeProblem(sh, D, R, K));
        };
        QVERIFY(problem(s, 64, 2, 256).isEmpty());
        QVERIFY(problem({8, 3, 64}, 64, 2, 256).contains("--heads"));
        QVERIFY(problem({18, 2, 64}, 64, 2, 256).contains("at most 8"));
        QVERIFY(problem({8, 2, 40}, 8, 2, 256).contains("--head-dim"));
        QVERIFY(problem(s, 12, 2, 256).contains("D = 12"));
        QVERIFY(problem(s, 64, 2, 512).contains("K = 512"));
        QVERIFY(problem(s, 64, 0, 256).contains("R = 0"));
        QVERIFY_THROWS_EXCEPTION(
            Error, CpuDecodeCache({{8, 2, 64}, 1, 10}, kb, syntheticDecodeBooks({8, 4, 64}, 64, 2, 256, 1)));
        CpuDecodeCache c({s, 1, 10}, kb, kb);
        const MatrixRF q = decodeBenchQuery(1, s, 1);
        try {
            c.decode(DecodePath::Lookup, q);
            QFAIL("a step over an empty cache ran");
        } catch (const Error& e) {
            QVERIFY(QString(e.what()).contains("no tokens"));
        }
        c.appendRandom(5, 1);
        QVERIFY_THROWS_EXCEPTION(Error, c.decode(DecodePath::Lookup, decodeBenchQuery(2, s, 1)));
        QVERIFY_THROWS_EXCEPTION(Error, c.appendRandom(6, 1));
        QVERIFY_THROWS_EXCEPTION(Error, c.keyCodes(1));
    }

    void speedUpsPairRunsTimedInTurn()
    {
        // The median of each repetition's FP16 time over the path's time in the same repetition. Here
        // the machine slows tenfold for three repetitions; every pair keeps its ratio of 2, while one
        // outlier pair (ratio 20, a burst during one FP16 run) moves the median of ratios not at all.
        QCOMPARE(pairedSpeedup({1, 1, 10, 10, 10, 1, 10}, {0.5, 0.5, 5, 5, 5, 0.5, 0.5}), 2.0);
        // Pairs up to the shorter list; a run of no time is left out; no pairs gives 0.
        QCOMPARE(pairedSpeedup({4, 4, 4}, {1, 2}), 3.0);
        QCOMPARE(pairedSpeedup({4, 4}, {0, 2}), 2.0);
        QCOMPARE(pairedSpeedup({}, {1}), 0.0);
    }

    void aFailedCheckFailsTheReport()
    {
        // A point that fails its check against the reference is reported with why (skipped) and makes
        // the report fail (gsrq bench-decode exits 1); a point skipped for memory, never checked, and
        // an unchecked run (--no-verify: relError −1) do not.
        DecodeBenchReport rep;
        DecodeBenchPoint memory;
        memory.skipped = "needs 90 GB of memory";
        rep.points.push_back(memory);
        rep.points.push_back(DecodeBenchPoint{});
        QVERIFY(rep.allVerified());
        DecodeBenchPoint good, bad;
        const Eigen::VectorXd ref = Eigen::VectorXd::LinSpaced(8, 1, 8);
        MatrixRF out = ref.cast<float>().transpose();
        QVERIFY(verifyDecodePoint(good, out, ref));
        rep.points.push_back(good);
        QVERIFY(rep.allVerified());
        out(0, 3) += 1.f; // relative error 1/√204 ≈ 0.07
        QVERIFY(!verifyDecodePoint(bad, out, ref));
        QVERIFY(bad.skipped.find("failed verification") != std::string::npos);
        rep.points.push_back(bad);
        QVERIFY(!rep.allVerified());
    }

    void costModelCountsWhatEachPathMoves()
    {
        // 32 heads, 8 KV heads × 128, R = 12, K = 256, 32K tokens, batch 1.
        const CpuDecodeCostCase c{{32, 8, 128}, 128, 12, 256, 32768, 1};
        const double tokens = 8.0 * 32768, io = 32 * 128 * 4.0 * 2;
        const auto fp16 = cpuDecodeCosts(DecodePath::Fp16, c);
        QCOMPARE(fp16.memoryBytes, tokens * 512 + io); // 256 B of key and 256 B of value per (token, KV head)
        QCOMPARE(fp16.flops, tokens * 4 * 4 * 128.0);  // 4 query heads, q·k and p·v
        const auto lookup = cpuDecodeCosts(DecodePath::Lookup, c);
        const double books = 8 * 12 * 256 * 128 * 2.0;
        QCOMPARE(lookup.memoryBytes, tokens * 2 * 12 + 2 * books + io);
        QCOMPARE(lookup.lookups, tokens * 12 * 2); // R table loads, R bin updates
        DecodeRates r;
        r.memory = 20e9;
        r.memoryName = "dram";
        r.lookups = 2e9;
        r.flops = 1e11;
        const Roofline rf = roofline(fp16, r), rl = roofline(lookup, r);
        QCOMPARE(rf.bound, std::string("dram"));
        QCOMPARE(rl.bound, std::string("lookups"));
        QVERIFY(std::abs(rl.seconds - lookup.lookups / 2e9) < 1e-12);
    }

    void benchDecodeOnTheCpuVerifiesTimesAndRecords()
    {
        // The CLI end to end on any machine: every point verified against the double reference
        // before it is timed, with the rates measured in the same run, recorded as a cpu run.
        QTemporaryDir dir;
        const QString db = dir.filePath("runs.db");
        const auto r = test::gsrqRun(
            {"--db",       db,       "bench-decode", "--backend", "cpu",   "--threads", "2",       "--heads", "8",
             "--kv-heads", "2",      "--head-dim",   "64",        "--ctx", "300,2100",  "--batch", "1,2",     "--bpa",
             "1",          "--reps", "20",           "--warmup",  "1",     "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        const QJsonObject summary = j["summary"].toObject();
        QVERIFY(summary["all_verified"].toBool());
        QCOMPARE(summary["backend"].toString(), QString("cpu"));
        QCOMPARE(summary["threads"].toInt(), 2);
        QVERIFY(summary["read_bytes_per_second"].toDouble() > 0);
        QVERIFY(summary["rates"].toObject()["lookups_per_second"].toDouble() > 0);
        const QJsonArray points = j["points"].toArray();
        QCOMPARE(points.size(), 2 * 2 * 3); // contexts × batches × paths
        for (const auto& v : points) {
            const QJsonObject p = v.toObject();
            QVERIFY(p["verified"].toBool());
            QVERIFY(p["rel_error"].toDouble() < kTol);
            QVERIFY(p["seconds_per_layer"].toDouble() > 0);
            QVERIFY(p["fraction_of_read_bandwidth"].toDouble() > 0);
            QVERIFY(!p["roofline_bound"].toString().isEmpty());
            QVERIFY(p["model"].toObject().contains("lookups"));
            // Every FP16 point has its Eigen FP32 sanity check beside it (run only when it matched the
            // same reference), and only FP16 points have one.
            QCOMPARE(p.contains("eigen_fp32_seconds"), p["path"].toString() == "fp16");
            if (p["path"].toString() == "fp16") {
                QVERIFY(p["eigen_fp32_seconds"].toDouble() > 0);
                // And the plain read of its rows, timed beside it.
                QVERIFY(p["read_rows_seconds"].toDouble() > 0);
                QCOMPARE(p["fraction_of_read_rows"].toDouble(),
                         p["read_rows_seconds"].toDouble() / p["seconds_per_layer"].toDouble());
            }
        }
        QCOMPARE(summary["isa"].toString().toStdString(), std::string(cpuDecodeIsa())); // the widest by default
        RunStore store(db.toStdString());
        const auto runs = store.listRuns({"bench-decode", RunStatus::Done, "", 5});
        QCOMPARE(int(runs.size()), 1);
        QCOMPARE(runs[0].backend, std::string("cpu"));
        QVERIFY(QString::fromStdString(runs[0].device).contains("2 threads"));
        QCOMPARE(nlohmann::json::parse(runs[0].settingsJson)["threads"].get<int>(), 2);
        // One series per path and batch, one point per context, as the Latency page draws them.
        int lookupPoints = 0;
        for (const auto& p : store.series(runs[0].id))
            if (p.name == "lookup b=2")
                ++lookupPoints;
        QCOMPARE(lookupPoints, 2);
    }

    void benchDecodeRunsTheNamedKernels()
    {
        // --isa picks a build: the run says which kernels it timed, in its summary and its settings.
        QTemporaryDir dir;
        const QString db = dir.filePath("runs.db");
        const auto r =
            test::gsrqRun({"--db",      db,      "bench-decode", "--backend",   "cpu",        "--isa",  "portable",
                           "--threads", "1",     "--heads",      "4",           "--kv-heads", "1",      "--head-dim",
                           "32",        "--ctx", "200",          "--bpa",       "1",          "--reps", "20",
                           "--warmup",  "1",     "--paths",      "fp16,lookup", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["summary"].toObject()["isa"].toString(), QString("portable"));
        QCOMPARE(j["settings"].toObject()["isa"].toString(), QString("portable"));
        QVERIFY(j["summary"].toObject()["all_verified"].toBool());
    }

    void benchDecodeBadFlagsExitTwo()
    {
        // Each bad flag named, exit 2, before anything is measured (--no-db: nothing recorded either).
        const std::pair<QStringList, QString> cases[] = {
            {{"--backend", "fpga"}, "--backend"},
            {{"--backend", "cpu", "--threads", "-1"}, "--threads"},
            {{"--backend", "cpu", "--head-dim", "40", "--bpa", "1"}, "--head-dim"},
            {{"--backend", "cpu", "--bpa", "0.7"}, "--bpa"},
            {{"--backend", "cpu", "--paths", "fp16,fast"}, "--paths"},
            {{"--backend", "cpu", "--ctx", "0"}, "--ctx"},
            {{"--backend", "cpu", "--head-dim", "40"}, "--head-dim"}, // named before the --bpa it rules out
            {{"--backend", "cpu", "--dim", "128", "--stages", "40", "--k", "256"}, "--stages"},
            {{"--backend", "cpu", "--threads", "5000"}, "--threads"},
            {{"--backend", "cpu", "--rope-theta", "0"}, "--rope-theta"},
            {{"--backend", "cpu", "--anchor", "timings.json"}, "--anchor"},
            {{"--backend", "cpu", "--isa", "neon"}, "--isa"},
            {{"--backend", "cuda", "--isa", "avx2"}, "--isa"},
        };
        for (const auto& [args, flag] : cases) {
            const auto r = test::gsrqRun(QStringList{"--no-db", "bench-decode"} + args);
            QVERIFY2(r.code == 2, qPrintable(args.join(' ') + ": " + r.err));
            QVERIFY2(r.err.contains(flag.toUtf8()), r.err.constData());
        }
    }
};

QTEST_GUILESS_MAIN(TestCpuDecode)
#include "tst_cpu_decode.moc"
