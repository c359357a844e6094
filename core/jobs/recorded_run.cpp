#include "core/jobs/recorded_run.h"

#include "core/base/version.h"

namespace gsrq {

RecordedRun::RecordedRun(const std::string& storePath, RunInfo info, const std::vector<std::string>& dumpFiles,
                         const std::string& tensor, StoreFailure policy)
    : m_policy(policy)
{
    if (storePath.empty())
        return;
    try {
        m_store = std::make_unique<RunStore>(storePath);
        m_sha = dumpFiles.empty() ? std::string() : m_store->dumpHash(dumpFiles);
        info.toolVersion = kVersion;
        info.dumpSha256 = m_sha;
        m_recorder.emplace(*m_store, info, tensor);
    } catch (const std::exception& e) {
        if (m_policy == StoreFailure::Stop)
            throw;
        m_recorder.reset();
        m_store.reset();
        m_why = e.what();
    }
}

void RecordedRun::finish(RunStatus status, const std::string& summaryJson, const std::string& error)
{
    if (!m_recorder)
        return;
    try {
        m_recorder->finish(status, summaryJson, error);
    } catch (const std::exception&) {
        if (m_policy == StoreFailure::Stop)
            throw;
    }
}

void RecordedRun::fail(const std::string& message) noexcept
{
    if (!m_recorder || m_recorder->finished())
        return;
    try {
        m_recorder->finish(RunStatus::Failed, "{}", message);
    } catch (...) {
        // The store itself failed (a full disk, say): the original error is what the user sees.
    }
}

} // namespace gsrq
