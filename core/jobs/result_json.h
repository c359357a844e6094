#pragma once
// JSON forms of job results, shared by the CLI's --json output and the run store (through
// core/jobs/run_records.h, which builds each kind of run's settings and summary), so every face of
// the tool reports the same keys: per method mse, nmse, gain_error, cosine, shrinkage,
// iterations, seconds, with per-block values and per-iteration history.

#include "core/cluster/weights.h"
#include "core/jobs/compare_job.h"
#include "core/jobs/paper_check.h"
#include "core/jobs/train_job.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace gsrq {

nlohmann::ordered_json toJson(const QuantMetrics& m);
nlohmann::ordered_json toJson(const IterationStats& it);
nlohmann::ordered_json toJson(const CompareSettings& s);
nlohmann::ordered_json toJson(const WeightSummary& w);
// methods as {"km": {...}, "gskm": {...}}; withHistory adds each block's per-iteration stats.
nlohmann::ordered_json toJson(const CompareResult& r, bool withHistory = true);
nlohmann::ordered_json toJson(const PaperCheckSettings& s);
nlohmann::ordered_json toJson(const PaperCheckResult& r);

// "a.b": value (compact JSON) for every leaf of a run's settings, for settings diffs; string values
// that hold a JSON object (a codebooks file's `settings`, inside a ppl run's) are expanded key by key,
// and lists of objects element by element ("codebook_settings.0.stages").
// Text that is not a JSON object flattens to nothing.
std::map<std::string, std::string> flattenSettings(const std::string& settingsJson);
// The keys whose values are not the same in every one of `flat` (a missing key reads as "-").
std::vector<std::string> settingsThatDiffer(const std::vector<std::map<std::string, std::string>>& flat);

// One line from a run's summary, for listings: "gskm nmse 0.297, km nmse 0.301", "5 of 7 claims
// hold", "cuda 0.012 s/it"; at most three parts; empty for a summary without any.
std::string runHeadline(const std::string& summaryJson);

// Per tensor: rows, BPA and codebook cost, weights, `train` and `heldout` metrics (the keys of
// compare), per-stage curves and, with withHistory, every clustering's per-iteration stats.
nlohmann::ordered_json toJson(const TensorTrainResult& r, WeightMode weights, bool withHistory = true);
nlohmann::ordered_json toJson(const LayerAttention& a);
nlohmann::ordered_json toJson(const EvalResult& r);

} // namespace gsrq
