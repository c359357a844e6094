// Block weights times 8-bit activations (quant_gemm.h). A row of W is unpacked once into bytes,
// a scale per 4 values and an offset coefficient per 16; then every token's dot product with it
// runs in integers 4 values to a 32-bit lane (vpdpbusd, or vpmaddubsw + vpmaddwd), each lane's sum
// scaled by the weight's and the activation's scales, the offsets added as a dot product of the
// coefficients with the activations' 16-value sums. Block layouts are gguf_dequant.cpp's.
#include "core/lm/quant_gemm.h"
#include "core/lm/quant_gemm_tiled.h"

#include "core/base/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <omp.h>

#if defined(__x86_64__) || defined(_M_X64)
#define GSRQ_QG_X86 1
#include <immintrin.h>
#else
#define GSRQ_QG_X86 0
#endif

namespace gsrq {

namespace {

float f16(const std::uint8_t* p)
{
    return halfToFloat(std::uint16_t(p[0] | (p[1] << 8)));
}

using Unpacked = detail::UnpackedRow;

void fill(float* p, int n, float v)
{
    for (int i = 0; i < n; ++i)
        p[i] = v;
}

void unpackRow(GgmlType type, const std::uint8_t* b, std::int64_t cols, bool shiftQ8, Unpacked& u)
{
    std::uint8_t* w = u.w.data();
    float* ls = u.ls.data();
    float* oc = u.oc.data();
    const QuantBlockLayout lay = quantBlockLayout(type);
    const std::int64_t blocks = cols / lay.elements;
    for (std::int64_t k = 0; k < blocks;
         ++k, b += lay.bytes, w += lay.elements, ls += lay.elements / 4, oc += lay.elements / 16) {
        switch (type) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1: {
            const bool one = type == GgmlType::Q4_1;
            const float d = f16(b);
            const std::uint8_t* qs = b + (one ? 4 : 2);
            for (int j = 0; j < 16; ++j) {
                w[j] = qs[j] & 0x0f;
                w[j + 16] = qs[j] >> 4;
            }
            fill(ls, 8, d);
            fill(oc, 2, one ? f16(b + 2) : -8.0f * d);
            break;
        }
        case GgmlType::Q8_0: {
            const float d = f16(b);
            for (int j = 0; j < 32; ++j)
                w[j] = shiftQ8 ? std::uint8_t(b[2 + j] ^ 0x80) : b[2 + j];
            fill(ls, 8, d);
            fill(oc, 2, shiftQ8 ? -128.0f * d : 0.0f);
            break;
        }
        case GgmlType::Q4_K: {
            const float d = f16(b), dmin = f16(b + 2);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            const std::uint8_t* qs = b + 16;
            for (int p = 0; p < 4; ++p)
                for (int l = 0; l < 32; ++l) {
                    w[64 * p + l] = qs[32 * p + l] & 0x0f;
                    w[64 * p + 32 + l] = qs[32 * p + l] >> 4;
                }
            for (int i = 0; i < 8; ++i) {
                fill(ls + 8 * i, 8, d * float(sc[i]));
                fill(oc + 2 * i, 2, -dmin * float(mn[i]));
            }
            break;
        }
        case GgmlType::Q6_K: {
            const std::uint8_t* ql = b;
            const std::uint8_t* qh = b + 128;
            const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
            const float d = f16(b + 208);
            for (int half = 0; half < 2; ++half)
                for (int r = 0; r < 128; ++r) {
                    const int low = (ql[half * 64 + r % 64] >> ((r / 64) * 4)) & 0x0f;
                    const int high = (qh[half * 32 + r % 32] >> ((r / 32) * 2)) & 0x03;
                    w[128 * half + r] = std::uint8_t(low | (high << 4));
                }
            for (int g = 0; g < 16; ++g) {
                fill(ls + 4 * g, 4, d * float(scales[g]));
                oc[g] = -32.0f * d * float(scales[g]);
            }
            break;
        }
        default:
            break;
        }
    }
}

// Σ_g oc[g] · sum16[g]: the offset terms of one row and token.
float offsets(const float* oc, const float* s16, std::int64_t groups)
{
    float s = 0;
    for (std::int64_t g = 0; g < groups; ++g)
        s += oc[g] * s16[g];
    return s;
}

// ---- the dot products of one unpacked row with up to four tokens ----------------------------------

constexpr int kTile = 4;

struct TokenRefs {
    const std::int8_t* q[kTile];
    const float* ls[kTile];
    const float* s16[kTile]; // the activations' 16-value sums, for the offsets
};

void dotsPortable(const Unpacked& u, bool signedQuants, std::int64_t cols, const TokenRefs& t, int n, float* out)
{
    for (int j = 0; j < n; ++j) {
        float s = 0;
        for (std::int64_t lane = 0; lane < cols / 4; ++lane) {
            int acc = 0;
            for (int e = 0; e < 4; ++e) {
                const int wv = signedQuants ? int(std::int8_t(u.w[std::size_t(4 * lane + e)]))
                                            : int(u.w[std::size_t(4 * lane + e)]);
                acc += wv * int(t.q[j][4 * lane + e]);
            }
            s += float(acc) * (u.ls[std::size_t(lane)] * t.ls[j][lane]);
        }
        out[j] = s + offsets(u.oc.data(), t.s16[j], cols / 16);
    }
}

#if GSRQ_QG_X86
#define GSRQ_QG_AVX2 __attribute__((target("avx2,fma,f16c")))
#define GSRQ_QG_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

// FP16 to FP32 in one instruction (F16C), for the vector builds.
GSRQ_QG_AVX2 inline float h16(const std::uint8_t* p)
{
    return _cvtsh_ss(std::uint16_t(p[0] | (p[1] << 8)));
}

GSRQ_QG_AVX2 float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// unpackRow in AVX2: the same bytes, scales and offsets, 16 or 32 quants a step.
GSRQ_QG_AVX2 void unpackRowAvx2(GgmlType type, const std::uint8_t* b, std::int64_t cols, bool shiftQ8, Unpacked& u)
{
    std::uint8_t* w = u.w.data();
    float* ls = u.ls.data();
    float* oc = u.oc.data();
    const QuantBlockLayout lay = quantBlockLayout(type);
    const std::int64_t blocks = cols / lay.elements;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03), flip = _mm256_set1_epi8(char(0x80));
    const __m128i m4x = _mm_set1_epi8(0x0f);
    const auto store = [](std::uint8_t* at, __m256i v)
                           GSRQ_QG_AVX2 { _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), v); };
    const auto load = [](const std::uint8_t* at)
                          GSRQ_QG_AVX2 { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)); };
    for (std::int64_t k = 0; k < blocks;
         ++k, b += lay.bytes, w += lay.elements, ls += lay.elements / 4, oc += lay.elements / 16) {
        switch (type) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1: {
            const bool one = type == GgmlType::Q4_1;
            const float d = h16(b);
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (one ? 4 : 2)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(w), _mm_and_si128(q, m4x));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(w + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4x));
            _mm256_storeu_ps(ls, _mm256_set1_ps(d));
            oc[0] = oc[1] = one ? h16(b + 2) : -8.0f * d;
            break;
        }
        case GgmlType::Q8_0: {
            const float d = h16(b);
            const __m256i q = load(b + 2);
            store(w, shiftQ8 ? _mm256_xor_si256(q, flip) : q);
            _mm256_storeu_ps(ls, _mm256_set1_ps(d));
            oc[0] = oc[1] = shiftQ8 ? -128.0f * d : 0.0f;
            break;
        }
        case GgmlType::Q4_K: {
            const float d = h16(b), dmin = h16(b + 2);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            for (int p = 0; p < 4; ++p) {
                const __m256i v = load(b + 16 + 32 * p);
                store(w + 64 * p, _mm256_and_si256(v, m4));
                store(w + 64 * p + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
            for (int i = 0; i < 8; ++i) {
                _mm256_storeu_ps(ls + 8 * i, _mm256_set1_ps(d * float(sc[i])));
                oc[2 * i] = oc[2 * i + 1] = -dmin * float(mn[i]);
            }
            break;
        }
        case GgmlType::Q6_K: {
            const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
            const float d = h16(b + 208);
            for (int half = 0; half < 2; ++half) {
                const __m256i l0 = load(b + 64 * half), l1 = load(b + 64 * half + 32), h = load(b + 128 + 32 * half);
                const auto six = [&](__m256i low, int highShift) GSRQ_QG_AVX2 {
                    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(h, highShift), m2);
                    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4)); // high ≤ 3: stays in its byte
                };
                std::uint8_t* o = w + 128 * half;
                store(o, six(_mm256_and_si256(l0, m4), 0));
                store(o + 32, six(_mm256_and_si256(l1, m4), 2));
                store(o + 64, six(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), 4));
                store(o + 96, six(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), 6));
            }
            for (int g = 0; g < 16; ++g) {
                const float sg = d * float(scales[g]);
                _mm_storeu_ps(ls + 4 * g, _mm_set1_ps(sg));
                oc[g] = -32.0f * sg;
            }
            break;
        }
        default:
            break;
        }
    }
}

// Σ oc · s16 over `groups` for N tokens, 8 lanes a step.
template <int N> GSRQ_QG_AVX2 void offsetsAvx2(const float* oc, const TokenRefs& t, std::int64_t groups, float* out)
{
    __m256 acc[N];
    for (int j = 0; j < N; ++j)
        acc[j] = _mm256_setzero_ps();
    std::int64_t g = 0;
    for (; g + 8 <= groups; g += 8) {
        const __m256 c = _mm256_loadu_ps(oc + g);
        for (int j = 0; j < N; ++j)
            acc[j] = _mm256_fmadd_ps(c, _mm256_loadu_ps(t.s16[j] + g), acc[j]);
    }
    for (int j = 0; j < N; ++j) {
        float rest = 0;
        for (std::int64_t h = g; h < groups; ++h)
            rest += oc[h] * t.s16[j][h];
        out[j] += hsum8(acc[j]) + rest;
    }
}

// 32 values a step: vpmaddubsw (unsigned × signed bytes, pairs summed to 16 bits: at most 2·63·127
// for the unpacked 6-bit values, and 2·128·127 for Q8_0's magnitudes with the sign moved onto the
// activations) and vpmaddwd with ones (four values to a 32-bit lane). N tokens, their accumulators
// in registers.
template <bool Signed, int N>
GSRQ_QG_AVX2 void dotsAvx2(const Unpacked& u, std::int64_t cols, const TokenRefs& t, float* out)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[N];
    for (int j = 0; j < N; ++j)
        acc[j] = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < cols; c += 32) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.w.data() + c));
        const __m256 ws = _mm256_loadu_ps(u.ls.data() + c / 4);
        const __m256i wa = Signed ? _mm256_abs_epi8(w) : w;
        for (int j = 0; j < N; ++j) {
            __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.q[j] + c));
            if constexpr (Signed)
                x = _mm256_sign_epi8(x, w);
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, x), ones);
            acc[j] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(ws, _mm256_loadu_ps(t.ls[j] + c / 4)), acc[j]);
        }
    }
    for (int j = 0; j < N; ++j)
        out[j] = hsum8(acc[j]);
    offsetsAvx2<N>(u.oc.data(), t, cols / 16, out);
}

// 64 values a step: vpdpbusd (unsigned × signed bytes, four to a 32-bit lane, no saturation).
// Column counts that are an odd multiple of 32 finish with one 256-bit step.
template <int N> GSRQ_QG_VNNI void dotsVnni(const Unpacked& u, std::int64_t cols, const TokenRefs& t, float* out)
{
    __m512 acc[N];
    for (int j = 0; j < N; ++j)
        acc[j] = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c + 64 <= cols; c += 64) {
        const __m512i w = _mm512_loadu_si512(u.w.data() + c);
        const __m512 ws = _mm512_loadu_ps(u.ls.data() + c / 4);
        for (int j = 0; j < N; ++j) {
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(t.q[j] + c));
            acc[j] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(ws, _mm512_loadu_ps(t.ls[j] + c / 4)), acc[j]);
        }
    }
    if (c < cols) { // 32 values: the lower half of a step
        const __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.w.data() + c)));
        const __m512 ws = _mm512_maskz_loadu_ps(0x00ff, u.ls.data() + c / 4);
        for (int j = 0; j < N; ++j) {
            const __m512i x = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.q[j] + c)));
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                     _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(0x00ff, t.ls[j] + c / 4)), acc[j]);
        }
    }
    // The offsets: Σ oc · s16, 16 groups a step, the last ones masked.
    const std::int64_t groups = cols / 16;
    for (std::int64_t g = 0; g < groups; g += 16) {
        const __mmask16 m = groups - g >= 16 ? __mmask16(0xffff) : __mmask16((1u << (groups - g)) - 1);
        const __m512 oc = _mm512_maskz_loadu_ps(m, u.oc.data() + g);
        for (int j = 0; j < N; ++j)
            acc[j] = _mm512_fmadd_ps(oc, _mm512_maskz_loadu_ps(m, t.s16[j] + g), acc[j]);
    }
    for (int j = 0; j < N; ++j)
        out[j] = _mm512_reduce_add_ps(acc[j]);
}

// The bytes a decode step reads kDecodePrefetch ahead of a block into the caches: a step streams
// the whole model once, and the hardware's prefetch alone left the kernel waiting on its loads.
constexpr int kDecodePrefetch = 2048;
inline void prefetchAhead(const std::uint8_t* b, int bytes)
{
    for (int at = 0; at < bytes; at += 64)
        _mm_prefetch(reinterpret_cast<const char*>(b + kDecodePrefetch + at), _MM_HINT_T0);
}

// One token straight from the blocks, no unpacked row (a decode step reads each weight once): 64
// quants a step, unpacked in registers, vpdpbusd with the token's bytes; the offsets as scalars per
// block (a vector per Q6_K block). Q8_0's quants shifted by 128 as in the unpacked build.
GSRQ_QG_VNNI float rowVnni(GgmlType type, const std::uint8_t* b, std::int64_t cols, const Q8Activations& x)
{
    const std::int8_t* xq = x.q.data();
    const float* xl = x.laneScale.data();
    const float* s16 = x.sum16.data();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m256i m4y = _mm256_set1_epi8(0x0f), m2y = _mm256_set1_epi8(0x03), flip = _mm256_set1_epi8(char(0x80));
    const __m128i m4x = _mm_set1_epi8(0x0f);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), offv = _mm512_setzero_ps();
    float off = 0;
    const auto step = [&](__m512i w, __m512 ws, std::int64_t c, __m512& acc) GSRQ_QG_VNNI {
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + c));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(ws, _mm512_loadu_ps(xl + c / 4)), acc);
    };
    const auto pairScales = [](float a, float c)
                                GSRQ_QG_VNNI { return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(c), 1); };
    const auto load32 = [](const void* at)
                            GSRQ_QG_VNNI { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)); };
    const auto s32 = [&](std::int64_t block) { return s16[2 * block] + s16[2 * block + 1]; };
    // The last 32-value block of an odd count alone: the upper half zero.
    const auto single = [&](__m256i w, float d, std::int64_t k) GSRQ_QG_VNNI {
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(w),
                                              _mm512_zextsi256_si512(load32(xq + 32 * k)));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_maskz_mov_ps(0x00ff, _mm512_set1_ps(d * xl[8 * k])), acc0);
    };
    switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
        const bool one = type == GgmlType::Q4_1;
        const int bytes = one ? 20 : 18, qat = one ? 4 : 2;
        const std::int64_t blocks = cols / 32;
        const auto nibbles = [&](const std::uint8_t* blk) GSRQ_QG_VNNI {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qat));
            return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m4x)),
                                           _mm_and_si128(_mm_srli_epi16(q, 4), m4x), 1);
        };
        std::int64_t k = 0;
        for (; k + 2 <= blocks; k += 2, b += 2 * bytes) {
            prefetchAhead(b, 2 * bytes);
            const float da = h16(b), db = h16(b + bytes);
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles(b)), nibbles(b + bytes), 1);
            step(w, pairScales(da, db), 32 * k, (k & 2) ? acc1 : acc0);
            off +=
                one ? h16(b + 2) * s32(k) + h16(b + bytes + 2) * s32(k + 1) : -8.0f * (da * s32(k) + db * s32(k + 1));
        }
        if (k < blocks) {
            single(nibbles(b), h16(b), k);
            off += one ? h16(b + 2) * s32(k) : -8.0f * h16(b) * s32(k);
        }
        break;
    }
    case GgmlType::Q8_0: {
        const std::int64_t blocks = cols / 32;
        std::int64_t k = 0;
        for (; k + 2 <= blocks; k += 2, b += 68) {
            prefetchAhead(b, 68);
            const float da = h16(b), db = h16(b + 34);
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_xor_si256(load32(b + 2), flip)),
                                                 _mm256_xor_si256(load32(b + 36), flip), 1);
            step(w, pairScales(da, db), 32 * k, (k & 2) ? acc1 : acc0);
            off -= 128.0f * (da * s32(k) + db * s32(k + 1));
        }
        if (k < blocks) {
            single(_mm256_xor_si256(load32(b + 2), flip), h16(b), k);
            off -= 128.0f * h16(b) * s32(k);
        }
        break;
    }
    case GgmlType::Q4_K: {
        // Each sub-block of 32 is one activation block: its weight scale d·sc and the activations'
        // scale multiplied once a block (8 lanes), then spread over a step's two sub-blocks (lanes 0–7
        // and 8–15); the minimums' terms as one vector product a block.
        const __m512i pairOf[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                   _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                                   _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                                   _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
        const auto bytes8 = [](const std::uint8_t(&v)[8]) GSRQ_QG_VNNI {
            std::int64_t word;
            std::memcpy(&word, v, 8);
            return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(word)));
        };
        __m256 mins = _mm256_setzero_ps();
        for (std::int64_t k = 0; k < cols / 256; ++k, b += 144) {
            prefetchAhead(b, 144);
            std::uint8_t sc[8], mn[8];
            ggufKScaleMin(b + 4, sc, mn);
            const __m256 xs = _mm256_loadu_ps(x.scale32.data() + 8 * k);
            const __m512 scales =
                _mm512_castps256_ps512(_mm256_mul_ps(_mm256_mul_ps(bytes8(sc), xs), _mm256_set1_ps(h16(b))));
            mins = _mm256_fmadd_ps(_mm256_mul_ps(bytes8(mn), _mm256_set1_ps(h16(b + 2))),
                                   _mm256_loadu_ps(x.sum32.data() + 8 * k), mins);
            for (int p = 0; p < 4; ++p) {
                const __m256i v = load32(b + 16 + 32 * p);
                const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, m4y)),
                                                     _mm256_and_si256(_mm256_srli_epi16(v, 4), m4y), 1);
                const __m512i prod =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + 256 * k + 64 * p));
                __m512& acc = (p & 1) ? acc1 : acc0;
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), _mm512_permutexvar_ps(pairOf[p], scales), acc);
            }
        }
        off -= _mm512_reduce_add_ps(_mm512_zextps256_ps512(mins));
        break;
    }
    case GgmlType::Q6_K: {
        // Lane l of a 64-quant step belongs to 16-value group 4p + l / 4; group g's activations
        // share block g / 2's scale, multiplied with the weights' scales once a block.
        const __m512i groupOf[4] = {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                    _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
                                    _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
                                    _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15)};
        const __m512i halfOf = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        for (std::int64_t k = 0; k < cols / 256; ++k, b += 210) {
            prefetchAhead(b, 210);
            const __m512 sf = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)))),
                _mm512_set1_ps(h16(b + 208)));
            const __m512 scales = _mm512_mul_ps(
                sf, _mm512_permutexvar_ps(halfOf, _mm512_castps256_ps512(_mm256_loadu_ps(x.scale32.data() + 8 * k))));
            for (int p = 0; p < 4; ++p) {
                const int half = p / 2, odd = p % 2;
                const __m512i l = _mm512_loadu_si512(b + 64 * half);
                const __m512i low = _mm512_and_si512(odd ? _mm512_srli_epi16(l, 4) : l, m4);
                const __m256i h = load32(b + 128 + 32 * half);
                const __m256i ha = _mm256_and_si256(_mm256_srli_epi16(h, 4 * odd), m2y);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(h, 4 * odd + 2), m2y);
                const __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1);
                const __m512i w = _mm512_or_si512(low, _mm512_slli_epi16(high, 4)); // high ≤ 3: stays in its byte
                const __m512i prod =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + 256 * k + 64 * p));
                __m512& acc = (p & 1) ? acc1 : acc0;
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(prod), _mm512_permutexvar_ps(groupOf[p], scales), acc);
            }
            offv = _mm512_fmadd_ps(sf, _mm512_loadu_ps(s16 + 16 * k), offv); // × −32 below
        }
        break;
    }
    default:
        return 0;
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + off - 32.0f * _mm512_reduce_add_ps(offv);
}
#endif

enum class Isa { Portable, Avx2, Vnni };

// From this many tokens the VNNI build packs 32 rows at a time for the tiled kernel
// (quant_gemm_tiled.cpp); below it each row is unpacked once and dotted with up to four tokens.
constexpr std::int64_t kTiledTokens = 8;

// f.template operator()<N>() for N = n (1 to kTile): the kernels' token counts as constants, so
// their accumulators stay in registers.
template <class F> void dispatch(int n, F&& f)
{
    switch (n) {
    case 1:
        f.template operator()<1>();
        break;
    case 2:
        f.template operator()<2>();
        break;
    case 3:
        f.template operator()<3>();
        break;
    default:
        f.template operator()<4>();
    }
}

void run(Isa isa, const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy)
{
    const std::int64_t cols = w.cols, rows = w.rows, T = x.rows;
    if (T == 0) // no tokens (a prefill chunk's logits that are not asked for): nothing to unpack
        return;
    const bool isQ8 = w.type == GgmlType::Q8_0;
    const bool shiftQ8 = isa == Isa::Vnni;
    const bool signedQuants = isQ8 && !shiftQ8;
    const bool ordered = !w.rowOrder.empty();
    // Threads pay from about a megabyte of weights read, or a few tokens.
    const bool parallel = double(rows) * double(w.rowBytes) * double(T) >= double(1 << 20);
#if GSRQ_QG_X86
    if (isa == Isa::Vnni && T == 1) { // a decode step: straight from the blocks
#pragma omp parallel for schedule(static) if (parallel)
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t stored = ordered ? w.rowOrder[std::size_t(r)] : r;
            y[r] = rowVnni(w.type, w.data + stored * w.rowBytes, cols, x);
        }
        return;
    }
    if (isa == Isa::Vnni && T >= kTiledTokens && detail::tiledGemmVnni(w, x, y, ldy))
        return;
#endif
#pragma omp parallel if (parallel)
    {
        Unpacked u;
        u.size(cols);
        float dots[kTile];
#pragma omp for schedule(static)
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t stored = ordered ? w.rowOrder[std::size_t(r)] : r;
#if GSRQ_QG_X86
            if (isa != Isa::Portable)
                unpackRowAvx2(w.type, w.data + stored * w.rowBytes, cols, shiftQ8, u);
            else
#endif
                unpackRow(w.type, w.data + stored * w.rowBytes, cols, shiftQ8, u);
            for (std::int64_t t0 = 0; t0 < T; t0 += kTile) {
                const int n = int(std::min<std::int64_t>(kTile, T - t0));
                TokenRefs refs{};
                for (int j = 0; j < n; ++j) {
                    refs.q[j] = x.q.data() + (t0 + j) * cols;
                    refs.ls[j] = x.laneScale.data() + (t0 + j) * (cols / 4);
                    refs.s16[j] = x.sum16.data() + (t0 + j) * (cols / 16);
                }
                switch (isa) {
#if GSRQ_QG_X86
                case Isa::Vnni:
                    dispatch(n, [&]<int N> { dotsVnni<N>(u, cols, refs, dots); });
                    break;
                case Isa::Avx2:
                    if (signedQuants)
                        dispatch(n, [&]<int N> { dotsAvx2<true, N>(u, cols, refs, dots); });
                    else
                        dispatch(n, [&]<int N> { dotsAvx2<false, N>(u, cols, refs, dots); });
                    break;
#endif
                default:
                    dotsPortable(u, signedQuants, cols, refs, n, dots);
                }
                for (int j = 0; j < n; ++j)
                    y[(t0 + j) * ldy + r] = dots[j];
            }
        }
    }
}

bool fits(const QuantMatrix& w, const Q8Activations& x)
{
    const QuantBlockLayout lay = quantBlockLayout(w.type);
    const auto sized = [&](std::size_t n, std::int64_t per) { return std::int64_t(n) == x.rows * (x.cols / per); };
    return w && lay.elements > 0 && w.cols % lay.elements == 0 && w.cols == x.cols && x.cols % 32 == 0 &&
           sized(x.q.size(), 1) && sized(x.laneScale.size(), 4) && sized(x.sum16.size(), 16) &&
           sized(x.qsum16.size(), 16) && sized(x.scale32.size(), 32) && sized(x.sum32.size(), 32) &&
           sized(x.absMax.size(), 32);
}

} // namespace

void detail::unpackGemmRow(GgmlType type, const std::uint8_t* b, std::int64_t cols, bool shiftQ8, UnpackedRow& u)
{
#if GSRQ_QG_X86
    if (cpuFeatures().avx2) {
        unpackRowAvx2(type, b, cols, shiftQ8, u);
        return;
    }
#endif
    unpackRow(type, b, cols, shiftQ8, u);
}

const char* quantGemmIsaFor(const CpuFeatures& f)
{
    if (f.avx512vnni)
        return "avx512-vnni";
    if (f.avx2)
        return "avx2";
    return "portable";
}

const char* quantGemmIsa()
{
#if GSRQ_QG_X86
    return quantGemmIsaFor(cpuFeatures());
#else
    return "portable";
#endif
}

bool quantGemmBuild(const std::string& isa, const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy)
{
    if (!fits(w, x))
        return false;
    if (isa == "portable") {
        run(Isa::Portable, w, x, y, ldy);
        return true;
    }
#if GSRQ_QG_X86
    if (isa == "avx2" && cpuFeatures().avx2) {
        run(Isa::Avx2, w, x, y, ldy);
        return true;
    }
    if (isa == "avx512-vnni" && cpuFeatures().avx512vnni) {
        run(Isa::Vnni, w, x, y, ldy);
        return true;
    }
#endif
    return false;
}

void quantGemm(const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy)
{
    quantGemmBuild(quantGemmIsa(), w, x, y, ldy);
}

std::vector<double> quantGemmErrorBound(const QuantMatrix& w, const Q8Activations& x)
{
    std::vector<double> bound(std::size_t(x.rows * w.rows), 0.0);
    if (!fits(w, x))
        return bound;
    std::vector<float> row(std::size_t(w.cols));
    for (std::int64_t r = 0; r < w.rows; ++r) {
        quantRows(w, r, 1, row.data());
        for (std::int64_t t = 0; t < x.rows; ++t) {
            double b = 0;
            for (std::int64_t k = 0; k < w.cols / 32; ++k) {
                double s = 0;
                for (int i = 0; i < 32; ++i)
                    s += std::fabs(double(row[std::size_t(32 * k + i)]));
                b += double(x.absMax[std::size_t(t * (w.cols / 32) + k)]) / 254.0 * s;
            }
            bound[std::size_t(t * w.rows + r)] = b;
        }
    }
    return bound;
}

} // namespace gsrq
