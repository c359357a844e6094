#pragma once
// Reconstruction metrics (as the paper defines them), computed in double over rows x and their reconstructions x̂:
//   mse        = E‖x − x̂‖²            (summed over features, averaged over rows)
//   nmse       = mse / E‖x‖²
//   gain_error = E|‖x‖ − ‖x̂‖|
//   cosine     = E cos(x, x̂)  over rows with ‖x‖ > 0 (cos = 0 where x̂ = 0)
//   shrinkage  = E‖x̂‖² / E‖x‖²   (< 1: reconstructions shorter than the data)

#include "core/io/tensor.h"

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace gsrq {

struct QuantMetrics {
    double mse = 0;
    double nmse = 0;
    double gainError = 0;
    double cosine = 0;
    double shrinkage = 0;
};

// The metrics by their reported names (mse, nmse, gain_error, cosine, shrinkage), in that order:
// the one list that JSON output, the run store and the charts all use.
std::array<std::pair<const char*, double>, 5> namedMetrics(const QuantMetrics& m);
// One metric by its reported name; nmse for a name that is not one of them.
double metricByName(const QuantMetrics& m, std::string_view name);

// One metric of two methods side by side: b against a (GSKM against KM, say). delta = b − a;
// deltaPercent = 100·(b − a)/|a| (NaN where a is 0); better: +1 where b is better, −1 where a is,
// 0 for a tie. Better means lower mse, nmse and gain error, higher cosine, and shrinkage closer
// to 1 (no shrinkage).
// Which of two values of a metric is better: +1 for b, −1 for a, 0 for a tie or a metric with no
// better direction (iterations). Lower mse, nmse, gain_error, objective and seconds; higher cosine;
// shrinkage nearer 1.
int betterOf(std::string_view metric, double a, double b);

struct MetricDelta {
    const char* name = "";
    double a = 0, b = 0, delta = 0, deltaPercent = 0;
    int better = 0;
};
std::array<MetricDelta, 5> metricDeltas(const QuantMetrics& a, const QuantMetrics& b);

// X: n × d; Xhat: n × d.
QuantMetrics computeMetrics(const Eigen::Ref<const MatrixRF>& X, const Eigen::Ref<const MatrixRF>& Xhat);
// Reconstruction by codebook lookup: x̂_i = C[labels[i]].
QuantMetrics computeMetrics(const MatrixRF& X, const MatrixRF& C, std::span<const std::int32_t> labels);
// Mean of each metric over blocks (the paper averages per-subspace values).
QuantMetrics meanMetrics(const std::vector<QuantMetrics>& blocks);

} // namespace gsrq
