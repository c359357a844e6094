#include "core/base/cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define GSRQ_CPUID_X86 1
#else
#define GSRQ_CPUID_X86 0
#endif

namespace gsrq {

namespace {

CpuFeatures readFeatures()
{
    CpuFeatures f;
#if GSRQ_CPUID_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return f;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return f;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const bool ymm = (lo & 0x6u) == 0x6u, zmm = (lo & 0xE6u) == 0xE6u;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return f;
    f.avx2 = ymm && fma && f16c && (b & (1u << 5));
    f.avx512 = f.avx2 && zmm && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
    f.avx512vnni = f.avx512 && (c & (1u << 11));
#endif
    return f;
}

} // namespace

const CpuFeatures& cpuFeatures()
{
    static const CpuFeatures f = readFeatures();
    return f;
}

} // namespace gsrq
