#include "cluster_backend.h"

#include "error.h"

#include <algorithm>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gsrq {

int resolveThreads(int threads)
{
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_num_procs();
#else
    (void)threads;
    return 1;
#endif
}

namespace {

class CpuBackend final : public ClusterBackend {
public:
    explicit CpuBackend(int threads) : m_threads(resolveThreads(threads)) {}

    std::string name() const override { return "cpu"; }
    std::string device() const override { return cat(m_threads, m_threads == 1 ? " thread" : " threads"); }

    void setData(const float* x, std::int64_t n, int d, const float* weights, float epsilon) override
    {
        m_x = x;
        m_n = n;
        m_d = d;
        m_w = weights;
        Eigen::Map<const MatrixRF> X(x, n, d);
        m_sqNorm = X.rowwise().squaredNorm();
        m_invNorm = (m_sqNorm.array().sqrt() + epsilon).inverse();
    }

    void assignAccumulate(const MatrixRF& C, bool withShapeSums, std::span<std::int32_t> labels,
                          AssignStats& out) override
    {
        const int K = static_cast<int>(C.rows());
        const int D = m_d;
        if (C.cols() != D || static_cast<std::int64_t>(labels.size()) != m_n || K < 1)
            throwRuntime("cpu backend: centroids ", C.rows(), "×", C.cols(), " or labels (", labels.size(),
                         ") do not match the data (", m_n, "×", D, ")");
        // Cᵀ as a contiguous D×K column-major matrix: the GEMM's right operand.
        const Eigen::MatrixXf Ct = C.transpose();
        const Eigen::RowVectorXf cNorm = C.rowwise().squaredNorm().transpose();
        // A chunk's score block stays near 1 MiB so it lives in L2 between the GEMM and the scan.
        const std::int64_t chunk = std::clamp<std::int64_t>((1 << 18) / K, 16, 2048);
        const std::int64_t nChunks = (m_n + chunk - 1) / chunk;
        const int threads = static_cast<int>(std::min<std::int64_t>(m_threads, nChunks));

        out.weightSum.setZero(K);
        out.count.setZero(K);
        out.sumX.setZero(K, D);
        if (withShapeSums)
            out.sumY.setZero(K, D);
        else
            out.sumY.resize(0, 0);
        out.weightedError = 0;
        out.weightedSquaredNorm = 0;
        out.totalWeight = 0;
        out.changed = 0;

        // One accumulator per thread, reduced in thread order after the loop: with a static
        // schedule the sums do not depend on timing, so a seeded run is reproducible.
        std::vector<AssignStats> part(threads);
#pragma omp parallel num_threads(threads)
        {
#ifdef _OPENMP
            AssignStats& acc = part[omp_get_thread_num()];
#else
            AssignStats& acc = part[0];
#endif
            acc.weightSum.setZero(K);
            acc.count.setZero(K);
            acc.sumX.setZero(K, D);
            if (withShapeSums)
                acc.sumY.setZero(K, D);
            MatrixRF S(chunk, K);

#pragma omp for schedule(static)
            for (std::int64_t c = 0; c < nChunks; ++c) {
                const std::int64_t r0 = c * chunk;
                const std::int64_t m = std::min(chunk, m_n - r0);
                Eigen::Map<const MatrixRF> Xb(m_x + r0 * D, m, D);
                S.topRows(m).noalias() = Xb * Ct;
                for (std::int64_t i = 0; i < m; ++i) {
                    auto s = S.row(i);
                    s = 2.0f * s - cNorm; // score of each centroid; the nearest has the largest
                    const float best = s.maxCoeff();
                    int label = 0;
                    while (label + 1 < K && s[label] != best)
                        ++label;
                    const std::int64_t row = r0 + i;
                    const double w = m_w ? m_w[row] : 1.0;
                    acc.weightedError += w * std::max(0.0, static_cast<double>(m_sqNorm[row]) - best);
                    acc.weightedSquaredNorm += w * static_cast<double>(m_sqNorm[row]);
                    acc.totalWeight += w;
                    if (labels[row] != label)
                        ++acc.changed;
                    labels[row] = label;
                    acc.weightSum[label] += w;
                    ++acc.count[label];
                    const auto x = Xb.row(i).cast<double>();
                    acc.sumX.row(label) += w * x;
                    if (withShapeSums)
                        acc.sumY.row(label) += (w * m_invNorm[row]) * x;
                }
            }
        }
        for (const auto& acc : part) {
            out.weightSum += acc.weightSum;
            out.count += acc.count;
            out.sumX += acc.sumX;
            if (withShapeSums)
                out.sumY += acc.sumY;
            out.weightedError += acc.weightedError;
            out.weightedSquaredNorm += acc.weightedSquaredNorm;
            out.totalWeight += acc.totalWeight;
            out.changed += acc.changed;
        }
    }

private:
    int m_threads;
    const float* m_x = nullptr;
    std::int64_t m_n = 0;
    int m_d = 0;
    const float* m_w = nullptr;
    Eigen::VectorXf m_sqNorm;
    Eigen::VectorXf m_invNorm;
};

} // namespace

std::unique_ptr<ClusterBackend> makeCpuBackend(int threads)
{
    return std::make_unique<CpuBackend>(threads);
}

} // namespace gsrq
