#include "core/io/tensor_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gsrq {

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
