#pragma once
// Token-by-token decoding of a real model (a GGUF or llama2.c model, core/lm) with its KV cache held
// by the CPU decode paths (core/decode/cpu_decode.h): the FP16 cache and the compressed one read by
// the lookup path, timed step by step. The context is a real prefill (the forward pass over the
// text's first tokens) repeated to the asked length (codes and FP16 rows copied, not re-encoded),
// and is labelled so. Each step runs the whole model; its time is split into the attention (the
// cache's decode kernel), the append of the new token (the FP16 path copies it, the compressed path
// also quantizes it) and the rest (the weights' products, norms, RoPE), so the attention's share of a
// real step is measured, not modelled.

#include "core/cluster/codebook_file.h"
#include "core/decode/decode_bench.h"
#include "core/lm/model.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gsrq {

struct GenerateOptions {
    std::vector<std::int64_t> contexts{4096}; // cached tokens before the timed steps
    int steps = 8;                            // timed decode steps per (context, path)
    std::vector<DecodePath> paths{DecodePath::Fp16, DecodePath::Lookup};
    int threads = 0; // the decode kernels' (0: one per core); the products use OpenMP's threads
    // The step's products: a GGUF model's quantized blocks with 8-bit activations (core/lm/quant_gemm.h,
    // llama.cpp's arithmetic: the fastest step measured, docs/benchmarks.md), the blocks with FP32
    // activations (quant_matvec.h), or the FP32 matrices. The prefill's: the same choices, where the
    // 8-bit activations run an integer GEMM over the blocks (quant_gemm_tiled.cpp; the fastest prefill
    // measured) and FP32 activations multiply many tokens through panels of the blocks dequantized to
    // FP32 (Eigen's GEMM).
    TransformerModel::StepWeights weights = TransformerModel::StepWeights::BlocksQ8;
    TransformerModel::StepWeights prefillWeights = TransformerModel::StepWeights::BlocksQ8;
    int prefillChunk = 512; // tokens per forward call of the prefill
};

struct GeneratePoint {
    std::int64_t context = 0;
    DecodePath path = DecodePath::Fp16;
    double stepMs = 0, attentionMs = 0, appendMs = 0; // medians over the steps
    double tokensPerSecond = 0;
    double cacheBytes = 0;            // the keys and values this path reads, every layer (codes, or FP16 rows)
    std::vector<std::int32_t> tokens; // the greedy tokens decoded
};

struct GenerateReport {
    std::int64_t prefillTokens = 0;
    double prefillSeconds = 0; // the prefill's forward pass, in chunks, logits for the last token only
    double prefillTokensPerSecond() const { return prefillSeconds > 0 ? double(prefillTokens) / prefillSeconds : 0; }
    std::string contextNote;    // how the context was made
    std::string weights;        // what the step's products read: "FP32", or the blocks' note
    std::string prefillWeights; // and the prefill's
    std::string isa;
    int threads = 0;
    std::vector<GeneratePoint> points;
};

// Throws Error(InvalidInput) naming what does not fit: codebooks that are not of this model (layers,
// width), the lookup path with codebooks of keys before RoPE, a context shorter than the prefill.
// `cancelled` is asked before each (context, path) and each step: when it answers true the report
// holds the points finished so far.
GenerateReport runGenerate(const TransformerModel& model, const std::vector<std::int32_t>& prefill,
                           const CodebookFile& books, const std::string& booksPath, const GenerateOptions& o,
                           const std::function<void(const GeneratePoint&)>& onPoint = {},
                           const std::function<bool()>& cancelled = {});

} // namespace gsrq
