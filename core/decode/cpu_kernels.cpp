// The CPU decode paths' inner loops (see cpu_kernels.h). One source, three builds, chosen by
// GSRQ_DECODE_ISA: 0, plain C++ over arrays; 1, AVX2 registers with FMA, FP16 converted by F16C; 2, the
// same with the FP16 path over AVX-512 registers (16 floats, 32 registers). The vector builds turn their
// instruction sets on with a target pragma after the standard headers, so nothing the library shares
// (the standard templates these files instantiate) is compiled for a CPU that may not run it; the
// dispatch (portable build) picks the widest one the CPU runs. The kernels are written once over the
// vector types of cpu_vectors.h, so the tests compare every build on every shape.
//
// Why one file of this length: it is one concern (every path's loops for one instruction set) and
// one translation unit compiled three times under a target pragma (core/CMakeLists.txt); split into
// parts, each part would need the same pragma dance and the dispatch table (kKernels) would have to
// reach across files into each build's anonymous namespace.

#include "core/decode/cpu_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>

#ifndef GSRQ_DECODE_ISA
#define GSRQ_DECODE_ISA 1
#endif
#if defined(__x86_64__) || defined(_M_X64)
#define GSRQ_DECODE_X86 1
#else
#define GSRQ_DECODE_X86 0
#endif

#if GSRQ_DECODE_ISA > 0 && GSRQ_DECODE_X86
#define GSRQ_DECODE_SIMD 1
#include <immintrin.h>
// GCC's target pragma, or clang's attribute on every function that follows (popped at the end).
#if defined(__clang__)
#define GSRQ_DECODE_CLANG_TARGET 1
#if GSRQ_DECODE_ISA == 2
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))),              \
                             apply_to = function)
#else
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif
#elif GSRQ_DECODE_ISA == 2
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#else
#define GSRQ_DECODE_SIMD 0
#include <Eigen/Core>
#if GSRQ_DECODE_ISA == 0
#include "core/base/cpu_features.h"
#endif
#endif

namespace gsrq::cpudecode {

namespace {

// Before a loop over a compile-time count (heads of a group, tokens or codewords per step, chunks per
// pass): unrolled, so the arrays of accumulators it indexes live in registers at -O2 as at -O3. At
// -O2 GCC 12 left them on the stack, a load and a store around every fused multiply-add: the FP16
// loop ran 2.1× and the table products 2.4× slower than unrolled (-O3 unrolls them itself).
#define GSRQ_UNROLL _Pragma("GCC unroll 16")

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#include "core/decode/cpu_vectors.h" // V8, VW, Lanes, kVectorRegisters, kIsa (inside this namespace)

// The largest of n floats (−inf for none).
float maxOf(const float* x, int n)
{
    V8 mx = V8::set1(kNegInf);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        mx = V8::max(mx, V8::load(x + i));
    alignas(32) float v[8];
    mx.store(v);
    float b = *std::max_element(v, v + 8);
    for (; i < n; ++i)
        b = std::max(b, x[i]);
    return b;
}

// x[i] = 2^(x[i] − ref[i mod 8]) for n floats in place, eight at a time; sums[j] is the sum of the
// results at positions ≡ j (mod 8). ref repeats every eight floats: one reference, or a group's four
// or eight lanes.
void exp2ShiftedLanes(float* x, int n, const float* ref, float* sums)
{
    const V8 r = V8::load(ref);
    V8 acc = V8::zero();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const V8 w = V8::exp2(V8::load(x + i) - r);
        w.store(x + i);
        acc = acc + w;
    }
    acc.store(sums);
    for (; i < n; ++i) {
        x[i] = std::exp2(std::max(x[i] - ref[i % 8], -126.f));
        sums[i % 8] += x[i];
    }
}

// x[i] = 2^(x[i] − ref) for n floats in place; returns their sum.
float exp2Shifted(float* x, int n, float ref)
{
    alignas(32) float r[8], sums[8];
    std::fill(r, r + 8, ref);
    exp2ShiftedLanes(x, n, r, sums);
    return std::accumulate(sums, sums + 8, 0.f);
}

template <typename F> void dispatchGroup(int G, F&& f)
{
    switch (G) {
    case 1:
        return f(std::integral_constant<int, 1>{});
    case 2:
        return f(std::integral_constant<int, 2>{});
    case 3:
        return f(std::integral_constant<int, 3>{});
    case 4:
        return f(std::integral_constant<int, 4>{});
    case 5:
        return f(std::integral_constant<int, 5>{});
    case 6:
        return f(std::integral_constant<int, 6>{});
    case 7:
        return f(std::integral_constant<int, 7>{});
    default:
        return f(std::integral_constant<int, 8>{});
    }
}

// Feature chunks of 8 handled together per pass so that G × CH accumulators stay in registers.
template <int G> constexpr int chunksPerPass()
{
    return G == 1 ? 8 : G == 2 ? 4 : G <= 4 ? 2 : 1;
}

// The same for the FP16 path's vectors (VW): G × CH accumulators, CH values and a broadcast within the
// build's registers.
template <int G> constexpr int fp16ChunksPerPass()
{
    if constexpr (kVectorRegisters >= 32)
        return G <= 2 ? 8 : G <= 4 ? 4 : 2;
    else
        return chunksPerPass<G>();
}

// ---- FP16 flash-decoding ----

constexpr int kFp16Block = 32;
constexpr int kPrefetchRows = 96;

// Prefetches one FP16 row of n halves, a cache line (32 halves) at a time, into the outer caches
// (locality 1: prefetcht2 on x86), not L1: measured 8–12% faster on a Zen 4 than into L1, where the
// prefetches compete with the loop's own loads for the miss buffers.
inline void prefetchRow(const std::uint16_t* row, int n)
{
    for (int i = 0; i < n; i += 32)
        __builtin_prefetch(row + i, 0, 1);
}

template <int G, int CH>
void accumulateValues(const std::uint16_t* values, int bt, int hd, int c0, const float (*p)[kFp16Block], float* acc)
{
    constexpr int W = VW::N;
    VW a[G][CH];
    GSRQ_UNROLL
    for (int g = 0; g < G; ++g) {
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            a[g][j] = VW::load(acc + std::size_t(g) * hd + (c0 + j) * W);
    }
    for (int t = 0; t < bt; ++t) {
        const std::uint16_t* v = values + std::size_t(t) * hd + c0 * W;
        VW vv[CH];
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            vv[j] = VW::loadHalf(v + j * W);
        GSRQ_UNROLL
        for (int g = 0; g < G; ++g) {
            const VW w = VW::set1(p[g][t]);
            GSRQ_UNROLL
            for (int j = 0; j < CH; ++j)
                a[g][j] = VW::fma(vv[j], w, a[g][j]);
        }
    }
    GSRQ_UNROLL
    for (int g = 0; g < G; ++g) {
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            a[g][j].store(acc + std::size_t(g) * hd + (c0 + j) * W);
    }
}

template <int G>
void fp16Group(const HeadDims& d, const std::uint16_t* keys, const std::uint16_t* values, std::int64_t n,
               const float* q, float* m, float* l, float* acc)
{
    constexpr int W = VW::N; // features per vector: head_dim is a multiple of 16
    const int hd = d.hd, C = hd / W;
    constexpr int CH = fp16ChunksPerPass<G>();
    constexpr int TOK = G <= 4 ? 8 / G : 1; // tokens per step of the score loop (TOK·G ≤ 8)
    alignas(64) float s[G][kFp16Block];
    for (std::int64_t t0 = 0; t0 < n; t0 += kFp16Block) {
        const int bt = int(std::min<std::int64_t>(kFp16Block, n - t0));
        const std::uint16_t* kb = keys + std::size_t(t0) * hd;
        const std::uint16_t* vb = values + std::size_t(t0) * hd;
        // Scores, TOK tokens at a time: TOK·G independent accumulators keep both FMA pipes busy
        // (one head's chain alone waits on the FMA latency), reduced together by sum8.
        for (int t = 0; t < bt; t += TOK) {
            const int nt = std::min(TOK, bt - t);
            // Software prefetch: key rows kPrefetchRows ahead, and these tokens' value rows, which
            // the value pass reads once the block's scores are done. The hardware prefetcher alone
            // leaves the loop waiting on memory.
            for (int i = 0; i < nt; ++i) {
                if (t0 + t + i + kPrefetchRows < n)
                    prefetchRow(kb + std::size_t(t + i + kPrefetchRows) * hd, hd);
                prefetchRow(vb + std::size_t(t + i) * hd, hd);
            }
            const std::uint16_t* rows[TOK];
            GSRQ_UNROLL
            for (int i = 0; i < TOK; ++i) // past the block's end: its last row again, the sum unused
                rows[i] = kb + std::size_t(t + std::min(i, nt - 1)) * hd;
            VW a[8];
            GSRQ_UNROLL
            for (int i = 0; i < 8; ++i)
                a[i] = VW::zero();
            for (int c = 0; c < C; ++c) {
                VW kv[TOK];
                GSRQ_UNROLL
                for (int i = 0; i < TOK; ++i)
                    kv[i] = VW::loadHalf(rows[i] + c * W);
                GSRQ_UNROLL
                for (int g = 0; g < G; ++g) {
                    const VW qg = VW::load(q + std::size_t(g) * hd + c * W);
                    GSRQ_UNROLL
                    for (int i = 0; i < TOK; ++i)
                        a[i * G + g] = VW::fma(kv[i], qg, a[i * G + g]);
                }
            }
            alignas(32) float sums[8];
            VW::sum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]).store(sums);
            for (int i = 0; i < nt; ++i) {
                GSRQ_UNROLL
                for (int g = 0; g < G; ++g)
                    s[g][t + i] = sums[i * G + g];
            }
        }
        for (int g = 0; g < G; ++g) {
            const float bm = maxOf(s[g], bt);
            if (bm > m[g] + kLazyRescale) {
                const float sc = std::exp2(m[g] - bm);
                l[g] *= sc;
                for (int i = 0; i < hd; ++i)
                    acc[std::size_t(g) * hd + i] *= sc;
                m[g] = bm;
            }
            l[g] += exp2Shifted(s[g], bt, m[g]);
        }
        int c = 0;
        for (; c + CH <= C; c += CH)
            accumulateValues<G, CH>(vb, bt, hd, c, s, acc);
        for (; c < C; ++c)
            accumulateValues<G, 1>(vb, bt, hd, c, s, acc);
    }
}

void fp16(const HeadDims& d, const std::uint16_t* keys, const std::uint16_t* values, std::int64_t n, const float* q,
          float* m, float* l, float* acc)
{
    dispatchGroup(d.G, [&](auto g) { fp16Group<decltype(g)::value>(d, keys, values, n, q, m, l, acc); });
}

// ---- lookup tables ----

template <int G> void tablesGroup(const HeadDims& d, const float* q, const std::uint16_t* books, float* T)
{
    const int D = d.D, C = D / 8;
    constexpr int W = G <= 4 ? 8 / G : 1; // codewords per step: W·G ≤ 8 independent accumulators
    const std::int64_t rows = std::int64_t(d.P) * d.R * d.K, perSubspace = std::int64_t(d.R) * d.K;
    for (std::int64_t i = 0; i < rows;) {
        const int p = int(i / perSubspace);
        const int nw = int(std::min<std::int64_t>(W, (p + 1) * perSubspace - i)); // a step stays in one subspace
        const std::uint16_t* cw = books + std::size_t(i) * D;
        V8 a[8];
        GSRQ_UNROLL
        for (int j = 0; j < 8; ++j)
            a[j] = V8::zero();
        for (int c = 0; c < C; ++c) {
            V8 x[W];
            GSRQ_UNROLL
            for (int w = 0; w < W; ++w)
                x[w] = V8::loadHalf(cw + std::size_t(std::min(w, nw - 1)) * D + c * 8);
            GSRQ_UNROLL
            for (int g = 0; g < G; ++g) {
                const V8 qg = V8::load(q + std::size_t(g) * d.hd + std::size_t(p) * D + c * 8);
                GSRQ_UNROLL
                for (int w = 0; w < W; ++w)
                    a[w * G + g] = V8::fma(x[w], qg, a[w * G + g]);
            }
        }
        alignas(32) float sums[8];
        V8::sum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]).store(sums);
        for (int w = 0; w < nw; ++w) {
            float* t = T + std::size_t(i + w) * d.Gp;
            GSRQ_UNROLL
            for (int g = 0; g < G; ++g)
                t[g] = sums[w * G + g];
            for (int g = G; g < d.Gp; ++g)
                t[g] = 0.f;
        }
        i += nw;
    }
}

void tables(const HeadDims& d, const float* q, const std::uint16_t* books, float* T)
{
    dispatchGroup(d.G, [&](auto g) { tablesGroup<decltype(g)::value>(d, q, books, T); });
}

// ---- weights binned by value codeword (lookup and paper paths) ----

constexpr int kBinBlock = 64;

// The reference m (Gp lanes) raised to a block's maxima bmax where they pass it by more than
// kLazyRescale, the sums l and the bins W (P × R × K × Gp) rescaled to match.
template <int Gp> void raiseReference(const HeadDims& d, Lanes<Gp> bmax, float* m, float* l, float* W)
{
    using L = Lanes<Gp>;
    alignas(32) float bm[Gp], scale[Gp];
    bmax.store(bm);
    bool raise = false;
    for (int g = 0; g < Gp; ++g) {
        scale[g] = 1.f;
        if (bm[g] > m[g] + kLazyRescale) {
            scale[g] = std::exp2(m[g] - bm[g]);
            m[g] = bm[g];
            l[g] *= scale[g];
            raise = true;
        }
    }
    if (raise) {
        const L sv = L::load(scale);
        const std::int64_t bins = std::int64_t(d.P) * d.R * d.K;
        for (std::int64_t i = 0; i < bins; ++i)
            (L::load(W + i * Gp) * sv).store(W + i * Gp);
    }
}

// A block's bt × Gp scores s: the reference raised to their maxima where needed, then the scores
// turned into weights 2^(s − m) in place, added to l. One pass over the weights, eight floats at a
// time (two tokens of four lanes or one of eight, so the reference repeats every Gp floats).
template <int Gp> void weighBlock(const HeadDims& d, float* s, int bt, float* m, float* l, float* W)
{
    using L = Lanes<Gp>;
    L bmax = L::load(s);
    for (int t = 1; t < bt; ++t)
        bmax = L::max(bmax, L::load(s + std::size_t(t) * Gp));
    raiseReference<Gp>(d, bmax, m, l, W);
    alignas(32) float mr[8], lanes[8];
    for (int i = 0; i < 8; ++i)
        mr[i] = m[i % Gp];
    exp2ShiftedLanes(s, bt * Gp, mr, lanes); // two tokens of four lanes, or one of eight, per vector
    for (int g = 0; g < Gp; ++g)
        l[g] += Gp == 4 ? lanes[g] + lanes[g + 4] : lanes[g];
}

// s: bt × Gp scores of a block, for any stage count and codebook size: weighed (weighBlock), then
// each token's weights added to the bins of its value codewords, token by token, a token's R updates
// one after another (measured faster than stage by stage, 0.6 against 1.0 ns per update, where
// consecutive updates of one stage's bins wait on each other through memory more often).
template <int Gp> void binBlock(const HeadDims& d, float* s, int bt, CodeView vc, float* m, float* l, float* W)
{
    using L = Lanes<Gp>;
    weighBlock<Gp>(d, s, bt, m, l, W);
    const std::int64_t stage = std::int64_t(d.K) * Gp;
    for (int t = 0; t < bt; ++t) {
        const L w = L::load(s + std::size_t(t) * Gp);
        const std::uint8_t* c = vc.data + t * vc.tokenStride;
        for (int p = 0; p < d.P; ++p) {
            const std::uint8_t* cp = c + p * vc.subspaceStride;
            float* Wp = W + std::size_t(p) * d.R * stage;
            for (int r = 0; r < d.R; ++r) {
                float* bin = Wp + r * stage + std::int64_t(cp[r]) * Gp;
                (L::load(bin) + w).store(bin);
            }
        }
    }
}

// ---- the lookup path ----

// The lookup path's block of tokens for the common shapes (lookupFixed): the table or bins of a
// group of stages are reused across its tokens, its scores (256 × 16 or 32 bytes) stay in L1.
constexpr int kLookupBlock = 256;

// Codes are read once, in token order, from memory: prefetched this many tokens ahead into the outer
// caches, a line at a time (the hardware prefetcher alone leaves the lookup loop waiting on them).
constexpr int kCodePrefetchTokens = 256;

// Prefetches the codes of tokens [t, t + n) of every subspace.
inline void prefetchCodes(const CodeView& v, int P, std::int64_t t, int n)
{
    for (int p = 0; p < P; ++p) {
        const char* first = reinterpret_cast<const char*>(v.data + p * v.subspaceStride + t * v.tokenStride);
        const char* last = first + (n - 1) * v.tokenStride;
        for (const char* a = first; a <= last; a += 64)
            __builtin_prefetch(a, 0, 1);
        __builtin_prefetch(last + v.tokenStride - 1, 0, 1); // the last token's last code (a prefetch never faults)
    }
}

// f(r, code) for the N ≤ 8 codes at c, `Bits` (8 or 4) wide each, unrolled: read as one little-endian
// word and taken apart with shifts, one load for up to eight codes instead of one per code (with the
// stage groups below, 1.5× faster for the whole lookup loop on a Zen 4, whose loads, not its
// arithmetic, bound it).
template <int N, int Bits, typename F> inline void forEachCode(const std::uint8_t* c, F&& f)
{
    static_assert(N >= 1 && N <= 8 && (Bits == 8 || Bits == 4));
    constexpr int bytes = (N * Bits + 7) / 8;
    constexpr unsigned mask = (1u << Bits) - 1u;
    std::uint64_t word = 0;
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&word, c, bytes);
    } else {
        for (int i = 0; i < bytes; ++i)
            word |= std::uint64_t(c[i]) << (8 * i);
    }
    [&]<int... I>(std::integer_sequence<int, I...>)
    {
        (f(I, unsigned(word >> (Bits * I)) & mask), ...);
    }
    (std::make_integer_sequence<int, N>{});
}

// f(first stage, stages) for R stages in groups of up to eight (the last one smaller), each group's
// size a compile-time constant. A group's table (or bins) is 8 × K × Gp floats: at K = 256 and four
// lanes, 32 KiB, reused by every token of a block.
template <int R, typename F> inline void forEachStageGroup(F&& f)
{
    [&]<int... G>(std::integer_sequence<int, G...>)
    {
        (f(std::integral_constant<int, G * 8>{}, std::integral_constant<int, std::min(8, R - G * 8)>{}), ...);
    }
    (std::make_integer_sequence<int, (R + 7) / 8>{});
}

// The lookup path with the stage count and codebook size known at compile time (the shapes of 0.25,
// 0.5, 0.75, 1 and 2 bits per activation at D = 128): per block, the scores stage group by stage
// group (token by token inside a group, two chains of adds), then the weights, then the bins, again
// group by group. Measured on a Zen 4 against token by token over all stages with a byte load per
// code: 1.3–1.6× faster (R = 8 to 16).
// K = 16 reads the codes packed, two a byte (lookupReadsNibbles): a group of eight stages is 4 bytes.
template <int Gp, int R, int K>
void lookupFixed(const HeadDims& d, const float* T, CodeView kc, CodeView vc, std::int64_t n, float* m, float* l,
                 float* W)
{
    using L = Lanes<Gp>;
    constexpr int Bits = K == 16 ? 4 : 8;
    constexpr std::int64_t stage = std::int64_t(K) * Gp;
    alignas(32) float s[kLookupBlock * Gp];
    for (std::int64_t t0 = 0; t0 < n; t0 += kLookupBlock) {
        const int bt = int(std::min<std::int64_t>(kLookupBlock, n - t0));
        if (t0 + kCodePrefetchTokens < n) {
            const int ahead = int(std::min<std::int64_t>(kLookupBlock, n - t0 - kCodePrefetchTokens));
            prefetchCodes(kc, d.P, t0 + kCodePrefetchTokens, ahead);
            prefetchCodes(vc, d.P, t0 + kCodePrefetchTokens, ahead);
        }
        for (int p = 0; p < d.P; ++p)
            forEachStageGroup<R>([&](auto g0, auto width) {
                const float* Tg = T + (std::size_t(p) * R + g0) * stage;
                const std::uint8_t* c = kc.data + t0 * kc.tokenStride + p * kc.subspaceStride + g0 * Bits / 8;
                const bool first = p == 0 && g0 == 0;
                for (int t = 0; t < bt; ++t) {
                    L a0 = first ? L::zero() : L::load(s + std::size_t(t) * Gp), a1 = L::zero();
                    forEachCode<decltype(width)::value, Bits>(c + t * kc.tokenStride, [&](int r, unsigned code) {
                        const L e = L::load(Tg + r * stage + std::int64_t(code) * Gp);
                        if (r & 1)
                            a1 = a1 + e;
                        else
                            a0 = a0 + e;
                    });
                    (a0 + a1).store(s + std::size_t(t) * Gp);
                }
            });
        weighBlock<Gp>(d, s, bt, m, l, W);
        for (int p = 0; p < d.P; ++p)
            forEachStageGroup<R>([&](auto g0, auto width) {
                float* Wg = W + (std::size_t(p) * R + g0) * stage;
                const std::uint8_t* c = vc.data + t0 * vc.tokenStride + p * vc.subspaceStride + g0 * Bits / 8;
                for (int t = 0; t < bt; ++t) {
                    const L w = L::load(s + std::size_t(t) * Gp);
                    forEachCode<decltype(width)::value, Bits>(c + t * vc.tokenStride, [&](int r, unsigned code) {
                        float* bin = Wg + r * stage + std::int64_t(code) * Gp;
                        (L::load(bin) + w).store(bin);
                    });
                }
            });
    }
}

// Any stage count and codebook size: token by token over all stages, a byte load per code.
template <int Gp>
void lookupAny(const HeadDims& d, const float* T, CodeView kc, CodeView vc, std::int64_t n, float* m, float* l,
               float* W)
{
    using L = Lanes<Gp>;
    const std::int64_t stage = std::int64_t(d.K) * Gp;
    alignas(32) float s[kBinBlock * Gp];
    for (std::int64_t t0 = 0; t0 < n; t0 += kBinBlock) {
        const int bt = int(std::min<std::int64_t>(kBinBlock, n - t0));
        for (int t = 0; t < bt; ++t) {
            const std::uint8_t* c = kc.data + (t0 + t) * kc.tokenStride;
            L a0 = L::zero(), a1 = L::zero();
            for (int p = 0; p < d.P; ++p) {
                const std::uint8_t* cp = c + p * kc.subspaceStride;
                const float* Tp = T + std::size_t(p) * d.R * stage;
                int r = 0;
                for (; r + 1 < d.R; r += 2) {
                    a0 = a0 + L::load(Tp + r * stage + std::int64_t(cp[r]) * Gp);
                    a1 = a1 + L::load(Tp + (r + 1) * stage + std::int64_t(cp[r + 1]) * Gp);
                }
                if (r < d.R)
                    a0 = a0 + L::load(Tp + r * stage + std::int64_t(cp[r]) * Gp);
            }
            (a0 + a1).store(s + std::size_t(t) * Gp);
        }
        CodeView vb = vc;
        vb.data = vc.data + t0 * vc.tokenStride;
        binBlock<Gp>(d, s, bt, vb, m, l, W);
    }
}

// lookupFixed for this R if it is one of Rs (the compiled stage counts of codebook size K); false if not.
template <int Gp, int K, int... Rs>
bool lookupCompiled(const HeadDims& d, const float* T, CodeView kc, CodeView vc, std::int64_t n, float* m, float* l,
                    float* W, std::integer_sequence<int, Rs...>)
{
    return ((d.R == Rs ? (lookupFixed<Gp, Rs, K>(d, T, kc, vc, n, m, l, W), true) : false) || ...);
}

template <int Gp>
void lookupGroup(const HeadDims& d, const float* T, CodeView kc, CodeView vc, std::int64_t n, float* m, float* l,
                 float* W)
{
    if (kc.bits == 4 && lookupReadsNibbles(d) &&
        lookupCompiled<Gp, 16>(d, T, kc, vc, n, m, l, W, std::integer_sequence<int, 8, 16, 32>{}))
        return;
    if (d.K == 256 && lookupCompiled<Gp, 256>(d, T, kc, vc, n, m, l, W, std::integer_sequence<int, 4, 8, 12, 16, 32>{}))
        return;
    lookupAny<Gp>(d, T, kc, vc, n, m, l, W);
}

void lookup(const HeadDims& d, const float* T, CodeView kc, CodeView vc, std::int64_t n, float* m, float* l, float* W)
{
    if (d.Gp == 4)
        lookupGroup<4>(d, T, kc, vc, n, m, l, W);
    else
        lookupGroup<8>(d, T, kc, vc, n, m, l, W);
}

// ---- the paper path: keys decoded and rotated per token ----

template <int G, int Gp>
void paperGroup(const HeadDims& d, const float* q, const std::uint16_t* books, const float* rope, CodeView kc,
                CodeView vc, std::int64_t n, float* m, float* l, float* W)
{
    const int hd = d.hd, half = hd / 2, D = d.D, C = D / 8;
    const std::int64_t stageBooks = std::int64_t(d.K) * D;
    alignas(32) float s[kBinBlock * Gp];
    alignas(32) float key[512], rot[512]; // head_dim ≤ 512
    for (std::int64_t t0 = 0; t0 < n; t0 += kBinBlock) {
        const int bt = int(std::min<std::int64_t>(kBinBlock, n - t0));
        for (int t = 0; t < bt; ++t) {
            const std::uint8_t* c = kc.data + (t0 + t) * kc.tokenStride;
            for (int p = 0; p < d.P; ++p) {
                const std::uint8_t* cp = c + p * kc.subspaceStride;
                const std::uint16_t* bp = books + std::size_t(p) * d.R * stageBooks;
                for (int j = 0; j < C; ++j) {
                    V8 a = V8::zero();
                    for (int r = 0; r < d.R; ++r)
                        a = a + V8::loadHalf(bp + r * stageBooks + std::int64_t(cp[r]) * D + j * 8);
                    a.store(key + p * D + j * 8);
                }
            }
            // Rotate-half RoPE at the token's position: rope holds cos then sin of each pair.
            const float* cs = rope + (t0 + t) * hd;
            for (int i = 0; i < half; i += 8) {
                const V8 x0 = V8::load(key + i), x1 = V8::load(key + half + i);
                const V8 co = V8::load(cs + i), si = V8::load(cs + half + i);
                (x0 * co - x1 * si).store(rot + i);
                V8::fma(x0, si, x1 * co).store(rot + half + i);
            }
            float* st = s + std::size_t(t) * Gp;
            for (int g = 0; g < G; ++g) {
                V8 a = V8::zero();
                for (int i = 0; i < hd; i += 8)
                    a = V8::fma(V8::load(rot + i), V8::load(q + std::size_t(g) * hd + i), a);
                st[g] = a.sum();
            }
            for (int g = G; g < Gp; ++g)
                st[g] = 0.f;
        }
        CodeView vb = vc;
        vb.data = vc.data + t0 * vc.tokenStride;
        binBlock<Gp>(d, s, bt, vb, m, l, W);
    }
}

void paper(const HeadDims& d, const float* q, const std::uint16_t* books, const float* rope, CodeView kc, CodeView vc,
           std::int64_t n, float* m, float* l, float* W)
{
    dispatchGroup(d.G, [&](auto g) {
        constexpr int G = decltype(g)::value;
        if constexpr (G <= 4)
            paperGroup<G, 4>(d, q, books, rope, kc, vc, n, m, l, W);
        else
            paperGroup<G, 8>(d, q, books, rope, kc, vc, n, m, l, W);
    });
}

// ---- values: one product of the bins with the value codebooks ----

// One pass over a tile of codewords (L1 resident) for CH chunks of V::N features, the accumulators
// loaded from and stored back to out.
template <typename V, int G, int CH>
void valuesPass(const HeadDims& d, const float* w, const std::uint16_t* cw, int rows, int c0, float* out)
{
    constexpr int N = V::N;
    const int D = d.D;
    V a[G][CH];
    GSRQ_UNROLL
    for (int g = 0; g < G; ++g) {
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            a[g][j] = V::load(out + std::size_t(g) * d.hd + (c0 + j) * N);
    }
    for (int i = 0; i < rows; ++i) {
        V x[CH];
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            x[j] = V::loadHalf(cw + std::size_t(i) * D + (c0 + j) * N);
        const float* wi = w + std::size_t(i) * d.Gp;
        GSRQ_UNROLL
        for (int g = 0; g < G; ++g) {
            const V wg = V::set1(wi[g]);
            GSRQ_UNROLL
            for (int j = 0; j < CH; ++j)
                a[g][j] = V::fma(x[j], wg, a[g][j]);
        }
    }
    GSRQ_UNROLL
    for (int g = 0; g < G; ++g) {
        GSRQ_UNROLL
        for (int j = 0; j < CH; ++j)
            a[g][j].store(out + std::size_t(g) * d.hd + (c0 + j) * N);
    }
}

// The bins' product with the value codewords over vectors V (CH chunks of V::N features a pass):
// VW, the build's widest, where D is a multiple of its width and a pass still has its CH chunks
// (AVX-512: half the instructions of 8-wide chunks per codeword), else V8 (where a 16-wide pass
// would hold fewer independent chains than an 8-wide one).
template <typename V, int G, int CH>
void valuesOver(const HeadDims& d, const float* W, const std::uint16_t* books, float* out)
{
    constexpr int kTile = 16; // codewords per tile: 16 × D halves stay in L1 across the passes
    const int C = d.D / V::N;
    const std::int64_t rows = std::int64_t(d.R) * d.K;
    for (int g = 0; g < G; ++g)
        std::fill(out + std::size_t(g) * d.hd, out + std::size_t(g + 1) * d.hd, 0.f);
    for (int p = 0; p < d.P; ++p) {
        const float* Wp = W + std::size_t(p) * rows * d.Gp;
        const std::uint16_t* bp = books + std::size_t(p) * rows * d.D;
        float* op = out + std::size_t(p) * d.D;
        for (std::int64_t i0 = 0; i0 < rows; i0 += kTile) {
            const int n = int(std::min<std::int64_t>(kTile, rows - i0));
            const float* w = Wp + i0 * d.Gp;
            const std::uint16_t* cw = bp + i0 * d.D;
            if (i0 + 2 * kTile <= rows) // the next tile, a line at a time
                for (int off = 0; off < kTile * d.D; off += 32)
                    __builtin_prefetch(cw + std::size_t(kTile) * d.D + off, 0, 3);
            int c = 0;
            for (; c + CH <= C; c += CH)
                valuesPass<V, G, CH>(d, w, cw, n, c, op);
            for (; c < C; ++c)
                valuesPass<V, G, 1>(d, w, cw, n, c, op);
        }
    }
}

template <int G> void valuesGroup(const HeadDims& d, const float* W, const std::uint16_t* books, float* out)
{
    if (VW::N != V8::N && d.D % VW::N == 0 && d.D / VW::N >= fp16ChunksPerPass<G>())
        valuesOver<VW, G, fp16ChunksPerPass<G>()>(d, W, books, out);
    else
        valuesOver<V8, G, chunksPerPass<G>()>(d, W, books, out);
}

void values(const HeadDims& d, const float* W, const std::uint16_t* books, float* out)
{
    dispatchGroup(d.G, [&](auto g) { valuesGroup<decltype(g)::value>(d, W, books, out); });
}

float fmaLoop(std::int64_t iterations)
{
    constexpr int kChains = 12;
    VW a[kChains];
    for (int i = 0; i < kChains; ++i)
        a[i] = VW::set1(float(i) * 1e-3f);
    const VW x = VW::set1(0.999999f), y = VW::set1(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < kChains; ++i)
            a[i] = VW::fma(a[i], x, y);
    VW s = VW::zero();
    for (int i = 0; i < kChains; ++i)
        s = s + a[i];
    return s.fold().sum();
}

const Kernels kKernels{kIsa, VW::N, &fp16, &tables, &lookup, &paper, &values, &fmaLoop};

} // namespace

#if GSRQ_DECODE_ISA == 0

const Kernels& portableKernels()
{
    return kKernels;
}

const Kernels* avx2Kernels()
{
#if GSRQ_DECODE_X86
    static const bool ok = gsrq::cpuFeatures().avx2;
    if (ok)
        return &detail::avx2Build();
#endif
    return nullptr;
}

const Kernels* avx512Kernels()
{
#if GSRQ_DECODE_X86
    static const bool ok = gsrq::cpuFeatures().avx512;
    if (ok)
        return &detail::avx512Build();
#endif
    return nullptr;
}

const Kernels& bestKernels()
{
    if (const Kernels* k = avx512Kernels())
        return *k;
    if (const Kernels* k = avx2Kernels())
        return *k;
    return portableKernels();
}

std::vector<const Kernels*> availableKernels()
{
    std::vector<const Kernels*> all{&portableKernels()};
    for (const Kernels* k : {avx2Kernels(), avx512Kernels()})
        if (k)
            all.push_back(k);
    return all;
}

const Kernels* kernelsNamed(std::string_view isa)
{
    if (isa.empty() || isa == "best")
        return &bestKernels();
    for (const Kernels* k : availableKernels())
        if (isa == k->isa || (isa == "avx2" && std::string_view(k->isa) == "avx2+fma+f16c"))
            return k;
    return nullptr;
}

#elif GSRQ_DECODE_X86

#if GSRQ_DECODE_ISA == 2
const Kernels& detail::avx512Build()
#else
const Kernels& detail::avx2Build()
#endif
{
    return kKernels;
}

#endif

} // namespace gsrq::cpudecode

#ifdef GSRQ_DECODE_CLANG_TARGET
#pragma clang attribute pop
#endif
