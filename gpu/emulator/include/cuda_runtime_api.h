#pragma once
// The CUDA emulator's runtime API: the subset of CUDA's cuda_runtime_api.h that gsrq_gpu uses, with
// the same names, types and error codes, served by emulator.cpp on the CPU. Only the emulator build
// of gsrq_gpu (gsrq_gpu_emulated, for the test suites) has this directory on its include path.

#include <cstddef>

// Vector types (CUDA's vector_types.h), with CUDA's alignments.
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorLaunchFailure = 719,
};

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

constexpr unsigned cudaStreamDefault = 0x0;
constexpr unsigned cudaStreamNonBlocking = 0x1;

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

// The fields of CUDA's cudaFuncAttributes the project reads.
struct cudaFuncAttributes {
    std::size_t sharedSizeBytes;           // static shared memory per block
    int maxDynamicSharedSizeBytes;         // the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize
    int maxThreadsPerBlock;
    int ptxVersion; // 0 here: the emulator runs no PTX
};

struct cudaDeviceProp {
    char name[256];
    std::size_t totalGlobalMem;
    std::size_t sharedMemPerBlock;
    std::size_t sharedMemPerBlockOptin;
    std::size_t sharedMemPerMultiprocessor;
    int major, minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerBlock;
    int warpSize;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemGetInfo(std::size_t* freeBytes, std::size_t* totalBytes);

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2D(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                         std::size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

namespace gsrq::emulator {
cudaError_t setFuncAttribute(const void* kernel, cudaFuncAttribute attr, int value);
cudaError_t funcAttributes(cudaFuncAttributes* attr, const void* kernel);
}

// CUDA's templated overload for kernel pointers (cuda_runtime.h).
template <class T> cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value)
{
    return gsrq::emulator::setFuncAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// CUDA's templated overload for kernel pointers. The static shared memory reported is that of every
// kernel linked in together (the emulator cannot tell one kernel's __shared__ arrays from another's):
// an upper bound, so a launch the emulator takes also fits the device.
template <class T> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* kernel)
{
    return gsrq::emulator::funcAttributes(attr, reinterpret_cast<const void*>(kernel));
}
