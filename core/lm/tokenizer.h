#pragma once
// What a model's vocabulary does for the engine, whichever file it came from: text to token ids
// (without BOS), a token's text, the vocabulary's size and its BOS. Two vocabularies derive from it:
// llama2.c's sentencepiece-style BPE (llama2c_tokenizer.h) and a GGUF model's byte-level BPE
// (gguf_tokenizer.h); open_model.h gives a model with its own.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    // The text's ids, without BOS. Throws Error(InvalidInput) for text the vocabulary cannot take.
    virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
    // The token's text (bytes).
    virtual std::string piece(std::int32_t id) const = 0;
    virtual int size() const = 0;
    // The token each sequence starts with, where the vocabulary has one.
    virtual std::optional<std::int32_t> bos() const = 0;
    // The token that ends a generation, where the vocabulary names one.
    virtual std::optional<std::int32_t> eos() const = 0;
    // "llama2.c" or the GGUF pre-tokenizer's name ("gpt2", "qwen2", ...), for messages.
    virtual std::string name() const = 0;

protected:
    Tokenizer() = default;
    Tokenizer(const Tokenizer&) = default;
    Tokenizer(Tokenizer&&) = default;
    Tokenizer& operator=(const Tokenizer&) = default;
    Tokenizer& operator=(Tokenizer&&) = default;
};

} // namespace gsrq
