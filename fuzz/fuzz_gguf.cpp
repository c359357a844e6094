// A GGUF model as `gsrq info MODEL.gguf --checksums` and `gsrq tokenize` open it: the header,
// metadata and tensor table, the model's facts, its byte-level BPE vocabulary on a mixed text, then
// every tensor dequantized (tensors must lie inside the file, so their values are bounded by the
// input's size).
#include "fuzz_input.h"

#include "core/base/error.h"
#include "core/io/gguf.h"
#include "core/lm/gguf_model.h"
#include "core/lm/gguf_tokenizer.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    const auto path = writeInput("model.gguf", {reinterpret_cast<const char*>(data), size});
    try {
        const gsrq::GgufFile f = gsrq::GgufFile::open(path);
        try {
            (void)gsrq::ggufModelFacts(f);
        } catch (const gsrq::Error&) {
        }
        try {
            const auto tok = gsrq::BpeTokenizer::fromGguf(f);
            for (const auto id : tok.encode("Hello, world 1234 \xce\xb1\xce\xb2 \xf0\x9f\x91\x8d <|im_start|>  x\n"))
                (void)tok.piece(id);
        } catch (const gsrq::Error&) {
        }
        try { // the forward pass's weights: every tensor checked against the hyperparameters first
            (void)gsrq::loadGgufModel(f);
        } catch (const gsrq::Error&) {
        }
        std::vector<float> values;
        for (const gsrq::GgufTensor& t : f.tensors()) {
            if (!gsrq::ggmlTypeDequantizable(t.type))
                continue;
            values.resize(std::size_t(t.elements()));
            gsrq::dequantizeGguf(f, t, values.data());
        }
    } catch (const gsrq::Error&) {
    }
    return 0;
}
