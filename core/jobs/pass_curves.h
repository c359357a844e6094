#pragma once
// Convergence curves of many clusterings drawn as a few lines: the passes of every block (compare's
// blocks, GSRQ's subspaces) averaged per pass, one curve per method, tensor and stage. A block that
// stopped early keeps its last pass's value (its centroids no longer change), so every point
// averages all blocks and a curve ends at the mean of the blocks' final values.

#include "core/cluster/clustering.h"
#include "core/jobs/compare_job.h"
#include "core/store/run_store.h"

#include <string>
#include <string_view>
#include <vector>

namespace gsrq {

// The metrics every pass records, by name: objective, nmse, cosine, gain_error, shrinkage.
const std::vector<std::string>& passMetricNames();
// One of them (NaN for an unknown name or a metric the pass did not compute).
double passMetric(const IterationStats& it, std::string_view name);
double passMetric(const IterationRow& row, std::string_view name);

// Mean over blocks at each pass index; block b's passes are perBlock[b]. NaNs are left out of a
// point's mean; a point where every block is NaN is NaN.
std::vector<double> meanOverBlocks(const std::vector<std::vector<double>>& perBlock);

// The mean curve of one method's blocks in a compare result.
std::vector<double> meanPassCurve(const MethodResult& m, std::string_view metric);

struct PassCurve {
    std::string method, tensor;
    int stage = -1;
    int blocks = 0;             // subspaces averaged
    std::vector<double> values; // per pass
    std::string label() const;  // "gskm layers.2.v stage 1 (mean of 8 blocks)"
};
// Stored passes grouped by method, tensor and stage (in order of first appearance) and averaged
// over their subspaces.
std::vector<PassCurve> meanPassCurves(const std::vector<IterationRow>& rows, std::string_view metric);

} // namespace gsrq
