#pragma once
// Decode over the compressed KV cache on a CUDA device, behind a header with no CUDA types: a
// device-resident cache for a batch of sequences (quantize-and-pack on the device, FP16 copies
// for the baseline), the three decode paths, and the decode-latency benchmark. The CPU references
// the paths are held to are in core/decode_cache.h; the kernels and layouts in decode_kernels.h.

#include "decode_cache.h"
#include "device.h"
#include "run_store.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gsrq::gpu {

enum class DecodePath { Fp16, Paper, Lookup };
const char* decodePathName(DecodePath path); // "fp16", "paper", "lookup"

// How a context is cut for split-K decode: enough blocks (batch × kvHeads × splits) for about two
// per multiprocessor, but no split under minTokens (each split pays a fixed cost: the lookup
// path's tables, the partials written and combined).
struct SplitPlan {
    int splits = 1;
    std::int64_t tokensPerSplit = 0;
};
SplitPlan planSplits(std::int64_t tokens, int batch, int kvHeads, int multiprocessors, std::int64_t minTokens);

// Why a shape cannot run on the decode kernels (empty when it can): head_dim 64, 128 or 256; D a
// multiple of 8 that divides head_dim; at most 8 query heads per KV head; R·log2 K ≤ 256 bits.
std::string decodeShapeProblem(const DecodeShape& shape, int dim, int stages, int k);

// Stages R that give `bpa` bits per activation with K = 256 (a byte per code) and subspaces of
// `dim` features: R = bpa · dim / 8. Error(InvalidInput) naming --bpa when that is not whole.
int decodeStagesForBpa(double bpa, int dim);

struct DecodeCacheConfig {
    DecodeShape shape;
    int batch = 1;
    std::int64_t capacity = 0; // tokens per sequence
    int device = 0;
    bool fp16 = true;         // also keep the FP16 cache of the baseline
    double ropeTheta = 10000; // the paper path's rotate-half RoPE
    void* stream = nullptr;   // a cudaStream_t to work on (caches of one model's layers share one); null: own
};

// One layer's cache for `batch` sequences on the device. Throws Error(InvalidInput) for shapes the
// kernels do not take or codebooks that do not match, Error(Runtime) without a device, for a
// build without CUDA, or when device memory runs out (naming the bytes asked for).
class DeviceDecodeCache {
public:
    DeviceDecodeCache(const DecodeCacheConfig& config, const Codebooks& keyBooks, const Codebooks& valueBooks);
    ~DeviceDecodeCache();
    DeviceDecodeCache(const DeviceDecodeCache&) = delete;
    DeviceDecodeCache& operator=(const DeviceDecodeCache&) = delete;

    std::int64_t tokens() const;
    const DecodeCacheConfig& config() const;

    // Quantize-and-pack on the device: keys and values (batch·n × kvHeads·headDim; row b·n + i is
    // sequence b's i-th new token) are encoded through the R stages and appended, with their FP16
    // copies. Returns the codes chosen (batch·n × M·R for keys, then values), for checks.
    std::pair<Codes, Codes> append(const MatrixRF& keys, const MatrixRF& values);
    // Appends `tokens` seeded random tokens to every sequence (codes uniform over K, FP16 rows in
    // ±1): the benchmark's synthetic cache, made on the device.
    void appendRandom(std::int64_t tokens, std::uint64_t seed);

    PackedCodes keyCodes(int sequence) const;
    PackedCodes valueCodes(int sequence) const;
    MatrixRF fp16Keys(int sequence) const; // tokens × kvHeads·headDim, the FP16 values as floats
    MatrixRF fp16Values(int sequence) const;
    // The codebooks as the decode paths read them (rounded to FP16), for references.
    const Codebooks& keyBooks16() const;
    const Codebooks& valueBooks16() const;

    // One decode step. q: batch × heads·headDim (before RoPE for Paper, after for Lookup, as is for
    // Fp16). Cached token t is at position positionOffset + t, the query at positionOffset + tokens.
    void setQuery(const MatrixRF& q, std::int64_t positionOffset = 0);
    void enqueue(DecodePath path); // asynchronous, on the cache's stream
    MatrixRF output();             // waits, then batch × heads·headDim
    MatrixRF decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset = 0);
    SplitPlan plan(DecodePath path) const;
    // Why this path cannot run for this shape on this device (shared memory), or empty.
    std::string pathProblem(DecodePath path) const;
    // Whether the paper path takes values through per-codeword weights (its bins fit in a block's
    // shared memory) rather than summing each token's value codewords.
    bool paperUsesBins() const;

    // Median device time of quantize-and-pack of one new token per sequence (written at the next
    // free slot, which stays free), over `reps` runs.
    double timeAppend(int reps);

    void synchronize();
    void* stream() const; // cudaStream_t

    struct Impl; // opaque

private:
    std::unique_ptr<Impl> m;
};

// ---- rooflines ----

// What one decode step of a path moves and computes, for the whole batch and every KV head: bytes
// from HBM (the cache, codebooks once, queries and outputs, split partials), bytes gathered from the
// L2 (codewords), bytes through shared memory (tables and bins, read and written) and FLOPs.
struct DecodeCosts {
    double hbmBytes = 0, l2Bytes = 0, sharedBytes = 0, flops = 0;
};
struct DecodeCostCase {
    DecodeShape shape;
    int dim = 0, stages = 0, k = 0;
    std::int64_t context = 0;
    int batch = 1;
    int splits = 1;        // as planned for the path
    bool paperBins = true; // paper path: values through per-codeword weights (else codewords summed)
};
DecodeCosts decodeCosts(DecodePath path, const DecodeCostCase& c);

// The rates a roofline divides by (per second).
struct DecodeRates {
    double hbm = 0, l2 = 0, shared = 0, flops = 0;
    std::string l2Source; // where the L2 rate comes from
};
// HBM: the measured device-to-device copy (bytes read + written per second); shared memory: 128
// bytes per clock per SM (32 banks of 4 bytes, the CUDA programming guide) at the peak clock; FP32:
// the device's peak; L2: `l2Rate` when given (bytes/s, measured), else an estimate of 2.5 × the
// HBM rate, which l2Source says.
DecodeRates decodeRates(const DeviceInfo& device, double copyBytesPerSecond, double l2Rate = 0);

struct Roofline {
    double seconds = 0;
    std::string bound; // "hbm", "l2", "shared" or "flops": the term that sets the time
};
Roofline roofline(const DecodeCosts& costs, const DecodeRates& rates);

// ---- the decode-latency benchmark ----

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

// Runs the sweep: for each context and batch, each path is verified (sequence 0 against the CPU
// reference on the same codes), warmed up, and timed with CUDA events, flushing the L2 between
// runs. onPoint sees each point as it is measured; stop() returning true ends the sweep
// between points.
DecodeBenchReport runDecodeBench(const DecodeBenchOptions& options, const Codebooks& keyBooks,
                                 const Codebooks& valueBooks, const std::string& codebookSource,
                                 const std::function<void(const DecodeBenchPoint&)>& onPoint = {},
                                 const std::function<bool()>& stop = {});

// A point in the run store: the series "<path> b=<batch>" (x: context, y: µs per layer and step),
// and its figures as metrics (scope "decode", method: the path, tensor: "b=<batch> ctx=<context>").
std::vector<SeriesPoint> decodeSeries(const DecodeBenchPoint& p);
std::vector<MetricRow> decodeMetrics(const DecodeBenchPoint& p);

// Synthetic codebooks for the benchmark when none are given: Gaussian codewords whose scale halves
// every two stages, like trained residual stages (the timing does not depend on their values).
Codebooks syntheticDecodeBooks(const DecodeShape& shape, int dim, int stages, int k, std::uint64_t seed);

} // namespace gsrq::gpu
