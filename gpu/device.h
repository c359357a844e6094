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
};

struct DeviceQuery {
    bool builtWithCuda = false;
    std::vector<DeviceInfo> devices;
    std::string message; // why the list is empty: no CUDA build, no driver, no device (with the CUDA error)
};

DeviceQuery queryDevices();

} // namespace gsrq::gpu
