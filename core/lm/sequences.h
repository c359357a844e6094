#pragma once
// The token sequences a model is measured on: a text's (re-flowed as the model was trained, cut into
// sequences after the vocabulary's BOS), the model's own samples, or token ids read from a file.

#include "core/lm/model.h"
#include "core/lm/open_model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

using TokenSequence = std::vector<std::int32_t>;

// Hard-wrapped prose to one paragraph per line, as the model was trained: paragraphs (separated by
// blank lines) joined by "\n", runs of white space inside a paragraph collapsed to one space.
std::string reflowText(const std::string& raw);

// S sequences of T tokens: BOS, then tokens s·(T−1) … (s+1)·(T−1) − 1 of the text (without BOS: T
// text tokens each). Throws Error(InvalidInput) naming --text when the text is too short, and
// lengthFlag (--seq-len) or --sequences for sizes out of range.
std::vector<TokenSequence> textSequences(const std::vector<std::int32_t>& text, int seqLen, int sequences,
                                         std::optional<std::int32_t> bos, const std::string& lengthFlag = "--seq-len");

// S sequences of T tokens sampled from the FP32 model at temperature 1: BOS, then T − 1 samples.
// The same seed gives the same sequences (a splitmix64 generator; no platform's distributions).
std::vector<TokenSequence> generateSequences(const TransformerModel& model, int seqLen, int sequences,
                                             std::uint64_t seed, std::int32_t bos = 1,
                                             const std::string& lengthFlag = "--seq-len");

// What to measure a model on: a text file (re-flowed, tokenized by the model's vocabulary), or, with
// generate, the model's own samples from seed, after its vocabulary's BOS (llama2.c models with their
// tokenizer: a GGUF model is measured on a text).
struct SequenceSource {
    std::string text;
    bool generate = false;
    std::uint64_t seed = 0;
    int seqLen = 256, sequences = 16;
    std::string lengthFlag = "--seq-len"; // the flag the messages name for seqLen
};

struct ModelSequences {
    std::vector<TokenSequence> sequences;
    std::int64_t textTokens = 0; // the text's tokens (0 for samples)
};

// The sequences of `source` for the opened model. Throws Error(InvalidInput) naming --text, the
// length flag or the vocabulary that is missing.
ModelSequences modelSequences(const OpenedModel& model, const SequenceSource& source);

// The model opened (open_model.h) and its sequences: what the app's pages and gsrq generate run.
struct OpenedSequences {
    OpenedModel opened;
    ModelSequences seqs;
};
OpenedSequences openWithSequences(const std::string& modelPath, const std::string& tokenizerPath,
                                  const SequenceSource& source);

// Sequences of token ids read from a text file: one sequence per line, ids separated by white space,
// each as the model reads it (its BOS first where it has one), e.g. what tools/hf_ppl.py
// --save-token-ids writes with the model's own tokenizer. Lines may differ in length; blank lines
// are skipped. Throws Error(InvalidInput) naming the file and line for a word that is not an id of
// the model's vocabulary, a sequence of fewer than 2 or more than the model's maxSeq tokens, or none.
std::vector<TokenSequence> tokenIdSequences(const std::string& path, const ModelConfig& cfg);

// Predictions (each token after the first), tokens cached, and the longest sequence.
std::int64_t predictedTokens(const std::vector<TokenSequence>& seqs);
std::int64_t cachedTokens(const std::vector<TokenSequence>& seqs);
int longestSequence(const std::vector<TokenSequence>& seqs);

} // namespace gsrq
