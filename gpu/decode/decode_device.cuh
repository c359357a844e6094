#pragma once
// Device helpers shared by the decode and cache kernels (internal to gsrq_gpu; compiled by nvcc, or
// as C++ against the CUDA emulator).

#include "gpu/decode/decode_kernels.h"
#include "gpu/decode/decode_math.h"
#include "gpu/device/launch.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#if defined(GSRQ_CUDA_EMULATOR)
#include <string>
#endif

// A device function kept out of line (nvcc's __noinline__; the emulator compiles it as it likes).
#if defined(GSRQ_CUDA_EMULATOR)
#define GSRQ_NOINLINE
#else
#define GSRQ_NOINLINE __noinline__
#endif

namespace gsrq::gpu::kernels::detail {

constexpr int kWarps = kDecodeWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kEpl = kFeaturesPerLane;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void addHalf8(float (&x)[kEpl], const uint4& raw)
{
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __half2 h;
        memcpy(&h, &words[i], sizeof h); // a bit cast (a register move): no type-punned pointer
        const float2 f = __half22float2(h);
        x[2 * i] += f.x;
        x[2 * i + 1] += f.y;
    }
}

__device__ __forceinline__ uint4 load16(const void* p)
{
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// Sum over the `width` lanes that hold one token (width a power of two ≤ 32, aligned groups).
__device__ __forceinline__ float groupSum(float v, int width)
{
    for (int o = width / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Calls f.template operator()<G>() with G the smallest supported group size ≥ the model's.
template <class F> inline cudaError_t withGroup(int group, F&& f)
{
    if (group <= 1)
        return f.template operator()<1>();
    if (group <= 2)
        return f.template operator()<2>();
    if (group <= 4)
        return f.template operator()<4>();
    if (group <= kMaxGroup)
        return f.template operator()<8>();
    return cudaErrorInvalidValue;
}

// Asynchronous copies from global to shared memory in commit groups (cp.async, sm_80 and later; a
// plain copy before): copy16() and copy4() start one of 16 or 4 bytes, commit() closes the group of
// those started since the last, wait<N>() returns when all but the newest N groups have landed (in
// this thread; a barrier then shows them to the block). In the emulator the copies wait in the
// thread's queue until wait() lands them, so a read that comes before its wait, or before the
// barrier after another thread's, reads the NaN the emulator fills shared memory with, as it would
// read stale data on a device.
template <int MaxPending> struct AsyncCopies {
#if defined(GSRQ_CUDA_EMULATOR)
    const void* src[MaxPending];
    void* dst[MaxPending];
    int group[MaxPending];
    bool wide[MaxPending];
    int pending = 0, committed = 0;
    void land(int before) // the copies of groups below `before`, in order
    {
        int kept = 0;
        for (int i = 0; i < pending; ++i) {
            if (group[i] < before) {
                if (wide[i])
                    *static_cast<uint4*>(dst[i]) = *static_cast<const uint4*>(src[i]);
                else
                    *static_cast<std::uint32_t*>(dst[i]) = *static_cast<const std::uint32_t*>(src[i]);
            } else {
                src[kept] = src[i];
                dst[kept] = dst[i];
                wide[kept] = wide[i];
                group[kept++] = group[i];
            }
        }
        pending = kept;
    }
    void queue(void* shared, const void* global, bool sixteen)
    {
        if (pending == MaxPending) // more in flight than the kernel planned: land the oldest groups
            land(committed);
        src[pending] = global;
        dst[pending] = shared;
        wide[pending] = sixteen;
        group[pending++] = committed;
    }
#endif
    __device__ __forceinline__ void copy16(void* shared, const void* global)
    {
#if defined(GSRQ_CUDA_EMULATOR)
        queue(shared, global, true);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
#else
        *static_cast<uint4*>(shared) = *static_cast<const uint4*>(global);
#endif
    }
    __device__ __forceinline__ void copy4(void* shared, const void* global)
    {
#if defined(GSRQ_CUDA_EMULATOR)
        queue(shared, global, false);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(global) : "memory");
#else
        *static_cast<std::uint32_t*>(shared) = *static_cast<const std::uint32_t*>(global);
#endif
    }
    __device__ __forceinline__ void commit()
    {
#if defined(GSRQ_CUDA_EMULATOR)
        ++committed;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
    }
    template <int N> __device__ __forceinline__ void wait()
    {
#if defined(GSRQ_CUDA_EMULATOR)
        land(committed - N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
    }
};

// ---- static shared arrays of the template kernels ------------------------------------------------
// Declared in functions of internal linkage that are not templates, whose kernels take them by
// pointer: GCC (through 12 at least) ignores the section attribute on a function template's static
// locals, and the CUDA emulator finds a block's static shared memory by that section (emulator.h; it
// fills it with NaN before each block, and its byte counters tell shared from global by it). On a
// device the arrays are what they were: static shared memory of each kernel that calls the function.

// The RoPE turns of half a head (head_dim / 2 ≤ 128 pairs), then the paper kernels' walk rotation
// per pair, the advance between a lane's consecutive tokens (RopeWalk).
static __device__ __forceinline__ float2* sharedTurns()
{
    __shared__ float2 turns[2 * kMaxRopePairs];
    return turns;
}

// The paper kernels' staged codes: kPaperStageWords words per warp and stage, two stages.
static __device__ __forceinline__ std::uint32_t* sharedPaperCodes()
{
    __shared__ std::uint32_t codes[kDecodeWarps * 2 * kPaperStageWords];
    return codes;
}

// One value per warp of a block of up to kMaxBlockWarps warps, for block reductions.
static __device__ __forceinline__ float* sharedWarpValues()
{
    __shared__ float perWarp[kMaxBlockWarps];
    return perWarp;
}

// A value per warp and group head, red[w·kMaxGroup + h], for the paper path's tile maxima.
static __device__ __forceinline__ float* sharedWarpHeadValues()
{
    __shared__ float perWarpHead[kMaxBlockWarps * kMaxGroup];
    return perWarpHead;
}

// ---- blocks of one launch that wait on earlier blocks of it ------------------------------------
// A block's place in the launch is the ticket it draws, not its blockIdx: hardware dispatches blocks
// in no promised order, but a ticket is only drawn by a block that is running, so every block with an
// earlier ticket is resident or finished. A block that waits only on earlier tickets, which wait on
// nothing, is never stuck (the decoupled look-back's guarantee of progress).

// The block's ticket in [0, blocks), the same in every thread (`scratch`: a word of shared memory).
// The block that draws the last puts the counter back to zero for the next launch.
__device__ __forceinline__ unsigned drawBlockTicket(unsigned* counter, unsigned blocks, float* scratch)
{
    auto* word = reinterpret_cast<unsigned*>(scratch);
    if (threadIdx.x == 0) {
        const unsigned t = atomicAdd(counter, 1u);
        if (t == blocks - 1)
            *counter = 0; // every block has drawn
        *word = t;
    }
    __syncthreads();
    return *word;
}

// After the block's writes: counts the block done, its writes made visible to the device first (the
// barrier orders every thread's writes before thread 0's fence, which releases them with the count).
__device__ __forceinline__ void countBlockDone(unsigned* counter)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
    }
}

// One thread waits until `counter` reaches `target` (an acquire at device scope: the counted blocks'
// writes are visible after it); a barrier then shows them to the block, read through the L2. In the
// emulator, which runs blocks one after another, the earlier blocks have finished, so the count is
// exactly the target: one short could never come (the launch fails instead of hanging), and one past
// it was left by an earlier launch that did not put it back to zero.
__device__ __forceinline__ void waitForCount(const unsigned* counter, unsigned target)
{
#if defined(GSRQ_CUDA_EMULATOR)
    if (*counter != target)
        emulator::detail::abandonLaunch(
            std::string(*counter < target ? "a block waits on a count no earlier block reached"
                                          : "a block's count was not put back to zero by the launch before") +
            " (" + std::to_string(*counter) + ", waiting for " + std::to_string(target) + ")");
#else
    for (;;) {
        unsigned seen;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        if (seen >= target)
            return;
        __nanosleep(100);
    }
#endif
}

// ---- weights binned by value codeword (the lookup path, and the paper path with bins) ----------

__device__ __forceinline__ float blockMax(float v, float* red)
{
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w)
        r = fmaxf(r, red[w]);
    return r;
}

__device__ __forceinline__ float blockSum(float v, float* red)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w)
        r += red[w];
    return r;
}

// Adds each head's softmax weight p[h] to the bins of a token's value codes `w` in subspace s, for
// stages r0, r0 + step, ... (bins: group × S·R·K floats, head-major).
template <int G>
__device__ __forceinline__ void addToBins(float* W, int per, int group, int s, int R, int K, const std::uint32_t* w,
                                          int bits, int r0, int step, const float (&p)[G])
{
    for (int r = r0; r < R; r += step) {
        const int o = (s * R + r) * K + int(codeAt(w, r, bits));
#pragma unroll
        for (int h = 0; h < G; ++h)
            if (h < group)
                atomicAdd(&W[h * per + o], p[h]);
    }
}

// A split's bins, reference maximum and softmax sum per head, in the layout launchLookupCombine reads.
template <int G>
__device__ void writeSplitBins(const DecodeDims& d, const float* W, int per, int b, int g, int split,
                               const float (&mRef)[G], const float (&lSum)[G], float* weights, float* mOut, float* lOut,
                               float* red)
{
    const int group = d.group();
    for (int h = 0; h < group; ++h) {
        const float l = blockSum(lSum[h], red);
        const std::int64_t o = (std::int64_t(b) * d.heads + g * group + h) * d.splits + split;
        for (int i = threadIdx.x; i < per; i += blockDim.x)
            weights[o * per + i] = W[h * per + i];
        if (threadIdx.x == 0) {
            mOut[o] = mRef[h];
            lOut[o] = l;
        }
    }
}

// Rescale collected weights only when a new maximum passes the reference by this much (base 2):
// exp2 of scores stays ≤ 2^8 in between, and the result is exact either way.
constexpr float kRescaleMargin = 8.f;

} // namespace gsrq::gpu::kernels::detail
