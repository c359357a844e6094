// A codebooks file as `gsrq eval`, `gsrq codebooks` and `gsrq ppl` read it: validated, then its
// codes decoded with its codewords.
#include "fuzz_input.h"

#include "codebook_file.h"
#include "error.h"
#include "quantizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    const auto path = writeInput("codebooks.safetensors", {reinterpret_cast<const char*>(data), size});
    try {
        const auto file = gsrq::readCodebookFile(path);
        for (const auto& e : file.entries)
            if (e.codes)
                (void)gsrq::decode(*e.codes, e.codebooks);
    } catch (const gsrq::Error&) {
    }
    return 0;
}
