#include "core/lm/perplexity.h"

#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/quantizer.h"
#include "core/io/kv_dump.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace gsrq {

namespace {

// log Σ exp(row) and the row's entry at `target`, in double.
double nllOf(const Eigen::Ref<const Eigen::RowVectorXf>& logits, std::int32_t target)
{
    const double m = logits.maxCoeff();
    double sum = 0;
    for (Eigen::Index i = 0; i < logits.size(); ++i)
        sum += std::exp(double(logits[i]) - m);
    return m + std::log(sum) - double(logits[target]);
}

int metaInt(const CodebookFile& f, const char* key, int fallback)
{
    const auto it = f.metadata.find(key);
    if (it == f.metadata.end())
        return fallback;
    try {
        return std::stoi(it->second);
    } catch (const std::exception&) {
        return fallback;
    }
}

} // namespace

CodebookCost codebookCost(const CodebookFile& file, const std::vector<int>& quantizedLayers, std::int64_t tokens,
                          int kvDim)
{
    CodebookCost c;
    if (const auto it = file.metadata.find("method"); it != file.metadata.end())
        c.method = it->second;
    c.bpa = std::nan("");
    if (const auto it = file.metadata.find("bpa"); it != file.metadata.end()) {
        try {
            c.bpa = std::stod(it->second);
        } catch (const std::exception&) {
        }
    }
    double codebookBits = 0;
    int tensors = 0;
    for (const auto& e : file.entries)
        if (const KvName n = parseKvName(e.tensor);
            (n.kind == KvKind::Key || n.kind == KvKind::Value) &&
            std::binary_search(quantizedLayers.begin(), quantizedLayers.end(), n.layer)) {
            codebookBits += 16.0 * double(e.codebooks.data.size());
            ++tensors;
        }
    c.effectiveBpa = c.bpa + codebookBits / (double(tokens) * kvDim * std::max(1, tensors));
    return c;
}

double PerplexityResult::perplexity() const
{
    return tokens > 0 ? std::exp(nll / double(tokens)) : std::nan("");
}

PerplexityResult perplexity(const TransformerModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                            const KvHook& hook)
{
    PerplexityResult r;
    for (const auto& seq : sequences) {
        TransformerModel::Cache cache;
        const MatrixRF logits = model.forward(seq, cache, hook);
        double nll = 0;
        for (std::size_t t = 0; t + 1 < seq.size(); ++t)
            nll += nllOf(logits.row(Eigen::Index(t)), seq[t + 1]);
        const auto predicted = std::int64_t(seq.size()) - 1;
        r.nll += nll;
        r.tokens += predicted;
        r.sequenceNll.push_back(predicted > 0 ? nll / double(predicted) : 0.0);
        r.sequenceTokens.push_back(double(std::max<std::int64_t>(predicted, 0)));
    }
    return r;
}

std::vector<int> quantizedLayers(const CodebookFile& file, const std::vector<int>& layers)
{
    std::set<int> out;
    for (const auto& e : file.entries) {
        const KvName n = parseKvName(e.tensor);
        if ((n.kind == KvKind::Key || n.kind == KvKind::Value) &&
            (layers.empty() || std::find(layers.begin(), layers.end(), n.layer) != layers.end()))
            out.insert(n.layer);
    }
    return {out.begin(), out.end()};
}

KvHook codebookHook(const CodebookFile& file, const std::string& path, const ModelConfig& cfg,
                    const std::vector<int>& layers, ClusterBackend& backend)
{
    const int beam = std::max(1, metaInt(file, "beam", 1));
    const auto rope = file.metadata.find("key_rope");
    const bool post = rope != file.metadata.end() && rope->second == "post";
    for (const auto& e : file.entries)
        if (e.tensor.rfind("layers.", 0) == 0 && e.codebooks.features() != cfg.kvDim())
            throwInvalid(path, ": ", e.tensor, " has codebooks for ", e.codebooks.features(),
                         " features; the model's keys and values have ", cfg.kvDim(),
                         " (kv_heads × head_dim): codebooks of another model?");
    const auto wanted = quantizedLayers(file, layers);
    const auto invFreq = ropeInvFreq(cfg.ropeTheta, cfg.headDim());
    const int hd = cfg.headDim();
    // Codebooks trained on keys of a rotate-half model (transformers' Llama, whose q and k rows are
    // the llama2.c model's permuted within each head) see feature j of a head where an interleaved
    // model has feature 2j (j < hd/2) or 2(j − hd/2) + 1, and the other way round: the keys are put in
    // the codebooks' order for them and back. from[f]: the model's feature that is the file's f.
    const auto pairingMeta = file.metadata.find("rope_pairing");
    if (pairingMeta != file.metadata.end() && pairingMeta->second != "half" && pairingMeta->second != "interleaved")
        throwInvalid(path, ": rope_pairing '", pairingMeta->second, "' is neither interleaved nor half");
    const RopePairing filePairing = pairingMeta != file.metadata.end() && pairingMeta->second == "interleaved"
                                        ? RopePairing::Interleaved
                                    : pairingMeta != file.metadata.end() ? RopePairing::RotateHalf
                                                                         : cfg.pairing;
    std::vector<int> from;
    if (filePairing != cfg.pairing) {
        from.resize(std::size_t(hd));
        for (int j = 0; j < hd / 2; ++j) {
            if (cfg.pairing == RopePairing::Interleaved) { // the file's rotate-half order
                from[std::size_t(j)] = 2 * j;
                from[std::size_t(hd / 2 + j)] = 2 * j + 1;
            } else { // the file's interleaved order
                from[std::size_t(2 * j)] = j;
                from[std::size_t(2 * j + 1)] = hd / 2 + j;
            }
        }
    }
    const RopePairing pairing = cfg.pairing;
    return [&file, &backend, wanted, beam, post, invFreq, hd, from,
            pairing](int layer, MatrixRF& keys, MatrixRF& values, const std::vector<std::int64_t>& positions) {
        if (!std::binary_search(wanted.begin(), wanted.end(), layer))
            return;
        const auto reconstruct = [&](const std::string& tensor, MatrixRF& x) {
            const auto* e = file.find(tensor);
            if (e)
                x = decode(encode(x, e->codebooks, beam, backend), e->codebooks);
        };
        const auto reconstructKeys = [&](const std::string& tensor, MatrixRF& x) {
            if (from.empty()) {
                reconstruct(tensor, x);
                return;
            }
            MatrixRF y(x.rows(), x.cols());
            for (Eigen::Index h = 0; h + hd <= x.cols(); h += hd)
                for (int f = 0; f < hd; ++f)
                    y.col(h + f) = x.col(h + from[std::size_t(f)]);
            reconstruct(tensor, y);
            for (Eigen::Index h = 0; h + hd <= x.cols(); h += hd)
                for (int f = 0; f < hd; ++f)
                    x.col(h + from[std::size_t(f)]) = y.col(h + f);
        };
        if (post && file.find("layers." + std::to_string(layer) + ".key")) {
            MatrixRF k = applyRope(keys, hd, positions, invFreq, pairing);
            reconstructKeys("layers." + std::to_string(layer) + ".key", k);
            std::vector<std::int64_t> back(positions.size());
            std::transform(positions.begin(), positions.end(), back.begin(), [](std::int64_t p) { return -p; });
            keys = applyRope(k, hd, back, invFreq, pairing); // the forward pass rotates again
        } else {
            reconstructKeys("layers." + std::to_string(layer) + ".key", keys);
        }
        reconstruct("layers." + std::to_string(layer) + ".value", values);
    };
}

double KiviCounts::bitsPerValue() const
{
    const double values = double(quantizedValues + fp16Values);
    return values > 0 ? (double(quantizedValues) * bits + double(groups) * 32 + double(fp16Values) * 16) / values
                      : std::nan("");
}

KvHook kiviHook(const KiviSettings& s, const ModelConfig& cfg, const std::vector<int>& layers,
                std::shared_ptr<KiviCounts> counts, const std::string& flag)
{
    validateKivi(s, cfg.kvDim(), KiviAxis::Value, flag + " " + kiviName(s) + ": ");
    if (counts)
        counts->bits = s.bits;
    const int hd = cfg.headDim();
    const auto invFreq = ropeInvFreq(cfg.ropeTheta, hd);
    const RopePairing pairing = cfg.pairing;
    return [s, layers, counts, hd, invFreq, pairing](int layer, MatrixRF& keys, MatrixRF& values,
                                                     const std::vector<std::int64_t>& positions) {
        if (!layers.empty() && std::find(layers.begin(), layers.end(), layer) == layers.end())
            return;
        const MatrixRF rotated = applyRope(keys, hd, positions, invFreq, pairing);
        const auto k = kiviQuantize(rotated, KiviAxis::Key, s);
        std::vector<std::int64_t> back(positions.size());
        std::transform(positions.begin(), positions.end(), back.begin(), [](std::int64_t p) { return -p; });
        keys = applyRope(k.reconstruction, hd, back, invFreq, pairing); // rotated again after
        auto v = kiviQuantize(values, KiviAxis::Value, s);
        values = std::move(v.reconstruction);
        if (counts) {
            counts->quantizedValues += k.quantizedValues + v.quantizedValues;
            counts->fp16Values += k.fp16Values + v.fp16Values;
            counts->groups += k.groups + v.groups;
        }
    };
}

} // namespace gsrq
