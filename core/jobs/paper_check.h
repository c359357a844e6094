#pragma once
// The paper's random-normal study at a size two cores finish in about a minute: KM against GSKM
// on synthetic i.i.d. N(0, 1) rows over D (K fixed) and over K (D fixed), each of the paper's
// qualitative claims checked on the result, and GSKM-RQ against KM-RQ on held-out rows at the
// paper's bit rates beside the Shannon distortion bound σ²·2^(−2·BPA) of a Gaussian source (the
// NMSE no quantizer at that rate gets below).

#include "core/cluster/quantizer.h"
#include "core/jobs/compare_job.h"

#include <string>
#include <vector>

namespace gsrq {

struct PaperCheckSettings {
    std::int64_t rows = 20000; // synthetic rows for the sweeps (256 features)
    int iterations = 50;       // per clustering, at most
    std::uint64_t seed = 0;    // the data's and the clusterings'
    std::vector<int> dims{16, 32, 64, 128, 256};
    int fixedK = 256; // K of the D sweep
    std::vector<int> ks{64, 256, 1024};
    int fixedDim = 256;                       // D of the K sweep
    std::vector<double> bpas{0.375, 0.75, 1}; // the paper's settings (paperBpa)
    std::int64_t rqTrainRows = 20000, rqHeldOutRows = 4000;
    int rqIterations = 25;
    int rqBeam = 8;   // the beam of GSKM-RQ's "beam" and "refined" held-out encodings
    int rqRefine = 2; // rounds of joint refinement (refineJointly) of the "refined" column; 0: none
};

// Throws Error(InvalidInput) naming the flag (--rows, --iters, --dims, --ks, --bpas, --rq-rows,
// --rq-beam, --rq-refine).
void validatePaperCheck(const PaperCheckSettings& s);

struct PaperClaim {
    std::string id;     // "cosine", "gain_error", ...
    std::string text;   // the claim, in words
    bool holds = false; // on this run's figures
    std::string detail; // the figures behind the verdict
};

struct RqBoundPoint {
    double bpa = 0;
    int dim = 0, stages = 0, k = 0;
    double shannon = 0;     // 2^(−2·BPA): the NMSE bound for a Gaussian source
    double kmHeldOut = 0;   // held-out NMSE of KM-RQ
    double gskmHeldOut = 0; // of GSKM-RQ
    // GSKM-RQ's held-out NMSE encoded with a beam of rqBeam, and after rqRefine rounds of joint
    // refinement (encoded with the same beam): same bits, same data. 0 when not run.
    double gskmBeamHeldOut = 0, gskmRefinedHeldOut = 0;
};

struct PaperCheckResult {
    std::vector<SweepPoint> dimSweep, kSweep;
    std::vector<RqBoundPoint> rq;
    std::vector<PaperClaim> claims;
    bool cancelled = false;
    double seconds = 0;
};

// How many of the result's claims hold.
int claimsHolding(const PaperCheckResult& r);

// Progress events carry the sweep point (dimSweep first, then kSweep) or, for the RQ part, the stage.
PaperCheckResult runPaperCheck(const PaperCheckSettings& s, ClusterBackend& backend, const ProgressFn& progress = {});

// The claims on given sweeps and RQ points (exposed so tests can check the verdicts on figures
// made by hand).
std::vector<PaperClaim> judgePaperClaims(const std::vector<SweepPoint>& dimSweep, const std::vector<SweepPoint>& kSweep,
                                         const std::vector<RqBoundPoint>& rq);

} // namespace gsrq
