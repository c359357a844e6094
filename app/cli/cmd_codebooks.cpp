// eval: encode a dump with a codebooks file and report the metrics.
// codebooks: inspect or merge codebooks files.

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

// KIVI needs no codebooks: quantize, measure, record.
// --key-rope auto: after RoPE where the dump can rotate its keys.
void runKiviEvalCommand(const std::string& dumpPath, KiviEvalSettings s, bool autoKeyRope, bool json)
{
    const KvDump dump = KvDump::open(dumpPath);
    if (autoKeyRope)
        s.keyRope = keysCanBeRotated(dump) ? KeyRope::Post : KeyRope::AsDumped;
    checkKiviEval(dump, s); // before the run is recorded
    const auto settings = kiviEvalRunSettings(s);
    CliRun run("eval", settings.dump(), dump.path(), dump.files(), "cpu", "");
    run.guard([&] {
        const auto r = runKiviEval(dump, s, [&](const ProgressEvent& e) {
            run.progress(e);
            return !stopRequested();
        });
        if (r.cancelled)
            run.cancelled();
        if (run)
            run->recordKiviEval(r);
        run.done(kiviEvalRunSummary(r).dump());
        if (json) {
            nlohmann::ordered_json ts = nlohmann::ordered_json::array();
            for (const auto& t : r.tensors) {
                nlohmann::ordered_json m = {{"tensor", t.tensor},
                                            {"rows", t.rows},
                                            {"features", t.features},
                                            {"bpa", t.bits},
                                            {"rope_applied", t.ropeApplied}};
                for (const auto& [name, value] : namedMetrics(t.metrics))
                    m[name] = value;
                m["seconds"] = t.seconds;
                ts.push_back(m);
            }
            nlohmann::ordered_json att = nlohmann::ordered_json::array();
            for (const auto& a : r.attention)
                att.push_back(toJson(a));
            nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "eval"}};
            if (run)
                j["run_id"] = run->id();
            j["input"] = {{"file", dump.path()}};
            j["settings"] = settings;
            j["tensors"] = ts;
            j["attention"] = att;
            j["notes"] = r.notes;
            printJson(j);
            return;
        }
        std::printf(
            "%s with %s (KIVI: %d bit%s, groups of %d%s; keys per channel, everything else per token)\n  "
            "%-24s %-12s %8s %12s %10s %11s %9s %10s\n",
            dump.path().c_str(), kiviName(s.kivi).c_str(), s.kivi.bits, s.kivi.bits == 1 ? "" : "s", s.kivi.group,
            s.kivi.residual > 0 ? cat(", the last ", s.kivi.residual, " tokens of each sequence in FP16").c_str() : "",
            "tensor", "axis", "bits", "mse", "nmse", "gain_error", "cosine", "shrinkage");
        for (const auto& t : r.tensors) {
            const bool key = t.tensor.ends_with(".key");
            std::printf("  %-24s %-12s %8.4f %12.6g %10.6f %11.6g %9.6f %10.6f%s\n", t.tensor.c_str(),
                        key ? "per channel" : "per token", t.bits, t.metrics.mse, t.metrics.nmse, t.metrics.gainError,
                        t.metrics.cosine, t.metrics.shrinkage,
                        t.ropeApplied ? "  (after RoPE)" : (key ? "  (as dumped)" : ""));
        }
        for (const auto& a : r.attention)
            std::printf("attention, layer %d (%s keys, %s values, %d queries): relative L2 %.4f, top-8 overlap %.3f\n",
                        a.layer, a.keys.c_str(), a.values.c_str(), a.fidelity.queries, a.fidelity.relativeL2,
                        a.fidelity.top8Overlap);
        for (const auto& n : r.notes)
            std::printf("note: %s\n", n.c_str());
        if (run)
            std::printf("recorded as run %lld\n", static_cast<long long>(run->id()));
    });
}

} // namespace

Command registerEval(CLI::App& root)
{
    struct Opts {
        std::string dump, codebooks, method = "codebooks", tensors, layers, keyRope = "auto";
        int beam = 0;
        bool json = false, dropNonFinite = false, quiet = false;
        KiviEvalSettings kivi;
        BackendOptions backend;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("eval", "Encode a dump with a codebooks file, or quantize it with KIVI, and "
                                            "report the metrics");
    cmd->add_option("dump", o->dump, "KV dump with the tensors the codebooks were trained for")->required();
    cmd->add_option("--codebooks,-c", o->codebooks, "Codebooks file from gsrq train");
    cmd->add_option("--method", o->method, "codebooks (a --codebooks file), or kivi (no training)")
        ->capture_default_str();
    cmd->add_option("--beam", o->beam, "Beam width (default: the one used in training)");
    cmd->add_flag("--drop-nonfinite", o->dropNonFinite, "Drop rows holding NaN/Inf");
    auto* bits =
        cmd->add_option("--bits", o->kivi.kivi.bits, "KIVI: bits per quantized value, 1-8")->capture_default_str();
    auto* group = cmd->add_option("--group", o->kivi.kivi.group,
                                  "KIVI: tokens (keys) or channels (values) sharing a scale and zero")
                      ->capture_default_str();
    auto* residual =
        cmd->add_option("--residual", o->kivi.kivi.residual, "KIVI: the last N tokens of each sequence kept in FP16")
            ->capture_default_str();
    auto* tensors = cmd->add_option("--tensors", o->tensors, "KIVI: comma-separated globs (default: keys and values)");
    auto* layers = cmd->add_option("--layers", o->layers, "KIVI: layers, e.g. 0-3,7 (default: all)");
    auto* keyRope =
        cmd->add_option("--key-rope", o->keyRope,
                        "KIVI: as-dumped, or post: quantize pre-RoPE keys after RoPE, as a cache holds them")
            ->capture_default_str();
    auto* queries = cmd->add_option("--attention-queries", o->kivi.attentionQueries,
                                    "KIVI: query rows sampled for attention fidelity (0: skip)")
                        ->capture_default_str();
    auto* seed = cmd->add_option("--seed", o->kivi.seed, "KIVI: seed of the attention sample")->capture_default_str();
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress or backend notes on standard error");
    return {cmd, [o, bits, group, residual, tensors, layers, keyRope, queries, seed] {
                if (o->method == "kivi") {
                    if (!o->codebooks.empty())
                        throwInvalid("--codebooks: KIVI needs no codebooks (--method kivi)");
                    if (o->beam != 0)
                        throwInvalid("--beam: KIVI encodes no codes (--method kivi)");
                    if (o->dropNonFinite)
                        throwInvalid("--drop-nonfinite: KIVI groups consecutive tokens and keeps every row");
                    if (o->keyRope != "as-dumped" && o->keyRope != "post" && o->keyRope != "auto")
                        throwInvalid("--key-rope: '", o->keyRope, "' is not auto, post or as-dumped");
                    if (o->kivi.attentionQueries < 0)
                        throwInvalid("--attention-queries ", o->kivi.attentionQueries, ": must be 0 or more");
                    o->kivi.keyRope = o->keyRope == "post" ? KeyRope::Post : KeyRope::AsDumped;
                    o->kivi.tensorPatterns = splitList(o->tensors);
                    o->kivi.layers = o->layers;
                    runKiviEvalCommand(o->dump, o->kivi, o->keyRope == "auto", o->json);
                    return;
                }
                if (o->method != "codebooks")
                    throwInvalid("--method: '", o->method, "' is not codebooks or kivi");
                for (const auto* opt : {bits, group, residual, tensors, layers, keyRope, queries, seed})
                    if (opt->count())
                        throwInvalid(opt->get_name(), ": only with --method kivi");
                if (o->codebooks.empty())
                    throwInvalid("--codebooks: give the codebooks file to evaluate (or --method kivi)");
                const auto file = readCodebookFile(o->codebooks);
                const KvDump dump = KvDump::open(o->dump);
                int beam = o->beam;
                if (beam == 0)
                    beam = file.metadata.count("beam") ? std::stoi(file.metadata.at("beam")) : 1;
                if (beam < 1 || beam > 256)
                    throwInvalid("--beam ", beam, ": must be between 1 and 256");
                auto backend = openBackend(o->backend, o->quiet);
                const auto settings = evalRunSettings(o->codebooks, beam, o->dropNonFinite, file.metadata);
                CliRun run("eval", settings.dump(), dump.path(), dump.files(), backend->name(), backend->device());
                run.guard([&] {
                    const auto results = runEval(dump, file, beam, *backend, o->dropNonFinite);
                    if (run)
                        run->recordEval(results);
                    run.done();
                    if (o->json) {
                        nlohmann::ordered_json ts = nlohmann::ordered_json::array();
                        for (const auto& r : results)
                            ts.push_back(toJson(r));
                        nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "eval"}};
                        if (run)
                            j["run_id"] = run->id();
                        j["input"] = {{"file", dump.path()}};
                        j["codebooks"] = o->codebooks;
                        j["beam"] = beam;
                        j["tensors"] = ts;
                        printJson(j);
                        return;
                    }
                    std::printf("%s with %s (beam %d)\n  %-24s %12s %10s %11s %9s %10s\n", dump.path().c_str(),
                                o->codebooks.c_str(), beam, "tensor", "mse", "nmse", "gain_error", "cosine",
                                "shrinkage");
                    for (const auto& r : results)
                        std::printf("  %-24s %12.6g %10.6f %11.6g %9.6f %10.6f\n", r.tensor.c_str(), r.metrics.mse,
                                    r.metrics.nmse, r.metrics.gainError, r.metrics.cosine, r.metrics.shrinkage);
                });
            }};
}

Command registerCodebooks(CLI::App& root)
{
    struct Opts {
        std::string infoPath, out, dtype = "f32";
        std::vector<std::string> inputs;
        bool json = false, force = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("codebooks", "Inspect or merge codebooks files");
    cmd->require_subcommand(1);
    auto* info = cmd->add_subcommand("info", "Settings and tensors of a codebooks file");
    info->add_option("file", o->infoPath, "Codebooks file")->required();
    info->add_flag("--json", o->json, "Print one JSON object on stdout");
    auto* merge = cmd->add_subcommand("merge", "Join codebooks files trained with the same settings");
    merge->add_option("files", o->inputs, "Two or more codebooks files")->required();
    merge->add_option("-o,--out", o->out, "Merged file")->required();
    merge->add_option("--dtype", o->dtype, "Codebook dtype of the merged file: f32 or f16")->capture_default_str();
    merge->add_flag("--force", o->force, "Overwrite an existing output");
    return {cmd, [o, info, merge] {
                if (merge->parsed()) {
                    refuseOverwrite(o->out, o->force, "--out");
                    const auto f = mergeCodebookFiles(o->inputs);
                    writeCodebookFile(o->out, f, codebookDType(o->dtype));
                    std::fprintf(stderr, "wrote %s: %zu tensors from %zu files\n", o->out.c_str(), f.entries.size(),
                                 o->inputs.size());
                    return;
                }
                if (!info->parsed())
                    return;
                const auto f = readCodebookFile(o->infoPath);
                if (o->json) {
                    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
                    for (const auto& e : f.entries)
                        ts.push_back(
                            {{"tensor", e.tensor},
                             {"shape", {e.codebooks.subspaces, e.codebooks.stages, e.codebooks.k, e.codebooks.dim}},
                             {"features", e.codebooks.features()},
                             {"codes_rows", e.codes ? e.codes->rows() : 0}});
                    printJson({{"file", o->infoPath}, {"metadata", f.metadata}, {"tensors", ts}});
                    return;
                }
                std::printf("%s\n", o->infoPath.c_str());
                for (const auto& [k, v] : f.metadata)
                    std::printf("  %-16s %s\n", (k + ":").c_str(), v.c_str());
                std::printf("\n  %-28s %-22s %s\n", "tensor", "[M, R, K, D]", "codes");
                for (const auto& e : f.entries)
                    std::printf("  %-28s [%d, %d, %d, %d]%*s %s\n", e.tensor.c_str(), e.codebooks.subspaces,
                                e.codebooks.stages, e.codebooks.k, e.codebooks.dim, 4, "",
                                e.codes ? cat(e.codes->rows(), " rows").c_str() : "-");
            }};
}

} // namespace gsrq::cli
