#include "core/io/tensor.h"

#include "core/base/error.h"

#include <Eigen/Core>

#include <array>
#include <cmath>
#include <cstring>

namespace gsrq {

namespace {

struct DTypeInfo {
    DType type;
    const char* name;
    std::size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes{{
    {DType::Bool, "BOOL", 1},
    {DType::U8, "U8", 1},
    {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},
    {DType::I16, "I16", 2},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::U32, "U32", 4},
    {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},
    {DType::U64, "U64", 8},
    {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},
}};

const DTypeInfo& info(DType t)
{
    for (const auto& d : kDTypes)
        if (d.type == t)
            return d;
    return kDTypes[0]; // unreachable: every enumerator is listed
}

template <class T> T load(const std::byte* p)
{
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Converts n elements of a float dtype starting at src into dst (float32).
void convertFloats(const std::byte* src, std::size_t n, DType t, float* dst)
{
    if (n == 0)
        return; // an empty tensor: dst may be null, which memcpy must not see even for 0 bytes
    switch (t) {
    case DType::F32:
        std::memcpy(dst, src, n * sizeof(float));
        return;
    case DType::F64:
        for (std::size_t i = 0; i < n; ++i)
            dst[i] = static_cast<float>(load<double>(src + 8 * i));
        return;
    case DType::F16:
        for (std::size_t i = 0; i < n; ++i)
            dst[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(load<std::uint16_t>(src + 2 * i)));
        return;
    case DType::BF16:
        for (std::size_t i = 0; i < n; ++i)
            dst[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(load<std::uint16_t>(src + 2 * i)));
        return;
    default:
        return;
    }
}

} // namespace

std::size_t dtypeSize(DType t)
{
    return info(t).size;
}
const char* dtypeName(DType t)
{
    return info(t).name;
}

std::optional<DType> dtypeFromName(const std::string& name)
{
    for (const auto& d : kDTypes)
        if (name == d.name)
            return d.type;
    return std::nullopt;
}

bool isFloat(DType t)
{
    return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}

std::int64_t TensorView::numel() const
{
    std::int64_t n = 1;
    for (auto s : shape)
        n *= s;
    return n;
}

std::int64_t TensorView::rows() const
{
    return shape.empty() ? 1 : shape[0];
}

std::int64_t TensorView::features() const
{
    std::int64_t f = 1;
    for (std::size_t i = 1; i < shape.size(); ++i)
        f *= shape[i];
    return f;
}

std::string TensorView::shapeString() const
{
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string TensorView::where() const
{
    return cat("tensor '", name, "' in ", file ? file->path() : std::string("(memory)"));
}

MatrixRF toMatrix(const TensorView& t)
{
    if (!isFloat(t.dtype))
        throwInvalid(t.where(), ": dtype ", dtypeName(t.dtype), " is not a float type (F16, BF16, F32, F64)");
    if (t.shape.empty())
        throwInvalid(t.where(), ": is a scalar, expected [tokens, features] or [tokens, heads, head_dim]");
    MatrixRF m(t.rows(), t.features());
    convertFloats(t.data, static_cast<std::size_t>(t.numel()), t.dtype, m.data());
    return m;
}

std::vector<std::int64_t> toInt64(const TensorView& t)
{
    const std::size_t n = static_cast<std::size_t>(t.numel());
    std::vector<std::int64_t> out(n);
    const std::byte* p = t.data;
    for (std::size_t i = 0; i < n; ++i) {
        switch (t.dtype) {
        case DType::Bool:
        case DType::U8:
            out[i] = load<std::uint8_t>(p + i);
            break;
        case DType::I8:
            out[i] = load<std::int8_t>(p + i);
            break;
        case DType::U16:
            out[i] = load<std::uint16_t>(p + 2 * i);
            break;
        case DType::I16:
            out[i] = load<std::int16_t>(p + 2 * i);
            break;
        case DType::U32:
            out[i] = load<std::uint32_t>(p + 4 * i);
            break;
        case DType::I32:
            out[i] = load<std::int32_t>(p + 4 * i);
            break;
        case DType::U64:
            out[i] = static_cast<std::int64_t>(load<std::uint64_t>(p + 8 * i));
            break;
        case DType::I64:
            out[i] = load<std::int64_t>(p + 8 * i);
            break;
        default:
            throwInvalid(t.where(), ": dtype ", dtypeName(t.dtype), " is not an integer type");
        }
    }
    return out;
}

std::vector<std::int64_t> nonFiniteRows(const MatrixRF& x)
{
    std::vector<std::int64_t> bad;
    for (Eigen::Index i = 0; i < x.rows(); ++i)
        if (!x.row(i).allFinite())
            bad.push_back(i);
    return bad;
}

MatrixRF dropRows(const MatrixRF& x, const std::vector<std::int64_t>& rows)
{
    MatrixRF out(x.rows() - static_cast<Eigen::Index>(rows.size()), x.cols());
    std::size_t skip = 0;
    Eigen::Index o = 0;
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        if (skip < rows.size() && rows[skip] == i) {
            ++skip;
            continue;
        }
        out.row(o++) = x.row(i);
    }
    return out;
}

std::vector<std::byte> encodeFloats(const float* values, std::size_t n, DType t)
{
    std::vector<std::byte> out(n * dtypeSize(t));
    for (std::size_t i = 0; i < n; ++i) {
        std::byte* p = out.data() + i * dtypeSize(t);
        switch (t) {
        case DType::F32:
            std::memcpy(p, &values[i], 4);
            break;
        case DType::F64: {
            const double d = values[i];
            std::memcpy(p, &d, 8);
            break;
        }
        case DType::F16: {
            const auto b = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(values[i]));
            std::memcpy(p, &b, 2);
            break;
        }
        case DType::BF16: {
            const auto b = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(values[i]));
            std::memcpy(p, &b, 2);
            break;
        }
        default:
            throwInvalid("cannot encode floats as ", dtypeName(t));
        }
    }
    return out;
}

} // namespace gsrq
