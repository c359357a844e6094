#pragma once
// The compare and sweep jobs: KM against GSKM on the subspaces of one tensor.
//
// The F features are cut into M = F/D contiguous blocks of D dims, each clustered alone with K
// codewords; metrics are computed per block and averaged over blocks (as in the paper). With
// `residual`, each block is first quantized by a KM pass and the methods cluster what it leaves
// (the paper's "1st residual" experiment); metrics are then those of the residual.
// A job is run(settings, progress): the callback returns false to cancel, checked per iteration.

#include "core/cluster/clustering.h"
#include "core/cluster/metrics.h"
#include "core/cluster/progress.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

struct CompareSettings {
    int dim = 0; // D; 0 = all features in one block
    int k = 256;
    int iterations = 50;
    std::uint64_t seed = 0;
    bool residual = false;
    bool reseedEmpty = false;
    std::vector<Method> methods{Method::KMeans, Method::GainShape};
};

struct BlockResult {
    int block = 0;
    QuantMetrics metrics;
    int iterations = 0;
    StopReason stop = StopReason::MaxIterations;
    double seconds = 0;
    std::vector<IterationStats> history;
};

struct MethodResult {
    Method method = Method::KMeans;
    QuantMetrics metrics; // mean over blocks
    int iterations = 0;   // the most any block needed
    int convergedBlocks = 0;
    double seconds = 0; // all blocks
    std::vector<BlockResult> blocks;
};

struct CompareResult {
    int dim = 0;
    int blocks = 0;
    bool cancelled = false;
    std::vector<MethodResult> methods;
    const MethodResult* find(Method m) const;
};

// Checks settings against X's shape; throws Error(InvalidInput) naming the flag (--dim, --k, --iters).
void validateCompare(const CompareSettings& s, std::int64_t rows, std::int64_t features);

// X: n × F row-major; weights: n values or null.
CompareResult runCompare(const MatrixRF& X, const float* weights, const CompareSettings& s, ClusterBackend& backend,
                         const ProgressFn& progress = {});

// A sweep: the comparison at each value of D or K, every point validated before any work starts.
// onPoint sees each point that finished, as it finishes. When the job is cancelled, the point it
// cut short ends the list (its result says cancelled; the run recorder leaves it out).
enum class SweepAxis { Dim, K };
struct SweepPoint {
    int value = 0;
    CompareResult result;
};
std::vector<SweepPoint> runSweep(const MatrixRF& X, const float* weights, const CompareSettings& base, SweepAxis axis,
                                 const std::vector<int>& values, ClusterBackend& backend,
                                 const ProgressFn& progress = {},
                                 const std::function<void(const SweepPoint&)>& onPoint = {});

} // namespace gsrq
