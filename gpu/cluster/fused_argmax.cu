// The fused score-and-argmax kernel: TF32 tensor-core products of rows and codewords whose scores
// never leave the registers (pass_costs.h, kFusedArgmax*; cluster_kernels.h, launchFusedScoreArgmax).
#include "core/cluster/update_rule.h"
#include "gpu/cluster/cluster_kernels.h"
#include "gpu/cluster/row_terms.cuh"
#include "gpu/device/launch.cuh"
#include "gpu/device/mma.cuh"

#include <algorithm>
#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = kWarp * kFusedArgmaxWarps;
// Tiles of 8 codewords (the mma's N) a warp scores at once.
constexpr int kTilesAtOnce = kFusedArgmaxCodewords / 8;
// Row groups of 16 (the mma's M) a warp holds: fusedArgmaxRows(D) / 16. Each codeword fragment read
// from shared memory feeds two mma per row group, so two groups halve the shared reads per product;
// blocks of at most 64 columns keep one, and to 128 registers (two blocks an SM) without spilling.
template <int D> constexpr int kRowGroups = fusedArgmaxRows(D) / 16;
// fusedArgmaxStride(D) (pass_costs.h, host code) as a constant the device code can read.
template <int D> constexpr int kStride = D % 32 == 0 ? D + 16 : D;
static_assert(kStride<128> == fusedArgmaxStride(128) && kStride<48> == fusedArgmaxStride(48) &&
              kStride<16> == fusedArgmaxStride(16) && kStride<64> == fusedArgmaxStride(64));

// The feature order of the products: lane t of a row group holds features 16p + 4t .. 16p + 4t + 3
// of its rows (one 16-byte load) and gives them to the k-steps 2p and 2p + 1 of the mma as its
// columns t and t + 4; the codewords' fragments are loaded in the same order, so each product is
// x·c over every feature, in an order of the tensor cores' own.
// The rows are rounded to TF32 once, as they are loaded: a[2p] and a[2p + 1] are the mma's A
// fragments of k-steps 2p and 2p + 1 (rows g and g + 8 at the lane's columns t and t + 4).
template <int D> struct RowFragments {
    std::uint32_t a[D / 8][4];
};

template <int D>
__device__ __forceinline__ void loadRows(RowFragments<D>& r, const float* __restrict__ X, std::int64_t ld,
                                         std::int64_t i, std::int64_t m, int t)
{
    const bool okLo = i < m, okHi = i + 8 < m;
    const float4* lo = reinterpret_cast<const float4*>(X + i * ld) + t;
    const float4* hi = reinterpret_cast<const float4*>(X + (i + 8) * ld) + t;
    const float4 zero{0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int p = 0; p < D / 16; ++p) {
        const float4 l = okLo ? lo[4 * p] : zero, h = okHi ? hi[4 * p] : zero;
        r.a[2 * p][0] = toTf32Bits(l.x);
        r.a[2 * p][1] = toTf32Bits(h.x);
        r.a[2 * p][2] = toTf32Bits(l.y);
        r.a[2 * p][3] = toTf32Bits(h.y);
        r.a[2 * p + 1][0] = toTf32Bits(l.z);
        r.a[2 * p + 1][1] = toTf32Bits(h.z);
        r.a[2 * p + 1][2] = toTf32Bits(l.w);
        r.a[2 * p + 1][3] = toTf32Bits(h.w);
    }
}

// For a warp's rows (row group q: rows 16q + g and 16q + g + 8 of its tile), each row's best codeword
// by 2x·c − ‖c‖² (the first among equal scores) and its score, for the lanes of rows g and g + 8 of
// each group after the reduction over the row group's 4 lanes.
template <int D>
__device__ __forceinline__ void scoreTile(const RowFragments<D> (&r)[kRowGroups<D>], const float* __restrict__ sC,
                                          const float* __restrict__ sNorm, int K, int g, int t,
                                          float (&best)[kRowGroups<D>][2], int (&label)[kRowGroups<D>][2])
{
    constexpr int stride4 = kStride<D> / 4, G = kRowGroups<D>;
    const float4* c4 = reinterpret_cast<const float4*>(sC);
    for (int n0 = 0; n0 < K; n0 += 8 * kTilesAtOnce) {
        const int left = (K - n0) / 8, tiles = left < kTilesAtOnce ? left : kTilesAtOnce;
        float acc[G][kTilesAtOnce][4];
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int j = 0; j < kTilesAtOnce; ++j)
                acc[q][j][0] = acc[q][j][1] = acc[q][j][2] = acc[q][j][3] = 0.f;
#pragma unroll
        for (int p = 0; p < D / 16; ++p) {
#pragma unroll
            for (int j = 0; j < kTilesAtOnce; ++j) {
                if (j < tiles) {
                    // Codeword n0 + 8j + g's features 16p + 4t .. + 3, already TF32, for every row group.
                    const float4 c = c4[(n0 + 8 * j + g) * stride4 + 4 * p + t];
                    const std::uint32_t b0[2] = {floatBits(c.x), floatBits(c.y)};
                    const std::uint32_t b1[2] = {floatBits(c.z), floatBits(c.w)};
#pragma unroll
                    for (int q = 0; q < G; ++q) {
                        mmaTf32(acc[q][j], r[q].a[2 * p], b0);
                        mmaTf32(acc[q][j], r[q].a[2 * p + 1], b1);
                    }
                }
            }
        }
        // acc[q][j] holds group q's rows g, g + 8 at codewords n0 + 8j + 2t and + 1: each lane's in
        // increasing k.
#pragma unroll
        for (int j = 0; j < kTilesAtOnce; ++j) {
            if (j < tiles) {
                const int k = n0 + 8 * j + 2 * t;
                const float n2a = sNorm[k], n2b = sNorm[k + 1];
#pragma unroll
                for (int q = 0; q < G; ++q)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const float v0 = 2.0f * acc[q][j][2 * h] - n2a, v1 = 2.0f * acc[q][j][2 * h + 1] - n2b;
                        if (v0 > best[q][h]) {
                            best[q][h] = v0;
                            label[q][h] = k;
                        }
                        if (v1 > best[q][h]) {
                            best[q][h] = v1;
                            label[q][h] = k + 1;
                        }
                    }
            }
        }
    }
    // The row group's 4 lanes (t) hold disjoint codewords: the best of the four, the lowest label
    // among equal scores.
#pragma unroll
    for (int off = 1; off < 4; off *= 2)
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float o = __shfl_xor_sync(0xffffffffu, best[q][h], off);
                const int l = __shfl_xor_sync(0xffffffffu, label[q][h], off);
                if (betterCandidate(o, l, best[q][h], label[q][h])) {
                    best[q][h] = o;
                    label[q][h] = l;
                }
            }
}

// A block stages its member's codebook (TF32) and ‖c‖² in shared memory once, then each warp takes
// tiles of fusedArgmaxRows(D) rows, tile = its global warp index and then every gridDim.x × warps-th:
// no barrier after the staging, so warps drift apart and one's loads overlap another's products.
template <int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 2 : 1)
    fusedScoreArgmaxKernel(const float* __restrict__ X, std::int64_t ld, const float* __restrict__ C, int K,
                           const float* __restrict__ cNorm, std::int64_t r0, std::int64_t m,
                           const float* __restrict__ sq, const float* __restrict__ w, std::int32_t* __restrict__ labels,
                           double* __restrict__ err, double* __restrict__ sqw, double* __restrict__ wt,
                           double* __restrict__ changed, RowMetricTerms metrics, Members members)
{
    constexpr int stride = kStride<D>;
    const int b = memberAt(members, blockIdx.z);
    const RowOutputs out =
        memberRowOutputs(sq, labels, err, sqw, wt, changed, metrics, std::int64_t(b) * members.rowStride);
    X += std::int64_t(b) * members.colStride;
    C += std::int64_t(b) * K * D;
    cNorm += std::int64_t(b) * K;

    float* sC = dynamicShared<float>();
    float* sNorm = sC + std::size_t(K) * stride;
    const int tid = int(threadIdx.x);
    for (int e = tid; e < K * D; e += kThreads)
        sC[(e / D) * stride + e % D] = toTf32(C[e]);
    for (int k = tid; k < K; k += kThreads)
        sNorm[k] = cNorm[k];
    __syncthreads();

    constexpr int G = kRowGroups<D>, rows = 16 * G; // fusedArgmaxRows(D)
    const int warp = tid / kWarp, lane = tid % kWarp, g = lane / 4, t = lane % 4;
    const std::int64_t tiles = (m + rows - 1) / rows;
    const std::int64_t warps = std::int64_t(gridDim.x) * kFusedArgmaxWarps;
    for (std::int64_t tile = std::int64_t(blockIdx.x) * kFusedArgmaxWarps + warp; tile < tiles; tile += warps) {
        const std::int64_t i = tile * rows + g;
        RowFragments<D> r[G];
        float best[G][2];
        int label[G][2];
#pragma unroll
        for (int q = 0; q < G; ++q) {
            loadRows<D>(r[q], X, ld, i + 16 * q, m, t);
            best[q][0] = best[q][1] = -FLT_MAX;
            label[q][0] = label[q][1] = K;
        }
        scoreTile<D>(r, sC, sNorm, K, g, t, best, label);
        // Lane t = h of the row group writes its row g + 8h of each group.
#pragma unroll
        for (int q = 0; q < G; ++q)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (t == h && i + 16 * q + 8 * h < m)
                    writeRowTerms(out, best[q][h], label[q][h], K, sNorm, w, r0 + i + 16 * q + 8 * h);
    }
}

template <int D>
cudaError_t launchFused(const float* X, std::int64_t ld, const float* C, int K, const float* cNorm, std::int64_t r0,
                        std::int64_t m, const float* sq, const float* w, std::int32_t* labels, double* err, double* sqw,
                        double* wt, double* changed, RowMetricTerms metrics, int blocks, cudaStream_t stream,
                        const Members& members)
{
    const std::size_t shared = fusedArgmaxSharedBytes(K, D);
    if (shared > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(fusedScoreArgmaxKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
        if (e != cudaSuccess)
            return e;
    }
    launch(fusedScoreArgmaxKernel<D>, dim3(unsigned(blocks), 1, unsigned(members.count)), dim3(kThreads), shared,
           stream, X, ld, C, K, cNorm, r0, m, sq, w, labels, err, sqw, wt, changed, metrics, members);
    return cudaGetLastError();
}

} // namespace

bool fusedArgmaxAvailable()
{
#if defined(GSRQ_CUDA_EMULATOR)
    return true; // the emulator runs mma.sync as the PTX ISA defines it
#else
    // The code the device runs must hold the mma (sm_80 PTX or later): a build for older
    // architectures JIT-compiled on a newer device would reach the trap in its place.
    cudaFuncAttributes a{};
    return cudaFuncGetAttributes(&a, fusedScoreArgmaxKernel<128>) == cudaSuccess && a.ptxVersion >= 80;
#endif
}

cudaError_t launchFusedScoreArgmax(const float* X, std::int64_t ld, int D, const float* C, int K, const float* cNorm,
                                   std::int64_t r0, std::int64_t m, const float* sq, const float* w,
                                   std::int32_t* labels, double* err, double* sqw, double* wt, double* changed,
                                   RowMetricTerms metrics, int blocks, cudaStream_t stream, const Members& members)
{
    if (m <= 0)
        return cudaSuccess;
    switch (D) {
#define GSRQ_FUSED_CASE(d)                                                                                             \
    case d:                                                                                                            \
        return launchFused<d>(X, ld, C, K, cNorm, r0, m, sq, w, labels, err, sqw, wt, changed, metrics, blocks,        \
                              stream, members);
        GSRQ_FUSED_CASE(16)
        GSRQ_FUSED_CASE(32)
        GSRQ_FUSED_CASE(48)
        GSRQ_FUSED_CASE(64)
        GSRQ_FUSED_CASE(80)
        GSRQ_FUSED_CASE(96)
        GSRQ_FUSED_CASE(112)
        GSRQ_FUSED_CASE(128)
#undef GSRQ_FUSED_CASE
    default:
        return cudaErrorInvalidValue;
    }
}

} // namespace gsrq::gpu::kernels
