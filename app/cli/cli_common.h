#pragma once
// Pieces the CLI's commands share: the options of compare and sweep, loading the input tensor and
// its weights, and printing.

#include "compare_job.h"
#include "kv_dump.h"
#include "weights.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gsrq::cli {

struct RunOptions {
    std::string dump;
    std::string tensor;
    std::string methods = "km,gskm";
    std::string weights = "none";
    double tau = 1.0;
    bool dropNonFinite = false;
    int threads = 0;
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

// Opens the dump, picks and validates the tensor, builds the weights; parses --methods into o.settings.
PreparedInput prepareInput(RunOptions& o);

nlohmann::ordered_json inputJson(const PreparedInput& in);
void printJson(const nlohmann::ordered_json& j);

// Prints one aligned row per method: mse, nmse, gain error, cosine, shrinkage, iterations, seconds.
void printMethodTable(const CompareResult& r, const std::string& indent = "");

// Refuses to write over an existing file unless --force was given (exit 2, naming the flag).
void refuseOverwrite(const std::string& path, bool force, const char* flag);

std::vector<int> parseIntList(const std::string& flag, const std::string& text);
std::string humanBytes(double bytes);

} // namespace gsrq::cli
