#include "core/cluster/weights.h"

#include "core/base/error.h"
#include "core/base/stats.h"

#include <algorithm>
#include <cmath>

namespace gsrq {

std::optional<WeightMode> weightModeFromName(const std::string& s)
{
    if (s == "none")
        return WeightMode::None;
    if (s == "grad-raw")
        return WeightMode::GradRaw;
    if (s == "grad-log")
        return WeightMode::GradLog;
    if (s == "grad-sq")
        return WeightMode::GradSq;
    return std::nullopt;
}

const char* weightModeName(WeightMode m)
{
    switch (m) {
    case WeightMode::None:
        return "none";
    case WeightMode::GradRaw:
        return "grad-raw";
    case WeightMode::GradLog:
        return "grad-log";
    case WeightMode::GradSq:
        return "grad-sq";
    }
    return "?";
}

Eigen::VectorXd weightsFromNorms(const Eigen::VectorXd& norms, WeightMode mode, double tau, WeightSummary* summary,
                                 double epsilon)
{
    if (!(tau > 0) || !std::isfinite(tau))
        throwInvalid("tau = ", tau, ": must be a positive number");
    Eigen::VectorXd w;
    WeightSummary s;
    s.rawMax = norms.size() ? norms.maxCoeff() : 0;
    s.rawMedian = median(norms);
    switch (mode) {
    case WeightMode::None:
        w = Eigen::VectorXd::Ones(norms.size());
        break;
    case WeightMode::GradRaw:
        w = norms;
        break;
    case WeightMode::GradLog:
        s.lambda = tau / (s.rawMedian + epsilon);
        w = (1.0 + s.lambda * norms.array()).log().matrix();
        break;
    case WeightMode::GradSq:
        w = norms.array().square().matrix();
        break;
    }
    s.weightMax = w.size() ? w.maxCoeff() : 0;
    s.weightMedian = median(w);
    if (summary)
        *summary = s;
    return w;
}

Eigen::VectorXf gradientWeights(const MatrixRF& grad, WeightMode mode, double tau, WeightSummary* summary,
                                double epsilon)
{
    return weightsFromNorms(grad.cast<double>().rowwise().norm(), mode, tau, summary, epsilon).cast<float>();
}

Eigen::VectorXf weightsFor(const KvDump& dump, const KvTensor& t, const LoadedTensor& loaded, WeightMode mode,
                           double tau, WeightSummary* summary)
{
    if (mode == WeightMode::None)
        return {};
    const KvTensor* g = dump.gradientOf(t);
    if (!g)
        throwInvalid("--weights ", weightModeName(mode), ": ", dump.path(), " has no gradient for '", t.view.name,
                     "' (expected layers.L.key_grad or layers.L.value_grad)");
    if (g->view.rows() != t.view.rows())
        throwInvalid(g->view.where(), ": has ", g->view.rows(), " rows but '", t.view.name, "' has ", t.view.rows());
    MatrixRF grad = toMatrix(g->view);
    if (!loaded.droppedRows.empty())
        grad = dropRows(grad, loaded.droppedRows);
    const auto bad = nonFiniteRows(grad);
    if (!bad.empty())
        throwInvalid(g->view.where(), ": ", bad.size(), " rows hold NaN or Inf (first: row ", bad.front(), ")");
    return gradientWeights(grad, mode, tau, summary);
}

} // namespace gsrq
