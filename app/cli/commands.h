#pragma once
// Each command registers its subcommand and returns what to run when it is chosen.

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace gsrq::cli {

struct Command {
    CLI::App* app = nullptr;
    std::function<void()> run; // throws gsrq::Error for bad input or failures
};

Command registerInfo(CLI::App& root);
Command registerCompare(CLI::App& root);
Command registerSweep(CLI::App& root);
Command registerPaperCheck(CLI::App& root);
Command registerSynth(CLI::App& root);
Command registerBenchCluster(CLI::App& root);
Command registerDevices(CLI::App& root);
Command registerTrain(CLI::App& root);
Command registerEval(CLI::App& root);
Command registerCodebooks(CLI::App& root);
Command registerRuns(CLI::App& root);
Command registerCheckGpu(CLI::App& root);
Command registerBenchTrain(CLI::App& root);
Command registerBenchDecode(CLI::App& root);
Command registerPerplexity(CLI::App& root);
Command registerPlan(CLI::App& root);

} // namespace gsrq::cli
