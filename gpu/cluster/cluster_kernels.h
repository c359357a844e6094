#pragma once
// Launchers of the clustering kernels (cluster_kernels.cu). Internal to gsrq_gpu: this header has
// CUDA types and is included only by the CUDA backend's host code, never by core, the CLI or the app.
//
// Every launcher takes raw device pointers, sizes and a stream, enqueues its work and returns the
// launch status; none synchronizes. Matrices are row-major with a leading dimension `ld` in elements.

#include "core/cluster/update_rule.h"
#include "gpu/cluster/pass_costs.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gsrq::gpu::kernels {

// sq[i] = ‖x_i‖² (float, like the CPU backend), inv[i] = 1/(√sq[i] + ε), for rows x (n × d, ld).
cudaError_t launchRowNorms(const float* x, std::int64_t ld, std::int64_t n, int d, float epsilon, float* sq, float* inv,
                           cudaStream_t stream);

// Per row i < m of the score block S (m × K, ld K, = X·Cᵀ): the label argmax_k 2·S_ik − ‖c_k‖² (the
// lowest k among equal scores, as on the CPU). For global row g = r0 + i it writes labels[g],
// and the row's terms: err[g] = w·max(0, sq − best), sqw[g] = w·sq, wt[g] = w, changed[g] = 0/1
// against the label that was there. w: weights (global rows) or null for ones.
// Per-row terms of the unweighted metrics (metrics.h) for the chosen centroid, indexed like the
// others: |‖x‖ − ‖c‖|, cos(x, c) (0 where x or c is 0), 1 where ‖x‖ > 0, ‖x‖². gain null: none.
// Several members' launches in one (independent clusterings of the same rows: a layer's subspaces).
// The launch's member dimension (named at each launcher) takes member active[i] for i < count; each
// pointer argument then moves on by its stride times the member: the per-row arrays by rowStride
// elements, the rows x by colStride columns, the score block by scoreStride, the per-cluster arrays
// by K (or K × d), the tile partials by partialStride, the totals by scalarStride. The default is one
// member, 0, at no offset: the single-block launches.
struct Members {
    const int* active = nullptr; // device array; null: member 0 alone
    int count = 1;
    std::int64_t rowStride = 0;
    std::int64_t colStride = 0;
    std::int64_t scoreStride = 0;
    std::int64_t partialStride = 0;
    int scalarStride = 0;
};

struct RowMetricTerms {
    double* gain = nullptr;
    double* cosine = nullptr;
    double* cosineRow = nullptr;
    double* squaredNorm = nullptr;
};

cudaError_t launchArgmaxRows(const float* S, int K, const float* cNorm, std::int64_t r0, std::int64_t m,
                             const float* sq, const float* w, std::int32_t* labels, double* err, double* sqw,
                             double* wt, double* changed, RowMetricTerms metrics, cudaStream_t stream,
                             const Members& members = {});

// The GEMM and the argmax in one launch on TF32 tensor cores (fused_argmax.cu; pass_costs.h says for
// which D and K, fusedArgmaxFits): for rows r0 .. r0+m−1 (X: row r0's block of D columns, ld; 16-byte
// aligned rows) against centroids C (K × D) with norms cNorm, the labels and terms launchArgmaxRows
// writes, from scores x·c of TF32-rounded operands with FP32 sums (as cuBLAS's TF32 mode; the order
// of the sums is the tensor cores'). blocks: per member, from fusedArgmaxGrid. Members as above;
// the centroids move on by K × D a member, the rows by colStride columns.
// Whether the fused kernel's code for this device holds the tensor-core instructions (sm_80 or later).
bool fusedArgmaxAvailable();
cudaError_t launchFusedScoreArgmax(const float* X, std::int64_t ld, int D, const float* C, int K, const float* cNorm,
                                   std::int64_t r0, std::int64_t m, const float* sq, const float* w,
                                   std::int32_t* labels, double* err, double* sqw, double* wt, double* changed,
                                   RowMetricTerms metrics, int blocks, cudaStream_t stream,
                                   const Members& members = {});

// The tiles of rows the sums take and how many a launch takes: pass_costs.h (tileRowsFor,
// tilesPerLaunch), where the cost model plans them alike.

// The doubles of the `partials` buffer launchAccumulate needs for m rows: K × (2d + 2) per tile, for
// at most kMaxTilesPerLaunch tiles and at most 64 MiB (at least one tile).
std::size_t tilePartialDoubles(std::int64_t m, int d, int K, std::int64_t tileRows);

// For rows r0 .. r0+m−1 (x: row r0, ld), with labels already set, adds per cluster k:
//   sumX[k] += Σ w·x, sumY[k] += Σ w·inv·x (when sumY is not null), wsum[k] += Σ w, count[k] += members.
// No sort and no floating-point atomics: each tile of tileRows rows is summed in row order, and the
// tiles are added in tile order, so the sums are the same on every run, and the same whether the rows
// come in one call or in several whose r0 are multiples of tileRows. sharedOptin: the device's
// shared memory per block with the opt-in (it sets how many clusters a block takes, not the result).
cudaError_t launchAccumulate(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t m, int d, int K,
                             std::int64_t tileRows, std::size_t sharedOptin, const std::int32_t* labels, const float* w,
                             const float* inv, double* sumX, double* sumY, double* wsum, long long* count,
                             double* partials, cudaStream_t stream, const Members& members = {});

// out[a] = Σ_i arrays[a][i] for a < count, i < n, each in one fixed order (a block per array); per member
// (rowStride, scalarStride), out[b · scalarStride + a] from arrays[a] + b · rowStride.
cudaError_t launchSumArrays(const double* const* arrays, int count, std::int64_t n, double* out, cudaStream_t stream,
                            const Members& members = {});

// Lloyd's update on the device, update_rule.h's for every cluster k < K (a warp each) from the
// pass's sums (wsum, sumX, sumY: K, K × d, K × d), in place on C (K × d) and the rule's state (emaW,
// emaS for Ema; gain, shape for GainShape; null otherwise); then cNorm[k] = ‖c_k‖² as
// update::squaredNorm rounds it.
cudaError_t launchUpdateCentroids(const update::Params& rule, int K, int d, const double* wsum, const double* sumX,
                                  const double* sumY, double* emaW, double* emaS, double* gain, double* shape, float* C,
                                  float* cNorm, cudaStream_t stream, const Members& members = {});

// cNorm[k] = update::squaredNorm of row k of C (K × d).
cudaError_t launchCentroidNorms(int K, int d, const float* C, float* cNorm, cudaStream_t stream);

// out[0] = clusters with count 0, out[1] = Σ_k count_k·‖c_k‖², each summed in one fixed order.
// Per member: out + b · scalarStride.
cudaError_t launchClusterTotals(int K, int d, const long long* count, const float* C, double* out, cudaStream_t stream,
                                const Members& members = {});

// out (k × d) = rows idx[0..k) of x (ld).
cudaError_t launchGatherRows(const float* x, std::int64_t ld, const std::int64_t* idx, int k, int d, float* out,
                             cudaStream_t stream);

// For every row i < n: res[i, j] −= C[labels[i], j] and rec[i, j] += C[labels[i], j], j < d
// (res, rec: the block's first column, ld).
cudaError_t launchSubtractAssigned(float* res, float* rec, std::int64_t ld, std::int64_t n, int d,
                                   const std::int32_t* labels, const float* C, cudaStream_t stream);

// Per row of x and its reconstruction xh (n × f, ld f), in double: err = ‖x − x̂‖², nx2 = ‖x‖²,
// nh2 = ‖x̂‖², gain = |‖x‖ − ‖x̂‖|, cos = x·x̂/(‖x‖‖x̂‖) (0 where x̂ = 0; rows with x = 0 get
// cos 0 and cosRow 0). The sums of these give metrics.h's QuantMetrics.
cudaError_t launchRowMetrics(const float* x, const float* xh, std::int64_t n, int f, double* err, double* nx2,
                             double* nh2, double* gain, double* cos, double* cosRow, cudaStream_t stream);

} // namespace gsrq::gpu::kernels
