// The decode benchmark's plain data: names, the roofline's arithmetic, synthetic codebooks and queries.

#include "core/decode/decode_bench.h"

#include "core/base/error.h"
#include "core/base/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace gsrq {

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

const char* decodeBackendName(DecodeBackend backend)
{
    return backend == DecodeBackend::Cpu ? "cpu" : "cuda";
}

Roofline roofline(const DecodeCosts& c, const DecodeRates& r)
{
    Roofline out;
    auto term = [&](double amount, double rate, const std::string& name) {
        if (amount <= 0 || rate <= 0)
            return;
        const double t = amount / rate;
        if (t > out.seconds) {
            out.seconds = t;
            out.bound = name;
        }
    };
    term(c.memoryBytes, r.memory, r.memoryName);
    term(c.l2Bytes, r.l2, "l2");
    term(c.sharedBytes, r.shared, "shared");
    term(c.lookups, r.lookups, "lookups");
    term(c.flops, r.flops, "flops");
    return out;
}

bool DecodeBenchReport::allVerified() const
{
    for (const auto& p : points)
        if (p.relError >= 0 && !p.verified) // checked, and failed (its `skipped` says so)
            return false;
    return true;
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

int decodeStagesForBpa(double bpa, int dim)
{
    const double r = bpa * dim / 8.0;
    const int R = int(std::lround(r));
    if (R < 1 || std::abs(r - R) > 1e-9)
        throwInvalid("--bpa ", bpa, " with D = ", dim, " and K = 256 needs a whole number of stages (bpa · D / 8)");
    return R;
}

void checkDecodeBooks(const DecodeShape& s, const Codebooks& keyBooks, const Codebooks& valueBooks)
{
    const std::int64_t F = std::int64_t(s.kvHeads) * s.headDim;
    if (keyBooks.features() != F || valueBooks.features() != F)
        throwInvalid("the codebooks cover ", keyBooks.features(), " (keys) and ", valueBooks.features(),
                     " (values) features; kv-heads × head-dim = ", F);
    if (valueBooks.dim != keyBooks.dim || valueBooks.stages != keyBooks.stages || valueBooks.k != keyBooks.k)
        throwInvalid("key and value codebooks differ in D, R or K; the decode paths take one shape for both");
    if (!keyBooks.order.empty() || !valueBooks.order.empty())
        throwInvalid("the codebooks quantize channels in another order (strided groups, as VQLLM-style training "
                     "makes them); the decode paths take contiguous subspaces");
}

bool verifyDecodePoint(DecodeBenchPoint& p, const MatrixRF& out, const Eigen::VectorXd& ref)
{
    p.relError = decodeRelativeError(out.row(0).transpose().cast<double>(), ref);
    p.verified = p.relError <= kDecodeTolerance;
    if (!p.verified)
        p.skipped = cat("failed verification: relative error ", p.relError, " > ", kDecodeTolerance);
    return p.verified;
}

void timeDecodePoint(DecodeBenchPoint& p, std::vector<double> t, double bytes)
{
    std::sort(t.begin(), t.end());
    p.seconds = median(t);
    p.minSeconds = t.front();
    p.maxSeconds = t.back();
    p.bytes = bytes;
    p.bytesPerSecond = p.seconds > 0 ? bytes / p.seconds : 0;
}

double pairedSpeedup(const std::vector<double>& fp16Seconds, const std::vector<double>& pathSeconds)
{
    std::vector<double> ratios;
    for (std::size_t i = 0; i < std::min(fp16Seconds.size(), pathSeconds.size()); ++i)
        if (pathSeconds[i] > 0)
            ratios.push_back(fp16Seconds[i] / pathSeconds[i]);
    return ratios.empty() ? 0.0 : median(ratios);
}

Codebooks codebooksRoundedToHalf(const Codebooks& books)
{
    Codebooks r = books;
    for (float& v : r.data)
        v = float(Eigen::half(v));
    return r;
}

double decodeRelativeError(const Eigen::VectorXd& out, const Eigen::VectorXd& ref)
{
    if (!out.allFinite())
        return std::numeric_limits<double>::infinity();
    return (out - ref).norm() / std::max(ref.norm(), 1e-300);
}

MatrixRF decodeBenchQuery(int batch, const DecodeShape& s, std::uint64_t seed)
{
    MatrixRF q(batch, std::int64_t(s.heads) * s.headDim);
    for (int b = 0; b < batch; ++b) {
        std::mt19937_64 rng(seed * 1000003 + std::uint64_t(b));
        std::normal_distribution<float> normal;
        for (Eigen::Index j = 0; j < q.cols(); ++j)
            q(b, j) = normal(rng);
    }
    return q;
}

} // namespace gsrq
