#pragma once
// What the CPU and the operating system let the engine's vector kernels use, from CPUID and XGETBV
// (the compilers' own feature tests differ: clang before 18 knows no "f16c"). All false off x86-64.

namespace gsrq {

struct CpuFeatures {
    bool avx2 = false;       // AVX2, FMA and F16C, with the YMM state saved by the OS
    bool avx512 = false;     // and AVX-512 F, BW, VL and DQ, with the ZMM state saved
    bool avx512vnni = false; // and AVX-512 VNNI (8-bit integer dot products into 32-bit lanes)
};

// Read once, then cached.
const CpuFeatures& cpuFeatures();

} // namespace gsrq
