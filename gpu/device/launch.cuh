#pragma once
// How the kernels are launched and reach their dynamic shared memory. With nvcc: the CUDA launch
// syntax and an extern shared array. In the emulator build (GSRQ_CUDA_EMULATOR, gpu/emulator): the
// emulator's launch, which runs every thread of every block on the CPU, so the same kernel source is
// tested on machines without a GPU. Internal to gsrq_gpu.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

#if defined(GSRQ_CUDA_EMULATOR)
#include "emulator.h"
#endif

namespace gsrq::gpu::kernels {

// Enqueues kernel<<<grid, block, sharedBytes, stream>>>(args...). As with that syntax, the launch's
// status is cudaGetLastError()'s.
template <class... P>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t stream,
                   std::type_identity_t<P>... args)
{
#if defined(GSRQ_CUDA_EMULATOR)
    emulator::launch(kernel, grid, block, sharedBytes, stream, args...);
#else
    kernel<<<grid, block, sharedBytes, stream>>>(args...);
#endif
}

// Enqueues the launch as a programmatic dependent of the stream's previous one where `chained`
// (Hopper and later: the CUDA programming guide's programmatic dependent launch): its launch is
// prepared while that one runs, its blocks start as that one's finish (none of ours signals earlier),
// and they must call gridDependencyWait() before they read what it wrote. Elsewhere (and in the emulator, which runs
// launches one after another) an ordinary launch. The status is cudaGetLastError()'s, as above.
template <class... P>
inline void launchChained(bool chained, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t sharedBytes,
                          cudaStream_t stream, std::type_identity_t<P>... args)
{
#if defined(GSRQ_CUDA_EMULATOR)
    (void)chained;
    emulator::launch(kernel, grid, block, sharedBytes, stream, args...);
#else
    if (!chained) {
        kernel<<<grid, block, sharedBytes, stream>>>(args...);
        return;
    }
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = sharedBytes;
    config.stream = stream;
    config.attrs = attribute;
    config.numAttrs = 1;
    (void)cudaLaunchKernelEx(&config, kernel, args...); // its error stays for cudaGetLastError()
#endif
}

// In a launch made by launchChained: waits until the launch it depends on has finished and its
// writes are visible (griddepcontrol.wait). Does nothing before sm_90, in an ordinary launch, and in
// the emulator.
__device__ __forceinline__ void gridDependencyWait()
{
#if !defined(GSRQ_CUDA_EMULATOR) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The kernel's static shared memory (its __shared__ arrays), which a block holds beside the dynamic.
template <class Kernel> inline std::size_t staticShared(Kernel k)
{
    cudaFuncAttributes a{};
    return cudaFuncGetAttributes(&a, k) == cudaSuccess ? a.sharedSizeBytes : 0;
}

// Lets a launch of k ask for `bytes` of dynamic shared memory. Without the opt-in, a block's static
// and dynamic shared memory together must fit in 48 KiB; with it, the two together must fit in the
// device's opt-in limit (which the planners check first, so this fails only on a planning error).
template <class Kernel> inline cudaError_t allowShared(Kernel k, std::size_t bytes)
{
    cudaFuncAttributes a{};
    if (cudaError_t e = cudaFuncGetAttributes(&a, k); e != cudaSuccess)
        return e;
    if (bytes + a.sharedSizeBytes <= 48 * 1024)
        return cudaSuccess;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The block's dynamic shared memory (the launch's sharedBytes), 16-byte aligned.
template <class T> __device__ __forceinline__ T* dynamicShared()
{
#if defined(GSRQ_CUDA_EMULATOR)
    return static_cast<T*>(emulator::dynamicShared());
#else
    extern __shared__ __align__(16) unsigned char gsrqDynamicShared[];
    return reinterpret_cast<T*>(gsrqDynamicShared);
#endif
}

} // namespace gsrq::gpu::kernels
