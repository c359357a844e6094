#include "core/io/synth.h"

#include "core/base/error.h"

#include <cmath>
#include <numbers>
#include <random>

namespace gsrq {

std::optional<SynthKind> synthKindFromName(const std::string& s)
{
    if (s == "gaussian")
        return SynthKind::Gaussian;
    if (s == "kv")
        return SynthKind::KvLike;
    return std::nullopt;
}

namespace {

// Standard normal draws by Box–Muller on raw mt19937_64 output (the standard fixes the engine's
// sequence, not std::normal_distribution's), so a seed gives the same data everywhere.
class Normal {
public:
    explicit Normal(std::uint64_t seed) : m_rng(seed) {}
    float operator()()
    {
        if (m_hasSpare) {
            m_hasSpare = false;
            return m_spare;
        }
        const double u1 = (static_cast<double>(m_rng() >> 11) + 0.5) * 0x1.0p-53; // (0, 1)
        const double u2 = static_cast<double>(m_rng() >> 11) * 0x1.0p-53;         // [0, 1)
        const double r = std::sqrt(-2.0 * std::log(u1));
        m_spare = static_cast<float>(r * std::sin(2 * std::numbers::pi * u2));
        m_hasSpare = true;
        return static_cast<float>(r * std::cos(2 * std::numbers::pi * u2));
    }

private:
    std::mt19937_64 m_rng;
    float m_spare = 0;
    bool m_hasSpare = false;
};

} // namespace

MatrixRF synthesize(SynthKind kind, std::int64_t rows, int features, std::uint64_t seed)
{
    if (rows < 1)
        throwInvalid("--rows ", rows, ": must be at least 1");
    if (features < 1)
        throwInvalid("--features ", features, ": must be at least 1");
    if (rows * static_cast<std::int64_t>(features) > (std::int64_t{1} << 34))
        throwInvalid("--rows × --features = ", rows * features, " values is more than the 2^34 this tool generates");
    Normal gauss(seed);
    MatrixRF x(rows, features);
    if (kind == SynthKind::Gaussian) {
        for (Eigen::Index i = 0; i < x.size(); ++i)
            x.data()[i] = gauss();
        return x;
    }
    const int rank = std::max(1, features / 8);
    MatrixRF basis(rank, features);
    for (Eigen::Index i = 0; i < basis.size(); ++i)
        basis.data()[i] = gauss() / std::sqrt(static_cast<float>(rank));
    Eigen::RowVectorXf scale(features);
    for (int f = 0; f < features; ++f)
        scale[f] = std::exp(0.5f * gauss());
    for (int f = 0; f < features; f += std::max(1, features / 4)) // a few outlier channels
        scale[f] *= 10.0f;
    Eigen::RowVectorXf z(rank);
    for (Eigen::Index i = 0; i < rows; ++i) {
        for (int r = 0; r < rank; ++r)
            z[r] = 2.0f * gauss();
        x.row(i) = z * basis;
        for (int f = 0; f < features; ++f)
            x(i, f) = (x(i, f) + 0.5f * gauss()) * scale[f];
    }
    return x;
}

} // namespace gsrq
