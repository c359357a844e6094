// Kernels that write the caches (layouts in decode_kernels.h): quantize-and-pack of new tokens
// through the R stages, the FP16 baseline's append, and the benchmark's seeded synthetic fill.

#include "gpu/decode/decode_device.cuh"
#include "gpu/decode/decode_kernels.h"

#include <cuda_fp16.h>

#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

using namespace detail;

// ---- quantize-and-pack -----------------------------------------------------------------------

constexpr int kQuantThreads = 256;

// Ties go to the lower codeword index, as in the CPU encoder.
__device__ __forceinline__ bool better(float s, int k, float bestS, int bestK)
{
    return s > bestS || (s == bestS && k < bestK);
}

// grid (rows n, subspaces M, 2: keys / values). A thread per codeword (k = thread, thread + 256, ...):
// its score 2 r·c − ‖c‖² reads the residual from shared memory (the same word for all threads) and
// the transposed codebook coalesced; then one argmax over the block per stage.
__global__ void __launch_bounds__(kQuantThreads)
    quantizeAppendKernel(DecodeDims d, const float* keys, const float* values, int perSeq, std::int64_t t0,
                         const float* kbT, const float* kn, const float* vbT, const float* vn, std::uint8_t* kc,
                         std::uint8_t* vc, std::int32_t* codesOut)
{
    float* res = dynamicShared<float>(); // D
    __shared__ float bestScore[kQuantThreads / 32];
    __shared__ int bestIndex[kQuantThreads / 32];
    __shared__ std::uint32_t words[kMaxCodeWords];

    const int row = blockIdx.x, m = blockIdx.y, which = blockIdx.z;
    const int D = d.dim, K = d.k, R = d.stages, M = d.subspaces();
    const float* x = (which ? values : keys) + std::int64_t(row) * M * D + std::int64_t(m) * D;
    const float* booksT = (which ? vbT : kbT) + std::int64_t(m) * R * D * K;
    const float* norms = (which ? vn : kn) + std::int64_t(m) * R * K;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        res[j] = x[j];
    if (threadIdx.x < kMaxCodeWords)
        words[threadIdx.x] = 0;
    __syncthreads();

    for (int r = 0; r < R; ++r) {
        const float* CT = booksT + std::int64_t(r) * D * K; // [D][K]
        float best = -FLT_MAX;
        int bestK = 0x7fffffff;
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            float dot = 0;
            for (int j = 0; j < D; ++j)
                dot += res[j] * CT[std::int64_t(j) * K + k];
            const float s = 2.f * dot - norms[std::int64_t(r) * K + k];
            if (better(s, k, best, bestK))
                best = s, bestK = k;
        }
        for (int o = 16; o > 0; o /= 2) {
            const float os = __shfl_xor_sync(0xffffffffu, best, o);
            const int ok = __shfl_xor_sync(0xffffffffu, bestK, o);
            if (better(os, ok, best, bestK))
                best = os, bestK = ok;
        }
        if (lane == 0) {
            bestScore[warp] = best;
            bestIndex[warp] = bestK;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float b = bestScore[0];
            int bk = bestIndex[0];
            for (int w = 1; w < kQuantThreads / 32; ++w)
                if (better(bestScore[w], bestIndex[w], b, bk))
                    b = bestScore[w], bk = bestIndex[w];
            bestIndex[0] = bk < K ? bk : 0; // no score above −FLT_MAX (non-finite input): code 0
        }
        __syncthreads();
        const int code = bestIndex[0];
        for (int j = threadIdx.x; j < D; j += blockDim.x)
            res[j] -= CT[std::int64_t(j) * K + code];
        if (threadIdx.x == 0) {
            const int bit0 = r * d.bits, w = bit0 >> 5, off = bit0 & 31;
            words[w] |= std::uint32_t(code) << off;
            if (off + d.bits > 32)
                words[w + 1] |= std::uint32_t(code) >> (32 - off);
            if (codesOut)
                codesOut[((std::int64_t(row) * 2 + which) * M + m) * R + r] = code;
        }
        __syncthreads();
    }
    const int b = row / perSeq;
    const std::int64_t t = t0 + row % perSeq;
    std::uint32_t* out = reinterpret_cast<std::uint32_t*>(
        (which ? vc : kc) + ((std::int64_t(b) * M + m) * d.capacity + t) * d.bytesPerToken);
    for (int w = threadIdx.x; w < d.bytesPerToken / 4; w += blockDim.x)
        out[w] = words[w];
}

__global__ void appendFp16Kernel(DecodeDims d, const float* keys, const float* values, int perSeq, std::int64_t t0,
                                 __half* k16, __half* v16)
{
    const int row = blockIdx.x, b = row / perSeq;
    const std::int64_t t = t0 + row % perSeq;
    const int F = d.kvHeads * d.headDim;
    for (int f = threadIdx.x; f < F; f += blockDim.x) {
        const int g = f / d.headDim, j = f % d.headDim;
        const std::int64_t o = ((std::int64_t(b) * d.kvHeads + g) * d.capacity + t) * d.headDim + j;
        k16[o] = __float2half_rn(keys[std::int64_t(row) * F + f]);
        v16[o] = __float2half_rn(values[std::int64_t(row) * F + f]);
    }
}

// ---- synthetic fill ------------------------------------------------------------------------------

// grid (⌈tokens/256⌉, M or G, B)
__global__ void fillCodesKernel(DecodeDims d, std::int64_t t0, std::int64_t t1, std::uint64_t seed, std::uint8_t* kc,
                                std::uint8_t* vc)
{
    const std::int64_t t = t0 + std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= t1)
        return;
    const int m = blockIdx.y, b = blockIdx.z, M = d.subspaces();
    for (int which = 0; which < 2; ++which) {
        std::uint32_t w[kMaxCodeWords] = {};
        std::uint64_t h = mix64(seed ^ mix64((std::uint64_t(b) << 48) ^ (std::uint64_t(m) << 40) ^
                                             (std::uint64_t(which) << 39) ^ std::uint64_t(t)));
        for (int r = 0; r < d.stages; ++r) {
            h = mix64(h);
            const std::uint32_t c = std::uint32_t(h) & std::uint32_t(d.k - 1);
            const int bit0 = r * d.bits, i = bit0 >> 5, off = bit0 & 31;
            w[i] |= c << off;
            if (off + d.bits > 32)
                w[i + 1] |= c >> (32 - off);
        }
        std::uint32_t* out = reinterpret_cast<std::uint32_t*>(
            (which ? vc : kc) + ((std::int64_t(b) * M + m) * d.capacity + t) * d.bytesPerToken);
        for (int i = 0; i < d.bytesPerToken / 4; ++i)
            out[i] = w[i];
    }
}

__global__ void fillFp16Kernel(DecodeDims d, std::int64_t t0, std::int64_t t1, std::uint64_t seed, __half* k16,
                               __half* v16)
{
    const std::int64_t t = t0 + std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= t1)
        return;
    const int g = blockIdx.y, b = blockIdx.z;
    const std::int64_t o = ((std::int64_t(b) * d.kvHeads + g) * d.capacity + t) * d.headDim;
    std::uint64_t h =
        mix64(seed ^ 0x5bd1e995ull ^ mix64((std::uint64_t(b) << 48) ^ (std::uint64_t(g) << 40) ^ std::uint64_t(t)));
    for (int j = 0; j < d.headDim; ++j) {
        h = mix64(h);
        k16[o + j] = __float2half_rn(float(std::uint32_t(h)) * 4.656612873e-10f - 1.f);
        v16[o + j] = __float2half_rn(float(std::uint32_t(h >> 32)) * 4.656612873e-10f - 1.f);
    }
}

} // namespace

cudaError_t launchQuantizeAppend(const DecodeDims& d, const float* keys, const float* values, int perSeq,
                                 std::int64_t t0, const float* kbT, const float* kn, const float* vbT, const float* vn,
                                 std::uint8_t* kc, std::uint8_t* vc, std::int32_t* codesOut, cudaStream_t stream)
{
    const dim3 grid(unsigned(d.batch * perSeq), unsigned(d.subspaces()), 2);
    launch(quantizeAppendKernel, grid, kQuantThreads, std::size_t(d.dim) * sizeof(float), stream, d, keys, values,
           perSeq, t0, kbT, kn, vbT, vn, kc, vc, codesOut);
    return cudaGetLastError();
}

cudaError_t launchAppendFp16(const DecodeDims& d, const float* keys, const float* values, int perSeq, std::int64_t t0,
                             std::uint16_t* k16, std::uint16_t* v16, cudaStream_t stream)
{
    launch(appendFp16Kernel, unsigned(d.batch * perSeq), 256, 0, stream, d, keys, values, perSeq, t0,
           reinterpret_cast<__half*>(k16), reinterpret_cast<__half*>(v16));
    return cudaGetLastError();
}

cudaError_t launchFillRandom(const DecodeDims& d, std::int64_t t0, std::int64_t t1, std::uint64_t seed,
                             std::uint8_t* kc, std::uint8_t* vc, std::uint16_t* k16, std::uint16_t* v16,
                             cudaStream_t stream)
{
    if (t1 <= t0)
        return cudaSuccess;
    const unsigned blocks = unsigned((t1 - t0 + 255) / 256);
    launch(fillCodesKernel, dim3(blocks, unsigned(d.subspaces()), unsigned(d.batch)), 256, 0, stream, d, t0, t1, seed,
           kc, vc);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
        return e;
    if (k16)
        launch(fillFp16Kernel, dim3(blocks, unsigned(d.kvHeads), unsigned(d.batch)), 256, 0, stream, d, t0, t1, seed,
               reinterpret_cast<__half*>(k16), reinterpret_cast<__half*>(v16));
    return cudaGetLastError();
}

} // namespace gsrq::gpu::kernels
