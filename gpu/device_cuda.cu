#include "device.h"

#include <cuda_runtime.h>

#include <string>

namespace gsrq::gpu {

DeviceQuery queryDevices()
{
    DeviceQuery q;
    q.builtWithCuda = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        q.message = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err) + "; the CPU backend is used";
        return q;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        const cudaError_t e = cudaGetDeviceProperties(&prop, i);
        if (e != cudaSuccess) {
            q.message = std::string("cudaGetDeviceProperties(") + std::to_string(i) + ") failed: " + cudaGetErrorString(e);
            continue;
        }
        q.devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount});
    }
    if (q.devices.empty() && q.message.empty())
        q.message = "no CUDA device found; the CPU backend is used";
    return q;
}

} // namespace gsrq::gpu
