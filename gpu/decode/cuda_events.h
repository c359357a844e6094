#pragma once
// A pair of CUDA events around work on a stream, for the decode cache's and the benchmark's timings
// (internal: CUDA types).

#include "gpu/device/cuda_util.h"

#include <cuda_runtime_api.h>

namespace gsrq::gpu::detail {

struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    Events()
    {
        check(cudaEventCreate(&a), "cudaEventCreate");
        check(cudaEventCreate(&b), "cudaEventCreate");
    }
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
    ~Events()
    {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
    // Seconds from a to b, once b has been reached.
    double seconds() const
    {
        float ms = 0;
        check(cudaEventSynchronize(b), "timing");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        return ms * 1e-3;
    }
};

} // namespace gsrq::gpu::detail
