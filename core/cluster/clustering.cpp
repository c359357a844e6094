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

// metrics.h's definitions from the pass's row sums.
void setPassMetrics(const AssignStats& st, std::int64_t n, IterationStats& it)
{
    const double reconSq = st.reconstructionSquaredNorm;
    it.gainError = n > 0 ? st.gainErrorSum / double(n) : 0.0;
    it.cosine = st.cosineRows > 0 ? st.cosineSum / double(st.cosineRows) : 0.0;
    it.shrinkage = st.squaredNormSum > 0 ? reconSq / st.squaredNormSum : 0.0;
}

} // namespace

void updateCentroids(Method method, const AssignStats& st, double shapeEpsilon, MatrixRF& c, GainShapeState& gs)
{
    const update::Params rule{method == Method::KMeans ? update::Rule::Mean : update::Rule::GainShape, shapeEpsilon, 0};
    const int d = static_cast<int>(c.cols());
    for (Eigen::Index k = 0; k < c.rows(); ++k) {
        const bool shape = method == Method::GainShape;
        update::cluster(rule, d, st.weightSum[k], st.sumX.row(k).data(), shape ? st.sumY.row(k).data() : nullptr,
                        nullptr, nullptr, shape ? &gs.gains[k] : nullptr, shape ? gs.shapes.row(k).data() : nullptr,
                        c.row(k).data());
    }
}

// ---- the held centroids' defaults: in host memory, the rule applied here ------------------------

void ClusterBackend::loadCentroids(const CentroidState& state)
{
    m_held = state;
}

void ClusterBackend::passHeld(const AssignRequest& what, AssignStats& out)
{
    AssignStats& st = m_heldPass;
    assignPass(m_held.centroids, what, st);
    st.emptyClusters = (st.count.array() == 0).count();
    st.reconstructionSquaredNorm = 0;
    for (Eigen::Index k = 0; k < m_held.centroids.rows(); ++k)
        st.reconstructionSquaredNorm += double(st.count[k]) * m_held.centroids.row(k).cast<double>().squaredNorm();
    // The scalars only, as a device backend returns them.
    out = AssignStats{};
    out.weightedError = st.weightedError;
    out.weightedSquaredNorm = st.weightedSquaredNorm;
    out.totalWeight = st.totalWeight;
    out.changed = st.changed;
    out.skipped = st.skipped;
    out.gainErrorSum = st.gainErrorSum;
    out.cosineSum = st.cosineSum;
    out.cosineRows = st.cosineRows;
    out.squaredNormSum = st.squaredNormSum;
    out.emptyClusters = st.emptyClusters;
    out.reconstructionSquaredNorm = st.reconstructionSquaredNorm;
}

void ClusterBackend::updateHeld(const update::Params& rule)
{
    const AssignStats& st = m_heldPass;
    CentroidState& h = m_held;
    if (st.weightSum.size() != h.centroids.rows())
        throwRuntime("updateHeld: no pass with the held centroids before the update");
    if (rule.rule == update::Rule::GainShape && st.sumY.rows() != h.centroids.rows())
        throwRuntime("updateHeld: the gain-shape rule needs a pass with shape sums");
    const int d = static_cast<int>(h.centroids.cols());
    const bool shape = rule.rule == update::Rule::GainShape, ema = rule.rule == update::Rule::Ema;
    for (Eigen::Index k = 0; k < h.centroids.rows(); ++k)
        update::cluster(rule, d, st.weightSum[k], st.sumX.row(k).data(), shape ? st.sumY.row(k).data() : nullptr,
                        ema ? &h.emaWeight[k] : nullptr, ema ? h.emaSum.row(k).data() : nullptr,
                        shape ? &h.gs.gains[k] : nullptr, shape ? h.gs.shapes.row(k).data() : nullptr,
                        h.centroids.row(k).data());
}

void ClusterBackend::heldClusterTotals(AssignStats& out)
{
    out.weightSum = m_heldPass.weightSum;
    out.count = m_heldPass.count;
}

void ClusterBackend::storeCentroids(CentroidState& state)
{
    state = m_held;
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
    MemberIterationCallback each;
    if (onIteration)
        each = [&onIteration](int, const IterationStats& it) { return onIteration(it); };
    return std::move(clusterSelectedMembers(backend, method, std::span<const ClusteringParams>(&p, 1), each).front());
}

std::vector<ClusteringResult> clusterSelectedMembers(ClusterBackend& backend, Method method,
                                                     std::span<const ClusteringParams> params,
                                                     const MemberIterationCallback& onIteration)
{
    using Clock = std::chrono::steady_clock;
    const auto n = backend.rows();
    const int B = static_cast<int>(params.size());
    if (B < 1)
        throwInvalid("clustering together: no member");
    const ClusteringParams& common = params.front(); // one update rule and one pass request serve every member
    for (const auto& p : params) {
        if (p.k < 1)
            throwInvalid("k = ", p.k, ": needs at least one codeword");
        if (p.k > n)
            throwInvalid("k = ", p.k, " is larger than the number of rows (", n, ")");
        if (p.maxIterations < 0)
            throwInvalid("iterations = ", p.maxIterations, ": must be ≥ 0");
        if (!(p.emaDecay >= 0 && p.emaDecay < 1))
            throwInvalid("--ema-decay ", p.emaDecay, ": must be in [0, 1)");
        if (p.k != common.k || p.epsilon != common.epsilon || p.shapeEpsilon != common.shapeEpsilon ||
            p.emaDecay != common.emaDecay || p.passMetrics != common.passMetrics)
            throwInvalid("clustering together: members differ in more than seed, iterations and re-seeding");
    }
    const bool ema = method == Method::KMeans && common.emaDecay > 0;
    const update::Params rule{ema                           ? update::Rule::Ema
                              : method == Method::GainShape ? update::Rule::GainShape
                                                            : update::Rule::Mean,
                              common.shapeEpsilon, ema ? common.emaDecay : 0.0};
    const AssignRequest request{method == Method::GainShape, common.passMetrics};

    const auto start = Clock::now();
    std::vector<ClusteringResult> results(static_cast<std::size_t>(B));
    std::vector<CentroidState> states(static_cast<std::size_t>(B));
    AssignStats st;
    for (int b = 0; b < B; ++b) {
        const ClusteringParams& p = params[std::size_t(b)];
        CentroidState& state = states[std::size_t(b)];
        backend.focusMember(b);
        state.centroids = backend.gatherRows(sampleRows(n, p.k, p.seed));
        if (method == Method::GainShape)
            initGainShape(backend, state.centroids, state.gs, st);
        if (ema) { // Σ_t γ^(T−t) W_k and Σ_t γ^(T−t) Sx_k, from zero: the first update gives W_k and Sx_k
            state.emaWeight = Eigen::VectorXd::Zero(p.k);
            state.emaSum = MatrixRD::Zero(p.k, state.centroids.cols());
        }
        backend.loadCentroids(state);
    }

    std::vector<int> active(static_cast<std::size_t>(B));
    std::iota(active.begin(), active.end(), 0);
    std::vector<AssignStats> passes;
    std::vector<IterationStats> its;
    std::vector<int> updated, going;
    bool cancelled = false;
    auto passStart = Clock::now();
    while (!active.empty()) {
        passes.assign(active.size(), AssignStats{});
        backend.passHeldBatch(active, request, passes);
        its.assign(active.size(), IterationStats{});
        updated.clear();
        for (std::size_t i = 0; i < active.size(); ++i) {
            const int b = active[i];
            const AssignStats& s = passes[i];
            const ClusteringResult& r = results[std::size_t(b)];
            IterationStats& it = its[i];
            it.iteration = r.iterations;
            it.objective = s.weightedError / s.totalWeight;
            it.nmse = s.weightedSquaredNorm > 0 ? s.weightedError / s.weightedSquaredNorm : 0.0;
            if (common.passMetrics)
                setPassMetrics(s, n, it);
            it.changed = s.changed;
            it.skipped = s.skipped;
            it.emptyClusters = static_cast<int>(s.emptyClusters);
            const bool converged = r.iterations > 0 && s.changed == 0;
            it.last = converged || r.iterations >= params[std::size_t(b)].maxIterations;
            if (!it.last)
                updated.push_back(b);
        }
        if (!updated.empty())
            backend.updateHeldBatch(updated, rule);
        going.clear();
        for (std::size_t i = 0; i < active.size(); ++i) {
            const int b = active[i];
            IterationStats& it = its[i];
            ClusteringResult& r = results[std::size_t(b)];
            if (!it.last) {
                if (params[std::size_t(b)].reseedEmpty && it.emptyClusters > 0) {
                    // Rare: the centroids come to the host for the split and go back.
                    CentroidState& state = states[std::size_t(b)];
                    AssignStats totals;
                    backend.focusMember(b);
                    backend.heldClusterTotals(totals);
                    backend.storeCentroids(state);
                    const auto touched = reseedEmptyClusters(totals, state.centroids);
                    it.reseeded = static_cast<int>(touched.size() / 2);
                    if (ema)
                        for (auto k : touched) { // the split halves start their averages afresh
                            state.emaWeight[k] = 0;
                            state.emaSum.row(k).setZero();
                        }
                    if (method == Method::GainShape) {
                        // Split clusters get their own gain and shape from the nudged centroids.
                        GainShapeState fresh;
                        shapeFromCentroids(state.centroids, fresh);
                        for (auto k : touched) {
                            state.gs.gains[k] = fresh.gains[k];
                            state.gs.shapes.row(k) = fresh.shapes.row(k);
                        }
                    }
                    backend.loadCentroids(state);
                }
                ++r.iterations;
            }
        }
        const auto now = Clock::now();
        const double seconds = std::chrono::duration<double>(now - passStart).count();
        passStart = now;
        for (std::size_t i = 0; i < active.size(); ++i) {
            const int b = active[i];
            IterationStats& it = its[i];
            ClusteringResult& r = results[std::size_t(b)];
            it.seconds = seconds;
            r.history.push_back(it);
            if (it.last) {
                r.stop = it.changed == 0 && r.iterations > 0 ? StopReason::Converged : StopReason::MaxIterations;
                if (onIteration && !cancelled)
                    onIteration(b, it);
                continue;
            }
            if (!cancelled && onIteration && !onIteration(b, it))
                cancelled = true;
            going.push_back(b);
        }
        active.swap(going);
        if (cancelled && !active.empty()) {
            // The labels stay those of the last pass; re-assign so they match the centroids returned.
            passes.assign(active.size(), AssignStats{});
            backend.passHeldBatch(active, AssignRequest{}, passes);
            for (int b : active)
                results[std::size_t(b)].stop = StopReason::Cancelled;
            active.clear();
        }
    }
    for (int b = 0; b < B; ++b) {
        ClusteringResult& r = results[std::size_t(b)];
        backend.focusMember(b);
        backend.storeCentroids(states[std::size_t(b)]);
        r.centroids = std::move(states[std::size_t(b)].centroids);
        r.labels.resize(static_cast<std::size_t>(n));
        backend.readLabels(r.labels);
        // From the start to the results read back (for a member of a batch, the batch's time so far).
        r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    return results;
}

// ---- one block at a time: the defaults of the batched calls -------------------------------------

void ClusterBackend::selectBlocks(std::span<const int> col0, int dim, float epsilon)
{
    if (col0.size() != 1)
        throwRuntime(name(), " backend: takes one block at a time, not ", col0.size());
    selectBlock(col0[0], dim, epsilon);
}

void ClusterBackend::focusMember(int member)
{
    if (member != 0)
        throwRuntime(name(), " backend: member ", member, " of one selected block");
}

void ClusterBackend::passHeldBatch(std::span<const int> active, const AssignRequest& what, std::span<AssignStats> out)
{
    if (out.size() != active.size())
        throwRuntime("passHeldBatch: ", out.size(), " results for ", active.size(), " members");
    for (std::size_t i = 0; i < active.size(); ++i) {
        focusMember(active[i]);
        passHeld(what, out[i]);
    }
}

void ClusterBackend::updateHeldBatch(std::span<const int> active, const update::Params& rule)
{
    for (int b : active) {
        focusMember(b);
        updateHeld(rule);
    }
}

} // namespace gsrq
