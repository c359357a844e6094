#pragma once
// Perplexity of a llama2.c model over sequences that start with BOS, in FP32 and with its KV cache
// replaced by reconstructions from codebooks: the measure the paper judges compression by.

#include "core/cluster/codebook_file.h"
#include "core/cluster/kivi.h"
#include "core/lm/llama2c.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

class ClusterBackend;

// S sequences of T tokens: BOS, then tokens s·(T−1) … (s+1)·(T−1) − 1 of the text. Throws
// Error(InvalidInput) naming --text when the text is too short.
// bos: the first token of each sequence (llama2.c's 1 by default; none: T text tokens each).
std::vector<std::vector<std::int32_t>> textSequences(const std::vector<std::int32_t>& text, int seqLen, int sequences,
                                                     std::optional<std::int32_t> bos = Llama2cTokenizer::kBos);

// S sequences of T tokens sampled from the FP32 model at temperature 1: BOS, then T − 1 samples.
// The same seed gives the same sequences (a splitmix64 generator; no platform's distributions).
std::vector<std::vector<std::int32_t>> generateSequences(const Llama2cModel& model, int seqLen, int sequences,
                                                         std::uint64_t seed);

// The sequences `gsrq ppl` and the app measure: the file's text re-flowed, tokenized and cut as
// textSequences does, or, with an empty path, the model's own samples from `seed`. Checks seqLen
// against the model. textTokens (when not null) gets the text's token count (0 for samples).
// Throws Error(InvalidInput) naming --text or --seq-len.
std::vector<std::vector<std::int32_t>> perplexitySequences(const Llama2cModel& model, const Llama2cTokenizer& tok,
                                                           const std::string& textPath, int seqLen, int sequences,
                                                           std::uint64_t seed, std::int64_t* textTokens = nullptr);

// The sequences of a GGUF model's perplexity: the file's text re-flowed, tokenized by the model's
// own vocabulary (BpeTokenizer), cut as textSequences does after the model's BOS (none where it has
// none): the sequences tools/hf_ppl.py measures on the same text. Throws Error(InvalidInput) naming
// --text or --seq-len.
std::vector<std::vector<std::int32_t>> ggufTextSequences(const Llama2cModel& model, const std::string& ggufPath,
                                                         const std::string& textPath, int seqLen, int sequences,
                                                         std::int64_t* textTokens = nullptr);

// The model and the sequences the app's perplexity measures: a GGUF model with its own vocabulary
// (the tokenizer path is not used; a text is required), or a llama2.c model with its tokenizer (the
// text's sequences, or the model's own samples from `seed` where textPath is empty). Throws
// Error(InvalidInput) naming what is missing or wrong.
struct PerplexitySetup {
    Llama2cModel model;
    std::vector<std::vector<std::int32_t>> sequences;
    std::int64_t textTokens = 0;
};
PerplexitySetup perplexitySetup(const std::string& modelPath, const std::string& tokenizerPath,
                                const std::string& textPath, int seqLen, int sequences, std::uint64_t seed);

// Sequences of token ids read from a text file: one sequence per line, ids separated by white space,
// each as the model reads it (its BOS first where it has one), e.g. what tools/hf_ppl.py
// --save-token-ids writes with the model's own tokenizer. Lines may differ in length; blank lines
// are skipped. Throws Error(InvalidInput) naming the file and line for a word that is not an id of
// the model's vocabulary, a sequence of fewer than 2 or more than the model's maxSeq tokens, or none.
std::vector<std::vector<std::int32_t>> tokenIdSequences(const std::string& path, const Llama2cConfig& cfg);

// What a codebooks file's keys and values cost per cached value: its method and nominal bits per
// activation (from the metadata; "-" and NaN where absent), and the effective bits: nominal plus
// the codewords (stored as F16) of the quantized layers' keys and values spread over `tokens`
// cached tokens of kvDim values each.
struct CodebookCost {
    std::string method = "-";
    double bpa = 0, effectiveBpa = 0;
};
CodebookCost codebookCost(const CodebookFile& file, const std::vector<int>& quantizedLayers, std::int64_t tokens,
                          int kvDim);

struct PerplexityResult {
    double nll = 0;          // Σ −log p(next token), natural log
    std::int64_t tokens = 0; // predictions: S·(T − 1)
    double perplexity() const;
};

// exp(mean NLL of predicting tokens 1 … T−1 of each sequence); hook as in Llama2cModel::forward.
PerplexityResult perplexity(const Llama2cModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                            const KvHook& hook = {});

// A hook that replaces layer L's keys and values by their reconstruction from the codebooks of
// layers.L.key and layers.L.value (where the file has them and L is in `layers`, all when empty),
// encoded as `gsrq eval` encodes (greedy, or the file's beam). Keys trained after RoPE (metadata
// key_rope = post) are rotated, reconstructed and rotated back. Throws Error(InvalidInput) when a
// codebook's width is not the model's kv_dim, naming the file and tensor.
KvHook codebookHook(const CodebookFile& file, const std::string& path, const Llama2cConfig& cfg,
                    const std::vector<int>& layers, ClusterBackend& backend);

// The codebooks file's layers that the hook would quantize (sorted).
std::vector<int> quantizedLayers(const CodebookFile& file, const std::vector<int>& layers);

// What a KIVI hook has quantized so far, for its honest bits (core/cluster/kivi.h).
struct KiviCounts {
    std::int64_t quantizedValues = 0, fp16Values = 0, groups = 0;
    int bits = 0;
    double bitsPerValue() const;
};

// A hook that quantizes layer L's keys and values with KIVI (where L is in `layers`, all when
// empty): keys after RoPE, as the model's cache holds them (rotated, quantized per channel over
// groups of tokens, rotated back), values per token. A forward call is one sequence. Counts, when
// given, accumulate what was quantized. Throws Error(InvalidInput) naming `flag` when the group
// does not divide the model's kv_dim.
KvHook kiviHook(const KiviSettings& s, const Llama2cConfig& cfg, const std::vector<int>& layers,
                std::shared_ptr<KiviCounts> counts = {}, const std::string& flag = "--methods");

} // namespace gsrq
