// A llama2.c checkpoint as `gsrq ppl` loads it, then one decoding step through it.
#include "fuzz_input.h"

#include "core/base/error.h"
#include "core/lm/llama2c_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    const auto path = writeInput("model.bin", {reinterpret_cast<const char*>(data), size});
    try {
        const auto model = gsrq::loadLlama2cModel(path);
        gsrq::TransformerModel::Cache cache;
        const std::int32_t token = 0;
        (void)model.forward({&token, 1}, cache);
    } catch (const gsrq::Error&) {
    }
    return 0;
}
