#include "core/jobs/decode_frontier.h"

#include "core/base/error.h"
#include "core/cluster/quantizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace gsrq {

namespace {

// The settings of a run whose codebook shape the decode paths take, or a null JSON.
nlohmann::json decodableShape(const RunInfo& run)
{
    auto set = nlohmann::json::parse(run.settingsJson, nullptr, false);
    if (!set.is_object() || !set.contains("dim") || !set.contains("stages") || !set.contains("k") ||
        set.value("strided_groups", false))
        return nullptr;
    return set;
}

} // namespace

AttentionErrors latestAttentionErrors(RunStore& store)
{
    AttentionErrors quality;
    for (const auto& run : store.listRuns({"train", RunStatus::Done, "", 500})) {
        const auto set = decodableShape(run);
        if (set.is_null())
            continue;
        try {
            const auto key = std::tuple{set["dim"].get<int>(), set["stages"].get<int>(), set["k"].get<int>(),
                                        set.value("key_rope", std::string()) == "post"};
            if (quality.count(key))
                continue; // runs come newest first
            double sum = 0;
            int n = 0;
            for (const auto& m : store.metrics(run.id))
                if (m.scope == "attention" && m.name == "relative_l2") {
                    sum += m.value;
                    ++n;
                }
            if (n)
                quality[key] = {sum / n, run.id};
        } catch (const std::exception&) {
            continue; // a run whose settings cannot be read is left out, not the whole frontier
        }
    }
    return quality;
}

DecodeFrontier decodeFrontier(RunStore& store, std::int64_t context, int batch)
{
    const AttentionErrors quality = latestAttentionErrors(store);
    const std::string tensor = cat("b=", batch, " ctx=", context);
    // (path, D, R, K, the modelled device or "" for measured) → the point: a measured one replaces
    // every modelled one, else the newest stays.
    std::map<std::tuple<std::string, int, int, int, std::string>, FrontierPoint> best;
    DecodeFrontier f;
    bool fp16Measured = false;
    for (const auto& run : store.listRuns({"bench-decode", RunStatus::Done, "", 500})) {
        if (run.backend != "cuda" && run.backend != "model")
            continue; // the CPU's runs are its own frontier, in the speed–quality table
        const auto set = decodableShape(run);
        if (set.is_null())
            continue;
        const bool measured = run.backend == "cuda";
        try {
            const int D = set["dim"].get<int>(), R = set["stages"].get<int>(), K = set["k"].get<int>();
            for (const auto& m : store.metrics(run.id)) {
                if (m.scope != "decode" || m.tensor != tensor || m.name != "seconds" || !(m.value > 0))
                    continue;
                if (m.method == "fp16") {
                    if (f.fp16Seconds == 0 || (measured && !fp16Measured)) {
                        f.fp16Seconds = m.value;
                        f.fp16Device = run.device;
                        fp16Measured = measured;
                    }
                    continue;
                }
                const auto key = std::tuple{m.method, D, R, K, measured ? std::string() : run.device};
                if (best.count(key) || best.count(std::tuple{m.method, D, R, K, std::string()}))
                    continue; // runs come newest first; a measured point stands for every model
                if (measured) // drop the models this measurement replaces
                    std::erase_if(best, [&](const auto& e) {
                        const auto& [path, d, r, k, device] = e.first;
                        return path == m.method && d == D && r == R && k == K && !device.empty();
                    });
                const auto q = quality.find({D, R, K, m.method == "lookup"});
                if (q == quality.end())
                    continue; // no quality for this shape yet
                FrontierPoint p;
                p.path = m.method;
                p.dim = D;
                p.stages = R;
                p.k = K;
                p.bpa = bitsPerActivation(D, R, K);
                p.seconds = m.value;
                p.error = q->second.first;
                p.measured = measured;
                p.device = run.device;
                p.decodeRun = run.id;
                p.trainRun = q->second.second;
                best[key] = p;
            }
        } catch (const std::exception&) {
            continue;
        }
    }
    for (auto& [key, p] : best)
        f.points.push_back(p);
    std::sort(f.points.begin(), f.points.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
        return std::tie(a.path, b.dim, a.bpa, a.device) < std::tie(b.path, a.dim, b.bpa, b.device);
    });
    return f;
}

} // namespace gsrq
