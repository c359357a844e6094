#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/version.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "core/io/synth.h"

#include <cstdio>
#include <filesystem>
#include <memory>

namespace gsrq::cli {

Command registerSynth(CLI::App& root)
{
    struct Opts {
        std::string kind;
        std::int64_t rows = 10000;
        int features = 256;
        std::uint64_t seed = 0;
        std::string out;
        std::string dtype = "f32";
        bool force = false;
        int layers = 0;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("synth", "Write synthetic data (.npy, or .safetensors as layers.0.value, or a "
                                             "dump of many layers' keys and values)");
    cmd->add_option("kind", o->kind, "gaussian (i.i.d. N(0,1)) or kv (key-like: correlated, outlier channels)")
        ->required();
    cmd->add_option("--rows", o->rows, "Rows (tokens)")->capture_default_str();
    cmd->add_option("--features", o->features, "Features per row")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed")->capture_default_str();
    cmd->add_option("--out,-o", o->out, "Output file: .npy or .safetensors")->required();
    cmd->add_option("--dtype", o->dtype, "f32, f16 or bf16 (bf16: .safetensors only)")->capture_default_str();
    cmd->add_option("--layers", o->layers,
                    "A .safetensors dump of N layers, each a key and a value (layers.L.key, layers.L.value)")
        ->check(CLI::Range(1, 4096));
    cmd->add_flag("--force", o->force, "Overwrite an existing output file");
    return {cmd, [o] {
                const auto kind = synthKindFromName(o->kind);
                if (!kind)
                    throwInvalid("synth: unknown kind '", o->kind, "' (gaussian, kv)");
                const DType dtype = o->dtype == "f32"   ? DType::F32
                                    : o->dtype == "f16" ? DType::F16
                                    : o->dtype == "bf16"
                                        ? DType::BF16
                                        : throw Error(ErrorKind::InvalidInput,
                                                      cat("--dtype: '", o->dtype, "' is not f32, f16 or bf16"));
                const std::filesystem::path out(o->out);
                const std::string ext = out.extension().string();
                if (ext != ".npy" && ext != ".safetensors")
                    throwInvalid("--out ", o->out, ": name it .npy or .safetensors");
                if (ext == ".npy" && dtype == DType::BF16)
                    throwInvalid("--dtype bf16: .npy has no bfloat16; use .safetensors");
                if (o->layers > 0 && ext != ".safetensors")
                    throwInvalid("--layers: a dump of layers is a .safetensors file, not '", o->out, "'");
                refuseOverwrite(o->out, o->force, "--out");
                const std::map<std::string, std::string> metadata = {
                    {"format", "gsrq-kv-dump"},
                    {"synthetic", cat(o->kind, " rows=", o->rows, " features=", o->features, " seed=", o->seed,
                                      o->layers > 0 ? cat(" layers=", o->layers) : std::string())},
                    {"tool", cat("gsrq ", kVersion)}};
                if (o->layers > 0) {
                    // Layer L's key from seed + 2L, its value from seed + 2L + 1: every tensor differs.
                    std::vector<TensorBlob> blobs;
                    for (int l = 0; l < o->layers; ++l)
                        for (int v = 0; v < 2; ++v)
                            blobs.push_back(makeFloatBlob(cat("layers.", l, v ? ".value" : ".key"),
                                                          synthesize(*kind, o->rows, o->features,
                                                                     o->seed + 2 * std::uint64_t(l) + std::uint64_t(v)),
                                                          dtype));
                    writeSafetensors(o->out, blobs, metadata);
                    std::fprintf(stderr, "wrote %s: synthetic %s data, %d layers' keys and values, each %lld × %d %s\n",
                                 o->out.c_str(), o->kind.c_str(), o->layers, static_cast<long long>(o->rows),
                                 o->features, dtypeName(dtype));
                    return;
                }
                const MatrixRF x = synthesize(*kind, o->rows, o->features, o->seed);
                if (ext == ".npy") {
                    writeNpy(o->out, x, dtype);
                } else {
                    writeSafetensors(o->out, {makeFloatBlob("layers.0.value", x, dtype)}, metadata);
                }
                std::fprintf(stderr, "wrote %s: synthetic %s data, %lld × %d %s\n", o->out.c_str(), o->kind.c_str(),
                             static_cast<long long>(o->rows), o->features, dtypeName(dtype));
            }};
}

} // namespace gsrq::cli
