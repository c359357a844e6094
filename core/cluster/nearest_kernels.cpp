// The assignment step's kernel (see nearest_kernels.h). One source, three builds, chosen by
// GSRQ_NEAREST_ISA: 0, plain C++ over Eigen's GEMM, and the dispatch; 1, AVX2 with FMA; 2, AVX-512.
// The vector builds turn their instruction sets on with a target pragma after every header, so nothing
// the library shares (the templates the headers define) is compiled for a CPU that may not run it;
// their kernels touch only raw pointers and intrinsics.

#include "core/cluster/nearest_kernels.h"

#include "core/base/cpu_features.h"
#include "core/cluster/update_rule.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#ifndef GSRQ_NEAREST_ISA
#define GSRQ_NEAREST_ISA 0
#endif
#if defined(__x86_64__) || defined(_M_X64)
#define GSRQ_NEAREST_X86 1
#else
#define GSRQ_NEAREST_X86 0
#endif

#if GSRQ_NEAREST_ISA > 0 && GSRQ_NEAREST_X86
#include <immintrin.h>
#if defined(__clang__)
#define GSRQ_NEAREST_CLANG_TARGET 1
#if GSRQ_NEAREST_ISA == 2
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq"))),                   \
                             apply_to = function)
#else
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
#elif GSRQ_NEAREST_ISA == 2
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")
#else
#pragma GCC target("avx2,fma")
#endif
#endif

namespace gsrq::nearest {

namespace {

#if GSRQ_NEAREST_ISA > 0 && GSRQ_NEAREST_X86

// A row's best over its lanes: the largest score, and of the lanes that hold it the lowest index.
template <int N, typename V, typename I>
void acrossLanes(const V& values, const I& indices, std::int32_t* label, float* score)
{
    alignas(64) float v[N];
    alignas(64) std::int32_t i[N];
    std::memcpy(v, &values, sizeof v);
    std::memcpy(i, &indices, sizeof i);
    float best = v[0];
    std::int32_t at = i[0];
    for (int j = 1; j < N; ++j)
        if (v[j] > best || (v[j] == best && i[j] < at)) {
            best = v[j];
            at = i[j];
        }
    *label = at;
    *score = best;
}

// A row's second-largest score: the lanes' seconds and every lane's best but the winner's (at).
template <int N, typename V, typename I> float secondAcrossLanes(const V& best, const I& index, const V& second, int at)
{
    alignas(64) float b[N], s[N];
    alignas(64) std::int32_t i[N];
    std::memcpy(b, &best, sizeof b);
    std::memcpy(s, &second, sizeof s);
    std::memcpy(i, &index, sizeof i);
    float out = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < N; ++j)
        out = std::max({out, s[j], i[j] == at ? -std::numeric_limits<float>::infinity() : b[j]});
    return out;
}

#endif

#if GSRQ_NEAREST_ISA == 2 && GSRQ_NEAREST_X86

// Largest and smallest over 16 lanes, by halving. GCC 12's headers write the unmasked shuffles as masked
// ones over an undefined vector and then warn of it where they inline (a false alarm: no lane of it is kept).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline float maxOverLanes(__m512 v)
{
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));
    return _mm512_cvtss_f32(v);
}

inline std::int32_t minOverLanes(__m512i v)
{
    v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, 0x4E));
    v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, 0xB1));
    v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
    v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    return _mm_cvtsi128_si32(_mm512_castsi512_si128(v));
}

constexpr int kWidth = 32; // codewords per panel: two registers of 16
constexpr int kRows = 12;  // rows per tile: 24 accumulators of the 32 registers

// Rows [0, R) of a tile: the product with each panel in registers, then the panel's scores folded into
// each row's per-lane best (strictly greater: the earlier index keeps a tie), then across lanes.
// With Second, each lane also keeps the largest score it did not keep as its best (a tie counts), and the
// row's second-largest over its lanes is the largest of those and of the other lanes' bests.
template <int R, bool Second>
void tile(const float* x, std::int64_t ldx, int D, const float* panels, const float* bias, int groups, int base,
          std::int32_t* label, float* score, float* second, float* panelMax)
{
    __m512 bestV[R], secondV[R];
    __m512i bestI[R];
    for (int r = 0; r < R; ++r) {
        bestV[r] = secondV[r] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        bestI[r] = _mm512_setzero_si512();
    }
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 two = _mm512_set1_ps(2.0f);
    for (int g = 0; g < groups; ++g) {
        const float* P = panels + std::int64_t(g) * D * kWidth;
        __m512 a0[R], a1[R];
        for (int r = 0; r < R; ++r)
            a0[r] = a1[r] = _mm512_setzero_ps();
        for (int k = 0; k < D; ++k) {
            const __m512 b0 = _mm512_load_ps(P + k * kWidth), b1 = _mm512_load_ps(P + k * kWidth + 16);
#pragma GCC unroll 12
            for (int r = 0; r < R; ++r) {
                const __m512 xv = _mm512_set1_ps(x[r * ldx + k]);
                a0[r] = _mm512_fmadd_ps(xv, b0, a0[r]);
                a1[r] = _mm512_fmadd_ps(xv, b1, a1[r]);
            }
        }
        const __m512 c0 = _mm512_loadu_ps(bias + g * kWidth), c1 = _mm512_loadu_ps(bias + g * kWidth + 16);
        const __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(base + g * kWidth), lane);
        const __m512i i1 = _mm512_add_epi32(_mm512_set1_epi32(base + g * kWidth + 16), lane);
        for (int r = 0; r < R; ++r) {
            // 2·(x·c) is exact, so one rounding of its sum with −‖c‖², as the GEMM path's 2s − ‖c‖².
            const __m512 s0 = _mm512_fmadd_ps(two, a0[r], c0), s1 = _mm512_fmadd_ps(two, a1[r], c1);
            if constexpr (Second)
                secondV[r] = _mm512_max_ps(secondV[r], _mm512_min_ps(s0, bestV[r]));
            const __mmask16 m0 = _mm512_cmp_ps_mask(s0, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm512_mask_blend_ps(m0, bestV[r], s0);
            bestI[r] = _mm512_mask_blend_epi32(m0, bestI[r], i0);
            if constexpr (Second)
                secondV[r] = _mm512_max_ps(secondV[r], _mm512_min_ps(s1, bestV[r]));
            const __mmask16 m1 = _mm512_cmp_ps_mask(s1, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm512_mask_blend_ps(m1, bestV[r], s1);
            bestI[r] = _mm512_mask_blend_epi32(m1, bestI[r], i1);
            if constexpr (Second)
                if (panelMax)
                    panelMax[r * groups + g] = maxOverLanes(_mm512_max_ps(s0, s1));
        }
    }
    for (int r = 0; r < R; ++r) {
        if constexpr (!Second) {
            acrossLanes<16>(bestV[r], bestI[r], label + r, score + r);
        } else {
            // The largest score, the lowest index among the lanes holding it, and the largest of
            // everything else: the lanes' seconds and every other lane's best.
            const __m512 none = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
            const float top = maxOverLanes(bestV[r]);
            const __mmask16 atTop = _mm512_cmp_ps_mask(bestV[r], _mm512_set1_ps(top), _CMP_EQ_OQ);
            const std::int32_t at = minOverLanes(
                _mm512_mask_blend_epi32(atTop, _mm512_set1_epi32(std::numeric_limits<std::int32_t>::max()), bestI[r]));
            const __mmask16 winner = _mm512_mask_cmpeq_epi32_mask(atTop, bestI[r], _mm512_set1_epi32(at));
            const __m512 rest = _mm512_max_ps(secondV[r], _mm512_mask_blend_ps(winner, bestV[r], none));
            label[r] = at;
            score[r] = top;
            second[r] = maxOverLanes(rest);
        }
    }
}

#elif GSRQ_NEAREST_ISA == 1 && GSRQ_NEAREST_X86

inline float maxOverLanes(__m256 v)
{
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0x4E));
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0xB1));
    return _mm256_cvtss_f32(v);
}

constexpr int kWidth = 16; // two registers of 8
constexpr int kRows = 6;   // 12 accumulators of the 16 registers

template <int R, bool Second>
void tile(const float* x, std::int64_t ldx, int D, const float* panels, const float* bias, int groups, int base,
          std::int32_t* label, float* score, float* second, float* panelMax)
{
    __m256 bestV[R], secondV[R];
    __m256i bestI[R];
    for (int r = 0; r < R; ++r) {
        bestV[r] = secondV[r] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
        bestI[r] = _mm256_setzero_si256();
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 two = _mm256_set1_ps(2.0f);
    for (int g = 0; g < groups; ++g) {
        const float* P = panels + std::int64_t(g) * D * kWidth;
        __m256 a0[R], a1[R];
        for (int r = 0; r < R; ++r)
            a0[r] = a1[r] = _mm256_setzero_ps();
        for (int k = 0; k < D; ++k) {
            const __m256 b0 = _mm256_load_ps(P + k * kWidth), b1 = _mm256_load_ps(P + k * kWidth + 8);
#pragma GCC unroll 6
            for (int r = 0; r < R; ++r) {
                const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
                a0[r] = _mm256_fmadd_ps(xv, b0, a0[r]);
                a1[r] = _mm256_fmadd_ps(xv, b1, a1[r]);
            }
        }
        const __m256 c0 = _mm256_loadu_ps(bias + g * kWidth), c1 = _mm256_loadu_ps(bias + g * kWidth + 8);
        const __m256i i0 = _mm256_add_epi32(_mm256_set1_epi32(base + g * kWidth), lane);
        const __m256i i1 = _mm256_add_epi32(_mm256_set1_epi32(base + g * kWidth + 8), lane);
        for (int r = 0; r < R; ++r) {
            const __m256 s0 = _mm256_fmadd_ps(two, a0[r], c0), s1 = _mm256_fmadd_ps(two, a1[r], c1);
            if constexpr (Second)
                secondV[r] = _mm256_max_ps(secondV[r], _mm256_min_ps(s0, bestV[r]));
            const __m256 m0 = _mm256_cmp_ps(s0, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm256_blendv_ps(bestV[r], s0, m0);
            bestI[r] =
                _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bestI[r]), _mm256_castsi256_ps(i0), m0));
            if constexpr (Second)
                secondV[r] = _mm256_max_ps(secondV[r], _mm256_min_ps(s1, bestV[r]));
            const __m256 m1 = _mm256_cmp_ps(s1, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm256_blendv_ps(bestV[r], s1, m1);
            bestI[r] =
                _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bestI[r]), _mm256_castsi256_ps(i1), m1));
            if constexpr (Second)
                if (panelMax)
                    panelMax[r * groups + g] = maxOverLanes(_mm256_max_ps(s0, s1));
        }
    }
    for (int r = 0; r < R; ++r) {
        acrossLanes<8>(bestV[r], bestI[r], label + r, score + r);
        if constexpr (Second)
            second[r] = secondAcrossLanes<8>(bestV[r], bestI[r], secondV[r], label[r]);
    }
}

#endif

#if GSRQ_NEAREST_ISA > 0 && GSRQ_NEAREST_X86

template <int R, bool Second>
void tail(const float* x, std::int64_t ldx, const NearestPanels& p, const float* panels, const float* bias, int groups,
          int base, std::int32_t* label, float* score, float* second, float* panelMax, int rows)
{
    if constexpr (R > 0) {
        if (rows == R)
            tile<R, Second>(x, ldx, p.D, panels, bias, groups, base, label, score, second, panelMax);
        else
            tail<R - 1, Second>(x, ldx, p, panels, bias, groups, base, label, score, second, panelMax, rows);
    }
}

template <bool Second>
void nearestPanels(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, int panel0, int groups,
                   std::int32_t* label, float* score, float* second, float* panelMax)
{
    const float* panels = p.panels() + std::int64_t(panel0) * p.D * kWidth;
    const float* bias = p.bias.data() + std::int64_t(panel0) * kWidth;
    const int base = panel0 * kWidth;
    const auto at = [&](float* out, std::int64_t i, std::int64_t per) { return out ? out + i * per : nullptr; };
    std::int64_t i = 0;
    for (; i + kRows <= n; i += kRows)
        tile<kRows, Second>(x + i * ldx, ldx, p.D, panels, bias, groups, base, label + i, score + i, at(second, i, 1),
                            at(panelMax, i, groups));
    if (i < n)
        tail<kRows - 1, Second>(x + i * ldx, ldx, p, panels, bias, groups, base, label + i, score + i, at(second, i, 1),
                                at(panelMax, i, groups), int(n - i));
}

void nearestSimd(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, std::int32_t* label,
                 float* score)
{
    nearestPanels<false>(x, n, ldx, p, 0, p.groups, label, score, nullptr, nullptr);
}

void nearestRangeSimd(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, int k0, int k1,
                      std::int32_t* label, float* score, float* second, float* panelMax)
{
    const int panel0 = k0 / kWidth;
    nearestPanels<true>(x, n, ldx, p, panel0, (k1 + kWidth - 1) / kWidth - panel0, label, score, second, panelMax);
}

#if GSRQ_NEAREST_ISA == 2
const NearestKernels kKernels{"avx512", kWidth, kWidth, &nearestSimd, &nearestRangeSimd};
#else
const NearestKernels kKernels{"avx2+fma", kWidth, kWidth, &nearestSimd, &nearestRangeSimd};
#endif

#else

// Eigen's GEMM of the rows against columns [k0, k1) of Cᵀ, then a scan of each row's scores in order.
// Fewer than kMinRows rows are copied into a block of that many, so that Eigen takes its GEMM kernel for
// every call (a single row would go to its matrix-vector product, a tiny product to a coefficient loop,
// both of which sum in another order).
constexpr std::int64_t kMinRows = 24;
constexpr int kPanel = 32; // codewords per panel of panelMax

template <bool Second>
void nearestColumns(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, int k0, int k1,
                    std::int32_t* label, float* score, float* second, float* panelMax)
{
    using Rows = Eigen::Map<const MatrixRF, 0, Eigen::OuterStride<>>;
    thread_local MatrixRF padded;
    thread_local MatrixRF S; // reused from chunk to chunk
    const std::int64_t rows = std::max(n, kMinRows);
    const int width = k1 - k0;
    S.resize(rows, std::max(width, 2)); // two columns at least: one would be a matrix-vector product
    const auto Ct = p.Ct.middleCols(k0, width);
    const auto product = [&](const auto& X) {
        if (width >= 2)
            S.noalias() = X * Ct;
        else // one codeword: the product with it beside a zero column
            S.noalias() = X * (Eigen::MatrixXf(p.D, 2) << Ct, Eigen::VectorXf::Zero(p.D)).finished();
    };
    if (n < kMinRows) {
        padded.setZero(kMinRows, p.D);
        for (std::int64_t i = 0; i < n; ++i)
            padded.row(i) = Rows(x + i * ldx, 1, p.D, Eigen::OuterStride<>(ldx));
        product(padded);
    } else {
        product(Rows(x, n, p.D, Eigen::OuterStride<>(ldx)));
    }
    const Eigen::Map<const Eigen::RowVectorXf> bias(p.bias.data() + k0, width);
    for (std::int64_t i = 0; i < n; ++i) {
        auto s = S.row(i).head(width);
        s = 2.0f * s + bias;
        float best = s[0], next = -std::numeric_limits<float>::infinity();
        int at = 0;
        for (int c = 1; c < width; ++c) {
            if (s[c] > best) {
                next = best;
                best = s[c];
                at = c;
            } else if (s[c] > next) {
                next = s[c];
            }
        }
        label[i] = k0 + at;
        score[i] = best;
        if constexpr (Second) {
            second[i] = next;
            if (panelMax) {
                const int panels = (width + kPanel - 1) / kPanel;
                for (int g = 0; g < panels; ++g)
                    panelMax[i * panels + g] = s.segment(g * kPanel, std::min(kPanel, width - g * kPanel)).maxCoeff();
            }
        }
    }
}

void nearestGemm(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, std::int32_t* label,
                 float* score)
{
    nearestColumns<false>(x, n, ldx, p, 0, p.K, label, score, nullptr, nullptr);
}

void nearestRangeGemm(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, int k0, int k1,
                      std::int32_t* label, float* score, float* second, float* panelMax)
{
    nearestColumns<true>(x, n, ldx, p, k0, k1, label, score, second, panelMax);
}

const NearestKernels kKernels{"portable", 0, 32, &nearestGemm, &nearestRangeGemm};

#endif

} // namespace

#if GSRQ_NEAREST_ISA == 0

const float* NearestPanels::panels() const
{
    const auto at = reinterpret_cast<std::uintptr_t>(storage.data());
    return reinterpret_cast<const float*>((at + 63) & ~std::uintptr_t(63));
}

NearestPanels packCodewords(const MatrixRF& C, const NearestKernels& k)
{
    NearestPanels p;
    p.K = int(C.rows());
    p.D = int(C.cols());
    p.width = k.width;
    if (k.width == 0) { // the GEMM's operand
        p.Ct = C.transpose();
        p.bias.resize(std::size_t(p.K));
        for (int c = 0; c < p.K; ++c)
            p.bias[std::size_t(c)] = -update::squaredNorm(C.row(c).data(), p.D); // as every backend rounds it
        return p;
    }
    p.groups = (p.K + k.width - 1) / k.width;
    const std::size_t floats = std::size_t(p.groups) * std::size_t(p.D) * std::size_t(k.width);
    p.storage.assign(floats + 16, 0.0f);
    float* out = const_cast<float*>(p.panels());
    for (int c = 0; c < p.K; ++c) {
        const int g = c / k.width, w = c % k.width;
        for (int d = 0; d < p.D; ++d)
            out[(std::size_t(g) * p.D + d) * k.width + w] = C(c, d);
    }
    p.bias.assign(std::size_t(p.groups) * k.width, -std::numeric_limits<float>::infinity());
    for (int c = 0; c < p.K; ++c)
        p.bias[std::size_t(c)] = -update::squaredNorm(C.row(c).data(), p.D); // as every backend rounds it
    return p;
}

const NearestKernels& portableNearest()
{
    return kKernels;
}

const NearestKernels* avx2Nearest()
{
#if GSRQ_NEAREST_X86
    if (cpuFeatures().avx2)
        return &detail::avx2Build();
#endif
    return nullptr;
}

const NearestKernels* avx512Nearest()
{
#if GSRQ_NEAREST_X86
    if (cpuFeatures().avx512)
        return &detail::avx512Build();
#endif
    return nullptr;
}

const NearestKernels& bestNearest()
{
    if (const auto* k = avx512Nearest())
        return *k;
    if (const auto* k = avx2Nearest())
        return *k;
    return portableNearest();
}

std::vector<const NearestKernels*> availableNearest()
{
    std::vector<const NearestKernels*> all{&portableNearest()};
    for (const auto* k : {avx2Nearest(), avx512Nearest()})
        if (k)
            all.push_back(k);
    return all;
}

#elif GSRQ_NEAREST_X86

#if GSRQ_NEAREST_ISA == 2
const NearestKernels& detail::avx512Build()
#else
const NearestKernels& detail::avx2Build()
#endif
{
    return kKernels;
}

#endif

} // namespace gsrq::nearest

#ifdef GSRQ_NEAREST_CLANG_TARGET
#pragma clang attribute pop
#endif
