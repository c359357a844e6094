// The GGUF reader (gguf.h): header, metadata and tensor table, validated before use.
#include "core/io/gguf.h"

#include "core/base/error.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace gsrq {

namespace {

struct TypeRow {
    std::uint32_t id;
    GgmlTypeTraits traits;
};

// ggml's types: name, elements per block, bytes per block (ggml.c's type_traits). The numbers ggml
// retired (4, 5: Q4_2, Q4_3; 31-33, 36-38: removed or packed variants) are not types.
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},      {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},      {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},   {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},   {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},        {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},   {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

constexpr std::uint64_t kMaxDims = 4; // GGML_MAX_DIMS

// Reads the header front to back; every read checks the bytes left first.
class Cursor {
public:
    Cursor(const std::string& path, const std::byte* data, std::size_t size) : m_path(path), m_data(data), m_size(size)
    {
    }
    std::size_t pos() const { return m_pos; }
    std::size_t left() const { return m_size - m_pos; }
    template <class T> T read(const char* what, const std::string& context)
    {
        need(sizeof(T), what, context);
        T v;
        std::memcpy(&v, m_data + m_pos, sizeof(T));
        m_pos += sizeof(T);
        return v;
    }
    std::string string(const char* what, const std::string& context)
    {
        const auto n = read<std::uint64_t>(what, context);
        if (n > left())
            fail(what, context, cat("a string of ", n, " bytes, past the end of the file (", left(), " bytes left)"));
        std::string s(reinterpret_cast<const char*>(m_data + m_pos), std::size_t(n));
        m_pos += std::size_t(n);
        return s;
    }
    void need(std::size_t bytes, const char* what, const std::string& context)
    {
        if (bytes > left())
            fail(what, context, cat("the file ends there (", left(), " bytes left, ", bytes, " needed): truncated"));
    }
    [[noreturn]] void fail(const char* what, const std::string& context, const std::string& why) const
    {
        throwInvalid(m_path, ": GGUF ", what, context.empty() ? "" : " ", context, " at byte ", m_pos, ": ", why);
    }

private:
    const std::string& m_path;
    const std::byte* m_data;
    std::size_t m_size, m_pos = 0;
};

// Smallest encoded size of one value of the type (strings: their length field), so that a count is
// checked against the bytes left before anything is allocated for it.
std::size_t minValueBytes(GgufValueType t)
{
    switch (t) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::Bool:
        return 1;
    case GgufValueType::U16:
    case GgufValueType::I16:
        return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32:
        return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64:
    case GgufValueType::String:
        return 8;
    case GgufValueType::Array:
        return 12;
    }
    return 1;
}

bool knownValueType(std::uint32_t t)
{
    return t <= std::uint32_t(GgufValueType::F64);
}

// A scalar of type t as (integer, real).
void readScalar(Cursor& c, GgufValueType t, const std::string& key, std::int64_t& i, double& r)
{
    switch (t) {
    case GgufValueType::U8:
        i = c.read<std::uint8_t>("value of", key);
        break;
    case GgufValueType::I8:
        i = c.read<std::int8_t>("value of", key);
        break;
    case GgufValueType::U16:
        i = c.read<std::uint16_t>("value of", key);
        break;
    case GgufValueType::I16:
        i = c.read<std::int16_t>("value of", key);
        break;
    case GgufValueType::U32:
        i = c.read<std::uint32_t>("value of", key);
        break;
    case GgufValueType::I32:
        i = c.read<std::int32_t>("value of", key);
        break;
    case GgufValueType::U64:
        i = std::int64_t(c.read<std::uint64_t>("value of", key));
        break;
    case GgufValueType::I64:
        i = c.read<std::int64_t>("value of", key);
        break;
    case GgufValueType::Bool: {
        const auto b = c.read<std::uint8_t>("value of", key);
        if (b > 1)
            c.fail("value of", key, cat("a bool of ", int(b), " (0 or 1)"));
        i = b;
        break;
    }
    case GgufValueType::F32:
        r = c.read<float>("value of", key);
        break;
    case GgufValueType::F64:
        r = c.read<double>("value of", key);
        break;
    default:
        break;
    }
}

GgufValue readValue(Cursor& c, GgufValueType t, const std::string& key)
{
    GgufValue v;
    v.type = t;
    if (t == GgufValueType::String) {
        v.string = c.string("value of", key);
        return v;
    }
    if (t != GgufValueType::Array) {
        readScalar(c, t, key, v.integer, v.real);
        return v;
    }
    const auto et = c.read<std::uint32_t>("array type of", key);
    if (!knownValueType(et))
        c.fail("array type of", key, cat("unknown value type ", et));
    v.elementType = GgufValueType(et);
    if (v.elementType == GgufValueType::Array)
        c.fail("array type of", key, "arrays of arrays are not GGUF");
    const auto n = c.read<std::uint64_t>("array length of", key);
    if (n > c.left() / minValueBytes(v.elementType))
        c.fail("array of", key, cat(n, " elements cannot fit in the ", c.left(), " bytes left: truncated or corrupt"));
    if (v.elementType == GgufValueType::String) {
        v.strings.reserve(std::size_t(std::min<std::uint64_t>(n, 1 << 16))); // grows as strings are read
        for (std::uint64_t i = 0; i < n; ++i)
            v.strings.push_back(c.string("string array", key));
    } else {
        v.numbers.reserve(std::size_t(std::min<std::uint64_t>(n, 1 << 16)));
        for (std::uint64_t i = 0; i < n; ++i) {
            std::int64_t iv = 0;
            double rv = 0;
            readScalar(c, v.elementType, key, iv, rv);
            v.numbers.push_back(
                v.elementType == GgufValueType::F32 || v.elementType == GgufValueType::F64 ? rv : double(iv));
        }
    }
    return v;
}

} // namespace

std::optional<GgmlTypeTraits> ggmlTypeTraits(std::uint32_t type)
{
    for (const auto& r : kTypes)
        if (r.id == type)
            return r.traits;
    return std::nullopt;
}

const char* ggmlTypeName(GgmlType type)
{
    const auto t = ggmlTypeTraits(std::uint32_t(type));
    return t ? t->name : "unknown";
}

const char* ggufValueTypeName(GgufValueType t)
{
    static const char* const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return std::uint32_t(t) < std::size(names) ? names[std::uint32_t(t)] : "unknown";
}

bool GgufValue::isNumber() const
{
    return type != GgufValueType::String && type != GgufValueType::Array;
}

std::int64_t GgufValue::asInt() const
{
    return type == GgufValueType::F32 || type == GgufValueType::F64 ? std::int64_t(real) : integer;
}

double GgufValue::asDouble() const
{
    if (type == GgufValueType::U64)
        return double(std::uint64_t(integer));
    return type == GgufValueType::F32 || type == GgufValueType::F64 ? real : double(integer);
}

std::int64_t GgufTensor::elements() const
{
    std::int64_t n = 1;
    for (auto d : dims)
        n *= d;
    return n;
}

std::string GgufTensor::shapeString() const
{
    std::string s = "[";
    for (std::size_t i = dims.size(); i-- > 0;)
        s += std::to_string(dims[i]) + (i ? ", " : "");
    return s + "]";
}

GgufFile GgufFile::open(const std::string& path)
{
    GgufFile f;
    f.m_path = path;
    f.m_file = MappedFile::open(path);
    const std::byte* base = f.m_file->data();
    Cursor c(path, base, f.m_file->size());

    const auto magic = c.read<std::uint32_t>("magic", "");
    if (std::memcmp(&magic, "GGUF", 4) != 0)
        throwInvalid(path, ": not a GGUF file (it does not start with \"GGUF\")");
    f.m_version = c.read<std::uint32_t>("version", "");
    if (f.m_version != 2 && f.m_version != 3)
        throwInvalid(path, ": GGUF version ", f.m_version, " (this reader takes versions 2 and 3)");
    const auto nTensors = c.read<std::uint64_t>("tensor count", "");
    const auto nKv = c.read<std::uint64_t>("metadata count", "");
    // A key is at least its length and type (12 bytes) plus one byte; a tensor at least 28 bytes.
    if (nKv > c.left() / 13)
        throwInvalid(path, ": GGUF header claims ", nKv, " metadata entries, more than the file's ", c.left(),
                     " bytes can hold: truncated or corrupt");
    if (nTensors > c.left() / 28)
        throwInvalid(path, ": GGUF header claims ", nTensors, " tensors, more than the file's ", c.left(),
                     " bytes can hold: truncated or corrupt");

    for (std::uint64_t i = 0; i < nKv; ++i) {
        std::string key = c.string("metadata key", cat("#", i));
        const auto t = c.read<std::uint32_t>("value type of", key);
        if (!knownValueType(t))
            c.fail("value type of", key, cat("unknown value type ", t));
        GgufValue v = readValue(c, GgufValueType(t), key);
        if (!f.m_metadata.emplace(key, std::move(v)).second)
            throwInvalid(path, ": GGUF metadata key '", key, "' appears twice");
    }
    if (const GgufValue* a = f.find("general.alignment")) {
        if (a->type != GgufValueType::U32 || a->integer == 0 || (a->integer & (a->integer - 1)))
            throwInvalid(path, ": GGUF general.alignment must be a u32 power of two, not ", a->asInt(), " (",
                         ggufValueTypeName(a->type), ")");
        f.m_alignment = std::uint64_t(a->integer);
    }

    f.m_tensors.reserve(std::size_t(std::min<std::uint64_t>(nTensors, 1 << 12))); // grows as entries are read
    for (std::uint64_t i = 0; i < nTensors; ++i) {
        GgufTensor t;
        t.name = c.string("tensor name", cat("#", i));
        const std::string ctx = "'" + t.name + "'";
        const auto nd = c.read<std::uint32_t>("dims count of tensor", ctx);
        if (nd == 0 || nd > kMaxDims)
            c.fail("dims of tensor", ctx, cat(nd, " dimensions (1 to ", kMaxDims, ")"));
        std::int64_t elements = 1;
        for (std::uint32_t d = 0; d < nd; ++d) {
            const auto n = c.read<std::uint64_t>("dims of tensor", ctx);
            // Each dimension and the product bounded by 2^62, far beyond any file: no overflow below.
            if (n == 0 || n > (std::uint64_t(1) << 62) || std::uint64_t(elements) > (std::uint64_t(1) << 62) / n)
                c.fail("dims of tensor", ctx, cat("dimension ", d, " is ", n, ": empty or absurdly large"));
            t.dims.push_back(std::int64_t(n));
            elements *= std::int64_t(n);
        }
        const auto type = c.read<std::uint32_t>("type of tensor", ctx);
        const auto traits = ggmlTypeTraits(type);
        if (!traits)
            c.fail("type of tensor", ctx, cat("unknown ggml type ", type));
        t.type = GgmlType(type);
        if (t.dims[0] % traits->blockElements)
            c.fail("dims of tensor", ctx,
                   cat("rows of ", t.dims[0], " values do not divide into ", traits->name, "'s blocks of ",
                       traits->blockElements));
        const auto blocks = std::uint64_t(elements / traits->blockElements);
        t.offset = c.read<std::uint64_t>("offset of tensor", ctx);
        if (blocks > f.m_file->size() / std::uint64_t(traits->blockBytes))
            throwInvalid(path, ": GGUF tensor ", ctx, " (", traits->name, " ", t.shapeString(),
                         ") needs more bytes than the ", f.m_file->size(), "-byte file holds: truncated or corrupt");
        t.bytes = blocks * std::uint64_t(traits->blockBytes);
        if (t.offset % f.m_alignment)
            c.fail("offset of tensor", ctx, cat(t.offset, " is not a multiple of the alignment ", f.m_alignment));
        if (!f.m_byName.emplace(t.name, f.m_tensors.size()).second)
            throwInvalid(path, ": GGUF tensor ", ctx, " appears twice");
        f.m_tensors.push_back(std::move(t));
    }

    f.m_dataOffset = (std::uint64_t(c.pos()) + f.m_alignment - 1) / f.m_alignment * f.m_alignment;
    const std::uint64_t size = f.m_file->size();
    const std::uint64_t dataBytes = f.m_dataOffset <= size ? size - f.m_dataOffset : 0;
    std::vector<std::size_t> order(f.m_tensors.size());
    for (std::size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return f.m_tensors[a].offset < f.m_tensors[b].offset; });
    std::uint64_t end = 0;
    const GgufTensor* previous = nullptr;
    for (std::size_t i : order) {
        GgufTensor& t = f.m_tensors[i];
        if (t.offset > dataBytes || t.bytes > dataBytes - t.offset)
            throwInvalid(path, ": GGUF tensor '", t.name, "' (", ggmlTypeName(t.type), " ", t.shapeString(), ", ",
                         t.bytes, " bytes at data offset ", t.offset, ") runs past the end of the file (", dataBytes,
                         " bytes of data): truncated");
        if (previous && t.offset < end)
            throwInvalid(path, ": GGUF tensors '", previous->name, "' and '", t.name, "' overlap");
        end = t.offset + t.bytes;
        previous = &t;
        t.data = base + f.m_dataOffset + t.offset;
    }
    return f;
}

const GgufValue* GgufFile::find(const std::string& key) const
{
    const auto it = m_metadata.find(key);
    return it == m_metadata.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const
{
    const auto it = m_byName.find(name);
    return it == m_byName.end() ? nullptr : &m_tensors[it->second];
}

std::string GgufFile::string(const std::string& key) const
{
    const GgufValue* v = find(key);
    if (!v)
        throwInvalid(m_path, ": GGUF metadata has no '", key, "'");
    if (v->type != GgufValueType::String)
        throwInvalid(m_path, ": GGUF metadata '", key, "' is a ", ggufValueTypeName(v->type), ", not a string");
    return v->string;
}

std::int64_t GgufFile::integer(const std::string& key) const
{
    const auto v = optionalInteger(key);
    if (!v)
        throwInvalid(m_path, ": GGUF metadata has no '", key, "'");
    return *v;
}

double GgufFile::real(const std::string& key) const
{
    const auto v = optionalReal(key);
    if (!v)
        throwInvalid(m_path, ": GGUF metadata has no '", key, "'");
    return *v;
}

std::optional<std::int64_t> GgufFile::optionalInteger(const std::string& key) const
{
    const GgufValue* v = find(key);
    if (!v)
        return std::nullopt;
    if (!v->isNumber() || v->type == GgufValueType::F32 || v->type == GgufValueType::F64)
        throwInvalid(m_path, ": GGUF metadata '", key, "' is a ", ggufValueTypeName(v->type), ", not an integer");
    return v->integer;
}

std::optional<double> GgufFile::optionalReal(const std::string& key) const
{
    const GgufValue* v = find(key);
    if (!v)
        return std::nullopt;
    if (!v->isNumber())
        throwInvalid(m_path, ": GGUF metadata '", key, "' is a ", ggufValueTypeName(v->type), ", not a number");
    return v->asDouble();
}

} // namespace gsrq
