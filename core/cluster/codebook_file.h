#pragma once
// The codebooks file (docs/formats.md): a safetensors file holding, per trained tensor T,
//   T.codebooks  [M, R, K, D]  F16 or F32
//   T.codes      [N, M, R]     U8 for K ≤ 256, else U16   (optional)
//   T.order      [M·D]         I32: the feature order of the subspaces (optional; strided groups)
// and metadata: format "gsrq-codebooks", format_version "1" ("2" with an order), dim, stages, k, method, weights,
// tau, beam, bpa, key_rope, source_sha256, source, tensors, settings (JSON).
// Every tensor of one file shares D, R, K and the training settings.

#include "core/cluster/quantizer.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

inline constexpr const char* kCodebookFormat = "gsrq-codebooks";
// Version 2 adds T.order (strided channel groups); files without one are written as version 1, so
// that readers of version 1 still read them, and readers of version 1 refuse a file with an order
// rather than decoding its features in the wrong places.
inline constexpr int kCodebookFormatVersion = 2;

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
// Keys whose values must agree for files to be merged (or a dump evaluated consistently).
const std::vector<std::string>& codebookSettingKeys();

// What must agree between files that are joined into one:
//   Codebooks  the codewords' shape and training (codebookSettingKeys()): gsrq codebooks merge, which
//              joins files trained by hand, perhaps with other seeds or iterations;
//   Training   everything gsrq train recorded (the metadata, and each field of its settings JSON as
//              "settings.<field>") except which tensors and layers a file holds and its source path:
//              gsrq plan merge, whose files are one training split by layer.
enum class SettingsMatch { Codebooks, Training };
std::map<std::string, std::string> comparableSettings(const CodebookFile& f, SettingsMatch match);

struct NamedCodebookFile {
    std::string path;
    CodebookFile file;
};
// Joins files (one or more) whose settings agree under `match`; refuses a mismatch ("<who>: B was
// trained with KEY = b but A with a") or a tensor present in two files, with Error(InvalidInput).
CodebookFile mergeCodebookFiles(std::vector<NamedCodebookFile> files, SettingsMatch match, const std::string& who);
// gsrq codebooks merge: reads two or more files and joins them under SettingsMatch::Codebooks.
CodebookFile mergeCodebookFiles(const std::vector<std::string>& paths);

} // namespace gsrq
