// The FP16 baseline's decode kernel (layouts in decode_kernels.h, decode_math.h's Fp16DecodeLayout):
// a block takes one (split, KV head, sequence); its rows stream tiles of FP16 keys and values through
// a two-stage shared-memory pipeline, and the last block of a (sequence, KV head) merges the splits,
// so a step is one launch. The paper path's kernels are decode_kernels.cu, the lookup path's
// lookup_kernels.cu.

#include "gpu/decode/decode_device.cuh"
#include "gpu/decode/decode_kernels.h"
#include "gpu/decode/decode_math.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

using namespace detail;

// ---- FP16 decode (decode_math.h's Fp16DecodeLayout) --------------------------------------------

__device__ __forceinline__ uint4 sharedLoad16(const __half* p)
{
    return *reinterpret_cast<const uint4*>(p);
}

// One (split, KV head, sequence) per block. Lane tx of row `row` and head h holds features
// 8·tx..8·tx+7 of head h's query and state; the block's threads copy each tile of keys and values
// into the pipeline's next stage while the rows read the current one, each row its own tokensPerRow
// tokens of the tile. The rows' states merge through shared memory; a context in one split writes
// the output, else each split writes its partials and the last block of the (sequence, KV head) to
// finish (an atomic count, reset for the next step) merges them: one launch a step.
template <int G, int HD>
__global__ void __launch_bounds__(fp16DecodeLayout(HD, G).threads,
                                  65536 / (fp16DecodeLayout(HD, G).threads * kFp16MaxRegisters))
    fp16DecodeKernel(DecodeDims d, const float* q, const __half* k16, const __half* v16, SplitPartials part,
                     unsigned* done, float* out)
{
    constexpr Fp16DecodeLayout L = fp16DecodeLayout(HD, G);
    constexpr int W = L.lanes, T = L.tileTokens, TR = L.tokensPerRow, kRun = TR < 4 ? TR : 4;
    constexpr int kChunks = 2 * T * W; // 16-byte pieces of a tile: its keys, then its values
    constexpr int kPerThread = kChunks / L.threads;
    static_assert(kChunks % L.threads == 0 && T % L.rows == 0 && TR % kRun == 0, "a tile splits evenly over the block");
    unsigned char* smem = dynamicShared<unsigned char>();
    __half* stages = reinterpret_cast<__half*>(smem); // [stage][keys, values][T][HD]
    int* lastFlag = reinterpret_cast<int*>(smem + kFp16Stages * kFp16StageBytes);

    const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    const int tx = threadIdx.x % W, h = (threadIdx.x / W) % G, row = threadIdx.x / (W * G);
    const int j0 = tx * kEpl, group = d.group();
    const std::int64_t head = std::int64_t(b) * d.heads + g * group + h;
    const float scale = kLog2e / sqrtf(float(HD));
    float qr[kEpl], acc[kEpl];
    float m = -INFINITY, l = 0;
#pragma unroll
    for (int e = 0; e < kEpl; ++e) {
        qr[e] = h < group ? q[head * HD + j0 + e] * scale : 0.f;
        acc[e] = 0;
    }

    const std::int64_t t0 = std::int64_t(split) * d.tokensPerSplit;
    const std::int64_t t1 = min(d.tokens, t0 + d.tokensPerSplit);
    const int tiles = int((t1 - t0 + T - 1) / T);
    const std::int64_t base = (std::int64_t(b) * d.kvHeads + g) * d.capacity;
    AsyncCopies<kPerThread * kFp16Stages> copies;
    // Tile `tile` into its stage; tokens past the split's end copy its last token (read, never weighed).
    auto issue = [&](int tile) {
        __half* st = stages + (tile % kFp16Stages) * (2 * T * HD);
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int c = int(threadIdx.x) + i * L.threads;
            const int which = c / (T * W), r = (c / W) % T, col = c % W;
            const std::int64_t t = min(t0 + std::int64_t(tile) * T + r, t1 - 1);
            copies.copy16(st + (which * T + r) * HD + col * kEpl, (which ? v16 : k16) + (base + t) * HD + col * kEpl);
        }
    };
#pragma unroll
    for (int s = 0; s < kFp16Stages - 1; ++s) {
        if (s < tiles)
            issue(s);
        copies.commit();
    }
    for (int i = 0; i < tiles; ++i) {
        if (i + kFp16Stages - 1 < tiles)
            issue(i + kFp16Stages - 1); // into the stage every row left at the last barrier
        copies.commit();
        copies.template wait<kFp16Stages - 1>(); // tile i's copies of this thread have landed
        __syncthreads();                         // and every thread's
        const __half* st = stages + (i % kFp16Stages) * (2 * T * HD) + row * TR * HD + j0;
        const std::int64_t first = t0 + std::int64_t(i) * T + row * TR;
        // The row's tokens in runs of kRun: scores, one rescale, the values (fewer live registers
        // than all of a row's tokens at once; two runs unrolled, which stays within 64 registers).
#pragma unroll 2
        for (int u0 = 0; u0 < TR; u0 += kRun) {
            float sc[kRun];
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < kRun; ++u) {
                float k8[kEpl] = {};
                addHalf8(k8, sharedLoad16(st + (u0 + u) * HD));
                float p = 0;
#pragma unroll
                for (int e = 0; e < kEpl; ++e)
                    p += qr[e] * k8[e];
                sc[u] = groupSum(p, W);
                if (first + u0 + u < t1)
                    mx = fmaxf(mx, sc[u]);
            }
            const float mNew = fmaxf(m, mx);
            const float c = mNew == -INFINITY ? 1.f : exp2f(m - mNew); // 0 while m is −inf
            l *= c;
#pragma unroll
            for (int e = 0; e < kEpl; ++e)
                acc[e] *= c;
#pragma unroll
            for (int u = 0; u < kRun; ++u) {
                const float p = first + u0 + u < t1 ? exp2f(sc[u] - mNew) : 0.f;
                float v8[kEpl] = {};
                addHalf8(v8, sharedLoad16(st + T * HD + (u0 + u) * HD));
                l += p;
#pragma unroll
                for (int e = 0; e < kEpl; ++e)
                    acc[e] += p * v8[e];
            }
            m = mNew;
        }
        __syncthreads(); // every row is done with this stage before it is refilled
    }

    if constexpr (L.rows > 1) {                       // the rows' states of each head merged into row 0's
        float* sAcc = reinterpret_cast<float*>(smem); // [rows][G][HD], then m and l [rows][G]
        float* sM = sAcc + L.rows * G * HD;
        float* sL = sM + L.rows * G;
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            sAcc[(row * G + h) * HD + j0 + e] = acc[e];
        if (tx == 0) {
            sM[row * G + h] = m;
            sL[row * G + h] = l;
        }
        __syncthreads();
        if (row == 0) {
            float M = -INFINITY;
            for (int r = 0; r < L.rows; ++r)
                M = fmaxf(M, sM[r * G + h]);
            l = 0;
#pragma unroll
            for (int e = 0; e < kEpl; ++e)
                acc[e] = 0;
            for (int r = 0; r < L.rows; ++r) {
                const float mr = sM[r * G + h];
                const float w = mr == -INFINITY ? 0.f : exp2f(mr - M);
                l += w * sL[r * G + h];
#pragma unroll
                for (int e = 0; e < kEpl; ++e)
                    acc[e] += w * sAcc[(r * G + h) * HD + j0 + e];
            }
            m = M;
        }
    }
    const bool writes = row == 0 && h < group;
    if (d.splits == 1) {
        if (writes)
#pragma unroll
            for (int e = 0; e < kEpl; ++e)
                out[head * HD + j0 + e] = acc[e] / l;
        return;
    }
    const std::int64_t o = head * d.splits + split;
    if (writes) {
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            part.acc[o * HD + j0 + e] = acc[e];
        if (tx == 0) {
            part.m[o] = m;
            part.l[o] = l;
        }
    }
    __threadfence(); // the partials reach the L2 before this block is counted as done
    __syncthreads();
    const std::int64_t pair = std::int64_t(b) * d.kvHeads + g;
    if (threadIdx.x == 0)
        *lastFlag = atomicAdd(&done[pair], 1u) == unsigned(d.splits - 1);
    __syncthreads();
    if (!*lastFlag)
        return;
    // The last block, from every split's partials read through the L2: per head (a warp each) the
    // maximum M over the splits, the weights 2^(m_s − M) into shared memory and 1 / Σ_s w_s l_s;
    // then each thread takes 4 features of a head over the splits.
    float* sW = reinterpret_cast<float*>(smem); // [group][splits], then 1/L per head
    float* sInvL = sW + group * d.splits;
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    for (int hh = warp; hh < group; hh += L.threads / 32) {
        const std::int64_t oh = (std::int64_t(b) * d.heads + g * group + hh) * d.splits;
        float M = -INFINITY;
        for (int s = lane; s < d.splits; s += 32)
            M = fmaxf(M, __ldcg(part.m + oh + s));
        for (int o = 16; o > 0; o /= 2)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float ls = 0;
        for (int s = lane; s < d.splits; s += 32) {
            const float ms = __ldcg(part.m + oh + s);
            const float w = ms == -INFINITY ? 0.f : exp2f(ms - M);
            sW[hh * d.splits + s] = w;
            ls += w * __ldcg(part.l + oh + s);
        }
        ls = groupSum(ls, 32);
        if (lane == 0)
            sInvL[hh] = 1.f / ls;
    }
    __syncthreads();
    constexpr int kQuads = HD / 4;
    for (int i = threadIdx.x; i < group * kQuads; i += L.threads) {
        const int hh = i / kQuads, j = (i % kQuads) * 4;
        const std::int64_t oh = (std::int64_t(b) * d.heads + g * group + hh) * d.splits;
        float a[4] = {0, 0, 0, 0};
#pragma unroll 8
        for (int s = 0; s < d.splits; ++s) {
            const float w = sW[hh * d.splits + s];
            const float4 x = __ldcg(reinterpret_cast<const float4*>(part.acc + (oh + s) * HD + j));
            a[0] += w * x.x;
            a[1] += w * x.y;
            a[2] += w * x.z;
            a[3] += w * x.w;
        }
        const float inv = sInvL[hh];
        float4 r;
        r.x = a[0] * inv;
        r.y = a[1] * inv;
        r.z = a[2] * inv;
        r.w = a[3] * inv;
        *reinterpret_cast<float4*>(out + (oh / d.splits) * HD + j) = r;
    }
    if (threadIdx.x == 0)
        done[pair] = 0; // every split has counted itself: ready for the next step
}

} // namespace

using detail::withGroup;

template <class F> inline cudaError_t withHeadDim(int headDim, F&& f)
{
    if (headDim == 64)
        return f.template operator()<64>();
    if (headDim == 128)
        return f.template operator()<128>();
    if (headDim == 256)
        return f.template operator()<256>();
    return cudaErrorInvalidValue;
}

cudaError_t launchFp16Decode(const DecodeDims& d, const float* q, const std::uint16_t* k16, const std::uint16_t* v16,
                             const SplitPartials& part, unsigned* done, float* out, cudaStream_t stream)
{
    const dim3 grid(unsigned(d.splits), unsigned(d.kvHeads), unsigned(d.batch));
    return withGroup(d.group(), [&]<int G>() {
        return withHeadDim(d.headDim, [&]<int HD>() {
            auto* kernel = fp16DecodeKernel<G, HD>;
            const std::size_t shm = fp16DecodeSharedBytes();
            if (cudaError_t e = allowShared(kernel, shm); e != cudaSuccess)
                return e;
            launch(kernel, grid, unsigned(fp16DecodeLayout(HD, G).threads), shm, stream, d, q,
                   reinterpret_cast<const __half*>(k16), reinterpret_cast<const __half*>(v16), part, done, out);
            return cudaGetLastError();
        });
    });
}

} // namespace gsrq::gpu::kernels
