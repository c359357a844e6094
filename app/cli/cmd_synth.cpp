#include "cli_common.h"
#include "commands.h"
#include "error.h"
#include "npy.h"
#include "safetensors.h"
#include "synth.h"
#include "version.h"

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
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("synth", "Write synthetic data (.npy, or .safetensors as layers.0.value)");
    cmd->add_option("kind", o->kind, "gaussian (i.i.d. N(0,1)) or kv (key-like: correlated, outlier channels)")
        ->required();
    cmd->add_option("--rows", o->rows, "Rows (tokens)")->capture_default_str();
    cmd->add_option("--features", o->features, "Features per row")->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed")->capture_default_str();
    cmd->add_option("--out,-o", o->out, "Output file: .npy or .safetensors")->required();
    cmd->add_option("--dtype", o->dtype, "f32, f16 or bf16 (bf16: .safetensors only)")->capture_default_str();
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
                refuseOverwrite(o->out, o->force, "--out");
                const MatrixRF x = synthesize(*kind, o->rows, o->features, o->seed);
                if (ext == ".npy") {
                    writeNpy(o->out, x, dtype);
                } else {
                    writeSafetensors(
                        o->out, {makeFloatBlob("layers.0.value", x, dtype)},
                        {{"format", "gsrq-kv-dump"},
                         {"synthetic", cat(o->kind, " rows=", o->rows, " features=", o->features, " seed=", o->seed)},
                         {"tool", cat("gsrq ", kVersion)}});
                }
                std::fprintf(stderr, "wrote %s: synthetic %s data, %lld × %d %s\n", o->out.c_str(), o->kind.c_str(),
                             static_cast<long long>(o->rows), o->features, dtypeName(dtype));
            }};
}

} // namespace gsrq::cli
