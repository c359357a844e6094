// bench-decode: decode latency over the compressed cache against an FP16 baseline in the same run, per
// layer and decode step, after verifying every path against the double reference: on the CPU
// (flash-decoding with F16C as the baseline) or on a CUDA device (fused kernels against our FP16
// split-K kernel and, given its timings, PyTorch's scaled_dot_product_attention).

#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/quantizer.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/decode_bench.h"
#include "core/jobs/run_records.h"
#include "gpu/decode/decode.h"
#include "recording.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace gsrq::cli {

namespace {

std::vector<std::int64_t> parseContexts(const std::string& text)
{
    std::vector<std::int64_t> out;
    for (int v : parseIntList("--ctx", text)) {
        if (v < 1)
            throwInvalid("--ctx ", v, ": context lengths must be ≥ 1");
        out.push_back(v);
    }
    return out;
}

// Key and value codebooks of one layer from a codebooks file: layers.<L>.key / .value.
std::pair<Codebooks, Codebooks> booksFromFile(const std::string& path, int layer)
{
    const auto f = readCodebookFile(path);
    const std::string kName = cat("layers.", layer, ".key"), vName = cat("layers.", layer, ".value");
    const auto* k = f.find(kName);
    const auto* v = f.find(vName);
    if (!k || !v)
        throwInvalid(path, ": no codebooks for ", kName, " and ", vName, " (choose the layer with --layer)");
    return {k->codebooks, v->codebooks};
}

// PyTorch anchor timings (tools/bench/torch_decode.py --json): (context, batch) → seconds.
std::map<std::pair<std::int64_t, int>, double> readAnchor(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throwInvalid("--anchor ", path, ": cannot open");
    nlohmann::json j;
    try {
        in >> j;
    } catch (const std::exception& e) {
        throwInvalid("--anchor ", path, ": not JSON (", e.what(), ")");
    }
    std::map<std::pair<std::int64_t, int>, double> out;
    if (!j.contains("points") || !j["points"].is_array())
        throwInvalid("--anchor ", path, ": expected an object with \"points\" (tools/bench/torch_decode.py --json)");
    for (const auto& p : j["points"]) {
        if (!p.contains("context") || !p.contains("batch") || !p.contains("seconds"))
            throwInvalid("--anchor ", path, ": each point needs context, batch and seconds");
        out[{p["context"].get<std::int64_t>(), p["batch"].get<int>()}] = p["seconds"].get<double>();
    }
    return out;
}

} // namespace

Command registerBenchDecode(CLI::App& root)
{
    struct Opts {
        int heads = 32, kvHeads = 8, headDim = 128, layers = 1, layer = 0, device = 0, reps = 25, warmup = 5,
            threads = 0;
        std::string ctx, batch, codebooks, anchor, paths = "fp16,paper,lookup", backend = "auto", isa, modelDevice;
        double bpa = 0.75, theta = 10000, l2Rate = 0;
        int dim = 0, stages = 0, k = 0;
        std::uint64_t seed = 1;
        bool json = false, noVerify = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd =
        root.add_subcommand("bench-decode", "Decode latency over the compressed KV cache against FP16 (CPU or CUDA)");
    cmd->add_option("--backend", o->backend, "cpu, cuda, or auto (cuda where a device is present, else cpu)")
        ->capture_default_str();
    cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)")->capture_default_str();
    cmd->add_option("--isa", o->isa,
                    "CPU kernels: best (the widest this CPU runs), avx512, avx2 or portable (default: best)");
    cmd->add_option("--heads", o->heads, "Query heads")->capture_default_str();
    cmd->add_option("--kv-heads", o->kvHeads, "KV heads (GQA)")->capture_default_str();
    cmd->add_option("--head-dim", o->headDim,
                    "Head dimension: 64, 128 or 256 on a GPU; a multiple of 16 up to 512 on the CPU")
        ->capture_default_str();
    cmd->add_option("--layers", o->layers, "Layers run back to back per step (latency is per layer)")
        ->capture_default_str();
    cmd->add_option("--ctx", o->ctx,
                    "Context lengths, comma-separated (default: 4096,32768,131072 on the CPU, "
                    "1024,8192,32768,65536,131072 on a GPU)");
    cmd->add_option("--batch", o->batch, "Batch sizes, comma-separated (default: 1 on the CPU, 1,8,16,32 on a GPU)");
    cmd->add_option("--bpa", o->bpa, "Bits per activation (sets D = head_dim, K = 256, R)")->capture_default_str();
    cmd->add_option("--dim", o->dim, "Subspace width D (with --stages and --k, instead of --bpa)");
    cmd->add_option("--stages", o->stages, "Residual stages R");
    cmd->add_option("--k", o->k, "Codewords per stage K");
    cmd->add_option("--codebooks", o->codebooks, "Trained codebooks (gsrq train --out) instead of synthetic ones");
    cmd->add_option("--layer", o->layer, "Which layer's key/value codebooks of --codebooks")->capture_default_str();
    cmd->add_option("--paths", o->paths, "Paths to run: fp16, paper, lookup")->capture_default_str();
    cmd->add_option("--rope-theta", o->theta, "RoPE base of the paper path")->capture_default_str();
    cmd->add_option("--reps", o->reps, "Timed runs per point (median; at least 20)")->capture_default_str();
    cmd->add_option("--anchor", o->anchor,
                    "PyTorch SDPA timings (tools/bench/torch_decode.py --json) to compare with (cuda)");
    cmd->add_option("--warmup", o->warmup, "Untimed runs first")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the synthetic cache and queries")->capture_default_str();
    cmd->add_option("--device", o->device, "CUDA device index")->capture_default_str();
    cmd->add_option("--l2-rate", o->l2Rate,
                    "A GPU L2's read rate in GB/s for the rooflines, if measured (default: an estimate, 2.5 x the "
                    "measured HBM copy rate; the CPU backend measures its own)");
    cmd->add_option("--model-device", o->modelDevice,
                    "No timing: each point's time is its roofline on this GPU's model (" + gpu::deviceModelNames() +
                        "), split as the kernels would split it there; recorded as a modelled run");
    cmd->add_flag("--no-verify", o->noVerify,
                  "Skip the check against the double reference (figures are then unverified)");
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    return {
        cmd, [o] {
            DecodeBenchOptions b;
            const gpu::DeviceModel* model = nullptr;
            if (!o->modelDevice.empty()) {
                model = gpu::findDeviceModel(o->modelDevice);
                if (!model)
                    throwInvalid("--model-device '", o->modelDevice, "': one of ", gpu::deviceModelNames());
                if (o->backend == "cpu")
                    throwInvalid("--model-device models a GPU's kernels: not with --backend cpu");
                if (!o->anchor.empty())
                    throwInvalid("--anchor: measured PyTorch timings compare with measured points, not with "
                                 "--model-device");
            }
            const auto devices = model ? gpu::DeviceQuery{} : gpu::queryDevices();
            if (model)
                b.backend = DecodeBackend::Cuda;
            else if (o->backend == "auto")
                b.backend = devices.devices.empty() ? DecodeBackend::Cpu : DecodeBackend::Cuda;
            else if (o->backend == "cpu")
                b.backend = DecodeBackend::Cpu;
            else if (o->backend == "cuda")
                b.backend = DecodeBackend::Cuda;
            else
                throwInvalid("--backend '", o->backend, "': cpu, cuda or auto");
            const bool cpu = b.backend == DecodeBackend::Cpu;
            if (o->threads < 0 || o->threads > kMaxDecodeThreads)
                throwInvalid("--threads ", o->threads, ": 0 (one per core) to ", kMaxDecodeThreads);
            if (!(o->theta > 0))
                throwInvalid("--rope-theta ", o->theta, ": must be > 0");
            if (cpu && !o->anchor.empty())
                throwInvalid("--anchor: PyTorch's GPU timings compare with --backend cuda only");
            if (!cpu && !o->isa.empty())
                throwInvalid("--isa: the kernels' instruction set is chosen with --backend cpu only");
            if (cpu)
                if (const auto why = cpuDecodeIsaProblem(o->isa); !why.empty())
                    throwInvalid(why);
            b.isa = o->isa == "best" ? std::string() : o->isa;
            if (cpu && o->l2Rate != 0)
                throwInvalid("--l2-rate: the CPU backend measures its L2 rate itself (--backend cuda only)");
            b.threads = o->threads;
            b.shape = {o->heads, o->kvHeads, o->headDim};
            b.layers = o->layers;
            b.contexts = parseContexts(!o->ctx.empty() ? o->ctx
                                       : cpu           ? "4096,32768,131072"
                                                       : "1024,8192,32768,65536,131072");
            b.batches = parseIntList("--batch", !o->batch.empty() ? o->batch : cpu ? "1" : "1,8,16,32");
            for (int v : b.batches)
                if (v < 1)
                    throwInvalid("--batch ", v, ": batch sizes must be ≥ 1");
            b.device = o->device;
            b.reps = o->reps;
            b.warmup = o->warmup;
            b.seed = o->seed;
            b.verify = !o->noVerify;
            if (o->l2Rate < 0)
                throwInvalid("--l2-rate ", o->l2Rate, ": a rate in GB/s, > 0");
            b.l2BytesPerSecond = o->l2Rate * 1e9;
            b.ropeTheta = o->theta;
            b.paths.clear();
            {
                std::stringstream ss(o->paths);
                for (std::string item; std::getline(ss, item, ',');) {
                    if (item == "fp16")
                        b.paths.push_back(DecodePath::Fp16);
                    else if (item == "paper")
                        b.paths.push_back(DecodePath::Paper);
                    else if (item == "lookup")
                        b.paths.push_back(DecodePath::Lookup);
                    else
                        throwInvalid("--paths: '", item, "' is not fp16, paper or lookup");
                }
            }
            if (o->reps < 20)
                throwInvalid("--reps ", o->reps, ": the median needs at least 20 runs");
            if (o->layers < 1 || o->warmup < 1)
                throwInvalid("--layers and --warmup must be ≥ 1");

            const auto shapeProblem = cpu ? cpuDecodeShapeProblem : gpu::decodeShapeProblem;
            // Heads and head_dim first (with D = head_dim and one stage), so a bad --head-dim is named
            // as itself and not as the --bpa it makes impossible.
            if (const auto why = shapeProblem(b.shape, o->headDim, 1, 256); !why.empty() && why.rfind("D = ", 0) != 0)
                throwInvalid(why);
            Codebooks kb, vb;
            std::string source;
            if (!o->codebooks.empty()) {
                std::tie(kb, vb) = booksFromFile(o->codebooks, o->layer);
                source = o->codebooks;
                if (const auto why = shapeProblem(b.shape, kb.dim, kb.stages, kb.k); !why.empty())
                    throwInvalid(o->codebooks, ": ", why);
            } else {
                int D = o->dim, R = o->stages, K = o->k;
                if (D == 0 && R == 0 && K == 0) {
                    // K = 256 (one byte per code), D = head_dim: R = bpa · D / 8.
                    D = o->headDim;
                    K = 256;
                    R = decodeStagesForBpa(o->bpa, D);
                } else if (D == 0 || R == 0 || K == 0) {
                    throwInvalid("--dim, --stages and --k go together (or use --bpa)");
                }
                if (const auto why = shapeProblem(b.shape, D, R, K); !why.empty())
                    throwInvalid(why);
                kb = syntheticDecodeBooks(b.shape, D, R, K, o->seed);
                vb = syntheticDecodeBooks(b.shape, D, R, K, o->seed + 1);
                source = "synthetic";
            }
            if (kb.features() != std::int64_t(o->kvHeads) * o->headDim)
                throwInvalid("--codebooks ", o->codebooks, ": ", kb.features(),
                             " features; --kv-heads × --head-dim = ", std::int64_t(o->kvHeads) * o->headDim);
            try {
                checkDecodeBooks(b.shape, kb, vb);
            } catch (const Error& e) {
                throwInvalid("--codebooks ", o->codebooks, ": ", e.what());
            }
            const auto anchor = o->anchor.empty() ? decltype(readAnchor("")){} : readAnchor(o->anchor);
            // Without a device this is an input error before anything is recorded.
            if (!cpu && !model && devices.devices.empty())
                throwInvalid("bench-decode --backend cuda needs a CUDA device: ", devices.message,
                             " (--backend cpu runs on this machine)");
            if (!cpu && !model && (o->device < 0 || std::size_t(o->device) >= devices.devices.size()))
                throwInvalid("--device ", o->device, ": this machine has ", devices.devices.size(), " CUDA device(s)");

            const double bpa = bitsPerActivation(kb.dim, kb.stages, kb.k);
            auto settings = benchDecodeRunSettings(b, kb, source);
            if (model)
                settings["model_device"] = model->name;
            const int threads = cpuDecodeThreads(o->threads);
            const std::string deviceName =
                model ? "model of the " + model->info.name
                : cpu ? cpuDecodeDeviceName(cpuModelName(), threads)
                      : decodeDeviceName(devices.devices[std::size_t(o->device)].name, o->device);
            CliRun run("bench-decode", settings.dump(), {}, {}, model ? "model" : decodeBackendName(b.backend),
                       deviceName);
            if (!o->json && model)
                std::printf("bench-decode, modelled (no timing), on the %s: %d heads / %d KV heads × %d, D=%d R=%d "
                            "K=%d (%.3g bits per activation), per layer and decode step\n",
                            model->info.name.c_str(), o->heads, o->kvHeads, o->headDim, kb.dim, kb.stages, kb.k, bpa);
            else if (!o->json)
                std::printf("bench-decode on %s: %d heads / %d KV heads × %d, D=%d R=%d K=%d (%.3g bits per "
                            "activation, %s codebooks), %d layer(s), median of %d\n",
                            deviceName.c_str(), o->heads, o->kvHeads, o->headDim, kb.dim, kb.stages, kb.k, bpa,
                            source.c_str(), o->layers, o->reps);
            std::map<std::pair<std::int64_t, int>, double> fp16;
            DecodeBenchReport rep;
            run.guard([&] {
                const auto onPoint = [&](const DecodeBenchPoint& p) {
                    if (run) { // as each point lands, so the app's Latency page can follow
                        run->recordMetrics(decodeMetrics(p));
                        run->recordSeries(decodeSeries(p));
                    }
                    if (o->json)
                        return;
                    if (!p.skipped.empty()) {
                        std::printf("  ctx %7lld  batch %2d  %-6s  skipped: %s\n", (long long)p.context, p.batch,
                                    decodePathName(p.path), p.skipped.c_str());
                    } else if (model) {
                        std::printf("  ctx %7lld  batch %2d  %-6s  %9.2f µs  model, %s-bound, %d split(s)",
                                    (long long)p.context, p.batch, decodePathName(p.path), p.seconds * 1e6,
                                    p.roofline.bound.c_str(), p.splits);
                        if (p.latencyModelSeconds > 0)
                            std::printf("  latency model %.2f µs", p.latencyModelSeconds * 1e6);
                        if (p.path != DecodePath::Fp16 && p.speedupVsFp16 > 0)
                            std::printf("  %.2f× vs fp16", p.speedupVsFp16);
                        std::printf("\n");
                    } else {
                        std::printf("  ctx %7lld  batch %2d  %-6s  %9.2f µs  %7.1f GB/s  %s", (long long)p.context,
                                    p.batch, decodePathName(p.path), p.seconds * 1e6, p.bytesPerSecond / 1e9,
                                    p.verified ? cat("err ", p.relError).c_str() : "unverified");
                        if (p.path != DecodePath::Fp16 && p.speedupVsFp16 > 0)
                            std::printf("  %.2f× vs fp16", p.speedupVsFp16);
                        if (p.roofline.seconds > 0)
                            std::printf("  %.0f%% of its roofline (%.2f µs, %s-bound)", 100 * p.rooflineFraction,
                                        p.roofline.seconds * 1e6, p.roofline.bound.c_str());
                        if (p.latencyModelSeconds > 0)
                            std::printf("  latency model %.2f µs", p.latencyModelSeconds * 1e6);
                        if (p.readRowsSeconds > 0)
                            std::printf("  %.0f%% of a plain read of its rows (%.2f µs)",
                                        100 * p.readRowsSeconds / p.seconds, p.readRowsSeconds * 1e6);
                        if (p.eigenFp32Seconds > 0)
                            std::printf("  (Eigen FP32 sanity check: %.2f µs, fp16 %.2f× faster)",
                                        p.eigenFp32Seconds * 1e6, p.eigenFp32Seconds / p.seconds);
                        std::printf("\n");
                    }
                    std::fflush(stdout);
                };
                if (model) {
                    rep = gpu::modelDecodeBench(b, kb.dim, kb.stages, kb.k, *model, onPoint);
                    return;
                }
                const auto runner = cpu ? runCpuDecodeBench : gpu::runDecodeBench;
                rep = runner(b, kb, vb, source, onPoint, [] { return stopRequested(); });
            });
            nlohmann::ordered_json points = nlohmann::ordered_json::array();
            for (const auto& p : rep.points) {
                nlohmann::ordered_json j = {
                    {"context", p.context}, {"batch", p.batch}, {"path", decodePathName(p.path)}};
                if (model)
                    j["modelled"] = true;
                if (!p.skipped.empty()) {
                    j["skipped"] = p.skipped;
                } else {
                    j["seconds_per_layer"] = p.seconds;
                    j["min_seconds"] = p.minSeconds;
                    j["max_seconds"] = p.maxSeconds;
                    j["bytes_read"] = p.bytes;
                    j["bytes_per_second"] = p.bytesPerSecond;
                    if (cpu)
                        j["fraction_of_read_bandwidth"] =
                            rep.readBytesPerSecond > 0
                                ? nlohmann::ordered_json(p.bytesPerSecond / rep.readBytesPerSecond)
                                : nlohmann::ordered_json(nullptr);
                    else
                        j["fraction_of_copy_bandwidth"] =
                            rep.copyBytesPerSecond > 0
                                ? nlohmann::ordered_json(p.bytesPerSecond / rep.copyBytesPerSecond)
                                : nlohmann::ordered_json(nullptr);
                    j["splits"] = p.splits;
                    if (p.path == DecodePath::Paper)
                        j["paper_values"] = p.paperBins ? "per-codeword weights" : "codeword sums";
                    if (cpu)
                        j["model"] = {{"dram_bytes", p.costs.memoryBytes},
                                      {"l2_bytes", p.costs.l2Bytes},
                                      {"lookups", p.costs.lookups},
                                      {"flops", p.costs.flops}};
                    else
                        j["model"] = {{"hbm_bytes", p.costs.memoryBytes},
                                      {"l2_bytes", p.costs.l2Bytes},
                                      {"shared_bytes", p.costs.sharedBytes},
                                      {"flops", p.costs.flops}};
                    j["roofline_seconds"] = p.roofline.seconds;
                    j["roofline_bound"] = p.roofline.bound;
                    j["fraction_of_roofline"] = p.rooflineFraction;
                    if (p.latencyModelSeconds > 0)
                        j["latency_model_seconds"] = p.latencyModelSeconds;
                    j["verified"] = p.verified;
                    if (p.relError >= 0)
                        j["rel_error"] = p.relError;
                    if (p.speedupVsFp16 > 0)
                        j["speedup_vs_fp16"] = p.speedupVsFp16;
                    if (p.readRowsSeconds > 0) {
                        j["read_rows_seconds"] = p.readRowsSeconds;
                        j["fraction_of_read_rows"] = p.readRowsSeconds / p.seconds;
                    }
                    if (p.eigenFp32Seconds > 0)
                        j["eigen_fp32_seconds"] = p.eigenFp32Seconds;
                    if (auto it = anchor.find({p.context, p.batch}); it != anchor.end() && p.seconds > 0) {
                        j["torch_sdpa_seconds"] = it->second;
                        j["speedup_vs_torch"] = it->second / p.seconds;
                    }
                }
                const CacheBytes cb = cacheBytes(p.context, b.shape, kb.dim, kb.stages, kb.k);
                j["cache_bytes"] = {{"fp16", cb.fp16}, {"codes", cb.codes}, {"codebooks", cb.codebooks}};
                points.push_back(j);
            }
            auto summary = benchDecodeRunSummary(rep);
            if (model) // what the rooflines divided by, and where each rate comes from
                summary["model"] = {
                    {"device", model->info.name},          {"hbm_bytes_per_second", model->copyBytesPerSecond},
                    {"hbm_source", model->source},         {"shared_bytes_per_second", rep.rates.shared},
                    {"l2_bytes_per_second", rep.rates.l2}, {"l2_source", rep.rates.l2Source},
                    {"fp32_flops", rep.rates.flops}};
            if (stopRequested()) {
                if (run)
                    run.cancelled(summary.dump());
                throw Cancelled{"bench-decode stopped; the points measured so far are recorded"};
            }
            if (run)
                run.done(summary.dump());
            if (o->json) {
                printJson({{"tool", "gsrq"},
                           {"version", kVersion},
                           {"command", "bench-decode"},
                           {"settings", settings},
                           {"summary", summary},
                           {"points", points}});
            } else if (model) {
                std::printf("%s: no timing; rates %s, shared memory %.1f TB/s (128 B per clock per SM), L2 %.1f "
                            "TB/s (%s), FP32 %.1f TFLOP/s\n",
                            rep.device.c_str(), model->source.c_str(), rep.rates.shared / 1e12, rep.rates.l2 / 1e12,
                            rep.rates.l2Source.c_str(), rep.rates.flops / 1e12);
            } else if (cpu) {
                std::printf("%s, %d thread(s), %s kernels: DRAM read %.1f GB/s, L2 read %.0f GB/s, %.2f G "
                            "lookups/s, %.0f GFLOP/s (measured in this run); quantize-and-pack of one token per "
                            "sequence %.1f µs\n",
                            rep.device.c_str(), rep.threads, rep.isa.c_str(), rep.readBytesPerSecond / 1e9,
                            rep.rates.l2 / 1e9, rep.rates.lookups / 1e9, rep.rates.flops / 1e9,
                            rep.appendSeconds * 1e6);
            } else {
                const std::string nominal = rep.nominalBandwidth > 0
                                                ? cat(int(rep.nominalBandwidth / 1e9 + 0.5), " GB/s nominal")
                                                : std::string("nominal unknown");
                std::printf("device %s: copy %.0f GB/s measured (%s); quantize-and-pack of one token per sequence "
                            "%.1f µs\n",
                            rep.device.c_str(), rep.copyBytesPerSecond / 1e9, nominal.c_str(), rep.appendSeconds * 1e6);
            }
            if (!rep.allVerified())
                throwRuntime("bench-decode: a path did not match the double reference (see the points above)");
        }};
}

} // namespace gsrq::cli
