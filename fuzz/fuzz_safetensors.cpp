// A KV dump in one safetensors file, as `gsrq info`, `gsrq train` and the app's Dataset page open it.
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    exerciseDump(writeInput("dump.safetensors", {reinterpret_cast<const char*>(data), size}));
    return 0;
}
