#pragma once
// Random GGUF weight blocks for the suites that test the products reading them (tst_model,
// tst_quant_products): random quants, and scales drawn from a few FP16 values of both signs and
// several magnitudes, a subnormal included.

#include "core/io/gguf.h"
#include "core/lm/quant_matvec.h"

#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

namespace gsrq::test {

struct RandomBlocks {
    std::vector<std::uint8_t> raw; // rows × cols values in `type`'s blocks
    GgufTensor tensor;             // the blocks as a tensor (its data points into raw)
    QuantMatrix matrix;            // and as the kernels' view
    std::vector<float> dequantized;
    bool dequantizedOk = false; // dequantizeGgufBlocks() took the type
    RandomBlocks() = default;
    RandomBlocks(RandomBlocks&&) = default; // raw's buffer moves with it: the views stay valid
    RandomBlocks(const RandomBlocks&) = delete;
};

// A rows × cols matrix of random blocks of `type` (Q4_0, Q4_1, Q8_0, Q4_K or Q6_K), drawn from rng.
inline RandomBlocks randomBlocks(GgmlType type, std::int64_t rows, std::int64_t cols, std::mt19937& rng)
{
    std::uniform_int_distribution<int> byte(0, 255);
    const std::uint16_t halves[] = {0x2e66, 0x3c00, 0xb4cd, 0x1400, 0x8001, 0x2a00, 0xa1f0};
    RandomBlocks b;
    const auto traits = *ggmlTypeTraits(std::uint32_t(type));
    const std::int64_t blocks = rows * cols / traits.blockElements;
    b.raw.resize(std::size_t(blocks * traits.blockBytes));
    for (auto& v : b.raw)
        v = std::uint8_t(byte(rng));
    // The scale fields: Q4_0, Q8_0: d at 0; Q4_1: d, m; Q4_K: d, dmin; Q6_K: d at 208.
    const std::vector<int> scaleAt = type == GgmlType::Q6_K                             ? std::vector<int>{208}
                                     : type == GgmlType::Q4_1 || type == GgmlType::Q4_K ? std::vector<int>{0, 2}
                                                                                        : std::vector<int>{0};
    for (std::int64_t k = 0; k < blocks; ++k)
        for (int at : scaleAt) {
            const std::uint16_t h = halves[std::size_t(byte(rng)) % std::size(halves)];
            b.raw[std::size_t(k * traits.blockBytes + at)] = std::uint8_t(h & 0xff);
            b.raw[std::size_t(k * traits.blockBytes + at + 1)] = std::uint8_t(h >> 8);
        }
    b.tensor.name = "w";
    b.tensor.dims = {cols, rows};
    b.tensor.type = type;
    b.tensor.data = reinterpret_cast<const std::byte*>(b.raw.data());
    b.tensor.bytes = b.raw.size();
    b.matrix = quantMatrix(b.tensor);
    b.dequantized.resize(std::size_t(rows * cols));
    b.dequantizedOk = dequantizeGgufBlocks(type, b.raw.data(), rows * cols, b.dequantized.data());
    return b;
}

} // namespace gsrq::test
