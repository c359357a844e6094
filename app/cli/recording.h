#pragma once
// How the CLI records its runs: the global --db / --no-db flags, and a run that is closed as
// failed (with the error) when the command throws.

#include "core/jobs/recorded_run.h"

#include <memory>
#include <optional>
#include <string>

namespace gsrq::cli {

struct GlobalOptions {
    std::string db; // empty: RunStore::defaultPath()
    bool noDb = false;
    std::string group;   // recorded with each run (a plan's id, say)
    std::string command; // the command line, recorded with each run
};
GlobalOptions& globalOptions();

// Ctrl-C (SIGINT) or SIGTERM asks the running job to stop at its next iteration; a second Ctrl-C
// ends the process at once. Jobs poll stopRequested() from their progress callbacks.
void installStopHandler();
bool stopRequested();

// Thrown when a job stopped on request; main() exits with 130.
struct Cancelled {
    std::string message;
};

// The store the flags name, or nullptr with --no-db.
std::unique_ptr<RunStore> openStore();

// The store the flags name: "" with --no-db, else --db or RunStore::defaultPath().
std::string storePathFromFlags();

// A run of the CLI: core's RecordedRun with the command line and --group, a store that cannot be
// opened or written stopping the command (StoreFailure::Stop), and the run closed as failed (with
// the error) when the command throws.
class CliRun {
public:
    // Opens the store and begins a run of `kind` (nothing is recorded with --no-db), or resumes run
    // `resume` where that is not 0.
    CliRun(const std::string& kind, const std::string& settingsJson, const std::string& dumpPath,
           const std::vector<std::string>& dumpFiles, const std::string& backend, const std::string& device,
           const std::string& tensor = {}, std::int64_t resume = 0);
    RunRecorder* operator->() { return m_run.operator->(); }
    explicit operator bool() const { return bool(m_run); }
    const std::string& dumpSha256() const { return m_run.dumpSha256(); }
    void progress(const ProgressEvent& e) { m_run.progress(e); }

    // Runs `body`; on an exception closes the run as failed with its message, then rethrows.
    template <class F> void guard(F&& body)
    {
        try {
            body();
        } catch (const std::exception& e) {
            m_run.fail(e.what());
            throw;
        }
    }
    void done(const std::string& summaryJson = "{}");
    // Closes the run as cancelled and throws Cancelled.
    [[noreturn]] void cancelled(const std::string& summaryJson = "{}");

private:
    RecordedRun m_run;
};

} // namespace gsrq::cli
