#pragma once
// Launchers of the decode kernels (decode_kernels.cu). Internal to gsrq_gpu, like cluster_kernels.h.
//
// Device layouts, per layer (b: sequence of the batch, g: KV head, m = g·S + s: subspace, S = headDim/D
// subspaces per KV head, t: cached token, r: stage):
//   codes       [B][M][capacity][bytesPerToken]   PackedCodes' layout per sequence (decode_cache.h)
//   books16     [M][R][K][D]  FP16 codewords, what the decode paths read
//   books32T    [M][R][D][K]  FP32 codewords, transposed, and norms32 [M][R][K] = ‖c‖², what
//                             quantize-and-pack reads (thread k reads codeword k's feature j at j·K + k)
//   fp16 cache  [B][G][capacity][headDim]  keys, values of the FP16 baseline
//   queries     [B][H][headDim] FP32; outputs [B][H][headDim] FP32
// A cached token t sits at position positionOffset + t; the query at positionOffset + tokens.
// Softmax runs in base 2 (scores carry log2 e), so split partials (m, l) are base-2 too.

#include "gpu/decode/decode_math.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gsrq::gpu::kernels {

struct DecodeDims {
    int batch = 0, heads = 0, kvHeads = 0, headDim = 0;
    int dim = 0, stages = 0, k = 0, bits = 0, bytesPerToken = 0; // codebooks and packed codes
    std::int64_t tokens = 0, capacity = 0;
    int splits = 1;
    std::int64_t tokensPerSplit = 0;
    std::int64_t positionOffset = 0;
    bool stagedCodes = false; // the lookup step's split blocks stage their codes (lookupStagesCodes)
    bool chained = false;     // a step's launches after its first chained (launchChained: sm_90 and later)
    bool ropeWalk = true;     // the paper bins kernel walks its keys' RoPE (paperBinsWalk); the split kernel always
    GSRQ_HD int subspacesPerHead() const { return headDim / dim; }
    GSRQ_HD int subspaces() const { return kvHeads * subspacesPerHead(); }
    GSRQ_HD int group() const { return heads / kvHeads; }
};

// Most code words per token the kernels take (the largest GQA group, kMaxGroup, is in decode_math.h).
inline constexpr int kMaxCodeWords = 8; // R·log2 K ≤ 256 bits per token and subspace

// Quantize-and-pack: rows n (= batch × perSeq, row b·perSeq + i is sequence b's i-th new token) of
// keys and of values, F = M·D features each, are encoded greedily through the R stages (argmax of
// 2 r·c − ‖c‖², lowest index on ties, residual r −= c) and written at tokens t0 + i of the packed
// caches. One kernel for keys and values. codesOut (optional, n × 2 × M × R int32) receives the codes.
cudaError_t launchQuantizeAppend(const DecodeDims& d, const float* keys, const float* values, int perSeq,
                                 std::int64_t t0, const float* keyBooks32T, const float* keyNorms,
                                 const float* valueBooks32T, const float* valueNorms, std::uint8_t* keyCodes,
                                 std::uint8_t* valueCodes, std::int32_t* codesOut, cudaStream_t stream);

// FP16 rows (n = batch × perSeq) appended to the baseline's caches at t0.
cudaError_t launchAppendFp16(const DecodeDims& d, const float* keys, const float* values, int perSeq, std::int64_t t0,
                             std::uint16_t* k16, std::uint16_t* v16, cudaStream_t stream);

// Split partials of one decode step: acc [B][H][splits][headDim] (unnormalized), m, l [B][H][splits].
struct SplitPartials {
    float* acc = nullptr;
    float* m = nullptr;
    float* l = nullptr;
};

// FP16 split-K flash decoding with GQA: each block reads one KV head's tokens of one split once
// for all the query heads of its group, and the last block of each (sequence, KV head) merges the
// splits' partials into `out` (one launch; none written at one split). done: batch × kvHeads
// counters, zero before the first launch, which every launch leaves zero again.
cudaError_t launchFp16Decode(const DecodeDims& d, const float* q, const std::uint16_t* k16, const std::uint16_t* v16,
                             const SplitPartials& part, unsigned* done, float* out, cudaStream_t stream);

// Paper path: per token, unpack codes, sum the R FP16 codewords of key and value, rotate the key at
// its position (rotate-half RoPE; the query is rotated at its own), online softmax; nothing decoded
// goes to global memory. ropeTurns: headDim/2 pairs (hi, lo) of turnsPerPosition.
cudaError_t launchPaperDecode(const DecodeDims& d, const float* q, const std::uint8_t* keyCodes,
                              const std::uint16_t* keyBooks16, const std::uint8_t* valueCodes,
                              const std::uint16_t* valueBooks16, const float* ropeTurns, const SplitPartials& part,
                              cudaStream_t stream);

// Paper path with values through per-codeword weights: keys as launchPaperDecode decodes them; each
// token's softmax weight is added to the bins of its value codes (group × S·R·K floats of shared
// memory per block; paperBinsSharedBytes, static arrays included), written per split as the lookup path's weights, m
// and l; launchLookupCombine then gives the outputs. Values cost their codes' bytes, not their codewords'.
std::size_t paperBinsSharedBytes(const DecodeDims& d);
cudaError_t launchPaperBins(const DecodeDims& d, const float* q, const std::uint8_t* keyCodes,
                            const std::uint16_t* keyBooks16, const std::uint8_t* valueCodes, const float* ropeTurns,
                            float* weights, float* m, float* l, cudaStream_t stream);

// Combines split partials into outputs [B][H][headDim].
cudaError_t launchCombine(const DecodeDims& d, const SplitPartials& part, float* out, cudaStream_t stream);

// Whether the stage combine (launchLookupCombine), as loaded for the current device, was compiled
// for sm_90 or later (its PTX), so that its grid-dependency wait is in it and its launch may be
// chained (launchChained) to the paper bins kernel's; the caller checks the device's own compute
// capability.
bool lookupLaunchesChainable();

// Shared memory a block of the lookup step kernel holds (bytes, its static arrays included); callers
// check it against the device's opt-in limit.
std::size_t lookupSharedBytes(const DecodeDims& d);

// The lookup path's step, one launch: tables [B][H][S][R][K] = (q_h,s · codeword) · scale · log2 e,
// for keys stored after RoPE (q as given: already rotated); per split, scores as sums of table
// entries, and the softmax weight each value codeword collects: weights [B][H][splits][S][R][K], m
// and l [B][H][splits]; then the splits' weights merged and out = Σ_s,r,k W·codeword / l, per
// (sequence, KV head, subspace, stage) into stagePartials (lookupStagePartialFloats), added in stage
// order by the last of them. Each phase's blocks wait for the blocks of the phase before inside the
// launch. order holds lookupOrderCounters(d) counters and done batch × kvHeads, zero before the
// first launch, which every launch leaves zero again.
std::size_t lookupOrderCounters(const DecodeDims& d);
cudaError_t launchLookupStep(const DecodeDims& d, const float* q, const std::uint16_t* keyBooks16, float* tables,
                             const std::uint8_t* keyCodes, const std::uint8_t* valueCodes, float* weights, float* m,
                             float* l, const std::uint16_t* valueBooks16, float* stagePartials, unsigned* done,
                             float* out, unsigned* order, cudaStream_t stream);

// Shared memory a block of the stage combine holds, as lookupSharedBytes.
std::size_t lookupCombineSharedBytes(const DecodeDims& d);

// The paper path with bins, step 2: merges the splits' weights, then out = Σ_s,r,k W·codeword / l,
// as the lookup step's combine blocks do. One block per (sequence, KV head, subspace, stage), so the
// group's heads share each codebook read and a batch of one still fills the device; their partial
// outputs (stagePartials, lookupStagePartialFloats) are then added in stage order by the last of
// them to finish (one launch). done: batch × kvHeads counters, zero before the first launch, which
// every launch leaves zero again.
std::size_t lookupStagePartialFloats(const DecodeDims& d);
cudaError_t launchLookupCombine(const DecodeDims& d, const float* weights, const float* m, const float* l,
                                const std::uint16_t* valueBooks16, float* stagePartials, unsigned* done, float* out,
                                cudaStream_t stream);

// Fills caches with seeded pseudo-random codes (uniform over K) and FP16 rows (uniform in ±1) for
// tokens [t0, t1) of every sequence: the benchmark's synthetic cache, made on the device.
cudaError_t launchFillRandom(const DecodeDims& d, std::int64_t t0, std::int64_t t1, std::uint64_t seed,
                             std::uint8_t* keyCodes, std::uint8_t* valueCodes, std::uint16_t* k16, std::uint16_t* v16,
                             cudaStream_t stream);

} // namespace gsrq::gpu::kernels
