#pragma once
// GGUF models: what the file says about its model (the hyperparameters a forward pass and a KV cache
// need, read from the architecture's own keys ("llama.block_count", "qwen2.rope.freq_base", ...), with
// llama.cpp's defaults where a key is optional), and the loader of its weights into the transformer.

#include "core/io/gguf.h"
#include "core/lm/model.h"

#include <cstdint>
#include <map>
#include <string>

namespace gsrq {

struct GgufModelFacts {
    std::string architecture; // general.architecture: "llama", "qwen2", ...
    std::string name;         // general.name (may be empty)
    std::int64_t layers = 0, heads = 0, kvHeads = 0, embedding = 0, headDim = 0, feedForward = 0;
    std::int64_t contextLength = 0, vocabSize = 0;
    double ropeTheta = 10000.0, rmsEps = 1e-5;
    std::string ropeScaling = "none"; // rope.scaling.type: none, linear, yarn, ...
    double ropeScalingFactor = 1.0;
    std::string tokenizerModel, tokenizerPre; // tokenizer.ggml.model ("gpt2", "llama"), .pre ("smollm", "qwen2")
    bool tiedOutput = false;                  // no output.weight: the token embedding serves as the output
    bool attentionBias = false;               // blk.0.attn_q.bias present (qwen2)
    std::map<std::string, std::int64_t> tensorsByType, bytesByType;
    std::int64_t parameters = 0;
};

// Throws Error(InvalidInput) naming the file and key when a required key is missing or inconsistent
// (heads not a multiple of KV heads, embedding not heads × head_dim where no key_length says so).
GgufModelFacts ggufModelFacts(const GgufFile& file);

struct GgufLoadOptions {
    // Also dequantize the matrices the kernels read as blocks into FP32 copies (the products then
    // multiply the copies where they multiplied FP32: the reference the tests hold the blocks' paths
    // to). Without, the model holds its file's blocks and little else.
    bool fp32Copies = false;
};

// A GGUF model of the llama or qwen2 architecture: q and k rows in transformers' rotate-half order
// (llama GGUF files store them permuted for interleaved RoPE; they are put back, by the blocks' row
// order), so keys and values are those tools/dump_kv.py dumps. The linear weights the kernels take
// (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) stay blocks in the mapped file; any other type is dequantized to
// FP32. Throws Error(InvalidInput) naming the file and the architecture or tensor it cannot run
// (a weight that holds NaN or Inf included).
TransformerModel loadGgufModel(const GgufFile& file, const GgufLoadOptions& options = {});

} // namespace gsrq
