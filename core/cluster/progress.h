#pragma once
// What a long job reports as it runs, and how its caller cancels it: every clustering job (compare,
// sweep, model compare, GSRQ training) takes a ProgressFn and calls it once per iteration.
// Thread-safety: the callback runs on the job's thread; it must not block for long.

#include "core/cluster/clustering.h"
#include "core/cluster/metrics.h"

#include <functional>
#include <optional>
#include <string>

namespace gsrq {

struct ProgressEvent {
    std::string what;    // "block 3/8 gskm"
    double fraction = 0; // of the whole job, 0..1
    IterationStats iteration;
    // Which clustering the iteration belongs to (-1 / empty where not applicable).
    std::string tensor;
    Method method = Method::KMeans;
    int subspace = -1;   // the block of compare, the subspace of GSRQ
    int stage = -1;      // GSRQ stage; compare --residual: 0 for the first KM pass, 1 after
    int sweepPoint = -1; // index into the sweep's values
    // Set on the event a GSRQ training sends once a stage is done (RqSettings::reportStages): the
    // whole rows' metrics after stages 0..stage, as RqTrainResult::afterStage will hold them. Such an
    // event is not an iteration (its `iteration` is empty): recorders of passes skip it.
    std::optional<QuantMetrics> afterStage;
};
// Returns false to cancel.
using ProgressFn = std::function<bool(const ProgressEvent&)>;

} // namespace gsrq
