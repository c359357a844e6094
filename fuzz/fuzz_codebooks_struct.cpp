// Structure-aware: codebooks files whose header is valid JSON and whose metadata is nearly right,
// with values drawn to break the checks: shapes whose product overflows 64 bits, offsets past the
// end, overlapping tensors, dtypes whose byte count is wrong, NaN and Inf in the codewords, codes at
// and past K.
#include "fuzz_input.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace {

using gsrq::fuzz::ByteSource;
using gsrq::fuzz::dataBytes;
using gsrq::fuzz::kHostileFloats;
using gsrq::fuzz::kHostileSizes;

const char* const kDtypes[] = {"F16", "F32", "F64", "BF16", "U8", "U16", "I32", "I64", "BOOL", "F8_E4M3", "X"};
const char* const kNames[] = {"layers.0.key.codebooks",
                              "layers.0.key.codes",
                              "layers.1.value.codebooks",
                              "layers.1.value.codes",
                              "layers.0.key.codebooks",
                              ".codebooks",
                              ".codes",
                              "codes",
                              "layers.0.key"};
const char* const kBadInts[] = {"-1", "0", "2147483648", "99999999999999999999", "1e3", "nan", "", " 4", "4x"};
// A dimension: usually the one the metadata implies, sometimes a hostile size.
std::int64_t dimension(ByteSource& in, std::int64_t right)
{
    return in.range(0, 7) == 0 ? in.pick(kHostileSizes) : right;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    using namespace gsrq::fuzz;
    ByteSource in(data, size);
    const int D = int(in.pick({1, 2, 4, 8})), R = int(in.pick({1, 2, 3})), K = int(in.pick({1, 2, 4, 16, 256, 257}));
    const int M = int(in.pick({1, 2}));
    nlohmann::json meta = {{"format", "gsrq-codebooks"},  {"format_version", "1"},     {"dim", std::to_string(D)},
                           {"stages", std::to_string(R)}, {"k", std::to_string(K)},    {"method", "gskm"},
                           {"weights", "none"},           {"tensors", "layers.0.key"}, {"settings", "{}"}};
    if (in.range(0, 3) == 0) {
        const char* const keys[] = {"format_version", "dim", "stages", "k"};
        meta[in.pick(keys)] = in.pick(kBadInts);
    }
    nlohmann::json header = {{"__metadata__", meta}};
    std::string blob;
    const int tensors = int(in.range(1, 4));
    for (int i = 0; i < tensors; ++i) {
        const std::string name = in.pick(kNames);
        const bool isCodes = name.ends_with("codes");
        std::string dtype = isCodes ? (K <= 256 ? "U8" : "U16") : "F32";
        if (in.range(0, 5) == 0)
            dtype = in.pick(kDtypes);
        std::vector<std::int64_t> shape;
        if (isCodes)
            shape = {dimension(in, in.range(0, 6)), dimension(in, M), dimension(in, R)};
        else
            shape = {dimension(in, M), dimension(in, R), dimension(in, K), dimension(in, D)};
        if (in.range(0, 9) == 0)
            shape.pop_back();
        std::int64_t bytes = dataBytes(dtype, shape);
        if (in.range(0, 7) == 0)
            bytes += in.range(-4, 4); // a byte count that does not match the dtype
        bytes = std::max<std::int64_t>(bytes, 0);
        std::string chunk;
        for (std::int64_t b = 0; b < bytes;) {
            if (isCodes) {
                const std::uint16_t c = std::uint16_t(in.range(0, 3) == 0 ? K + in.range(-1, 1) : in.range(0, K));
                chunk.append(reinterpret_cast<const char*>(&c), 2);
                b += 2;
            } else {
                const float f = in.pick(kHostileFloats);
                chunk.append(reinterpret_cast<const char*>(&f), 4);
                b += 4;
            }
        }
        chunk.resize(std::size_t(bytes));
        std::int64_t begin = std::int64_t(blob.size()), end = begin + bytes;
        switch (in.range(0, 11)) {
        case 0:
            begin = std::max<std::int64_t>(0, begin - 8); // overlaps the previous tensor
            end = begin + bytes;
            break;
        case 1:
            // past the end (wrapping on purpose: offsets near 2^64 are hostile too)
            end = std::int64_t(std::uint64_t(begin + bytes) + std::uint64_t(in.pick(kHostileSizes)));
            break;
        case 2:
            begin = in.pick(kHostileSizes);
            break;
        case 3:
            std::swap(begin, end);
            break;
        default:
            break;
        }
        blob += chunk;
        header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
    }
    const auto path = writeInput("codebooks.safetensors", safetensorsBytes(header.dump(), blob));
    exerciseCodebooks(path);
    return 0;
}
