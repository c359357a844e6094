#include "core/store/run_store.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/sha256.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;

namespace gsrq {

const char* runStatusName(RunStatus s)
{
    switch (s) {
    case RunStatus::Running:
        return "running";
    case RunStatus::Done:
        return "done";
    case RunStatus::Failed:
        return "failed";
    case RunStatus::Cancelled:
        return "cancelled";
    case RunStatus::Interrupted:
        return "interrupted";
    }
    return "failed";
}

const std::vector<RunStatus>& allRunStatuses()
{
    static const std::vector<RunStatus> all{RunStatus::Running, RunStatus::Done, RunStatus::Failed,
                                            RunStatus::Cancelled, RunStatus::Interrupted};
    return all;
}

std::optional<RunStatus> runStatusFromName(std::string_view name)
{
    for (RunStatus s : allRunStatuses())
        if (name == runStatusName(s))
            return s;
    return std::nullopt;
}

namespace {

// Ordered migrations: entry v brings the schema from version v to v + 1.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE runs (
  id            INTEGER PRIMARY KEY,
  kind          TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('running','done','failed','cancelled','interrupted')),
  started_at    TEXT NOT NULL,
  finished_at   TEXT,
  tool_version  TEXT NOT NULL,
  host          TEXT NOT NULL,
  pid           INTEGER NOT NULL,
  pid_start     INTEGER NOT NULL DEFAULT 0,
  backend       TEXT NOT NULL DEFAULT '',
  device        TEXT NOT NULL DEFAULT '',
  dump_path     TEXT NOT NULL DEFAULT '',
  dump_sha256   TEXT NOT NULL DEFAULT '',
  command       TEXT NOT NULL DEFAULT '',
  settings_json TEXT NOT NULL DEFAULT '{}',
  summary_json  TEXT NOT NULL DEFAULT '{}',
  error         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_kind ON runs (kind, started_at);
CREATE TABLE iterations (
  run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  method         TEXT NOT NULL,
  tensor         TEXT NOT NULL,
  subspace       INTEGER,
  stage          INTEGER,
  iteration      INTEGER NOT NULL,
  objective      REAL NOT NULL,
  changed        INTEGER NOT NULL,
  empty_clusters INTEGER NOT NULL,
  seconds        REAL NOT NULL
);
CREATE INDEX iterations_run ON iterations (run_id);
CREATE TABLE metrics (
  run_id   INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  scope    TEXT NOT NULL,
  method   TEXT NOT NULL DEFAULT '',
  tensor   TEXT NOT NULL DEFAULT '',
  stage    INTEGER,
  subspace INTEGER,
  name     TEXT NOT NULL,
  value    REAL
);
CREATE INDEX metrics_run ON metrics (run_id);
CREATE TABLE series (
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name   TEXT NOT NULL,
  idx    INTEGER NOT NULL,
  x      REAL NOT NULL,
  y      REAL
);
CREATE INDEX series_run ON series (run_id, name, idx);
CREATE TABLE artifacts (
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  path       TEXT NOT NULL,
  kind       TEXT NOT NULL,
  sha256     TEXT NOT NULL,
  bytes      INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE notes (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  created_at TEXT NOT NULL,
  text       TEXT NOT NULL
);
CREATE TABLE dump_hashes (
  path   TEXT NOT NULL,
  bytes  INTEGER NOT NULL,
  mtime  INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  PRIMARY KEY (path, bytes, mtime)
);
)sql",
    // 2: the nmse of every assignment pass (Σw‖x − c‖²/Σw‖x‖²), for curves comparable across
    // tensors; passes recorded before it read as NULL.
    R"sql(
ALTER TABLE iterations ADD COLUMN nmse REAL;
)sql",
    // 3: every pass's cosine, gain error and shrinkage, so any metric's convergence can be drawn;
    // passes recorded before it read as NULL.
    R"sql(
ALTER TABLE iterations ADD COLUMN cosine REAL;
ALTER TABLE iterations ADD COLUMN gain_error REAL;
ALTER TABLE iterations ADD COLUMN shrinkage REAL;
)sql",
    // 4: runs get an identity that survives copying between stores (uid; runs recorded before
    // it get one derived from what identified them already), the store they were imported from,
    // and a group (the plan of a scale-out job).
    R"sql(
ALTER TABLE runs ADD COLUMN uid TEXT;
ALTER TABLE runs ADD COLUMN run_group TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN origin TEXT NOT NULL DEFAULT '';
UPDATE runs SET uid = host || ':' || pid || ':' || pid_start || ':' || started_at || ':' || id;
CREATE UNIQUE INDEX runs_uid ON runs (uid);
CREATE INDEX runs_group ON runs (run_group);
)sql",
    // 5: the fraction of every pass's codeword scores that exact bounds skipped; passes recorded
    // before it read as NULL.
    R"sql(
ALTER TABLE iterations ADD COLUMN skipped REAL;
)sql",
    // 6: the samples of a run that answers many prompts (gsrq tasks): each one's record as JSON,
    // under a key unique within its run, written as it finishes so a stopped run resumes.
    R"sql(
CREATE TABLE samples (
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  key        TEXT NOT NULL,
  score      REAL,
  json       TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
);
)sql",
};
constexpr int kMigrationCount = int(sizeof(kMigrations) / sizeof(kMigrations[0]));
static_assert(kMigrationCount == kRunStoreSchemaVersion);

// SQLite's NULL for the "not applicable" -1 of subspace and stage.
std::optional<std::int64_t> optIndex(int v)
{
    return v < 0 ? std::nullopt : std::optional<std::int64_t>(v);
}

// SQLite's NULL for a metric that was not computed (NaN).
std::optional<double> optReal(double v)
{
    return std::isnan(v) ? std::nullopt : std::optional<double>(v);
}

RunInfo readRun(const sql::Stmt& s)
{
    RunInfo r;
    r.id = s.int64(0);
    r.kind = s.text(1);
    r.status = runStatusFromName(s.text(2)).value_or(RunStatus::Interrupted);
    r.startedAt = s.text(3);
    r.finishedAt = s.text(4);
    r.toolVersion = s.text(5);
    r.host = s.text(6);
    r.pid = s.int64(7);
    r.backend = s.text(8);
    r.device = s.text(9);
    r.dumpPath = s.text(10);
    r.dumpSha256 = s.text(11);
    r.command = s.text(12);
    r.settingsJson = s.text(13);
    r.summaryJson = s.text(14);
    r.error = s.text(15);
    r.uid = s.text(16);
    r.group = s.text(17);
    r.origin = s.text(18);
    return r;
}

const char* kRunColumns = "id, kind, status, started_at, finished_at, tool_version, host, pid, backend, device, "
                          "dump_path, dump_sha256, command, settings_json, summary_json, error, uid, run_group, "
                          "origin";

// The uid of a run recorded before schema version 4 (the same expression as that migration's).
const char* kDerivedUid = "host || ':' || pid || ':' || pid_start || ':' || started_at || ':' || id";

int openFlags(const std::string& path)
{
    std::error_code ec;
    const auto dir = fs::path(path).parent_path();
    if (!dir.empty() && !fs::exists(dir, ec))
        fs::create_directories(dir, ec); // a failure shows up as "cannot open" with the path
    return SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
}

} // namespace

std::string RunStore::defaultPath()
{
    if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x)
        return (fs::path(x) / "gsrq" / "runs.db").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : ".") / ".local" / "share" / "gsrq" / "runs.db").string();
}

RunStore::RunStore(const std::string& path) : m_db(path, openFlags(path))
{
    sqlite3_busy_timeout(m_db.handle(), 10000);
    // Read the version before changing anything: a newer schema is refused untouched.
    const int version = schemaVersion();
    if (version < 0)
        throwInvalid("run store ", path, ": schema version ", version,
                     " was never written by gsrq; not a run store? It was left unchanged");
    if (version > kRunStoreSchemaVersion)
        throwInvalid("run store ", path, ": schema version ", version, " is newer than this gsrq understands (",
                     kRunStoreSchemaVersion, "); it was left unchanged. Use a newer gsrq, or --db for another file");
    // A store the OS lets us read but not write (permissions, a read-only mount) can be browsed as
    // it is; recording into it fails with SQLite's "readonly" error, reported as bad input.
    if (sqlite3_db_readonly(m_db.handle(), "main") == 1) {
        if (version != kRunStoreSchemaVersion)
            throwInvalid("run store ", path, ": is read-only and of schema version ", version, "; this gsrq needs ",
                         kRunStoreSchemaVersion, " and would upgrade it, but may not write it");
        return;
    }
    // Switching to WAL takes an exclusive lock and SQLite does not wait for it through the busy
    // handler, so a second process opening a new store at the same moment retries here.
    for (int attempt = 0;; ++attempt) {
        try {
            sql::Stmt wal(m_db, "PRAGMA journal_mode=WAL");
            wal.step();
            break;
        } catch (const Error&) {
            // Only a lock held elsewhere is worth waiting for; a damaged file stays damaged.
            const int rc = sqlite3_errcode(m_db.handle()) & 0xff;
            if (attempt >= 500 || (rc != SQLITE_BUSY && rc != SQLITE_LOCKED))
                throw;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    m_db.exec("PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL");
    migrate();
    markInterrupted();
}

int RunStore::schemaVersion()
{
    sql::Stmt s(m_db, "PRAGMA user_version");
    return s.step() ? int(s.int64(0)) : 0;
}

void RunStore::migrate()
{
    if (schemaVersion() == kRunStoreSchemaVersion)
        return;
    sql::Transaction tx(m_db);
    // Another process may have migrated while we waited for the write lock.
    for (int v = schemaVersion(); v < kRunStoreSchemaVersion; ++v) {
        m_db.exec(kMigrations[v]);
        m_db.exec(cat("PRAGMA user_version=", v + 1));
    }
    tx.commit();
}

int RunStore::markInterrupted()
{
    std::vector<std::int64_t> dead;
    {
        sql::Stmt s(m_db, "SELECT id, pid, pid_start FROM runs WHERE status='running' AND host=?");
        s.bind(1, hostName());
        while (s.step())
            if (!processAlive(s.int64(1), s.int64(2)))
                dead.push_back(s.int64(0));
    }
    if (dead.empty())
        return 0;
    sql::Transaction tx(m_db);
    sql::Stmt u(m_db, "UPDATE runs SET status='interrupted', finished_at=?, "
                      "error='the process ended without finishing the run' WHERE id=? AND status='running'");
    for (auto id : dead)
        u.bind(1, isoNowUtc()).bind(2, id).run();
    tx.commit();
    return int(dead.size());
}

std::int64_t RunStore::beginRun(RunInfo r)
{
    sql::Transaction tx(m_db);
    sql::Stmt s(m_db,
                "INSERT INTO runs (kind, status, started_at, tool_version, host, pid, pid_start, backend, device, "
                "dump_path, dump_sha256, command, settings_json, uid, run_group) "
                "VALUES (?,'running',?,?,?,?,?,?,?,?,?,?,?,?,?)");
    const std::int64_t pid = ::getpid();
    s.bind(1, r.kind).bind(2, isoNowUtc()).bind(3, r.toolVersion).bind(4, hostName()).bind(5, pid);
    s.bind(6, processStartTicks(pid)).bind(7, r.backend).bind(8, r.device).bind(9, r.dumpPath).bind(10, r.dumpSha256);
    s.bind(11, r.command).bind(12, r.settingsJson).bind(13, r.uid.empty() ? randomHex(32) : r.uid).bind(14, r.group);
    s.run();
    const auto id = m_db.lastInsertId();
    tx.commit();
    return id;
}

void RunStore::addIterations(std::int64_t run, const std::vector<IterationRow>& rows)
{
    if (rows.empty())
        return;
    sql::Transaction tx(m_db);
    sql::Stmt s(m_db, "INSERT INTO iterations (run_id, method, tensor, subspace, stage, iteration, objective, nmse, "
                      "changed, empty_clusters, seconds, cosine, gain_error, shrinkage, skipped) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const auto& r : rows) {
        s.bind(1, run).bind(2, r.method).bind(3, r.tensor).bind(4, optIndex(r.subspace)).bind(5, optIndex(r.stage));
        s.bind(6, r.iteration).bind(7, r.objective).bind(8, optReal(r.nmse)).bind(9, r.changed);
        s.bind(10, r.emptyClusters).bind(11, r.seconds).bind(12, optReal(r.cosine)).bind(13, optReal(r.gainError));
        s.bind(14, optReal(r.shrinkage)).bind(15, optReal(r.skipped));
        s.run();
    }
    tx.commit();
}

void RunStore::addMetrics(std::int64_t run, const std::vector<MetricRow>& rows)
{
    if (rows.empty())
        return;
    sql::Transaction tx(m_db);
    sql::Stmt s(m_db, "INSERT INTO metrics (run_id, scope, method, tensor, stage, subspace, name, value) "
                      "VALUES (?,?,?,?,?,?,?,?)");
    for (const auto& r : rows) {
        s.bind(1, run).bind(2, r.scope).bind(3, r.method).bind(4, r.tensor).bind(5, optIndex(r.stage));
        s.bind(6, optIndex(r.subspace)).bind(7, r.name).bind(8, r.value);
        s.run();
    }
    tx.commit();
}

void RunStore::addSeries(std::int64_t run, const std::vector<SeriesPoint>& points)
{
    if (points.empty())
        return;
    sql::Transaction tx(m_db);
    sql::Stmt next(m_db, "SELECT COALESCE(MAX(idx) + 1, 0) FROM series WHERE run_id=? AND name=?");
    sql::Stmt s(m_db, "INSERT INTO series (run_id, name, idx, x, y) VALUES (?,?,?,?,?)");
    for (const auto& p : points) {
        next.bind(1, run).bind(2, p.name);
        next.step();
        const auto idx = next.int64(0);
        next.reset();
        s.bind(1, run).bind(2, p.name).bind(3, idx).bind(4, p.x).bind(5, p.y).run();
    }
    tx.commit();
}

void RunStore::addArtifact(std::int64_t run, const ArtifactRow& a)
{
    sql::Stmt s(m_db, "INSERT INTO artifacts (run_id, path, kind, sha256, bytes, created_at) VALUES (?,?,?,?,?,?)");
    s.bind(1, run).bind(2, a.path).bind(3, a.kind).bind(4, a.sha256).bind(5, a.bytes).bind(6, isoNowUtc()).run();
}

void RunStore::finishRun(std::int64_t run, RunStatus status, const std::string& summaryJson, const std::string& error)
{
    sql::Stmt s(m_db, "UPDATE runs SET status=?, finished_at=?, summary_json=?, error=? WHERE id=?");
    s.bind(1, runStatusName(status)).bind(2, isoNowUtc()).bind(3, summaryJson).bind(4, error).bind(5, run).run();
}

std::int64_t RunStore::addNote(std::int64_t run, const std::string& text)
{
    requireRun(run);
    sql::Stmt s(m_db, "INSERT INTO notes (run_id, created_at, text) VALUES (?,?,?)");
    s.bind(1, run).bind(2, isoNowUtc()).bind(3, text).run();
    return m_db.lastInsertId();
}

void RunStore::deleteRun(std::int64_t run)
{
    const auto r = requireRun(run);
    if (r.status == RunStatus::Running)
        throwInvalid("run ", run, " is still running (process ", r.pid, " on ", r.host,
                     "); it can be deleted once it ends");
    sql::Transaction tx(m_db);
    sql::Stmt s(m_db, "DELETE FROM runs WHERE id=?");
    s.bind(1, run).run();
    tx.commit();
}

std::vector<RunInfo> RunStore::listRuns(const RunFilter& f)
{
    std::string q = cat("SELECT ", kRunColumns,
                        " FROM runs WHERE (?1 = '' OR kind = ?1) AND (?2 = '' OR status = ?2) "
                        "AND (?3 = '' OR run_group = ?3) ORDER BY id DESC");
    if (f.limit > 0)
        q += cat(" LIMIT ", f.limit);
    sql::Stmt s(m_db, q);
    s.bind(1, f.kind).bind(2, f.status ? runStatusName(*f.status) : "").bind(3, f.group);
    std::vector<RunInfo> out;
    while (s.step())
        out.push_back(readRun(s));
    return out;
}

std::vector<std::string> RunStore::groups()
{
    sql::Stmt s(m_db, "SELECT DISTINCT run_group FROM runs WHERE run_group != '' ORDER BY run_group");
    std::vector<std::string> out;
    while (s.step())
        out.push_back(s.text(0));
    return out;
}

std::optional<RunInfo> RunStore::run(std::int64_t id)
{
    sql::Stmt s(m_db, cat("SELECT ", kRunColumns, " FROM runs WHERE id=?"));
    s.bind(1, id);
    if (!s.step())
        return std::nullopt;
    return readRun(s);
}

RunInfo RunStore::requireRun(std::int64_t id)
{
    auto r = run(id);
    if (!r)
        throwInvalid("run store ", path(), ": no run ", id, " (gsrq runs list shows the runs)");
    return *r;
}

std::vector<IterationRow> RunStore::iterations(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT method, tensor, COALESCE(subspace, -1), COALESCE(stage, -1), iteration, objective, "
                      "nmse, changed, empty_clusters, seconds, cosine, gain_error, shrinkage, skipped FROM iterations "
                      "WHERE run_id=? ORDER BY rowid");
    s.bind(1, run);
    const auto realOrNan = [&](int col) { return s.isNull(col) ? std::nan("") : s.real(col); };
    std::vector<IterationRow> out;
    while (s.step()) {
        out.push_back({s.text(0), s.text(1), int(s.int64(2)), int(s.int64(3)), int(s.int64(4)), s.real(5), realOrNan(6),
                       s.int64(7), int(s.int64(8)), s.real(9), realOrNan(10), realOrNan(11), realOrNan(12),
                       realOrNan(13)});
    }
    return out;
}

std::vector<MetricRow> RunStore::metrics(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT scope, method, tensor, COALESCE(stage, -1), COALESCE(subspace, -1), name, value "
                      "FROM metrics WHERE run_id=? ORDER BY rowid");
    s.bind(1, run);
    std::vector<MetricRow> out;
    while (s.step())
        out.push_back({s.text(0), s.text(1), s.text(2), int(s.int64(3)), int(s.int64(4)), s.text(5), s.real(6)});
    return out;
}

std::vector<SeriesPoint> RunStore::series(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT name, x, y FROM series WHERE run_id=? ORDER BY name, idx");
    s.bind(1, run);
    std::vector<SeriesPoint> out;
    while (s.step())
        out.push_back({s.text(0), s.real(1), s.real(2)});
    return out;
}

std::vector<ArtifactRow> RunStore::artifacts(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT path, kind, sha256, bytes FROM artifacts WHERE run_id=? ORDER BY rowid");
    s.bind(1, run);
    std::vector<ArtifactRow> out;
    while (s.step())
        out.push_back({s.text(0), s.text(1), s.text(2), s.int64(3)});
    return out;
}

std::vector<NoteRow> RunStore::notes(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT id, created_at, text FROM notes WHERE run_id=? ORDER BY id");
    s.bind(1, run);
    std::vector<NoteRow> out;
    while (s.step())
        out.push_back({s.int64(0), s.text(1), s.text(2)});
    return out;
}

std::string RunStore::dumpHash(const std::vector<std::string>& files)
{
    std::string key, keyBytes;
    std::int64_t bytes = 0, mtime = 0;
    for (const auto& f : files) {
        std::error_code ec;
        bytes += std::int64_t(fs::file_size(f, ec));
        mtime = std::max<std::int64_t>(mtime, fs::last_write_time(f, ec).time_since_epoch().count());
        if (!key.empty())
            key += '\n';
        key += fs::absolute(f, ec).string();
    }
    {
        sql::Stmt s(m_db, "SELECT sha256 FROM dump_hashes WHERE path=? AND bytes=? AND mtime=?");
        s.bind(1, key).bind(2, bytes).bind(3, mtime);
        if (s.step())
            return s.text(0);
    }
    const std::string h = sha256Files(files);
    sql::Stmt s(m_db, "INSERT OR REPLACE INTO dump_hashes (path, bytes, mtime, sha256) VALUES (?,?,?,?)");
    s.bind(1, key).bind(2, bytes).bind(3, mtime).bind(4, h).run();
    return h;
}

ImportReport RunStore::importRuns(const std::string& sourcePath)
{
    ImportReport rep;
    rep.source = sourcePath;
    std::error_code ec;
    if (!fs::is_regular_file(sourcePath, ec))
        throwInvalid("runs import: ", sourcePath, ": no such run store");
    if (fs::equivalent(sourcePath, path(), ec))
        throwInvalid("runs import: ", sourcePath, " is the store being imported into");
    sql::Db src(sourcePath, SQLITE_OPEN_READONLY);
    sqlite3_busy_timeout(src.handle(), 10000);
    {
        sql::Stmt v(src, "PRAGMA user_version");
        rep.sourceSchema = v.step() ? int(v.int64(0)) : 0;
    }
    if (rep.sourceSchema > kRunStoreSchemaVersion)
        throwInvalid("runs import: ", sourcePath, ": schema version ", rep.sourceSchema,
                     " is newer than this gsrq understands (", kRunStoreSchemaVersion,
                     "); nothing was imported. Use a newer gsrq");
    bool hasRuns = false;
    {
        sql::Stmt t(src, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'");
        hasRuns = t.step();
    }
    if (rep.sourceSchema < 1 || !hasRuns)
        throwInvalid("runs import: ", sourcePath, ": not a gsrq run store (schema version ", rep.sourceSchema,
                     ", no runs table)");
    const bool v4 = rep.sourceSchema >= 4;
    const std::string origin = fs::absolute(sourcePath, ec).lexically_normal().string();

    struct SourceRun {
        std::int64_t id;
        RunInfo info;
        std::int64_t pidStart;
    };
    std::vector<SourceRun> runs;
    {
        sql::Stmt s(src, cat("SELECT id, kind, status, started_at, COALESCE(finished_at, ''), tool_version, host, pid, "
                             "backend, device, dump_path, dump_sha256, command, settings_json, summary_json, error, ",
                             v4 ? "COALESCE(uid, " + std::string(kDerivedUid) + "), run_group, origin"
                                : std::string(kDerivedUid) + ", '', ''",
                             ", pid_start FROM runs ORDER BY id"));
        while (s.step())
            runs.push_back({s.int64(0), readRun(s), s.int64(19)});
    }
    std::set<std::string> present;
    {
        sql::Stmt s(m_db, "SELECT uid FROM runs");
        while (s.step())
            present.insert(s.text(0));
    }

    const std::string iterCols = cat("method, tensor, subspace, stage, iteration, objective, changed, empty_clusters, "
                                     "seconds, ",
                                     rep.sourceSchema >= 2 ? "nmse" : "NULL", ", ",
                                     rep.sourceSchema >= 3 ? "cosine, gain_error, shrinkage" : "NULL, NULL, NULL", ", ",
                                     rep.sourceSchema >= 5 ? "skipped" : "NULL");
    sql::Transaction tx(m_db);
    sql::Stmt insRun(m_db,
                     "INSERT INTO runs (kind, status, started_at, finished_at, tool_version, host, pid, pid_start, "
                     "backend, device, dump_path, dump_sha256, command, settings_json, summary_json, error, uid, "
                     "run_group, origin) VALUES (?,?,?,NULLIF(?, ''),?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    sql::Stmt readIter(src, cat("SELECT ", iterCols, " FROM iterations WHERE run_id=? ORDER BY rowid"));
    sql::Stmt insIter(m_db, "INSERT INTO iterations (run_id, method, tensor, subspace, stage, iteration, objective, "
                            "changed, empty_clusters, seconds, nmse, cosine, gain_error, shrinkage, skipped) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    sql::Stmt readMetric(src, "SELECT scope, method, tensor, stage, subspace, name, value FROM metrics "
                              "WHERE run_id=? ORDER BY rowid");
    sql::Stmt insMetric(m_db, "INSERT INTO metrics (run_id, scope, method, tensor, stage, subspace, name, value) "
                              "VALUES (?,?,?,?,?,?,?,?)");
    sql::Stmt readSeries(src, "SELECT name, idx, x, y FROM series WHERE run_id=? ORDER BY rowid");
    sql::Stmt insSeries(m_db, "INSERT INTO series (run_id, name, idx, x, y) VALUES (?,?,?,?,?)");
    sql::Stmt readArtifact(src, "SELECT path, kind, sha256, bytes, created_at FROM artifacts WHERE run_id=? "
                                "ORDER BY rowid");
    sql::Stmt insArtifact(m_db, "INSERT INTO artifacts (run_id, path, kind, sha256, bytes, created_at) "
                                "VALUES (?,?,?,?,?,?)");
    sql::Stmt readSample(src, rep.sourceSchema >= 6
                                  ? "SELECT key, score, json, created_at FROM samples WHERE run_id=? ORDER BY rowid"
                                  : "SELECT '', 0, '', '' WHERE ? IS NULL");
    sql::Stmt insSample(m_db, "INSERT INTO samples (run_id, key, score, json, created_at) VALUES (?,?,?,?,?)");
    sql::Stmt readNote(src, "SELECT created_at, text FROM notes WHERE run_id=? ORDER BY id");
    sql::Stmt insNote(m_db, "INSERT INTO notes (run_id, created_at, text) VALUES (?,?,?)");

    // Copies column i of a source row as it is (integer, real, text or NULL).
    const auto copyValue = [](const sql::Stmt& from, int col, sql::Stmt& to, int at) {
        if (from.isNull(col))
            to.bindNull(at);
        else if (sqlite3_column_type(from.raw(), col) == SQLITE_INTEGER)
            to.bind(at, from.int64(col));
        else if (sqlite3_column_type(from.raw(), col) == SQLITE_FLOAT)
            to.bind(at, from.real(col));
        else
            to.bind(at, from.text(col));
    };
    const auto copyRows = [&](sql::Stmt& read, sql::Stmt& ins, std::int64_t from, std::int64_t to, int columns) {
        read.bind(1, from);
        while (read.step()) {
            ins.bind(1, to);
            for (int c = 0; c < columns; ++c)
                copyValue(read, c, ins, c + 2);
            ins.run();
        }
        read.reset();
    };

    for (const auto& sr : runs) {
        const RunInfo& r = sr.info;
        if (r.status == RunStatus::Running) {
            rep.stillRunning.push_back(sr.id);
            continue;
        }
        if (!present.insert(r.uid).second) {
            ++rep.alreadyPresent;
            continue;
        }
        insRun.bind(1, r.kind)
            .bind(2, runStatusName(r.status))
            .bind(3, r.startedAt)
            .bind(4, r.finishedAt)
            .bind(5, r.toolVersion);
        insRun.bind(6, r.host).bind(7, r.pid).bind(8, sr.pidStart).bind(9, r.backend).bind(10, r.device);
        insRun.bind(11, r.dumpPath).bind(12, r.dumpSha256).bind(13, r.command).bind(14, r.settingsJson);
        insRun.bind(15, r.summaryJson).bind(16, r.error).bind(17, r.uid).bind(18, r.group);
        insRun.bind(19, r.origin.empty() ? origin : r.origin);
        insRun.run();
        const std::int64_t id = m_db.lastInsertId();
        copyRows(readIter, insIter, sr.id, id, 14);
        copyRows(readMetric, insMetric, sr.id, id, 7);
        copyRows(readSeries, insSeries, sr.id, id, 4);
        copyRows(readArtifact, insArtifact, sr.id, id, 5);
        copyRows(readNote, insNote, sr.id, id, 2);
        copyRows(readSample, insSample, sr.id, id, 4);
        ++rep.added;
    }
    tx.commit();
    return rep;
}

bool RunStore::integrityOk()
{
    sql::Stmt s(m_db, "PRAGMA integrity_check");
    return s.step() && s.text(0) == "ok";
}

} // namespace gsrq
