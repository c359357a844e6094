// GGUF tensors to FP32 (gguf.h). Each block type is decoded with the operations of the `gguf` Python
// package's dequantization (gguf-py's quants.py), in the same order and each rounded to FP32, so the
// values are the same bits: scales are multiplied first (d·sc, dmin·m), then by the quant, then the
// offset is added or subtracted. This file is compiled with -ffp-contract=off, so that no product
// and sum are fused into one rounding.
#include "core/base/error.h"
#include "core/io/gguf.h"

#include <cstring>

namespace gsrq {

float halfToFloat(std::uint16_t h)
{
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) { // infinity or NaN: the payload kept, as NumPy keeps it
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { // subnormal: normalise
        int e = -1;
        do {
            ++e;
            man <<= 1;
        } while ((man & 0x400u) == 0);
        bits = sign | (std::uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

namespace {

std::uint16_t u16(const std::uint8_t* p)
{
    return std::uint16_t(p[0] | (p[1] << 8));
}

float f16(const std::uint8_t* p)
{
    return halfToFloat(u16(p));
}

void q4_0(const std::uint8_t* b, float* y)
{
    const float d = f16(b);
    const std::uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * float(int(qs[j] & 0x0f) - 8);
        y[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
}

void q4_1(const std::uint8_t* b, float* y)
{
    const float d = f16(b), m = f16(b + 2);
    const std::uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * float(qs[j] & 0x0f) + m;
        y[j + 16] = d * float(qs[j] >> 4) + m;
    }
}

void q5_0(const std::uint8_t* b, float* y)
{
    const float d = f16(b);
    std::uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const std::uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * float(int((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16);
        y[j + 16] = d * float(int((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
}

void q5_1(const std::uint8_t* b, float* y)
{
    const float d = f16(b), m = f16(b + 2);
    std::uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    const std::uint8_t* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * float((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) + m;
        y[j + 16] = d * float((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) + m;
    }
}

void q8_0(const std::uint8_t* b, float* y)
{
    const float d = f16(b);
    for (int j = 0; j < 32; ++j)
        y[j] = float(std::int8_t(b[2 + j])) * d;
}

// Q4_K and Q5_K: y = (d·sc)·q − dmin·m per sub-block; Q5_K adds a fifth bit from qh.
template <bool Five> void qk45(const std::uint8_t* b, float* y)
{
    const float d = f16(b), dmin = f16(b + 2);
    std::uint8_t sc[8], mn[8];
    ggufKScaleMin(b + 4, sc, mn);
    const std::uint8_t* qh = b + 16;               // Q5_K: 32 bytes of high bits
    const std::uint8_t* qs = b + (Five ? 48 : 16); // 128 bytes of nibbles
    for (int i = 0; i < 8; ++i) {
        const float ds = d * float(sc[i]), dm = dmin * float(mn[i]);
        const std::uint8_t* q = qs + (i / 2) * 32;
        const int shift = (i % 2) * 4;
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0x0f;
            if constexpr (Five)
                v |= ((qh[l] >> i) & 1) << 4;
            y[i * 32 + l] = ds * float(v) - dm;
        }
    }
}

void q6_k(const std::uint8_t* b, float* y)
{
    const std::uint8_t* ql = b;
    const std::uint8_t* qh = b + 128;
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
    const float d = f16(b + 208);
    for (int e = 0; e < 256; ++e) {
        const int half = e / 128, r = e % 128;
        const int low = (ql[half * 64 + r % 64] >> ((r / 64) * 4)) & 0x0f;
        const int high = (qh[half * 32 + r % 32] >> ((r / 32) * 2)) & 0x03;
        const float ds = d * float(scales[e / 16]);
        y[e] = ds * float(std::int8_t((low | (high << 4)) - 32));
    }
}

using BlockFn = void (*)(const std::uint8_t*, float*);

BlockFn blockFunction(GgmlType t)
{
    switch (t) {
    case GgmlType::Q4_0:
        return q4_0;
    case GgmlType::Q4_1:
        return q4_1;
    case GgmlType::Q5_0:
        return q5_0;
    case GgmlType::Q5_1:
        return q5_1;
    case GgmlType::Q8_0:
        return q8_0;
    case GgmlType::Q4_K:
        return qk45<false>;
    case GgmlType::Q5_K:
        return qk45<true>;
    case GgmlType::Q6_K:
        return q6_k;
    default:
        return nullptr;
    }
}

} // namespace

bool ggmlTypeDequantizable(GgmlType t)
{
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || blockFunction(t) != nullptr;
}

void dequantizeGgufRows(const GgufFile& file, const GgufTensor& t, std::int64_t row0, std::int64_t count, float* out)
{
    if (!ggmlTypeDequantizable(t.type))
        throwInvalid(file.path(), ": GGUF tensor '", t.name, "' is ", ggmlTypeName(t.type),
                     ", which this engine does not dequantize (it takes F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                     "Q5_1, Q4_K, Q5_K and Q6_K)");
    if (row0 < 0 || count < 0 || row0 > t.rows() || count > t.rows() - row0)
        throwInvalid(file.path(), ": GGUF tensor '", t.name, "': rows ", row0, " to ", row0 + count, " of ", t.rows());
    const auto traits = *ggmlTypeTraits(std::uint32_t(t.type));
    const std::int64_t n = t.rowLength(), blocksPerRow = n / traits.blockElements;
    const auto* src = reinterpret_cast<const std::uint8_t*>(t.data) + row0 * blocksPerRow * traits.blockBytes;
    const std::int64_t values = count * n;
    switch (t.type) {
    case GgmlType::F32:
        std::memcpy(out, src, std::size_t(values) * 4);
        return;
    case GgmlType::F16:
        for (std::int64_t i = 0; i < values; ++i)
            out[i] = f16(src + 2 * i);
        return;
    case GgmlType::BF16:
        for (std::int64_t i = 0; i < values; ++i) {
            const std::uint32_t bits = std::uint32_t(u16(src + 2 * i)) << 16;
            std::memcpy(out + i, &bits, 4);
        }
        return;
    default:
        break;
    }
    dequantizeGgufBlocks(t.type, src, values, out);
}

bool dequantizeGgufBlocks(GgmlType type, const void* src, std::int64_t count, float* out)
{
    const BlockFn fn = blockFunction(type);
    if (!fn)
        return false;
    const auto traits = *ggmlTypeTraits(std::uint32_t(type));
    const auto* p = static_cast<const std::uint8_t*>(src);
    const std::int64_t blocks = count / traits.blockElements;
    for (std::int64_t i = 0; i < blocks; ++i)
        fn(p + i * traits.blockBytes, out + i * traits.blockElements);
    return true;
}

void dequantizeGguf(const GgufFile& file, const GgufTensor& t, float* out)
{
    dequantizeGgufRows(file, t, 0, t.rows(), out);
}

std::vector<float> dequantizeGguf(const GgufFile& file, const GgufTensor& t)
{
    if (!ggmlTypeDequantizable(t.type))
        dequantizeGgufRows(file, t, 0, 0, nullptr); // throws, naming the tensor
    std::vector<float> v(std::size_t(t.elements()));
    dequantizeGguf(file, t, v.data());
    return v;
}

} // namespace gsrq
