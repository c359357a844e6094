#pragma once
// Decode over the compressed KV cache on the CPU: one layer's cache for a batch of sequences (packed
// codes as core/lm/decode_cache.h lays them out, FP16 copies for the baseline) and the three decode
// paths, threaded over (sequence, KV head), and over tokens too when the threads outnumber those:
//   Fp16    flash-decoding over the FP16 keys and values: each KV row read once for its whole GQA
//           group, converted with F16C, online softmax with a vectorised exp2 (the baseline);
//   Lookup  keys after RoPE: a table of q·codeword per (subspace, stage, codeword) laid out
//           [stage][codeword][heads of the group], scores as sums of R table entries per subspace,
//           softmax weights binned by value codeword, then one product with the value codebooks;
//   Paper   keys before RoPE: each key decoded from its codewords and rotated at its position (as
//           the paper's decoder does), values binned as in Lookup. For reference: its per-token work
//           costs more than dense attention.
// The benchmark over these paths is runCpuDecodeBench (cpu_bench.h).

#include "core/cluster/quantizer.h"
#include "core/decode/decode_bench.h"
#include "core/lm/decode_cache.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gsrq {

struct CpuDecodeConfig {
    DecodeShape shape;
    int batch = 1;
    std::int64_t capacity = 0; // tokens per sequence
    bool fp16 = true;          // also keep the FP16 cache of the baseline
    double ropeTheta = 10000;  // the paper path's rotate-half RoPE
    int threads = 0;           // 0: one per core
    std::string isa;           // the kernels: empty for the widest this CPU runs, or a build by name
                               // ("avx512", "avx2", "portable"; Error(InvalidInput) when it cannot run)
};

// Why a shape cannot run on the CPU decode paths (empty when it can): head_dim a multiple of 16 up to
// 512; D a multiple of 8 that divides head_dim; at most 8 query heads per KV head; K a power of two
// up to 256 (a code fits a byte); R·log2 K ≤ 256 bits per token.
inline constexpr int kMaxDecodeThreads = 1024;
std::string cpuDecodeShapeProblem(const DecodeShape& shape, int dim, int stages, int k);

// The kernels the decode cache uses by default: the widest build this CPU runs ("avx512",
// "avx2+fma+f16c" or "portable").
const char* cpuDecodeIsa();
// The builds this CPU runs, narrowest first (the names CpuDecodeConfig::isa and --isa take).
std::vector<std::string> cpuDecodeIsas();
// Why `isa` names no build this CPU runs (empty when it does; "", "best" and "avx2" are accepted too).
std::string cpuDecodeIsaProblem(const std::string& isa);
// The CPU's model name (from /proc/cpuinfo), or "CPU".
std::string cpuModelName();
// Threads `requested` resolves to: itself when positive, else the cores this process may run on.
int cpuDecodeThreads(int requested);

class CpuDecodeCache {
public:
    // Error(InvalidInput) for shapes the paths do not take, codebooks that do not match, or a cache that
    // would not fit in memory (naming the bytes).
    CpuDecodeCache(const CpuDecodeConfig& config, const Codebooks& keyBooks, const Codebooks& valueBooks);
    ~CpuDecodeCache();
    CpuDecodeCache(const CpuDecodeCache&) = delete;
    CpuDecodeCache& operator=(const CpuDecodeCache&) = delete;

    std::int64_t tokens() const;
    const CpuDecodeConfig& config() const;
    int threads() const;
    const char* isa() const;

    // Appends new tokens to every sequence: keys and values (batch·n × kvHeads·headDim; row b·n + i
    // is sequence b's i-th new token) encoded through the R stages (greedy, as the quantizer's encode
    // with a beam of 1)
    // and packed, with their FP16 copies. Returns the codes chosen (keys, values), for checks.
    std::pair<Codes, Codes> append(const MatrixRF& keys, const MatrixRF& values);
    // The same rows as FP16 copies only, their codes left at code 0: a cache that only the FP16 path
    // reads pays no quantization (as an FP16 engine's would not). Error(InvalidInput) without FP16 rows.
    void appendFp16(const MatrixRF& keys, const MatrixRF& values);
    // Appends `tokens` seeded random tokens to every sequence (codes uniform over K, FP16 rows in
    // ±1): the benchmark's synthetic cache.
    void appendRandom(std::int64_t tokens, std::uint64_t seed);
    // Appends `tokens` tokens to every sequence that repeat the ones it holds (token t is a copy of
    // token t mod the count held): codes and FP16 rows copied, nothing encoded. A long context made
    // from a real prefill, cheaply. Error(InvalidInput) on an empty cache or past the capacity.
    void appendRepeat(std::int64_t tokens);

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
    void run(DecodePath path);      // the step, on this cache's threads; output() then holds it
    const MatrixRF& output() const; // batch × heads·headDim
    MatrixRF decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset = 0);
    // Token splits per (sequence, KV head) the path uses with this cache's threads.
    int splits(DecodePath path) const;

    // Reads the FP16 rows the FP16 path reads (every sequence's and KV head's cached keys and values),
    // with the same threads over (sequence, KV head), and does nothing else: the time a step of the
    // FP16 path would take at the memory's speed, measured beside it. Returns a fold of the bytes.
    std::uint64_t readFp16Rows();

    // Median time of quantize-and-pack of one new token per sequence (written at the next free slot,
    // which stays free), over `reps` runs.
    double timeAppend(int reps);

    struct Impl;

private:
    std::pair<Codes, Codes> appendRows(const MatrixRF& keys, const MatrixRF& values, bool quantize);
    std::unique_ptr<Impl> m;
};

} // namespace gsrq
