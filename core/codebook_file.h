#pragma once
// The codebooks file (docs/formats.md): a safetensors file holding, per trained tensor T,
//   T.codebooks  [M, R, K, D]  F16 or F32
//   T.codes      [N, M, R]     U8 for K ≤ 256, else U16   (optional)
// and metadata: format "gsrq-codebooks", format_version "1", dim, stages, k, method, weights,
// tau, beam, bpa, key_rope, source_sha256, source, tensors, settings (JSON).
// Every tensor of one file shares D, R, K and the training settings.

#include "quantizer.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

inline constexpr const char* kCodebookFormat = "gsrq-codebooks";
inline constexpr int kCodebookFormatVersion = 1;

struct CodebookEntry {
    std::string tensor; // the dump's tensor, e.g. layers.2.value
    Codebooks codebooks;
    std::optional<Codes> codes; // N × (M·R)
};

struct CodebookFile {
    std::map<std::string, std::string> metadata;
    std::vector<CodebookEntry> entries;
    const CodebookEntry* find(const std::string& tensor) const;
};

// dtype: F16 or F32 for the codewords. Atomic (temporary file + rename).
void writeCodebookFile(const std::string& path, const CodebookFile& f, DType dtype);
// Validates format, version and shapes; throws Error(InvalidInput) naming the file.
CodebookFile readCodebookFile(const std::string& path);
// Joins files trained with the same settings; refuses a mismatch (naming the key and files) or a
// tensor present twice.
CodebookFile mergeCodebookFiles(const std::vector<std::string>& paths);

// Keys whose values must agree for files to be merged (or a dump evaluated consistently).
const std::vector<std::string>& codebookSettingKeys();

} // namespace gsrq
