// The lookup path's kernels (layouts in decode_kernels.h): per query, tables of q·codeword; per split,
// scores as sums of table entries and softmax weights binned by value codeword; then the splits'
// bins merged and multiplied by the value codebooks (also for the paper path with bins).

#include "gpu/decode/decode_device.cuh"
#include "gpu/decode/decode_kernels.h"
#include "gpu/decode/decode_math.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

using namespace detail;

// grid (B·G, S·R), threads over k: T[b][h][s][r][k] for the group's heads, sharing each codeword read.
__global__ void lookupTablesKernel(DecodeDims d, const float* q, const __half* kb, float* tables)
{
    __shared__ float qs[kMaxGroup][256]; // D ≤ 256
    const int bg = blockIdx.x, b = bg / d.kvHeads, g = bg % d.kvHeads;
    const int sr = blockIdx.y, s = sr / d.stages, r = sr % d.stages;
    const int S = d.subspacesPerHead(), m = g * S + s, group = d.group(), D = d.dim;
    const float scale = kLog2e / sqrtf(float(d.headDim));
    for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
        const int h = i / D, j = i % D;
        qs[h][j] = q[(std::int64_t(b) * d.heads + g * group + h) * d.headDim + s * D + j] * scale;
    }
    __syncthreads();
    const __half* C = kb + (std::int64_t(m) * d.stages + r) * d.k * D;
    for (int k = threadIdx.x; k < d.k; k += blockDim.x) {
        float acc[kMaxGroup] = {};
        for (int j = 0; j < D; j += kEpl) {
            float c[kEpl] = {};
            addHalf8(c, load16(C + std::int64_t(k) * D + j));
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h)
                if (h < group)
#pragma unroll
                    for (int e = 0; e < kEpl; ++e)
                        acc[h] += qs[h][j + e] * c[e];
        }
        for (int h = 0; h < group; ++h)
            tables[(((std::int64_t(b) * d.heads + g * group + h) * S + s) * d.stages + r) * d.k + k] = acc[h];
    }
}

constexpr int kLookupThreads = kLookupSplitThreads;

// grid (splits, G, B); shared: tables and weights, group × S·R·K floats each.
template <int G>
__global__ void __launch_bounds__(kLookupThreads)
    lookupSplitKernel(DecodeDims d, const float* tablesIn, const std::uint8_t* kc, const std::uint8_t* vc,
                      float* weights, float* mOut, float* lOut)
{
    float* smem = dynamicShared<float>();
    float* const red = sharedWarpValues();
    static_assert(kLookupThreads / 32 <= kMaxBlockWarps);
    const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z, group = d.group();
    const int S = d.subspacesPerHead(), M = d.subspaces(), R = d.stages, K = d.k;
    const int per = S * R * K; // table entries per head
    float* T = smem;
    float* W = smem + std::size_t(group) * per;
    const float* tSrc = tablesIn + (std::int64_t(b) * d.heads + g * group) * per;
    for (int i = threadIdx.x; i < group * per; i += blockDim.x) {
        T[i] = tSrc[i];
        W[i] = 0;
    }
    __syncthreads();

    const std::int64_t t0 = std::int64_t(split) * d.tokensPerSplit;
    const std::int64_t t1 = min(d.tokens, t0 + d.tokensPerSplit);
    float mRef[G], lSum[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        mRef[h] = -INFINITY;
        lSum[h] = 0;
    }
    for (std::int64_t tb = t0; tb < t1; tb += blockDim.x) {
        const std::int64_t t = tb + threadIdx.x;
        const bool ok = t < t1;
        const std::int64_t tc = ok ? t : t1 - 1;
        float sc[G];
#pragma unroll
        for (int h = 0; h < G; ++h)
            sc[h] = 0;
        for (int s = 0; s < S; ++s) {
            const auto* w = reinterpret_cast<const std::uint32_t*>(
                kc + ((std::int64_t(b) * M + g * S + s) * d.capacity + tc) * d.bytesPerToken);
            for (int r = 0; r < R; ++r) {
                const int c = int(codeAt(w, r, d.bits)), o = (s * R + r) * K + c;
#pragma unroll
                for (int h = 0; h < G; ++h)
                    if (h < group)
                        sc[h] += T[h * per + o];
            }
        }
        float p[G];
#pragma unroll
        for (int h = 0; h < G; ++h) {
            if (h >= group)
                break;
            const float tileMax = blockMax(ok ? sc[h] : -INFINITY, red);
            if (tileMax > mRef[h] + kRescaleMargin) { // the same decision in every thread
                if (mRef[h] != -INFINITY) {
                    const float c = exp2f(mRef[h] - tileMax);
                    __syncthreads();
                    for (int i = threadIdx.x; i < per; i += blockDim.x)
                        W[h * per + i] *= c;
                    lSum[h] *= c;
                }
                mRef[h] = tileMax;
            }
            p[h] = ok ? exp2f(sc[h] - mRef[h]) : 0.f;
            lSum[h] += p[h];
        }
        __syncthreads();
        if (ok)
            for (int s = 0; s < S; ++s)
                addToBins<G>(W, per, group, s, R, K,
                             reinterpret_cast<const std::uint32_t*>(
                                 vc + ((std::int64_t(b) * M + g * S + s) * d.capacity + t) * d.bytesPerToken),
                             d.bits, 0, 1, p);
        __syncthreads();
    }
    writeSplitBins<G>(d, W, per, b, g, split, mRef, lSum, weights, mOut, lOut, red);
}

// The splits' scale factors of the group's heads (f = 2^(m_split − max), 0 for an empty split) into
// f[h·splits + s], and their softmax sums L[h] = Σ f·l. Run by the first `group` threads.
__device__ void splitScales(const DecodeDims& d, int b, int g, const float* mIn, const float* lIn, float* f, float* L)
{
    const int group = d.group();
    if (int(threadIdx.x) >= group)
        return;
    const int h = threadIdx.x;
    const std::int64_t o = (std::int64_t(b) * d.heads + g * group + h) * d.splits;
    float Mx = -INFINITY;
    for (int s = 0; s < d.splits; ++s)
        Mx = fmaxf(Mx, mIn[o + s]);
    float l = 0;
    for (int s = 0; s < d.splits; ++s) {
        const float w = mIn[o + s] == -INFINITY ? 0.f : exp2f(mIn[o + s] - Mx);
        f[h * d.splits + s] = w;
        l += w * lIn[o + s];
    }
    L[h] = l;
}

constexpr int kCombineThreads = kStageThreads;

// Grid (B·G, S·R): one block per (sequence, KV head, subspace s, stage r), so the work spreads over
// the device at batch 1 too. It merges the splits' weights of that stage's K codewords for the
// group's heads, then multiplies them with the stage's codewords: part[b][g][s][r][h][D] (unscaled
// by the softmax sum). Thread (j, p) sums codewords k ≡ p mod parts for feature j; parts reduce in
// order after. Shared: group × (splits + 1 + K) floats, then parts × group × D for the reduction.
__global__ void __launch_bounds__(kCombineThreads)
    lookupStageKernel(DecodeDims d, const float* weights, const float* mIn, const float* lIn, const __half* vb,
                      float* part)
{
    float* smem = dynamicShared<float>();
    const int bg = blockIdx.x, b = bg / d.kvHeads, g = bg % d.kvHeads, group = d.group();
    const int sr = blockIdx.y, S = d.subspacesPerHead(), R = d.stages, K = d.k, D = d.dim;
    const int s = sr / R, r = sr % R, per = S * R * K;
    const int parts = max(1, kCombineThreads / D);
    float* f = smem;                 // group × splits
    float* L = f + group * d.splits; // group
    float* Wk = L + group;           // group × K merged weights of this stage
    float* red = Wk + group * K;     // parts × group × D
    splitScales(d, b, g, mIn, lIn, f, L);
    __syncthreads();
    for (int i = threadIdx.x; i < group * K; i += blockDim.x) {
        const int h = i / K, k = i % K;
        const std::int64_t o = (std::int64_t(b) * d.heads + g * group + h) * d.splits;
        float a = 0;
        for (int t = 0; t < d.splits; ++t)
            a += f[h * d.splits + t] * weights[(o + t) * per + sr * K + k];
        Wk[i] = a;
    }
    __syncthreads();
    const int j = threadIdx.x % D, p = threadIdx.x / D;
    if (p < parts) {
        float acc[kMaxGroup] = {};
        const __half* C = vb + ((std::int64_t(g * S + s) * R + r) * K) * D + j;
        for (int k = p; k < K; k += parts) {
            const float c = __half2float(C[std::int64_t(k) * D]);
#pragma unroll
            for (int h = 0; h < kMaxGroup; ++h)
                if (h < group)
                    acc[h] += Wk[h * K + k] * c;
        }
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h)
            if (h < group)
                red[(p * group + h) * D + j] = acc[h];
    }
    __syncthreads();
    float* out = part + ((std::int64_t(bg) * S + s) * R + r) * group * D;
    for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
        float a = 0;
        for (int q = 0; q < parts; ++q)
            a += red[q * group * D + i];
        out[i] = a;
    }
}

// Grid B·G: out = Σ_r part / L, the stages added in order, for the group's heads. Shared: group ×
// (splits + 1) floats.
__global__ void lookupOutKernel(DecodeDims d, const float* mIn, const float* lIn, const float* part, float* out)
{
    float* fl = dynamicShared<float>();
    const int bg = blockIdx.x, b = bg / d.kvHeads, g = bg % d.kvHeads, group = d.group();
    const int S = d.subspacesPerHead(), R = d.stages, D = d.dim;
    float* L = fl + group * d.splits;
    splitScales(d, b, g, mIn, lIn, fl, L);
    __syncthreads();
    for (int i = threadIdx.x; i < group * d.headDim; i += blockDim.x) {
        const int h = i / d.headDim, j = i % d.headDim, s = j / D, jj = j % D;
        const float* p = part + ((std::int64_t(bg) * S + s) * R) * group * D + h * D + jj;
        float a = 0;
        for (int r = 0; r < R; ++r)
            a += p[std::int64_t(r) * group * D];
        out[(std::int64_t(b) * d.heads + g * group + h) * d.headDim + j] = a / L[h];
    }
}

// The dynamic shared memory each launch asks for (decode_math.h); the *SharedBytes functions add the
// static arrays.
std::size_t lookupDynamicBytes(const DecodeDims& d)
{
    return lookupSplitDynamicBytes(d.group(), d.subspacesPerHead(), d.stages, d.k);
}

std::size_t lookupCombineDynamicBytes(const DecodeDims& d)
{
    static_assert(kCombineThreads == kStageThreads);
    return gpu::lookupCombineDynamicBytes(d.group(), d.splits, d.k, d.dim);
}

} // namespace

using detail::withGroup;

cudaError_t launchLookupTables(const DecodeDims& d, const float* q, const std::uint16_t* kb, float* tables,
                               cudaStream_t stream)
{
    const dim3 grid(unsigned(d.batch * d.kvHeads), unsigned(d.subspacesPerHead() * d.stages));
    launch(lookupTablesKernel, grid, kTablesThreads, 0, stream, d, q, reinterpret_cast<const __half*>(kb), tables);
    return cudaGetLastError();
}

std::size_t lookupSharedBytes(const DecodeDims& d)
{
    std::size_t fixed = 0;
    withGroup(d.group(), [&]<int G>() {
        fixed = staticShared(lookupSplitKernel<G>);
        return cudaSuccess;
    });
    return lookupDynamicBytes(d) + fixed;
}

cudaError_t launchLookupSplit(const DecodeDims& d, const float* tables, const std::uint8_t* kc, const std::uint8_t* vc,
                              float* weights, float* m, float* l, cudaStream_t stream)
{
    const dim3 grid(unsigned(d.splits), unsigned(d.kvHeads), unsigned(d.batch));
    const std::size_t shm = lookupDynamicBytes(d);
    return withGroup(d.group(), [&]<int G>() {
        auto* kernel = lookupSplitKernel<G>;
        if (cudaError_t e = allowShared(kernel, shm); e != cudaSuccess)
            return e;
        launch(kernel, grid, kLookupThreads, shm, stream, d, tables, kc, vc, weights, m, l);
        return cudaGetLastError();
    });
}

std::size_t lookupCombineSharedBytes(const DecodeDims& d)
{
    return lookupCombineDynamicBytes(d) + staticShared(lookupStageKernel);
}

std::size_t lookupStagePartialFloats(const DecodeDims& d)
{
    return std::size_t(d.batch) * d.heads * d.headDim * d.stages;
}

cudaError_t launchLookupCombine(const DecodeDims& d, const float* weights, const float* m, const float* l,
                                const std::uint16_t* vb, float* stagePartials, float* out, cudaStream_t stream)
{
    const std::size_t shm = lookupCombineDynamicBytes(d);
    if (cudaError_t e = allowShared(lookupStageKernel, shm); e != cudaSuccess)
        return e;
    const dim3 grid(unsigned(d.batch * d.kvHeads), unsigned(d.subspacesPerHead() * d.stages));
    launch(lookupStageKernel, grid, kCombineThreads, shm, stream, d, weights, m, l, reinterpret_cast<const __half*>(vb),
           stagePartials);
    const std::size_t outShm = std::size_t(d.group()) * (d.splits + 1) * sizeof(float);
    if (cudaError_t e = allowShared(lookupOutKernel, outShm); e != cudaSuccess)
        return e;
    launch(lookupOutKernel, unsigned(d.batch * d.kvHeads), kLookupOutThreads, outShm, stream, d, m, l, stagePartials,
           out);
    return cudaGetLastError();
}

} // namespace gsrq::gpu::kernels
