#include "cli_common.h"
#include "commands.h"
#include "error.h"
#include "progress_bar.h"
#include "recording.h"
#include "result_json.h"
#include "version.h"

#include <cstdio>
#include <memory>

namespace gsrq::cli {

namespace {

nlohmann::ordered_json settingsJson(const RunOptions& o, const ClusterBackend& backend)
{
    auto j = toJson(o.settings);
    j["weights"] = o.weights;
    j["tau"] = o.tau;
    j["drop_nonfinite"] = o.dropNonFinite;
    j["backend"] = backend.name();
    j["device"] = backend.device();
    return j;
}

void printHeader(const PreparedInput& in, const ClusterBackend& backend)
{
    std::printf("%s  tensor %s  [%lld × %lld]", in.dump.path().c_str(), in.data.name.c_str(),
                static_cast<long long>(in.data.rows.rows()), static_cast<long long>(in.data.rows.cols()));
    if (!in.data.droppedRows.empty())
        std::printf("  (%zu non-finite rows dropped)", in.data.droppedRows.size());
    std::printf("  backend %s (%s)\n", backend.name().c_str(), backend.device().c_str());
    if (in.weightMode != WeightMode::None)
        std::printf("weights %s: raw max/median %.1f, weight max/median %.2f\n", weightModeName(in.weightMode),
                    in.weightSummary.rawMax / std::max(in.weightSummary.rawMedian, 1e-300),
                    in.weightSummary.weightMax / std::max(in.weightSummary.weightMedian, 1e-300));
}

} // namespace

Command registerCompare(CLI::App& root)
{
    auto o = std::make_shared<RunOptions>();
    auto* cmd = root.add_subcommand("compare", "Cluster one tensor with KM and GSKM and compare their metrics");
    addRunOptions(cmd, *o);
    return {cmd, [o] {
                auto in = prepareInput(*o);
                auto backend = openBackend(o->backend, o->quiet);
                CliRun run("compare", settingsJson(*o, *backend).dump(), in.dump.path(), in.dump.files(),
                           backend->name(), backend->device(), in.data.name);
                run.guard([&] {
                    if (!o->json)
                        printHeader(in, *backend);
                    ProgressBar bar(!o->quiet);
                    const auto r =
                        runCompare(in.data.rows, in.weightPtr(), o->settings, *backend, [&](const ProgressEvent& e) {
                            bar.update(e.fraction, e.what);
                            run.progress(e);
                            return !stopRequested();
                        });
                    bar.finish();
                    if (run)
                        run->recordCompare(r, in.data.name);
                    nlohmann::ordered_json summary = nlohmann::ordered_json::object();
                    for (const auto& m : r.methods)
                        summary[methodName(m.method)] = toJson(m.metrics);
                    if (r.cancelled)
                        run.cancelled(summary.dump());
                    run.done(summary.dump());
                    if (o->json) {
                        nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "compare"}};
                        if (run)
                            j["run_id"] = run->id();
                        j["input"] = inputJson(in);
                        auto s = settingsJson(*o, *backend);
                        s["dim"] = r.dim;
                        j["settings"] = s;
                        j["blocks"] = r.blocks;
                        j.update(toJson(r));
                        printJson(j);
                        return;
                    }
                    std::printf("D=%d (%d block%s), K=%d, up to %d iterations, seed %llu%s\n\n", r.dim, r.blocks,
                                r.blocks == 1 ? "" : "s", o->settings.k, o->settings.iterations,
                                static_cast<unsigned long long>(o->settings.seed),
                                o->settings.residual ? ", on the 1st residual" : "");
                    printMethodTable(r);
                    if (run)
                        std::printf("\nrecorded as run %lld\n", static_cast<long long>(run->id()));
                });
            }};
}

Command registerSweep(CLI::App& root)
{
    struct Opts : RunOptions {
        std::string over;
        std::string values;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("sweep", "Compare KM and GSKM over a range of D or K");
    addRunOptions(cmd, *o);
    cmd->add_option("--over", o->over, "What to vary: dim or k")->required()->check(CLI::IsMember({"dim", "k"}));
    cmd->add_option("--values", o->values, "Comma-separated values, e.g. 16,32,64,128")->required();
    return {cmd, [o] {
                const auto values = parseIntList("--values", o->values);
                const SweepAxis axis = o->over == "dim" ? SweepAxis::Dim : SweepAxis::K;
                auto in = prepareInput(*o);
                auto backend = openBackend(o->backend, o->quiet);
                auto settings = settingsJson(*o, *backend);
                settings["over"] = o->over;
                settings["values"] = values;
                CliRun run("sweep", settings.dump(), in.dump.path(), in.dump.files(), backend->name(),
                           backend->device(), in.data.name);
                run.guard([&] {
                    if (!o->json)
                        printHeader(in, *backend);
                    ProgressBar bar(!o->quiet);
                    const auto points = runSweep(in.data.rows, in.weightPtr(), o->settings, axis, values, *backend,
                                                 [&](const ProgressEvent& e) {
                                                     bar.update(e.fraction, e.what);
                                                     run.progress(e);
                                                     return !stopRequested();
                                                 });
                    bar.finish();
                    if (run)
                        run->recordSweep(points, o->over, in.data.name);
                    if (points.size() < values.size() || (!points.empty() && points.back().result.cancelled))
                        run.cancelled();
                    run.done();
                    if (o->json) {
                        nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "sweep"}};
                        if (run)
                            j["run_id"] = run->id();
                        j["input"] = inputJson(in);
                        j["settings"] = settings;
                        nlohmann::ordered_json pts = nlohmann::ordered_json::array();
                        for (const auto& p : points) {
                            nlohmann::ordered_json pj = {{o->over, p.value}, {"blocks", p.result.blocks}};
                            pj.update(toJson(p.result, false));
                            pts.push_back(pj);
                        }
                        j["points"] = pts;
                        printJson(j);
                        return;
                    }
                    for (const auto& p : points) {
                        std::printf("\n%s = %d  (%d block%s)\n", o->over.c_str(), p.value, p.result.blocks,
                                    p.result.blocks == 1 ? "" : "s");
                        printMethodTable(p.result, "  ");
                    }
                    if (run)
                        std::printf("\nrecorded as run %lld\n", static_cast<long long>(run->id()));
                });
            }};
}

} // namespace gsrq::cli
