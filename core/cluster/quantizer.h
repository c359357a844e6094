#pragma once
// The GSRQ quantizer: product × residual quantization of rows.
//
// A tensor X (N × F) is cut into M = F/D contiguous subspaces of D dims. In each subspace, R
// stages each hold K codewords; stage r is trained (KM or GSKM, through the one ClusterBackend)
// on the residual left by stages < r. A row's code is R indices per subspace; decoding sums the
// chosen codewords. Bits per activation BPA = R·log2(K)/D; codebook storage is separate.
//
// Encoding is greedy (nearest codeword per stage, as in the paper) or, with beam B > 1, a beam
// search that keeps the B best partial codes per stage (as FAISS's residual quantizer does); training
// with a beam extends every row's beams by each stage as it is trained, and by default trains the
// stage on all of their residuals: B times the rows, and for the whole training about B times the
// data's memory again in the beams' residuals and codes, beside a subspace's rows for each stage.

#include "core/cluster/clustering.h"
#include "core/cluster/metrics.h"
#include "core/cluster/progress.h"

#include <functional>
#include <optional>
#include <vector>

namespace gsrq {

struct RqSettings {
    int dim = 0;    // D; 0 = all features
    int stages = 1; // R
    int k = 256;    // K: a power of two, 2..65,536
    Method method = Method::GainShape;
    int iterations = 25;
    std::uint64_t seed = 0;
    int beam = 1; // 1 = greedy
    // With beam > 1, each stage's K-means runs on every surviving beam's residual (N·B rows, as FAISS's
    // residual quantizer trains), or on the best beam's only (N rows: faster, a little less accurate).
    bool trainOnAllBeams = true;
    bool reseedEmpty = false;
    // VQLLM-style training (Kumar, 2024): subspace m takes the strided channels m, m + M, m + 2M, …
    // instead of a contiguous block (the codebooks keep the order), and K-means centroids move by
    // an exponential moving average of the passes' member sums (ClusteringParams::emaDecay). With one
    // subspace the order is the data's own and none is kept.
    bool stridedGroups = false;
    double emaDecay = 0;
    // Joint refinement after the greedy stages (refineJointly): rounds of a least-squares update of
    // every stage's codewords together with the codes fixed, then a re-encode with refineBeam (0: the
    // training beam) that keeps each row's new codes only where they lower its error.
    int refine = 0;
    int refineBeam = 0;
    // Send a progress event with ProgressEvent::afterStage as each stage ends (a live chart of the
    // metrics after each stage); off, every event is an iteration.
    bool reportStages = false;
};

double bitsPerActivation(int dim, int stages, int k); // R·log2(K)/D

struct BpaChoice {
    int dim = 0, stages = 0, k = 0;
};
// The paper's settings: 2, 1, 0.75 -> D=128, R=32/16/12, K=256; 0.375 -> D=256, R=12, K=256.
std::optional<BpaChoice> paperBpa(double bpa);
// The paper's settings carried to a model's head_dim (0, or below 32 as toy models have: the paper's
// own settings): D = head_dim (two
// heads at 0.375, as the paper's D = 256 spans two heads of 128, where 2·head_dim divides
// `features`, else one), K = 256, R = BPA·D/8. head_dim 128 gives the paper's own. nullopt where
// BPA is not one of the paper's four or R would not be a whole number.
std::optional<BpaChoice> paperBpa(double bpa, std::int64_t headDim, std::int64_t features);
// Settings that reach `bpa` exactly for `features` (D divides F, K a power of two ≤ 65,536),
// closest to the paper's D=128, K=256 first.
std::vector<BpaChoice> suggestBpa(double bpa, std::int64_t features, std::size_t count = 4);

// How an error message spells the settings: the CLI's flags (--bpa 3; --dim 8 --stages 3 --k 256) or
// Python's keywords (bpa=3; dim=8, stages=3, k=256).
enum class ArgStyle { Cli, Python };
// The paper's D, R, K for `bpa` on rows of `features` of heads of `headDim` (0: unknown; the
// paper's D = 128). Throws Error(InvalidInput) naming bpa when it is not one of the paper's settings
// or its D does not divide the features, listing the settings (suggestBpa) that reach it exactly.
BpaChoice paperBpaFor(double bpa, std::int64_t features, ArgStyle style = ArgStyle::Cli, std::int64_t headDim = 0);

// The strided order of M subspaces of D: subspace m holds features m, m + M, …, m + (D − 1)·M.
std::vector<std::int32_t> stridedOrder(int dim, int subspaces);

// Throws Error(InvalidInput) naming the flag (--dim, --stages, --k, --beam, --iters, --ema-decay).
void validateRq(const RqSettings& s, std::int64_t rows, std::int64_t features);

// Codewords, [M, R, K, D] row-major: book(m, r) is K × D.
struct Codebooks {
    int dim = 0, stages = 0, k = 0, subspaces = 0;
    std::vector<float> data;
    // The feature order the codebooks quantize: column j of the quantized row is feature order[j]
    // of the data (a permutation of 0..F−1); empty for the data's own order (contiguous subspaces).
    // encode and decode apply it, so callers see rows in the data's order.
    std::vector<std::int32_t> order;

    void allocate(int dim, int stages, int k, int subspaces);
    std::int64_t features() const { return std::int64_t(dim) * subspaces; }
    Eigen::Map<MatrixRF> book(int m, int r);
    Eigen::Map<const MatrixRF> book(int m, int r) const;
};

// Codes: N × (M·R), column m·R + r holds the stage-r index of subspace m.
using Codes = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct StageRecord {
    int subspace = 0, stage = 0;
    int iterations = 0;
    StopReason stop = StopReason::MaxIterations;
    double seconds = 0;
    std::vector<IterationStats> history;
};

// One round of joint refinement: the weighted training objective Σ w‖x − x̂‖² / Σ w‖x‖² after its
// least-squares update and after its re-encode (never above the round before's), the metrics of the
// training rows (and of held-out rows where the caller gives them) after the round.
struct RefineRound {
    int round = 0; // 1, 2, …
    double objectiveAfterUpdate = 0, objective = 0;
    QuantMetrics train;
    std::optional<QuantMetrics> heldout;
    std::int64_t rowsRecoded = 0; // (row, subspace) pairs whose codes the re-encode changed
    bool updateReverted = false;  // the update raised the objective (rounding alone can): codewords kept
    double seconds = 0;
};

struct RqTrainResult {
    Codebooks codebooks;
    Codes codes;                                     // of the training rows
    std::vector<RefineRound> refinement;             // one per round of RqSettings::refine, in order
    double objectiveBeforeRefine = 0;                // the weighted objective of the greedy stages (refine > 0)
    std::optional<QuantMetrics> heldoutBeforeRefine; // the held-out metrics of the greedy stages
    // The round whose codebooks and codes are kept: the last, or with held-out rows the one with the
    // lowest held-out NMSE (0: the greedy stages', when every round raised it).
    int keptRound = 0;
    std::vector<QuantMetrics> afterStage; // R entries: whole-row metrics after stages 0..r (greedy)
    std::vector<StageRecord> clusterings; // one per (stage, subspace), in training order
    QuantMetrics metrics;                 // = afterStage.back()
    double seconds = 0;
    bool cancelled = false;
};

// The most codewords per subspace (R·K) joint refinement solves for: its system is dense, (R·K)²
// doubles (512 MiB here, the paper's 2 BPA at D = 128).
inline constexpr std::int64_t kMaxRefineCodewords = 8192;

// Metrics of rows held out from training under the given codebooks (each refinement round's).
using HeldoutFn = std::function<QuantMetrics(const Codebooks&)>;

RqTrainResult trainResidualQuantizer(const RowsRef& X, const float* weights, const RqSettings& s,
                                     ClusterBackend& backend, const ProgressFn& progress = {},
                                     const HeldoutFn& heldout = {});

// Joint refinement of trained residual codebooks (every subspace independently), `rounds` times:
// 1. with the codes fixed, the codewords of all R stages that minimise Σ_n w_n ‖x_n − Σ_r C_r[c_nr]‖²
//    solve one linear least-squares problem, (AᵀWA + λI)·C = AᵀWX + λ·C_old, A the N × R·K indicator
//    of the codes; λ (1e-9 of the mean diagonal) only keeps codewords no row uses where they were;
// 2. with the codewords fixed, every row is re-encoded with `beam`, and its new codes kept only where
//    they lower its error.
// Neither step can raise the weighted objective (up to rounding). A gain–shape codebook keeps its
// form: each codeword is its gain (its norm) times a unit shape, one gain per codeword, as GSKM's
// are; the update moves both. With `heldout`, each round's held-out metrics are measured and the
// round with the lowest held-out NMSE is kept (the greedy stages' when none lowers it: with few rows
// per codeword the joint fit over-fits). Updates `result` (codebooks, codes, metrics, refinement,
// keptRound); returns false when progress cancelled it (the best whole round so far is kept).
bool refineJointly(const RowsRef& X, const float* weights, int rounds, int beam, ClusterBackend& backend,
                   RqTrainResult& result, const ProgressFn& progress = {}, const HeldoutFn& heldout = {});

// The weighted relative error Σ w‖x − x̂‖² / Σ w‖x‖² of codes under codebooks (weights null: all 1).
double weightedObjective(const RowsRef& X, const float* weights, const Codes& codes, const Codebooks& cb);

// Encodes X (N × M·D) with the first `stages` stages (all when < 0).
Codes encode(const RowsRef& X, const Codebooks& cb, int beam, ClusterBackend& backend, int stages = -1);
MatrixRF decode(const Codes& codes, const Codebooks& cb, int stages = -1);

// The rows in the codebooks' feature order (column j of the result is X's column cb.order[j]);
// cb.order must be set.
MatrixRF inBookOrder(const RowsRef& X, const Codebooks& cb);

} // namespace gsrq
