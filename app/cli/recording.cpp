#include "recording.h"

#include "core/base/error.h"

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

std::string storePathFromFlags()
{
    const auto& g = globalOptions();
    if (g.noDb)
        return {};
    return g.db.empty() ? RunStore::defaultPath() : g.db;
}

std::unique_ptr<RunStore> openStore()
{
    const auto path = storePathFromFlags();
    return path.empty() ? nullptr : std::make_unique<RunStore>(path);
}

namespace {

RunInfo cliRunInfo(const std::string& kind, const std::string& settingsJson, const std::string& dumpPath,
                   const std::string& backend, const std::string& device)
{
    RunInfo info;
    info.kind = kind;
    info.backend = backend;
    info.device = device;
    info.dumpPath = dumpPath;
    info.settingsJson = settingsJson;
    info.command = globalOptions().command;
    info.group = globalOptions().group;
    return info;
}

} // namespace

CliRun::CliRun(const std::string& kind, const std::string& settingsJson, const std::string& dumpPath,
               const std::vector<std::string>& dumpFiles, const std::string& backend, const std::string& device,
               const std::string& tensor, std::int64_t resume)
    : m_run(
          storePathFromFlags(),
          [&] {
              RunInfo info = cliRunInfo(kind, settingsJson, dumpPath, backend, device);
              info.id = resume;
              return info;
          }(),
          dumpFiles, tensor, StoreFailure::Stop)
{
}

void CliRun::done(const std::string& summaryJson)
{
    m_run.finish(RunStatus::Done, summaryJson);
}

void CliRun::cancelled(const std::string& summaryJson)
{
    std::string where;
    if (m_run) {
        m_run.finish(RunStatus::Cancelled, summaryJson, "stopped on request");
        where = cat("; what it finished is recorded as run ", m_run->id());
    }
    throw Cancelled{cat("cancelled", where)};
}

} // namespace gsrq::cli
