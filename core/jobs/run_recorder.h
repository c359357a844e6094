#pragma once
// Records one job into the run store as it runs: inserted as `running` first, per-iteration stats
// buffered from progress events and written in batched transactions (by count or every second),
// results and artifacts at the end, then the final status. Used from the thread that runs the job,
// through that thread's own RunStore connection.

#include "core/jobs/compare_job.h"
#include "core/jobs/paper_check.h"
#include "core/jobs/train_job.h"
#include "core/store/run_store.h"

#include <chrono>
#include <string>
#include <vector>

namespace gsrq {

class RunRecorder {
public:
    // Begins the run, or resumes run info.id where that is set (RunStore::resumeRun).
    RunRecorder(RunStore& store, const RunInfo& info, std::string defaultTensor = {});
    ~RunRecorder(); // an unfinished run is closed as failed
    RunRecorder(const RunRecorder&) = delete;
    RunRecorder& operator=(const RunRecorder&) = delete;

    std::int64_t id() const { return m_id; }
    bool finished() const { return m_finished; }
    void onProgress(const ProgressEvent& e); // call from the job's progress callback
    void flush();

    void recordCompare(const CompareResult& r, const std::string& tensor, int sweepPoint = -1);
    void recordSweep(const std::vector<SweepPoint>& points, const std::string& axis, const std::string& tensor);
    void recordTrain(const TrainJobResult& r);
    // Series <method>.<metric>_vs_dim and _vs_k, the RQ points and each claim (1 holds, 0 not).
    void recordPaperCheck(const PaperCheckResult& r);
    void recordEval(const std::vector<EvalResult>& r);
    void recordKiviEval(const KiviEvalResult& r);
    void recordArtifact(const std::string& path, const std::string& kind);
    void recordMetrics(const std::vector<MetricRow>& rows) { m_store.addMetrics(m_id, rows); }
    void recordSeries(const std::vector<SeriesPoint>& points) { m_store.addSeries(m_id, points); }
    void recordSample(const SampleRow& sample) { m_store.addSample(m_id, sample); }

    void finish(RunStatus status, const std::string& summaryJson = "{}", const std::string& error = "");

private:
    RunStore& m_store;
    std::int64_t m_id = 0;
    std::string m_tensor;
    std::vector<IterationRow> m_pending;
    std::chrono::steady_clock::time_point m_lastFlush;
    bool m_finished = false;
};

} // namespace gsrq
