#pragma once
// Each command registers its subcommand and returns what to run when it is chosen.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace gsrq::cli {

struct Command {
    CLI::App* app = nullptr;
    std::function<void()> run; // throws gsrq::Error for bad input or failures
};

// One file per command family, named after it (cmd_<family>.cpp).
Command registerInfo(CLI::App& root);                                   // cmd_info.cpp: info
void printGgufInfo(const std::string& path, bool json, bool checksums); // cmd_info_gguf.cpp: info of a GGUF model
Command registerTokenize(CLI::App& root);                               // cmd_info_gguf.cpp: tokenize
Command registerCompare(CLI::App& root);                                // cmd_compare.cpp: compare, sweep
Command registerSweep(CLI::App& root);
Command registerPaperCheck(CLI::App& root); // cmd_paper.cpp: paper-check
Command registerSynth(CLI::App& root);      // cmd_synth.cpp: synth
Command registerTrain(CLI::App& root);      // cmd_train.cpp: train
Command registerEval(CLI::App& root);       // cmd_codebooks.cpp: eval, codebooks
Command registerCodebooks(CLI::App& root);
Command registerPerplexity(CLI::App& root); // cmd_ppl.cpp: ppl
Command registerRuns(CLI::App& root);       // cmd_runs.cpp: runs
Command registerPlan(CLI::App& root);       // cmd_plan.cpp: plan
Command registerDevices(CLI::App& root);    // cmd_gpu.cpp: devices, check-gpu
Command registerCheckGpu(CLI::App& root);
Command registerBenchCluster(CLI::App& root); // cmd_bench.cpp: bench-cluster, bench-train
Command registerBenchTrain(CLI::App& root);
Command registerBenchDecode(CLI::App& root); // cmd_bench_decode.cpp: bench-decode
Command registerGenerate(CLI::App& root);    // cmd_generate.cpp: generate
Command registerTasks(CLI::App& root);       // cmd_tasks.cpp: tasks

} // namespace gsrq::cli
