#include "stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gsrq {

Histogram histogram(const std::vector<double>& values, int bins)
{
    Histogram h;
    if (values.empty() || bins < 1)
        return h;
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    const double span = std::max(*hi - *lo, 1e-300);
    h.counts.assign(std::size_t(bins), 0);
    for (double v : values)
        ++h.counts[std::size_t(std::clamp(int((v - *lo) / span * bins), 0, bins - 1))];
    for (int b = 0; b < bins; ++b)
        h.centres.push_back(*lo + (b + 0.5) * span / bins);
    return h;
}

TensorStats tensorStats(const MatrixRF& x)
{
    TensorStats s;
    s.rows = x.rows();
    s.features = x.cols();
    Eigen::VectorXd sumSq = Eigen::VectorXd::Zero(x.cols());
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        if (!x.row(i).allFinite()) {
            ++s.nonFiniteRows;
            continue;
        }
        const Eigen::RowVectorXd r = x.row(i).cast<double>();
        s.rowNorms.push_back(r.norm());
        sumSq += r.cwiseAbs2().transpose();
    }
    if (s.rowNorms.empty())
        return s;
    const double n = double(s.rowNorms.size());
    const auto [lo, hi] = std::minmax_element(s.rowNorms.begin(), s.rowNorms.end());
    s.normMin = *lo;
    s.normMax = *hi;
    s.normMean = std::accumulate(s.rowNorms.begin(), s.rowNorms.end(), 0.0) / n;
    for (Eigen::Index c = 0; c < x.cols(); ++c)
        s.channelRms.push_back(std::sqrt(sumSq[c] / n));
    return s;
}

} // namespace gsrq
