#include "core/cluster/kivi.h"

#include "core/base/error.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <regex>

namespace gsrq {

namespace {

float toHalf(float v)
{
    return float(Eigen::half(v));
}

// Quantizes `n` values spaced `stride` apart in place with one FP16 scale and zero.
void quantizeGroup(float* p, Eigen::Index n, Eigen::Index stride, int bits)
{
    float lo = p[0], hi = p[0];
    for (Eigen::Index i = 1; i < n; ++i) {
        lo = std::min(lo, p[i * stride]);
        hi = std::max(hi, p[i * stride]);
    }
    const float levels = float((1 << bits) - 1);
    const float zero = toHalf(lo);
    const float scale = toHalf((hi - lo) / levels);
    for (Eigen::Index i = 0; i < n; ++i) {
        float& v = p[i * stride];
        if (scale > 0) {
            const float q = std::clamp(std::nearbyint((v - zero) / scale), 0.0f, levels);
            v = q * scale + zero;
        } else {
            v = zero;
        }
    }
}

} // namespace

void validateKivi(const KiviSettings& s, std::int64_t features, KiviAxis axis, const std::string& flagPrefix)
{
    if (s.bits < 1 || s.bits > 8)
        throwInvalid(flagPrefix, "bits ", s.bits, ": KIVI's bits must be between 1 and 8");
    if (s.group < 1)
        throwInvalid(flagPrefix, "group ", s.group, ": must be at least 1");
    if (axis == KiviAxis::Value && features % s.group != 0)
        throwInvalid(flagPrefix, "group ", s.group, ": does not divide the values' ", features,
                     " channels (values are quantized per token in groups of channels)");
    if (s.residual < 0)
        throwInvalid(flagPrefix, "residual ", s.residual, ": must be 0 or more tokens");
}

KiviResult kiviQuantize(const MatrixRF& x, KiviAxis axis, const KiviSettings& s,
                        std::span<const std::int64_t> sequenceIds)
{
    validateKivi(s, x.cols(), axis);
    if (!sequenceIds.empty() && Eigen::Index(sequenceIds.size()) != x.rows())
        throwInvalid("sequence_ids has ", sequenceIds.size(), " entries for ", x.rows(), " rows");
    KiviResult r;
    r.reconstruction = x;
    MatrixRF& y = r.reconstruction;
    const Eigen::Index F = x.cols(), N = x.rows();
    Eigen::Index begin = 0;
    while (begin < N) {
        Eigen::Index end = begin + 1;
        if (!sequenceIds.empty())
            while (end < N && sequenceIds[std::size_t(end)] == sequenceIds[std::size_t(begin)])
                ++end;
        else
            end = N;
        const Eigen::Index T = end - begin;
        Eigen::Index quantized = std::max<Eigen::Index>(0, T - s.residual);
        if (axis == KiviAxis::Key)
            quantized -= quantized % s.group;
        if (axis == KiviAxis::Key) {
            for (Eigen::Index g = 0; g < quantized; g += s.group)
                for (Eigen::Index c = 0; c < F; ++c)
                    quantizeGroup(&y(begin + g, c), s.group, F, s.bits);
            r.groups += quantized / s.group * F;
        } else {
            for (Eigen::Index t = 0; t < quantized; ++t)
                for (Eigen::Index c = 0; c < F; c += s.group)
                    quantizeGroup(&y(begin + t, c), s.group, 1, s.bits);
            r.groups += quantized * (F / s.group);
        }
        for (Eigen::Index t = quantized; t < T; ++t)
            for (Eigen::Index c = 0; c < F; ++c)
                y(begin + t, c) = toHalf(y(begin + t, c));
        r.quantizedValues += quantized * F;
        r.fp16Values += (T - quantized) * F;
        begin = end;
    }
    const double values = double(N) * double(F);
    r.bits = values > 0
                 ? (double(r.quantizedValues) * s.bits + double(r.groups) * 32 + double(r.fp16Values) * 16) / values
                 : 0;
    return r;
}

KiviSettings parseKiviName(const std::string& name, const std::string& flag)
{
    static const std::regex re(R"(kivi-(\d+)(?:g(\d+))?(?:r(\d+))?)");
    std::smatch m;
    if (!std::regex_match(name, m, re) || m[1].length() > 2 || m[2].length() > 6 || m[3].length() > 7)
        throwInvalid(flag, ": '", name, "' is not a KIVI setting (kivi-B, kivi-BgG or kivi-BgGrN, e.g. kivi-2g32r128)");
    KiviSettings s;
    s.bits = std::stoi(m[1]);
    if (m[2].matched)
        s.group = std::stoi(m[2]);
    if (m[3].matched)
        s.residual = std::stoi(m[3]);
    if (s.bits < 1 || s.bits > 8)
        throwInvalid(flag, ": '", name, "': KIVI's bits must be between 1 and 8");
    if (s.group < 1)
        throwInvalid(flag, ": '", name, "': the group must be at least 1");
    return s;
}

std::string kiviName(const KiviSettings& s)
{
    return cat("kivi-", s.bits, "g", s.group, s.residual > 0 ? cat("r", s.residual) : std::string());
}

} // namespace gsrq
