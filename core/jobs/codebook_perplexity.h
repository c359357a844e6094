#pragma once
// The one job that measures a model's perplexity with its KV cache replaced by codebooks'
// reconstructions: `gsrq ppl -c`, the app's "Perplexity with these codebooks" and the methods
// table's codebooks rows all run it. FP32 first, then each codebooks file over the layers it has
// (and, asked for, each of those layers alone), with what each costs in bits per cached value; the
// run store's rows and summary of the result. The commands parse flags and print.

#include "core/base/bootstrap.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/progress.h"
#include "core/lm/model.h"
#include "core/lm/sequences.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

// One perplexity: the model as it is (codebooks "FP32"), or with a file's codebooks on `layers`.
struct CodebookPerplexityRow {
    std::string codebooks;                  // the file's label: its path, or what the app calls it
    std::string method = "-", layers = "-"; // the file's method; its quantized layers, e.g. "0,1,2"
    double bpa = std::nan(""), effectiveBpa = std::nan(""), perplexity = 0;
    bool perLayer = false; // one layer of a file alone (perLayer rows follow their file's row)
    // Each sequence's mean NLL per predicted token and its predicted tokens, in the sequences' order;
    // the paired bootstrap's 95% interval of Δ% against FP32 (invalid for FP32 itself).
    std::vector<double> sequenceNll, sequenceTokens;
    Interval deltaInterval;
};

// The perplexity with one codebooks file on `layers` (every layer it has when empty), and what it
// costs: its nominal bits and its codewords spread over the sequences' cached tokens. Throws
// Error(InvalidInput) naming the label when the file has no codebooks for those layers (layersText:
// the --layers the user gave, for that message) or its codebooks are not the model's width.
CodebookPerplexityRow measureCodebooks(const TransformerModel& model, const std::vector<TokenSequence>& sequences,
                                       const CodebookFile& file, const std::string& label,
                                       const std::vector<int>& layers, const std::string& layersText,
                                       ClusterBackend& backend);

struct LabelledCodebooks {
    std::string label;
    CodebookFile file;
};

struct CodebookPerplexitySettings {
    std::vector<int> layers; // the layers quantized (all the files have when empty)
    std::string layersText;  // as the user gave them, for messages
    bool perLayer = false;   // also each layer alone: which layers are sensitive
};

struct CodebookPerplexityResult {
    std::vector<CodebookPerplexityRow> rows; // FP32 first, then each file (its per-layer rows after it)
    double fp32Seconds = 0;                  // the FP32 forward passes over every sequence
    bool cancelled = false;
    double fp32() const { return rows.empty() ? std::nan("") : rows.front().perplexity; }
    // The perplexity with the codebooks where exactly one file was measured.
    std::optional<double> single() const;
};

// Measures FP32 and every file; progress sees each forward pass, and a false from it stops the job
// (cancelled, the rows so far kept).
CodebookPerplexityResult runCodebookPerplexity(const TransformerModel& model,
                                               const std::vector<TokenSequence>& sequences,
                                               const std::vector<LabelledCodebooks>& files,
                                               const CodebookPerplexitySettings& settings, ClusterBackend& backend,
                                               const ProgressFn& progress = {});

// The run store's rows of the result: every row's perplexity (pplMetric), a whole file's bits and
// effective bits beside it and its point on the perplexity-against-bits chart; and the summary
// ({"fp32_perplexity", "perplexity" where one file was measured}).
std::vector<MetricRow> codebookPerplexityMetrics(const CodebookPerplexityResult& r);
std::vector<SeriesPoint> codebookPerplexitySeries(const CodebookPerplexityResult& r);
nlohmann::ordered_json codebookPerplexitySummary(const CodebookPerplexityResult& r);

} // namespace gsrq
