#pragma once
// The CUDA clustering backend, behind a header with no CUDA types.
//
// Data layout and flow: bind() copies the rows to the device once (residual; the original and a
// running reconstruction are added on the first subtractAssigned). A pass works through row
// chunks sized so that a chunk's score block (rows × K floats, ≤ 32 MiB) stays in the L2 cache
// between the cuBLAS SGEMM that writes it and the argmax kernel that reads it; the N × K score
// matrix is never whole in memory. The per-cluster sums are then taken without a sort, in tiles of
// rows each summed in row order, the tiles added in order (cluster_kernels.h): no floating-point
// atomics, so a seeded run gives the same sums every time.
//
// Lloyd's iterations stay on the device (loadCentroids .. storeCentroids): the update is
// update_rule.h's, the one text core's CPU path runs too, applied by a kernel with a warp per
// cluster (from the rule's steps: the same bits); each iteration reads back only its ten scalars (objective terms,
// changed labels, empty clusters, the pass's row metrics), from which core decides whether to stop. assignPass(), the
// primitive for everything else (GSKM's start, beam search, encoding), returns the K × D sums.
//
// A layer's subspaces within a stage are independent clusterings: selectBlocks() takes them as members
// of one batch (cuda_backend_batch.cpp), whose pass is one batched SGEMM and one argmax per chunk and
// one launch each of the sums, the row terms' totals and the cluster totals for every member still
// iterating, and whose update is one launch; each member's arithmetic is that of its block alone.
//
// When the rows do not fit in device memory beside the work buffers, the backend keeps them in
// pinned host memory and copies each chunk's block columns in per pass ("streamed"); the
// residual update and the metrics then run on the host.

#include "core/cluster/cluster_backend.h"

#include <memory>

namespace gsrq::gpu {

struct CudaOptions {
    int device = 0;
    bool tf32 = false; // let cuBLAS use TF32 tensor cores for X·Cᵀ (faster, ~1e-3 relative scores)
    // Device memory the resident layout may use, as a fraction of what is free when bound.
    double memoryFraction = 0.85;
    bool forceStreamed = false; // keep the rows on the host even when they fit (tests)
    // With tf32 on a device of compute capability 8.0 or later: each pass scores the rows and takes
    // their argmax in one kernel on the tensor cores (launchFusedScoreArgmax), no score block written,
    // where the block's width and K allow (pass_costs.h, fusedArgmaxFits); off: cuBLAS and the argmax.
    bool fusedArgmax = true;
    int fusedBlocks = 0; // blocks a member's fused launch takes at most (0: what the device holds; tests)
};

// Throws gsrq::Error(InvalidInput) for a device index that does not exist, Error(Runtime) for a
// build without CUDA, a missing driver or cuBLAS.
std::unique_ptr<ClusterBackend> makeCudaBackend(const CudaOptions& options);

// What the backend did, for tests and reports: passes run on the device and whether the last
// bind kept the rows resident. Null for a backend that is not the CUDA one.
struct CudaBackendStats {
    std::int64_t devicePasses = 0;
    bool resident = false;
    std::int64_t chunkRows = 0;
    // Wall seconds spent in assignment passes and held updates, from the call until the pass's results
    // are on the host (the device's work, the launches and the transfers; an update's work lands in
    // the pass after it, which waits for it): what is left of a training's time is the host's.
    double passSeconds = 0;
    std::int64_t bytesToHost = 0; // every copy from the device, since the backend was made
    // Passes that took several members at once (independent clusterings together), and the most members one took.
    std::int64_t batchedPasses = 0;
    int mostMembers = 0;
    // Passes whose scores and argmax ran as one fused kernel (CudaOptions::fusedArgmax).
    std::int64_t fusedPasses = 0;
    // Wall seconds of the calls outside the passes, by what they do (each from the call until its
    // results are on the host): binding the rows; selecting blocks (their row norms); a clustering's
    // start (sampled rows gathered, centroids loaded); reading results back (centroids, labels,
    // cluster totals); taking codewords off the residual and the reconstruction's metrics. What a
    // training spends beyond these and the passes is core's host work.
    double bindSeconds = 0, selectSeconds = 0, startSeconds = 0, readSeconds = 0, residualSeconds = 0;
};
const CudaBackendStats* cudaStats(const ClusterBackend& backend);

} // namespace gsrq::gpu
