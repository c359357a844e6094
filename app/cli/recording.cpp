#include "recording.h"

#include "core/base/error.h"

#include "core/base/version.h"

#include <atomic>
#include <csignal>

namespace gsrq::cli {

GlobalOptions& globalOptions()
{
    static GlobalOptions options;
    return options;
}

namespace {

std::atomic<bool> g_stop{false};

// SIGINT or SIGTERM asks the job to stop at its next iteration and close its run as cancelled. A
// second Ctrl-C (SIGINT) stops at once; SIGTERM never does: a scheduler may deliver it twice
// (to the process and through its batch script) and follows it with SIGKILL when it will wait no
// longer, so a repeated SIGTERM must not lose the run's record.
extern "C" void onStopSignal(int sig)
{
    if (g_stop.exchange(true) && sig == SIGINT) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
    }
}

} // namespace

void installStopHandler()
{
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
}

bool stopRequested()
{
    return g_stop.load();
}

std::unique_ptr<RunStore> openStore()
{
    const auto& g = globalOptions();
    if (g.noDb)
        return nullptr;
    return std::make_unique<RunStore>(g.db.empty() ? RunStore::defaultPath() : g.db);
}

CliRun::CliRun(const std::string& kind, const std::string& settingsJson, const std::string& dumpPath,
               const std::vector<std::string>& dumpFiles, const std::string& backend, const std::string& device,
               const std::string& tensor)
    : m_store(openStore())
{
    if (!m_store)
        return;
    m_sha = dumpFiles.empty() ? std::string() : m_store->dumpHash(dumpFiles);
    RunInfo info;
    info.kind = kind;
    info.toolVersion = kVersion;
    info.backend = backend;
    info.device = device;
    info.dumpPath = dumpPath;
    info.dumpSha256 = m_sha;
    info.settingsJson = settingsJson;
    info.command = globalOptions().command;
    info.group = globalOptions().group;
    m_recorder.emplace(*m_store, info, tensor);
}

void CliRun::done(const std::string& summaryJson)
{
    if (m_recorder)
        m_recorder->finish(RunStatus::Done, summaryJson);
}

void CliRun::cancelled(const std::string& summaryJson)
{
    std::string where;
    if (m_recorder) {
        m_recorder->finish(RunStatus::Cancelled, summaryJson, "stopped on request");
        where = cat("; what it finished is recorded as run ", m_recorder->id());
    }
    throw Cancelled{cat("cancelled", where)};
}

void CliRun::fail(const std::string& message)
{
    if (!m_recorder || m_recorder->finished())
        return;
    try {
        m_recorder->finish(RunStatus::Failed, "{}", message);
    } catch (...) {
        // The store itself failed (a full disk, say): the original error is what the user sees.
    }
}

} // namespace gsrq::cli
