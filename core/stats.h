#pragma once
// What the app's pages show of a tensor, computed here so the views only draw: row norms and their
// histogram, per-channel RMS, rows with NaN/Inf.

#include "tensor.h"

#include <cstdint>
#include <vector>

namespace gsrq {

// `bins` equal bins over [min, max] of `values`: bin centres and counts (a value equal to the
// maximum falls in the last bin). Empty for no values; one bin's width is at least 1e-300.
struct Histogram {
    std::vector<double> centres;
    std::vector<std::int64_t> counts;
};
Histogram histogram(const std::vector<double>& values, int bins);

struct TensorStats {
    std::int64_t rows = 0, features = 0;
    std::int64_t nonFiniteRows = 0;
    std::vector<double> rowNorms;   // ‖x‖ of each finite row, in double
    std::vector<double> channelRms; // √(mean x_c²) over the finite rows, per feature
    double normMin = 0, normMax = 0, normMean = 0;
};
TensorStats tensorStats(const MatrixRF& x);

} // namespace gsrq
