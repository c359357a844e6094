#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/jobs/paper_check.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"
#include "progress_bar.h"
#include "recording.h"

#include <cstdio>
#include <memory>
#include <sstream>

namespace gsrq::cli {

namespace {

std::vector<double> parseDoubleList(const std::string& flag, const std::string& text)
{
    std::vector<double> out;
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, ',')) {
        try {
            std::size_t used = 0;
            out.push_back(std::stod(part, &used));
            if (used != part.size())
                throw std::invalid_argument(part);
        } catch (const std::exception&) {
            throwInvalid(flag, ": '", part, "' is not a number");
        }
    }
    if (out.empty())
        throwInvalid(flag, ": give at least one value");
    return out;
}

void printSweep(const char* axis, const std::vector<SweepPoint>& points)
{
    std::printf("%-6s %-6s %10s %11s %9s %10s %10s\n", axis, "method", "mse", "gain_error", "cosine", "shrinkage",
                "cos gain");
    for (const auto& p : points) {
        const auto& km = p.result.find(Method::KMeans)->metrics;
        for (const auto& m : p.result.methods) {
            const bool gs = m.method == Method::GainShape;
            std::printf("%-6d %-6s %10.4g %11.4g %9.4f %10.4f", p.value, methodName(m.method), m.metrics.mse,
                        m.metrics.gainError, m.metrics.cosine, m.metrics.shrinkage);
            if (gs)
                std::printf(" %+10.4f", m.metrics.cosine - km.cosine);
            std::printf("\n");
        }
    }
}

} // namespace

Command registerPaperCheck(CLI::App& root)
{
    struct Opts {
        PaperCheckSettings s;
        std::string dims = "16,32,64,128,256", ks = "64,256,1024", bpas = "0.375,0.75,1";
        BackendOptions backend;
        bool json = false, quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand(
        "paper-check",
        "The paper's random-normal sweeps (KM vs GSKM over D and K) and GSKM-RQ against the Shannon bound, on "
        "synthetic Gaussian data, with each qualitative claim marked as holding or not");
    cmd->add_option("--rows", o->s.rows, "Synthetic rows of the sweeps (256 features)")->capture_default_str();
    cmd->add_option("--iters", o->s.iterations, "Maximum iterations per clustering")->capture_default_str();
    cmd->add_option("--seed", o->s.seed, "Seed of the data and the starting rows")->capture_default_str();
    cmd->add_option("--dims", o->dims, "D values of the sweep at fixed K")->capture_default_str();
    cmd->add_option("--fixed-k", o->s.fixedK, "K of the D sweep")->capture_default_str();
    cmd->add_option("--ks", o->ks, "K values of the sweep at fixed D")->capture_default_str();
    cmd->add_option("--fixed-dim", o->s.fixedDim, "D of the K sweep")->capture_default_str();
    cmd->add_option("--bpas", o->bpas, "Bit rates of the RQ part (the paper's: 0.375, 0.75, 1, 2); '' skips it")
        ->capture_default_str();
    cmd->add_option("--rq-rows", o->s.rqTrainRows, "Training rows of the RQ part")->capture_default_str();
    cmd->add_option("--rq-heldout", o->s.rqHeldOutRows, "Held-out rows of the RQ part")->capture_default_str();
    cmd->add_option("--rq-iters", o->s.rqIterations, "Maximum iterations per RQ stage")->capture_default_str();
    cmd->add_option("--rq-beam", o->s.rqBeam, "Beam of GSKM-RQ's beam and refined held-out encodings")
        ->capture_default_str();
    cmd->add_option("--rq-refine", o->s.rqRefine, "Rounds of joint refinement of the refined column (0: none)")
        ->capture_default_str();
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No progress bar");
    return {
        cmd, [o] {
            auto& s = o->s;
            s.dims = parseIntList("--dims", o->dims, 1);
            s.ks = parseIntList("--ks", o->ks, 1);
            s.bpas = o->bpas.empty() ? std::vector<double>{} : parseDoubleList("--bpas", o->bpas);
            validatePaperCheck(s);
            auto backend = openBackend(o->backend, o->quiet);
            const auto settings = paperCheckRunSettings(s, *backend);
            CliRun run("paper-check", settings.dump(), "", {}, backend->name(), backend->device(),
                       "synthetic gaussian");
            run.guard([&] {
                ProgressBar bar(!o->quiet);
                const auto r = runPaperCheck(s, *backend, [&](const ProgressEvent& e) {
                    bar.update(e.fraction, e.what);
                    run.progress(e);
                    return !stopRequested();
                });
                bar.finish();
                if (run)
                    run->recordPaperCheck(r);
                const int holds = claimsHolding(r);
                const std::string summary = paperCheckSummary(r).dump();
                if (r.cancelled)
                    run.cancelled(summary);
                run.done(summary);
                if (o->json) {
                    nlohmann::ordered_json j = {{"tool", "gsrq"}, {"version", kVersion}, {"command", "paper-check"}};
                    if (run)
                        j["run_id"] = run->id();
                    j["settings"] = settings;
                    j.update(toJson(r));
                    printJson(j);
                    return;
                }
                std::printf("Synthetic i.i.d. N(0, 1) data, %lld rows × 256 features, up to %d iterations, "
                            "seed %llu, backend %s (%s)\n\n",
                            static_cast<long long>(s.rows), s.iterations, static_cast<unsigned long long>(s.seed),
                            backend->name().c_str(), backend->device().c_str());
                std::printf("KM vs GSKM over D at K = %d\n", s.fixedK);
                printSweep("D", r.dimSweep);
                std::printf("\nKM vs GSKM over K at D = %d\n", s.fixedDim);
                printSweep("K", r.kSweep);
                if (!r.rq.empty()) {
                    std::printf("\nHeld-out NMSE at the paper's bit rates (%lld training rows, %lld held out) beside "
                                "the Shannon bound 2^(-2·BPA): greedy encoding; GSKM-RQ's codebooks encoded with a "
                                "beam of %d; and after %d rounds of joint refinement, encoded with that beam\n",
                                static_cast<long long>(s.rqTrainRows), static_cast<long long>(s.rqHeldOutRows),
                                s.rqBeam, s.rqRefine);
                    std::printf("%6s %4s %3s %4s %9s %9s %9s %7s %9s %7s %9s %7s\n", "BPA", "D", "R", "K", "bound",
                                "KM-RQ", "GSKM-RQ", "÷bound", "beam", "÷bound", "refined", "÷bound");
                    for (const auto& p : r.rq)
                        std::printf("%6.3f %4d %3d %4d %9.4f %9.4f %9.4f %6.2fx %9.4f %6.2fx %9.4f %6.2fx\n", p.bpa,
                                    p.dim, p.stages, p.k, p.shannon, p.kmHeldOut, p.gskmHeldOut,
                                    p.gskmHeldOut / p.shannon, p.gskmBeamHeldOut, p.gskmBeamHeldOut / p.shannon,
                                    p.gskmRefinedHeldOut, p.gskmRefinedHeldOut / p.shannon);
                }
                std::printf("\nThe paper's claims on these figures (%d of %zu hold):\n", holds, r.claims.size());
                for (const auto& c : r.claims)
                    std::printf("  [%s] %s\n         %s\n", c.holds ? "holds" : "does not hold", c.text.c_str(),
                                c.detail.c_str());
                if (run)
                    std::printf("\nrecorded as run %lld\n", static_cast<long long>(run->id()));
            });
        }};
}

} // namespace gsrq::cli
