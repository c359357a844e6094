#pragma once
// One run being recorded, the same for both faces: this thread's own store connection, the run's
// recorder, and the dump's hash. What differs between the faces is passed in, not rebuilt:
//   StoreFailure::Stop        a store that cannot be opened or written stops the job with the
//                             store's error (the CLI: the user named the store, or the default);
//   StoreFailure::Unrecorded  the job runs on unrecorded and `unrecordedReason()` says why (the
//                             app: a training is not lost to a locked store); a failing write at the
//                             end is dropped, as the job's own result still reaches the window.
// A run that is not finished when the RecordedRun goes away is closed as failed by its recorder.

#include "core/jobs/run_recorder.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

enum class StoreFailure { Stop, Unrecorded };

class RecordedRun {
public:
    RecordedRun() = default; // nothing recorded (--no-db, or no store)
    // Opens the store at `storePath` (empty: nothing recorded), hashes `dumpFiles` into the run's
    // dump_sha256 (through the store's cache) and begins the run, stamped with this version of gsrq.
    RecordedRun(const std::string& storePath, RunInfo info, const std::vector<std::string>& dumpFiles,
                const std::string& tensor, StoreFailure policy);
    RecordedRun(RecordedRun&&) = delete;

    RunRecorder* operator->() { return m_recorder ? &*m_recorder : nullptr; }
    explicit operator bool() const { return m_recorder.has_value(); }
    const std::string& dumpSha256() const { return m_sha; }
    const std::string& unrecordedReason() const { return m_why; }
    bool finished() const { return !m_recorder || m_recorder->finished(); }

    void progress(const ProgressEvent& e)
    {
        if (m_recorder)
            m_recorder->onProgress(e);
    }
    void finish(RunStatus status, const std::string& summaryJson = "{}", const std::string& error = "");
    // Closes a run still open as failed with `message`; never throws (the job's own error is what
    // the user sees, whatever the store does).
    void fail(const std::string& message) noexcept;

private:
    StoreFailure m_policy = StoreFailure::Stop;
    std::unique_ptr<RunStore> m_store;
    std::optional<RunRecorder> m_recorder; // destroyed before the store
    std::string m_sha, m_why;
};

} // namespace gsrq
