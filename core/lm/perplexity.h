#pragma once
// Perplexity of a model over token sequences (sequences.h), in FP32 and with its KV cache replaced
// by reconstructions from codebooks or quantized by KIVI: the measure the paper judges compression
// by. The hooks here change the cache; core/jobs/codebook_perplexity.h runs them as a job.

#include "core/cluster/codebook_file.h"
#include "core/cluster/kivi.h"
#include "core/lm/model.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

class ClusterBackend;

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
    // Per sequence, in order: its mean NLL per predicted token and its predicted tokens (the
    // paired bootstrap's inputs, core/base/bootstrap.h).
    std::vector<double> sequenceNll, sequenceTokens;
    double perplexity() const;
};

// exp(mean NLL of predicting tokens 1 … T−1 of each sequence); hook as in TransformerModel::forward.
PerplexityResult perplexity(const TransformerModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                            const KvHook& hook = {});

// A hook that replaces layer L's keys and values by their reconstruction from the codebooks of
// layers.L.key and layers.L.value (where the file has them and L is in `layers`, all when empty),
// encoded as `gsrq eval` encodes (greedy, or the file's beam). Keys trained after RoPE (metadata
// key_rope = post) are rotated, reconstructed and rotated back. Throws Error(InvalidInput) when a
// codebook's width is not the model's kv_dim, naming the file and tensor.
KvHook codebookHook(const CodebookFile& file, const std::string& path, const ModelConfig& cfg,
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
KvHook kiviHook(const KiviSettings& s, const ModelConfig& cfg, const std::vector<int>& layers,
                std::shared_ptr<KiviCounts> counts = {}, const std::string& flag = "--methods");

} // namespace gsrq
