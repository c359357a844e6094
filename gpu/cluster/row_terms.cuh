#pragma once
// What every assignment kernel writes for a row once its label is chosen (the argmax after the GEMM,
// and the fused score-and-argmax kernel): the label, the objective's terms and the row metrics'
// terms, as launchArgmaxRows (cluster_kernels.h) describes them. Internal to gsrq_gpu.

#include "gpu/cluster/cluster_kernels.h"

#include <cstdint>

namespace gsrq::gpu::kernels {

// The member a block of a batched launch takes (Members): active[z], or 0 for a single-block launch.
__device__ inline int memberAt(const Members& members, unsigned z)
{
    return members.active ? members.active[z] : 0;
}

// The per-row outputs of one member of a batched launch (Members), its pointers moved to the member.
struct RowOutputs {
    const float* sq;
    std::int32_t* labels;
    double *err, *sqw, *wt, *changed;
    RowMetricTerms metrics;
};

__device__ inline RowOutputs memberRowOutputs(const float* sq, std::int32_t* labels, double* err, double* sqw,
                                              double* wt, double* changed, RowMetricTerms metrics, std::int64_t ro)
{
    if (metrics.gain) {
        metrics.gain += ro;
        metrics.cosine += ro;
        metrics.cosineRow += ro;
        metrics.squaredNorm += ro;
    }
    return {sq + ro, labels + ro, err + ro, sqw + ro, wt + ro, changed + ro, metrics};
}

// Row g's terms for its best score best = 2x·c − ‖c‖² at `label` (K when every score was −inf or
// NaN: then label 0; the data is checked finite before). cNorm: the member's ‖c‖²; w: the weights
// (every member's) or null for ones.
__device__ inline void writeRowTerms(const RowOutputs& o, float best, int label, int K, const float* cNorm,
                                     const float* w, std::int64_t g)
{
    if (label >= K)
        label = 0;
    const double wi = w ? double(w[g]) : 1.0;
    const double n2 = double(o.sq[g]);
    o.err[g] = wi * fmax(0.0, n2 - double(best));
    o.sqw[g] = wi * n2;
    o.wt[g] = wi;
    o.changed[g] = o.labels[g] != label ? 1.0 : 0.0;
    o.labels[g] = label;
    if (o.metrics.gain) {
        // x·c from the score: 2x·c − ‖c‖² = best.
        const double nc2 = double(cNorm[label]);
        const double nx = sqrt(n2), nc = sqrt(nc2);
        o.metrics.gain[g] = fabs(nx - nc);
        o.metrics.cosine[g] = nx > 0 && nc > 0 ? fmin(1.0, fmax(-1.0, 0.5 * (double(best) + nc2) / (nx * nc))) : 0.0;
        o.metrics.cosineRow[g] = nx > 0 ? 1.0 : 0.0;
        o.metrics.squaredNorm[g] = n2;
    }
}

// The better of two (score, label) candidates: the higher score, the lower label among equal ones
// (the CPU's first maximum).
__device__ __forceinline__ bool betterCandidate(float score, int label, float best, int bestLabel)
{
    return score > best || (score == best && label < bestLabel);
}

} // namespace gsrq::gpu::kernels
