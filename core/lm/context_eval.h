#pragma once
// One long-context prompt (context_tasks.h) answered through the model with its KV cache stored by
// each method, greedily, as a deployment answers:
//   deployed   the context is prefilled once in full precision (a causal forward over chunks,
//              logits only for its last token), then for each method the cache is stored as the
//              method stores it (each layer's keys before RoPE and values through the method's
//              hook, over the whole context at once, keys rotated after), and the question, the
//              answer prefix and the answer run over that cache; one prefill serves every method.
//   quantized  the prefill itself attends over the method's keys and values, as the perplexity
//              of perplexity.h measures: one forward over the whole context per method.
// In both, the tokens after the context (the question and the answer) pass through the method's
// hook as the forward pass appends them (one call for the question, one per answer token).
// The attention is the reference's in FP32 over the reconstructed cache: the same numbers the
// decode kernels compute from codes (core/decode's tests hold them to decode_cache.h's references),
// without their speed, which `gsrq generate` measures.
#include "core/lm/context_tasks.h"
#include "core/lm/model.h"
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gsrq {

// How a cache stores keys and values: a hook over each layer's keys (before RoPE) and values of a
// block of tokens (perplexity.h's hooks; empty: kept as computed, in FP32).
struct CacheMethod {
    std::string name; // "fp16", "kivi-1", "gsrq@1", a codebooks file
    KvHook hook;
};
// The FP16 cache: keys (before RoPE) and values rounded to half precision.
KvHook fp16Hook();

enum class PrefillMode { Deployed, Quantized };
const char* prefillModeName(PrefillMode m); // "deployed", "quantized"
// Throws Error(InvalidInput) naming --prefill for another name.
PrefillMode parsePrefillMode(const std::string& name);

struct ContextEvalSettings {
    PrefillMode mode = PrefillMode::Deployed;
    int chunk = 512;                 // tokens per chunk of the deployed mode's prefill
    std::vector<std::int32_t> stops; // tokens that end an answer (EOS, ChatML's <|im_end|>)
    // The model's products in the prefill and the answers (exact FP32 unless asked otherwise).
    TransformerModel::StepWeights weights = TransformerModel::StepWeights::Fp32;
};

struct TaskAnswer {
    std::string method;
    std::vector<std::int32_t> answerIds; // as decoded, the stop token left out
    std::string answer;                  // their text (bytes that are not UTF-8 shown as U+FFFD)
    double score = 0;                    // scoreAnswer
    double seconds = 0;                  // this method's share: its cache, question and answer (and
                                         // its prefill in the quantized mode)
};

// The tokens that end an answer: the vocabulary's EOS, and ChatML's <|im_end|> where it is one token.
std::vector<std::int32_t> stopTokens(const Tokenizer& vocab, const PromptFormat& format);

// Answers `prompt` with each method for which `wanted(i)` is true (all when empty), in order,
// calling `done(i, answer)` as each finishes; a false from `done` stops before the next method.
// Returns the seconds of the shared prefill (0 in the quantized mode). Throws Error(InvalidInput)
// when the prompt does not fit the model's positions.
double answerWithMethods(const TransformerModel& model, const Tokenizer& vocab, const TaskPrompt& prompt,
                         const std::vector<CacheMethod>& methods, const ContextEvalSettings& settings,
                         const std::function<bool(std::size_t)>& wanted,
                         const std::function<bool(std::size_t, const TaskAnswer&)>& done);

// Greedy decoding from a cache holding the context: the question (one forward call), then up to
// `maxTokens` tokens, each the argmax of the logits (the first of equal ones), until a stop token;
// the model's products as `weights` says.
std::vector<std::int32_t> greedyAnswer(const TransformerModel& model, TransformerModel::Cache& cache,
                                       const std::vector<std::int32_t>& question, int maxTokens,
                                       const std::vector<std::int32_t>& stops, const KvHook& hook = {},
                                       TransformerModel::StepWeights weights = TransformerModel::StepWeights::Fp32);

} // namespace gsrq
