// The transformer's forward pass and decode step (model.h).
#include "core/lm/model.h"

#include "core/base/error.h"
#include "core/lm/quant_gemm.h"
#include "core/lm/quant_matvec.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <omp.h>

namespace gsrq {

namespace {

Eigen::RowVectorXf rmsNorm(const Eigen::Ref<const Eigen::RowVectorXf>& x, const Eigen::VectorXf& w, float eps)
{
    const float ms = x.squaredNorm() / float(x.size());
    return (x / std::sqrt(ms + eps)).cwiseProduct(w.transpose());
}

// a · bᵀ for weights b [out, in], the output columns split among OpenMP's threads (each part one
// Eigen GEMM; Eigen itself runs single-threaded in the engine). Small products stay on one thread.
MatrixRF mulT(const MatrixRF& a, const MatrixRF& b)
{
    MatrixRF out(a.rows(), b.rows());
    const int threads = omp_get_max_threads();
    const Eigen::Index n = b.rows();
    // Small products stay on one thread; one row (a decode step) reads the whole weight matrix, and
    // threads pay from about a megabyte of it.
    const double work = double(a.rows()) * double(n) * double(a.cols());
    const bool oneRowWorthThreads = a.rows() == 1 && double(n) * double(a.cols()) >= double(1 << 18);
    if (threads <= 1 || (work < double(1 << 22) && !oneRowWorthThreads)) {
        out.noalias() = a * b.transpose();
        return out;
    }
    const Eigen::Index chunk = (n + threads - 1) / threads;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < threads; ++t) {
        const Eigen::Index c0 = Eigen::Index(t) * chunk, c = std::min(chunk, n - c0);
        if (c > 0)
            out.middleCols(c0, c).noalias() = a * b.middleRows(c0, c).transpose();
    }
    return out;
}

// Fewer tokens than this multiply a matrix kept only as blocks one token at a time (quant_matvec.h)
// rather than dequantizing it (a panel writes 4 bytes per weight that a one-token product only
// reads as ½–1 byte); from here the GEMM's reuse across tokens pays. Chosen, not tuned.
constexpr Eigen::Index kPanelTokens = 8;

// a · Wᵀ for W kept only as blocks: dequantized a panel of rows at a time into each thread's buffer
// (at most 8 MB of FP32 or 16 rows, and at most its share of the rows; reused across calls), each panel one Eigen GEMM.
// The weights are exactly the FP32 copy's values, so is the product up to the order of the sums; peak memory is the
// panels, not the matrix (Qwen2.5-Coder-1.5B's classifier alone is 0.9 GB in FP32).
MatrixRF mulBlocksT(const MatrixRF& a, const QuantMatrix& w)
{
    MatrixRF out(a.rows(), w.rows);
    if (w.rows == 0 || w.cols == 0) {
        out.setZero();
        return out;
    }
    const int threads = omp_get_max_threads();
    const std::int64_t most = std::max<std::int64_t>(16, (std::int64_t(2) << 20) / w.cols); // rows per panel
    const std::int64_t perThread = (w.rows + threads - 1) / threads;
    const std::int64_t panel = std::min(most, perThread);
    const std::int64_t panels = (w.rows + panel - 1) / panel;
#pragma omp parallel for schedule(dynamic) if (threads > 1 && panels > 1)
    for (std::int64_t p = 0; p < panels; ++p) {
        thread_local std::vector<float> buffer;
        const std::int64_t r0 = p * panel, n = std::min(panel, w.rows - r0);
        buffer.resize(std::size_t(n * w.cols));
        quantRows(w, r0, n, buffer.data());
        const Eigen::Map<const MatrixRF> part(buffer.data(), Eigen::Index(n), Eigen::Index(w.cols));
        out.middleCols(Eigen::Index(r0), Eigen::Index(n)).noalias() = a * part.transpose();
    }
    return out;
}

} // namespace

TransformerModel::TransformerModel(ModelConfig cfg, ModelWeights weights)
    : m_cfg(std::move(cfg)), m_w(std::move(weights)), m_invFreq(ropeInvFreq(m_cfg.ropeTheta, m_cfg.headDim()))
{
}

MatrixRF TransformerModel::product(const MatrixRF& h, const MatrixRF& w, const std::vector<QuantMatrix>* q,
                                   std::size_t l, StepWeights weights, const Q8Activations* hq) const
{
    const ModelWeightBlocks* blocks = m_w.blocks.get();
    const QuantMatrix* m = !blocks ? nullptr : q ? &(*q)[l] : &blocks->classifier;
    // No blocks: the FP32 matrix (the loaders keep one of every matrix without).
    if (!m || !*m)
        return mulT(h, w);
    // FP32 activations over many tokens, or the FP32 path: the FP32 copy where the loader kept one
    // (Eigen's GEMM reuses each weight across the tokens where the one-token kernels would reread the
    // blocks), else the blocks dequantized a panel at a time for as many tokens.
    const bool copy = w.size() > 0;
    const bool q8 = weights == StepWeights::BlocksQ8 && m->cols % 32 == 0;
    if (copy && (weights == StepWeights::Fp32 || (weights == StepWeights::Blocks && h.rows() > 1)))
        return mulT(h, w);
    if (!q8 && h.rows() >= kPanelTokens)
        return mulBlocksT(h, *m);
    MatrixRF y(h.rows(), m->rows);
    if (q8) {
        if (hq && hq->rows == h.rows() && hq->cols == h.cols()) {
            quantGemm(*m, *hq, y.data(), y.cols());
        } else {
            Q8Activations x;
            quantizeActivations(h.data(), h.rows(), h.cols(), h.cols(), x);
            quantGemm(*m, x, y.data(), y.cols());
        }
    } else {
        for (Eigen::Index t = 0; t < h.rows(); ++t)
            quantMatVec(*m, h.row(t).data(), y.row(t).data());
    }
    return y;
}

void TransformerModel::embedding(std::int32_t token, float* out) const
{
    if (m_w.embed.size() > 0) {
        Eigen::Map<Eigen::RowVectorXf>(out, m_cfg.dim) = m_w.embed.row(token);
        return;
    }
    quantRows(m_w.blocks->embed, token, 1, out);
}

std::int64_t TransformerModel::fp32WeightBytes() const
{
    std::int64_t n = m_w.embed.size() + m_w.classifier.size();
    for (const auto* v : {&m_w.wq, &m_w.wk, &m_w.wv, &m_w.wo, &m_w.w1, &m_w.w2, &m_w.w3})
        for (const auto& m : *v)
            n += m.size();
    return n * std::int64_t(sizeof(float));
}

MatrixRF TransformerModel::forward(std::span<const std::int32_t> tokens, Cache& cache, const KvHook& hook,
                                   Logits logits, std::optional<StepWeights> asked) const
{
    const StepWeights weights = asked.value_or(m_forwardWeights);
    const ModelWeightBlocks* blocks = m_w.blocks.get();
    // h rounded to 8 bits once for the products that share it (q, k, v; gate, up).
    Q8Activations hq;
    const bool q8 = blocks && weights == StepWeights::BlocksQ8 && m_cfg.dim % 32 == 0;
    const auto shared = [&](const MatrixRF& h) {
        if (q8)
            quantizeActivations(h.data(), h.rows(), h.cols(), h.cols(), hq);
    };
    const auto mul = [&](const MatrixRF& a, const MatrixRF& w, const std::vector<QuantMatrix> ModelWeightBlocks::*q,
                         int l, bool useShared = false) {
        return product(a, w, blocks ? &(blocks->*q) : nullptr, std::size_t(l), weights,
                       useShared && q8 ? &hq : nullptr);
    };

    const auto& c = m_cfg;
    const int T = int(tokens.size()), start = cache.length, hd = c.headDim(), group = c.heads / c.kvHeads;
    if (start + T > c.maxSeq)
        throwInvalid(c.architecture, " model: ", start + T, " positions, the model was built for ", c.maxSeq);
    for (auto t : tokens)
        if (t < 0 || t >= c.vocab)
            throwInvalid(c.architecture, " model: token ", t, " is outside the vocabulary (", c.vocab, ")");
    if (cache.keys.empty()) {
        cache.keys.assign(std::size_t(c.layers), MatrixRF(0, c.kvDim()));
        cache.values.assign(std::size_t(c.layers), MatrixRF(0, c.kvDim()));
    }
    std::vector<std::int64_t> positions(static_cast<std::size_t>(T));
    std::iota(positions.begin(), positions.end(), std::int64_t(start));

    MatrixRF x(T, c.dim);
    for (int t = 0; t < T; ++t)
        embedding(tokens[std::size_t(t)], x.row(t).data());
    const float scale = 1.0f / std::sqrt(float(hd));
    MatrixRF h(T, c.dim);
    for (int l = 0; l < c.layers; ++l) {
        for (int t = 0; t < T; ++t)
            h.row(t) = rmsNorm(x.row(t), m_w.attnNorm[std::size_t(l)], c.rmsEps);
        shared(h);
        MatrixRF q = mul(h, m_w.wq[std::size_t(l)], &ModelWeightBlocks::wq, l, true);
        MatrixRF k = mul(h, m_w.wk[std::size_t(l)], &ModelWeightBlocks::wk, l, true);
        MatrixRF v = mul(h, m_w.wv[std::size_t(l)], &ModelWeightBlocks::wv, l, true);
        if (c.attentionBias) {
            q.rowwise() += m_w.bq[std::size_t(l)];
            k.rowwise() += m_w.bk[std::size_t(l)];
            v.rowwise() += m_w.bv[std::size_t(l)];
        }
        if (hook)
            hook(l, k, v, positions);
        q = applyRope(q, hd, positions, m_invFreq, c.pairing);
        k = applyRope(k, hd, positions, m_invFreq, c.pairing);
        auto& K = cache.keys[std::size_t(l)];
        auto& V = cache.values[std::size_t(l)];
        K.conservativeResize(start + T, Eigen::NoChange);
        V.conservativeResize(start + T, Eigen::NoChange);
        K.bottomRows(T) = k;
        V.bottomRows(T) = v;

        MatrixRF attn(T, c.dim);
        // Per KV head, its group's queries stacked (a GQA group reads each key and value row once a
        // block), in blocks of rows against the keys they can see: the scores of a block are (group ·
        // rows) × visible keys (16 MB at 16K keys, not T × (start + T)), each row's softmax zero past
        // its causal end, and the values multiplied in one product.
        const int kRows = std::max(16, 256 / group);
        const int blocksPerHead = (T + kRows - 1) / kRows;
#pragma omp parallel for schedule(dynamic) if (T > 1)
        for (int task = 0; task < c.kvHeads * blocksPerHead; ++task) {
            const int kvh = task / blocksPerHead, r0 = (task % blocksPerHead) * kRows;
            const int rows = std::min(kRows, T - r0), seen = start + r0 + rows;
            MatrixRF qs(group * rows, hd);
            for (int g = 0; g < group; ++g)
                qs.middleRows(g * rows, rows) = q.block(r0, (kvh * group + g) * hd, rows, hd);
            MatrixRF s = (qs * K.block(0, kvh * hd, seen, hd).transpose()) * scale;
            for (int i = 0; i < group * rows; ++i) {
                const int visible = start + r0 + i % rows + 1; // causal
                auto p = s.row(i);
                const float top = p.head(visible).maxCoeff();
                p.head(visible) = (p.head(visible).array() - top).exp();
                p.head(visible) /= p.head(visible).sum();
                p.tail(seen - visible).setZero();
            }
            const MatrixRF o = s * V.block(0, kvh * hd, seen, hd);
            for (int g = 0; g < group; ++g)
                attn.block(r0, (kvh * group + g) * hd, rows, hd) = o.middleRows(g * rows, rows);
        }
        x += mul(attn, m_w.wo[std::size_t(l)], &ModelWeightBlocks::wo, l);
        for (int t = 0; t < T; ++t)
            h.row(t) = rmsNorm(x.row(t), m_w.ffnNorm[std::size_t(l)], c.rmsEps);
        shared(h);
        MatrixRF a = mul(h, m_w.w1[std::size_t(l)], &ModelWeightBlocks::w1, l, true);
        const MatrixRF b = mul(h, m_w.w3[std::size_t(l)], &ModelWeightBlocks::w3, l, true);
        a.array() = (a.array() / (1.0f + (-a.array()).exp())) * b.array(); // silu(W1 h) ⊙ W3 h, in place
        x += mul(a, m_w.w2[std::size_t(l)], &ModelWeightBlocks::w2, l);
    }
    cache.length = start + T;
    const int first = logits == Logits::All ? 0 : logits == Logits::Last ? std::max(T - 1, 0) : T;
    MatrixRF out(T - first, c.dim);
    for (int t = first; t < T; ++t)
        out.row(t - first) = rmsNorm(x.row(t), m_w.finalNorm, c.rmsEps);
    return product(out, m_cfg.sharedClassifier ? m_w.embed : m_w.classifier, nullptr, 0, weights);
}

Eigen::RowVectorXf TransformerModel::prefill(std::span<const std::int32_t> tokens, Cache& cache, int chunk,
                                             const KvHook& hook, std::optional<StepWeights> weights) const
{
    if (tokens.empty())
        throwInvalid("prefill: no tokens");
    if (chunk < 1)
        throwInvalid("prefill: chunks of ", chunk, " tokens");
    MatrixRF last;
    for (std::size_t at = 0; at < tokens.size(); at += std::size_t(chunk)) {
        const std::size_t n = std::min(tokens.size() - at, std::size_t(chunk));
        const bool final = at + n == tokens.size();
        last = forward(tokens.subspan(at, n), cache, hook, final ? Logits::Last : Logits::None, weights);
    }
    return last.row(0);
}

std::string TransformerModel::weightBlocksNote() const
{
    if (!m_w.blocks || m_w.blocks->blockMatrices() == 0)
        return {};
    return cat(m_w.blocks->types(), " blocks for ", m_w.blocks->blockMatrices(), " of ", m_w.blocks->matrices(),
               " matrices");
}

Eigen::RowVectorXf TransformerModel::decodeStep(std::int32_t token, std::int64_t position, const StepAttention& attend,
                                                StepWeights weights) const
{
    const auto& c = m_cfg;
    const ModelWeightBlocks* blocks = m_w.blocks.get();
    const auto mul = [&](const MatrixRF& h, const MatrixRF& w, const std::vector<QuantMatrix> ModelWeightBlocks::*q,
                         std::size_t l) { return product(h, w, blocks ? &(blocks->*q) : nullptr, l, weights); };
    if (token < 0 || token >= c.vocab)
        throwInvalid("decode: token ", token, " is outside the vocabulary (", c.vocab, ")");
    const int hd = c.headDim();
    const std::vector<std::int64_t> pos{position};
    MatrixRF x(1, c.dim);
    embedding(token, x.data());
    MatrixRF h(1, c.dim);
    for (int l = 0; l < c.layers; ++l) {
        const auto L = std::size_t(l);
        h.row(0) = rmsNorm(x.row(0), m_w.attnNorm[L], c.rmsEps);
        MatrixRF q = mul(h, m_w.wq[L], &ModelWeightBlocks::wq, L), k = mul(h, m_w.wk[L], &ModelWeightBlocks::wk, L),
                 v = mul(h, m_w.wv[L], &ModelWeightBlocks::wv, L);
        if (c.attentionBias) {
            q.row(0) += m_w.bq[L];
            k.row(0) += m_w.bk[L];
            v.row(0) += m_w.bv[L];
        }
        q = applyRope(q, hd, pos, m_invFreq, c.pairing);
        k = applyRope(k, hd, pos, m_invFreq, c.pairing);
        const MatrixRF attn = attend(l, q.row(0), k.row(0), v.row(0));
        if (attn.cols() != c.dim)
            throwRuntime("decode: layer ", l, "'s attention gave ", attn.cols(), " values; heads × head_dim is ",
                         c.dim);
        x += mul(attn, m_w.wo[L], &ModelWeightBlocks::wo, L);
        h.row(0) = rmsNorm(x.row(0), m_w.ffnNorm[L], c.rmsEps);
        const MatrixRF a = mul(h, m_w.w1[L], &ModelWeightBlocks::w1, L);
        const MatrixRF b = mul(h, m_w.w3[L], &ModelWeightBlocks::w3, L);
        const MatrixRF g = (a.array() / (1.0f + (-a.array()).exp())) * b.array();
        x += mul(g, m_w.w2[L], &ModelWeightBlocks::w2, L);
    }
    h.row(0) = rmsNorm(x.row(0), m_w.finalNorm, c.rmsEps);
    return product(h, m_cfg.sharedClassifier ? m_w.embed : m_w.classifier, nullptr, 0, weights).row(0);
}

const char* stepWeightsName(TransformerModel::StepWeights weights)
{
    switch (weights) {
    case TransformerModel::StepWeights::Fp32:
        return "fp32";
    case TransformerModel::StepWeights::Blocks:
        return "blocks";
    case TransformerModel::StepWeights::BlocksQ8:
        return "blocks-q8";
    }
    return "?";
}

std::optional<TransformerModel::StepWeights> parseStepWeights(const std::string& name)
{
    for (const auto w : {TransformerModel::StepWeights::Fp32, TransformerModel::StepWeights::Blocks,
                         TransformerModel::StepWeights::BlocksQ8})
        if (name == stepWeightsName(w))
            return w;
    return std::nullopt;
}

} // namespace gsrq
