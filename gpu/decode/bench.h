#pragma once
// The decode-latency benchmark: contexts × batches × paths, each point checked against the CPU
// reference before it is timed, with its roofline beside it. The options, points and report are
// plain data (recorded by core/jobs); runDecodeBench, which needs a CUDA build and a device, is
// declared with the device cache in decode.h.

#include "gpu/decode/roofline.h"

#include <functional>
#include <string>
#include <vector>

namespace gsrq::gpu {

struct DecodeBenchOptions {
    DecodeShape shape{32, 8, 128};
    double ropeTheta = 10000;
    int layers = 1;
    std::vector<std::int64_t> contexts{1024, 8192, 32768, 65536, 131072};
    std::vector<int> batches{1, 8, 16, 32};
    int device = 0;
    int reps = 25, warmup = 5; // timed runs (median) and untimed ones first
    std::uint64_t seed = 1;
    bool verify = true;
    double l2BytesPerSecond = 0; // the L2's rate for the rooflines, when measured (else estimated)
    std::vector<DecodePath> paths{DecodePath::Fp16, DecodePath::Paper, DecodePath::Lookup};
};

struct DecodeBenchPoint {
    std::int64_t context = 0;
    int batch = 0;
    DecodePath path = DecodePath::Fp16;
    std::string skipped; // why the point did not run (memory, shape); the rest is then unset
    double seconds = 0;  // median per layer and decode step
    double minSeconds = 0, maxSeconds = 0;
    double bytes = 0; // bytes the step must read at least (cache, codebooks, queries)
    double bytesPerSecond = 0;
    double relError = -1; // ‖out − ref‖ / ‖ref‖ against the CPU reference (sequence 0); −1: not verified
    bool verified = false;
    double speedupVsFp16 = 0; // our FP16 kernel's time over this path's (0 when not timed)
    int splits = 0;
    DecodeCosts costs;           // the path's model (see decodeCosts)
    Roofline roofline;           // its time at the device's rates
    double rooflineFraction = 0; // roofline time over the measured time (1: at the roofline)
    bool paperBins = false;      // paper path: values through per-codeword weights
};

struct DecodeBenchReport {
    DeviceInfo device;
    double copyBytesPerSecond = 0; // measured device-to-device copy (bytes read + written per second)
    double appendSeconds = 0;      // quantize-and-pack of one token per sequence (batch of the first point)
    DecodeRates rates;             // the rooflines' rates
    int dim = 0, stages = 0, k = 0;
    std::string codebookSource; // the file, or "synthetic"
    std::vector<DecodeBenchPoint> points;
    bool allVerified() const;
};

// Verification tolerance on the relative output error: FP32 accumulation over FP16 data lands near
// 1e-6..1e-5; 1e-3 leaves room for exp2f and long contexts, and catches any indexing error.
inline constexpr double kDecodeTolerance = 1e-3;

// Synthetic codebooks for the benchmark when none are given: Gaussian codewords whose scale halves
// every two stages, like trained residual stages (the timing does not depend on their values).
Codebooks syntheticDecodeBooks(const DecodeShape& shape, int dim, int stages, int k, std::uint64_t seed);

} // namespace gsrq::gpu
