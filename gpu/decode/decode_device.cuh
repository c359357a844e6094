#pragma once
// Device helpers shared by the decode and cache kernels (internal to gsrq_gpu; compiled by nvcc, or
// as C++ against the CUDA emulator).

#include "gpu/decode/decode_kernels.h"
#include "gpu/device/launch.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace gsrq::gpu::kernels::detail {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kEpl = 8; // features per lane
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void addHalf8(float (&x)[kEpl], const uint4& raw)
{
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __half2 h;
        memcpy(&h, &words[i], sizeof h); // a bit cast (a register move): no type-punned pointer
        const float2 f = __half22float2(h);
        x[2 * i] += f.x;
        x[2 * i + 1] += f.y;
    }
}

__device__ __forceinline__ uint4 load16(const void* p)
{
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// Sum over the `width` lanes that hold one token (width a power of two ≤ 32, aligned groups).
__device__ __forceinline__ float groupSum(float v, int width)
{
    for (int o = width / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Calls f.template operator()<G>() with G the smallest supported group size ≥ the model's.
template <class F> inline cudaError_t withGroup(int group, F&& f)
{
    if (group <= 1)
        return f.template operator()<1>();
    if (group <= 2)
        return f.template operator()<2>();
    if (group <= 4)
        return f.template operator()<4>();
    if (group <= kMaxGroup)
        return f.template operator()<8>();
    return cudaErrorInvalidValue;
}

using kernels::allowShared;
using kernels::staticShared;

} // namespace gsrq::gpu::kernels::detail
