// A plain .npy array opened as a dump (one tensor named after the file).
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    exerciseDump(writeInput("layers.0.key.npy", {reinterpret_cast<const char*>(data), size}));
    return 0;
}
