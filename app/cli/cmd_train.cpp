#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/codebook_file.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"
#include "core/jobs/train_job.h"
#include "progress_bar.h"
#include "recording.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

namespace gsrq::cli {

namespace {

void printMetricsRow(const char* label, const QuantMetrics& m, double seconds)
{
    std::printf("  %-8s %12.6g %10.6f %11.6g %9.6f %10.6f %9.3f\n", label, m.mse, m.nmse, m.gainError, m.cosine,
                m.shrinkage, seconds);
}

} // namespace

Command registerTrain(CLI::App& root)
{
    struct Opts {
        std::string dump, tensors, layers, method = "gskm", weights = "none", eval, out, dtype = "f32",
                                           keyRope = "as-dumped", beamTrain = "all";
        double bpa = 0, tau = 1, holdout = 0;
        int dim = 0, stages = 0, k = 0, attentionQueries = 128, channels = 0, bits = 0;
        double emaDecay = 0.5;
        BackendOptions backend;
        bool json = false, quiet = false, force = false, withCodes = false, dropNonFinite = false, holdoutTail = false;
        TrainSettings s;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("train", "Train GSRQ codebooks (product × residual quantization) on a dump");
    cmd->add_option("dump", o->dump, "KV dump: .safetensors file, directory of shards, or 2-D .npy")->required();
    cmd->add_option("--tensors", o->tensors, "Comma-separated globs, e.g. 'layers.*.value' (default: keys and values)");
    cmd->add_option("--layers", o->layers, "Layers to train, e.g. 0-3,7 (default: all)");
    cmd->add_option("--bpa", o->bpa,
                    "Bits per activation from the paper: 2, 1, 0.75 (D = head_dim, 128 in the paper) or 0.375 (D = 2 "
                    "heads; K = 256, R = BPA·D/8)");
    cmd->add_option("--dim,-d", o->dim, "Subspace width D (with --stages and --k, instead of --bpa)");
    cmd->add_option("--stages,-r", o->stages, "Residual stages R");
    cmd->add_option("--k,-k", o->k, "Codewords per stage K (a power of two up to 65,536)");
    cmd->add_option("--method", o->method,
                    "gskm, km, cq (coupled quantization: --channels C coupled, 2^--bits centroids per block, one "
                    "stage of K-means with grad-sq weights unless --weights says otherwise), or vqllm (VQLLM-style "
                    "residual K-means: strided channel groups, moving-average codebook updates)")
        ->capture_default_str();
    auto* emaFlag = cmd->add_option("--ema-decay", o->emaDecay,
                                    "vqllm: decay γ of the moving-average update over passes, in [0, 1)")
                        ->capture_default_str();
    cmd->add_option("--channels", o->channels, "cq: channels coupled into one block (C)");
    cmd->add_option("--bits", o->bits, "cq: bits per block of C channels (2^bits centroids), 1-16");
    cmd->add_option("--iters", o->s.rq.iterations, "Maximum iterations per stage")->capture_default_str();
    cmd->add_option("--seed", o->s.rq.seed, "Seed")->capture_default_str();
    cmd->add_option("--beam", o->s.rq.beam, "Beam width of encoding (1 = greedy)")->capture_default_str();
    cmd->add_option("--beam-train", o->beamTrain,
                    "With --beam > 1, the rows each stage's K-means runs on: all (every beam's residual, as FAISS) "
                    "or best (the best beam's only: faster)")
        ->capture_default_str();
    cmd->add_flag("--reseed-empty", o->s.rq.reseedEmpty, "Re-seed empty clusters by splitting the largest");
    cmd->add_option("--refine", o->s.rq.refine,
                    "Rounds of joint refinement after the greedy stages: every stage's codewords by least squares "
                    "with the codes fixed, then a re-encode (0: none)")
        ->capture_default_str();
    cmd->add_option("--refine-beam", o->s.rq.refineBeam, "Beam of the refinement's re-encode (0: --beam)")
        ->capture_default_str();
    auto* weightsFlag =
        cmd->add_option("--weights", o->weights, "none, grad-raw, grad-log or grad-sq (CQ's Fisher weights)")
            ->capture_default_str();
    cmd->add_option("--tau", o->tau, "τ of grad-log weights")->capture_default_str();
    cmd->add_option("--eval", o->eval, "Held-out dump with the same tensors (a .npy pairs with a .npy)");
    cmd->add_option("--holdout", o->holdout, "Fraction of rows held out for evaluation (a seeded random subset)");
    cmd->add_flag("--holdout-tail", o->holdoutTail, "Hold out the last rows instead of a random subset");
    cmd->add_option("--key-rope", o->keyRope, "as-dumped, or post: apply RoPE to pre-RoPE keys before training")
        ->capture_default_str();
    cmd->add_option("--attention-queries", o->attentionQueries, "Query rows sampled for attention fidelity (0: skip)")
        ->capture_default_str();
    cmd->add_option("--out,-o", o->out, "Codebooks file to write (.safetensors)");
    cmd->add_option("--dtype", o->dtype, "Codebook dtype in the file: f32 or f16")->capture_default_str();
    cmd->add_flag("--with-codes", o->withCodes, "Also store the training rows' codes");
    cmd->add_flag("--force", o->force, "Overwrite an existing --out file");
    cmd->add_flag("--drop-nonfinite", o->dropNonFinite, "Drop rows holding NaN/Inf instead of refusing the tensor");
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress bar");
    return {cmd, [o, weightsFlag, emaFlag] {
                TrainSettings& s = o->s;
                if (o->beamTrain != "all" && o->beamTrain != "best")
                    throwInvalid("--beam-train '", o->beamTrain, "': all or best");
                s.rq.trainOnAllBeams = o->beamTrain == "all";
                const bool cq = o->method == "cq", vqllm = o->method == "vqllm";
                if (!cq && !vqllm && !methodFromName(o->method))
                    throwInvalid("--method: '", o->method, "' is not gskm, km, cq or vqllm");
                s.rq.method = cq || vqllm ? Method::KMeans : parseMethod("--method", o->method);
                if (vqllm) {
                    if (!(o->emaDecay >= 0 && o->emaDecay < 1))
                        throwInvalid("--ema-decay ", o->emaDecay, ": must be in [0, 1)");
                    s.rq.stridedGroups = true;
                    s.rq.emaDecay = o->emaDecay;
                    s.methodLabel = "vqllm";
                } else if (emaFlag->count()) {
                    throwInvalid("--ema-decay: only with --method vqllm");
                }
                if (cq && weightsFlag->count() == 0)
                    o->weights = "grad-sq"; // CQ's Fisher weighting
                if (!cq && (o->channels || o->bits))
                    throwInvalid(o->channels ? "--channels" : "--bits", ": only with --method cq");
                const auto w = weightModeFromName(o->weights);
                if (!w)
                    throwInvalid("--weights: unknown mode '", o->weights, "' (none, grad-raw, grad-log, grad-sq)");
                s.weights = *w;
                s.tau = o->tau;
                if (o->keyRope != "as-dumped" && o->keyRope != "post")
                    throwInvalid("--key-rope: '", o->keyRope, "' is not as-dumped or post");
                s.keyRope = o->keyRope == "post" ? KeyRope::Post : KeyRope::AsDumped;
                s.tensorPatterns = splitList(o->tensors);
                s.layers = o->layers;
                s.evalPath = o->eval;
                s.holdout = o->holdout;
                s.holdoutTail = o->holdoutTail;
                s.dropNonFinite = o->dropNonFinite;
                s.attentionQueries = o->attentionQueries;
                s.exportDType = codebookDType(o->dtype);
                s.keepCodes = o->withCodes;
                refuseOverwrite(o->out, o->force, "--out");
                if (!o->out.empty() && std::filesystem::path(o->out).extension() != ".safetensors")
                    throwInvalid("--out ", o->out, ": name it .safetensors");

                const KvDump dump = KvDump::open(o->dump);
                const auto selected = selectTensors(dump, s.tensorPatterns, s.layers);
                const std::int64_t F = selected.front()->view.features();
                const bool direct = o->dim || o->stages || o->k;
                if (cq) {
                    if (o->bpa > 0 || direct)
                        throwInvalid(
                            "--method cq sets D, R and K from --channels and --bits; drop --bpa/--dim/--stages/--k");
                    if (o->channels < 1)
                        throwInvalid("--channels: --method cq needs the channels coupled into a block (C ≥ 1)");
                    if (o->bits == 0)
                        throwInvalid("--bits: --method cq needs the bits per block of --channels (1-16)");
                    if (o->bits < 1 || o->bits > 16)
                        throwInvalid("--bits ", o->bits, ": --method cq needs 1-16 bits per block");
                    if (F % o->channels != 0)
                        throwInvalid("--channels ", o->channels, ": does not divide the ", F, " features of ",
                                     selected.front()->view.name);
                    if (!weightsFlag->count())
                        for (const auto* t : selected)
                            if (!dump.gradientOf(*t))
                                throwInvalid(
                                    "--method cq weights rows by their squared gradients (--weights grad-sq), and ",
                                    dump.path(), " has no gradient for '", t->view.name,
                                    "'; give --weights none to train CQ unweighted");
                    s.rq.dim = o->channels;
                    s.rq.stages = 1;
                    s.rq.k = 1 << o->bits;
                    s.methodLabel = "cq";
                } else if (o->bpa > 0 && direct) {
                    throwInvalid("--bpa sets D, R and K; give either --bpa or --dim/--stages/--k");
                } else if (o->bpa > 0) {
                    // The presets follow the model: D from the heads' width where the dump has one
                    // ([tokens, heads, head_dim]), else the paper's D = 128.
                    const auto& shape = selected.front()->view.shape;
                    const BpaChoice c = paperBpaFor(o->bpa, F, ArgStyle::Cli, shape.size() == 3 ? shape[2] : 0);
                    s.rq.dim = c.dim;
                    s.rq.stages = c.stages;
                    s.rq.k = c.k;
                } else if (direct) {
                    if (!o->dim || !o->stages || !o->k)
                        throwInvalid("--dim, --stages and --k go together (or use --bpa)");
                    s.rq.dim = o->dim;
                    s.rq.stages = o->stages;
                    s.rq.k = o->k;
                } else {
                    throwInvalid("give --bpa, or --dim, --stages and --k");
                }

                auto backend = openBackend(o->backend, o->quiet);
                const auto settings = trainRunSettings(s, o->out, backend->name(), backend->device());
                CliRun run("train", settings.dump(), dump.path(), dump.files(), backend->name(), backend->device());
                s.sourceSha256 = run.dumpSha256();
                run.guard([&] {
                    ProgressBar bar(!o->quiet);
                    const auto r = runTrain(dump, s, *backend, [&](const ProgressEvent& e) {
                        bar.update(e.fraction, e.what);
                        run.progress(e);
                        return !stopRequested();
                    });
                    bar.finish();
                    if (r.cancelled) {
                        if (run)
                            run->recordTrain(r); // the tensors that finished
                        run.cancelled();         // nothing is exported from a stopped training
                    }
                    if (!o->out.empty())
                        writeCodebookFile(o->out, r.file, s.exportDType);
                    if (run) {
                        run->recordTrain(r);
                        if (!o->out.empty())
                            run->recordArtifact(o->out, "codebooks");
                    }
                    run.done(trainRunSummary(r).dump());
                    if (o->json) {
                        nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "train"}};
                        if (run)
                            j["run_id"] = run->id();
                        j["input"] = {{"file", dump.path()}, {"sha256", r.file.metadata.at("source_sha256")}};
                        if (auto it = dump.metadata().find("synthetic"); it != dump.metadata().end())
                            j["input"]["synthetic"] = it->second;
                        j["settings"] = settings;
                        nlohmann::ordered_json ts = nlohmann::ordered_json::array();
                        for (const auto& t : r.tensors)
                            ts.push_back(toJson(t, s.weights));
                        j["tensors"] = ts;
                        nlohmann::ordered_json att = nlohmann::ordered_json::array();
                        for (const auto& a : r.attention)
                            att.push_back(toJson(a));
                        j["attention"] = att;
                        j["notes"] = r.notes;
                        j["out"] = o->out;
                        printJson(j);
                        return;
                    }
                    std::printf(
                        "%s: D=%d, R=%d, K=%d (%.4g bits per activation), %s, weights %s, beam %d, backend %s (%s)\n",
                        dump.path().c_str(), s.rq.dim, s.rq.stages, s.rq.k,
                        bitsPerActivation(s.rq.dim, s.rq.stages, s.rq.k),
                        vqllm ? cat("vqllm (EMA γ ", s.rq.emaDecay, ", strided groups)").c_str() : o->method.c_str(),
                        o->weights.c_str(), s.rq.beam, backend->name().c_str(), backend->device().c_str());
                    for (const auto& t : r.tensors) {
                        std::printf("\n%s  [%lld rows × %lld]  codebooks %s, effective %.4g bits per activation%s\n",
                                    t.tensor.c_str(), static_cast<long long>(t.rows),
                                    static_cast<long long>(t.features), humanBytes(double(t.codebookBytes)).c_str(),
                                    t.effectiveBpa, t.ropeApplied ? "  (RoPE applied)" : "");
                        if (s.weights != WeightMode::None)
                            std::printf("  weights %s: raw max/median %.1f, weight max/median %.2f\n",
                                        o->weights.c_str(),
                                        t.weightSummary.rawMax / std::max(t.weightSummary.rawMedian, 1e-300),
                                        t.weightSummary.weightMax / std::max(t.weightSummary.weightMedian, 1e-300));
                        std::printf("  %-8s %12s %10s %11s %9s %10s %9s\n", "rows", "mse", "nmse", "gain_error",
                                    "cosine", "shrinkage", "seconds");
                        printMetricsRow("train", t.train.metrics, t.train.seconds);
                        if (t.heldout)
                            printMetricsRow("heldout", *t.heldout, t.heldoutSeconds);
                        std::printf("  nmse after each stage:");
                        for (const auto& m : t.train.afterStage)
                            std::printf(" %.4f", m.nmse);
                        std::printf("\n");
                        if (!t.train.refinement.empty()) {
                            // Train (and held-out) NMSE from the greedy stages through each round.
                            std::printf("  joint refinement, nmse train / held-out: greedy %.4f",
                                        t.train.afterStage.empty() ? 0.0 : t.train.afterStage.back().nmse);
                            if (t.train.heldoutBeforeRefine)
                                std::printf(" / %.4f", t.train.heldoutBeforeRefine->nmse);
                            for (const auto& rr : t.train.refinement) {
                                std::printf(", round %d %.4f", rr.round, rr.train.nmse);
                                if (rr.heldout)
                                    std::printf(" / %.4f", rr.heldout->nmse);
                            }
                            std::printf("; kept %s\n", t.train.keptRound == 0
                                                           ? "the greedy stages (no round lowered the held-out nmse)"
                                                           : cat("round ", t.train.keptRound).c_str());
                        }
                    }
                    for (const auto& a : r.attention)
                        std::printf("\nattention, layer %d (%s keys, %s values, %d queries): relative L2 %.4f, top-8 "
                                    "overlap %.3f\n",
                                    a.layer, a.keys.c_str(), a.values.c_str(), a.fidelity.queries,
                                    a.fidelity.relativeL2, a.fidelity.top8Overlap);
                    for (const auto& n : r.notes)
                        std::printf("note: %s\n", n.c_str());
                    if (!o->out.empty())
                        std::printf("\nwrote %s\n", o->out.c_str());
                    if (run)
                        std::printf("recorded as run %lld\n", static_cast<long long>(run->id()));
                });
            }};
}

} // namespace gsrq::cli
