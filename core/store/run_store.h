#pragma once
// The run store: every run of the tool, its settings and its curves, in one SQLite file per user
// (schema in docs/run-store.md). WAL, foreign keys, a busy timeout, schema version in
// PRAGMA user_version with ordered migrations inside a transaction.
//
// Thread-safety: a RunStore is one connection; use one per thread (the GUI's reader and a job's
// writer each open their own). Several processes may write at once: writes are short
// BEGIN IMMEDIATE transactions and wait up to the busy timeout.

#include "core/base/process.h"
#include "core/store/sqlite_db.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gsrq {

inline constexpr int kRunStoreSchemaVersion = 6;

// A run's status. Running until it finishes; Interrupted when its process ended without finishing
// it (found when a store is opened on the same host). Stored as its name.
enum class RunStatus { Running, Done, Failed, Cancelled, Interrupted };
const char* runStatusName(RunStatus s); // "running", "done", "failed", "cancelled", "interrupted"
std::optional<RunStatus> runStatusFromName(std::string_view name);
const std::vector<RunStatus>& allRunStatuses();

struct RunInfo {
    std::int64_t id = 0;
    std::string kind; // compare, sweep, train, eval, bench-...
    RunStatus status = RunStatus::Running;
    std::string startedAt, finishedAt; // ISO 8601 UTC
    std::string toolVersion, host;
    std::int64_t pid = 0;
    std::string backend, device;
    std::string dumpPath, dumpSha256;
    std::string settingsJson = "{}";
    std::string summaryJson = "{}";
    std::string error;
    std::string command; // the command line
    // Identity across stores: random for runs recorded since schema version 4, derived from the
    // host, process and start time for older ones; importing keys on it.
    std::string uid;
    std::string group;  // e.g. the plan a run belongs to ("" for none)
    std::string origin; // the store a run was imported from ("" when recorded here)
};

// One assignment pass of one clustering.
struct IterationRow {
    std::string method, tensor;
    int subspace = -1, stage = -1, iteration = 0; // -1: not applicable
    double objective = 0;
    double nmse = 0; // NaN for passes recorded by schema version 1
    std::int64_t changed = 0;
    int emptyClusters = 0;
    double seconds = 0;
    // Unweighted metrics of the pass (clustering.h); NaN where not computed or recorded before
    // schema version 3.
    double cosine = std::nan(""), gainError = std::nan(""), shrinkage = std::nan("");
    // Fraction of the pass's codeword scores exact bounds skipped; NaN for passes recorded before
    // schema version 5.
    double skipped = std::nan("");
};

// scope: final, heldout, block, stage, attention, ... ; -1 where not applicable.
struct MetricRow {
    std::string scope, method, tensor;
    int stage = -1, subspace = -1;
    std::string name;
    double value = 0;
};

struct SeriesPoint {
    std::string name;
    double x = 0, y = 0;
};

struct ArtifactRow {
    std::string path, kind, sha256;
    std::int64_t bytes = 0;
};

// One answered prompt of a run (gsrq tasks): a key unique within the run, its score, and its whole
// record as JSON.
struct SampleRow {
    std::string key;
    double score = std::nan("");
    std::string json = "{}";
};
struct NoteRow {
    std::int64_t id = 0;
    std::string createdAt, text;
};

struct RunFilter {
    std::string kind;
    std::optional<RunStatus> status;
    std::string group;
    int limit = 0; // 0: all
};

// What importing one store added.
struct ImportReport {
    std::string source;
    int sourceSchema = 0;
    int added = 0, alreadyPresent = 0;
    std::vector<std::int64_t> stillRunning; // source ids not imported: their process may still record
};

class RunStore {
public:
    // $XDG_DATA_HOME/gsrq/runs.db, else ~/.local/share/gsrq/runs.db.
    static std::string defaultPath();

    // Creates the file (and its directory) when missing and migrates it; refuses a file that is not
    // a database or comes from a newer schema (without modifying it). Runs left `running` by a
    // process that is gone are marked `interrupted`.
    explicit RunStore(const std::string& path);
    const std::string& path() const { return m_db.path(); }
    int schemaVersion();

    std::int64_t beginRun(RunInfo info); // inserted as `running` and committed at once
    void addIterations(std::int64_t run, const std::vector<IterationRow>& rows);
    void addMetrics(std::int64_t run, const std::vector<MetricRow>& rows);
    void addSeries(std::int64_t run, const std::vector<SeriesPoint>& points);
    void addArtifact(std::int64_t run, const ArtifactRow& a);
    void finishRun(std::int64_t run, RunStatus status, const std::string& summaryJson = "{}",
                   const std::string& error = "");
    // Opens a finished run again for this process (its samples kept, to be added to): status
    // running, no finish time or error. Throws Error(InvalidInput) for an unknown run or one still
    // running.
    void resumeRun(std::int64_t run);
    // Adds one sample, committed at once; throws Error(InvalidInput) for a key the run has already.
    void addSample(std::int64_t run, const SampleRow& sample);
    std::vector<SampleRow> samples(std::int64_t run); // in the order they were added
    std::int64_t addNote(std::int64_t run, const std::string& text);
    void deleteRun(std::int64_t run); // with everything recorded for it

    std::vector<RunInfo> listRuns(const RunFilter& f = {});
    std::vector<std::string> groups(); // every group a run is recorded under, sorted
    std::optional<RunInfo> run(std::int64_t id);
    RunInfo requireRun(std::int64_t id); // throws Error(InvalidInput) for an unknown id
    std::vector<IterationRow> iterations(std::int64_t run);
    std::vector<MetricRow> metrics(std::int64_t run);
    std::vector<SeriesPoint> series(std::int64_t run);
    std::vector<ArtifactRow> artifacts(std::int64_t run);
    std::vector<NoteRow> notes(std::int64_t run);

    // SHA-256 of a dump's files, cached by path, size and modification time.
    std::string dumpHash(const std::vector<std::string>& files);

    // Copies the runs of another store (with their iterations, metrics, series, artifacts and
    // notes) into this one, keyed by run uid: a run already here is skipped, so importing twice adds
    // nothing. The source is opened read-only and never altered; one of a newer schema, or that is
    // not a run store, is refused. Runs still `running` in the source are left out and listed. All
    // of one source's runs land in one transaction.
    ImportReport importRuns(const std::string& sourcePath);

    bool integrityOk();
    int markInterrupted(); // returns how many runs it marked

private:
    void migrate();
    sql::Db m_db;
};

} // namespace gsrq
