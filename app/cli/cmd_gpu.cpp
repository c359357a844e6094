// devices: the compute backends (CPU threads, CUDA devices).
// check-gpu: device facts, then the GPU against the CPU on seeded data.

#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/stats.h"
#include "core/base/version.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/io/npy.h"
#include "core/io/synth.h"
#include "gpu/cluster/cuda_backend.h"
#include "gpu/cluster/gpu_check.h"
#include "gpu/device/device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

namespace gsrq::cli {

namespace {

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

Command registerDevices(CLI::App& root)
{
    auto json = std::make_shared<bool>(false);
    auto* cmd = root.add_subcommand("devices", "List the compute backends: CPU threads and CUDA devices");
    cmd->add_flag("--json", *json, "Print one JSON object on stdout");
    return {cmd, [json] {
                const auto q = gpu::queryDevices();
                const int threads = resolveThreads(0);
                if (*json) {
                    nlohmann::ordered_json devs = nlohmann::ordered_json::array();
                    for (const auto& d : q.devices)
                        devs.push_back({{"index", d.index},
                                        {"name", d.name},
                                        {"memory_bytes", d.memoryBytes},
                                        {"compute_capability", cat(d.computeMajor, ".", d.computeMinor)},
                                        {"multiprocessors", d.multiprocessors}});
                    printJson({{"cpu_threads", threads},
                               {"cuda_built", q.builtWithCuda},
                               {"cuda_devices", devs},
                               {"message", q.message}});
                    return;
                }
                std::printf("cpu: %d threads\n", threads);
                for (const auto& d : q.devices)
                    std::printf("cuda:%d  %s  sm_%d%d  %d SMs  %s\n", d.index, d.name.c_str(), d.computeMajor,
                                d.computeMinor, d.multiprocessors,
                                humanBytes(static_cast<double>(d.memoryBytes)).c_str());
                if (q.devices.empty())
                    std::printf("cuda: %s\n", q.message.c_str());
            }};
}

} // namespace gsrq::cli
