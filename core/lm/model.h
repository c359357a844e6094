#pragma once
// The decoder-only transformer every model runs through, whatever file it came from: a
// Llama-2-style stack (RMSNorm, RoPE, grouped-query attention with optional q/k/v biases, SwiGLU) in
// float32 with Eigen. Two ways to run it: the forward pass over a block of tokens (perplexity, the KV
// hooks that compress the cache) and the decode step of one token whose attention someone else
// computes (a compressed cache's kernels). The loaders fill it: llama2c_model.h (llama2.c
// checkpoints) and gguf_model.h (GGUF files); open_model.h opens either with its tokenizer.
// Thread-compatible: a model is read-only after load.

#include "core/io/tensor.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gsrq {

struct ModelWeightBlocks;
struct QuantMatrix;
struct Q8Activations;

struct ModelConfig {
    int dim = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, vocab = 0, maxSeq = 0;
    bool sharedClassifier = true; // the classifier is the token embedding
    // What llama2.c fixes and a GGUF model states: the architecture, RoPE's base and pairing
    // (llama2.c: interleaved; GGUF models as transformers runs them: rotate-half), RMSNorm's epsilon,
    // and whether q, k and v have biases (qwen2).
    std::string architecture = "llama2.c";
    double ropeTheta = 10000.0;
    RopePairing pairing = RopePairing::Interleaved;
    float rmsEps = 1e-5f;
    bool attentionBias = false;
    int headDim() const { return dim / heads; }
    int kvDim() const { return kvHeads * headDim(); }
};

// What a loader reads: per layer, matrices [out, in]; w1 the gate, w2 the down and w3 the up
// projection. blocks: a GGUF model's quantized weights; a matrix (or the embedding) the blocks hold
// is empty here unless the loader was asked for FP32 copies, and the products read the blocks.
struct ModelWeights {
    MatrixRF embed;                                 // vocab × dim
    std::vector<Eigen::VectorXf> attnNorm, ffnNorm; // per layer, dim
    std::vector<MatrixRF> wq, wk, wv, wo;           // q and k rows in the pairing's order
    std::vector<Eigen::RowVectorXf> bq, bk, bv;     // per layer; empty without attention biases
    std::vector<MatrixRF> w1, w2, w3;
    Eigen::VectorXf finalNorm;
    MatrixRF classifier; // empty when shared with the embedding
    std::shared_ptr<const ModelWeightBlocks> blocks;
};

// Called per layer with that layer's keys (before RoPE) and values of the tokens being processed
// (rows = tokens, kv_dim features, heads side by side) and their positions; may replace them in place.
using KvHook =
    std::function<void(int layer, MatrixRF& keys, MatrixRF& values, const std::vector<std::int64_t>& positions)>;

class TransformerModel {
public:
    // The loaders' constructor: the weights must have the config's shapes (the loaders check them).
    TransformerModel(ModelConfig cfg, ModelWeights weights);

    const ModelConfig& config() const { return m_cfg; }
    // Lets the forward pass run to `positions` past the length the model was trained for (RoPE is
    // defined at any position; what the model does there is the user's question). Not while another
    // thread runs the model.
    void allowPositions(int positions) { m_cfg.maxSeq = std::max(m_cfg.maxSeq, positions); }

    // Per-sequence state of incremental decoding: the keys (after RoPE) and values so far.
    struct Cache {
        std::vector<MatrixRF> keys, values; // per layer, positions × kv_dim
        int length = 0;
    };

    // Which rows of logits a forward pass computes: every token's (perplexity), the last token's (a
    // prefill before decoding: Qwen's 151,936-word classifier over 8K tokens would be 5 GB), or none
    // (a chunk of a longer prefill).
    enum class Logits { All, Last, None };
    // Which weights the products multiply: the FP32 matrices (exact; perplexity's default), a GGUF
    // model's quantized blocks where the kernels take their type with FP32 activations
    // (quant_matvec.h: the same weight values, sums grouped per block), or the blocks with the
    // activations rounded to 8 bits per 32 values and integer dot products (quant_gemm.h: llama.cpp's
    // arithmetic; the fastest). A matrix whose type the kernels do not take uses its FP32 copy. A
    // matrix held only as blocks (a GGUF model's, as loaded) gives Fp32 its exact values too: a GEMM
    // over panels dequantized on the fly for 8 tokens or more, the one-token kernels for fewer.
    enum class StepWeights { Blocks, Fp32, BlocksQ8 };

    // Logits [tokens, vocab] for `tokens` at positions cache.length, cache.length + 1, ...; appends
    // their keys and values to the cache. The hook sees each layer's new keys and values. With
    // Logits::Last one row (the last token's), with Logits::None zero rows.
    // weights: the model's forward weights (setForwardWeights) unless given.
    MatrixRF forward(std::span<const std::int32_t> tokens, Cache& cache, const KvHook& hook = {},
                     Logits logits = Logits::All, std::optional<StepWeights> weights = std::nullopt) const;
    // A causal forward over `tokens` in chunks of `chunk` tokens (the cache grows chunk by chunk;
    // the same keys, values and logits as one forward call, within float rounding: each chunk's
    // queries attend over everything before them), returning the last token's logits. The hook
    // sees each chunk's new keys and values.
    Eigen::RowVectorXf prefill(std::span<const std::int32_t> tokens, Cache& cache, int chunk, const KvHook& hook = {},
                               std::optional<StepWeights> weights = std::nullopt) const;
    // The products every forward pass of this model uses unless told (FP32 after load): how `gsrq
    // ppl --weights` measures what the 8-bit activations cost. Not while another thread runs the model.
    void setForwardWeights(StepWeights w) { m_forwardWeights = w; }
    StepWeights forwardWeights() const { return m_forwardWeights; }

    // One token of incremental decoding whose attention is someone else's (a compressed cache's
    // decode kernels): in each layer the normalised input is projected to q, k and v (biases added),
    // q and k rotated at `position`, and attend(layer, q, k, v) returns the attention output
    // (heads·headDim), appending k and v to whatever cache it keeps. Returns the logits (vocab).
    using StepAttention = std::function<Eigen::RowVectorXf(int layer, const Eigen::RowVectorXf& q,
                                                           const Eigen::RowVectorXf& k, const Eigen::RowVectorXf& v)>;
    Eigen::RowVectorXf decodeStep(std::int32_t token, std::int64_t position, const StepAttention& attend,
                                  StepWeights weights = StepWeights::Blocks) const;
    // What StepWeights::Blocks reads: "Q4_K, Q6_K blocks for 197 of 197 matrices", or "" (FP32 only:
    // a llama2.c model, or no type the kernels take).
    std::string weightBlocksNote() const;
    // Bytes of the FP32 linear weights and embedding the model holds (a GGUF model whose matrices are
    // all blocks the kernels take: none; norms and biases aside).
    std::int64_t fp32WeightBytes() const;

private:
    // h · Wᵀ for the weights asked (l: the layer's matrix in q, or the classifier when q is null).
    // hq: h already rounded to 8 bits (StepWeights::BlocksQ8), shared by the products that read it.
    MatrixRF product(const MatrixRF& h, const MatrixRF& w, const std::vector<QuantMatrix>* q, std::size_t l,
                     StepWeights weights, const Q8Activations* hq = nullptr) const;
    // The token's embedding row (dim values), from the FP32 matrix or the blocks.
    void embedding(std::int32_t token, float* out) const;

    ModelConfig m_cfg;
    ModelWeights m_w;
    StepWeights m_forwardWeights = StepWeights::Fp32;
    std::vector<double> m_invFreq;
};

// The products' names on the command line and in run settings: "fp32", "blocks", "blocks-q8"; the
// parse gives nothing for another name.
const char* stepWeightsName(TransformerModel::StepWeights weights);
std::optional<TransformerModel::StepWeights> parseStepWeights(const std::string& name);

} // namespace gsrq
