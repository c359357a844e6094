// A llama2.c tokenizer file as `gsrq ppl` loads it for a model's vocabulary, then text through it.
// Input: the vocabulary size (2 bytes, little-endian), then the file.
#include "fuzz_input.h"

#include "core/base/error.h"
#include "core/lm/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    ByteSource in(data, size);
    const int vocab = int(in.byte()) | int(in.byte()) << 8;
    const auto path = writeInput("tok.bin", in.bytes(in.remaining()));
    try {
        const auto tok = gsrq::Llama2cTokenizer::load(path, vocab);
        for (const auto id : tok.encode("Once upon a time, a \xc3\xa9l\xc3\xa8ve saw \xf0\x9f\x90\x89 and \xff."))
            (void)tok.piece(id);
    } catch (const gsrq::Error&) {
    }
    return 0;
}
