#include "core/lm/decode_cache.h"

#include "core/base/error.h"

#include <cmath>

namespace gsrq {

int PackedCodes::bitsFor(int k)
{
    if (k < 2 || k > 65536 || (k & (k - 1)) != 0)
        throwInvalid("K = ", k, ": packed codes need a power of two from 2 to 65,536");
    int bits = 0;
    while ((1 << bits) < k)
        ++bits;
    return bits;
}

int PackedCodes::bytesFor(int stages, int bits)
{
    const int bytes = (stages * bits + 7) / 8;
    return (bytes + 3) / 4 * 4;
}

namespace {

std::uint8_t* tokenBytes(PackedCodes& p, int m, std::int64_t t)
{
    return p.data.data() + (std::size_t(m) * std::size_t(p.capacity) + std::size_t(t)) * std::size_t(p.bytesPerToken);
}

const std::uint8_t* tokenBytes(const PackedCodes& p, int m, std::int64_t t)
{
    return p.data.data() + (std::size_t(m) * std::size_t(p.capacity) + std::size_t(t)) * std::size_t(p.bytesPerToken);
}

void writeToken(PackedCodes& p, int m, std::int64_t t, const Codes& codes, Eigen::Index row)
{
    std::uint8_t* b = tokenBytes(p, m, t);
    std::fill(b, b + p.bytesPerToken, std::uint8_t(0));
    for (int r = 0; r < p.stages; ++r) {
        const auto c = std::uint32_t(codes(row, Eigen::Index(m) * p.stages + r));
        if (c >> p.bits)
            throwInvalid("code ", c, " of stage ", r, " does not fit in ", p.bits, " bits");
        const int bit0 = r * p.bits;
        for (int i = 0; i < p.bits; ++i)
            if (c >> i & 1u)
                b[(bit0 + i) / 8] |= std::uint8_t(1u << ((bit0 + i) % 8));
    }
}

} // namespace

PackedCodes packCodes(const Codes& codes, int subspaces, int stages, int k, std::int64_t capacity)
{
    if (codes.cols() != Eigen::Index(subspaces) * stages)
        throwInvalid("codes have ", codes.cols(), " columns, not subspaces × stages = ", subspaces * stages);
    PackedCodes p;
    p.subspaces = subspaces;
    p.stages = stages;
    p.bits = PackedCodes::bitsFor(k);
    p.bytesPerToken = PackedCodes::bytesFor(stages, p.bits);
    p.capacity = capacity < 0 ? codes.rows() : capacity;
    if (p.capacity < codes.rows())
        throwInvalid("capacity ", p.capacity, " is below the ", codes.rows(), " tokens given");
    p.data.assign(std::size_t(subspaces) * std::size_t(p.capacity) * std::size_t(p.bytesPerToken), 0);
    appendCodes(p, codes);
    return p;
}

void appendCodes(PackedCodes& p, const Codes& codes)
{
    if (codes.cols() != Eigen::Index(p.subspaces) * p.stages)
        throwInvalid("codes have ", codes.cols(), " columns, not subspaces × stages = ", p.subspaces * p.stages);
    if (p.tokens + codes.rows() > p.capacity)
        throwInvalid("the cache holds ", p.capacity, " tokens; ", p.tokens, " + ", codes.rows(), " do not fit");
    for (Eigen::Index i = 0; i < codes.rows(); ++i)
        for (int m = 0; m < p.subspaces; ++m)
            writeToken(p, m, p.tokens + i, codes, i);
    p.tokens += codes.rows();
}

int packedCode(const PackedCodes& p, int m, std::int64_t t, int r)
{
    const std::uint8_t* b = tokenBytes(p, m, t);
    const int bit0 = r * p.bits;
    std::uint32_t c = 0;
    for (int i = 0; i < p.bits; ++i)
        c |= std::uint32_t(b[(bit0 + i) / 8] >> ((bit0 + i) % 8) & 1u) << i;
    return int(c);
}

Codes unpackCodes(const PackedCodes& p)
{
    Codes c(p.tokens, Eigen::Index(p.subspaces) * p.stages);
    for (std::int64_t t = 0; t < p.tokens; ++t)
        for (int m = 0; m < p.subspaces; ++m)
            for (int r = 0; r < p.stages; ++r)
                c(t, Eigen::Index(m) * p.stages + r) = packedCode(p, m, t, r);
    return c;
}

Eigen::VectorXd ropeRow(const Eigen::VectorXd& x, int headDim, std::int64_t position,
                        const std::vector<double>& invFreq)
{
    Eigen::VectorXd out = x;
    const int half = headDim / 2;
    for (Eigen::Index h0 = 0; h0 + headDim <= x.size(); h0 += headDim)
        for (int i = 0; i < half; ++i) {
            const double a = double(position) * invFreq[std::size_t(i)];
            const double c = std::cos(a), s = std::sin(a);
            const double x0 = x[h0 + i], x1 = x[h0 + i + half];
            out[h0 + i] = x0 * c - x1 * s;
            out[h0 + i + half] = x1 * c + x0 * s;
        }
    return out;
}

namespace {

void checkShapes(const PackedCodes& kc, const Codebooks& kb, const PackedCodes& vc, const Codebooks& vb,
                 const DecodeShape& s)
{
    const std::int64_t f = std::int64_t(s.kvHeads) * s.headDim;
    if (s.heads < 1 || s.kvHeads < 1 || s.heads % s.kvHeads)
        throwInvalid("--heads ", s.heads, " must be a multiple of --kv-heads ", s.kvHeads);
    if (kb.features() != f || vb.features() != f)
        throwInvalid("codebooks cover ", kb.features(), " / ", vb.features(), " features; the KV rows have ", f);
    if (kc.tokens != vc.tokens || kc.subspaces != kb.subspaces || vc.subspaces != vb.subspaces ||
        kc.stages != kb.stages || vc.stages != vb.stages)
        throwInvalid("packed codes and codebooks disagree in tokens, subspaces or stages");
}

Eigen::VectorXd decodeRow(const PackedCodes& p, const Codebooks& cb, std::int64_t t)
{
    Eigen::VectorXd row = Eigen::VectorXd::Zero(cb.features());
    for (int m = 0; m < cb.subspaces; ++m)
        for (int r = 0; r < cb.stages; ++r)
            row.segment(Eigen::Index(m) * cb.dim, cb.dim) +=
                cb.book(m, r).row(packedCode(p, m, t, r)).transpose().cast<double>();
    return row;
}

} // namespace

Eigen::VectorXd naiveAttention(const Eigen::VectorXd& q, const MatrixRD& keys, const MatrixRD& values,
                               const DecodeShape& s)
{
    const int group = s.heads / s.kvHeads;
    const double scale = 1.0 / std::sqrt(double(s.headDim));
    Eigen::VectorXd out = Eigen::VectorXd::Zero(Eigen::Index(s.heads) * s.headDim);
    for (int h = 0; h < s.heads; ++h) {
        const int g = h / group;
        const auto qh = q.segment(Eigen::Index(h) * s.headDim, s.headDim);
        Eigen::VectorXd score = keys.middleCols(Eigen::Index(g) * s.headDim, s.headDim) * qh * scale;
        const double mx = score.maxCoeff();
        const Eigen::VectorXd p = (score.array() - mx).exp().matrix();
        out.segment(Eigen::Index(h) * s.headDim, s.headDim) =
            values.middleCols(Eigen::Index(g) * s.headDim, s.headDim).transpose() * p / p.sum();
    }
    return out;
}

Eigen::VectorXd decodeAttention(const Eigen::VectorXf& q, std::int64_t queryPosition, const PackedCodes& kc,
                                const Codebooks& kb, const PackedCodes& vc, const Codebooks& vb,
                                const std::vector<std::int64_t>& positions, const std::vector<double>& invFreq,
                                const DecodeShape& s)
{
    checkShapes(kc, kb, vc, vb, s);
    if (std::int64_t(positions.size()) != kc.tokens)
        throwInvalid(positions.size(), " positions for ", kc.tokens, " cached tokens");
    MatrixRD keys(kc.tokens, kb.features()), values(vc.tokens, vb.features());
    for (std::int64_t t = 0; t < kc.tokens; ++t) {
        keys.row(t) = ropeRow(decodeRow(kc, kb, t), s.headDim, positions[std::size_t(t)], invFreq).transpose();
        values.row(t) = decodeRow(vc, vb, t).transpose();
    }
    const Eigen::VectorXd qr = ropeRow(q.cast<double>(), s.headDim, queryPosition, invFreq);
    return naiveAttention(qr, keys, values, s);
}

Eigen::VectorXd lookupAttention(const Eigen::VectorXf& qPost, const PackedCodes& kc, const Codebooks& kb,
                                const PackedCodes& vc, const Codebooks& vb, const DecodeShape& s)
{
    checkShapes(kc, kb, vc, vb, s);
    const int group = s.heads / s.kvHeads;
    const double scale = 1.0 / std::sqrt(double(s.headDim));
    const int D = kb.dim;
    Eigen::VectorXd out = Eigen::VectorXd::Zero(Eigen::Index(s.heads) * s.headDim);
    for (int h = 0; h < s.heads; ++h) {
        const int g = h / group;
        const std::int64_t f0 = std::int64_t(g) * s.headDim, f1 = f0 + s.headDim;
        // The query of head h, placed at its KV head's features; the subspaces it touches.
        Eigen::VectorXd qf = Eigen::VectorXd::Zero(kb.features());
        qf.segment(f0, s.headDim) = qPost.segment(Eigen::Index(h) * s.headDim, s.headDim).cast<double>();
        const int m0 = int(f0 / D), m1 = int((f1 + D - 1) / D);
        // Table: q_m · codeword for every (m, r, k) the head touches.
        std::vector<Eigen::VectorXd> table;
        for (int m = m0; m < m1; ++m)
            for (int r = 0; r < kb.stages; ++r)
                table.push_back(kb.book(m, r).cast<double>() * qf.segment(Eigen::Index(m) * D, D));
        Eigen::VectorXd score(kc.tokens);
        for (std::int64_t t = 0; t < kc.tokens; ++t) {
            double sc = 0;
            std::size_t i = 0;
            for (int m = m0; m < m1; ++m)
                for (int r = 0; r < kb.stages; ++r, ++i)
                    sc += table[i][packedCode(kc, m, t, r)];
            score[t] = sc * scale;
        }
        const Eigen::VectorXd p = (score.array() - score.maxCoeff()).exp().matrix();
        const double z = p.sum();
        // Values: the weight each codeword collected, then one small product per (m, r).
        const int vm0 = int(f0 / vb.dim), vm1 = int((f1 + vb.dim - 1) / vb.dim);
        Eigen::VectorXd acc = Eigen::VectorXd::Zero(vb.features());
        for (int m = vm0; m < vm1; ++m)
            for (int r = 0; r < vb.stages; ++r) {
                Eigen::VectorXd w = Eigen::VectorXd::Zero(vb.k);
                for (std::int64_t t = 0; t < vc.tokens; ++t)
                    w[packedCode(vc, m, t, r)] += p[t];
                acc.segment(Eigen::Index(m) * vb.dim, vb.dim) += vb.book(m, r).cast<double>().transpose() * w;
            }
        out.segment(Eigen::Index(h) * s.headDim, s.headDim) = acc.segment(f0, s.headDim) / z;
    }
    return out;
}

CacheBytes cacheBytes(std::int64_t tokens, const DecodeShape& s, int dim, int stages, int k)
{
    const double f = double(s.kvHeads) * s.headDim;
    const int m = int(f / dim);
    CacheBytes b;
    b.fp16 = 2.0 * double(tokens) * f * 2.0;
    b.codes = 2.0 * double(tokens) * m * PackedCodes::bytesFor(stages, PackedCodes::bitsFor(k));
    b.codebooks = 2.0 * double(m) * stages * k * dim * 2.0;
    return b;
}

} // namespace gsrq
