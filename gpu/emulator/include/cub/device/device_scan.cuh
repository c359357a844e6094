#pragma once
// The CUDA emulator's cub::DeviceScan::ExclusiveSum (in place allowed, as in CUB), on the CPU. With a
// null temporary buffer it reports the bytes it needs, as CUB does.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iterator>

namespace cub {

struct DeviceScan {
    template <class In, class Out>
    static cudaError_t ExclusiveSum(void* temp, std::size_t& tempBytes, In in, Out out, int n, cudaStream_t = nullptr)
    {
        if (!temp) {
            tempBytes = 1;
            return cudaSuccess;
        }
        if (n < 0)
            return cudaErrorInvalidValue;
        using T = typename std::iterator_traits<In>::value_type;
        T running{};
        for (int i = 0; i < n; ++i) {
            const T x = in[i]; // read before the write: in and out may be the same array
            out[i] = running;
            running = running + x;
        }
        return cudaSuccess;
    }
};

} // namespace cub
