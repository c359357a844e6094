#include "core/cluster/quantizer.h"

#include "core/base/error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace gsrq {

double bitsPerActivation(int dim, int stages, int k)
{
    return stages * std::log2(double(k)) / dim;
}

std::optional<BpaChoice> paperBpa(double bpa)
{
    if (bpa == 2)
        return BpaChoice{128, 32, 256};
    if (bpa == 1)
        return BpaChoice{128, 16, 256};
    if (bpa == 0.75)
        return BpaChoice{128, 12, 256};
    if (bpa == 0.375)
        return BpaChoice{256, 12, 256};
    return std::nullopt;
}

std::vector<BpaChoice> suggestBpa(double bpa, std::int64_t features, std::size_t count)
{
    std::vector<BpaChoice> all;
    if (!(bpa > 0))
        return all;
    for (std::int64_t d = 1; d <= features && d <= 4096; ++d) {
        if (features % d)
            continue;
        for (int bits = 1; bits <= 16; ++bits) {
            const double r = bpa * double(d) / bits; // R·bits/D = bpa
            if (r >= 1 && r <= 256 && std::abs(r - std::round(r)) < 1e-9)
                all.push_back({int(d), int(std::round(r)), 1 << bits});
        }
    }
    auto distance = [](const BpaChoice& c) {
        return std::abs(std::log2(double(c.dim) / 128)) + std::abs(std::log2(double(c.k) / 256));
    };
    std::stable_sort(all.begin(), all.end(),
                     [&](const BpaChoice& a, const BpaChoice& b) { return distance(a) < distance(b); });
    if (all.size() > count)
        all.resize(count);
    return all;
}

void validateRq(const RqSettings& s, std::int64_t rows, std::int64_t features)
{
    const std::int64_t D = s.dim == 0 ? features : s.dim;
    if (D < 1 || features % D != 0)
        throwInvalid("--dim ", D, " does not divide the ", features, " features of the tensor");
    if (s.stages < 1 || s.stages > 1024)
        throwInvalid("--stages ", s.stages, ": must be between 1 and 1024");
    if (s.k < 2 || s.k > 65536 || (s.k & (s.k - 1)) != 0)
        throwInvalid("--k ", s.k, ": must be a power of two from 2 to 65,536");
    if (s.k > rows)
        throwInvalid("--k ", s.k, " is larger than the ", rows, " training rows of the tensor");
    if (s.beam < 1 || s.beam > 256)
        throwInvalid("--beam ", s.beam, ": must be between 1 and 256");
    if (s.iterations < 0)
        throwInvalid("--iters ", s.iterations, ": must be ≥ 0");
    if (!(s.emaDecay >= 0 && s.emaDecay < 1))
        throwInvalid("--ema-decay ", s.emaDecay, ": must be in [0, 1)");
    if (s.emaDecay > 0 && s.method != Method::KMeans)
        throwInvalid("--ema-decay: the moving-average update is K-means'; GSKM updates gains and shapes");
}

void Codebooks::allocate(int d, int r, int kk, int m)
{
    dim = d;
    stages = r;
    k = kk;
    subspaces = m;
    data.assign(std::size_t(m) * r * kk * d, 0.0f);
}

Eigen::Map<MatrixRF> Codebooks::book(int m, int r)
{
    return {data.data() + (std::size_t(m) * stages + r) * k * dim, k, dim};
}

Eigen::Map<const MatrixRF> Codebooks::book(int m, int r) const
{
    return {data.data() + (std::size_t(m) * stages + r) * k * dim, k, dim};
}

namespace {

// Beam search over stages 0..R-1 of one subspace: the B best partial codes per row survive each
// stage, ranked by their exact squared residual. Xm: N × D. Returns N × R codes.
Codes beamEncodeSubspace(const MatrixRF& Xm, const Codebooks& cb, int m, int R, int B)
{
    const Eigen::Index N = Xm.rows();
    const int D = cb.dim, K = cb.k;
    Codes out(N, R);
    std::vector<Eigen::RowVectorXf> cNorm(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r)
        cNorm[std::size_t(r)] = cb.book(m, r).rowwise().squaredNorm().transpose();

#pragma omp parallel
    {
        MatrixRF res, next, S;
        Codes codes, nextCodes;
        Eigen::VectorXf err, nextErr;
        std::vector<int> order;
#pragma omp for schedule(dynamic, 16)
        for (Eigen::Index i = 0; i < N; ++i) {
            int cur = 1;
            res = Xm.row(i);
            codes.resize(1, R);
            err.resize(1);
            err[0] = res.row(0).squaredNorm();
            for (int r = 0; r < R; ++r) {
                const auto C = cb.book(m, r);
                S.noalias() = res.topRows(cur) * C.transpose(); // cur × K
                // ‖res − c‖² = ‖res‖² − 2 res·c + ‖c‖²
                S = ((-2.0f * S).rowwise() + cNorm[std::size_t(r)]).colwise() + err.head(cur);
                const int keep = std::min(B, cur * K);
                order.resize(std::size_t(cur) * K);
                std::iota(order.begin(), order.end(), 0);
                std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int a, int b) {
                    const float va = S(a / K, a % K), vb = S(b / K, b % K);
                    return va < vb || (va == vb && a < b);
                });
                next.resize(keep, D);
                nextCodes.resize(keep, R);
                nextErr.resize(keep);
                for (int j = 0; j < keep; ++j) {
                    const int b = order[std::size_t(j)] / K, k = order[std::size_t(j)] % K;
                    next.row(j) = res.row(b) - C.row(k);
                    nextCodes.row(j) = codes.row(b);
                    nextCodes(j, r) = k;
                    nextErr[j] = next.row(j).squaredNorm(); // exact, so rounding does not accumulate
                }
                res.swap(next);
                codes.swap(nextCodes);
                err.swap(nextErr);
                cur = keep;
            }
            Eigen::Index best = 0;
            err.head(cur).minCoeff(&best);
            out.row(i) = codes.row(best);
        }
    }
    return out;
}

} // namespace

std::vector<std::int32_t> stridedOrder(int dim, int subspaces)
{
    std::vector<std::int32_t> order(std::size_t(dim) * std::size_t(subspaces));
    for (int m = 0; m < subspaces; ++m)
        for (int j = 0; j < dim; ++j)
            order[std::size_t(m) * std::size_t(dim) + std::size_t(j)] = j * subspaces + m;
    return order;
}

namespace {

// The rows in the codebooks' feature order.
MatrixRF inBookOrder(const MatrixRF& X, const Codebooks& cb)
{
    MatrixRF out(X.rows(), X.cols());
    for (Eigen::Index j = 0; j < X.cols(); ++j)
        out.col(j) = X.col(cb.order[std::size_t(j)]);
    return out;
}

} // namespace

Codes encode(const MatrixRF& X, const Codebooks& cb, int beam, ClusterBackend& backend, int stages)
{
    const int R = stages < 0 ? cb.stages : stages;
    if (X.cols() != cb.features())
        throwInvalid("data has ", X.cols(), " features but the codebooks cover ", cb.features(), " (", cb.subspaces,
                     " subspaces × D=", cb.dim, ")");
    if (!cb.order.empty()) {
        Codebooks plain = cb;
        plain.order.clear();
        return encode(inBookOrder(X, cb), plain, beam, backend, stages);
    }
    Codes codes = Codes::Zero(X.rows(), Eigen::Index(cb.subspaces) * cb.stages);
    if (beam > 1) {
        for (int m = 0; m < cb.subspaces; ++m) {
            const MatrixRF Xm = X.middleCols(Eigen::Index(m) * cb.dim, cb.dim);
            codes.block(0, Eigen::Index(m) * cb.stages, X.rows(), R) = beamEncodeSubspace(Xm, cb, m, R, beam);
        }
        return codes;
    }
    // Greedy: the nearest codeword per stage, on the residual the backend keeps.
    std::vector<std::int32_t> labels(std::size_t(X.rows()));
    AssignStats st;
    backend.bind(X.data(), X.rows(), int(X.cols()), nullptr);
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < cb.subspaces; ++m) {
            const MatrixRF C = cb.book(m, r);
            backend.selectBlock(m * cb.dim, cb.dim, 1e-8f);
            backend.assign(C, false, st);
            backend.readLabels(labels);
            backend.subtractAssigned(C);
            for (Eigen::Index i = 0; i < X.rows(); ++i)
                codes(i, Eigen::Index(m) * cb.stages + r) = labels[std::size_t(i)];
        }
    return codes;
}

MatrixRF decode(const Codes& codes, const Codebooks& cb, int stages)
{
    const int R = stages < 0 ? cb.stages : stages;
    if (!cb.order.empty()) {
        Codebooks plain = cb;
        plain.order.clear();
        const MatrixRF y = decode(codes, plain, stages);
        MatrixRF out(y.rows(), y.cols());
        for (Eigen::Index j = 0; j < y.cols(); ++j)
            out.col(cb.order[std::size_t(j)]) = y.col(j);
        return out;
    }
    MatrixRF out = MatrixRF::Zero(codes.rows(), cb.features());
    for (int m = 0; m < cb.subspaces; ++m)
        for (int r = 0; r < R; ++r) {
            const auto C = cb.book(m, r);
            for (Eigen::Index i = 0; i < codes.rows(); ++i)
                out.block(i, Eigen::Index(m) * cb.dim, 1, cb.dim) += C.row(codes(i, Eigen::Index(m) * cb.stages + r));
        }
    return out;
}

RqTrainResult trainResidualQuantizer(const MatrixRF& X, const float* weights, const RqSettings& s,
                                     ClusterBackend& backend, const ProgressFn& progress)
{
    validateRq(s, X.rows(), X.cols());
    const int D = s.dim == 0 ? int(X.cols()) : s.dim;
    const int M = int(X.cols() / D), R = s.stages;
    if (s.stridedGroups && M > 1) { // one subspace: the strided order is the data's own
        // Train on the rows in strided order; the codebooks keep the order, the metrics are of whole
        // rows (the same in any order) and the codes are the rows'.
        RqSettings inner = s;
        inner.stridedGroups = false;
        Codebooks ordered;
        ordered.order = stridedOrder(D, M);
        const MatrixRF orderedRows = inBookOrder(X, ordered); // the backend is bound to these; callers bind anew
        auto out = trainResidualQuantizer(orderedRows, weights, inner, backend, progress);
        out.codebooks.order = std::move(ordered.order);
        return out;
    }
    const auto start = std::chrono::steady_clock::now();
    RqTrainResult out;
    out.codebooks.allocate(D, R, s.k, M);
    out.codes = Codes::Zero(X.rows(), Eigen::Index(M) * R);
    validateWeights(weights, X.rows());
    // The backend keeps the residual and a running reconstruction: each stage adds its codewords
    // in stage order, exactly the sums a decoder of the exported codes makes.
    backend.bind(X.data(), X.rows(), int(X.cols()), weights);
    MatrixRF residual;                           // beam search only: the residual of the re-encoded stages, on the host
    const int units = std::max(1, s.iterations); // a clustering's share of the progress
    const double total = double(M) * R * units;
    double done = 0;

    for (int r = 0; r < R && !out.cancelled; ++r) {
        for (int m = 0; m < M && !out.cancelled; ++m) {
            ClusteringParams p;
            p.k = s.k;
            p.maxIterations = s.iterations;
            p.seed = s.seed + 7919ull * std::uint64_t(r * M + m); // each stage samples its own rows
            p.reseedEmpty = s.reseedEmpty;
            p.emaDecay = s.emaDecay;
            const std::string what = cat("stage ", r + 1, "/", R, " subspace ", m + 1, "/", M);
            backend.selectBlock(m * D, D, p.epsilon);
            auto c = clusterSelected(backend, s.method, p, [&](const IterationStats& it) {
                if (!progress)
                    return true;
                if (!progress({what,
                               std::min(1.0, (done + (it.last ? units : std::min(it.iteration, s.iterations))) / total),
                               it,
                               {},
                               s.method,
                               m,
                               r}))
                    out.cancelled = true;
                return !out.cancelled;
            });
            done += units;
            out.codebooks.book(m, r) = c.centroids;
            out.clusterings.push_back({m, r, c.iterations, c.stop, c.seconds, std::move(c.history)});
            if (s.beam == 1 && !out.cancelled) {
                // clusterSelected()'s labels are the nearest codewords of the final centroids:
                // greedy codes.
                for (Eigen::Index i = 0; i < X.rows(); ++i)
                    out.codes(i, Eigen::Index(m) * R + r) = c.labels[std::size_t(i)];
                backend.subtractAssigned(c.centroids);
            }
        }
        if (out.cancelled)
            break;
        if (s.beam == 1) {
            out.afterStage.push_back(backend.reconstructionMetrics());
            continue;
        }
        // Re-encode stages 0..r with the beam; the next stage trains on what it leaves.
        const Codes codes = encode(X, out.codebooks, s.beam, backend, r + 1);
        for (int m = 0; m < M; ++m)
            out.codes.block(0, Eigen::Index(m) * R, X.rows(), r + 1) =
                codes.block(0, Eigen::Index(m) * R, X.rows(), r + 1);
        const MatrixRF recon = decode(out.codes, out.codebooks, r + 1);
        out.afterStage.push_back(computeMetrics(X, recon));
        residual = X - recon;
        backend.bind(residual.data(), residual.rows(), int(residual.cols()), weights);
    }
    if (!out.afterStage.empty())
        out.metrics = out.afterStage.back();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

} // namespace gsrq
