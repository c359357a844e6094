#pragma once
// Lloyd's update for one cluster, written once for every backend: the CPU calls it from core
// (clustering.cpp), the CUDA backend from a kernel (a warp per cluster, from its steps) so its centroids never
// leave the device. Plain C++ over raw arrays, no Eigen and nothing of the standard library a device
// lacks, so nvcc, the CUDA emulator and the host compiler build the same text.
//
// Same inputs, same bits on every backend: each sum runs in index order, and every product that
// meets a sum is an explicit fma(), correctly rounded everywhere. (Compilers may otherwise contract
// a·b + c into an FMA on one target and not on another.)
//
//   KM:    c = Sx / W                                  (W = 0: the centroid is kept)
//   EMA:   W̄ = γ·W̄ + W, S̄ = γ·S̄ + Sx, c = S̄ / W̄        (W̄ = 0: kept)
//   GSKM:  s = Sy / ‖Sy‖ (kept where ‖Sy‖/W ≤ shapeEpsilon), g = max(0, Sx·s / W), c = g·s

#include <cmath>

#if defined(__CUDACC__) // the emulator runs kernels as host code: plain functions serve it
#define GSRQ_HOST_DEVICE __host__ __device__
#else
#define GSRQ_HOST_DEVICE
#endif

namespace gsrq::update {

enum class Rule : int { Mean = 0, Ema = 1, GainShape = 2 };

struct Params {
    Rule rule = Rule::Mean;
    double shapeEpsilon = 1e-6; // GainShape
    double emaDecay = 0;        // Ema: γ in (0, 1)
};

// The update's steps, so that a backend can run a cluster's columns in parallel (the CUDA backend: a
// warp per cluster) and still give cluster()'s bits: the column steps are the same operations, and
// the sums run in index order in one thread.
GSRQ_HOST_DEVICE inline double sumOfSquares(const double* v, int d) // Σ v_j², in index order
{
    double s = 0;
    for (int j = 0; j < d; ++j)
        s = fma(v[j], v[j], s);
    return s;
}
GSRQ_HOST_DEVICE inline double dotProduct(const double* a, const double* b, int d) // Σ a_j·b_j, in index order
{
    double s = 0;
    for (int j = 0; j < d; ++j)
        s = fma(a[j], b[j], s);
    return s;
}
GSRQ_HOST_DEVICE inline double emaWeightStep(const Params& p, double emaWeight, double W)
{
    return fma(p.emaDecay, emaWeight, W);
}
GSRQ_HOST_DEVICE inline double emaSumStep(const Params& p, double emaSum, double sx)
{
    return fma(p.emaDecay, emaSum, sx);
}
GSRQ_HOST_DEVICE inline float ratio(double sum, double weight)
{
    return float(sum / weight);
}
// GSKM: whether the shape moves to Sy/‖Sy‖ (else it keeps the old one), and the new gain.
GSRQ_HOST_DEVICE inline bool shapeMoves(const Params& p, double norm, double W)
{
    return norm / W > p.shapeEpsilon;
}
GSRQ_HOST_DEVICE inline double gainOf(double dot, double W)
{
    return fmax(0.0, dot / W);
}
GSRQ_HOST_DEVICE inline float gainShapeColumn(double gain, double shape)
{
    return float(gain * shape);
}

// One cluster of width d. W, sx (d), sy (d; GainShape only): the pass's sums. emaWeight, emaSum (d):
// the running sums (Ema only). gain, shape (d): GSKM's state (GainShape only). c (d): the centroid,
// updated in place.
GSRQ_HOST_DEVICE inline void cluster(const Params& p, int d, double W, const double* sx, const double* sy,
                                     double* emaWeight, double* emaSum, double* gain, double* shape, float* c)
{
    if (p.rule == Rule::Ema) {
        *emaWeight = emaWeightStep(p, *emaWeight, W);
        for (int j = 0; j < d; ++j)
            emaSum[j] = emaSumStep(p, emaSum[j], sx[j]);
        if (*emaWeight > 0)
            for (int j = 0; j < d; ++j)
                c[j] = ratio(emaSum[j], *emaWeight);
        return;
    }
    if (!(W > 0))
        return; // an empty (or zero-weight) cluster keeps its centroid
    if (p.rule == Rule::Mean) {
        for (int j = 0; j < d; ++j)
            c[j] = ratio(sx[j], W);
        return;
    }
    const double norm = sqrt(sumOfSquares(sy, d));
    if (shapeMoves(p, norm, W))
        for (int j = 0; j < d; ++j)
            shape[j] = sy[j] / norm;
    *gain = gainOf(dotProduct(sx, shape, d), W);
    for (int j = 0; j < d; ++j)
        c[j] = gainShapeColumn(*gain, shape[j]);
}

// ‖c‖² of a centroid as every backend's assignment takes it for its bias (the CPU's kernels, the CUDA
// backend's passes): summed in double in index order, rounded once, so the backends score alike.
GSRQ_HOST_DEVICE inline float squaredNorm(const float* c, int d)
{
    double s = 0;
    for (int j = 0; j < d; ++j)
        s = fma(double(c[j]), double(c[j]), s);
    return float(s);
}

} // namespace gsrq::update
