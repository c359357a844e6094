#include "core/base/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gsrq {

Histogram histogram(const std::vector<double>& values, int bins)
{
    Histogram h;
    if (values.empty() || bins < 1)
        return h;
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    const double span = std::max(*hi - *lo, 1e-300);
    h.counts.assign(std::size_t(bins), 0);
    for (double v : values)
        ++h.counts[std::size_t(std::clamp(int((v - *lo) / span * bins), 0, bins - 1))];
    for (int b = 0; b < bins; ++b)
        h.centres.push_back(*lo + (b + 0.5) * span / bins);
    return h;
}

double median(std::vector<double> v)
{
    const std::size_t n = v.size();
    if (n == 0)
        return 0;
    const auto mid = v.begin() + std::ptrdiff_t(n / 2);
    std::nth_element(v.begin(), mid, v.end());
    double m = *mid;
    if (n % 2 == 0)
        m = (m + *std::max_element(v.begin(), mid)) / 2;
    return m;
}

} // namespace gsrq
