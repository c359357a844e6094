#include "result_json.h"

namespace gsrq {

nlohmann::ordered_json toJson(const QuantMetrics& m)
{
    return {{"mse", m.mse}, {"nmse", m.nmse}, {"gain_error", m.gainError}, {"cosine", m.cosine}, {"shrinkage", m.shrinkage}};
}

nlohmann::ordered_json toJson(const IterationStats& it)
{
    return {{"iteration", it.iteration}, {"objective", it.objective}, {"changed", it.changed},
            {"empty_clusters", it.emptyClusters}, {"reseeded", it.reseeded}, {"seconds", it.seconds}};
}

nlohmann::ordered_json toJson(const CompareSettings& s)
{
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (auto m : s.methods)
        methods.push_back(methodName(m));
    return {{"dim", s.dim}, {"k", s.k}, {"iters", s.iterations}, {"seed", s.seed}, {"residual", s.residual},
            {"reseed_empty", s.reseedEmpty}, {"methods", methods}};
}

nlohmann::ordered_json toJson(const WeightSummary& w)
{
    return {{"raw_max", w.rawMax}, {"raw_median", w.rawMedian}, {"raw_max_over_median", w.rawMedian > 0 ? w.rawMax / w.rawMedian : 0.0},
            {"weight_max", w.weightMax}, {"weight_median", w.weightMedian},
            {"weight_max_over_median", w.weightMedian > 0 ? w.weightMax / w.weightMedian : 0.0}, {"lambda", w.lambda}};
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

} // namespace gsrq
