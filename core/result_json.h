#pragma once
// JSON forms of job results, shared by the CLI's --json output and (later) the run store, so every
// face of the tool reports the same keys: per method mse, nmse, gain_error, cosine, shrinkage,
// iterations, seconds, with per-block values and per-iteration history.

#include "compare_job.h"
#include "paper_check.h"
#include "train_job.h"
#include "weights.h"

#include <nlohmann/json.hpp>

namespace gsrq {

nlohmann::ordered_json toJson(const QuantMetrics& m);
nlohmann::ordered_json toJson(const IterationStats& it);
nlohmann::ordered_json toJson(const CompareSettings& s);
nlohmann::ordered_json toJson(const WeightSummary& w);
// methods as {"km": {...}, "gskm": {...}}; withHistory adds each block's per-iteration stats.
nlohmann::ordered_json toJson(const CompareResult& r, bool withHistory = true);
nlohmann::ordered_json toJson(const PaperCheckResult& r);

// Per tensor: rows, BPA and codebook cost, weights, `train` and `heldout` metrics (the keys of
// compare), per-stage curves and, with withHistory, every clustering's per-iteration stats.
nlohmann::ordered_json toJson(const TensorTrainResult& r, WeightMode weights, bool withHistory = true);
nlohmann::ordered_json toJson(const LayerAttention& a);
nlohmann::ordered_json toJson(const EvalResult& r);

} // namespace gsrq
