#pragma once
// Statistics of plain values: histograms and the median, the one definition every part uses.

#include <cstdint>
#include <iterator>
#include <vector>

namespace gsrq {

// `bins` equal bins over [min, max] of `values`: bin centres and counts (a value equal to the
// maximum falls in the last bin). Empty for no values; one bin's width is at least 1e-300.
struct Histogram {
    std::vector<double> centres;
    std::vector<std::int64_t> counts;
};
Histogram histogram(const std::vector<double>& values, int bins);

// The median: the middle value, or for an even count the mean of the two middle values (as NumPy's
// and Python's statistics.median); 0 for no values.
double median(std::vector<double> values);
// The same over any range of numbers (an Eigen vector, a span).
template <class Range> double median(const Range& values)
{
    return median(std::vector<double>(std::begin(values), std::end(values)));
}

} // namespace gsrq
