#pragma once
// The CUDA emulator's half precision: CUDA's __half storage and the conversions the kernels use,
// rounding to nearest even like the device (GCC's _Float16 conversions are IEEE 754's).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

struct alignas(2) __half {
    std::uint16_t __x;
};
struct alignas(4) __half2 {
    __half x, y;
};

inline float __half2float(__half h)
{
    _Float16 f;
    std::memcpy(&f, &h, 2);
    return float(f);
}

inline __half __float2half_rn(float v)
{
    const _Float16 f = static_cast<_Float16>(v);
    __half h;
    std::memcpy(&h, &f, 2);
    return h;
}

inline __half __float2half(float v)
{
    return __float2half_rn(v);
}

inline float2 __half22float2(__half2 h)
{
    return {__half2float(h.x), __half2float(h.y)};
}
