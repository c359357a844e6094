// The lookup path's tables from the append's FP16 key panels (cpu_panel_kernels.h).
#include "core/decode/cpu_panel_kernels.h"

#include "core/base/cpu_features.h"

#include <cstddef>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define GSRQ_PANELS_X86 1
#define GSRQ_PANELS_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define GSRQ_PANELS_X86 0
#endif

namespace gsrq::cpudecode {

namespace {

constexpr int kLanes = 16; // codewords per panel group, floats per register

#if GSRQ_PANELS_X86
#define GSRQ_PANELS_UNROLL _Pragma("GCC unroll 16")

// Groups in flight for G query heads: G × NG accumulators, at least 8 (two FMA units, four cycles
// each) where G allows, with NG panel rows and a broadcast within the 32 registers.
template <int G> constexpr int groupsInFlight()
{
    return G <= 4 ? 4 : G <= 6 ? 3 : 2;
}

// NG groups of 16 codewords, from group g0 of one (subspace, stage) panel, against the G query heads'
// D features (q: head g's at q + g·hd): each entry one chain of fused multiply-adds in feature order.
// T: the stage's K × Gp entries.
template <int G, int NG>
GSRQ_PANELS_AVX512 void panelGroups(const float* q, int hd, int D, int Gp, const std::uint16_t* panel, int g0, float* T)
{
    __m512 acc[NG][G];
    GSRQ_PANELS_UNROLL
    for (int j = 0; j < NG; ++j) {
        GSRQ_PANELS_UNROLL
        for (int g = 0; g < G; ++g)
            acc[j][g] = _mm512_setzero_ps();
    }
    for (int f = 0; f < D; ++f) {
        __m512 c[NG];
        GSRQ_PANELS_UNROLL
        for (int j = 0; j < NG; ++j)
            c[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                panel + (std::size_t(g0 + j) * std::size_t(D) + std::size_t(f)) * kLanes)));
        GSRQ_PANELS_UNROLL
        for (int g = 0; g < G; ++g) {
            const __m512 qb = _mm512_set1_ps(q[std::size_t(g) * std::size_t(hd) + std::size_t(f)]);
            GSRQ_PANELS_UNROLL
            for (int j = 0; j < NG; ++j)
                acc[j][g] = _mm512_fmadd_ps(qb, c[j], acc[j][g]);
        }
    }
    alignas(64) float lanes[G][kLanes];
    GSRQ_PANELS_UNROLL
    for (int j = 0; j < NG; ++j) {
        GSRQ_PANELS_UNROLL
        for (int g = 0; g < G; ++g)
            _mm512_store_ps(lanes[g], acc[j][g]);
        float* t = T + std::size_t(g0 + j) * kLanes * std::size_t(Gp);
        for (int k = 0; k < kLanes; ++k) {
            GSRQ_PANELS_UNROLL
            for (int g = 0; g < G; ++g)
                t[k * Gp + g] = lanes[g][k];
            for (int g = G; g < Gp; ++g)
                t[k * Gp + g] = 0.f;
        }
    }
}

template <int G>
GSRQ_PANELS_AVX512 void tablesGroup(const HeadDims& d, const float* q, const std::uint16_t* const* panels, float* T)
{
    constexpr int NG = groupsInFlight<G>();
    const int groups = d.K / kLanes;
    const std::size_t stage = std::size_t(d.K) * std::size_t(d.Gp);
    for (int p = 0; p < d.P; ++p)
        for (int r = 0; r < d.R; ++r) {
            const std::uint16_t* panel = panels[p * d.R + r];
            const float* qp = q + std::size_t(p) * std::size_t(d.D);
            float* Tr = T + (std::size_t(p) * std::size_t(d.R) + std::size_t(r)) * stage;
            int g0 = 0;
            for (; g0 + NG <= groups; g0 += NG)
                panelGroups<G, NG>(qp, d.hd, d.D, d.Gp, panel, g0, Tr);
            for (; g0 < groups; ++g0)
                panelGroups<G, 1>(qp, d.hd, d.D, d.Gp, panel, g0, Tr);
        }
}

template <int... I>
void dispatchTables(int G, std::integer_sequence<int, I...>, const HeadDims& d, const float* q,
                    const std::uint16_t* const* panels, float* T)
{
    ((G == I + 1 ? (tablesGroup<I + 1>(d, q, panels, T), true) : false) || ...);
}

#endif

} // namespace

bool panelKernelsRun(const HeadDims& d)
{
    return GSRQ_PANELS_X86 && cpuFeatures().avx512 && d.K >= kLanes && d.K % kLanes == 0 && d.G >= 1 && d.G <= 8;
}

void tablesFromPanels(const HeadDims& d, const float* q, const std::uint16_t* const* panels, float* T)
{
#if GSRQ_PANELS_X86
    dispatchTables(d.G, std::make_integer_sequence<int, 8>{}, d, q, panels, T);
#else
    (void)d, (void)q, (void)panels, (void)T;
#endif
}

} // namespace gsrq::cpudecode
