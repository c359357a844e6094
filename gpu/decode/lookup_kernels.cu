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

// The tables of sequence b, KV head g, subspace s and stage r: T[b][h][s][r][k] for the group's heads,
// threads over k, each codeword read once for up to kLookupTableHeads heads (a group of 8 reads it twice,
// the second time from the L1 or the L2); the scaled queries in `qs` (group × D floats of shared
// memory). Kept within the split blocks' 64 registers (lookupStepKernel's cap), as nvcc 13 builds it:
// kLookupTableHeads accumulators rather than kMaxGroup, and a call rather than inlined code, taking its
// dimensions as values (a reference to the kernel's DecodeDims would copy them to local memory).
__device__ GSRQ_NOINLINE void lookupTables(int heads, int headDim, int D, int group, int S, int stages, int K, int b,
                                           int g, int s, int r, const float* q, const __half* kb, float* tables,
                                           float* qs)
{
    const int m = g * S + s;
    const float scale = kLog2e / sqrtf(float(headDim));
    for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
        const int h = i / D, j = i % D;
        qs[h * D + j] = q[(std::int64_t(b) * heads + g * group + h) * headDim + s * D + j] * scale;
    }
    __syncthreads();
    const __half* C = kb + (std::int64_t(m) * stages + r) * K * D;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        for (int h0 = 0; h0 < group; h0 += kLookupTableHeads) {
            float acc[kLookupTableHeads] = {};
#pragma unroll 4
            for (int j = 0; j < D; j += kEpl) { // 4 of the codeword's 16-byte loads in flight
                float c[kEpl] = {};
                addHalf8(c, load16(C + std::int64_t(k) * D + j));
#pragma unroll
                for (int h = 0; h < kLookupTableHeads; ++h)
                    if (h0 + h < group)
#pragma unroll
                        for (int e = 0; e < kEpl; ++e)
                            acc[h] += qs[(h0 + h) * D + j + e] * c[e];
            }
#pragma unroll
            for (int h = 0; h < kLookupTableHeads; ++h)
                if (h0 + h < group)
                    tables[(((std::int64_t(b) * heads + g * group + h0 + h) * S + s) * stages + r) * K + k] = acc[h];
        }
}

constexpr int kLookupThreads = kLookupSplitThreads;
static_assert(kTablesThreads == kLookupThreads, "the tables and the splits are blocks of one launch");

// The splits' scale factors of the group's heads (f = 2^(m_split − max), 0 for an empty split) into
// f[h·splits + s], and their softmax sums L[h] = Σ f·l. Warp h takes head h's splits, 32 at a time
// (its lanes' loads together, through the L2: the split blocks may be of the same launch), and
// reduces the maximum and the sum by shuffles.
__device__ __forceinline__ void splitScales(int heads, int group, int splits, int b, int g, const float* mIn,
                                            const float* lIn, float* f, float* L)
{
    const int h = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    if (h >= group)
        return;
    const std::int64_t o = (std::int64_t(b) * heads + g * group + h) * splits;
    float Mx = -INFINITY;
    for (int s = lane; s < splits; s += 32)
        Mx = fmaxf(Mx, __ldcg(mIn + o + s));
    for (int off = 16; off > 0; off /= 2)
        Mx = fmaxf(Mx, __shfl_xor_sync(0xffffffffu, Mx, off));
    float l = 0;
    for (int s = lane; s < splits; s += 32) {
        const float m = __ldcg(mIn + o + s);
        const float w = m == -INFINITY ? 0.f : exp2f(m - Mx);
        f[h * splits + s] = w;
        l += w * __ldcg(lIn + o + s);
    }
    for (int off = 16; off > 0; off /= 2)
        l += __shfl_xor_sync(0xffffffffu, l, off);
    if (lane == 0)
        L[h] = l;
}

// The codeword loads a combine thread keeps in flight: 4 (what the latency model assumes for Hopper),
// 2 before sm_90, where nvcc 13 spills 4 under the lookup step's 64 registers (8 bytes stored, 52
// loaded on sm_80).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kStageLoadsInFlight = 2;
#else
constexpr int kStageLoadsInFlight = 4;
#endif

constexpr int kCombineThreads = kStageThreads;
static_assert(kCombineThreads / 32 >= kMaxGroup, "splitScales takes a warp per head of the group");
static_assert(kCombineThreads == kLookupThreads, "the combine's blocks are blocks of the lookup step too");

// One (sequence, KV head bg, subspace s, stage r = sr)'s share of the outputs: it merges the splits'
// weights of that stage's K codewords for the group's heads (8 splits' loads in flight), then
// multiplies them with the stage's codewords: part[b][g][s][r][h][D] (unscaled by the softmax sum).
// Thread (j, p) sums codewords k ≡ p mod parts for features 4j..4j+3 (one 8-byte load each,
// kStageLoadsInFlight in flight) for up to kLookupTableHeads heads at a time (a group of 8 reads each
// codeword twice); parts reduce in order after. Shared: group × (splits + 1 + K) floats, then parts ×
// group × D for the reduction, then the last-block flag. The last of the pair's S·R blocks to finish
// adds the stages in order, divides by the softmax sums, puts `done[bg]` back to zero and returns
// true (in every thread); the others return false. Called, not inlined, with its dimensions as
// values, for the lookup step's 64 registers (lookupTables says why).
__device__ GSRQ_NOINLINE bool stageCombine(int heads, int kvHeads, int headDim, int D, int S, int R, int K, int splits,
                                           int bg, int sr, const float* weights, const float* mIn, const float* lIn,
                                           const __half* vb, float* part, unsigned* done, float* outFinal, float* smem)
{
    const int b = bg / kvHeads, g = bg % kvHeads, group = heads / kvHeads;
    const int s = sr / R, r = sr % R, per = S * R * K;
    const int parts = stageParts(D), lanes = D / kStageFeatures;
    float* f = smem;               // group × splits
    float* L = f + group * splits; // group
    float* Wk = L + group;         // group × K merged weights of this stage
    float* red = Wk + group * K;   // parts × group × D
    splitScales(heads, group, splits, b, g, mIn, lIn, f, L);
    __syncthreads();
    for (int i = threadIdx.x; i < group * K; i += blockDim.x) {
        const int h = i / K, k = i % K;
        const std::int64_t o = (std::int64_t(b) * heads + g * group + h) * splits;
        float a = 0;
#pragma unroll 8
        for (int t = 0; t < splits; ++t)
            a += f[h * splits + t] * __ldcg(weights + (o + t) * per + sr * K + k);
        Wk[i] = a;
    }
    __syncthreads();
    const int j = int(threadIdx.x) % lanes, p = int(threadIdx.x) / lanes;
    if (p < parts) {
        const __half* C = vb + ((std::int64_t(g * S + s) * R + r) * K) * D + j * kStageFeatures;
        for (int h0 = 0; h0 < group; h0 += kLookupTableHeads) {
            float acc[kLookupTableHeads][kStageFeatures] = {};
#pragma unroll kStageLoadsInFlight
            for (int k = p; k < K; k += parts) {
                const uint2 raw = __ldg(reinterpret_cast<const uint2*>(C + std::int64_t(k) * D));
                __half2 lo, hi;
                memcpy(&lo, &raw.x, sizeof lo); // bit casts (register moves)
                memcpy(&hi, &raw.y, sizeof hi);
                const float2 c01 = __half22float2(lo), c23 = __half22float2(hi);
                const float c[kStageFeatures] = {c01.x, c01.y, c23.x, c23.y};
#pragma unroll
                for (int h = 0; h < kLookupTableHeads; ++h)
                    if (h0 + h < group) {
                        const float w = Wk[(h0 + h) * K + k];
#pragma unroll
                        for (int e = 0; e < kStageFeatures; ++e)
                            acc[h][e] += w * c[e];
                    }
            }
#pragma unroll
            for (int h = 0; h < kLookupTableHeads; ++h)
                if (h0 + h < group)
#pragma unroll
                    for (int e = 0; e < kStageFeatures; ++e)
                        red[(p * group + h0 + h) * D + j * kStageFeatures + e] = acc[h][e];
        }
    }
    __syncthreads();
    float* out = part + ((std::int64_t(bg) * S + s) * R + r) * group * D;
    for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
        float a = 0;
        for (int q = 0; q < parts; ++q)
            a += red[q * group * D + i];
        out[i] = a;
    }
    // The last of the (sequence, KV head)'s S·R blocks to finish adds the stages in order (4 loads in
    // flight), read through the L2, and divides by the softmax sums (an atomic count, left at zero
    // for the next step).
    int* lastFlag = reinterpret_cast<int*>(red + parts * group * D);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        *lastFlag = atomicAdd(&done[bg], 1u) == unsigned(S * R - 1);
    __syncthreads();
    if (!*lastFlag)
        return false;
    for (int i = threadIdx.x; i < group * headDim; i += blockDim.x) {
        const int h = i / headDim, jd = i % headDim, ss = jd / D, jj = jd % D;
        const float* pp = part + ((std::int64_t(bg) * S + ss) * R) * group * D + h * D + jj;
        float a = 0;
#pragma unroll 4
        for (int rr = 0; rr < R; ++rr)
            a += __ldcg(pp + std::int64_t(rr) * group * D);
        outFinal[(std::int64_t(b) * heads + g * group + h) * headDim + jd] = a / L[h];
    }
    if (threadIdx.x == 0)
        done[bg] = 0;
    return true;
}

// The whole step in one launch (grid: B·G·S·R table blocks, B·H·splits split blocks, B·G·S·R combine
// blocks), its blocks ordered by the ticket each draws (drawBlockTicket), not by blockIdx. The first
// tickets make the tables, one block per (sequence, KV head, subspace, stage), and count themselves
// done per (sequence, KV head); the next each take one query head's split, wait until its pair's
// tables are all counted, read them through the L2, and count themselves done when their weights
// are written; the last each take one (sequence, KV head, subspace, stage) of the combine, wait until
// all the pair's splits are counted, and merge them (stageCombine). A block waits only on blocks with
// earlier tickets, which are resident or finished and wait only on earlier ones still, down to the
// table blocks, which wait on nothing: every wait ends (the decoupled look-back's argument), and each
// costs a counter's round trip where a launch of its own cost a launch.
//
// A split block holds one head's tables and bins (S·R·K floats each, then S·R row maxima), so several
// blocks fit on a multiprocessor. The softmax reference is known before the token loop
// (FlashDecoding++'s unified maximum): the sum over the table's rows of each row's largest entry
// bounds every score exactly (a score sums one entry per row, in the same order, and rounding is
// monotone), so each thread weighs its tokens with no barrier and no rescale. Where the split's
// largest score falls more than kUnifiedMaxMargin below the bound (2^−64: weights could underflow
// next to the split's largest), the loop runs again against that largest score, now known exactly.
//
// order (lookupOrderCounters): the ticket counter, then per (sequence, KV head) its table blocks done,
// its split blocks past their wait and its split blocks done. The block that draws the last ticket,
// the last split block of a pair past its wait and the last combine block of a pair put them back to
// zero, so every launch leaves them zero for the next.
__global__ void __launch_bounds__(kLookupThreads, kLookupMinBlocks)
    lookupStepKernel(DecodeDims d, const float* q, const __half* kb, float* tablesOut, const std::uint8_t* kc,
                     const std::uint8_t* vc, float* weights, float* mOut, float* lOut, const __half* vb, float* part,
                     unsigned* done, float* outFinal, unsigned* order)
{
    float* smem = dynamicShared<float>();
    float* const red = sharedWarpValues();
    static_assert(kLookupThreads / 32 <= kMaxBlockWarps);
    const int S = d.subspacesPerHead(), M = d.subspaces(), R = d.stages, K = d.k;
    const int pairs = d.batch * d.kvHeads, tableBlocks = pairs * S * R;
    const unsigned splitBlocks = unsigned(d.batch) * unsigned(d.heads) * unsigned(d.splits);
    const unsigned blocks = 2 * unsigned(tableBlocks) + splitBlocks;
    const unsigned ticket = drawBlockTicket(order, blocks, red);
    unsigned* const tablesDone = order + 1;
    unsigned* const splitsPast = tablesDone + pairs;
    unsigned* const splitsDone = splitsPast + pairs;
    if (ticket < unsigned(tableBlocks)) {
        const int bg = int(ticket) / (S * R), sr = int(ticket) % (S * R);
        lookupTables(d.heads, d.headDim, d.dim, d.group(), S, R, K, bg / d.kvHeads, bg % d.kvHeads, sr / R, sr % R, q,
                     kb, tablesOut, smem);
        countBlockDone(&tablesDone[bg]);
        return;
    }
    if (ticket >= unsigned(tableBlocks) + splitBlocks) {
        const unsigned item = ticket - unsigned(tableBlocks) - splitBlocks;
        const int bg = int(item) / (S * R);
        if (threadIdx.x == 0)
            waitForCount(&splitsDone[bg], unsigned(d.group() * d.splits)); // the pair's weights are written
        __syncthreads();
        const bool last = stageCombine(d.heads, d.kvHeads, d.headDim, d.dim, S, R, K, d.splits, bg, int(item) % (S * R),
                                       weights, mOut, lOut, vb, part, done, outFinal, smem);
        if (last && threadIdx.x == 0)
            splitsDone[bg] = 0; // every combine block of the pair has passed its wait
        return;
    }
    const unsigned item = ticket - unsigned(tableBlocks);
    const int split = int(item % unsigned(d.splits)), hq = int(item / unsigned(d.splits)) % d.heads;
    const int b = int(item / (unsigned(d.splits) * unsigned(d.heads))), g = hq / d.group();
    const int bg = b * d.kvHeads + g;
    const int rows = S * R, per = rows * K; // table entries of the head
    float* T = smem;
    float* W = T + per;
    float* rowMax = W + per;
    const std::int64_t o = std::int64_t(b) * d.heads + hq;
    const float* tSrc = tablesOut + o * per;
    for (int i = threadIdx.x; i < per; i += blockDim.x)
        W[i] = 0;
    if (threadIdx.x == 0) {
        waitForCount(&tablesDone[bg], unsigned(S * R)); // this (sequence, KV head)'s tables are written
        if (atomicAdd(&splitsPast[bg], 1u) == unsigned(d.group() * d.splits - 1)) {
            tablesDone[bg] = 0; // every split block of the pair has passed its wait
            splitsPast[bg] = 0;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < per; i += blockDim.x)
        T[i] = __ldcg(tSrc + i); // through the L2: written by other blocks of this launch
    __syncthreads();
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    for (int row = warp; row < rows; row += kLookupThreads / 32) {
        float mx = -INFINITY;
        for (int k = lane; k < K; k += 32)
            mx = fmaxf(mx, T[row * K + k]);
        for (int off = 16; off > 0; off /= 2)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        if (lane == 0)
            rowMax[row] = mx;
    }
    __syncthreads();
    float bound = 0;
    for (int row = 0; row < rows; ++row)
        bound += rowMax[row];

    const std::int64_t t0 = std::int64_t(split) * d.tokensPerSplit;
    const std::int64_t t1 = min(d.tokens, t0 + d.tokensPerSplit);
    const std::uint8_t* kBase = kc + (std::int64_t(b) * M + g * S) * d.capacity * d.bytesPerToken;
    const std::uint8_t* vBase = vc + (std::int64_t(b) * M + g * S) * d.capacity * d.bytesPerToken;
    const std::int64_t subStride = d.capacity * d.bytesPerToken;
    // The next token's codes land in the thread's slots while it weighs this one (decode_math.h):
    // slots[stage][word][thread], keys' S·bpt/4 words then the values'.
    const int tid = int(threadIdx.x), wps = d.bytesPerToken / 4, kw = S * wps;
    const bool staged = d.stagedCodes;
    auto* slots = reinterpret_cast<std::uint32_t*>(rowMax + rows);
    AsyncCopies<kLookupStagedBytes / 4 * kLookupCodeStages> copies;
    auto stage = [&](std::int64_t t, int st) {
        std::uint32_t* dst = slots + std::int64_t(st) * 2 * kw * kLookupThreads + tid;
        for (int s = 0; s < S; ++s)
            for (int i = 0; i < wps; ++i) {
                const std::int64_t at = s * subStride + t * d.bytesPerToken + 4 * i;
                copies.copy4(dst + (s * wps + i) * kLookupThreads, kBase + at);
                copies.copy4(dst + (kw + s * wps + i) * kLookupThreads, vBase + at);
            }
        copies.commit();
    };
    // Each of the thread's tokens: its score, its weight against `ref`, added to its value codes' bins.
    auto weigh = [&](float ref, float& l, float& top) {
        std::int64_t t = t0 + tid;
        if (staged && t < t1)
            stage(t, 0);
        for (int st = 0; t < t1; t += kLookupThreads, st ^= 1) {
            if (staged) {
                if (t + kLookupThreads < t1)
                    stage(t + kLookupThreads, st ^ 1);
                else
                    copies.commit(); // an empty group: wait<1> below then lands this token's
                copies.wait<1>();
            }
            // Subspace s's key words (values: +kw words) and the distance between two of them.
            const int stride = staged ? kLookupThreads : 1;
            auto words = [&](int s, bool values) -> const std::uint32_t* {
                if (staged)
                    return slots + (std::int64_t(st) * 2 * kw + (values ? kw : 0) + s * wps) * kLookupThreads + tid;
                return reinterpret_cast<const std::uint32_t*>((values ? vBase : kBase) + s * subStride +
                                                              t * d.bytesPerToken);
            };
            float sc = 0;
            for (int s = 0; s < S; ++s) {
                CodeStream codes(words(s, false), stride, d.bits);
                for (int r = 0; r < R; ++r)
                    sc += T[(s * R + r) * K + int(codes.pop())];
            }
            const float p = exp2f(sc - ref);
            top = fmaxf(top, sc);
            l += p;
            for (int s = 0; s < S; ++s) {
                CodeStream codes(words(s, true), stride, d.bits);
                for (int r = 0; r < R; ++r)
                    atomicAdd(&W[(s * R + r) * K + int(codes.pop())], p);
            }
        }
    };
    float l = 0, top = -INFINITY, ref = bound;
    weigh(ref, l, top);
    top = blockMax(top, red);              // the split's largest score (its barriers also end the bins' atomics)
    if (top < bound - kUnifiedMaxMargin) { // rare: weigh again against the largest score
        for (int i = threadIdx.x; i < per; i += blockDim.x)
            W[i] = 0;
        __syncthreads();
        ref = top;
        l = 0;
        float unused = -INFINITY;
        weigh(ref, l, unused);
    }
    l = blockSum(l, red);
    const std::int64_t os = o * d.splits + split;
    for (int i = threadIdx.x; i < per; i += blockDim.x)
        weights[os * per + i] = W[i];
    if (threadIdx.x == 0) {
        mOut[os] = ref;
        lOut[os] = l;
    }
    countBlockDone(&splitsDone[bg]);
}

// The paper path's combine (its bins kernel writes the splits' weights as the lookup step's split
// blocks do): grid (B·G, S·R), one block per (sequence, KV head, subspace s, stage r), so the work
// spreads over the device at batch 1 too. Its launch bounds name one block a multiprocessor: with
// the block size alone nvcc 13 held it to 64 registers and spilled.
__global__ void __launch_bounds__(kCombineThreads, 1)
    lookupStageKernel(DecodeDims d, const float* weights, const float* mIn, const float* lIn, const __half* vb,
                      float* part, unsigned* done, float* outFinal)
{
    gridDependencyWait(); // the bins kernel's bins, maxima and sums are written
    stageCombine(d.heads, d.kvHeads, d.headDim, d.dim, d.subspacesPerHead(), d.stages, d.k, d.splits, int(blockIdx.x),
                 int(blockIdx.y), weights, mIn, lIn, vb, part, done, outFinal, dynamicShared<float>());
}

// The dynamic shared memory each launch asks for (decode_math.h); the *SharedBytes functions add the
// static arrays.
std::size_t lookupDynamicBytes(const DecodeDims& d)
{
    return lookupStepDynamicBytes(d.group(), d.splits, d.dim, d.subspacesPerHead(), d.stages, d.k, d.stagedCodes);
}

std::size_t lookupCombineDynamicBytes(const DecodeDims& d)
{
    static_assert(kCombineThreads == kStageThreads);
    return gpu::lookupCombineDynamicBytes(d.group(), d.splits, d.k, d.dim);
}

} // namespace

using detail::withGroup;

bool lookupLaunchesChainable()
{
    cudaFuncAttributes combine{};
    return cudaFuncGetAttributes(&combine, lookupStageKernel) == cudaSuccess && combine.ptxVersion >= 90;
}

std::size_t lookupSharedBytes(const DecodeDims& d)
{
    return lookupDynamicBytes(d) + staticShared(lookupStepKernel);
}

std::size_t lookupOrderCounters(const DecodeDims& d)
{
    return 1 + 3 * std::size_t(d.batch) * d.kvHeads;
}

cudaError_t launchLookupStep(const DecodeDims& d, const float* q, const std::uint16_t* kb, float* tables,
                             const std::uint8_t* kc, const std::uint8_t* vc, float* weights, float* m, float* l,
                             const std::uint16_t* vb, float* stagePartials, unsigned* done, float* out, unsigned* order,
                             cudaStream_t stream)
{
    const unsigned blocks = 2 * unsigned(d.batch * d.kvHeads * d.subspacesPerHead() * d.stages) +
                            unsigned(d.batch) * unsigned(d.heads) * unsigned(d.splits);
    const std::size_t shm = lookupDynamicBytes(d);
    if (cudaError_t e = allowShared(lookupStepKernel, shm); e != cudaSuccess)
        return e;
    launch(lookupStepKernel, dim3(blocks), kLookupThreads, shm, stream, d, q, reinterpret_cast<const __half*>(kb),
           tables, kc, vc, weights, m, l, reinterpret_cast<const __half*>(vb), stagePartials, done, out, order);
    return cudaGetLastError();
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
                                const std::uint16_t* vb, float* stagePartials, unsigned* done, float* out,
                                cudaStream_t stream)
{
    const std::size_t shm = lookupCombineDynamicBytes(d);
    if (cudaError_t e = allowShared(lookupStageKernel, shm); e != cudaSuccess)
        return e;
    const dim3 grid(unsigned(d.batch * d.kvHeads), unsigned(d.subspacesPerHead() * d.stages));
    launchChained(d.chained, lookupStageKernel, grid, kCombineThreads, shm, stream, d, weights, m, l,
                  reinterpret_cast<const __half*>(vb), stagePartials, done, out);
    return cudaGetLastError();
}

} // namespace gsrq::gpu::kernels
