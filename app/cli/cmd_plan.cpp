// gsrq plan: a whole model's codebooks as a Slurm job array. The planning, balancing, scripts and
// merge checks are core/jobs/plan.h; this file parses the flags and prints.

#include "cli_common.h"
#include "commands.h"
#include "recording.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/text.h"
#include "core/jobs/plan.h"
#include "core/jobs/train_job.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

namespace fs = std::filesystem;

namespace gsrq::cli {

namespace {

std::string absolute(const std::string& p)
{
    std::error_code ec;
    const auto a = fs::absolute(p, ec);
    return (ec ? fs::path(p) : a).lexically_normal().string();
}

// Parses the training options exactly as gsrq train would, without running anything, so that a
// plan with a typo fails here and not on the cluster an hour later.
void parseAsTrain(const std::string& dump, const std::vector<std::string>& args)
{
    CLI::App scratch;
    auto train = registerTrain(scratch);
    std::vector<std::string> argv{"train", dump};
    argv.insert(argv.end(), args.begin(), args.end());
    std::reverse(argv.begin(), argv.end()); // CLI11 takes the arguments in reverse order
    try {
        scratch.parse(argv);
    } catch (const CLI::ParseError& e) {
        throwInvalid("gsrq plan: the training options after -- do not parse as gsrq train's: ", e.what());
    }
}

} // namespace

Command registerPlan(CLI::App& root)
{
    struct Opts {
        std::string dump, layers = "all", tensors, out, partition, account, time, mergeDir, statusDir;
        int jobs = 0, gpusPerJob = 1, cpusPerTask = 0;
        std::vector<std::string> trainArgs;
        bool force = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("plan", "Spread a model's codebook training over a Slurm job array");
    cmd->require_subcommand(0, 1);
    cmd->add_option("dump", o->dump, "KV dump: .safetensors file or directory of shards");
    cmd->add_option("--layers", o->layers, "Layers to train: all, or e.g. 0-39")->capture_default_str();
    cmd->add_option("--tensors", o->tensors, "Comma-separated globs (default: keys and values)");
    cmd->add_option("--jobs", o->jobs, "Array tasks (at most one per layer)");
    cmd->add_option("--gpus-per-job", o->gpusPerJob, "GPUs each task asks for (--gres=gpu:N; 0: none)")
        ->capture_default_str();
    cmd->add_option("--cpus-per-task", o->cpusPerTask, "CPUs each task asks for (0: the partition's default)");
    cmd->add_option("--partition", o->partition, "Slurm partition");
    cmd->add_option("--account", o->account, "Slurm account");
    cmd->add_option("--time", o->time, "Time limit per task, e.g. 2:00:00");
    cmd->add_option("--out,-o", o->out, "Directory to write the plan into");
    cmd->add_flag("--force", o->force, "Write over an existing plan in --out");
    cmd->add_option("train", o->trainArgs, "After --: gsrq train's options, e.g. -- --bpa 1 --weights grad-log");
    auto* merge = cmd->add_subcommand("merge", "Check a plan's results, join its codebooks, import its runs");
    merge->add_option("dir", o->mergeDir, "Plan directory")->required();
    auto* status = cmd->add_subcommand("status", "Which layers of a plan are trained, and by which task");
    status->add_option("dir", o->statusDir, "Plan directory")->required();
    status->add_flag("--json", o->json, "Print JSON");
    return {cmd, [o, merge, status] {
                if (status->parsed()) {
                    const Plan p = readPlan(o->statusDir);
                    const auto states = layerStates(p);
                    const auto done = std::count_if(states.begin(), states.end(), [](auto& s) { return s.present; });
                    if (o->json) {
                        nlohmann::ordered_json ls = nlohmann::ordered_json::array();
                        for (const auto& s : states)
                            ls.push_back({{"layer", s.layer}, {"task", s.task}, {"trained", s.present}});
                        printJson({{"plan", p.id},
                                   {"layers", ls},
                                   {"trained", done},
                                   {"merged", fs::exists(fs::path(p.dir) / "codebooks.safetensors")}});
                        return;
                    }
                    std::printf("plan %s: %lld of %zu layers trained\n", p.id.c_str(), static_cast<long long>(done),
                                states.size());
                    for (const auto& t : p.tasks) {
                        std::string have, missing;
                        for (int l : t.layers)
                            (fs::exists(p.layerFile(l)) ? have : missing) += cat(" ", l);
                        std::printf("  task %-4d trained:%s%s\n", t.task, have.empty() ? " -" : have.c_str(),
                                    missing.empty() ? "" : cat("   to do:", missing).c_str());
                    }
                    return;
                }
                if (merge->parsed()) {
                    const Plan p = readPlan(o->mergeDir);
                    const CodebookFile merged = mergePlan(p);
                    std::printf("plan %s: %zu layers, %zu tensors, same settings: wrote %s\n", p.id.c_str(),
                                p.tensorsByLayer.size(), merged.entries.size(), mergedPlanFile(p).c_str());
                    // The tasks' runs into the user's store.
                    if (auto store = openStore()) {
                        const PlanImport imp = importPlanRuns(p, *store);
                        std::printf("imported %d runs into %s (%d already there); gsrq runs list --group %s\n",
                                    imp.added, store->path().c_str(), imp.alreadyPresent, p.id.c_str());
                        for (const auto& r : imp.stillRunning)
                            std::printf("not imported (still running): %s\n", r.c_str());
                    }
                    return;
                }
                // Writing a plan.
                if (o->dump.empty())
                    throwInvalid("gsrq plan: give the dump to plan for (gsrq plan DUMP --jobs N --out DIR -- TRAIN "
                                 "OPTIONS), or a subcommand: merge, status");
                if (o->out.empty())
                    throwInvalid("gsrq plan: --out: give the directory to write the plan into");
                if (o->jobs < 1)
                    throwInvalid("--jobs ", o->jobs, ": give how many array tasks to use (1 or more)");
                const SlurmOptions slurm{o->partition, o->account, o->time, o->cpusPerTask};
                checkSlurmOptions(slurm);
                const auto planFile = fs::path(o->out) / "plan.json";
                refuseOverwrite(planFile.string(), o->force, "--out");
                const KvDump dump = KvDump::open(o->dump);
                const auto selected = selectTensors(dump, splitList(o->tensors), o->layers == "all" ? "" : o->layers);
                PlanRequest req;
                req.trainArgs = o->trainArgs;
                checkTrainArgs(req.trainArgs);
                if (!o->tensors.empty()) {
                    req.trainArgs.push_back("--tensors");
                    req.trainArgs.push_back(o->tensors);
                }
                parseAsTrain(o->dump, req.trainArgs);
                req.dir = absolute(o->out);
                req.id = cat(fs::path(req.dir).filename().string(), "-", randomHex(6));
                req.dump = absolute(o->dump);
                req.createdAt = isoNowUtc();
                req.gsrq = selfExe("gsrq");
                req.jobs = o->jobs;
                req.gpusPerJob = o->gpusPerJob;
                const auto& g = globalOptions();
                req.store = g.noDb ? std::string() : absolute(g.db.empty() ? RunStore::defaultPath() : g.db);
                const Plan p = makePlan(selected, req);
                writePlan(p, slurm);
                if (int(p.tasks.size()) < o->jobs)
                    std::printf("note: %zu layers, so %zu tasks instead of %d\n", p.tensorsByLayer.size(),
                                p.tasks.size(), o->jobs);
                std::printf("plan %s: %zu layers of %s in %zu array tasks\n", p.id.c_str(), p.tensorsByLayer.size(),
                            p.dump.c_str(), p.tasks.size());
                std::int64_t most = 0, total = 0;
                for (const auto& t : p.tasks) {
                    std::printf("  task %-4d layers %-24s %10lld rows\n", t.task, joinInts(t.layers).c_str(),
                                static_cast<long long>(t.rows));
                    most = std::max(most, t.values);
                    total += t.values;
                }
                std::printf("  the largest task has %.3g× the mean work\n",
                            total ? double(most) * double(p.tasks.size()) / double(total) : 1.0);
                std::printf("\nsubmit:   sbatch %s/array.sbatch\nprogress: gsrq plan status %s\n", p.dir.c_str(),
                            p.dir.c_str());
            }};
}

} // namespace gsrq::cli
