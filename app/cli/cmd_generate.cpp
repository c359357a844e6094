// generate: a real model decoded token by token with its KV cache in FP16 and compressed (the CPU
// decode paths), at long contexts made from a real prefill; per-token latency, the attention's share
// of the step, tokens per second and the cache's bytes, per context and path; recorded.

#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/codebook_file.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/generate.h"
#include "core/jobs/run_records.h"
#include "core/lm/open_model.h"
#include "core/lm/sequences.h"
#include "recording.h"

#include <algorithm>
#include <cstdio>
#include <memory>

namespace gsrq::cli {

Command registerGenerate(CLI::App& root)
{
    struct Opts {
        std::string model, tokenizer, text, codebooks, contexts = "4096", paths = "fp16,lookup", weights = "blocks-q8",
                                                       prefillWeights = "blocks-q8";
        int prefill = 256, steps = 8, threads = 0;
        bool json = false, quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand(
        "generate", "Decode a model token by token with its KV cache in FP16 and compressed by codebooks (CPU decode "
                    "paths): per-token latency and the attention's share, at long contexts");
    cmd->add_option("model", o->model, "GGUF model (llama, qwen2) or llama2.c checkpoint")->required();
    cmd->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer (.bin): a llama2.c model's");
    cmd->add_option("--text", o->text, "Text whose first --prefill tokens start the context")->required();
    cmd->add_option("--codebooks,-c", o->codebooks,
                    "Codebooks of every layer's keys (after RoPE: gsrq train --key-rope post) and values; needed by "
                    "the lookup path (--paths fp16 runs without)");
    cmd->add_option("--context", o->contexts, "Cached tokens before the timed steps, e.g. 4096,16384,32768")
        ->capture_default_str();
    cmd->add_option("--prefill", o->prefill, "Tokens of the text run through the forward pass, then repeated")
        ->capture_default_str();
    cmd->add_option("--tokens", o->steps, "Timed decode steps per context and path")->capture_default_str();
    cmd->add_option("--paths", o->paths, "fp16, lookup")->capture_default_str();
    cmd->add_option("--threads", o->threads, "The decode kernels' threads (0: one per core)")->capture_default_str();
    cmd->add_option("--weights", o->weights,
                    "The step's products: blocks-q8, a GGUF model's quantized blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) "
                    "with activations rounded to 8 bits and integer dot products (llama.cpp's arithmetic); blocks, "
                    "the same blocks with FP32 activations; fp32, the dequantized FP32 matrices")
        ->capture_default_str();
    cmd->add_option("--prefill-weights", o->prefillWeights,
                    "The prefill's products, the same choices (blocks-q8: an integer GEMM over the blocks, 32 rows "
                    "by 6 tokens at a time; blocks: the FP32 matrices of the blocks' values, a panel at a time, "
                    "Eigen's GEMM)")
        ->capture_default_str();
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress lines");
    return {cmd, [o] {
                GenerateOptions g;
                g.contexts.clear();
                for (int v : parseIntList("--context", o->contexts)) {
                    if (v < 1)
                        throwInvalid("--context ", v, ": must be ≥ 1");
                    g.contexts.push_back(v);
                }
                g.paths.clear();
                for (const auto& p : splitList(o->paths)) {
                    if (p == "fp16")
                        g.paths.push_back(DecodePath::Fp16);
                    else if (p == "lookup")
                        g.paths.push_back(DecodePath::Lookup);
                    else
                        throwInvalid("--paths: '", p, "' (generate runs fp16 and lookup)");
                }
                if (o->prefill < 2)
                    throwInvalid("--prefill ", o->prefill, ": at least 2 tokens");
                const auto weights = parseStepWeights(o->weights), prefillWeights = parseStepWeights(o->prefillWeights);
                if (!weights)
                    throwInvalid("--weights '", o->weights, "': blocks-q8, blocks or fp32");
                if (!prefillWeights)
                    throwInvalid("--prefill-weights '", o->prefillWeights, "': blocks, blocks-q8 or fp32");
                g.weights = *weights;
                g.prefillWeights = *prefillWeights;
                g.steps = o->steps;
                g.threads = o->threads;
                const bool lookup = std::find(g.paths.begin(), g.paths.end(), DecodePath::Lookup) != g.paths.end();
                if (o->codebooks.empty() && lookup)
                    throwInvalid("--codebooks: the lookup path reads a compressed cache; give its codebooks, or "
                                 "--paths fp16");
                const auto books = o->codebooks.empty() ? CodebookFile{} : readCodebookFile(o->codebooks);
                SequenceSource src;
                src.text = o->text;
                src.generate = o->text.empty();
                src.seqLen = o->prefill;
                src.sequences = 1;
                src.lengthFlag = "--prefill";
                const auto setup = openWithSequences(o->model, o->tokenizer, src);
                const auto& model = setup.opened.model;
                if (o->prefill > model.config().maxSeq)
                    throwInvalid("--prefill ", o->prefill, ": past the model's ", model.config().maxSeq, " positions");
                const auto& prefill = setup.seqs.sequences.front();
                for (auto n : g.contexts)
                    if (n + g.steps + 1 > model.config().maxSeq)
                        throwInvalid("--context ", n, ": with ", g.steps, " steps it passes the model's ",
                                     model.config().maxSeq, " positions");
                const auto settings = generateRunSettings(o->model, o->text, o->codebooks, o->prefill, g);
                CliRun run("generate", settings.dump(), o->model, {o->model}, "cpu",
                           cpuDecodeDeviceName(cpuModelName(), cpuDecodeThreads(g.threads)));
                run.guard([&] {
                    const auto rep = runGenerate(
                        model, prefill, books, o->codebooks, g,
                        [&](const GeneratePoint& p) {
                            if (run) {
                                run->recordMetrics(generateMetrics(p));
                                run->recordSeries(generateSeries(p));
                            }
                            if (!o->quiet && !o->json)
                                std::fprintf(stderr, "  %lld tokens, %s: %.1f ms a token\n", (long long)p.context,
                                             decodePathName(p.path), p.stepMs);
                        },
                        [] { return stopRequested(); });
                    if (stopRequested())
                        run.cancelled(generateRunSummary(rep).dump()); // throws Cancelled
                    run.done(generateRunSummary(rep).dump());
                    if (o->json) {
                        nlohmann::ordered_json pts = nlohmann::ordered_json::array();
                        for (const auto& p : rep.points)
                            pts.push_back({{"context", p.context},
                                           {"path", decodePathName(p.path)},
                                           {"step_ms", p.stepMs},
                                           {"attention_ms", p.attentionMs},
                                           {"append_ms", p.appendMs},
                                           {"attention_share", p.stepMs > 0 ? p.attentionMs / p.stepMs : 0.0},
                                           {"tokens_per_second", p.tokensPerSecond},
                                           {"cache_bytes", p.cacheBytes},
                                           {"prefill_tokens", rep.prefillTokens},
                                           {"prefill_seconds", rep.prefillSeconds},
                                           {"prefill_tokens_per_second", rep.prefillTokensPerSecond()},
                                           {"tokens", p.tokens}});
                        nlohmann::ordered_json j = {{"tool", "gsrq"},
                                                    {"version", kVersion},
                                                    {"command", "generate"},
                                                    {"settings", settings},
                                                    {"context_note", rep.contextNote},
                                                    {"prefill_tokens", rep.prefillTokens},
                                                    {"prefill_seconds", rep.prefillSeconds},
                                                    {"prefill_tokens_per_second", rep.prefillTokensPerSecond()},
                                                    {"weights", rep.weights},
                                                    {"prefill_weights", rep.prefillWeights},
                                                    {"isa", rep.isa},
                                                    {"threads", rep.threads},
                                                    {"points", pts}};
                        printJson(j);
                        return;
                    }
                    std::printf("%s: %d layers, %d heads on %d KV heads × %d; context: %s; kernels %s, %d threads; "
                                "weights: %s\n\n",
                                o->model.c_str(), model.config().layers, model.config().heads, model.config().kvHeads,
                                model.config().headDim(), rep.contextNote.c_str(), rep.isa.c_str(), rep.threads,
                                rep.weights.c_str());
                    std::printf("prefill: %lld tokens in %.2f s, %.1f tokens/s (chunks of %d, logits of the last token "
                                "only; weights: %s)\n\n",
                                (long long)rep.prefillTokens, rep.prefillSeconds, rep.prefillTokensPerSecond(),
                                g.prefillChunk, rep.prefillWeights.c_str());
                    std::printf("  %8s %-7s %10s %12s %8s %10s %9s %12s\n", "context", "path", "ms/token",
                                "attention ms", "share", "append ms", "tokens/s", "cache");
                    for (const auto& p : rep.points)
                        std::printf("  %8lld %-7s %10.2f %12.3f %7.1f%% %10.3f %9.2f %12s\n", (long long)p.context,
                                    decodePathName(p.path), p.stepMs, p.attentionMs,
                                    p.stepMs > 0 ? 100 * p.attentionMs / p.stepMs : 0.0, p.appendMs, p.tokensPerSecond,
                                    humanBytes(p.cacheBytes).c_str());
                    std::printf("\nms/token: the whole step (median of %d); attention: the cache's decode kernel in "
                                "every layer; append: the new token's FP16 copy (fp16), with its quantize-and-pack "
                                "(lookup)\n",
                                g.steps);
                });
            }};
}

} // namespace gsrq::cli
