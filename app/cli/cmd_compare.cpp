#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/io/safetensors.h"
#include "core/jobs/model_compare.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"
#include "core/jobs/train_job.h"
#include "progress_bar.h"
#include "recording.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

namespace gsrq::cli {

namespace {

nlohmann::ordered_json settingsJson(const RunOptions& o, const ClusterBackend& backend)
{
    return compareRunSettings(o.settings, o.weights, o.tau, o.dropNonFinite, backend);
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

// gsrq compare DUMP --tensors GLOBS: KM and GSKM on each matched tensor with the same settings,
// their metrics side by side with GSKM − KM, as a table, JSON or CSV; one run recorded.
void compareModel(RunOptions& o, const std::string& globs, const std::string& csvPath)
{
    if (!o.tensor.empty())
        throwInvalid("--tensor and --tensors: give one or the other");
    ModelCompareSettings ms;
    ms.weights = parseMethodOptions(o);
    ms.compare = o.settings;
    ms.tau = o.tau;
    ms.dropNonFinite = o.dropNonFinite;
    const KvDump dump = KvDump::open(o.dump);
    // --residual: the 1st residuals instead of the tensors.
    const auto targets = modelTargets(dump, splitList(globs), !o.settings.residual, o.settings.residual);
    validateModelCompare(dump, targets, ms); // every tensor checked before any work starts
    std::vector<std::string> names;
    for (const auto& t : targets)
        names.push_back(t.tensor);
    auto backend = openBackend(o.backend, o.quiet);
    const auto settings = modelCompareRunSettings(ms, globs, !o.settings.residual, o.settings.residual, *backend);
    CliRun run("compare", settings.dump(), dump.path(), dump.files(), backend->name(), backend->device());
    run.guard([&] {
        ProgressBar bar(!o.quiet);
        const auto model = runModelCompare(
            dump, targets, ms, *backend,
            [&](const ProgressEvent& e) {
                bar.update(e.fraction, e.what);
                run.progress(e);
                return !stopRequested();
            },
            [&](const ModelCell& cell) {
                if (run)
                    run->recordCompare(cell.result, cell.target.label());
            });
        std::vector<CompareResult> results;
        for (const auto& cell : model.cells)
            results.push_back(cell.result);
        bar.finish();
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        std::string csv = "tensor,layer,kind,metric,km,gskm,delta,delta_percent,better\n";
        for (std::size_t i = 0; i < results.size(); ++i) {
            const auto& r = results[i];
            const auto& t = dump.get(names[i]);
            nlohmann::ordered_json row = {{"tensor", names[i]}, {"layer", t.layer}, {"kind", kvKindName(t.kind)}};
            for (const auto& m : r.methods)
                row[methodName(m.method)] = toJson(m.metrics);
            const auto* km = r.find(Method::KMeans);
            const auto* gs = r.find(Method::GainShape);
            if (km && gs) {
                nlohmann::ordered_json deltas = nlohmann::ordered_json::object();
                for (const auto& d : metricDeltas(km->metrics, gs->metrics)) {
                    deltas[d.name] = {{"delta", d.delta},
                                      {"delta_percent", std::isnan(d.deltaPercent)
                                                            ? nlohmann::ordered_json(nullptr)
                                                            : nlohmann::ordered_json(d.deltaPercent)},
                                      {"better", d.better > 0   ? "gskm"
                                                 : d.better < 0 ? "km"
                                                                : "tie"}};
                    csv += cat(names[i], ",", t.layer, ",", kvKindName(t.kind), ",", d.name, ",", csvNumber(d.a), ",",
                               csvNumber(d.b), ",", csvNumber(d.delta), ",", csvNumber(d.deltaPercent), ",",
                               d.better > 0   ? "gskm"
                               : d.better < 0 ? "km"
                                              : "tie",
                               "\n");
                }
                row["gskm_minus_km"] = deltas;
            }
            rows.push_back(row);
        }
        const bool cancelled = model.cancelled;
        const auto summary = modelCompareRunSummary(model);
        if (cancelled)
            run.cancelled(summary.dump());
        if (!csvPath.empty())
            writeFileAtomic(csvPath, {csv});
        run.done(summary.dump());
        if (o.json) {
            nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "compare"}};
            if (run)
                j["run_id"] = run->id();
            j["input"] = {{"file", dump.path()}, {"tensors", names}};
            if (auto it = dump.metadata().find("synthetic"); it != dump.metadata().end())
                j["input"]["synthetic"] = it->second;
            j["settings"] = settings;
            j["tensors"] = rows;
            printJson(j);
            return;
        }
        std::printf("%s: %zu tensors, D=%d, K=%d, up to %d iterations, seed %llu, weights %s%s\n\n",
                    dump.path().c_str(), names.size(), o.settings.dim, o.settings.k, o.settings.iterations,
                    static_cast<unsigned long long>(o.settings.seed), o.weights.c_str(),
                    o.settings.residual ? ", on the 1st residual" : "");
        std::printf("  %-22s %11s %11s %9s %8s   %9s %9s %9s   %10s %10s %8s\n", "tensor", "nmse km", "nmse gskm", "Δ%",
                    "better", "cos km", "cos gskm", "Δ", "gain km", "gain gskm", "Δ%");
        for (std::size_t i = 0; i < results.size(); ++i) {
            const auto* km = results[i].find(Method::KMeans);
            const auto* gs = results[i].find(Method::GainShape);
            if (!km || !gs)
                continue;
            const auto d = metricDeltas(km->metrics, gs->metrics);
            std::printf("  %-22s %11.5g %11.5g %+8.2f%% %8s   %9.6f %9.6f %+9.6f   %10.5g %10.5g %+7.2f%%\n",
                        names[i].c_str(), d[1].a, d[1].b, d[1].deltaPercent,
                        d[1].better > 0   ? "gskm"
                        : d[1].better < 0 ? "km"
                                          : "tie",
                        d[3].a, d[3].b, d[3].delta, d[2].a, d[2].b, d[2].deltaPercent);
        }
        std::printf("\nGSKM has the lower nmse on %d of %zu tensors\n", summary["gskm_lower_nmse"].get<int>(),
                    results.size());
        if (!csvPath.empty())
            std::printf("wrote %s\n", csvPath.c_str());
        if (run)
            std::printf("recorded as run %lld\n", static_cast<long long>(run->id()));
    });
}

} // namespace

Command registerCompare(CLI::App& root)
{
    struct Opts : RunOptions {
        std::string tensors, csv;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("compare", "Cluster one tensor with KM and GSKM and compare their metrics");
    addRunOptions(cmd, *o);
    cmd->add_option("--tensors", o->tensors,
                    "Many tensors: comma-separated globs, e.g. 'layers.*.*' (every layer's key and value)");
    cmd->add_option("--csv", o->csv, "With --tensors: also write the metrics and GSKM − KM as CSV");
    return {cmd, [o] {
                if (!o->tensors.empty()) {
                    compareModel(*o, o->tensors, o->csv);
                    return;
                }
                if (!o->csv.empty())
                    throwInvalid("--csv goes with --tensors");
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
                    const auto summary = compareRunSummary(r);
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
                const auto values = parseIntList("--values", o->values, 1);
                const SweepAxis axis = o->over == "dim" ? SweepAxis::Dim : SweepAxis::K;
                auto in = prepareInput(*o);
                auto backend = openBackend(o->backend, o->quiet);
                const auto settings =
                    sweepRunSettings(o->settings, o->weights, o->tau, o->dropNonFinite, *backend, axis, values);
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
