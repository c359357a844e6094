#pragma once
// The llama2.c checkpoint loader (docs/formats.md): a header of seven int32 sizes, then every weight
// in float32; the classifier is shared with the embedding where the header's vocab_size is positive.
// RoPE is interleaved with base 10000, as llama2.c runs it.

#include "core/lm/model.h"

#include <string>

namespace gsrq {

// Throws Error(InvalidInput) naming the file for a header that is not a llama2.c model or a size
// that does not match it.
TransformerModel loadLlama2cModel(const std::string& path);

} // namespace gsrq
