// Products of GGUF block weights with activations rounded to 8 bits (core/lm/quant_gemm.h): every
// block type the engine reads and every build this CPU runs against the FP32 product, the dispatch
// on a CPU without VNNI, the refusals; and the prefill through those products (and the others) in
// chunks against the token-by-token path.

#include "core/base/cpu_features.h"
#include "core/base/error.h"
#include "core/io/gguf.h"
#include "core/lm/gguf_model.h"
#include "core/lm/quant_gemm.h"
#include "core/lm/quant_gemm_tiled.h"
#include "core/lm/quant_matvec.h"
#include "test_blocks.h"
#include "test_util.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <vector>

using namespace gsrq;
using gsrq::test::RandomBlocks;
using gsrq::test::randomBlocks;

namespace {

float f16At(const std::vector<std::uint8_t>& raw, std::size_t at)
{
    return halfToFloat(std::uint16_t(raw[at] | (raw[at + 1] << 8)));
}

} // namespace

class TestQuantProducts : public QObject {
    Q_OBJECT
private slots:
    void q8ProductsWithinTheRoundingBound();
    void buildsAgreeAndTokensAreIndependent();
    void withoutVnniTheAvx2BuildRuns();
    void activationsRoundAlikeInEveryBuild();
    void finiteFromTheScalesAlone();
    void refusals();
    void prefillInChunksEqualsTokenByToken();
    void decodeStepReadsTheWeightBlocks();
    void blocksOnlyModelEqualsItsFp32Copies();
};

// Against W·x in double over the FP32 activations, each output of every build lies within the
// activation-rounding bound (quantGemmErrorBound: each activation moves by at most amax/254 of its
// block) plus FP32 summation slop. The slop: the kernel's sums hold the unpacked quants (Q4_0's q
// with its −8 as an offset, Q8_0's q + 128 in the VNNI build, Q6_K's q with its −32), so its terms
// reach about |scale|·256·|x| where the true product's are |w·x|; FP32 sums of up to 2,048 such
// terms err by at most n·u ≈ 2048 · 6e-8 ≈ 1.2e-4 of Σ|terms|. A wrong quant, scale, shift, offset
// or lane order (errors of the size of whole terms) fails.
void TestQuantProducts::q8ProductsWithinTheRoundingBound()
{
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<std::tuple<GgmlType, std::int64_t, std::int64_t>> cases;
    for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
        cases.emplace_back(type, 37, 512);
    // An odd number of 32-value blocks (the VNNI build's 256-bit tail), and a matrix over the threads.
    for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0})
        cases.emplace_back(type, 19, 352);
    cases.emplace_back(GgmlType::Q6_K, 1400, 1536); // 1.8 MB: one token's rows split over the threads too
    for (const auto& [type, rows, cols] : cases) {
        const RandomBlocks b = randomBlocks(type, rows, cols, rng);
        QVERIFY(b.matrix);
        // One token (a decode step: straight from the blocks); a tile of four and one (each row
        // unpacked, dotted with up to four tokens); two tiles of six and one (the VNNI build's tiled
        // kernel from 8 tokens: 32 rows packed at a time, the last panel part empty).
        for (const int T : {1, 5, 13}) {
            std::vector<float> x(std::size_t(T * cols));
            for (auto& v : x)
                v = normal(rng);
            x[7] = 0; // a zero among them; and a whole block of zeros in the last token
            std::fill_n(x.begin() + (T - 1) * cols, 32, 0.0f);
            Q8Activations q;
            quantizeActivations(x.data(), T, cols, cols, q);
            const std::vector<double> bound = quantGemmErrorBound(b.matrix, q);
            int builds = 0;
            for (const char* isa : {"portable", "avx2", "avx512-vnni"}) {
                std::vector<float> y(std::size_t(T * rows), std::numeric_limits<float>::quiet_NaN());
                if (!quantGemmBuild(isa, b.matrix, q, y.data(), rows))
                    continue;
                ++builds;
                double worst = 0;
                for (int t = 0; t < T; ++t)
                    for (std::int64_t r = 0; r < rows; ++r) {
                        double ref = 0, slop = 0;
                        for (std::int64_t c = 0; c < cols; ++c) {
                            const double w = b.dequantized[std::size_t(r * cols + c)],
                                         xv = x[std::size_t(t * cols + c)];
                            ref += w * xv;
                            slop += std::abs(w * xv);
                        }
                        // The unpacked terms' magnitudes: at most 256 × each block's largest |scale|.
                        const auto traits = *ggmlTypeTraits(std::uint32_t(type));
                        double big = 0;
                        for (std::int64_t k = 0; k < cols / traits.blockElements; ++k) {
                            const std::size_t at =
                                std::size_t((r * cols / traits.blockElements + k) * traits.blockBytes);
                            double scale = std::abs(f16At(b.raw, type == GgmlType::Q6_K ? at + 208 : at));
                            if (type == GgmlType::Q4_1 || type == GgmlType::Q4_K)
                                scale = std::max(scale, double(std::abs(f16At(b.raw, at + 2))));
                            if (type == GgmlType::Q4_K || type == GgmlType::Q6_K)
                                scale *= 128; // the 6-bit or 8-bit sub-block scales
                            double sx = 0;
                            for (int i = 0; i < traits.blockElements; ++i)
                                sx += std::abs(x[std::size_t(t * cols + k * traits.blockElements + i)]);
                            big += 256 * scale * sx;
                        }
                        const double y1 = y[std::size_t(t * rows + r)];
                        const double tol = bound[std::size_t(t * rows + r)] + 1.2e-4 * (slop + big);
                        worst = std::max(worst, std::abs(y1 - ref));
                        QVERIFY2(std::abs(y1 - ref) <= tol,
                                 qPrintable(QString("%1 %2, token %3 row %4: %5 against %6 (bound %7)")
                                                .arg(ggmlTypeName(type))
                                                .arg(isa)
                                                .arg(t)
                                                .arg(r)
                                                .arg(y1)
                                                .arg(ref)
                                                .arg(tol)));
                    }
                // The activations are rounded (errors far above FP32 activations' 1e-7 of the bound).
                QVERIFY2(worst > 1e-3 * *std::max_element(bound.begin(), bound.end()),
                         qPrintable(QString("%1 %2: largest error %3").arg(ggmlTypeName(type)).arg(isa).arg(worst)));
            }
            QCOMPARE(builds, 1 + int(cpuFeatures().avx2) + int(cpuFeatures().avx512vnni));
        }
    }
}

// Every build gives every token the same result to FP32 rounding, whether the token is computed
// alone or among 8 to 14 (the VNNI build's tiled kernel: a tile of six and every remainder from
// two to five, or two tiles and one of two; a token's integers do not depend on its neighbours),
// the product of many tokens on a VNNI CPU is the tiled kernel's, and a row order picks the stored rows.
void TestQuantProducts::buildsAgreeAndTokensAreIndependent()
{
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    const std::vector<std::pair<GgmlType, int>> cases = {{GgmlType::Q4_0, 8},  {GgmlType::Q4_1, 9},
                                                         {GgmlType::Q8_0, 10}, {GgmlType::Q4_K, 11},
                                                         {GgmlType::Q6_K, 14}, {GgmlType::Q4_K, 14}};
    for (const auto& [type, T] : cases) {
        const std::int64_t rows = 21, cols = 512;
        const RandomBlocks b = randomBlocks(type, rows, cols, rng);
        std::vector<float> x(std::size_t(T * cols));
        for (auto& v : x)
            v = normal(rng);
        Q8Activations all, one;
        quantizeActivations(x.data(), T, cols, cols, all);
        std::vector<float> y(std::size_t(T * rows)), single(static_cast<std::size_t>(rows));
        quantGemm(b.matrix, all, y.data(), rows);
        for (int t = 0; t < T; ++t) {
            quantizeActivations(x.data() + t * cols, 1, cols, cols, one);
            quantGemm(b.matrix, one, single.data(), rows);
            for (std::int64_t r = 0; r < rows; ++r) {
                // One token alone (the VNNI build reads it straight from the blocks) against the same
                // token in a tile: the same integers, FP32 sums grouped otherwise (1e-4 of the row's
                // magnitude, as below).
                double mag = 0;
                for (std::int64_t c = 0; c < cols; ++c)
                    mag += std::abs(b.dequantized[std::size_t(r * cols + c)] * x[std::size_t(t * cols + c)]);
                QVERIFY2(std::abs(y[std::size_t(t * rows + r)] - single[std::size_t(r)]) <= 1e-4 * mag + 1e-6,
                         qPrintable(QString("%1 token %2 row %3: %4 alone, %5 in a tile")
                                        .arg(ggmlTypeName(type))
                                        .arg(t)
                                        .arg(r)
                                        .arg(single[std::size_t(r)])
                                        .arg(y[std::size_t(t * rows + r)])));
            }
        }
        if (cpuFeatures().avx512vnni) {
            std::vector<float> tiled(y.size());
            QVERIFY(detail::tiledGemmVnni(b.matrix, all, tiled.data(), rows));
            QVERIFY2(tiled == y, "quantGemm of 8 tokens or more is not the tiled kernel's");
        }
        std::vector<float> portable(y.size());
        QVERIFY(quantGemmBuild("portable", b.matrix, all, portable.data(), rows));
        for (std::size_t i = 0; i < y.size(); ++i) {
            // Same integers, FP32 sums in other orders: the kernels' terms reach about 4× |w·x| (the
            // unpacked quants and their offsets), and sums of 128 lanes err by at most 128 · 6e-8 of
            // them: relative 1e-4 of Σ|w·x| is above that and below one term of 512 (2e-3).
            double mag = 0;
            for (std::int64_t c = 0; c < cols; ++c)
                mag += std::abs(b.dequantized[std::size_t((std::int64_t(i) % rows) * cols + c)] *
                                x[std::size_t((std::int64_t(i) / rows) * cols + c)]);
            QVERIFY2(
                std::abs(y[i] - portable[i]) <= 1e-4 * mag + 1e-6,
                qPrintable(
                    QString("%1 output %2: %3 against %4").arg(ggmlTypeName(type)).arg(i).arg(y[i]).arg(portable[i])));
        }
        QuantMatrix reversed = b.matrix;
        for (std::int64_t r = rows - 1; r >= 0; --r)
            reversed.rowOrder.push_back(std::int32_t(r));
        std::vector<float> back(y.size());
        quantGemm(reversed, all, back.data(), rows);
        for (int t = 0; t < T; ++t)
            for (std::int64_t r = 0; r < rows; ++r)
                QCOMPARE(back[std::size_t(t * rows + r)], y[std::size_t(t * rows + rows - 1 - r)]);
    }
}

// The dispatch: VNNI where the CPU has it, AVX2 on a CPU without (many AVX2 machines), plain C++
// below that; and on this CPU the AVX2 build runs where AVX2 is present (the products above compare it).
void TestQuantProducts::withoutVnniTheAvx2BuildRuns()
{
    CpuFeatures f;
    QCOMPARE(QString(quantGemmIsaFor(f)), QString("portable"));
    f.avx2 = true;
    QCOMPARE(QString(quantGemmIsaFor(f)), QString("avx2"));
    f.avx512 = true; // AVX-512 without VNNI (Skylake-X)
    QCOMPARE(QString(quantGemmIsaFor(f)), QString("avx2"));
    f.avx512vnni = true;
    QCOMPARE(QString(quantGemmIsaFor(f)), QString("avx512-vnni"));
    QCOMPARE(QString(quantGemmIsa()), QString(quantGemmIsaFor(cpuFeatures())));
}

// The activations' rounding gives the same bytes, scales and sums in the vector build as in the
// scalar loop (both round x · 127/amax to nearest even): values that round on a tie (amax = 127
// puts x = k + ½ exactly on one), zeros, a block of subnormals (rounded to zeros: 127/amax is not
// finite), negative values and a row read at a stride.
void TestQuantProducts::activationsRoundAlikeInEveryBuild()
{
    std::mt19937 rng(41);
    std::normal_distribution<float> normal(0.f, 3.f);
    const std::int64_t rows = 5, cols = 256, ld = 288;
    std::vector<float> x(std::size_t(rows * ld), std::numeric_limits<float>::quiet_NaN()); // the stride's gap unread
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
            x[std::size_t(r * ld + c)] = normal(rng);
    for (int i = 0; i < 32; ++i) // block 0 of row 1: ties at 127/amax = 1
        x[std::size_t(ld + i)] = i == 0 ? 127.0f : float(i % 9) - 4.5f;
    std::fill_n(x.begin() + 2 * ld + 32, 32, 0.0f);
    std::fill_n(x.begin() + 3 * ld + 64, 32, 1e-39f);
    Q8Activations fast, plain;
    quantizeActivations(x.data(), rows, cols, ld, fast);
    quantizeActivationsPortable(x.data(), rows, cols, ld, plain);
    QVERIFY(fast.q == plain.q);
    QVERIFY(fast.laneScale == plain.laneScale);
    QVERIFY(fast.sum16 == plain.sum16);
    QVERIFY(fast.qsum16 == plain.qsum16);
    QVERIFY(fast.scale32 == plain.scale32);
    QVERIFY(fast.sum32 == plain.sum32);
    QVERIFY(fast.absMax == plain.absMax);
    // The ties went to even (−4.5 → −4, −3.5 → −4, 0.5 → 0, 1.5 → 2), the tiny block to zeros.
    QCOMPARE(int(plain.q[std::size_t(cols + 1)]), -4); // 1 % 9 − 4.5 = −3.5
    QCOMPARE(int(plain.q[std::size_t(cols + 5)]), 0);  // 0.5
    QCOMPARE(int(plain.q[std::size_t(cols + 6)]), 2);  // 1.5
    for (int i = 0; i < 32; ++i)
        QCOMPARE(int(plain.q[std::size_t(3 * cols + 64 + i)]), 0);
    // Non-finite input is refused by both, naming the value.
    x[std::size_t(4 * ld + 100)] = std::numeric_limits<float>::infinity();
    for (const bool vector : {true, false}) {
        try {
            vector ? quantizeActivations(x.data(), rows, cols, ld, fast)
                   : quantizeActivationsPortable(x.data(), rows, cols, ld, plain);
            QFAIL("an infinite activation was rounded");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("row 4"), e.what());
        }
    }
}

// What the loader checks of a matrix kept as blocks: every value finite, read from the blocks' FP16
// scales alone, agrees with dequantizing every value, for each type and each of its scales (the
// first and the last block) set to NaN, ±Inf or the largest finite half; bytes that are not scales
// (the quants, Q4_K's 6-bit sub-block scales, Q6_K's 8-bit ones) never make a value non-finite.
void TestQuantProducts::finiteFromTheScalesAlone()
{
    std::mt19937 rng(17);
    const std::vector<std::pair<GgmlType, std::vector<int>>> scales = {{GgmlType::Q4_0, {0}},
                                                                       {GgmlType::Q4_1, {0, 2}},
                                                                       {GgmlType::Q8_0, {0}},
                                                                       {GgmlType::Q4_K, {0, 2}},
                                                                       {GgmlType::Q6_K, {208}}};
    for (const auto& [type, offsets] : scales) {
        RandomBlocks b = randomBlocks(type, 7, 512, rng);
        const std::int64_t rows = b.matrix.rows, cols = b.matrix.cols;
        const auto dequantizedFinite = [&b, rows, cols] {
            std::vector<float> all(std::size_t(rows * cols));
            quantRows(b.matrix, 0, rows, all.data());
            return std::all_of(all.begin(), all.end(), [](float v) { return std::isfinite(v); });
        };
        QVERIFY(quantMatrixFinite(b.matrix));
        QVERIFY(dequantizedFinite());
        const auto lay = quantBlockLayout(type);
        const std::size_t lastBlock = b.raw.size() - std::size_t(lay.bytes);
        // Every byte that is not a scale at its largest: still finite.
        std::vector<std::uint8_t> saved = b.raw;
        for (std::size_t k = 0; k < b.raw.size(); k += std::size_t(lay.bytes))
            for (int i = 0; i < lay.bytes; ++i)
                if (std::none_of(offsets.begin(), offsets.end(), [i](int o) { return i == o || i == o + 1; }))
                    b.raw[k + std::size_t(i)] = 0xff;
        QVERIFY(quantMatrixFinite(b.matrix));
        QVERIFY(dequantizedFinite());
        std::copy(saved.begin(), saved.end(), b.raw.begin()); // in place: the views point into raw
        for (const int at : offsets)
            for (const std::size_t block : {std::size_t(0), lastBlock})
                for (const std::uint16_t half : {0x7e00, 0x7c00, 0xfc00, 0x7bff}) {
                    b.raw[block + std::size_t(at)] = std::uint8_t(half & 0xff);
                    b.raw[block + std::size_t(at) + 1] = std::uint8_t(half >> 8);
                    const bool expected = dequantizedFinite();
                    QCOMPARE(expected, half == 0x7bff);
                    QCOMPARE(quantMatrixFinite(b.matrix), expected);
                    std::copy(saved.begin(), saved.end(), b.raw.begin());
                }
    }
}

void TestQuantProducts::refusals()
{
    std::vector<float> x(100, 1.0f);
    Q8Activations q;
    try {
        quantizeActivations(x.data(), 1, 100, 100, q);
        QFAIL("100 values a row were taken");
    } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY(QString(e.what()).contains("multiple of 32"));
    }
    x[40] = std::numeric_limits<float>::infinity();
    try {
        quantizeActivations(x.data(), 1, 64, 64, q);
        QFAIL("an infinite activation was taken");
    } catch (const Error& e) {
        QVERIFY(QString(e.what()).contains("value 40 of row 0"));
    }
    std::mt19937 rng(1);
    const RandomBlocks b = randomBlocks(GgmlType::Q8_0, 4, 64, rng);
    std::vector<float> ones(96, 1.0f), y(4, -1.0f);
    quantizeActivations(ones.data(), 1, 96, 96, q); // 96 columns against the matrix's 64
    for (const char* isa : {"portable", "avx2", "avx512-vnni", "sse9"})
        QVERIFY(!quantGemmBuild(isa, b.matrix, q, y.data(), 4));
    QCOMPARE(y[0], -1.0f); // nothing written
}

// The bundled synthetic tiny llama (Q8_0, Q4_0 and Q4_1 blocks): a prefill in chunks that do and do
// not divide the 13 tokens gives the last token's logits and the cache of the token-by-token path
// (chunks of one). With FP32 activations (the FP32 matrices, or the blocks) the two differ only in
// the grouping of FP32 sums (the attention's products over the chunk): relative 1e-4 of the largest
// logit allows a few ulps through two layers. With 8-bit activations each product is the same
// integer sum for the same inputs, but an input that differs by an ulp can round to the
// neighbouring 8-bit step, moving that product by up to amax/127 · |w| in one term: 1e-2 of the
// largest logit covers a few such steps and still fails a wrong chunk boundary (a token attending
// past itself changes the logits by tenths of their range). The 8-bit logits lie within a few
// percent of the FP32 ones (the rounding's cost; its perplexity cost is measured on real models).
void TestQuantProducts::prefillInChunksEqualsTokenByToken()
{
    const auto model = loadGgufModel(GgufFile::open(test::sourcePath("tests/data/tiny-llama-q.gguf").toStdString()));
    const std::vector<std::int32_t> tokens{1, 45, 280, 7, 99, 210, 3, 66, 120, 5, 290, 18, 250};
    using W = TransformerModel::StepWeights;
    Eigen::RowVectorXf fp32;
    for (const W weights : {W::Fp32, W::Blocks, W::BlocksQ8}) {
        const float tol = weights == W::BlocksQ8 ? 1e-2f : 1e-4f;
        TransformerModel::Cache ref;
        const Eigen::RowVectorXf one = model.prefill(tokens, ref, 1, {}, weights);
        if (weights == W::Fp32)
            fp32 = one;
        const float scale = one.cwiseAbs().maxCoeff();
        QVERIFY(scale > 0);
        for (const int chunk : {3, 4, 5, 13, 64}) {
            TransformerModel::Cache c;
            const Eigen::RowVectorXf last = model.prefill(tokens, c, chunk, {}, weights);
            QCOMPARE(c.length, int(tokens.size()));
            const float diff = (last - one).cwiseAbs().maxCoeff();
            QVERIFY2(
                diff <= tol * scale,
                qPrintable(
                    QString("weights %1, chunks of %2: %3 of %4").arg(int(weights)).arg(chunk).arg(diff).arg(scale)));
            for (std::size_t l = 0; l < c.keys.size(); ++l) {
                const float kScale = ref.keys[l].cwiseAbs().maxCoeff();
                QVERIFY((c.keys[l] - ref.keys[l]).cwiseAbs().maxCoeff() <= tol * kScale);
                QVERIFY((c.values[l] - ref.values[l]).cwiseAbs().maxCoeff() <=
                        tol * ref.values[l].cwiseAbs().maxCoeff());
            }
        }
        const float fromFp32 = (one - fp32).cwiseAbs().maxCoeff();
        QVERIFY2(fromFp32 <= (weights == W::BlocksQ8 ? 0.05f : 1e-4f) * fp32.cwiseAbs().maxCoeff(),
                 qPrintable(QString("weights %1 against FP32: %2").arg(int(weights)).arg(fromFp32)));
        if (weights == W::BlocksQ8)
            QVERIFY(fromFp32 > 0); // the 8-bit activations are in use
    }
    // A prefill past the model's positions is refused, naming the positions.
    TransformerModel::Cache c;
    std::vector<std::int32_t> longer(std::size_t(model.config().maxSeq + 1), 5);
    try {
        model.prefill(longer, c, 64, {}, W::BlocksQ8);
        QFAIL("a prefill past the model's positions was taken");
    } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY(QString(e.what()).contains("positions"));
    }
}

// The bundled synthetic tiny llama with its products' weights in Q8_0, Q4_0 and Q4_1 blocks: the
// decode step reads every matrix from its blocks (llama's permuted q and k rows put back by the row
// order) and gives the logits of the step over the FP32 copies (GgufLoadOptions::fp32Copies: the
// dequantized file, unpermuted as matrices) to FP32 rounding. The attention here is a stand-in (a
// mix of q, k and v), the same for both, so the products are what is compared: relative 1e-4 of the
// largest logit allows a few ulps through two layers of products of 32 and 64 terms.
void TestQuantProducts::decodeStepReadsTheWeightBlocks()
{
    const auto file = GgufFile::open(test::sourcePath("tests/data/tiny-llama-q.gguf").toStdString());
    const auto model = loadGgufModel(file);
    const auto copies = loadGgufModel(file, {.fp32Copies = true});
    QCOMPARE(QString::fromStdString(model.weightBlocksNote()),
             QString("Q4_0, Q4_1, Q8_0 blocks for 15 of 15 matrices"));
    QVERIFY(loadGgufModel(GgufFile::open(test::sourcePath("tests/data/tiny-llama.gguf").toStdString()))
                .weightBlocksNote()
                .empty()); // F32 and F16 only: the FP32 step
    // The attention's stand-in uses q, k and v (the model's 2 query heads share its 1 KV head), so all
    // three products and their row orders reach the logits.
    const auto attend = [](int, const Eigen::RowVectorXf& q, const Eigen::RowVectorXf& k, const Eigen::RowVectorXf& v) {
        Eigen::RowVectorXf out = q;
        for (Eigen::Index i = 0; i < q.size(); ++i)
            out[i] += k[i % k.size()] - 0.5f * v[i % v.size()];
        return out;
    };
    using W = TransformerModel::StepWeights;
    for (const std::int32_t token : {5, 120, 290}) {
        const Eigen::RowVectorXf b = copies.decodeStep(token, 7, attend, W::Fp32);
        const float scale = b.cwiseAbs().maxCoeff();
        QVERIFY(scale > 0);
        for (const W weights : {W::Blocks, W::Fp32}) { // Fp32 without copies: the blocks' exact values
            const Eigen::RowVectorXf a = model.decodeStep(token, 7, attend, weights);
            QCOMPARE(a.size(), b.size());
            QVERIFY2((a - b).cwiseAbs().maxCoeff() <= 1e-4f * scale,
                     qPrintable(QString("token %1, weights %2: %3 of %4")
                                    .arg(token)
                                    .arg(stepWeightsName(weights))
                                    .arg((a - b).cwiseAbs().maxCoeff())
                                    .arg(scale)));
        }
    }
    // A wrong row order would not give the FP32 step's q or k: the check above would fail.
}

// As loaded, a GGUF model whose products are all blocks the kernels take holds no FP32 copy of them
// (the memory ceiling: Qwen2.5-Coder-1.5B's would be 6.2 GB beside its 1.0 GB file), and its forward
// pass gives the FP32 copies' logits, keys and values: over 20 tokens (the blocks dequantized a panel
// at a time into a GEMM, rows split among threads; FP32 weights and blocks both take that path for
// many tokens), over 3 (the one-token kernels). The values are the same, only the order of the sums
// differs: relative 1e-4 of the largest logit, as above. A model of F32 and F16 tensors keeps them
// as FP32. A block whose scale is NaN is refused at load, naming the tensor, as the copies were.
void TestQuantProducts::blocksOnlyModelEqualsItsFp32Copies()
{
    const auto file = GgufFile::open(test::sourcePath("tests/data/tiny-llama-q.gguf").toStdString());
    const auto model = loadGgufModel(file);
    const auto copies = loadGgufModel(file, {.fp32Copies = true});
    QCOMPARE(model.fp32WeightBytes(), std::int64_t(0));
    const auto& c = model.config();
    const std::int64_t all =
        4 * (std::int64_t(c.vocab) * c.dim * (c.sharedClassifier ? 1 : 2) +
             std::int64_t(c.layers) * (2 * c.dim * c.dim + 2 * c.kvDim() * c.dim + 3 * std::int64_t(c.hidden) * c.dim));
    QCOMPARE(copies.fp32WeightBytes(), all);
    QVERIFY(
        loadGgufModel(GgufFile::open(test::sourcePath("tests/data/tiny-llama.gguf").toStdString())).fp32WeightBytes() >
        0);

    using W = TransformerModel::StepWeights;
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < 20; ++i)
        tokens.push_back(std::int32_t((i * 53 + 7) % c.vocab));
    for (const std::size_t n : {std::size_t(20), std::size_t(3)})
        for (const W weights : {W::Fp32, W::Blocks}) {
            const std::span<const std::int32_t> part(tokens.data(), n);
            TransformerModel::Cache a, b;
            const MatrixRF ref = copies.forward(part, b, {}, TransformerModel::Logits::All, W::Fp32);
            const MatrixRF got = model.forward(part, a, {}, TransformerModel::Logits::All, weights);
            QCOMPARE(got.rows(), Eigen::Index(n));
            const float scale = ref.cwiseAbs().maxCoeff(), diff = (got - ref).cwiseAbs().maxCoeff();
            QVERIFY(scale > 0);
            QVERIFY2(diff <= 1e-4f * scale, qPrintable(QString("%1 tokens, weights %2: %3 of %4")
                                                           .arg(n)
                                                           .arg(stepWeightsName(weights))
                                                           .arg(diff)
                                                           .arg(scale)));
            for (std::size_t l = 0; l < a.keys.size(); ++l) {
                QVERIFY((a.keys[l] - b.keys[l]).cwiseAbs().maxCoeff() <= 1e-4f * b.keys[l].cwiseAbs().maxCoeff());
                QVERIFY((a.values[l] - b.values[l]).cwiseAbs().maxCoeff() <= 1e-4f * b.values[l].cwiseAbs().maxCoeff());
            }
        }

    // The first block of blk.1.ffn_down.weight (Q4_0, Q4_1 or Q8_0: each block starts with its FP16
    // scale) given a NaN scale: refused without copies as with them.
    const GgufTensor* down = file.tensor("blk.1.ffn_down.weight");
    QVERIFY(down && quantMatVecTakes(down->type));
    QTemporaryDir dir;
    const std::string bad = dir.filePath("nan-scale.gguf").toStdString();
    QVERIFY(QFile::copy(test::sourcePath("tests/data/tiny-llama-q.gguf"), QString::fromStdString(bad)));
    {
        std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(file.dataOffset() + down->offset));
        const unsigned char nan[2] = {0x00, 0x7E}; // FP16 NaN, little-endian
        f.write(reinterpret_cast<const char*>(nan), 2);
        QVERIFY(f.good());
    }
    for (const bool copiesToo : {false, true}) {
        const std::string why =
            test::invalidInputMessage([&] { loadGgufModel(GgufFile::open(bad), {.fp32Copies = copiesToo}); });
        QVERIFY2(why.find("blk.1.ffn_down.weight") != std::string::npos && why.find("NaN") != std::string::npos,
                 why.c_str());
    }
}

QTEST_APPLESS_MAIN(TestQuantProducts)
#include "tst_quant_products.moc"
