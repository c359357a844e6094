#pragma once
// A KV dump: the tensors of one model run, opened from
//   - a safetensors file,
//   - a directory of safetensors shards (names merged, duplicates refused); where it holds an index
//     (*.safetensors.index.json, as Hugging Face shards checkpoints), the shards it names, each
//     holding exactly the tensors its weight_map places there, or
//   - a plain .npy array (one tensor, named after the file's stem).
// Recognised names: layers.{L}.{key|value|query|key_grad|value_grad}, shape [tokens, heads, head_dim]
// or [tokens, features]; optional positions, sequence_ids [tokens] and rope.inv_freq [head_dim/2].
// Nothing is read until a tensor is converted: files are memory-mapped.

#include "core/io/tensor.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace gsrq {

enum class KvKind { Key, Value, Query, KeyGrad, ValueGrad, Other };
const char* kvKindName(KvKind k); // "key", "value", ..., "other"

// The layer and kind a tensor name stands for: layers.{L}.{key|value|query|key_grad|value_grad};
// layer −1 and Other for any other name.
struct KvName {
    int layer = -1;
    KvKind kind = KvKind::Other;
};
KvName parseKvName(const std::string& name);

// A --layers list such as "0-3,7". Throws Error(InvalidInput) naming --layers for anything else.
std::set<int> parseLayerList(const std::string& text);

struct KvTensor {
    TensorView view;
    int layer = -1; // -1 unless the name is layers.{L}.{kind}
    KvKind kind = KvKind::Other;
};

class KvDump {
public:
    // Throws Error(InvalidInput) naming the path for anything unreadable or malformed.
    static KvDump open(const std::string& path);

    const std::string& path() const { return m_path; }
    const std::string& format() const { return m_format; } // "safetensors", "safetensors-dir", "npy"
    const std::vector<std::string>& files() const { return m_files; }
    const std::vector<KvTensor>& tensors() const { return m_tensors; }
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    std::size_t totalBytes() const;

    const KvTensor* find(const std::string& name) const;
    // As find(), but throws Error(InvalidInput) listing the tensors that exist.
    const KvTensor& get(const std::string& name) const;
    // The tensor to train on when the caller names none: the only one, else an error listing them.
    const KvTensor& only() const;
    // The gradient tensor of a key or value (layers.L.key -> layers.L.key_grad), or nullptr.
    const KvTensor* gradientOf(const KvTensor& t) const;

private:
    void add(TensorView v);
    std::string m_path;
    std::string m_format;
    std::vector<std::string> m_files;
    std::vector<KvTensor> m_tensors;
    std::map<std::string, std::string> m_metadata;
};

// A tensor loaded for clustering: [rows, features] float32, finite, with what was done to it.
struct LoadedTensor {
    std::string name;
    MatrixRF rows;
    std::vector<std::int64_t> droppedRows; // indices into the original tensor
    std::int64_t originalRows = 0;
};

// Converts and validates: non-empty, finite (or non-finite rows dropped when `dropNonFinite`),
// not all zeros. Errors name the tensor and file and, for NaN/Inf, the count and first row.
LoadedTensor loadForClustering(const KvTensor& t, bool dropNonFinite);

} // namespace gsrq
