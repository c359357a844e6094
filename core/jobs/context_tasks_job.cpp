// The long-context job (context_tasks_job.h).
#include "core/jobs/context_tasks_job.h"

#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/base/text.h"
#include "core/jobs/method_table.h"
#include "core/lm/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

namespace gsrq {

namespace {

double since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The last `chars` bytes of the text of `ids`, cut at a character boundary.
std::string tailText(const std::vector<std::int32_t>& ids, const Tokenizer& vocab, std::size_t chars)
{
    std::string s;
    for (std::size_t i = ids.size(); i-- > 0 && s.size() < chars;)
        s = vocab.piece(ids[i]) + s;
    if (s.size() <= chars)
        return validUtf8(s);
    std::size_t cut = s.size() - chars;
    while (cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
        ++cut;
    return "…" + validUtf8(s.substr(cut));
}

std::string layerRange(const std::vector<int>& layers)
{
    if (layers.empty())
        return "none";
    bool contiguous = true;
    for (std::size_t i = 1; i < layers.size(); ++i)
        contiguous = contiguous && layers[i] == layers[i - 1] + 1;
    return contiguous ? cat(layers.front(), "-", layers.back()) : joinInts(layers);
}

} // namespace

void resolveMethodNames(const std::string& methodsFlag, const std::vector<std::string>& codebookFlags,
                        ContextTasksSettings& s)
{
    s.codebooks.clear();
    s.methods.clear();
    for (const auto& c : codebookFlags) {
        const auto eq = c.find('=');
        std::string name = eq == std::string::npos ? c : c.substr(0, eq);
        const std::string file = eq == std::string::npos ? c : c.substr(eq + 1);
        if (name.empty() || file.empty())
            throwInvalid("-c '", c, "': give NAME=FILE (e.g. gsrq@1=codebooks.safetensors) or a codebooks FILE");
        if (!std::filesystem::is_regular_file(file))
            throwInvalid("-c ", name, ": codebooks file '", file, "' does not exist");
        for (const auto& [n, f] : s.codebooks)
            if (n == name)
                throwInvalid("-c: '", name, "' is bound twice (", f, " and ", file, ")");
        if (name == "fp16" || name == "fp32" || name.rfind("kivi-", 0) == 0)
            throwInvalid("-c ", c, ": '", name, "' names a method that needs no codebooks");
        s.codebooks.emplace_back(name, file);
    }
    const auto bound = [&](const std::string& name) {
        return std::any_of(s.codebooks.begin(), s.codebooks.end(), [&](const auto& b) { return b.first == name; });
    };
    for (const auto& name : splitTrimmed(methodsFlag)) {
        if (name.empty())
            continue;
        if (std::find(s.methods.begin(), s.methods.end(), name) != s.methods.end())
            throwInvalid("--methods: '", name, "' is listed twice");
        if (name == "fp16" || name == "fp32" || bound(name)) {
            s.methods.push_back(name);
            continue;
        }
        const auto spec = parseMethods(name, "--methods").front(); // unknown names fail here
        if (spec.kind == TableMethod::File) {
            s.codebooks.emplace_back(name, name);
        } else if (spec.kind != TableMethod::Kivi) {
            throwInvalid("--methods ", name, ": give its codebooks with -c ", name,
                         "=FILE (gsrq train makes them; tools/real_table.py keeps them in its --out)");
        }
        s.methods.push_back(name);
    }
    for (const auto& [name, file] : s.codebooks)
        if (std::find(s.methods.begin(), s.methods.end(), name) == s.methods.end())
            s.methods.push_back(name);
    if (s.methods.empty())
        throwInvalid("--methods: names no method");
}

void validateContextTasks(const ContextTasksSettings& s, const OpenedModel& model, const TaskGenerator& generator)
{
    const auto& cfg = model.model.config();
    if (s.tasks.empty())
        throwInvalid("--tasks: names no task");
    if (s.samples < 1)
        throwInvalid("--samples ", s.samples, ": at least 1 per task and context");
    if (s.depths.empty())
        throwInvalid("--depths: names no depth");
    for (int d : s.depths)
        if (d < 0 || d > 100)
            throwInvalid("--depths: ", d, " is outside 0-100 (percent of the haystack before the needle)");
    if (std::any_of(s.tasks.begin(), s.tasks.end(), needsHaystack) && s.haystack.empty())
        throwInvalid("--haystack: the niah tasks hide their needles in a text: give a UTF-8 text file (e.g. the "
                     "evaluation text tools/texts.py prints)");
    if (s.contexts.empty())
        throwInvalid("--context: names no length");
    for (const auto* list : {&s.contexts, &s.depths})
        for (std::size_t i = 0; i < list->size(); ++i)
            if (std::count(list->begin(), list->end(), (*list)[i]) > 1)
                throwInvalid(list == &s.contexts ? "--context: " : "--depths: ", (*list)[i], " is listed twice");
    if (std::any_of(s.tasks.begin(), s.tasks.end(), needsHaystack) && !generator.hasHaystack())
        throwInvalid("--haystack ", s.haystack, ": has no sentences to hide the needles in");
    if (s.chunk < 1)
        throwInvalid("--chunk ", s.chunk, ": at least 1 token");
    for (int c : s.contexts) {
        if (c < 1)
            throwInvalid("--context ", c, ": must be a positive number of tokens");
        if (c > cfg.maxSeq && !s.beyondTrained)
            throwInvalid("--context ", c, ": ", model.path, " was trained for ", cfg.maxSeq,
                         " positions (give --beyond-trained to run past them anyway)");
        for (auto t : s.tasks)
            if (c < generator.minimumContext(t))
                throwInvalid("--context ", c, ": ", contextTaskName(t), " needs at least ", generator.minimumContext(t),
                             " tokens of this model (its instruction, needles, question and answer, and 64 of "
                             "haystack)");
    }
}

std::vector<ContextMethod> buildContextMethods(const ContextTasksSettings& s, const ModelConfig& cfg,
                                               ClusterBackend& backend)
{
    std::vector<ContextMethod> out;
    const int longest = *std::max_element(s.contexts.begin(), s.contexts.end());
    for (const auto& name : s.methods) {
        ContextMethod m;
        m.cache.name = name;
        const auto bound =
            std::find_if(s.codebooks.begin(), s.codebooks.end(), [&](const auto& b) { return b.first == name; });
        if (name == "fp16") {
            m.family = "fp16";
            m.cache.hook = fp16Hook();
            m.bits = 16;
            m.settings = "keys (before RoPE) and values in half precision";
        } else if (name == "fp32") {
            m.family = "fp32";
            m.bits = 32;
            m.settings = "the cache as the model computes it";
        } else if (bound == s.codebooks.end()) {
            const auto spec = parseMethods(name, "--methods").front();
            m.family = "kivi";
            m.cache.hook = kiviHook(spec.kivi, cfg, {}, {}, "--methods");
            // Per cached value over the longest context: B bits, an FP16 scale and zero per group,
            // and the window's tokens in FP16.
            const double window = std::min(1.0, double(spec.kivi.residual) / double(longest));
            m.bits = (1 - window) * (spec.kivi.bits + 32.0 / spec.kivi.group) + window * 16;
            m.settings = cat(spec.kivi.bits, spec.kivi.bits == 1 ? " bit" : " bits", ", groups of ", spec.kivi.group,
                             spec.kivi.residual > 0 ? cat(", the last ", spec.kivi.residual, " tokens in FP16") : "",
                             "; keys per channel after RoPE, values per token");
        } else {
            m.family = "codebooks";
            m.file = bound->second;
            auto file = std::make_shared<CodebookFile>(readCodebookFile(m.file));
            const auto quantized = quantizedLayers(*file, {});
            for (const auto& e : file->entries) {
                const auto dot = e.tensor.find('.', 7);
                if (e.tensor.rfind("layers.", 0) != 0 || dot == std::string::npos)
                    continue;
                const int layer = std::atoi(e.tensor.substr(7, dot - 7).c_str());
                if (layer >= cfg.layers)
                    throwInvalid(m.file, ": has codebooks for ", e.tensor, " but the model has ", cfg.layers,
                                 " layers: trained on another model?");
                if (e.codebooks.features() != cfg.kvDim())
                    throwInvalid(m.file, ": ", e.tensor, " quantizes ", e.codebooks.features(),
                                 " features; the model's keys and values have ", cfg.kvDim(), " (", cfg.kvHeads,
                                 " KV heads × head_dim ", cfg.headDim(), "): trained on another model?");
            }
            if (quantized.empty())
                throwInvalid(m.file, ": has no codebooks for the model's layers.L.key and layers.L.value");
            const auto md = [&](const char* k) {
                const auto it = file->metadata.find(k);
                return it == file->metadata.end() ? std::string("-") : it->second;
            };
            if (md("key_rope") == "post" && cfg.headDim() % std::max(1, std::atoi(md("dim").c_str())) != 0)
                throwInvalid(m.file, ": post-RoPE keys need D (", md("dim"), ") to divide head_dim ", cfg.headDim());
            m.cache.hook = codebookHook(*file, m.file, cfg, {}, backend);
            m.bits = codebookCost(*file, quantized, longest, cfg.kvDim()).bpa;
            m.settings = cat("D=", md("dim"), " R=", md("stages"), " K=", md("k"), " ", md("method"), " ",
                             md("weights"), ", keys ", md("key_rope") == "post" ? "after" : "before", " RoPE, layers ",
                             layerRange(quantized), " of ", cfg.layers);
            m.codebooks = std::move(file);
        }
        out.push_back(std::move(m));
    }
    return out;
}

nlohmann::ordered_json contextTasksSettingsJson(const ContextTasksSettings& s, const std::string& modelSha256,
                                                const std::string& haystackSha256, const PromptFormat& format)
{
    nlohmann::ordered_json tasks = nlohmann::ordered_json::array(), codebooks = nlohmann::ordered_json::object();
    for (auto t : s.tasks)
        tasks.push_back(contextTaskName(t));
    for (const auto& [name, file] : s.codebooks)
        codebooks[name] = {{"file", file}, {"sha256", sha256Files({file})}};
    return {{"model", s.model},
            {"model_sha256", modelSha256},
            {"tasks", tasks},
            {"context", s.contexts},
            {"depths", s.depths},
            {"samples", s.samples},
            {"seed", s.seed},
            {"methods", s.methods},
            {"codebooks", codebooks},
            {"prefill", prefillModeName(s.mode)},
            {"chunk", s.chunk},
            {"weights", stepWeightsName(s.weights)},
            {"haystack", s.haystack},
            {"haystack_sha256", haystackSha256},
            {"tokenizer", s.tokenizer},
            {"tokenizer_sha256", s.tokenizer.empty() ? std::string() : sha256Files({s.tokenizer})},
            {"prompt_format", format.describe()},
            {"beyond_trained", s.beyondTrained}};
}

std::string settingsDifference(const nlohmann::ordered_json& recorded, const nlohmann::ordered_json& now)
{
    // Settings added since runs were first recorded, with the value those runs had.
    static const nlohmann::ordered_json before = {{"weights", "fp32"}};
    for (const auto& [key, value] : now.items()) {
        if (!recorded.contains(key)) {
            if (!before.contains(key))
                return cat(key, ": not recorded in that run");
            if (before[key] != value)
                return cat(key, ": ", before[key].dump(), " (before the setting) in that run, ", value.dump(), " now");
            continue;
        }
        if (recorded[key] != value)
            return cat(key, ": ", recorded[key].dump(), " in that run, ", value.dump(), " now");
    }
    return {};
}

void checkRecordedPrompts(const TaskGenerator& generator, const ContextTasksSettings& s,
                          const std::map<std::string, nlohmann::ordered_json>& recorded)
{
    for (const auto& [key, rec] : recorded) {
        if (key.rfind("prompt/", 0) != 0)
            continue;
        const auto task = parseContextTasks(rec.value("task", ""), "--resume").front();
        const auto p =
            generator.make(task, rec.value("context", 0), rec.value("depth", 0), rec.value("sample", 0), s.seed);
        if (!rec.contains("prompt_ids") || rec["prompt_ids"] != nlohmann::ordered_json(p.promptIds()))
            throwInvalid("--resume: the recorded prompt ", key,
                         " is not the one this gsrq generates (another version of the generator or the "
                         "vocabulary): start a new run");
    }
}

std::string promptKey(ContextTask task, int context, int depth, int sample)
{
    return cat("prompt/", contextTaskName(task), "/", context, "/", depth, "/", sample);
}

std::string answerKey(ContextTask task, int context, int depth, int sample, const std::string& method)
{
    return cat("answer/", contextTaskName(task), "/", context, "/", depth, "/", sample, "/", method);
}

nlohmann::ordered_json promptRecord(const TaskPrompt& p, const Tokenizer& vocab)
{
    return {{"key", promptKey(p.task, p.context, p.depth, p.sample)},
            {"task", contextTaskName(p.task)},
            {"context", p.context},
            {"depth", p.depth},
            {"sample", p.sample},
            {"prompt_tokens", p.promptTokens()},
            {"context_tokens", p.contextIds.size()},
            {"expected", p.expected},
            {"question", p.question},
            {"context_tail", tailText(p.contextIds, vocab, 240)},
            {"answer_tokens", p.answerTokens},
            {"prompt_ids", p.promptIds()}};
}

nlohmann::ordered_json answerRecord(const TaskPrompt& p, const TaskAnswer& a, PrefillMode mode)
{
    return {{"key", answerKey(p.task, p.context, p.depth, p.sample, a.method)},
            {"prompt", promptKey(p.task, p.context, p.depth, p.sample)},
            {"task", contextTaskName(p.task)},
            {"context", p.context},
            {"depth", p.depth},
            {"sample", p.sample},
            {"method", a.method},
            {"prefill", prefillModeName(mode)},
            {"expected", p.expected},
            {"answer", a.answer},
            {"score", a.score},
            {"answer_ids", a.answerIds},
            {"seconds", a.seconds}};
}

std::vector<ContextCell> contextCells(const std::vector<nlohmann::ordered_json>& answers, const ContextTasksSettings& s,
                                      bool byDepth)
{
    struct Sum {
        int n = 0;
        double score = 0;
    };
    std::map<std::string, Sum> sums;
    for (const auto& a : answers) {
        const std::string base = cat(a.value("task", ""), "|", a.value("context", 0), "|", a.value("method", ""), "|");
        auto& all = sums[base + "-1"];
        all.n += 1;
        all.score += a.value("score", 0.0);
        if (byDepth) {
            auto& d = sums[cat(base, a.value("depth", 0))];
            d.n += 1;
            d.score += a.value("score", 0.0);
        }
    }
    std::vector<ContextCell> out;
    std::vector<int> depths{-1};
    if (byDepth)
        depths.insert(depths.end(), s.depths.begin(), s.depths.end());
    for (auto t : s.tasks)
        for (int c : s.contexts)
            for (const auto& m : s.methods)
                for (int d : depths) {
                    const auto it = sums.find(cat(contextTaskName(t), "|", c, "|", m, "|", d));
                    if (it == sums.end())
                        continue;
                    ContextCell cell{contextTaskName(t), m, c, d, it->second.n, {}};
                    cell.accuracy = wilsonInterval(it->second.score, it->second.n);
                    out.push_back(cell);
                }
    return out;
}

nlohmann::ordered_json contextTasksSummary(const ContextTasksResult& r, const ContextTasksSettings& s)
{
    nlohmann::ordered_json cells = nlohmann::ordered_json::array();
    for (const auto& c : contextCells(r.answers, s))
        cells.push_back({{"task", c.task},
                         {"context", c.context},
                         {"method", c.method},
                         {"samples", c.samples},
                         {"accuracy", c.accuracy.value},
                         {"interval", {c.accuracy.lo, c.accuracy.hi}}});
    return {{"answers", r.answers.size()},
            {"new_answers", r.newAnswers},
            {"prefill_seconds", r.prefillSeconds},
            {"method_seconds", r.methodSeconds},
            {"cells", cells}};
}

ContextTasksResult runContextTasks(const OpenedModel& model, const TaskGenerator& generator,
                                   const ContextTasksSettings& s, const std::vector<ContextMethod>& methods,
                                   const std::map<std::string, nlohmann::ordered_json>& recorded,
                                   const RecordFn& record, const ProgressFn& progress)
{
    const auto& vocab = model.vocabulary();
    ContextEvalSettings es;
    es.mode = s.mode;
    es.chunk = s.chunk;
    es.weights = s.weights;
    es.stops = stopTokens(vocab, promptFormatOf(model.chatTemplate, true));
    std::vector<CacheMethod> caches;
    for (const auto& m : methods)
        caches.push_back(m.cache);

    struct Item {
        ContextTask task;
        int context, depth, sample;
    };
    std::vector<Item> items; // short contexts first: a stopped run has whole tables of them
    for (int c : s.contexts)
        for (auto t : s.tasks)
            for (int i = 0; i < s.samples; ++i)
                items.push_back({t, c, s.depths[std::size_t(i) % s.depths.size()], i});

    ContextTasksResult out;
    std::size_t todo = 0;
    for (const auto& it : items)
        for (const auto& m : methods) {
            const auto r = recorded.find(answerKey(it.task, it.context, it.depth, it.sample, m.cache.name));
            if (r == recorded.end())
                ++todo;
        }
    for (const auto& [key, rec] : recorded)
        (key.rfind("prompt/", 0) == 0 ? out.prompts : out.answers).push_back(rec);
    out.resumedAnswers = int(out.answers.size());

    std::size_t doneCount = 0;
    for (std::size_t ii = 0; ii < items.size() && !out.cancelled; ++ii) {
        const auto& it = items[ii];
        std::vector<bool> want(methods.size());
        bool any = false;
        for (std::size_t m = 0; m < methods.size(); ++m) {
            want[m] = !recorded.count(answerKey(it.task, it.context, it.depth, it.sample, methods[m].cache.name));
            any = any || want[m];
        }
        if (!any)
            continue;
        const std::string what = cat(contextTaskName(it.task), " ", it.context, " tokens, depth ", it.depth,
                                     "%, sample ", it.sample + 1, "/", s.samples);
        if (progress) {
            ProgressEvent ev;
            ev.fraction = todo ? double(doneCount) / double(todo) : 1.0;
            ev.what = cat(what, ": prefill");
            if (!progress(ev)) {
                out.cancelled = true;
                break;
            }
        }
        const TaskPrompt prompt = generator.make(it.task, it.context, it.depth, it.sample, s.seed);
        const std::string pk = promptKey(it.task, it.context, it.depth, it.sample);
        if (!recorded.count(pk)) {
            auto rec = promptRecord(prompt, vocab);
            if (record)
                record(pk, std::nan(""), rec);
            out.prompts.push_back(std::move(rec));
        }
        const auto t0 = std::chrono::steady_clock::now();
        const double prefill = answerWithMethods(
            model.model, vocab, prompt, caches, es, [&](std::size_t m) { return bool(want[m]); },
            [&](std::size_t m, const TaskAnswer& a) {
                auto rec = answerRecord(prompt, a, s.mode);
                if (record)
                    record(rec["key"].get<std::string>(), a.score, rec);
                out.answers.push_back(std::move(rec));
                ++out.newAnswers;
                ++doneCount;
                if (!progress)
                    return true;
                ProgressEvent ev;
                ev.fraction = todo ? double(doneCount) / double(todo) : 1.0;
                ev.what = cat(what, ": ", methods[m].cache.name);
                if (!progress(ev)) {
                    out.cancelled = true;
                    return false;
                }
                return true;
            });
        out.prefillSeconds += prefill;
        out.methodSeconds += since(t0) - prefill;
    }
    return out;
}

} // namespace gsrq
