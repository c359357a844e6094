#pragma once
// The one primitive every clustering shares (docs/architecture.md): given centroids C, for every row find the
// nearest centroid (argmax of 2·x·c − ‖c‖²) and accumulate per-cluster sufficient statistics.
// KM, GSKM, weighted variants and every residual stage call only this; backends (CPU here, CUDA in
// gpu/) implement it. No backend holds a copy of the algorithm: the centroid update, the stopping
// rule and the stage loop live in core and see only the statistics below.
//
// A backend is bound to rows of F features and clusters one block of D columns at a time. It owns
// the residual of those rows: after a stage, subtractAssigned() takes the chosen codewords off the
// residual (and adds them to a running reconstruction), so a device backend keeps all the data
// where it computes, across iterations and stages, and returns only K×D sums per pass.
//
// Lloyd's iterations run on centroids the backend holds (loadCentroids .. storeCentroids): each
// passHeld() is the primitive on them, each updateHeld() applies update_rule.h where they are. The CPU
// backend keeps them in host memory; the CUDA backend on the device, so an iteration returns only the
// pass's totals (AssignStats' scalars), the centroids cross once each way per clustering (and for
// an iteration that re-seeds empty clusters, on the host).
//
// Thread-safety: one backend per thread; calls on one backend must not overlap.

#include "core/cluster/metrics.h"
#include "core/cluster/update_rule.h"
#include "core/io/tensor.h"

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace gsrq {

// Sums over the rows assigned to each cluster k (K rows; D columns), in double.
struct AssignStats {
    Eigen::VectorXd weightSum;                            // W_k  = Σ w
    Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> count; // members (empty cluster: 0)
    MatrixRD sumX;                                        // Sx_k = Σ w·x
    MatrixRD sumY;                                        // Sy_k = Σ w·x/(‖x‖+ε); 0×0 unless asked for
    double weightedError = 0;                             // Σ w·‖x − c_label‖²
    double weightedSquaredNorm = 0;                       // Σ w·‖x‖²
    double totalWeight = 0;                               // Σ w
    std::int64_t changed = 0;                             // rows whose label differs from the previous pass
    double skipped = 0; // fraction of the n × K codeword scores exact bounds let the pass skip (0: all made)

    // Unweighted row sums behind metrics.h's cosine, gain error and shrinkage for this pass's
    // centroids (zero unless the pass was asked for them).
    double gainErrorSum = 0;     // Σ |‖x‖ − ‖c_label‖|
    double cosineSum = 0;        // Σ cos(x, c_label) over rows with ‖x‖ > 0 (0 where c_label = 0)
    std::int64_t cosineRows = 0; // rows with ‖x‖ > 0
    double squaredNormSum = 0;   // Σ ‖x‖²

    // Of the clusters: how many have no member, and Σ_k count_k·‖c_k‖² (Σ‖x̂‖² over the rows).
    // Filled by passHeld(); assignPass() leaves them to the caller, who holds the centroids.
    std::int64_t emptyClusters = 0;
    double reconstructionSquaredNorm = 0;
};

// GSKM's state between updates: each centroid is gains[k]·shapes.row(k).
struct GainShapeState {
    Eigen::VectorXd gains;
    MatrixRD shapes;
};

// What Lloyd's update carries from pass to pass (update_rule.h): the centroids, GSKM's gains and
// shapes (empty for KM), the EMA's running sums (empty unless the rule is Ema).
struct CentroidState {
    MatrixRF centroids; // K × D
    GainShapeState gs;
    Eigen::VectorXd emaWeight;
    MatrixRD emaSum;
};

// What one assignment pass accumulates besides labels, W_k, counts, Sx_k and the totals.
struct AssignRequest {
    bool shapeSums = false;  // Sy_k (GSKM needs it, KM does not)
    bool rowMetrics = false; // the unweighted row sums above
};

class ClusterBackend {
public:
    virtual ~ClusterBackend() = default;
    virtual std::string name() const = 0;   // "cpu", "cuda"
    virtual std::string device() const = 0; // "2 threads", "NVIDIA H100 ... (device 0)"
    // Threads the host-side work around the backend (beam search) may use; 0: OpenMP's default.
    virtual int hostThreads() const { return 0; }

    // Exact bounds (exact_bounds.h): passes skip the codeword scores that cannot change a row's label,
    // and give the labels, sums and centroids of scoring every one. A backend without them ignores this.
    virtual void setExactBounds(bool on) { (void)on; }
    virtual bool exactBounds() const { return false; }

    // Binds the backend to x: n × features, row-major float32, borrowed until the next bind (a
    // device backend copies it). The residual starts as x, the reconstruction as zero. weights: n
    // values ≥ 0 (the caller checks them), or null for all ones. Selects block (0, features).
    virtual void bind(const float* x, std::int64_t n, int features, const float* weights) = 0;
    virtual std::int64_t rows() const = 0;

    // Later calls work on columns [col0, col0 + dim) of the residual; ε is that of y = x/(‖x‖+ε).
    // Every label is reset to −1 (none).
    virtual void selectBlock(int col0, int dim, float epsilon) = 0;

    // The selected block of the given residual rows, in that order (|rows| × dim).
    virtual MatrixRF gatherRows(std::span<const std::int64_t> rows) = 0;

    // One assignment pass with centroids K × dim; the labels stay in the backend (see readLabels).
    virtual void assignPass(const MatrixRF& centroids, const AssignRequest& what, AssignStats& out) = 0;
    // The same without the row metrics; withShapeSums: also accumulate sumY.
    void assign(const MatrixRF& centroids, bool withShapeSums, AssignStats& out)
    {
        assignPass(centroids, AssignRequest{withShapeSums, false}, out);
    }

    // Lloyd's iterations on held centroids. The defaults keep them in host memory and apply the rule
    // there (the CPU backend's way); a device backend overrides all five to keep them where it computes.
    // loadCentroids: the state to iterate from (its gs and EMA parts sized for the rule that follows).
    virtual void loadCentroids(const CentroidState& state);
    // One assignment pass with the held centroids: out's scalars (sums of rows, changed, skipped,
    // emptyClusters, reconstructionSquaredNorm). The per-cluster sums stay with the backend.
    virtual void passHeld(const AssignRequest& what, AssignStats& out);
    // The held centroids updated from the last passHeld's sums (which asked for shape sums if the
    // rule is GainShape).
    virtual void updateHeld(const update::Params& rule);
    // The last passHeld's weightSum and count (K each), for a caller that re-seeds empty clusters.
    virtual void heldClusterTotals(AssignStats& out);
    virtual void storeCentroids(CentroidState& state);

    // ---- Independent clusterings together ------------------------------------------------------
    // A layer's subspaces within a stage are independent clusterings of the same rows. A backend
    // that can run several of them as one (a device backend: one GEMM, one argmax, one sums and one
    // update launch per pass for all of them, where one clustering alone leaves most of the device
    // idle) says how many blocks of `dim` columns clustered with k codewords it takes at once (as the
    // rows bound and its memory allow); core then selects the blocks together as members and drives
    // each member's iterations with the *Batch calls below, member by member the same clustering
    // as alone. The defaults take one block: members other than 0 are refused.
    virtual int batchCapacity(int dim, int k) const
    {
        (void)dim;
        (void)k;
        return 1;
    }
    // Members b < |col0|: columns [col0[b], col0[b] + dim) of the residual; every member's labels reset
    // to −1 and member 0 is current.
    virtual void selectBlocks(std::span<const int> col0, int dim, float epsilon);
    // Later single-block calls (gatherRows, assignPass, the held-centroid calls, the labels and
    // subtractAssigned) act on member b of the selected blocks.
    virtual void focusMember(int member);
    // One passHeld for each listed member on its own held centroids: out[i] is member active[i]'s.
    virtual void passHeldBatch(std::span<const int> active, const AssignRequest& what, std::span<AssignStats> out);
    // updateHeld for each listed member, from its own last pass.
    virtual void updateHeldBatch(std::span<const int> active, const update::Params& rule);

    virtual void readLabels(std::span<std::int32_t> out) = 0;
    virtual void writeLabels(std::span<const std::int32_t> in) = 0;

    // Residual block −= C[label] and reconstruction block += C[label], for the current labels.
    virtual void subtractAssigned(const MatrixRF& centroids) = 0;

    // Whole-row metrics of the reconstruction against the rows bound (metrics.h).
    virtual QuantMetrics reconstructionMetrics() = 0;

    // Shorthands over one n × d matrix: bind it with selectBlock(0, d, ε), and one pass with the
    // labels passed in and out (the previous labels in, −1 for none).
    void setData(const float* x, std::int64_t n, int d, const float* weights, float epsilon)
    {
        bind(x, n, d, weights);
        selectBlock(0, d, epsilon);
    }
    void assignAccumulate(const MatrixRF& centroids, bool withShapeSums, std::span<std::int32_t> labels,
                          AssignStats& out)
    {
        writeLabels(labels);
        assign(centroids, withShapeSums, out);
        readLabels(labels);
    }

private:
    // The defaults' held centroids and last pass.
    CentroidState m_held;
    AssignStats m_heldPass;
};

// Eigen GEMM over row chunks, OpenMP across chunks, memory bounded by threads × chunk × K.
// threads ≤ 0: all available cores.
namespace nearest {
struct NearestKernels;
}
// `kernel`: the assignment kernel's build (nearest_kernels.h); null for the widest this CPU runs.
std::unique_ptr<ClusterBackend> makeCpuBackend(int threads = 0, const nearest::NearestKernels* kernel = nullptr);

// Threads the CPU backend uses for `threads` (≤ 0 means all cores).
int resolveThreads(int threads);

} // namespace gsrq
