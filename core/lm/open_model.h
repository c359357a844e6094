#pragma once
// One entry for every model file the engine runs: the format decided once, by the file's first
// bytes; the file opened once; the model returned with its vocabulary. A GGUF file brings its own
// (byte-level BPE from its tokenizer.ggml keys); a llama2.c checkpoint takes its tokenizer file.

#include "core/lm/model.h"
#include "core/lm/tokenizer.h"

#include <memory>
#include <string>

namespace gsrq {

enum class ModelFormat { Llama2c, Gguf };

// GGUF by its magic, llama2.c otherwise (a file that cannot be read too: its loader says why).
ModelFormat modelFormatOf(const std::string& path);

struct OpenedModel {
    ModelFormat format = ModelFormat::Llama2c;
    std::string path;
    TransformerModel model;
    // The model's vocabulary; null where there is none to run: a llama2.c model opened without its
    // tokenizer, or a GGUF vocabulary the engine does not take (tokenizerProblem says which and why).
    std::shared_ptr<const Tokenizer> tokenizer;
    std::string tokenizerProblem;
    // The chat template a GGUF file carries (tokenizer.chat_template, Jinja), "" where none.
    std::string chatTemplate;
    // The tokenizer, or Error(InvalidInput) with tokenizerProblem.
    const Tokenizer& vocabulary() const;
};

// The model at `modelPath`, with its vocabulary: a GGUF file's own (tokenizerPath is not read), or a
// llama2.c checkpoint's tokenizer at tokenizerPath where one is given. Throws Error(InvalidInput)
// naming the file for a model that cannot be run or a tokenizer that does not fit it.
OpenedModel openModel(const std::string& modelPath, const std::string& tokenizerPath = {});

} // namespace gsrq
