#include "core/jobs/method_table.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/quantizer.h"
#include "core/jobs/codebook_perplexity.h"
#include "core/lm/perplexity.h"

#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

namespace gsrq {

namespace {

const char* familyOf(TableMethod k)
{
    switch (k) {
    case TableMethod::Fp32:
        return "fp32";
    case TableMethod::Kivi:
        return "kivi";
    case TableMethod::Cq:
        return "cq";
    case TableMethod::KmRq:
        return "km-rq";
    case TableMethod::Gsrq:
        return "gsrq";
    case TableMethod::Vqllm:
        return "vqllm";
    case TableMethod::File:
        return "codebooks";
    }
    return "?";
}

double mean(const std::vector<LayerAttention>& a)
{
    double s = 0;
    for (const auto& l : a)
        s += l.fidelity.relativeL2;
    return a.empty() ? std::nan("") : s / double(a.size());
}

} // namespace

std::string codebooksFamily(const CodebookFile& f)
{
    const auto get = [&](const char* k) {
        const auto it = f.metadata.find(k);
        return it == f.metadata.end() ? std::string() : it->second;
    };
    const std::string method = get("method"), weights = get("weights");
    if (method.empty())
        return "codebooks";
    if (method == "gskm" && weights.rfind("grad-log", 0) == 0)
        return "gsrq";
    if (method == "km" && (weights.empty() || weights == "none"))
        return "km-rq";
    if (method == "cq" || method == "vqllm")
        return method;
    return weights.empty() || weights == "none" ? method : cat(method, " ", weights);
}

std::vector<MethodSpec> parseMethods(const std::string& list, const std::string& flag)
{
    static const std::regex cq(R"(cq-(\d{1,4})c(\d{1,2})b)");
    static const std::regex rq(R"((km-rq|gsrq|vqllm)@([0-9]*\.?[0-9]+)(\+r(\d{1,3}))?)");
    std::vector<MethodSpec> out;
    std::set<std::string> seen;
    for (const std::string& name : splitTrimmed(list)) {
        if (name.empty())
            continue;
        if (!seen.insert(name).second)
            throwInvalid(flag, ": '", name, "' is listed twice");
        MethodSpec m;
        m.name = name;
        std::smatch g;
        if (name == "fp32") {
            m.kind = TableMethod::Fp32;
        } else if (name.rfind("kivi-", 0) == 0) {
            m.kind = TableMethod::Kivi;
            m.kivi = parseKiviName(name, flag);
        } else if (std::regex_match(name, g, cq)) {
            m.kind = TableMethod::Cq;
            m.channels = std::stoi(g[1]);
            m.blockBits = std::stoi(g[2]);
            if (m.channels < 1)
                throwInvalid(flag, ": '", name, "': CQ couples at least one channel");
            if (m.blockBits < 1 || m.blockBits > 16)
                throwInvalid(flag, ": '", name, "': CQ's bits per block must be between 1 and 16");
        } else if (std::regex_match(name, g, rq)) {
            m.kind = g[1] == "gsrq" ? TableMethod::Gsrq : g[1] == "vqllm" ? TableMethod::Vqllm : TableMethod::KmRq;
            m.bpa = std::stod(g[2]);
            if (!(m.bpa > 0) || m.bpa > 16)
                throwInvalid(flag, ": '", name, "': the bits per activation must be above 0 and at most 16");
            if (g[4].matched) {
                m.refine = std::stoi(g[4]);
                if (m.refine < 1 || m.refine > 100)
                    throwInvalid(flag, ": '", name, "': rounds of joint refinement (+rN) from 1 to 100");
            }
        } else if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") {
            m.kind = TableMethod::File;
            if (!std::filesystem::exists(name))
                throwInvalid(flag, ": codebooks file '", name, "' does not exist");
        } else {
            throwInvalid(
                flag, ": unknown method '", name,
                "' (fp32, kivi-B[gG][rN], cq-<C>c<B>b, km-rq@BPA[+rN], gsrq@BPA[+rN], vqllm@BPA[+rN], or a codebooks "
                ".safetensors file)");
        }
        out.push_back(m);
    }
    if (out.empty())
        throwInvalid(flag, ": names no method");
    return out;
}

TrainSettings methodTrainSettings(const MethodSpec& m, std::int64_t features, bool hasGradients, int iterations,
                                  std::uint64_t seed, std::string* note, const std::string& flag, std::int64_t headDim)
{
    TrainSettings s;
    s.rq.iterations = iterations;
    s.rq.seed = seed;
    s.attentionQueries = 0;
    switch (m.kind) {
    case TableMethod::Cq:
        if (features % m.channels != 0)
            throwInvalid(flag, ": '", m.name, "': ", m.channels, " coupled channels do not divide the ", features,
                         " features of the keys and values");
        s.rq.dim = m.channels;
        s.rq.stages = 1;
        s.rq.k = 1 << m.blockBits;
        s.rq.method = Method::KMeans;
        s.weights = WeightMode::GradSq;
        s.methodLabel = "cq";
        break;
    case TableMethod::KmRq:
    case TableMethod::Gsrq:
    case TableMethod::Vqllm: {
        std::optional<BpaChoice> c = paperBpa(m.bpa, headDim, features);
        if (!c || features % c->dim != 0) {
            const auto sg = suggestBpa(m.bpa, features, 1);
            if (sg.empty())
                throwInvalid(flag, ": '", m.name, "': no D, R, K reach ", m.bpa, " bits per activation on ", features,
                             " features");
            c = sg.front();
        }
        s.rq.dim = c->dim;
        s.rq.stages = c->stages;
        s.rq.k = c->k;
        s.rq.method = m.kind == TableMethod::Gsrq ? Method::GainShape : Method::KMeans;
        s.rq.refine = m.refine;
        s.weights = m.kind == TableMethod::Gsrq ? WeightMode::GradLog : WeightMode::None;
        if (m.kind == TableMethod::Vqllm) {
            s.rq.stridedGroups = true;
            s.rq.emaDecay = 0.5;
            s.methodLabel = "vqllm";
        }
        break;
    }
    default:
        throwInvalid(flag, ": '", m.name, "' is not trained");
    }
    if (s.weights != WeightMode::None && !hasGradients) {
        if (note)
            *note = cat(m.name, ": the dump has no gradients, so it was trained without weights (",
                        weightModeName(s.weights), " needs layers.L.key_grad and value_grad)");
        s.weights = WeightMode::None;
    }
    return s;
}

void validateMethods(const std::vector<MethodSpec>& methods, const ModelConfig& cfg, const std::string& flag)
{
    for (const auto& m : methods) {
        if (m.kind == TableMethod::Kivi)
            validateKivi(m.kivi, cfg.kvDim(), KiviAxis::Value, cat(flag, " ", m.name, ": "));
        else if (m.kind != TableMethod::Fp32 && m.kind != TableMethod::File)
            methodTrainSettings(m, cfg.kvDim(), true, 1, 0, nullptr, flag, cfg.headDim());
    }
}

MethodTableResult runMethodTable(const TransformerModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                                 const MethodTableSettings& s, ClusterBackend& backend, const ProgressFn& progress)
{
    const auto& cfg = model.config();
    validateMethods(s.methods, cfg);
    std::vector<int> layers;
    if (!s.layers.empty()) {
        const auto set = parseLayerList(s.layers);
        if (*set.rbegin() >= cfg.layers)
            throwInvalid("--layers ", s.layers, ": the model has layers 0-", cfg.layers - 1);
        layers.assign(set.begin(), set.end());
    }
    std::string layerGlob;
    for (int l = 0; l < cfg.layers; ++l)
        if (layers.empty() || std::find(layers.begin(), layers.end(), l) != layers.end())
            layerGlob += cat(layerGlob.empty() ? "" : ",", l);

    bool trained = false;
    for (const auto& m : s.methods)
        trained =
            trained || (m.kind != TableMethod::Fp32 && m.kind != TableMethod::Kivi && m.kind != TableMethod::File);
    std::optional<KvDump> dump;
    if (!s.trainDump.empty())
        dump = KvDump::open(s.trainDump);
    else if (trained)
        throwInvalid(
            "--train-dump: trained methods (cq, km-rq, gsrq, vqllm) need a dump of the model's keys and values");
    bool hasGradients = true;
    if (dump && trained) {
        // Every method compresses the same layers: a dump without some of them would leave those
        // layers exact for the trained methods while KIVI quantizes them.
        std::string missing;
        for (int l = 0; l < cfg.layers; ++l)
            if ((layers.empty() || std::find(layers.begin(), layers.end(), l) != layers.end()) &&
                (!dump->find(cat("layers.", l, ".key")) || !dump->find(cat("layers.", l, ".value"))))
                missing += cat(missing.empty() ? "" : ",", l);
        if (!missing.empty())
            throwInvalid("--train-dump ", s.trainDump, ": has no keys and values of layers ", missing,
                         " for the trained methods; give --layers with the dump's layers, or a dump of every layer");
    }
    if (dump) {
        const auto selected = selectTensors(*dump, {}, layerGlob);
        for (const auto* t : selected) {
            if (t->view.features() != cfg.kvDim())
                throwInvalid("--train-dump ", t->view.where(), ": has ", t->view.features(),
                             " features; the model's keys and values have ", cfg.kvDim(),
                             " (kv_heads × head_dim): a dump of another model?");
            hasGradients = hasGradients && dump->gradientOf(*t);
        }
    }
    // KIVI on the dump quantizes keys as the cache holds them (after RoPE) where the dump says how.
    const bool dumpRopes = dump && keysCanBeRotated(*dump);

    MethodTableResult out;
    const auto fp32Result = perplexity(model, sequences);
    out.rows.push_back({"fp32",
                        "fp32",
                        32,
                        32,
                        fp32Result.perplexity(),
                        std::nullopt,
                        "the model as it is",
                        fp32Result.sequenceNll,
                        fp32Result.sequenceTokens,
                        {}});
    const double step = 1.0 / double(s.methods.size());
    for (std::size_t mi = 0; mi < s.methods.size(); ++mi) {
        const auto& m = s.methods[mi];
        if (m.kind == TableMethod::Fp32)
            continue;
        const auto report = [&](double within, const std::string& what) {
            if (!progress)
                return true;
            ProgressEvent ev;
            ev.fraction = (double(mi) + within) * step;
            ev.what = cat(m.name, " ", what);
            return progress(ev);
        };
        if (!report(0, "starting")) {
            out.cancelled = true;
            return out;
        }
        MethodTableRow row;
        row.name = m.name;
        row.family = familyOf(m.kind);
        if (m.refine > 0) // its own series beside the greedy method's
            row.family += cat("+r", m.refine);
        if (m.kind == TableMethod::Kivi) {
            auto counts = std::make_shared<KiviCounts>();
            const auto r = perplexity(model, sequences, kiviHook(m.kivi, cfg, layers, counts));
            row.perplexity = r.perplexity();
            row.sequenceNll = r.sequenceNll;
            row.sequenceTokens = r.sequenceTokens;
            row.bits = counts->bitsPerValue(); // what a cached token costs: B, scales, zeros, FP16 window
            row.effectiveBits = row.bits;
            row.settings = cat(m.kivi.bits, m.kivi.bits == 1 ? " bit" : " bits", ", groups of ", m.kivi.group,
                               m.kivi.residual > 0 ? cat(", the last ", m.kivi.residual, " tokens in FP16") : "",
                               "; keys per channel after RoPE, values per token");
            if (dump && s.attentionQueries > 0) {
                KiviEvalSettings ks;
                ks.kivi = m.kivi;
                ks.layers = layerGlob;
                ks.keyRope = dumpRopes ? KeyRope::Post : KeyRope::AsDumped;
                ks.attentionQueries = s.attentionQueries;
                ks.seed = s.seed;
                const auto r = runKiviEval(*dump, ks);
                if (!r.attention.empty())
                    row.attentionRelL2 = mean(r.attention);
            }
        } else {
            CodebookFile file;
            std::string path = m.name;
            if (m.kind == TableMethod::File) {
                file = readCodebookFile(m.name);
            } else {
                std::string note;
                TrainSettings ts = methodTrainSettings(m, cfg.kvDim(), hasGradients, s.iterations, s.seed, &note,
                                                       "--methods", cfg.headDim());
                if (!note.empty())
                    out.notes.push_back(note);
                ts.layers = layerGlob;
                ts.attentionQueries = s.attentionQueries;
                const auto r = runTrain(*dump, ts, backend,
                                        [&](const ProgressEvent& e) { return report(0.9 * e.fraction, e.what); });
                if (r.cancelled) {
                    out.cancelled = true;
                    return out;
                }
                file = r.file;
                path = cat(m.name, " (trained on ", s.trainDump, ")");
                if (!r.attention.empty())
                    row.attentionRelL2 = mean(r.attention);
                row.settings =
                    cat("D=", ts.rq.dim, " R=", ts.rq.stages, " K=", ts.rq.k, " ", methodName(ts.rq.method), " ",
                        weightModeName(ts.weights), ts.rq.emaDecay > 0 ? cat(", EMA γ ", ts.rq.emaDecay) : "",
                        ts.rq.stridedGroups && ts.rq.dim < cfg.kvDim() ? ", strided groups" : "",
                        ts.rq.refine > 0 ? cat(", ", ts.rq.refine, " rounds of joint refinement") : "");
            }
            if (!report(0.9, "perplexity")) {
                out.cancelled = true;
                return out;
            }
            const auto measured = measureCodebooks(model, sequences, file, path, layers, s.layers, backend);
            row.bits = measured.bpa;
            row.effectiveBits = measured.effectiveBpa;
            if (row.settings.empty())
                row.settings = cat("codebooks file, method ", measured.method, ", layers ", measured.layers);
            if (m.kind == TableMethod::File)
                row.family = codebooksFamily(file);
            row.perplexity = measured.perplexity;
            row.sequenceNll = measured.sequenceNll;
            row.sequenceTokens = measured.sequenceTokens;
        }
        row.deltaInterval = deltaPercentInterval(row.sequenceNll, fp32Result.sequenceNll, fp32Result.sequenceTokens);
        out.rows.push_back(row);
    }
    return out;
}

} // namespace gsrq
