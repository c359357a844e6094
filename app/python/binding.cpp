// What the binding's files share (binding.h).

#include "app/python/binding.h"

namespace gsrq::python {

OutArray<float> ownedMatrix(MatrixRF&& m)
{
    auto* heap = new MatrixRF(std::move(m));
    nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<MatrixRF*>(p); });
    const std::size_t shape[2] = {std::size_t(heap->rows()), std::size_t(heap->cols())};
    return OutArray<float>(heap->data(), 2, shape, owner);
}

// Rows as the engine reads them, in place; checked as the CLI checks a dump's tensor.
Eigen::Map<const MatrixRF> rowsOf(const InRows& a, const char* what)
{
    if (a.shape(0) == 0 || a.shape(1) == 0)
        throwInvalid(what, ": empty array of shape (", a.shape(0), ", ", a.shape(1), ")");
    Eigen::Map<const MatrixRF> x(a.data(), Eigen::Index(a.shape(0)), Eigen::Index(a.shape(1)));
    for (Eigen::Index i = 0; i < x.rows(); ++i)
        if (!x.row(i).allFinite())
            throwInvalid(what, ": row ", i, " holds NaN or Inf");
    return x;
}

const float* weightsOf(const std::optional<InVector>& w, std::int64_t rows, const char* what)
{
    if (!w)
        return nullptr;
    if (std::int64_t(w->shape(0)) != rows)
        throwInvalid(what, ": ", w->shape(0), " values for ", rows, " rows");
    return w->data();
}

nb::dict metricsDict(const QuantMetrics& m)
{
    nb::dict d;
    for (const auto& [name, value] : namedMetrics(m))
        d[name] = value;
    return d;
}

nb::dict iterationDict(const IterationStats& s)
{
    nb::dict d;
    d["iteration"] = s.iteration;
    d["objective"] = s.objective;
    d["nmse"] = s.nmse;
    d["cosine"] = s.cosine;
    d["gain_error"] = s.gainError;
    d["shrinkage"] = s.shrinkage;
    d["changed"] = s.changed;
    d["skipped"] = s.skipped;
    d["empty_clusters"] = s.emptyClusters;
    d["seconds"] = s.seconds;
    return d;
}

WeightMode weightModeOf(const std::string& name, const char* what)
{
    const auto m = weightModeFromName(name);
    if (!m)
        throwInvalid(what, " '", name, "': expected none, grad-raw, grad-log or grad-sq");
    return *m;
}

} // namespace gsrq::python
