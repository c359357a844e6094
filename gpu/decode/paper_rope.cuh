#pragma once
// The paper kernels' rotate-half RoPE (internal to gsrq_gpu; compiled by nvcc, or as C++ against the
// CUDA emulator): exact rotations at a position, a lane's 8 features rotated, the RoPE tables a block
// holds in shared memory, and the walk of a lane's key rotations along its tokens.

#include "gpu/decode/decode_device.cuh"
#include "gpu/decode/decode_math.h"

namespace gsrq::gpu::kernels::detail {

// The rotations of pairs i0 .. i0 + 7 at `position`, exact (sincospif of the split-float turns).
__device__ __forceinline__ void ropeAt(RopeRotation (&r)[kEpl], float position, int i0, const float2* turns)
{
#pragma unroll
    for (int e = 0; e < kEpl; ++e) {
        const float2 t = turns[i0 + e];
        sincospif(2.f * ropeTurns(position, t.x, t.y), &r[e].s, &r[e].c);
    }
}

// Rotate-half RoPE of the lane's 8 features by r: feature i < headDim/2 pairs with i + headDim/2,
// held by the lane width/2 further on.
__device__ __forceinline__ void rotate8(float (&x)[kEpl], const RopeRotation (&r)[kEpl], int j0, int width, int half)
{
    const bool low = j0 < half;
#pragma unroll
    for (int e = 0; e < kEpl; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, x[e], width / 2);
        x[e] = low ? x[e] * r[e].c - other * r[e].s : x[e] * r[e].c + other * r[e].s;
    }
}

__device__ __forceinline__ int ropePair0(int j0, int half)
{
    return j0 < half ? j0 : j0 - half;
}

// RoPE of the lane's 8 features at `position` (the query's).
__device__ __forceinline__ void rope8(float (&x)[kEpl], float position, int j0, int width, int half,
                                      const float2* turns)
{
    RopeRotation r[kEpl];
    ropeAt(r, position, ropePair0(j0, half), turns);
    rotate8(x, r, j0, width, half);
}

// The paper kernels' RoPE tables in shared memory: the turns per position of each pair, then each
// pair's rotation by `stride` positions, the distance between a lane's consecutive tokens. Every
// thread of the block calls it, a barrier follows.
__device__ __forceinline__ void loadRopeTables(const float2* turnsIn, float2* turns, int half, int stride)
{
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float2 t = turnsIn[i];
        turns[i] = t;
        float sn, cs;
        sincospif(2.f * ropeTurns(float(stride), t.x, t.y), &sn, &cs);
        turns[kMaxRopePairs + i] = float2{cs, sn};
    }
}

// A lane's key rotations along its tokens, which lie `stride` positions apart (U a step, the next
// step's first `stride` after this step's last): exact at every kRopeAnchorSteps-th token, walked
// forward between (ropeCompose, decode_math.h), so a token costs 8 complex products where it
// cost 8 sincospif. The rotations live in the thread's slots of dynamic shared memory
// (kPaperRopeWalkBytes a block), read and written where a token is rotated: in registers they would
// be held across the codeword gathers, and nvcc gives the kernels 10–40 more registers (fewer blocks
// per multiprocessor).
struct RopeWalk {
    float2* slots; // kEpl of them, kThreads apart (word-consecutive over a warp)
    int left = 0;
    // Rotates x, the lane's features of its next token, at `position`.
    __device__ __forceinline__ void rotateNext(float (&x)[kEpl], float position, int i0, const float2* turns, int j0,
                                               int width, int half)
    {
        RopeRotation r[kEpl];
        if (left == 0) {
            ropeAt(r, position, i0, turns);
            left = kRopeAnchorSteps;
        } else {
#pragma unroll
            for (int e = 0; e < kEpl; ++e) {
                const float2 p = slots[e * kThreads], a = turns[kMaxRopePairs + i0 + e];
                r[e] = ropeCompose(RopeRotation{p.x, p.y}, RopeRotation{a.x, a.y});
            }
        }
        --left;
#pragma unroll
        for (int e = 0; e < kEpl; ++e)
            slots[e * kThreads] = float2{r[e].c, r[e].s};
        rotate8(x, r, j0, width, half);
    }
};

} // namespace gsrq::gpu::kernels::detail
