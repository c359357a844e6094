// One row's nearest codeword through FP16 panels and an exact second look (nearest_screened.h).
#include "core/cluster/nearest_screened.h"

#include "core/base/cpu_features.h"
#include "core/base/error.h"
#include "core/cluster/update_rule.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GSRQ_SCREEN_X86 1
#define GSRQ_SCREEN_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define GSRQ_SCREEN_X86 0
#endif

namespace gsrq::nearest {

namespace {

constexpr int kLanes = 16;
constexpr float kHalfMost = 60000.0f; // below FP16's largest finite value (65504) with room for rounding

std::uint16_t halfBits(float v)
{
    return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(v));
}

#if GSRQ_SCREEN_X86
// The bound on each codeword's |FP16 score − FP32 score| is a·‖c‖₂ + b·‖c‖² + e (nearestScreened).
struct Bound {
    float a, b, e;
};

// Scores of G groups of 16 codewords at once against x: G independent chains of fused multiply-adds
// (enough to keep both FMA units busy for one row), each codeword's FP16 values widened exactly. Writes
// each score and its bound; returns the largest score less its bound over the groups.
template <int G>
GSRQ_SCREEN_AVX512 __m512 groupScores(const float* x, const ScreenedPanels& p, int g0, const Bound& k, float* s,
                                      float* err, __m512 floor)
{
    const int D = p.D;
    __m512 acc[G];
    for (int j = 0; j < G; ++j)
        acc[j] = _mm512_setzero_ps();
    const std::uint16_t* P = p.first() + std::size_t(g0) * std::size_t(D) * kLanes;
    // The next G groups (G·D·32 bytes), a few lines each feature, on their way in while these are
    // scored (the panels are out of the cache at a decode step's append).
    const std::size_t lines = g0 + 2 * G <= p.groups ? (std::size_t(G) * std::size_t(D) * kLanes * 2 + 63) / 64 : 0;
    const std::size_t perFeature = (lines + std::size_t(D) - 1) / std::size_t(D);
    const char* next = reinterpret_cast<const char*>(P + std::size_t(G) * std::size_t(D) * kLanes);
    for (int d = 0; d < D; ++d) {
        for (std::size_t l = std::size_t(d) * perFeature; l < std::min(lines, std::size_t(d + 1) * perFeature); ++l)
            __builtin_prefetch(next + l * 64, 0, 3);
        const __m512 xv = _mm512_set1_ps(x[d]);
#pragma GCC unroll 8
        for (int j = 0; j < G; ++j) {
            const __m256i h =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(P + (std::size_t(j) * D + std::size_t(d)) * kLanes));
            acc[j] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(h), acc[j]);
        }
    }
    const __m512 two = _mm512_set1_ps(2.0f), a = _mm512_set1_ps(k.a), b = _mm512_set1_ps(k.b), e = _mm512_set1_ps(k.e);
    for (int j = 0; j < G; ++j) {
        const std::size_t at = std::size_t(g0 + j) * kLanes;
        const __m512 bias = _mm512_loadu_ps(p.bias.data() + at);
        const __m512 sv = _mm512_fmadd_ps(two, acc[j], bias);
        // −bias is ‖c‖² (+∞ past K, where the score is −∞: never the floor, never a candidate).
        const __m512 ev = _mm512_fmadd_ps(a, _mm512_loadu_ps(p.norm.data() + at), _mm512_fnmadd_ps(b, bias, e));
        _mm512_storeu_ps(s + at, sv);
        _mm512_storeu_ps(err + at, ev);
        floor = _mm512_max_ps(floor, _mm512_sub_ps(sv, ev));
    }
    return floor;
}

GSRQ_SCREEN_AVX512 float screenScores(const float* x, const ScreenedPanels& p, const Bound& k, float* s, float* err)
{
    __m512 floor = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    int g = 0;
    for (; g + 8 <= p.groups; g += 8)
        floor = groupScores<8>(x, p, g, k, s, err, floor);
    for (; g < p.groups; ++g)
        floor = groupScores<1>(x, p, g, k, s, err, floor);
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, floor);
    return *std::max_element(lanes, lanes + kLanes);
}
#endif

} // namespace

const std::uint16_t* ScreenedPanels::first() const
{
    const auto at = reinterpret_cast<std::uintptr_t>(halves.data());
    return halves.data() + ((64 - at % 64) % 64) / sizeof(std::uint16_t);
}

ScreenedPanels packScreened(const MatrixRF& C)
{
    ScreenedPanels p;
    if (!GSRQ_SCREEN_X86 || !cpuFeatures().avx512 || C.rows() == 0 || C.cols() == 0 || !C.allFinite() ||
        C.cwiseAbs().maxCoeff() > kHalfMost)
        return p;
    p.K = int(C.rows());
    p.D = int(C.cols());
    p.groups = (p.K + kLanes - 1) / kLanes;
    p.halves.assign(std::size_t(p.groups) * std::size_t(p.D) * kLanes + 32, 0);
    auto* out = const_cast<std::uint16_t*>(p.first());
    for (int c = 0; c < p.K; ++c)
        for (int d = 0; d < p.D; ++d)
            out[(std::size_t(c / kLanes) * std::size_t(p.D) + std::size_t(d)) * kLanes + std::size_t(c % kLanes)] =
                halfBits(C(c, d));
    p.bias.assign(std::size_t(p.groups) * kLanes, -std::numeric_limits<float>::infinity());
    p.norm.assign(std::size_t(p.groups) * kLanes, 0.0f);
    for (int c = 0; c < p.K; ++c) {
        p.bias[std::size_t(c)] = -update::squaredNorm(C.row(c).data(), p.D); // as every backend rounds it
        p.norm[std::size_t(c)] = float(C.row(c).cast<double>().norm());
    }
    p.C = C;
    return p;
}

void nearestScreened(const float* x, const ScreenedPanels& p, std::int32_t* label, float* score,
                     std::vector<float>& scratch)
{
    if (!p)
        throwInvalid("nearestScreened: no panels (packScreened refused the codewords)");
    const int K = p.K, D = p.D;
    const std::size_t padded = std::size_t(p.groups) * kLanes;
    scratch.resize(2 * padded);
    float *s = scratch.data(), *err = scratch.data() + padded;
    // The bound on |FP16 score − FP32 score| of codeword c, from (u: FP32's unit roundoff 2⁻²⁴; h:
    // FP16's, 2⁻¹¹; γ = D·u/(1 − D·u), the error of a D-term sum of products):
    //   each c_d moves by at most h·|c_d| when rounded to FP16 (2⁻²⁵ absolutely where it is subnormal),
    //   so Σ x_d c_d moves by at most h·S + 2⁻²⁵·‖x‖₁, with S = Σ|x_d c_d| ≤ ‖x‖₂‖c‖₂;
    //   each of the two sums adds at most γ·(1 + h)·S; 2·sum + bias rounds once in each, at most
    //   u·(2·(1 + h)·S + ‖c‖²) each.
    // Doubled for the 2 in 2·sum, and again as a margin: it covers the bound's own FP32 arithmetic,
    // codewords FP16 holds only as subnormals (where |ĉ| ≤ (1 + h)|c| fails by at most 2⁻²⁵) and
    // products below FP32's normal range, which the γ model leaves out. A wider screen only costs a
    // few FP32 scores.
    const double u = std::ldexp(1.0, -24), h = std::ldexp(1.0, -11);
    const double gamma = D * u / (1 - D * u);
    double x2 = 0, x1 = 0;
    for (int d = 0; d < D; ++d) {
        x2 += double(x[d]) * double(x[d]);
        x1 += std::fabs(double(x[d]));
    }
    const double perS = 2.0 * (2.0 * (h + 2.0 * gamma * (1 + h)) + 4.0 * u * (1 + h));
    float floor = -std::numeric_limits<float>::infinity();
#if GSRQ_SCREEN_X86
    const Bound k{float(perS * std::sqrt(x2)), float(4.0 * u), float(4.0 * std::ldexp(1.0, -25) * x1)};
    floor = screenScores(x, p, k, s, err);
#endif
    // The winner's FP32 score is at least `floor` (every codeword's FP16 score less its bound), so
    // only a codeword whose FP16 score plus its bound reaches it can win: those are scored in FP32 as
    // the kernels score them, in index order. As in the kernels, a codeword wins only by a strictly
    // larger score (the lowest index keeps a tie; a NaN never wins; none at all leaves codeword 0 at
    // −∞). A row whose scores are not all numbers (a NaN or infinite row, or sums past FP32's range)
    // has no floor to trust: every codeword is scored in FP32 then.
    bool whole = !std::isfinite(floor);
    for (int c = 0; c < K && !whole; ++c)
        whole = std::isnan(s[c]) || std::isnan(err[c]);
    std::int32_t best = 0;
    float top = -std::numeric_limits<float>::infinity();
    std::int64_t rescored = 0;
    for (int c = 0; c < K; ++c) {
        if (!whole && !(s[c] + err[c] >= floor))
            continue;
        ++rescored;
        const float* row = p.C.row(c).data();
        float acc = 0;
        for (int d = 0; d < D; ++d)
            acc = std::fma(x[d], row[d], acc);
        const float v = std::fma(2.0f, acc, p.bias[std::size_t(c)]);
        if (v > top) {
            best = c;
            top = v;
        }
    }
    *label = best;
    *score = top;
    auto& n = screenedCounts();
    ++n.calls;
    n.rescored += rescored;
}

ScreenedCounts& screenedCounts()
{
    thread_local ScreenedCounts counts;
    return counts;
}

} // namespace gsrq::nearest
