// Structure-aware: sharded dumps whose index and shard headers are valid JSON, with values drawn to
// break the checks: shards named that do not exist or lie outside the directory, tensors in the
// wrong shard or in two, shapes whose product overflows 64 bits, offsets past the end, overlapping
// tensors, dtypes whose byte count is wrong, NaN and Inf in the data.
#include "fuzz_input.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>

namespace {

using gsrq::fuzz::ByteSource;
using gsrq::fuzz::dataBytes;
using gsrq::fuzz::kHostileFloats;
using gsrq::fuzz::kHostileSizes;

const char* const kShards[] = {"a.safetensors",     "b.safetensors", "c.safetensors", "../a.safetensors",
                               "sub/a.safetensors", ".safetensors",  "a.bin",         ""};
const char* const kTensors[] = {
    "layers.0.key", "layers.0.value", "layers.0.key_grad", "layers.0.value_grad", "layers.0.query",
    "layers.1.key", "positions",      "sequence_ids",      "rope.inv_freq",       "layers.99999999999999999999.key"};
const char* const kDtypes[] = {"F16", "F32", "F64", "BF16", "U8", "I32", "I64", "BOOL", "X"};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    ByteSource in(data, size);
    clearScratch();
    nlohmann::json weightMap = nlohmann::json::object();
    std::map<std::string, std::pair<nlohmann::json, std::string>> shards; // file -> header, data
    const int tokens = int(in.range(1, 5)), heads = int(in.range(1, 2)), headDim = int(in.pick({1, 2, 4}));
    const int count = int(in.range(1, 6));
    for (int i = 0; i < count; ++i) {
        const std::string tensor = in.pick(kTensors);
        const std::string shard = in.range(0, 3) ? in.pick({"a.safetensors", "b.safetensors"}) : in.pick(kShards);
        if (in.range(0, 7))
            weightMap[tensor] = shard;                                        // else a tensor the index does not list
        const std::string stored = in.range(0, 7) ? shard : in.pick(kShards); // else in another shard
        std::string dtype = in.range(0, 5) ? "F32" : in.pick(kDtypes);
        std::vector<std::int64_t> shape = {tokens, heads, headDim};
        if (tensor == "positions" || tensor == "sequence_ids") {
            shape = {tokens};
            dtype = in.range(0, 3) ? "I64" : dtype;
        } else if (tensor == "rope.inv_freq") {
            shape = {std::max(1, headDim / 2)};
        }
        for (auto& s : shape)
            if (in.range(0, 9) == 0)
                s = in.pick(kHostileSizes);
        std::int64_t bytes = dataBytes(dtype, shape);
        if (in.range(0, 7) == 0)
            bytes = std::max<std::int64_t>(0, bytes + in.range(-4, 4));
        auto& [header, blob] = shards[stored];
        if (header.is_null())
            header = nlohmann::json::object();
        std::string chunk;
        while (std::int64_t(chunk.size()) < bytes) {
            if (dtype == "I64") {
                const std::int64_t v = in.range(0, 3) ? std::int64_t(chunk.size() / 8) : in.pick(kHostileSizes);
                chunk.append(reinterpret_cast<const char*>(&v), 8);
            } else {
                const float f = in.range(0, 3) ? float(in.range(-8, 8)) : in.pick(kHostileFloats);
                chunk.append(reinterpret_cast<const char*>(&f), 4);
            }
        }
        chunk.resize(std::size_t(bytes));
        std::int64_t begin = std::int64_t(blob.size()), end = begin + bytes;
        switch (in.range(0, 11)) {
        case 0:
            begin = std::max<std::int64_t>(0, begin - 4);
            end = begin + bytes;
            break;
        case 1:
            end = std::int64_t(std::uint64_t(end) + std::uint64_t(in.pick(kHostileSizes))); // wraps on purpose
            break;
        case 2:
            begin = in.pick(kHostileSizes);
            break;
        default:
            break;
        }
        blob += chunk;
        header[tensor] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
    }
    for (const auto& [file, contents] : shards) {
        if (file.empty() || file.find('/') != std::string::npos)
            continue; // named in the index only; never written outside the scratch directory
        writeInput(file, safetensorsBytes(contents.first.dump(), contents.second));
    }
    nlohmann::json index = {{"weight_map", weightMap}};
    if (in.coin())
        index["metadata"] = {{"total_size", in.pick(kHostileSizes)}, {"format", "pt"}};
    writeInput("model.safetensors.index.json", index.dump());
    exerciseDump(scratchDir());
    return 0;
}
