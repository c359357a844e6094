// Block weights times 8-bit activations for many tokens (a prefill chunk, a perplexity window) on
// AVX-512 VNNI: the layout of an integer GEMM rather than of many dot products.
//
// 32 rows of W are unpacked (quant_gemm.cpp's rows) and interleaved so that each 64-byte vector
// holds 4 consecutive values of 16 rows; one vpdpbusd with a token's 4 activations broadcast adds
// 16 rows' partial sums at once, with no sum across lanes. A tile of 32 rows × 6 tokens keeps 12
// integer and 12 float accumulators in registers. Every 16 or 32 values (where a block type's scales
// change: Q6_K's sub-blocks of 16, the others' 32) the integers are converted and scaled by the row's
// scale times the token's; the integer offsets (Q4_0's −8, Q8_0's shift by 128, Q6_K's −32: a
// multiple of the row's scale) start the integer sums at offset · Σq, and the float offsets of
// Q4_1's and Q4_K's minimums add one product a sub-block. Per 32 values that is 8 vpdpbusd (64
// multiply-adds each) against 3 or 4 float operations, where the dot-product layout spends 4 float
// operations on every 64 values and token.

#include "core/lm/quant_gemm_tiled.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GSRQ_QT_X86 1
#else
#define GSRQ_QT_X86 0
#endif

namespace gsrq::detail {

namespace {

#if GSRQ_QT_X86
constexpr int kPanelRows = 32; // two vectors of 16 rows
constexpr int kTileTokens = 6;

// How a block type's scales and offsets fall (quant_gemm.cpp's unpacked rows): the values sharing
// one scale, the integer offset that is a multiple of that scale, and whether a float offset (a
// minimum) comes on top, one per 32 values.
struct Plan {
    int span = 0;      // 16 or 32; 0: a type the kernels do not read
    int intOffset = 0; // −8, −128, −32 or 0
    bool minimum = false;
};

Plan planOf(GgmlType type)
{
    switch (type) {
    case GgmlType::Q4_0:
        return {32, -8, false};
    case GgmlType::Q4_1:
        return {32, 0, true};
    case GgmlType::Q8_0:
        return {32, -128, false}; // shifted into unsigned bytes
    case GgmlType::Q4_K:
        return {32, 0, true};
    case GgmlType::Q6_K:
        return {16, -32, false};
    default:
        return {};
    }
}

// 32 rows packed: q [cols/4][32][4] bytes; scale [cols/span][32]; minimum [cols/32][32] (where the
// type has one). Rows past the matrix's end are zeros.
struct Panel {
    std::vector<std::uint8_t> q;
    std::vector<float> scale, minimum;
    UnpackedRow row;
};

void pack(const QuantMatrix& w, std::int64_t r0, const Plan& plan, Panel& p)
{
    const std::int64_t cols = w.cols, steps = cols / 4, spans = cols / plan.span;
    p.q.assign(std::size_t(cols * kPanelRows), 0);
    p.scale.assign(std::size_t(spans * kPanelRows), 0.0f);
    if (plan.minimum)
        p.minimum.assign(std::size_t(cols / 32 * kPanelRows), 0.0f);
    p.row.size(cols);
    const bool ordered = !w.rowOrder.empty();
    for (int i = 0; i < kPanelRows && r0 + i < w.rows; ++i) {
        const std::int64_t r = r0 + i, stored = ordered ? w.rowOrder[std::size_t(r)] : r;
        unpackGemmRow(w.type, w.data + stored * w.rowBytes, cols, true, p.row);
        for (std::int64_t k = 0; k < steps; ++k)
            std::memcpy(p.q.data() + 4 * (k * kPanelRows + i), p.row.w.data() + 4 * k, 4);
        for (std::int64_t s = 0; s < spans; ++s)
            p.scale[std::size_t(s * kPanelRows + i)] = p.row.ls[std::size_t(s * plan.span / 4)];
        if (plan.minimum)
            for (std::int64_t s = 0; s < cols / 32; ++s)
                p.minimum[std::size_t(s * kPanelRows + i)] = p.row.oc[std::size_t(2 * s)];
    }
}

#define GSRQ_QT_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

// Rows r0 … r0 + 31 (those below `rows`) of tokens t0 … t0 + N − 1 into y.
template <int Span, int IntOffset, bool Minimum, int N>
GSRQ_QT_VNNI void tile(const Panel& p, const Q8Activations& x, std::int64_t t0, std::int64_t r0, std::int64_t rows,
                       float* y, std::int64_t ldy)
{
    const std::int64_t cols = x.cols;
    const std::int8_t* xq[N];
    const float* xs[N];
    const std::int32_t* qs[N];
    const float* s16[N];
    for (int j = 0; j < N; ++j) {
        xq[j] = x.q.data() + (t0 + j) * cols;
        xs[j] = x.laneScale.data() + (t0 + j) * (cols / 4);
        qs[j] = x.qsum16.data() + (t0 + j) * (cols / 16);
        s16[j] = x.sum16.data() + (t0 + j) * (cols / 16);
    }
    __m512 f0[N], f1[N];
    for (int j = 0; j < N; ++j)
        f0[j] = f1[j] = _mm512_setzero_ps();
    const std::uint8_t* wq = p.q.data();
    const std::int64_t spans = cols / Span;
    for (std::int64_t s = 0; s < spans; ++s) {
        __m512i i0[N], i1[N];
        for (int j = 0; j < N; ++j) {
            if constexpr (IntOffset != 0) {
                const std::int32_t sum = Span == 16 ? qs[j][s] : qs[j][2 * s] + qs[j][2 * s + 1];
                i0[j] = i1[j] = _mm512_set1_epi32(IntOffset * sum);
            } else {
                i0[j] = i1[j] = _mm512_setzero_si512();
            }
        }
        for (int k = 0; k < Span / 4; ++k, wq += 4 * kPanelRows) {
            const __m512i w0 = _mm512_loadu_si512(wq), w1 = _mm512_loadu_si512(wq + 64);
            const std::int64_t c = s * Span + 4 * k;
            for (int j = 0; j < N; ++j) {
                std::int32_t four;
                std::memcpy(&four, xq[j] + c, 4);
                const __m512i xb = _mm512_set1_epi32(four);
                i0[j] = _mm512_dpbusd_epi32(i0[j], w0, xb);
                i1[j] = _mm512_dpbusd_epi32(i1[j], w1, xb);
            }
        }
        const __m512 sc0 = _mm512_loadu_ps(p.scale.data() + s * kPanelRows);
        const __m512 sc1 = _mm512_loadu_ps(p.scale.data() + s * kPanelRows + 16);
        for (int j = 0; j < N; ++j) {
            const __m512 a = _mm512_set1_ps(xs[j][s * Span / 4]);
            f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[j]), _mm512_mul_ps(sc0, a), f0[j]);
            f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[j]), _mm512_mul_ps(sc1, a), f1[j]);
        }
        if constexpr (Minimum) { // Span is 32: one minimum a span
            const __m512 m0 = _mm512_loadu_ps(p.minimum.data() + s * kPanelRows);
            const __m512 m1 = _mm512_loadu_ps(p.minimum.data() + s * kPanelRows + 16);
            for (int j = 0; j < N; ++j) {
                const __m512 sum = _mm512_set1_ps(s16[j][2 * s] + s16[j][2 * s + 1]);
                f0[j] = _mm512_fmadd_ps(m0, sum, f0[j]);
                f1[j] = _mm512_fmadd_ps(m1, sum, f1[j]);
            }
        }
    }
    const std::int64_t valid = std::min<std::int64_t>(kPanelRows, rows - r0);
    const __mmask16 lo = valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
    const __mmask16 hi = valid >= 32   ? __mmask16(0xffff)
                         : valid <= 16 ? __mmask16(0)
                                       : __mmask16((1u << (valid - 16)) - 1);
    for (int j = 0; j < N; ++j) {
        float* out = y + (t0 + j) * ldy + r0;
        _mm512_mask_storeu_ps(out, lo, f0[j]);
        _mm512_mask_storeu_ps(out + 16, hi, f1[j]);
    }
}

// The last n < kTileTokens tokens: the tile of N = n tokens (a constant, so that its sums stay in registers).
template <int Span, int IntOffset, bool Minimum, int N = kTileTokens - 1>
GSRQ_QT_VNNI void rest(int n, const Panel& p, const Q8Activations& x, std::int64_t t0, std::int64_t r0,
                       std::int64_t rows, float* y, std::int64_t ldy)
{
    if constexpr (N >= 1) {
        if (n == N)
            tile<Span, IntOffset, Minimum, N>(p, x, t0, r0, rows, y, ldy);
        else
            rest<Span, IntOffset, Minimum, N - 1>(n, p, x, t0, r0, rows, y, ldy);
    }
}

// Every token of one panel: tiles of kTileTokens, then the rest.
template <int Span, int IntOffset, bool Minimum>
GSRQ_QT_VNNI void panelTokens(const Panel& p, const Q8Activations& x, std::int64_t r0, std::int64_t rows, float* y,
                              std::int64_t ldy)
{
    std::int64_t t0 = 0;
    for (; t0 + kTileTokens <= x.rows; t0 += kTileTokens)
        tile<Span, IntOffset, Minimum, kTileTokens>(p, x, t0, r0, rows, y, ldy);
    rest<Span, IntOffset, Minimum>(int(x.rows - t0), p, x, t0, r0, rows, y, ldy);
}

// The kernel for the plan's span, offset and minimum (every plan planOf gives).
void panelAllTokens(const Plan& plan, const Panel& p, const Q8Activations& x, std::int64_t r0, std::int64_t rows,
                    float* y, std::int64_t ldy)
{
    if (plan.span == 16)
        panelTokens<16, -32, false>(p, x, r0, rows, y, ldy);
    else if (plan.minimum)
        panelTokens<32, 0, true>(p, x, r0, rows, y, ldy);
    else if (plan.intOffset == -8)
        panelTokens<32, -8, false>(p, x, r0, rows, y, ldy);
    else
        panelTokens<32, -128, false>(p, x, r0, rows, y, ldy);
}
#endif

} // namespace

bool tiledGemmVnni(const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy)
{
#if GSRQ_QT_X86
    const Plan plan = planOf(w.type);
    const QuantBlockLayout lay = quantBlockLayout(w.type);
    if (!cpuFeatures().avx512vnni || plan.span == 0 || !w || w.cols != x.cols || w.cols % lay.elements != 0 ||
        x.cols % 32 != 0) // the activations' sizes: checked by quantGemm's callers
        return false;
    const std::int64_t panels = (w.rows + kPanelRows - 1) / kPanelRows;
    const bool parallel = panels > 1 && double(w.rows) * double(w.rowBytes) * double(x.rows) >= double(1 << 20);
#pragma omp parallel if (parallel)
    {
        Panel p;
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t i = 0; i < panels; ++i) {
            pack(w, i * kPanelRows, plan, p);
            panelAllTokens(plan, p, x, i * kPanelRows, w.rows, y, ldy);
        }
    }
    return true;
#else
    (void)w;
    (void)x;
    (void)y;
    (void)ldy;
    return false;
#endif
}

} // namespace gsrq::detail
