// check-gpu: device facts, then the GPU against the CPU on seeded data.
// bench-train: a whole GSRQ layer's training on generated data, timed per iteration and in all.

#include "cli_common.h"
#include "commands.h"
#include "cuda_backend.h"
#include "device.h"
#include "error.h"
#include "gpu_check.h"
#include "npy.h"
#include "quantizer.h"
#include "synth.h"
#include "version.h"
#include "weights.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
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

nlohmann::ordered_json deviceJson(const gpu::DeviceInfo& d)
{
    return {{"index", d.index},
            {"name", d.name},
            {"compute_capability", cat(d.computeMajor, ".", d.computeMinor)},
            {"multiprocessors", d.multiprocessors},
            {"memory_bytes", d.memoryBytes},
            {"l2_bytes", d.l2Bytes},
            {"clock_hz", d.clockHz},
            {"peak_fp32_flops", d.peakFp32Flops},
            {"memory_bandwidth_bytes_per_s", d.memoryBandwidth}};
}

// The device the flags name, or Error(InvalidInput) saying why there is none.
gpu::DeviceInfo requireDevice(int index, const char* what)
{
    const auto q = gpu::queryDevices();
    if (q.devices.empty())
        throwInvalid(what, ": no CUDA device (", q.message, ")");
    for (const auto& d : q.devices)
        if (d.index == index)
            return d;
    throwInvalid("--device ", index, ": this machine has ", q.devices.size(), " CUDA device(s)");
}

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

Command registerCheckGpu(CLI::App& root)
{
    struct Opts {
        int device = 0;
        bool tf32 = false, json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("check-gpu", "Device facts, then the GPU against the CPU on seeded data: labels, "
                                                 "objectives, a GSRQ training; prints a verdict");
    cmd->add_option("--device", o->device, "CUDA device index")->capture_default_str();
    cmd->add_flag("--tf32", o->tf32, "Also show the accuracy of TF32 against FP32");
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    return {cmd, [o] {
                const auto d = requireDevice(o->device, "check-gpu");
                if (!o->json)
                    std::printf("cuda:%d  %s  sm_%d%d  %d SMs  %s, FP32 peak %.1f TFLOP/s, memory %.0f GB/s\n", d.index,
                                d.name.c_str(), d.computeMajor, d.computeMinor, d.multiprocessors,
                                humanBytes(double(d.memoryBytes)).c_str(), d.peakFp32Flops / 1e12,
                                d.memoryBandwidth / 1e9);
                gpu::CudaOptions co;
                co.device = o->device;
                co.tf32 = o->tf32;
                const auto rep = gpu::runGpuCheck(co, [&](const std::string& line) {
                    if (!o->json)
                        std::printf("  %s\n", line.c_str());
                    std::fflush(stdout);
                });
                if (o->json) {
                    nlohmann::ordered_json items = nlohmann::ordered_json::array();
                    for (const auto& c : rep.items)
                        items.push_back({{"name", c.name},
                                         {"value", c.value},
                                         {"limit", c.limit},
                                         {"lower_is_better", c.lowerIsBetter},
                                         {"informational", c.informational},
                                         {"pass", c.pass()},
                                         {"detail", c.detail}});
                    printJson({{"tool", "gsrq"},
                               {"version", kVersion},
                               {"command", "check-gpu"},
                               {"device", deviceJson(d)},
                               {"device_passes", rep.devicePasses},
                               {"checks", items},
                               {"verdict", rep.pass() ? "pass" : "fail"}});
                } else {
                    std::printf("verdict: %s (%lld assignment passes ran on the GPU)\n", rep.pass() ? "PASS" : "FAIL",
                                static_cast<long long>(rep.devicePasses));
                }
                if (!rep.pass())
                    throwRuntime("check-gpu: the GPU does not match the CPU (see the checks above)");
            }};
}

Command registerBenchTrain(CLI::App& root)
{
    struct Opts {
        std::int64_t rows = 262144;
        int features = 1024, dim = 128, stages = 16, k = 256, iters = 40;
        std::string method = "gskm", data = "kv", weights = "grad-log", saveData;
        std::uint64_t seed = 0;
        BackendOptions backend;
        bool json = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("bench-train", "Time a whole GSRQ layer's training on generated (synthetic) data");
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
    return {cmd, [o] {
                if (o->method != "gskm" && o->method != "km")
                    throwInvalid("--method ", o->method, ": expected gskm or km");
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
                s.method = o->method == "km" ? Method::KMeans : Method::GainShape;
                validateRq(s, o->rows, o->features);
                auto backend = openBackend(o->backend, o->json);
                const auto wmode = weightModeFromName(o->weights);
                if (!wmode)
                    throwInvalid("--weights ", o->weights, ": expected none, grad-raw or grad-log");
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
                std::vector<double> passSeconds; // every assignment pass with the update after it
                const auto r = trainResidualQuantizer(x, wp, s, *backend, [&](const ProgressEvent& e) {
                    passSeconds.push_back(e.iteration.seconds);
                    return true;
                });
                const double perIteration = median(passSeconds);
                const double flopPerPass = 2.0 * double(o->rows) * double(s.k) * double(s.dim);
                const double achieved = perIteration > 0 ? flopPerPass / perIteration : 0;
                double peak = 0;
                const std::string deviceName = backend->device();
                if (gpu::cudaStats(*backend)) {
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
                               {"iterations_timed", passSeconds.size()},
                               {"assignment_flop_per_iteration", flopPerPass},
                               {"achieved_flops", achieved},
                               {"peak_fp32_flops", peak},
                               {"fraction_of_peak", peak > 0 ? nlohmann::ordered_json(achieved / peak) : nullptr},
                               {"nmse", r.metrics.nmse}});
                    return;
                }
                std::printf("bench-train: synthetic %s data, %lld × %d, D=%d (%d subspaces), R=%d, K=%d, %d "
                            "iterations, %s, %s (%s)\n",
                            o->data.c_str(), static_cast<long long>(o->rows), o->features, s.dim, subspaces, s.stages,
                            s.k, s.iterations, methodName(s.method), backend->name().c_str(), deviceName.c_str());
                std::printf("  whole layer: %.3f s (NMSE %.5f, %.4g bits per activation)\n", r.seconds, r.metrics.nmse,
                            bitsPerActivation(s.dim, s.stages, s.k));
                std::printf("  per iteration (assign + accumulate + update, median of %zu): %.3f ms\n",
                            passSeconds.size(), perIteration * 1e3);
                std::printf("  distance product: %.3f GFLOP per iteration, %.1f GFLOP/s achieved over the whole "
                            "iteration",
                            flopPerPass / 1e9, achieved / 1e9);
                if (peak > 0)
                    std::printf(", %.0f%% of the FP32 peak (%.1f TFLOP/s)", 100 * achieved / peak, peak / 1e12);
                std::printf("\n");
            }};
}

} // namespace gsrq::cli
