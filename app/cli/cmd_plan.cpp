// gsrq plan: a whole model's codebooks as a Slurm job array. The plan spreads the layers over the
// array's tasks by their size; each task trains its layers one at a time into a file per layer and
// records into a store of its own (SQLite files must not be shared between hosts); a merge job,
// held until every task ends well, checks that every layer is there once with the same settings,
// joins the codebooks and imports the tasks' runs into the user's store.

#include "cli_common.h"
#include "codebook_file.h"
#include "commands.h"
#include "error.h"
#include "kv_dump.h"
#include "recording.h"
#include "run_store.h"
#include "safetensors.h"
#include "train_job.h"
#include "version.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace gsrq::cli {

namespace {

constexpr const char* kPlanFormat = "gsrq-plan";
constexpr int kPlanVersion = 1;

struct PlanTask {
    int task = 0;
    std::vector<int> layers;
    std::int64_t rows = 0;   // rows of the task's tensors together
    std::int64_t values = 0; // rows × features: what the training time follows
};

struct Plan {
    std::string id, dir, dump, store, gsrq, createdAt;
    std::vector<std::string> trainArgs;
    std::map<int, std::vector<std::string>> tensorsByLayer; // every layer's tensors to train
    std::vector<PlanTask> tasks;
    std::string dtype = "f32";
    int gpusPerJob = 1;

    std::string layerFile(int layer) const
    {
        return (fs::path(dir) / "codebooks" / cat("layer-", layer, ".safetensors")).string();
    }
    std::string storeFile(int task) const
    {
        return (fs::path(dir) / "stores" / cat("task-", task, ".sqlite")).string();
    }
    int taskOf(int layer) const
    {
        for (const auto& t : tasks)
            if (std::find(t.layers.begin(), t.layers.end(), layer) != t.layers.end())
                return t.task;
        return -1;
    }
};

std::string shellQuote(const std::string& s)
{
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                          std::string::npos)
        return s;
    std::string q = "'";
    for (char c : s)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string randomHex(int chars)
{
    std::random_device rd;
    std::string out;
    while (int(out.size()) < chars) {
        char buf[9];
        std::snprintf(buf, sizeof buf, "%08x", unsigned(rd()));
        out += buf;
    }
    return out.substr(0, chars);
}

std::string absolute(const std::string& p)
{
    std::error_code ec;
    const auto a = fs::absolute(p, ec);
    return (ec ? fs::path(p) : a).lexically_normal().string();
}

std::string selfExe()
{
    std::error_code ec;
    const auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("gsrq") : p.string();
}

// The options gsrq plan sets itself for every task; a plan that names them is refused.
bool reservedTrainOption(const std::string& a)
{
    for (const char* r : {"--out", "-o", "--layers", "--force", "--json", "--db", "--no-db", "--group"})
        if (a == r || a.rfind(std::string(r) + "=", 0) == 0)
            return true;
    return false;
}

// Parses the training options exactly as gsrq train would, without running anything, so that a
// plan with a typo fails here and not on the cluster an hour later.
void validateTrainArgs(const std::string& dump, const std::vector<std::string>& args)
{
    bool rates = false, direct = false;
    for (const auto& a : args) {
        if (reservedTrainOption(a))
            throwInvalid("gsrq plan: the training option ", a,
                         " is set by the plan itself (each task writes one file per layer and its own store)");
        rates = rates || a == "--bpa" || a.rfind("--bpa=", 0) == 0;
        direct = direct || a == "--dim" || a == "-d" || a.rfind("--dim=", 0) == 0;
    }
    if (!rates && !direct)
        throwInvalid("gsrq plan: give the training's rate after --, e.g. -- --bpa 1, or -- --dim 8 --stages 2 --k 256");
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

std::string dtypeOf(const std::vector<std::string>& args)
{
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--dtype" && i + 1 < args.size())
            return args[i + 1];
        if (args[i].rfind("--dtype=", 0) == 0)
            return args[i].substr(8);
    }
    return "f32";
}

// Longest processing time first: each layer, largest first, goes to the task with the least work.
// Within 4/3 of the best possible makespan (Graham), and exact for equal layers.
std::vector<PlanTask> balance(const std::map<int, std::int64_t>& values, const std::map<int, std::int64_t>& rows,
                              int jobs)
{
    std::vector<std::pair<std::int64_t, int>> order;
    for (const auto& [layer, v] : values)
        order.push_back({v, layer});
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<PlanTask> tasks(std::size_t(std::min<std::size_t>(std::size_t(jobs), order.size())));
    for (std::size_t i = 0; i < tasks.size(); ++i)
        tasks[i].task = int(i);
    for (const auto& [v, layer] : order) {
        auto it = std::min_element(tasks.begin(), tasks.end(), [](const PlanTask& a, const PlanTask& b) {
            return a.values != b.values ? a.values < b.values : a.task < b.task;
        });
        it->layers.push_back(layer);
        it->values += v;
        it->rows += rows.at(layer);
    }
    for (auto& t : tasks)
        std::sort(t.layers.begin(), t.layers.end());
    return tasks;
}

nlohmann::ordered_json toJson(const Plan& p)
{
    nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
    for (const auto& t : p.tasks)
        tasks.push_back({{"task", t.task}, {"layers", t.layers}, {"rows", t.rows}, {"values", t.values}});
    nlohmann::ordered_json layers = nlohmann::ordered_json::object();
    for (const auto& [l, ts] : p.tensorsByLayer)
        layers[std::to_string(l)] = ts;
    return {{"format", kPlanFormat},
            {"format_version", kPlanVersion},
            {"id", p.id},
            {"created_at", p.createdAt},
            {"tool_version", kVersion},
            {"dump", p.dump},
            {"store", p.store},
            {"gsrq", p.gsrq},
            {"gpus_per_job", p.gpusPerJob},
            {"dtype", p.dtype},
            {"train_args", p.trainArgs},
            {"tensors_by_layer", layers},
            {"tasks", tasks}};
}

Plan readPlan(const std::string& dir)
{
    const auto file = (fs::path(dir) / "plan.json").string();
    std::ifstream in(file);
    if (!in)
        throwInvalid("gsrq plan: ", file, ": no plan here (gsrq plan DUMP --out ", dir, " writes one)");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    try {
        if (j.is_discarded() || j.value("format", "") != kPlanFormat)
            throwInvalid("gsrq plan: ", file, ": not a plan written by gsrq plan");
        if (j.at("format_version").get<int>() > kPlanVersion)
            throwInvalid("gsrq plan: ", file, ": plan format version ", j.at("format_version").get<int>(),
                         " is newer than this gsrq reads (", kPlanVersion, ")");
        Plan p;
        p.dir = absolute(dir);
        p.id = j.at("id").get<std::string>();
        p.createdAt = j.at("created_at").get<std::string>();
        p.dump = j.at("dump").get<std::string>();
        p.store = j.at("store").get<std::string>();
        p.gsrq = j.at("gsrq").get<std::string>();
        p.gpusPerJob = j.at("gpus_per_job").get<int>();
        p.dtype = j.at("dtype").get<std::string>();
        p.trainArgs = j.at("train_args").get<std::vector<std::string>>();
        for (const auto& [l, ts] : j.at("tensors_by_layer").items())
            p.tensorsByLayer[std::stoi(l)] = ts.get<std::vector<std::string>>();
        for (const auto& t : j.at("tasks")) {
            PlanTask pt;
            pt.task = t.at("task").get<int>();
            pt.layers = t.at("layers").get<std::vector<int>>();
            pt.rows = t.at("rows").get<std::int64_t>();
            pt.values = t.at("values").get<std::int64_t>();
            p.tasks.push_back(pt);
        }
        return p;
    } catch (const nlohmann::json::exception& e) {
        throwInvalid("gsrq plan: ", file, ": ", e.what());
    } catch (const std::logic_error& e) {
        throwInvalid("gsrq plan: ", file, ": ", e.what());
    }
}

std::string joinInts(const std::vector<int>& v, char sep)
{
    std::string s;
    for (int x : v) {
        if (!s.empty())
            s += sep;
        s += std::to_string(x);
    }
    return s;
}

std::string layerList(const std::vector<int>& layers)
{
    return joinInts(layers, ',');
}

std::string sbatchHeader(const std::string& name, const std::string& partition, const std::string& account,
                         const std::string& time)
{
    std::string s = cat("#SBATCH --job-name=", name, "\n");
    if (!partition.empty())
        s += cat("#SBATCH --partition=", partition, "\n");
    if (!account.empty())
        s += cat("#SBATCH --account=", account, "\n");
    if (!time.empty())
        s += cat("#SBATCH --time=", time, "\n");
    return s;
}

std::string arrayScript(const Plan& p, const std::string& partition, const std::string& account,
                        const std::string& time, int cpusPerTask)
{
    std::string layers;
    for (const auto& t : p.tasks)
        layers += cat("  \"", joinInts(t.layers, ' '), "\"  # task ", t.task, ": ", t.rows, " rows\n");
    std::string args;
    for (const auto& a : p.trainArgs)
        args += " " + shellQuote(a);
    std::string s = cat("#!/bin/bash\n# Written by gsrq ", kVersion, " (gsrq plan) on ", p.createdAt, ": plan ", p.id,
                        ".\n# Trains the codebooks of ", p.dump, "\n# as ", p.tasks.size(),
                        " array tasks; the first task to start submits the merge job (merge.sbatch),\n"
                        "# held until every task has ended well (afterok). A task that is stopped with SIGTERM or\n"
                        "# SIGUSR1 (scancel --signal, preemption, the time-limit warning) requeues itself and, when\n"
                        "# it runs again, skips the layers whose codebooks are already written.\n");
    s += sbatchHeader("gsrq-" + p.id, partition, account, time);
    s += cat("#SBATCH --array=0-", p.tasks.size() - 1, "\n");
    if (p.gpusPerJob > 0)
        s += cat("#SBATCH --gres=gpu:", p.gpusPerJob, "\n");
    if (cpusPerTask > 0)
        s += cat("#SBATCH --cpus-per-task=", cpusPerTask, "\n");
    s += cat("#SBATCH --requeue\n#SBATCH --signal=B:USR1@120\n#SBATCH --open-mode=append\n#SBATCH --output=", p.dir,
             "/logs/task-%a.out\n\n");
    s += cat("set -uo pipefail\nplan=", shellQuote(p.dir), "\ngsrq=${GSRQ:-", shellQuote(p.gsrq),
             "}\ndump=", shellQuote(p.dump), "\nlayers=(\n", layers, ")\n");
    s += R"sh(task=${SLURM_ARRAY_TASK_ID:?"run through sbatch, or set SLURM_ARRAY_TASK_ID"}
if ((task < 0 || task >= ${#layers[@]})); then
  echo "task $task: the plan has tasks 0 to $((${#layers[@]} - 1))" >&2
  exit 2
fi
echo "$(date -u +%FT%TZ) task $task on $(hostname) (restart ${SLURM_RESTART_COUNT:-0}): layers ${layers[$task]}"

if [[ -n ${SLURM_ARRAY_JOB_ID:-} ]] && mkdir "$plan/.merge-$SLURM_ARRAY_JOB_ID" 2> /dev/null; then
  sbatch --parsable --dependency="afterok:$SLURM_ARRAY_JOB_ID" "$plan/merge.sbatch" \
    > "$plan/.merge-$SLURM_ARRAY_JOB_ID/job" || echo "could not submit the merge job; run sbatch $plan/merge.sbatch" >&2
fi

child=
stop() {
  [[ -n $child ]] && kill -TERM "$child" 2> /dev/null && wait "$child"
  if [[ -n ${SLURM_ARRAY_JOB_ID:-} ]]; then
    echo "$(date -u +%FT%TZ) task $task stopped: requeued; its finished layers are kept"
    scontrol requeue "${SLURM_ARRAY_JOB_ID}_$task"
    exit 0
  fi
  exit 143
}
trap stop TERM USR1

for layer in ${layers[$task]}; do
  out=$plan/codebooks/layer-$layer.safetensors
  if [[ -f $out ]]; then
    echo "layer $layer: trained earlier ($out)"
    continue
  fi
)sh";
    s += cat("  \"$gsrq\" --db \"$plan/stores/task-$task.sqlite\" --group ", shellQuote(p.id),
             " train \"$dump\" --layers \"$layer\"", args, " --out \"$out\" --quiet &\n");
    s += R"sh(  child=$!
  wait "$child"
  rc=$?
  child=
  if ((rc != 0)); then
    echo "layer $layer: gsrq train exited with $rc" >&2
    exit "$rc"
  fi
  echo "$(date -u +%FT%TZ) layer $layer: wrote $out"
done
)sh";
    return s;
}

std::string mergeScript(const Plan& p, const std::string& partition, const std::string& account)
{
    std::string s = cat("#!/bin/bash\n# Written by gsrq ", kVersion, " (gsrq plan) on ", p.createdAt, ": plan ", p.id,
                        ".\n# Checks that every layer was trained once with the same settings, joins the codebooks\n"
                        "# into codebooks.safetensors and imports the tasks' runs into ",
                        p.store.empty() ? std::string("no store (--no-db)") : p.store, ".\n");
    s += sbatchHeader("gsrq-" + p.id + "-merge", partition, account, "");
    s += cat("#SBATCH --open-mode=append\n#SBATCH --output=", p.dir, "/logs/merge.out\n\n");
    s += cat("exec ${GSRQ:-", shellQuote(p.gsrq), "} ",
             p.store.empty() ? std::string("--no-db") : "--db " + shellQuote(p.store), " plan merge ",
             shellQuote(p.dir), "\n");
    return s;
}

struct LayerState {
    int layer = 0, task = 0;
    bool present = false;
};

std::vector<LayerState> layerStates(const Plan& p)
{
    std::vector<LayerState> out;
    for (const auto& [l, ts] : p.tensorsByLayer)
        out.push_back({l, p.taskOf(l), fs::exists(p.layerFile(l))});
    return out;
}

// The settings that must agree between the layers' files: everything gsrq train recorded except
// which layer and tensors the file holds (checked against the plan instead).
std::map<std::string, std::string> comparableSettings(const CodebookFile& f)
{
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : f.metadata)
        if (k != "settings" && k != "tensors") // the list of the file's own tensors
            out[k] = v;
    if (auto it = f.metadata.find("settings"); it != f.metadata.end()) {
        auto j = nlohmann::ordered_json::parse(it->second, nullptr, false);
        if (j.is_object()) {
            j.erase("layers");
            for (auto e = j.begin(); e != j.end(); ++e)
                out["settings." + e.key()] = e.value().dump();
        }
    }
    return out;
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
    return {
        cmd, [o, merge, status] {
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
                // Every layer present once.
                std::vector<int> missing;
                std::set<int> tasksMissing;
                for (const auto& s : layerStates(p))
                    if (!s.present) {
                        missing.push_back(s.layer);
                        tasksMissing.insert(s.task);
                    }
                if (!missing.empty()) {
                    std::string tasks;
                    for (int t : tasksMissing)
                        tasks += cat(tasks.empty() ? "" : ", ", t);
                    throwInvalid("plan merge: ", p.dir, ": no codebooks yet for layers ", layerList(missing),
                                 " (tasks ", tasks, "; their logs are in ", p.dir,
                                 "/logs). Requeue those tasks, then run the merge again");
                }
                std::error_code ec;
                for (const auto& e : fs::directory_iterator(fs::path(p.dir) / "codebooks", ec)) {
                    int layer = -1;
                    const auto name = e.path().filename().string();
                    const bool planned = std::sscanf(name.c_str(), "layer-%d", &layer) == 1 &&
                                         p.tensorsByLayer.count(layer) && name == cat("layer-", layer, ".safetensors");
                    // A task killed while writing leaves its temporary (NAME.tmp-XXXXXX); nothing reads it.
                    if (!planned && name.find(".safetensors.tmp-") == std::string::npos)
                        throwInvalid("plan merge: ", e.path().string(), " is not one of the plan's layers");
                }
                // The same settings everywhere, and each layer's own tensors, once.
                std::vector<std::string> files;
                std::map<std::string, std::string> reference;
                std::string referenceFile;
                for (const auto& [layer, tensors] : p.tensorsByLayer) {
                    const auto file = p.layerFile(layer);
                    const auto f = readCodebookFile(file);
                    std::set<std::string> have, want(tensors.begin(), tensors.end());
                    for (const auto& e : f.entries)
                        if (!have.insert(e.tensor).second)
                            throwInvalid("plan merge: ", file, " holds ", e.tensor, " twice");
                    if (have != want) {
                        std::string diff;
                        for (const auto& t : want)
                            if (!have.count(t))
                                diff += " missing " + t + ";";
                        for (const auto& t : have)
                            if (!want.count(t))
                                diff += " unexpected " + t + ";";
                        throwInvalid("plan merge: ", file, " does not hold layer ", layer,
                                     "'s tensors as planned:", diff);
                    }
                    const auto settings = comparableSettings(f);
                    if (referenceFile.empty()) {
                        reference = settings;
                        referenceFile = file;
                    } else {
                        std::set<std::string> keys;
                        for (const auto& [k, v] : settings)
                            keys.insert(k);
                        for (const auto& [k, v] : reference)
                            keys.insert(k);
                        for (const auto& k : keys) {
                            const auto a = reference.count(k) ? reference.at(k) : "(none)";
                            const auto b = settings.count(k) ? settings.at(k) : "(none)";
                            if (k != "source" && a != b)
                                throwInvalid("plan merge: ", file, " was trained with ", k, " = ", b, " but ",
                                             referenceFile, " with ", a);
                        }
                    }
                    files.push_back(file);
                }
                CodebookFile merged = files.size() == 1 ? readCodebookFile(files.front()) : mergeCodebookFiles(files);
                std::vector<int> all;
                for (const auto& [l, ts] : p.tensorsByLayer)
                    all.push_back(l);
                if (auto it = merged.metadata.find("settings"); it != merged.metadata.end()) {
                    auto j = nlohmann::ordered_json::parse(it->second, nullptr, false);
                    if (j.is_object()) {
                        j["layers"] = layerList(all);
                        it->second = j.dump();
                    }
                }
                merged.metadata["plan"] = p.id;
                const auto out = (fs::path(p.dir) / "codebooks.safetensors").string();
                writeCodebookFile(out, merged, p.dtype == "f16" ? DType::F16 : DType::F32);
                std::printf("plan %s: %zu layers, %zu tensors, same settings: wrote %s\n", p.id.c_str(), files.size(),
                            merged.entries.size(), out.c_str());
                // The tasks' runs into the user's store.
                if (auto store = openStore()) {
                    int added = 0, present = 0;
                    for (const auto& t : p.tasks) {
                        const auto src = p.storeFile(t.task);
                        if (!fs::exists(src))
                            continue;
                        const auto rep = store->importRuns(src);
                        added += rep.added;
                        present += rep.alreadyPresent;
                    }
                    std::printf("imported %d runs into %s (%d already there); gsrq runs list --group %s\n", added,
                                store->path().c_str(), present, p.id.c_str());
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
            if (o->gpusPerJob < 0 || o->gpusPerJob > 64)
                throwInvalid("--gpus-per-job ", o->gpusPerJob, ": must be between 0 and 64");
            if (o->cpusPerTask < 0)
                throwInvalid("--cpus-per-task ", o->cpusPerTask, ": must be 0 or more");
            // These go into #SBATCH lines as they are.
            for (const auto& [flag, value] : {std::pair{"--partition", &o->partition},
                                              std::pair{"--account", &o->account}, std::pair{"--time", &o->time}})
                if (value->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:,+-") !=
                    std::string::npos)
                    throwInvalid(flag, " '", *value, "': letters, digits and _ . : , + - only");
            const auto planFile = fs::path(o->out) / "plan.json";
            refuseOverwrite(planFile.string(), o->force, "--out");
            const KvDump dump = KvDump::open(o->dump);
            const std::vector<std::string> patterns = splitList(o->tensors);
            const auto selected = selectTensors(dump, patterns, o->layers == "all" ? "" : o->layers);
            Plan p;
            p.trainArgs = o->trainArgs;
            for (const auto& a : p.trainArgs)
                if (a == "--tensors" || a.rfind("--tensors=", 0) == 0)
                    throwInvalid("gsrq plan: give --tensors to gsrq plan, not after --: the plan spreads those "
                                 "tensors' layers over the tasks");
            if (!o->tensors.empty()) {
                p.trainArgs.push_back("--tensors");
                p.trainArgs.push_back(o->tensors);
            }
            validateTrainArgs(o->dump, p.trainArgs);
            std::map<int, std::int64_t> values, rows;
            for (const auto* t : selected) {
                if (t->layer < 0)
                    throwInvalid("gsrq plan: ", t->view.where(),
                                 " has no layer number (layers.L.key, layers.L.value); plan needs a dump by layer");
                p.tensorsByLayer[t->layer].push_back(t->view.name);
                values[t->layer] += t->view.rows() * t->view.features();
                rows[t->layer] += t->view.rows();
            }
            p.tasks = balance(values, rows, o->jobs);
            p.dir = absolute(o->out);
            p.id = cat(fs::path(p.dir).filename().string(), "-", randomHex(6));
            p.dump = absolute(o->dump);
            p.createdAt = isoNowUtc();
            p.gsrq = selfExe();
            p.gpusPerJob = o->gpusPerJob;
            p.dtype = dtypeOf(o->trainArgs);
            const auto& g = globalOptions();
            p.store = g.noDb ? std::string() : absolute(g.db.empty() ? RunStore::defaultPath() : g.db);
            // Tasks skip layers whose file exists: files of an earlier plan would pass for this one's.
            if (std::error_code ec; !fs::is_empty(fs::path(p.dir) / "codebooks", ec) && !ec)
                throwInvalid("--out ", o->out, ": ", (fs::path(p.dir) / "codebooks").string(),
                             " holds codebooks of an earlier plan; move or delete them first");
            for (const char* sub : {"codebooks", "stores", "logs"}) {
                std::error_code ec;
                fs::create_directories(fs::path(p.dir) / sub, ec);
                if (ec)
                    throwInvalid("--out ", o->out, ": cannot create ", sub, "/: ", ec.message());
            }
            const auto write = [](const fs::path& path, const std::string& text) {
                writeFileAtomic(path.string(), {text});
            };
            write(fs::path(p.dir) / "array.sbatch", arrayScript(p, o->partition, o->account, o->time, o->cpusPerTask));
            write(fs::path(p.dir) / "merge.sbatch", mergeScript(p, o->partition, o->account));
            write(planFile, toJson(p).dump(2) + "\n"); // last: a plan.json means a whole plan
            if (int(p.tasks.size()) < o->jobs)
                std::printf("note: %d layers, so %zu tasks instead of %d\n", int(values.size()), p.tasks.size(),
                            o->jobs);
            std::printf("plan %s: %zu layers of %s in %zu array tasks\n", p.id.c_str(), values.size(), p.dump.c_str(),
                        p.tasks.size());
            std::int64_t most = 0, total = 0;
            for (const auto& t : p.tasks) {
                std::printf("  task %-4d layers %-24s %10lld rows\n", t.task, layerList(t.layers).c_str(),
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
