// The parts of GPU decode that need no device: split planning, shape checks, the cost model and
// rates. Built with and without CUDA, and tested on the CPU.
#include "gpu/decode/roofline.h"

#include "core/base/error.h"
#include "gpu/decode/decode_math.h"

#include <algorithm>
#include <cmath>

namespace gsrq::gpu {

SplitPlan planSplits(std::int64_t tokens, int batch, int kvHeads, int multiprocessors, std::int64_t minTokens)
{
    SplitPlan p;
    if (tokens <= 0) {
        p.tokensPerSplit = 1;
        return p;
    }
    const std::int64_t heads = std::max<std::int64_t>(1, std::int64_t(batch) * kvHeads);
    const std::int64_t wanted = std::max<std::int64_t>(1, (2 * std::int64_t(multiprocessors) + heads - 1) / heads);
    const std::int64_t most = std::max<std::int64_t>(1, tokens / std::max<std::int64_t>(1, minTokens));
    std::int64_t splits = std::min(wanted, most);
    // Whole multiples of 32 tokens per split (a block's step), then drop splits left empty.
    std::int64_t per = (tokens + splits - 1) / splits;
    per = (per + 31) / 32 * 32;
    splits = (tokens + per - 1) / per;
    p.splits = int(splits);
    p.tokensPerSplit = per;
    return p;
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

DecodeCosts decodeCosts(DecodePath path, const DecodeCostCase& c)
{
    const double d = c.shape.headDim, G = double(c.shape.heads) / c.shape.kvHeads, D = c.dim, R = c.stages, K = c.k;
    const double S = d / D;                                                        // subspaces per KV head
    const double bpt = PackedCodes::bytesFor(c.stages, PackedCodes::bitsFor(c.k)); // per token and subspace
    const double tokens = double(c.batch) * c.shape.kvHeads * double(c.context);   // (sequence, KV head, token)
    const double heads = double(c.batch) * c.shape.heads;
    const double io = heads * d * 4.0 * 2.0; // FP32 queries in, outputs out
    DecodeCosts k;
    if (path == DecodePath::Fp16) {
        k.memoryBytes = tokens * 4.0 * d + io; // FP16 key and value
        k.flops = tokens * G * 4.0 * d;        // q·k and p·v per query head
        if (c.splits > 1)
            k.memoryBytes += heads * c.splits * (d + 2.0) * 4.0 * 2.0; // partials written, read back
        return k;
    }
    const double books = double(c.shape.kvHeads) * S * R * K * D * 2.0; // FP16 codewords of one of keys, values
    const double perHeadBins = S * R * K;                               // bins (or table entries) per query head
    k.memoryBytes = tokens * 2.0 * S * bpt + 2.0 * books + io;
    if (path == DecodePath::Lookup) {
        // Tables (q·codeword per head), then per token R lookups and R bin updates per subspace and head.
        k.l2Bytes = double(c.batch) * 2.0 * books;      // key books for the tables, value books at the end
        k.sharedBytes = tokens * S * R * G * 4.0 * 3.0; // table read; bin read and write
        k.flops = heads * perHeadBins * D * 2.0 * 2.0 + tokens * S * R * G * 2.0;
        k.memoryBytes += heads * c.splits * perHeadBins * 4.0 * 2.0 + heads * perHeadBins * 4.0; // weights, tables
        return k;
    }
    // Paper path: the key's R codewords gathered per token (from the L2), RoPE, the score per head.
    k.l2Bytes = tokens * S * R * D * 2.0;
    k.flops = tokens * (S * R * D + 6.0 * d + G * 2.0 * d);
    if (c.paperBins) {
        k.l2Bytes += double(c.batch) * books; // value books, once per query at the end
        k.sharedBytes = tokens * S * R * G * 4.0 * 2.0;
        k.flops += tokens * S * R * G + heads * perHeadBins * D * 2.0;
        k.memoryBytes += heads * c.splits * perHeadBins * 4.0 * 2.0;
    } else {
        k.l2Bytes *= 2.0; // values' codewords too
        k.flops += tokens * (S * R * D + G * 2.0 * d);
        if (c.splits > 1)
            k.memoryBytes += heads * c.splits * (d + 2.0) * 4.0 * 2.0;
    }
    return k;
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
