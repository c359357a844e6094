#pragma once
// The decode speed–quality frontier from the run store: for each decode path and codebook shape
// (D, R, K), the attention-output error of the latest train run of that shape (keys after RoPE for
// the lookup path, before it for the paper path) against the path's time per decode step in the
// latest bench-decode run of that shape on a GPU, at one context and batch. A GPU's measured runs
// take the place of modelled ones (gsrq bench-decode --model-device) for the same path and shape;
// modelled runs of different devices (an H100's, an H200's) stay apart.
// The Latency page draws it; tools/bench/frontier.sh fills the store for it.

#include "core/store/run_store.h"

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace gsrq {

// (D, R, K, keys after RoPE) → (mean attention relative L2 over the run's layers, train run id), of
// the latest train run of that shape with attention fidelity (strided codebooks left out: the decode
// paths refuse them).
using AttentionErrors = std::map<std::tuple<int, int, int, bool>, std::pair<double, std::int64_t>>;
AttentionErrors latestAttentionErrors(RunStore& store);

struct FrontierPoint {
    std::string path; // "paper", "lookup"
    int dim = 0, stages = 0, k = 0;
    double bpa = 0;
    double seconds = 0;    // per layer and decode step
    double error = 0;      // attention-output relative L2
    bool measured = false; // timed on a GPU (else the roofline of a modelled run)
    std::string device;    // the run's device ("model of the NVIDIA H200", "NVIDIA H200 (device 0)")
    std::int64_t decodeRun = 0, trainRun = 0;
};

struct DecodeFrontier {
    std::vector<FrontierPoint> points; // by path, then D (largest first), then bits, then device
    double fp16Seconds = 0;            // the FP16 path at the same point (measured where any point is), 0: none
    std::string fp16Device;
};

DecodeFrontier decodeFrontier(RunStore& store, std::int64_t context, int batch);

} // namespace gsrq
