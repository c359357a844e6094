#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/stats.h"
#include "core/base/version.h"
#include "core/cluster/clustering.h"
#include "core/cluster/nearest_kernels.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_kernels.h"
#include "core/io/kv_dump.h"
#include "core/io/npy.h"
#include "core/io/synth.h"
#include "core/jobs/run_records.h"
#include "gpu/cluster/cuda_backend.h"
#include "gpu/cluster/pass_costs.h"
#include "gpu/decode/roofline.h"
#include "gpu/device/device.h"
#include "recording.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

namespace gsrq::cli {

namespace {

// Row weights from synthetic gradient norms: log-normal (σ = 1.5), whose max/median over 262,144
// rows is in the hundreds, like the real gradients' spread that the weights are there to tame.
Eigen::VectorXf syntheticGradientWeights(std::int64_t rows, WeightMode mode, std::uint64_t seed)
{
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
    std::lognormal_distribution<double> norm(0.0, 1.5);
    Eigen::VectorXd norms(rows);
    for (auto& v : norms)
        v = norm(rng);
    return weightsFromNorms(norms, mode).cast<float>();
}

double medianSeconds(const std::vector<IterationStats>& h)
{
    std::vector<double> s;
    for (const auto& it : h)
        s.push_back(it.seconds);
    return median(s);
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
        bool json = false, quiet = false;
        bool warmup = false;
        bool reseedEmpty = false;
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
    cmd->add_flag("--warmup", o->warmup,
                  "Run each method once untimed first (threads started, memory touched), as a benchmark's "
                  "warm-up");
    cmd->add_flag("--reseed-empty", o->reseedEmpty, "Re-seed empty clusters by splitting the largest (as FAISS)");
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No backend notes on standard error");
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
                p.reseedEmpty = o->reseedEmpty;
                auto backend = openBackend(o->backend, o->quiet);
                const auto settings = benchClusterRunSettings(source, x.rows(), x.cols(), o->k, o->iters, o->seed);
                CliRun run("bench-cluster", settings.dump(), o->input,
                           o->input.empty() ? std::vector<std::string>{} : std::vector<std::string>{o->input},
                           backend->name(), backend->device(), "data");
                run.guard([&] {
                    nlohmann::ordered_json methods = nlohmann::ordered_json::object();
                    std::vector<MetricRow> rows;
                    for (Method m : {Method::KMeans, Method::GainShape}) {
                        if (o->warmup)
                            cluster(x, nullptr, m, p, *backend);
                        const auto r = cluster(x, nullptr, m, p, *backend);
                        const double perIteration = medianSeconds(r.history);
                        // The share of the n × K scores every pass skipped by exact bounds, over the
                        // whole clustering (0 with --exact-bounds off).
                        double skipped = 0;
                        for (const auto& it : r.history)
                            skipped += it.skipped / double(r.history.size());
                        methods[methodName(m)] = {{"seconds_per_iteration", perIteration},
                                                  {"iterations", r.iterations},
                                                  {"total_seconds", r.seconds},
                                                  {"skipped", skipped},
                                                  {"final_objective", r.history.back().objective}};
                        rows.push_back({"final", methodName(m), "data", -1, -1, "seconds_per_iteration", perIteration});
                        rows.push_back({"final", methodName(m), "data", -1, -1, "iterations", double(r.iterations)});
                    }
                    if (run)
                        run->recordMetrics(rows);
                    run.done(methods.dump());
                    const double flops = 2.0 * static_cast<double>(x.rows()) * static_cast<double>(x.cols()) * o->k;
                    // On the CPU: the assignment kernel's build and the machine's FMA peak with the
                    // same threads, measured now (0 and "" on a GPU).
                    const bool cpu = backend->name() == "cpu";
                    const std::string kernelName = cpu ? nearest::bestNearest().isa : "";
                    const double peak = cpu ? measureFmaRate(o->backend.threads, cpudecode::bestKernels()) : 0.0;
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
                                   {"kernel", kernelName},
                                   {"exact_bounds", backend->exactBounds()},
                                   {"warmup", o->warmup},
                                   {"fma_peak_flops", peak},
                                   {"methods", methods}});
                        return;
                    }
                    std::printf("bench-cluster: %s, %lld × %lld, K=%d, %s (%s)\n", source.c_str(),
                                static_cast<long long>(x.rows()), static_cast<long long>(x.cols()), o->k,
                                backend->name().c_str(), backend->device().c_str());
                    for (const auto& [name, v] : methods.items()) {
                        const double s = v["seconds_per_iteration"].get<double>();
                        std::printf("  %-5s %.4f s/iteration (median of %d), %.1f GFLOP/s in the distance product",
                                    name.c_str(), s, v["iterations"].get<int>() + 1, flops / s / 1e9);
                        if (peak > 0)
                            std::printf(" (%.0f%% of the FMA peak)", 100 * flops / s / peak);
                        std::printf("; %.3f s in all, %.0f%% of the scores skipped by exact bounds\n",
                                    v["total_seconds"].get<double>(), 100 * v["skipped"].get<double>());
                    }
                    if (peak > 0)
                        std::printf("  kernel %s; FMA peak %.1f GFLOP/s (%s fused multiply-adds from registers, "
                                    "the bound of any SGEMM, measured now with the same threads)\n",
                                    kernelName.c_str(), peak / 1e9, cpudecode::bestKernels().isa);
                });
            }};
}

namespace {

// bench-train --model-device: one pass's launches, their bytes and roofline times on a GPU's model,
// and the layer's: per block of D columns and stage, a clustering of at most iters + 1 passes with
// an update after all but the last (and GSKM's start, one pass by direction).
nlohmann::ordered_json latencyJson(const gpu::ClusterPassLatency& latency, int members, double layer)
{
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& l : latency.launches)
        rows.push_back({{"launch", l.kernel},
                        {"blocks", l.blocks},
                        {"blocks_per_sm", l.blocksPerSm},
                        {"waves", l.waves},
                        {"chain_seconds", l.chain},
                        {"bandwidth_seconds", l.bandwidth},
                        {"seconds", l.seconds},
                        {"bound", l.bound}});
    return {{"members", members},
            {"launches", rows},
            {"pass_seconds", latency.passSeconds},
            {"update_seconds", latency.updateSeconds},
            {"layer_seconds_at_most", layer}};
}

void printTrainingModel(const gpu::DeviceModel& m, const gpu::ClusterPassCase& c, std::int64_t clusterings, int iters,
                        bool tf32, bool json, int subspaces)
{
    const auto rates = gpu::decodeRates(m.info, m.copyBytesPerSecond);
    const double gemmRate = tf32 ? m.tf32Flops : m.info.peakFp32Flops;
    auto at = [&](const gpu::KernelCost& k) {
        DecodeCosts costs;
        costs.memoryBytes = k.hbmBytes;
        costs.sharedBytes = k.sharedBytes;
        costs.flops = k.flops;
        DecodeRates r = rates;
        r.flops = k.library || k.tensorCores ? gemmRate : rates.flops;
        return roofline(costs, r);
    };
    auto seconds = [&](const std::vector<gpu::KernelCost>& launches) {
        double t = 0;
        for (const auto& k : launches)
            t += at(k).seconds;
        return t;
    };
    const auto pass = gpu::clusterPassCosts(c);
    const auto update = gpu::centroidUpdateCost(c);
    gpu::ClusterPassCase start = c; // GSKM's start: a plain pass by direction, no shape sums or metrics
    start.shapeSums = start.rowMetrics = start.held = false;
    const double passSeconds = seconds(pass), updateSeconds = at(update).seconds;
    const double startSeconds = c.shapeSums ? seconds(gpu::clusterPassCosts(start)) : 0.0;
    const double layer =
        double(clusterings) * (double(iters + 1) * passSeconds + double(iters) * updateSeconds + startSeconds);
    double hbm = 0;
    for (const auto& k : pass)
        hbm += k.hbmBytes;
    auto all = pass;
    all.push_back(update);

    // The latency model of the passes as the CUDA backend runs them: a stage's subspaces together (up
    // to 16 at once), its GSKM starts one member at a time.
    gpu::ClusterPassCase batch = c;
    batch.members = std::min(subspaces, 16);
    const std::size_t sharedPerSm = m.sharedOptin + 1024;
    // Every SM's shared memory at 128 bytes a cycle.
    const double sharedRate = double(m.info.multiprocessors) * 128.0 * m.info.clockHz;
    const auto latency =
        gpu::clusterPassLatency(batch, m.info.multiprocessors, sharedPerSm, m.copyBytesPerSecond, gemmRate, sharedRate);
    const auto startLatency = c.shapeSums ? gpu::clusterPassLatency(start, m.info.multiprocessors, sharedPerSm,
                                                                    m.copyBytesPerSecond, gemmRate, sharedRate)
                                          : gpu::ClusterPassLatency{};
    const std::int64_t stages = subspaces > 0 ? clusterings / subspaces : clusterings;
    const double batches = double(stages) * std::ceil(double(subspaces) / batch.members);
    const double latencyLayer =
        batches * (double(iters + 1) * latency.passSeconds + double(iters) * latency.updateSeconds) +
        double(clusterings) * startLatency.passSeconds;
    // The same model with one clustering at a time, as the backend ran before it batched (the layer
    // the device runs so far have timed).
    const auto single =
        gpu::clusterPassLatency(c, m.info.multiprocessors, sharedPerSm, m.copyBytesPerSecond, gemmRate, sharedRate);
    const double singleLayer = double(clusterings) * (double(iters + 1) * single.passSeconds +
                                                      double(iters) * single.updateSeconds + startLatency.passSeconds);
    if (json) {
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        for (const auto& k : all) {
            const Roofline t = at(k);
            rows.push_back({{"launch", k.kernel},
                            {"hbm_bytes", k.hbmBytes},
                            {"shared_bytes", k.sharedBytes},
                            {"flops", k.flops},
                            {"roofline_seconds", t.seconds},
                            {"bound", t.bound}});
        }
        printJson({{"tool", "gsrq"},
                   {"version", kVersion},
                   {"command", "bench-train"},
                   {"modelled", true},
                   {"device", m.info.name},
                   {"hbm_source", m.source},
                   {"gemm", tf32 ? "tf32" : "fp32"},
                   {"scores", c.fused ? "fused" : "gemm+argmax"},
                   {"launches", rows},
                   {"pass_seconds", passSeconds},
                   {"update_seconds", updateSeconds},
                   {"start_pass_seconds", startSeconds},
                   {"clusterings", clusterings},
                   {"max_passes", clusterings * (iters + 1 + (c.shapeSums ? 1 : 0))},
                   {"layer_seconds_at_most", layer},
                   {"latency_model", latencyJson(latency, batch.members, latencyLayer)},
                   {"latency_model_one_at_a_time", latencyJson(single, 1, singleLayer)}});
        return;
    }
    std::printf("bench-train, modelled (no timing), on the %s: %lld rows, D=%d, K=%d, %s%s; %s\n"
                "  %-16s %12s %12s %12s %10s  %s\n",
                m.info.name.c_str(), (long long)c.n, c.d, c.K, c.shapeSums ? "GSKM" : "KM",
                c.weighted ? ", weighted" : "", m.source.c_str(), "launch", "HBM MB", "shared MB", "GFLOP", "µs",
                "bound");
    for (const auto& k : all) {
        const Roofline t = at(k);
        std::printf("  %-16s %12.2f %12.2f %12.2f %10.1f  %s\n", k.kernel.c_str(), k.hbmBytes / 1e6,
                    k.sharedBytes / 1e6, k.flops / 1e9, t.seconds * 1e6, t.bound.c_str());
    }
    std::printf("per pass and its update (launches back to back, each at its roofline, no launch gaps): %.1f µs, "
                "%.1f MB from HBM; the layer (%lld clusterings of at most %d passes and %d updates%s): at most "
                "%.2f s (the GEMM in %s at %.0f TFLOP/s)\n",
                (passSeconds + updateSeconds) * 1e6, hbm / 1e6, (long long)clusterings, iters + 1, iters,
                c.shapeSums ? ", and GSKM's start" : "", layer, tf32 ? "TF32" : "FP32", gemmRate / 1e12);
    std::printf("latency model (estimates: a launch 3 µs, HBM 0.7 µs, L2 0.3 µs, a shared access 30 ns), a pass of "
                "%d clusterings together:\n  %-24s %8s %6s %6s %10s %10s  %s\n",
                batch.members, "launch", "blocks", "per SM", "waves", "chain µs", "µs", "bound");
    // One line a kernel (a chunk's SGEMM and argmax repeat per chunk): its first launch, how many, all of them.
    std::vector<std::string> order;
    std::map<std::string, std::pair<int, double>> totals;
    for (const auto& l : latency.launches) {
        auto [it, fresh] = totals.try_emplace(l.kernel, 0, 0.0);
        if (fresh)
            order.push_back(l.kernel);
        ++it->second.first;
        it->second.second += l.seconds;
    }
    for (const auto& name : order) {
        const auto& l = *std::find_if(latency.launches.begin(), latency.launches.end(),
                                      [&](const gpu::ClusterLaunchLatency& x) { return x.kernel == name; });
        const auto [count, total] = totals[name];
        std::printf("  %-24s %8lld %6d %6d %10.2f %10.1f  %-9s ×%d: %.1f µs\n", name.c_str(), (long long)l.blocks,
                    l.blocksPerSm, l.waves, l.chain * 1e6, l.seconds * 1e6, l.bound.c_str(), count, total * 1e6);
    }
    std::printf("per batched pass %.1f µs and update %.1f µs; the layer (%.0f batches of at most %d passes%s): "
                "%.2f s at most\n",
                latency.passSeconds * 1e6, latency.updateSeconds * 1e6, batches, iters + 1,
                c.shapeSums ? ", and each clustering's GSKM start alone" : "", latencyLayer);
    std::printf("the same model one clustering at a time: a pass %.1f µs, an update %.1f µs, the layer %.2f s at "
                "most\n",
                single.passSeconds * 1e6, single.updateSeconds * 1e6, singleLayer);
}

} // namespace

Command registerBenchTrain(CLI::App& root)
{
    struct Opts {
        std::int64_t rows = 262144;
        int features = 1024, dim = 128, stages = 16, k = 256, iters = 40;
        std::string method = "gskm", data = "kv", weights = "grad-log", saveData, modelDevice;
        std::uint64_t seed = 0;
        BackendOptions backend;
        bool json = false, quiet = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("bench-train", "Time a whole GSRQ layer's training on generated (synthetic) data");
    cmd->add_option("--model-device", o->modelDevice,
                    "No training: one assignment pass's launches as the CUDA backend makes them, their bytes "
                    "(the counted-bytes model) and roofline times on this GPU's model (" +
                        gpu::deviceModelNames() +
                        "), and the layer's at most features/dim × stages × iters passes; "
                        "then the latency model of a pass of the subspaces together (each "
                        "launch's waves and chain) and its layer");
    cmd->add_option("--rows", o->rows, "Rows (tokens)")->capture_default_str();
    cmd->add_option("--features", o->features, "Features per row (heads × head_dim)")->capture_default_str();
    cmd->add_option("--dim", o->dim, "Subspace width D")->capture_default_str();
    cmd->add_option("--stages", o->stages, "Residual stages R")->capture_default_str();
    cmd->add_option("--k", o->k, "Codewords per stage K")->capture_default_str();
    cmd->add_option("--iters", o->iters, "Maximum iterations per stage (a stage stops early when no label changes)")
        ->capture_default_str();
    cmd->add_option("--method", o->method, "gskm or km")->capture_default_str();
    cmd->add_option("--data", o->data, "Synthetic data: kv (key-like) or gaussian")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the data and the training")->capture_default_str();
    cmd->add_option("--weights", o->weights,
                    "none, grad-raw or grad-log: row weights from synthetic gradient norms (log-normal, as real "
                    "gradients' heavy tail)")
        ->capture_default_str();
    cmd->add_option("--save-data", o->saveData,
                    "Also write the data and weights as PREFIX.x.npy and PREFIX.w.npy (for an outside baseline)");
    addBackendOptions(cmd, o->backend);
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--quiet,-q", o->quiet, "No backend notes on standard error");
    return {cmd, [o] {
                const Method method = parseMethod("--method", o->method);
                const auto kind = synthKindFromName(o->data);
                if (!kind)
                    throwInvalid("--data ", o->data, ": expected kv or gaussian");
                if (o->rows < 1 || o->features < 1)
                    throwInvalid("--rows and --features must be ≥ 1");
                if (o->iters < 1)
                    throwInvalid("--iters ", o->iters, ": must be ≥ 1");
                RqSettings s;
                s.dim = o->dim;
                s.stages = o->stages;
                s.k = o->k;
                s.iterations = o->iters;
                s.seed = o->seed;
                s.method = method;
                validateRq(s, o->rows, o->features);
                const auto wmode = weightModeFromName(o->weights);
                if (!wmode)
                    throwInvalid("--weights ", o->weights, ": expected none, grad-raw or grad-log");
                if (!o->modelDevice.empty()) {
                    const auto* model = gpu::findDeviceModel(o->modelDevice);
                    if (!model)
                        throwInvalid("--model-device '", o->modelDevice, "': one of ", gpu::deviceModelNames());
                    if (!o->saveData.empty())
                        throwInvalid("--save-data: with --model-device no data is made");
                    gpu::ClusterPassCase c{o->rows, s.dim, s.k, *wmode != WeightMode::None, method == Method::GainShape,
                                           true,    256,   true};
                    // The backend's fused kernel where it would take the pass (TF32, the shape within its limits).
                    c.fused = o->backend.tf32 && !o->backend.noFusedArgmax &&
                              gpu::fusedArgmaxFits(s.k, s.dim, model->sharedOptin);
                    if (c.fused)
                        c.fusedBlocks =
                            gpu::fusedArgmaxGrid(c.n, s.dim, 1, model->info.multiprocessors,
                                                 gpu::fusedArgmaxBlocksPerSm(s.k, s.dim, model->sharedOptin + 1024));
                    printTrainingModel(*model, c, std::int64_t(o->features / s.dim) * s.stages, s.iterations,
                                       o->backend.tf32, o->json, o->features / s.dim);
                    return;
                }
                auto backend = openBackend(o->backend, o->json || o->quiet);
                const MatrixRF x = synthesize(*kind, o->rows, o->features, o->seed);
                const Eigen::VectorXf w = syntheticGradientWeights(o->rows, *wmode, o->seed);
                const float* wp = *wmode == WeightMode::None ? nullptr : w.data();
                if (!o->saveData.empty()) {
                    writeNpy(o->saveData + ".x.npy", x);
                    writeNpy(o->saveData + ".w.npy", MatrixRF(Eigen::Map<const MatrixRF>(w.data(), w.size(), 1)));
                }

                // Warm-up: one pass on the first block (device start-up, cuBLAS, allocations).
                {
                    ClusteringParams p;
                    p.k = s.k;
                    p.maxIterations = 1;
                    p.seed = s.seed;
                    const MatrixRF first = x.leftCols(s.dim);
                    cluster(first, wp, s.method, p, *backend);
                }
                // Every assignment pass with the update after it. A backend that clusters a stage's
                // subspaces together reports one pass for all its members, each member's iteration with
                // the pass's time: consecutive iterations of one stage, of rising subspaces and the same
                // time, are one pass, and a clustering's iteration takes its share of it.
                struct Pass {
                    int stage = 0, lastSubspace = 0, members = 0;
                    double seconds = 0;
                };
                std::vector<Pass> passes;
                const auto* cuda = gpu::cudaStats(*backend);
                const gpu::CudaBackendStats cuda0 = cuda ? *cuda : gpu::CudaBackendStats{};
                const auto r = trainResidualQuantizer(x, wp, s, *backend, [&](const ProgressEvent& e) {
                    Pass* last = passes.empty() ? nullptr : &passes.back();
                    if (last && last->stage == e.stage && last->lastSubspace < e.subspace &&
                        last->seconds == e.iteration.seconds) {
                        last->lastSubspace = e.subspace;
                        ++last->members;
                    } else {
                        passes.push_back({e.stage, e.subspace, 1, e.iteration.seconds});
                    }
                    return true;
                });
                std::vector<double> passSeconds; // each clustering iteration's share of its pass
                int mostMembers = 0;
                for (const Pass& p : passes) {
                    passSeconds.insert(passSeconds.end(), std::size_t(p.members), p.seconds / p.members);
                    mostMembers = std::max(mostMembers, p.members);
                }
                const std::size_t iterationsTimed = passSeconds.size();
                const double perIteration = median(passSeconds);
                const double devicePassSeconds = cuda ? cuda->passSeconds - cuda0.passSeconds : 0.0;
                // The time outside the passes, by what it went to (CudaBackendStats); "core": the rest.
                nlohmann::ordered_json hostBreakdown = nullptr;
                if (cuda) {
                    const double bind = cuda->bindSeconds - cuda0.bindSeconds,
                                 select = cuda->selectSeconds - cuda0.selectSeconds,
                                 start = cuda->startSeconds - cuda0.startSeconds,
                                 read = cuda->readSeconds - cuda0.readSeconds,
                                 residual = cuda->residualSeconds - cuda0.residualSeconds;
                    hostBreakdown = {{"bind", bind},
                                     {"select_blocks", select},
                                     {"clustering_start", start},
                                     {"read_back", read},
                                     {"residual_and_metrics", residual},
                                     {"core", r.seconds - devicePassSeconds - bind - select - start - read - residual}};
                }
                const double flopPerPass = 2.0 * double(o->rows) * double(s.k) * double(s.dim);
                const double achieved = perIteration > 0 ? flopPerPass / perIteration : 0;
                double peak = 0;
                const std::string deviceName = backend->device();
                if (cuda) {
                    const auto q = gpu::queryDevices();
                    for (const auto& d : q.devices)
                        if (d.index == o->backend.device)
                            peak = d.peakFp32Flops;
                }
                const int subspaces = o->features / s.dim;
                if (o->json) {
                    printJson({{"tool", "gsrq"},
                               {"version", kVersion},
                               {"command", "bench-train"},
                               {"data", cat("synthetic ", o->data)},
                               {"rows", o->rows},
                               {"features", o->features},
                               {"dim", s.dim},
                               {"stages", s.stages},
                               {"k", s.k},
                               {"iters", s.iterations},
                               {"method", methodName(s.method)},
                               {"weights", cat(o->weights, *wmode == WeightMode::None ? "" : " (synthetic gradients)")},
                               {"backend", backend->name()},
                               {"device", deviceName},
                               {"bits_per_activation", bitsPerActivation(s.dim, s.stages, s.k)},
                               {"layer_seconds", r.seconds},
                               {"seconds_per_iteration", perIteration},
                               {"iterations_timed", iterationsTimed},
                               {"passes_timed", passes.size()},
                               {"most_clusterings_per_pass", mostMembers},
                               // Passes whose scores and argmax were one fused tensor-core launch.
                               {"fused_passes",
                                cuda ? nlohmann::ordered_json(cuda->fusedPasses - cuda0.fusedPasses) : nullptr},
                               {"assignment_flop_per_iteration", flopPerPass},
                               {"achieved_flops", achieved},
                               {"peak_fp32_flops", peak},
                               {"fraction_of_peak", peak > 0 ? nlohmann::ordered_json(achieved / peak) : nullptr},
                               {"nmse", r.metrics.nmse},
                               // The CUDA backend's passes (device work, launches, transfers) and the rest
                               // (the host's updates between them); null on the CPU.
                               {"device_pass_seconds", cuda ? nlohmann::ordered_json(devicePassSeconds) : nullptr},
                               {"host_seconds", cuda ? nlohmann::ordered_json(r.seconds - devicePassSeconds) : nullptr},
                               {"host_seconds_by_call", hostBreakdown}});
                    return;
                }
                std::printf("bench-train: synthetic %s data, %lld × %d, D=%d (%d subspaces), R=%d, K=%d, %d "
                            "iterations, %s, %s (%s)\n",
                            o->data.c_str(), static_cast<long long>(o->rows), o->features, s.dim, subspaces, s.stages,
                            s.k, s.iterations, methodName(s.method), backend->name().c_str(), deviceName.c_str());
                std::printf("  whole layer: %.3f s (NMSE %.5f, %.4g bits per activation)\n", r.seconds, r.metrics.nmse,
                            bitsPerActivation(s.dim, s.stages, s.k));
                std::printf("  per iteration (assign + accumulate + update, median of %zu", iterationsTimed);
                if (mostMembers > 1)
                    std::printf(" in %zu passes of up to %d clusterings at once", passes.size(), mostMembers);
                std::printf("): %.3f ms\n", perIteration * 1e3);
                if (cuda) {
                    std::printf("  in the device's passes: %.3f s; on the host between them: %.3f s\n",
                                devicePassSeconds, r.seconds - devicePassSeconds);
                    std::printf("    of which");
                    const char* sep = " ";
                    for (const auto& [name, value] : hostBreakdown.items()) {
                        std::printf("%s%s %.3f s", sep, name.c_str(), value.get<double>());
                        sep = ", ";
                    }
                    std::printf("\n");
                }
                std::printf("  distance product: %.3f GFLOP per iteration, %.1f GFLOP/s achieved over the whole "
                            "iteration",
                            flopPerPass / 1e9, achieved / 1e9);
                if (peak > 0)
                    std::printf(", %.0f%% of the FP32 peak (%.1f TFLOP/s)", 100 * achieved / peak, peak / 1e12);
                std::printf("\n");
            }};
}

} // namespace gsrq::cli
