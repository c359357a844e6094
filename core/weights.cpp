#include "weights.h"

#include "error.h"

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
    }
    return "?";
}

double median(Eigen::VectorXd v)
{
    if (v.size() == 0)
        return 0;
    const auto mid = v.size() / 2;
    std::nth_element(v.data(), v.data() + mid, v.data() + v.size());
    double m = v[mid];
    if (v.size() % 2 == 0)
        m = (m + *std::max_element(v.data(), v.data() + mid)) / 2;
    return m;
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

} // namespace gsrq
