#pragma once
// The one primitive every clustering shares (DESIGN.md): given centroids C, for every row find the
// nearest centroid (argmax of 2·x·c − ‖c‖²) and accumulate per-cluster sufficient statistics.
// KM, GSKM, weighted variants and every residual stage call only this; backends (CPU here, CUDA in
// gpu/) implement it. No backend holds a copy of the algorithm.

#include "tensor.h"

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
    std::int64_t changed = 0;                             // rows whose label differs from the one passed in
};

class ClusterBackend {
public:
    virtual ~ClusterBackend() = default;
    virtual std::string name() const = 0;   // "cpu", "cuda"
    virtual std::string device() const = 0; // "2 threads", "NVIDIA H100 ..."

    // X: n × d, row-major float32, borrowed until the next setData (the CPU backend reads it in
    // place; a device backend copies it). weights: n values ≥ 0, or null for all ones.
    // epsilon: the ε of y = x/(‖x‖+ε).
    virtual void setData(const float* x, std::int64_t n, int d, const float* weights, float epsilon) = 0;

    // centroids: K × d. labels: n entries, in/out (the previous labels in, -1 for none; the new
    // ones out). withShapeSums: also accumulate sumY (GSKM needs it, KM does not).
    virtual void assignAccumulate(const MatrixRF& centroids, bool withShapeSums, std::span<std::int32_t> labels,
                                  AssignStats& out) = 0;
};

// Eigen GEMM over row chunks, OpenMP across chunks, memory bounded by threads × chunk × K.
// threads ≤ 0: all available cores.
std::unique_ptr<ClusterBackend> makeCpuBackend(int threads = 0);

// Threads the CPU backend uses for `threads` (≤ 0 means all cores).
int resolveThreads(int threads);

} // namespace gsrq
