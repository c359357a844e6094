#pragma once
// What one clustering pass of the CUDA backend moves, in pure arithmetic (no device, no CUDA types):
// how the backend cuts the rows (score-block chunks, tiles of the per-cluster sums, launches of
// tiles) and, launch by launch, the bytes each kernel reads and writes (gpu/device/kernel_cost.h),
// from the kernels' code (cluster_kernels.cu). tst_gpu holds each launch the emulator counts to its
// term; docs/benchmarks.md's per-pass table is computed from it.

#include "gpu/device/kernel_cost.h"

#include <cstdint>
#include <vector>

namespace gsrq::gpu {

// The rows summed in one fixed order by one block (a tile): kTileRows, or for chunks of fewer rows
// the largest power of two (at least 256) they hold; the most tiles one launch of the sums kernel
// takes (their partials are added to the sums between launches).
inline constexpr std::int64_t kTileRows = 4096;
inline constexpr std::int64_t kMaxTilesPerLaunch = 64;
std::int64_t tileRowsFor(std::int64_t chunk);
// Tiles per launch for m rows: all up to kMaxTilesPerLaunch, fewer where their partials (K × (2d + 2)
// doubles a tile) would pass 64 MiB, at least one.
std::int64_t tilesPerLaunch(std::int64_t m, int d, int K, std::int64_t tileRows);
// Rows per chunk of a pass: the chunk's score block (rows × K floats) at most 32 MiB, so it stays in
// the L2 between the GEMM and the argmax; at least 256 rows; whole tiles unless it is all n rows.
std::int64_t passChunkRows(std::int64_t n, int K);

struct ClusterPassCase {
    std::int64_t n = 0; // rows bound
    int d = 0, K = 0;   // the block's width, the codewords
    bool weighted = false, shapeSums = false, rowMetrics = false;
    int clustersPerBlock = 256; // of the sums kernel: 256 with Hopper's shared memory, 128 or 32 on smaller
    bool held = true;           // a pass of Lloyd's iterations on held centroids (with the cluster totals)
    // Clusterings of the same rows run together (a stage's subspaces): each launch takes every member,
    // whose block is d columns of its own; the weights and the launch's pointer table are read once.
    int members = 1;
};

// The launches of one pass on resident rows, in launch order: per chunk the SGEMM (cuBLAS) and the
// argmax; per launch of tiles the sums and their reduction; the row terms' totals; for a held pass
// the cluster totals. With members, the batched pass's: its chunks are a member's share of the
// score block (passChunkRows of K × members codewords), each launch reads the member list.
std::vector<KernelCost> clusterPassCosts(const ClusterPassCase& c);
// The device update of held centroids after such a pass (update_rule.h), assuming no empty cluster.
KernelCost centroidUpdateCost(const ClusterPassCase& c);

} // namespace gsrq::gpu
