#pragma once
// The small vector types the CPU decode kernels are written over (cpu_kernels.cpp, its only
// includer): V8 (8 floats), VW (the FP16 path's width: V16 in the AVX-512 build), Lanes<4|8> (a GQA
// group's table entry or bin), as AVX2/AVX-512 registers in the vector builds and plain arrays in
// the portable one. Included inside cpu_kernels.cpp's anonymous namespace, after its target pragma,
// so every function here is compiled for that build's instruction set and has internal linkage.

#if GSRQ_DECODE_SIMD

// Eight floats in one AVX register.
struct V8 {
    __m256 v;
    static constexpr int N = 8;
    V8 fold() const { return *this; }
    static V8 zero() { return {_mm256_setzero_ps()}; }
    static V8 set1(float x) { return {_mm256_set1_ps(x)}; }
    static V8 load(const float* p) { return {_mm256_loadu_ps(p)}; }
    static V8 loadHalf(const std::uint16_t* p)
    {
        return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
    }
    void store(float* p) const { _mm256_storeu_ps(p, v); }
    static V8 fma(V8 a, V8 b, V8 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; } // a·b + c
    static V8 max(V8 a, V8 b) { return {_mm256_max_ps(a.v, b.v)}; }
    float sum() const
    {
        __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        a = _mm_add_ps(a, _mm_movehl_ps(a, a));
        a = _mm_add_ss(a, _mm_movehdup_ps(a));
        return _mm_cvtss_f32(a);
    }
    // The sums of eight vectors, as one vector (element i: the sum of ai's elements). By value: an
    // array passed by address would keep the callers' accumulators in memory, not registers.
    static V8 sum8(V8 a0, V8 a1, V8 a2, V8 a3, V8 a4, V8 a5, V8 a6, V8 a7)
    {
        const __m256 t0 = _mm256_hadd_ps(a0.v, a1.v), t1 = _mm256_hadd_ps(a2.v, a3.v);
        const __m256 t2 = _mm256_hadd_ps(a4.v, a5.v), t3 = _mm256_hadd_ps(a6.v, a7.v);
        const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
        return {_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31))};
    }
    // 2^x for x ≤ 2^7 (larger inputs do not occur: weights are at most 2^kLazyRescale); below −126 it
    // gives 2^−126, which the sums cannot tell from 0. Rounding to the nearest integer n leaves
    // f ∈ [−½, ½], where the degree-7 Taylor series of e^(f ln 2) is within 6e−9 of 2^f, below FP32's
    // rounding.
    static V8 exp2(V8 x)
    {
        const __m256 c = _mm256_max_ps(x.v, _mm256_set1_ps(-126.f));
        const __m256 n = _mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 f = _mm256_sub_ps(c, n);
        __m256 p = _mm256_set1_ps(1.5252734e-5f);
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530e-4f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558e-3f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291e-3f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504109e-2f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022651e-1f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718e-1f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
        const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
        return {_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e))};
    }
};
inline V8 operator+(V8 a, V8 b)
{
    return {_mm256_add_ps(a.v, b.v)};
}
inline V8 operator-(V8 a, V8 b)
{
    return {_mm256_sub_ps(a.v, b.v)};
}
inline V8 operator*(V8 a, V8 b)
{
    return {_mm256_mul_ps(a.v, b.v)};
}

// A group's table entry or bin: 4 lanes (one 16-byte load) or 8 (one 32-byte load).
template <int N> struct Lanes;
template <> struct Lanes<4> {
    __m128 v;
    static Lanes zero() { return {_mm_setzero_ps()}; }
    static Lanes load(const float* p) { return {_mm_loadu_ps(p)}; }
    void store(float* p) const { _mm_storeu_ps(p, v); }
    static Lanes max(Lanes a, Lanes b) { return {_mm_max_ps(a.v, b.v)}; }
};
inline Lanes<4> operator+(Lanes<4> a, Lanes<4> b)
{
    return {_mm_add_ps(a.v, b.v)};
}
inline Lanes<4> operator-(Lanes<4> a, Lanes<4> b)
{
    return {_mm_sub_ps(a.v, b.v)};
}
inline Lanes<4> operator*(Lanes<4> a, Lanes<4> b)
{
    return {_mm_mul_ps(a.v, b.v)};
}
template <> struct Lanes<8> {
    __m256 v;
    static Lanes zero() { return {_mm256_setzero_ps()}; }
    static Lanes load(const float* p) { return {_mm256_loadu_ps(p)}; }
    void store(float* p) const { _mm256_storeu_ps(p, v); }
    static Lanes max(Lanes a, Lanes b) { return {_mm256_max_ps(a.v, b.v)}; }
};
inline Lanes<8> operator+(Lanes<8> a, Lanes<8> b)
{
    return {_mm256_add_ps(a.v, b.v)};
}
inline Lanes<8> operator-(Lanes<8> a, Lanes<8> b)
{
    return {_mm256_sub_ps(a.v, b.v)};
}
inline Lanes<8> operator*(Lanes<8> a, Lanes<8> b)
{
    return {_mm256_mul_ps(a.v, b.v)};
}

#if GSRQ_DECODE_ISA == 2
// Sixteen floats in one AVX-512 register: the FP16 path's width in the AVX-512 build, where one
// conversion covers 16 halves (measured here about 1.7× the elements per cycle of two 8-wide ones,
// which share the FMA pipes) and 32 registers hold more accumulators.
struct V16 {
    __m512 v;
    static constexpr int N = 16;
    static V16 zero() { return {_mm512_setzero_ps()}; }
    static V16 set1(float x) { return {_mm512_set1_ps(x)}; }
    static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
    static V16 loadHalf(const std::uint16_t* p)
    {
        return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
    }
    void store(float* p) const { _mm512_storeu_ps(p, v); }
    static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; } // a·b + c
    // Its two halves added: 8 partial sums whose total is this vector's.
    V8 fold() const { return {_mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1))}; }
    static V8 sum8(V16 a0, V16 a1, V16 a2, V16 a3, V16 a4, V16 a5, V16 a6, V16 a7)
    {
        return V8::sum8(a0.fold(), a1.fold(), a2.fold(), a3.fold(), a4.fold(), a5.fold(), a6.fold(), a7.fold());
    }
};
inline V16 operator+(V16 a, V16 b)
{
    return {_mm512_add_ps(a.v, b.v)};
}
using VW = V16;
constexpr int kVectorRegisters = 32;
constexpr const char* kIsa = "avx512";
#else
using VW = V8;
constexpr int kVectorRegisters = 16;
constexpr const char* kIsa = "avx2+fma+f16c";
#endif

#else

template <int N_> struct Arr {
    static constexpr int N = N_;
    float v[N];
    Arr<8> fold() const
    {
        static_assert(N % 8 == 0);
        Arr<8> r = Arr<8>::zero();
        for (int i = 0; i < N; ++i)
            r.v[i % 8] += v[i];
        return r;
    }
    static Arr zero()
    {
        Arr a;
        std::fill(a.v, a.v + N, 0.f);
        return a;
    }
    static Arr set1(float x)
    {
        Arr a;
        std::fill(a.v, a.v + N, x);
        return a;
    }
    static Arr load(const float* p)
    {
        Arr a;
        std::memcpy(a.v, p, sizeof a.v);
        return a;
    }
    static Arr loadHalf(const std::uint16_t* p)
    {
        Arr a;
        for (int i = 0; i < N; ++i)
            a.v[i] = float(Eigen::numext::bit_cast<Eigen::half>(p[i]));
        return a;
    }
    void store(float* p) const { std::memcpy(p, v, sizeof v); }
    template <typename Op> static Arr map(Arr a, Arr b, Op op)
    {
        Arr r;
        for (int i = 0; i < N; ++i)
            r.v[i] = op(a.v[i], b.v[i]);
        return r;
    }
    friend Arr operator+(Arr a, Arr b)
    {
        return map(a, b, [](float x, float y) { return x + y; });
    }
    friend Arr operator-(Arr a, Arr b)
    {
        return map(a, b, [](float x, float y) { return x - y; });
    }
    friend Arr operator*(Arr a, Arr b)
    {
        return map(a, b, [](float x, float y) { return x * y; });
    }
    static Arr fma(Arr a, Arr b, Arr c)
    {
        Arr r;
        for (int i = 0; i < N; ++i)
            r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
        return r;
    }
    static Arr max(Arr a, Arr b)
    {
        return map(a, b, [](float x, float y) { return std::max(x, y); });
    }
    float sum() const
    {
        float s = 0;
        for (float x : v)
            s += x;
        return s;
    }
    static Arr sum8(Arr a0, Arr a1, Arr a2, Arr a3, Arr a4, Arr a5, Arr a6, Arr a7)
    {
        const Arr a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
        Arr r;
        for (int i = 0; i < N; ++i)
            r.v[i] = a[i].sum();
        return r;
    }
    static Arr exp2(Arr x)
    {
        Arr r;
        for (int i = 0; i < N; ++i)
            r.v[i] = std::exp2(std::max(x.v[i], -126.f));
        return r;
    }
};
using V8 = Arr<8>;
using VW = V8;
template <int N> using Lanes = Arr<N>;
constexpr int kVectorRegisters = 16;

constexpr const char* kIsa = "portable";

#endif
