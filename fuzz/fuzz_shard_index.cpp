// The JSON index of a sharded dump (model.safetensors.index.json) beside two valid shards; the input
// is the index's text.
#include "fuzz_input.h"

#include <string>

namespace {

std::string floats(int n, float start)
{
    std::string s;
    for (int i = 0; i < n; ++i) {
        const float v = start + 0.25f * float(i);
        s.append(reinterpret_cast<const char*>(&v), 4);
    }
    return s;
}

void writeShards()
{
    using namespace gsrq::fuzz;
    writeInput("a.safetensors",
               safetensorsBytes(R"({"layers.0.key":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},)"
                                R"("layers.0.key_grad":{"dtype":"F32","shape":[4,2],"data_offsets":[32,64]}})",
                                floats(16, 1.0f)));
    writeInput("b.safetensors",
               safetensorsBytes(R"({"__metadata__":{"model":"fuzz"},)"
                                R"("layers.0.value":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}})",
                                floats(8, -1.0f)));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    static const bool shardsWritten = (writeShards(), true);
    (void)shardsWritten;
    writeInput("model.safetensors.index.json", {reinterpret_cast<const char*>(data), size});
    exerciseDump(scratchDir());
    return 0;
}
