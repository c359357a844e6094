#include "core/cluster/clustering.h"

#include "core/base/error.h"

#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

namespace gsrq {

const char* methodName(Method m)
{
    return m == Method::KMeans ? "km" : "gskm";
}

std::optional<Method> methodFromName(std::string_view name)
{
    for (Method m : {Method::KMeans, Method::GainShape})
        if (name == methodName(m))
            return m;
    return std::nullopt;
}

const char* stopReasonName(StopReason r)
{
    switch (r) {
    case StopReason::Converged:
        return "converged";
    case StopReason::MaxIterations:
        return "max_iterations";
    case StopReason::Cancelled:
        return "cancelled";
    }
    return "?";
}

std::vector<std::int64_t> sampleRows(std::int64_t n, int k, std::uint64_t seed)
{
    // Partial Fisher–Yates on raw mt19937_64 output: std::mt19937_64 is specified exactly by the
    // standard, unlike the distributions, so the same seed picks the same rows everywhere.
    std::mt19937_64 rng(seed);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    for (int i = 0; i < k; ++i) {
        const auto span = static_cast<std::uint64_t>(n - i);
        const auto j = i + static_cast<std::int64_t>(rng() % span);
        std::swap(idx[i], idx[j]);
    }
    idx.resize(static_cast<std::size_t>(k));
    return idx;
}

namespace {

void shapeFromCentroids(const MatrixRF& c, GainShapeState& gs)
{
    const auto K = c.rows();
    gs.gains.resize(K);
    gs.shapes.resize(K, c.cols());
    for (Eigen::Index k = 0; k < K; ++k) {
        const Eigen::RowVectorXd v = c.row(k).cast<double>();
        const double g = v.norm();
        gs.gains[k] = g;
        if (g > 0)
            gs.shapes.row(k) = v / g;
        else {
            gs.shapes.row(k).setZero();
            gs.shapes(k, 0) = 1.0; // any unit vector: the gain of zero makes the centroid zero
        }
    }
}

// FAISS-style split, after the update: an empty cluster takes a copy of the heaviest one, both
// nudged apart by ±1/1024 on alternating coordinates so the next assignment divides its members.
// Returns the rows it changed.
std::vector<Eigen::Index> reseedEmptyClusters(const AssignStats& st, MatrixRF& c)
{
    constexpr float kNudge = 1.0f / 1024.0f;
    Eigen::VectorXd weight = st.weightSum;
    Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> count = st.count;
    std::vector<Eigen::Index> touched;
    for (Eigen::Index j = 0; j < c.rows(); ++j) {
        if (count[j] != 0)
            continue;
        Eigen::Index heavy = 0;
        weight.maxCoeff(&heavy);
        if (count[heavy] < 2)
            break; // nothing left to split
        for (Eigen::Index d = 0; d < c.cols(); ++d) {
            const float sign = (d % 2 == 0) ? 1.0f : -1.0f;
            c(j, d) = c(heavy, d) * (1.0f + sign * kNudge);
            c(heavy, d) = c(heavy, d) * (1.0f - sign * kNudge);
        }
        weight[j] = weight[heavy] /= 2;
        count[j] = count[heavy] / 2;
        count[heavy] -= count[j];
        touched.push_back(j);
        touched.push_back(heavy);
    }
    return touched;
}

// Algorithm 1's start: the shapes are the directions of the sampled rows; one assignment by
// direction (argmax x·s_k: the nearest-centroid rule with unit gains, so the backends' one
// primitive serves) gives each shape its members, and the gain is their weighted mean projection
// g_k = max(0, Sx_k·s_k / W_k). A shape no row chose keeps the gain of its row (‖row‖). Starting
// from the rows themselves (g_k = ‖row‖, first assignment by L2) instead makes GSKM retrace
// K-means' path to K-means' end.
void initGainShape(ClusterBackend& backend, MatrixRF& c, GainShapeState& gs, AssignStats& st)
{
    shapeFromCentroids(c, gs);
    backend.assign(gs.shapes.cast<float>(), false, st);
    for (Eigen::Index k = 0; k < c.rows(); ++k) {
        const double W = st.weightSum[k];
        if (W > 0)
            gs.gains[k] = std::max(0.0, st.sumX.row(k).dot(gs.shapes.row(k)) / W);
        c.row(k) = (gs.gains[k] * gs.shapes.row(k)).cast<float>();
    }
    // The iterations start afresh: their first pass counts every row as changed, as KM's does.
    backend.writeLabels(std::vector<std::int32_t>(static_cast<std::size_t>(backend.rows()), -1));
}

// metrics.h's definitions from the pass's row sums; Σ‖x̂‖² = Σ_k count_k·‖c_k‖².
void setPassMetrics(const AssignStats& st, const MatrixRF& centroids, std::int64_t n, IterationStats& it)
{
    double reconSq = 0;
    for (Eigen::Index k = 0; k < centroids.rows(); ++k)
        reconSq += double(st.count[k]) * centroids.row(k).cast<double>().squaredNorm();
    it.gainError = n > 0 ? st.gainErrorSum / double(n) : 0.0;
    it.cosine = st.cosineRows > 0 ? st.cosineSum / double(st.cosineRows) : 0.0;
    it.shrinkage = st.squaredNormSum > 0 ? reconSq / st.squaredNormSum : 0.0;
}

} // namespace

void updateCentroids(Method method, const AssignStats& st, double shapeEpsilon, MatrixRF& c, GainShapeState& gs)
{
    const auto K = c.rows();
    for (Eigen::Index k = 0; k < K; ++k) {
        const double W = st.weightSum[k];
        if (!(W > 0))
            continue; // empty (or zero-weight) cluster keeps its centroid
        if (method == Method::KMeans) {
            c.row(k) = (st.sumX.row(k) / W).cast<float>();
            continue;
        }
        const double n = st.sumY.row(k).norm();
        if (n / W > shapeEpsilon)
            gs.shapes.row(k) = st.sumY.row(k) / n;
        gs.gains[k] = std::max(0.0, st.sumX.row(k).dot(gs.shapes.row(k)) / W);
        c.row(k) = (gs.gains[k] * gs.shapes.row(k)).cast<float>();
    }
}

void validateWeights(const float* weights, std::int64_t n)
{
    if (!weights)
        return;
    double total = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        if (!(weights[i] >= 0) || !std::isfinite(weights[i]))
            throwInvalid("weight of row ", i, " is ", weights[i], "; weights must be finite and ≥ 0");
        total += weights[i];
    }
    if (!(total > 0))
        throwInvalid("every row has weight zero; nothing to cluster");
}

ClusteringResult cluster(const RowsRef& X, const float* weights, Method method, const ClusteringParams& p,
                         ClusterBackend& backend, const IterationCallback& onIteration)
{
    if (!isContiguous(X)) // the backend reads whole rows
        return cluster(MatrixRF(X), weights, method, p, backend, onIteration);
    validateWeights(weights, X.rows());
    backend.bind(X.data(), X.rows(), static_cast<int>(X.cols()), weights);
    backend.selectBlock(0, static_cast<int>(X.cols()), p.epsilon);
    return clusterSelected(backend, method, p, onIteration);
}

ClusteringResult clusterSelected(ClusterBackend& backend, Method method, const ClusteringParams& p,
                                 const IterationCallback& onIteration)
{
    using Clock = std::chrono::steady_clock;
    const auto n = backend.rows();
    if (p.k < 1)
        throwInvalid("k = ", p.k, ": needs at least one codeword");
    if (p.k > n)
        throwInvalid("k = ", p.k, " is larger than the number of rows (", n, ")");
    if (p.maxIterations < 0)
        throwInvalid("iterations = ", p.maxIterations, ": must be ≥ 0");

    const auto start = Clock::now();
    ClusteringResult r;
    r.centroids = backend.gatherRows(sampleRows(n, p.k, p.seed));
    GainShapeState gs;
    AssignStats st;
    if (method == Method::GainShape)
        initGainShape(backend, r.centroids, gs, st);
    if (!(p.emaDecay >= 0 && p.emaDecay < 1))
        throwInvalid("--ema-decay ", p.emaDecay, ": must be in [0, 1)");
    const bool ema = method == Method::KMeans && p.emaDecay > 0;
    Eigen::VectorXd emaWeight; // Σ_t γ^(T−t) W_k
    MatrixRD emaSum;           // Σ_t γ^(T−t) Sx_k

    auto passStart = Clock::now();
    for (;;) {
        backend.assignPass(r.centroids, AssignRequest{method == Method::GainShape, p.passMetrics}, st);
        IterationStats it;
        it.iteration = r.iterations;
        it.objective = st.weightedError / st.totalWeight;
        it.nmse = st.weightedSquaredNorm > 0 ? st.weightedError / st.weightedSquaredNorm : 0.0;
        if (p.passMetrics)
            setPassMetrics(st, r.centroids, n, it);
        it.changed = st.changed;
        it.skipped = st.skipped;
        it.emptyClusters = static_cast<int>((st.count.array() == 0).count());

        const bool converged = r.iterations > 0 && st.changed == 0;
        const bool last = converged || r.iterations >= p.maxIterations;
        it.last = last;
        if (!last) {
            if (ema) {
                if (emaWeight.size() == 0) {
                    emaWeight = st.weightSum;
                    emaSum = st.sumX;
                } else {
                    emaWeight = p.emaDecay * emaWeight + st.weightSum;
                    emaSum = p.emaDecay * emaSum + st.sumX;
                }
                for (Eigen::Index k = 0; k < r.centroids.rows(); ++k)
                    if (emaWeight[k] > 0)
                        r.centroids.row(k) = (emaSum.row(k) / emaWeight[k]).cast<float>();
            } else {
                updateCentroids(method, st, p.shapeEpsilon, r.centroids, gs);
            }
            if (p.reseedEmpty && it.emptyClusters > 0) {
                const auto touched = reseedEmptyClusters(st, r.centroids);
                it.reseeded = static_cast<int>(touched.size() / 2);
                if (ema)
                    for (auto k : touched) { // the split halves start their averages afresh
                        emaWeight[k] = 0;
                        emaSum.row(k).setZero();
                    }
                if (method == Method::GainShape) {
                    // Split clusters get their own gain and shape from the nudged centroids.
                    GainShapeState fresh;
                    shapeFromCentroids(r.centroids, fresh);
                    for (auto k : touched) {
                        gs.gains[k] = fresh.gains[k];
                        gs.shapes.row(k) = fresh.shapes.row(k);
                    }
                }
            }
            ++r.iterations;
        }
        const auto now = Clock::now();
        it.seconds = std::chrono::duration<double>(now - passStart).count();
        passStart = now;
        r.history.push_back(it);

        if (last) {
            r.stop = converged ? StopReason::Converged : StopReason::MaxIterations;
            break;
        }
        if (onIteration && !onIteration(it)) {
            // The labels stay those of the last pass; re-assign so they match the centroids returned.
            backend.assign(r.centroids, false, st);
            r.stop = StopReason::Cancelled;
            break;
        }
    }
    if (onIteration && r.stop != StopReason::Cancelled)
        onIteration(r.history.back());
    r.labels.resize(static_cast<std::size_t>(n));
    backend.readLabels(r.labels);
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
}

} // namespace gsrq
