#include "core/io/kv_dump.h"

#include "core/base/error.h"
#include "core/base/mapped_file.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace gsrq {

const char* kvKindName(KvKind k)
{
    switch (k) {
    case KvKind::Key:
        return "key";
    case KvKind::Value:
        return "value";
    case KvKind::Query:
        return "query";
    case KvKind::KeyGrad:
        return "key_grad";
    case KvKind::ValueGrad:
        return "value_grad";
    case KvKind::Other:
        break;
    }
    return "other";
}

namespace {

std::string lowerExt(const fs::path& p)
{
    std::string e = p.extension().string();
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return e;
}

// Hugging Face's index of a sharded checkpoint, model.safetensors.index.json:
//   {"metadata": {...}, "weight_map": {"tensor name": "shard file name", ...}}
struct ShardIndex {
    std::map<std::string, std::string> weightMap;
    std::set<std::string> shards;
    std::map<std::string, std::string> metadata; // scalars only, as text
};

ShardIndex readShardIndex(const std::string& path)
{
    // Indexes of the largest models are a few MB; beyond this it is not an index.
    constexpr std::size_t kMaxIndexBytes = 64u << 20;
    const auto file = MappedFile::open(path);
    if (file->size() > kMaxIndexBytes)
        throwInvalid(path, ": shard index of ", file->size(), " bytes is implausible (limit ", kMaxIndexBytes, ")");
    nlohmann::json j;
    try {
        const auto* begin = reinterpret_cast<const char*>(file->data());
        j = nlohmann::json::parse(begin, begin + file->size());
    } catch (const nlohmann::json::exception& e) {
        throwInvalid(path, ": shard index is not valid JSON: ", e.what());
    }
    if (!j.is_object())
        throwInvalid(path, ": shard index is not a JSON object");
    const auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
        throwInvalid(path, ": shard index lacks the object 'weight_map'");
    if (wm->empty())
        throwInvalid(path, ": shard index maps no tensors");
    ShardIndex out;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it.value().is_string())
            throwInvalid(path, ": weight_map['", it.key(), "'] is not a file name");
        const auto shard = it.value().get<std::string>();
        // A shard is a file beside the index: no directories, no way out of the dump.
        if (shard.find('/') != std::string::npos || shard.find('\0') != std::string::npos ||
            !shard.ends_with(".safetensors") || shard.size() == std::string(".safetensors").size())
            throwInvalid(path, ": weight_map['", it.key(), "'] = '", shard,
                         "' is not a .safetensors file name in the index's directory");
        out.weightMap[it.key()] = shard;
        out.shards.insert(shard);
    }
    if (const auto md = j.find("metadata"); md != j.end()) {
        if (!md->is_object())
            throwInvalid(path, ": shard index 'metadata' is not a JSON object");
        for (auto it = md->begin(); it != md->end(); ++it)
            if (it.value().is_string())
                out.metadata[it.key()] = it.value().get<std::string>();
            else if (it.value().is_primitive())
                out.metadata[it.key()] = it.value().dump();
    }
    for (const auto& s : out.shards) {
        std::error_code ec;
        const auto p = fs::path(path).parent_path() / s;
        if (!fs::is_regular_file(p, ec))
            throwInvalid(path, ": names the shard ", s, ", which is not in ", fs::path(path).parent_path().string());
    }
    return out;
}

} // namespace

KvName parseKvName(const std::string& name)
{
    static const std::regex kName(R"(layers\.(\d+)\.(key|value|query|key_grad|value_grad))");
    std::smatch m;
    KvName n;
    if (!std::regex_match(name, m, kName))
        return n;
    // A layer number past int's range is no layer: the name is some other tensor's.
    const auto digits = m[1].str();
    if (digits.size() > 9)
        return n;
    n.layer = std::stoi(digits);
    const std::string k = m[2].str();
    n.kind = k == "key"        ? KvKind::Key
             : k == "value"    ? KvKind::Value
             : k == "query"    ? KvKind::Query
             : k == "key_grad" ? KvKind::KeyGrad
                               : KvKind::ValueGrad;
    return n;
}

std::set<int> parseLayerList(const std::string& text)
{
    std::set<int> out;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const auto comma = text.find(',', pos);
        const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        int a = 0, b = 0;
        char dash = 0;
        std::istringstream in(item);
        if (!(in >> a) || a < 0)
            throwInvalid("--layers: '", item, "' is not a layer or range like 0-3");
        b = a;
        if (in >> dash) {
            if (dash != '-' || !(in >> b) || b < a)
                throwInvalid("--layers: '", item, "' is not a layer or range like 0-3");
        }
        for (int l = a; l <= b; ++l)
            out.insert(l);
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    return out;
}

void KvDump::add(TensorView v)
{
    if (find(v.name))
        throwInvalid(m_path, ": tensor '", v.name, "' appears twice (", find(v.name)->view.file->path(), " and ",
                     v.file->path(), ")");
    KvTensor t;
    const KvName n = parseKvName(v.name);
    t.layer = n.layer;
    t.kind = n.kind;
    if (n.layer >= 0) {
        if (v.shape.size() != 2 && v.shape.size() != 3)
            throwInvalid(v.where(), ": shape ", v.shapeString(),
                         " is neither [tokens, features] nor [tokens, heads, head_dim]");
    }
    t.view = std::move(v);
    m_tensors.push_back(std::move(t));
}

KvDump KvDump::open(const std::string& path)
{
    KvDump d;
    d.m_path = path;
    std::error_code ec;
    if (!fs::exists(path, ec))
        throwInvalid(path, ": no such file or directory");

    if (fs::is_directory(path, ec)) {
        std::vector<fs::path> shards, indexes;
        for (const auto& e : fs::directory_iterator(path, ec)) {
            const std::string name = e.path().filename().string();
            if (!e.is_regular_file())
                continue;
            if (name.ends_with(".safetensors.index.json"))
                indexes.push_back(e.path());
            else if (lowerExt(e.path()) == ".safetensors")
                shards.push_back(e.path());
        }
        if (ec)
            throwInvalid(path, ": cannot list directory: ", ec.message());
        if (indexes.size() > 1)
            throwInvalid(path, ": directory holds more than one shard index (", indexes[0].filename().string(), ", ",
                         indexes[1].filename().string(), ")");
        std::optional<ShardIndex> index;
        if (!indexes.empty()) {
            index = readShardIndex(indexes[0].string());
            shards.clear();
            for (const auto& s : index->shards)
                shards.push_back(fs::path(path) / s);
        }
        if (shards.empty())
            throwInvalid(path, ": directory holds no .safetensors shards");
        std::sort(shards.begin(), shards.end());
        d.m_format = "safetensors-dir";
        if (index)
            d.m_metadata = index->metadata;
        for (const auto& s : shards) {
            auto f = readSafetensors(s.string());
            d.m_files.push_back(f.path);
            for (auto& [k, v] : f.metadata) {
                auto it = d.m_metadata.find(k);
                if (it == d.m_metadata.end())
                    d.m_metadata[k] = v;
            }
            for (auto& t : f.tensors) {
                if (index) {
                    const auto it = index->weightMap.find(t.name);
                    const std::string shard = s.filename().string();
                    if (it == index->weightMap.end())
                        throwInvalid(t.where(), ": not listed in the index ", indexes[0].string());
                    if (it->second != shard)
                        throwInvalid(t.where(), ": the index ", indexes[0].string(), " places it in ", it->second);
                }
                d.add(std::move(t));
            }
        }
        if (index)
            for (const auto& [tensor, shard] : index->weightMap)
                if (!d.find(tensor))
                    throwInvalid(indexes[0].string(), ": maps tensor '", tensor, "' to ", shard,
                                 ", which does not hold it");
    } else if (lowerExt(path) == ".npy") {
        d.m_format = "npy";
        d.m_files.push_back(path);
        auto t = readNpy(path);
        if (t.shape.size() != 2)
            throwInvalid(path, ": a plain .npy must be 2-D [rows, features]; its shape is ", t.shapeString());
        d.add(std::move(t));
    } else {
        d.m_format = "safetensors";
        auto f = readSafetensors(path);
        d.m_files.push_back(f.path);
        d.m_metadata = std::move(f.metadata);
        for (auto& t : f.tensors)
            d.add(std::move(t));
    }
    // Keep a stable, human order: by name (layers sort lexically; good enough for listings).
    std::sort(d.m_tensors.begin(), d.m_tensors.end(), [](const KvTensor& a, const KvTensor& b) {
        if (a.layer != b.layer)
            return a.layer < b.layer;
        return a.view.name < b.view.name;
    });
    return d;
}

std::size_t KvDump::totalBytes() const
{
    std::size_t n = 0;
    for (const auto& t : m_tensors)
        n += t.view.nbytes;
    return n;
}

const KvTensor* KvDump::find(const std::string& name) const
{
    for (const auto& t : m_tensors)
        if (t.view.name == name)
            return &t;
    return nullptr;
}

const KvTensor& KvDump::get(const std::string& name) const
{
    if (const auto* t = find(name))
        return *t;
    std::string names;
    int shown = 0;
    for (const auto& t : m_tensors) {
        if (t.kind == KvKind::KeyGrad || t.kind == KvKind::ValueGrad)
            continue;
        if (shown++ == 12) {
            names += ", ...";
            break;
        }
        names += (names.empty() ? "" : ", ") + t.view.name;
    }
    throwInvalid(m_path, ": no tensor named '", name, "' (it has: ", names, ")");
}

const KvTensor& KvDump::only() const
{
    if (m_tensors.size() == 1)
        return m_tensors.front();
    throwInvalid(m_path, ": holds ", m_tensors.size(), " tensors; pick one with --tensor (e.g. --tensor ",
                 m_tensors.empty() ? std::string("layers.0.value") : m_tensors.front().view.name, ")");
}

const KvTensor* KvDump::gradientOf(const KvTensor& t) const
{
    if (t.kind != KvKind::Key && t.kind != KvKind::Value)
        return nullptr;
    return find(cat("layers.", t.layer, ".", t.kind == KvKind::Key ? "key_grad" : "value_grad"));
}

LoadedTensor loadForClustering(const KvTensor& t, bool dropNonFinite)
{
    LoadedTensor out;
    out.name = t.view.name;
    if (t.view.shape.size() < 2)
        throwInvalid(t.view.where(), ": shape ", t.view.shapeString(),
                     " has no feature axis; expected [rows, features]");
    if (t.view.rows() == 0 || t.view.features() == 0)
        throwInvalid(t.view.where(), ": is empty (shape ", t.view.shapeString(), ")");
    out.rows = toMatrix(t.view);
    out.originalRows = out.rows.rows();
    const auto bad = nonFiniteRows(out.rows);
    if (!bad.empty()) {
        if (!dropNonFinite)
            throwInvalid(t.view.where(), ": ", bad.size(), " of ", out.originalRows,
                         " rows hold NaN or Inf (first: row ", bad.front(), "); pass --drop-nonfinite to drop them");
        if (static_cast<std::int64_t>(bad.size()) == out.originalRows)
            throwInvalid(t.view.where(), ": every row holds NaN or Inf; nothing is left to cluster");
        out.rows = dropRows(out.rows, bad);
        out.droppedRows = bad;
    }
    if (out.rows.cwiseAbs().maxCoeff() == 0.0f)
        throwInvalid(t.view.where(), ": every value is zero; there is nothing to cluster");
    return out;
}

} // namespace gsrq
