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

Command registerEval(CLI::App& root)
{
    struct Opts {
        std::string dump, codebooks;
        int beam = 0;
        bool json = false, dropNonFinite = false;
        BackendOptions backend;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("eval", "Encode a dump with a codebooks file and report the metrics");
    cmd->add_option("dump", o->dump, "KV dump with the tensors the codebooks were trained for")->required();
    cmd->add_option("--codebooks,-c", o->codebooks, "Codebooks file from gsrq train")->required();
    cmd->add_option("--beam", o->beam, "Beam width (default: the one used in training)");
    cmd->add_flag("--drop-nonfinite", o->dropNonFinite, "Drop rows holding NaN/Inf");
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    return {cmd, [o] {
                const auto file = readCodebookFile(o->codebooks);
                const KvDump dump = KvDump::open(o->dump);
                int beam = o->beam;
                if (beam == 0)
                    beam = file.metadata.count("beam") ? std::stoi(file.metadata.at("beam")) : 1;
                if (beam < 1 || beam > 256)
                    throwInvalid("--beam ", beam, ": must be between 1 and 256");
                auto backend = openBackend(o->backend, false);
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
