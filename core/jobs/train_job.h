#pragma once
// The train and eval jobs over a KV dump: select tensors, build gradient weights, optionally apply
// RoPE to keys, hold rows out, train the residual quantizer per tensor, measure train / held-out
// metrics and attention fidelity per layer, and produce the codebooks file.

#include "core/cluster/codebook_file.h"
#include "core/cluster/kivi.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/io/kv_dump.h"
#include "core/lm/attention.h"

#include <optional>
#include <string>
#include <vector>

namespace gsrq {

enum class KeyRope { AsDumped, Post };

// The rows a hold-out of `fraction` leaves for training and holds out, each in ascending order:
// the last rows with `tail`, else a subset drawn with `seed` (a dump's last rows are the end of
// one text, so a tail is a biased sample of it).
struct HoldoutSplit {
    std::vector<Eigen::Index> train, heldout;
};
HoldoutSplit splitHoldout(Eigen::Index rows, double fraction, bool tail, std::uint64_t seed);

struct TrainSettings {
    RqSettings rq;
    std::vector<std::string> tensorPatterns; // globs, e.g. layers.*.value; empty: every key and value
    std::string layers;                      // "0-3,7"; empty: all
    WeightMode weights = WeightMode::None;
    double tau = 1.0;
    bool dropNonFinite = false;
    std::string evalPath;     // held-out dump (same tensor names), or empty
    double holdout = 0;       // fraction of rows held out, or 0
    bool holdoutTail = false; // hold out the last rows instead of a seeded random subset
    KeyRope keyRope = KeyRope::AsDumped;
    int attentionQueries = 128;     // 0: no attention fidelity
    DType exportDType = DType::F32; // counts the codebook bytes as exported
    bool keepCodes = false;         // store training codes in the file
    std::string sourceSha256;       // the dump's hash when already known (else computed)
    std::string methodLabel;        // the file's "method" when not the clustering's (cq)
};

struct TensorTrainResult {
    std::string tensor;
    std::int64_t rows = 0, heldoutRows = 0, features = 0, droppedRows = 0;
    double bpa = 0;
    std::uint64_t codebookBytes = 0;
    double effectiveBpa = 0; // BPA + codebook bits / (tokens in the dump × features)
    bool ropeApplied = false;
    WeightSummary weightSummary;
    RqTrainResult train;
    std::optional<QuantMetrics> heldout;
    double heldoutSeconds = 0;
};

struct LayerAttention {
    int layer = 0;
    std::string keys, values; // "quantized" or "exact"
    AttentionFidelity fidelity;
};

struct TrainJobResult {
    std::vector<TensorTrainResult> tensors;
    std::vector<LayerAttention> attention;
    std::vector<std::string> notes; // why something was skipped
    CodebookFile file;
    bool cancelled = false;
};

// Tensors a selection names, in dump order; throws Error(InvalidInput) when it names none.
std::vector<const KvTensor*> selectTensors(const KvDump& dump, const std::vector<std::string>& patterns,
                                           const std::string& layers);

// One tensor's rows trained as `runTrain` trains each of a dump's: the hold-out split of s.holdout
// (s.holdoutTail, s.rq.seed), the stages and refinement rounds with each round's held-out metrics,
// and the held-out metrics at the end, of the split's rows or, where it holds none, of `evalRows`.
// weights: x.rows() values, or null. With nothing held out the rows are read in place. Fills rows,
// heldoutRows, features, bpa, codebookBytes, effectiveBpa (of x's rows), train and heldout; the
// caller names the tensor. splitOut and heldoutCodes (the split's held-out rows' codes) are optional.
TensorTrainResult trainTensorRows(const RowsRef& x, const float* weights, const TrainSettings& s,
                                  ClusterBackend& backend, const ProgressFn& progress = {},
                                  const MatrixRF* evalRows = nullptr, HoldoutSplit* splitOut = nullptr,
                                  Codes* heldoutCodes = nullptr);

TrainJobResult runTrain(const KvDump& dump, const TrainSettings& s, ClusterBackend& backend,
                        const ProgressFn& progress = {});

struct EvalResult {
    std::string tensor;
    std::int64_t rows = 0;
    QuantMetrics metrics;
    double seconds = 0;
};
std::vector<EvalResult> runEval(const KvDump& dump, const CodebookFile& file, int beam, ClusterBackend& backend,
                                bool dropNonFinite = false);

// KIVI over a dump's keys and values (core/cluster/kivi.h): no training, so the same metrics as a
// codebooks' evaluation on every row, and attention fidelity per layer. Keys are quantized as they
// are stored, or after RoPE with KeyRope::Post (as a model's cache holds them).
struct KiviEvalSettings {
    KiviSettings kivi;
    std::vector<std::string> tensorPatterns; // empty: every key and value
    std::string layers;
    KeyRope keyRope = KeyRope::AsDumped;
    int attentionQueries = 128;
    std::uint64_t seed = 0; // of the attention queries
};
struct KiviTensorResult {
    std::string tensor;
    std::int64_t rows = 0, features = 0;
    double bits = 0; // honest bits per value: B, scales and zeros, the FP16 window
    bool ropeApplied = false;
    QuantMetrics metrics;
    double seconds = 0;
};
struct KiviEvalResult {
    std::vector<KiviTensorResult> tensors;
    std::vector<LayerAttention> attention;
    std::vector<std::string> notes;
    bool cancelled = false;
};
// Whether the dump can put its keys after RoPE (positions, and rope.inv_freq or rope_theta): where
// it can, KIVI quantizes them there, as a model's cache holds them.
bool keysCanBeRotated(const KvDump& dump);
// The tensors' settings checked before anything runs (or a run is recorded): throws
// Error(InvalidInput) naming --bits, --group or --residual for settings a tensor cannot take.
void checkKiviEval(const KvDump& dump, const KiviEvalSettings& s);
// Checks as checkKiviEval does, then quantizes and measures.
KiviEvalResult runKiviEval(const KvDump& dump, const KiviEvalSettings& s, const ProgressFn& progress = {});

} // namespace gsrq
