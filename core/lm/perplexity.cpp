#include "core/lm/perplexity.h"

#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/quantizer.h"
#include "core/io/kv_dump.h"
#include "core/lm/gguf_tokenizer.h"
#include "core/lm/rope.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace gsrq {

namespace {

std::uint64_t splitmix64(std::uint64_t& s)
{
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

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

std::vector<std::vector<std::int32_t>> textSequences(const std::vector<std::int32_t>& text, int seqLen, int sequences,
                                                     std::optional<std::int32_t> bos)
{
    if (seqLen < 2)
        throwInvalid("--seq-len ", seqLen, ": needs at least 2 (BOS and a token to predict)");
    if (sequences < 1)
        throwInvalid("--sequences ", sequences, ": needs at least 1");
    const int body = seqLen - (bos ? 1 : 0);
    const std::int64_t need = std::int64_t(sequences) * body;
    if (std::int64_t(text.size()) < need)
        throwInvalid("--text: ", text.size(), " tokens, but --sequences ", sequences, " × ",
                     bos ? cat("(--seq-len ", seqLen, " − 1)") : cat("--seq-len ", seqLen), " needs ", need,
                     "; give a longer text or fewer sequences");
    std::vector<std::vector<std::int32_t>> out;
    for (int s = 0; s < sequences; ++s) {
        std::vector<std::int32_t> seq;
        if (bos)
            seq.push_back(*bos);
        const auto from = text.begin() + std::ptrdiff_t(s) * body;
        seq.insert(seq.end(), from, from + body);
        out.push_back(std::move(seq));
    }
    return out;
}

std::vector<std::vector<std::int32_t>> generateSequences(const Llama2cModel& model, int seqLen, int sequences,
                                                         std::uint64_t seed)
{
    if (seqLen < 2 || seqLen > model.config().maxSeq)
        throwInvalid("--seq-len ", seqLen, ": must be 2 to the model's ", model.config().maxSeq);
    if (sequences < 1)
        throwInvalid("--sequences ", sequences, ": needs at least 1");
    std::uint64_t state = seed;
    std::vector<std::vector<std::int32_t>> out;
    for (int s = 0; s < sequences; ++s) {
        std::vector<std::int32_t> seq{Llama2cTokenizer::kBos};
        Llama2cModel::Cache cache;
        std::int32_t next = Llama2cTokenizer::kBos;
        while (int(seq.size()) < seqLen) {
            const MatrixRF logits = model.forward(std::span<const std::int32_t>(&next, 1), cache);
            const Eigen::RowVectorXf row = logits.row(0);
            Eigen::RowVectorXd p = (row.cast<double>().array() - double(row.maxCoeff())).exp();
            p /= p.sum();
            const double u = double(splitmix64(state) >> 11) * 0x1.0p-53;
            double acc = 0;
            next = std::int32_t(p.size() - 1);
            for (Eigen::Index i = 0; i < p.size(); ++i) {
                acc += p[i];
                if (u < acc) {
                    next = std::int32_t(i);
                    break;
                }
            }
            seq.push_back(next);
        }
        out.push_back(std::move(seq));
    }
    return out;
}

std::vector<std::vector<std::int32_t>> perplexitySequences(const Llama2cModel& model, const Llama2cTokenizer& tok,
                                                           const std::string& textPath, int seqLen, int sequences,
                                                           std::uint64_t seed, std::int64_t* textTokens)
{
    if (textTokens)
        *textTokens = 0;
    if (textPath.empty())
        return generateSequences(model, seqLen, sequences, seed);
    if (seqLen > model.config().maxSeq)
        throwInvalid("--seq-len ", seqLen, ": the model takes at most ", model.config().maxSeq);
    std::ifstream f(textPath, std::ios::binary);
    if (!f)
        throwInvalid("--text ", textPath, ": cannot be read");
    std::stringstream text;
    text << f.rdbuf();
    const auto ids = tok.encode(reflowText(text.str()));
    if (textTokens)
        *textTokens = std::int64_t(ids.size());
    return textSequences(ids, seqLen, sequences);
}

std::vector<std::vector<std::int32_t>> ggufTextSequences(const Llama2cModel& model, const std::string& ggufPath,
                                                         const std::string& textPath, int seqLen, int sequences,
                                                         std::int64_t* textTokens)
{
    if (seqLen > model.config().maxSeq)
        throwInvalid("--seq-len ", seqLen, ": the model takes at most ", model.config().maxSeq);
    const BpeTokenizer tok = BpeTokenizer::fromGguf(GgufFile::open(ggufPath));
    std::ifstream f(textPath, std::ios::binary);
    if (!f)
        throwInvalid("--text ", textPath, ": cannot be read");
    std::stringstream text;
    text << f.rdbuf();
    std::vector<std::int32_t> ids;
    try {
        ids = tok.encode(reflowText(text.str()));
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::InvalidInput)
            throwInvalid("--text ", textPath, ": ", e.what());
        throw;
    }
    if (textTokens)
        *textTokens = std::int64_t(ids.size());
    return textSequences(ids, seqLen, sequences, tok.bos());
}

PerplexitySetup perplexitySetup(const std::string& modelPath, const std::string& tokenizerPath,
                                const std::string& textPath, int seqLen, int sequences, std::uint64_t seed)
{
    PerplexitySetup p{loadLanguageModel(modelPath), {}, 0};
    if (p.model.config().architecture != "llama2.c") {
        if (textPath.empty())
            throwInvalid(modelPath, ": a GGUF model's perplexity is measured on a text: choose one");
        p.sequences = ggufTextSequences(p.model, modelPath, textPath, seqLen, sequences, &p.textTokens);
        return p;
    }
    if (tokenizerPath.empty())
        throwInvalid(modelPath, ": a llama2.c model needs its tokenizer (.bin)");
    const auto tok = Llama2cTokenizer::load(tokenizerPath, p.model.config().vocab);
    p.sequences = perplexitySequences(p.model, tok, textPath, seqLen, sequences, seed, &p.textTokens);
    return p;
}

std::vector<std::vector<std::int32_t>> tokenIdSequences(const std::string& path, const Llama2cConfig& cfg)
{
    std::ifstream f(path);
    if (!f)
        throwInvalid("--token-ids ", path, ": cannot be read");
    std::vector<std::vector<std::int32_t>> out;
    std::string line;
    for (int lineNo = 1; std::getline(f, line); ++lineNo) {
        std::istringstream words(line);
        std::vector<std::int32_t> seq;
        for (std::string w; words >> w;) {
            std::size_t used = 0;
            long long id = -1;
            try {
                id = std::stoll(w, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != w.size() || id < 0 || id >= cfg.vocab)
                throwInvalid("--token-ids ", path, ":", lineNo, ": '", w, "' is not a token id of the model (0 to ",
                             cfg.vocab - 1, ")");
            seq.push_back(std::int32_t(id));
        }
        if (seq.empty())
            continue;
        if (seq.size() < 2 || std::int64_t(seq.size()) > cfg.maxSeq)
            throwInvalid("--token-ids ", path, ":", lineNo, ": a sequence of ", seq.size(),
                         " tokens (2 to the model's ", cfg.maxSeq, ")");
        out.push_back(std::move(seq));
    }
    if (out.empty())
        throwInvalid("--token-ids ", path, ": holds no sequence");
    return out;
}

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

PerplexityResult perplexity(const Llama2cModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                            const KvHook& hook)
{
    PerplexityResult r;
    for (const auto& seq : sequences) {
        Llama2cModel::Cache cache;
        const MatrixRF logits = model.forward(seq, cache, hook);
        for (std::size_t t = 0; t + 1 < seq.size(); ++t)
            r.nll += nllOf(logits.row(Eigen::Index(t)), seq[t + 1]);
        r.tokens += std::int64_t(seq.size()) - 1;
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

KvHook codebookHook(const CodebookFile& file, const std::string& path, const Llama2cConfig& cfg,
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

KvHook kiviHook(const KiviSettings& s, const Llama2cConfig& cfg, const std::vector<int>& layers,
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
