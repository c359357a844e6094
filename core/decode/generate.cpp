// Token-by-token decoding over the CPU decode paths (generate.h).
#include "core/decode/generate.h"

#include "core/base/error.h"
#include "core/base/stats.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/decode_bench.h"
#include "core/lm/quant_gemm.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace gsrq {

namespace {

double nowMs()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::int32_t argmax(const Eigen::RowVectorXf& logits)
{
    Eigen::Index i = 0;
    logits.maxCoeff(&i);
    return std::int32_t(i);
}

} // namespace

GenerateReport runGenerate(const TransformerModel& model, const std::vector<std::int32_t>& prefill,
                           const CodebookFile& books, const std::string& booksPath, const GenerateOptions& o,
                           const std::function<void(const GeneratePoint&)>& onPoint,
                           const std::function<bool()>& cancelled)
{
    const auto stop = [&] { return cancelled && cancelled(); };
    const auto& cfg = model.config();
    if (prefill.empty())
        throwInvalid("generate: no prefill tokens");
    if (o.steps < 1)
        throwInvalid("--tokens ", o.steps, ": at least one step");
    const auto rope = books.metadata.find("key_rope");
    const bool post = rope != books.metadata.end() && rope->second == "post";
    for (const DecodePath p : o.paths) {
        if (p == DecodePath::Paper)
            throwInvalid("--paths paper: generate runs fp16 and lookup (the paper path's cache holds keys before "
                         "RoPE, which the FP16 cache beside it does not)");
        if (p == DecodePath::Lookup && !post)
            throwInvalid(booksPath, ": the lookup path reads keys after RoPE; these codebooks were trained on keys ",
                         rope == books.metadata.end() ? "of unknown RoPE (no key_rope)" : "before RoPE",
                         " (gsrq train --key-rope post)");
    }
    // The codebooks' keys must be in the model's RoPE pair order (the decode cache takes keys as the
    // model makes them; gsrq ppl reorders, the decode paths do not).
    if (const auto it = books.metadata.find("rope_pairing"); it != books.metadata.end()) {
        const bool half = it->second == "half";
        if (!half && it->second != "interleaved")
            throwInvalid(booksPath, ": rope_pairing '", it->second, "' is neither interleaved nor half");
        if (half != (cfg.pairing == RopePairing::RotateHalf))
            throwInvalid(booksPath, ": codebooks of keys in ", it->second, " RoPE order; this model's keys are ",
                         half ? "interleaved" : "rotate-half", ": train them on this model's own dump");
    }
    const int L = cfg.layers;
    std::vector<const CodebookEntry*> kb(static_cast<std::size_t>(L)), vb(static_cast<std::size_t>(L));
    // Without codebooks only the FP16 path runs: its caches are given stand-in codebooks they never read.
    const bool fp16Only =
        std::all_of(o.paths.begin(), o.paths.end(), [](DecodePath p) { return p == DecodePath::Fp16; });
    const bool standInBooks = books.entries.empty() && fp16Only;
    CodebookEntry standIn;
    if (standInBooks) {
        const DecodeShape shape{cfg.heads, cfg.kvHeads, cfg.headDim()};
        standIn.codebooks = syntheticDecodeBooks(shape, cfg.headDim(), 1, 16, 1);
        std::fill(kb.begin(), kb.end(), &standIn);
        std::fill(vb.begin(), vb.end(), &standIn);
    }
    for (int l = 0; l < L && !standInBooks; ++l) {
        kb[std::size_t(l)] = books.find(cat("layers.", l, ".key"));
        vb[std::size_t(l)] = books.find(cat("layers.", l, ".value"));
        for (const auto* e : {kb[std::size_t(l)], vb[std::size_t(l)]}) {
            if (!e)
                throwInvalid(booksPath, ": has no codebooks for layers.", l, ".key and .value; generate compresses ",
                             "every layer's cache (the model has ", L, ")");
            if (e->codebooks.features() != cfg.kvDim())
                throwInvalid(booksPath, ": ", e->tensor, " has codebooks for ", e->codebooks.features(),
                             " features; the model's keys and values have ", cfg.kvDim());
        }
    }
    const std::int64_t P = std::int64_t(prefill.size());
    for (const auto n : o.contexts)
        if (n < P)
            throwInvalid("--context ", n, ": shorter than the ", P, "-token prefill");

    // The prefill: the forward pass's cache, keys after RoPE (what the FP16 and lookup paths read).
    GenerateReport rep;
    if (stop())
        return rep;
    TransformerModel::Cache pc;
    const double p0 = nowMs();
    const std::int32_t first = argmax(model.prefill(prefill, pc, o.prefillChunk, {}, o.prefillWeights));
    rep.prefillSeconds = (nowMs() - p0) / 1000.0;

    rep.prefillTokens = P;
    rep.contextNote = cat("a ", P, "-token prefill of the text, repeated to each context length (keys and values ",
                          "copied; positions continue after the context)");
    const std::string blocks = model.weightBlocksNote();
    const auto describe = [&](TransformerModel::StepWeights w) {
        return w == TransformerModel::StepWeights::Fp32 || blocks.empty() ? std::string("FP32")
               : w == TransformerModel::StepWeights::Blocks
                   ? cat("GGUF ", blocks, " (FP32 activations)")
                   : cat("GGUF ", blocks, " (8-bit activations, ", quantGemmIsa(), ")");
    };
    rep.weights = describe(o.weights);
    rep.prefillWeights = describe(o.prefillWeights);
    const DecodeShape shape{cfg.heads, cfg.kvHeads, cfg.headDim()};
    for (const auto context : o.contexts) {
        for (const DecodePath path : o.paths) {
            if (stop())
                return rep;
            // Each path from the same state: its own caches of the same context.
            std::vector<std::unique_ptr<CpuDecodeCache>> caches;
            for (int l = 0; l < L; ++l) {
                if (stop())
                    return rep;
                CpuDecodeConfig cc;
                cc.shape = shape;
                cc.capacity = context + o.steps + 1;
                cc.fp16 = true;
                cc.ropeTheta = cfg.ropeTheta;
                cc.threads = o.threads;
                auto c =
                    std::make_unique<CpuDecodeCache>(cc, kb[std::size_t(l)]->codebooks, vb[std::size_t(l)]->codebooks);
                // The FP16 path reads the rows only: its prefill is not quantized (nor held as codes).
                if (path == DecodePath::Fp16)
                    c->appendFp16(pc.keys[std::size_t(l)], pc.values[std::size_t(l)]);
                else
                    c->append(pc.keys[std::size_t(l)], pc.values[std::size_t(l)]);
                c->appendRepeat(context - P);
                caches.push_back(std::move(c));
            }
            rep.isa = caches.front()->isa();
            rep.threads = caches.front()->threads();
            std::int64_t position = context;
            GeneratePoint pt;
            pt.context = context;
            pt.path = path;
            std::vector<double> stepMs, attnMs, appendMs;
            std::int32_t token = first;
            for (int s = 0; s < o.steps; ++s) {
                if (stop())
                    return rep;
                double attn = 0, app = 0;
                const auto attend = [&](int layer, const Eigen::RowVectorXf& q, const Eigen::RowVectorXf& k,
                                        const Eigen::RowVectorXf& v) -> Eigen::RowVectorXf {
                    CpuDecodeCache& c = *caches[std::size_t(layer)];
                    const double t0 = nowMs();
                    if (path == DecodePath::Fp16)
                        c.appendFp16(MatrixRF(k), MatrixRF(v)); // an FP16 cache quantizes nothing
                    else
                        c.append(MatrixRF(k), MatrixRF(v));
                    const double t1 = nowMs();
                    c.setQuery(MatrixRF(q), 0);
                    c.run(path);
                    const double t2 = nowMs();
                    app += t1 - t0;
                    attn += t2 - t1;
                    return c.output().row(0);
                };
                const double t0 = nowMs();
                const Eigen::RowVectorXf logits = model.decodeStep(token, position++, attend, o.weights);
                stepMs.push_back(nowMs() - t0);
                attnMs.push_back(attn);
                appendMs.push_back(app);
                token = argmax(logits);
                pt.tokens.push_back(token);
            }
            pt.stepMs = median(stepMs);
            pt.attentionMs = median(attnMs);
            pt.appendMs = median(appendMs);
            pt.tokensPerSecond = pt.stepMs > 0 ? 1000.0 / pt.stepMs : 0;
            const double tokens = double(context); // the context the step reads (its own few tokens aside)
            double bytes = 0;
            for (int l = 0; l < L; ++l) {
                const auto& k = kb[std::size_t(l)]->codebooks;
                const double bpt = double(PackedCodes::bytesFor(k.stages, PackedCodes::bitsFor(k.k)));
                bytes += path == DecodePath::Fp16 ? tokens * cfg.kvDim() * 2.0 * 2.0 : tokens * k.subspaces * bpt * 2.0;
            }
            pt.cacheBytes = bytes;
            if (onPoint)
                onPoint(pt);
            rep.points.push_back(std::move(pt));
        }
    }
    return rep;
}

} // namespace gsrq
