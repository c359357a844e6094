// The CUDA emulator's runtime API (cuda_runtime_api.h here): errors, the emulated device, device
// memory, copies, streams and events, on the CPU.
//
// Device memory: each cudaMalloc is its own mapping, filled with 0xFF bytes (NaN as floats, like the
// garbage a real allocation holds), with an inaccessible page right after its end rounded to 256
// bytes, so a kernel that reads or writes past an array faults instead of reading a neighbour.
// Copies, memsets and kernel pointer parameters are checked against the live allocations. The
// emulated device has GSRQ_EMULATOR_MEMORY_MIB of memory (default 4096): asking for more fails with
// cudaErrorMemoryAllocation, as a full device does; GSRQ_EMULATOR_SHARED_OPTIN_KIB sets its shared
// memory per block with the opt-in (default 227, Hopper's).

#include "internal.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace gsrq::emulator::internal {

namespace {
// ---- errors -------------------------------------------------------------------------------------

thread_local cudaError_t lastError = cudaSuccess;
thread_local std::string lastDetail; // why the last launch failed, for cudaGetErrorString

} // namespace

cudaError_t fail(cudaError_t e, std::string detail)
{
    lastError = e;
    if (!detail.empty())
        lastDetail = std::string(cudaGetErrorName(e)) + ": " + detail;
    return e;
}

// ---- the emulated device ------------------------------------------------------------------------

std::size_t sharedOptin()
{
    const char* v = std::getenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB");
    const long long kib = v ? std::atoll(v) : 227;
    return std::size_t(kib >= 48 ? kib : 227) << 10;
}

namespace {

std::size_t memoryLimit()
{
    static const std::size_t limit = [] {
        const char* v = std::getenv("GSRQ_EMULATOR_MEMORY_MIB");
        const long long mib = v ? std::atoll(v) : 4096;
        return std::size_t(mib > 0 ? mib : 4096) << 20;
    }();
    return limit;
}

struct Allocation {
    void* mapping = nullptr;
    std::size_t mappingBytes = 0, bytes = 0;
    bool device = false;
};

std::mutex memoryMutex;
std::map<std::uintptr_t, Allocation> allocations; // by start address
std::size_t deviceBytesInUse = 0;

} // namespace

std::size_t pageBytes()
{
    static const std::size_t p = std::size_t(sysconf(_SC_PAGESIZE));
    return p;
}

namespace {

std::size_t roundUp(std::size_t n, std::size_t m)
{
    return (n + m - 1) / m * m;
}

cudaError_t allocate(void** ptr, std::size_t bytes, bool device)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    std::lock_guard lock(memoryMutex);
    if (device && deviceBytesInUse + bytes > memoryLimit())
        return fail(cudaErrorMemoryAllocation);
    const std::size_t body = roundUp(std::max<std::size_t>(bytes, 1), 256);
    const std::size_t mapped = roundUp(body, pageBytes()) + pageBytes();
    void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    char* guard = static_cast<char*>(m) + mapped - pageBytes();
    mprotect(guard, pageBytes(), PROT_NONE);
    char* p = guard - body;
    std::memset(p, 0xff, body);
    allocations[reinterpret_cast<std::uintptr_t>(p)] = {m, mapped, bytes, device};
    if (device)
        deviceBytesInUse += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t release(void* ptr, bool device)
{
    if (!ptr)
        return cudaSuccess;
    std::lock_guard lock(memoryMutex);
    const auto it = allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocations.end() || it->second.device != device)
        return fail(cudaErrorInvalidValue, device ? "cudaFree of a pointer cudaMalloc did not return"
                                                  : "cudaFreeHost of a pointer cudaMallocHost did not return");
    munmap(it->second.mapping, it->second.mappingBytes);
    if (device)
        deviceBytesInUse -= it->second.bytes;
    allocations.erase(it);
    return cudaSuccess;
}

} // namespace

bool deviceRange(const void* p, std::size_t bytes)
{
    std::lock_guard lock(memoryMutex);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin())
        return false;
    --it;
    return it->second.device && a + bytes <= it->first + it->second.bytes;
}

std::vector<std::pair<std::uintptr_t, std::size_t>> deviceAllocations()
{
    std::lock_guard lock(memoryMutex);
    std::vector<std::pair<std::uintptr_t, std::size_t>> out;
    for (const auto& [start, a] : allocations)
        if (a.device)
            out.emplace_back(start, a.bytes);
    return out;
}

namespace {

bool hostPointer(const void* p)
{
    return !deviceRange(p, 0);
}

cudaError_t checkSide(const void* p, std::size_t bytes, bool device, const char* what, const char* call)
{
    if (!p)
        return fail(cudaErrorInvalidValue, std::string(call) + ": null " + what);
    if (device ? deviceRange(p, bytes) : hostPointer(p))
        return cudaSuccess;
    return fail(cudaErrorInvalidValue, std::string(call) + ": the " + what +
                                           (device ? " is not device memory, or runs past its allocation"
                                                   : " is device memory, the kind says host"));
}

// Checks a copy of dBytes at dst from sBytes at src against its kind (spans differ for 2D copies).
cudaError_t checkCopy(void* dst, std::size_t dBytes, const void* src, std::size_t sBytes, cudaMemcpyKind kind,
                      const char* call)
{
    if (kind == cudaMemcpyDefault)
        return cudaSuccess;
    const bool dDev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool sDev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (const cudaError_t e = checkSide(dst, dBytes, dDev, "destination", call); e != cudaSuccess)
        return e;
    return checkSide(src, sBytes, sDev, "source", call);
}

} // namespace

} // namespace gsrq::emulator::internal

// ---- runtime API --------------------------------------------------------------------------------

using gsrq::emulator::internal::checkCopy;
using gsrq::emulator::internal::fail;

struct CUstream_st {};
struct CUevent_st {
    std::chrono::steady_clock::time_point at;
    bool recorded = false;
};

namespace {

thread_local int currentDevice = 0;

template <class T> cudaError_t makeHandle(T** out)
{
    if (!out)
        return fail(cudaErrorInvalidValue);
    *out = new T;
    return cudaSuccess;
}

template <class T> cudaError_t destroyHandle(T* handle)
{
    if (!handle)
        return fail(cudaErrorInvalidResourceHandle);
    delete handle;
    return cudaSuccess;
}

} // namespace

cudaError_t cudaGetDeviceCount(int* count)
{
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device)
{
    if (!prop)
        return fail(cudaErrorInvalidValue);
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    *prop = {};
    std::snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU (functional; its timings mean nothing)");
    prop->totalGlobalMem = gsrq::emulator::internal::memoryLimit();
    prop->sharedMemPerBlock = gsrq::emulator::internal::kSharedPerBlock;
    prop->sharedMemPerBlockOptin = gsrq::emulator::internal::sharedOptin();
    // An H100's 228 KiB, or the opt-in limit and the 1 KiB a block reserves where a test lowers it.
    prop->sharedMemPerMultiprocessor = std::min<std::size_t>(228 * 1024, prop->sharedMemPerBlockOptin + 1024);
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132; // an H100 SXM's, so launches are planned with its geometry
    prop->l2CacheSize = gsrq::emulator::internal::kL2Bytes;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int device)
{
    if (!value)
        return fail(cudaErrorInvalidValue);
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    *value = 0; // clocks and bus width: the emulator has none
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    currentDevice = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device)
{
    if (!device)
        return fail(cudaErrorInvalidValue);
    *device = currentDevice;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize()
{
    return cudaSuccess;
}

cudaError_t cudaGetLastError()
{
    const cudaError_t e = gsrq::emulator::internal::lastError;
    gsrq::emulator::internal::lastError = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError()
{
    return gsrq::emulator::internal::lastError;
}

const char* cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
        return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
        return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver:
        return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error)
{
    const std::string& detail = gsrq::emulator::internal::lastDetail;
    if (error != cudaSuccess && detail.rfind(cudaGetErrorName(error), 0) == 0)
        return detail.c_str(); // the emulator's reason for the last failure of this kind
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    default:
        return cudaGetErrorName(error);
    }
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes)
{
    return gsrq::emulator::internal::allocate(ptr, bytes, true);
}

cudaError_t cudaFree(void* ptr)
{
    return gsrq::emulator::internal::release(ptr, true);
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes)
{
    return gsrq::emulator::internal::allocate(ptr, bytes, false);
}

cudaError_t cudaFreeHost(void* ptr)
{
    return gsrq::emulator::internal::release(ptr, false);
}

cudaError_t cudaMemGetInfo(std::size_t* freeBytes, std::size_t* totalBytes)
{
    if (!freeBytes || !totalBytes)
        return fail(cudaErrorInvalidValue);
    std::lock_guard lock(gsrq::emulator::internal::memoryMutex);
    *totalBytes = gsrq::emulator::internal::memoryLimit();
    *freeBytes = *totalBytes - gsrq::emulator::internal::deviceBytesInUse;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0)
        return cudaSuccess;
    if (const cudaError_t e = checkCopy(dst, bytes, src, bytes, kind, "cudaMemcpy"); e != cudaSuccess)
        return e;
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t)
{
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpy2D(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                         std::size_t height, cudaMemcpyKind kind)
{
    if (height == 0 || width == 0)
        return cudaSuccess;
    if (width > dpitch || width > spitch)
        return fail(cudaErrorInvalidValue, "cudaMemcpy2D: a row is wider than its pitch");
    const std::size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
    if (const cudaError_t e = checkCopy(dst, dspan, src, sspan, kind, "cudaMemcpy2D"); e != cudaSuccess)
        return e;
    for (std::size_t r = 0; r < height; ++r)
        std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                              std::size_t height, cudaMemcpyKind kind, cudaStream_t)
{
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes)
{
    if (bytes == 0)
        return cudaSuccess;
    if (!gsrq::emulator::internal::deviceRange(ptr, bytes))
        return fail(cudaErrorInvalidValue, "cudaMemset outside device memory");
    std::memset(ptr, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t)
{
    return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned)
{
    return makeHandle(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    return destroyHandle(stream);
}

cudaError_t cudaStreamSynchronize(cudaStream_t)
{
    return cudaSuccess; // work ran when it was enqueued
}

cudaError_t cudaEventCreate(cudaEvent_t* event)
{
    return makeHandle(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return destroyHandle(event);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t)
{
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    event->at = std::chrono::steady_clock::now();
    event->recorded = true;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms || !start || !end || !start->recorded || !end->recorded)
        return fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
    return cudaSuccess;
}
