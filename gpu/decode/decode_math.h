#pragma once
// Arithmetic shared by the decode kernels and the host: the same source runs on the device (nvcc
// compiles it __host__ __device__) and in the CPU tests, so what the kernels compute here is tested
// without a GPU.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GSRQ_HD __host__ __device__ __forceinline__
#else
#define GSRQ_HD inline
#endif

namespace gsrq::gpu {

// The decode kernels' block sizes, here so that the cost model (roofline.cpp) counts with the same.
inline constexpr int kDecodeWarps = 4;          // the FP16 and paper-path kernels: 128 threads
inline constexpr int kFeaturesPerLane = 8;      // their lanes' features (one 16-byte FP16 load)
inline constexpr int kTablesThreads = 256;      // the lookup tables
inline constexpr int kLookupSplitThreads = 256; // the lookup path's token loop
inline constexpr int kStageThreads = 256;       // the bins times a stage's value codewords

// The FP16 kernel's plan (a block per (split, KV head, sequence), as FlashInfer's decode lays it out):
// headDim/8 lanes hold one token row (8 features each, one 16-byte load), a row of lanes per query
// head of the group (each lane keeps one head's state: 8 accumulators, a maximum and a sum), and
// `rows` such head groups take different tokens of a tile. Tiles of keys and values go to shared
// memory through a kFp16Stages-deep asynchronous copy pipeline, 8 KiB a stage, so the next tile is
// in flight while this one is read. At most 64 registers a thread (its __launch_bounds__), so that
// 8 blocks of 128 threads fit in a multiprocessor's 64K registers; tools/gpu/resource_usage.py holds
// the compiled kernels to that.
inline constexpr int kFp16Stages = 2;
inline constexpr int kFp16StageBytes = 8192; // keys and values of one tile, FP16
inline constexpr int kFp16MaxRegisters = 64;
inline constexpr int kFp16MinThreads = 128;
// Most splits of one (sequence, KV head): the last block's merge keeps a weight per split and head in
// the stages' shared memory (8 × 128 floats), and reads every split's partials.
inline constexpr int kFp16MaxSplits = 128;

struct Fp16DecodeLayout {
    int lanes = 0, heads = 0, rows = 0; // lanes per token row, query heads (the compiled group), rows
    int threads = 0;
    int tileTokens = 0, tokensPerRow = 0; // a tile's tokens, and each row's share of them
};
GSRQ_HD constexpr Fp16DecodeLayout fp16DecodeLayout(int headDim, int compiledGroup)
{
    Fp16DecodeLayout l;
    l.lanes = headDim / kFeaturesPerLane;
    l.heads = compiledGroup;
    l.threads = l.lanes * l.heads > kFp16MinThreads ? l.lanes * l.heads : kFp16MinThreads;
    l.rows = l.threads / (l.lanes * l.heads);
    l.tileTokens = kFp16StageBytes / (2 * 2 * headDim);
    l.tokensPerRow = l.tileTokens / l.rows;
    return l;
}
// The block's dynamic shared memory: the pipeline's stages (the rows' merge reuses them), then one
// int, the flag that names the last block of a (sequence, KV head) to finish.
inline constexpr std::size_t fp16DecodeSharedBytes()
{
    return std::size_t(kFp16Stages) * kFp16StageBytes + 16;
}
// Resident blocks per multiprocessor of the FP16 kernel, from what a block holds (threads, registers
// at the cap above, shared memory with the 1 KiB the device reserves per block) against a
// multiprocessor's 2,048 threads, 64K registers, its shared memory and 32 blocks.
inline int fp16BlocksPerSm(int threads, std::size_t sharedPerSm)
{
    const int byThreads = 2048 / threads;
    const int byRegisters = 65536 / (threads * kFp16MaxRegisters);
    const int byShared = int(sharedPerSm / (fp16DecodeSharedBytes() + 1024));
    int n = byThreads < byRegisters ? byThreads : byRegisters;
    n = n < byShared ? n : byShared;
    return n < 32 ? n : 32;
}

// Largest GQA group (query heads per KV head) the kernels take, and most warps in one of their blocks.
inline constexpr int kMaxGroup = 8;
inline constexpr int kMaxBlockWarps = 8;
inline constexpr int kMaxRopePairs = 128; // head_dim / 2 for head_dim ≤ 256

// The shared memory the binned kernels hold per block, in bytes, here so that the launches
// (decode_kernels.cu, lookup_kernels.cu) and the device models (roofline.cpp) count with the same.
// Dynamic: the paper path's bins, group × S·R·K floats.
inline std::size_t paperBinsDynamicBytes(int group, int subspaces, int stages, int k)
{
    return std::size_t(group) * std::size_t(subspaces) * std::size_t(stages) * std::size_t(k) * sizeof(float);
}
// The bytes of one token's packed codes in one subspace: R codes of log2 K bits, little-endian,
// rounded up to whole 32-bit words (PackedCodes::bytesFor of bitsFor(K), core/lm/decode_cache.h).
GSRQ_HD constexpr int packedCodeBytes(int stages, int k)
{
    int bits = 0;
    while ((1 << bits) < k)
        ++bits;
    return ((stages * bits + 7) / 8 + 3) / 4 * 4;
}
// Each thread of the lookup step's split blocks stages its next token's codes (keys, then values, of
// the head's S subspaces) in its own slots of shared memory while it weighs the current token:
// kLookupCodeStages slots a thread, word-major (word i of every thread together, so a warp's reads
// fall in distinct banks). Only where they take at most kLookupStagedBytes a token; else it reads
// each code word from global memory as it needs it. 0: not staged.
inline constexpr int kLookupCodeStages = 2;
inline constexpr int kLookupStagedBytes = 32; // to 1 bit per activation at D = 128
GSRQ_HD constexpr int lookupStagedBytes(int subspaces, int bytesPerToken)
{
    return 2 * subspaces * bytesPerToken <= kLookupStagedBytes ? 2 * subspaces * bytesPerToken : 0;
}
// A split block of the lookup step, one per query head and split: its tables and bins, S·R·K floats
// each, the tables' S·R row maxima, then the staged codes where `staged`.
inline std::size_t lookupSplitDynamicBytes(int subspaces, int stages, int k, bool staged)
{
    return 2 * paperBinsDynamicBytes(1, subspaces, stages, k) + std::size_t(subspaces) * stages * sizeof(float) +
           (staged ? std::size_t(kLookupSplitThreads) * kLookupCodeStages *
                         std::size_t(lookupStagedBytes(subspaces, packedCodeBytes(stages, k)))
                   : 0);
}
// The lookup step's table blocks read each codeword once for up to kLookupTableHeads of the group's
// heads (their accumulators in registers).
inline constexpr int kLookupTableHeads = 4;
// Its blocks per multiprocessor asked of the compiler (__launch_bounds__: at most 64 registers for
// 256 threads), and the unified maximum's margin (base 2) before a split weighs again.
inline constexpr int kLookupMinBlocks = 4;
inline constexpr float kUnifiedMaxMargin = 64.f;
// The stage combine's threads each take kStageFeatures features of a codeword (one 8-byte load of
// FP16) and every parts-th codeword: parts = kStageThreads / (D / kStageFeatures).
inline constexpr int kStageFeatures = 4;
GSRQ_HD constexpr int stageParts(int dim)
{
    return kStageThreads / (dim / kStageFeatures) > 1 ? kStageThreads / (dim / kStageFeatures) : 1;
}
// The stage combine: group × (splits + 1 + K) floats, then its parts' partial sums, parts × group × D,
// then the int that names the last block of a (sequence, KV head).
inline std::size_t lookupCombineDynamicBytes(int group, int splits, int k, int dim)
{
    const std::size_t parts = std::size_t(stageParts(dim));
    return (std::size_t(group) * (std::size_t(splits) + 1 + std::size_t(k)) + parts * group * dim) * sizeof(float) + 16;
}
// The paper kernels stage the codes (keys', values') of each warp's tokens of its next step in
// shared memory, kPaperStageWords 32-bit words a warp and stage, two stages; where a step's codes
// take more, they read them from global memory where used. A step of a warp: 256/headDim token rows
// (32 lanes over headDim/8 lanes a row), U tokens each (U = 1 for groups of 8, else 2).
inline constexpr int kPaperStageWords = 128;
GSRQ_HD constexpr int paperStagedWords(int headDim, int unroll, int subspaces, int bytesPerToken)
{
    return (256 / headDim) * unroll * 2 * subspaces * (bytesPerToken / 4);
}
// The registers nvcc 13 gives the paper kernels on sm_90, by compiled group 1, 2, 4, 8 (bins kernel,
// then the split kernel that sums value codewords): what their latency model assumes of their
// resident blocks (roofline.h, paperLatencyModel); tools/gpu/resource_usage.py holds the compiled
// kernels to at most these.
inline constexpr int kPaperBinsRegisters[4] = {72, 94, 128, 247};     // the bins kernel that does not walk
inline constexpr int kPaperBinsWalkRegisters[4] = {80, 96, 128, 250}; // and the one that walks its RoPE
inline constexpr int kPaperSplitRegisters[4] = {128, 128, 168, 255};
// Static (decode_device.cuh): the paper kernels' RoPE turns and walk rotations, and staged codes (the bins
// kernel stages none for groups of 8: its registers are full), the bins kernel's value per warp and
// head and value per warp; the lookup step's split blocks' value per warp.
inline constexpr std::size_t kPaperStagedCodeBytes = std::size_t(kDecodeWarps) * 2 * kPaperStageWords * 4;
// The RoPE turns of half a head and the walk's rotation per pair (the advance from one of a lane's
// tokens to its next): two float2 per pair.
inline constexpr std::size_t kPaperRopeStaticBytes = std::size_t(kMaxRopePairs) * 2 * 2 * sizeof(float);
// Dynamic, after each paper kernel's own: each thread's walked RoPE rotations, a float2 per pair of
// its features (RopeWalk, paper_rope.cuh). Dynamic rather than static so that only the paper
// kernels hold it (the CUDA emulator counts every static array for every kernel).
inline constexpr std::size_t kPaperRopeWalkBytes =
    std::size_t(kFeaturesPerLane) * kDecodeWarps * 32 * 2 * sizeof(float);
// The paper bins kernel's dynamic shared memory: its bins, then the walk where it walks.
inline std::size_t paperBinsKernelDynamicBytes(int group, int subspaces, int stages, int k, bool ropeWalk)
{
    return paperBinsDynamicBytes(group, subspaces, stages, k) + (ropeWalk ? kPaperRopeWalkBytes : 0);
}
GSRQ_HD constexpr bool paperBinsStageCodes(int compiledGroup)
{
    return compiledGroup < 8;
}
GSRQ_HD constexpr std::size_t paperBinsStaticBytes(int compiledGroup)
{
    return kPaperRopeStaticBytes + kMaxBlockWarps * kMaxGroup * sizeof(float) + kMaxBlockWarps * sizeof(float) +
           (paperBinsStageCodes(compiledGroup) ? kPaperStagedCodeBytes : 0);
}
inline constexpr std::size_t kPaperSplitStaticBytes = kPaperRopeStaticBytes + kPaperStagedCodeBytes;
// The smallest compiled group (1, 2, 4, 8) that holds `group` query heads.
GSRQ_HD constexpr int compiledGroupOf(int group)
{
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}
// Whether the paper bins kernel walks its keys' RoPE (kPaperRopeWalkBytes more shared memory a
// block) or takes a sincospif per pair and token: it walks where its bins fit with the walk and the
// walk costs no resident block on a device with `sharedOptin` bytes a block (sharedOptin + 1 KiB a
// multiprocessor, as on sm_80 and sm_90), whose blocks registers (kPaperBinsRegisters, and
// kPaperBinsWalkRegisters walking) and threads bound as well. The split kernel always walks: its partials are small.
inline bool paperBinsWalk(int group, int subspaces, int stages, int k, std::size_t sharedOptin)
{
    const int G = compiledGroupOf(group), gi = G >= 8 ? 3 : G >= 4 ? 2 : G >= 2 ? 1 : 0;
    auto byRegisters = [](int regs) {
        const int regsPerWarp = (regs * 32 + 255) / 256 * 256;
        return std::size_t(std::min(std::min(2048 / (kDecodeWarps * 32), 65536 / (regsPerWarp * kDecodeWarps)), 32));
    };
    const std::size_t base = paperBinsDynamicBytes(group, subspaces, stages, k) + paperBinsStaticBytes(G);
    const std::size_t walked = base + kPaperRopeWalkBytes;
    if (walked > sharedOptin)
        return false;
    auto blocks = [&](std::size_t bytes, int regs) {
        return std::min(byRegisters(regs), (sharedOptin + 1024) / (bytes + 1024));
    };
    return blocks(walked, kPaperBinsWalkRegisters[gi]) >= blocks(base, kPaperBinsRegisters[gi]);
}
// The lookup step's blocks (lookupStepKernel: the tables', the splits' and the combine's blocks of
// one launch) ask for the largest of a split block's, a table block's group × D scaled queries and a
// combine block's.
inline std::size_t lookupStepDynamicBytes(int group, int splits, int dim, int subspaces, int stages, int k, bool staged)
{
    const std::size_t queries = std::size_t(group) * dim * sizeof(float);
    const std::size_t split = lookupSplitDynamicBytes(subspaces, stages, k, staged);
    const std::size_t combine = lookupCombineDynamicBytes(group, splits, k, dim);
    return std::max({queries, split, combine});
}
// The paper split kernel's dynamic shared memory: its token slots' partial states merged at the end
// (slots = 4 warps × 256/headDim rows; group × (headDim + 2) floats each), then the RoPE walk.
GSRQ_HD constexpr std::size_t paperSplitPartialBytes(int compiledGroup, int headDim)
{
    return std::size_t(kDecodeWarps * (256 / headDim)) * compiledGroup * (headDim + 2) * sizeof(float);
}
GSRQ_HD constexpr std::size_t paperSplitDynamicBytes(int compiledGroup, int headDim)
{
    return paperSplitPartialBytes(compiledGroup, headDim) + kPaperRopeWalkBytes;
}
inline constexpr std::size_t kLookupSplitStaticBytes = kMaxBlockWarps * sizeof(float);
// Whether the lookup step's split blocks stage their tokens' codes on a device with `sharedOptin`
// bytes of shared memory per block: where they are small enough and the block with them still fits.
inline bool lookupStagesCodes(int subspaces, int stages, int k, std::size_t sharedOptin)
{
    return lookupStagedBytes(subspaces, packedCodeBytes(stages, k)) > 0 &&
           lookupSplitDynamicBytes(subspaces, stages, k, true) + kLookupSplitStaticBytes <= sharedOptin;
}

// The stage-r code of a token whose codes are packed little-endian at `bits` bits each into
// 32-bit words (PackedCodes' layout read as words).
GSRQ_HD std::uint32_t codeAt(const std::uint32_t* words, int r, int bits)
{
    const int bit0 = r * bits, w = bit0 >> 5, off = bit0 & 31;
    std::uint32_t v = words[w] >> off;
    if (off + bits > 32)
        v |= words[w + 1] << (32 - off);
    return bits == 32 ? v : v & ((1u << bits) - 1u);
}
// A token's codes in stage order, each 32-bit word read once (codeAt reads one or two a code): the
// words `stride` apart, bits ≤ 16 (K ≤ 65,536).
struct CodeStream {
    const std::uint32_t* words;
    int stride, bits;
    std::uint64_t buf = 0;
    int have = 0, next = 0;
    GSRQ_HD CodeStream(const std::uint32_t* w, int s, int b) : words(w), stride(s), bits(b) {}
    GSRQ_HD std::uint32_t pop()
    {
        if (have < bits) {
            buf |= std::uint64_t(words[next * stride]) << have;
            ++next;
            have += 32;
        }
        const std::uint32_t v = std::uint32_t(buf) & ((1u << bits) - 1u);
        buf >>= bits;
        have -= bits;
        return v;
    }
};

// A RoPE frequency in turns per position, inv_freq / 2π, split into two floats (hi + lo carries
// ~48 bits), so that a float kernel can form position × frequency to ~1e-8 turns at any position
// below 2^24, where a plain float product is off by 0.06 rad at position 10^6.
struct TurnsPerPosition {
    float hi = 0, lo = 0;
};

inline TurnsPerPosition turnsPerPosition(double invFreq)
{
    const double t = invFreq / (2.0 * 3.14159265358979323846);
    TurnsPerPosition s;
    s.hi = float(t);
    s.lo = float(t - double(s.hi));
    return s;
}

// Largest position the split product above serves exactly (positions are floats in it).
inline constexpr std::int64_t kMaxRopePosition = std::int64_t(1) << 24;

// The fractional part of position × (hi + lo) turns, in [−0.5, 0.5]. p·hi is split into its rounded
// value and its exact rounding error (fma); the integer part of the rounded value is removed
// exactly before the small terms are added.
GSRQ_HD float ropeTurns(float position, float hi, float lo)
{
    const float a = position * hi;
    const float e = fmaf(position, hi, -a);
    float f = a - rintf(a);
    f += e + position * lo;
    return f - rintf(f);
}

// RoPE's rotation of one feature pair, (cos φ, sin φ). The paper kernels rotate each key at its
// token's position. A sine and cosine per pair and token (sincospif of ropeTurns) cost some 30
// instructions each; between exact anchors the kernels instead walk each pair's rotation forward by
// a fixed number of positions, one complex product (4 FMA) with the rotation of that advance.
// Each product rounds (a few 2^-24) and the advance's rotation is itself rounded to float, so the
// error grows with the steps walked since the anchor: kRopeAnchorSteps bounds them (the test holds
// the walk within 1e-5 of the exact rotation at positions past 2^20).
struct RopeRotation {
    float c = 1, s = 0;
};
inline constexpr int kRopeAnchorSteps = 32;
// The rotation by a then by b (angles add).
GSRQ_HD RopeRotation ropeCompose(RopeRotation a, RopeRotation b)
{
    return {fmaf(a.c, b.c, -a.s * b.s), fmaf(a.c, b.s, a.s * b.c)};
}

} // namespace gsrq::gpu
