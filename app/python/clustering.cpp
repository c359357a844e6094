// gsrq.kmeans, gsrq.gskm, gsrq.metrics and gsrq.gradient_weights.

#include "app/python/binding.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

namespace gsrq::python {

using namespace nb::literals;

namespace {

struct PyClusterResult {
    nb::object centroids, labels;
    nb::list history;
    std::string stop;
    int iterations = 0;
    double seconds = 0;
};

PyClusterResult runCluster(Method method, const InRows& xa, int k, int iterations, std::uint64_t seed,
                           const std::optional<InVector>& weights, bool reseedEmpty, nb::object progress, int threads,
                           bool exactBounds)
{
    const auto x = rowsOf(xa, "x");
    const float* w = weightsOf(weights, x.rows());
    if (iterations < 0)
        throwInvalid("iterations ", iterations, ": must be ≥ 0");
    ClusteringParams p;
    p.k = k;
    p.maxIterations = iterations;
    p.seed = seed;
    p.reseedEmpty = reseedEmpty;
    Poller poller(std::move(progress));
    ClusteringResult r;
    {
        nb::gil_scoped_release release;
        auto backend = makeCpuBackend(threads);
        backend->setExactBounds(exactBounds);
        r = cluster(x, w, method, p, *backend, poller.iterationFn());
    }
    poller.rethrow();
    PyClusterResult out;
    out.centroids = nb::cast(ownedMatrix(std::move(r.centroids)));
    const std::size_t n = r.labels.size();
    out.labels = nb::cast(owned(std::move(r.labels), {n}));
    for (const auto& h : r.history)
        out.history.append(iterationDict(h));
    out.stop = stopReasonName(r.stop);
    out.iterations = r.iterations;
    out.seconds = r.seconds;
    return out;
}

} // namespace

void bindClustering(nb::module_& m)
{
    nb::class_<PyClusterResult>(m, "ClusterResult")
        .def_ro("centroids", &PyClusterResult::centroids)
        .def_ro("labels", &PyClusterResult::labels)
        .def_ro("history", &PyClusterResult::history)
        .def_ro("stop", &PyClusterResult::stop)
        .def_ro("iterations", &PyClusterResult::iterations)
        .def_ro("seconds", &PyClusterResult::seconds);
    for (const auto& [name, method] : {std::pair{"kmeans", Method::KMeans}, std::pair{"gskm", Method::GainShape}})
        m.def(
            name,
            [method](const InRows& x, int k, int iterations, std::uint64_t seed, std::optional<InVector> weights,
                     bool reseedEmpty, nb::object progress, int threads, bool exactBounds) {
                return runCluster(method, x, k, iterations, seed, weights, reseedEmpty, std::move(progress), threads,
                                  exactBounds);
            },
            "x"_a, "k"_a, nb::kw_only(), "iterations"_a = 50, "seed"_a = 0, "weights"_a = nb::none(),
            "reseed_empty"_a = false, "progress"_a = nb::none(), "threads"_a = 0, "exact_bounds"_a = true);

    m.def(
        "metrics",
        [](const InRows& x, const InRows& xhat) {
            const auto a = rowsOf(x, "x");
            const auto b = rowsOf(xhat, "xhat");
            if (a.rows() != b.rows() || a.cols() != b.cols())
                throwInvalid("xhat: shape (", b.rows(), ", ", b.cols(), ") differs from x's (", a.rows(), ", ",
                             a.cols(), ")");
            return metricsDict(computeMetrics(a, b));
        },
        "x"_a, "xhat"_a);
    m.def(
        "gradient_weights",
        [](const InRows& grad, const std::string& mode, double tau) {
            const WeightMode wm = weightModeOf(mode);
            const MatrixRF g = rowsOf(grad, "grad");
            Eigen::VectorXf w = wm == WeightMode::None ? Eigen::VectorXf::Ones(g.rows()) : gradientWeights(g, wm, tau);
            return owned(std::vector<float>(w.data(), w.data() + w.size()), {std::size_t(w.size())});
        },
        "grad"_a, "mode"_a = "grad-log", "tau"_a = 1.0);
}

} // namespace gsrq::python
