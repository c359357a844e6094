#include "core/base/bootstrap.h"

#include "core/base/error.h"

#include <algorithm>
#include <random>

namespace gsrq {

double quantile(std::vector<double> values, double q)
{
    if (values.empty() || std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); }))
        return std::nan(""); // no order among NaNs: no quantile
    std::sort(values.begin(), values.end());
    const double h = std::clamp(q, 0.0, 1.0) * double(values.size() - 1);
    const auto lo = std::size_t(std::floor(h));
    const std::size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (h - double(lo)) * (values[hi] - values[lo]);
}

Interval pairedBootstrap(std::size_t n, const std::function<double(const std::vector<std::size_t>&)>& stat,
                         const BootstrapSettings& s)
{
    if (n == 0 || s.resamples < 1)
        return {};
    std::mt19937_64 rng(s.seed);
    std::vector<std::size_t> draw(n);
    std::vector<double> reps;
    reps.reserve(std::size_t(s.resamples));
    for (int r = 0; r < s.resamples; ++r) {
        for (auto& i : draw)
            i = std::size_t(rng() % n); // n is a few hundred at most: the modulo's bias is below 1e-16
        reps.push_back(stat(draw));
    }
    const double tail = (1 - s.level) / 2;
    return {quantile(reps, tail), quantile(std::move(reps), 1 - tail)};
}

namespace {

void checkLengths(std::size_t a, std::size_t b, const std::vector<double>& tokens)
{
    if (a != b || a != tokens.size())
        throwInvalid("a paired interval needs one NLL and one token count per sequence for every method (got ", a, ", ",
                     b, " and ", tokens.size(), ")");
    for (double t : tokens)
        if (!(t > 0) || !std::isfinite(t))
            throwInvalid("a paired interval needs a positive count of predicted tokens per sequence (got ", t, ")");
}

// Σ tᵢ (aᵢ − rᵢ) / Σ tᵢ over the drawn sequences: the log of the perplexities' ratio.
double logRatio(const std::vector<double>& a, const std::vector<double>& r, const std::vector<double>& t,
                const std::vector<std::size_t>& draw)
{
    double num = 0, den = 0;
    for (std::size_t i : draw) {
        num += t[i] * (a[i] - r[i]);
        den += t[i];
    }
    return den > 0 ? num / den : std::nan("");
}

std::vector<std::size_t> all(std::size_t n)
{
    std::vector<std::size_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = i;
    return v;
}

} // namespace

double deltaPercent(const std::vector<double>& method, const std::vector<double>& reference,
                    const std::vector<double>& tokens)
{
    checkLengths(method.size(), reference.size(), tokens);
    return 100 * std::expm1(logRatio(method, reference, tokens, all(method.size())));
}

Interval deltaPercentInterval(const std::vector<double>& method, const std::vector<double>& reference,
                              const std::vector<double>& tokens, const BootstrapSettings& s)
{
    checkLengths(method.size(), reference.size(), tokens);
    return pairedBootstrap(
        method.size(),
        [&](const std::vector<std::size_t>& d) { return 100 * std::expm1(logRatio(method, reference, tokens, d)); }, s);
}

Interval gapInterval(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& reference,
                     const std::vector<double>& tokens, const BootstrapSettings& s)
{
    checkLengths(a.size(), reference.size(), tokens);
    checkLengths(b.size(), reference.size(), tokens);
    return pairedBootstrap(
        a.size(),
        [&](const std::vector<std::size_t>& d) {
            return 100 *
                   (std::expm1(logRatio(a, reference, tokens, d)) - std::expm1(logRatio(b, reference, tokens, d)));
        },
        s);
}

} // namespace gsrq
