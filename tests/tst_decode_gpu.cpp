// Decode on the GPU. Everywhere: the arithmetic the kernels share with the host (code unpacking,
// the RoPE angle in split floats), the split planning, the shape checks, and bench-decode's exit 2
// without a device. With a device: quantize-and-pack against the CPU's greedy encoder, the packed
// layout downloaded against the CPU's, and every decode path against its CPU reference in double
// on seeded shapes (GQA groups 1, 4 and 8; D = head_dim and D < head_dim; K = 256 bytes and bit-packed
// K = 16; positions past 64K).

#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/quantizer.h"
#include "core/decode/decode_bench.h"
#include "core/lm/decode_cache.h"
#include "core/lm/rope.h"
#include "gpu/decode/decode.h"
#include "gpu/decode/decode_math.h"
#include "gpu/device/device.h"
#include "gpu_test_util.h"
#include "test_util.h"

#if defined(GSRQ_TEST_EMULATOR)
#include "gpu/emulator/byte_counts.h"
#endif

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <random>

using namespace gsrq;

namespace {

double relError(const Eigen::VectorXd& a, const Eigen::VectorXd& ref)
{
    if (!a.allFinite())
        return std::numeric_limits<double>::infinity();
    return (a - ref).norm() / ref.norm();
}

struct Case {
    const char* name;
    DecodeShape shape;
    int dim, stages, k, batch;
    std::int64_t tokens, positionOffset;
    float queryScale = 1; // large: a sharp softmax whose maximum rises along the context (bins rescaled)
};

// FP32 arithmetic over ~1000 tokens on FP16 data: errors near 1e-6; 1e-4 is far above that and far
// below what a wrong index, a missed token or a wrong rotation gives (order 1e-1 or more).
constexpr double kTol = 1e-4;

} // namespace

class TestDecodeGpu : public QObject {
    Q_OBJECT

private slots:
    void codeAtReadsThePackedLayout()
    {
        // Every K from 2 to 65,536 and up to 256 bits per token: codeAt (what the kernels run) gives
        // back each code the CPU packed, including codes that straddle a 32-bit word.
        std::mt19937 rng(3);
        for (int bits = 1; bits <= 16; ++bits) {
            const int k = 1 << bits, stages = std::min(256 / bits, 20);
            Codes codes(37, 2 * stages);
            for (Eigen::Index i = 0; i < codes.size(); ++i)
                codes.data()[i] = int(rng() % std::uint32_t(k));
            const PackedCodes p = packCodes(codes, 2, stages, k);
            for (int m = 0; m < 2; ++m)
                for (std::int64_t t = 0; t < 37; ++t) {
                    const auto* words = reinterpret_cast<const std::uint32_t*>(
                        p.data.data() + (std::size_t(m) * p.capacity + std::size_t(t)) * p.bytesPerToken);
                    for (int r = 0; r < stages; ++r)
                        QCOMPARE(int(gpu::codeAt(words, r, bits)), codes(t, m * stages + r));
                }
        }
    }

    void ropeTurnsHoldAtLongPositions()
    {
        // The split-float angle against an 80-bit reference, at positions to 2^24: within 2e-7 turns
        // (1.3e-6 rad; its rounding budget is a few 2^-25). The plain float product the kernels do
        // not use is shown to miss by far more, so the test can tell the two apart.
        const auto inv = ropeInvFreq(500000.0, 128);
        double worst = 0, worstPlain = 0;
        for (std::int64_t pos : {0LL, 1LL, 4095LL, 65537LL, 131071LL, 1000003LL, 9999991LL, (1LL << 24) - 1}) {
            for (double f : inv) {
                const auto t = gpu::turnsPerPosition(f);
                const long double exact = (long double)pos * ((long double)f / (2.0L * 3.14159265358979323846264338L));
                const long double frac = exact - std::nearbyintl(exact);
                auto wrapErr = [&](long double v) {
                    long double e = v - frac;
                    e -= std::nearbyintl(e);
                    return double(std::fabs(e));
                };
                worst = std::max(worst, wrapErr(gpu::ropeTurns(float(pos), t.hi, t.lo)));
                const float plain = float(pos) * float(f / (2.0 * 3.14159265358979323846));
                worstPlain = std::max(worstPlain, wrapErr(plain - std::nearbyint(plain)));
            }
        }
        QVERIFY2(worst < 2e-7, qPrintable(QString::number(worst)));
        QVERIFY2(worstPlain > 1e-3, qPrintable(QString::number(worstPlain)));
    }

    void ropeWalkHoldsPastTwoToTheTwenty()
    {
        // The paper kernels' RoPE walk (RopeWalk, paper_rope.cuh): an exact rotation at every
        // kRopeAnchorSteps-th token of a lane, then ropeCompose with the rotation of `stride`
        // positions (the lanes' token distance: 16, 8, 4 at head_dim 64, 128, 256). The anchors and
        // the stride's rotation are float roundings of the exact values, as sincospif gives them
        // (within an ulp). Against a long-double reference at positions across 2^20, every
        // frequency of both RoPE bases: within 1e-5 (the walk's 31 products add a few 2^-24 each,
        // about 4e-6 at most, beside the anchor's 1.3e-6 rad). Walked 2^14 tokens with no anchor,
        // the stride's rounded rotation alone drifts past that bound, so the test tells the two apart.
        auto exact = [](std::int64_t pos, double f) {
            const long double turns = (long double)pos * ((long double)f / (2.0L * 3.14159265358979323846264338L));
            const long double a = 2.0L * 3.14159265358979323846264338L * (turns - std::nearbyintl(turns));
            return std::pair{std::cos(a), std::sin(a)};
        };
        auto rounded = [](long double turns) {
            const long double a = 2.0L * 3.14159265358979323846264338L * turns;
            return gpu::RopeRotation{float(std::cos(a)), float(std::sin(a))};
        };
        double worst = 0, drift = 0;
        for (double base : {10000.0, 500000.0})
            for (double f : ropeInvFreq(base, 128)) {
                const auto t = gpu::turnsPerPosition(f);
                for (int stride : {16, 8, 4}) {
                    const gpu::RopeRotation step = rounded(gpu::ropeTurns(float(stride), t.hi, t.lo));
                    auto walk = [&](std::int64_t first, int tokens, int anchorEvery) {
                        gpu::RopeRotation r;
                        double err = 0;
                        for (int i = 0; i < tokens; ++i) {
                            const std::int64_t pos = first + std::int64_t(i) * stride;
                            r = i % anchorEvery == 0 ? rounded(gpu::ropeTurns(float(pos), t.hi, t.lo))
                                                     : gpu::ropeCompose(r, step);
                            const auto [c, s] = exact(pos, f);
                            err = std::max({err, double(std::fabs(r.c - c)), double(std::fabs(r.s - s))});
                        }
                        return err;
                    };
                    for (std::int64_t first : {(1LL << 20) - 3000, (1LL << 20) - 1, (1LL << 20) + 12345})
                        worst = std::max(worst, walk(first, 8 * gpu::kRopeAnchorSteps, gpu::kRopeAnchorSteps));
                    drift = std::max(drift, walk((1LL << 20) - 3000, 1 << 14, 1 << 14));
                }
            }
        QVERIFY2(worst < 1e-5, qPrintable(QString::number(worst)));
        QVERIFY2(drift > 1e-5, qPrintable(QString::number(drift)));
    }

    void paperSplitsShortenTheCriticalPath()
    {
        const auto* h200 = gpu::findDeviceModel("h200");
        QVERIFY(h200);
        const std::size_t optin = h200->sharedOptin;
        // 32 query heads on 8 KV heads × 128, 0.75 BPA (R = 12, K = 256): the bins kernel at 128
        // registers with 48 KiB of bins, 4 blocks a multiprocessor (it does not walk its RoPE there);
        // the split kernel at 168 registers, 3.
        const DecodeShape s{32, 8, 128};
        QCOMPARE(gpu::paperResidentBlocks(s, 128, 12, 256, true, false, optin), 4);
        QCOMPARE(gpu::paperResidentBlocks(s, 128, 12, 256, false, true, optin), 3);
        // Batch 1, 32K tokens: 8 (sequence, KV head) pairs on 528 slots; every count up to 32 splits
        // of 1,024 tokens is one wave, so 32, the shortest chains.
        QCOMPARE(gpu::planPaperSplits(32768, 1, s, 128, 12, 256, true, 132, optin).splits, 32);
        // Batch 8: 64 pairs; 8 splits are one wave of 4,096-token chains, 16 two waves of 2,048:
        // a tie, and the fewer splits write and merge fewer bins.
        QCOMPARE(gpu::planPaperSplits(32768, 8, s, 128, 12, 256, true, 132, optin).splits, 8);
        // Over a grid, the plan's critical path is the shortest of every allowed split count, it
        // covers the context with no split empty, and it keeps to the bounds: the paper path's plan
        // (bins or codeword sums; groups 1, 4, 8) and the lookup path's (a block per query head).
        auto whole = [](std::int64_t tokens, std::int64_t n) {
            const std::int64_t per = (tokens + n * 32 - 1) / (n * 32) * 32;
            return std::pair{(tokens + per - 1) / per, per};
        };
        auto holds = [&](const gpu::SplitPlan& p, std::int64_t ctx, std::int64_t pairs, std::int64_t resident,
                         std::int64_t minTokens, std::int64_t maxSplits, const QString& what) {
            QVERIFY2(p.splits >= 1 && p.splits <= maxSplits, qPrintable(what));
            QVERIFY2(std::int64_t(p.splits) * p.tokensPerSplit >= ctx, qPrintable(what));
            QVERIFY2(std::int64_t(p.splits - 1) * p.tokensPerSplit < ctx, qPrintable(what));
            QVERIFY2(p.splits == 1 || p.tokensPerSplit >= minTokens, qPrintable(what));
            auto path = [&](std::int64_t splits, std::int64_t per) {
                return (pairs * splits + resident - 1) / resident * per;
            };
            const std::int64_t mine = path(p.splits, p.tokensPerSplit);
            for (std::int64_t n = 1; n <= std::min<std::int64_t>(ctx / minTokens, maxSplits); ++n) {
                const auto [splits, per] = whole(ctx, n);
                QVERIFY2(mine <= path(splits, per),
                         qPrintable(QString("%1: %2 splits against %3").arg(what).arg(p.splits).arg(splits)));
            }
        };
        for (int heads : {8, 32, 64})
            for (std::int64_t ctx : {300LL, 1024LL, 5000LL, 32768LL, 131072LL})
                for (int batch : {1, 3, 8, 32}) {
                    const DecodeShape sh{heads, 8, 128};
                    const QString what = QString("%1 heads, %2 tokens, batch %3").arg(heads).arg(ctx).arg(batch);
                    for (bool bins : {true, false}) {
                        const bool walk = !bins || gpu::paperBinsWalk(heads / 8, 1, 12, 256, optin);
                        holds(gpu::planPaperSplits(ctx, batch, sh, 128, 12, 256, bins, 132, optin), ctx,
                              std::int64_t(batch) * 8,
                              132LL * gpu::paperResidentBlocks(sh, 128, 12, 256, bins, walk, optin),
                              bins ? gpu::kMinBinnedSplitTokens : gpu::kMinSplitTokens, gpu::kPaperMaxSplits,
                              what + (bins ? ", paper with bins" : ", paper"));
                    }
                    holds(gpu::planLookupSplits(ctx, batch, heads, heads / 8, 1, 12, 256, 132, optin), ctx,
                          std::int64_t(batch) * heads, 132LL * gpu::lookupResidentBlocks(heads / 8, 1, 12, 256, optin),
                          gpu::kMinBinnedSplitTokens, gpu::kLookupMaxSplits, what + ", lookup");
                }
    }

    void fp16SplitsFillTheDeviceInWholeWaves()
    {
        const std::size_t hopper = 227 * 1024;
        // 128 threads at ≤ 64 registers: 8 blocks per SM (registers bind before shared memory's 13);
        // head_dim 256 with 8 heads a group takes 256 threads: 4.
        QCOMPARE(gpu::fp16ResidentBlocks(128, 4, hopper), 8);
        QCOMPARE(gpu::fp16ResidentBlocks(64, 1, hopper), 8);
        QCOMPARE(gpu::fp16ResidentBlocks(256, 8, hopper), 4);
        QCOMPARE(gpu::fp16ResidentBlocks(128, 4, 48 * 1024), 2); // 16 KiB + 1 KiB a block in 49 KiB
        for (std::int64_t tokens : {1LL, 31LL, 300LL, 1024LL, 8192LL, 32768LL, 131072LL, 1000001LL})
            for (int batch : {1, 8, 32}) {
                const auto p = gpu::planFp16Splits(tokens, batch, 8, 128, 4, 132, hopper);
                QVERIFY(p.splits >= 1);
                QCOMPARE(p.tokensPerSplit % 32, 0LL);
                QVERIFY(std::int64_t(p.splits) * p.tokensPerSplit >= tokens);
                QVERIFY(std::int64_t(p.splits - 1) * p.tokensPerSplit < tokens);
                if (p.splits > 1)
                    QVERIFY(p.tokensPerSplit >= 256);
                // Within 85% of the fullest waves any count of splits gives (at least 256 tokens
                // each, at most kFp16MaxSplits).
                QVERIFY(p.splits <= gpu::kFp16MaxSplits);
                const double eff = gpu::fp16WaveEfficiency(p, batch, 8, 128, 4, 132, hopper);
                for (std::int64_t s = 1; s <= std::max<std::int64_t>(1, tokens / 256) && s <= gpu::kFp16MaxSplits;
                     ++s) {
                    const std::int64_t per = ((tokens + s - 1) / s + 31) / 32 * 32; // whole 32-token splits
                    gpu::SplitPlan other;
                    other.splits = int((tokens + per - 1) / per);
                    QVERIFY2(
                        eff >= 0.85 * gpu::fp16WaveEfficiency(other, batch, 8, 128, 4, 132, hopper) - 1e-12,
                        qPrintable(QString("%1 tokens, batch %2: %3 splits").arg(tokens).arg(batch).arg(p.splits)));
                }
            }
        // 32K tokens, batch 1: most of one wave of 1,056 blocks (8 KV heads × ~110 splits of ~300
        // tokens), where the split-K plan of the other paths takes 264 blocks.
        const auto p = gpu::planFp16Splits(32768, 1, 8, 128, 4, 132, hopper);
        QVERIFY2(p.splits * 8 >= 0.8 * 1056 && p.splits * 8 <= 1056, qPrintable(QString::number(p.splits)));
        // Batch 8 at 32K: 64 pairs, one wave (at most 16 splits), at least 85% full.
        const auto p8 = gpu::planFp16Splits(32768, 8, 8, 128, 4, 132, hopper);
        QVERIFY2(p8.splits * 64 <= 1056 && p8.splits * 64 >= 0.8 * 1056, qPrintable(QString::number(p8.splits)));
        // A context of a few tiles stays in one split (no split under 256 tokens).
        QCOMPARE(gpu::planFp16Splits(300, 1, 8, 128, 4, 132, hopper).splits, 1);
    }

    // The FP16 step's latency model (estimates, roofline.h): its terms add up as documented, a long
    // context is bound by the bytes and a short one by the tiles' chain of HBM latencies.
    void fp16LatencyModelComposesItsTerms()
    {
        const auto* h200 = gpu::findDeviceModel("h200");
        QVERIFY(h200);
        const DecodeShape s{32, 8, 128};
        auto modelAt = [&](std::int64_t ctx, int batch) {
            const auto plan = gpu::planFp16Splits(ctx, batch, 8, 128, 4, 132, h200->sharedOptin);
            const gpu::DecodeCostCase c{s, 128, 12, 256, ctx, batch, plan.splits, false};
            return std::pair{c, gpu::fp16LatencyModel(c, 132, h200->sharedOptin, h200->copyBytesPerSecond)};
        };
        for (auto [ctx, batch] :
             {std::pair{1024LL, 1}, std::pair{32768LL, 1}, std::pair{131072LL, 1}, std::pair{32768LL, 8}}) {
            const auto [c, m] = modelAt(ctx, batch);
            QCOMPARE(m.blocksPerSm, 8);
            QCOMPARE(m.launch, gpu::kLaunchSecondsEstimate);
            QCOMPARE(m.bandwidth, gpu::decodeCosts(DecodePath::Fp16, c).memoryBytes / h200->copyBytesPerSecond);
            QCOMPARE(m.chain, double(m.tilesPerBlock + 1) * gpu::kHbmLatencyEstimate);
            QCOMPARE(m.seconds, m.launch + std::max(m.bandwidth, m.waves * m.chain) + m.merge);
            QCOMPARE(m.waves, 1); // the planner fills at most one wave at these points
            QVERIFY(m.merge > 0 || c.splits == 1);
        }
        // 1K tokens: 4 splits of 256 tokens, 16 tiles of 16 in a chain, far above 4 MB at 4.24 TB/s.
        const auto [c1, m1] = modelAt(1024, 1);
        QCOMPARE(c1.splits, 4);
        QCOMPARE(m1.tilesPerBlock, 16LL);
        QCOMPARE(m1.bound, std::string("latency"));
        // 32K tokens: 134 MB at 4.24 TB/s (31.7 µs) outlasts a block's ~18 tiles.
        const auto [c32, m32] = modelAt(32768, 1);
        QCOMPARE(m32.bound, std::string("bandwidth"));
        QVERIFY(m32.bandwidth > 31e-6 && m32.bandwidth < 33e-6);
    }

    // The lookup path's latency model (estimates): one launch, its terms as documented, and split
    // blocks whose chain grows with the tokens each thread walks.
    void lookupLatencyModelComposesItsTerms()
    {
        const auto* h200 = gpu::findDeviceModel("h200");
        QVERIFY(h200);
        const DecodeShape s{32, 8, 128};
        const auto plan = gpu::planLookupSplits(32768, 1, 32, 4, 1, 12, 256, 132, h200->sharedOptin);
        const gpu::DecodeCostCase c{s, 128, 12, 256, 32768, 1, plan.splits, false};
        const auto m = gpu::lookupLatencyModel(c, 132, h200->sharedOptin, h200->copyBytesPerSecond);
        QCOMPARE(m.blocksPerSm, 4);
        QCOMPARE(m.launches, gpu::kLaunchSecondsEstimate); // tables, splits and combine in one launch
        // The table blocks: an HBM latency and 16 codeword loads 4 at a time; then the split blocks'
        // wait on their count, an L2 round trip.
        QVERIFY(std::abs(m.tables - (gpu::kHbmLatencyEstimate + 5 * gpu::kL2LatencyEstimate)) < 1e-12);
        QCOMPARE(m.seconds, m.launches + m.tables + m.split + m.combine);
        QCOMPARE(m.waves, 1);
        QCOMPARE(m.tokensPerThread, (plan.tokensPerSplit + 255) / 256);
        // 0.75 bits per activation: a token's codes (12 bytes of keys, 12 of values) are staged, so
        // past the first token a thread waits on no HBM latency (a token's 24 shared operations,
        // 0.72 µs, outlast it), only on its work.
        QVERIFY(m.codesStaged);
        const double work = 24 * gpu::kSharedOpEstimate;
        const double n = double(m.tokensPerThread);
        // The block's setup (an HBM latency, then 3,072 table entries 8 per thread at a time: 2 L2
        // loads) and the first token's codes.
        const double setup = gpu::kHbmLatencyEstimate + 2 * gpu::kL2LatencyEstimate;
        QVERIFY(std::abs(m.split - (setup + gpu::kHbmLatencyEstimate + n * work)) < 1e-12);
        // The combine: its wait on the splits' count, the splits' scales by warps, 32 at a time, their
        // weights 8 at a time, 32 codewords a thread 4 at a time, the 12 stages 4 at a time.
        QVERIFY(std::abs(m.combine - (gpu::kHbmLatencyEstimate + (1 + 2 + std::ceil(plan.splits / 8.0) + 8 + 3) *
                                                                     gpu::kL2LatencyEstimate)) < 1e-12);
        gpu::DecodeCostCase twice = c;
        twice.context = 65536;
        QVERIFY(gpu::lookupLatencyModel(twice, 132, h200->sharedOptin, h200->copyBytesPerSecond).split > m.split);
        // 2 bits per activation (R = 32: 64 bytes of codes a token) are read where they are used:
        // every token waits an HBM latency.
        gpu::DecodeCostCase two = c;
        two.stages = 32;
        const auto m2 = gpu::lookupLatencyModel(two, 132, h200->sharedOptin, h200->copyBytesPerSecond);
        QVERIFY(!m2.codesStaged);
        QVERIFY(m2.split >= double(m2.tokensPerThread) * (gpu::kHbmLatencyEstimate + 64 * gpu::kSharedOpEstimate));
    }

    // The paper path's latency model (estimates): two launches, its terms as documented, a step's
    // chain shorter where the codes are staged.
    void paperLatencyModelComposesItsTerms()
    {
        const auto* h200 = gpu::findDeviceModel("h200");
        QVERIFY(h200);
        const DecodeShape s{32, 8, 128};
        const auto plan = gpu::planPaperSplits(32768, 1, s, 128, 12, 256, true, 132, h200->sharedOptin);
        // 48 KiB of bins (4 heads × 12 stages × 256 codewords) and the static arrays fit 4 blocks in a
        // multiprocessor's 228 KiB, with the RoPE walk's 8 KiB only 3: the bins kernel does not walk.
        QVERIFY(!gpu::paperBinsWalk(4, 1, 12, 256, h200->sharedOptin));
        QVERIFY(gpu::paperBinsWalk(4, 1, 8, 256, h200->sharedOptin)); // 32 KiB of bins: 4 blocks either way
        const gpu::DecodeCostCase c{s, 128, 12, 256, 32768, 1, plan.splits, true, true, false};
        gpu::DecodeCostCase walking = c;
        walking.ropeWalk = true;
        QCOMPARE(gpu::paperLatencyModel(walking, 132, h200->sharedOptin, h200->copyBytesPerSecond).blocksPerSm, 3);
        const auto m = gpu::paperLatencyModel(c, 132, h200->sharedOptin, h200->copyBytesPerSecond);
        QCOMPARE(m.launches, 2 * gpu::kLaunchSecondsEstimate);
        QCOMPARE(m.seconds, m.launches + m.split + m.combine);
        QVERIFY(m.codesStaged);
        // 128 registers (kPaperBinsRegisters for groups of 4) and 128 threads: 4 blocks per SM; the
        // 48 KiB of bins and the static arrays fit 4 in 228 KiB too.
        QCOMPARE(m.blocksPerSm, 4);
        QCOMPARE(m.waves, 1);
        // 1,024 tokens a split over 8 rows of lanes, 2 tokens a row a step: 64 steps.
        QCOMPARE(m.stepsPerBlock, std::int64_t(64));
        // A step: 3 rounds of 4 stages' gathers, 4 shuffles of the scores (16 lanes a row), the block
        // maximum's 2 barriers, a value code's bins per lane for 4 heads (12 stages over 16 lanes).
        const double step = 3 * gpu::kL2LatencyEstimate + 4 * gpu::kShuffleEstimate + 2 * gpu::kBarrierEstimate +
                            4 * gpu::kSharedOpEstimate;
        QVERIFY(std::abs(m.step - step) < 1e-15);
        QVERIFY(std::abs(m.split - (gpu::kHbmLatencyEstimate + 64 * step)) < 1e-12);
        // Groups of 8 keep their codes in place in the bins kernel: each round waits on its code word,
        // each step on a line of codes from HBM.
        const gpu::DecodeCostCase g8{{64, 8, 128}, 128, 12, 256, 32768, 1, plan.splits, true};
        const auto m8 = gpu::paperLatencyModel(g8, 132, h200->sharedOptin, h200->copyBytesPerSecond);
        QVERIFY(!m8.codesStaged);
        QVERIFY(m8.step > step + gpu::kHbmLatencyEstimate);
    }

    // decode_math.h's code arithmetic, which the kernels and the cost model use, against the
    // packed layout's own (core/lm/decode_cache.h).
    void codeArithmeticMatchesThePackedLayout()
    {
        for (int k : {2, 16, 256, 4096, 65536})
            for (int r : {1, 3, 8, 12, 16, 32})
                if (r * PackedCodes::bitsFor(k) <= 256)
                    QCOMPARE(gpu::packedCodeBytes(r, k), PackedCodes::bytesFor(r, PackedCodes::bitsFor(k)));
        // A code stream over words `stride` apart (the staged codes' layout) reads the codes codeAt
        // reads, and each word once: the token's bytesPerToken / 4 words.
        std::mt19937 rng(5);
        for (int bits : {1, 4, 7, 8, 12, 16}) {
            const int stages = 256 / bits, words = gpu::packedCodeBytes(stages, 1 << bits) / 4;
            std::vector<std::uint32_t> packed(std::size_t(words) + 1), strided(std::size_t(words) * 3 + 3);
            for (int w = 0; w < words; ++w)
                strided[std::size_t(w) * 3] = packed[std::size_t(w)] = std::uint32_t(rng());
            for (int r : {1, stages / 3, stages}) {
                gpu::CodeStream codes(strided.data(), 3, bits);
                for (int i = 0; i < r; ++i)
                    QCOMPARE(codes.pop(), gpu::codeAt(packed.data(), i, bits));
                QCOMPARE(codes.next, (r * bits + 31) / 32);
            }
        }
    }

    // The rooflines' model, by hand for Llama-style 32/8 heads of 128 at 32K context, batch 1, 0.75
    // bits per activation (D = 128, R = 12, K = 256): 262,144 (KV head, token) pairs.
    void rooflinesCountWhatEachPathMoves()
    {
        const gpu::DecodeCostCase c{{32, 8, 128}, 128, 12, 256, 32768, 1, 1, true};
        const double pairs = 8.0 * 32768, io = 32 * 128 * 4.0 * 2;
        // At one split the FP16 kernel writes the outputs itself: no partials.
        const auto fp16 = gpu::decodeCosts(DecodePath::Fp16, c);
        QCOMPARE(fp16.memoryBytes, pairs * 512 + io); // 256 B of key and 256 B of value per pair
        // At 4 splits: partials (128 accumulators, a maximum and a sum per head and split) written and
        // read back by the last block, and a 4-byte counter per KV head read and written.
        gpu::DecodeCostCase four = c;
        four.splits = 4;
        QCOMPARE(gpu::decodeCosts(DecodePath::Fp16, four).memoryBytes,
                 pairs * 512 + io + 2 * 32 * 4 * 130 * 4.0 + 8 * 8.0);
        QCOMPARE(int(gpu::decodeKernelCosts(DecodePath::Fp16, four).size()), 1); // one launch
        QCOMPARE(fp16.flops, pairs * 4 * 4 * 128); // 4 query heads: q·k and p·v, 2 FLOPs per feature each
        QCOMPARE(fp16.l2Bytes, 0.0);
        const double books = 8.0 * 12 * 256 * 128 * 2; // one of keys' and values' FP16 codebooks
        const double bins = 32 * 12 * 256 * 4.0;       // a bin per head, stage and codeword
        const double stageParts = 32 * 12 * 128 * 4.0; // each stage's share of the output, per head
        const auto paper = gpu::decodeCosts(DecodePath::Paper, c);
        // The key's 12 codewords per pair, less each codeword's first read (from HBM); one sequence
        // reads the value books once.
        QCOMPARE(paper.l2Bytes, pairs * 12 * 128 * 2 - books);
        // Codes; both books; queries and outputs; the RoPE turns; bins out and back in, their maxima
        // and sums out and read by the stage combine; the stages' shares out and back in (its last
        // block); a counter per KV head read and written.
        QCOMPARE(paper.memoryBytes,
                 pairs * 24 + 2 * books + io + 64 * 8.0 + 2 * bins + 2 * 32 * 8.0 + 2 * stageParts + 8 * 8.0);
        gpu::DecodeCostCase gathered = c;
        gathered.paperBins = false; // values by codeword sums: twice the codewords, no bins
        QCOMPARE(gpu::decodeCosts(DecodePath::Paper, gathered).l2Bytes, 2 * (pairs * 12 * 128 * 2 - books));
        // The lookup path's token loop per pair and query head: 12 table entries read and 12 bins
        // read and written (no tile maxima: the reference is the tables' bound, known before the
        // loop), and the token's 24 bytes of codes staged (written, then each word read once); the
        // blocks' fixed costs (tables in, bins cleared, the row maxima, one block maximum and sum,
        // bins read out) are 1.5% of it at 32K tokens. The same launch makes the tables: per KV head
        // and stage, the group's 4 scaled queries written to shared memory and read for each of the
        // 256 codewords; the combine's blocks as the paper path's combine launch; and each block's
        // ticket is written once and read by its 256 threads.
        const auto kernels = gpu::decodeKernelCosts(DecodePath::Lookup, c);
        QCOMPARE(int(kernels.size()), 1); // tables, splits and the combine that adds the stages: one launch
        QCOMPARE(kernels[0].kernel, std::string("lookup step"));
        const double loop = pairs * 4 * (12 * 4.0 * 3 + 24 + 24);
        const double tables = 8 * 12 * (4 * 128 * 4.0 + 256 * 4 * 128 * 4.0);
        const double tickets = (8 * 12 + 32 + 8 * 12) * (4 + 256 * 4.0);
        const double combine = gpu::decodeKernelCosts(DecodePath::Paper, c).back().sharedBytes;
        const double rest = kernels[0].sharedBytes - tables - tickets - combine;
        QVERIFY(rest >= loop && rest <= 1.02 * loop);
        const auto lookup = gpu::decodeCosts(DecodePath::Lookup, c);

        gpu::DeviceInfo h100;
        h100.multiprocessors = 132;
        h100.clockHz = 1.98e9;
        h100.peakFp32Flops = 66.9e12;
        const auto rates = gpu::decodeRates(h100, 3.0e12);
        QCOMPARE(rates.l2, 7.5e12); // no measured L2 rate: the estimate, and it says so
        QVERIFY(QString::fromStdString(rates.l2Source).startsWith("estimate"));
        const auto r16 = roofline(fp16, rates), rp = roofline(paper, rates), rl = roofline(lookup, rates);
        QCOMPARE(r16.bound, std::string("hbm"));
        QVERIFY(std::abs(r16.seconds - fp16.memoryBytes / 3.0e12) < 1e-12);
        // Gathering 3 KiB of codewords per pair from the L2 puts the paper path behind FP16's 512 B
        // from HBM; the lookup path reads 24 B of codes and stays in shared memory.
        QCOMPARE(rp.bound, std::string("l2"));
        QVERIFY(rp.seconds > r16.seconds);
        QVERIFY(rl.seconds < r16.seconds / 4);
        QCOMPARE(gpu::decodeRates(h100, 3.0e12, 5e12).l2, 5e12);
    }

    void shapesTheKernelsRefuseAreNamed()
    {
        QVERIFY(gpu::decodeShapeProblem({32, 8, 128}, 128, 12, 256).empty());
        QVERIFY(gpu::decodeShapeProblem({32, 8, 128}, 64, 6, 16).empty());
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({32, 8, 96}, 96, 12, 256)).contains("--head-dim 96"));
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({32, 2, 128}, 128, 12, 256)).contains("at most 8"));
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({30, 8, 128}, 128, 12, 256)).contains("--kv-heads"));
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({32, 8, 128}, 12, 12, 256)).contains("D = 12"));
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({32, 8, 128}, 128, 33, 256)).contains("256"));
        QVERIFY(QString::fromStdString(gpu::decodeShapeProblem({32, 8, 128}, 128, 12, 100)).contains("K = 100"));
    }

    void benchDecodeWithoutDeviceExitsTwo()
    {
        QString why;
        if (test::haveCudaDevice(&why))
            QSKIP(test::deviceIsPresent());
        const auto r = test::gsrqRun({"--no-db", "bench-decode", "--backend", "cuda", "--ctx", "1024", "--batch", "1"});
        QVERIFY2(r.code == 2, r.err.constData());
        QVERIFY2(r.err.contains("needs a CUDA device"), r.err.constData());
        QVERIFY2(r.err.contains("--backend cpu"), r.err.constData()); // and says what runs here
        // Bad flags are named before the device is looked for.
        const auto bad = test::gsrqRun({"--no-db", "bench-decode", "--backend", "cuda", "--bpa", "0.7"});
        QCOMPARE(bad.code, 2);
        QVERIFY2(bad.err.contains("--bpa"), bad.err.constData());
        const auto badPath = test::gsrqRun({"--no-db", "bench-decode", "--backend", "cuda", "--paths", "fp16,fast"});
        QCOMPARE(badPath.code, 2);
        QVERIFY2(badPath.err.contains("--paths"), badPath.err.constData());
    }

    void benchDecodeModelsANamedDevice()
    {
        // --model-device needs no device, on every machine: each point is its path's roofline on the
        // named GPU's model, split as the kernels would split it there, recorded as a modelled run.
        const QString db = QDir(qEnvironmentVariable("TMPDIR", "/tmp")).filePath("tst_decode_model.sqlite");
        QFile::remove(db);
        const auto r = test::gsrqRun({"--db", db, "bench-decode", "--model-device", "h200", "--ctx", "1024,131072",
                                      "--batch", "1", "--bpa", "1", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["settings"].toObject()["model_device"].toString(), QString("h200"));
        const auto model = j["summary"].toObject()["model"].toObject();
        QCOMPARE(model["hbm_bytes_per_second"].toDouble(), 4.24e12); // the copy rate measured on an H200
        const auto points = j["points"].toArray();
        QCOMPARE(points.size(), 6);
        const auto* h200 = gpu::findDeviceModel("h200");
        QVERIFY(h200);
        const auto rates = gpu::decodeRates(h200->info, h200->copyBytesPerSecond);
        double fp16 = 0;
        for (const auto& v : points) {
            const auto p = v.toObject();
            QVERIFY(p["modelled"].toBool());
            QVERIFY(!p["verified"].toBool()); // nothing ran
            const DecodePath path = p["path"].toString() == "fp16"    ? DecodePath::Fp16
                                    : p["path"].toString() == "paper" ? DecodePath::Paper
                                                                      : DecodePath::Lookup;
            const std::int64_t ctx = p["context"].toInteger();
            // The splits the kernels would take on 132 SMs: one (sequence, KV head) pair per ~16
            // SMs, no split under 256 tokens (1,024 for the binned paths).
            const int splits = p["splits"].toInt();
            if (path == DecodePath::Fp16)
                QCOMPARE(splits, gpu::planFp16Splits(ctx, 1, 8, 128, 4, 132, h200->sharedOptin).splits);
            else if (path == DecodePath::Lookup)
                QCOMPARE(splits, gpu::planLookupSplits(ctx, 1, 32, 4, 1, 16, 256, 132, h200->sharedOptin).splits);
            else
                QCOMPARE(splits,
                         gpu::planPaperSplits(ctx, 1, {32, 8, 128}, 128, 16, 256, true, 132, h200->sharedOptin).splits);
            const bool walk = gpu::paperBinsWalk(4, 1, 16, 256, h200->sharedOptin);
            const auto costs = gpu::decodeCosts(path, {{32, 8, 128}, 128, 16, 256, ctx, 1, splits, true, true, walk});
            QCOMPARE(p["seconds_per_layer"].toDouble(), roofline(costs, rates).seconds);
            if (path == DecodePath::Fp16)
                fp16 = p["seconds_per_layer"].toDouble();
            else
                QCOMPARE(p["speedup_vs_fp16"].toDouble(), fp16 / p["seconds_per_layer"].toDouble());
        }
        const auto list = test::gsrqRun({"--db", db, "runs", "list"});
        QVERIFY2(list.code == 0 && list.out.contains("model"), list.out.constData());
        // A name it does not know, or a CPU run, is an input error that says what it takes.
        const auto bad = test::gsrqRun({"--no-db", "bench-decode", "--model-device", "a100"});
        QCOMPARE(bad.code, 2);
        QVERIFY2(bad.err.contains("h100, h200"), bad.err.constData());
        const auto cpu = test::gsrqRun({"--no-db", "bench-decode", "--model-device", "h100", "--backend", "cpu"});
        QCOMPARE(cpu.code, 2);
        QVERIFY2(cpu.err.contains("--backend cpu"), cpu.err.constData());
        QFile::remove(db);
    }

    void decodeCacheWithoutDeviceFailsCleanly()
    {
        QString why;
        if (test::haveCudaDevice(&why))
            QSKIP(test::deviceIsPresent());
        const auto kb = syntheticDecodeBooks({8, 2, 64}, 64, 4, 16, 1);
        try {
            const auto cache = gpu::makeDeviceDecodeCache({{8, 2, 64}, 1, 16}, kb, kb);
            QFAIL("a device cache was made without a device");
        } catch (const Error& e) {
            QVERIFY(e.kind() == ErrorKind::Runtime || e.kind() == ErrorKind::InvalidInput);
        }
    }

    void quantizeAndPackMatchesTheCpuEncoder()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        const DecodeShape s{8, 2, 128};
        const int D = 64, R = 6, K = 256, B = 3, n = 40;
        const auto kb = syntheticDecodeBooks(s, D, R, K, 11);
        const auto vb = syntheticDecodeBooks(s, D, R, K, 12);
        const auto cache = gpu::makeDeviceDecodeCache({s, B, 100}, kb, vb);
        gpu::DeviceDecodeCache& c = *cache;
        const MatrixRF keys = test::randomRows(B * n, 256, 5, 0.3f), values = test::randomRows(B * n, 256, 6, 0.3f);
        const auto [ck, cv] = c.append(keys, values);
        const auto cpu = makeCpuBackend(1);
        const Codes rk = encode(keys, kb, 1, *cpu), rv = encode(values, vb, 1, *cpu);
        // Greedy encoding in FP32 on both sides; near-ties may flip one stage and then the rest of
        // that row's stages: ≥ 99% of codes agree (the training backends' criterion is 99.9% of
        // labels for a single stage).
        const double agree = double((ck.array() == rk.array()).count() + (cv.array() == rv.array()).count()) /
                             double(ck.size() + cv.size());
        QVERIFY2(agree >= 0.99, qPrintable(QString::number(agree)));
        // The packed layout on the device is the CPU's packing of those codes, sequence by sequence.
        for (int b = 0; b < B; ++b) {
            const PackedCodes dk = c.keyCodes(b);
            const PackedCodes ref = packCodes(ck.middleRows(b * n, n), kb.subspaces, R, K);
            QCOMPARE(dk.tokens, std::int64_t(n));
            QVERIFY(dk.data == ref.data);
        }
        // FP16 copies are the inputs rounded to half precision (relative 2^-11).
        const MatrixRF k16 = c.fp16Keys(1);
        QVERIFY(
            ((k16 - keys.middleRows(n, n)).array().abs() <= keys.middleRows(n, n).array().abs() * 1e-3f + 1e-7f).all());
    }

    void decodePathsMatchTheirReferences()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        const Case cases[] = {
            {"gqa4 d128 D128 K256", {8, 2, 128}, 128, 6, 256, 3, 1000, 0},
            {"gqa4 d128 D64 K16 bit-packed", {8, 2, 128}, 64, 5, 16, 2, 777, 0},
            {"mha d64 past 64K", {4, 4, 64}, 64, 4, 256, 2, 1500, 70000},
            {"gqa8 d256 D128", {8, 1, 256}, 128, 3, 64, 2, 300, 5},
            {"gqa8 d128 long split", {16, 2, 128}, 128, 2, 256, 1, 9000, 0},
            // 8 heads × 4 subspaces × 8 stages × 256 codewords of bins: 256 KiB, over a block's shared
            // memory, so the paper path sums the value codewords instead.
            {"gqa8 d256 D64 R8 values by codewords", {8, 1, 256}, 64, 8, 256, 1, 700, 3},
            {"gqa4 d128 sharp softmax", {8, 2, 128}, 128, 6, 256, 1, 3000, 0, 40.f},
            // 20 bytes of codes per token and subspace, 2 subspaces: more than either path stages in
            // shared memory, so both read their codes where they lie.
            {"mha d64 D32 R17 codes read in place", {2, 2, 64}, 32, 17, 256, 1, 300, 0},
            // Positions across 2^20: the paper kernels' RoPE walk runs past many anchors (a lane's
            // 32-token walks), on the bins path and, at head_dim 256, the codeword path.
            {"gqa4 d128 across 2^20", {8, 2, 128}, 128, 4, 256, 1, 2500, (1LL << 20) - 1200},
            {"gqa8 d256 D64 R8 across 2^20 values by codewords", {8, 1, 256}, 64, 8, 256, 1, 1200, (1LL << 20) - 600},
        };
        QVERIFY(!gpu::lookupStagesCodes(2, 17, 256, 227 * 1024));
        QVERIFY(gpu::paperStagedWords(64, 2, 2, gpu::packedCodeBytes(17, 256)) > gpu::kPaperStageWords);
        for (const auto& cs : cases) {
            const auto kb = syntheticDecodeBooks(cs.shape, cs.dim, cs.stages, cs.k, 21);
            const auto vb = syntheticDecodeBooks(cs.shape, cs.dim, cs.stages, cs.k, 22);
            const auto cache = gpu::makeDeviceDecodeCache({cs.shape, cs.batch, cs.tokens + 8}, kb, vb);
            gpu::DeviceDecodeCache& c = *cache;
            const std::int64_t F = std::int64_t(cs.shape.kvHeads) * cs.shape.headDim;
            // Appended in two parts: the second lands after the first (append at the right offset).
            const std::int64_t first = cs.tokens / 3;
            for (auto [n, seed] : {std::pair{first, 1}, std::pair{cs.tokens - first, 2}}) {
                MatrixRF keys = test::randomRows(cs.batch * n, F, 100 + seed),
                         values = test::randomRows(cs.batch * n, F, 200 + seed);
                // Rows in batch order: sequence b's n new tokens together.
                c.append(keys, values);
            }
            QCOMPARE(c.tokens(), cs.tokens);
            const MatrixRF q =
                test::randomRows(cs.batch, std::int64_t(cs.shape.heads) * cs.shape.headDim, 300, cs.queryScale);
            const auto inv = ropeInvFreq(10000.0, cs.shape.headDim);
            std::vector<std::int64_t> pos(std::size_t(cs.tokens));
            for (std::size_t t = 0; t < pos.size(); ++t)
                pos[t] = cs.positionOffset + std::int64_t(t);
            const MatrixRF fp16 = c.decode(DecodePath::Fp16, q, cs.positionOffset);
            const MatrixRF paper = c.decode(DecodePath::Paper, q, cs.positionOffset);
            // The lookup path holds one query head's tables and bins per block: it runs in every case,
            // also where the paper path's bins for the whole group do not fit.
            const bool lookupRuns = c.pathProblem(DecodePath::Lookup).empty();
            QVERIFY2(lookupRuns, c.pathProblem(DecodePath::Lookup).c_str());
            const MatrixRF lookup = lookupRuns ? c.decode(DecodePath::Lookup, q, cs.positionOffset) : MatrixRF();
            for (int b = 0; b < cs.batch; ++b) {
                const Eigen::VectorXf qb = q.row(b).transpose();
                const auto kc = c.keyCodes(b), vc = c.valueCodes(b);
                const Eigen::VectorXd rFp16 = naiveAttention(qb.cast<double>(), c.fp16Keys(b).cast<double>(),
                                                             c.fp16Values(b).cast<double>(), cs.shape);
                const Eigen::VectorXd rPaper = decodeAttention(qb, cs.positionOffset + cs.tokens, kc, c.keyBooks16(),
                                                               vc, c.valueBooks16(), pos, inv, cs.shape);
                const Eigen::VectorXd rLookup = lookupAttention(qb, kc, c.keyBooks16(), vc, c.valueBooks16(), cs.shape);
                const double e1 = relError(fp16.row(b).transpose().cast<double>(), rFp16);
                const double e2 = relError(paper.row(b).transpose().cast<double>(), rPaper);
                const double e3 = lookupRuns ? relError(lookup.row(b).transpose().cast<double>(), rLookup) : 0.0;
                const QString msg = QString("%1, sequence %2: fp16 %3, paper %4, lookup %5")
                                        .arg(cs.name)
                                        .arg(b)
                                        .arg(e1)
                                        .arg(e2)
                                        .arg(e3);
                QVERIFY2(e1 < kTol && e2 < kTol && e3 < kTol, qPrintable(msg));
            }
            // The long case really ran split-K, so the combine steps were exercised.
            if (cs.tokens >= 9000)
                QVERIFY(c.plan(DecodePath::Fp16).splits > 1 && c.plan(DecodePath::Lookup).splits > 1 &&
                        c.plan(DecodePath::Paper).splits > 1);
            // Both ways of the paper path's values ran: bins where they fit, codewords where not.
            QCOMPARE(c.paperUsesBins(), std::string(cs.name).find("values by codewords") == std::string::npos);
        }
    }

    void benchDecodeVerifiesTimesAndRecords()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // The CLI end to end: every point verified against the CPU reference before it is timed,
        // reported, and recorded in the run store.
        QTemporaryDir dir;
        const QString db = dir.filePath("runs.db");
        const auto r = test::gsrqRun({"--db", db, "bench-decode", "--heads", "8", "--kv-heads", "2", "--head-dim",
                                      "128", "--ctx", "256,600", "--batch", "1,2", "--bpa", "1", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        QVERIFY(j["summary"].toObject()["all_verified"].toBool());
        const QJsonArray points = j["points"].toArray();
        QCOMPARE(points.size(), 2 * 2 * 3); // contexts × batches × paths
        QSet<QString> paths;
        for (const auto& v : points) {
            const QJsonObject p = v.toObject();
            paths.insert(p["path"].toString());
            QVERIFY(p["verified"].toBool());
            QVERIFY(p["rel_error"].toDouble() < kDecodeTolerance);
            QVERIFY(p["seconds_per_layer"].toDouble() > 0);
            QVERIFY(p["bytes_read"].toDouble() > 0);
            const QJsonObject bytes = p["cache_bytes"].toObject();
            // 1 bit per activation against FP16's 16: codes are 1/16 of the FP16 cache.
            QCOMPARE(bytes["codes"].toDouble() * 16, bytes["fp16"].toDouble());
        }
        QCOMPARE(paths, (QSet<QString>{"fp16", "paper", "lookup"}));
        const auto list = test::gsrqRun({"--db", db, "runs", "list"});
        QVERIFY2(list.code == 0 && list.out.contains("bench-decode"), list.out.constData());
    }

    void decodeOnSyntheticCacheAndReRuns()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // The benchmark's device-made cache: the same outputs on a second run (no race between
        // blocks), and each path against its reference.
        // The emulator runs every thread on one CPU core: there, a smaller model and context take
        // the same code paths (GQA 4, split-K, 20 timed repetitions) in seconds.
        const DecodeShape s = test::kEmulated ? DecodeShape{8, 2, 128} : DecodeShape{32, 8, 128};
        const std::int64_t context = test::kEmulated ? 1024 : 4096;
        const auto kb = syntheticDecodeBooks(s, 128, 12, 256, 3), vb = syntheticDecodeBooks(s, 128, 12, 256, 4);
        const auto cache = gpu::makeDeviceDecodeCache({s, 2, context + 4}, kb, vb);
        gpu::DeviceDecodeCache& c = *cache;
        c.appendRandom(context, 9);
        const MatrixRF q = test::randomRows(2, std::int64_t(s.heads) * 128, 8);
        for (auto path : {DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup}) {
            const MatrixRF a = c.decode(path, q), b = c.decode(path, q);
            QVERIFY2((a - b).norm() <= 1e-6 * a.norm(), decodePathName(path));
        }
        DecodeBenchOptions o;
        o.shape = s;
        o.contexts = {context / 2};
        o.batches = {2};
        o.reps = 20;
        o.warmup = 1;
        const auto rep = gpu::runDecodeBench(o, kb, vb, "synthetic");
        QCOMPARE(int(rep.points.size()), 3);
        for (const auto& p : rep.points) {
            QVERIFY2(p.skipped.empty(), p.skipped.c_str());
            QVERIFY(p.verified && p.relError < kDecodeTolerance);
            QVERIFY(p.seconds > 0 && p.minSeconds <= p.seconds && p.seconds <= p.maxSeconds);
        }
        if (!test::kEmulated) // the emulator's copies are the CPU's memcpy
            QVERIFY(rep.copyBytesPerSecond > 1e10);
    }

#if defined(GSRQ_TEST_EMULATOR)
    void bytesCountedMatchTheRoofline()
    {
        if (!emulator::byteCountsBuilt())
            QSKIP("this build's emulator has no byte counts (the AddressSanitizer build)");
        // Every launch of a decode step, as the emulator counts its loads and stores, against the
        // cost model's term for that launch (roofline.h's decodeKernelCosts): the model is checked
        // against what the kernels do. Seeded synthetic caches (codes uniform over K).
        struct Shape {
            const char* name;
            int dim, k, batch;
            std::int64_t context;
            const char* optinKib;                      // the emulated device's shared memory per block; null: Hopper's
            bool splitsWanted;                         // the binned paths must split the context here
            bool binsWanted = true, walkWanted = true; // the paper path's values by bins; its bins kernel walks
        };
        const Shape shapes[] = {
            {"D = 128, K = 256, batch 2", 128, 256, 2, 1024, nullptr, false},
            {"D = 64, K = 16, batch 1, split", 64, 16, 1, 2048, nullptr, true},
            // Bins of 2 subspaces × 8 stages × 256 codewords × 4 heads pass 48 KiB: the paper path sums
            // codewords instead; the lookup path's one head's tables and bins (32 KiB) fit.
            {"D = 64, K = 256, 48 KiB of shared memory", 64, 256, 2, 1024, "48", false, false},
            // 32 KiB of bins: 2 blocks of the bins kernel in 80 KiB, 1 with the RoPE walk's 8 KiB, so
            // it rotates every key exactly (the byte model's other RoPE term).
            {"D = 128, K = 256, 80 KiB of shared memory", 128, 256, 2, 1024, "80", false, true, false},
        };
        const DecodeShape s{8, 2, 128};
        const int stages = 8;
        int compared = 0;
        struct Unset { // the emulated device's shared memory back to Hopper's, whatever happens below
            ~Unset() { qunsetenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB"); }
        } unset;
        for (const Shape& sh : shapes) {
            if (sh.optinKib)
                qputenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB", sh.optinKib);
            const auto kb = syntheticDecodeBooks(s, sh.dim, stages, sh.k, 3);
            const auto vb = syntheticDecodeBooks(s, sh.dim, stages, sh.k, 4);
            const auto cache = gpu::makeDeviceDecodeCache({s, sh.batch, sh.context}, kb, vb);
            gpu::DeviceDecodeCache& c = *cache;
            c.appendRandom(sh.context, 9);
            c.setQuery(test::randomRows(sh.batch, std::int64_t(s.heads) * 128, 8));
            for (auto path : {DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup}) {
                if (!c.pathProblem(path).empty())
                    continue;
                // The lookup path stages its tokens' codes where they fit beside its tables and bins.
                const std::size_t optin = sh.optinKib ? std::size_t(std::atoi(sh.optinKib)) * 1024 : 227 * 1024;
                const bool staged = gpu::lookupStagesCodes(128 / sh.dim, stages, sh.k, optin);
                const bool walk = gpu::paperBinsWalk(s.heads / s.kvHeads, 128 / sh.dim, stages, sh.k, optin);
                const gpu::DecodeCostCase cc{
                    s,      sh.dim, stages, sh.k, sh.context, sh.batch, c.plan(path).splits, c.paperUsesBins(),
                    staged, walk};
                if (sh.splitsWanted && path != DecodePath::Fp16)
                    QVERIFY2(cc.splits > 1, sh.name);
                if (path == DecodePath::Paper) {
                    QVERIFY2(cc.paperBins == sh.binsWanted, sh.name);
                    QVERIFY2(!cc.paperBins || walk == sh.walkWanted, sh.name);
                }
                emulator::startByteCounts();
                c.enqueue(path);
                c.synchronize();
                const auto launches = emulator::stopByteCounts();
                const auto model = gpu::decodeKernelCosts(path, cc);
                QCOMPARE(launches.size(), model.size());
                for (std::size_t i = 0; i < launches.size(); ++i) {
                    const auto& l = launches[i];
                    const auto& m = model[i];
                    const QString what =
                        QString("%1, %2, %3").arg(sh.name).arg(decodePathName(path)).arg(m.kernel.c_str());
                    // HBM: the distinct bytes, exactly, but for codewords no token chose, which the
                    // model counts as read: at 2,048 uniform draws per stage from K = 256, about 0.03%
                    // of a stage's codewords (about 1.4 here, each D·2 bytes); 16 allows for chance.
                    // With K = 16 every codeword is drawn.
                    const double hbm = double(l.globalReadDistinct + l.globalWriteDistinct);
                    const double unread = (sh.k == 256 ? 16.0 : 0.0) * sh.dim * 2;
                    QVERIFY2(
                        hbm <= m.hbmBytes && hbm >= m.hbmBytes - unread,
                        qPrintable(QString("%1: %2 distinct bytes, the model %3").arg(what).arg(hbm).arg(m.hbmBytes)));
                    // Shared memory: exactly (the model assumes no rescaled bins: none in these
                    // seeded steps, whose running maxima never pass their reference by 2^8).
                    const double shared = double(l.sharedRead + l.sharedWrite);
                    QVERIFY2(
                        shared == m.sharedBytes,
                        qPrintable(
                            QString("%1: %2 shared bytes, the model %3").arg(what).arg(shared).arg(m.sharedBytes)));
                    // The L2 term, codeword gathers past their first read and books re-read per
                    // sequence, is a part of the counted re-reads: the counter sees each lane's load,
                    // where a device serves a warp's loads of one word (a token's codes, a query) at
                    // once from its L1. So the term is held as a lower bound only.
                    QVERIFY2(double(l.globalRead - l.globalReadDistinct) >= m.l2Bytes, qPrintable(what));
                    ++compared;
                }
            }
            qunsetenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB");
        }
        // fp16 (1 launch), paper (2 with bins, 2 without) and lookup (1) in each shape.
        QCOMPARE(compared, 1 * 4 + 2 * 3 + 2 + 1 * 4);
    }
#endif
};

QTEST_GUILESS_MAIN(TestDecodeGpu)
#include "tst_decode_gpu.moc"
