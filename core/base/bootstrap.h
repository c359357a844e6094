#pragma once
// How sure a perplexity comparison is: a paired percentile bootstrap over the evaluated sequences.
// Every method of a perplexity run reads the same sequences, so a replicate draws n sequence
// indices with replacement once and evaluates every method on that draw (paired): what the
// sequences share (a hard passage is hard for every cache) cancels in a difference, and only the
// methods' own variation is left in the interval. The interval is the percentile interval of the
// replicates' statistic (Efron & Tibshirani 1993, ch. 13), 95% unless told.

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace gsrq {

struct Interval {
    double lo = std::nan(""), hi = std::nan("");
    bool valid() const { return std::isfinite(lo) && std::isfinite(hi); }
};

struct BootstrapSettings {
    int resamples = 10000;                // replicates
    double level = 0.95;                  // the interval's coverage
    std::uint64_t seed = 0x5eed0f5eedULL; // the same draws on every run: a table regenerates exactly
};

// The percentile interval of stat over `resamples` draws of n indices with replacement (the
// indices each replicate drew, in draw order). An invalid interval for n = 0.
Interval pairedBootstrap(std::size_t n, const std::function<double(const std::vector<std::size_t>&)>& stat,
                         const BootstrapSettings& s = {});

// The q-quantile (0 ≤ q ≤ 1) of values with linear interpolation between order statistics (NumPy's
// default, Hyndman & Fan type 7); NaN for none, or where a value is NaN.
double quantile(std::vector<double> values, double q);

// Perplexity change in percent of `method` against `reference` on the same sequences: each entry is
// one sequence's mean NLL per predicted token (natural log) and `tokens` its predicted tokens, so
// 100 · (exp(Σ tᵢ mᵢ / Σ tᵢ − Σ tᵢ rᵢ / Σ tᵢ) − 1) is exactly the perplexities' Δ%.
double deltaPercent(const std::vector<double>& method, const std::vector<double>& reference,
                    const std::vector<double>& tokens);
// Its paired bootstrap interval. Throws Error(InvalidInput) when the three lengths differ or a
// sequence has no predicted token.
Interval deltaPercentInterval(const std::vector<double>& method, const std::vector<double>& reference,
                              const std::vector<double>& tokens, const BootstrapSettings& s = {});
// The gap between two methods in points of Δ% (Δ%(a) − Δ%(b), both against `reference`), with its
// paired interval: an interval that excludes 0 says the gap is not the sequences' noise.
Interval gapInterval(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& reference,
                     const std::vector<double>& tokens, const BootstrapSettings& s = {});

} // namespace gsrq
