#include "core/cluster/codebook_file.h"

#include "core/base/error.h"
#include "core/io/safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace gsrq {

const CodebookEntry* CodebookFile::find(const std::string& tensor) const
{
    for (const auto& e : entries)
        if (e.tensor == tensor)
            return &e;
    return nullptr;
}

const std::vector<std::string>& codebookSettingKeys()
{
    static const std::vector<std::string> keys{"format", "format_version", "dim",          "stages",
                                               "k",      "method",         "weights",      "tau",
                                               "beam",   "key_rope",       "source_sha256"};
    return keys;
}

void writeCodebookFile(const std::string& path, const CodebookFile& f, DType dtype)
{
    if (dtype != DType::F16 && dtype != DType::F32)
        throwInvalid("--dtype: codebooks are written as F16 or F32, not ", dtypeName(dtype));
    std::vector<TensorBlob> blobs;
    std::string names;
    for (const auto& e : f.entries) {
        const auto& cb = e.codebooks;
        TensorBlob b;
        b.name = e.tensor + ".codebooks";
        b.dtype = dtype;
        b.shape = {cb.subspaces, cb.stages, cb.k, cb.dim};
        b.bytes = encodeFloats(cb.data.data(), cb.data.size(), dtype);
        blobs.push_back(std::move(b));
        names += (names.empty() ? "" : ",") + e.tensor;
        if (!cb.order.empty()) {
            TensorBlob o;
            o.name = e.tensor + ".order";
            o.dtype = DType::I32;
            o.shape = {std::int64_t(cb.order.size())};
            o.bytes.resize(cb.order.size() * 4);
            std::memcpy(o.bytes.data(), cb.order.data(), o.bytes.size());
            blobs.push_back(std::move(o));
        }
        if (e.codes) {
            const bool small = cb.k <= 256;
            TensorBlob c;
            c.name = e.tensor + ".codes";
            c.dtype = small ? DType::U8 : DType::U16;
            c.shape = {e.codes->rows(), cb.subspaces, cb.stages};
            c.bytes.resize(std::size_t(e.codes->size()) * (small ? 1 : 2));
            for (Eigen::Index i = 0; i < e.codes->size(); ++i) {
                const auto v = e.codes->data()[i];
                if (small)
                    c.bytes[std::size_t(i)] = std::byte(v);
                else {
                    const auto u = std::uint16_t(v);
                    std::memcpy(c.bytes.data() + 2 * i, &u, 2);
                }
            }
            blobs.push_back(std::move(c));
        }
    }
    auto meta = f.metadata;
    meta["format"] = kCodebookFormat;
    bool ordered = false;
    for (const auto& e : f.entries)
        ordered = ordered || !e.codebooks.order.empty();
    meta["format_version"] = ordered ? "2" : "1";
    meta["tensors"] = names;
    meta["codebook_dtype"] = dtypeName(dtype);
    writeSafetensors(path, blobs, meta);
}

namespace {

int metaInt(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path)
{
    const auto it = m.find(key);
    if (it == m.end())
        throwInvalid(path, ": codebooks metadata lacks '", key, "'");
    try {
        return std::stoi(it->second);
    } catch (const std::exception&) {
        throwInvalid(path, ": codebooks metadata '", key, "' = '", it->second, "' is not an integer");
    }
}

} // namespace

CodebookFile readCodebookFile(const std::string& path)
{
    const auto st = readSafetensors(path);
    const auto fmt = st.metadata.find("format");
    if (fmt == st.metadata.end() || fmt->second != kCodebookFormat)
        throwInvalid(path, ": not a GSRQ codebooks file (metadata format is '",
                     fmt == st.metadata.end() ? std::string("missing") : fmt->second, "', expected '", kCodebookFormat,
                     "')");
    const int version = metaInt(st.metadata, "format_version", path);
    if (version < 1 || version > kCodebookFormatVersion)
        throwInvalid(path, ": codebooks format version ", version, " is not supported (this tool reads versions 1 to ",
                     kCodebookFormatVersion, ")");
    CodebookFile f;
    f.metadata = st.metadata;
    const int D = metaInt(st.metadata, "dim", path), R = metaInt(st.metadata, "stages", path),
              K = metaInt(st.metadata, "k", path);
    std::map<std::string, const TensorView*> codes, orders;
    for (const auto& t : st.tensors) {
        for (auto [suffix, into] :
             {std::pair{std::string(".codes"), &codes}, std::pair{std::string(".order"), &orders}})
            if (t.name.size() > suffix.size() && t.name.ends_with(suffix))
                (*into)[t.name.substr(0, t.name.size() - suffix.size())] = &t;
    }
    for (const auto& t : st.tensors) {
        const std::string suffix = ".codebooks";
        if (!t.name.ends_with(suffix))
            continue;
        CodebookEntry e;
        e.tensor = t.name.substr(0, t.name.size() - suffix.size());
        if (t.shape.size() != 4 || t.shape[1] != R || t.shape[2] != K || t.shape[3] != D)
            throwInvalid(t.where(), ": shape ", t.shapeString(), " is not [M, R=", R, ", K=", K, ", D=", D,
                         "] as the metadata says");
        e.codebooks.allocate(D, R, K, int(t.shape[0]));
        const MatrixRF flat = toMatrix(t); // [M, R·K·D]
        if (!e.codebooks.data.empty())     // an empty vector's data() may be null, even for 0 bytes
            std::memcpy(e.codebooks.data.data(), flat.data(), e.codebooks.data.size() * sizeof(float));
        if (auto it = orders.find(e.tensor); it != orders.end()) {
            const TensorView& o = *it->second;
            if (version < 2)
                throwInvalid(o.where(), ": a channel order needs format_version 2; the file says ", version);
            const std::int64_t F = e.codebooks.features();
            if (o.shape.size() != 1 || o.shape[0] != F || o.dtype != DType::I32)
                throwInvalid(o.where(), ": shape ", o.shapeString(), " ", dtypeName(o.dtype), " is not [", F, "] I32");
            const auto v = toInt64(o);
            std::vector<char> seen(std::size_t(F), 0);
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (v[i] < 0 || v[i] >= F || seen[std::size_t(v[i])])
                    throwInvalid(o.where(), ": is not a permutation of 0..", F - 1, " (element ", i, " is ", v[i], ")");
                seen[std::size_t(v[i])] = 1;
                e.codebooks.order.push_back(std::int32_t(v[i]));
            }
        }
        if (auto it = codes.find(e.tensor); it != codes.end()) {
            const TensorView& c = *it->second;
            if (c.shape.size() != 3 || c.shape[1] != t.shape[0] || c.shape[2] != R ||
                (c.dtype != DType::U8 && c.dtype != DType::U16))
                throwInvalid(c.where(), ": shape ", c.shapeString(), " ", dtypeName(c.dtype),
                             " is not [N, M, R] U8/U16");
            const auto v = toInt64(c);
            Codes cd(c.shape[0], t.shape[0] * R);
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (v[i] >= K)
                    throwInvalid(c.where(), ": code ", v[i], " at element ", i, " is not below K=", K);
                cd.data()[i] = std::int32_t(v[i]);
            }
            e.codes = std::move(cd);
        }
        f.entries.push_back(std::move(e));
    }
    if (f.entries.empty())
        throwInvalid(path, ": holds no '*.codebooks' tensor");
    return f;
}

std::map<std::string, std::string> comparableSettings(const CodebookFile& f, SettingsMatch match)
{
    std::map<std::string, std::string> out;
    if (match == SettingsMatch::Codebooks) {
        for (const auto& key : codebookSettingKeys())
            if (auto it = f.metadata.find(key); it != f.metadata.end())
                out[key] = it->second;
        return out;
    }
    for (const auto& [k, v] : f.metadata)
        if (k != "settings" && k != "tensors" && k != "source") // which tensors, and the dump's path as given
            out[k] = v;
    if (auto it = f.metadata.find("settings"); it != f.metadata.end()) {
        auto j = nlohmann::ordered_json::parse(it->second, nullptr, false);
        if (j.is_object()) {
            j.erase("layers");
            for (auto e = j.begin(); e != j.end(); ++e)
                out["settings." + e.key()] = e.value().dump();
        } else {
            out["settings"] = it->second;
        }
    }
    return out;
}

CodebookFile mergeCodebookFiles(std::vector<NamedCodebookFile> files, SettingsMatch match, const std::string& who)
{
    if (files.empty())
        throwInvalid(who, ": no codebook files to join");
    const auto reference = comparableSettings(files.front().file, match);
    CodebookFile out = std::move(files.front().file);
    std::set<std::string> seen;
    for (const auto& e : out.entries)
        seen.insert(e.tensor);
    for (std::size_t i = 1; i < files.size(); ++i) {
        auto& [path, f] = files[i];
        const auto settings = comparableSettings(f, match);
        std::set<std::string> keys;
        for (const auto& [k, v] : settings)
            keys.insert(k);
        for (const auto& [k, v] : reference)
            keys.insert(k);
        for (const auto& k : keys) {
            const auto a = reference.count(k) ? reference.at(k) : std::string("(none)");
            const auto b = settings.count(k) ? settings.at(k) : std::string("(none)");
            if (a != b)
                throwInvalid(who, ": ", path, " was trained with ", k, " = ", b, " but ", files.front().path, " with ",
                             a);
        }
        for (auto& e : f.entries) {
            if (!seen.insert(e.tensor).second)
                throwInvalid(who, ": tensor '", e.tensor, "' is in more than one file (again in ", path, ")");
            out.entries.push_back(std::move(e));
        }
    }
    return out;
}

CodebookFile mergeCodebookFiles(const std::vector<std::string>& paths)
{
    if (paths.size() < 2)
        throwInvalid("codebooks merge: give at least two files");
    std::vector<NamedCodebookFile> files;
    for (const auto& p : paths)
        files.push_back({p, readCodebookFile(p)});
    return mergeCodebookFiles(std::move(files), SettingsMatch::Codebooks, "codebooks merge");
}

} // namespace gsrq
