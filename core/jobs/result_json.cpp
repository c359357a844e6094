#include "core/jobs/result_json.h"

#include "core/base/error.h"

#include <algorithm>
#include <set>

#include <cstdio>

namespace gsrq {

nlohmann::ordered_json toJson(const QuantMetrics& m)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [name, value] : namedMetrics(m))
        j[name] = value;
    return j;
}

nlohmann::ordered_json toJson(const IterationStats& it)
{
    // NaN (not computed) is written as null.
    return {{"iteration", it.iteration},
            {"objective", it.objective},
            {"nmse", it.nmse},
            {"cosine", it.cosine},
            {"gain_error", it.gainError},
            {"shrinkage", it.shrinkage},
            {"changed", it.changed},
            {"empty_clusters", it.emptyClusters},
            {"reseeded", it.reseeded},
            {"skipped", it.skipped},
            {"seconds", it.seconds}};
}

nlohmann::ordered_json toJson(const CompareSettings& s)
{
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (auto m : s.methods)
        methods.push_back(methodName(m));
    return {{"dim", s.dim},           {"k", s.k},
            {"iters", s.iterations},  {"seed", s.seed},
            {"residual", s.residual}, {"reseed_empty", s.reseedEmpty},
            {"methods", methods}};
}

nlohmann::ordered_json toJson(const WeightSummary& w)
{
    return {{"raw_max", w.rawMax},
            {"raw_median", w.rawMedian},
            {"raw_max_over_median", w.rawMedian > 0 ? w.rawMax / w.rawMedian : 0.0},
            {"weight_max", w.weightMax},
            {"weight_median", w.weightMedian},
            {"weight_max_over_median", w.weightMedian > 0 ? w.weightMax / w.weightMedian : 0.0},
            {"lambda", w.lambda}};
}

nlohmann::ordered_json toJson(const CompareResult& r, bool withHistory)
{
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& mr : r.methods) {
        nlohmann::ordered_json j = toJson(mr.metrics);
        j["iterations"] = mr.iterations;
        j["seconds"] = mr.seconds;
        j["converged_blocks"] = mr.convergedBlocks;
        nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
        for (const auto& b : mr.blocks) {
            nlohmann::ordered_json bj = {{"block", b.block}};
            bj.update(toJson(b.metrics));
            bj["iterations"] = b.iterations;
            bj["stop"] = stopReasonName(b.stop);
            bj["seconds"] = b.seconds;
            if (withHistory) {
                nlohmann::ordered_json h = nlohmann::ordered_json::array();
                for (const auto& it : b.history)
                    h.push_back(toJson(it));
                bj["history"] = h;
            }
            blocks.push_back(bj);
        }
        j["blocks"] = blocks;
        out[methodName(mr.method)] = j;
    }
    return out;
}

nlohmann::ordered_json toJson(const TensorTrainResult& r, WeightMode weights, bool withHistory)
{
    nlohmann::ordered_json j = {{"tensor", r.tensor},
                                {"rows", r.rows},
                                {"heldout_rows", r.heldoutRows},
                                {"features", r.features},
                                {"dropped_nonfinite_rows", r.droppedRows},
                                {"rope_applied", r.ropeApplied},
                                {"dim", r.train.codebooks.dim},
                                {"subspaces", r.train.codebooks.subspaces},
                                {"stages", r.train.codebooks.stages},
                                {"k", r.train.codebooks.k},
                                {"bpa", r.bpa},
                                {"codebook_bytes", r.codebookBytes},
                                {"effective_bpa", r.effectiveBpa}};
    if (weights != WeightMode::None)
        j["weight_summary"] = toJson(r.weightSummary);
    int iterations = 0;
    for (const auto& c : r.train.clusterings)
        iterations = std::max(iterations, c.iterations);
    auto train = toJson(r.train.metrics);
    train["iterations"] = iterations;
    train["seconds"] = r.train.seconds;
    j["train"] = train;
    if (r.heldout) {
        auto h = toJson(*r.heldout);
        h["iterations"] = iterations;
        h["seconds"] = r.heldoutSeconds;
        j["heldout"] = h;
    }
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (std::size_t s = 0; s < r.train.afterStage.size(); ++s) {
        nlohmann::ordered_json sj = {{"stage", s + 1}};
        sj.update(toJson(r.train.afterStage[s]));
        stages.push_back(sj);
    }
    j["stages"] = stages;
    if (!r.train.refinement.empty()) {
        nlohmann::ordered_json rounds = nlohmann::ordered_json::array();
        for (const auto& rr : r.train.refinement) {
            nlohmann::ordered_json rj = {{"round", rr.round},
                                         {"objective_after_update", rr.objectiveAfterUpdate},
                                         {"objective", rr.objective},
                                         {"rows_recoded", rr.rowsRecoded},
                                         {"update_reverted", rr.updateReverted},
                                         {"seconds", rr.seconds}};
            rj["train"] = toJson(rr.train);
            if (rr.heldout)
                rj["heldout"] = toJson(*rr.heldout);
            rounds.push_back(rj);
        }
        nlohmann::ordered_json before = {{"objective", r.train.objectiveBeforeRefine}};
        if (!r.train.afterStage.empty())
            before["train"] = toJson(r.train.afterStage.back());
        if (r.train.heldoutBeforeRefine)
            before["heldout"] = toJson(*r.train.heldoutBeforeRefine);
        j["refinement"] = {{"before", before}, {"rounds", rounds}, {"kept_round", r.train.keptRound}};
    }
    if (withHistory) {
        nlohmann::ordered_json cl = nlohmann::ordered_json::array();
        for (const auto& c : r.train.clusterings) {
            nlohmann::ordered_json h = nlohmann::ordered_json::array();
            for (const auto& it : c.history)
                h.push_back(toJson(it));
            cl.push_back({{"stage", c.stage + 1},
                          {"subspace", c.subspace},
                          {"iterations", c.iterations},
                          {"stop", stopReasonName(c.stop)},
                          {"seconds", c.seconds},
                          {"history", h}});
        }
        j["clusterings"] = cl;
    }
    return j;
}

nlohmann::ordered_json toJson(const LayerAttention& a)
{
    return {{"layer", a.layer},
            {"keys", a.keys},
            {"values", a.values},
            {"queries", a.fidelity.queries},
            {"relative_l2", a.fidelity.relativeL2},
            {"top8_overlap", a.fidelity.top8Overlap}};
}

nlohmann::ordered_json toJson(const EvalResult& r)
{
    nlohmann::ordered_json j = {{"tensor", r.tensor}, {"rows", r.rows}};
    j.update(toJson(r.metrics));
    j["seconds"] = r.seconds;
    return j;
}

nlohmann::ordered_json toJson(const PaperCheckSettings& s)
{
    return {{"data", "synthetic gaussian (i.i.d. N(0, 1))"},
            {"rows", s.rows},
            {"iters", s.iterations},
            {"seed", s.seed},
            {"dims", s.dims},
            {"fixed_k", s.fixedK},
            {"ks", s.ks},
            {"fixed_dim", s.fixedDim},
            {"bpas", s.bpas},
            {"rq_rows", s.rqTrainRows},
            {"rq_heldout", s.rqHeldOutRows},
            {"rq_iters", s.rqIterations},
            {"rq_beam", s.rqBeam},
            {"rq_refine", s.rqRefine}};
}

nlohmann::ordered_json toJson(const PaperCheckResult& r)
{
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [axis, points] : {std::pair{"dim", &r.dimSweep}, std::pair{"k", &r.kSweep}}) {
        nlohmann::ordered_json pts = nlohmann::ordered_json::array();
        for (const auto& p : *points) {
            nlohmann::ordered_json pj = {{axis, p.value}, {"blocks", p.result.blocks}};
            pj.update(toJson(p.result, false));
            pts.push_back(pj);
        }
        out[std::string("sweep_") + axis] = pts;
    }
    nlohmann::ordered_json rq = nlohmann::ordered_json::array();
    for (const auto& p : r.rq)
        rq.push_back({{"bpa", p.bpa},
                      {"dim", p.dim},
                      {"stages", p.stages},
                      {"k", p.k},
                      {"shannon_bound_nmse", p.shannon},
                      {"km_heldout_nmse", p.kmHeldOut},
                      {"gskm_heldout_nmse", p.gskmHeldOut},
                      {"gskm_beam_heldout_nmse", p.gskmBeamHeldOut},
                      {"gskm_refined_heldout_nmse", p.gskmRefinedHeldOut}});
    out["rq"] = rq;
    nlohmann::ordered_json claims = nlohmann::ordered_json::array();
    for (const auto& c : r.claims)
        claims.push_back({{"id", c.id}, {"claim", c.text}, {"holds", c.holds}, {"detail", c.detail}});
    out["claims"] = claims;
    out["cancelled"] = r.cancelled;
    out["seconds"] = r.seconds;
    return out;
}

std::string runHeadline(const std::string& summaryJson)
{
    const auto j = nlohmann::ordered_json::parse(summaryJson, nullptr, false);
    std::string out;
    if (!j.is_object())
        return out;
    const auto number = [](const nlohmann::ordered_json& o, const char* key) {
        return o.contains(key) && o[key].is_number();
    };
    if (number(j, "fp32_perplexity") && j.contains("methods") && j["methods"].is_object() && j["methods"].size() > 1) {
        // The comparison table: how many methods, and the lowest perplexity at 1 bit or less.
        std::string best;
        double bestPpl = 0;
        for (auto it = j["methods"].begin(); it != j["methods"].end(); ++it)
            if (number(it.value(), "bits") && number(it.value(), "perplexity") &&
                it.value()["bits"].get<double>() <= 1 &&
                (best.empty() || it.value()["perplexity"].get<double>() < bestPpl)) {
                best = it.key();
                bestPpl = it.value()["perplexity"].get<double>();
            }
        char buf[256];
        if (best.empty())
            std::snprintf(buf, sizeof buf, "%zu methods beside FP32 %.4g", j["methods"].size() - 1,
                          j["fp32_perplexity"].get<double>());
        else
            std::snprintf(buf, sizeof buf, "%zu methods beside FP32 %.4g; at ≤ 1 bit %s %.4g", j["methods"].size() - 1,
                          j["fp32_perplexity"].get<double>(), best.c_str(), bestPpl);
        return buf;
    }
    if (number(j, "answers") && j.contains("cells") && j["cells"].is_array()) {
        // A tasks run: its answers, and each method's accuracy over its cells.
        std::vector<std::pair<std::string, std::pair<double, int>>> acc;
        for (const auto& c : j["cells"]) {
            const std::string m = c.value("method", "");
            auto it = std::find_if(acc.begin(), acc.end(), [&](const auto& a) { return a.first == m; });
            if (it == acc.end())
                it = acc.insert(acc.end(), {m, {0.0, 0}});
            it->second.first += c.value("accuracy", 0.0);
            it->second.second += 1;
        }
        out = cat(j["answers"].get<std::int64_t>(), " answers");
        for (std::size_t i = 0; i < acc.size() && i < 4; ++i) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%s %s %.2f", i == 0 ? ";" : ",", acc[i].first.c_str(),
                          acc[i].second.first / std::max(1, acc[i].second.second));
            out += buf;
        }
        if (acc.size() > 4)
            out += cat(", … (", acc.size(), " methods)");
        return out;
    }
    if (number(j, "tensors") && number(j, "gskm_lower_nmse")) { // a model run: KM and GSKM on every tensor
        char buf[128];
        std::snprintf(buf, sizeof buf, "GSKM lower nmse on %d of %d tensors", j["gskm_lower_nmse"].get<int>(),
                      j["tensors"].get<int>());
        return buf;
    }
    if (j.contains("all_verified") && j.contains("backend")) { // bench-decode
        const std::string isa = j.value("isa", std::string()), device = j.value("device", std::string());
        return cat(j.value("backend", std::string()), isa.empty() ? "" : " " + isa,
                   number(j, "threads") ? cat(", ", j["threads"].get<int>(), " threads") : std::string(),
                   device.empty() || !isa.empty() ? "" : " on " + device,
                   j.value("all_verified", false) ? "; every path verified" : "; NOT every path verified");
    }
    if (number(j, "prefill_tokens") && number(j, "points")) { // generate: a real model decoded token by token
        return cat(j["points"].get<int>(), " points after a ", j["prefill_tokens"].get<int>(), "-token prefill",
                   j.contains("weights") ? cat(", weights ", j.value("weights", std::string())) : std::string(),
                   number(j, "threads") ? cat(", ", j["threads"].get<int>(), " threads") : std::string());
    }
    if (number(j, "fp32_perplexity")) { // a ppl run: FP32, and with the codebooks where one file was measured
        char buf[128];
        if (number(j, "perplexity"))
            std::snprintf(buf, sizeof buf, "perplexity %.4g (FP32 %.4g)", j["perplexity"].get<double>(),
                          j["fp32_perplexity"].get<double>());
        else
            std::snprintf(buf, sizeof buf, "FP32 perplexity %.4g", j["fp32_perplexity"].get<double>());
        return buf;
    }
    int shown = 0;
    for (auto it = j.begin(); it != j.end() && shown < 3; ++it) {
        const auto& v = it.value();
        if (!v.is_object())
            continue;
        char buf[128];
        if (number(v, "claims") && number(v, "holding"))
            std::snprintf(buf, sizeof buf, "%d of %d claims hold", v["holding"].get<int>(), v["claims"].get<int>());
        else if (number(v, "nmse"))
            std::snprintf(buf, sizeof buf, "%s nmse %.4g", it.key().c_str(), v["nmse"].get<double>());
        else if (number(v, "seconds_per_iteration"))
            std::snprintf(buf, sizeof buf, "%s %.3g s/it", it.key().c_str(), v["seconds_per_iteration"].get<double>());
        else
            continue;
        out += (out.empty() ? "" : ", ") + std::string(buf);
        ++shown;
    }
    return out;
}

namespace {

void flattenInto(const nlohmann::ordered_json& j, const std::string& prefix, std::map<std::string, std::string>& out)
{
    if (j.is_string()) {
        const auto& s = j.get_ref<const std::string&>();
        if (!s.empty() && s.front() == '{') {
            const auto nested = nlohmann::ordered_json::parse(s, nullptr, false);
            if (nested.is_object()) {
                flattenInto(nested, prefix, out);
                return;
            }
        }
    }
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it)
            flattenInto(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
        return;
    }
    // A list of objects (a ppl run's codebook_settings, one per file) by index; a list of plain values
    // (methods, tensors, values) stays one value.
    if (j.is_array() && std::any_of(j.begin(), j.end(), [](const auto& e) { return e.is_object(); })) {
        for (std::size_t i = 0; i < j.size(); ++i)
            flattenInto(j[i], cat(prefix, ".", i), out);
        return;
    }
    out[prefix] = j.dump();
}

} // namespace

std::map<std::string, std::string> flattenSettings(const std::string& settingsJson)
{
    std::map<std::string, std::string> out;
    const auto j = nlohmann::ordered_json::parse(settingsJson, nullptr, false);
    if (j.is_object())
        flattenInto(j, "", out);
    return out;
}

std::vector<std::string> settingsThatDiffer(const std::vector<std::map<std::string, std::string>>& flat)
{
    std::set<std::string> keys;
    for (const auto& f : flat)
        for (const auto& [k, v] : f)
            keys.insert(k);
    std::vector<std::string> out;
    for (const auto& k : keys) {
        const auto value = [&](const std::map<std::string, std::string>& f) {
            const auto it = f.find(k);
            return it == f.end() ? std::string("-") : it->second;
        };
        for (const auto& f : flat)
            if (value(f) != value(flat.front())) {
                out.push_back(k);
                break;
            }
    }
    return out;
}

} // namespace gsrq
