// The assignment step's kernel (see nearest_kernels.h). One source, three builds, chosen by
// GSRQ_NEAREST_ISA: 0, plain C++ over Eigen's GEMM, and the dispatch; 1, AVX2 with FMA; 2, AVX-512.
// The vector builds turn their instruction sets on with a target pragma after every header, so nothing
// the library shares (the templates the headers define) is compiled for a CPU that may not run it;
// their kernels touch only raw pointers and intrinsics.

#include "core/cluster/nearest_kernels.h"

#include "core/base/cpu_features.h"

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

#endif

#if GSRQ_NEAREST_ISA == 2 && GSRQ_NEAREST_X86

constexpr int kWidth = 32; // codewords per panel: two registers of 16
constexpr int kRows = 12;  // rows per tile: 24 accumulators of the 32 registers

// Rows [0, R) of a tile: the product with each panel in registers, then the panel's scores folded into
// each row's per-lane best (strictly greater: the earlier index keeps a tie), then across lanes.
template <int R>
void tile(const float* x, std::int64_t ldx, int D, const float* panels, const float* bias, int groups,
          std::int32_t* label, float* score)
{
    __m512 bestV[R];
    __m512i bestI[R];
    for (int r = 0; r < R; ++r) {
        bestV[r] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
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
        const __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(g * kWidth), lane);
        const __m512i i1 = _mm512_add_epi32(_mm512_set1_epi32(g * kWidth + 16), lane);
        for (int r = 0; r < R; ++r) {
            // 2·(x·c) is exact, so one rounding of its sum with −‖c‖², as the GEMM path's 2s − ‖c‖².
            const __m512 s0 = _mm512_fmadd_ps(two, a0[r], c0), s1 = _mm512_fmadd_ps(two, a1[r], c1);
            const __mmask16 m0 = _mm512_cmp_ps_mask(s0, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm512_mask_blend_ps(m0, bestV[r], s0);
            bestI[r] = _mm512_mask_blend_epi32(m0, bestI[r], i0);
            const __mmask16 m1 = _mm512_cmp_ps_mask(s1, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm512_mask_blend_ps(m1, bestV[r], s1);
            bestI[r] = _mm512_mask_blend_epi32(m1, bestI[r], i1);
        }
    }
    for (int r = 0; r < R; ++r)
        acrossLanes<16>(bestV[r], bestI[r], label + r, score + r);
}

#elif GSRQ_NEAREST_ISA == 1 && GSRQ_NEAREST_X86

constexpr int kWidth = 16; // two registers of 8
constexpr int kRows = 6;   // 12 accumulators of the 16 registers

template <int R>
void tile(const float* x, std::int64_t ldx, int D, const float* panels, const float* bias, int groups,
          std::int32_t* label, float* score)
{
    __m256 bestV[R];
    __m256i bestI[R];
    for (int r = 0; r < R; ++r) {
        bestV[r] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
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
        const __m256i i0 = _mm256_add_epi32(_mm256_set1_epi32(g * kWidth), lane);
        const __m256i i1 = _mm256_add_epi32(_mm256_set1_epi32(g * kWidth + 8), lane);
        for (int r = 0; r < R; ++r) {
            const __m256 s0 = _mm256_fmadd_ps(two, a0[r], c0), s1 = _mm256_fmadd_ps(two, a1[r], c1);
            const __m256 m0 = _mm256_cmp_ps(s0, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm256_blendv_ps(bestV[r], s0, m0);
            bestI[r] =
                _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bestI[r]), _mm256_castsi256_ps(i0), m0));
            const __m256 m1 = _mm256_cmp_ps(s1, bestV[r], _CMP_GT_OQ);
            bestV[r] = _mm256_blendv_ps(bestV[r], s1, m1);
            bestI[r] =
                _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bestI[r]), _mm256_castsi256_ps(i1), m1));
        }
    }
    for (int r = 0; r < R; ++r)
        acrossLanes<8>(bestV[r], bestI[r], label + r, score + r);
}

#endif

#if GSRQ_NEAREST_ISA > 0 && GSRQ_NEAREST_X86

template <int R>
void tail(const float* x, std::int64_t ldx, const NearestPanels& p, const float* panels, std::int32_t* label,
          float* score, int rows)
{
    if constexpr (R > 0) {
        if (rows == R)
            tile<R>(x, ldx, p.D, panels, p.bias.data(), p.groups, label, score);
        else
            tail<R - 1>(x, ldx, p, panels, label, score, rows);
    }
}

void nearestSimd(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, std::int32_t* label,
                 float* score)
{
    const float* panels = p.panels();
    std::int64_t i = 0;
    for (; i + kRows <= n; i += kRows)
        tile<kRows>(x + i * ldx, ldx, p.D, panels, p.bias.data(), p.groups, label + i, score + i);
    if (i < n)
        tail<kRows - 1>(x + i * ldx, ldx, p, panels, label + i, score + i, int(n - i));
}

#if GSRQ_NEAREST_ISA == 2
const NearestKernels kKernels{"avx512", kWidth, &nearestSimd};
#else
const NearestKernels kKernels{"avx2+fma", kWidth, &nearestSimd};
#endif

#else

// Eigen's GEMM of the rows against Cᵀ, then a scan of each row's scores in order.
void nearestGemm(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, std::int32_t* label,
                 float* score)
{
    using Rows = Eigen::Map<const MatrixRF, 0, Eigen::OuterStride<>>;
    const Rows X(x, n, p.D, Eigen::OuterStride<>(ldx));
    const Eigen::Map<const Eigen::RowVectorXf> bias(p.bias.data(), p.K);
    thread_local MatrixRF S; // reused from chunk to chunk
    S.resize(n, p.K);
    S.noalias() = X * p.Ct;
    for (std::int64_t i = 0; i < n; ++i) {
        auto s = S.row(i);
        s = 2.0f * s + bias;
        const float best = s.maxCoeff();
        int at = 0;
        while (at + 1 < p.K && s[at] != best)
            ++at;
        label[i] = at;
        score[i] = best;
    }
}

const NearestKernels kKernels{"portable", 0, &nearestGemm};

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
            p.bias[std::size_t(c)] = -C.row(c).squaredNorm();
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
        p.bias[std::size_t(c)] = -C.row(c).squaredNorm();
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
