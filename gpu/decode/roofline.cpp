// The parts of GPU decode that need no device: split planning, shape checks, the cost model and
// rates. Built with and without CUDA, and tested on the CPU.
#include "gpu/decode/roofline.h"

#include "core/base/error.h"
#include "core/decode/decode_sweep.h"
#include "gpu/decode/decode_math.h"

#include <algorithm>
#include <cmath>

namespace gsrq::gpu {

namespace {

// A split's tokens when `tokens` are cut into `splits`: whole multiples of 32 (every kernel's tile
// divides 32).
std::int64_t splitLength(std::int64_t tokens, std::int64_t splits)
{
    return ((tokens + splits - 1) / splits + 31) / 32 * 32;
}

// Whole multiples of 32 tokens per split, no split left empty.
SplitPlan wholeSplits(std::int64_t tokens, std::int64_t splits)
{
    SplitPlan p;
    const std::int64_t per = splitLength(tokens, splits);
    p.splits = int((tokens + per - 1) / per);
    p.tokensPerSplit = per;
    return p;
}

// Blocks over the resident slots of the waves they take (1: every wave full).
double waveEfficiency(std::int64_t blocks, std::int64_t slots)
{
    slots = std::max<std::int64_t>(1, slots);
    return double(blocks) / double((blocks + slots - 1) / slots * slots);
}

} // namespace

int fp16ResidentBlocks(int headDim, int group, std::size_t sharedOptin)
{
    return fp16BlocksPerSm(fp16DecodeLayout(headDim, compiledGroupOf(group)).threads, sharedOptin + 1024);
}

namespace {

// Splits of `pairs` independent (sequence, head) walks over `tokens` on `slots` resident blocks, as
// FlashAttention-3's heuristic chooses them: the fewest (in whole 32-token multiples) whose waves
// are at least 85% as full as the fullest count's, none under minTokens, at most maxSplits.
SplitPlan planWaveSplits(std::int64_t tokens, std::int64_t pairs, std::int64_t slots, std::int64_t minTokens,
                         std::int64_t maxSplits)
{
    if (tokens <= 0)
        return {1, 1};
    pairs = std::max<std::int64_t>(1, pairs);
    slots = std::max<std::int64_t>(1, slots);
    const std::int64_t most =
        std::clamp<std::int64_t>(tokens / minTokens, 1, std::max<std::int64_t>(1, std::min(slots, maxSplits)));
    auto efficiency = [&](std::int64_t s) { return waveEfficiency(pairs * wholeSplits(tokens, s).splits, slots); };
    double best = 0;
    for (std::int64_t s = 1; s <= most; ++s)
        best = std::max(best, efficiency(s));
    std::int64_t splits = most;
    for (std::int64_t s = 1; s <= most; ++s)
        if (efficiency(s) >= 0.85 * best) {
            splits = s;
            break;
        }
    return wholeSplits(tokens, splits);
}

// Splits for kernels whose blocks are chains (latency-bound by their models: the paper kernels'
// dependent codeword gathers, the lookup threads' tokens one after another): the count, in whole
// 32-token multiples, with the shortest critical path, waves × tokens per split; the fewer splits
// on a tie. None under minTokens, at most maxSplits.
SplitPlan planChainSplits(std::int64_t tokens, std::int64_t pairs, std::int64_t slots, std::int64_t minTokens,
                          std::int64_t maxSplits)
{
    if (tokens <= 0)
        return {1, 1};
    pairs = std::max<std::int64_t>(1, pairs);
    slots = std::max<std::int64_t>(1, slots);
    const std::int64_t most = std::clamp<std::int64_t>(tokens / minTokens, 1, std::max<std::int64_t>(1, maxSplits));
    SplitPlan best{};
    std::int64_t bestPath = 0;
    for (std::int64_t s = 1; s <= most; ++s) {
        const SplitPlan p = wholeSplits(tokens, s);
        const std::int64_t waves = (pairs * p.splits + slots - 1) / slots;
        if (s == 1 || waves * p.tokensPerSplit < bestPath) {
            bestPath = waves * p.tokensPerSplit;
            best = p;
        }
    }
    return best;
}

} // namespace

SplitPlan planFp16Splits(std::int64_t tokens, int batch, int kvHeads, int headDim, int group, int multiprocessors,
                         std::size_t sharedOptin)
{
    return planWaveSplits(tokens, std::int64_t(batch) * kvHeads,
                          std::int64_t(multiprocessors) * fp16ResidentBlocks(headDim, group, sharedOptin),
                          kMinSplitTokens, kFp16MaxSplits);
}

double fp16WaveEfficiency(const SplitPlan& plan, int batch, int kvHeads, int headDim, int group, int multiprocessors,
                          std::size_t sharedOptin)
{
    return waveEfficiency(std::int64_t(plan.splits) * batch * kvHeads,
                          std::int64_t(multiprocessors) * fp16ResidentBlocks(headDim, group, sharedOptin));
}

// The lookup step's blocks all ask for the largest of its roles' shared memory
// (lookupStepDynamicBytes): the split blocks', or the combine blocks' for the group at the most
// splits the planner gives (their parts × group × D reduction is group × 4 KiB for any D below
// 1,024: parts = 4·kStageThreads / D), which bounds the table blocks' scaled queries too.
int lookupResidentBlocks(int group, int subspaces, int stages, int k, std::size_t sharedOptin)
{
    const std::size_t split =
        lookupSplitDynamicBytes(subspaces, stages, k, lookupStagesCodes(subspaces, stages, k, sharedOptin));
    const std::size_t combine = lookupCombineDynamicBytes(group, int(kLookupMaxSplits), k, 128);
    const std::size_t block = std::max(split, combine) + kLookupSplitStaticBytes + 1024;
    const int byShared = int((sharedOptin + 1024) / block);
    return std::min({2048 / kLookupSplitThreads, kLookupMinBlocks, byShared});
}

SplitPlan planLookupSplits(std::int64_t tokens, int batch, int heads, int group, int subspaces, int stages, int k,
                           int multiprocessors, std::size_t sharedOptin)
{
    return planChainSplits(tokens, std::int64_t(batch) * heads,
                           std::int64_t(multiprocessors) *
                               lookupResidentBlocks(group, subspaces, stages, k, sharedOptin),
                           kMinBinnedSplitTokens, kLookupMaxSplits);
}

int paperResidentBlocks(const DecodeShape& shape, int dim, int stages, int k, bool bins, bool ropeWalk,
                        std::size_t sharedOptin)
{
    const int hd = shape.headDim, group = shape.heads / std::max(1, shape.kvHeads), Gt = compiledGroupOf(group);
    const int S = hd / std::max(1, dim), gi = Gt >= 8 ? 3 : Gt >= 4 ? 2 : Gt >= 2 ? 1 : 0;
    const int regs = !bins      ? kPaperSplitRegisters[gi]
                     : ropeWalk ? kPaperBinsWalkRegisters[gi]
                                : kPaperBinsRegisters[gi];
    const std::size_t shared =
        (bins ? paperBinsKernelDynamicBytes(group, S, stages, k, ropeWalk) + paperBinsStaticBytes(Gt)
              : paperSplitDynamicBytes(Gt, hd) + kPaperSplitStaticBytes) +
        1024;
    const int regsPerWarp = (regs * 32 + 255) / 256 * 256;
    return std::max(1, std::min({2048 / (kDecodeWarps * 32), 65536 / (regsPerWarp * kDecodeWarps),
                                 int((sharedOptin + 1024) / shared), 32}));
}

SplitPlan planPaperSplits(std::int64_t tokens, int batch, const DecodeShape& shape, int dim, int stages, int k,
                          bool bins, int multiprocessors, std::size_t sharedOptin)
{
    const int group = shape.heads / std::max(1, shape.kvHeads);
    const bool walk = !bins || paperBinsWalk(group, shape.headDim / std::max(1, dim), stages, k, sharedOptin);
    return planChainSplits(tokens, std::int64_t(batch) * shape.kvHeads,
                           std::int64_t(multiprocessors) *
                               paperResidentBlocks(shape, dim, stages, k, bins, walk, sharedOptin),
                           bins ? kMinBinnedSplitTokens : kMinSplitTokens, kPaperMaxSplits);
}

std::string decodeShapeProblem(const DecodeShape& s, int dim, int stages, int k)
{
    if (s.heads < 1 || s.kvHeads < 1 || s.heads % s.kvHeads)
        return cat("--heads ", s.heads, " must be a positive multiple of --kv-heads ", s.kvHeads);
    if (s.heads / s.kvHeads > 8)
        return cat(s.heads / s.kvHeads, " query heads per KV head: the decode kernels take at most 8");
    if (s.headDim != 64 && s.headDim != 128 && s.headDim != 256)
        return cat("--head-dim ", s.headDim, ": the decode kernels take 64, 128 or 256");
    if (dim < 8 || dim % 8 || s.headDim % dim)
        return cat("D = ", dim, ": the decode kernels need a multiple of 8 that divides head_dim ", s.headDim);
    if (k < 2 || k > 65536 || (k & (k - 1)))
        return cat("K = ", k, ": a power of two from 2 to 65,536");
    if (stages < 1)
        return cat("R = ", stages, ": at least one stage");
    if (std::int64_t(stages) * PackedCodes::bitsFor(k) > 256)
        return cat("R·log2 K = ", stages * PackedCodes::bitsFor(k), " bits per token: the decode kernels take 256");
    return {};
}

namespace {

// Token slots the split blocks of one (sequence, KV head) walk: each split's tokens (the planners'
// whole multiples of 32 per split) rounded up to the kernel's step, as its lanes past the split's end
// still load (a clamped token) in the step's last round.
double tokenSlots(std::int64_t tokens, int splits, std::int64_t step)
{
    const std::int64_t per = splitLength(tokens, splits);
    double slots = 0;
    for (int i = 0; i < splits; ++i) {
        const std::int64_t n = std::clamp<std::int64_t>(tokens - std::int64_t(i) * per, 0, per);
        slots += double((n + step - 1) / step * step);
    }
    return slots;
}

// The paper kernels' RoPE anchors over all splits: a lane walks ceil(n / step) steps of `unroll`
// tokens in a split of n tokens, exact at every kRopeAnchorSteps-th (RopeWalk, paper_rope.cuh).
double ropeAnchors(std::int64_t tokens, int splits, std::int64_t step, int unroll)
{
    const std::int64_t per = splitLength(tokens, splits);
    double anchors = 0;
    for (int i = 0; i < splits; ++i) {
        const std::int64_t n = std::clamp<std::int64_t>(tokens - std::int64_t(i) * per, 0, per);
        const std::int64_t walked = (n + step - 1) / step * unroll;
        anchors += double((walked + kRopeAnchorSteps - 1) / kRopeAnchorSteps);
    }
    return anchors;
}

// The 32-bit words codeAt reads for a token's R codes (a word, and the next where a code straddles
// two), as the paper path's bins read them stage by stage.
double codeWordsRead(int stages, int bits)
{
    int n = 0;
    for (int r = 0; r < stages; ++r)
        n += ((r * bits) & 31) + bits > 32 ? 2 : 1;
    return n;
}

} // namespace

std::vector<KernelCost> decodeKernelCosts(DecodePath path, const DecodeCostCase& c)
{
    const double hd = c.shape.headDim, G = double(c.shape.heads) / c.shape.kvHeads, Gt = compiledGroupOf(int(G));
    const double D = c.dim, R = c.stages, K = c.k, S = hd / D, P = c.splits;
    const double bpt = PackedCodes::bytesFor(c.stages, PackedCodes::bitsFor(c.k)); // per token and subspace
    const double pairs = double(c.batch) * c.shape.kvHeads;                        // (sequence, KV head)
    const double tok = pairs * double(c.context);                                  // (sequence, KV head, token)
    const double hq = double(c.batch) * c.shape.heads;                             // query heads of the batch
    const double books = double(c.shape.kvHeads) * S * R * K * D * 2.0; // FP16 codewords of one of keys, values
    const double per = S * R * K;                                       // bins (table entries) per query head
    const double q = hq * hd * 4.0, out = hq * hd * 4.0;                // FP32 queries in, outputs out
    const double codes = tok * S * bpt;                                 // one of keys', values' codes
    const double turns = hd / 2 * 8.0;                                  // the RoPE frequencies
    const double decodeThreads = kDecodeWarps * 32.0;
    const double perWarp = 32.0 / (hd / kFeaturesPerLane), slots = kDecodeWarps * perWarp; // tokens per round

    // The split kernels' partials (accumulators, maxima, sums) and the combine that merges them.
    const double partials = hq * P * (hd + 2.0) * 4.0;
    auto finishSplitShared = [&] { return pairs * P * (slots * G * (hd + 2.0) * 4.0 + G * hd * slots * 16.0); };
    const KernelCost combine{"combine", partials + out, 0, 0, 0};
    // The bins merged over the splits and multiplied by a stage's value codewords, then the stages
    // added by the last block of each (sequence, KV head): its stages' shares read back, the output
    // written, a counter read and written by the atomic, the flag written once and read by all.
    auto stageAndOut = [&](std::vector<KernelCost>& k) {
        const double parts = stageParts(c.dim), lanes = D / kStageFeatures;
        k.push_back({"stage combine",
                     hq * P * per * 4.0 + hq * P * 8.0 + books + 2.0 * hq * S * R * D * 4.0 + out + pairs * 8.0,
                     (c.batch - 1.0) * books, // every sequence reads the books, the first from HBM
                     pairs * S * R *
                             (G * P * 4.0 + G * 4.0 + G * K * 4.0 + parts * G * D * 4.0     // writes
                              + G * K * P * 4.0 + G * K * lanes * 4.0 + G * D * parts * 4.0 // reads
                              + 4.0 + kStageThreads * 4.0) +                                // the flag
                         pairs * G * hd * 4.0,                                              // each output's softmax sum
                     hq * per * D * 2.0});
    };

    std::vector<KernelCost> k;
    if (path == DecodePath::Fp16) {
        // One launch (decode_kernels.cu): each tile's keys and values copied into shared memory
        // (tokens past a split's end copy its last token), each row of lanes reading its tokens'
        // keys and values there (16 B each per lane), the rows' states merged; past one split, the
        // partials written and read back by the last block, and a counter per (sequence, KV head)
        // read and written by the atomic.
        const auto L = fp16DecodeLayout(c.shape.headDim, int(Gt));
        double tiles = 0;
        const std::int64_t per = splitLength(c.context, c.splits);
        for (int i = 0; i < c.splits; ++i) {
            const std::int64_t n = std::clamp<std::int64_t>(c.context - std::int64_t(i) * per, 0, per);
            tiles += double((n + L.tileTokens - 1) / L.tileTokens);
        }
        const double blocks = pairs * P;
        double shared = pairs * tiles * (kFp16StageBytes + double(L.threads) * L.tokensPerRow * 32.0);
        if (L.rows > 1)
            shared += blocks * (L.threads * 32.0 + L.rows * Gt * 8.0 + L.lanes * Gt * L.rows * 44.0);
        double hbm = tok * hd * 2.0 * 2.0 + q + out;
        if (c.splits > 1) {
            shared += blocks * (4.0 + L.threads * 4.0); // the last-block flag, written once, read by all
            // The last block's merge: weights and 1/L written, each weight and 1/L read per 4 features.
            shared += pairs * (G * P * 4.0 + G * 4.0 + G * (hd / 4.0) * (P * 4.0 + 4.0));
            hbm += 2.0 * partials + pairs * 8.0;
        }
        k.push_back({"fp16 decode", hbm, 0, shared, tok * G * 4.0 * hd});
        return k;
    }
    if (path == DecodePath::Lookup) {
        // One launch (lookup_kernels.cu): every block draws its ticket (an atomic on one counter, the
        // ticket written to shared memory once and read by all its threads). The first pairs·S·R
        // blocks make the tables, a stage's K codewords for the group's heads (the scaled queries
        // written to shared memory and read per codeword), and count themselves done per (sequence,
        // KV head). A block per (split, query head, sequence) then waits for its pair's count, counts
        // itself past it, reads its head's tables (written in this launch: their bytes count as
        // written and as read, as when two launches passed them), clears its bins, the tables' row
        // maxima (each entry read, a maximum per row written and read by every thread), per token of
        // its split one table entry per row read and one bin per row read and written (the atomic),
        // one block maximum and one block sum, the bins read out. Assumes no split weighs again (its
        // largest score within 2^64 of the bound: the seeded steps here).
        const double tableBlocks = pairs * S * R;
        const double warps = kLookupSplitThreads / 32.0, threads = kLookupSplitThreads, rows = S * R;
        const double blocks = hq * P;
        // Where a token's codes are staged (decode_math.h), each query head's block copies them into
        // shared memory (4 bytes a copy) and reads each word once there (CodeStream).
        const bool staged = c.codesStaged && lookupStagedBytes(int(S), int(bpt)) > 0;
        const double stagedPerToken = staged ? 2.0 * (2.0 * S * bpt) : 0.0;
        const double tickets = (tableBlocks + blocks) * (4.0 + threads * 4.0);
        const double tablesShared = tableBlocks * (G * D * 4.0 + K * G * D * 4.0);
        const double splitShared = blocks * (2.0 * per * 4.0 + per * 4.0 + rows * 4.0 + threads * rows * 4.0 +
                                             2.0 * (warps * 4.0 + threads * warps * 4.0) + per * 4.0) +
                                   tok * G * (rows * 12.0 + stagedPerToken);
        // The ticket counter, and per pair the tables' count, the splits' past their wait and the
        // splits' done: each read and written.
        const double counters = 8.0 + pairs * 24.0;
        // Then the combine's blocks, as the paper path's combine launch (stageAndOut), each with its
        // ticket; their bytes are the same distinct bytes of the same launch (the weights, maxima and
        // sums written by the split blocks and read by them count as written and as read).
        std::vector<KernelCost> combine;
        stageAndOut(combine);
        const KernelCost& st = combine.front();
        const double combineTickets = tableBlocks * (4.0 + threads * 4.0);
        k.push_back({"lookup step",
                     books + q + 2.0 * hq * per * 4.0 + 2.0 * codes + hq * P * per * 4.0 + hq * P * 8.0 + counters +
                         st.hbmBytes,
                     (c.batch - 1.0) * books + st.l2Bytes,
                     tickets + tablesShared + splitShared + combineTickets + st.sharedBytes,
                     hq * per * D * 2.0 + tok * S * R * G * 2.0 + st.flops});
        return k;
    }
    // The paper path: the key's codewords gathered per token (each codeword's first read from HBM, the
    // rest from the L2), RoPE at its position.
    const double U = Gt >= 8 ? 1 : 2;
    const double walked = pairs * tokenSlots(c.context, c.splits, std::int64_t(U * slots));
    const double blocks = pairs * P;
    // The codes staged a step ahead (decode_math.h; where they fit): each token slot's keys' and
    // values' words copied in (4 bytes a copy), then each lane's key words read once (CodeStream).
    const int bits = PackedCodes::bitsFor(c.k);
    const bool codesStaged = paperStagedWords(int(hd), int(U), int(S), int(bpt)) <= kPaperStageWords &&
                             (!c.paperBins || paperBinsStageCodes(int(Gt)));
    const double stagedShared = codesStaged ? walked * (2.0 * S * bpt + (hd / kFeaturesPerLane) * bpt) : 0.0;
    // Each token slot's key RoPE, 8 pairs a lane, a float2 each: walked, the lane's rotation and the
    // stride's read and the new one written; at an anchor, the turns read and the rotation written.
    // Not walking (the bins kernel where the walk would cost a resident block): the turns read.
    const bool walk = !c.paperBins || c.ropeWalk;
    const double anchorRows = pairs * slots * ropeAnchors(c.context, c.splits, std::int64_t(U * slots), int(U));
    const double ropeShared = blocks * (2.0 * turns + decodeThreads * Gt * kFeaturesPerLane * 8.0) // tables, q's RoPE
                              + (walk ? walked * hd * 24.0 - anchorRows * hd * 8.0 : walked * hd * 8.0) + stagedShared;
    const double keyFlops = tok * (S * R * D + 6.0 * hd + G * 2.0 * hd);
    if (c.paperBins) {
        const double tiles = walked / (U * slots);
        const double shared = ropeShared + blocks * G * per * 4.0              // bins cleared
                              + tok * S * R * G * 8.0                          // bins read and written per token
                              + tiles * G * kDecodeWarps * 4.0                 // tile maxima written (a lane per warp)
                              + tiles * G * decodeThreads * kDecodeWarps * 4.0 // and read by every thread
                              + blocks * G * per * 4.0                         // bins read out
                              + blocks * G * (kDecodeWarps + decodeThreads * kDecodeWarps) * 4.0        // sums
                              + (codesStaged ? walked * S * codeWordsRead(c.stages, bits) * 4.0 : 0.0); // bins' codes
        k.push_back({"paper bins", 2.0 * codes + books + q + turns + hq * P * per * 4.0 + hq * P * 8.0,
                     std::max(0.0, tok * S * R * D * 2.0 - books), shared, keyFlops + tok * S * R * G});
        stageAndOut(k);
        return k;
    }
    k.push_back({"paper split", 2.0 * codes + 2.0 * books + q + turns + partials,
                 2.0 * std::max(0.0, tok * S * R * D * 2.0 - books),
                 ropeShared + finishSplitShared() + (codesStaged ? walked * (hd / kFeaturesPerLane) * bpt : 0.0),
                 keyFlops + tok * (S * R * D + G * 2.0 * hd)});
    k.push_back(combine);
    return k;
}

DecodeCosts decodeCosts(DecodePath path, const DecodeCostCase& c)
{
    DecodeCosts total;
    for (const KernelCost& k : decodeKernelCosts(path, c)) {
        total.memoryBytes += k.hbmBytes;
        total.l2Bytes += k.l2Bytes;
        total.sharedBytes += k.sharedBytes;
        total.flops += k.flops;
    }
    return total;
}

Fp16LatencyModel fp16LatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                  double copyBytesPerSecond)
{
    Fp16LatencyModel m;
    const int group = c.shape.heads / c.shape.kvHeads;
    const auto L = fp16DecodeLayout(c.shape.headDim, compiledGroupOf(group));
    m.blocksPerSm = fp16ResidentBlocks(c.shape.headDim, group, sharedOptin);
    const std::int64_t blocks = std::int64_t(c.batch) * c.shape.kvHeads * c.splits;
    const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(multiprocessors) * m.blocksPerSm);
    m.waves = int((blocks + slots - 1) / slots);
    const std::int64_t per = splitLength(c.context, c.splits);
    m.tilesPerBlock = (std::min(per, c.context) + L.tileTokens - 1) / L.tileTokens;
    m.launch = kLaunchSecondsEstimate;
    m.chain = double(m.tilesPerBlock + 1) * kHbmLatencyEstimate;
    m.bandwidth = copyBytesPerSecond > 0 ? decodeCosts(DecodePath::Fp16, c).memoryBytes / copyBytesPerSecond : 0;
    if (c.splits > 1)
        m.merge = kL2LatencyEstimate * (2.0 * std::ceil(c.splits / 32.0) + std::ceil(c.splits / 8.0)) +
                  kHbmLatencyEstimate; // and the partials' and counter's round trip before the flag
    const double body = std::max(m.bandwidth, m.waves * m.chain);
    m.bound = m.bandwidth >= m.waves * m.chain ? "bandwidth" : "latency";
    m.seconds = m.launch + body + m.merge;
    return m;
}

LookupLatencyModel lookupLatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                      double copyBytesPerSecond)
{
    LookupLatencyModel m;
    const int S = c.shape.headDim / c.dim, R = c.stages, K = c.k;
    const double rows = double(S) * R, per = rows * K;
    m.blocksPerSm = lookupResidentBlocks(c.shape.heads / c.shape.kvHeads, S, R, K, sharedOptin);
    const std::int64_t blocks = std::int64_t(c.batch) * c.shape.heads * c.splits;
    const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(multiprocessors) * std::max(1, m.blocksPerSm));
    m.waves = int((blocks + slots - 1) / slots);
    const std::int64_t per32 = splitLength(c.context, c.splits);
    m.tokensPerThread = (std::min(per32, c.context) + kLookupSplitThreads - 1) / kLookupSplitThreads;
    m.launches = kLaunchSecondsEstimate; // the step is one launch
    // The table blocks' waves (they draw the first tickets, so they take the slots first), each
    // block's chain an HBM latency, then per codeword of a thread and up to kLookupTableHeads heads
    // its D/8 loads 4 at a time; then the split blocks' wait on their count (a round trip to the L2).
    const std::int64_t tableBlocks = std::int64_t(c.batch) * c.shape.kvHeads * S * R;
    const double tableWaves = double((tableBlocks + slots - 1) / slots);
    const double passes =
        std::ceil(double(K) / kTablesThreads) * std::ceil(double(c.shape.heads / c.shape.kvHeads) / kLookupTableHeads);
    m.tables = tableWaves * (kHbmLatencyEstimate +
                             passes * std::ceil(c.dim / double(kFeaturesPerLane) / 4.0) * kL2LatencyEstimate) +
               kL2LatencyEstimate;
    const double setup = kHbmLatencyEstimate + std::ceil(per / kLookupSplitThreads / 8.0) * kL2LatencyEstimate;
    // A token's work: its S·R table reads and bin atomics. Staged, the next token's codes are in
    // flight while this one is weighed, so a token waits only for what of the HBM latency its
    // predecessor's work did not cover.
    const double work = 2.0 * rows * kSharedOpEstimate, n = double(m.tokensPerThread);
    m.codesStaged = c.codesStaged && lookupStagesCodes(S, R, K, sharedOptin);
    const double walk =
        m.codesStaged
            ? (n > 0 ? kHbmLatencyEstimate + n * work + (n - 1) * std::max(0.0, kHbmLatencyEstimate - work) : 0.0)
            : n * (kHbmLatencyEstimate + work);
    const double chain = setup + walk;
    const auto kernels = decodeKernelCosts(DecodePath::Lookup, c);
    const double stepBytes = kernels.empty() ? 0 : kernels[0].hbmBytes;
    const double parts = stageParts(c.dim), P = c.splits;
    // The combine blocks wait on their pair's count of finished splits (an L2 round trip), then as
    // the stage combine: its codeword loads kStageLoadsInFlight (4 on Hopper) at a time, a pass per
    // kLookupTableHeads of the group's heads.
    const double headPasses = std::ceil(double(c.shape.heads / c.shape.kvHeads) / kLookupTableHeads);
    m.combine = (1.0 + 2.0 * std::ceil(P / 32.0) + std::ceil(P / 8.0) + headPasses * std::ceil(K / parts / 4.0) +
                 std::ceil(R / 4.0)) *
                    kL2LatencyEstimate +
                kHbmLatencyEstimate;
    // The split blocks' waves, or, if longer, what of the step's bytes at the copy rate the tables
    // and the combine do not already account for.
    const double floor = copyBytesPerSecond > 0 ? stepBytes / copyBytesPerSecond - m.tables - m.combine : 0.0;
    m.split = std::max(m.waves * chain, floor);
    m.seconds = m.launches + m.tables + m.split + m.combine;
    return m;
}

PaperLatencyModel paperLatencyModel(const DecodeCostCase& c, int multiprocessors, std::size_t sharedOptin,
                                    double copyBytesPerSecond)
{
    PaperLatencyModel m;
    const int hd = c.shape.headDim, group = c.shape.heads / c.shape.kvHeads, Gt = compiledGroupOf(group);
    const int S = hd / c.dim, R = c.stages, K = c.k, U = Gt >= 8 ? 1 : 2;
    const int bpt = PackedCodes::bytesFor(R, PackedCodes::bitsFor(K));
    const int rows = kDecodeWarps * (256 / hd), width = hd / kFeaturesPerLane;
    m.codesStaged = paperStagedWords(hd, U, S, bpt) <= kPaperStageWords && (!c.paperBins || paperBinsStageCodes(Gt));
    m.blocksPerSm = paperResidentBlocks(c.shape, c.dim, R, K, c.paperBins, c.ropeWalk, sharedOptin);
    const std::int64_t blocks = std::int64_t(c.batch) * c.shape.kvHeads * c.splits;
    const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(multiprocessors) * std::max(1, m.blocksPerSm));
    m.waves = int((blocks + slots - 1) / slots);
    const std::int64_t per = std::min(splitLength(c.context, c.splits), c.context);
    m.stepsPerBlock = (per + std::int64_t(U) * rows - 1) / (std::int64_t(U) * rows);
    const double rounds = std::ceil(R / 4.0);
    double step = rounds * kL2LatencyEstimate + std::log2(double(width)) * kShuffleEstimate;
    if (!m.codesStaged)
        step += rounds * kSharedOpEstimate + kHbmLatencyEstimate; // code words from the L1, a line from HBM
    if (c.paperBins) {
        const double lanesPerSub = c.dim / double(kFeaturesPerLane);
        step += 2 * kBarrierEstimate + std::ceil(R / lanesPerSub) * group * kSharedOpEstimate;
    }
    m.step = step;
    const double chain = kHbmLatencyEstimate + double(m.stepsPerBlock) * step;
    const auto kernels = decodeKernelCosts(DecodePath::Paper, c);
    const double bytes = kernels.empty() ? 0 : kernels[0].hbmBytes;
    m.split = std::max(m.waves * chain, copyBytesPerSecond > 0 ? bytes / copyBytesPerSecond : 0.0);
    m.launches = 2 * kLaunchSecondsEstimate;
    if (c.paperBins) {
        const double parts = stageParts(c.dim), P = c.splits;
        const double headPasses = std::ceil(double(group) / kLookupTableHeads);
        m.combine = (2.0 * std::ceil(P / 32.0) + std::ceil(P / 8.0) + headPasses * std::ceil(K / parts / 4.0) +
                     std::ceil(R / 4.0)) *
                        kL2LatencyEstimate +
                    kHbmLatencyEstimate;
    } else {
        m.combine = kHbmLatencyEstimate + 2.0 * c.splits * kL2LatencyEstimate; // combineKernel's serial loops
    }
    m.seconds = m.launches + m.split + m.combine;
    return m;
}

DecodeRates decodeRates(const DeviceInfo& device, double copyBytesPerSecond, double l2Rate)
{
    DecodeRates r;
    r.memory = copyBytesPerSecond > 0 ? copyBytesPerSecond : device.memoryBandwidth;
    r.shared = double(device.multiprocessors) * 128.0 * device.clockHz;
    r.flops = device.peakFp32Flops;
    if (l2Rate > 0) {
        r.l2 = l2Rate;
        r.l2Source = "given";
    } else {
        r.l2 = 2.5 * r.memory;
        r.l2Source = "estimate: 2.5 x the HBM rate";
    }
    return r;
}

} // namespace gsrq::gpu

namespace gsrq::gpu {

namespace {

// Hopper's shared memory per block with the opt-in (the CUDA programming guide): 227 KiB.
constexpr std::size_t kHopperSharedOptin = 227 * 1024;

DeviceInfo hopperSxm(const char* name, std::uint64_t memory, double nominalBandwidth)
{
    DeviceInfo d;
    d.name = name;
    d.memoryBytes = memory;
    d.computeMajor = 9;
    d.multiprocessors = 132;
    d.clockHz = 1.98e9;
    d.peakFp32Flops = 132.0 * fp32LanesPerSm(9, 0) * 2 * d.clockHz;
    d.memoryBandwidth = nominalBandwidth;
    d.l2Bytes = 50ull << 20;
    return d;
}

const std::vector<DeviceModel>& models()
{
    static const std::vector<DeviceModel> m = {
        {"h100", hopperSxm("NVIDIA H100 SXM", 80ull << 30, 3.35e12), 3.35e12,
         "HBM: the datasheet's 3.35 TB/s (no copy rate measured on an H100 here)", kHopperSharedOptin, 494.7e12},
        {"h200", hopperSxm("NVIDIA H200", 141ull << 30, 4.8e12), 4.24e12,
         "HBM: 4.24 TB/s, the device-to-device copy bench-decode measured on an H200 (2026-11-26)", kHopperSharedOptin,
         494.7e12},
    };
    return m;
}

} // namespace

const DeviceModel* findDeviceModel(const std::string& name)
{
    for (const auto& m : models())
        if (m.name == name)
            return &m;
    return nullptr;
}

std::string deviceModelNames()
{
    std::string s;
    for (const auto& m : models())
        s += (s.empty() ? "" : ", ") + m.name;
    return s;
}

double decodeLatencyModel(DecodePath path, const DecodeCostCase& c, int sms, std::size_t optin, double copy)
{
    DecodeCostCase lc = c;
    if (path != DecodePath::Paper)
        lc.paperBins = false;
    switch (path) {
    case DecodePath::Fp16:
        return fp16LatencyModel(lc, sms, optin, copy).seconds;
    case DecodePath::Lookup:
        return lookupLatencyModel(lc, sms, optin, copy).seconds;
    case DecodePath::Paper:
        return paperLatencyModel(lc, sms, optin, copy).seconds;
    }
    return 0;
}

namespace {

// The named device's side of the sweep: a cell's split plans and the shared memory its launches
// would ask for; a point's "time" is its roofline at the model's rates.
class ModelSweep final : public DecodeSweepBackend {
public:
    ModelSweep(const DecodeBenchOptions& o, const DecodeBenchReport& rep, const DeviceModel& model)
        : m_o(o), m_rep(rep), m_model(model)
    {
    }

    std::string prepare(int batch, std::int64_t ctx) override
    {
        const auto& s = m_o.shape;
        m_ctx = ctx;
        m_batch = batch;
        const int group = s.heads / s.kvHeads, S = s.headDim / m_rep.dim, sms = m_model.info.multiprocessors;
        const std::size_t optin = m_model.sharedOptin;
        m_binned = planPaperSplits(ctx, batch, s, m_rep.dim, m_rep.stages, m_rep.k, true, sms, optin);
        m_lookup = planLookupSplits(ctx, batch, s.heads, group, S, m_rep.stages, m_rep.k, sms, optin);
        // The shared memory the launches would ask for (decode_math.h), against the device's opt-in.
        const std::size_t combine = lookupCombineDynamicBytes(group, m_binned.splits, m_rep.k, m_rep.dim);
        m_lookupShared = lookupStepDynamicBytes(group, m_lookup.splits, m_rep.dim, S, m_rep.stages, m_rep.k, false) +
                         kLookupSplitStaticBytes;
        m_paperBins = std::max(paperBinsDynamicBytes(group, S, m_rep.stages, m_rep.k) +
                                   paperBinsStaticBytes(compiledGroupOf(group)),
                               combine) <= optin;
        return decodeShapeProblem(s, m_rep.dim, m_rep.stages, m_rep.k);
    }

    bool check(DecodeBenchPoint& p) override
    {
        const auto& s = m_o.shape;
        const int group = s.heads / s.kvHeads, S = s.headDim / m_rep.dim, sms = m_model.info.multiprocessors;
        const std::size_t optin = m_model.sharedOptin;
        if (p.path == DecodePath::Lookup && m_lookupShared > optin) {
            p.skipped = cat("the lookup path's blocks need ", m_lookupShared / 1024,
                            " KiB of shared memory per block; the ", m_model.info.name, " has ", optin / 1024);
            return false;
        }
        const bool bins = p.path == DecodePath::Lookup || (p.path == DecodePath::Paper && m_paperBins);
        p.splits = p.path == DecodePath::Lookup ? m_lookup.splits
                   : bins                       ? m_binned.splits
                   : p.path == DecodePath::Fp16
                       ? planFp16Splits(m_ctx, m_batch, s.kvHeads, s.headDim, group, sms, optin).splits
                       : planPaperSplits(m_ctx, m_batch, s, m_rep.dim, m_rep.stages, m_rep.k, false, sms, optin).splits;
        p.paperBins = p.path == DecodePath::Paper && m_paperBins;
        const bool staged = lookupStagesCodes(S, m_rep.stages, m_rep.k, optin);
        const bool walk = paperBinsWalk(group, S, m_rep.stages, m_rep.k, optin);
        p.costs = decodeCosts(
            p.path, {s, m_rep.dim, m_rep.stages, m_rep.k, m_ctx, m_batch, p.splits, p.paperBins, staged, walk});
        p.roofline = roofline(p.costs, m_rep.rates);
        p.latencyModelSeconds = decodeLatencyModel(
            p.path, {s, m_rep.dim, m_rep.stages, m_rep.k, m_ctx, m_batch, p.splits, p.paperBins, true, walk}, sms,
            optin, m_model.copyBytesPerSecond);
        return true;
    }

    std::vector<std::vector<double>> time(const std::vector<DecodeBenchPoint>& points,
                                          const std::function<bool()>&) override
    {
        std::vector<std::vector<double>> t;
        for (const auto& p : points)
            t.push_back({p.roofline.seconds});
        return t;
    }

    void model(DecodeBenchPoint&) override {} // done in check: the roofline is the time

    bool pairsRepetitions() const override { return false; }

private:
    const DecodeBenchOptions& m_o;
    const DecodeBenchReport& m_rep;
    const DeviceModel& m_model;
    std::int64_t m_ctx = 0;
    int m_batch = 0;
    SplitPlan m_binned, m_lookup;
    std::size_t m_lookupShared = 0;
    bool m_paperBins = false;
};

} // namespace

DecodeBenchReport modelDecodeBench(const DecodeBenchOptions& o, int dim, int stages, int k, const DeviceModel& model,
                                   const std::function<void(const DecodeBenchPoint&)>& onPoint)
{
    DecodeBenchReport rep;
    rep.backend = DecodeBackend::Cuda;
    rep.device = "model of the " + model.info.name;
    rep.nominalBandwidth = model.info.memoryBandwidth;
    rep.copyBytesPerSecond = model.copyBytesPerSecond;
    rep.rates = decodeRates(model.info, model.copyBytesPerSecond, o.l2BytesPerSecond);
    rep.dim = dim;
    rep.stages = stages;
    rep.k = k;
    rep.codebookSource = "none (model)";
    ModelSweep sweep(o, rep, model);
    runDecodeSweep(o, rep, sweep, onPoint, {});
    return rep;
}

} // namespace gsrq::gpu
