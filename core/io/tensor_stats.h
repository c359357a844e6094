#pragma once
// Row norms and per-channel RMS of a tensor: what the Dataset page draws.

#include "core/base/stats.h"
#include "core/io/tensor.h"

#include <cstdint>
#include <vector>

namespace gsrq {

struct TensorStats {
    std::int64_t rows = 0, features = 0;
    std::int64_t nonFiniteRows = 0;
    std::vector<double> rowNorms;   // ‖x‖ of each finite row, in double
    std::vector<double> channelRms; // √(mean x_c²) over the finite rows, per feature
    double normMin = 0, normMax = 0, normMean = 0;
};
TensorStats tensorStats(const MatrixRF& x);

} // namespace gsrq
