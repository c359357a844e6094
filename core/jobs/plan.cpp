#include "core/jobs/plan.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/base/version.h"
#include "core/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;

namespace gsrq {

std::string Plan::layerFile(int layer) const
{
    return (fs::path(dir) / "codebooks" / cat("layer-", layer, ".safetensors")).string();
}

std::string Plan::storeFile(int task) const
{
    return (fs::path(dir) / "stores" / cat("task-", task, ".sqlite")).string();
}

int Plan::taskOf(int layer) const
{
    for (const auto& t : tasks)
        if (std::find(t.layers.begin(), t.layers.end(), layer) != t.layers.end())
            return t.task;
    return -1;
}

std::vector<PlanTask> balanceLayers(const std::map<int, LayerWork>& work, int jobs)
{
    if (jobs < 1)
        throwInvalid("--jobs ", jobs, ": give how many array tasks to use (1 or more)");
    std::vector<std::pair<std::int64_t, int>> order;
    for (const auto& [layer, w] : work)
        order.push_back({w.values, layer});
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<PlanTask> tasks(std::min<std::size_t>(std::size_t(jobs), order.size()));
    for (std::size_t i = 0; i < tasks.size(); ++i)
        tasks[i].task = int(i);
    for (const auto& [v, layer] : order) {
        auto it = std::min_element(tasks.begin(), tasks.end(), [](const PlanTask& a, const PlanTask& b) {
            return a.values != b.values ? a.values < b.values : a.task < b.task;
        });
        it->layers.push_back(layer);
        it->values += v;
        it->rows += work.at(layer).rows;
    }
    for (auto& t : tasks)
        std::sort(t.layers.begin(), t.layers.end());
    return tasks;
}

bool reservedTrainOption(const std::string& a)
{
    for (const char* r : {"--out", "-o", "--layers", "--force", "--json", "--db", "--no-db", "--group"})
        if (a == r || a.rfind(std::string(r) + "=", 0) == 0)
            return true;
    return false;
}

void checkTrainArgs(const std::vector<std::string>& args)
{
    bool rates = false, direct = false;
    for (const auto& a : args) {
        if (reservedTrainOption(a))
            throwInvalid("gsrq plan: the training option ", a,
                         " is set by the plan itself (each task writes one file per layer and its own store)");
        if (a == "--tensors" || a.rfind("--tensors=", 0) == 0)
            throwInvalid("gsrq plan: give --tensors to gsrq plan, not after --: the plan spreads those "
                         "tensors' layers over the tasks");
        rates = rates || a == "--bpa" || a.rfind("--bpa=", 0) == 0;
        direct = direct || a == "--dim" || a == "-d" || a.rfind("--dim=", 0) == 0;
        // CQ's rate is its coupled channels and bits per block.
        direct = direct || a == "--channels" || a.rfind("--channels=", 0) == 0;
    }
    if (!rates && !direct)
        throwInvalid("gsrq plan: give the training's rate after --, e.g. -- --bpa 1, -- --dim 8 --stages 2 --k 256, "
                     "or -- --method cq --channels 4 --bits 8");
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

void checkSlurmOptions(const SlurmOptions& s)
{
    if (s.cpusPerTask < 0)
        throwInvalid("--cpus-per-task ", s.cpusPerTask, ": must be 0 or more");
    for (const auto& [flag, value] :
         {std::pair{"--partition", &s.partition}, std::pair{"--account", &s.account}, std::pair{"--time", &s.time}})
        if (value->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:,+-") !=
            std::string::npos)
            throwInvalid(flag, " '", *value, "': letters, digits and _ . : , + - only");
}

Plan makePlan(const std::vector<const KvTensor*>& tensors, const PlanRequest& req)
{
    if (req.gpusPerJob < 0 || req.gpusPerJob > 64)
        throwInvalid("--gpus-per-job ", req.gpusPerJob, ": must be between 0 and 64");
    Plan p;
    std::map<int, LayerWork> work;
    for (const auto* t : tensors) {
        if (t->layer < 0)
            throwInvalid("gsrq plan: ", t->view.where(),
                         " has no layer number (layers.L.key, layers.L.value); plan needs a dump by layer");
        p.tensorsByLayer[t->layer].push_back(t->view.name);
        work[t->layer].values += t->view.rows() * t->view.features();
        work[t->layer].rows += t->view.rows();
    }
    p.tasks = balanceLayers(work, req.jobs);
    p.dir = req.dir;
    p.id = req.id;
    p.dump = req.dump;
    p.store = req.store;
    p.gsrq = req.gsrq;
    p.createdAt = req.createdAt;
    p.toolVersion = kVersion;
    p.trainArgs = req.trainArgs;
    p.gpusPerJob = req.gpusPerJob;
    p.dtype = dtypeOf(req.trainArgs);
    return p;
}

nlohmann::ordered_json planToJson(const Plan& p)
{
    nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
    for (const auto& t : p.tasks)
        tasks.push_back({{"task", t.task}, {"layers", t.layers}, {"rows", t.rows}, {"values", t.values}});
    nlohmann::ordered_json layers = nlohmann::ordered_json::object();
    for (const auto& [l, ts] : p.tensorsByLayer)
        layers[std::to_string(l)] = ts;
    return {{"format", kPlanFormat},
            {"format_version", kPlanFormatVersion},
            {"id", p.id},
            {"created_at", p.createdAt},
            {"tool_version", p.toolVersion},
            {"dump", p.dump},
            {"store", p.store},
            {"gsrq", p.gsrq},
            {"gpus_per_job", p.gpusPerJob},
            {"dtype", p.dtype},
            {"train_args", p.trainArgs},
            {"tensors_by_layer", layers},
            {"tasks", tasks}};
}

Plan planFromJson(const nlohmann::json& j, const std::string& dir, const std::string& file)
{
    try {
        if (!j.is_object() || j.value("format", "") != kPlanFormat)
            throwInvalid("gsrq plan: ", file, ": not a plan written by gsrq plan");
        if (j.at("format_version").get<int>() > kPlanFormatVersion)
            throwInvalid("gsrq plan: ", file, ": plan format version ", j.at("format_version").get<int>(),
                         " is newer than this gsrq reads (", kPlanFormatVersion, ")");
        Plan p;
        p.dir = dir;
        p.id = j.at("id").get<std::string>();
        p.createdAt = j.at("created_at").get<std::string>();
        p.toolVersion = j.value("tool_version", std::string());
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

Plan readPlan(const std::string& dir)
{
    const auto file = (fs::path(dir) / "plan.json").string();
    std::ifstream in(file);
    if (!in)
        throwInvalid("gsrq plan: ", file, ": no plan here (gsrq plan DUMP --out ", dir, " writes one)");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    std::error_code ec;
    const auto a = fs::absolute(dir, ec);
    return planFromJson(j.is_discarded() ? nlohmann::json() : j, (ec ? fs::path(dir) : a).lexically_normal().string(),
                        file);
}

namespace {

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

} // namespace

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

std::string arrayScript(const Plan& p, const SlurmOptions& o)
{
    std::string layers;
    for (const auto& t : p.tasks)
        layers += cat("  \"", joinInts(t.layers, ' '), "\"  # task ", t.task, ": ", t.rows, " rows\n");
    std::string args;
    for (const auto& a : p.trainArgs)
        args += " " + shellQuote(a);
    std::string s = cat("#!/bin/bash\n# Written by gsrq ", p.toolVersion, " (gsrq plan) on ", p.createdAt, ": plan ",
                        p.id, ".\n# Trains the codebooks of ", p.dump, "\n# as ", p.tasks.size(),
                        " array tasks; the first task to start submits the merge job (merge.sbatch),\n"
                        "# held until every task has ended well (afterok). A task that is stopped with SIGTERM or\n"
                        "# SIGUSR1 (scancel --signal, preemption, the time-limit warning) requeues itself and, when\n"
                        "# it runs again, skips the layers whose codebooks are already written.\n");
    s += sbatchHeader("gsrq-" + p.id, o.partition, o.account, o.time);
    s += cat("#SBATCH --array=0-", p.tasks.size() - 1, "\n");
    if (p.gpusPerJob > 0)
        s += cat("#SBATCH --gres=gpu:", p.gpusPerJob, "\n");
    if (o.cpusPerTask > 0)
        s += cat("#SBATCH --cpus-per-task=", o.cpusPerTask, "\n");
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

std::string mergeScript(const Plan& p, const SlurmOptions& o)
{
    std::string s =
        cat("#!/bin/bash\n# Written by gsrq ", p.toolVersion, " (gsrq plan) on ", p.createdAt, ": plan ", p.id,
            ".\n# Checks that every layer was trained once with the same settings, joins the codebooks\n"
            "# into codebooks.safetensors and imports the tasks' runs into ",
            p.store.empty() ? std::string("no store (--no-db)") : p.store, ".\n");
    s += sbatchHeader("gsrq-" + p.id + "-merge", o.partition, o.account, "");
    s += cat("#SBATCH --open-mode=append\n#SBATCH --output=", p.dir, "/logs/merge.out\n\n");
    s += cat("exec ${GSRQ:-", shellQuote(p.gsrq), "} ",
             p.store.empty() ? std::string("--no-db") : "--db " + shellQuote(p.store), " plan merge ",
             shellQuote(p.dir), "\n");
    return s;
}

void writePlan(const Plan& p, const SlurmOptions& s)
{
    checkSlurmOptions(s);
    // Tasks skip layers whose file exists: files of an earlier plan would pass for this one's.
    if (std::error_code ec; !fs::is_empty(fs::path(p.dir) / "codebooks", ec) && !ec)
        throwInvalid("--out ", p.dir, ": ", (fs::path(p.dir) / "codebooks").string(),
                     " holds codebooks of an earlier plan; move or delete them first");
    for (const char* sub : {"codebooks", "stores", "logs"}) {
        std::error_code ec;
        fs::create_directories(fs::path(p.dir) / sub, ec);
        if (ec)
            throwInvalid("--out ", p.dir, ": cannot create ", sub, "/: ", ec.message());
    }
    const auto write = [](const fs::path& path, const std::string& text) { writeFileAtomic(path.string(), {text}); };
    write(fs::path(p.dir) / "array.sbatch", arrayScript(p, s));
    write(fs::path(p.dir) / "merge.sbatch", mergeScript(p, s));
    write(fs::path(p.dir) / "plan.json", planToJson(p).dump(2) + "\n"); // last: a plan.json means a whole plan
}

std::vector<LayerState> layerStates(const Plan& p)
{
    std::vector<LayerState> out;
    for (const auto& [l, ts] : p.tensorsByLayer)
        out.push_back({l, p.taskOf(l), fs::exists(p.layerFile(l))});
    return out;
}

std::string mergedPlanFile(const Plan& p)
{
    return (fs::path(p.dir) / "codebooks.safetensors").string();
}

CodebookFile mergePlan(const Plan& p)
{
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
        throwInvalid("plan merge: ", p.dir, ": no codebooks yet for layers ", layerList(missing), " (tasks ", tasks,
                     "; their logs are in ", p.dir, "/logs). Requeue those tasks, then run the merge again");
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(p.dir) / "codebooks", ec)) {
        int layer = -1;
        const auto name = e.path().filename().string();
        const bool planned = std::sscanf(name.c_str(), "layer-%d", &layer) == 1 && p.tensorsByLayer.count(layer) &&
                             name == cat("layer-", layer, ".safetensors");
        // A task killed while writing leaves its temporary (NAME.tmp-XXXXXX); nothing reads it.
        if (!planned && name.find(".safetensors.tmp-") == std::string::npos)
            throwInvalid("plan merge: ", e.path().string(), " is not one of the plan's layers");
    }
    // Each layer's own tensors (a safetensors header cannot hold a name twice), then the same
    // settings everywhere, checked as the files are joined.
    std::vector<NamedCodebookFile> files;
    std::vector<int> all;
    for (const auto& [layer, tensors] : p.tensorsByLayer) {
        const auto file = p.layerFile(layer);
        CodebookFile f = readCodebookFile(file);
        std::set<std::string> have, want(tensors.begin(), tensors.end());
        for (const auto& e : f.entries)
            have.insert(e.tensor);
        if (have != want) {
            std::string diff;
            for (const auto& t : want)
                if (!have.count(t))
                    diff += " missing " + t + ";";
            for (const auto& t : have)
                if (!want.count(t))
                    diff += " unexpected " + t + ";";
            throwInvalid("plan merge: ", file, " does not hold layer ", layer, "'s tensors as planned:", diff);
        }
        files.push_back({file, std::move(f)});
        all.push_back(layer);
    }
    CodebookFile merged = mergeCodebookFiles(std::move(files), SettingsMatch::Training, "plan merge");
    if (auto it = merged.metadata.find("settings"); it != merged.metadata.end()) {
        auto j = nlohmann::ordered_json::parse(it->second, nullptr, false);
        if (j.is_object()) {
            j["layers"] = layerList(all);
            it->second = j.dump();
        }
    }
    merged.metadata["plan"] = p.id;
    writeCodebookFile(mergedPlanFile(p), merged, p.dtype == "f16" ? DType::F16 : DType::F32);
    return merged;
}

PlanImport importPlanRuns(const Plan& p, RunStore& store)
{
    PlanImport out;
    for (const auto& t : p.tasks) {
        const auto src = p.storeFile(t.task);
        if (!fs::exists(src))
            continue;
        const auto rep = store.importRuns(src);
        out.added += rep.added;
        out.alreadyPresent += rep.alreadyPresent;
        for (auto id : rep.stillRunning)
            out.stillRunning.push_back(cat(src, " run ", id));
    }
    return out;
}

} // namespace gsrq
