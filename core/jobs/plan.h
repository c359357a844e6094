#pragma once
// A model's codebooks as a Slurm job array (gsrq plan). The plan spreads the layers over the array's
// tasks by their size; each task trains its layers one at a time into a file per layer and records
// into a store of its own (SQLite files must not be shared between hosts); a merge job, held until
// every task ends well, checks that every layer is there once with the same settings, joins the
// codebooks and imports the tasks' runs into the user's store. The CLI (app/cli/cmd_plan.cpp) parses
// flags and prints; everything else is here.
//
// A plan directory: plan.json (written last: its presence means a whole plan), array.sbatch,
// merge.sbatch, codebooks/layer-L.safetensors, stores/task-T.sqlite, logs/.
// Errors: Error(InvalidInput) naming the file, flag or layer.

#include "core/cluster/codebook_file.h"
#include "core/io/kv_dump.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gsrq {

inline constexpr const char* kPlanFormat = "gsrq-plan";
inline constexpr int kPlanFormatVersion = 1;

struct PlanTask {
    int task = 0;
    std::vector<int> layers;
    std::int64_t rows = 0;   // rows of the task's tensors together
    std::int64_t values = 0; // rows × features: what the training time follows
};

struct Plan {
    std::string id, dir, dump, store, gsrq, createdAt, toolVersion;
    std::vector<std::string> trainArgs;
    std::map<int, std::vector<std::string>> tensorsByLayer; // every layer's tensors to train
    std::vector<PlanTask> tasks;
    std::string dtype = "f32";
    int gpusPerJob = 1;

    std::string layerFile(int layer) const; // DIR/codebooks/layer-L.safetensors
    std::string storeFile(int task) const;  // DIR/stores/task-T.sqlite
    int taskOf(int layer) const;            // -1 for a layer the plan does not have
};

// The work of one layer: what balancing weighs (values) and what is reported (rows).
struct LayerWork {
    std::int64_t values = 0, rows = 0;
};
// Longest processing time first: each layer, largest first (ties: lower layer), goes to the task with
// the least work (ties: lower task). Within 4/3 of the best makespan (Graham), exact for equal
// layers. min(jobs, layers) tasks, each task's layers ascending.
std::vector<PlanTask> balanceLayers(const std::map<int, LayerWork>& work, int jobs);

// The options the plan sets itself for every task (--out, --layers, --db, ...).
bool reservedTrainOption(const std::string& arg);
// Refuses reserved options, --tensors (given to the plan instead) and options without a rate
// (--bpa, or --dim); naming the option.
void checkTrainArgs(const std::vector<std::string>& args);
// The codebooks' --dtype among the training options (f32 when absent).
std::string dtypeOf(const std::vector<std::string>& args);

struct SlurmOptions {
    std::string partition, account, time;
    int cpusPerTask = 0;
};
// These go into #SBATCH lines as they are: letters, digits and _ . : , + - only.
void checkSlurmOptions(const SlurmOptions& s);

struct PlanRequest {
    std::string dir;                    // the plan directory (absolute)
    std::string dump;                   // the dump (absolute)
    std::string store;                  // the user's store the merge imports into; empty: none
    std::string gsrq;                   // the gsrq the tasks run
    std::string id;                     // unique: the directory's name and a random suffix
    std::string createdAt;              // isoNowUtc()
    std::vector<std::string> trainArgs; // checked (checkTrainArgs); --tensors appended by the caller
    int jobs = 1, gpusPerJob = 1;
};
// Plans the selected tensors (each must have a layer number) over req.jobs tasks.
Plan makePlan(const std::vector<const KvTensor*>& tensors, const PlanRequest& req);

nlohmann::ordered_json planToJson(const Plan& p);
// `dir` is where the plan lives now; `file` names it in errors. Refuses other formats and newer versions.
Plan planFromJson(const nlohmann::json& j, const std::string& dir, const std::string& file);
Plan readPlan(const std::string& dir);

// POSIX shell quoting: the string as is when it needs none, else in single quotes.
std::string shellQuote(const std::string& s);
std::string arrayScript(const Plan& p, const SlurmOptions& s);
std::string mergeScript(const Plan& p, const SlurmOptions& s);
// Creates codebooks/, stores/ and logs/ (refusing codebooks of an earlier plan there), writes both
// scripts, then plan.json, each atomically.
void writePlan(const Plan& p, const SlurmOptions& s);

struct LayerState {
    int layer = 0, task = 0;
    bool present = false; // its codebooks file exists
};
std::vector<LayerState> layerStates(const Plan& p);

// Checks the plan's results (every layer's file there and nothing else in codebooks/ but a killed
// task's temporaries; each file holding exactly its layer's tensors; every file trained with the same
// settings, SettingsMatch::Training), joins them with the full layer list and the plan's id in the
// metadata, and writes DIR/codebooks.safetensors. Returns the joined file.
CodebookFile mergePlan(const Plan& p);
std::string mergedPlanFile(const Plan& p); // DIR/codebooks.safetensors

struct PlanImport {
    int added = 0, alreadyPresent = 0;
    std::vector<std::string> stillRunning; // runs of the tasks not imported because they had not ended
};
// The tasks' runs (their stores that exist) into `store`.
PlanImport importPlanRuns(const Plan& p, RunStore& store);

} // namespace gsrq
