// A GGUF model's hyperparameters and its weights in the transformer (gguf_model.h).
#include "core/lm/gguf_model.h"

#include "core/base/error.h"
#include "core/lm/quant_matvec.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cmath>

namespace gsrq {

GgufModelFacts ggufModelFacts(const GgufFile& f)
{
    GgufModelFacts m;
    m.architecture = f.string("general.architecture");
    if (const GgufValue* v = f.find("general.name"); v && v->type == GgufValueType::String)
        m.name = v->string;
    const std::string a = m.architecture + ".";
    m.layers = f.integer(a + "block_count");
    m.heads = f.integer(a + "attention.head_count");
    m.kvHeads = f.optionalInteger(a + "attention.head_count_kv").value_or(m.heads);
    m.embedding = f.integer(a + "embedding_length");
    m.feedForward = f.optionalInteger(a + "feed_forward_length").value_or(0);
    m.contextLength = f.optionalInteger(a + "context_length").value_or(0);
    if (m.layers < 1 || m.heads < 1 || m.kvHeads < 1 || m.embedding < 1)
        throwInvalid(f.path(), ": GGUF ", a,
                     "block_count, attention.head_count(_kv) and embedding_length must be "
                     "positive (",
                     m.layers, ", ", m.heads, ", ", m.kvHeads, ", ", m.embedding, ")");
    if (m.heads % m.kvHeads)
        throwInvalid(f.path(), ": GGUF ", m.heads, " query heads are not a multiple of ", m.kvHeads, " KV heads");
    m.headDim = f.optionalInteger(a + "attention.key_length").value_or(0);
    if (m.headDim == 0) {
        if (m.embedding % m.heads)
            throwInvalid(f.path(), ": GGUF embedding_length ", m.embedding, " is not a multiple of ", m.heads,
                         " heads, and no ", a, "attention.key_length says the head size");
        m.headDim = m.embedding / m.heads;
    }
    m.ropeTheta = f.optionalReal(a + "rope.freq_base").value_or(10000.0);
    m.rmsEps = f.optionalReal(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    if (const GgufValue* v = f.find(a + "rope.scaling.type"); v && v->type == GgufValueType::String)
        m.ropeScaling = v->string;
    m.ropeScalingFactor = f.optionalReal(a + "rope.scaling.factor").value_or(1.0);
    if (const GgufValue* v = f.find("tokenizer.ggml.model"); v && v->type == GgufValueType::String)
        m.tokenizerModel = v->string;
    if (const GgufValue* v = f.find("tokenizer.ggml.pre"); v && v->type == GgufValueType::String)
        m.tokenizerPre = v->string;
    if (const GgufValue* v = f.find("tokenizer.ggml.tokens"); v && v->type == GgufValueType::Array)
        m.vocabSize = std::int64_t(v->arraySize());
    m.vocabSize = f.optionalInteger(a + "vocab_size").value_or(m.vocabSize);
    m.tiedOutput = f.tensor("output.weight") == nullptr;
    m.attentionBias = f.tensor("blk.0.attn_q.bias") != nullptr;
    for (const GgufTensor& t : f.tensors()) {
        ++m.tensorsByType[ggmlTypeName(t.type)];
        m.bytesByType[ggmlTypeName(t.type)] += std::int64_t(t.bytes);
        m.parameters += t.elements();
    }
    return m;
}

} // namespace gsrq

// ---- the forward pass's weights --------------------------------------------------------------

namespace gsrq {

namespace {

// The tensor as an FP32 matrix of `rows` × `cols` (GGUF dims {cols, rows}), or a vector (rows 1).
MatrixRF ggufMatrix(const GgufFile& f, const std::string& name, std::int64_t rows, std::int64_t cols)
{
    const GgufTensor* t = f.tensor(name);
    if (!t)
        throwInvalid(f.path(), ": GGUF model has no tensor '", name, "'");
    const std::vector<std::int64_t> want = rows == 1 ? std::vector<std::int64_t>{cols} : std::vector{cols, rows};
    if (t->dims != want)
        throwInvalid(f.path(), ": GGUF tensor '", name, "' is ", t->shapeString(),
                     "; the model's hyperparameters need [", rows == 1 ? "" : std::to_string(rows) + ", ", cols, "]");
    MatrixRF m(rows, cols);
    dequantizeGguf(f, *t, m.data());
    if (!m.allFinite())
        throwInvalid(f.path(), ": GGUF tensor '", name, "' holds NaN or Inf");
    return m;
}

// llama GGUF files store q and k rows permuted within each head so that interleaved RoPE applies
// (llama.cpp's converter); this puts them back in transformers' rotate-half order: row h·hd/2 + i of
// a head is the file's row 2i + h.
MatrixRF unpermuteRows(const MatrixRF& w, int heads)
{
    const Eigen::Index hd = w.rows() / heads;
    MatrixRF out(w.rows(), w.cols());
    for (Eigen::Index head = 0; head < heads; ++head)
        for (Eigen::Index i = 0; i < hd / 2; ++i)
            for (Eigen::Index h = 0; h < 2; ++h)
                out.row(head * hd + h * (hd / 2) + i) = w.row(head * hd + 2 * i + h);
    return out;
}

} // namespace

TransformerModel loadGgufModel(const GgufFile& f, const GgufLoadOptions& options)
{
    const std::string& path = f.path();
    const GgufModelFacts facts = ggufModelFacts(f);
    const std::string& arch = facts.architecture;
    if (arch != "llama" && arch != "qwen2")
        throwInvalid(path, ": GGUF architecture '", arch, "': the engine's forward pass runs llama and qwen2");
    if (facts.ropeScaling != "none" && facts.ropeScalingFactor != 1.0)
        throwInvalid(path, ": GGUF RoPE scaling '", facts.ropeScaling, "' (factor ", facts.ropeScalingFactor,
                     "): the engine's forward pass runs unscaled RoPE only");
    if (f.tensor("rope_freqs.weight")) // Llama 3.1's frequency factors
        throwInvalid(path, ": GGUF tensor 'rope_freqs.weight' scales RoPE's frequencies (Llama 3.1 and later): the "
                           "engine's forward pass runs unscaled RoPE only");
    // Sizes the forward pass holds in int, checked before any product of them.
    const auto bounded = [&](const char* key, std::int64_t v, std::int64_t most) {
        if (v < 1 || v > most)
            throwInvalid(path, ": GGUF ", arch, ".", key, " is ", v, " (1 to ", most, ")");
    };
    bounded("block_count", facts.layers, 4096);
    bounded("attention.head_count", facts.heads, 4096);
    bounded("attention.head_count_kv", facts.kvHeads, 4096);
    bounded("embedding_length", facts.embedding, 1 << 20);
    bounded("attention.key_length", facts.headDim, 1 << 16);
    bounded("feed_forward_length", facts.feedForward, 1 << 22);
    if (!std::isfinite(facts.ropeTheta) || facts.ropeTheta <= 0)
        throwInvalid(path, ": GGUF ", arch, ".rope.freq_base is ", facts.ropeTheta, ": must be positive");
    if (!std::isfinite(facts.rmsEps) || facts.rmsEps < 0)
        throwInvalid(path, ": GGUF ", arch, ".attention.layer_norm_rms_epsilon is ", facts.rmsEps, ": must be ≥ 0");
    if (facts.headDim * facts.heads != facts.embedding || facts.headDim % 2)
        throwInvalid(path, ": GGUF head_dim ", facts.headDim, " × ", facts.heads, " heads is not the embedding ",
                     facts.embedding, ", or head_dim is odd: not a shape this forward pass runs");
    const GgufTensor* embed = f.tensor("token_embd.weight");
    if (!embed || embed->dims.size() != 2 || embed->dims[1] > (1 << 24))
        throwInvalid(path, ": GGUF model has no 2-D tensor 'token_embd.weight' of at most 2^24 tokens");

    ModelConfig c;
    ModelWeights w;
    c.architecture = arch;
    c.dim = int(facts.embedding);
    c.hidden = int(facts.feedForward);
    c.layers = int(facts.layers);
    c.heads = int(facts.heads);
    c.kvHeads = int(facts.kvHeads);
    c.vocab = int(embed->dims[1]);
    c.maxSeq = int(std::min<std::int64_t>(facts.contextLength > 0 ? facts.contextLength : 2048, 1 << 22));
    c.sharedClassifier = f.tensor("output.weight") == nullptr;
    c.ropeTheta = facts.ropeTheta;
    c.pairing = RopePairing::RotateHalf;
    c.rmsEps = float(facts.rmsEps);
    c.attentionBias = f.tensor("blk.0.attn_q.bias") != nullptr;

    // The products' weights as views of their blocks, where the kernels take the type: the forward
    // pass dequantizes them a panel at a time, so no FP32 copy is kept (Qwen2.5-Coder-1.5B's would be
    // 6.2 GB beside its 1.0 GB file). Another type, or options.fp32Copies, is dequantized to FP32.
    auto blocks = std::make_shared<ModelWeightBlocks>();
    blocks->file = f;
    const bool permuted = arch == "llama";
    const auto linear = [&](const std::string& name, std::int64_t rows, std::int64_t cols, int heads, MatrixRF& fp32) {
        QuantMatrix q = quantMatrix(*f.tensor(name));
        if (q && (q.rows != rows || q.cols != cols)) // the shapes' message
            ggufMatrix(f, name, rows, cols);
        if (q && permuted && heads > 0) { // output row head·hd + h·hd/2 + i is the file's row head·hd + 2i + h
            const int hd = c.headDim();
            q.rowOrder.resize(std::size_t(q.rows));
            for (int head = 0; head < heads; ++head)
                for (int i = 0; i < hd / 2; ++i)
                    for (int h = 0; h < 2; ++h)
                        q.rowOrder[std::size_t(head * hd + h * (hd / 2) + i)] = head * hd + 2 * i + h;
        }
        if (!q || options.fp32Copies) {
            fp32 = ggufMatrix(f, name, rows, cols);
            if (permuted && heads > 0)
                fp32 = unpermuteRows(fp32, heads);
        }
        if (q && !options.fp32Copies && !quantMatrixFinite(q)) // the blocks' scales: a few bytes a block
            throwInvalid(f.path(), ": GGUF tensor '", name, "' holds NaN or Inf");
        return q;
    };
    const auto present = [&](const std::string& name) {
        if (!f.tensor(name))
            throwInvalid(path, ": GGUF model has no tensor '", name, "'");
        return name;
    };
    w.wq.resize(std::size_t(c.layers));
    w.wk.resize(std::size_t(c.layers));
    w.wv.resize(std::size_t(c.layers));
    w.wo.resize(std::size_t(c.layers));
    w.w1.resize(std::size_t(c.layers));
    w.w2.resize(std::size_t(c.layers));
    w.w3.resize(std::size_t(c.layers));
    blocks->embed = linear("token_embd.weight", c.vocab, c.dim, 0, w.embed);
    for (int l = 0; l < c.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const auto L = std::size_t(l);
        w.attnNorm.push_back(ggufMatrix(f, b + "attn_norm.weight", 1, c.dim).row(0).transpose());
        blocks->wq.push_back(linear(present(b + "attn_q.weight"), c.dim, c.dim, c.heads, w.wq[L]));
        blocks->wk.push_back(linear(present(b + "attn_k.weight"), c.kvDim(), c.dim, c.kvHeads, w.wk[L]));
        blocks->wv.push_back(linear(present(b + "attn_v.weight"), c.kvDim(), c.dim, 0, w.wv[L]));
        blocks->wo.push_back(linear(present(b + "attn_output.weight"), c.dim, c.dim, 0, w.wo[L]));
        if (c.attentionBias) {
            MatrixRF bq = ggufMatrix(f, b + "attn_q.bias", 1, c.dim),
                     bk = ggufMatrix(f, b + "attn_k.bias", 1, c.kvDim());
            if (permuted) {
                bq = unpermuteRows(bq.transpose(), c.heads).transpose();
                bk = unpermuteRows(bk.transpose(), c.kvHeads).transpose();
            }
            w.bq.push_back(bq.row(0));
            w.bk.push_back(bk.row(0));
            w.bv.push_back(ggufMatrix(f, b + "attn_v.bias", 1, c.kvDim()).row(0));
        }
        w.ffnNorm.push_back(ggufMatrix(f, b + "ffn_norm.weight", 1, c.dim).row(0).transpose());
        blocks->w1.push_back(linear(present(b + "ffn_gate.weight"), c.hidden, c.dim, 0, w.w1[L]));
        blocks->w2.push_back(linear(present(b + "ffn_down.weight"), c.dim, c.hidden, 0, w.w2[L]));
        blocks->w3.push_back(linear(present(b + "ffn_up.weight"), c.hidden, c.dim, 0, w.w3[L]));
    }
    w.finalNorm = ggufMatrix(f, "output_norm.weight", 1, c.dim).row(0).transpose();
    blocks->classifier =
        c.sharedClassifier ? blocks->embed : linear(present("output.weight"), c.vocab, c.dim, 0, w.classifier);
    w.blocks = std::move(blocks);
    return TransformerModel(std::move(c), std::move(w));
}

} // namespace gsrq
