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
// A comparison's settings as its run records them, from the CLI or the app alike: the settings
// with the weights, τ, whether non-finite rows were dropped, and the backend and device it ran on.
nlohmann::ordered_json compareRunSettings(const CompareSettings& s, const std::string& weights, double tau,
                                          bool dropNonFinite, const ClusterBackend& backend);
// methods as {"km": {...}, "gskm": {...}}; withHistory adds each block's per-iteration stats.
nlohmann::ordered_json toJson(const CompareResult& r, bool withHistory = true);
nlohmann::ordered_json toJson(const PaperCheckSettings& s);
nlohmann::ordered_json toJson(const PaperCheckResult& r);
// A run's summary: {"paper_check": {"claims": N, "holding": H}}.
nlohmann::ordered_json paperCheckSummary(const PaperCheckResult& r);

// One line from a run's summary, for listings: "gskm nmse 0.297, km nmse 0.301", "5 of 7 claims
// hold", "cuda 0.012 s/it"; at most three parts; empty for a summary without any.
std::string runHeadline(const std::string& summaryJson);

// Per tensor: rows, BPA and codebook cost, weights, `train` and `heldout` metrics (the keys of
// compare), per-stage curves and, with withHistory, every clustering's per-iteration stats.
nlohmann::ordered_json toJson(const TensorTrainResult& r, WeightMode weights, bool withHistory = true);
nlohmann::ordered_json toJson(const LayerAttention& a);
nlohmann::ordered_json toJson(const EvalResult& r);

} // namespace gsrq
