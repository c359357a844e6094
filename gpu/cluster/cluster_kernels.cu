#include "gpu/cluster/cluster_kernels.h"
#include "gpu/cluster/row_terms.cuh"

#include "core/cluster/update_rule.h"
#include "gpu/device/launch.cuh"

#include <algorithm>
#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8; // warps per block in the row kernels: one row per warp

__device__ inline float warpSum(float v)
{
    for (int off = kWarp / 2; off > 0; off /= 2)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

__device__ inline double warpSum(double v)
{
    for (int off = kWarp / 2; off > 0; off /= 2)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

int rowBlocks(std::int64_t n)
{
    return static_cast<int>((n + kRowsPerBlock - 1) / kRowsPerBlock);
}

static __global__ void rowNormsKernel(const float* __restrict__ x, std::int64_t ld, std::int64_t n, int d,
                                      float epsilon, float* __restrict__ sq, float* __restrict__ inv)
{
    const std::int64_t row = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
    if (row >= n)
        return;
    const float* xr = x + row * ld;
    float s = 0;
    for (int j = threadIdx.x; j < d; j += kWarp)
        s += xr[j] * xr[j];
    s = warpSum(s);
    if (threadIdx.x == 0) {
        sq[row] = s;
        inv[row] = 1.0f / (sqrtf(s) + epsilon);
    }
}

static __global__ void argmaxRowsKernel(const float* __restrict__ S, int K, const float* __restrict__ cNorm,
                                        std::int64_t r0, std::int64_t m, const float* __restrict__ sq,
                                        const float* __restrict__ w, std::int32_t* __restrict__ labels,
                                        double* __restrict__ err, double* __restrict__ sqw, double* __restrict__ wt,
                                        double* __restrict__ changed, RowMetricTerms metrics, Members members)
{
    const std::int64_t i = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
    if (i >= m)
        return;
    const int b = memberAt(members, blockIdx.z);
    const RowOutputs out =
        memberRowOutputs(sq, labels, err, sqw, wt, changed, metrics, std::int64_t(b) * members.rowStride);
    S += std::int64_t(b) * members.scoreStride;
    cNorm += std::int64_t(b) * K;
    const float* s = S + i * K;
    float best = -FLT_MAX;
    int label = K;
    // Each lane scans k = lane, lane+32, ... in increasing order and keeps the first maximum.
    for (int k = threadIdx.x; k < K; k += kWarp) {
        const float v = 2.0f * s[k] - cNorm[k];
        if (v > best) {
            best = v;
            label = k;
        }
    }
    for (int off = kWarp / 2; off > 0; off /= 2) {
        const float ov = __shfl_down_sync(0xffffffffu, best, off);
        const int ol = __shfl_down_sync(0xffffffffu, label, off);
        if (betterCandidate(ov, ol, best, label)) {
            best = ov;
            label = ol;
        }
    }
    if (threadIdx.x == 0)
        writeRowTerms(out, best, label, K, cNorm, w, r0 + i);
}

// Per-cluster sums without a sort. A block takes a fixed tile of rows, 32 columns of the block (one
// per lane) and a range of C clusters; warp w of its kTileSumWarps owns the clusters k ≡ w (mod kTileSumWarps) of that
// range and keeps their partial sums in shared memory, where no other warp writes. Rows are staged kStageRows at a
// time; each warp walks them in row order and adds the rows of its clusters, so every partial is
// summed in one fixed order, with no atomics, whatever C is (C only sets how many ranges re-read the
// rows: 256 where the device's shared memory holds them, fewer on smaller ones). The tiles' partials
// are then added to the pass's sums in tile order (tileReduceKernel), so the result depends neither
// on the schedule nor on how the rows were split into launches or chunks (multiples of the tile).
constexpr int kTileWarps = kTileSumWarps;
constexpr int kStageRows = kTileStageRows;
constexpr int kTileThreads = kWarp * kTileWarps;

template <int C> constexpr std::size_t tileSharedBytes(bool shape)
{
    return tileSumsSharedBytes(C, shape);
}

// A stage of the tile sums: its rows' labels (less the range's first cluster), weights and 1/‖x‖, and
// its rows' 32 block columns (one row per warp at a time: 32 consecutive floats, one load per lane),
// each thread's share into its registers.
constexpr int kRowSlots = (kStageRows + kTileThreads - 1) / kTileThreads;
constexpr int kColSlots = kStageRows * kWarp / kTileThreads;
static_assert(kStageRows * kWarp % kTileThreads == 0, "a stage's columns split evenly over the threads");

__device__ __forceinline__ void fetchStage(const float* __restrict__ x, std::int64_t ld, std::int64_t r0,
                                           std::int64_t s0, std::int64_t t1, int j0, int cols, int k0,
                                           const std::int32_t* __restrict__ labels, const float* __restrict__ w,
                                           const float* __restrict__ inv, bool shape, int tid,
                                           std::int32_t (&label)[kRowSlots], float (&weight)[kRowSlots],
                                           float (&inverse)[kRowSlots], float (&column)[kColSlots])
{
    const int rows = int(min(std::int64_t(kStageRows), t1 - s0));
#pragma unroll
    for (int u = 0; u < kRowSlots; ++u)
        if (const int i = tid + u * kTileThreads; i < rows) {
            const std::int64_t g = r0 + s0 + i;
            label[u] = labels[g] - k0;
            weight[u] = w ? w[g] : 1.0f;
            inverse[u] = shape ? inv[g] : 0.0f;
        }
    // Slot u of thread (lane, warp) is row warp + u·kTileWarps of the stage, column lane.
    const int lane = tid % kWarp, warp = tid / kWarp;
    const float* p = x + (s0 + warp) * ld + j0 + lane;
    const std::int64_t step = std::int64_t(kTileWarps) * ld;
#pragma unroll
    for (int u = 0; u < kColSlots; ++u)
        if (warp + u * kTileWarps < rows)
            column[u] = lane < cols ? p[u * step] : 0.0f;
}

// Grid (tiles of this launch, column groups, cluster ranges); block (32, kTileSumWarps). Partials of tile t of
// the launch: pX/pY [t][K][d], pW/pC [t][K] (pW and pC written by column group 0 only).
// At most 64 registers (an SM's registers for 2,048 threads: two blocks of 16 warps, one of 32), so
// the blocks that take fewer clusters (smaller devices' shared memory) fill an SM's threads; the
// pipelined stage fits without spills.
template <int C>
__global__ void __launch_bounds__(kTileThreads, 65536 / (64 * kTileThreads))
    tileSumsKernel(const float* __restrict__ x, std::int64_t ld, std::int64_t r0, std::int64_t m, int d, int K,
                   std::int64_t tileRows, std::int64_t tile0, const std::int32_t* __restrict__ labels,
                   const float* __restrict__ w, const float* __restrict__ inv, bool shape, double* __restrict__ pX,
                   double* __restrict__ pY, double* __restrict__ pW, long long* __restrict__ pC, Members members)
{
    // Grid z: the member's cluster ranges, member after member.
    const unsigned ranges = unsigned((K + C - 1) / C);
    const int b = memberAt(members, blockIdx.z / ranges);
    const std::int64_t ro = std::int64_t(b) * members.rowStride, po = std::int64_t(b) * members.partialStride;
    x += std::int64_t(b) * members.colStride;
    labels += ro;
    if (inv)
        inv += ro;
    pX += po;
    pY += po;
    pW += po;
    pC += po;
    double* sx = dynamicShared<double>();
    double* sy = sx + std::size_t(C) * kWarp; // used only with shape
    double* sw = sy + (shape ? std::size_t(C) * kWarp : 0);
    long long* sc = reinterpret_cast<long long*>(sw + C);
    float* xs = reinterpret_cast<float*>(sc + C);
    std::int32_t* ls = reinterpret_cast<std::int32_t*>(xs + kStageRows * kWarp);
    float* ws = reinterpret_cast<float*>(ls + kStageRows);
    float* is = ws + kStageRows;

    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * kWarp + lane;
    const int j0 = int(blockIdx.y) * kWarp, k0 = int(blockIdx.z % ranges) * C;
    const int cols = min(kWarp, d - j0), kb = min(C, K - k0);
    const bool first = blockIdx.y == 0; // column group 0 also sums W and the counts
    const std::int64_t t0 = (tile0 + blockIdx.x) * tileRows;
    const std::int64_t t1 = min(m, t0 + tileRows);
    for (int i = tid; i < kb * kWarp; i += kTileThreads) {
        sx[i] = 0;
        if (shape)
            sy[i] = 0;
    }
    for (int i = tid; i < kb; i += kTileThreads) {
        sw[i] = 0;
        sc[i] = 0;
    }
    // Software pipelining: a stage's rows come from memory into registers while the warps add the
    // stage before (the loads are issued, then the adds run, then the values go to shared memory),
    // so a stage's trip to memory is not on the block's chain. The same loads, stores and sums.
    std::int32_t nextLabel[kRowSlots];
    float nextW[kRowSlots], nextInv[kRowSlots], nextX[kColSlots];
    for (std::int64_t s0 = t0; s0 < t1; s0 += kStageRows) {
        // The first stage's rows (the loop's later stages were fetched during the stage before).
        if (s0 == t0)
            fetchStage(x, ld, r0, s0, t1, j0, cols, k0, labels, w, inv, shape, tid, nextLabel, nextW, nextInv, nextX);
        const int rows = int(min(std::int64_t(kStageRows), t1 - s0));
        __syncthreads(); // the last stage is consumed (and the partials are zero)
#pragma unroll
        for (int u = 0; u < kRowSlots; ++u)
            if (const int i = tid + u * kTileThreads; i < rows) {
                ls[i] = nextLabel[u];
                ws[i] = nextW[u];
                is[i] = nextInv[u];
            }
#pragma unroll
        for (int u = 0; u < kColSlots; ++u)
            if (const int i = tid + u * kTileThreads; i / kWarp < rows)
                xs[i] = nextX[u];
        __syncthreads();
        // The next stage's loads, in flight while this one is added.
        if (s0 + kStageRows < t1)
            fetchStage(x, ld, r0, s0 + kStageRows, t1, j0, cols, k0, labels, w, inv, shape, tid, nextLabel, nextW,
                       nextInv, nextX);
        // 32 staged rows at a time: a lane reads one row's label, a ballot names the warp's rows, and
        // the warp takes them in row order (the label from its lane by a shuffle), so each label is
        // read from shared memory once per warp, not once per thread.
        for (int q = 0; q < rows; q += kWarp) {
            const int label = q + lane < rows ? ls[q + lane] : -1;
            unsigned mine = __ballot_sync(0xffffffffu, unsigned(label) < unsigned(kb) && label % kTileWarps == warp);
            while (mine) {
                const int j = __ffs(int(mine)) - 1;
                mine &= mine - 1;
                const int r = q + j, k = __shfl_sync(0xffffffffu, label, j);
                const double wr = double(ws[r]);
                const double v = double(xs[r * kWarp + lane]);
                sx[k * kWarp + lane] += wr * v;
                if (shape)
                    sy[k * kWarp + lane] += (wr * double(is[r])) * v;
                if (first && lane == 0) {
                    sw[k] += wr;
                    sc[k] += 1;
                }
            }
        }
    }
    __syncthreads();
    const std::int64_t t = blockIdx.x;
    for (int i = tid; i < kb * kWarp; i += kTileThreads) {
        const int k = i / kWarp, c = i % kWarp;
        if (c >= cols)
            continue;
        const std::int64_t o = (t * K + k0 + k) * d + j0 + c;
        pX[o] = sx[i];
        if (shape)
            pY[o] = sy[i];
    }
    if (first)
        for (int i = tid; i < kb; i += kTileThreads) {
            pW[t * K + k0 + i] = sw[i];
            pC[t * K + k0 + i] = sc[i];
        }
}

// sums += the tiles' partials, added one tile after another in tile order: element e < K·d of Sx
// (and Sy), and for e < K, W and the counts.
static __global__ void tileReduceKernel(int tiles, int K, int d, bool shape, const double* __restrict__ pX,
                                        const double* __restrict__ pY, const double* __restrict__ pW,
                                        const long long* __restrict__ pC, double* __restrict__ sumX,
                                        double* __restrict__ sumY, double* __restrict__ wsum,
                                        long long* __restrict__ count, Members members)
{
    const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::int64_t kd = std::int64_t(K) * d;
    // Grid y: the member.
    const int b = memberAt(members, blockIdx.y);
    const std::int64_t po = std::int64_t(b) * members.partialStride;
    pX += po;
    pY += po;
    pW += po;
    pC += po;
    sumX += b * kd;
    if (sumY)
        sumY += b * kd;
    wsum += std::int64_t(b) * K;
    count += std::int64_t(b) * K;
    if (e < kd) {
        double a = sumX[e];
        for (int t = 0; t < tiles; ++t)
            a += pX[t * kd + e];
        sumX[e] = a;
        if (shape) {
            double b = sumY[e];
            for (int t = 0; t < tiles; ++t)
                b += pY[t * kd + e];
            sumY[e] = b;
        }
    }
    if (e < K) {
        double a = wsum[e];
        long long c = count[e];
        for (int t = 0; t < tiles; ++t) {
            a += pW[t * K + e];
            c += pC[t * K + e];
        }
        wsum[e] = a;
        count[e] = c;
    }
}

constexpr int kSumThreads = 1024;

// Block x: array x % perMember of member x / perMember.
static __global__ void sumArraysKernel(const double* const* __restrict__ arrays, int perMember, std::int64_t n,
                                       double* __restrict__ out, Members members)
{
    __shared__ double part[kSumThreads];
    const int b = memberAt(members, blockIdx.x / unsigned(perMember)), slot = int(blockIdx.x % unsigned(perMember));
    const double* a = arrays[slot] + std::int64_t(b) * members.rowStride;
    double s = 0;
    // Thread t adds elements t, t+1024, ... in order; then a fixed tree over the threads.
    for (std::int64_t i = threadIdx.x; i < n; i += kSumThreads)
        s += a[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = kSumThreads / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[std::int64_t(b) * members.scalarStride + slot] = part[0];
}

// A warp per cluster: update_rule.h's update from its steps, the columns a lane each (32 apart), the
// sums in index order by lane 0 over the warp's copy in shared memory, so the bits are cluster()'s;
// then the centroid's ‖c‖² for the next pass. Block: updateWarps(d) warps, each warpDoubles of shared
// memory (pass_costs.h's layout); grid (clusters, members).
constexpr int kMaxUpdateWarps = 8;

static __global__ void __launch_bounds__(kMaxUpdateWarps * 32)
    updateCentroidsKernel(update::Params rule, int K, int d, std::size_t warpDoubles, const double* __restrict__ wsum,
                          const double* __restrict__ sumX, const double* __restrict__ sumY, double* __restrict__ emaW,
                          double* __restrict__ emaS, double* __restrict__ gain, double* __restrict__ shape,
                          float* __restrict__ C, float* __restrict__ cNorm, Members members)
{
    const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp, warps = int(blockDim.x) / kWarp;
    const int c = int(blockIdx.x) * warps + warp;
    if (c >= K)
        return; // the whole warp
    double* a = dynamicShared<double>() + std::size_t(warp) * warpDoubles;
    double* bcol = a + d;
    float* cs = reinterpret_cast<float*>(bcol + d);
    // Its clusters' arrays follow the previous member's.
    const std::int64_t k = std::int64_t(memberAt(members, blockIdx.y)) * K + c;
    const std::int64_t o = k * d;
    const double W = wsum[k];
    float* ck = C + o;
    // Each path leaves the centroid in ck and its copy in cs.
    if (rule.rule == update::Rule::Ema) {
        const double w = update::emaWeightStep(rule, emaW[k], W); // every lane the same
        for (int j = lane; j < d; j += kWarp) {
            const double s = update::emaSumStep(rule, emaS[o + j], sumX[o + j]);
            emaS[o + j] = s;
            if (w > 0)
                ck[j] = cs[j] = update::ratio(s, w);
            else
                cs[j] = ck[j];
        }
        __syncwarp();
        if (lane == 0)
            emaW[k] = w;
    } else if (!(W > 0)) { // an empty (or zero-weight) cluster keeps its centroid
        for (int j = lane; j < d; j += kWarp)
            cs[j] = ck[j];
    } else if (rule.rule == update::Rule::Mean) {
        for (int j = lane; j < d; j += kWarp)
            ck[j] = cs[j] = update::ratio(sumX[o + j], W);
    } else { // GainShape
        for (int j = lane; j < d; j += kWarp) {
            a[j] = sumX[o + j];
            bcol[j] = sumY[o + j];
        }
        __syncwarp();
        double norm = lane == 0 ? sqrt(update::sumOfSquares(bcol, d)) : 0.0;
        norm = __shfl_sync(0xffffffffu, norm, 0); // also: lane 0 has read the Sy column
        const bool moves = update::shapeMoves(rule, norm, W);
        for (int j = lane; j < d; j += kWarp) {
            const double sj = moves ? bcol[j] / norm : shape[o + j];
            if (moves)
                shape[o + j] = sj;
            bcol[j] = sj;
        }
        __syncwarp();
        double g = lane == 0 ? update::gainOf(update::dotProduct(a, bcol, d), W) : 0.0;
        g = __shfl_sync(0xffffffffu, g, 0);
        if (lane == 0)
            gain[k] = g;
        for (int j = lane; j < d; j += kWarp)
            ck[j] = cs[j] = update::gainShapeColumn(g, bcol[j]);
    }
    __syncwarp();
    // ‖c‖² in index order from the warp's copy of the centroid.
    if (lane == 0)
        cNorm[k] = update::squaredNorm(cs, d);
}

static __global__ void centroidNormsKernel(int K, int d, const float* __restrict__ C, float* __restrict__ cNorm)
{
    const int k = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
    if (k < K)
        cNorm[k] = update::squaredNorm(C + std::int64_t(k) * d, d);
}

constexpr int kTotalThreads = 256;

// out[0] = clusters with no member, out[1] = Σ_k count_k·‖c_k‖² (‖c_k‖² in double): thread t takes
// k = t, t+256, ... in order, then a fixed tree over the threads.
// A block per member.
static __global__ void clusterTotalsKernel(int K, int d, const long long* __restrict__ count,
                                           const float* __restrict__ C, double* __restrict__ out, Members members)
{
    __shared__ double empty[kTotalThreads], recon[kTotalThreads];
    const int b = memberAt(members, blockIdx.x);
    count += std::int64_t(b) * K;
    C += std::int64_t(b) * K * d;
    out += std::int64_t(b) * members.scalarStride;
    double e = 0, r = 0;
    for (int k = threadIdx.x; k < K; k += kTotalThreads) {
        const float* c = C + std::int64_t(k) * d;
        double sq = 0;
        for (int j = 0; j < d; ++j)
            sq = fma(double(c[j]), double(c[j]), sq);
        e += count[k] == 0 ? 1.0 : 0.0;
        r = fma(double(count[k]), sq, r);
    }
    empty[threadIdx.x] = e;
    recon[threadIdx.x] = r;
    __syncthreads();
    for (int half = kTotalThreads / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half) {
            empty[threadIdx.x] += empty[threadIdx.x + half];
            recon[threadIdx.x] += recon[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = empty[0];
        out[1] = recon[0];
    }
}

static __global__ void gatherRowsKernel(const float* __restrict__ x, std::int64_t ld,
                                        const std::int64_t* __restrict__ idx, int k, int d, float* __restrict__ out)
{
    const int row = blockIdx.x;
    if (row >= k)
        return;
    const float* src = x + idx[row] * ld;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
        out[std::int64_t(row) * d + j] = src[j];
}

static __global__ void subtractAssignedKernel(float* __restrict__ res, float* __restrict__ rec, std::int64_t ld,
                                              std::int64_t n, int d, const std::int32_t* __restrict__ labels,
                                              const float* __restrict__ C)
{
    const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n * d)
        return;
    const std::int64_t i = e / d;
    const int j = int(e % d);
    const float c = C[std::int64_t(labels[i]) * d + j];
    res[i * ld + j] -= c;
    rec[i * ld + j] += c;
}

static __global__ void rowMetricsKernel(const float* __restrict__ x, const float* __restrict__ xh, std::int64_t n,
                                        int f, double* __restrict__ err, double* __restrict__ nx2,
                                        double* __restrict__ nh2, double* __restrict__ gain, double* __restrict__ cosv,
                                        double* __restrict__ cosRow)
{
    const std::int64_t row = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
    if (row >= n)
        return;
    double e = 0, a = 0, b = 0, dot = 0;
    for (int j = threadIdx.x; j < f; j += kWarp) {
        const double u = x[row * f + j], v = xh[row * f + j];
        e += (u - v) * (u - v);
        a += u * u;
        b += v * v;
        dot += u * v;
    }
    e = warpSum(e);
    a = warpSum(a);
    b = warpSum(b);
    dot = warpSum(dot);
    if (threadIdx.x != 0)
        return;
    const double nx = sqrt(a), nh = sqrt(b);
    err[row] = e;
    nx2[row] = a;
    nh2[row] = b;
    gain[row] = fabs(nx - nh);
    cosv[row] = nx > 0 && nh > 0 ? dot / (nx * nh) : 0.0;
    cosRow[row] = nx > 0 ? 1.0 : 0.0;
}

} // namespace

cudaError_t launchRowNorms(const float* x, std::int64_t ld, std::int64_t n, int d, float epsilon, float* sq, float* inv,
                           cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    launch(rowNormsKernel, rowBlocks(n), dim3(kWarp, kRowsPerBlock), 0, stream, x, ld, n, d, epsilon, sq, inv);
    return cudaGetLastError();
}

cudaError_t launchArgmaxRows(const float* S, int K, const float* cNorm, std::int64_t r0, std::int64_t m,
                             const float* sq, const float* w, std::int32_t* labels, double* err, double* sqw,
                             double* wt, double* changed, RowMetricTerms metrics, cudaStream_t stream,
                             const Members& members)
{
    if (m == 0 || members.count == 0)
        return cudaSuccess;
    launch(argmaxRowsKernel, dim3(unsigned(rowBlocks(m)), 1, unsigned(members.count)), dim3(kWarp, kRowsPerBlock), 0,
           stream, S, K, cNorm, r0, m, sq, w, labels, err, sqw, wt, changed, metrics, members);
    return cudaGetLastError();
}

namespace {

template <int C>
cudaError_t launchTiles(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t m, int d, int K,
                        std::int64_t tileRows, const std::int32_t* labels, const float* w, const float* inv,
                        double* sumX, double* sumY, double* wsum, long long* count, double* partials,
                        cudaStream_t stream, const Members& members)
{
    const bool shape = sumY != nullptr;
    const std::size_t shm = tileSharedBytes<C>(shape);
    if (cudaError_t e = allowShared(tileSumsKernel<C>, shm); e != cudaSuccess)
        return e;
    const std::int64_t tiles = (m + tileRows - 1) / tileRows;
    const std::int64_t group = tilesPerLaunch(m, d, K, tileRows);
    const std::size_t kd = std::size_t(K) * d;
    double* pX = partials;
    double* pY = pX + std::size_t(group) * kd;
    double* pW = pY + std::size_t(group) * kd;
    long long* pC = reinterpret_cast<long long*>(pW + std::size_t(group) * K);
    const unsigned reduceBlocks = unsigned((std::max<std::size_t>(kd, std::size_t(K)) + 255) / 256);
    for (std::int64_t g0 = 0; g0 < tiles; g0 += group) {
        const int n = int(std::min(group, tiles - g0));
        const dim3 grid(unsigned(n), unsigned((d + kWarp - 1) / kWarp), unsigned((K + C - 1) / C * members.count));
        launch(tileSumsKernel<C>, grid, dim3(kWarp, kTileWarps), shm, stream, x, ld, r0, m, d, K, tileRows, g0, labels,
               w, inv, shape, pX, pY, pW, pC, members);
        launch(tileReduceKernel, dim3(reduceBlocks, unsigned(members.count)), 256, 0, stream, n, K, d, shape, pX, pY,
               pW, pC, sumX, sumY, wsum, count, members);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

} // namespace

std::size_t tilePartialDoubles(std::int64_t m, int d, int K, std::int64_t tileRows)
{
    return std::size_t(tilesPerLaunch(m, d, K, tileRows)) * K * (2 * std::size_t(d) + 2); // Sx, Sy, W, counts
}

cudaError_t launchAccumulate(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t m, int d, int K,
                             std::int64_t tileRows, std::size_t sharedOptin, const std::int32_t* labels, const float* w,
                             const float* inv, double* sumX, double* sumY, double* wsum, long long* count,
                             double* partials, cudaStream_t stream, const Members& members)
{
    if (m == 0 || members.count == 0)
        return cudaSuccess;
    const bool shape = sumY != nullptr;
    // The widest cluster range whose partials fit the device's shared memory per block beside the
    // kernel's static arrays (256 on Hopper and the A100; 128 on the RTX 30 and 40 series, the L4).
    auto fits = [&]<int C>() { return tileSharedBytes<C>(shape) + staticShared(tileSumsKernel<C>) <= sharedOptin; };
    auto run = [&]<int C>() {
        return launchTiles<C>(x, ld, r0, m, d, K, tileRows, labels, w, inv, sumX, sumY, wsum, count, partials, stream,
                              members);
    };
    if (fits.template operator()<256>())
        return run.template operator()<256>();
    if (fits.template operator()<128>())
        return run.template operator()<128>();
    return run.template operator()<32>();
}

cudaError_t launchSumArrays(const double* const* arrays, int count, std::int64_t n, double* out, cudaStream_t stream,
                            const Members& members)
{
    if (count == 0 || members.count == 0)
        return cudaSuccess;
    launch(sumArraysKernel, unsigned(count * members.count), kSumThreads, 0, stream, arrays, count, n, out, members);
    return cudaGetLastError();
}

cudaError_t launchUpdateCentroids(const update::Params& rule, int K, int d, const double* wsum, const double* sumX,
                                  const double* sumY, double* emaW, double* emaS, double* gain, double* shape, float* C,
                                  float* cNorm, cudaStream_t stream, const Members& members)
{
    if (members.count == 0)
        return cudaSuccess;
    const int warps = updateWarps(d);
    const std::size_t warpDoubles = updateWarpDoubles(d), shm = std::size_t(warps) * warpDoubles * sizeof(double);
    if (cudaError_t e = allowShared(updateCentroidsKernel, shm); e != cudaSuccess)
        return e;
    launch(updateCentroidsKernel, dim3(unsigned((K + warps - 1) / warps), unsigned(members.count)), warps * 32, shm,
           stream, rule, K, d, warpDoubles, wsum, sumX, sumY, emaW, emaS, gain, shape, C, cNorm, members);
    return cudaGetLastError();
}

cudaError_t launchCentroidNorms(int K, int d, const float* C, float* cNorm, cudaStream_t stream)
{
    constexpr int threads = 128;
    launch(centroidNormsKernel, (K + threads - 1) / threads, threads, 0, stream, K, d, C, cNorm);
    return cudaGetLastError();
}

cudaError_t launchClusterTotals(int K, int d, const long long* count, const float* C, double* out, cudaStream_t stream,
                                const Members& members)
{
    if (members.count == 0)
        return cudaSuccess;
    launch(clusterTotalsKernel, unsigned(members.count), kTotalThreads, 0, stream, K, d, count, C, out, members);
    return cudaGetLastError();
}

cudaError_t launchGatherRows(const float* x, std::int64_t ld, const std::int64_t* idx, int k, int d, float* out,
                             cudaStream_t stream)
{
    if (k == 0)
        return cudaSuccess;
    launch(gatherRowsKernel, k, 128, 0, stream, x, ld, idx, k, d, out);
    return cudaGetLastError();
}

cudaError_t launchSubtractAssigned(float* res, float* rec, std::int64_t ld, std::int64_t n, int d,
                                   const std::int32_t* labels, const float* C, cudaStream_t stream)
{
    const std::int64_t total = n * d;
    if (total == 0)
        return cudaSuccess;
    const int threads = 256;
    launch(subtractAssignedKernel, static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream, res, rec,
           ld, n, d, labels, C);
    return cudaGetLastError();
}

cudaError_t launchRowMetrics(const float* x, const float* xh, std::int64_t n, int f, double* err, double* nx2,
                             double* nh2, double* gain, double* cos, double* cosRow, cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    launch(rowMetricsKernel, rowBlocks(n), dim3(kWarp, kRowsPerBlock), 0, stream, x, xh, n, f, err, nx2, nh2, gain, cos,
           cosRow);
    return cudaGetLastError();
}

} // namespace gsrq::gpu::kernels
