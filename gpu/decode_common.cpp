// The parts of gpu/decode.h that need no device: names, split planning, shape checks, synthetic
// codebooks. Built with and without CUDA, and tested on the CPU.

#include "decode.h"

#include "decode_math.h"
#include "error.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace gsrq::gpu {

const char* decodePathName(DecodePath path)
{
    switch (path) {
    case DecodePath::Fp16:
        return "fp16";
    case DecodePath::Paper:
        return "paper";
    case DecodePath::Lookup:
        return "lookup";
    }
    return "?";
}

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

int decodeStagesForBpa(double bpa, int dim)
{
    const double r = bpa * dim / 8.0;
    const int R = int(std::lround(r));
    if (R < 1 || std::abs(r - R) > 1e-9)
        throwInvalid("--bpa ", bpa, " with D = ", dim, " and K = 256 needs a whole number of stages (bpa · D / 8)");
    return R;
}

bool DecodeBenchReport::allVerified() const
{
    for (const auto& p : points)
        if (p.skipped.empty() && !p.verified)
            return false;
    return true;
}

std::vector<SeriesPoint> decodeSeries(const DecodeBenchPoint& p)
{
    if (!p.skipped.empty() || p.seconds <= 0)
        return {};
    return {{cat(decodePathName(p.path), " b=", p.batch), double(p.context), p.seconds * 1e6}};
}

std::vector<MetricRow> decodeMetrics(const DecodeBenchPoint& p)
{
    if (!p.skipped.empty())
        return {};
    const std::string tensor = cat("b=", p.batch, " ctx=", p.context);
    std::vector<MetricRow> rows;
    auto add = [&](const char* name, double v) {
        rows.push_back({"decode", decodePathName(p.path), tensor, -1, -1, name, v});
    };
    add("seconds", p.seconds);
    add("bytes", p.bytes);
    add("bytes_per_second", p.bytesPerSecond);
    if (p.relError >= 0)
        add("rel_error", p.relError);
    if (p.speedupVsFp16 > 0)
        add("speedup_vs_fp16", p.speedupVsFp16);
    add("splits", p.splits);
    return rows;
}

Codebooks syntheticDecodeBooks(const DecodeShape& s, int dim, int stages, int k, std::uint64_t seed)
{
    Codebooks cb;
    cb.allocate(dim, stages, k, int(std::int64_t(s.kvHeads) * s.headDim / dim));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int m = 0; m < cb.subspaces; ++m)
        for (int r = 0; r < stages; ++r) {
            const float scale = std::ldexp(1.f, -(r / 2)) / std::sqrt(float(stages));
            auto b = cb.book(m, r);
            for (Eigen::Index i = 0; i < b.size(); ++i)
                b.data()[i] = normal(rng) * scale;
        }
    return cb;
}

} // namespace gsrq::gpu
