#include "core/lm/llama2c.h"

#include "core/base/error.h"
#include "core/base/mapped_file.h"
#include "core/lm/quant_matvec.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <omp.h>
#include <queue>

namespace gsrq {

namespace {

// Reads float32 arrays off the checkpoint in order, refusing to run past its end.
class Reader {
public:
    Reader(const std::string& path, const std::byte* p, std::size_t n) : m_path(path), m_p(p), m_n(n) {}

    void skip(std::size_t bytes) { take(bytes); }
    std::int32_t int32()
    {
        std::int32_t v;
        std::memcpy(&v, take(4), 4);
        return v;
    }
    MatrixRF matrix(int rows, int cols, const char* what)
    {
        MatrixRF m(rows, cols);
        const std::size_t bytes = std::size_t(rows) * std::size_t(cols) * 4;
        std::memcpy(m.data(), take(bytes, what), bytes);
        return m;
    }
    Eigen::VectorXf vector(int n, const char* what)
    {
        Eigen::VectorXf v(n);
        std::memcpy(v.data(), take(std::size_t(n) * 4, what), std::size_t(n) * 4);
        return v;
    }

private:
    const std::byte* take(std::size_t bytes, const char* what = "the header")
    {
        if (bytes > m_n - m_at)
            throwInvalid(m_path, ": ends at byte ", m_n, " inside ", what,
                         " (the header's sizes need more; not a llama2.c checkpoint of this shape)");
        const auto* p = m_p + m_at;
        m_at += bytes;
        return p;
    }
    std::string m_path;
    const std::byte* m_p;
    std::size_t m_n, m_at = 0;
};

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

} // namespace

Llama2cModel Llama2cModel::load(const std::string& path)
{
    const auto file = MappedFile::open(path);
    Reader r(path, file->data(), file->size());
    Llama2cModel m;
    auto& c = m.m_cfg;
    c.dim = r.int32();
    c.hidden = r.int32();
    c.layers = r.int32();
    c.heads = r.int32();
    c.kvHeads = r.int32();
    const int vocab = r.int32();
    c.maxSeq = r.int32();
    c.sharedClassifier = vocab > 0;
    c.vocab = std::abs(vocab);
    const auto bad = [&](const char* what) {
        throwInvalid(path, ": not a llama2.c checkpoint (header dim ", c.dim, ", hidden ", c.hidden, ", layers ",
                     c.layers, ", heads ", c.heads, ", kv_heads ", c.kvHeads, ", vocab ", vocab, ", max_seq ", c.maxSeq,
                     ": ", what, ")");
    };
    if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kvHeads <= 0 || c.vocab <= 0 || c.maxSeq <= 0)
        bad("every size must be positive");
    if (c.dim > 65536 || c.hidden > 262144 || c.layers > 1024 || c.vocab > 1 << 22 || c.maxSeq > 1 << 22)
        bad("a size is implausibly large");
    if (c.dim % c.heads != 0 || c.heads % c.kvHeads != 0 || c.headDim() % 2 != 0)
        bad("heads must divide dim, kv_heads divide heads, and head_dim be even");
    // The sizes the header promises, checked before anything is allocated.
    const double need =
        4.0 *
            (double(c.vocab) * c.dim +
             double(c.layers) * (2.0 * c.dim + 2.0 * c.dim * c.dim + 2.0 * c.kvDim() * c.dim + 3.0 * c.hidden * c.dim) +
             c.dim) +
        28;
    if (need > double(file->size()))
        throwInvalid(path, ": ", file->size(), " bytes, but its header (dim ", c.dim, ", layers ", c.layers, ", vocab ",
                     c.vocab, ") needs at least ", std::int64_t(need));

    const int L = c.layers;
    m.m_embed = r.matrix(c.vocab, c.dim, "the token embedding");
    for (int l = 0; l < L; ++l)
        m.m_attnNorm.push_back(r.vector(c.dim, "the attention norms"));
    const auto stack = [&](std::vector<MatrixRF>& out, int rows, int cols, const char* what) {
        for (int l = 0; l < L; ++l)
            out.push_back(r.matrix(rows, cols, what));
    };
    stack(m.m_wq, c.dim, c.dim, "wq");
    stack(m.m_wk, c.kvDim(), c.dim, "wk");
    stack(m.m_wv, c.kvDim(), c.dim, "wv");
    stack(m.m_wo, c.dim, c.dim, "wo");
    for (int l = 0; l < L; ++l)
        m.m_ffnNorm.push_back(r.vector(c.dim, "the FFN norms"));
    stack(m.m_w1, c.hidden, c.dim, "w1");
    stack(m.m_w2, c.dim, c.hidden, "w2");
    stack(m.m_w3, c.hidden, c.dim, "w3");
    m.m_finalNorm = r.vector(c.dim, "the final norm");
    // Two RoPE tables [max_seq, head_dim/2] follow; RoPE is recomputed (theta 10000, interleaved).
    r.skip(std::size_t(c.maxSeq) * std::size_t(c.headDim()) * 4);
    if (!c.sharedClassifier)
        m.m_classifier = r.matrix(c.vocab, c.dim, "the classifier");
    if (!m.m_embed.allFinite())
        throwInvalid(path, ": the token embedding holds NaN or Inf");
    m.m_invFreq = ropeInvFreq(10000.0, c.headDim());
    return m;
}

MatrixRF Llama2cModel::forward(std::span<const std::int32_t> tokens, Cache& cache, const KvHook& hook) const
{
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
        x.row(t) = m_embed.row(tokens[std::size_t(t)]);
    const float scale = 1.0f / std::sqrt(float(hd));
    MatrixRF h(T, c.dim);
    for (int l = 0; l < c.layers; ++l) {
        for (int t = 0; t < T; ++t)
            h.row(t) = rmsNorm(x.row(t), m_attnNorm[std::size_t(l)], c.rmsEps);
        MatrixRF q = mulT(h, m_wq[std::size_t(l)]);
        MatrixRF k = mulT(h, m_wk[std::size_t(l)]);
        MatrixRF v = mulT(h, m_wv[std::size_t(l)]);
        if (c.attentionBias) {
            q.rowwise() += m_bq[std::size_t(l)];
            k.rowwise() += m_bk[std::size_t(l)];
            v.rowwise() += m_bv[std::size_t(l)];
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
#pragma omp parallel for schedule(static) if (T > 1)
        for (int head = 0; head < c.heads; ++head) {
            const int kvh = head / group;
            const auto Kh = K.middleCols(kvh * hd, hd);
            const auto Vh = V.middleCols(kvh * hd, hd);
            const MatrixRF s = (q.middleCols(head * hd, hd) * Kh.transpose()) * scale; // T × (start+T)
            for (int t = 0; t < T; ++t) {
                const int visible = start + t + 1; // causal
                Eigen::RowVectorXf p = s.row(t).head(visible);
                p = (p.array() - p.maxCoeff()).exp();
                p /= p.sum();
                attn.row(t).segment(head * hd, hd) = p * Vh.topRows(visible);
            }
        }
        x += mulT(attn, m_wo[std::size_t(l)]);
        for (int t = 0; t < T; ++t)
            h.row(t) = rmsNorm(x.row(t), m_ffnNorm[std::size_t(l)], c.rmsEps);
        const MatrixRF a = mulT(h, m_w1[std::size_t(l)]);
        const MatrixRF b = mulT(h, m_w3[std::size_t(l)]);
        const MatrixRF g = (a.array() / (1.0f + (-a.array()).exp())) * b.array(); // silu(W1 h) ⊙ W3 h
        x += mulT(g, m_w2[std::size_t(l)]);
    }
    cache.length = start + T;
    for (int t = 0; t < T; ++t)
        h.row(t) = rmsNorm(x.row(t), m_finalNorm, c.rmsEps);
    return mulT(h, m_cfg.sharedClassifier ? m_embed : m_classifier);
}

std::string Llama2cModel::weightBlocksNote() const
{
    if (!m_blocks || m_blocks->blockMatrices() == 0)
        return {};
    return cat(m_blocks->types(), " blocks for ", m_blocks->blockMatrices(), " of ", m_blocks->matrices(), " matrices");
}

Eigen::RowVectorXf Llama2cModel::decodeStep(std::int32_t token, std::int64_t position, const StepAttention& attend,
                                            StepWeights weights) const
{
    const auto& c = m_cfg;
    const ModelWeightBlocks* blocks = weights == StepWeights::Blocks ? m_blocks.get() : nullptr;
    // h · Wᵀ for one row: from the blocks where there are some, else the FP32 matrix.
    const auto mul = [&](const MatrixRF& h, const MatrixRF& w, const std::vector<QuantMatrix>* q,
                         std::size_t l) -> MatrixRF {
        const QuantMatrix* m = blocks && q ? &(*q)[l] : nullptr;
        if (!m || !*m)
            return mulT(h, w);
        MatrixRF y(1, m->rows);
        quantMatVec(*m, h.data(), y.data());
        return y;
    };
    if (token < 0 || token >= c.vocab)
        throwInvalid("decode: token ", token, " is outside the vocabulary (", c.vocab, ")");
    const int hd = c.headDim();
    const std::vector<std::int64_t> pos{position};
    MatrixRF x = m_embed.row(token);
    MatrixRF h(1, c.dim);
    for (int l = 0; l < c.layers; ++l) {
        const auto L = std::size_t(l);
        h.row(0) = rmsNorm(x.row(0), m_attnNorm[L], c.rmsEps);
        MatrixRF q = mul(h, m_wq[L], blocks ? &blocks->wq : nullptr, L),
                 k = mul(h, m_wk[L], blocks ? &blocks->wk : nullptr, L),
                 v = mul(h, m_wv[L], blocks ? &blocks->wv : nullptr, L);
        if (c.attentionBias) {
            q.row(0) += m_bq[L];
            k.row(0) += m_bk[L];
            v.row(0) += m_bv[L];
        }
        q = applyRope(q, hd, pos, m_invFreq, c.pairing);
        k = applyRope(k, hd, pos, m_invFreq, c.pairing);
        const MatrixRF attn = attend(l, q.row(0), k.row(0), v.row(0));
        if (attn.cols() != c.dim)
            throwRuntime("decode: layer ", l, "'s attention gave ", attn.cols(), " values; heads × head_dim is ",
                         c.dim);
        x += mul(attn, m_wo[L], blocks ? &blocks->wo : nullptr, L);
        h.row(0) = rmsNorm(x.row(0), m_ffnNorm[L], c.rmsEps);
        const MatrixRF a = mul(h, m_w1[L], blocks ? &blocks->w1 : nullptr, L);
        const MatrixRF b = mul(h, m_w3[L], blocks ? &blocks->w3 : nullptr, L);
        const MatrixRF g = (a.array() / (1.0f + (-a.array()).exp())) * b.array();
        x += mul(g, m_w2[L], blocks ? &blocks->w2 : nullptr, L);
    }
    h.row(0) = rmsNorm(x.row(0), m_finalNorm, c.rmsEps);
    if (blocks && blocks->classifier) {
        Eigen::RowVectorXf logits(blocks->classifier.rows);
        quantMatVec(blocks->classifier, h.data(), logits.data());
        return logits;
    }
    return mulT(h, m_cfg.sharedClassifier ? m_embed : m_classifier).row(0);
}

Llama2cTokenizer Llama2cTokenizer::load(const std::string& path, int vocab)
{
    if (vocab < 3)
        throwInvalid(path, ": a vocabulary of ", vocab, " tokens has no room for <unk>, <s> and </s>");
    const auto file = MappedFile::open(path);
    const auto* p = reinterpret_cast<const unsigned char*>(file->data());
    const std::size_t n = file->size();
    std::size_t at = 0;
    const auto read = [&](void* out, std::size_t bytes, std::int32_t id) {
        if (bytes > n - at)
            throwInvalid(path, ": ends inside token ", id, " (", n, " bytes); not a llama2.c tokenizer for a ", vocab,
                         "-token model");
        std::memcpy(out, p + at, bytes);
        at += bytes;
    };
    std::int32_t maxLen = 0;
    read(&maxLen, 4, -1);
    if (maxLen <= 0 || maxLen > 4096)
        throwInvalid(path, ": max_token_length ", maxLen, " is not that of a llama2.c tokenizer");
    Llama2cTokenizer tok;
    for (std::int32_t id = 0; id < vocab; ++id) {
        float score;
        std::int32_t len;
        read(&score, 4, id);
        read(&len, 4, id);
        if (len < 0 || len > maxLen)
            throwInvalid(path, ": token ", id, " has length ", len, " (max_token_length ", maxLen, ")");
        std::string s(std::size_t(len), '\0');
        read(s.data(), std::size_t(len), id);
        tok.m_pieces.push_back(std::move(s));
        tok.m_scores.push_back(score);
    }
    if (at != n)
        throwInvalid(path, ": ", n - at, " bytes left after ", vocab,
                     " tokens: a tokenizer of a larger vocabulary than the model's (", vocab, ")");
    // A piece that appears twice maps to its first id, as a sorted-vocabulary search finds it.
    for (std::int32_t id = 0; id < vocab; ++id)
        tok.m_index.emplace(tok.m_pieces[std::size_t(id)], id);
    return tok;
}

std::int32_t Llama2cTokenizer::lookup(const std::string& s) const
{
    const auto it = m_index.find(s);
    return it == m_index.end() ? -1 : it->second;
}

std::vector<std::int32_t> Llama2cTokenizer::encode(const std::string& text) const
{
    std::vector<std::int32_t> ids;
    if (text.empty())
        return ids;
    // sentencepiece's dummy prefix: a leading space.
    if (const auto space = lookup(" "); space >= 0)
        ids.push_back(space);
    // UTF-8 characters (a lead byte and its continuation bytes), each a token or its bytes.
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = 1;
        while (i + len < text.size() && len < 4 && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80)
            ++len;
        const std::string ch = text.substr(i, len);
        if (const auto id = lookup(ch); id >= 0) {
            ids.push_back(id);
        } else {
            // Byte fallback: <0x00>..<0xFF> are ids 3..258; a vocabulary without them gives <unk>.
            for (unsigned char b : ch)
                ids.push_back(3 + int(b) < size() ? 3 + std::int32_t(b) : 0);
        }
        i += len;
    }
    // Merge the best-scoring adjacent pair until no pair's concatenation is a token; among equal
    // scores the leftmost first. A heap of candidate pairs over a linked list: O(n log n), where
    // rescanning the whole sequence after every merge would be quadratic in the text's length.
    struct Cand {
        float score;
        std::int32_t left, right, leftId, rightId, id;
        bool operator<(const Cand& o) const { return score != o.score ? score < o.score : left > o.left; }
    };
    const auto n = std::int32_t(ids.size());
    std::vector<std::int32_t> next(static_cast<std::size_t>(n)), prev(static_cast<std::size_t>(n));
    std::vector<char> alive(std::size_t(n), 1);
    for (std::int32_t i = 0; i < n; ++i) {
        next[std::size_t(i)] = i + 1 < n ? i + 1 : -1;
        prev[std::size_t(i)] = i - 1;
    }
    std::priority_queue<Cand> heap;
    const auto consider = [&](std::int32_t a, std::int32_t b) {
        if (a < 0 || b < 0)
            return;
        const auto idA = ids[std::size_t(a)], idB = ids[std::size_t(b)];
        if (idA >= size() || idB >= size()) // a byte token a small vocabulary lacks: never merged
            return;
        if (const auto id = lookup(m_pieces[std::size_t(idA)] + m_pieces[std::size_t(idB)]); id >= 0)
            heap.push({m_scores[std::size_t(id)], a, b, idA, idB, id});
    };
    for (std::int32_t i = 0; i + 1 < n; ++i)
        consider(i, i + 1);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        // Stale: a side was merged away or changed since the pair was seen.
        if (!alive[std::size_t(c.left)] || !alive[std::size_t(c.right)] || next[std::size_t(c.left)] != c.right ||
            ids[std::size_t(c.left)] != c.leftId || ids[std::size_t(c.right)] != c.rightId)
            continue;
        ids[std::size_t(c.left)] = c.id;
        alive[std::size_t(c.right)] = 0;
        const auto after = next[std::size_t(c.right)];
        next[std::size_t(c.left)] = after;
        if (after >= 0)
            prev[std::size_t(after)] = c.left;
        consider(prev[std::size_t(c.left)], c.left);
        consider(c.left, after);
    }
    std::vector<std::int32_t> out;
    for (std::int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[std::size_t(i)])
        out.push_back(ids[std::size_t(i)]);
    return out;
}

std::string reflowText(const std::string& raw)
{
    std::string out, para;
    bool pendingSpace = false;
    const auto endParagraph = [&] {
        if (para.empty())
            return;
        if (!out.empty())
            out += '\n';
        out += para;
        para.clear();
        pendingSpace = false;
    };
    std::size_t i = 0;
    while (i < raw.size()) {
        const std::size_t eol = std::min(raw.find('\n', i), raw.size());
        const std::string line = raw.substr(i, eol - i);
        const bool blank = std::all_of(line.begin(), line.end(), [](unsigned char ch) { return std::isspace(ch); });
        if (blank) {
            endParagraph();
        } else {
            for (unsigned char ch : line) {
                if (std::isspace(ch)) {
                    pendingSpace = !para.empty();
                } else {
                    if (pendingSpace)
                        para += ' ';
                    pendingSpace = false;
                    para += char(ch);
                }
            }
            pendingSpace = !para.empty(); // the line break inside a paragraph is a space
        }
        i = eol + 1;
    }
    endParagraph();
    return out;
}

} // namespace gsrq
