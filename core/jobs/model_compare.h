#pragma once
// The model job: KM against GSKM, with the same settings, on every layer's keys and values a
// selection names (and, optionally, on their 1st residuals), one tensor after another, each loaded
// only when its turn comes. The CLI's `compare --tensors` and the app's model page both run it.

#include "core/cluster/weights.h"
#include "core/io/kv_dump.h"
#include "core/jobs/compare_job.h"

#include <functional>
#include <string>
#include <vector>

namespace gsrq {

// One clustering problem of the job: a tensor, or the 1st residual of one.
struct ModelTarget {
    std::string tensor;
    int layer = -1;
    KvKind kind = KvKind::Other;
    bool residual = false;
    // "layers.3.key", or "layers.3.key (1st residual)": how results and the run store name it.
    std::string label() const;
};

struct ModelCompareSettings {
    CompareSettings compare; // its `residual` is ignored: each target says
    WeightMode weights = WeightMode::None;
    double tau = 1.0;
    bool dropNonFinite = false;
};

struct ModelCell {
    ModelTarget target;
    CompareResult result;
};

struct ModelCompareResult {
    std::vector<ModelCell> cells; // in target order; a cancelled job stops short
    std::size_t planned = 0;
    bool cancelled = false;
};

// The keys and values of layers the comma-free globs match (queries and gradients are not
// clustered), in dump order; with `plain` the tensors themselves, with `residuals` their 1st
// residuals (both: each tensor then its residual). Throws Error(InvalidInput) naming `flag` when
// nothing matches or neither kind is asked for.
std::vector<ModelTarget> modelTargets(const KvDump& dump, const std::vector<std::string>& globs, bool plain,
                                      bool residuals, const std::string& flag = "--tensors");

// Checks every target's shape against the settings and that the weights have gradients, before
// any work starts; errors name the tensor and the flag.
void validateModelCompare(const KvDump& dump, const std::vector<ModelTarget>& targets, const ModelCompareSettings& s);

// Runs the targets in order. progress sees each clustering's events with `tensor` set to the
// target's label and `fraction` of the whole job; returning false cancels (within an iteration).
// onCell runs after each target finishes (not for a cancelled one).
ModelCompareResult runModelCompare(const KvDump& dump, const std::vector<ModelTarget>& targets,
                                   const ModelCompareSettings& s, ClusterBackend& backend,
                                   const ProgressFn& progress = {},
                                   const std::function<void(const ModelCell&)>& onCell = {});

} // namespace gsrq
