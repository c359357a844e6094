#include "gpu/cluster/cluster_kernels.h"
#include "gpu/device/launch.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

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
                                        double* __restrict__ changed, RowMetricTerms metrics)
{
    const std::int64_t i = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
    if (i >= m)
        return;
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
        if (ov > best || (ov == best && ol < label)) {
            best = ov;
            label = ol;
        }
    }
    if (threadIdx.x != 0)
        return;
    if (label >= K)
        label = 0; // only when every score is −inf or NaN; the data is checked finite before
    const std::int64_t g = r0 + i;
    const double wi = w ? double(w[g]) : 1.0;
    const double n2 = double(sq[g]);
    err[g] = wi * fmax(0.0, n2 - double(best));
    sqw[g] = wi * n2;
    wt[g] = wi;
    changed[g] = labels[g] != label ? 1.0 : 0.0;
    labels[g] = label;
    if (metrics.gain) {
        // x·c from the score: 2x·c − ‖c‖² = best.
        const double nc2 = double(cNorm[label]);
        const double nx = sqrt(n2), nc = sqrt(nc2);
        metrics.gain[g] = fabs(nx - nc);
        metrics.cosine[g] = nx > 0 && nc > 0 ? fmin(1.0, fmax(-1.0, 0.5 * (double(best) + nc2) / (nx * nc))) : 0.0;
        metrics.cosineRow[g] = nx > 0 ? 1.0 : 0.0;
        metrics.squaredNorm[g] = n2;
    }
}

static __global__ void countKernel(const std::int32_t* __restrict__ labels, std::int64_t m,
                                   std::int32_t* __restrict__ counts)
{
    const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < m)
        atomicAdd(counts + labels[i], 1); // integer: the same counts whatever the order
}

static __global__ void iotaKernel(std::int32_t* __restrict__ v, std::int64_t m)
{
    const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < m)
        v[i] = std::int32_t(i);
}

// One block per cluster: 32 lanes across features, 8 warps across members (member p goes to warp
// p mod 8), then the 8 partial sums are added in warp order. Members come in row order (stable
// sort), so every sum is taken in the same order on every run.
constexpr int kSegWarps = 8;

static __global__ void segmentSumsKernel(const float* __restrict__ x, std::int64_t ld, std::int64_t r0,
                                         const std::int32_t* __restrict__ sortedRows,
                                         const std::int32_t* __restrict__ offsets, int d, const float* __restrict__ w,
                                         const float* __restrict__ inv, double* __restrict__ sumX,
                                         double* __restrict__ sumY, double* __restrict__ wsum,
                                         long long* __restrict__ count)
{
    __shared__ double shX[kSegWarps][kWarp + 1];
    __shared__ double shY[kSegWarps][kWarp + 1];
    __shared__ double shW[kSegWarps];
    const int k = blockIdx.x;
    const int beg = offsets[k], end = offsets[k + 1];
    if (beg == end)
        return;
    const int lane = threadIdx.x, warp = threadIdx.y;
    for (int j0 = 0; j0 < d; j0 += kWarp) {
        const int j = j0 + lane;
        double ax = 0, ay = 0, aw = 0;
        for (int p = beg + warp; p < end; p += kSegWarps) {
            const std::int64_t r = sortedRows[p]; // row within the chunk
            const double wr = w ? double(w[r0 + r]) : 1.0;
            aw += wr;
            if (j < d) {
                const double v = double(x[r * ld + j]);
                ax += wr * v;
                if (sumY)
                    ay += (wr * double(inv[r0 + r])) * v;
            }
        }
        shX[warp][lane] = ax;
        shY[warp][lane] = ay;
        if (lane == 0)
            shW[warp] = aw;
        __syncthreads();
        if (warp == 0) {
            double sx = 0, sy = 0;
            for (int y = 0; y < kSegWarps; ++y) {
                sx += shX[y][lane];
                sy += shY[y][lane];
            }
            if (j < d) {
                sumX[std::int64_t(k) * d + j] += sx;
                if (sumY)
                    sumY[std::int64_t(k) * d + j] += sy;
            }
            if (j0 == 0 && lane == 0) {
                double sw = 0;
                for (int y = 0; y < kSegWarps; ++y)
                    sw += shW[y];
                wsum[k] += sw;
                count[k] += end - beg;
            }
        }
        __syncthreads();
    }
}

constexpr int kSumThreads = 1024;

static __global__ void sumArraysKernel(const double* const* __restrict__ arrays, std::int64_t n,
                                       double* __restrict__ out)
{
    __shared__ double part[kSumThreads];
    const double* a = arrays[blockIdx.x];
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
        out[blockIdx.x] = part[0];
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

int sortBits(int K)
{
    int bits = 1;
    while ((1 << bits) < K)
        ++bits;
    return bits;
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
                             double* wt, double* changed, RowMetricTerms metrics, cudaStream_t stream)
{
    if (m == 0)
        return cudaSuccess;
    launch(argmaxRowsKernel, rowBlocks(m), dim3(kWarp, kRowsPerBlock), 0, stream, S, K, cNorm, r0, m, sq, w, labels,
           err, sqw, wt, changed, metrics);
    return cudaGetLastError();
}

std::size_t segmentTempBytes(std::int64_t m, int K)
{
    std::size_t sortBytes = 0, scanBytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, sortBytes, static_cast<const std::int32_t*>(nullptr),
                                    static_cast<std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
                                    static_cast<std::int32_t*>(nullptr), static_cast<int>(m), 0, sortBits(K));
    cub::DeviceScan::ExclusiveSum(nullptr, scanBytes, static_cast<const std::int32_t*>(nullptr),
                                  static_cast<std::int32_t*>(nullptr), K + 1);
    return sortBytes > scanBytes ? sortBytes : scanBytes;
}

cudaError_t launchAccumulateChunk(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t m, int d, int K,
                                  const std::int32_t* labels, const float* w, const float* inv, double* sumX,
                                  double* sumY, double* wsum, long long* count, std::int32_t* scratch, void* temp,
                                  std::size_t tempBytes, cudaStream_t stream)
{
    if (m == 0)
        return cudaSuccess;
    std::int32_t* rowsIn = scratch;         // m: 0 .. m−1
    std::int32_t* rowsSorted = scratch + m; // m
    std::int32_t* keysSorted = scratch + 2 * m;
    std::int32_t* offsets = scratch + 3 * m; // K + 1: counts, then their exclusive sum
    const int threads = 256;
    const int blocks = static_cast<int>((m + threads - 1) / threads);
    cudaError_t e = cudaMemsetAsync(offsets, 0, sizeof(std::int32_t) * (K + 1), stream);
    if (e != cudaSuccess)
        return e;
    launch(countKernel, blocks, threads, 0, stream, labels + r0, m, offsets);
    launch(iotaKernel, blocks, threads, 0, stream, rowsIn, m);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    std::size_t bytes = tempBytes;
    if ((e = cub::DeviceScan::ExclusiveSum(temp, bytes, offsets, offsets, K + 1, stream)) != cudaSuccess)
        return e;
    bytes = tempBytes;
    if ((e = cub::DeviceRadixSort::SortPairs(temp, bytes, labels + r0, keysSorted, rowsIn, rowsSorted,
                                             static_cast<int>(m), 0, sortBits(K), stream)) != cudaSuccess)
        return e;
    launch(segmentSumsKernel, K, dim3(kWarp, kSegWarps), 0, stream, x, ld, r0, rowsSorted, offsets, d, w, inv, sumX,
           sumY, wsum, count);
    return cudaGetLastError();
}

cudaError_t launchSumArrays(const double* const* arrays, int count, std::int64_t n, double* out, cudaStream_t stream)
{
    launch(sumArraysKernel, count, kSumThreads, 0, stream, arrays, n, out);
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
