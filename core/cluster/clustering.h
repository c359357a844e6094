#pragma once
// K-means (KM) and Gain–Shape K-means (GSKM), written once on top of ClusterBackend.
//
// Both methods start from the same K distinct rows drawn with the seed and assign with the same rule
// (nearest centroid: argmax 2·x·c − ‖c‖²). KM starts from the rows as centroids; GSKM starts as
// the paper's Algorithm 1 does: shapes s_k = the rows' directions, one assignment by direction
// (argmax x·s_k), gains g_k = max(0, Σw x·s_k / Σw) over those members. Then they differ only in
// the update:
//   KM:   c_k = Sx_k / W_k
//   GSKM: s_k = Sy_k / ‖Sy_k‖, g_k = max(0, Sx_k·s_k / W_k), c_k = g_k·s_k
// An empty cluster keeps its centroid (or, with reseedEmpty, splits the heaviest cluster); a GSKM
// cluster whose mean direction is near zero keeps its old shape. Iteration stops when an
// assignment changes no label, after maxIterations updates, or when the callback cancels.

#include "core/cluster/cluster_backend.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gsrq {

enum class Method { KMeans, GainShape };
const char* methodName(Method m);                            // "km", "gskm"
std::optional<Method> methodFromName(std::string_view name); // "km", "gskm"; nullopt otherwise

struct ClusteringParams {
    int k = 256;                // codewords
    int maxIterations = 50;     // updates at most (the paper runs up to 100)
    std::uint64_t seed = 0;     // picks the K initial rows
    float epsilon = 1e-8f;      // ε in y = x/(‖x‖+ε)
    double shapeEpsilon = 1e-6; // GSKM: a mean direction shorter than this keeps the old shape
    bool reseedEmpty = false;   // split the heaviest cluster into an empty one
    bool passMetrics = true;    // cosine, gain error and shrinkage of every pass (a few flops a row)
    // K-means only: 0 for Lloyd's update (the members' mean); γ in (0, 1) moves each centroid to an
    // exponential moving average of the passes' sums, c = Σ_t γ^(T−t) Σw·x / Σ_t γ^(T−t) Σw (the
    // EMA codebook update of VQ-VAE and VQLLM, over whole passes; its bias correction cancels in the
    // ratio). A cluster empty in every pass so far keeps its centroid.
    double emaDecay = 0;
};

// One assignment pass. iteration = updates done before it (0: the initial centroids).
struct IterationStats {
    int iteration = 0;
    double objective = 0; // Σw‖x − c‖² / Σw for the centroids of this pass
    double nmse = 0;      // Σw‖x − c‖² / Σw‖x‖²
    // metrics.h's unweighted cosine, gain error and shrinkage of the rows against their centroids
    // in this pass (the last pass's equal the block's final metrics); NaN without passMetrics.
    double cosine = std::numeric_limits<double>::quiet_NaN();
    double gainError = std::numeric_limits<double>::quiet_NaN();
    double shrinkage = std::numeric_limits<double>::quiet_NaN();
    std::int64_t changed = 0; // labels that changed (all rows at iteration 0)
    double skipped = 0;       // fraction of the n × K codeword scores exact bounds skipped (0: brute force)
    int emptyClusters = 0;
    int reseeded = 0;   // empty clusters re-seeded by the update that follows
    double seconds = 0; // wall time of this pass and the update after it
    bool last = false;  // the clustering's final pass (converged or out of iterations)
};

enum class StopReason { Converged, MaxIterations, Cancelled };
const char* stopReasonName(StopReason r); // "converged", "max_iterations", "cancelled"

struct ClusteringResult {
    MatrixRF centroids;               // K × D
    std::vector<std::int32_t> labels; // n, nearest centroid of `centroids`
    std::vector<IterationStats> history;
    StopReason stop = StopReason::MaxIterations;
    int iterations = 0; // updates performed
    double seconds = 0;
};

// Returns false to cancel; checked once per iteration.
using IterationCallback = std::function<bool(const IterationStats&)>;

// The K distinct row indices both methods start from (seeded, reproducible across platforms).
std::vector<std::int64_t> sampleRows(std::int64_t n, int k, std::uint64_t seed);

// X: n × d row-major float32; weights: n values ≥ 0 or null. The backend is (re)bound to X.
// Throws Error(InvalidInput) for k < 1, k > n, or weights summing to zero.
ClusteringResult cluster(const RowsRef& X, const float* weights, Method method, const ClusteringParams& params,
                         ClusterBackend& backend, const IterationCallback& onIteration = {});

// The same on the block the backend has selected (its residual rows, its weights): how the
// quantizer trains stage after stage without the data leaving the backend. params.epsilon is
// the one given to selectBlock.
ClusteringResult clusterSelected(ClusterBackend& backend, Method method, const ClusteringParams& params,
                                 const IterationCallback& onIteration = {});

// Several members of the blocks the backend has selected together (ClusterBackend::selectBlocks),
// clustered at once: member b with params[b], which may differ in seed, iterations and re-seeding
// only. Each member stops on its own and drops out of the passes; member by member the result is
// clusterSelected's on that block alone (the history's seconds aside: a pass takes the batch's
// time). onIteration(b, stats) as clusterSelected's, per member; false cancels every member.
using MemberIterationCallback = std::function<bool(int member, const IterationStats&)>;
std::vector<ClusteringResult> clusterSelectedMembers(ClusterBackend& backend, Method method,
                                                     std::span<const ClusteringParams> params,
                                                     const MemberIterationCallback& onIteration = {});

// Throws Error(InvalidInput) for a weight that is negative or not finite, or all weights zero.
void validateWeights(const float* weights, std::int64_t n);

// One update step on the sufficient statistics (update_rule.h per cluster; exposed for tests).
// centroids (K × D) is updated in place; GSKM keeps gains/shapes in `gains` (K) and `shapes` (K × D).
void updateCentroids(Method method, const AssignStats& stats, double shapeEpsilon, MatrixRF& centroids,
                     GainShapeState& gs);

} // namespace gsrq
