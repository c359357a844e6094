#include "core/lm/attention.h"

#include "core/base/error.h"
#include "core/cluster/clustering.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gsrq {

AttentionFidelity attentionFidelity(const AttentionInputs& in, int sampleQueries, std::uint64_t seed)
{
    const Eigen::Index N = in.q->rows();
    const int hd = in.headDim;
    if (in.heads < 1 || in.kvHeads < 1 || in.heads % in.kvHeads != 0)
        throwInvalid("attention: ", in.heads, " query heads cannot share ", in.kvHeads, " KV heads");
    if (in.q->cols() != Eigen::Index(in.heads) * hd || in.k->cols() != Eigen::Index(in.kvHeads) * hd ||
        in.v->cols() != in.k->cols() || in.kHat->cols() != in.k->cols() || in.vHat->cols() != in.k->cols())
        throwInvalid("attention: queries have ", in.q->cols(), " features and keys ", in.k->cols(), "; expected ",
                     in.heads, "×", hd, " and ", in.kvHeads, "×", hd);
    if (in.k->rows() != N || Eigen::Index(in.positions.size()) != N || Eigen::Index(in.sequenceIds.size()) != N)
        throwInvalid("attention: queries, keys, positions and sequence ids differ in row count");

    // Rows of each sequence, for the causal window of a query: same sequence, position ≤ its own.
    const auto picks = sampleRows(N, int(std::min<Eigen::Index>(sampleQueries, N)), seed);
    const int group = in.heads / in.kvHeads;
    const double scale = 1.0 / std::sqrt(double(hd));
    double relSum = 0, overlapSum = 0;
    std::int64_t pairs = 0;
    std::vector<Eigen::Index> window;
    for (const auto t : picks) {
        window.clear();
        for (Eigen::Index j = 0; j < N; ++j)
            if (in.sequenceIds[std::size_t(j)] == in.sequenceIds[std::size_t(t)] &&
                in.positions[std::size_t(j)] <= in.positions[std::size_t(t)])
                window.push_back(j);
        const Eigen::Index W = Eigen::Index(window.size());
        for (int h = 0; h < in.heads; ++h) {
            const int kvh = h / group;
            const Eigen::VectorXd qh = in.q->block(t, Eigen::Index(h) * hd, 1, hd).cast<double>().transpose();
            auto attend = [&](const MatrixRF& K, const MatrixRF& V, Eigen::VectorXd& p) {
                p.resize(W);
                for (Eigen::Index j = 0; j < W; ++j)
                    p[j] = scale *
                           K.block(window[std::size_t(j)], Eigen::Index(kvh) * hd, 1, hd).cast<double>().row(0).dot(qh);
                p = (p.array() - p.maxCoeff()).exp();
                p /= p.sum();
                Eigen::VectorXd o = Eigen::VectorXd::Zero(hd);
                for (Eigen::Index j = 0; j < W; ++j)
                    o += p[j] *
                         V.block(window[std::size_t(j)], Eigen::Index(kvh) * hd, 1, hd).cast<double>().transpose();
                return o;
            };
            Eigen::VectorXd p, pHat;
            const Eigen::VectorXd o = attend(*in.k, *in.v, p);
            const Eigen::VectorXd oHat = attend(*in.kHat, *in.vHat, pHat);
            relSum += o.norm() > 0 ? (o - oHat).norm() / o.norm() : (oHat.norm() > 0 ? 1.0 : 0.0);
            const int top = int(std::min<Eigen::Index>(8, W));
            auto topIdx = [&](const Eigen::VectorXd& w) {
                std::vector<Eigen::Index> idx(static_cast<std::size_t>(W));
                std::iota(idx.begin(), idx.end(), 0);
                std::partial_sort(idx.begin(), idx.begin() + top, idx.end(), [&](Eigen::Index a, Eigen::Index b) {
                    return w[a] > w[b] || (w[a] == w[b] && a < b);
                });
                idx.resize(std::size_t(top));
                std::sort(idx.begin(), idx.end());
                return idx;
            };
            const auto a = topIdx(p), b = topIdx(pHat);
            std::vector<Eigen::Index> common;
            std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
            overlapSum += double(common.size()) / top;
            ++pairs;
        }
    }
    AttentionFidelity f;
    f.queries = int(picks.size());
    if (pairs) {
        f.relativeL2 = relSum / double(pairs);
        f.top8Overlap = overlapSum / double(pairs);
    }
    return f;
}

} // namespace gsrq
