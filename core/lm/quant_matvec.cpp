// y = W·x from GGUF blocks (quant_matvec.h). Each block type in plain C++ and in AVX2 with FMA, and
// Q4_K, Q6_K and Q8_0 in AVX-512 too (the vector functions carry target attributes and run only
// where the CPU has them). Block layouts
// are gguf_dequant.cpp's; a block's scale multiplies the sum of its quants times x, and the offset
// terms (Q4_1's m, Q4_K's dmin·m, Q4_0's −8) multiply the sum of x over the block, computed once
// per product.
#include "core/lm/quant_matvec.h"

#include "core/base/cpu_features.h"
#include "core/base/error.h"

#include <cstring>
#include <omp.h>
#include <set>

#if defined(__x86_64__) || defined(_M_X64)
#define GSRQ_QMV_X86 1
#include <immintrin.h>
#else
#define GSRQ_QMV_X86 0
#endif

namespace gsrq {

namespace {

std::uint16_t u16(const std::uint8_t* p)
{
    return std::uint16_t(p[0] | (p[1] << 8));
}

float f16(const std::uint8_t* p)
{
    return halfToFloat(u16(p));
}

// ---- plain C++: one row --------------------------------------------------------------------------

float rowPortable(GgmlType type, const std::uint8_t* b, std::int64_t blocks, const float* x, const float* xs32)
{
    float total = 0;
    for (std::int64_t k = 0; k < blocks; ++k) {
        switch (type) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1: {
            const bool one = type == GgmlType::Q4_1;
            const float d = f16(b);
            const std::uint8_t* qs = b + (one ? 4 : 2);
            const float* xb = x + 32 * k;
            float s = 0;
            for (int j = 0; j < 16; ++j)
                s += float(qs[j] & 0x0f) * xb[j] + float(qs[j] >> 4) * xb[j + 16];
            total += one ? d * s + f16(b + 2) * xs32[k] : d * (s - 8.0f * xs32[k]);
            b += one ? 20 : 18;
            break;
        }
        case GgmlType::Q8_0: {
            const float d = f16(b);
            const float* xb = x + 32 * k;
            float s = 0;
            for (int j = 0; j < 32; ++j)
                s += float(std::int8_t(b[2 + j])) * xb[j];
            total += d * s;
            b += 34;
            break;
        }
        case GgmlType::Q4_K: {
            const float d = f16(b), dmin = f16(b + 2);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            const std::uint8_t* qs = b + 16;
            for (int i = 0; i < 8; ++i) {
                const std::uint8_t* q = qs + (i / 2) * 32;
                const int shift = (i % 2) * 4;
                const float* xb = x + 256 * k + 32 * i;
                float s = 0;
                for (int l = 0; l < 32; ++l)
                    s += float((q[l] >> shift) & 0x0f) * xb[l];
                total += (d * float(sc[i])) * s - (dmin * float(mn[i])) * xs32[8 * k + i];
            }
            b += 144;
            break;
        }
        case GgmlType::Q6_K: {
            const std::uint8_t* ql = b;
            const std::uint8_t* qh = b + 128;
            const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
            const float d = f16(b + 208);
            const float* xb = x + 256 * k;
            for (int g = 0; g < 16; ++g) {
                float s = 0;
                for (int e = 16 * g; e < 16 * g + 16; ++e) {
                    const int half = e / 128, r = e % 128;
                    const int low = (ql[half * 64 + r % 64] >> ((r / 64) * 4)) & 0x0f;
                    const int high = (qh[half * 32 + r % 32] >> ((r / 32) * 2)) & 0x03;
                    s += float((low | (high << 4)) - 32) * xb[e];
                }
                total += (d * float(scales[g])) * s;
            }
            b += 210;
            break;
        }
        default:
            return 0;
        }
    }
    return total;
}

// ---- AVX2 and FMA: one row -----------------------------------------------------------------------

#if GSRQ_QMV_X86
#define GSRQ_AVX2 __attribute__((target("avx2,fma,f16c")))

GSRQ_AVX2 float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

GSRQ_AVX2 float h16(const std::uint8_t* p)
{
    return _cvtsh_ss(u16(p));
}

// Eight bytes widened to eight 32-bit lanes.
GSRQ_AVX2 __m256i bytes8(const std::uint8_t* p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

GSRQ_AVX2 float rowAvx2(GgmlType type, const std::uint8_t* b, std::int64_t blocks, const float* x, const float* xs32)
{
    const __m256i m4 = _mm256_set1_epi32(0x0f), m2 = _mm256_set1_epi32(0x03), k32 = _mm256_set1_epi32(32);
    __m256 total = _mm256_setzero_ps();
    float offsets = 0; // the offset terms (scalar per block)
    for (std::int64_t k = 0; k < blocks; ++k) {
        switch (type) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1: {
            const bool one = type == GgmlType::Q4_1;
            const std::uint8_t* qs = b + (one ? 4 : 2);
            const float* xb = x + 32 * k;
            __m256 acc = _mm256_setzero_ps();
            for (int c = 0; c < 2; ++c) {
                const __m256i v = bytes8(qs + 8 * c);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, m4)), _mm256_loadu_ps(xb + 8 * c), acc);
                acc =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), _mm256_loadu_ps(xb + 16 + 8 * c), acc);
            }
            const float d = h16(b);
            total = _mm256_fmadd_ps(_mm256_set1_ps(d), acc, total);
            offsets += one ? h16(b + 2) * xs32[k] : -8.0f * d * xs32[k];
            b += one ? 20 : 18;
            break;
        }
        case GgmlType::Q8_0: {
            const float* xb = x + 32 * k;
            __m256 acc = _mm256_setzero_ps();
            for (int c = 0; c < 4; ++c) {
                const __m256i v =
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * c)));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(xb + 8 * c), acc);
            }
            total = _mm256_fmadd_ps(_mm256_set1_ps(h16(b)), acc, total);
            b += 34;
            break;
        }
        case GgmlType::Q4_K: {
            const float d = h16(b), dmin = h16(b + 2);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            const std::uint8_t* qs = b + 16;
            const float* xb = x + 256 * k;
            for (int p = 0; p < 4; ++p) { // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                for (int c = 0; c < 4; ++c) {
                    const __m256i v = bytes8(qs + 32 * p + 8 * c);
                    lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, m4)),
                                         _mm256_loadu_ps(xb + 64 * p + 8 * c), lo);
                    hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)),
                                         _mm256_loadu_ps(xb + 64 * p + 32 + 8 * c), hi);
                }
                total = _mm256_fmadd_ps(_mm256_set1_ps(d * float(sc[2 * p])), lo, total);
                total = _mm256_fmadd_ps(_mm256_set1_ps(d * float(sc[2 * p + 1])), hi, total);
                offsets -= (dmin * float(mn[2 * p])) * xs32[8 * k + 2 * p] +
                           (dmin * float(mn[2 * p + 1])) * xs32[8 * k + 2 * p + 1];
            }
            b += 144;
            break;
        }
        case GgmlType::Q6_K: {
            const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
            const float d = h16(b + 208);
            const float* xb = x + 256 * k;
            for (int half = 0; half < 2; ++half) {
                const std::uint8_t* ql = b + 64 * half;
                const std::uint8_t* qh = b + 128 + 32 * half;
                for (int g = 0; g < 8; ++g) { // 16 values of one scale: two runs of 8
                    __m256 acc = _mm256_setzero_ps();
                    for (int c = 0; c < 2; ++c) {
                        const int r = 16 * g + 8 * c;
                        const __m128i lowShift = _mm_cvtsi32_si128((r / 64) * 4),
                                      highShift = _mm_cvtsi32_si128((r / 32) * 2);
                        const __m256i low = _mm256_and_si256(_mm256_srl_epi32(bytes8(ql + r % 64), lowShift), m4);
                        const __m256i high = _mm256_and_si256(_mm256_srl_epi32(bytes8(qh + r % 32), highShift), m2);
                        const __m256i q = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), k32);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(xb + 128 * half + r), acc);
                    }
                    total = _mm256_fmadd_ps(_mm256_set1_ps(d * float(scales[8 * half + g])), acc, total);
                }
            }
            b += 210;
            break;
        }
        default:
            return 0;
        }
    }
    return hsum(total) + offsets;
}
// ---- AVX-512: Q4_K, Q6_K and Q8_0 (what the files people run are mostly made of) in 16 lanes --------

#define GSRQ_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

GSRQ_AVX512 __m512i bytes16(const std::uint8_t* p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

GSRQ_AVX512 float rowAvx512(GgmlType type, const std::uint8_t* b, std::int64_t blocks, const float* x,
                            const float* xs32)
{
    if (type != GgmlType::Q4_K && type != GgmlType::Q6_K && type != GgmlType::Q8_0)
        return rowAvx2(type, b, blocks, x, xs32);
    const __m512i m4 = _mm512_set1_epi32(0x0f), m2 = _mm512_set1_epi32(0x03), k32 = _mm512_set1_epi32(32);
    __m512 total = _mm512_setzero_ps();
    float offsets = 0;
    for (std::int64_t k = 0; k < blocks; ++k) {
        if (type == GgmlType::Q8_0) {
            const float* xb = x + 32 * k;
            __m512 acc = _mm512_setzero_ps();
            for (int c = 0; c < 2; ++c) {
                const __m512i v =
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * c)));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(xb + 16 * c), acc);
            }
            total = _mm512_fmadd_ps(_mm512_set1_ps(h16(b)), acc, total);
            b += 34;
        } else if (type == GgmlType::Q4_K) {
            const float d = h16(b), dmin = h16(b + 2);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            const std::uint8_t* qs = b + 16;
            const float* xb = x + 256 * k;
            for (int p = 0; p < 4; ++p) {
                __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
                for (int c = 0; c < 2; ++c) {
                    const __m512i v = bytes16(qs + 32 * p + 16 * c);
                    lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, m4)),
                                         _mm512_loadu_ps(xb + 64 * p + 16 * c), lo);
                    hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)),
                                         _mm512_loadu_ps(xb + 64 * p + 32 + 16 * c), hi);
                }
                total = _mm512_fmadd_ps(_mm512_set1_ps(d * float(sc[2 * p])), lo, total);
                total = _mm512_fmadd_ps(_mm512_set1_ps(d * float(sc[2 * p + 1])), hi, total);
                offsets -= (dmin * float(mn[2 * p])) * xs32[8 * k + 2 * p] +
                           (dmin * float(mn[2 * p + 1])) * xs32[8 * k + 2 * p + 1];
            }
            b += 144;
        } else { // Q6_K: each 16 values share a scale
            const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
            const float d = h16(b + 208);
            const float* xb = x + 256 * k;
            for (int half = 0; half < 2; ++half) {
                const std::uint8_t* ql = b + 64 * half;
                const std::uint8_t* qh = b + 128 + 32 * half;
                for (int g = 0; g < 8; ++g) {
                    const int r = 16 * g;
                    const __m128i lowShift = _mm_cvtsi32_si128((r / 64) * 4),
                                  highShift = _mm_cvtsi32_si128((r / 32) * 2);
                    const __m512i low = _mm512_and_si512(_mm512_srl_epi32(bytes16(ql + r % 64), lowShift), m4);
                    const __m512i high = _mm512_and_si512(_mm512_srl_epi32(bytes16(qh + r % 32), highShift), m2);
                    const __m512i q = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), k32);
                    total = _mm512_fmadd_ps(_mm512_set1_ps(d * float(scales[8 * half + g])),
                                            _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_loadu_ps(xb + 128 * half + r)),
                                            total);
                }
            }
            b += 210;
        }
    }
    return _mm512_reduce_add_ps(total) + offsets;
}
#endif

using RowFn = float (*)(GgmlType, const std::uint8_t*, std::int64_t, const float*, const float*);

void run(RowFn row, const QuantMatrix& w, const float* x, float* y)
{
    const QuantBlockLayout lay = quantBlockLayout(w.type);
    const std::int64_t blocks = w.cols / lay.elements;
    // Σx over each 32 values, for the offset terms.
    std::vector<float> xs32(std::size_t(w.cols / 32));
    for (std::size_t i = 0; i < xs32.size(); ++i) {
        float s = 0;
        for (int j = 0; j < 32; ++j)
            s += x[32 * i + std::size_t(j)];
        xs32[i] = s;
    }
    const bool ordered = !w.rowOrder.empty();
    const auto rows = w.rows;
    // One row is a few hundred bytes to a few kilobytes: threads pay from about a megabyte of weights.
    const bool parallel = double(w.rows) * double(w.rowBytes) >= double(1 << 20);
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t stored = ordered ? w.rowOrder[std::size_t(r)] : r;
        y[r] = row(w.type, w.data + stored * w.rowBytes, blocks, x, xs32.data());
    }
}

} // namespace

QuantBlockLayout quantBlockLayout(GgmlType type)
{
    switch (type) {
    case GgmlType::Q4_0:
        return {32, 18};
    case GgmlType::Q4_1:
        return {32, 20};
    case GgmlType::Q8_0:
        return {32, 34};
    case GgmlType::Q4_K:
        return {256, 144};
    case GgmlType::Q6_K:
        return {256, 210};
    default:
        return {};
    }
}

bool quantMatrixFinite(const QuantMatrix& w)
{
    const QuantBlockLayout lay = quantBlockLayout(w.type);
    if (!w || lay.elements == 0)
        return true;
    int at[2] = {0, -1}; // the FP16 scales' offsets in a block
    if (w.type == GgmlType::Q4_1 || w.type == GgmlType::Q4_K)
        at[1] = 2;
    else if (w.type == GgmlType::Q6_K)
        at[0] = 208;
    const std::int64_t blocks = w.rows * (w.cols / lay.elements);                 // the rows are contiguous blocks
    const auto bad = [](const std::uint8_t* p) { return (p[1] & 0x7c) == 0x7c; }; // exponent all ones
    bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (blocks >= (1 << 16))
    for (std::int64_t k = 0; k < blocks; ++k) {
        const std::uint8_t* b = w.data + k * lay.bytes;
        finite = finite && !bad(b + at[0]) && (at[1] < 0 || !bad(b + at[1]));
    }
    return finite;
}

void quantRows(const QuantMatrix& w, std::int64_t row0, std::int64_t count, float* out)
{
    if (!w || row0 < 0 || count < 0 || row0 + count > w.rows)
        throwInvalid("quantRows: rows ", row0, " to ", row0 + count, " of a ", w.rows, "-row matrix");
    for (std::int64_t r = row0; r < row0 + count; ++r) {
        const std::int64_t stored = w.rowOrder.empty() ? r : w.rowOrder[std::size_t(r)];
        dequantizeGgufBlocks(w.type, w.data + stored * w.rowBytes, w.cols, out + (r - row0) * w.cols);
    }
}

bool quantMatVecTakes(GgmlType type)
{
    return quantBlockLayout(type).elements > 0;
}

QuantMatrix quantMatrix(const GgufTensor& t)
{
    QuantMatrix m;
    const QuantBlockLayout lay = quantBlockLayout(t.type);
    if (!lay.elements || t.dims.size() != 2 || t.dims[0] % lay.elements)
        return m;
    m.type = t.type;
    m.data = reinterpret_cast<const std::uint8_t*>(t.data);
    m.cols = t.dims[0];
    m.rows = t.dims[1];
    m.rowBytes = m.cols / lay.elements * lay.bytes;
    return m;
}

bool quantMatVecBuild(const std::string& isa, const QuantMatrix& w, const float* x, float* y)
{
    if (!w || !quantMatVecTakes(w.type) || w.cols % quantBlockLayout(w.type).elements)
        return false;
    if (isa == "portable") {
        run(rowPortable, w, x, y);
        return true;
    }
#if GSRQ_QMV_X86
    if (isa == "avx2+fma" && cpuFeatures().avx2) {
        run(rowAvx2, w, x, y);
        return true;
    }
    if (isa == "avx512" && cpuFeatures().avx512) {
        run(rowAvx512, w, x, y);
        return true;
    }
#endif
    return false;
}

void quantMatVec(const QuantMatrix& w, const float* x, float* y)
{
    quantMatVecBuild(quantMatVecIsa(), w, x, y);
}

const char* quantMatVecIsa()
{
#if GSRQ_QMV_X86
    if (cpuFeatures().avx512)
        return "avx512";
    if (cpuFeatures().avx2)
        return "avx2+fma";
#endif
    return "portable";
}

int ModelWeightBlocks::matrices() const
{
    return int(wq.size() + wk.size() + wv.size() + wo.size() + w1.size() + w2.size() + w3.size()) + 1;
}

int ModelWeightBlocks::blockMatrices() const
{
    int n = classifier ? 1 : 0;
    for (const auto* v : {&wq, &wk, &wv, &wo, &w1, &w2, &w3})
        for (const auto& m : *v)
            n += m ? 1 : 0;
    return n;
}

std::string ModelWeightBlocks::types() const
{
    std::set<std::string> names;
    for (const QuantMatrix* m : {&classifier, &embed})
        if (*m)
            names.insert(ggmlTypeName(m->type));
    for (const auto* v : {&wq, &wk, &wv, &wo, &w1, &w2, &w3})
        for (const auto& m : *v)
            if (m)
                names.insert(ggmlTypeName(m.type));
    std::string out;
    for (const auto& n : names)
        out += (out.empty() ? "" : ", ") + n;
    return out;
}

} // namespace gsrq
