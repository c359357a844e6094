#pragma once
// Helpers of gsrq_gpu's CUDA host code (internal: CUDA types): error checks that throw gsrq::Error,
// and a grow-only buffer in device or pinned host memory whose failed allocation names the size.

#include "core/base/error.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace gsrq::gpu::detail {

inline void check(cudaError_t e, const char* what)
{
    if (e != cudaSuccess)
        throwRuntime("CUDA: ", what, " failed: ", cudaGetErrorString(e));
}

inline double mib(std::size_t bytes)
{
    return double(bytes) / (1024.0 * 1024.0);
}

[[noreturn]] inline void outOfMemory(const std::string& device, const char* what, std::size_t bytes, bool host)
{
    cudaGetLastError(); // allocation failures are not sticky; clear it for the caller's next call
    std::size_t freeB = 0, totalB = 0;
    cudaMemGetInfo(&freeB, &totalB);
    if (host)
        throwRuntime(device, ": cannot pin ", mib(bytes), " MiB of host memory for ", what);
    throwRuntime(device, ": out of device memory: ", what, " needs ", mib(bytes), " MiB, ", mib(freeB), " MiB of ",
                 mib(totalB), " MiB are free");
}

// Grow-only array in device memory, or in pinned host memory (Pinned); freed with its owner.
template <class T, bool Pinned = false> class Buffer {
public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { release(); }

    void ensure(std::size_t n, const char* what, const std::string& device)
    {
        if (n <= m_n)
            return;
        release();
        void* p = nullptr;
        const cudaError_t e = Pinned ? cudaMallocHost(&p, n * sizeof(T)) : cudaMalloc(&p, n * sizeof(T));
        if (e != cudaSuccess)
            outOfMemory(device, what, n * sizeof(T), Pinned);
        m_p = static_cast<T*>(p);
        m_n = n;
    }
    void release()
    {
        if (m_p)
            Pinned ? cudaFreeHost(m_p) : cudaFree(m_p);
        m_p = nullptr;
        m_n = 0;
    }
    T* get() const { return m_p; }

private:
    T* m_p = nullptr;
    std::size_t m_n = 0;
};
template <class T> using DeviceArray = Buffer<T, false>;
template <class T> using PinnedArray = Buffer<T, true>;

} // namespace gsrq::gpu::detail
