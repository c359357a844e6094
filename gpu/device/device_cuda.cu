#include "gpu/device/device.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

namespace gsrq::gpu {

DeviceQuery queryDevices()
{
    DeviceQuery q;
    q.builtWithCuda = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        // In plain words where the cause is the machine's: the runtime reports a missing driver as
        // an "insufficient" one, which sends users looking for an upgrade they cannot install.
        bool driver = false;
        if (void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
            driver = true;
            dlclose(lib);
        }
        if (!driver)
            q.message = "no NVIDIA driver on this machine (libcuda.so.1 not found)";
        else if (err == cudaErrorInsufficientDriver)
            q.message = std::string("the NVIDIA driver is older than this build's CUDA runtime needs "
                                    "(cudaGetDeviceCount: ") +
                        cudaGetErrorString(err) + ")";
        else if (err == cudaErrorNoDevice)
            q.message = "no CUDA device found";
        else
            q.message = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
        return q;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        const cudaError_t e = cudaGetDeviceProperties(&prop, i);
        if (e != cudaSuccess) {
            q.message =
                std::string("cudaGetDeviceProperties(") + std::to_string(i) + ") failed: " + cudaGetErrorString(e);
            continue;
        }
        DeviceInfo d{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount};
        int clockKHz = 0, memKHz = 0, busBits = 0;
        cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, i);
        cudaDeviceGetAttribute(&memKHz, cudaDevAttrMemoryClockRate, i);
        cudaDeviceGetAttribute(&busBits, cudaDevAttrGlobalMemoryBusWidth, i);
        d.clockHz = clockKHz * 1e3;
        d.peakFp32Flops = double(d.multiprocessors) * fp32LanesPerSm(d.computeMajor, d.computeMinor) * 2.0 * d.clockHz;
        d.memoryBandwidth = 2.0 * memKHz * 1e3 * busBits / 8.0;
        d.l2Bytes = std::uint64_t(prop.l2CacheSize);
        q.devices.push_back(d);
    }
    if (q.devices.empty() && q.message.empty())
        q.message = "no CUDA device found";
    return q;
}

} // namespace gsrq::gpu
