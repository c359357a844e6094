#include "core/jobs/paper_check.h"

#include "core/base/error.h"
#include "core/io/synth.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace gsrq {

namespace {

constexpr int kSweepFeatures = 256; // every D of the sweeps divides it

const QuantMetrics& metricsOf(const SweepPoint& p, Method m)
{
    return p.result.find(m)->metrics;
}

std::string pointName(const char* axis, const SweepPoint& p)
{
    return cat(axis, "=", p.value);
}

// "D=16: 0.688 vs 0.688; ..." for the points where `fails` is true, or every point when none fails.
template <class Fails, class Show>
std::string listPoints(const std::vector<std::pair<std::string, const SweepPoint*>>& points, Fails fails, Show show)
{
    std::string failed, all;
    for (const auto& [name, p] : points) {
        const std::string one = cat(name, ": ", show(*p));
        all += (all.empty() ? "" : "; ") + one;
        if (fails(*p))
            failed += (failed.empty() ? "" : "; ") + one;
    }
    return failed.empty() ? all : "not at " + failed;
}

std::string fixed(double v, int digits)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

} // namespace

int claimsHolding(const PaperCheckResult& r)
{
    return int(std::count_if(r.claims.begin(), r.claims.end(), [](const PaperClaim& c) { return c.holds; }));
}

void validatePaperCheck(const PaperCheckSettings& s)
{
    if (s.iterations < 1)
        throwInvalid("--iters ", s.iterations, ": must be ≥ 1");
    if (s.dims.size() < 2)
        throwInvalid("--dims: give at least two values of D (the claims compare them)");
    for (int d : s.dims)
        if (d < 1 || kSweepFeatures % d != 0)
            throwInvalid("--dims: D = ", d, " does not divide the ", kSweepFeatures, " features of the sweep data");
    if (kSweepFeatures % s.fixedDim != 0 || s.fixedDim < 1)
        throwInvalid("--fixed-dim ", s.fixedDim, " does not divide the ", kSweepFeatures, " features");
    for (int k : s.ks)
        if (k < 1 || k > s.rows)
            throwInvalid("--ks: K = ", k, " must be between 1 and the ", s.rows, " rows");
    if (s.fixedK < 1 || s.fixedK > s.rows)
        throwInvalid("--fixed-k ", s.fixedK, " must be between 1 and the ", s.rows, " rows");
    for (double b : s.bpas) {
        const auto c = paperBpa(b);
        if (!c)
            throwInvalid("--bpas: ", b, " is not one of the paper's settings (0.375, 0.75, 1, 2)");
        if (c->k > s.rqTrainRows)
            throwInvalid("--rq-rows ", s.rqTrainRows, ": fewer training rows than K = ", c->k);
    }
    if (s.rqHeldOutRows < 1)
        throwInvalid("--rq-heldout ", s.rqHeldOutRows, ": needs at least one held-out row");
    if (s.rqBeam < 1 || s.rqBeam > 256)
        throwInvalid("--rq-beam ", s.rqBeam, ": must be between 1 and 256");
    if (s.rqRefine < 0 || s.rqRefine > 100)
        throwInvalid("--rq-refine ", s.rqRefine, ": rounds of joint refinement, 0 to 100");
}

std::vector<PaperClaim> judgePaperClaims(const std::vector<SweepPoint>& dimSweep, const std::vector<SweepPoint>& kSweep,
                                         const std::vector<RqBoundPoint>& rq)
{
    std::vector<std::pair<std::string, const SweepPoint*>> all;
    for (const auto& p : dimSweep)
        all.push_back({pointName("D", p), &p});
    for (const auto& p : kSweep)
        all.push_back({pointName("K", p), &p});
    const auto km = [](const SweepPoint& p) -> const QuantMetrics& { return metricsOf(p, Method::KMeans); };
    const auto gs = [](const SweepPoint& p) -> const QuantMetrics& { return metricsOf(p, Method::GainShape); };
    const auto every = [&](auto ok) {
        return std::all_of(all.begin(), all.end(), [&](auto& e) { return ok(*e.second); });
    };

    std::vector<PaperClaim> out;
    {
        const auto ok = [&](const SweepPoint& p) { return gs(p).cosine > km(p).cosine; };
        out.push_back({"cosine", "GSKM keeps directions better: its cosine is above KM's at every point", every(ok),
                       listPoints(
                           all, [&](auto& p) { return !ok(p); },
                           [&](auto& p) { return fixed(gs(p).cosine, 4) + " vs " + fixed(km(p).cosine, 4); })});
    }
    {
        const auto ok = [&](const SweepPoint& p) { return gs(p).gainError < km(p).gainError; };
        out.push_back({"gain_error", "GSKM keeps norms better: its gain error is below KM's at every point", every(ok),
                       listPoints(
                           all, [&](auto& p) { return !ok(p); },
                           [&](auto& p) { return fixed(gs(p).gainError, 4) + " vs " + fixed(km(p).gainError, 4); })});
    }
    {
        // 0.5%: "matching" — well above the seed-to-seed spread of the MSE of a 20,000-row sweep.
        const auto ok = [&](const SweepPoint& p) { return gs(p).mse <= 1.005 * km(p).mse; };
        const bool somewhereBelow =
            std::any_of(all.begin(), all.end(), [&](auto& e) { return gs(*e.second).mse < km(*e.second).mse; });
        out.push_back({"mse", "GSKM matches KM's MSE (at most 0.5% above it) at every point and improves it somewhere",
                       every(ok) && somewhereBelow,
                       listPoints(
                           all, [&](auto& p) { return !ok(p); },
                           [&](auto& p) { return fixed(100.0 * (gs(p).mse / km(p).mse - 1.0), 2) + "%"; })});
    }
    {
        const auto ok = [&](const SweepPoint& p) { return gs(p).shrinkage > km(p).shrinkage; };
        out.push_back({"shrinkage", "GSKM's codewords shrink less than KM's means (higher E‖x̂‖²/E‖x‖²) at every point",
                       every(ok),
                       listPoints(
                           all, [&](auto& p) { return !ok(p); },
                           [&](auto& p) { return fixed(gs(p).shrinkage, 4) + " vs " + fixed(km(p).shrinkage, 4); })});
    }
    {
        std::vector<const SweepPoint*> byD;
        for (const auto& p : dimSweep)
            byD.push_back(&p);
        std::sort(byD.begin(), byD.end(), [](auto* a, auto* b) { return a->value < b->value; });
        bool falls = true, grows = true;
        std::string shr, gain;
        for (std::size_t i = 0; i < byD.size(); ++i) {
            const auto& p = *byD[i];
            shr += cat(i ? ", " : "", "D=", p.value, " ", fixed(km(p).shrinkage, 3));
            gain += cat(i ? ", " : "", "D=", p.value, " ", (gs(p).cosine >= km(p).cosine ? "+" : ""),
                        fixed(gs(p).cosine - km(p).cosine, 4));
            if (i > 0) {
                const auto& q = *byD[i - 1];
                falls = falls && km(p).shrinkage < km(q).shrinkage;
                grows = grows && gs(p).cosine - km(p).cosine > gs(q).cosine - km(q).cosine;
            }
        }
        out.push_back({"km_shrinkage", "KM's means shrink more as D grows at fixed K (E‖x̂‖²/E‖x‖² falls)",
                       falls && byD.size() > 1, shr});
        out.push_back({"under_capacity",
                       "GSKM's cosine gain is largest where the codebook is most under capacity: it grows with D "
                       "at fixed K",
                       grows && byD.size() > 1, gain});
    }
    if (!rq.empty()) {
        bool ok = true;
        std::string detail;
        for (const auto& p : rq) {
            ok = ok && p.gskmHeldOut < p.kmHeldOut;
            detail += cat(detail.empty() ? "" : "; ", fixed(p.bpa, 3), " BPA: ", fixed(p.gskmHeldOut, 4), " vs ",
                          fixed(p.kmHeldOut, 4), " (bound ", fixed(p.shannon, 4), ")");
        }
        out.push_back({"rq_heldout", "GSKM-RQ's held-out NMSE is below KM-RQ's at every bit rate", ok, detail});
    }
    return out;
}

PaperCheckResult runPaperCheck(const PaperCheckSettings& s, ClusterBackend& backend, const ProgressFn& progress)
{
    validatePaperCheck(s);
    const auto start = std::chrono::steady_clock::now();
    PaperCheckResult out;

    // Progress by the work of each part: rows × K × features per clustering iteration.
    const bool reuse = std::find(s.dims.begin(), s.dims.end(), s.fixedDim) != s.dims.end();
    const double sweepUnit = double(s.rows) * kSweepFeatures * s.iterations;
    std::vector<double> weights;
    for (std::size_t i = 0; i < s.dims.size(); ++i)
        weights.push_back(sweepUnit * s.fixedK);
    for (int k : s.ks)
        weights.push_back(reuse && k == s.fixedK ? 0.0 : double(s.rows) * k * s.fixedDim * s.iterations);
    for (double b : s.bpas) {
        const auto c = *paperBpa(b);
        weights.push_back(double(s.rqTrainRows) * c.k * c.dim * c.stages * s.rqIterations);
    }
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    double done = 0;
    std::size_t part = 0;
    const auto partProgress = [&](const std::string& prefix, int sweepPoint) {
        const double share = weights[part] / total;
        return [&, prefix, sweepPoint, share](const ProgressEvent& e) {
            if (!progress)
                return true;
            ProgressEvent ev = e;
            ev.what = prefix + " " + e.what;
            ev.fraction = std::min(1.0, done + share * e.fraction);
            ev.sweepPoint = sweepPoint;
            ev.tensor = "synthetic gaussian";
            if (!progress(ev))
                out.cancelled = true;
            return !out.cancelled;
        };
    };
    const auto finishPart = [&] { done += weights[part++] / total; };

    const MatrixRF X = synthesize(SynthKind::Gaussian, s.rows, kSweepFeatures, s.seed);
    int point = 0;
    // One point of a sweep: KM and GSKM at (D, K) on X, appended to `to` unless cancelled.
    const auto sweepPoint = [&](int dim, int k, int value, const std::string& name, std::vector<SweepPoint>& to) {
        CompareSettings c;
        c.iterations = s.iterations;
        c.seed = s.seed;
        c.dim = dim;
        c.k = k;
        auto r = runCompare(X, nullptr, c, backend, partProgress(name, point++));
        finishPart();
        if (r.cancelled || out.cancelled)
            out.cancelled = true;
        else
            to.push_back({value, std::move(r)});
    };
    for (std::size_t i = 0; i < s.dims.size() && !out.cancelled; ++i)
        sweepPoint(s.dims[i], s.fixedK, s.dims[i], cat("D=", s.dims[i]), out.dimSweep);
    for (std::size_t i = 0; i < s.ks.size() && !out.cancelled; ++i) {
        const int k = s.ks[i];
        const auto same = std::find_if(out.dimSweep.begin(), out.dimSweep.end(),
                                       [&](const SweepPoint& p) { return p.value == s.fixedDim; });
        if (k == s.fixedK && same != out.dimSweep.end()) {
            out.kSweep.push_back({k, same->result}); // the same clustering as the D sweep's point
            finishPart();
            ++point;
            continue;
        }
        sweepPoint(s.fixedDim, k, k, cat("K=", k), out.kSweep);
    }
    for (double b : s.bpas) {
        if (out.cancelled)
            break;
        const auto c = *paperBpa(b);
        RqBoundPoint p{b, c.dim, c.stages, c.k, std::exp2(-2.0 * b), 0, 0};
        // One subspace of D columns: the RQ part's data are D wide, its own seeded rows.
        const MatrixRF all = synthesize(SynthKind::Gaussian, s.rqTrainRows + s.rqHeldOutRows, c.dim, s.seed + 1);
        const MatrixRF T = all.topRows(s.rqTrainRows);
        const MatrixRF H = all.bottomRows(s.rqHeldOutRows);
        for (Method m : {Method::KMeans, Method::GainShape}) {
            RqSettings rs;
            rs.dim = c.dim;
            rs.stages = c.stages;
            rs.k = c.k;
            rs.method = m;
            rs.iterations = s.rqIterations;
            rs.seed = s.seed;
            const auto tr = trainResidualQuantizer(
                T, nullptr, rs, backend,
                [&, f = partProgress(cat(b, " BPA ", methodName(m)), -1)](const ProgressEvent& e) {
                    ProgressEvent half = e;
                    half.fraction = (m == Method::KMeans ? 0.0 : 0.5) + 0.5 * e.fraction;
                    return f(half);
                });
            if (tr.cancelled || out.cancelled) {
                out.cancelled = true;
                break;
            }
            const auto heldOut = [&](const Codebooks& cb, int beam) {
                return computeMetrics(H, decode(encode(H, cb, beam, backend), cb)).nmse;
            };
            (m == Method::KMeans ? p.kmHeldOut : p.gskmHeldOut) = heldOut(tr.codebooks, 1);
            if (m == Method::GainShape) {
                // The same codebooks encoded with a beam, then refined jointly (the held-out rows do not
                // choose the round: they are the test) and encoded with the same beam.
                p.gskmBeamHeldOut = heldOut(tr.codebooks, s.rqBeam);
                if (s.rqRefine > 0) {
                    RqTrainResult refined = tr;
                    if (!refineJointly(T, nullptr, s.rqRefine, 1, backend, refined,
                                       [&, f = partProgress(cat(b, " BPA refinement"), -1)](const ProgressEvent& e) {
                                           ProgressEvent last = e;
                                           last.fraction = 1.0; // the part's end: its weight is the trainings'
                                           return f(last);
                                       })) {
                        out.cancelled = true;
                        break;
                    }
                    p.gskmRefinedHeldOut = heldOut(refined.codebooks, s.rqBeam);
                }
            }
        }
        finishPart();
        if (!out.cancelled)
            out.rq.push_back(p);
    }
    if (!out.cancelled)
        out.claims = judgePaperClaims(out.dimSweep, out.kSweep, out.rq);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

} // namespace gsrq
