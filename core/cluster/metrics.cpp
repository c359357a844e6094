#include "core/cluster/metrics.h"

#include "core/base/error.h"

#include <cmath>

namespace gsrq {

namespace {

template <class Mat, class RowOf> QuantMetrics metricsOver(const Mat& X, RowOf xhatRow)
{
    const auto n = X.rows();
    double err = 0, sqX = 0, sqXhat = 0, gain = 0, cosSum = 0;
    std::int64_t cosRows = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
        const Eigen::RowVectorXd x = X.row(i).template cast<double>();
        const Eigen::RowVectorXd xh = xhatRow(i).template cast<double>();
        const double nx2 = x.squaredNorm(), nh2 = xh.squaredNorm();
        err += (x - xh).squaredNorm();
        sqX += nx2;
        sqXhat += nh2;
        const double nx = std::sqrt(nx2), nh = std::sqrt(nh2);
        gain += std::abs(nx - nh);
        if (nx > 0) {
            cosSum += nh > 0 ? x.dot(xh) / (nx * nh) : 0.0;
            ++cosRows;
        }
    }
    QuantMetrics m;
    if (n == 0)
        return m;
    m.mse = err / n;
    m.nmse = sqX > 0 ? err / sqX : 0.0;
    m.gainError = gain / n;
    m.cosine = cosRows ? cosSum / cosRows : 0.0;
    m.shrinkage = sqX > 0 ? sqXhat / sqX : 0.0;
    return m;
}

} // namespace

QuantMetrics computeMetrics(const Eigen::Ref<const MatrixRF>& X, const Eigen::Ref<const MatrixRF>& Xhat)
{
    if (X.rows() != Xhat.rows() || X.cols() != Xhat.cols())
        throwRuntime("metrics: data ", X.rows(), "×", X.cols(), " and reconstruction ", Xhat.rows(), "×", Xhat.cols(),
                     " differ in shape");
    return metricsOver(X, [&](Eigen::Index i) { return Xhat.row(i); });
}

QuantMetrics computeMetrics(const MatrixRF& X, const MatrixRF& C, std::span<const std::int32_t> labels)
{
    if (static_cast<Eigen::Index>(labels.size()) != X.rows() || C.cols() != X.cols())
        throwRuntime("metrics: ", labels.size(), " labels or codebook width ", C.cols(), " do not match data ",
                     X.rows(), "×", X.cols());
    return metricsOver(X, [&](Eigen::Index i) { return C.row(labels[static_cast<std::size_t>(i)]); });
}

std::array<std::pair<const char*, double>, 5> namedMetrics(const QuantMetrics& m)
{
    return {{{"mse", m.mse},
             {"nmse", m.nmse},
             {"gain_error", m.gainError},
             {"cosine", m.cosine},
             {"shrinkage", m.shrinkage}}};
}

double metricByName(const QuantMetrics& m, std::string_view name)
{
    for (const auto& [n, v] : namedMetrics(m))
        if (name == n)
            return v;
    return m.nmse;
}

QuantMetrics meanMetrics(const std::vector<QuantMetrics>& blocks)
{
    QuantMetrics m;
    if (blocks.empty())
        return m;
    for (const auto& b : blocks) {
        m.mse += b.mse;
        m.nmse += b.nmse;
        m.gainError += b.gainError;
        m.cosine += b.cosine;
        m.shrinkage += b.shrinkage;
    }
    const double n = static_cast<double>(blocks.size());
    m.mse /= n;
    m.nmse /= n;
    m.gainError /= n;
    m.cosine /= n;
    m.shrinkage /= n;
    return m;
}

int betterOf(std::string_view metric, double a, double b)
{
    if (!std::isfinite(a) || !std::isfinite(b))
        return 0;
    // How far each is from the ideal, in the metric's own direction.
    double ea = 0, eb = 0;
    if (metric == "cosine") {
        ea = -a;
        eb = -b;
    } else if (metric == "shrinkage") {
        ea = std::abs(1 - a);
        eb = std::abs(1 - b);
    } else if (metric == "mse" || metric == "nmse" || metric == "gain_error" || metric == "objective" ||
               metric == "seconds") {
        ea = a;
        eb = b;
    } else {
        return 0;
    }
    return eb < ea ? 1 : (ea < eb ? -1 : 0);
}

std::array<MetricDelta, 5> metricDeltas(const QuantMetrics& a, const QuantMetrics& b)
{
    const auto na = namedMetrics(a), nb = namedMetrics(b);
    std::array<MetricDelta, 5> out;
    for (std::size_t i = 0; i < out.size(); ++i) {
        MetricDelta& d = out[i];
        d.name = na[i].first;
        d.a = na[i].second;
        d.b = nb[i].second;
        d.delta = d.b - d.a;
        d.deltaPercent = d.a != 0 ? 100.0 * d.delta / std::abs(d.a) : std::nan("");
        d.better = betterOf(d.name, d.a, d.b);
    }
    return out;
}

} // namespace gsrq
