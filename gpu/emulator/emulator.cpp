// The CUDA emulator's scheduler: it runs a launch's blocks one after another and a block's threads
// as fibers (emulator.h says what it models); the runtime API is runtime.cpp's.

#include "internal.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace gsrq::emulator {

// The static __shared__ arrays of every kernel (emulator.h): the linker brackets their section.
// Weak, so a program with no kernel declaring one links too.
extern "C" char __start_gsrq_emu_shared[] __attribute__((weak));
extern "C" char __stop_gsrq_emu_shared[] __attribute__((weak));

namespace {
void poisonStaticShared()
{
    char* const begin = __start_gsrq_emu_shared;
    char* const end = __stop_gsrq_emu_shared;
    if (begin && end > begin)
        std::memset(begin, 0xff, std::size_t(end - begin));
}
} // namespace

namespace detail {

ThreadState* currentThread = nullptr;
BlockState* currentBlock = nullptr;

} // namespace detail

namespace {

using namespace detail;
using namespace internal;

// ---- fibers -------------------------------------------------------------------------------------
//
// A fiber switch saves the callee-saved registers (and the SSE and x87 control words) on the running
// stack, stores its stack pointer and loads another's: a few nanoseconds, where glibc's swapcontext
// makes a system call for the signal mask on every switch (~200 ns) and would dominate the emulator.

} // namespace
} // namespace gsrq::emulator

extern "C" {
// Saves the running context on its stack, *save = its stack pointer, and resumes the context whose
// stack pointer is `load`.
void gsrq_emulator_switch(void** save, void* load);
[[noreturn]] void gsrq_emulator_fiber_start();
}

#if defined(__x86_64__) && defined(__linux__) && !defined(GSRQ_EMULATOR_UCONTEXT)
asm(R"(
    .text
    .globl gsrq_emulator_switch
    .hidden gsrq_emulator_switch
    .type gsrq_emulator_switch, @function
gsrq_emulator_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size gsrq_emulator_switch, .-gsrq_emulator_switch
)");
#define GSRQ_EMULATOR_ASM_SWITCH 1
#else
// Elsewhere (aarch64, say, or with GSRQ_EMULATOR_UCONTEXT): glibc's ucontext, slower (a system call
// per switch for the signal mask) and just as correct. A context's "stack pointer" is then the
// address of its ucontext_t: a fiber's lies at the top of its own stack, the launching thread's is
// a thread-local one.
#include <ucontext.h>

namespace {
thread_local ucontext_t launcherContext;
thread_local ucontext_t* runningContext = &launcherContext;
} // namespace

extern "C" void gsrq_emulator_switch(void** save, void* load)
{
    ucontext_t* const me = runningContext;
    *save = me;
    runningContext = static_cast<ucontext_t*>(load);
    swapcontext(me, runningContext);
}
#endif

namespace gsrq::emulator {
namespace {

// A new fiber's stack, laid out as gsrq_emulator_switch leaves a suspended one: control words,
// six zeroed registers, then the address it returns to (the entry), and a null return address for
// the entry itself, with the stack aligned as at a call.
constexpr std::size_t kStackBytes = 256 * 1024;

#if !defined(GSRQ_EMULATOR_ASM_SWITCH)
// A new fiber's context at the top of its stack, entering gsrq_emulator_fiber_start on the rest.
void* newFiberStack(void* stackTop)
{
    const auto top = reinterpret_cast<std::uintptr_t>(stackTop);
    auto* ctx = reinterpret_cast<ucontext_t*>((top - sizeof(ucontext_t)) & ~std::uintptr_t(63));
    getcontext(ctx);
    ctx->uc_link = nullptr;
    ctx->uc_stack.ss_sp = reinterpret_cast<char*>(top) - kStackBytes;
    ctx->uc_stack.ss_size = std::size_t(reinterpret_cast<char*>(ctx) - static_cast<char*>(ctx->uc_stack.ss_sp));
    makecontext(ctx, gsrq_emulator_fiber_start, 0);
    return ctx;
}
#else
void* newFiberStack(void* stackTop)
{
    auto top = reinterpret_cast<std::uintptr_t>(stackTop) & ~std::uintptr_t(15);
    auto* sp = reinterpret_cast<std::uint64_t*>(top - 72);
    std::uint32_t mxcsr;
    std::uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    sp[0] = std::uint64_t(mxcsr) | (std::uint64_t(fcw) << 32);
    for (int i = 1; i <= 6; ++i)
        sp[i] = 0;
    sp[7] = reinterpret_cast<std::uint64_t>(&gsrq_emulator_fiber_start);
    sp[8] = 0;
    return sp;
}
#endif

// ---- the fiber scheduler ------------------------------------------------------------------------

constexpr int kMaxThreads = 1024;

enum class Wait : std::uint8_t { None, Block, Warp, Done };

struct Fiber {
    void* sp = nullptr;        // saved stack pointer while suspended
    void* mapping = nullptr;   // guard page, then the stack
    void* fakeStack = nullptr; // AddressSanitizer's state of this stack while suspended
    ThreadState thread;
    Wait wait = Wait::None;
};

struct Warp {
    int live = 0, arrived = 0, parity = 0;
    unsigned liveMask = 0;
    std::uint64_t slot[2][32] = {};
    int waiting[32] = {};
};

struct Scheduler {
    void* mainSp = nullptr;
    void* mainFakeStack = nullptr;
    const void* mainBottom = nullptr; // the launching thread's stack (for AddressSanitizer)
    std::size_t mainSize = 0;
    std::unique_ptr<Fiber[]> fibers{new Fiber[kMaxThreads]};
    int made = 0;       // fibers with a stack and a context
    bool stale = false; // fibers left inside a kernel by a failed block: remake their contexts
    std::vector<Warp> warps;
    std::vector<int> ready; // ring buffer of runnable fibers
    int readyHead = 0, readyCount = 0;
    std::vector<int> atBarrier;
    int threads = 0, live = 0, current = -1;
    Body body = nullptr;
    void* bodyContext = nullptr;
    BlockState block;
    std::vector<std::max_align_t> shared;
    bool failed = false;
    std::string failure;
    std::uint64_t launches = 0;
};

Scheduler scheduler; // one: launches hold launchMutex

Scheduler& sched()
{
    return scheduler;
}

std::mutex launchMutex;

void push(int f)
{
    Scheduler& s = sched();
    s.ready[std::size_t((s.readyHead + s.readyCount) % s.threads)] = f;
    ++s.readyCount;
}

int pop()
{
    Scheduler& s = sched();
    const int f = s.ready[std::size_t(s.readyHead)];
    s.readyHead = (s.readyHead + 1) % s.threads;
    --s.readyCount;
    return f;
}

const void* stackBottom(const Fiber& f)
{
    return static_cast<const char*>(f.mapping) + pageBytes();
}

// Suspends the running context (its stack pointer to *save) and resumes the one at `load`, whose
// stack is [bottom, bottom + size). AddressSanitizer is told of every switch; fakeSave is null when
// the running context will never be resumed.
void jump(void** save, void** fakeSave, void* load, [[maybe_unused]] const void* bottom,
          [[maybe_unused]] std::size_t size)
{
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(fakeSave, bottom, size);
#endif
    gsrq_emulator_switch(save, load);
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fakeSave ? *fakeSave : nullptr, nullptr, nullptr);
#else
    (void)fakeSave;
#endif
}

void jumpToFiber(void** save, void** fakeSave, int next)
{
    const Fiber& f = sched().fibers[next];
    jump(save, fakeSave, f.sp, stackBottom(f), kStackBytes);
}

void jumpToMain(int me, bool resumable)
{
    Scheduler& s = sched();
    jump(&s.fibers[me].sp, resumable ? &s.fibers[me].fakeStack : nullptr, s.mainSp, s.mainBottom, s.mainSize);
}

void switchTo(int next)
{
    Scheduler& s = sched();
    const int me = s.current;
    s.current = next;
    currentThread = &s.fibers[next].thread;
    jumpToFiber(&s.fibers[me].sp, &s.fibers[me].fakeStack, next);
}

[[noreturn]] void abandonBlock(std::string why)
{
    Scheduler& s = sched();
    s.failed = true;
    s.failure = std::move(why);
    s.stale = true;
    const int me = s.current;
    s.current = -1;
    jumpToMain(me, false);
    std::abort(); // never resumed: the launcher remakes every fiber before the next launch
}

std::string deadlock()
{
    const Scheduler& s = sched();
    int block = 0, warp = 0;
    for (int i = 0; i < s.threads; ++i) {
        block += s.fibers[i].wait == Wait::Block;
        warp += s.fibers[i].wait == Wait::Warp;
    }
    return std::to_string(block) + " threads wait at __syncthreads and " + std::to_string(warp) +
           " at a warp shuffle, and no thread can run (a barrier in divergent code?)";
}

// The current thread waits: run the next runnable one.
void park()
{
    if (sched().readyCount == 0)
        abandonBlock("deadlock: " + deadlock());
    switchTo(pop());
}

void releaseBarrier(int except)
{
    Scheduler& s = sched();
    for (int f : s.atBarrier) {
        s.fibers[f].wait = Wait::None;
        if (f != except)
            push(f);
    }
    s.atBarrier.clear();
}

// Called by a fiber whose thread has returned from the kernel.
void finishThread()
{
    Scheduler& s = sched();
    Fiber& f = s.fibers[s.current];
    f.wait = Wait::Done;
    --s.live;
    Warp& w = s.warps[f.thread.warp];
    --w.live;
    w.liveMask &= ~(1u << f.thread.lane);
    if (w.arrived > 0)
        abandonBlock("lane " + std::to_string(f.thread.lane) + " of warp " + std::to_string(f.thread.warp) +
                     " exited while its warp waits for it at a shuffle");
    if (!s.atBarrier.empty() && int(s.atBarrier.size()) == s.live)
        releaseBarrier(-1); // exited threads do not hold a barrier up, as on the device
    if (s.readyCount > 0) {
        switchTo(pop());
    } else if (s.live == 0) {
        const int me = s.current;
        s.current = -1;
        jumpToMain(me, true);
    } else {
        abandonBlock("deadlock: " + deadlock());
    }
}

bool makeFiber(Fiber& f)
{
    if (!f.mapping) {
        void* m = mmap(nullptr, kStackBytes + pageBytes(), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return false;
        mprotect(m, pageBytes(), PROT_NONE); // stacks grow down: an overflow faults
        f.mapping = m;
    }
#if defined(__SANITIZE_ADDRESS__)
    // A stack left inside a kernel by a failed block still has its frames' redzones poisoned.
    __asan_unpoison_memory_region(static_cast<char*>(f.mapping) + pageBytes(), kStackBytes);
#endif
    f.sp = newFiberStack(static_cast<char*>(f.mapping) + pageBytes() + kStackBytes);
    return true;
}

std::map<const void*, int>& maxDynamicShared()
{
    static std::map<const void*, int> m;
    return m;
}

std::string dimText(dim3 d)
{
    std::string s = "(";
    s += std::to_string(d.x);
    s += ", ";
    s += std::to_string(d.y);
    s += ", ";
    s += std::to_string(d.z);
    s += ")";
    return s;
}

// Every __shared__ array of every kernel linked in: the section's bounds (declared at the top).
std::size_t staticSharedBytes()
{
    if (__start_gsrq_emu_shared == nullptr || __stop_gsrq_emu_shared == nullptr)
        return 0;
    return std::size_t(__stop_gsrq_emu_shared - __start_gsrq_emu_shared);
}

// As the device checks a launch: static and dynamic shared memory together within 48 KiB, or within
// the kernel's raised dynamic limit (which cudaFuncSetAttribute checked against the opt-in limit).
cudaError_t checkLaunch(dim3 grid, dim3 block, std::size_t sharedBytes, const void* kernel)
{
    const std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
    if (threads == 0 || threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64)
        return fail(cudaErrorInvalidConfiguration, "block " + dimText(block) + " is not a valid block shape");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        return fail(cudaErrorInvalidConfiguration, "grid " + dimText(grid) + " is not a valid grid shape");
    const std::size_t fixed = staticSharedBytes();
    std::size_t allowed = kSharedPerBlock > fixed ? kSharedPerBlock - fixed : 0;
    if (const auto it = maxDynamicShared().find(kernel); it != maxDynamicShared().end())
        allowed = std::max(allowed, std::size_t(it->second));
    if (sharedBytes > allowed)
        return fail(cudaErrorInvalidValue, std::to_string(sharedBytes) + " bytes of dynamic shared memory, " +
                                               std::to_string(allowed) + " allowed for this kernel beside " +
                                               std::to_string(fixed) + " of static shared memory");
    return cudaSuccess;
}

} // namespace

namespace detail {

void syncthreads()
{
    Scheduler& s = sched();
    s.fibers[s.current].wait = Wait::Block;
    s.atBarrier.push_back(s.current);
    if (int(s.atBarrier.size()) == s.live) {
        releaseBarrier(s.current);
        return;
    }
    park();
}

std::uint64_t exchange(std::uint64_t value, int srcLane, unsigned mask)
{
    Scheduler& s = sched();
    Fiber& f = s.fibers[s.current];
    Warp& w = s.warps[f.thread.warp];
    if (mask != w.liveMask)
        abandonBlock(mask & ~w.liveMask ? "a warp shuffle's mask names lanes that have exited or do not exist"
                                        : "warp shuffles over part of a warp are not emulated");
    const int p = w.parity;
    w.slot[p][f.thread.lane] = value;
    if (++w.arrived == w.live) {
        for (int i = 0; i + 1 < w.arrived; ++i) {
            s.fibers[w.waiting[i]].wait = Wait::None;
            push(w.waiting[i]);
        }
        w.arrived = 0;
        w.parity ^= 1; // the next shuffle writes the other slots: these stay until every lane has read
    } else {
        w.waiting[w.arrived - 1] = s.current;
        f.wait = Wait::Warp;
        park();
    }
    return w.slot[p][srcLane];
}

unsigned ballot(bool predicate, unsigned mask)
{
    Scheduler& s = sched();
    const Warp& w = s.warps[s.fibers[s.current].thread.warp];
    const int p = w.parity; // the slots exchange() is about to fill with every lane's predicate
    const unsigned live = w.liveMask;
    exchange(predicate ? 1 : 0, int(s.fibers[s.current].thread.lane), mask);
    unsigned bits = 0;
    for (int lane = 0; lane < 32; ++lane)
        if ((live >> lane) & 1u && w.slot[p][lane])
            bits |= 1u << lane;
    return bits;
}

void gatherWarp(std::uint64_t value, std::uint64_t* all, unsigned mask)
{
    Scheduler& s = sched();
    const Warp& w = s.warps[s.fibers[s.current].thread.warp];
    const int p = w.parity; // the slots exchange() is about to fill with every lane's value
    const unsigned live = w.liveMask;
    exchange(value, int(s.fibers[s.current].thread.lane), mask);
    for (int lane = 0; lane < 32; ++lane)
        all[lane] = (live >> lane) & 1u ? w.slot[p][lane] : 0;
}

void runGrid(dim3 grid, dim3 block, std::size_t sharedBytes, cudaStream_t, const void* kernel, Body body, void* context)
{
    std::lock_guard lock(launchMutex);
    if (checkLaunch(grid, block, sharedBytes, kernel) != cudaSuccess)
        return;
    Scheduler& s = sched();
    const int n = int(block.x * block.y * block.z);
    if (s.stale) {
        s.made = 0;
        s.stale = false;
    }
    for (; s.made < n; ++s.made)
        if (!makeFiber(s.fibers[s.made])) {
            fail(cudaErrorMemoryAllocation, "no memory for the emulator's thread stacks");
            return;
        }
#if defined(__SANITIZE_ADDRESS__)
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void* bottom = nullptr;
        pthread_attr_getstack(&attr, &bottom, &s.mainSize);
        s.mainBottom = bottom;
        pthread_attr_destroy(&attr);
    }
#endif
    s.threads = n;
    s.body = body;
    s.bodyContext = context;
    s.ready.assign(std::size_t(n), 0);
    s.warps.assign(std::size_t((n + 31) / 32), Warp{});
    s.shared.assign((sharedBytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t), std::max_align_t{});
    s.block.dim = block;
    s.block.grid = grid;
    beginLaunchCount(kernel, grid, block, sharedBytes, s.shared.data(), __start_gsrq_emu_shared,
                     __stop_gsrq_emu_shared);
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull ^ ++s.launches);
    std::vector<int> order(static_cast<std::size_t>(n));
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                s.block.idx = {x, y, z};
                std::memset(static_cast<void*>(s.shared.data()), 0xff, sharedBytes); // NaN, not zeros
                poisonStaticShared();
                s.block.shared = s.shared.data();
                currentBlock = &s.block;
                for (int i = 0; i < n; ++i) {
                    Fiber& f = s.fibers[i];
                    f.thread.idx = {unsigned(i) % block.x, (unsigned(i) / block.x) % block.y,
                                    unsigned(i) / (block.x * block.y)};
                    f.thread.lane = unsigned(i) % 32;
                    f.thread.warp = unsigned(i) / 32;
                    f.wait = Wait::None;
                }
                for (std::size_t w = 0; w < s.warps.size(); ++w) {
                    Warp& wp = s.warps[w];
                    wp.live = std::min(32, n - int(w) * 32);
                    wp.liveMask = wp.live == 32 ? 0xffffffffu : (1u << wp.live) - 1u;
                    wp.arrived = 0;
                    wp.parity = 0;
                }
                std::iota(order.begin(), order.end(), 0);
                std::shuffle(order.begin(), order.end(), rng);
                s.readyHead = 0;
                s.readyCount = 0;
                for (int f : order)
                    push(f);
                s.atBarrier.clear();
                s.live = n;
                s.failed = false;
                s.current = pop();
                currentThread = &s.fibers[s.current].thread;
                jumpToFiber(&s.mainSp, &s.mainFakeStack, s.current);
                if (s.failed) {
                    endLaunchCount();
                    fail(cudaErrorLaunchFailure, "block " + dimText(dim3(x, y, z)) + " of grid " + dimText(grid) +
                                                     ", block shape " + dimText(block) + ": " + s.failure);
                    currentBlock = nullptr;
                    currentThread = nullptr;
                    return;
                }
            }
    endLaunchCount();
    currentBlock = nullptr;
    currentThread = nullptr;
}

bool isDeviceRange(const void* p, std::size_t bytes)
{
    return deviceRange(p, bytes);
}

void failLaunch(std::string why)
{
    fail(cudaErrorInvalidValue, std::move(why));
}

void abandonLaunch(std::string why)
{
    abandonBlock(std::move(why));
}

} // namespace detail

cudaError_t setFuncAttribute(const void* kernel, cudaFuncAttribute attr, int value)
{
    const std::size_t fixed = staticSharedBytes();
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || std::size_t(value) + fixed > sharedOptin())
        return fail(cudaErrorInvalidValue, std::to_string(value) + " bytes of dynamic shared memory and " +
                                               std::to_string(fixed) + " of static are above the device's " +
                                               std::to_string(sharedOptin()) + " bytes per block");
    std::lock_guard lock(launchMutex);
    maxDynamicShared()[kernel] = value;
    return cudaSuccess;
}

cudaError_t funcAttributes(cudaFuncAttributes* attr, const void* kernel)
{
    if (attr == nullptr || kernel == nullptr)
        return fail(cudaErrorInvalidValue, "cudaFuncGetAttributes: null argument");
    std::lock_guard lock(launchMutex);
    const auto it = maxDynamicShared().find(kernel);
    attr->sharedSizeBytes = staticSharedBytes();
    attr->maxDynamicSharedSizeBytes = it != maxDynamicShared().end()
                                          ? it->second
                                          : int(kSharedPerBlock - std::min(kSharedPerBlock, attr->sharedSizeBytes));
    attr->maxThreadsPerBlock = int(kMaxThreads);
    attr->ptxVersion = 0;
    return cudaSuccess;
}

} // namespace gsrq::emulator

// Every fiber starts here, and runs one thread of a block after another.
extern "C" void gsrq_emulator_fiber_start()
{
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr); // a new stack: nothing to restore
#endif
    for (;;) {
        auto& s = gsrq::emulator::sched();
        s.body(s.bodyContext);
        gsrq::emulator::finishThread(); // returns when this fiber is given a thread of a later block
    }
}
