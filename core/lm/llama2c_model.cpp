// llama2.c checkpoints (docs/formats.md): the header's sizes, then every weight in float32, read
// into the transformer (llama2c_model.h).
#include "core/lm/llama2c_model.h"

#include "core/base/error.h"
#include "core/base/mapped_file.h"

#include <cstdlib>
#include <cstring>

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

} // namespace

TransformerModel loadLlama2cModel(const std::string& path)
{
    const auto file = MappedFile::open(path);
    Reader r(path, file->data(), file->size());
    ModelConfig c;
    ModelWeights w;
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
    w.embed = r.matrix(c.vocab, c.dim, "the token embedding");
    for (int l = 0; l < L; ++l)
        w.attnNorm.push_back(r.vector(c.dim, "the attention norms"));
    const auto stack = [&](std::vector<MatrixRF>& out, int rows, int cols, const char* what) {
        for (int l = 0; l < L; ++l)
            out.push_back(r.matrix(rows, cols, what));
    };
    stack(w.wq, c.dim, c.dim, "wq");
    stack(w.wk, c.kvDim(), c.dim, "wk");
    stack(w.wv, c.kvDim(), c.dim, "wv");
    stack(w.wo, c.dim, c.dim, "wo");
    for (int l = 0; l < L; ++l)
        w.ffnNorm.push_back(r.vector(c.dim, "the FFN norms"));
    stack(w.w1, c.hidden, c.dim, "w1");
    stack(w.w2, c.dim, c.hidden, "w2");
    stack(w.w3, c.hidden, c.dim, "w3");
    w.finalNorm = r.vector(c.dim, "the final norm");
    // Two RoPE tables [max_seq, head_dim/2] follow; RoPE is recomputed (theta 10000, interleaved).
    r.skip(std::size_t(c.maxSeq) * std::size_t(c.headDim()) * 4);
    if (!c.sharedClassifier)
        w.classifier = r.matrix(c.vocab, c.dim, "the classifier");
    if (!w.embed.allFinite())
        throwInvalid(path, ": the token embedding holds NaN or Inf");
    return TransformerModel(std::move(c), std::move(w));
}

} // namespace gsrq
