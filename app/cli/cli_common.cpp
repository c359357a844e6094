#include "cli_common.h"

#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/weights.h"
#include "core/jobs/result_json.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace gsrq::cli {

void addRunOptions(CLI::App* cmd, RunOptions& o)
{
    cmd->add_option("dump", o.dump, "KV dump: .safetensors file, directory of shards, or 2-D .npy")->required();
    cmd->add_option("--tensor,-t", o.tensor, "Tensor to cluster, e.g. layers.2.value (optional if the dump has one)");
    cmd->add_option("--dim,-d", o.settings.dim, "Subspace width D; must divide the features (default: all features)");
    cmd->add_option("--k,-k", o.settings.k, "Codewords per subspace")->capture_default_str();
    cmd->add_option("--iters", o.settings.iterations, "Maximum iterations")->capture_default_str();
    cmd->add_option("--seed", o.settings.seed, "Seed for the initial rows")->capture_default_str();
    cmd->add_option("--methods", o.methods, "Methods to run: km, gskm or both")->capture_default_str();
    cmd->add_flag("--residual", o.settings.residual,
                  "Cluster the residual left by a KM pass (the paper's 1st residual)");
    cmd->add_flag("--reseed-empty", o.settings.reseedEmpty, "Re-seed empty clusters by splitting the largest");
    cmd->add_option("--weights", o.weights,
                    "Row weights: none, grad-raw, grad-log (needs layers.L.key_grad/value_grad)")
        ->capture_default_str();
    cmd->add_option("--tau", o.tau, "τ of grad-log weights: λ = τ / median‖g‖")->capture_default_str();
    cmd->add_flag("--drop-nonfinite", o.dropNonFinite, "Drop rows holding NaN/Inf instead of refusing the tensor");
    addBackendOptions(cmd, o.backend);
    cmd->add_flag("--json", o.json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o.quiet, "No progress bar");
}

void addBackendOptions(CLI::App* cmd, BackendOptions& o)
{
    cmd->add_option("--backend", o.backend, "auto (the GPU when there is one), cpu or cuda")->capture_default_str();
    cmd->add_option("--device", o.device, "CUDA device index")->capture_default_str();
    cmd->add_flag("--tf32", o.tf32, "CUDA: TF32 tensor cores for the distance product (faster, less exact)");
    cmd->add_flag("--no-fused-argmax", o.noFusedArgmax,
                  "CUDA with --tf32: cuBLAS's GEMM and a separate argmax instead of the fused tensor-core kernel");
    cmd->add_option("--threads", o.threads, "CPU threads (default: all cores)");
    cmd->add_option("--exact-bounds", o.exactBounds,
                    "CPU: on (skip the distance work that cannot change a label; same labels and centroids) or off "
                    "(score every codeword every pass)")
        ->capture_default_str();
}

std::unique_ptr<ClusterBackend> openBackend(const BackendOptions& o, bool quiet)
{
    if (o.threads < 0)
        throwInvalid("--threads ", o.threads, ": must be ≥ 0 (0 = all cores)");
    if (o.device < 0)
        throwInvalid("--device ", o.device, ": must be ≥ 0");
    if (o.exactBounds != "on" && o.exactBounds != "off")
        throwInvalid("--exact-bounds ", o.exactBounds, ": expected on or off");
    auto choice = gpu::makeBackend(
        {gpu::parseBackendKind(o.backend), o.device, o.threads, o.tf32, o.exactBounds == "on", !o.noFusedArgmax});
    if (!quiet && !choice.note.empty())
        std::fprintf(stderr, "%s\n", choice.note.c_str());
    return std::move(choice.backend);
}

WeightMode parseMethodOptions(RunOptions& o)
{
    o.settings.methods.clear();
    std::stringstream ss(o.methods);
    for (std::string m; std::getline(ss, m, ',');) {
        o.settings.methods.push_back(parseMethod("--methods", m));
    }
    if (o.settings.methods.empty())
        throwInvalid("--methods: name at least one of km, gskm");
    const auto mode = weightModeFromName(o.weights);
    if (!mode)
        throwInvalid("--weights: unknown mode '", o.weights, "' (none, grad-raw, grad-log, grad-sq)");
    gpu::parseBackendKind(o.backend.backend); // a bad --backend is refused before the dump is read
    return *mode;
}

PreparedInput prepareInput(RunOptions& o)
{
    const WeightMode mode = parseMethodOptions(o);
    PreparedInput in{KvDump::open(o.dump), {}, mode, {}, {}};
    const KvTensor& t = o.tensor.empty() ? in.dump.only() : in.dump.get(o.tensor);
    in.data = loadForClustering(t, o.dropNonFinite);
    validateCompare(o.settings, in.data.rows.rows(), in.data.rows.cols());

    in.weights = weightsFor(in.dump, t, in.data, mode, o.tau, &in.weightSummary);
    return in;
}

nlohmann::ordered_json inputJson(const PreparedInput& in)
{
    nlohmann::ordered_json j = {{"file", in.dump.path()},
                                {"tensor", in.data.name},
                                {"rows", in.data.rows.rows()},
                                {"features", in.data.rows.cols()},
                                {"dropped_nonfinite_rows", in.data.droppedRows.size()}};
    if (auto it = in.dump.metadata().find("synthetic"); it != in.dump.metadata().end())
        j["synthetic"] = it->second;
    j["weights"] = weightModeName(in.weightMode);
    if (in.weightMode != WeightMode::None)
        j["weight_summary"] = toJson(in.weightSummary);
    return j;
}

void printJson(const nlohmann::ordered_json& j)
{
    std::cout << j.dump(2) << std::endl;
}

void printMethodTable(const CompareResult& r, const std::string& indent)
{
    std::printf("%s%-6s %12s %10s %11s %9s %10s %6s %9s\n", indent.c_str(), "method", "mse", "nmse", "gain_error",
                "cosine", "shrinkage", "iters", "seconds");
    for (const auto& m : r.methods)
        std::printf("%s%-6s %12.6g %10.6f %11.6g %9.6f %10.6f %6d %9.3f\n", indent.c_str(), methodName(m.method),
                    m.metrics.mse, m.metrics.nmse, m.metrics.gainError, m.metrics.cosine, m.metrics.shrinkage,
                    m.iterations, m.seconds);
}

void refuseOverwrite(const std::string& path, bool force, const char* flag)
{
    if (!path.empty() && std::filesystem::exists(path) && !force)
        throwInvalid(flag, " ", path, ": file exists; pass --force to overwrite it");
}

std::string humanBytes(double b)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

std::string csvNumber(double v)
{
    if (std::isnan(v))
        return {};
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.12g", v);
    return buf;
}

std::vector<std::string> splitList(const std::string& s)
{
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

Method parseMethod(const std::string& flag, const std::string& name)
{
    const auto m = methodFromName(name);
    if (!m)
        throwInvalid(flag, " ", name, ": expected km or gskm");
    return *m;
}

DType codebookDType(const std::string& s)
{
    if (s == "f32")
        return DType::F32;
    if (s == "f16")
        return DType::F16;
    throwInvalid("--dtype: '", s, "' is not f16 or f32");
}

} // namespace gsrq::cli
