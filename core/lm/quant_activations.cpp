// Activations rounded to 8 bits per 32 values (quant_gemm.h's Q8Activations): each block's scale
// amax / 127, its values rounded to nearest (ties to even) in [−127, 127], and the sums the products'
// offsets need. An AVX-512 build where the CPU has it (a prefill rounds every token's activations
// before each product: on Qwen2.5-Coder-1.5B the scalar loop was about 7% of the prefill), the same
// integers and scales as the scalar loop.
#include "core/base/cpu_features.h"
#include "core/base/error.h"
#include "core/lm/quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GSRQ_QA_X86 1
#else
#define GSRQ_QA_X86 0
#endif

namespace gsrq {

namespace {

struct RowOut {
    std::int8_t* q;
    float* laneScale; // cols / 4
    float* sum16;     // cols / 16
    std::int32_t* qsum16;
    float* scale32; // cols / 32
    float* sum32;
    float* absMax;
};

// A block too small for 127/amax to be finite (below about 4e-37) rounds to zeros.
bool tinyBlock(float amax)
{
    return !(127.0f / amax < std::numeric_limits<float>::infinity());
}

void rowScalar(const float* xr, std::int64_t cols, const RowOut& o)
{
    for (std::int64_t b = 0; b < cols / 32; ++b) {
        const float* xb = xr + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; ++i)
            amax = std::max(amax, std::fabs(xb[i]));
        const bool tiny = tinyBlock(amax);
        const float d = tiny ? 0.0f : amax / 127.0f, inv = tiny ? 0.0f : 127.0f / amax;
        std::int8_t* q = o.q + 32 * b;
        int sums[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
            const int v = int(std::nearbyint(xb[i] * inv)); // |x·inv| ≤ 127: no clamp needed
            q[i] = std::int8_t(v);
            sums[i / 16] += v;
        }
        std::fill_n(o.laneScale + 8 * b, 8, d);
        for (int h = 0; h < 2; ++h) {
            o.qsum16[2 * b + h] = sums[h];
            o.sum16[2 * b + h] = d * float(sums[h]);
        }
        o.scale32[b] = d;
        o.sum32[b] = d * float(sums[0] + sums[1]);
        o.absMax[b] = amax;
    }
}

bool rowFinite(const float* xr, std::int64_t cols)
{
    float sum = 0;
    for (std::int64_t c = 0; c < cols; ++c)
        sum += xr[c] * 0.0f; // NaN where any value is NaN or infinite
    return sum == 0.0f;
}

#if GSRQ_QA_X86
#define GSRQ_QA_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

// The scalar loop's integers and scales: the same amax, the same 127/amax, the product rounded to
// nearest even by the current rounding mode (nearbyint's), the saturating narrowing never saturates.
GSRQ_QA_AVX512 void rowAvx512(const float* xr, std::int64_t cols, const RowOut& o)
{
    const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (std::int64_t b = 0; b < cols / 32; ++b) {
        const __m512 x0 = _mm512_loadu_ps(xr + 32 * b), x1 = _mm512_loadu_ps(xr + 32 * b + 16);
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, signless), _mm512_and_ps(x1, signless)));
        const bool tiny = tinyBlock(amax);
        const float d = tiny ? 0.0f : amax / 127.0f, inv = tiny ? 0.0f : 127.0f / amax;
        const __m512 s = _mm512_set1_ps(inv);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, s)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, s));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 32 * b), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
        _mm256_storeu_ps(o.laneScale + 8 * b, _mm256_set1_ps(d));
        const int s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
        o.qsum16[2 * b] = s0;
        o.qsum16[2 * b + 1] = s1;
        o.sum16[2 * b] = d * float(s0);
        o.sum16[2 * b + 1] = d * float(s1);
        o.scale32[b] = d;
        o.sum32[b] = d * float(s0 + s1);
        o.absMax[b] = amax;
    }
}

// NaN or ±Inf anywhere in the row (fpclass: quiet and signalling NaN, both infinities).
GSRQ_QA_AVX512 bool rowFiniteAvx512(const float* xr, std::int64_t cols)
{
    __mmask16 bad = 0;
    for (std::int64_t c = 0; c < cols; c += 16)
        bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps(xr + c), 0x99);
    return bad == 0;
}
#endif

void quantize(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Q8Activations& out, bool vector)
{
    if (cols % 32 != 0 || cols < 0 || rows < 0)
        throwInvalid("8-bit activations: ", cols, " values a row; blocks of 32 need a multiple of 32");
    // Non-finite values first (a NaN would round to anything), named by row and column.
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ld;
#if GSRQ_QA_X86
        const bool finite = vector ? rowFiniteAvx512(xr, cols) : rowFinite(xr, cols);
#else
        const bool finite = rowFinite(xr, cols);
#endif
        if (!finite)
            for (std::int64_t c = 0; c < cols; ++c)
                if (!std::isfinite(xr[c]))
                    throwInvalid("8-bit activations: value ", c, " of row ", r, " is not finite");
    }
    out.rows = rows;
    out.cols = cols;
    out.q.resize(std::size_t(rows * cols));
    out.laneScale.resize(std::size_t(rows * cols / 4));
    out.sum16.resize(std::size_t(rows * cols / 16));
    out.qsum16.resize(std::size_t(rows * cols / 16));
    out.scale32.resize(std::size_t(rows * cols / 32));
    out.sum32.resize(std::size_t(rows * cols / 32));
    out.absMax.resize(std::size_t(rows * cols / 32));
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
    for (std::int64_t r = 0; r < rows; ++r) {
        const RowOut o{out.q.data() + r * cols,
                       out.laneScale.data() + r * (cols / 4),
                       out.sum16.data() + r * (cols / 16),
                       out.qsum16.data() + r * (cols / 16),
                       out.scale32.data() + r * (cols / 32),
                       out.sum32.data() + r * (cols / 32),
                       out.absMax.data() + r * (cols / 32)};
#if GSRQ_QA_X86
        if (vector) {
            rowAvx512(x + r * ld, cols, o);
            continue;
        }
#endif
        rowScalar(x + r * ld, cols, o);
    }
}

} // namespace

void quantizeActivations(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Q8Activations& out)
{
#if GSRQ_QA_X86
    quantize(x, rows, cols, ld, out, cpuFeatures().avx512);
#else
    quantize(x, rows, cols, ld, out, false);
#endif
}

void quantizeActivationsPortable(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 Q8Activations& out)
{
    quantize(x, rows, cols, ld, out, false);
}

} // namespace gsrq
