// Joint refinement of a residual quantizer's codebooks and codes after its greedy stages
// (refineJointly, quantizer.h): the least-squares codewords of all stages with the codes fixed, then
// the codes re-encoded with the codewords fixed.

#include "core/base/error.h"
#include "core/cluster/quantizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include <Eigen/Cholesky>

namespace gsrq {

double weightedObjective(const RowsRef& X, const float* weights, const Codes& codes, const Codebooks& cb)
{
    const MatrixRF err = X - decode(codes, cb);
    double num = 0, den = 0;
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
        const double w = weights ? double(weights[i]) : 1.0;
        num += w * double(err.row(i).cast<double>().squaredNorm());
        den += w * double(X.row(i).cast<double>().squaredNorm());
    }
    return den > 0 ? num / den : 0.0;
}

namespace {

// Step 1 of a refinement round for subspace m: the least-squares codewords of all its stages for
// the codes fixed, in double precision.
void leastSquaresCodewords(const MatrixRF& Xm, const float* weights, const Codes& codes, Codebooks& cb, int m)
{
    const int R = cb.stages, K = cb.k, D = cb.dim;
    const Eigen::Index n = Eigen::Index(R) * K;
    Eigen::MatrixXd G = Eigen::MatrixXd::Zero(n, n); // AᵀWA: weighted co-occurrence of codewords
    Eigen::MatrixXd B = Eigen::MatrixXd::Zero(n, D); // AᵀWX: weighted sums of the rows using each
    std::vector<Eigen::Index> idx(static_cast<std::size_t>(R));
    for (Eigen::Index i = 0; i < Xm.rows(); ++i) {
        const double w = weights ? double(weights[i]) : 1.0;
        if (w == 0)
            continue;
        for (int r = 0; r < R; ++r)
            idx[std::size_t(r)] = Eigen::Index(r) * K + codes(i, Eigen::Index(m) * R + r);
        const Eigen::RowVectorXd x = Xm.row(i).cast<double>() * w;
        for (int r = 0; r < R; ++r) {
            const Eigen::Index a = idx[std::size_t(r)];
            B.row(a) += x;
            for (int q = 0; q < R; ++q)
                G(a, idx[std::size_t(q)]) += w;
        }
    }
    Eigen::MatrixXd old(n, D);
    for (int r = 0; r < R; ++r)
        old.middleRows(Eigen::Index(r) * K, K) = cb.book(m, r).cast<double>();
    // A ridge far below any used codeword's weight: unused codewords stay where they were, and the
    // system stays positive definite when two codewords are always used together.
    const double lambda = 1e-9 * std::max(G.diagonal().mean(), 1e-300);
    G.diagonal().array() += lambda;
    B += lambda * old;
    const Eigen::LLT<Eigen::MatrixXd> llt(G);
    if (llt.info() != Eigen::Success)
        return; // cannot happen with λ > 0; the codewords are left as they were
    const Eigen::MatrixXd C = llt.solve(B);
    if (!C.allFinite())
        return;
    for (int r = 0; r < R; ++r)
        cb.book(m, r) = C.middleRows(Eigen::Index(r) * K, K).cast<float>();
}

// Per (row, subspace) squared errors of codes under codebooks.
Eigen::MatrixXd blockErrors(const RowsRef& X, const Codes& codes, const Codebooks& cb)
{
    const MatrixRF err = X - decode(codes, cb);
    Eigen::MatrixXd e(X.rows(), cb.subspaces);
    for (int m = 0; m < cb.subspaces; ++m)
        e.col(m) = err.middleCols(Eigen::Index(m) * cb.dim, cb.dim).cast<double>().rowwise().squaredNorm();
    return e;
}

} // namespace

bool refineJointly(const RowsRef& X, const float* weights, int rounds, int beam, ClusterBackend& backend,
                   RqTrainResult& result, const ProgressFn& progress, const HeldoutFn& heldout)
{
    Codebooks& cb = result.codebooks;
    if (!cb.order.empty()) { // strided subspaces: refine the rows in the codebooks' order
        Codebooks ordered = cb;
        const MatrixRF rows = inBookOrder(X, cb);
        RqTrainResult inner = result;
        inner.codebooks.order.clear();
        const HeldoutFn eval = heldout ? HeldoutFn([&](const Codebooks& plain) {
            Codebooks withOrder = plain;
            withOrder.order = ordered.order;
            return heldout(withOrder);
        })
                                       : HeldoutFn();
        const bool done = refineJointly(rows, weights, rounds, beam, backend, inner, progress, eval);
        inner.codebooks.order = ordered.order;
        result = std::move(inner);
        return done;
    }
    const int M = cb.subspaces;
    Codes& codes = result.codes;
    result.objectiveBeforeRefine = weightedObjective(X, weights, codes, cb);
    if (heldout)
        result.heldoutBeforeRefine = heldout(cb);
    // The round kept: the last, or with held-out rows the lowest held-out NMSE so far.
    struct Kept {
        int round = 0;
        Codebooks cb;
        Codes codes;
        QuantMetrics train;
        double heldoutNmse = 0;
    };
    std::optional<Kept> best;
    if (heldout)
        best = Kept{0, cb, codes, result.metrics, result.heldoutBeforeRefine->nmse};
    const auto keepBest = [&] {
        if (!best)
            return;
        result.keptRound = best->round;
        if (best->round != (result.refinement.empty() ? 0 : result.refinement.back().round)) {
            cb = std::move(best->cb);
            codes = std::move(best->codes);
            result.metrics = best->train;
        }
    };
    double previous = result.objectiveBeforeRefine;
    for (int round = 1; round <= rounds; ++round) {
        const auto start = std::chrono::steady_clock::now();
        if (progress) {
            ProgressEvent e;
            e.what = cat("refinement round ", round, "/", rounds);
            e.fraction = double(round - 1) / rounds;
            if (!progress(e)) {
                keepBest();
                return false;
            }
        }
        Codebooks next = cb;
        for (int m = 0; m < M; ++m)
            leastSquaresCodewords(X.middleCols(Eigen::Index(m) * cb.dim, cb.dim), weights, codes, next, m);
        RefineRound rr;
        rr.round = round;
        rr.objectiveAfterUpdate = weightedObjective(X, weights, codes, next);
        if (rr.objectiveAfterUpdate > previous) { // rounding only: keep the codewords that were better
            next = cb;
            rr.objectiveAfterUpdate = previous;
            rr.updateReverted = true;
        }
        // Re-encode; keep each (row, subspace)'s new codes only where they lower its error.
        const Codes fresh = encode(X, next, beam, backend);
        const Eigen::MatrixXd before = blockErrors(X, codes, next), after = blockErrors(X, fresh, next);
        for (Eigen::Index i = 0; i < X.rows(); ++i)
            for (int m = 0; m < M; ++m)
                if (after(i, m) < before(i, m)) {
                    const auto block = fresh.block(i, Eigen::Index(m) * cb.stages, 1, cb.stages);
                    if (block != codes.block(i, Eigen::Index(m) * cb.stages, 1, cb.stages)) {
                        codes.block(i, Eigen::Index(m) * cb.stages, 1, cb.stages) = block;
                        ++rr.rowsRecoded;
                    }
                }
        cb = std::move(next);
        rr.objective = weightedObjective(X, weights, codes, cb);
        rr.train = computeMetrics(X, decode(codes, cb));
        result.metrics = rr.train;
        result.keptRound = round;
        if (heldout) {
            rr.heldout = heldout(cb);
            if (rr.heldout->nmse < best->heldoutNmse)
                best = Kept{round, cb, codes, rr.train, rr.heldout->nmse};
        }
        rr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        previous = rr.objective;
        result.refinement.push_back(rr);
    }
    keepBest();
    if (progress) {
        ProgressEvent e;
        e.what = "refinement done";
        e.fraction = 1;
        progress(e);
    }
    return true;
}

} // namespace gsrq
