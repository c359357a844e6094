#pragma once
// llama2.c checkpoints and tokenizers (docs/formats.md): the forward pass of a Llama-2-style model
// (RMSNorm, RoPE with interleaved pairs, grouped-query attention, SwiGLU) in float32 with Eigen, and
// the sentencepiece-style BPE tokenizer with byte fallback; for measuring what a compressed KV cache
// does to a real model's predictions. Thread-compatible: a model is read-only after load.

#include "core/io/tensor.h"
#include "core/lm/rope.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace gsrq {

struct ModelWeightBlocks;

struct Llama2cConfig {
    int dim = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, vocab = 0, maxSeq = 0;
    bool sharedClassifier = true; // vocab_size > 0 in the header: the classifier is the embedding
    // What llama2.c fixes and a GGUF model states (Llama2cModel::loadGguf): the architecture, RoPE's
    // base and pairing (llama2.c: interleaved; GGUF models as transformers runs them: rotate-half),
    // RMSNorm's epsilon, and whether q, k and v have biases (qwen2).
    std::string architecture = "llama2.c";
    double ropeTheta = 10000.0;
    RopePairing pairing = RopePairing::Interleaved;
    float rmsEps = 1e-5f;
    bool attentionBias = false;
    int headDim() const { return dim / heads; }
    int kvDim() const { return kvHeads * headDim(); }
};

// Called per layer with that layer's keys (before RoPE) and values of the tokens being processed
// (rows = tokens, kv_dim features, heads side by side) and their positions; may replace them in place.
using KvHook =
    std::function<void(int layer, MatrixRF& keys, MatrixRF& values, const std::vector<std::int64_t>& positions)>;

class Llama2cModel {
public:
    // Throws Error(InvalidInput) naming the file for a header that is not a llama2.c model or a
    // size that does not match it.
    static Llama2cModel load(const std::string& path);
    // A GGUF model of the llama or qwen2 architecture (gguf_model.cpp): weights dequantized to FP32,
    // q and k rows in transformers' rotate-half order (llama GGUF files store them permuted for
    // interleaved RoPE; they are put back), so keys and values are those tools/dump_kv.py dumps.
    // Throws Error(InvalidInput) naming the file and the architecture or tensor it cannot run.
    static Llama2cModel loadGguf(const std::string& path);

    const Llama2cConfig& config() const { return m_cfg; }

    // Per-sequence state of incremental decoding: the keys (after RoPE) and values so far.
    struct Cache {
        std::vector<MatrixRF> keys, values; // per layer, positions × kv_dim
        int length = 0;
    };

    // Logits [tokens, vocab] for `tokens` at positions cache.length, cache.length + 1, ...; appends
    // their keys and values to the cache. The hook sees each layer's new keys and values.
    MatrixRF forward(std::span<const std::int32_t> tokens, Cache& cache, const KvHook& hook = {}) const;

    // One token of incremental decoding whose attention is someone else's (a compressed cache's
    // decode kernels): in each layer the normalised input is projected to q, k and v (biases added),
    // q and k rotated at `position`, and attend(layer, q, k, v) returns the attention output
    // (heads·headDim), appending k and v to whatever cache it keeps. Returns the logits (vocab).
    using StepAttention = std::function<Eigen::RowVectorXf(int layer, const Eigen::RowVectorXf& q,
                                                           const Eigen::RowVectorXf& k, const Eigen::RowVectorXf& v)>;
    // Which weights the step multiplies: a GGUF model's quantized blocks where the kernels take their
    // type (quant_matvec.h: the same weight values, FP32 activations, sums grouped per block), or the
    // FP32 matrices the forward pass uses.
    enum class StepWeights { Blocks, Fp32 };
    Eigen::RowVectorXf decodeStep(std::int32_t token, std::int64_t position, const StepAttention& attend,
                                  StepWeights weights = StepWeights::Blocks) const;
    // What StepWeights::Blocks reads: "Q4_K, Q6_K blocks for 197 of 197 matrices", or "" (FP32 only:
    // a llama2.c model, or no type the kernels take).
    std::string weightBlocksNote() const;

private:
    Llama2cConfig m_cfg;
    MatrixRF m_embed;                                   // vocab × dim
    std::vector<Eigen::VectorXf> m_attnNorm, m_ffnNorm; // per layer, dim
    std::vector<MatrixRF> m_wq, m_wk, m_wv, m_wo;       // [out, in]
    std::vector<Eigen::RowVectorXf> m_bq, m_bk, m_bv;   // per layer; empty without attention biases
    std::vector<MatrixRF> m_w1, m_w2, m_w3;
    Eigen::VectorXf m_finalNorm;
    MatrixRF m_classifier; // empty when shared with the embedding
    std::vector<double> m_invFreq;
    std::shared_ptr<const ModelWeightBlocks> m_blocks; // a GGUF model's, read by decodeStep
};

// A GGUF model (by its magic) or a llama2.c checkpoint: the forward pass `gsrq ppl` and the app run.
Llama2cModel loadLanguageModel(const std::string& path);
bool isGgufModel(const std::string& path);

class Llama2cTokenizer {
public:
    static constexpr std::int32_t kBos = 1, kEos = 2;
    // vocab: the model's vocabulary size. Throws Error(InvalidInput) naming the file.
    static Llama2cTokenizer load(const std::string& path, int vocab);

    // Sentencepiece BPE with byte fallback: a space is prepended, the text starts as single
    // characters (a byte not in the vocabulary becomes token 3 + byte), and the adjacent pair whose
    // concatenation has the highest score is merged until none is in the vocabulary. No BOS.
    std::vector<std::int32_t> encode(const std::string& text) const;
    const std::string& piece(std::int32_t id) const { return m_pieces.at(std::size_t(id)); }
    int size() const { return int(m_pieces.size()); }

private:
    std::vector<std::string> m_pieces;
    std::vector<float> m_scores;
    std::unordered_map<std::string, std::int32_t> m_index; // piece → id
    std::int32_t lookup(const std::string& s) const;       // −1 when absent
};

// Hard-wrapped prose to one paragraph per line, as the model was trained: paragraphs (separated by
// blank lines) joined by "\n", runs of white space inside a paragraph collapsed to one space.
std::string reflowText(const std::string& raw);

} // namespace gsrq
