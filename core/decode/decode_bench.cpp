// The decode benchmark's plain data: names, the roofline's arithmetic, synthetic codebooks and queries.

#include "core/decode/decode_bench.h"

#include "core/base/error.h"

#include <cmath>
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
        if (p.skipped.empty() && p.relError >= 0 && !p.verified) // checked, and failed
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
