#include "core/jobs/run_records.h"

#include "core/base/error.h"
#include "core/jobs/result_json.h"

#include <cmath>
#include <set>

namespace gsrq {

const std::vector<std::string>& runKinds()
{
    static const std::vector<std::string> kinds{"compare",       "sweep",        "train",       "eval",    "ppl",
                                                "bench-cluster", "bench-decode", "paper-check", "generate"};
    return kinds;
}

nlohmann::ordered_json compareRunSettings(const CompareSettings& s, const std::string& weights, double tau,
                                          bool dropNonFinite, const ClusterBackend& backend)
{
    auto j = toJson(s);
    j["weights"] = weights;
    j["tau"] = tau;
    j["drop_nonfinite"] = dropNonFinite;
    j["backend"] = backend.name();
    j["device"] = backend.device();
    return j;
}

nlohmann::ordered_json paperCheckSummary(const PaperCheckResult& r)
{
    return {{"paper_check", {{"claims", r.claims.size()}, {"holding", claimsHolding(r)}}}};
}

nlohmann::ordered_json modelCompareRunSettings(const ModelCompareSettings& s, const std::string& tensors, bool plain,
                                               bool residual, const ClusterBackend& backend)
{
    auto j = compareRunSettings(s.compare, weightModeName(s.weights), s.tau, s.dropNonFinite, backend);
    j["residual"] = residual && !plain;
    j["with_residuals"] = residual && plain;
    j["tensors"] = tensors;
    return j;
}

nlohmann::ordered_json compareRunSummary(const CompareResult& r)
{
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& m : r.methods)
        out[methodName(m.method)] = toJson(m.metrics);
    return out;
}

nlohmann::ordered_json modelCompareRunSummary(const ModelCompareResult& r)
{
    int lower = 0;
    for (const auto& c : r.cells) {
        const auto* km = c.result.find(Method::KMeans);
        const auto* gs = c.result.find(Method::GainShape);
        if (km && gs && betterOf("nmse", km->metrics.nmse, gs->metrics.nmse) > 0)
            ++lower;
    }
    return {{"tensors", r.cells.size()}, {"gskm_lower_nmse", lower}};
}

nlohmann::ordered_json sweepRunSettings(const CompareSettings& s, const std::string& weights, double tau,
                                        bool dropNonFinite, const ClusterBackend& backend, SweepAxis axis,
                                        const std::vector<int>& values)
{
    auto j = compareRunSettings(s, weights, tau, dropNonFinite, backend);
    j["over"] = axis == SweepAxis::Dim ? "dim" : "k";
    j["values"] = values;
    return j;
}

nlohmann::ordered_json trainRunSettings(const TrainSettings& s, const std::string& out, const std::string& backend,
                                        const std::string& device)
{
    nlohmann::ordered_json j = {
        {"dim", s.rq.dim},
        {"stages", s.rq.stages},
        {"k", s.rq.k},
        {"bpa", bitsPerActivation(s.rq.dim, s.rq.stages, s.rq.k)},
        {"method", s.methodLabel.empty() ? std::string(methodName(s.rq.method)) : s.methodLabel},
        {"strided_groups", s.rq.stridedGroups},
        {"ema_decay", s.rq.emaDecay},
        {"iters", s.rq.iterations},
        {"seed", s.rq.seed},
        {"beam", s.rq.beam},
        {"beam_train", s.rq.trainOnAllBeams ? "all" : "best"},
        {"reseed_empty", s.rq.reseedEmpty},
        {"weights", weightModeName(s.weights)},
        {"tau", s.tau},
        {"drop_nonfinite", s.dropNonFinite},
        {"tensors", s.tensorPatterns},
        {"layers", s.layers},
        {"key_rope", s.keyRope == KeyRope::Post ? "post" : "as-dumped"},
        {"holdout", s.holdout},
        {"holdout_tail", s.holdoutTail},
        {"eval", s.evalPath},
        {"attention_queries", s.attentionQueries},
        {"with_codes", s.keepCodes},
        {"dtype", s.exportDType == DType::F16 ? "f16" : "f32"},
        {"out", out},
        {"backend", backend},
        {"device", device}};
    j["refine"] = s.rq.refine;
    j["refine_beam"] = s.rq.refineBeam;
    return j;
}

nlohmann::ordered_json trainRunSummary(const TrainJobResult& r)
{
    nlohmann::ordered_json summary = nlohmann::ordered_json::object();
    for (const auto& t : r.tensors)
        summary[t.tensor] = toJson(t.train.metrics);
    return summary;
}

nlohmann::ordered_json evalRunSettings(const std::string& codebooks, int beam, bool dropNonFinite,
                                       const std::map<std::string, std::string>& codebookMetadata)
{
    return {{"codebooks", codebooks},
            {"beam", beam},
            {"drop_nonfinite", dropNonFinite},
            {"codebook_settings", codebookMetadata}};
}

nlohmann::ordered_json kiviEvalRunSettings(const KiviEvalSettings& s)
{
    return {{"method", "kivi"},
            {"name", kiviName(s.kivi)},
            {"bits", s.kivi.bits},
            {"group", s.kivi.group},
            {"residual", s.kivi.residual},
            {"tensors", s.tensorPatterns},
            {"layers", s.layers},
            {"key_rope", s.keyRope == KeyRope::Post ? "post" : "as-dumped"},
            {"attention_queries", s.attentionQueries},
            {"seed", s.seed}};
}

nlohmann::ordered_json kiviEvalRunSummary(const KiviEvalResult& r)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& t : r.tensors) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [name, value] : namedMetrics(t.metrics))
            m[name] = value;
        m["bpa"] = t.bits;
        j[t.tensor] = m;
    }
    return j;
}

nlohmann::ordered_json benchClusterRunSettings(const std::string& data, std::int64_t rows, std::int64_t dim, int k,
                                               int iterations, std::uint64_t seed)
{
    return {{"data", data}, {"rows", rows}, {"dim", dim}, {"k", k}, {"iters", iterations}, {"seed", seed}};
}

nlohmann::ordered_json pplRunSettings(const PplRunSettings& s)
{
    nlohmann::ordered_json books = nlohmann::ordered_json::array();
    for (const auto& m : s.codebookSettings)
        books.push_back(m);
    nlohmann::ordered_json j = {{"model", s.model},
                                {"tokenizer", s.tokenizer},
                                {"source", s.text.empty() ? "generate" : "text"},
                                {"text", s.text},
                                {"seed", s.seed},
                                {"seq_len", s.seqLen},
                                {"sequences", s.sequences},
                                {"codebooks", s.codebooks},
                                {"layers", s.layers},
                                {"codebook_settings", books},
                                {"methods", s.methods},
                                {"train_dump", s.trainDump},
                                {"train_iterations", s.trainIterations},
                                {"train_seed", s.trainSeed}};
    if (s.weights != "fp32") // what every earlier run used, unnamed
        j["weights"] = s.weights;
    return j;
}

nlohmann::ordered_json methodTableSummary(const MethodTableResult& r)
{
    nlohmann::ordered_json j = {{"fp32_perplexity", r.rows.empty() ? 0.0 : r.rows.front().perplexity}};
    nlohmann::ordered_json ms = nlohmann::ordered_json::object();
    for (const auto& row : r.rows)
        ms[row.name] = {{"bits", row.bits}, {"perplexity", row.perplexity}};
    j["methods"] = ms;
    return j;
}

std::vector<MetricRow> methodTableMetrics(const MethodTableResult& r)
{
    std::vector<MetricRow> out;
    for (const auto& row : r.rows) {
        out.push_back({"perplexity", row.family, row.name, -1, -1, "perplexity", row.perplexity});
        out.push_back({"perplexity", row.family, row.name, -1, -1, "bits", row.bits});
        out.push_back({"perplexity", row.family, row.name, -1, -1, "effective_bits", row.effectiveBits});
        if (row.attentionRelL2)
            out.push_back({"perplexity", row.family, row.name, -1, -1, "attention_rel_l2", *row.attentionRelL2});
        for (auto& m : sequenceMetrics(row.family, row.name, row.sequenceNll, row.sequenceTokens, row.deltaInterval))
            out.push_back(std::move(m));
    }
    return out;
}

std::vector<SeriesPoint> methodTableSeries(const MethodTableResult& r)
{
    std::vector<SeriesPoint> out;
    if (r.rows.empty())
        return out;
    const double fp32 = r.rows.front().perplexity;
    std::set<double> fp32At; // FP32's line: one point per distinct bits
    for (std::size_t i = 1; i < r.rows.size(); ++i)
        for (auto& p : perplexitySeries(r.rows[i].family, r.rows[i].bits, r.rows[i].perplexity, fp32))
            if (p.name.rfind("fp32.", 0) != 0 || fp32At.insert(p.x).second)
                out.push_back(std::move(p));
    return out;
}

nlohmann::ordered_json pplRunSummary(double fp32, std::optional<double> withCodebooks)
{
    nlohmann::ordered_json j = {{"fp32_perplexity", fp32}};
    if (withCodebooks)
        j["perplexity"] = *withCodebooks;
    return j;
}

MetricRow pplMetric(const std::string& method, const std::string& codebooks, const std::string& layers, double ppl)
{
    return {"perplexity", method, codebooks + " layers " + layers, -1, -1, "perplexity", ppl};
}

std::vector<MetricRow> pplMetrics(const std::string& method, const std::string& codebooks, const std::string& layers,
                                  double ppl, double bits, double effectiveBits)
{
    MetricRow p = pplMetric(method, codebooks, layers, ppl);
    MetricRow b = p, e = p;
    b.name = "bits";
    b.value = bits;
    e.name = "effective_bits";
    e.value = effectiveBits;
    return {p, b, e};
}

std::vector<MetricRow> sequenceMetrics(const std::string& method, const std::string& tensor,
                                       const std::vector<double>& nll, const std::vector<double>& tokens,
                                       const Interval& deltaInterval)
{
    std::vector<MetricRow> out;
    for (std::size_t i = 0; i < nll.size(); ++i)
        out.push_back({"perplexity", method, tensor, int(i), -1, "sequence_nll", nll[i]});
    for (std::size_t i = 0; i < tokens.size(); ++i)
        out.push_back({"perplexity", method, tensor, int(i), -1, "sequence_tokens", tokens[i]});
    if (deltaInterval.valid()) {
        out.push_back({"perplexity", method, tensor, -1, -1, "delta_percent_low", deltaInterval.lo});
        out.push_back({"perplexity", method, tensor, -1, -1, "delta_percent_high", deltaInterval.hi});
    }
    return out;
}

RunPerplexities runPerplexities(const std::vector<MetricRow>& metrics, const std::vector<SeriesPoint>& series)
{
    struct Entry {
        std::string family, label;
        std::optional<double> ppl, bits, effective;
        Interval interval;
        std::map<int, double> nll, tokens;
    };
    std::vector<Entry> entries; // in the order first recorded
    std::map<std::pair<std::string, std::string>, std::size_t> at;
    for (const auto& m : metrics) {
        if (m.scope != "perplexity")
            continue;
        const auto key = std::make_pair(m.method, m.tensor);
        auto it = at.find(key);
        if (it == at.end()) {
            it = at.emplace(key, entries.size()).first;
            entries.push_back({m.method, m.tensor, {}, {}, {}, {}, {}, {}});
        }
        Entry& e = entries[it->second];
        if (m.name == "perplexity")
            e.ppl = m.value;
        else if (m.name == "bits")
            e.bits = m.value;
        else if (m.name == "effective_bits")
            e.effective = m.value;
        else if (m.name == "delta_percent_low")
            e.interval.lo = m.value;
        else if (m.name == "delta_percent_high")
            e.interval.hi = m.value;
        else if (m.name == "sequence_nll" && m.stage >= 0)
            e.nll[m.stage] = m.value;
        else if (m.name == "sequence_tokens" && m.stage >= 0)
            e.tokens[m.stage] = m.value;
    }
    const auto values = [](const std::map<int, double>& byIndex) {
        std::vector<double> v;
        for (const auto& [i, x] : byIndex)
            if (i == int(v.size())) // a gap: not a full record, none
                v.push_back(x);
        return v.size() == byIndex.size() ? v : std::vector<double>();
    };
    RunPerplexities out;
    for (auto& e : entries) {
        if (!e.ppl)
            continue;
        // FP32: "FP32 layers -" from a ppl run of codebooks files, family "fp32" in a comparison.
        if (e.family == "fp32" || (e.family == "-" && e.label.rfind("FP32", 0) == 0)) {
            out.fp32 = e.ppl;
            out.fp32SequenceNll = values(e.nll);
            out.sequenceTokens = values(e.tokens);
            continue;
        }
        if (!e.bits) // recorded before bits were metrics: the series point at this perplexity
            for (const auto& s : series)
                if (s.name == e.family + ".perplexity_vs_bpa" && s.y == *e.ppl)
                    e.bits = s.x;
        if (!e.bits || !std::isfinite(*e.bits))
            continue; // a single layer of --per-layer
        out.points.push_back({e.family, e.label, *e.bits, e.effective.value_or(*e.bits), *e.ppl,
                              e.effective.has_value(), e.interval, values(e.nll)});
    }
    return out;
}

std::vector<SeriesPoint> decodeSeries(const DecodeBenchPoint& p)
{
    if (!p.skipped.empty() || p.seconds <= 0)
        return {};
    std::vector<SeriesPoint> out = {{cat(decodePathName(p.path), " b=", p.batch), double(p.context), p.seconds * 1e6}};
    if (p.roofline.seconds > 0)
        out.push_back(
            {cat("roofline ", decodePathName(p.path), " b=", p.batch), double(p.context), p.roofline.seconds * 1e6});
    return out;
}

std::vector<MetricRow> decodeMetrics(const DecodeBenchPoint& p)
{
    if (!p.skipped.empty())
        return {};
    const std::string tensor = cat("b=", p.batch, " ctx=", p.context);
    std::vector<MetricRow> rows;
    auto add = [&](const char* name, double v) {
        rows.push_back({"decode", decodePathName(p.path), tensor, -1, -1, name, v});
    };
    add("seconds", p.seconds);
    add("bytes", p.bytes);
    add("bytes_per_second", p.bytesPerSecond);
    if (p.relError >= 0)
        add("rel_error", p.relError);
    if (p.speedupVsFp16 > 0)
        add("speedup_vs_fp16", p.speedupVsFp16);
    add("splits", p.splits);
    if (p.eigenFp32Seconds > 0)
        add("eigen_fp32_seconds", p.eigenFp32Seconds);
    if (p.readRowsSeconds > 0) {
        add("read_rows_seconds", p.readRowsSeconds);
        add("fraction_of_read_rows", p.readRowsSeconds / p.seconds);
    }
    if (p.roofline.seconds > 0) {
        add("roofline_seconds", p.roofline.seconds);
        add("fraction_of_roofline", p.rooflineFraction);
    }
    return rows;
}

std::vector<SeriesPoint> perplexitySeries(const std::string& method, double bpa, double ppl, double fp32)
{
    if (!std::isfinite(bpa))
        return {};
    return {{method + ".perplexity_vs_bpa", bpa, ppl}, {"fp32.perplexity_vs_bpa", bpa, fp32}};
}

nlohmann::ordered_json benchDecodeRunSettings(const DecodeBenchOptions& o, const Codebooks& kb,
                                              const std::string& codebookSource)
{
    nlohmann::ordered_json paths = nlohmann::ordered_json::array();
    for (DecodePath p : o.paths)
        paths.push_back(decodePathName(p));
    nlohmann::ordered_json j = {{"backend", decodeBackendName(o.backend)},
                                {"heads", o.shape.heads},
                                {"kv_heads", o.shape.kvHeads},
                                {"head_dim", o.shape.headDim},
                                {"layers", o.layers},
                                {"dim", kb.dim},
                                {"stages", kb.stages},
                                {"k", kb.k},
                                {"bpa", bitsPerActivation(kb.dim, kb.stages, kb.k)},
                                {"codebooks", codebookSource},
                                {"reps", o.reps},
                                {"warmup", o.warmup},
                                {"seed", o.seed},
                                {"verify", o.verify},
                                {"ctx", o.contexts},
                                {"batch", o.batches},
                                {"paths", paths}};
    if (o.backend == DecodeBackend::Cpu) {
        j["threads"] = o.threads;
        if (!o.isa.empty())
            j["isa"] = o.isa;
    } else
        j["device"] = o.device;
    return j;
}

nlohmann::ordered_json benchDecodeRunSummary(const DecodeBenchReport& rep)
{
    nlohmann::ordered_json j = {{"backend", decodeBackendName(rep.backend)}, {"device", rep.device}};
    if (rep.backend == DecodeBackend::Cpu) {
        j["threads"] = rep.threads;
        j["isa"] = rep.isa;
        j["read_bytes_per_second"] = rep.readBytesPerSecond;
        j["rates"] = {{"dram_bytes_per_second", rep.rates.memory},
                      {"l2_bytes_per_second", rep.rates.l2},
                      {"lookups_per_second", rep.rates.lookups},
                      {"fp32_flops", rep.rates.flops}};
    } else {
        j["copy_bytes_per_second"] = rep.copyBytesPerSecond;
        j["memory_bandwidth_bytes_per_s"] = rep.nominalBandwidth;
        j["rates"] = {{"hbm_bytes_per_second", rep.rates.memory},
                      {"l2_bytes_per_second", rep.rates.l2},
                      {"l2_source", rep.rates.l2Source},
                      {"shared_bytes_per_second", rep.rates.shared},
                      {"fp32_flops", rep.rates.flops}};
    }
    j["append_seconds"] = rep.appendSeconds;
    j["all_verified"] = rep.allVerified();
    return j;
}

std::string decodeDeviceName(const std::string& name, int index)
{
    return cat(name, " (device ", index, ")");
}

std::string cpuDecodeDeviceName(const std::string& model, int threads)
{
    return cat(model, " (", threads, threads == 1 ? " thread)" : " threads)");
}

nlohmann::ordered_json paperCheckRunSettings(const PaperCheckSettings& s, const ClusterBackend& backend)
{
    auto j = toJson(s);
    j["backend"] = backend.name();
    j["device"] = backend.device();
    return j;
}

nlohmann::ordered_json generateRunSettings(const std::string& model, const std::string& text,
                                           const std::string& codebooks, int prefill, const GenerateOptions& o)
{
    auto paths = nlohmann::ordered_json::array();
    for (const DecodePath p : o.paths)
        paths.push_back(decodePathName(p));
    return {{"model", model},
            {"text", text},
            {"codebooks", codebooks},
            {"contexts", o.contexts},
            {"prefill", prefill},
            {"steps", o.steps},
            {"paths", paths},
            {"threads", o.threads},
            {"weights", stepWeightsName(o.weights)},
            {"prefill_weights", stepWeightsName(o.prefillWeights)}};
}

nlohmann::ordered_json generateRunSummary(const GenerateReport& r)
{
    return {{"prefill_tokens", r.prefillTokens},
            {"prefill_seconds", r.prefillSeconds},
            {"prefill_tokens_per_second", r.prefillTokensPerSecond()},
            {"context_note", r.contextNote},
            {"weights", r.weights},
            {"prefill_weights", r.prefillWeights},
            {"isa", r.isa},
            {"threads", r.threads},
            {"points", r.points.size()}};
}

std::vector<MetricRow> generateMetrics(const GeneratePoint& p)
{
    const std::string path = decodePathName(p.path), scope = cat(path, "@", p.context);
    std::vector<MetricRow> rows;
    for (const auto& [name, v] : {std::pair<const char*, double>{"step_ms", p.stepMs},
                                  {"attention_ms", p.attentionMs},
                                  {"append_ms", p.appendMs},
                                  {"attention_share", p.stepMs > 0 ? p.attentionMs / p.stepMs : 0.0},
                                  {"tokens_per_second", p.tokensPerSecond},
                                  {"cache_bytes", p.cacheBytes}})
        rows.push_back({scope, path, "", -1, -1, name, v});
    return rows;
}

std::vector<SeriesPoint> generateSeries(const GeneratePoint& p)
{
    if (p.stepMs <= 0)
        return {};
    const std::string path = decodePathName(p.path);
    return {{cat(path, " ms/token"), double(p.context), p.stepMs},
            {cat(path, " attention ms"), double(p.context), p.attentionMs}};
}

} // namespace gsrq
