#pragma once
// safetensors reader (validated, memory-mapped) and writer (atomic: temp file + rename).
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
// then the data section; offsets are relative to its start.
// The reader checks, before touching any data: header length within the file, valid JSON object,
// known dtype, non-negative shape, begin <= end <= data size, (end - begin) == numel × dtype size,
// and no two tensors overlapping. Every failure names the file (and the tensor).

#include "core/io/tensor.h"

#include <map>
#include <string>
#include <vector>

namespace gsrq {

struct SafetensorsFile {
    std::string path;
    std::vector<TensorView> tensors; // in data-offset order
    std::map<std::string, std::string> metadata;
};

SafetensorsFile readSafetensors(const std::string& path);

// A tensor to write: bytes already encoded in `dtype` (little-endian), numel × size bytes.
struct TensorBlob {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
};

TensorBlob makeFloatBlob(const std::string& name, const MatrixRF& m, DType dtype, std::vector<std::int64_t> shape = {});

// Writes to `path` + ".tmp-XXXX" then renames over `path`; on any failure the temporary file is
// removed and an existing `path` is left untouched.
void writeSafetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes bytes to a temporary file beside `path` and renames it into place (shared by writers).
void writeFileAtomic(const std::string& path, const std::vector<std::string_view>& parts);

} // namespace gsrq
