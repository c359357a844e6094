#pragma once
// Pieces the CLI's commands share: the options of compare and sweep, loading the input tensor and
// its weights, and printing.

#include "core/base/text.h"
#include "core/cluster/weights.h"
#include "core/io/kv_dump.h"
#include "core/jobs/compare_job.h"
#include "gpu/cluster/backend.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gsrq::cli {

// --backend, --device, --tf32, --threads and --exact-bounds: where and how the clustering runs.
struct BackendOptions {
    std::string backend = "auto";
    int device = 0;
    bool tf32 = false;
    std::string exactBounds = "on";
    int threads = 0;
    bool noFusedArgmax = false;
};
void addBackendOptions(CLI::App* cmd, BackendOptions& o);
// Makes the backend the flags ask for; auto's choice is printed on stderr unless quiet.
std::unique_ptr<ClusterBackend> openBackend(const BackendOptions& o, bool quiet);

struct RunOptions {
    std::string dump;
    std::string tensor;
    std::string methods = "km,gskm";
    std::string weights = "none";
    double tau = 1.0;
    bool dropNonFinite = false;
    BackendOptions backend;
    bool json = false;
    bool quiet = false;
    CompareSettings settings;
};

// Adds the dump, tensor, D/K/iteration, method, weight and output flags to a subcommand.
void addRunOptions(CLI::App* cmd, RunOptions& o);

struct PreparedInput {
    KvDump dump;
    LoadedTensor data;
    WeightMode weightMode = WeightMode::None;
    Eigen::VectorXf weights; // empty when unweighted
    WeightSummary weightSummary;
    const float* weightPtr() const { return weights.size() ? weights.data() : nullptr; }
};

// Parses --methods into o.settings and checks --weights and --backend; returns the weight mode.
WeightMode parseMethodOptions(RunOptions& o);
// Opens the dump, picks and validates the tensor, builds the weights; parses --methods into o.settings.
PreparedInput prepareInput(RunOptions& o);

nlohmann::ordered_json inputJson(const PreparedInput& in);
void printJson(const nlohmann::ordered_json& j);

// Prints one aligned row per method: mse, nmse, gain error, cosine, shrinkage, iterations, seconds.
void printMethodTable(const CompareResult& r, const std::string& indent = "");

// A clustering method flag (--method, --methods): km or gskm, else Error(InvalidInput) naming the flag.
Method parseMethod(const std::string& flag, const std::string& name);
// --dtype of a codebooks file: f16 or f32 (Error(InvalidInput) naming --dtype otherwise).
DType codebookDType(const std::string& s);
// Refuses to write over an existing file unless --force was given (exit 2, naming the flag).
void refuseOverwrite(const std::string& path, bool force, const char* flag);

// "a,b,,c" → {a, b, c}: comma-separated globs such as --tensors.
std::vector<std::string> splitList(const std::string& s);
// A number for CSV: 12 significant digits (the default stream precision keeps 6); empty for a
// value not computed (NaN).
std::string csvNumber(double v);
std::string humanBytes(double bytes);

} // namespace gsrq::cli
