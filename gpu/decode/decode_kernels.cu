// The paper path's decode kernels over the compressed KV cache, and the split combine (layouts in
// decode_kernels.h); the FP16 baseline's kernel is fp16_kernels.cu, the lookup path's lookup_kernels.cu.
//
// Split-K: a block of the FP16 and paper kernels takes one (split, KV head, sequence). Its 4 warps
// stride over the split's tokens; within a warp, headDim/8 lanes hold one token (8 features each:
// one 16-byte load of FP16), so a warp covers 256/headDim tokens per step, and each lane keeps the
// online-softmax state (max, sum, 8 accumulators) of every query head of the group. Partials of the
// lanes and warps are merged through shared memory at the end, then across splits by launchCombine.
// The paper path with values through bins writes the lookup path's split bins (lookup_kernels.cu
// merges them).

#include "gpu/decode/decode_device.cuh"
#include "gpu/decode/decode_kernels.h"
#include "gpu/decode/decode_math.h"
#include "gpu/decode/paper_rope.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

namespace gsrq::gpu::kernels {

namespace {

using namespace detail;

// ---- split-K decode: FP16 and paper path ------------------------------------------------------

// Online-softmax state of one lane for the G query heads of its group.
template <int G> struct LaneState {
    float q[G][kEpl];
    float m[G], l[G], acc[G][kEpl];
};

template <int G> __device__ __forceinline__ void initState(LaneState<G>& s)
{
#pragma unroll
    for (int h = 0; h < G; ++h) {
        s.m[h] = -INFINITY;
        s.l[h] = 0;
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            s.acc[h][e] = 0;
    }
}

// One step over U tokens per lane group: scores from the keys kx, softmax update, values vx.
template <int G, int U>
__device__ __forceinline__ void attendStep(LaneState<G>& s, const float (&kx)[U][kEpl], const float (&vx)[U][kEpl],
                                           const bool (&ok)[U], int width, int group)
{
#pragma unroll
    for (int h = 0; h < G; ++h) {
        if (h >= group)
            break;
        float sc[U];
        float mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float p = 0;
#pragma unroll
            for (int e = 0; e < kEpl; ++e)
                p += s.q[h][e] * kx[u][e];
            sc[u] = groupSum(p, width);
            if (ok[u])
                mx = fmaxf(mx, sc[u]);
        }
        if (mx == -INFINITY)
            continue; // no token of this step in this lane group
        const float mNew = fmaxf(s.m[h], mx);
        const float c = exp2f(s.m[h] - mNew); // 0 for the first tokens (m = −inf)
        s.l[h] *= c;
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            s.acc[h][e] *= c;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float p = ok[u] ? exp2f(sc[u] - mNew) : 0.f;
            s.l[h] += p;
#pragma unroll
            for (int e = 0; e < kEpl; ++e)
                s.acc[h][e] += p * vx[u][e];
        }
        s.m[h] = mNew;
    }
}

// Merges the lane groups' states of the block and writes the split's partials.
template <int G>
__device__ void finishSplit(const LaneState<G>& s, const DecodeDims& d, const SplitPartials& part, int b, int g,
                            int split, int slot, int j0, float* smem)
{
    const int width = d.headDim / kEpl, slots = kWarps * (32 / width), group = d.group();
    float* sAcc = smem;                                    // slots × G × headDim
    float* sM = sAcc + std::size_t(slots) * G * d.headDim; // slots × G
    float* sL = sM + slots * G;
#pragma unroll
    for (int h = 0; h < G; ++h) {
        if (h >= group)
            break;
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            sAcc[(std::size_t(slot) * G + h) * d.headDim + j0 + e] = s.acc[h][e];
        if (j0 == 0) {
            sM[slot * G + h] = s.m[h];
            sL[slot * G + h] = s.l[h];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * d.headDim; i += blockDim.x) {
        const int h = i / d.headDim, j = i % d.headDim;
        float M = -INFINITY;
        for (int t = 0; t < slots; ++t)
            M = fmaxf(M, sM[t * G + h]);
        float a = 0, l = 0;
        for (int t = 0; t < slots; ++t) {
            const float mt = sM[t * G + h];
            const float w = mt == -INFINITY ? 0.f : exp2f(mt - M);
            a += w * sAcc[(std::size_t(t) * G + h) * d.headDim + j];
            l += w * sL[t * G + h];
        }
        const std::int64_t o = (std::int64_t(b) * d.heads + g * group + h) * d.splits + split;
        part.acc[o * d.headDim + j] = a;
        if (j == 0) {
            part.m[o] = M;
            part.l[o] = l;
        }
    }
}

template <int G> std::size_t splitSharedBytes(const DecodeDims& d)
{
    return paperSplitDynamicBytes(G, d.headDim);
}

// Σ_r codeword features j..j+7 of the token whose codes are `w` (staged in shared memory, or where
// they lie in global memory: L1-cached, the same address for the lanes of a token), each code word
// read once (CodeStream: a register copy indexed by stage would live in local memory).
__device__ __forceinline__ void decode8(float (&x)[kEpl], const std::uint32_t* w, const __half* books,
                                        const DecodeDims& d)
{
    // The stage loop below is unrolled four times, so that four stages' gathers are in flight at once
    // (each waits on its code word, then on an L2 read of its codeword); the sums stay in stage order.
    // On an H200 this made the paper path 1.15-1.20x faster (docs/benchmarks.md); unrolling the
    // lookup path's loops the same way made it no faster, or slower.
#pragma unroll
    for (int e = 0; e < kEpl; ++e)
        x[e] = 0;
    CodeStream codes(w, 1, d.bits);
#pragma unroll 4
    for (int r = 0; r < d.stages; ++r) {
        const std::uint32_t c = codes.pop();
        addHalf8(x, load16(books + (std::int64_t(r) * d.k + c) * d.dim));
    }
}

// The codes of a warp's tokens of the paper kernels' next step, copied into its slots of shared
// memory (sharedPaperCodes) with cp.async while it works on this step, so the step's chain of loads
// starts at the codewords' gathers: slots[warp][stage][u][row][keys, values][subspace][word], tokens
// past the split's end `t1` as its last token (as the kernels clamp them). Where a step's codes pass
// kPaperStageWords (paperCodesStaged false) the kernels read them from global memory where used.
template <int U> __device__ __forceinline__ bool paperCodesStaged(const DecodeDims& d)
{
    return paperStagedWords(d.headDim, U, d.subspacesPerHead(), d.bytesPerToken) <= kPaperStageWords;
}

__device__ __forceinline__ std::uint32_t* paperCodeSlots(int st)
{
    return sharedPaperCodes() + ((threadIdx.x >> 5) * 2 + st) * kPaperStageWords;
}

// Where subspace s of the block's (sequence, KV head) codes lie.
__device__ __forceinline__ const std::uint8_t* paperCodeBase(const DecodeDims& d, const std::uint8_t* codes, int s)
{
    const std::int64_t m = std::int64_t(blockIdx.z) * d.subspaces() + blockIdx.y * d.subspacesPerHead() + s;
    return codes + m * d.capacity * d.bytesPerToken;
}

// Starts the copies of the step whose first token (row 0, u = 0) is `first`, tokens `stride` apart
// between u's, into stage st.
template <int U, class Copies>
__device__ __forceinline__ void stagePaperCodes(const DecodeDims& d, const std::uint8_t* kc, const std::uint8_t* vc,
                                                std::int64_t t1, Copies& copies, int st, std::int64_t first, int stride)
{
    const int lane = int(threadIdx.x) & 31, wps = d.bytesPerToken / 4, S = d.subspacesPerHead();
    const int rows = 256 / d.headDim, words = paperStagedWords(d.headDim, U, S, d.bytesPerToken);
    std::uint32_t* dst = paperCodeSlots(st);
    for (int i = lane; i < words; i += 32) {
        int rest = i / wps;
        const int w = i % wps, s = rest % S;
        rest /= S;
        const int kv = rest % 2;
        rest /= 2;
        const int row = rest % rows, u = rest / rows;
        std::int64_t t = first + row + std::int64_t(u) * stride;
        t = t < t1 ? t : t1 - 1;
        copies.copy4(dst + i, paperCodeBase(d, kv ? vc : kc, s) + t * d.bytesPerToken + 4 * w);
    }
    copies.commit();
}

// At the top of each step: every lane is done with the stage the next step's copies go to, they
// start, and this step's codes (stage st) are in: cp.async's wait, then the warp's barrier shows
// every lane's copies.
template <int U, class Copies>
__device__ __forceinline__ void advancePaperCodes(const DecodeDims& d, const std::uint8_t* kc, const std::uint8_t* vc,
                                                  std::int64_t t1, Copies& copies, int st, std::int64_t nextFirst,
                                                  int stride)
{
    __syncwarp();
    if (nextFirst < t1)
        stagePaperCodes<U>(d, kc, vc, t1, copies, st ^ 1, nextFirst, stride);
    else
        copies.commit(); // an empty group: wait<1> then lands this step's
    copies.template wait<1>();
    __syncwarp();
}

// Token (u, row)'s code words of subspace s, keys (kv 0) or values (kv 1): staged, or in place.
__device__ __forceinline__ const std::uint32_t* paperCodeWords(const DecodeDims& d, bool staged,
                                                               const std::uint8_t* codes, int st, int u, int row,
                                                               int kv, int s, std::int64_t t)
{
    const int wps = d.bytesPerToken / 4, S = d.subspacesPerHead();
    if (staged)
        return paperCodeSlots(st) + ((u * (256 / d.headDim) + row) * 2 + kv) * S * wps + s * wps;
    return reinterpret_cast<const std::uint32_t*>(paperCodeBase(d, codes, s) + t * d.bytesPerToken);
}

template <int G, int U>
__global__ void __launch_bounds__(kThreads)
    paperDecodeKernel(DecodeDims d, const float* q, const std::uint8_t* kc, const __half* kb, const std::uint8_t* vc,
                      const __half* vb, const float2* turnsIn, SplitPartials part)
{
    float* smem = dynamicShared<float>();
    float2* const turns = sharedTurns();
    const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    const int width = d.headDim / kEpl, perWarp = 32 / width, half = d.headDim / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / width, j0 = (lane % width) * kEpl, group = d.group();
    const int stride = kWarps * perWarp;
    loadRopeTables(turnsIn, turns, half, stride);
    __syncthreads();

    // The lane's subspace and its codes' and codewords' base addresses.
    const int S = d.subspacesPerHead(), s = j0 / d.dim, m = g * S + s;
    const std::int64_t bookOff = std::int64_t(m) * d.stages * d.k * d.dim + (j0 % d.dim);
    const __half* kBook = kb + bookOff;
    const __half* vBook = vb + bookOff;
    const float scale = kLog2e / sqrtf(float(d.headDim));

    LaneState<G> st;
    initState(st);
    const float qPos = float(d.positionOffset + d.tokens);
#pragma unroll
    for (int h = 0; h < G; ++h) {
        float x[kEpl];
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            x[e] = h < group ? q[(std::int64_t(b) * d.heads + g * group + h) * d.headDim + j0 + e] : 0.f;
        rope8(x, qPos, j0, width, half, turns);
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            st.q[h][e] = x[e] * scale;
    }

    const std::int64_t t0 = std::int64_t(split) * d.tokensPerSplit;
    const std::int64_t t1 = min(d.tokens, t0 + d.tokensPerSplit);
    AsyncCopies<2 * kPaperStageWords / 32> copies;
    const bool staged = paperCodesStaged<U>(d);
    const int i0 = ropePair0(j0, half);
    RopeWalk walk{reinterpret_cast<float2*>(smem + paperSplitPartialBytes(G, d.headDim) / sizeof(float)) + threadIdx.x};
    std::int64_t tw = t0 + warp * perWarp;
    if (staged && tw < t1)
        stagePaperCodes<U>(d, kc, vc, t1, copies, 0, tw, stride);
    for (int cs = 0; tw < t1; tw += std::int64_t(U) * stride, cs ^= 1) {
        if (staged)
            advancePaperCodes<U>(d, kc, vc, t1, copies, cs, tw + std::int64_t(U) * stride, stride);
        float kx[U][kEpl], vx[U][kEpl];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const std::int64_t t = tw + sub + std::int64_t(u) * stride;
            ok[u] = t < t1;
            const std::int64_t tc = ok[u] ? t : t1 - 1; // a masked token's rotation is not used
            decode8(kx[u], paperCodeWords(d, staged, kc, cs, u, sub, 0, s, tc), kBook, d);
            decode8(vx[u], paperCodeWords(d, staged, vc, cs, u, sub, 1, s, tc), vBook, d);
            walk.rotateNext(kx[u], float(d.positionOffset + t), i0, turns, j0, width, half);
        }
        attendStep<G, U>(st, kx, vx, ok, width, group);
    }
    finishSplit<G>(st, d, part, b, g, split, warp * perWarp + sub, j0, smem);
}

// The paper path with values through per-codeword weights. Keys as paperDecodeKernel decodes them
// (codewords summed, RoPE at the token's position); each token's softmax weight then goes into its
// value codes' bins, W[h][s][r][code] += p (shared memory, group × S·R·K floats), so values cost
// the bytes of their codes, not of their codewords: Σₜ pₜ vₜ = Σ_{s,r,k} W[s][r][k] C_v[s][r][k].
// The block moves through the split in tiles; the bins share one reference maximum per head, raised
// (and the bins rescaled) only when a tile's maximum passes it by kRescaleMargin. Writes the split's
// bins and (m, l) in the lookup path's layout: launchLookupCombine merges splits and multiplies the
// bins by the value codebooks once per query.
template <int G, int U, bool Walk>
__global__ void __launch_bounds__(kThreads)
    paperBinsKernel(DecodeDims d, const float* q, const std::uint8_t* kc, const __half* kb, const std::uint8_t* vc,
                    const float2* turnsIn, float* weights, float* mOut, float* lOut)
{
    float* W = dynamicShared<float>();
    float2* const turns = sharedTurns();
    float* const red = sharedWarpHeadValues(); // [warp][head], kMaxGroup heads a warp
    float* const sums = sharedWarpValues();
    static_assert(kWarps <= kMaxBlockWarps && G <= kMaxGroup);
    const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    const int width = d.headDim / kEpl, perWarp = 32 / width, half = d.headDim / 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / width, li = lane % width, j0 = li * kEpl, group = d.group();
    const int S = d.subspacesPerHead(), R = d.stages, K = d.k, per = S * R * K;
    const int stride = kWarps * perWarp;
    loadRopeTables(turnsIn, turns, half, stride);
    for (int i = threadIdx.x; i < group * per; i += blockDim.x)
        W[i] = 0;
    __syncthreads();

    // The lane's subspace; its lanes share the subspace's stages for the value bins.
    const int s = j0 / d.dim, m = g * S + s;
    const int lanesPerSub = d.dim / kEpl, r0 = (j0 % d.dim) / kEpl;
    const __half* kBook = kb + std::int64_t(m) * d.stages * d.k * d.dim + (j0 % d.dim);
    const float scale = kLog2e / sqrtf(float(d.headDim));

    float qr[G][kEpl];
    const float qPos = float(d.positionOffset + d.tokens);
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            qr[h][e] = h < group ? q[(std::int64_t(b) * d.heads + g * group + h) * d.headDim + j0 + e] : 0.f;
        rope8(qr[h], qPos, j0, width, half, turns);
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            qr[h][e] *= scale;
    }
    float mRef[G], lSum[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
        mRef[h] = -INFINITY;
        lSum[h] = 0;
    }

    const std::int64_t t0 = std::int64_t(split) * d.tokensPerSplit;
    const std::int64_t t1 = min(d.tokens, t0 + d.tokensPerSplit);
    const int i0 = ropePair0(j0, half);
    // Walk: the keys' RoPE walked (d.ropeWalk, paperBinsWalk), else exact at every token. A template
    // argument, not a branch: with both ways in one kernel nvcc gives it 30 more registers.
    [[maybe_unused]] RopeWalk walk{reinterpret_cast<float2*>(W + std::size_t(group) * per) + threadIdx.x};
    // Groups of 8 hold 8 heads' queries, scores and sums in registers (250 of 255): their codes are
    // read where they lie, as staging them would spill (paperBinsStageCodes). A warp with no token
    // of a step that other warps still run reads a stage not refilled for it: its tokens are all
    // masked (ok false), and their codes, whatever they are, stay below K.
    AsyncCopies<2 * kPaperStageWords / 32> copies;
    const bool staged = paperBinsStageCodes(G) && paperCodesStaged<U>(d);
    if (staged && t0 < t1)
        stagePaperCodes<U>(d, kc, vc, t1, copies, 0, t0 + warp * perWarp, stride);
    int cs = 0;
    for (std::int64_t tb = t0; tb < t1; tb += std::int64_t(U) * stride, cs ^= 1) { // the same trip count everywhere
        if (staged)
            advancePaperCodes<U>(d, kc, vc, t1, copies, cs, tb + std::int64_t(U) * stride + warp * perWarp, stride);
        float sc[G][U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const std::int64_t t = tb + warp * perWarp + sub + std::int64_t(u) * stride;
            ok[u] = t < t1;
            const std::int64_t tc = ok[u] ? t : t1 - 1; // a masked token's rotation is not used
            float kx[kEpl];
            decode8(kx, paperCodeWords(d, staged, kc, cs, u, sub, 0, s, tc), kBook, d);
            if constexpr (Walk)
                walk.rotateNext(kx, float(d.positionOffset + t), i0, turns, j0, width, half);
            else
                rope8(kx, float(d.positionOffset + t), j0, width, half, turns);
#pragma unroll
            for (int h = 0; h < G; ++h) {
                float p = 0;
#pragma unroll
                for (int e = 0; e < kEpl; ++e)
                    p += qr[h][e] * kx[e];
                sc[h][u] = groupSum(p, width);
            }
        }
        // The tile's maximum per head, over the block.
#pragma unroll
        for (int h = 0; h < G; ++h) {
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (ok[u])
                    mx = fmaxf(mx, sc[h][u]);
            for (int o = 16; o > 0; o /= 2)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            if (lane == 0)
                red[warp * kMaxGroup + h] = mx;
        }
        __syncthreads();
        bool rescaled = false; // the same decisions in every thread
#pragma unroll
        for (int h = 0; h < G; ++h) {
            if (h >= group)
                break;
            float tileMax = red[h];
            for (int w = 1; w < kWarps; ++w)
                tileMax = fmaxf(tileMax, red[w * kMaxGroup + h]);
            if (tileMax > mRef[h] + kRescaleMargin) {
                if (mRef[h] != -INFINITY) {
                    const float c = exp2f(mRef[h] - tileMax);
                    for (int i = threadIdx.x; i < per; i += blockDim.x)
                        W[h * per + i] *= c;
                    lSum[h] *= c;
                    rescaled = true;
                }
                mRef[h] = tileMax;
            }
        }
        if (rescaled)
            __syncthreads();
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (!ok[u])
                continue;
            float p[G];
#pragma unroll
            for (int h = 0; h < G; ++h) {
                p[h] = h < group ? exp2f(sc[h][u] - mRef[h]) : 0.f;
                if (li == 0)
                    lSum[h] += p[h];
            }
            const std::int64_t t = tb + warp * perWarp + sub + std::int64_t(u) * stride; // ok: in the split
            addToBins<G>(W, per, group, s, R, K, paperCodeWords(d, staged, vc, cs, u, sub, 1, s, t), d.bits, r0,
                         lanesPerSub, p);
        }
        __syncthreads();
    }
    writeSplitBins<G>(d, W, per, b, g, split, mRef, lSum, weights, mOut, lOut, sums);
}

// grid B·H, threads ≥ headDim (one per feature)
__global__ void combineKernel(DecodeDims d, SplitPartials part, float* out)
{
    const std::int64_t bh = blockIdx.x;
    const std::int64_t o = bh * d.splits;
    float M = -INFINITY;
    for (int s = 0; s < d.splits; ++s)
        M = fmaxf(M, part.m[o + s]);
    for (int j = threadIdx.x; j < d.headDim; j += blockDim.x) {
        float a = 0, l = 0;
        for (int s = 0; s < d.splits; ++s) {
            const float ms = part.m[o + s];
            const float w = ms == -INFINITY ? 0.f : exp2f(ms - M);
            a += w * part.acc[(o + s) * d.headDim + j];
            l += w * part.l[o + s];
        }
        out[bh * d.headDim + j] = a / l;
    }
}

} // namespace

using detail::withGroup;

cudaError_t launchPaperDecode(const DecodeDims& d, const float* q, const std::uint8_t* kc, const std::uint16_t* kb,
                              const std::uint8_t* vc, const std::uint16_t* vb, const float* ropeTurns,
                              const SplitPartials& part, cudaStream_t stream)
{
    const dim3 grid(unsigned(d.splits), unsigned(d.kvHeads), unsigned(d.batch));
    return withGroup(d.group(), [&]<int G>() {
        const std::size_t shm = splitSharedBytes<G>(d);
        auto* kernel = paperDecodeKernel<G, (G >= 8 ? 1 : 2)>;
        if (cudaError_t e = allowShared(kernel, shm); e != cudaSuccess)
            return e;
        launch(kernel, grid, kThreads, shm, stream, d, q, kc, reinterpret_cast<const __half*>(kb), vc,
               reinterpret_cast<const __half*>(vb), reinterpret_cast<const float2*>(ropeTurns), part);
        return cudaGetLastError();
    });
}

namespace {

// The dynamic shared memory each launch asks for (decode_math.h); the *SharedBytes functions add the
// static arrays.
std::size_t paperBinsDynamicBytes(const DecodeDims& d)
{
    return gpu::paperBinsKernelDynamicBytes(d.group(), d.subspacesPerHead(), d.stages, d.k, d.ropeWalk);
}

} // namespace

std::size_t paperBinsSharedBytes(const DecodeDims& d)
{
    std::size_t fixed = 0;
    withGroup(d.group(), [&]<int G>() {
        fixed = d.ropeWalk ? staticShared(paperBinsKernel<G, (G >= 8 ? 1 : 2), true>)
                           : staticShared(paperBinsKernel<G, (G >= 8 ? 1 : 2), false>);
        return cudaSuccess;
    });
    return paperBinsDynamicBytes(d) + fixed;
}

cudaError_t launchPaperBins(const DecodeDims& d, const float* q, const std::uint8_t* kc, const std::uint16_t* kb,
                            const std::uint8_t* vc, const float* ropeTurns, float* weights, float* m, float* l,
                            cudaStream_t stream)
{
    const dim3 grid(unsigned(d.splits), unsigned(d.kvHeads), unsigned(d.batch));
    const std::size_t shm = paperBinsDynamicBytes(d);
    return withGroup(d.group(), [&]<int G>() {
        auto* kernel =
            d.ropeWalk ? paperBinsKernel<G, (G >= 8 ? 1 : 2), true> : paperBinsKernel<G, (G >= 8 ? 1 : 2), false>;
        if (cudaError_t e = allowShared(kernel, shm); e != cudaSuccess)
            return e;
        launch(kernel, grid, kThreads, shm, stream, d, q, kc, reinterpret_cast<const __half*>(kb), vc,
               reinterpret_cast<const float2*>(ropeTurns), weights, m, l);
        return cudaGetLastError();
    });
}

cudaError_t launchCombine(const DecodeDims& d, const SplitPartials& part, float* out, cudaStream_t stream)
{
    launch(combineKernel, unsigned(d.batch * d.heads), unsigned(d.headDim), 0, stream, d, part, out);
    return cudaGetLastError();
}

} // namespace gsrq::gpu::kernels
