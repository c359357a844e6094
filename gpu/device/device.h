#pragma once
// GPU discovery, with no CUDA types in this header (it is included by the CLI and, later, the app).
// Thread-safety: queryDevices() may be called from any thread.

#include <cstdint>
#include <string>
#include <vector>

namespace gsrq::gpu {

struct DeviceInfo {
    int index = 0;
    std::string name;
    std::uint64_t memoryBytes = 0;
    int computeMajor = 0, computeMinor = 0;
    int multiprocessors = 0;
    double clockHz = 0;         // peak SM clock
    double peakFp32Flops = 0;   // SMs × FP32 lanes per SM × 2 (FMA) × clock
    double memoryBandwidth = 0; // bytes/s: 2 (DDR) × memory clock × bus width / 8
    std::uint64_t l2Bytes = 0;
};

// FP32 lanes per SM for a compute capability (the CUDA programming guide's throughput table).
int fp32LanesPerSm(int major, int minor);

struct DeviceQuery {
    bool builtWithCuda = false;
    std::vector<DeviceInfo> devices;
    std::string message; // why the list is empty: no CUDA build, no driver, no device (with the CUDA error)
};

DeviceQuery queryDevices();

} // namespace gsrq::gpu
