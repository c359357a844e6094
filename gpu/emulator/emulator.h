#pragma once
// The CUDA emulator's kernel side: CUDA's built-in variables, qualifiers and the device intrinsics
// the gsrq kernels use, so that their .cu sources compile as C++ and run on the CPU.
//
// Every thread of a block runs as a fiber in one OS thread, so threads interleave only where CUDA
// threads synchronize: __syncthreads() is a block barrier and each warp shuffle a barrier of the 32
// lanes of its warp. Blocks run one after another; threads start in a seeded shuffled order that
// changes with every launch, so results that depend on the order of threads (a missing barrier,
// floating-point atomics) differ between runs as they do on a GPU. A barrier that not every thread
// reaches, or a full-mask shuffle after lanes of its warp have exited, fails the launch with a
// message instead of hanging. What the emulator cannot see: memory races between blocks, the memory
// model of a real device, and anything about speed.

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>

namespace gsrq::emulator {

namespace detail {

struct ThreadState {
    uint3 idx{0, 0, 0};
    unsigned lane = 0, warp = 0;
};

struct BlockState {
    uint3 idx{0, 0, 0};
    dim3 dim, grid;
    void* shared = nullptr;
};

extern ThreadState* currentThread;
extern BlockState* currentBlock;

void syncthreads();
// The lanes of the current warp each give `value` and receive lane `srcLane`'s value (a barrier of
// the warp's lanes; `mask` must name every lane that is still running).
std::uint64_t exchange(std::uint64_t value, int srcLane, unsigned mask);
// The lanes of the current warp each give a predicate and receive the mask of the lanes whose
// predicate is true (a barrier of the warp's lanes, as exchange()).
unsigned ballot(bool predicate, unsigned mask);
// The lanes of the current warp each give `value` and receive every lane's in all[32] (a barrier of
// the warp's lanes, as exchange(); lanes that have exited leave their entry 0).
void gatherWarp(std::uint64_t value, std::uint64_t* all, unsigned mask);

// Whether [p, p + bytes) lies in one live device allocation (p may be its end when bytes is 0).
bool isDeviceRange(const void* p, std::size_t bytes);
// Fails the coming launch (cudaErrorInvalidValue, with the reason).
void failLaunch(std::string why);
// From a kernel: stops the current block and fails its launch with the reason (as a barrier that
// no thread can pass does).
[[noreturn]] void abandonLaunch(std::string why);

template <class T> bool deviceParameter(const T& v)
{
    if constexpr (std::is_pointer_v<T>)
        return v == nullptr || isDeviceRange(static_cast<const void*>(v), 0);
    else
        return true;
}

using Body = void (*)(void* context);
void runGrid(dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t stream, const void* kernel, Body body,
             void* context);

template <class T> std::uint64_t toBits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T> T fromBits(std::uint64_t b)
{
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

} // namespace detail

// Runs kernel(args...) on every thread of every block of the grid before it returns (launches are
// synchronous; streams are ordered trivially). A failed launch sets cudaGetLastError().
template <class... P>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t stream,
            const std::type_identity_t<P>&... args)
{
    // Pointer parameters must point into device memory, as a kernel can read nothing else.
    int index = 0, bad = -1;
    ((bad = bad < 0 && !detail::deviceParameter(args) ? index : bad, ++index), ...);
    if (bad >= 0) {
        detail::failLaunch("kernel parameter " + std::to_string(bad) + " points outside device memory");
        return;
    }
    struct Context {
        void (*kernel)(P...);
        std::tuple<P...> params;
    };
    Context context{kernel, std::tuple<P...>(args...)};
    detail::runGrid(
        grid, block, sharedBytes, stream, reinterpret_cast<const void*>(kernel),
        [](void* c) {
            auto* x = static_cast<Context*>(c);
            std::apply(x->kernel, x->params); // each thread gets its own copies of the parameters
        },
        &context);
}

inline void* dynamicShared()
{
    return detail::currentBlock->shared;
}

// The warp's mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix fragments for
// mma.m16n8k8" with .tf32): d = A·B + c for A 16 × 8, B 8 × 8, every lane holding its fragments,
// a[4] (A's rows g and g + 8 at columns t and t + 4, g = lane / 4, t = lane % 4, in the order
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)), b[2] (B's rows t and t + 4 at column g) and c, d
// (rows g and g + 8 at columns 2t and 2t + 1). The operands are TF32 bit patterns; the products are
// exact in FP32 and added in k order, one rounding each (a device adds them in an order of its
// own). Three exchanges of the warp's lanes, so it is a barrier of the warp as the instruction is.
inline void mmaTf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], const float (&c)[4])
{
    const unsigned mask = 0xffffffffu;
    std::uint64_t lo[32], hi[32], bb[32];
    detail::gatherWarp(std::uint64_t(a[0]) | std::uint64_t(a[1]) << 32, lo, mask);
    detail::gatherWarp(std::uint64_t(a[2]) | std::uint64_t(a[3]) << 32, hi, mask);
    detail::gatherWarp(std::uint64_t(b[0]) | std::uint64_t(b[1]) << 32, bb, mask);
    const auto f = [](std::uint64_t bits, int half) {
        return detail::fromBits<float>(std::uint32_t(bits >> (32 * half)));
    };
    // A[r][k]: lane 4 (r % 8) + k % 4; a0/a1 (lo) for k < 4, a2/a3 (hi) for k ≥ 4; row r ≥ 8 the upper half.
    const auto A = [&](int r, int k) { return f((k < 4 ? lo : hi)[4 * (r % 8) + k % 4], r / 8); };
    // B[k][n]: lane 4n + k % 4; b0 for k < 4, b1 for k ≥ 4.
    const auto B = [&](int k, int n) { return f(bb[4 * n + k % 4], k / 4); };
    const int g = int(detail::currentThread->lane) / 4, t = int(detail::currentThread->lane) % 4;
    for (int i = 0; i < 4; ++i) {
        const int r = g + 8 * (i / 2), n = 2 * t + i % 2;
        float acc = c[i];
        for (int k = 0; k < 8; ++k)
            acc += A(r, k) * B(k, n);
        d[i] = acc;
    }
}

} // namespace gsrq::emulator

// ---- CUDA's qualifiers and built-in variables ---------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Blocks run one at a time, so a function-static array is the running block's shared memory. All
// of them live in one ELF section, which the emulator fills with 0xff bytes (NaN) before each
// block, as it does dynamic shared memory: a read before any write of this block shows. GCC (through
// 12) ignores the section attribute on a function template's static locals: a template kernel
// declares its static shared arrays in a plain function of internal linkage (decode_device.cuh).
#define __shared__ __attribute__((section("gsrq_emu_shared"))) static

#define threadIdx (::gsrq::emulator::detail::currentThread->idx)
#define blockIdx (::gsrq::emulator::detail::currentBlock->idx)
#define blockDim (::gsrq::emulator::detail::currentBlock->dim)
#define gridDim (::gsrq::emulator::detail::currentBlock->grid)

inline constexpr int warpSize = 32;

// ---- intrinsics ---------------------------------------------------------------------------------

inline void __syncthreads()
{
    ::gsrq::emulator::detail::syncthreads();
}

template <class T> T __shfl_sync(unsigned mask, T v, int srcLane, int width = warpSize)
{
    const int lane = int(::gsrq::emulator::detail::currentThread->lane);
    const int src = (lane / width) * width + ((srcLane % width) + width) % width;
    return ::gsrq::emulator::detail::fromBits<T>(
        ::gsrq::emulator::detail::exchange(::gsrq::emulator::detail::toBits(v), src, mask));
}

template <class T> T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = warpSize)
{
    const int lane = int(::gsrq::emulator::detail::currentThread->lane);
    int src = lane ^ laneMask;
    if (src / width != lane / width || src >= warpSize)
        src = lane; // outside the lane's segment: its own value
    return ::gsrq::emulator::detail::fromBits<T>(
        ::gsrq::emulator::detail::exchange(::gsrq::emulator::detail::toBits(v), src, mask));
}

template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize)
{
    const int lane = int(::gsrq::emulator::detail::currentThread->lane);
    const int src = (lane % width) + int(delta) < width ? lane + int(delta) : lane;
    return ::gsrq::emulator::detail::fromBits<T>(
        ::gsrq::emulator::detail::exchange(::gsrq::emulator::detail::toBits(v), src, mask));
}

// A barrier of the warp's lanes in `mask` (their shared-memory writes are seen by each other after it).
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    ::gsrq::emulator::detail::exchange(0, int(::gsrq::emulator::detail::currentThread->lane), mask);
}

inline unsigned __ballot_sync(unsigned mask, int predicate)
{
    return ::gsrq::emulator::detail::ballot(predicate != 0, mask);
}

// The position of the lowest set bit, from 1 (0 for none), and the set bits' count.
inline int __ffs(int x)
{
    return __builtin_ffs(x);
}

inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}

// Atomics: threads switch only at barriers, so a read-modify-write is atomic as written.
template <class T, class U> T atomicAdd(T* p, U v)
{
    const T old = *p;
    *p = T(old + v);
    return old;
}

template <class T> T __ldg(const T* p)
{
    return *p;
}

// A load through the L2 only (bypassing L1): the emulator has one memory.
template <class T> T __ldcg(const T* p)
{
    return *p;
}

// Blocks run one after another, so every write of a block is seen by the blocks after it.
inline void __threadfence() {}

template <class A, class B> constexpr std::common_type_t<A, B> min(A a, B b)
{
    using C = std::common_type_t<A, B>;
    return C(b) < C(a) ? C(b) : C(a);
}

template <class A, class B> constexpr std::common_type_t<A, B> max(A a, B b)
{
    using C = std::common_type_t<A, B>;
    return C(a) < C(b) ? C(b) : C(a);
}

// sin(πx) and cos(πx), rounded from double (CUDA's are within 1 ulp).
inline void sincospif(float x, float* s, float* c)
{
    const double a = 3.14159265358979323846 * double(x);
    *s = float(std::sin(a));
    *c = float(std::cos(a));
}
