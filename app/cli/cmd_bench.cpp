#include "cli_common.h"
#include "clustering.h"
#include "commands.h"
#include "error.h"
#include "kv_dump.h"
#include "recording.h"
#include "synth.h"
#include "version.h"

#include <algorithm>
#include <cstdio>
#include <memory>

namespace gsrq::cli {

namespace {

double medianSeconds(const std::vector<IterationStats>& h)
{
    std::vector<double> s;
    for (const auto& it : h)
        s.push_back(it.seconds);
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
}

} // namespace

Command registerBenchCluster(CLI::App& root)
{
    struct Opts {
        std::int64_t rows = 100000;
        int dim = 128;
        int k = 256;
        int iters = 10;
        std::uint64_t seed = 0;
        BackendOptions backend;
        std::string input;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("bench-cluster",
                                    "Time KM and GSKM iterations (assign + accumulate + update) on one backend");
    cmd->add_option("--rows", o->rows, "Rows of synthetic Gaussian data")->capture_default_str();
    cmd->add_option("--dim", o->dim, "Features per row")->capture_default_str();
    cmd->add_option("--k", o->k, "Codewords")->capture_default_str();
    cmd->add_option("--iters", o->iters, "Iterations timed per method")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the data and of the initial rows")->capture_default_str();
    addBackendOptions(cmd, o->backend);
    cmd->add_option("--input", o->input, "Time on this 2-D .npy instead of synthetic data");
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    return {cmd, [o] {
                if (o->iters < 1)
                    throwInvalid("--iters ", o->iters, ": must be ≥ 1");
                MatrixRF x;
                std::string source;
                if (o->input.empty()) {
                    x = synthesize(SynthKind::Gaussian, o->rows, o->dim, o->seed);
                    source = "synthetic gaussian";
                } else {
                    const auto d = KvDump::open(o->input);
                    x = loadForClustering(d.only(), false).rows;
                    source = o->input;
                }
                ClusteringParams p;
                p.k = o->k;
                p.maxIterations = o->iters;
                p.seed = o->seed;
                auto backend = openBackend(o->backend, false);
                const nlohmann::ordered_json settings = {{"data", source}, {"rows", x.rows()},  {"dim", x.cols()},
                                                         {"k", o->k},      {"iters", o->iters}, {"seed", o->seed}};
                CliRun run("bench-cluster", settings.dump(), o->input,
                           o->input.empty() ? std::vector<std::string>{} : std::vector<std::string>{o->input},
                           backend->name(), backend->device(), "data");
                run.guard([&] {
                    nlohmann::ordered_json methods = nlohmann::ordered_json::object();
                    std::vector<MetricRow> rows;
                    for (Method m : {Method::KMeans, Method::GainShape}) {
                        const auto r = cluster(x, nullptr, m, p, *backend);
                        const double perIteration = medianSeconds(r.history);
                        methods[methodName(m)] = {{"seconds_per_iteration", perIteration},
                                                  {"iterations", r.iterations},
                                                  {"total_seconds", r.seconds},
                                                  {"final_objective", r.history.back().objective}};
                        rows.push_back({"final", methodName(m), "data", -1, -1, "seconds_per_iteration", perIteration});
                        rows.push_back({"final", methodName(m), "data", -1, -1, "iterations", double(r.iterations)});
                    }
                    if (run)
                        run->recordMetrics(rows);
                    run.done(methods.dump());
                    const double flops = 2.0 * static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * o->k;
                    if (o->json) {
                        printJson({{"tool", "gsrq"},
                                   {"version", kVersion},
                                   {"command", "bench-cluster"},
                                   {"data", source},
                                   {"rows", x.rows()},
                                   {"dim", x.cols()},
                                   {"k", o->k},
                                   {"backend", backend->name()},
                                   {"device", backend->device()},
                                   {"gemm_flop_per_iteration", flops},
                                   {"methods", methods}});
                        return;
                    }
                    std::printf("bench-cluster: %s, %lld × %lld, K=%d, %s (%s)\n", source.c_str(),
                                static_cast<long long>(x.rows()), static_cast<long long>(x.cols()), o->k,
                                backend->name().c_str(), backend->device().c_str());
                    for (const auto& [name, v] : methods.items()) {
                        const double s = v["seconds_per_iteration"].get<double>();
                        std::printf("  %-5s %.4f s/iteration (median of %d), %.1f GFLOP/s in the distance GEMM\n",
                                    name.c_str(), s, v["iterations"].get<int>() + 1, flops / s / 1e9);
                    }
                });
            }};
}

} // namespace gsrq::cli
