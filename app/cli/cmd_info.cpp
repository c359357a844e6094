#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/io/kv_dump.h"
#include "core/lm/open_model.h"
#include "gpu/device/device.h"

#include <cstdio>
#include <memory>

namespace gsrq::cli {

Command registerInfo(CLI::App& root)
{
    struct Opts {
        std::string path;
        bool json = false, checksums = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("info", "List the tensors of a KV dump (names, layers, dtypes, shapes, sizes), or "
                                            "a GGUF model's architecture, shapes, RoPE, tokenizer and tensor types");
    cmd->add_option("dump", o->path, "KV dump (.safetensors file, directory of shards, or 2-D .npy) or GGUF model")
        ->required();
    cmd->add_flag("--json", o->json, "Print one JSON object on stdout");
    cmd->add_flag("--checksums", o->checksums,
                  "GGUF: the SHA-256 of each tensor's dequantized FP32 values (little-endian, storage order)");
    return {cmd, [o] {
                if (modelFormatOf(o->path) == ModelFormat::Gguf) {
                    printGgufInfo(o->path, o->json, o->checksums);
                    return;
                }
                if (o->checksums)
                    throwInvalid("--checksums: ", o->path, " is not a GGUF model (it takes GGUF files only)");
                const KvDump d = KvDump::open(o->path);
                if (o->json) {
                    nlohmann::ordered_json j = {{"file", d.path()},
                                                {"format", d.format()},
                                                {"files", d.files()},
                                                {"bytes", d.totalBytes()},
                                                {"metadata", d.metadata()}};
                    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
                    for (const auto& t : d.tensors()) {
                        nlohmann::ordered_json tj = {
                            {"name", t.view.name},   {"dtype", dtypeName(t.view.dtype)}, {"shape", t.view.shape},
                            {"rows", t.view.rows()}, {"features", t.view.features()},    {"bytes", t.view.nbytes}};
                        if (t.layer >= 0) {
                            tj["layer"] = t.layer;
                            tj["kind"] = kvKindName(t.kind);
                        }
                        ts.push_back(tj);
                    }
                    j["tensors"] = ts;
                    printJson(j);
                    return;
                }
                std::printf("%s  (%s, %zu file%s, %s)\n", d.path().c_str(), d.format().c_str(), d.files().size(),
                            d.files().size() == 1 ? "" : "s", humanBytes(static_cast<double>(d.totalBytes())).c_str());
                for (const auto& [k, v] : d.metadata())
                    std::printf("  %-16s %s\n", (k + ":").c_str(), v.c_str());
                std::printf("\n  %-28s %5s %-10s %5s %-18s %8s %10s\n", "tensor", "layer", "kind", "dtype", "shape",
                            "features", "size");
                for (const auto& t : d.tensors())
                    std::printf("  %-28s %5s %-10s %5s %-18s %8lld %10s\n", t.view.name.c_str(),
                                t.layer >= 0 ? std::to_string(t.layer).c_str() : "-",
                                t.layer >= 0 ? kvKindName(t.kind) : "-", dtypeName(t.view.dtype),
                                t.view.shapeString().c_str(), static_cast<long long>(t.view.features()),
                                humanBytes(static_cast<double>(t.view.nbytes)).c_str());
            }};
}

} // namespace gsrq::cli
