#pragma once
// GGUF reader (validated, memory-mapped): the file format llama.cpp, Ollama and LM Studio keep local
// models in, versions 2 and 3.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata,
// each a string key, a u32 value type and the value (strings are u64 length + bytes; arrays a u32
// element type, a u64 count, the elements); the tensor table, each a string name, u32 dims count,
// u64 dims (innermost first, ggml's ne[]), u32 ggml type and a u64 offset into the data section;
// padding to `general.alignment` (default 32); the data section.
// The reader checks, before anything is allocated from a count or touched in the data: every count,
// length and dims product against the bytes that are left, known value and tensor types, offsets
// aligned and each tensor inside the data section, no two overlapping. Every failure names the file
// (and the key or tensor).

#include "core/base/mapped_file.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

// ggml's tensor types (ggml.h's numbering, which the format stores).
enum class GgmlType : std::uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

// Elements per block and bytes per block of a type; nullopt for a number ggml does not define.
struct GgmlTypeTraits {
    const char* name;
    std::int64_t blockElements;
    std::int64_t blockBytes;
};
std::optional<GgmlTypeTraits> ggmlTypeTraits(std::uint32_t type);
const char* ggmlTypeName(GgmlType type);
// Whether dequantizeGguf() takes this type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool ggmlTypeDequantizable(GgmlType type);

enum class GgufValueType : std::uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};
const char* ggufValueTypeName(GgufValueType type);

// One metadata value. Numbers keep their type and are read through asInt()/asDouble(); arrays hold
// their elements as strings (string arrays) or numbers (every other element type; 64-bit integers
// past 2^53 lose their low bits there, which no key the engine reads holds).
struct GgufValue {
    GgufValueType type = GgufValueType::U8;
    std::int64_t integer = 0;                      // integer and bool types (U64 as its bits)
    double real = 0;                               // F32, F64
    std::string string;                            // String
    GgufValueType elementType = GgufValueType::U8; // Array
    std::vector<std::string> strings;              // Array of String
    std::vector<double> numbers;                   // Array of anything else
    bool isNumber() const;
    std::int64_t asInt() const;
    double asDouble() const;
    std::size_t arraySize() const { return elementType == GgufValueType::String ? strings.size() : numbers.size(); }
};

struct GgufTensor {
    std::string name;
    std::vector<std::int64_t> dims; // ne[]: innermost first (a [rows][cols] matrix is {cols, rows})
    GgmlType type = GgmlType::F32;
    std::uint64_t offset = 0; // into the data section
    std::uint64_t bytes = 0;
    const std::byte* data = nullptr;
    std::int64_t elements() const;
    std::int64_t rowLength() const { return dims.empty() ? 1 : dims.front(); }
    std::int64_t rows() const { return rowLength() ? elements() / rowLength() : 0; }
    std::string shapeString() const; // PyTorch's order, outermost first: "[576, 49152]"
};

class GgufFile {
public:
    // Throws Error(InvalidInput) naming the file (and the key or tensor) for anything malformed.
    static GgufFile open(const std::string& path);

    const std::string& path() const { return m_path; }
    std::uint32_t version() const { return m_version; }
    std::uint64_t alignment() const { return m_alignment; }
    std::uint64_t dataOffset() const { return m_dataOffset; }
    std::uint64_t fileBytes() const { return m_file->size(); }
    const std::map<std::string, GgufValue>& metadata() const { return m_metadata; }
    const std::vector<GgufTensor>& tensors() const { return m_tensors; } // in file order

    const GgufValue* find(const std::string& key) const;
    const GgufTensor* tensor(const std::string& name) const;
    // Typed metadata, failing with the file and key named when a required key is missing or of the
    // wrong kind.
    std::string string(const std::string& key) const;
    std::int64_t integer(const std::string& key) const;
    double real(const std::string& key) const;
    std::optional<std::int64_t> optionalInteger(const std::string& key) const;
    std::optional<double> optionalReal(const std::string& key) const;

private:
    std::string m_path;
    std::shared_ptr<const MappedFile> m_file;
    std::uint32_t m_version = 0;
    std::uint64_t m_alignment = 32, m_dataOffset = 0;
    std::map<std::string, GgufValue> m_metadata;
    std::vector<GgufTensor> m_tensors;
    std::map<std::string, std::size_t> m_byName;
};

// The tensor's values as FP32, in its storage order (ne[0] fastest): `out` holds elements() floats.
// Exactly the values the `gguf` Python package's dequantization gives (the same operations in the
// same order, each rounded to FP32). Throws Error(InvalidInput) naming the file and tensor for a type
// it does not take.
void dequantizeGguf(const GgufFile& file, const GgufTensor& t, float* out);
std::vector<float> dequantizeGguf(const GgufFile& file, const GgufTensor& t);
// Rows [row0, row0 + count) of the tensor (rows of rowLength() values), into out.
void dequantizeGgufRows(const GgufFile& file, const GgufTensor& t, std::int64_t row0, std::int64_t count, float* out);

// `count` values of blocks of a block type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) from
// `src` into out, as dequantizeGguf() decodes them; count a multiple of the type's block. Returns
// false (nothing written) for another type.
bool dequantizeGgufBlocks(GgmlType type, const void* src, std::int64_t count, float* out);

// The 6-bit scales and mins of the eight 32-value sub-blocks of a Q4_K or Q5_K block (`s`: its 12
// scale bytes), for readers of the blocks themselves (core/lm/quant_matvec.h).
// Inline: the decode kernels call it once a 256-value block.
inline void ggufKScaleMin(const std::uint8_t* s, std::uint8_t (&sc)[8], std::uint8_t (&mn)[8])
{
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 0x3f;
        mn[j] = s[j + 4] & 0x3f;
        sc[j + 4] = std::uint8_t((s[j + 8] & 0x0f) | ((s[j] >> 2) & 0x30));
        mn[j + 4] = std::uint8_t((s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30));
    }
}

// FP16 bits to FP32, exactly (subnormals, infinities and NaN payloads kept).
float halfToFloat(std::uint16_t h);

} // namespace gsrq
