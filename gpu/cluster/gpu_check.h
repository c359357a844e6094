#pragma once
// GPU against CPU on seeded synthetic data: the checks `gsrq check-gpu` prints and the GPU test
// suite asserts, in one place so that machines without Qt run them too. No CUDA types.

#include "gpu/cluster/cuda_backend.h"

#include <functional>
#include <string>
#include <vector>

namespace gsrq::gpu {

struct CheckItem {
    std::string name;           // "km labels", "gsrq nmse", ...
    double value = 0;           // what was measured
    double limit = 0;           // the bound it is held to
    bool lowerIsBetter = true;  // value ≤ limit passes (else value ≥ limit)
    bool informational = false; // shown, not part of the verdict (TF32 accuracy)
    std::string detail;
    bool pass() const { return informational || (lowerIsBetter ? value <= limit : value >= limit); }
};

struct GpuCheckReport {
    std::string device;
    std::vector<CheckItem> items;
    std::int64_t devicePasses = 0; // assignment passes that ran on the GPU
    bool pass() const;
};

// Runs every check on the device `options` names (Error as makeCudaBackend when it cannot).
// log: one line per check as it finishes.
GpuCheckReport runGpuCheck(const CudaOptions& options, const std::function<void(const std::string&)>& log = {});

} // namespace gsrq::gpu
