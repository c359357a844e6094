#pragma once
// What one decode step over the compressed KV cache costs on a CUDA device, in pure arithmetic (no
// device, no CUDA types): how a context is split across blocks, which shapes the kernels take, and
// the roofline model (bytes moved from HBM, the L2 and shared memory, and FLOPs, divided by the
// device's rates; the paths and the roofline's types are core/decode/decode_bench.h's). Built into
// every gsrq and tested on the CPU.

#include "core/decode/decode_bench.h"
#include "core/lm/decode_cache.h"
#include "gpu/device/device.h"
#include "gpu/device/kernel_cost.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gsrq::gpu {

// How a context is cut for split-K decode: `splits` blocks a (sequence, KV head) or query head, each
// over tokensPerSplit tokens (a whole multiple of 32), none empty. The planners below choose it.
struct SplitPlan {
    int splits = 1;
    std::int64_t tokensPerSplit = 0;
};
// The FP16 kernel's splits: its resident blocks per multiprocessor from its layout (fp16BlocksPerSm:
// threads, registers at the kernel's cap, shared memory; a multiprocessor's shared memory is the
// per-block opt-in plus the 1 KiB the device reserves per block, on sm_80 to sm_90), then, as
// FlashAttention-3's heuristic chooses, the fewest splits whose waves are at least 85% as full as
// the fullest count's, none under kMinSplitTokens tokens, in whole multiples of 32 tokens.
SplitPlan planFp16Splits(std::int64_t tokens, int batch, int kvHeads, int headDim, int group, int multiprocessors,
                         std::size_t sharedOptin);
int fp16ResidentBlocks(int headDim, int group, std::size_t sharedOptin); // per multiprocessor
// The plan's blocks over its waves' resident slots (1: every wave full).
double fp16WaveEfficiency(const SplitPlan& plan, int batch, int kvHeads, int headDim, int group, int multiprocessors,
                          std::size_t sharedOptin);
// The lookup path's splits: a block per (split, query head, sequence), its resident blocks per
// multiprocessor from the step's shared memory (one head's tables, bins and row maxima, or the
// combine blocks' for the GQA group and at most kLookupMaxSplits splits) and its __launch_bounds__
// (kLookupMinBlocks), then the split count with the shortest critical path, as
// for the paper path below (its threads walk their tokens one after another), none under
// kMinBinnedSplitTokens, at most kLookupMaxSplits (each split's bins are written and merged).
inline constexpr std::int64_t kLookupMaxSplits = 64;
int lookupResidentBlocks(int group, int subspaces, int stages, int k, std::size_t sharedOptin);
SplitPlan planLookupSplits(std::int64_t tokens, int batch, int heads, int group, int subspaces, int stages, int k,
                           int multiprocessors, std::size_t sharedOptin);
// The paper path's kernels, the bins kernel (`bins`) or the split kernel that sums value codewords:
// resident blocks per multiprocessor from their 128 threads, the registers nvcc gives them on sm_90
// (kPaperBinsRegisters or kPaperBinsWalkRegisters, kPaperSplitRegisters; allocated per warp in
// units of 256) and their shared
// memory with the 1 KiB a block the device reserves (the bins kernel's with the RoPE walk where it
// walks, `ropeWalk`). Their splits: each block is a chain of dependent codeword gathers (by the
// latency model, paperLatencyModel, latency- not bandwidth-bound), so the count with the shortest
// critical path over those blocks, waves × tokens per split (the fewer splits on a tie), rather
// than the FP16 kernel's fewest splits at 85% wave efficiency, which would take fewer, longer
// chains; none under kMinBinnedSplitTokens (bins) or kMinSplitTokens tokens, at most
// kPaperMaxSplits (the split kernel's combine reads each split's partials one after another).
inline constexpr std::int64_t kPaperMaxSplits = 64;
int paperResidentBlocks(const DecodeShape& shape, int dim, int stages, int k, bool bins, bool ropeWalk,
                        std::size_t sharedOptin);
SplitPlan planPaperSplits(std::int64_t tokens, int batch, const DecodeShape& shape, int dim, int stages, int k,
                          bool bins, int multiprocessors, std::size_t sharedOptin);
// The shortest split: the split-K paths' (FP16, paper by codeword sums), and the binned paths' (lookup,
// paper with bins), whose per-split bins cost more than the split-K partials.
inline constexpr std::int64_t kMinSplitTokens = 256;
inline constexpr std::int64_t kMinBinnedSplitTokens = 1024;

// Why a shape cannot run on the decode kernels (empty when it can): head_dim 64, 128 or 256; D a
// multiple of 8 that divides head_dim; at most 8 query heads per KV head; R·log2 K ≤ 256 bits.
std::string decodeShapeProblem(const DecodeShape& shape, int dim, int stages, int k);

// What one decode step of a path moves and computes on a CUDA device, for the whole batch and every
// KV head: bytes from HBM (the cache, codebooks once, queries and outputs, split partials), bytes
// gathered from the L2 (codewords), bytes through shared memory (tables and bins, read and written)
// and FLOPs.
struct DecodeCostCase {
    DecodeShape shape;
    int dim = 0, stages = 0, k = 0;
    std::int64_t context = 0;
    int batch = 1;
    int splits = 1;          // as planned for the path
    bool paperBins = true;   // paper path: values through per-codeword weights (else codewords summed)
    bool codesStaged = true; // lookup path: its tokens' codes staged where small enough (lookupStagesCodes)
    bool ropeWalk = true;    // paper path with bins: keys' RoPE walked (paperBinsWalk), else sincospif a token
};
DecodeCosts decodeCosts(DecodePath path, const DecodeCostCase& c);

// The launches of one step of `path`, in launch order. Assumes the bins are never rescaled (the
// running maximum passing its reference by 2^8 after the first tile: rare, and it costs a pass over
// the bins) and every codeword is read (at contexts past a few times K tokens almost surely).
// decodeCosts is their sum.
std::vector<KernelCost> decodeKernelCosts(DecodePath path, const DecodeCostCase& c);

// A latency model of the FP16 step beside the byte model. Its constants are estimates, not
// measurements (no device has timed them here): a launch with its drain 3 µs, an HBM load under load
// 0.7 µs, an L2 load 0.3 µs. The step is one launch; its blocks run in waves of the resident slots
// (fp16ResidentBlocks × SMs); a block's tiles form a chain in which each waits about one HBM
// latency (the two-stage pipeline has one tile in flight while it reads the other); the step's
// bytes cannot pass the copy rate; the last block's merge adds its L2 round trips (the weights pass,
// a warp per head over the splits 32 at a time, then the features' pass, 8 splits' loads in flight).
struct Fp16LatencyModel {
    double seconds = 0; // launch + max(bandwidth, waves × chain) + merge
    double launch = 0, chain = 0, bandwidth = 0, merge = 0;
    int waves = 0, blocksPerSm = 0;
    std::int64_t tilesPerBlock = 0;
    std::string bound; // "latency" or "bandwidth"
};
inline constexpr double kLaunchSecondsEstimate = 3e-6;
inline constexpr double kHbmLatencyEstimate = 0.7e-6;
inline constexpr double kL2LatencyEstimate = 0.3e-6;
Fp16LatencyModel fp16LatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                  double copyBytesPerSecond);

// The same kind of latency model for the lookup path's one launch (estimates, with the FP16 model's
// constants and a shared-memory read or atomic on a thread's path of 30 ns): the table blocks' waves
// (each an HBM latency and a thread's D/8 codeword loads from the L2, 4 in flight, per codeword and
// kLookupTableHeads heads) and the split blocks' wait for their count (an L2 round trip); the split
// blocks' waves, each block copying its tables in (a load of 8 per thread in flight at a time) and
// then walking its tokens a thread at a time, each token's S·R table reads and bin atomics in a
// chain, and its codes' HBM latency too where they are not staged (where they are, the next token's
// codes are in flight during this one's work), or if longer the step's bytes at the copy rate less
// the table and combine terms; the combine blocks' wait for their count (an L2 round trip), then
// their warps reading the splits' maxima and sums 32 splits at a time (twice), their threads merging
// the splits' weights 8 at a time and reading their K/parts codewords 4 at a time per
// kLookupTableHeads heads, and the last block adding the R stages 4 at a time.
struct LookupLatencyModel {
    double seconds = 0; // 1 launch + tables + split + combine
    double launches = 0, tables = 0, split = 0, combine = 0;
    int waves = 0, blocksPerSm = 0;
    std::int64_t tokensPerThread = 0;
    bool codesStaged = false;
};
inline constexpr double kSharedOpEstimate = 30e-9;
LookupLatencyModel lookupLatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                      double copyBytesPerSecond);

// The same kind of latency model for the paper path (estimates, with the models' constants above):
// its kernel's waves of resident blocks (128 threads, the registers of kPaperBinsRegisters or
// kPaperSplitRegisters, shared memory), each block's setup (an HBM latency for the queries and RoPE
// turns) and then its steps one after another, U tokens a row of lanes a step (their chains
// overlap): a step's key codewords gathered from the L2 4 stages at a time (ceil(R/4) L2 latencies;
// where the codes are not staged each round waits on its code word too, and the step's first on
// HBM), the scores' lane sums (log2 of the lanes a row shuffles, kShuffleEstimate each), and with
// bins the block's maximum (two barriers, kBarrierEstimate each) and the value bins' atomics, or
// without bins the value codewords gathered beside the keys; then the combine as the lookup path's
// (with bins: the stage combine; without: one block per query head reading the splits). The step's
// bytes at the copy rate bound it from below. Two launches.
struct PaperLatencyModel {
    double seconds = 0; // 2 launches + split + combine
    double launches = 0, split = 0, combine = 0, step = 0;
    int waves = 0, blocksPerSm = 0;
    std::int64_t stepsPerBlock = 0;
    bool codesStaged = false;
};
inline constexpr double kShuffleEstimate = 25e-9;
inline constexpr double kBarrierEstimate = 50e-9;
PaperLatencyModel paperLatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                    double copyBytesPerSecond);

// A path's latency-model seconds (the three above; the case's paperBins is read by the paper path's).
double decodeLatencyModel(DecodePath path, const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                          double copyBytesPerSecond);

// HBM: the measured device-to-device copy (bytes read + written per second); shared memory: 128
// bytes per clock per SM (32 banks of 4 bytes, the CUDA programming guide) at the peak clock; FP32:
// the device's peak; L2: `l2Rate` when given (bytes/s, measured), else an estimate of 2.5 × the
// HBM rate, which l2Source says.
DecodeRates decodeRates(const DeviceInfo& device, double copyBytesPerSecond, double l2Rate = 0);

// A named device's rates, for rooflines without the device (gsrq bench-decode --model-device): its
// facts (SMs, clock, FP32 peak), the HBM rate the model divides by (where it comes from in `source`),
// and its shared memory per block with the opt-in.
struct DeviceModel {
    std::string name; // "h100", "h200"
    DeviceInfo info;
    double copyBytesPerSecond = 0;
    std::string source;
    std::size_t sharedOptin = 0;
    double tf32Flops = 0; // dense TF32 tensor-core peak (the datasheet's)
};
const DeviceModel* findDeviceModel(const std::string& name); // null for a name not in deviceModelNames()
std::string deviceModelNames();                              // "h100, h200"

// The decode benchmark's points from the model alone, for D, R, K on `model`: each point's time is
// its roofline at the model's rates, split as the kernels would split it on that device (SMs, and
// whether the paper path's bins fit in its shared memory); nothing runs and nothing is verified. The
// sweep is the one every backend runs (core/decode/decode_sweep.h), each point one "repetition".
DecodeBenchReport modelDecodeBench(const DecodeBenchOptions& options, int dim, int stages, int k,
                                   const DeviceModel& model,
                                   const std::function<void(const DecodeBenchPoint&)>& onPoint = {});

} // namespace gsrq::gpu
