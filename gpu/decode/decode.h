#pragma once
// Decode over the compressed KV cache on a CUDA device, behind a header with no CUDA types: a
// device-resident cache for a batch of sequences (quantize-and-pack on the device, FP16 copies
// for the baseline) and the three decode paths. The CPU references the paths are held to are in
// core/lm/decode_cache.h; the kernels and layouts in decode_kernels.h; the cost model in
// roofline.h; the benchmark's data in core/decode/decode_bench.h. A build without CUDA has only the factory, which says
// so.

#include "core/decode/decode_bench.h"
#include "gpu/decode/roofline.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gsrq::gpu {

struct DecodeCacheConfig {
    DecodeShape shape;
    int batch = 1;
    std::int64_t capacity = 0; // tokens per sequence
    int device = 0;
    bool fp16 = true;         // also keep the FP16 cache of the baseline
    double ropeTheta = 10000; // the paper path's rotate-half RoPE
    void* stream = nullptr;   // a cudaStream_t to work on (caches of one model's layers share one); null: own
};

// One layer's cache for `batch` sequences on the device, made by makeDeviceDecodeCache (below).
class DeviceDecodeCache {
public:
    virtual ~DeviceDecodeCache() = default;
    DeviceDecodeCache() = default;
    DeviceDecodeCache(const DeviceDecodeCache&) = delete;
    DeviceDecodeCache& operator=(const DeviceDecodeCache&) = delete;

    virtual std::int64_t tokens() const = 0;
    virtual const DecodeCacheConfig& config() const = 0;

    // Quantize-and-pack on the device: keys and values (batch·n × kvHeads·headDim; row b·n + i is
    // sequence b's i-th new token) are encoded through the R stages and appended, with their FP16
    // copies. Returns the codes chosen (batch·n × M·R for keys, then values), for checks.
    virtual std::pair<Codes, Codes> append(const MatrixRF& keys, const MatrixRF& values) = 0;
    // Appends `tokens` seeded random tokens to every sequence (codes uniform over K, FP16 rows in
    // ±1): the benchmark's synthetic cache, made on the device.
    virtual void appendRandom(std::int64_t tokens, std::uint64_t seed) = 0;

    virtual PackedCodes keyCodes(int sequence) const = 0;
    virtual PackedCodes valueCodes(int sequence) const = 0;
    virtual MatrixRF fp16Keys(int sequence) const = 0; // tokens × kvHeads·headDim, the FP16 values as floats
    virtual MatrixRF fp16Values(int sequence) const = 0;
    // The codebooks as the decode paths read them (rounded to FP16), for references.
    virtual const Codebooks& keyBooks16() const = 0;
    virtual const Codebooks& valueBooks16() const = 0;

    // One decode step. q: batch × heads·headDim (before RoPE for Paper, after for Lookup, as is for
    // Fp16). Cached token t is at position positionOffset + t, the query at positionOffset + tokens.
    virtual void setQuery(const MatrixRF& q, std::int64_t positionOffset = 0) = 0;
    virtual void enqueue(DecodePath path) = 0; // asynchronous, on the cache's stream
    virtual MatrixRF output() = 0;             // waits, then batch × heads·headDim
    virtual MatrixRF decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset = 0) = 0;
    virtual SplitPlan plan(DecodePath path) const = 0;
    // Why this path cannot run for this shape on this device (shared memory), or empty.
    virtual std::string pathProblem(DecodePath path) const = 0;
    // Whether the paper path takes values through per-codeword weights (its bins fit in a block's
    // shared memory) rather than summing each token's value codewords.
    virtual bool paperUsesBins() const = 0;

    // Median device time of quantize-and-pack of one new token per sequence (written at the next
    // free slot, which stays free), over `reps` runs.
    virtual double timeAppend(int reps) = 0;

    virtual void synchronize() = 0;
    virtual void* stream() const = 0; // cudaStream_t
};

// Throws Error(InvalidInput) for shapes the kernels do not take or codebooks that do not match,
// Error(Runtime) without a device, for a build without CUDA, or when device memory runs out (naming
// the bytes asked for).
std::unique_ptr<DeviceDecodeCache> makeDeviceDecodeCache(const DecodeCacheConfig& config, const Codebooks& keyBooks,
                                                         const Codebooks& valueBooks);

// Runs the sweep: for each context and batch, each path is verified (sequence 0 against the CPU
// reference on the same codes), warmed up, and timed with CUDA events, flushing the L2 between
// runs. onPoint sees each point as it is measured; stop() returning true ends the sweep
// between points.
DecodeBenchReport runDecodeBench(const DecodeBenchOptions& options, const Codebooks& keyBooks,
                                 const Codebooks& valueBooks, const std::string& codebookSource,
                                 const std::function<void(const DecodeBenchPoint&)>& onPoint = {},
                                 const std::function<bool()>& stop = {});

} // namespace gsrq::gpu
