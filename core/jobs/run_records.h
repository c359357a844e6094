#pragma once
// What each kind of run records in the run store, built in one place for both faces (the CLI and
// the app): the same kind of run has the same settings keys, summary and rows whichever face ran it
// (tests/tst_studio.cpp runs each kind from both and compares the keys). A face passes what it knows
// (its options) and what differs between faces (the command line, how failures are kept) stays
// with the face.

#include "core/cluster/cluster_backend.h"
#include "core/decode/decode_bench.h"
#include "core/decode/generate.h"
#include "core/jobs/compare_job.h"
#include "core/jobs/method_table.h"
#include "core/jobs/model_compare.h"
#include "core/jobs/paper_check.h"
#include "core/jobs/train_job.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

// Every kind of run, as the store spells it: compare, sweep, train, eval, ppl, bench-cluster,
// bench-decode, paper-check.
const std::vector<std::string>& runKinds();

// ---- compare: one tensor, or many (model compare, + "tensors") ----
// The settings with the weights, τ, whether non-finite rows were dropped, and the backend and device.
nlohmann::ordered_json compareRunSettings(const CompareSettings& s, const std::string& weights, double tau,
                                          bool dropNonFinite, const ClusterBackend& backend);
// Many tensors: `tensors` the globs as given; plain and residual say which targets ran (the CLI
// runs one or the other, the app may run both).
nlohmann::ordered_json modelCompareRunSettings(const ModelCompareSettings& s, const std::string& tensors, bool plain,
                                               bool residual, const ClusterBackend& backend);
// {"km": {metrics}, "gskm": {metrics}} of one comparison; {"tensors": N, "gskm_lower_nmse": M} of many.
nlohmann::ordered_json compareRunSummary(const CompareResult& r);
nlohmann::ordered_json modelCompareRunSummary(const ModelCompareResult& r);

// ---- sweep ----
nlohmann::ordered_json sweepRunSettings(const CompareSettings& s, const std::string& weights, double tau,
                                        bool dropNonFinite, const ClusterBackend& backend, SweepAxis axis,
                                        const std::vector<int>& values);

// ---- train ----
// Everything the training used (the rate as D, R, K and bits per activation), the file it writes
// (`out`, empty when none yet) and the backend's name and device.
nlohmann::ordered_json trainRunSettings(const TrainSettings& s, const std::string& out, const std::string& backend,
                                        const std::string& device);
// {<tensor>: metrics} of the tensors trained (those that finished, for a cancelled run).
nlohmann::ordered_json trainRunSummary(const TrainJobResult& r);

// ---- eval ----
// The codebooks file evaluated, the beam used, and the file's own settings (its metadata).
nlohmann::ordered_json evalRunSettings(const std::string& codebooks, int beam, bool dropNonFinite,
                                       const std::map<std::string, std::string>& codebookMetadata);

// KIVI's evaluation (no codebooks): "method": "kivi", its bits, group and FP16 window, the tensors,
// layers, where keys were quantized and the attention sample.
nlohmann::ordered_json kiviEvalRunSettings(const KiviEvalSettings& s);
// {<tensor>: metrics with "bpa"} of the tensors evaluated.
nlohmann::ordered_json kiviEvalRunSummary(const KiviEvalResult& r);

// ---- bench-cluster ----
nlohmann::ordered_json benchClusterRunSettings(const std::string& data, std::int64_t rows, std::int64_t dim, int k,
                                               int iterations, std::uint64_t seed);

// ---- ppl ----
struct PplRunSettings {
    std::string model, tokenizer;
    std::string text; // the held-out text; empty: sequences generated from the model
    std::uint64_t seed = 0;
    int seqLen = 0, sequences = 0;
    std::vector<std::string> codebooks; // the files measured; empty for codebooks held in memory
    std::string layers;                 // "" for all
    std::string weights = "fp32";       // the forward pass's products (TransformerModel::StepWeights)
    // Each measured file's metadata (the app's in-memory codebooks: theirs).
    std::vector<std::map<std::string, std::string>> codebookSettings;
    // The comparison table (core/jobs/method_table.h): the methods as named, the dump trained
    // methods learn from, and their iterations and seed; empty and 0 when no table ran.
    std::vector<std::string> methods;
    std::string trainDump;
    int trainIterations = 0;
    std::uint64_t trainSeed = 0;
};
nlohmann::ordered_json pplRunSettings(const PplRunSettings& s);
// {"fp32_perplexity": x} and, where one set of codebooks was measured, "perplexity": its value.
nlohmann::ordered_json pplRunSummary(double fp32, std::optional<double> withCodebooks);
// The comparison table's summary: {"fp32_perplexity": x, "methods": {name: {bits, perplexity}}}.
nlohmann::ordered_json methodTableSummary(const MethodTableResult& r);
// Its rows in the store: per method "perplexity", "bits", "effective_bits", "attention_rel_l2"
// (scope "perplexity", method: the family, tensor: the name), and the perplexity-against-bits series of
// each family.
std::vector<MetricRow> methodTableMetrics(const MethodTableResult& r);
std::vector<SeriesPoint> methodTableSeries(const MethodTableResult& r);
// A metric row of one perplexity: label "FP32 layers -" or "<file> layers <list>".
MetricRow pplMetric(const std::string& method, const std::string& codebooks, const std::string& layers, double ppl);
// The rows of one evaluated cache on the perplexity-against-bits chart: its perplexity (pplMetric's
// row) beside its nominal "bits" and "effective_bits" (codebooks counted) per activation.
std::vector<MetricRow> pplMetrics(const std::string& method, const std::string& codebooks, const std::string& layers,
                                  double ppl, double bits, double effectiveBits);

// One evaluation's sequences as metric rows beside its perplexity (same scope, method and tensor):
// "sequence_nll" and "sequence_tokens" with stage = the sequence's index, and its Δ% interval
// against FP32 as "delta_percent_low" and "delta_percent_high" where it is valid.
std::vector<MetricRow> sequenceMetrics(const std::string& method, const std::string& tensor,
                                       const std::vector<double>& nll, const std::vector<double>& tokens,
                                       const Interval& deltaInterval);

// A ppl run's evaluations, read back from its rows: FP32's perplexity and each evaluated cache that
// has bits (a whole codebooks file or a comparison's method; not --per-layer's single layers), for
// the perplexity-against-bits charts of both pages and the Runs page's comparison of runs.
struct PerplexityPoint {
    std::string family; // the method: gskm, km, kivi, gsrq, cq...
    std::string label;  // the codebooks file and its layers, or the comparison's method name
    double bits = 0;
    double effectiveBits = 0; // the nominal bits where a run recorded none (before they were)
    double perplexity = 0;
    bool effectiveRecorded = true; // false: effectiveBits is the nominal bits
    Interval deltaInterval;        // Δ% against FP32, 95% (invalid: recorded before intervals were)
    std::vector<double> sequenceNll;
};
struct RunPerplexities {
    std::optional<double> fp32;
    std::vector<double> fp32SequenceNll, sequenceTokens; // FP32's per sequence (empty: not recorded)
    std::vector<PerplexityPoint> points;                 // in the order recorded
};
// From the run's metric rows (scope "perplexity") and its series (<method>.perplexity_vs_bpa gives
// the bits of runs recorded before their bits were metrics).
RunPerplexities runPerplexities(const std::vector<MetricRow>& metrics, const std::vector<SeriesPoint>& series);

// A decode-latency point: the series "<path> b=<batch>" (x: context, y: µs per layer and step) and
// its roofline's, and its figures as metrics (scope "decode", method: the path, tensor:
// "b=<batch> ctx=<context>"). Empty for a skipped point.
std::vector<SeriesPoint> decodeSeries(const DecodeBenchPoint& p);
std::vector<MetricRow> decodeMetrics(const DecodeBenchPoint& p);

// The run store's series of one evaluation, for the perplexity-against-bits chart:
// <method>.perplexity_vs_bpa at (bpa, ppl) and fp32.perplexity_vs_bpa at (bpa, fp32).
std::vector<SeriesPoint> perplexitySeries(const std::string& method, double bpa, double ppl, double fp32);

// ---- bench-decode ----
nlohmann::ordered_json benchDecodeRunSettings(const DecodeBenchOptions& o, const Codebooks& keyBooks,
                                              const std::string& codebookSource);
nlohmann::ordered_json benchDecodeRunSummary(const DecodeBenchReport& r);
// The run's device: "<name> (device <index>)".
std::string decodeDeviceName(const std::string& name, int index);       // a CUDA device's
std::string cpuDecodeDeviceName(const std::string& model, int threads); // the CPU's, with the run's threads

// ---- generate ----
// A real model decoded token by token (core/decode/generate.h): its settings, its summary (the
// context note, kernels, threads and the number of points), and per point the metrics (scope
// "<path>@<context>", method: the path; step_ms, attention_ms, append_ms, attention_share,
// tokens_per_second, cache_bytes) and the series "<path> ms/token" and "<path> attention ms" (x: context).
nlohmann::ordered_json generateRunSettings(const std::string& model, const std::string& text,
                                           const std::string& codebooks, int prefill, const GenerateOptions& o);
nlohmann::ordered_json generateRunSummary(const GenerateReport& r);
std::vector<MetricRow> generateMetrics(const GeneratePoint& p);
std::vector<SeriesPoint> generateSeries(const GeneratePoint& p);

// ---- paper-check ----
nlohmann::ordered_json paperCheckRunSettings(const PaperCheckSettings& s, const ClusterBackend& backend);
// {"paper_check": {"claims": N, "holding": H}}.
nlohmann::ordered_json paperCheckSummary(const PaperCheckResult& r);

} // namespace gsrq
