// The clustering pass's planning and cost model (pass_costs.h): pure arithmetic, built everywhere.
#include "gpu/cluster/pass_costs.h"

#include <algorithm>
#include <cmath>

namespace gsrq::gpu {

std::int64_t tileRowsFor(std::int64_t chunk)
{
    std::int64_t t = kTileRows;
    while (t > 256 && t > chunk)
        t /= 2;
    return t;
}

std::int64_t tilesPerLaunch(std::int64_t m, int d, int K, std::int64_t tileRows)
{
    const std::int64_t perTile = std::int64_t(K) * (2 * std::int64_t(d) + 2) * std::int64_t(sizeof(double));
    const std::int64_t cap = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / perTile);
    return std::max<std::int64_t>(1, std::min({(m + tileRows - 1) / tileRows, kMaxTilesPerLaunch, cap}));
}

std::int64_t passChunkRows(std::int64_t n, int K)
{
    constexpr std::int64_t kScoreBytes = std::int64_t(32) << 20;
    std::int64_t chunk = std::min<std::int64_t>(n, std::max<std::int64_t>(256, kScoreBytes / (4 * std::int64_t(K))));
    const std::int64_t tileRows = tileRowsFor(chunk);
    if (chunk < n)
        chunk -= chunk % tileRows;
    return chunk;
}

namespace {

constexpr double kWarp = 32, kTileWarps = kTileSumWarps;

// The sums kernel's shared-memory loads and stores for one column group of `cols` columns: `rows`
// rows in T tiles, each tile's blocks over `ranges` cluster ranges that together hold the K clusters
// (each row's label in exactly one range); `first`: the column group that also sums W and the counts.
double tileShared(double rows, double T, double ranges, double K, double cols, bool shape, bool first)
{
    const double s = shape ? 1 : 0;
    double b = 0;
    b += T * (K * kWarp * 8 * (1 + s) + K * 16);        // partials cleared
    b += ranges * rows * (12 + kWarp * 4);              // labels, weights, 1/‖x‖ and 32 columns staged
    b += ranges * rows * kTileWarps * 4;                // each warp reads each staged row's label once
    b += rows * kWarp * (4 + 4 * s + 4 + 16 * (1 + s)); // the owning warp: w, 1/‖x‖, x; Sx (and Sy) read, written
    b += T * K * cols * 8 * (1 + s);                    // partials read out
    if (first)
        b += rows * 32 + T * K * 16; // W and the count read and written (a lane a row); read out
    return b;
}

// Blocks of `threads` threads resident on one SM: CUDA's occupancy rules (2,048 threads and 32 blocks
// an SM, 64 Ki registers allocated per warp in units of 256, shared memory with 1 KiB reserved a block).
int residentBlocks(int threads, int registers, std::size_t shared, std::size_t sharedPerSm)
{
    const int warps = (threads + 31) / 32;
    const int perWarp = (registers * 32 + 255) / 256 * 256;
    int blocks = std::min(2048 / threads, 32);
    if (registers > 0)
        blocks = std::min(blocks, 65536 / (perWarp * warps));
    blocks = std::min<std::int64_t>(blocks, std::int64_t(sharedPerSm / (shared + 1024)));
    return std::max(blocks, 0);
}

} // namespace

int fusedArgmaxBlocksPerSm(int K, int D, std::size_t sharedPerSm)
{
    const int registers = D <= 64 ? kClusterKernelRegisters.fusedNarrow : kClusterKernelRegisters.fusedWide;
    return std::max(1, residentBlocks(32 * kFusedArgmaxWarps, registers, fusedArgmaxSharedBytes(K, D), sharedPerSm));
}

int fusedArgmaxGrid(std::int64_t m, int D, int members, int multiprocessors, int blocksPerSm)
{
    const int rows = fusedArgmaxRows(D);
    const std::int64_t needed = ((m + rows - 1) / rows + kFusedArgmaxWarps - 1) / kFusedArgmaxWarps;
    const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(std::max(1, multiprocessors)) *
                                                             std::max(1, blocksPerSm) / std::max(1, members));
    return int(std::max<std::int64_t>(1, std::min(needed, slots)));
}

std::vector<KernelCost> clusterPassCosts(const ClusterPassCase& c)
{
    const double K = c.K, d = c.d, s = c.shapeSums ? 1 : 0, w = c.weighted ? 1 : 0;
    const double B = std::max(1, c.members);
    // A batched launch's blocks each read their member from the list (4 bytes a member, distinct).
    const double list = c.members > 1 ? 4 * B : 0;
    const std::int64_t chunk = passChunkRows(c.n, c.K), tileRows = tileRowsFor(chunk);
    const std::int64_t scoreChunk = c.members > 1 ? passChunkRows(c.n, c.K * c.members) : chunk;
    std::vector<KernelCost> k;
    if (c.fused) {
        // A member's rows (its D columns), codebook and ‖c‖², ‖x‖² and last labels in; labels and the
        // row terms out, as the argmax; the weights, every member's. In shared memory each block
        // writes its copy of the codebook and ‖c‖²; each warp's tile of fusedArgmaxRows(d) rows (the
        // last one's missing rows too) reads, per 8 codewords, a 16-byte fragment a lane for every 16
        // features and ‖c‖² of its lane's two codewords; the row metrics read ‖c‖² of the row's label.
        const double m = double(c.n), tiles = std::ceil(m / fusedArgmaxRows(c.d));
        const double shared =
            B * std::max(1, c.fusedBlocks) * (K * d * 4 + K * 4) +
            B * (tiles * (K / 8) * (d / 16) * kWarp * 16 + tiles * (K / 8) * kWarp * 8 + (c.rowMetrics ? m * 4 : 0));
        KernelCost f{"fused scores and argmax",
                     B * (m * d * 4 + K * d * 4 + K * 4 + m * 4 * 2 + m * 4 + m * 32 * (c.rowMetrics ? 2 : 1)) +
                         m * 4 * w + list,
                     0, shared, B * 2 * m * K * d};
        f.tensorCores = true;
        k.push_back(f);
    }
    for (std::int64_t r0 = 0; !c.fused && r0 < c.n; r0 += scoreChunk) {
        const double m = double(std::min(scoreChunk, c.n - r0));
        k.push_back({c.members > 1 ? "SGEMM (cuBLAS, batched)" : "SGEMM (cuBLAS)",
                     B * (m * d * 4 + K * d * 4 + m * K * 4), 0, 0, B * 2 * m * K * d, true});
        // Scores, ‖c‖², ‖x‖² and last labels in; labels and four terms a row out (four more with the
        // row metrics): a member's each. The weights are every member's.
        k.push_back({"argmax",
                     B * (m * K * 4 + K * 4 + m * 4 * 2 + m * 4 + m * 32 * (c.rowMetrics ? 2 : 1)) + m * 4 * w + list,
                     0, 0, B * 3 * m * K});
    }
    const double ranges = std::ceil(K / c.clustersPerBlock);
    const std::int64_t tiles = (c.n + tileRows - 1) / tileRows, group = tilesPerLaunch(c.n, c.d, c.K, tileRows);
    const double sums = K * d * 8 * (1 + s) + K * 16; // Sx (and Sy), W and the counts
    for (std::int64_t t0 = 0; t0 < tiles; t0 += group) {
        const std::int64_t t1 = std::min(tiles, t0 + group);
        const double rows = double(std::min(c.n, t1 * tileRows) - t0 * tileRows), T = double(t1 - t0);
        double shared = 0;
        for (int j0 = 0; j0 < c.d; j0 += int(kWarp))
            shared += tileShared(rows, T, ranges, K, std::min(kWarp, d - j0), c.shapeSums, j0 == 0);
        // The rows' block columns, labels and 1/‖x‖ in, the tiles' partials out (a member's each);
        // the weights, every member's.
        k.push_back({"tile sums", B * (rows * (d * 4 + 4 + 4 * s) + T * sums) + rows * 4 * w + list, 0, B * shared,
                     B * rows * d * 2 * (1 + s)});
        k.push_back({"tile reduce", B * (T * sums + 2 * sums) + list, 0, 0, B * T * K * d * (1 + s)});
    }
    const double terms = c.rowMetrics ? 8 : 4;
    // A block per array: its rows in, a pointer to it (the table every member shares) and its total;
    // in shared memory each of 1,024 threads' partial, a tree of 1,023 additions (two reads, a write),
    // the total read.
    k.push_back({"row totals", B * (terms * double(c.n) * 8 + terms * 8) + terms * 8 + list, 0,
                 B * terms * (1024 * 8 + 1023 * 8 * 3 + 8), B * terms * double(c.n)});
    if (c.held) // the counts and centroids in, two totals out; two such trees over 256 threads
        k.push_back({"cluster totals", B * (K * 8 + K * d * 4 + 16) + list, 0, B * 2 * (256 * 8 + 255 * 8 * 3 + 8),
                     B * 2 * K * d});
    return k;
}

KernelCost centroidUpdateCost(const ClusterPassCase& c)
{
    const double K = c.K, d = c.d, B = std::max(1, c.members);
    // W and Sx in; centroids and ‖c‖² out (‖c‖² from the warp's copy in shared memory). GSKM also reads
    // Sy and writes the shapes and gains (no cluster keeps its shape). A member's each.
    const double km = K * 8 + K * d * 8 + K * d * 4 + K * 4;
    const double gskm = c.shapeSums ? K * d * 8 + K * d * 8 + K * 8 : 0;
    // In shared memory, a column of the centroid written and read for ‖c‖² (2 floats); GSKM's Sx and
    // Sy written, Sy read for ‖Sy‖², read for the shape and the shape written over it, Sx and the shape
    // read for the gain, the shape read for the centroid (8 doubles) besides.
    const double shared = K * d * (c.shapeSums ? 8 * 8 + 2 * 4 : 2 * 4);
    return {"centroid update", B * (km + gskm) + (c.members > 1 ? 4 * B : 0), 0, B * shared,
            B * K * d * (c.shapeSums ? 6 : 3)};
}

ClusterPassLatency clusterPassLatency(const ClusterPassCase& c, int multiprocessors, std::size_t sharedPerSm,
                                      double copyBytesPerSecond, double gemmFlops, double sharedBytesPerSecond)
{
    // The decode model's estimates (gpu/decode/roofline.h), the same for both.
    constexpr double launch = 3e-6, hbm = 0.7e-6, l2 = 0.3e-6, sharedOp = 30e-9;
    const ClusterKernelRegisters& regs = kClusterKernelRegisters;
    const double B = std::max(1, c.members);
    const std::int64_t chunk = passChunkRows(c.n, c.K), tileRows = tileRowsFor(chunk);
    const std::int64_t scoreChunk = c.members > 1 ? passChunkRows(c.n, c.K * c.members) : chunk;
    const double ranges = std::ceil(double(c.K) / c.clustersPerBlock);
    const double colGroups = std::ceil(c.d / 32.0);

    ClusterPassLatency out;
    auto add = [&](const KernelCost& cost, double blocks, int threads, int registers, std::size_t shared, double chain,
                   bool pass) {
        ClusterLaunchLatency l;
        l.kernel = cost.kernel;
        if (cost.library) {
            l.bandwidth = std::max(cost.flops / gemmFlops, cost.hbmBytes / copyBytesPerSecond);
            l.seconds = launch + l.bandwidth;
            l.bound = cost.flops / gemmFlops >= cost.hbmBytes / copyBytesPerSecond ? "compute" : "bandwidth";
        } else {
            l.blocks = std::int64_t(blocks);
            l.blocksPerSm = residentBlocks(threads, registers, shared, sharedPerSm);
            const double slots = double(std::max(1, multiprocessors * std::max(1, l.blocksPerSm)));
            l.waves = int(std::ceil(blocks / slots));
            l.chain = chain;
            l.bandwidth = cost.hbmBytes / copyBytesPerSecond;
            const double body = std::max(l.bandwidth, l.waves * chain);
            l.bound = l.bandwidth >= l.waves * chain ? "bandwidth" : "latency";
            l.seconds = launch + body;
        }
        (pass ? out.passSeconds : out.updateSeconds) += l.seconds;
        out.launches.push_back(l);
    };

    const auto costs = clusterPassCosts(c);
    std::int64_t r0 = 0, t0 = 0;
    const std::int64_t tiles = (c.n + tileRows - 1) / tileRows, group = tilesPerLaunch(c.n, c.d, c.K, tileRows);
    // A stage's rows whose labels fall in the block's cluster range, spread over its warps by label;
    // before them each warp reads the stage's labels, 32 at a time, and ballots (two accesses each).
    const double rowsPerWarpStage = double(kTileStageRows) / kTileSumWarps / ranges, ballots = kTileStageRows / 32.0;
    for (const auto& k : costs) {
        if (k.tensorCores) {
            // The grid as the backend sizes it on this device; the shared bytes of that grid.
            const int perSm = fusedArgmaxBlocksPerSm(c.K, c.d, sharedPerSm);
            ClusterPassCase g = c;
            g.fusedBlocks = fusedArgmaxGrid(c.n, c.d, c.members, multiprocessors, perSm);
            KernelCost cost = clusterPassCosts(g).front();
            const double tiles = std::ceil(double(c.n) / fusedArgmaxRows(c.d));
            const double warpTiles = std::ceil(tiles / (double(g.fusedBlocks) * kFusedArgmaxWarps));
            ClusterLaunchLatency l;
            l.kernel = cost.kernel;
            l.blocks = std::int64_t(g.fusedBlocks) * std::int64_t(B);
            l.blocksPerSm = perSm;
            l.waves = int(std::ceil(double(l.blocks) / double(std::max(1, multiprocessors * perSm))));
            l.chain = hbm + warpTiles * hbm;
            const double bytes = cost.hbmBytes / copyBytesPerSecond, flops = cost.flops / gemmFlops;
            const double shared = sharedBytesPerSecond > 0 ? cost.sharedBytes / sharedBytesPerSecond : 0.0;
            l.bandwidth = std::max({bytes, flops, shared});
            l.bound = l.waves * l.chain >= l.bandwidth   ? "latency"
                      : shared >= std::max(bytes, flops) ? "shared memory"
                      : flops >= bytes                   ? "compute"
                                                         : "bandwidth";
            l.seconds = launch + std::max(l.bandwidth, l.waves * l.chain);
            out.passSeconds += l.seconds;
            out.launches.push_back(l);
        } else if (k.library) {
            add(k, 0, 0, 0, 0, 0, true);
        } else if (k.kernel == "argmax") {
            const double m = double(std::min(scoreChunk, c.n - r0));
            r0 += scoreChunk;
            add(k, std::ceil(m / 8) * B, 256, regs.argmax, 0, l2 + hbm, true);
        } else if (k.kernel == "tile sums") {
            const std::int64_t t1 = std::min(tiles, t0 + group);
            const double blocks = double(t1 - t0) * colGroups * ranges * B;
            const double stages = std::ceil(double(tileRows) / kTileStageRows);
            // The next stage's loads are in flight while a stage is added: per stage the longer of the
            // two, and the first stage's trip before.
            const double work = (2 * ballots + rowsPerWarpStage * (c.shapeSums ? 6 : 4)) * sharedOp;
            const double chain = hbm + stages * std::max(hbm, work);
            add(k, blocks, 32 * kTileSumWarps, regs.tileSums, tileSumsSharedBytes(c.clustersPerBlock, c.shapeSums),
                chain, true);
        } else if (k.kernel == "tile reduce") {
            const std::int64_t t1 = std::min(tiles, t0 + group);
            const double T = double(t1 - t0);
            t0 = t1;
            add(k, std::ceil(double(c.K) * c.d / 256) * B, 256, regs.tileReduce, 0, T * l2 + hbm, true);
        } else if (k.kernel == "row totals") {
            const double terms = c.rowMetrics ? 8 : 4;
            add(k, terms * B, 1024, regs.rowTotals, 8192, std::ceil(double(c.n) / 1024 / 4) * hbm + 10 * l2, true);
        } else if (k.kernel == "cluster totals") {
            // Each thread's clusters' d columns (a dependent FMA each, ~4 ns) after their L2 load, then two
            // trees of 8 levels in shared memory.
            add(k, B, 256, regs.clusterTotals, 4096,
                std::ceil(c.K / 256.0) * (l2 + double(c.d) * 4e-9) + 8 * 3 * sharedOp + hbm, true);
        }
    }
    // A warp per cluster (8 a block): its columns from memory, then lane 0's sums in index order from
    // shared memory, a dependent FMA (~5 ns) a step: ‖Sy‖², Sx·s and ‖c‖² for GSKM, ‖c‖² for KM.
    const double steps = c.shapeSums ? 3.0 * c.d : 1.0 * c.d;
    const int warps = updateWarps(c.d);
    add(centroidUpdateCost(c), std::ceil(double(c.K) / warps) * B, 32 * warps, regs.update,
        std::size_t(warps) * updateWarpDoubles(c.d) * sizeof(double), hbm + l2 + steps * 5e-9, false);
    return out;
}

} // namespace gsrq::gpu
