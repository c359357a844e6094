// The emulator's byte counters (byte_counts.h): the thread-sanitizer instrumentation's hooks, which
// the emulated kernel sources call before each load and store, and the per-launch bookkeeping the
// scheduler (emulator.cpp) drives. Compiled without instrumentation itself.

#include "byte_counts.h"

#include "internal.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace gsrq::emulator {

namespace {

struct Region {
    std::uintptr_t begin = 0, end = 0;
    std::vector<std::uint64_t> readBits, writeBits; // one bit per byte, made at the first touch
};

struct Counter {
    bool enabled = false;        // between start and stop
    bool active = false;         // inside a counted launch
    std::vector<Region> regions; // the device allocations live at the launch, by address
    std::uintptr_t sharedBegin = 0, sharedEnd = 0, staticBegin = 0, staticEnd = 0;
    LaunchBytes current;
    std::vector<LaunchBytes> launches;
};

Counter& counter()
{
    static Counter c;
    return c;
}

std::mutex counterMutex;

// Sets the bits [from, to) of `bits`; returns how many were clear.
std::uint64_t mark(std::vector<std::uint64_t>& bits, std::size_t size, std::uintptr_t from, std::uintptr_t to)
{
    if (bits.empty())
        bits.assign((size + 63) / 64, 0);
    std::uint64_t fresh = 0;
    for (std::uintptr_t b = from; b < to; ++b) {
        std::uint64_t& word = bits[b / 64];
        const std::uint64_t bit = std::uint64_t(1) << (b % 64);
        fresh += (word & bit) == 0;
        word |= bit;
    }
    return fresh;
}

void note(const void* p, std::size_t bytes, bool write)
{
    Counter& c = counter();
    if (!c.active)
        return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if ((a >= c.sharedBegin && a < c.sharedEnd) || (a >= c.staticBegin && a < c.staticEnd)) {
        (write ? c.current.sharedWrite : c.current.sharedRead) += bytes;
        return;
    }
    auto it = std::upper_bound(c.regions.begin(), c.regions.end(), a,
                               [](std::uintptr_t x, const Region& r) { return x < r.begin; });
    if (it == c.regions.begin())
        return;
    Region& r = *--it;
    if (a >= r.end)
        return;
    const std::uintptr_t from = a - r.begin, to = std::min<std::uintptr_t>(r.end - r.begin, from + bytes);
    if (write) {
        c.current.globalWrite += bytes;
        c.current.globalWriteDistinct += mark(r.writeBits, r.end - r.begin, from, to);
    } else {
        c.current.globalRead += bytes;
        c.current.globalReadDistinct += mark(r.readBits, r.end - r.begin, from, to);
    }
}

} // namespace

bool byteCountsBuilt()
{
#if defined(GSRQ_EMULATOR_BYTE_COUNTS)
    return true;
#else
    return false;
#endif
}

void startByteCounts()
{
    std::lock_guard lock(counterMutex);
    Counter& c = counter();
    c.launches.clear();
    c.enabled = true;
}

std::vector<LaunchBytes> stopByteCounts()
{
    std::lock_guard lock(counterMutex);
    Counter& c = counter();
    c.enabled = false;
    return std::move(c.launches);
}

namespace internal {

void beginLaunchCount(const void* kernel, dim3 grid, dim3 block, std::size_t dynamicShared, const void* shared,
                      const void* staticBegin, const void* staticEnd)
{
    std::lock_guard lock(counterMutex);
    Counter& c = counter();
    if (!c.enabled)
        return;
    c.regions.clear();
    for (const auto& [begin, bytes] : deviceAllocations())
        c.regions.push_back(Region{begin, begin + bytes, {}, {}});
    c.sharedBegin = reinterpret_cast<std::uintptr_t>(shared);
    c.sharedEnd = c.sharedBegin + dynamicShared;
    c.staticBegin = reinterpret_cast<std::uintptr_t>(staticBegin);
    c.staticEnd = reinterpret_cast<std::uintptr_t>(staticEnd);
    c.current = LaunchBytes{};
    c.current.kernel = kernel;
    c.current.grid[0] = grid.x, c.current.grid[1] = grid.y, c.current.grid[2] = grid.z;
    c.current.block[0] = block.x, c.current.block[1] = block.y, c.current.block[2] = block.z;
    c.current.dynamicShared = dynamicShared;
    c.active = true;
}

void endLaunchCount()
{
    std::lock_guard lock(counterMutex);
    Counter& c = counter();
    if (!c.active)
        return;
    c.active = false;
    c.launches.push_back(c.current);
    c.regions.clear();
}

} // namespace internal

} // namespace gsrq::emulator

// ---- the instrumentation's hooks ------------------------------------------------------------------
// GCC and Clang call these (with -fsanitize=thread) before each access of the instrumented code.
// Only where the build instruments the kernels for counting: a ThreadSanitizer build's runtime
// defines them itself, and these would take its race detection's place.

#if defined(GSRQ_EMULATOR_BYTE_COUNTS)
extern "C" {

#define GSRQ_EMU_ACCESS(n)                                                                                             \
    void __tsan_read##n(void* p)                                                                                       \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, false);                                                                             \
    }                                                                                                                  \
    void __tsan_write##n(void* p)                                                                                      \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, true);                                                                              \
    }                                                                                                                  \
    void __tsan_unaligned_read##n(void* p)                                                                             \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, false);                                                                             \
    }                                                                                                                  \
    void __tsan_unaligned_write##n(void* p)                                                                            \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, true);                                                                              \
    }                                                                                                                  \
    void __tsan_volatile_read##n(void* p)                                                                              \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, false);                                                                             \
    }                                                                                                                  \
    void __tsan_volatile_write##n(void* p)                                                                             \
    {                                                                                                                  \
        gsrq::emulator::note(p, n, true);                                                                              \
    }
GSRQ_EMU_ACCESS(1)
GSRQ_EMU_ACCESS(2)
GSRQ_EMU_ACCESS(4)
GSRQ_EMU_ACCESS(8)
GSRQ_EMU_ACCESS(16)
#undef GSRQ_EMU_ACCESS

void __tsan_read_range(void* p, unsigned long n)
{
    gsrq::emulator::note(p, n, false);
}
void __tsan_write_range(void* p, unsigned long n)
{
    gsrq::emulator::note(p, n, true);
}
void* __tsan_memcpy(void* to, const void* from, unsigned long n)
{
    gsrq::emulator::note(from, n, false);
    gsrq::emulator::note(to, n, true);
    return std::memcpy(to, from, n);
}
void* __tsan_memmove(void* to, const void* from, unsigned long n)
{
    gsrq::emulator::note(from, n, false);
    gsrq::emulator::note(to, n, true);
    return std::memmove(to, from, n);
}
void* __tsan_memset(void* to, int value, unsigned long n)
{
    gsrq::emulator::note(to, n, true);
    return std::memset(to, value, n);
}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_init() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

} // extern "C"
#endif
