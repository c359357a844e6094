#include "core/jobs/compare_job.h"

#include "core/base/error.h"

#include <algorithm>

namespace gsrq {

const MethodResult* CompareResult::find(Method m) const
{
    for (const auto& r : methods)
        if (r.method == m)
            return &r;
    return nullptr;
}

void validateCompare(const CompareSettings& s, std::int64_t rows, std::int64_t features)
{
    const std::int64_t D = s.dim == 0 ? features : s.dim;
    if (D < 1)
        throwInvalid("--dim ", s.dim, ": must be a positive number of features");
    if (features % D != 0)
        throwInvalid("--dim ", D, " does not divide the ", features, " features of the tensor (divisors of ", features,
                     " work)");
    if (s.k < 1)
        throwInvalid("--k ", s.k, ": needs at least one codeword");
    if (s.k > rows)
        throwInvalid("--k ", s.k, " is larger than the ", rows, " rows of the tensor");
    if (s.iterations < 0)
        throwInvalid("--iters ", s.iterations, ": must be ≥ 0");
    if (s.methods.empty())
        throwInvalid("--methods: name at least one of km, gskm");
}

namespace {

struct JobProgress {
    const ProgressFn& fn;
    double done = 0;  // units finished
    double total = 1; // units in the whole job
    bool cancelled = false;

    int sweepPoint = -1;

    bool report(const std::string& what, const IterationStats& it, double unitsInStep, Method method, int block,
                int stage)
    {
        if (!fn)
            return true;
        ProgressEvent e{
            what, std::min(1.0, (done + unitsInStep) / total), it, {}, method, block, stage, sweepPoint, std::nullopt};
        if (!fn(e))
            cancelled = true;
        return !cancelled;
    }
};

CompareResult compareImpl(const MatrixRF& X, const float* weights, const CompareSettings& s, ClusterBackend& backend,
                          JobProgress& jp)
{
    validateCompare(s, X.rows(), X.cols());
    const int D = s.dim == 0 ? static_cast<int>(X.cols()) : s.dim;
    const int M = static_cast<int>(X.cols() / D);
    CompareResult out;
    out.dim = D;
    out.blocks = M;
    for (auto m : s.methods)
        out.methods.push_back(MethodResult{m, {}, 0, 0, 0, {}});

    ClusteringParams p;
    p.k = s.k;
    p.maxIterations = s.iterations;
    p.seed = s.seed;
    p.reseedEmpty = s.reseedEmpty;
    const double unitsPerRun = std::max(1, s.iterations);
    // A clustering's share of the job is done at its last pass, also when it converges early.
    const auto stepUnits = [&](const IterationStats& it) {
        return it.last ? unitsPerRun : std::min<double>(it.iteration, unitsPerRun);
    };

    for (int b = 0; b < M && !jp.cancelled; ++b) {
        MatrixRF block = X.middleCols(static_cast<Eigen::Index>(b) * D, D);
        if (s.residual) {
            const std::string what = cat("block ", b + 1, "/", M, " km (1st stage)");
            auto first = cluster(block, weights, Method::KMeans, p, backend, [&](const IterationStats& it) {
                return jp.report(what, it, stepUnits(it), Method::KMeans, b, 0);
            });
            jp.done += unitsPerRun;
            if (first.stop == StopReason::Cancelled)
                break;
            for (Eigen::Index i = 0; i < block.rows(); ++i)
                block.row(i) -= first.centroids.row(first.labels[static_cast<std::size_t>(i)]);
        }
        for (auto& mr : out.methods) {
            const std::string what = cat("block ", b + 1, "/", M, " ", methodName(mr.method));
            auto r = cluster(block, weights, mr.method, p, backend, [&](const IterationStats& it) {
                return jp.report(what, it, stepUnits(it), mr.method, b, s.residual ? 1 : -1);
            });
            jp.done += unitsPerRun;
            BlockResult br;
            br.block = b;
            br.metrics = computeMetrics(block, r.centroids, r.labels);
            br.iterations = r.iterations;
            br.stop = r.stop;
            br.seconds = r.seconds;
            br.history = std::move(r.history);
            mr.blocks.push_back(std::move(br));
            if (r.stop == StopReason::Cancelled)
                break;
        }
    }
    out.cancelled = jp.cancelled;
    for (auto& mr : out.methods) {
        std::vector<QuantMetrics> per;
        for (const auto& br : mr.blocks) {
            per.push_back(br.metrics);
            mr.iterations = std::max(mr.iterations, br.iterations);
            mr.convergedBlocks += br.stop == StopReason::Converged;
            mr.seconds += br.seconds;
        }
        mr.metrics = meanMetrics(per);
    }
    return out;
}

double runsIn(const CompareSettings& s, std::int64_t features)
{
    const std::int64_t D = s.dim == 0 ? features : s.dim;
    const double blocks = D > 0 ? static_cast<double>(features / D) : 1.0;
    return blocks * (static_cast<double>(s.methods.size()) + (s.residual ? 1 : 0)) * std::max(1, s.iterations);
}

} // namespace

CompareResult runCompare(const MatrixRF& X, const float* weights, const CompareSettings& s, ClusterBackend& backend,
                         const ProgressFn& progress)
{
    JobProgress jp{progress};
    jp.total = runsIn(s, X.cols());
    return compareImpl(X, weights, s, backend, jp);
}

std::vector<SweepPoint> runSweep(const MatrixRF& X, const float* weights, const CompareSettings& base, SweepAxis axis,
                                 const std::vector<int>& values, ClusterBackend& backend, const ProgressFn& progress,
                                 const std::function<void(const SweepPoint&)>& onPoint)
{
    if (values.empty())
        throwInvalid("--values: give at least one value");
    std::vector<CompareSettings> all;
    for (int v : values) {
        CompareSettings s = base;
        (axis == SweepAxis::Dim ? s.dim : s.k) = v;
        validateCompare(s, X.rows(), X.cols()); // every point checked before any work starts
        all.push_back(s);
    }
    JobProgress jp{progress};
    jp.total = 0;
    for (const auto& s : all)
        jp.total += runsIn(s, X.cols());
    std::vector<SweepPoint> out;
    for (std::size_t i = 0; i < all.size() && !jp.cancelled; ++i) {
        jp.sweepPoint = int(i);
        out.push_back({values[i], compareImpl(X, weights, all[i], backend, jp)});
        if (onPoint && !out.back().result.cancelled)
            onPoint(out.back());
    }
    return out;
}

} // namespace gsrq
