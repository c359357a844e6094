#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/cluster_backend.h"
#include "core/io/kv_dump.h"
#include "core/jobs/codebook_perplexity.h"
#include "core/jobs/method_table.h"
#include "core/jobs/run_records.h"
#include "core/lm/open_model.h"
#include "core/lm/sequences.h"
#include "progress_bar.h"
#include "recording.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <memory>

namespace gsrq::cli {

namespace {

// --layers as a list, each a layer of the model.
std::vector<int> parseLayers(const std::string& text, int layers)
{
    if (text.empty())
        return {};
    const auto set = parseLayerList(text);
    if (*set.rbegin() >= layers)
        throwInvalid("--layers ", text, ": the model has layers 0-", layers - 1);
    return {set.begin(), set.end()};
}

// The model and the sequences a ppl run measures: --token-ids as given; the text (or, for a
// llama2.c model, its own samples) through the model's own vocabulary.
struct PplInput {
    OpenedModel opened;
    ModelSequences seqs;
};

template <class Opts> PplInput pplInput(const Opts& o)
{
    // The model first (its file's errors before the flags'); a llama2.c tokenizer only where it is read.
    PplInput in{openModel(o.model, o.tokenIds.empty() ? o.tokenizer : std::string()), {}};
    const auto weights = parseStepWeights(o.weights);
    if (!weights)
        throwInvalid("--weights '", o.weights, "': fp32, blocks or blocks-q8");
    in.opened.model.setForwardWeights(*weights);
    if (!o.tokenIds.empty() && (!o.text.empty() || o.generate))
        throwInvalid("--token-ids: not with --text or --generate");
    if (o.tokenIds.empty()) {
        if (o.text.empty() && !o.generate)
            throwInvalid("ppl: give --text FILE, --generate or --token-ids FILE");
        const bool gguf = in.opened.format == ModelFormat::Gguf;
        if (gguf && o.generate)
            throwInvalid("--generate: llama2.c models only (a GGUF model's perplexity takes --text or --token-ids)");
        if (gguf && !o.tokenizer.empty())
            throwInvalid("--tokenizer: a GGUF model brings its own vocabulary");
        if (!gguf && o.tokenizer.empty())
            throwInvalid("--tokenizer: a llama2.c model needs its tokenizer (.bin) for --text and --generate");
    }
    if (!o.tokenIds.empty()) {
        in.seqs.sequences = tokenIdSequences(o.tokenIds, in.opened.model.config());
        for (const auto& q : in.seqs.sequences)
            in.seqs.textTokens += std::int64_t(q.size());
        return in;
    }
    SequenceSource src;
    src.text = o.generate ? std::string() : o.text;
    src.generate = o.generate;
    src.seed = o.seed;
    src.seqLen = o.seqLen;
    src.sequences = o.sequences;
    in.seqs = modelSequences(in.opened, src);
    return in;
}

// [lo, hi] of a Δ% interval, null where there is none (FP32's own row).
nlohmann::ordered_json intervalJson(const Interval& i)
{
    return i.valid() ? nlohmann::ordered_json::array({i.lo, i.hi}) : nlohmann::ordered_json(nullptr);
}

// "[-1.23, +4.56]", or "-" where there is no interval.
std::string intervalText(const Interval& i)
{
    if (!i.valid())
        return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, "[%+.2f, %+.2f]", i.lo, i.hi);
    return buf;
}

// The JSON envelope of every ppl run; the caller adds its results.
nlohmann::ordered_json pplJson(CliRun& run, const nlohmann::ordered_json& settings, const ModelSequences& seqs)
{
    nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "ppl"}};
    if (run)
        j["run_id"] = run->id();
    j["settings"] = settings;
    j["text_tokens"] = seqs.textTokens;
    j["predicted_tokens"] = predictedTokens(seqs.sequences);
    // Each sequence's predicted tokens, the weights of the rows' sequence_nll (their mean NLL per token).
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (const auto& q : seqs.sequences)
        tokens.push_back(std::max<std::int64_t>(std::int64_t(q.size()) - 1, 0));
    j["sequence_tokens"] = tokens;
    j["interval"] = "paired bootstrap over the sequences, percentile, 95%, 10000 resamples";
    return j;
}

// The header line of every ppl run's table.
template <class Opts> std::string pplSource(const Opts& o, const ModelSequences& seqs)
{
    return o.generate ? cat("sampled from the model, seed ", o.seed)
                      : cat(o.tokenIds.empty() ? o.text : o.tokenIds, ", ", seqs.textTokens, " tokens");
}

// What every ppl run records of its options (the table adds its methods and training).
template <class Opts> PplRunSettings pplSettingsOf(const Opts& o)
{
    PplRunSettings ps;
    ps.model = o.model;
    ps.tokenizer = o.tokenizer;
    ps.text = o.generate ? std::string() : !o.tokenIds.empty() ? o.tokenIds : o.text;
    ps.seed = o.seed;
    ps.seqLen = o.seqLen;
    ps.sequences = o.sequences;
    ps.codebooks = o.codebooks;
    ps.layers = o.layers;
    ps.weights = o.weights;
    return ps;
}

// gsrq ppl --methods: the paper's table on the model (core/jobs/method_table.h).
template <class Opts> void runMethodTableCommand(const Opts& o)
{
    if (o.perLayer)
        throwInvalid("--per-layer: not with --methods");
    if (o.iterations < 0)
        throwInvalid("--iters ", o.iterations, ": must be ≥ 0");
    MethodTableSettings ts;
    ts.methods = parseMethods(o.methods);
    for (const auto& c : o.codebooks)
        for (auto& m : parseMethods(c, "--codebooks"))
            ts.methods.push_back(m);
    ts.trainDump = o.trainDump;
    ts.layers = o.layers;
    ts.iterations = o.iterations;
    ts.seed = o.trainSeed;
    const auto in = pplInput(o);
    const auto& model = in.opened.model;
    const auto& cfg = model.config();
    const auto& seqs = in.seqs.sequences;
    parseLayers(o.layers, cfg.layers);
    validateMethods(ts.methods, cfg);
    auto backend = openBackend(o.backend, true);
    PplRunSettings ps = pplSettingsOf(o);
    for (const auto& m : ts.methods)
        ps.methods.push_back(m.name);
    ps.trainDump = o.trainDump;
    ps.trainIterations = o.iterations;
    ps.trainSeed = o.trainSeed;
    const auto settings = pplRunSettings(ps);
    // As every ppl run: the model is the run's input (the training dump is in the settings).
    CliRun run("ppl", settings.dump(), o.model, {o.model}, backend->name(), backend->device());
    run.guard([&] {
        ProgressBar bar(!o.json && !o.quiet);
        // The trainings' passes are not recorded: the run is the table, and its methods' clusterings
        // (K-means for CQ, KM-RQ and VQLLM-style alike) would mix in the pass curves.
        const auto r = runMethodTable(model, seqs, ts, *backend, [&](const ProgressEvent& e) {
            bar.update(e.fraction, e.what);
            return !stopRequested();
        });
        bar.finish();
        if (r.cancelled)
            run.cancelled();
        if (run) {
            run->recordMetrics(methodTableMetrics(r));
            run->recordSeries(methodTableSeries(r));
        }
        run.done(methodTableSummary(r).dump());
        const double fp32 = r.rows.front().perplexity;
        if (o.json) {
            nlohmann::ordered_json rs = nlohmann::ordered_json::array();
            for (const auto& row : r.rows) {
                nlohmann::ordered_json j = {{"method", row.name},
                                            {"family", row.family},
                                            {"bits", row.bits},
                                            {"effective_bits", row.effectiveBits},
                                            {"perplexity", row.perplexity},
                                            {"delta", row.perplexity - fp32},
                                            {"delta_percent", 100 * (row.perplexity - fp32) / fp32}};
                j["delta_percent_interval"] = intervalJson(row.deltaInterval);
                j["sequence_nll"] = row.sequenceNll;
                j["attention_rel_l2"] =
                    row.attentionRelL2 ? nlohmann::ordered_json(*row.attentionRelL2) : nlohmann::ordered_json(nullptr);
                j["settings"] = row.settings;
                rs.push_back(j);
            }
            auto j = pplJson(run, settings, in.seqs);
            j["methods"] = rs;
            j["notes"] = r.notes;
            printJson(j);
            return;
        }
        std::printf("%s: dim %d, %d layers, %d heads, %d KV heads × %d; %zu sequences × %d tokens (%s), %lld "
                    "predictions; keys and values quantized: %s\n\n",
                    o.model.c_str(), cfg.dim, cfg.layers, cfg.heads, cfg.kvHeads, cfg.headDim(), seqs.size(),
                    longestSequence(seqs), pplSource(o, in.seqs).c_str(), static_cast<long long>(predictedTokens(seqs)),
                    o.layers.empty() ? "every layer" : ("layers " + o.layers).c_str());
        int width = 6;
        for (const auto& row : r.rows)
            width = std::max(width, int(row.name.size()));
        std::printf("  %-*s %7s %10s %11s %10s %10s %18s %10s  %s\n", width, "method", "bits", "eff. bits",
                    "perplexity", "Δ", "Δ%", "Δ% 95% interval", "attn relL2", "as");
        for (const auto& row : r.rows)
            std::printf("  %-*s %7.4g %10.4g %11.4f %+10.4f %+9.2f%% %18s %10s  %s\n", width, row.name.c_str(),
                        row.bits, row.effectiveBits, row.perplexity, row.perplexity - fp32,
                        100 * (row.perplexity - fp32) / fp32, intervalText(row.deltaInterval).c_str(),
                        row.attentionRelL2 ? cat(std::fixed, std::setprecision(4), *row.attentionRelL2).c_str() : "-",
                        row.settings.c_str());
        std::printf("\nbits: per cached value (KIVI: with its FP16 scales, zeros and window); eff. bits: with the "
                    "codewords (F16) spread over these %lld tokens; interval: paired bootstrap over the sequences "
                    "(percentile, 95%%)",
                    static_cast<long long>(cachedTokens(seqs)));
        if (!o.trainDump.empty())
            std::printf("; attn relL2: attention error on %s (codebooks files: not measured)", o.trainDump.c_str());
        std::printf("\n");
        for (const auto& n : r.notes)
            std::printf("note: %s\n", n.c_str());
        if (run)
            std::printf("recorded as run %lld\n", static_cast<long long>(run->id()));
    });
}

} // namespace

Command registerPerplexity(CLI::App& root)
{
    struct Opts {
        std::string model, tokenizer, text, tokenIds, layers, weights = "fp32";
        bool generate = false, json = false, perLayer = false, quiet = false;
        std::uint64_t seed = 0;
        int seqLen = 256, sequences = 16;
        std::vector<std::string> codebooks;
        std::string methods, trainDump;
        int iterations = 25;
        std::uint64_t trainSeed = 0;
        BackendOptions backend;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand(
        "ppl", "Perplexity of a GGUF or llama2.c model, in FP32 and with its KV cache replaced by codebooks' "
               "reconstructions");
    cmd->add_option("model", o->model, "llama2.c checkpoint (.bin) or GGUF model (llama, qwen2)")->required();
    cmd->add_option("--tokenizer", o->tokenizer,
                    "llama2.c tokenizer (.bin): a llama2.c model's, for --text and --generate");
    cmd->add_option("--token-ids", o->tokenIds,
                    "Sequences of token ids, one per line (BOS first), instead of --text: e.g. tools/hf_ppl.py "
                    "--save-token-ids with the model's own tokenizer");
    auto* text = cmd->add_option("--text", o->text, "Text file: re-flowed, tokenized, cut into sequences after BOS");
    auto* gen = cmd->add_flag("--generate", o->generate, "Sequences sampled from the FP32 model (temperature 1)");
    text->excludes(gen);
    cmd->add_option("--seed", o->seed, "Seed of --generate")->capture_default_str();
    cmd->add_option("--seq-len", o->seqLen, "Tokens per sequence, BOS included")->capture_default_str();
    cmd->add_option("--sequences", o->sequences, "Sequences")->capture_default_str();
    cmd->add_option("--codebooks,-c", o->codebooks, "Codebooks files (gsrq train) to measure, one or more");
    cmd->add_option("--layers", o->layers, "Only these layers' KV cache is quantized, e.g. 0-4 or 1,3 (default: all)");
    cmd->add_option("--weights", o->weights,
                    "The forward pass's products: fp32 (the dequantized FP32 matrices), blocks (a GGUF model's "
                    "quantized blocks with FP32 activations: the same values, so for many tokens the FP32 matrices' "
                    "GEMM; fp32 but for the order of sums), blocks-q8 (the blocks with activations rounded to 8 "
                    "bits, as gsrq generate's step runs by default): what the rounding costs in perplexity")
        ->capture_default_str();
    cmd->add_flag("--per-layer", o->perLayer, "Also quantize one layer at a time: which layers are sensitive");
    cmd->add_option(
        "--methods", o->methods,
        "The paper's comparison: fp32, kivi-B[gG][rN], cq-<C>c<B>b, km-rq@BPA, gsrq@BPA, vqllm@BPA, codebooks "
        "files, e.g. fp32,kivi-2,kivi-1,cq-2c8b,km-rq@1,gsrq@1,gsrq@0.75");
    cmd->add_option("--train-dump", o->trainDump,
                    "The model's KV dump on which --methods' trained methods learn (and attention is measured)");
    auto* iters =
        cmd->add_option("--iters", o->iterations, "--methods: maximum iterations per stage of trained methods")
            ->capture_default_str();
    auto* trainSeed =
        cmd->add_option("--train-seed", o->trainSeed, "--methods: seed of trained methods and the attention sample")
            ->capture_default_str();
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress bar");
    return {cmd, [o, iters, trainSeed] {
                if (!o->methods.empty()) {
                    runMethodTableCommand(*o);
                    return;
                }
                if (!o->trainDump.empty())
                    throwInvalid("--train-dump: only with --methods");
                for (const auto* opt : {iters, trainSeed})
                    if (opt->count())
                        throwInvalid(opt->get_name(), ": only with --methods");
                const auto in = pplInput(*o);
                const auto& model = in.opened.model;
                const auto& cfg = model.config();
                const auto& seqs = in.seqs.sequences;
                CodebookPerplexitySettings cs;
                cs.layers = parseLayers(o->layers, cfg.layers);
                cs.layersText = o->layers;
                cs.perLayer = o->perLayer;
                std::vector<LabelledCodebooks> files;
                for (const auto& p : o->codebooks)
                    files.push_back({p, readCodebookFile(p)});
                auto backend = openBackend(o->backend, true);

                PplRunSettings ps = pplSettingsOf(*o);
                for (const auto& f : files)
                    ps.codebookSettings.push_back(f.file.metadata);
                const auto settings = pplRunSettings(ps);
                CliRun run("ppl", settings.dump(), o->model, {o->model}, backend->name(), backend->device());
                run.guard([&] {
                    ProgressBar bar(!o->json && !o->quiet && !files.empty());
                    const auto r = runCodebookPerplexity(model, seqs, files, cs, *backend, [&](const ProgressEvent& e) {
                        bar.update(e.fraction, e.what);
                        return !stopRequested();
                    });
                    bar.finish();
                    if (r.cancelled)
                        run.cancelled(codebookPerplexitySummary(r).dump());
                    if (run) {
                        run->recordMetrics(codebookPerplexityMetrics(r));
                        run->recordSeries(codebookPerplexitySeries(r));
                    }
                    run.done(codebookPerplexitySummary(r).dump());
                    const double fp32 = r.fp32();
                    if (o->json) {
                        nlohmann::ordered_json rs = nlohmann::ordered_json::array();
                        for (const auto& row : r.rows)
                            rs.push_back({{"codebooks", row.codebooks},
                                          {"method", row.method},
                                          {"layers", row.layers},
                                          {"bpa", row.bpa},
                                          {"effective_bpa", row.effectiveBpa},
                                          {"perplexity", row.perplexity},
                                          {"delta", row.perplexity - fp32},
                                          {"delta_percent", 100 * (row.perplexity - fp32) / fp32},
                                          {"delta_percent_interval", intervalJson(row.deltaInterval)},
                                          {"sequence_nll", row.sequenceNll}});
                        auto j = pplJson(run, settings, in.seqs);
                        j["fp32_seconds"] = r.fp32Seconds; // the FP32 forward passes over every sequence
                        j["results"] = rs;
                        printJson(j);
                        return;
                    }
                    std::printf("%s: dim %d, %d layers, %d heads, %d KV heads; %zu sequences × %d tokens (%s), "
                                "%lld predictions\n\n",
                                o->model.c_str(), cfg.dim, cfg.layers, cfg.heads, cfg.kvHeads, seqs.size(),
                                longestSequence(seqs), pplSource(*o, in.seqs).c_str(),
                                static_cast<long long>(predictedTokens(seqs)));
                    std::printf("  %-32s %-6s %-10s %6s %9s %11s %9s %8s %18s\n", "codebooks", "method", "layers",
                                "bits", "eff. bits", "perplexity", "Δ", "Δ%", "Δ% 95% interval");
                    for (const auto& row : r.rows)
                        std::printf("  %-32s %-6s %-10s %6.3g %9.4g %11.4f %+9.4f %+7.2f%% %18s\n",
                                    row.codebooks.c_str(), row.method.c_str(), row.layers.c_str(), row.bpa,
                                    row.effectiveBpa, row.perplexity, row.perplexity - fp32,
                                    100 * (row.perplexity - fp32) / fp32, intervalText(row.deltaInterval).c_str());
                    if (run)
                        std::printf("\nrecorded as run %lld\n", static_cast<long long>(run->id()));
                });
            }};
}

} // namespace gsrq::cli
