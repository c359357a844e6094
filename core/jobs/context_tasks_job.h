#pragma once
// The long-context job (`gsrq tasks`): every task × context × sample prompt (context_tasks.h)
// answered over every method's cache (context_eval.h), each prompt and each answer recorded in the
// run store as it finishes, so a stopped run resumes where it stopped; and the table of accuracy
// with Wilson 95% intervals per task × context × method.
//
// Methods, as `gsrq ppl --methods` names them: fp16 (the deployed full-precision cache), fp32 (the
// cache as the model computes it), kivi-B[gG][rN] (no training), and codebooks: a codebooks file
// (.safetensors), or a trained method's name (km-rq@1, gsrq@0.375, cq-2c8b, vqllm@1) bound to its
// file with `-c NAME=FILE`. A file trained on keys after RoPE (key_rope = post) is the lookup path's.
#include "core/cluster/cluster_backend.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/progress.h"
#include "core/lm/context_eval.h"
#include "core/lm/open_model.h"
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace gsrq {

struct ContextTasksSettings {
    std::string model; // the model file (as given)
    std::vector<ContextTask> tasks;
    std::vector<int> contexts; // tokens: prompt and answer budget
    std::vector<int> depths;   // percent; sample i of a cell sits at depths[i % depths.size()]
    int samples = 5;           // per task × context cell
    std::uint64_t seed = 0;
    std::vector<std::string> methods;                           // in order, fp16 and the like or a -c name
    std::vector<std::pair<std::string, std::string>> codebooks; // -c NAME=FILE (NAME = FILE for a bare file)
    PrefillMode mode = PrefillMode::Deployed;
    int chunk = 512;
    // The model's products (prefill and answers): exact FP32 by default; blocks-q8 rounds the
    // activations to 8 bits for an integer GEMM over a GGUF model's blocks (core/lm/quant_gemm.h).
    TransformerModel::StepWeights weights = TransformerModel::StepWeights::Fp32;
    std::string haystack;  // the niah tasks' text file ("" when none runs)
    std::string tokenizer; // a llama2.c model's tokenizer file ("" for GGUF)
    bool beyondTrained = false;
};

// Parses -c entries ("NAME=FILE" or "FILE") and --methods into the settings' methods (the -c names
// not in --methods after them). Throws Error(InvalidInput) naming the flag: an unknown method, a
// trained method with no -c file, a name bound twice, a missing file.
void resolveMethodNames(const std::string& methodsFlag, const std::vector<std::string>& codebookFlags,
                        ContextTasksSettings& s);

// Checks the settings against the model before anything runs: contexts (positive, at least each
// task's minimum, within the trained length unless beyondTrained), depths in 0-100, samples ≥ 1.
// Throws Error(InvalidInput) naming the flag.
void validateContextTasks(const ContextTasksSettings& s, const OpenedModel& model, const TaskGenerator& generator);

// A method ready to run, with what its cache costs.
struct ContextMethod {
    CacheMethod cache;
    std::string family;   // fp16, fp32, kivi, codebooks
    std::string settings; // "2 bits, groups of 32", "D=64 R=8 K=256 gskm grad-log (key_rope pre), layers 0-29"
    std::string file;     // codebooks file, "" for others
    double bits = 16;     // per cached value (KIVI with its FP16 scales and zeros; codebooks nominal)
    std::shared_ptr<const CodebookFile> codebooks; // kept alive for the hook
};
// Builds each method's hook. Throws Error(InvalidInput) naming the file for codebooks not of this
// model (width other than kv_dim, layers it does not have, head_dim not a multiple of D for
// post-RoPE keys).
std::vector<ContextMethod> buildContextMethods(const ContextTasksSettings& s, const ModelConfig& cfg,
                                               ClusterBackend& backend);

// What a run records as its settings, and what a resumed run must match: the settings, the SHA-256
// of the model, the haystack, the tokenizer and each codebooks file (a file retrained under the same
// name is another cache), and the exact prompt format.
nlohmann::ordered_json contextTasksSettingsJson(const ContextTasksSettings& s, const std::string& modelSha256,
                                                const std::string& haystackSha256, const PromptFormat& format);
// The first setting in which a recorded run's settings differ from these ("context: [1024] in run
// 7, [2048] now"), or "" where they agree. A setting added since a run was recorded counts, where
// the run lacks it, as the value runs had before it (weights: fp32).
std::string settingsDifference(const nlohmann::ordered_json& recorded, const nlohmann::ordered_json& now);

// A resumed run's prompts as this generator makes them again: Error(InvalidInput) naming --resume
// and the prompt where the recorded prompt_ids differ (another version of the generator or the
// vocabulary), so that no run mixes two sets of prompts.
void checkRecordedPrompts(const TaskGenerator& generator, const ContextTasksSettings& s,
                          const std::map<std::string, nlohmann::ordered_json>& recorded);

// One answer of a method to one prompt, and the prompt's record.
nlohmann::ordered_json promptRecord(const TaskPrompt& p, const Tokenizer& vocab);
nlohmann::ordered_json answerRecord(const TaskPrompt& p, const TaskAnswer& a, PrefillMode mode);
std::string promptKey(ContextTask task, int context, int depth, int sample);
std::string answerKey(ContextTask task, int context, int depth, int sample, const std::string& method);

// Accuracy of one task × context × method cell (depth -1), or of one depth of it.
struct ContextCell {
    std::string task, method;
    int context = 0, depth = -1;
    int samples = 0;
    Proportion accuracy;
};
// Cells of the answers (records as answerRecord writes them): per task × context × method, and,
// with byDepth, per depth too; in the order of `s` (tasks, contexts, methods, depths).
std::vector<ContextCell> contextCells(const std::vector<nlohmann::ordered_json>& answers, const ContextTasksSettings& s,
                                      bool byDepth = false);

struct ContextTasksResult {
    std::vector<nlohmann::ordered_json> prompts, answers; // the resumed ones first
    int resumedAnswers = 0, newAnswers = 0;
    double prefillSeconds = 0, methodSeconds = 0; // this invocation's
    bool cancelled = false;
};
// The run's summary, the same from both faces: answers (all, and this invocation's), seconds, and
// each task × context × method cell's accuracy with its Wilson interval.
nlohmann::ordered_json contextTasksSummary(const ContextTasksResult& r, const ContextTasksSettings& s);
// Recording: called with each new prompt's and answer's key and record before the job goes on;
// an exception from it stops the job.
using RecordFn = std::function<void(const std::string& key, double score, const nlohmann::ordered_json& record)>;

// Runs every prompt not yet answered by every method (`recorded`: the run's records so far, keyed;
// their answers are kept, not rerun). Progress sees each answer; a false from it stops the job.
ContextTasksResult runContextTasks(const OpenedModel& model, const TaskGenerator& generator,
                                   const ContextTasksSettings& s, const std::vector<ContextMethod>& methods,
                                   const std::map<std::string, nlohmann::ordered_json>& recorded,
                                   const RecordFn& record, const ProgressFn& progress = {});

} // namespace gsrq
