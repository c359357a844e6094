#pragma once
// The llama2.c tokenizer file (docs/formats.md): max_token_length, then per token its score, length
// and bytes; sentencepiece-style BPE with byte fallback over it.

#include "core/lm/tokenizer.h"

#include <unordered_map>

namespace gsrq {

class Llama2cTokenizer final : public Tokenizer {
public:
    static constexpr std::int32_t kBos = 1, kEos = 2;
    // vocab: the model's vocabulary size. Throws Error(InvalidInput) naming the file.
    static Llama2cTokenizer load(const std::string& path, int vocab);

    // Sentencepiece BPE with byte fallback: a space is prepended, the text starts as single
    // characters (a byte not in the vocabulary becomes token 3 + byte), and the adjacent pair whose
    // concatenation has the highest score is merged until none is in the vocabulary. No BOS.
    std::vector<std::int32_t> encode(const std::string& text) const override;
    std::string piece(std::int32_t id) const override { return m_pieces.at(std::size_t(id)); }
    int size() const override { return int(m_pieces.size()); }
    std::optional<std::int32_t> bos() const override { return kBos; }
    std::optional<std::int32_t> eos() const override { return kEos; }
    std::string name() const override { return "llama2.c"; }

private:
    std::vector<std::string> m_pieces;
    std::vector<float> m_scores;
    std::unordered_map<std::string, std::int32_t> m_index; // piece → id
    std::int32_t lookup(const std::string& s) const;       // −1 when absent
};

} // namespace gsrq
