#include "core/jobs/model_compare.h"

#include "core/base/error.h"
#include "core/cluster/weights.h"
#include "core/jobs/train_job.h"

namespace gsrq {

std::string ModelTarget::label() const
{
    return residual ? tensor + " (1st residual)" : tensor;
}

std::vector<ModelTarget> modelTargets(const KvDump& dump, const std::vector<std::string>& globs, bool plain,
                                      bool residuals, const std::string& flag)
{
    if (!plain && !residuals)
        throwInvalid(flag, ": choose the tensors, their 1st residuals, or both");
    std::vector<ModelTarget> out;
    std::string joined;
    for (const auto& g : globs)
        joined += (joined.empty() ? "" : ",") + g;
    std::vector<const KvTensor*> picked;
    try {
        picked = selectTensors(dump, globs, "");
    } catch (const Error&) {
        throwInvalid(flag, " '", joined, "': matches no layer's key or value in ", dump.path());
    }
    for (const auto* t : picked) {
        if (t->kind != KvKind::Key && t->kind != KvKind::Value)
            continue;
        if (plain)
            out.push_back({t->view.name, t->layer, t->kind, false});
        if (residuals)
            out.push_back({t->view.name, t->layer, t->kind, true});
    }
    if (out.empty())
        throwInvalid(flag, " '", joined, "': matches no layer's key or value in ", dump.path());
    return out;
}

void validateModelCompare(const KvDump& dump, const std::vector<ModelTarget>& targets, const ModelCompareSettings& s)
{
    for (const auto& target : targets) {
        const auto& t = dump.get(target.tensor);
        if (t.view.shape.size() < 2)
            throwInvalid("tensor '", target.tensor, "' in ", dump.path(), " is not a matrix");
        try {
            validateCompare(s.compare, t.view.rows(), t.view.features());
        } catch (const Error& e) {
            throwInvalid("tensor '", target.tensor, "': ", e.what());
        }
        if (s.weights != WeightMode::None && !dump.gradientOf(t))
            throwInvalid("--weights ", weightModeName(s.weights), ": ", dump.path(), " has no gradient for '",
                         target.tensor, "'");
    }
}

ModelCompareResult runModelCompare(const KvDump& dump, const std::vector<ModelTarget>& targets,
                                   const ModelCompareSettings& s, ClusterBackend& backend, const ProgressFn& progress,
                                   const std::function<void(const ModelCell&)>& onCell)
{
    ModelCompareResult out;
    out.planned = targets.size();
    const double n = double(std::max<std::size_t>(targets.size(), 1));
    for (std::size_t i = 0; i < targets.size(); ++i) {
        const ModelTarget& target = targets[i];
        const auto& t = dump.get(target.tensor);
        const LoadedTensor data = loadForClustering(t, s.dropNonFinite);
        const Eigen::VectorXf w = weightsFor(dump, t, data, s.weights, s.tau);
        CompareSettings one = s.compare;
        one.residual = target.residual;
        const std::string label = target.label();
        auto r = runCompare(data.rows, w.size() ? w.data() : nullptr, one, backend, [&](const ProgressEvent& e) {
            if (!progress)
                return true;
            ProgressEvent scaled = e;
            scaled.tensor = label;
            scaled.fraction = (double(i) + e.fraction) / n;
            scaled.what = label + ": " + e.what;
            return progress(scaled);
        });
        if (r.cancelled) {
            out.cancelled = true;
            break;
        }
        out.cells.push_back({target, std::move(r)});
        if (onCell)
            onCell(out.cells.back());
    }
    return out;
}

} // namespace gsrq
