// gsrq tasks: long-context retrieval over each method's cache (core/jobs/context_tasks_job.h).
#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/base/text.h"
#include "core/base/version.h"
#include "core/jobs/context_tasks_job.h"
#include "core/lm/open_model.h"
#include "progress_bar.h"
#include "recording.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace gsrq::cli {

namespace {

std::string two(double v)
{
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", v);
    return b;
}

std::string readText(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throwInvalid("--haystack ", path, ": cannot be read");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void printTable(const ContextTasksSettings& s, const std::vector<ContextMethod>& methods,
                const std::vector<ContextCell>& cells)
{
    int width = 6;
    for (const auto& m : s.methods)
        width = std::max(width, int(m.size()));
    for (auto t : s.tasks) {
        std::printf("\n%s: accuracy [95%% Wilson interval], %d samples per cell\n", contextTaskName(t), s.samples);
        std::printf("  %-*s %6s", width, "method", "bits");
        for (int c : s.contexts)
            std::printf("  %-19s", cat(c, " tokens").c_str());
        std::printf("\n");
        for (std::size_t mi = 0; mi < methods.size(); ++mi) {
            const auto& name = methods[mi].cache.name;
            std::printf("  %-*s %6.3g", width, name.c_str(), methods[mi].bits);
            for (int c : s.contexts) {
                const auto it = std::find_if(cells.begin(), cells.end(), [&](const ContextCell& x) {
                    return x.task == contextTaskName(t) && x.context == c && x.method == name && x.depth < 0;
                });
                if (it == cells.end())
                    std::printf("  %-19s", "-");
                else
                    std::printf("  %-19s",
                                cat(two(it->accuracy.value), " [", two(it->accuracy.lo), ", ", two(it->accuracy.hi),
                                    "]", it->samples < s.samples ? cat(" n=", it->samples) : "")
                                    .c_str());
            }
            std::printf("\n");
        }
    }
}

} // namespace

Command registerTasks(CLI::App& root)
{
    struct Opts {
        std::string model, tokenizer, tasks = "passkey,niah-single", contexts = "1024", depths = "0,25,50,75,100";
        std::string methods = "fp16,kivi-2,kivi-1", prefill = "deployed", haystack, weights = "fp32";
        std::vector<std::string> codebooks;
        int samples = 5, chunk = 512;
        std::uint64_t seed = 0;
        std::int64_t resume = 0;
        bool beyond = false, json = false, quiet = false;
        BackendOptions backend;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand(
        "tasks", "Long-context retrieval (passkey, RULER's needle in a haystack and variable tracking) answered "
                 "greedily over each method's KV cache");
    cmd->add_option("model", o->model, "GGUF model (llama, qwen2), or a llama2.c checkpoint with --tokenizer")
        ->required();
    cmd->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer (.bin), for a llama2.c model (plain prompts)");
    cmd->add_option("--tasks", o->tasks,
                    "passkey, niah-single, niah-multikey, niah-multivalue, niah-multiquery, vt, or all")
        ->capture_default_str();
    cmd->add_option("--context", o->contexts,
                    "Context lengths in the model's tokens (prompt and answer), e.g. "
                    "1024,4096")
        ->capture_default_str();
    cmd->add_option("--depths", o->depths, "Needle depths, percent of the haystack before it")->capture_default_str();
    cmd->add_option("--samples", o->samples, "Samples per task × context, spread over the depths")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the prompts (keys, values, haystack offsets)")->capture_default_str();
    cmd->add_option("--methods", o->methods,
                    "Caches: fp16, fp32, kivi-B[gG][rN], codebooks files, or trained names bound with -c "
                    "(km-rq@1, gsrq@0.375, cq-2c8b, vqllm@1)")
        ->capture_default_str();
    cmd->add_option("--codebooks,-c", o->codebooks,
                    "Codebooks as NAME=FILE (e.g. gsrq@1=codebooks.safetensors) or FILE; each is a method");
    cmd->add_option("--prefill", o->prefill,
                    "deployed: prefill in full precision, then each method's cache (one prefill per sample); "
                    "quantized: the prefill attends over each method's cache (one per method)")
        ->capture_default_str();
    cmd->add_option("--chunk", o->chunk, "Tokens per chunk of the deployed prefill")->capture_default_str();
    cmd->add_option("--weights", o->weights,
                    "The model's products, prefill and answers: fp32, exact (a GGUF model's blocks dequantized to "
                    "FP32); blocks-q8, activations rounded to 8 bits and integer products over the blocks (a faster "
                    "prefill, docs/benchmarks.md); blocks, FP32 activations over the blocks")
        ->capture_default_str();
    cmd->add_option("--haystack", o->haystack, "UTF-8 text the niah tasks hide their needles in");
    cmd->add_flag("--beyond-trained", o->beyond, "Run contexts past the model's trained length");
    cmd->add_option("--resume", o->resume,
                    "Continue run ID (same settings): its finished answers are kept, the rest are run");
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout: settings, cells, prompts and answers");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress bar");
    return {cmd, [o] {
                ContextTasksSettings s;
                s.model = o->model;
                s.tasks = parseContextTasks(o->tasks);
                s.contexts = parseIntList("--context", o->contexts, 1);
                s.depths = parseIntList("--depths", o->depths);
                s.samples = o->samples;
                s.seed = o->seed;
                s.mode = parsePrefillMode(o->prefill);
                s.chunk = o->chunk;
                const auto weights = parseStepWeights(o->weights);
                if (!weights)
                    throwInvalid("--weights '", o->weights, "': fp32, blocks-q8 or blocks");
                s.weights = *weights;
                s.haystack = o->haystack;
                s.beyondTrained = o->beyond;
                s.tokenizer = o->tokenizer;
                resolveMethodNames(o->methods, o->codebooks, s);
                if (o->resume < 0)
                    throwInvalid("--resume ", o->resume, ": not a run id");

                if (!o->tokenizer.empty() && modelFormatOf(o->model) == ModelFormat::Gguf)
                    throwInvalid("--tokenizer: a GGUF model brings its own vocabulary");
                OpenedModel opened = openModel(o->model, o->tokenizer);
                const auto& vocab = opened.vocabulary();
                const PromptFormat format = promptFormatOf(opened.chatTemplate, true);
                const std::string haystack = s.haystack.empty() ? std::string() : readText(s.haystack);
                const TaskGenerator generator(vocab, format, haystack, s.haystack);
                validateContextTasks(s, opened, generator);
                const int longest = *std::max_element(s.contexts.begin(), s.contexts.end());
                if (s.beyondTrained)
                    opened.model.allowPositions(longest);
                auto backend = openBackend(o->backend, true);
                const auto methods = buildContextMethods(s, opened.model.config(), *backend);

                // The settings a resumed run must match, with the model's and the text's hashes.
                auto store = openStore();
                const std::string modelSha = store ? store->dumpHash({o->model}) : sha256Files({o->model});
                const std::string haystackSha = s.haystack.empty() ? std::string() : sha256Files({s.haystack});
                const auto settings = contextTasksSettingsJson(s, modelSha, haystackSha, format);
                std::map<std::string, nlohmann::ordered_json> recorded;
                if (o->resume > 0) {
                    if (!store)
                        throwInvalid("--resume: not with --no-db (the run's answers are in the run store)");
                    const RunInfo r = store->requireRun(o->resume);
                    if (r.kind != "tasks")
                        throwInvalid("--resume ", o->resume, ": run ", o->resume, " is a ", r.kind, " run, not tasks");
                    const auto was = nlohmann::ordered_json::parse(r.settingsJson, nullptr, false);
                    const std::string diff = settingsDifference(was, settings);
                    if (!diff.empty())
                        throwInvalid("--resume ", o->resume, ": run ", o->resume, " was made with other settings (",
                                     diff, "); give the same flags");
                    for (const auto& row : store->samples(o->resume))
                        recorded[row.key] = nlohmann::ordered_json::parse(row.json);
                    checkRecordedPrompts(generator, s, recorded);
                }
                store.reset();
                CliRun run("tasks", settings.dump(), o->model, {o->model}, backend->name(), backend->device(), {},
                           o->resume);
                run.guard([&] {
                    if (!o->json)
                        std::printf("%s: %d layers, %d KV heads × %d; prompt format %s; %s prefill%s\n",
                                    o->model.c_str(), opened.model.config().layers, opened.model.config().kvHeads,
                                    opened.model.config().headDim(),
                                    nlohmann::ordered_json(format.describe()).dump().c_str(), prefillModeName(s.mode),
                                    recorded.empty() ? "" : cat("; resuming run ", o->resume).c_str());
                    ProgressBar bar(!o->json && !o->quiet);
                    const auto r = runContextTasks(
                        opened, generator, s, methods, recorded,
                        [&](const std::string& key, double score, const nlohmann::ordered_json& rec) {
                            if (run)
                                run->recordSample({key, score, rec.dump()});
                        },
                        [&](const ProgressEvent& e) {
                            bar.update(e.fraction, e.what);
                            return !stopRequested();
                        });
                    bar.finish();
                    const auto cells = contextCells(r.answers, s);
                    const auto summary = contextTasksSummary(r, s);
                    const auto& jc = summary["cells"];
                    if (r.cancelled)
                        run.cancelled(summary.dump());
                    run.done(summary.dump());
                    if (o->json) {
                        nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "tasks"}};
                        if (run)
                            j["run_id"] = run->id();
                        j["settings"] = settings;
                        nlohmann::ordered_json jm = nlohmann::ordered_json::array();
                        for (const auto& m : methods)
                            jm.push_back({{"method", m.cache.name},
                                          {"family", m.family},
                                          {"bits", m.bits},
                                          {"settings", m.settings},
                                          {"file", m.file}});
                        j["methods"] = jm;
                        j["cells"] = jc;
                        j["prefill_seconds"] = r.prefillSeconds;
                        j["method_seconds"] = r.methodSeconds;
                        j["prompts"] = r.prompts;
                        j["answers"] = r.answers;
                        printJson(j);
                        return;
                    }
                    printTable(s, methods, cells);
                    std::printf("\nbits: per cached value at %d tokens (KIVI with its FP16 scales, zeros and window; "
                                "codebooks without their codewords). This run: %d new answers, %.1f s of prefill, "
                                "%.1f s of the methods' caches, questions and answers\n",
                                longest, r.newAnswers, r.prefillSeconds, r.methodSeconds);
                    for (const auto& m : methods)
                        std::printf("  %s: %s\n", m.cache.name.c_str(), m.settings.c_str());
                    if (run)
                        std::printf("recorded as run %lld (gsrq tasks ... --resume %lld continues it)\n",
                                    static_cast<long long>(run->id()), static_cast<long long>(run->id()));
                });
            }};
}

} // namespace gsrq::cli
