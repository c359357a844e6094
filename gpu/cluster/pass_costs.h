#pragma once
// What one clustering pass of the CUDA backend moves, in pure arithmetic (no device, no CUDA types):
// how the backend cuts the rows (score-block chunks, tiles of the per-cluster sums, launches of
// tiles) and, launch by launch, the bytes each kernel reads and writes (gpu/device/kernel_cost.h),
// from the kernels' code (cluster_kernels.cu). tst_gpu holds each launch the emulator counts to its
// term; docs/benchmarks.md's per-pass table is computed from it.

#include "gpu/device/kernel_cost.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gsrq::gpu {

// The rows summed in one fixed order by one block (a tile): kTileRows, or for chunks of fewer rows
// the largest power of two (at least 256) they hold; the most tiles one launch of the sums kernel
// takes (their partials are added to the sums between launches).
inline constexpr std::int64_t kTileRows = 4096;
// Warps of a block of the sums kernel: warp w owns the clusters k ≡ w (mod kTileSumWarps) of its range
// and adds their rows one after another, so more warps means fewer rows on each warp's chain (the
// sums are the same for any count: each cluster still has one owner, taking its rows in order).
// 32 warps: a block of 1,024 threads at 64 registers fills an SM's registers.
inline constexpr int kTileSumWarps = 32;
// Rows a block of the sums kernel stages at a time, and its dynamic shared memory for a range of
// `clusters` clusters: the partial Sx (and Sy) of 32 columns, W and the counts, the staged columns,
// and the staged rows' labels, weights and 1/‖x‖.
inline constexpr int kTileStageRows = 128;
constexpr std::size_t tileSumsSharedBytes(int clusters, bool shape)
{
    return std::size_t(clusters) * 32 * sizeof(double) * (shape ? 2 : 1) +
           std::size_t(clusters) * (sizeof(double) + sizeof(long long)) +
           std::size_t(kTileStageRows) * 32 * sizeof(float) +
           std::size_t(kTileStageRows) * (sizeof(std::int32_t) + 2 * sizeof(float));
}
// The centroid update's layout for blocks of width d: a warp's shared columns in doubles (Sx, then Sy
// or the shape, then the centroid's d floats), and warps a block (as many as fit 48 KiB, so no
// opt-in, at most 8, at least one).
constexpr std::size_t updateWarpDoubles(int d)
{
    return 2 * std::size_t(d) + (std::size_t(d) + 1) / 2;
}
constexpr int updateWarps(int d)
{
    const std::size_t fit = (48 * 1024) / (updateWarpDoubles(d) * sizeof(double));
    return fit < 1 ? 1 : fit > 8 ? 8 : int(fit);
}
inline constexpr std::int64_t kMaxTilesPerLaunch = 64;
std::int64_t tileRowsFor(std::int64_t chunk);
// Tiles per launch for m rows: all up to kMaxTilesPerLaunch, fewer where their partials (K × (2d + 2)
// doubles a tile) would pass 64 MiB, at least one.
std::int64_t tilesPerLaunch(std::int64_t m, int d, int K, std::int64_t tileRows);
// Rows per chunk of a pass: the chunk's score block (rows × K floats) at most 32 MiB, so it stays in
// the L2 between the GEMM and the argmax; at least 256 rows; whole tiles unless it is all n rows.
std::int64_t passChunkRows(std::int64_t n, int K);

// The fused score-and-argmax kernel (TF32 tensor cores; fused_argmax.cu): a warp takes
// fusedArgmaxRows(D) rows at a time, holding them in registers, and scores them against every
// codeword, 32 at a time, from the block's copy of the codebook in shared memory (rounded to TF32, its
// rows kFusedArgmaxStride floats apart so a quarter-warp's 16-byte loads fall in distinct banks),
// keeping each row's best; no score leaves the registers. For blocks of width D a multiple of 16 up
// to 128 and K a multiple of 8 whose codebook fits the block's shared memory; elsewhere the pass is
// the GEMM and the argmax.
inline constexpr int kFusedArgmaxWarps = 8;
inline constexpr int kFusedArgmaxCodewords = 32; // a warp's codewords at a time (4 tiles of the mma's N)
// A warp's rows at a time: two of the mma's row groups of 16 past 64 columns, so each codeword
// fragment read from shared memory feeds four mma instead of two (half the shared reads a row); one
// group for narrower blocks, which keep to 128 registers for two blocks an SM.
constexpr int fusedArgmaxRows(int D)
{
    return D > 64 ? 32 : 16;
}
constexpr int fusedArgmaxStride(int D)
{
    return D % 32 == 0 ? D + 16 : D;
}
constexpr std::size_t fusedArgmaxSharedBytes(int K, int D)
{
    return std::size_t(K) * std::size_t(fusedArgmaxStride(D) + 1) * sizeof(float);
}
constexpr bool fusedArgmaxFits(int K, int D, std::size_t sharedOptin)
{
    return D >= 16 && D <= 128 && D % 16 == 0 && K >= 8 && K % 8 == 0 && fusedArgmaxSharedBytes(K, D) <= sharedOptin;
}

// Blocks of the fused kernel an SM holds (its shared memory, 1 KiB reserved a block; its threads; the
// registers ptxas gives it, kClusterKernelRegisters), and the blocks a member's launch takes for m
// rows of D columns: one per kFusedArgmaxWarps tiles of fusedArgmaxRows(D) rows, at most the device's
// resident blocks shared among the members (each block then takes tiles in turn).
int fusedArgmaxBlocksPerSm(int K, int D, std::size_t sharedPerSm);
int fusedArgmaxGrid(std::int64_t m, int D, int members, int multiprocessors, int blocksPerSm);

struct ClusterPassCase {
    std::int64_t n = 0; // rows bound
    int d = 0, K = 0;   // the block's width, the codewords
    bool weighted = false, shapeSums = false, rowMetrics = false;
    int clustersPerBlock = 256; // of the sums kernel: 256 with Hopper's shared memory, 128 or 32 on smaller
    bool held = true;           // a pass of Lloyd's iterations on held centroids (with the cluster totals)
    // Clusterings of the same rows run together (a stage's subspaces): each launch takes every member,
    // whose block is d columns of its own; the weights and the launch's pointer table are read once.
    int members = 1;
    // The scores and the argmax as one fused launch over all the rows (TF32, fusedArgmaxFits), whose
    // grid takes fusedBlocks blocks a member (their copies of the codebook are its shared writes).
    bool fused = false;
    int fusedBlocks = 1;
};

// The launches of one pass on resident rows, in launch order: per chunk the SGEMM (cuBLAS) and the
// argmax; per launch of tiles the sums and their reduction; the row terms' totals; for a held pass
// the cluster totals. With members, the batched pass's: its chunks are a member's share of the
// score block (passChunkRows of K × members codewords), each launch reads the member list.
std::vector<KernelCost> clusterPassCosts(const ClusterPassCase& c);
// The device update of held centroids after such a pass (update_rule.h), assuming no empty cluster.
KernelCost centroidUpdateCost(const ClusterPassCase& c);

// A latency model of a pass and its update beside the byte model, launch by launch, as for decode
// (gpu/decode/roofline.h: its constants, estimates that no device has timed here: a launch 3 µs, an
// HBM load 0.7 µs, an L2 load 0.3 µs, a shared-memory access on a thread's path 30 ns). A launch's
// blocks run in waves of its resident slots (blocks per SM from its threads, the registers ptxas
// gives it, kClusterKernelRegisters, and its shared memory); each block is a chain of dependent
// steps; the launch takes a launch's time plus the longer of its waves × chain and its bytes at the
// copy rate (for cuBLAS: its flops at the GEMM rate). The chains:
//   argmax        a row a warp: its scores from the L2, then its inputs and outputs (an HBM trip)
//   tile sums     per staged 128 rows the longer of an HBM trip (the next stage's loads, in flight
//                 meanwhile) and the stage's work: its labels read and balloted, then each warp's share
//                 of the rows in its block's cluster range (4 with one range and 32 warps) one after
//                 another, each 4 shared accesses (6 with shape sums)
//   tile reduce   each thread adds the tiles' partials one after another from the L2
//   row totals    each of 1,024 threads adds n/1,024 rows, 4 loads in flight
//   cluster totals a thread per cluster walking its d columns through the L2, then two trees
//   update        a warp per cluster: its columns from memory, then one lane's sums in index order
//                 (d dependent FMAs of ~5 ns each: 3 sums for GSKM, 1 for KM)
struct ClusterLaunchLatency {
    std::string kernel;
    std::int64_t blocks = 0;
    int blocksPerSm = 0, waves = 0;
    double chain = 0;     // one block's dependent steps, s
    double bandwidth = 0; // the launch's bytes at the copy rate, or its flops at the GEMM rate (cuBLAS), s
    double seconds = 0;   // kLaunchSecondsEstimate + max(bandwidth, waves × chain)
    std::string bound;    // "latency", "bandwidth", "compute" (cuBLAS)
};
struct ClusterPassLatency {
    std::vector<ClusterLaunchLatency> launches; // the pass's (clusterPassCosts' order), then the update
    double passSeconds = 0, updateSeconds = 0;
};
// Registers a thread of each clustering kernel as ptxas reports them for sm_90 (tools/gpu/resource_usage.py,
// the decode_kernel_resources test, checks that the build stays within them).
struct ClusterKernelRegisters {
    int argmax = 40, tileSums = 64, tileReduce = 32, rowTotals = 32, clusterTotals = 40, update = 64;
    // The fused kernel's instances (fused_argmax.cu): D ≤ 64, built for two blocks an SM, and wider.
    int fusedNarrow = 128, fusedWide = 232;
};
inline constexpr ClusterKernelRegisters kClusterKernelRegisters{};
//   fused         the longer of its bytes at the copy rate, its flops at the GEMM rate, its shared
//                 loads at the shared-memory rate (128 bytes a cycle an SM: a 16-byte load a lane
//                 feeds two mma, so this bound is half the tensor cores' TF32 peak) and its waves of
//                 a block's chain: the codebook staged (an HBM trip), then each warp's tiles one
//                 after another, each an HBM trip for its rows (the products overlap other warps')
// sharedPerSm: the device's shared memory per multiprocessor (228 KiB on Hopper); gemmFlops: the rate
// of the distance GEMM (TF32's or FP32's peak); sharedBytesPerSecond: every SM's shared-memory
// bandwidth together (for the fused kernel; 0: not counted).
ClusterPassLatency clusterPassLatency(const ClusterPassCase& c, int multiprocessors, std::size_t sharedPerSm,
                                      double copyBytesPerSecond, double gemmFlops, double sharedBytesPerSecond = 0);

} // namespace gsrq::gpu
