#include "gpu/cluster/gpu_check.h"

#include "core/base/error.h"
#include "core/cluster/clustering.h"
#include "core/cluster/quantizer.h"
#include "core/io/synth.h"

#include <algorithm>
#include <cmath>

namespace gsrq::gpu {

namespace {

double relDiff(double a, double b)
{
    const double scale = std::max(std::abs(a), std::abs(b));
    return scale > 0 ? std::abs(a - b) / scale : 0.0;
}

// Seeded positive weights with the spread of log-gradient weights (a factor ~50 max/median).
std::vector<float> syntheticWeights(std::int64_t n)
{
    const MatrixRF g = synthesize(SynthKind::Gaussian, n, 1, 77);
    std::vector<float> w(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        w[std::size_t(i)] = std::exp(1.3f * g(i, 0));
    return w;
}

} // namespace

bool GpuCheckReport::pass() const
{
    return !items.empty() && devicePasses > 0 &&
           std::all_of(items.begin(), items.end(), [](const CheckItem& c) { return c.pass(); });
}

GpuCheckReport runGpuCheck(const CudaOptions& options, const std::function<void(const std::string&)>& log)
{
    GpuCheckReport rep;
    auto gpu = makeCudaBackend(options);
    auto cpu = makeCpuBackend(0);
    rep.device = gpu->device();
    auto add = [&](CheckItem c) {
        if (log)
            log(cat(c.pass() ? (c.informational ? "info" : "ok  ") : "FAIL", "  ", c.name, ": ", c.value,
                    c.lowerIsBetter ? " ≤ " : " ≥ ", c.limit, c.detail.empty() ? "" : "  (" + c.detail + ")"));
        rep.items.push_back(std::move(c));
    };

    // 1. One pass from the same centroids: labels and statistics. Near-ties may flip (the GEMMs
    // round differently), so labels need 99.9% agreement; sums over rows in double from float
    // inputs and float scores: objective within 1e-4 relative.
    const std::int64_t n = 50000;
    const int d = 64, K = 256;
    const MatrixRF X = synthesize(SynthKind::KvLike, n, d, 11);
    const std::vector<float> w = syntheticWeights(n);
    {
        const auto rows = sampleRows(n, K, 3);
        MatrixRF C(K, d);
        for (int k = 0; k < K; ++k)
            C.row(k) = X.row(rows[std::size_t(k)]);
        std::vector<std::int32_t> lc(std::size_t(n), -1), lg(std::size_t(n), -1);
        AssignStats sc, sg;
        cpu->setData(X.data(), n, d, w.data(), 1e-8f);
        cpu->assignAccumulate(C, true, lc, sc);
        gpu->setData(X.data(), n, d, w.data(), 1e-8f);
        gpu->assignAccumulate(C, true, lg, sg);
        std::int64_t same = 0;
        for (std::size_t i = 0; i < lc.size(); ++i)
            same += lc[i] == lg[i];
        add({"assignment labels agree", double(same) / double(n), 0.999, false, false,
             cat(n, " rows, K=", K, ", D=", d, ", weighted")});
        add({"assignment objective", relDiff(sc.weightedError, sg.weightedError), 1e-4, true, false, "relative"});
        add({"assignment Σw‖x‖²", relDiff(sc.weightedSquaredNorm, sg.weightedSquaredNorm), 1e-6, true, false,
             "relative; float norms summed in double"});
        double worst = 0;
        for (int k = 0; k < K; ++k)
            worst = std::max(worst, relDiff(sc.weightSum[k], sg.weightSum[k]));
        add({"cluster weights", worst, 1e-2, true, false,
             "worst relative difference of one cluster's Σw; flipped rows move weight"});
    }

    // 2. Whole clusterings, seeded: the objective after every iteration.
    for (Method m : {Method::KMeans, Method::GainShape}) {
        ClusteringParams p;
        p.k = K;
        p.maxIterations = 15;
        p.seed = 5;
        const auto a = cluster(X, w.data(), m, p, *cpu);
        const auto b = cluster(X, w.data(), m, p, *gpu);
        double worst = 0;
        const std::size_t iters = std::min(a.history.size(), b.history.size());
        for (std::size_t i = 0; i < iters; ++i)
            worst = std::max(worst, relDiff(a.history[i].objective, b.history[i].objective));
        add({cat(methodName(m), " objective per iteration"), worst, 1e-4, true, false,
             cat(iters, " iterations; worst relative difference")});
        std::int64_t same = 0;
        for (std::size_t i = 0; i < a.labels.size(); ++i)
            same += a.labels[i] == b.labels[i];
        add({cat(methodName(m), " final labels agree"), double(same) / double(n), 0.999, false, false, ""});
    }

    // 3. The streamed layout (rows on the host, chunks copied in) gives the resident results.
    {
        CudaOptions so = options;
        so.forceStreamed = true;
        auto streamed = makeCudaBackend(so);
        ClusteringParams p;
        p.k = K;
        p.maxIterations = 5;
        p.seed = 9;
        const auto a = cluster(X, nullptr, Method::GainShape, p, *gpu);
        const auto b = cluster(X, nullptr, Method::GainShape, p, *streamed);
        add({"streamed vs resident objective", relDiff(a.history.back().objective, b.history.back().objective), 1e-6,
             true, false, "same kernels, rows copied per chunk"});
        if (const auto* st = cudaStats(*streamed))
            rep.devicePasses += st->devicePasses;
    }

    // 4. A whole GSRQ training, GSKM with weights: held to 0.5% NMSE of the CPU run.
    {
        const MatrixRF T = synthesize(SynthKind::KvLike, 20000, 128, 21);
        const std::vector<float> tw = syntheticWeights(20000);
        RqSettings s;
        s.dim = 32;
        s.stages = 4;
        s.k = 64;
        s.iterations = 10;
        s.seed = 1;
        const auto a = trainResidualQuantizer(T, tw.data(), s, *cpu);
        const auto b = trainResidualQuantizer(T, tw.data(), s, *gpu);
        add({"gsrq nmse", relDiff(a.metrics.nmse, b.metrics.nmse), 5e-3, true, false,
             cat("D=32 R=4 K=64 GSKM weighted; cpu ", a.metrics.nmse, ", gpu ", b.metrics.nmse)});
        add({"gsrq cosine", relDiff(a.metrics.cosine, b.metrics.cosine), 5e-3, true, false, ""});
        // The device's own metrics of its reconstruction equal the host's on the exported codes.
        const auto host = computeMetrics(T, decode(b.codes, b.codebooks));
        add({"device metrics vs decoded codes", relDiff(host.nmse, b.metrics.nmse), 1e-6, true, false,
             "float sums of the same codewords in the same order"});
    }

    // 5. TF32, when asked for: its accuracy, shown beside FP32 (not part of the verdict).
    if (options.tf32) {
        CudaOptions fo = options;
        fo.tf32 = false;
        auto fp32 = makeCudaBackend(fo);
        ClusteringParams p;
        p.k = K;
        p.maxIterations = 10;
        p.seed = 5;
        const auto a = cluster(X, nullptr, Method::GainShape, p, *fp32);
        const auto b = cluster(X, nullptr, Method::GainShape, p, *gpu);
        std::int64_t same = 0;
        for (std::size_t i = 0; i < a.labels.size(); ++i)
            same += a.labels[i] == b.labels[i];
        add({"tf32: labels agree with fp32", double(same) / double(n), 0.999, false, true, ""});
        add({"tf32: final objective vs fp32", relDiff(a.history.back().objective, b.history.back().objective), 1e-4,
             true, true, "relative"});
    }
    if (const auto* st = cudaStats(*gpu))
        rep.devicePasses += st->devicePasses;
    return rep;
}

} // namespace gsrq::gpu
