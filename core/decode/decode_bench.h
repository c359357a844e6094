#pragma once
// The decode-latency benchmark's plain data, the same for every backend (the CPU's, core/decode/
// cpu_decode.h; a CUDA device's, gpu/decode/decode.h): the decode paths, what a step moves and
// computes, the rates a roofline divides by, and the sweep's options, points and report. Recorded by
// core/jobs; drawn by the Latency page.

#include "core/cluster/quantizer.h"
#include "core/lm/decode_cache.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gsrq {

enum class DecodePath { Fp16, Paper, Lookup };
const char* decodePathName(DecodePath path); // "fp16", "paper", "lookup"

enum class DecodeBackend { Cpu, Cuda };
const char* decodeBackendName(DecodeBackend backend); // "cpu", "cuda"

// What one decode step of a path moves and computes, for the whole batch and every KV head: bytes
// from memory (HBM on a GPU, DRAM on the CPU: the cache, codebooks once, queries and outputs, split
// partials), bytes from the L2 (codewords gathered), bytes through a GPU's shared memory, table
// lookups (the CPU's lookup path: one load or read-modify-write of a group's table entry) and FLOPs.
struct DecodeCosts {
    double memoryBytes = 0, l2Bytes = 0, sharedBytes = 0, lookups = 0, flops = 0;
};

// The rates a roofline divides by (per second); a rate of 0 leaves its term out.
struct DecodeRates {
    double memory = 0, l2 = 0, shared = 0, lookups = 0, flops = 0;
    std::string memoryName = "hbm"; // what the memory term is called in a bound: "hbm" or "dram"
    std::string l2Source;           // where the L2 rate comes from
};

struct Roofline {
    double seconds = 0;
    std::string bound; // the term that sets the time: the memory's name, "l2", "shared", "lookups" or "flops"
};
Roofline roofline(const DecodeCosts& costs, const DecodeRates& rates);

struct DecodeBenchOptions {
    DecodeBackend backend = DecodeBackend::Cuda;
    DecodeShape shape{32, 8, 128};
    double ropeTheta = 10000;
    int layers = 1;
    std::vector<std::int64_t> contexts{1024, 8192, 32768, 65536, 131072};
    std::vector<int> batches{1, 8, 16, 32};
    int device = 0;            // CUDA device index
    int threads = 0;           // CPU threads; 0: one per core
    std::string isa;           // CPU kernels by name ("avx512", "avx2", "portable"); empty: the widest this CPU runs
    int reps = 25, warmup = 5; // timed runs (median) and untimed ones first
    std::uint64_t seed = 1;
    bool verify = true;
    double l2BytesPerSecond = 0; // a GPU L2's rate for the rooflines, when measured (else estimated)
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
    double relError = -1; // ‖out − ref‖ / ‖ref‖ against the double reference (sequence 0); −1: not verified
    bool verified = false;
    // The FP16 path's time over this path's (0 when not timed): on the CPU the median over repetitions
    // of the two runs' ratio in each (pairedSpeedup), on a GPU the ratio of their medians.
    double speedupVsFp16 = 0;
    int splits = 0;
    DecodeCosts costs;           // the path's model
    Roofline roofline;           // its time at the machine's rates
    double rooflineFraction = 0; // roofline time over the measured time (1: at the roofline)
    double latencyModelSeconds =
        0;                  // GPU FP16 and lookup points: the latency model's time (gpu/decode/roofline.h; 0: none)
    bool paperBins = false; // paper path: values through per-codeword weights
    double eigenFp32Seconds = 0; // CPU FP16 points: Eigen FP32 dense attention on the same cache (median; 0: not run)
    // CPU FP16 points: the same FP16 rows read and nothing else, with the same threads, timed in
    // alternation with the steps (median): the step's time at the memory's speed at those moments.
    double readRowsSeconds = 0;
};

struct DecodeBenchReport {
    DecodeBackend backend = DecodeBackend::Cuda;
    std::string device;            // "NVIDIA H100 (device 0)", or the CPU's model name
    double nominalBandwidth = 0;   // a GPU's nominal memory bandwidth (bytes/s), when known
    double copyBytesPerSecond = 0; // GPU: measured device-to-device copy (bytes read + written per second)
    double readBytesPerSecond = 0; // CPU: measured read bandwidth with the run's threads
    int threads = 0;               // CPU threads
    std::string isa;               // CPU: the instruction set the kernels were built for
    double appendSeconds = 0;      // quantize-and-pack of one token per sequence (batch of the first point)
    DecodeRates rates;             // the rooflines' rates
    int dim = 0, stages = 0, k = 0;
    std::string codebookSource; // the file, or "synthetic"
    std::vector<DecodeBenchPoint> points;
    bool allVerified() const; // no point that was checked failed (--no-verify checks none)
};

// Verification tolerance on the relative output error: FP32 accumulation over FP16 data lands near
// 1e-6..1e-5; 1e-3 leaves room for a fast exp2 and long contexts, and catches any indexing error.
inline constexpr double kDecodeTolerance = 1e-3;

// Synthetic codebooks for the benchmark when none are given: Gaussian codewords whose scale halves
// every two stages, like trained residual stages (the timing does not depend on their values).
Codebooks syntheticDecodeBooks(const DecodeShape& shape, int dim, int stages, int k, std::uint64_t seed);

// Stages R that give `bpa` bits per activation with K = 256 (a byte per code) and subspaces of
// `dim` features: R = bpa · dim / 8. Error(InvalidInput) naming --bpa when that is not whole.
int decodeStagesForBpa(double bpa, int dim);

// Why key and value codebooks cannot serve a decode cache of this shape (Error(InvalidInput)): they
// must cover kv-heads × head-dim features and share D, R and K.
void checkDecodeBooks(const DecodeShape& shape, const Codebooks& keyBooks, const Codebooks& valueBooks);

// A point's check against the reference (sequence 0 of `out`): sets relError and verified, and
// skipped when it fails. Returns whether it passed.
bool verifyDecodePoint(DecodeBenchPoint& p, const MatrixRF& out, const Eigen::VectorXd& ref);

// A point's timing from its timed runs (seconds per layer and step): median, extremes and bytes read
// over time. Its speed-up over FP16 is the runner's (see speedupVsFp16).
void timeDecodePoint(DecodeBenchPoint& p, std::vector<double> seconds, double bytes);

// A path's speed-up over FP16 from runs timed in turn: the median over repetitions of the FP16 run's
// time over the path's run of the same repetition (pairs up to the shorter list; 0 for none).
double pairedSpeedup(const std::vector<double>& fp16Seconds, const std::vector<double>& pathSeconds);

// Codebooks rounded to FP16, as floats: what the decode paths compute with (they store FP16).
Codebooks codebooksRoundedToHalf(const Codebooks& books);

// ‖out − ref‖ / ‖ref‖; infinite when out has a non-finite element.
double decodeRelativeError(const Eigen::VectorXd& out, const Eigen::VectorXd& ref);

// The double reference (core/lm/decode_cache.h) of `path` for sequence 0 of a decode cache (the CPU's
// or a device's: anything with tokens(), fp16Keys/Values(0), key/valueCodes(0) and the FP16-rounded
// codebooks), query q0, cached tokens at positions 0, 1, … and the query after them.
template <typename Cache>
Eigen::VectorXd decodeReference(const Cache& c, DecodePath path, const Eigen::VectorXf& q0, const DecodeShape& s,
                                const std::vector<double>& invFreq)
{
    if (path == DecodePath::Fp16)
        return naiveAttention(q0.cast<double>(), c.fp16Keys(0).template cast<double>(),
                              c.fp16Values(0).template cast<double>(), s);
    if (path == DecodePath::Lookup)
        return lookupAttention(q0, c.keyCodes(0), c.keyBooks16(), c.valueCodes(0), c.valueBooks16(), s);
    std::vector<std::int64_t> pos(std::size_t(c.tokens()));
    for (std::size_t t = 0; t < pos.size(); ++t)
        pos[t] = std::int64_t(t);
    return decodeAttention(q0, c.tokens(), c.keyCodes(0), c.keyBooks16(), c.valueCodes(0), c.valueBooks16(), pos,
                           invFreq, s);
}

// The query of sequence b of a benchmark batch: depends on (seed, b) only, so sequence 0's is the
// same in every batch size and its reference is computed once per context.
MatrixRF decodeBenchQuery(int batch, const DecodeShape& shape, std::uint64_t seed);

} // namespace gsrq
