#include "core/jobs/pass_curves.h"

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace gsrq {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <class T> double metricOf(const T& it, std::string_view name)
{
    if (name == "objective")
        return it.objective;
    if (name == "nmse")
        return it.nmse;
    if (name == "cosine")
        return it.cosine;
    if (name == "gain_error")
        return it.gainError;
    if (name == "shrinkage")
        return it.shrinkage;
    if (name == "skipped")
        return it.skipped;
    return kNaN;
}

} // namespace

const std::vector<std::string>& passMetricNames()
{
    static const std::vector<std::string> names{"objective", "nmse", "cosine", "gain_error", "shrinkage", "skipped"};
    return names;
}

double passMetric(const IterationStats& it, std::string_view name)
{
    return metricOf(it, name);
}

double passMetric(const IterationRow& row, std::string_view name)
{
    return metricOf(row, name);
}

std::vector<double> meanOverBlocks(const std::vector<std::vector<double>>& perBlock)
{
    std::size_t passes = 0;
    for (const auto& b : perBlock)
        passes = std::max(passes, b.size());
    std::vector<double> out(passes, kNaN);
    for (std::size_t i = 0; i < passes; ++i) {
        double sum = 0;
        int n = 0;
        for (const auto& b : perBlock) {
            if (b.empty())
                continue;
            const double v = b[std::min(i, b.size() - 1)];
            if (!std::isnan(v)) {
                sum += v;
                ++n;
            }
        }
        if (n > 0)
            out[i] = sum / n;
    }
    return out;
}

std::vector<double> meanPassCurve(const MethodResult& m, std::string_view metric)
{
    std::vector<std::vector<double>> perBlock;
    for (const auto& b : m.blocks) {
        auto& v = perBlock.emplace_back();
        for (const auto& it : b.history)
            v.push_back(passMetric(it, metric));
    }
    return meanOverBlocks(perBlock);
}

std::string PassCurve::label() const
{
    std::string s = method + " " + tensor;
    if (stage >= 0)
        s += " stage " + std::to_string(stage);
    if (blocks > 1)
        s += " (mean of " + std::to_string(blocks) + " blocks)";
    return s;
}

std::vector<PassCurve> meanPassCurves(const std::vector<IterationRow>& rows, std::string_view metric)
{
    using Key = std::tuple<std::string, std::string, int>;
    std::map<Key, std::size_t> index;
    std::vector<PassCurve> curves;
    std::vector<std::map<int, std::vector<double>>> blocks; // per curve: subspace -> passes in order
    for (const auto& r : rows) {
        const Key key{r.method, r.tensor, r.stage};
        auto [it, fresh] = index.try_emplace(key, curves.size());
        if (fresh) {
            curves.push_back({r.method, r.tensor, r.stage, 0, {}});
            blocks.emplace_back();
        }
        // A clustering's passes arrive in order, starting at iteration 0.
        auto& passes = blocks[it->second][r.subspace];
        if (r.iteration == 0)
            passes.clear(); // a re-run of the same block replaces the one before
        passes.push_back(passMetric(r, metric));
    }
    for (std::size_t c = 0; c < curves.size(); ++c) {
        std::vector<std::vector<double>> perBlock;
        for (auto& [sub, v] : blocks[c])
            perBlock.push_back(std::move(v));
        curves[c].blocks = int(perBlock.size());
        curves[c].values = meanOverBlocks(perBlock);
    }
    return curves;
}

} // namespace gsrq
