// A codebooks file as `gsrq eval`, `gsrq codebooks` and `gsrq ppl` read it: validated, then its
// codes decoded with its codewords.
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    exerciseCodebooks(writeInput("codebooks.safetensors", {reinterpret_cast<const char*>(data), size}));
    return 0;
}
