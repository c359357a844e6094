#pragma once
// The paper's comparison table on the user's own model: perplexity (and attention fidelity on a
// dump) of FP32, KIVI, CQ, KM-RQ and GSRQ at matched bits, each method named as the papers write
// its settings:
//   fp32                 the model as it is (always measured: every Δ is against it)
//   kivi-B[gG][rN]       KIVI, B bits, groups of G (default 32), the last N tokens in FP16 (default 0)
//   cq-<C>c<B>b          coupled quantization: C contiguous channels, 2^B centroids per block (one
//                        stage), K-means weighted by squared gradients (CQ's Fisher weighting)
//   km-rq@BPA            residual quantization with plain K-means, no weights
//   gsrq@BPA             GSRQ: GSKM, grad-log weights
//   vqllm@BPA            VQLLM-style RQ: K-means with moving-average updates (γ = 0.5 over whole
//                        passes), subspaces of strided channels, no weights
//   …@BPA+rN             any of the three with N rounds of joint refinement (refineJointly) after
//                        its greedy stages: gsrq@1+r3
//   <file>.safetensors   a codebooks file trained before (gsrq train)
// Trained methods are trained on the keys and values of a dump of the model (--train-dump) with
// every row (the perplexity text is the held-out set); BPA takes the paper's K = 256 with D = the
// model's head_dim (the paper's D = 128 on its models; paperBpa) where D divides the model's kv_dim,
// else the setting suggestBpa finds closest to it.

#include "core/base/bootstrap.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/kivi.h"
#include "core/cluster/progress.h"
#include "core/io/kv_dump.h"
#include "core/jobs/train_job.h"
#include "core/lm/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

enum class TableMethod { Fp32, Kivi, Cq, KmRq, Gsrq, Vqllm, File };

struct MethodSpec {
    TableMethod kind = TableMethod::Fp32;
    std::string name;  // as written: kivi-2, cq-2c8b, gsrq@1, the file's path
    KiviSettings kivi; // Kivi
    int channels = 0;  // Cq: C
    int blockBits = 0; // Cq: B
    double bpa = 0;    // KmRq, Gsrq, Vqllm
    int refine = 0;    // KmRq, Gsrq, Vqllm: rounds of joint refinement (+rN)
};

// A comma-separated list. Throws Error(InvalidInput) naming `flag` and the entry for an unknown or
// malformed method (bits outside 1–8, a BPA that is not a positive number, a file that is missing).
std::vector<MethodSpec> parseMethods(const std::string& list, const std::string& flag = "--methods");

// The training a trained method stands for on tensors of `features` values (D, R, K, method,
// weights). Throws Error(InvalidInput) naming `flag` when C does not divide the features or no
// D, R, K reach the BPA. `hasGradients`: weighted methods fall back to no weights without them
// (and say so in `note`).
// BPA's D follows `headDim` (paperBpa(bpa, headDim, features); 0: the paper's D = 128).
TrainSettings methodTrainSettings(const MethodSpec& m, std::int64_t features, bool hasGradients, int iterations,
                                  std::uint64_t seed, std::string* note, const std::string& flag = "--methods",
                                  std::int64_t headDim = 0);

// Checks every method against the model before anything runs: KIVI's group against kv_dim, CQ's
// channels and a BPA's D, R, K against the keys' and values' width. Throws Error(InvalidInput)
// naming `flag` and the method.
void validateMethods(const std::vector<MethodSpec>& methods, const ModelConfig& cfg,
                     const std::string& flag = "--methods");

// A codebooks file's family (its series on the perplexity-against-bits chart), from its own
// settings: GSKM with gradient weights is gsrq, unweighted K-means km-rq, cq and vqllm as named,
// other settings "<method> <weights>"; "codebooks" where the file says nothing.
std::string codebooksFamily(const CodebookFile& f);

struct MethodTableSettings {
    std::vector<MethodSpec> methods;
    std::string trainDump; // the model's dump for trained methods (and attention fidelity)
    std::string layers;    // the layers quantized, "" for all
    int iterations = 25;
    std::uint64_t seed = 0;
    int attentionQueries = 128; // on the train dump; 0: none
};

struct MethodTableRow {
    std::string name, family; // "gsrq@1", "gsrq"
    // Bits per cached value a token costs: the BPA of codebooks; KIVI's B with its FP16 scales and
    // zeros and its FP16 window (honest bits).
    double bits = 32;
    double effectiveBits = 32; // codebooks: + their codewords (F16) spread over the run's tokens
    double perplexity = 0;
    std::optional<double> attentionRelL2; // mean over the dump's layers, where measured
    std::string settings;                 // what it ran as: "D=128 R=16 K=256 gskm grad-log", ...
    // Each sequence's mean NLL per predicted token and its predicted tokens; the paired bootstrap's
    // 95% interval of Δ% against fp32 (invalid for fp32's own row).
    std::vector<double> sequenceNll, sequenceTokens;
    Interval deltaInterval;
};

struct MethodTableResult {
    std::vector<MethodTableRow> rows; // fp32 first
    std::vector<std::string> notes;
    bool cancelled = false;
};

// Measures every method on `sequences` (perplexity) and, for methods with a dump, attention
// fidelity on it. Throws Error(InvalidInput) naming --train-dump when a trained method has none or
// the dump's keys and values do not fit the model.
MethodTableResult runMethodTable(const TransformerModel& model, const std::vector<std::vector<std::int32_t>>& sequences,
                                 const MethodTableSettings& s, ClusterBackend& backend,
                                 const ProgressFn& progress = {});

} // namespace gsrq
