// `gsrq info MODEL.gguf`: a GGUF model's architecture, shapes, RoPE, tokenizer and tensor types, and
// with --checksums the SHA-256 of every tensor's dequantized FP32 values (what the engine computes
// with), comparable with any other dequantizer's.
#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/io/gguf.h"
#include "core/lm/gguf_model.h"
#include "core/lm/gguf_tokenizer.h"
#include "core/lm/open_model.h"
#include "core/lm/sequences.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace gsrq::cli {

namespace {

// SHA-256 of the tensor's FP32 values, little-endian, in storage order; dequantized a slab of rows at
// a time so a large tensor never sits whole in memory.
std::string tensorChecksum(const GgufFile& f, const GgufTensor& t)
{
    Sha256 h;
    const std::int64_t n = t.rowLength(), rows = t.rows();
    const std::int64_t slab = std::max<std::int64_t>(1, (std::int64_t(1) << 22) / std::max<std::int64_t>(1, n));
    std::vector<float> buf;
    for (std::int64_t r = 0; r < rows; r += slab) {
        const std::int64_t count = std::min(slab, rows - r);
        buf.resize(std::size_t(count * n));
        dequantizeGgufRows(f, t, r, count, buf.data());
        h.update(buf.data(), buf.size() * sizeof(float));
    }
    return h.hexDigest();
}

} // namespace

void printGgufInfo(const std::string& path, bool json, bool checksums)
{
    const GgufFile f = GgufFile::open(path);
    const GgufModelFacts m = ggufModelFacts(f);
    // Every checksum before anything is printed: a tensor that cannot be dequantized fails the
    // command (exit 2) with nothing half-written on stdout.
    std::vector<std::string> sums;
    if (checksums)
        for (const GgufTensor& t : f.tensors())
            sums.push_back(tensorChecksum(f, t));
    if (json) {
        nlohmann::ordered_json j = {{"file", f.path()},
                                    {"format", "gguf"},
                                    {"version", f.version()},
                                    {"bytes", f.fileBytes()},
                                    {"architecture", m.architecture},
                                    {"name", m.name},
                                    {"layers", m.layers},
                                    {"heads", m.heads},
                                    {"kv_heads", m.kvHeads},
                                    {"head_dim", m.headDim},
                                    {"embedding", m.embedding},
                                    {"feed_forward", m.feedForward},
                                    {"context_length", m.contextLength},
                                    {"vocab_size", m.vocabSize},
                                    {"rope_theta", m.ropeTheta},
                                    {"rope_scaling", m.ropeScaling},
                                    {"rope_scaling_factor", m.ropeScalingFactor},
                                    {"rms_eps", m.rmsEps},
                                    {"tokenizer_model", m.tokenizerModel},
                                    {"tokenizer_pre", m.tokenizerPre},
                                    {"tied_output", m.tiedOutput},
                                    {"attention_bias", m.attentionBias},
                                    {"parameters", m.parameters},
                                    {"tensors_by_type", m.tensorsByType}};
        nlohmann::ordered_json ts = nlohmann::ordered_json::array();
        for (std::size_t i = 0; i < f.tensors().size(); ++i) {
            const GgufTensor& t = f.tensors()[i];
            std::vector<std::int64_t> shape(t.dims.rbegin(), t.dims.rend());
            nlohmann::ordered_json tj = {{"name", t.name},
                                         {"type", ggmlTypeName(t.type)},
                                         {"shape", shape},
                                         {"offset", f.dataOffset() + t.offset},
                                         {"bytes", t.bytes}};
            if (checksums)
                tj["fp32_sha256"] = sums[i];
            ts.push_back(tj);
        }
        j["tensors"] = ts;
        printJson(j);
        return;
    }
    std::printf("%s  (GGUF v%u, %zu tensors, %s)\n", f.path().c_str(), f.version(), f.tensors().size(),
                humanBytes(double(f.fileBytes())).c_str());
    std::printf("  %-16s %s%s%s\n", "architecture:", m.architecture.c_str(), m.name.empty() ? "" : "  ",
                m.name.c_str());
    std::printf("  %-16s %lld, %lld query heads on %lld KV heads of head_dim %lld (embedding %lld, FFN %lld)\n",
                "layers:", (long long)m.layers, (long long)m.heads, (long long)m.kvHeads, (long long)m.headDim,
                (long long)m.embedding, (long long)m.feedForward);
    std::printf("  %-16s theta %g, scaling %s", "RoPE:", m.ropeTheta, m.ropeScaling.c_str());
    if (m.ropeScaling != "none")
        std::printf(" x%g", m.ropeScalingFactor);
    std::printf("; context %lld\n", (long long)m.contextLength);
    std::printf("  %-16s %g; output %s; attention biases %s\n", "RMSNorm eps:", m.rmsEps,
                m.tiedOutput ? "tied to the token embedding" : "its own matrix", m.attentionBias ? "yes" : "no");
    std::printf("  %-16s %s (pre-tokenizer %s), %lld tokens\n",
                "tokenizer:", m.tokenizerModel.empty() ? "-" : m.tokenizerModel.c_str(),
                m.tokenizerPre.empty() ? "-" : m.tokenizerPre.c_str(), (long long)m.vocabSize);
    std::printf("  %-16s %.1f M parameters;", "weights:", double(m.parameters) / 1e6);
    for (const auto& [type, n] : m.tensorsByType)
        std::printf(" %s x%lld (%s)", type.c_str(), (long long)n, humanBytes(double(m.bytesByType.at(type))).c_str());
    std::printf("\n\n  %-34s %-6s %-16s %10s%s\n", "tensor", "type", "shape", "size",
                checksums ? "  FP32 SHA-256" : "");
    for (std::size_t i = 0; i < f.tensors().size(); ++i) {
        const GgufTensor& t = f.tensors()[i];
        std::printf("  %-34s %-6s %-16s %10s%s%s\n", t.name.c_str(), ggmlTypeName(t.type), t.shapeString().c_str(),
                    humanBytes(double(t.bytes)).c_str(), checksums ? "  " : "", checksums ? sums[i].c_str() : "");
    }
}

} // namespace gsrq::cli

namespace gsrq::cli {

Command registerTokenize(CLI::App& root)
{
    struct Opts {
        std::string model, text;
        bool reflow = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd = root.add_subcommand("tokenize", "A text's token ids in a GGUF model's own vocabulary (no BOS), "
                                                "space-separated on one line");
    cmd->add_option("model", o->model, "GGUF model")->required();
    cmd->add_option("--text", o->text, "UTF-8 text file")->required();
    cmd->add_flag("--reflow", o->reflow, "Re-flow the text first, as gsrq ppl reads it (one paragraph per line)");
    return {cmd, [o] {
                if (modelFormatOf(o->model) != ModelFormat::Gguf)
                    throwInvalid(o->model, ": not a GGUF model");
                const BpeTokenizer tok = BpeTokenizer::fromGguf(GgufFile::open(o->model));
                std::ifstream f(o->text, std::ios::binary);
                if (!f)
                    throwInvalid("--text ", o->text, ": cannot be read");
                std::stringstream ss;
                ss << f.rdbuf();
                std::vector<std::int32_t> ids;
                try {
                    ids = tok.encode(o->reflow ? reflowText(ss.str()) : ss.str());
                } catch (const Error& e) {
                    if (e.kind() == ErrorKind::InvalidInput)
                        throwInvalid("--text ", o->text, ": ", e.what());
                    throw;
                }
                std::string line;
                for (std::size_t i = 0; i < ids.size(); ++i)
                    line += (i ? " " : "") + std::to_string(ids[i]);
                std::printf("%s\n", line.c_str());
            }};
}

} // namespace gsrq::cli
