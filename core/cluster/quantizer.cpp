#include "core/cluster/quantizer.h"

#include "core/base/error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

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

std::optional<BpaChoice> paperBpa(double bpa, std::int64_t headDim, std::int64_t features)
{
    const auto paper = paperBpa(bpa);
    if (!paper || headDim < 32 || headDim == 128) // toy heads (< 32) keep the paper's D
        return paper;
    std::int64_t d = headDim;
    if (paper->dim == 256 && features % (2 * headDim) == 0)
        d = 2 * headDim; // the paper's lowest rate spans two heads
    const double r = bpa * double(d) / 8;
    if (r < 1 || std::abs(r - std::round(r)) > 1e-9)
        return std::nullopt;
    return BpaChoice{int(d), int(std::round(r)), 256};
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

BpaChoice paperBpaFor(double bpa, std::int64_t features, ArgStyle style, std::int64_t headDim)
{
    const bool cli = style == ArgStyle::Cli;
    const auto c = headDim > 0 && features % headDim == 0 ? paperBpa(bpa, headDim, features) : paperBpa(bpa);
    if (c && features % c->dim == 0)
        return *c;
    std::string hint;
    for (const auto& s : suggestBpa(bpa, features))
        hint += cli ? cat(hint.empty() ? "" : "; ", "--dim ", s.dim, " --stages ", s.stages, " --k ", s.k)
                    : cat(hint.empty() ? "" : "; ", "dim=", s.dim, ", stages=", s.stages, ", k=", s.k);
    throwInvalid(cli ? "--bpa " : "bpa=", bpa,
                 c ? cat(": the paper's D=", c->dim, " does not divide the ", features, " features")
                   : std::string(": not one of the paper's settings (2, 1, 0.75, 0.375)"),
                 hint.empty() ? std::string("; no D, R, K reach it exactly")
                              : cat("; settings that reach it exactly: ", hint));
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
    if (s.refine < 0 || s.refine > 100)
        throwInvalid("--refine ", s.refine, ": rounds of joint refinement, 0 to 100");
    if (s.refineBeam < 0 || s.refineBeam > 256)
        throwInvalid("--refine-beam ", s.refineBeam, ": 0 (the training beam) to 256");
    if (s.refine > 0 && std::int64_t(s.stages) * s.k > kMaxRefineCodewords)
        throwInvalid("--refine: the joint solve covers R·K = ", std::int64_t(s.stages) * s.k,
                     " codewords per subspace (--stages ", s.stages, " × --k ", s.k, "); at most ", kMaxRefineCodewords,
                     " (a dense system of their square)");
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

// OpenMP's team for host work given a backend's hostThreads() (0: OpenMP's default; 1 without OpenMP).
int hostTeam(int threads)
{
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}

// The beam states of N rows in one subspace, side by side (row i's arrays at rows i·B..i·B+B−1): the
// cur best partial codes (stages before the next), their residuals and squared errors.
struct SubspaceBeams {
    int B = 1, cur = 1;
    MatrixRF res;        // N·B × D
    Codes codes;         // N·B × R
    Eigen::VectorXf err; // N·B

    SubspaceBeams(const MatrixRF& Xm, int beam, int R)
        : B(beam), res(Xm.rows() * beam, Xm.cols()), codes(Codes::Zero(Xm.rows() * beam, R)),
          err(Eigen::VectorXf::Zero(Xm.rows() * beam))
    {
        for (Eigen::Index i = 0; i < Xm.rows(); ++i) {
            res.row(i * B) = Xm.row(i);
            err[i * B] = res.row(i * B).squaredNorm();
        }
    }
    Eigen::Index rows() const { return res.rows() / B; }

    // Extends every row's beams by stage r (codewords C): of a row's cur × K candidates the B best by
    // squared residual survive, ranked as ‖res − c‖² = ‖res‖² − 2 res·c + ‖c‖² with ties to the earlier
    // candidate (beam, then codeword), their errors recomputed exactly so rounding does not accumulate
    // over stages. The products of a chunk of rows' beams with the codewords are one GEMM.
    void step(int r, const Eigen::Map<const MatrixRF>& C, int threads)
    {
        const Eigen::RowVectorXf cNorm = C.rowwise().squaredNorm().transpose();
        const Eigen::Index N = rows();
        const int K = int(C.rows()), D = int(C.cols());
        const int keep = int(std::min<std::int64_t>(B, std::int64_t(cur) * K));
        constexpr Eigen::Index kChunk = 64;
        const Eigen::Index chunks = (N + kChunk - 1) / kChunk;
        const int team = hostTeam(threads);
#pragma omp parallel num_threads(team)
        {
            MatrixRF beamsOf, S, next(keep, D);
            Codes nextCodes(keep, codes.cols());
            std::vector<float> topValue(std::size_t(keep) + 1);
            std::vector<int> topAt(std::size_t(keep) + 1);
#pragma omp for schedule(dynamic, 4)
            for (Eigen::Index c = 0; c < chunks; ++c) {
                const Eigen::Index i0 = c * kChunk, n = std::min(kChunk, N - i0);
                beamsOf.resize(n * cur, D);
                for (Eigen::Index i = 0; i < n; ++i)
                    beamsOf.middleRows(i * cur, cur) = res.middleRows((i0 + i) * B, cur);
                S.noalias() = beamsOf * C.transpose(); // n·cur × K
                for (Eigen::Index i = 0; i < n; ++i) {
                    const Eigen::Index row = i0 + i;
                    // The keep least (value, candidate) pairs, sorted, by insertion: most candidates
                    // are worse than the current last and cost one comparison.
                    int count = 0;
                    for (int b = 0; b < cur; ++b) {
                        const float e = err[row * B + b];
                        const auto s = S.row(i * cur + b);
                        for (int k = 0; k < K; ++k) {
                            const float v = (-2.0f * s[k] + cNorm[k]) + e;
                            if (count == keep && !(v < topValue[std::size_t(keep) - 1]))
                                continue;
                            int at = count < keep ? count++ : keep - 1;
                            while (at > 0 && v < topValue[std::size_t(at) - 1]) {
                                topValue[std::size_t(at)] = topValue[std::size_t(at) - 1];
                                topAt[std::size_t(at)] = topAt[std::size_t(at) - 1];
                                --at;
                            }
                            topValue[std::size_t(at)] = v;
                            topAt[std::size_t(at)] = b * K + k;
                        }
                    }
                    for (int j = 0; j < keep; ++j) {
                        const int b = topAt[std::size_t(j)] / K, k = topAt[std::size_t(j)] % K;
                        next.row(j) = res.row(row * B + b) - C.row(k);
                        nextCodes.row(j) = codes.row(row * B + b);
                        nextCodes(j, r) = k;
                    }
                    res.middleRows(row * B, keep) = next;
                    codes.middleRows(row * B, keep) = nextCodes;
                    for (int j = 0; j < keep; ++j)
                        err[row * B + j] = res.row(row * B + j).squaredNorm();
                }
            }
        }
        cur = keep;
    }
    // Row i's best codes so far (the least exact error): its row in codes.
    Eigen::Index best(Eigen::Index i) const
    {
        Eigen::Index at = 0;
        err.segment(i * B, cur).minCoeff(&at);
        return i * B + at;
    }
};

// Beam search over stages 0..R-1 of one subspace: the B best partial codes per row survive each
// stage (SubspaceBeams::step). Xm: N × D. Returns N × R codes.
Codes beamEncodeSubspace(const MatrixRF& Xm, const Codebooks& cb, int m, int R, int B, int threads)
{
    SubspaceBeams beams(Xm, B, R);
    for (int r = 0; r < R; ++r)
        beams.step(r, cb.book(m, r), threads);
    Codes out(Xm.rows(), R);
    for (Eigen::Index i = 0; i < Xm.rows(); ++i)
        out.row(i) = beams.codes.row(beams.best(i));
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

// The codes from their columns, each a clustering's labels (an empty column: zeros, a clustering not
// run). Written a column at a time, each label would touch its own cache line of the row-major codes
// (0.3–0.5 s at 262,144 rows × 128 columns on 2 cores); here a tile of 64 rows of every column is
// gathered first and the rows are written whole.
Codes codesFromColumns(const std::vector<std::vector<std::int32_t>>& columns, Eigen::Index rows, int threads)
{
    const Eigen::Index C = Eigen::Index(columns.size());
    for (const auto& col : columns)
        if (!col.empty() && Eigen::Index(col.size()) != rows)
            throwInvalid("a clustering gave ", col.size(), " labels for ", rows, " rows");
    Codes codes(rows, C);
    constexpr Eigen::Index kTile = 64;
    const Eigen::Index tiles = (rows + kTile - 1) / kTile;
    const int team = hostTeam(threads);
#pragma omp parallel num_threads(team)
    {
        std::vector<std::int32_t> tile(std::size_t(C * kTile));
#pragma omp for schedule(static)
        for (Eigen::Index t = 0; t < tiles; ++t) {
            const Eigen::Index i0 = t * kTile, n = std::min(kTile, rows - i0);
            for (Eigen::Index j = 0; j < C; ++j) {
                std::int32_t* dst = tile.data() + j * kTile;
                const auto& col = columns[std::size_t(j)];
                if (col.empty())
                    std::fill_n(dst, n, 0);
                else
                    std::copy_n(col.data() + i0, n, dst);
            }
            for (Eigen::Index i = 0; i < n; ++i) {
                std::int32_t* row = codes.data() + (i0 + i) * C;
                for (Eigen::Index j = 0; j < C; ++j)
                    row[j] = tile[std::size_t(j * kTile + i)];
            }
        }
    }
    return codes;
}

} // namespace

MatrixRF inBookOrder(const RowsRef& X, const Codebooks& cb)
{
    MatrixRF out(X.rows(), X.cols());
    for (Eigen::Index j = 0; j < X.cols(); ++j)
        out.col(j) = X.col(cb.order[std::size_t(j)]);
    return out;
}

Codes encode(const RowsRef& X, const Codebooks& cb, int beam, ClusterBackend& backend, int stages)
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
    if (beam > 1) {
        Codes codes = Codes::Zero(X.rows(), Eigen::Index(cb.subspaces) * cb.stages);
        for (int m = 0; m < cb.subspaces; ++m) {
            const MatrixRF Xm = X.middleCols(Eigen::Index(m) * cb.dim, cb.dim);
            codes.block(0, Eigen::Index(m) * cb.stages, X.rows(), R) =
                beamEncodeSubspace(Xm, cb, m, R, beam, backend.hostThreads());
        }
        return codes;
    }
    if (!isContiguous(X)) // the backend reads whole rows
        return encode(MatrixRF(X), cb, beam, backend, stages);
    // Greedy: the nearest codeword per stage, on the residual the backend keeps; a column of labels
    // per (subspace, stage), the codes' column m·stages + r (stages past R: zeros).
    std::vector<std::vector<std::int32_t>> columns(std::size_t(cb.subspaces) * std::size_t(cb.stages));
    AssignStats st;
    backend.bind(X.data(), X.rows(), int(X.cols()), nullptr);
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < cb.subspaces; ++m) {
            const MatrixRF C = cb.book(m, r);
            backend.selectBlock(m * cb.dim, cb.dim, 1e-8f);
            backend.assign(C, false, st);
            auto& labels = columns[std::size_t(m) * std::size_t(cb.stages) + std::size_t(r)];
            labels.resize(std::size_t(X.rows()));
            backend.readLabels(labels);
            backend.subtractAssigned(C);
        }
    return codesFromColumns(columns, X.rows(), backend.hostThreads());
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

RqTrainResult trainResidualQuantizer(const RowsRef& X, const float* weights, const RqSettings& s,
                                     ClusterBackend& backend, const ProgressFn& progress, const HeldoutFn& heldout)
{
    validateRq(s, X.rows(), X.cols());
    if (s.refine > 0) {
        // The greedy stages, then the rounds: the stages take the first 80% of the progress.
        RqSettings greedy = s;
        greedy.refine = 0;
        const auto scaled = [&](double from, double share) {
            return progress ? ProgressFn([&progress, from, share](const ProgressEvent& e) {
                ProgressEvent x = e;
                x.fraction = from + share * e.fraction;
                return progress(x);
            })
                            : ProgressFn();
        };
        auto out = trainResidualQuantizer(X, weights, greedy, backend, scaled(0.0, 0.8));
        if (!out.cancelled) {
            const auto start = std::chrono::steady_clock::now();
            out.cancelled = !refineJointly(X, weights, s.refine, s.refineBeam > 0 ? s.refineBeam : s.beam, backend, out,
                                           scaled(0.8, 0.2), heldout);
            out.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        return out;
    }
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
    if (!isContiguous(X)) // the backend reads whole rows
        return trainResidualQuantizer(MatrixRF(X), weights, s, backend, progress, heldout);
    const auto start = std::chrono::steady_clock::now();
    RqTrainResult out;
    out.codebooks.allocate(D, R, s.k, M);
    const bool beamSearch = s.beam > 1;
    // Greedy codes: each kept clustering's labels, the codes' column m·R + r, written into the codes
    // once training ends (codesFromColumns). Beam codes: written per stage from the beams.
    std::vector<std::vector<std::int32_t>> codeColumns(beamSearch ? 0 : std::size_t(M) * std::size_t(R));
    if (beamSearch)
        out.codes = Codes::Zero(X.rows(), Eigen::Index(M) * R);
    validateWeights(weights, X.rows());
    // The backend keeps the residual and a running reconstruction: each stage adds its codewords
    // in stage order, exactly the sums a decoder of the exported codes makes.
    backend.bind(X.data(), X.rows(), int(X.cols()), weights);
    // Beam search: each subspace's beams, extended by each stage once it is trained, and the rows (and
    // weights) a stage's K-means runs on: every beam's residual, or each row's best beam's.
    std::vector<SubspaceBeams> beams;
    MatrixRF beamRows;
    std::vector<float> beamWeights;
    if (beamSearch)
        for (int m = 0; m < M; ++m)
            beams.emplace_back(MatrixRF(X.middleCols(Eigen::Index(m) * D, D)), s.beam, R);
    const int units = std::max(1, s.iterations); // a clustering's share of the progress
    const double total = double(M) * R * units;
    double done = 0;

    const auto stageParams = [&](int r, int m) {
        ClusteringParams p;
        p.k = s.k;
        p.maxIterations = s.iterations;
        p.seed = s.seed + 7919ull * std::uint64_t(r * M + m); // each stage samples its own rows
        p.reseedEmpty = s.reseedEmpty;
        p.emaDecay = s.emaDecay;
        return p;
    };
    // A clustering's share done after this iteration of it.
    const auto share = [&](const IterationStats& it) {
        return double(it.last ? units : std::min(it.iteration, s.iterations));
    };
    const auto report = [&](int r, int m, const IterationStats& it, double doneNow) {
        if (!progress)
            return true;
        const std::string what = cat("stage ", r + 1, "/", R, " subspace ", m + 1, "/", M);
        if (!progress({what, std::min(1.0, doneNow / total), it, {}, s.method, m, r, -1, std::nullopt}))
            out.cancelled = true;
        return !out.cancelled;
    };
    // A trained subspace of a stage: its codebook, its record, and (greedy codes) its codes taken off the
    // residual. The backend's current block or member is that subspace's.
    const auto keep = [&](int r, int m, ClusteringResult& c) {
        out.codebooks.book(m, r) = c.centroids;
        out.clusterings.push_back({m, r, c.iterations, c.stop, c.seconds, std::move(c.history)});
        if (beamSearch && !out.cancelled)
            beams[std::size_t(m)].step(r, std::as_const(out.codebooks).book(m, r), backend.hostThreads());
        if (s.beam == 1 && !out.cancelled) {
            // The clustering's labels are the nearest codewords of the final centroids: greedy codes.
            codeColumns[std::size_t(m) * std::size_t(R) + std::size_t(r)] = std::move(c.labels);
            backend.subtractAssigned(c.centroids);
        }
    };
    // Without beams a stage's subspaces are independent clusterings of the same rows: a backend that
    // runs several at once takes them together (as many as it can at a time; one by one otherwise).
    const int together = std::min(M, std::max(1, backend.batchCapacity(D, s.k)));

    for (int r = 0; r < R && !out.cancelled; ++r) {
        if (!beamSearch) {
            for (int m0 = 0; m0 < M && !out.cancelled; m0 += together) {
                const int count = std::min(together, M - m0);
                std::vector<int> cols(static_cast<std::size_t>(count));
                std::vector<ClusteringParams> params;
                for (int b = 0; b < count; ++b) {
                    cols[std::size_t(b)] = (m0 + b) * D;
                    params.push_back(stageParams(r, m0 + b));
                }
                backend.selectBlocks(cols, D, params.front().epsilon);
                std::vector<double> shares(static_cast<std::size_t>(count), 0.0);
                auto results = clusterSelectedMembers(backend, s.method, params, [&](int b, const IterationStats& it) {
                    shares[std::size_t(b)] = share(it);
                    double now = done;
                    for (double x : shares)
                        now += x;
                    return report(r, m0 + b, it, now);
                });
                done += double(count) * units;
                for (int b = 0; b < count; ++b) {
                    backend.focusMember(b);
                    keep(r, m0 + b, results[std::size_t(b)]);
                }
            }
        }
        // With beams, each subspace's clustering runs on its beams' rows, bound anew.
        for (int m = 0; beamSearch && m < M && !out.cancelled; ++m) {
            const ClusteringParams p = stageParams(r, m);
            // Every row's surviving beams (or its best), each with the row's weight.
            const SubspaceBeams& b = beams[std::size_t(m)];
            const Eigen::Index N = X.rows();
            const int per = s.trainOnAllBeams ? b.cur : 1;
            beamRows.resize(N * per, D);
            for (Eigen::Index i = 0; i < N; ++i)
                if (s.trainOnAllBeams)
                    beamRows.middleRows(i * per, per) = b.res.middleRows(i * b.B, per);
                else
                    beamRows.row(i) = b.res.row(b.best(i));
            if (weights) {
                beamWeights.resize(std::size_t(N * per));
                for (Eigen::Index i = 0; i < N * per; ++i)
                    beamWeights[std::size_t(i)] = weights[i / per];
            }
            backend.bind(beamRows.data(), beamRows.rows(), D, weights ? beamWeights.data() : nullptr);
            backend.selectBlock(0, D, p.epsilon);
            auto c = clusterSelected(backend, s.method, p,
                                     [&](const IterationStats& it) { return report(r, m, it, done + share(it)); });
            done += units;
            keep(r, m, c);
        }
        if (out.cancelled)
            break;
        if (s.beam == 1) {
            out.afterStage.push_back(backend.reconstructionMetrics());
        } else {
            // Each row's best beam so far, in every subspace: the codes of stages 0..r.
            for (int m = 0; m < M; ++m) {
                const SubspaceBeams& b = beams[std::size_t(m)];
                for (Eigen::Index i = 0; i < X.rows(); ++i)
                    out.codes.block(i, Eigen::Index(m) * R, 1, r + 1) = b.codes.block(b.best(i), 0, 1, r + 1);
            }
            out.afterStage.push_back(computeMetrics(X, decode(out.codes, out.codebooks, r + 1)));
        }
        if (s.reportStages && progress) {
            const ProgressEvent stageEnd{cat("stage ", r + 1, "/", R, " done"),
                                         std::min(1.0, (r + 1.0) * M * units / total),
                                         {},
                                         {},
                                         s.method,
                                         -1,
                                         r,
                                         -1,
                                         out.afterStage.back()};
            if (!progress(stageEnd))
                out.cancelled = true;
        }
    }
    if (!beamSearch)
        out.codes = codesFromColumns(codeColumns, X.rows(), backend.hostThreads());
    if (!out.afterStage.empty())
        out.metrics = out.afterStage.back();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

} // namespace gsrq
