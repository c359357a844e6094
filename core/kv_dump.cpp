#include "kv_dump.h"

#include "error.h"
#include "npy.h"
#include "safetensors.h"

#include <algorithm>
#include <filesystem>
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

} // namespace

KvName parseKvName(const std::string& name)
{
    static const std::regex kName(R"(layers\.(\d+)\.(key|value|query|key_grad|value_grad))");
    std::smatch m;
    KvName n;
    if (!std::regex_match(name, m, kName))
        return n;
    n.layer = std::stoi(m[1].str());
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
        std::vector<fs::path> shards;
        for (const auto& e : fs::directory_iterator(path, ec))
            if (e.is_regular_file() && lowerExt(e.path()) == ".safetensors")
                shards.push_back(e.path());
        if (ec)
            throwInvalid(path, ": cannot list directory: ", ec.message());
        if (shards.empty())
            throwInvalid(path, ": directory holds no .safetensors shards");
        std::sort(shards.begin(), shards.end());
        d.m_format = "safetensors-dir";
        for (const auto& s : shards) {
            auto f = readSafetensors(s.string());
            d.m_files.push_back(f.path);
            for (auto& [k, v] : f.metadata) {
                auto it = d.m_metadata.find(k);
                if (it == d.m_metadata.end())
                    d.m_metadata[k] = v;
            }
            for (auto& t : f.tensors)
                d.add(std::move(t));
        }
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

Eigen::VectorXf weightsFor(const KvDump& dump, const KvTensor& t, const LoadedTensor& loaded, WeightMode mode,
                           double tau, WeightSummary* summary)
{
    if (mode == WeightMode::None)
        return {};
    const KvTensor* g = dump.gradientOf(t);
    if (!g)
        throwInvalid("--weights ", weightModeName(mode), ": ", dump.path(), " has no gradient for '", t.view.name,
                     "' (expected layers.L.key_grad or layers.L.value_grad)");
    if (g->view.rows() != t.view.rows())
        throwInvalid(g->view.where(), ": has ", g->view.rows(), " rows but '", t.view.name, "' has ", t.view.rows());
    MatrixRF grad = toMatrix(g->view);
    if (!loaded.droppedRows.empty())
        grad = dropRows(grad, loaded.droppedRows);
    const auto bad = nonFiniteRows(grad);
    if (!bad.empty())
        throwInvalid(g->view.where(), ": ", bad.size(), " rows hold NaN or Inf (first: row ", bad.front(), ")");
    return gradientWeights(grad, mode, tau, summary);
}

} // namespace gsrq
