#include "core/cluster/cluster_backend.h"
#include "core/cluster/exact_bounds.h"
#include "core/cluster/nearest_kernels.h"

#include "core/base/error.h"

#include <algorithm>
#include <cmath>
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
    CpuBackend(int threads, const nearest::NearestKernels* kernel)
        : m_threads(resolveThreads(threads)), m_kernel(kernel)
    {
    }

    std::string name() const override { return "cpu"; }
    std::string device() const override { return cat(m_threads, m_threads == 1 ? " thread" : " threads"); }
    int hostThreads() const override { return m_threads; }
    void setExactBounds(bool on) override
    {
        m_exactBounds = on;
        m_bounds.invalidate();
    }
    bool exactBounds() const override { return m_exactBounds; }
    // The assignment kernel's build: "avx512", "avx2+fma" or "portable".
    std::string isa() const { return (m_kernel ? *m_kernel : nearest::bestNearest()).isa; }

    void bind(const float* x, std::int64_t n, int features, const float* weights) override
    {
        m_x = x;
        m_n = n;
        m_f = features;
        m_w = weights;
        // The residual is copied on the first subtractAssigned: plain clustering reads x in place.
        m_res.resize(0, 0);
        m_rec.resize(0, 0);
        m_bounds.invalidate();
        selectBlock(0, features, 1e-8f);
    }

    std::int64_t rows() const override { return m_n; }

    void selectBlock(int col0, int dim, float epsilon) override
    {
        if (col0 < 0 || dim < 1 || col0 + dim > m_f)
            throwRuntime("cpu backend: block [", col0, ", ", col0 + dim, ") outside the ", m_f, " features bound");
        m_col0 = col0;
        m_d = dim;
        const auto X = block();
        // Each row's norm in double, feature by feature: the same value wherever the row lies in
        // memory (a vectorised reduction's order follows the row's alignment, and a row repeated
        // elsewhere must weigh exactly as the row with an integer weight).
        m_sqNorm.resize(m_n);
        m_sqNormExact.resize(static_cast<std::size_t>(m_n));
        m_invNorm.resize(m_n);
        for (Eigen::Index i = 0; i < X.rows(); ++i) {
            double s = 0;
            for (Eigen::Index j = 0; j < X.cols(); ++j)
                s += double(X(i, j)) * double(X(i, j));
            m_sqNorm[i] = float(s);
            m_sqNormExact[static_cast<std::size_t>(i)] = s;
            m_invNorm[i] = float(1.0 / (std::sqrt(s) + double(epsilon)));
        }
        m_labels.assign(static_cast<std::size_t>(m_n), -1);
        m_bounds.invalidate();
    }

    MatrixRF gatherRows(std::span<const std::int64_t> idx) override
    {
        const auto X = block();
        MatrixRF out(static_cast<Eigen::Index>(idx.size()), m_d);
        for (std::size_t i = 0; i < idx.size(); ++i) {
            if (idx[i] < 0 || idx[i] >= m_n)
                throwRuntime("cpu backend: row ", idx[i], " outside the ", m_n, " rows bound");
            out.row(static_cast<Eigen::Index>(i)) = X.row(idx[i]);
        }
        return out;
    }

    void readLabels(std::span<std::int32_t> out) override
    {
        checkLabelSpan(out.size());
        std::copy(m_labels.begin(), m_labels.end(), out.begin());
    }

    void writeLabels(std::span<const std::int32_t> in) override
    {
        checkLabelSpan(in.size());
        std::copy(in.begin(), in.end(), m_labels.begin());
        m_bounds.invalidate();
    }

    void subtractAssigned(const MatrixRF& C) override
    {
        checkCentroids(C);
        m_bounds.invalidate(); // the rows change
        if (m_res.size() == 0) {
            m_res = Eigen::Map<const MatrixRF>(m_x, m_n, m_f);
            m_rec = MatrixRF::Zero(m_n, m_f);
        }
#pragma omp parallel for num_threads(m_threads) schedule(static)
        for (std::int64_t i = 0; i < m_n; ++i) {
            const auto c = C.row(m_labels[static_cast<std::size_t>(i)]);
            m_res.block(i, m_col0, 1, m_d) -= c;
            m_rec.block(i, m_col0, 1, m_d) += c;
        }
    }

    QuantMetrics reconstructionMetrics() override
    {
        const Eigen::Map<const MatrixRF> X(m_x, m_n, m_f);
        if (m_rec.size() == 0)
            return computeMetrics(X, MatrixRF::Zero(m_n, m_f));
        return computeMetrics(X, m_rec);
    }

    void assignPass(const MatrixRF& C, const AssignRequest& what, AssignStats& out) override
    {
        const bool withShapeSums = what.shapeSums;
        checkCentroids(C);
        const int K = static_cast<int>(C.rows());
        const int D = m_d;
        const auto X = block();
        // The codewords packed once for the widest kernel this CPU runs; each chunk's rows get their
        // nearest codeword and its score (2x·c − ‖c‖²) from it, the product never leaving registers.
        const nearest::NearestKernels& kernel = m_kernel ? *m_kernel : nearest::bestNearest();
        const nearest::NearestPanels panels = nearest::packCodewords(C, kernel);
        Eigen::RowVectorXf cNorm(K); // ‖c‖² as every backend rounds it (update_rule.h)
        for (int k = 0; k < K; ++k)
            cNorm[k] = update::squaredNorm(C.row(k).data(), D);
        // The vector kernels score a pair by the same operations wherever it lies in a tile or range,
        // which the bounds' exactness rests on; Eigen's GEMM (the portable build) rounds a codeword
        // differently by its column, so that build scores every codeword.
        const bool bounded = m_exactBounds && kernel.width > 0;
        // Chunks of about 1 MiB of scores for the portable kernel's GEMM, which it scans while in L2.
        const std::int64_t chunk = std::clamp<std::int64_t>((1 << 18) / K, 16, 2048);
        const std::int64_t nChunks = (m_n + chunk - 1) / chunk;
        const int threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(m_threads, nChunks)));

        resetStats(out, K, D, withShapeSums);
        if (bounded)
            m_bounds.begin(C, m_n, kernel.panel);
        std::int64_t scored = 0;

        // One accumulator per thread, reduced in thread order after the loop: with a static
        // schedule the sums do not depend on timing, so a seeded run is reproducible.
        std::vector<AssignStats> part(threads);
#pragma omp parallel num_threads(threads) reduction(+ : scored)
        {
#ifdef _OPENMP
            AssignStats& acc = part[omp_get_thread_num()];
#else
            AssignStats& acc = part[0];
#endif
            resetStats(acc, K, D, withShapeSums);
            std::vector<std::int32_t> labels(static_cast<std::size_t>(chunk));
            std::vector<float> scores(static_cast<std::size_t>(chunk));
            std::vector<double> exact(static_cast<std::size_t>(chunk)); // bounded: ‖x‖² − d²

#pragma omp for schedule(static, 1)
            for (std::int64_t c = 0; c < nChunks; ++c) {
                const std::int64_t r0 = c * chunk;
                const std::int64_t m = std::min(chunk, m_n - r0);
                const auto Xb = X.middleRows(r0, m);
                if (bounded) {
                    std::copy_n(m_labels.begin() + r0, m, labels.begin());
                    scored += m_bounds.assign(X.data() + r0 * m_f, m_f, r0, m, m_sqNormExact.data(), C, kernel, panels,
                                              labels.data(), exact.data());
                } else {
                    kernel.nearest(X.data() + r0 * m_f, m, m_f, panels, labels.data(), scores.data());
                    scored += m * K;
                }
                for (std::int64_t i = 0; i < m; ++i) {
                    const int label = labels[static_cast<std::size_t>(i)];
                    const std::int64_t row = r0 + i;
                    // 2x·c − ‖c‖² of the label, the largest: the kernel's in float, or ‖x‖² − d² from
                    // the distance the bounds summed, with ‖x‖² in double.
                    const double best =
                        bounded ? exact[static_cast<std::size_t>(i)] : scores[static_cast<std::size_t>(i)];
                    const double sq = bounded ? m_sqNormExact[static_cast<std::size_t>(row)] : m_sqNorm[row];
                    const double w = m_w ? m_w[row] : 1.0;
                    acc.weightedError += w * std::max(0.0, sq - best);
                    acc.weightedSquaredNorm += w * static_cast<double>(m_sqNorm[row]);
                    acc.totalWeight += w;
                    if (what.rowMetrics) {
                        // x·c from the score: 2x·c − ‖c‖² = best.
                        const double nx2 = m_sqNorm[row], nc2 = cNorm[label];
                        const double nx = std::sqrt(nx2), nc = std::sqrt(nc2);
                        acc.gainErrorSum += std::abs(nx - nc);
                        acc.squaredNormSum += nx2;
                        if (nx > 0) {
                            ++acc.cosineRows;
                            if (nc > 0)
                                acc.cosineSum += std::clamp(0.5 * (double(best) + nc2) / (nx * nc), -1.0, 1.0);
                        }
                    }
                    auto& l = m_labels[static_cast<std::size_t>(row)];
                    if (l != label)
                        ++acc.changed;
                    l = label;
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
            out.gainErrorSum += acc.gainErrorSum;
            out.cosineSum += acc.cosineSum;
            out.cosineRows += acc.cosineRows;
            out.squaredNormSum += acc.squaredNormSum;
        }
        out.skipped = 1.0 - double(scored) / (double(m_n) * double(K));
        if (bounded)
            m_bounds.end(C);
    }

private:
    using BlockMap = Eigen::Map<const MatrixRF, 0, Eigen::OuterStride<>>;

    // The selected columns of the residual (x itself until the first subtraction).
    BlockMap block() const
    {
        const float* base = m_res.size() ? m_res.data() : m_x;
        return BlockMap(base + m_col0, m_n, m_d, Eigen::OuterStride<>(m_f));
    }

    void checkCentroids(const MatrixRF& C) const
    {
        if (C.cols() != m_d || C.rows() < 1)
            throwRuntime("cpu backend: centroids ", C.rows(), "×", C.cols(), " do not match the block width ", m_d);
    }

    void checkLabelSpan(std::size_t n) const
    {
        if (static_cast<std::int64_t>(n) != m_n)
            throwRuntime("cpu backend: ", n, " labels for ", m_n, " rows");
    }

    static void resetStats(AssignStats& s, int K, int D, bool withShapeSums)
    {
        s.weightSum.setZero(K);
        s.count.setZero(K);
        s.sumX.setZero(K, D);
        if (withShapeSums)
            s.sumY.setZero(K, D);
        else
            s.sumY.resize(0, 0);
        s.weightedError = 0;
        s.weightedSquaredNorm = 0;
        s.totalWeight = 0;
        s.changed = 0;
        s.skipped = 0;
        s.gainErrorSum = s.cosineSum = s.squaredNormSum = 0;
        s.cosineRows = 0;
    }

    int m_threads;
    const nearest::NearestKernels* m_kernel = nullptr; // null: the widest this CPU runs
    const float* m_x = nullptr;
    std::int64_t m_n = 0;
    int m_f = 0;
    int m_col0 = 0;
    int m_d = 0;
    const float* m_w = nullptr;
    MatrixRF m_res, m_rec;
    std::vector<std::int32_t> m_labels;
    Eigen::VectorXf m_sqNorm;
    std::vector<double> m_sqNormExact; // ‖x‖² in double, for the bounds
    bool m_exactBounds = true;
    ExactBounds m_bounds;
    Eigen::VectorXf m_invNorm;
};

} // namespace

std::unique_ptr<ClusterBackend> makeCpuBackend(int threads, const nearest::NearestKernels* kernel)
{
    return std::make_unique<CpuBackend>(threads, kernel);
}

} // namespace gsrq
