#include "core/lm/rope.h"

#include "core/base/error.h"

#include <cmath>

namespace gsrq {

std::optional<RopePairing> ropePairingFromName(const std::string& s)
{
    if (s == "interleaved")
        return RopePairing::Interleaved;
    if (s == "half" || s == "rotate_half" || s == "rotate-half")
        return RopePairing::RotateHalf;
    return std::nullopt;
}

std::vector<double> ropeInvFreq(double theta, int headDim)
{
    std::vector<double> f(static_cast<std::size_t>(headDim / 2));
    for (int i = 0; i < headDim / 2; ++i)
        f[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / headDim);
    return f;
}

MatrixRF applyRope(const MatrixRF& X, int headDim, const std::vector<std::int64_t>& positions,
                   const std::vector<double>& invFreq, RopePairing pairing)
{
    if (headDim < 2 || headDim % 2 != 0 || X.cols() % headDim != 0)
        throwInvalid("RoPE: head_dim ", headDim, " must be even and divide the ", X.cols(), " features");
    if (static_cast<Eigen::Index>(positions.size()) != X.rows())
        throwInvalid("RoPE: ", positions.size(), " positions for ", X.rows(), " rows");
    if (static_cast<int>(invFreq.size()) != headDim / 2)
        throwInvalid("RoPE: ", invFreq.size(), " inverse frequencies, head_dim ", headDim, " needs ", headDim / 2);
    const int half = headDim / 2;
    const Eigen::Index heads = X.cols() / headDim;
    MatrixRF out(X.rows(), X.cols());
    for (Eigen::Index t = 0; t < X.rows(); ++t) {
        for (int i = 0; i < half; ++i) {
            const double a =
                static_cast<double>(positions[static_cast<std::size_t>(t)]) * invFreq[static_cast<std::size_t>(i)];
            const double c = std::cos(a), s = std::sin(a);
            for (Eigen::Index h = 0; h < heads; ++h) {
                const Eigen::Index base = h * headDim;
                const Eigen::Index i0 = base + (pairing == RopePairing::Interleaved ? 2 * i : i);
                const Eigen::Index i1 = base + (pairing == RopePairing::Interleaved ? 2 * i + 1 : i + half);
                const double x0 = X(t, i0), x1 = X(t, i1);
                out(t, i0) = static_cast<float>(x0 * c - x1 * s);
                out(t, i1) = static_cast<float>(x0 * s + x1 * c);
            }
        }
    }
    return out;
}

} // namespace gsrq
