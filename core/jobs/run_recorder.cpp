#include "core/jobs/run_recorder.h"

#include "core/base/error.h"
#include "core/base/sha256.h"

#include <filesystem>

namespace gsrq {

namespace {

// Rows per transaction at most, and the longest a row waits: a crash loses at most this much.
constexpr std::size_t kBatchRows = 512;
constexpr auto kBatchDelay = std::chrono::seconds(1);

void addQuant(std::vector<MetricRow>& out, const std::string& scope, const std::string& method,
              const std::string& tensor, int stage, int subspace, const QuantMetrics& m)
{
    for (const auto& [name, value] : namedMetrics(m))
        out.push_back({scope, method, tensor, stage, subspace, name, value});
}

} // namespace

RunRecorder::RunRecorder(RunStore& store, const RunInfo& info, std::string defaultTensor)
    : m_store(store), m_tensor(std::move(defaultTensor)), m_lastFlush(std::chrono::steady_clock::now())
{
    if (info.id > 0) { // a run resumed: the same id, its rows so far kept
        m_store.resumeRun(info.id);
        m_id = info.id;
    } else {
        m_id = m_store.beginRun(info);
    }
}

RunRecorder::~RunRecorder()
{
    if (m_finished)
        return;
    try {
        finish(RunStatus::Failed, "{}", "the job ended without reporting a status");
    } catch (...) {
        // A destructor must not throw; the next open marks the run interrupted if this failed.
    }
}

void RunRecorder::onProgress(const ProgressEvent& e)
{
    if (e.afterStage) // a stage's end, not a pass: the stages' metrics are recorded with the result
        return;
    const auto& it = e.iteration;
    const std::string method = e.sweepPoint >= 0 ? cat(methodName(e.method), "@", e.sweepPoint) : methodName(e.method);
    m_pending.push_back({method, e.tensor.empty() ? m_tensor : e.tensor, e.subspace, e.stage, it.iteration,
                         it.objective, it.nmse, it.changed, it.emptyClusters, it.seconds, it.cosine, it.gainError,
                         it.shrinkage, it.skipped});
    if (m_pending.size() >= kBatchRows || std::chrono::steady_clock::now() - m_lastFlush >= kBatchDelay)
        flush();
}

void RunRecorder::flush()
{
    m_store.addIterations(m_id, m_pending);
    m_pending.clear();
    m_lastFlush = std::chrono::steady_clock::now();
}

void RunRecorder::recordCompare(const CompareResult& r, const std::string& tensor, int sweepPoint)
{
    std::vector<MetricRow> rows;
    for (const auto& m : r.methods) {
        const std::string method =
            sweepPoint >= 0 ? cat(methodName(m.method), "@", sweepPoint) : std::string(methodName(m.method));
        addQuant(rows, "final", method, tensor, -1, -1, m.metrics);
        rows.push_back({"final", method, tensor, -1, -1, "iterations", double(m.iterations)});
        rows.push_back({"final", method, tensor, -1, -1, "seconds", m.seconds});
        for (const auto& b : m.blocks)
            addQuant(rows, "block", method, tensor, -1, b.block, b.metrics);
    }
    m_store.addMetrics(m_id, rows);
}

void RunRecorder::recordSweep(const std::vector<SweepPoint>& points, const std::string& axis, const std::string& tensor)
{
    std::vector<SeriesPoint> series;
    for (std::size_t i = 0; i < points.size(); ++i) {
        if (points[i].result.cancelled)
            continue; // cut short: its metrics are those of an unfinished clustering
        recordCompare(points[i].result, tensor, int(i));
        for (const auto& m : points[i].result.methods) {
            for (const auto& [name, value] : namedMetrics(m.metrics))
                series.push_back({cat(methodName(m.method), ".", name, "_vs_", axis), double(points[i].value), value});
        }
    }
    m_store.addSeries(m_id, series);
}

void RunRecorder::recordPaperCheck(const PaperCheckResult& r)
{
    std::vector<SeriesPoint> series;
    std::vector<MetricRow> rows;
    for (const auto& [axis, points] : {std::pair{"dim", &r.dimSweep}, std::pair{"k", &r.kSweep}})
        for (const auto& p : *points)
            for (const auto& m : p.result.methods)
                for (const auto& [name, value] : namedMetrics(m.metrics))
                    series.push_back({cat(methodName(m.method), ".", name, "_vs_", axis), double(p.value), value});
    for (const auto& p : r.rq) {
        series.push_back({"km.heldout_nmse_vs_bpa", p.bpa, p.kmHeldOut});
        series.push_back({"gskm.heldout_nmse_vs_bpa", p.bpa, p.gskmHeldOut});
        if (p.gskmBeamHeldOut > 0)
            series.push_back({"gskm_beam.heldout_nmse_vs_bpa", p.bpa, p.gskmBeamHeldOut});
        if (p.gskmRefinedHeldOut > 0)
            series.push_back({"gskm_refined.heldout_nmse_vs_bpa", p.bpa, p.gskmRefinedHeldOut});
        series.push_back({"shannon_bound_vs_bpa", p.bpa, p.shannon});
    }
    for (const auto& c : r.claims)
        rows.push_back({"claim", "", "synthetic gaussian", -1, -1, c.id, c.holds ? 1.0 : 0.0});
    m_store.addSeries(m_id, series);
    m_store.addMetrics(m_id, rows);
}

void RunRecorder::recordTrain(const TrainJobResult& r)
{
    std::vector<MetricRow> rows;
    std::vector<SeriesPoint> series;
    for (const auto& t : r.tensors) {
        addQuant(rows, "final", "", t.tensor, -1, -1, t.train.metrics);
        rows.push_back({"final", "", t.tensor, -1, -1, "bpa", t.bpa});
        rows.push_back({"final", "", t.tensor, -1, -1, "effective_bpa", t.effectiveBpa});
        rows.push_back({"final", "", t.tensor, -1, -1, "codebook_bytes", double(t.codebookBytes)});
        rows.push_back({"final", "", t.tensor, -1, -1, "seconds", t.train.seconds});
        if (t.heldout)
            addQuant(rows, "heldout", "", t.tensor, -1, -1, *t.heldout);
        for (std::size_t s = 0; s < t.train.afterStage.size(); ++s) {
            addQuant(rows, "stage", "", t.tensor, int(s), -1, t.train.afterStage[s]);
            series.push_back({t.tensor + ".nmse_vs_stage", double(s + 1), t.train.afterStage[s].nmse});
            series.push_back({t.tensor + ".cosine_vs_stage", double(s + 1), t.train.afterStage[s].cosine});
            series.push_back({t.tensor + ".gain_error_vs_stage", double(s + 1), t.train.afterStage[s].gainError});
        }
        // Joint refinement: train (and held-out) NMSE per round, round 0 the greedy stages'.
        if (!t.train.refinement.empty() && !t.train.afterStage.empty()) {
            series.push_back({t.tensor + ".train_nmse_vs_refine_round", 0, t.train.afterStage.back().nmse});
            if (t.train.heldoutBeforeRefine)
                series.push_back({t.tensor + ".heldout_nmse_vs_refine_round", 0, t.train.heldoutBeforeRefine->nmse});
            for (const auto& rr : t.train.refinement) {
                series.push_back({t.tensor + ".train_nmse_vs_refine_round", double(rr.round), rr.train.nmse});
                if (rr.heldout)
                    series.push_back({t.tensor + ".heldout_nmse_vs_refine_round", double(rr.round), rr.heldout->nmse});
                addQuant(rows, "refine", "", t.tensor, rr.round, -1, rr.train);
                if (rr.heldout)
                    addQuant(rows, "refine_heldout", "", t.tensor, rr.round, -1, *rr.heldout);
            }
        }
    }
    for (const auto& a : r.attention) {
        const std::string layer = cat("layers.", a.layer);
        rows.push_back({"attention", "", layer, -1, -1, "relative_l2", a.fidelity.relativeL2});
        rows.push_back({"attention", "", layer, -1, -1, "top8_overlap", a.fidelity.top8Overlap});
    }
    m_store.addMetrics(m_id, rows);
    m_store.addSeries(m_id, series);
}

void RunRecorder::recordEval(const std::vector<EvalResult>& r)
{
    std::vector<MetricRow> rows;
    for (const auto& e : r)
        addQuant(rows, "final", "", e.tensor, -1, -1, e.metrics);
    m_store.addMetrics(m_id, rows);
}

void RunRecorder::recordKiviEval(const KiviEvalResult& r)
{
    std::vector<MetricRow> rows;
    for (const auto& t : r.tensors) {
        addQuant(rows, "final", "kivi", t.tensor, -1, -1, t.metrics);
        rows.push_back({"final", "kivi", t.tensor, -1, -1, "bpa", t.bits});
        rows.push_back({"final", "kivi", t.tensor, -1, -1, "seconds", t.seconds});
    }
    for (const auto& a : r.attention) {
        const std::string layer = cat("layers.", a.layer);
        rows.push_back({"attention", "kivi", layer, -1, -1, "relative_l2", a.fidelity.relativeL2});
        rows.push_back({"attention", "kivi", layer, -1, -1, "top8_overlap", a.fidelity.top8Overlap});
    }
    m_store.addMetrics(m_id, rows);
}

void RunRecorder::recordArtifact(const std::string& path, const std::string& kind)
{
    std::error_code ec;
    const auto bytes = std::int64_t(std::filesystem::file_size(path, ec));
    m_store.addArtifact(m_id, {std::filesystem::absolute(path, ec).string(), kind, sha256Files({path}), bytes});
}

void RunRecorder::finish(RunStatus status, const std::string& summaryJson, const std::string& error)
{
    m_finished = true; // even if the writes below fail: the caller reports that failure
    flush();
    m_store.finishRun(m_id, status, summaryJson, error);
}

} // namespace gsrq
