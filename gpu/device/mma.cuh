#pragma once
// Tensor-core matrix products a warp issues itself (sm_80 and later): mma.sync with TF32 operands and
// FP32 accumulation, for kernels that keep the product's result in registers (a fused epilogue)
// where a library GEMM would write it to memory. With nvcc the PTX instruction; in the emulator build
// (GSRQ_CUDA_EMULATOR) the emulator's warp-collective model of it. Internal to gsrq_gpu.

#include <cstdint>
#include <cstring>

#if defined(GSRQ_CUDA_EMULATOR)
#include "emulator.h"
#endif

namespace gsrq::gpu::kernels {

// x rounded to TF32 (10 mantissa bits, to nearest, ties away from zero: cvt.rna.tf32.f32), as a bit
// pattern mma reads. Infinities and NaN pass unchanged.
__device__ __forceinline__ std::uint32_t toTf32Bits(float x)
{
#if !defined(GSRQ_CUDA_EMULATOR) && defined(__CUDA_ARCH__)
    std::uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#else
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    if ((b & 0x7f800000u) != 0x7f800000u)
        b = (b + 0x1000u) & ~0x1fffu;
    return b;
#endif
}

// x's bit pattern (an operand already in TF32 passes as it is).
__device__ __forceinline__ std::uint32_t floatBits(float x)
{
#if !defined(GSRQ_CUDA_EMULATOR) && defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
#endif
}

__device__ __forceinline__ float toTf32(float x)
{
    const std::uint32_t b = toTf32Bits(x);
    float r;
    std::memcpy(&r, &b, 4);
    return r;
}

// d += A·B for the warp's 16 × 8 by 8 × 8 tile (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32):
// lane = 4g + t holds a = A[g][t], A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]; b = B[t][g], B[t + 4][g];
// d = D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]. Every lane of the warp must take part.
__device__ __forceinline__ void mmaTf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2])
{
#if defined(GSRQ_CUDA_EMULATOR)
    const float c[4] = {d[0], d[1], d[2], d[3]};
    emulator::mmaTf32(d, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d;
    (void)a;
    (void)b;
    __trap(); // callers launch it only on sm_80 and later
#endif
}

} // namespace gsrq::gpu::kernels
