// The run store: schema and pragmas, recording and reading back, cascading deletes, interrupted
// runs, refusals (not a database, newer schema, unwritable place), and against real gsrq
// processes: SIGKILL mid-run, two writers at once, a disk that fills up.

#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/cluster/nearest_kernels.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_recorder.h"
#include "core/store/run_store.h"
#include "test_util.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include <csignal>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace gsrq;

namespace {

std::int64_t count(const std::string& db, const std::string& table, std::int64_t run)
{
    sql::Db d(db, SQLITE_OPEN_READONLY);
    sql::Stmt s(d, "SELECT COUNT(*) FROM " + table + " WHERE run_id=?");
    s.bind(1, run);
    s.step();
    return s.int64(0);
}

QProcess* startGsrq(const QStringList& args, QObject* parent)
{
    auto* p = new QProcess(parent);
    p->start(QStringLiteral(GSRQ_CLI_PATH), args);
    return p;
}

std::string fileHash(const std::string& path)
{
    return sha256Files({path});
}

} // namespace

class TestRunStore : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void schemaAndPragmas();
    void recordAndReadBack();
    void deleteCascades();
    void deadProcessReadsAsInterrupted();
    void notADatabaseRefused();
    void newerSchemaRefusedUntouched();
    void olderSchemaMigratedKeepingRows();
    void unwritableLocationRefused();
    void dumpHashCached();
    void sigkillMidRunLeavesInterruptedAndIntact();
    void twoWritersLoseNothing();
    void fullDiskFailsCleanly();
    void readOnlyStoreBrowsedNotWritten();
    void lockedStoreRefusedAfterBusyTimeout();
    void cliBrowsesTheStore();
    void skippedWorkRecordedPerPass();
    void ctrlCRecordsCancelled();
    void ctrlCRecordsCancelled_data();
    void importCopiesEachRunOnce();
    void importRefusesNewerOrForeignStores();
    void importOfOlderStoreMatchesItsMigration();
    void samplesResumeAndImport();
    void everyKindHasAHeadline();

private:
    QTemporaryDir m_dir;
    QString m_data;
};

void TestRunStore::initTestCase()
{
    QVERIFY(m_dir.isValid());
    m_data = m_dir.filePath("data.npy");
    QProcess p;
    p.start(QStringLiteral(GSRQ_CLI_PATH),
            {"--no-db", "synth", "gaussian", "--rows", "20000", "--features", "64", "--seed", "3", "--out", m_data});
    QVERIFY(p.waitForFinished(test::waitMs(60000)) && p.exitCode() == 0);
}

void TestRunStore::schemaAndPragmas()
{
    const auto path = test::pathIn(m_dir, "schema/new.db"); // the directory is created too
    RunStore store(path);
    QCOMPARE(store.schemaVersion(), kRunStoreSchemaVersion);
    sql::Db d(path, SQLITE_OPEN_READONLY);
    sql::Stmt mode(d, "PRAGMA journal_mode");
    QVERIFY(mode.step());
    QCOMPARE(mode.text(0), std::string("wal"));
    sql::Stmt tables(d, "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name IN "
                        "('runs','iterations','metrics','series','artifacts','notes','samples')");
    tables.step();
    QCOMPARE(tables.int64(0), std::int64_t(7));
    QVERIFY(store.integrityOk());
    RunStore again(path); // re-opening an up-to-date store migrates nothing
    QCOMPARE(again.schemaVersion(), kRunStoreSchemaVersion);
}

void TestRunStore::recordAndReadBack()
{
    const auto path = test::pathIn(m_dir, "record.db");
    RunStore store(path);
    RunInfo info;
    info.kind = "compare";
    info.settingsJson = R"({"k": 8})";
    info.dumpPath = "x.npy";
    std::int64_t id = 0;
    {
        RunRecorder rec(store, info, "data");
        id = rec.id();
        QCOMPARE(store.requireRun(id).status, RunStatus::Running); // visible before any result
        for (int i = 0; i < 1200; ++i) {
            ProgressEvent e;
            e.iteration.iteration = i % 100;
            e.iteration.objective = 1.0 / (1 + i);
            e.method = Method::GainShape;
            e.subspace = i / 100;
            rec.onProgress(e);
        }
        // More than one batch was due: at least 512 rows are committed before the run ends.
        QVERIFY(count(path, "iterations", id) >= 512);
        CompareResult r;
        r.methods.push_back({Method::KMeans, QuantMetrics{1, 0.5, 0.1, 0.9, 0.7}, 10, 1, 0.2, {}});
        rec.recordCompare(r, "data");
        rec.finish(RunStatus::Done, R"({"ok": true})");
    }
    const auto run = store.requireRun(id);
    QCOMPARE(run.status, RunStatus::Done);
    QCOMPARE(run.kind, std::string("compare"));
    QVERIFY(!run.finishedAt.empty());
    QCOMPARE(run.pid, std::int64_t(::getpid()));
    const auto its = store.iterations(id);
    QCOMPARE(its.size(), size_t(1200));
    QCOMPARE(its[150].subspace, 1);
    QCOMPARE(its[150].stage, -1); // not applicable: stored as NULL, read as −1
    QCOMPARE(its[150].method, std::string("gskm"));
    bool found = false;
    for (const auto& m : store.metrics(id))
        found = found || (m.scope == "final" && m.method == "km" && m.name == "nmse" && m.value == 0.5);
    QVERIFY(found);
    store.addSeries(id, {{"curve", 1, 2}, {"curve", 2, 3}});
    store.addSeries(id, {{"curve", 3, 4}});
    QCOMPARE(store.series(id).size(), size_t(3));
    QCOMPARE(store.series(id)[2].x, 3.0);
    store.addNote(id, "looks right");
    QCOMPARE(store.notes(id).at(0).text, std::string("looks right"));
    QVERIFY_THROWS_EXCEPTION(Error, store.addNote(id + 100, "no such run"));
}

void TestRunStore::deleteCascades()
{
    const auto path = test::pathIn(m_dir, "delete.db");
    RunStore store(path);
    RunInfo info;
    info.kind = "train";
    const auto id = store.beginRun(info);
    QVERIFY_THROWS_EXCEPTION(Error, store.deleteRun(id)); // still running: refused
    store.addIterations(id, {IterationRow{"km", "t", 0, 0, 0, 1.0, 0.5, 5, 0, 0.1}});
    store.addMetrics(id, {MetricRow{"final", "km", "t", -1, -1, "mse", 1.0}});
    store.addSeries(id, {{"s", 0, 1}});
    store.addArtifact(id, {"/tmp/x", "codebooks", "00", 1});
    store.addNote(id, "n");
    store.finishRun(id, RunStatus::Done);
    store.deleteRun(id);
    QVERIFY(!store.run(id));
    for (const char* t : {"iterations", "metrics", "series", "artifacts", "notes"})
        QCOMPARE(count(path, t, id), std::int64_t(0));
}

void TestRunStore::deadProcessReadsAsInterrupted()
{
    const auto path = test::pathIn(m_dir, "dead.db");
    std::int64_t id = 0;
    {
        RunStore store(path);
        RunInfo info;
        info.kind = "train";
        id = store.beginRun(info);
        // A pid that certainly ended: a child we started and reaped.
        const pid_t child = fork();
        if (child == 0)
            _exit(0);
        waitpid(child, nullptr, 0);
        sql::Db d(path, SQLITE_OPEN_READWRITE);
        sql::Stmt s(d, "UPDATE runs SET pid=?, pid_start=0 WHERE id=?");
        s.bind(1, std::int64_t(child)).bind(2, id).run();
    }
    RunStore reopened(path);
    const auto r = reopened.requireRun(id);
    QCOMPARE(r.status, RunStatus::Interrupted);
    QVERIFY(!r.error.empty());
}

void TestRunStore::notADatabaseRefused()
{
    const auto path = test::pathIn(m_dir, "notes.txt");
    {
        std::ofstream(path) << std::string(5000, 'x');
    }
    const auto before = fileHash(path);
    try {
        RunStore store(path);
        QFAIL("a text file must be refused");
    } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY2(std::string(e.what()).find(path) != std::string::npos, e.what());
    }
    QCOMPARE(fileHash(path), before);
}

void TestRunStore::newerSchemaRefusedUntouched()
{
    const auto path = test::pathIn(m_dir, "future.db");
    {
        sql::Db d(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        d.exec("CREATE TABLE runs (id INTEGER PRIMARY KEY, future TEXT); PRAGMA user_version=99");
    }
    const auto before = fileHash(path);
    try {
        RunStore store(path);
        QFAIL("a newer schema must be refused");
    } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY2(std::string(e.what()).find("schema version 99") != std::string::npos, e.what());
    }
    QCOMPARE(fileHash(path), before);
    QVERIFY(!std::filesystem::exists(path + "-wal")); // not even switched to WAL
}

// A store written by schema version 1 (no per-pass nmse, cosine, gain error or shrinkage) is
// migrated in place: its rows stay and read with NaN for the new columns; new rows carry them.
void TestRunStore::olderSchemaMigratedKeepingRows()
{
    const auto path = test::pathIn(m_dir, "v1.db");
    {
        RunStore store(path);
        RunInfo info;
        info.kind = "compare";
        const auto id = store.beginRun(info);
        store.addIterations(id, {IterationRow{"km", "t", 0, -1, 0, 2.0, 0.5, 10, 0, 0.1}});
        store.finishRun(id, RunStatus::Done);
    }
    {
        // Take it back to version 1 as that version wrote it.
        sql::Db d(path, SQLITE_OPEN_READWRITE);
        d.exec("ALTER TABLE iterations DROP COLUMN nmse; ALTER TABLE iterations DROP COLUMN cosine; "
               "ALTER TABLE iterations DROP COLUMN gain_error; ALTER TABLE iterations DROP COLUMN shrinkage; "
               "ALTER TABLE iterations DROP COLUMN skipped; "
               "DROP INDEX runs_uid; DROP INDEX runs_group; ALTER TABLE runs DROP COLUMN uid; "
               "ALTER TABLE runs DROP COLUMN run_group; ALTER TABLE runs DROP COLUMN origin; DROP TABLE samples; "
               "PRAGMA user_version=1");
    }
    RunStore store(path);
    QCOMPARE(store.schemaVersion(), kRunStoreSchemaVersion);
    const auto old = store.iterations(1);
    QCOMPARE(old.size(), size_t(1));
    QCOMPARE(old[0].objective, 2.0);
    QVERIFY(std::isnan(old[0].nmse));
    QVERIFY(std::isnan(old[0].cosine) && std::isnan(old[0].gainError) && std::isnan(old[0].shrinkage));
    QVERIFY(std::isnan(old[0].skipped));
    store.addIterations(1, {IterationRow{"km", "t", 0, -1, 1, 1.0, 0.25, 0, 0, 0.1, 0.9, 0.2, 0.8, 0.75}});
    const auto now = store.iterations(1)[1];
    QCOMPARE(now.nmse, 0.25);
    QCOMPARE(now.cosine, 0.9);
    QCOMPARE(now.gainError, 0.2);
    QCOMPARE(now.shrinkage, 0.8);
    QCOMPARE(now.skipped, 0.75);
    QVERIFY(store.integrityOk());
}

void TestRunStore::unwritableLocationRefused()
{
    // /proc refuses new files even to root (permission bits would not stop root).
    try {
        RunStore store("/proc/gsrq-no-such-dir/runs.db");
        QFAIL("an unwritable location must be refused");
    } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY2(std::string(e.what()).find("cannot open") != std::string::npos, e.what());
    }
    QProcess p;
    p.start(QStringLiteral(GSRQ_CLI_PATH),
            {"--db", "/proc/gsrq-no-such-dir/runs.db", "compare", m_data, "--k", "4", "--iters", "1", "--dim", "64"});
    QVERIFY(p.waitForFinished(test::waitMs(60000)));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(p.readAllStandardError().contains("--no-db"));
}

void TestRunStore::dumpHashCached()
{
    RunStore store(test::pathIn(m_dir, "hash.db"));
    const auto h = store.dumpHash({m_data.toStdString()});
    QCOMPARE(h, sha256Files({m_data.toStdString()}));
    QCOMPARE(store.dumpHash({m_data.toStdString()}), h);
}

void TestRunStore::sigkillMidRunLeavesInterruptedAndIntact()
{
    const auto db = test::pathIn(m_dir, "kill.db");
    auto* p = startGsrq({"--db", QString::fromStdString(db), "train", m_data, "--dim", "8", "--stages", "64", "--k",
                         "64", "--iters", "100", "-q", "--attention-queries", "0"},
                        this);
    QVERIFY(p->waitForStarted());
    // Wait until batches of iterations have been committed, then kill without warning.
    std::int64_t before = 0;
    for (int i = 0; i < 600 * test::kWaitScale && before < 600; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (std::filesystem::exists(db))
            try {
                before = count(db, "iterations", 1);
            } catch (const Error&) {
                before = 0; // the schema is being created
            }
    }
    QVERIFY2(before >= 600, "the child recorded too little before the deadline");
    QCOMPARE(p->state(), QProcess::Running);
    ::kill(pid_t(p->processId()), SIGKILL);
    QVERIFY(p->waitForFinished(test::waitMs(10000)));

    RunStore store(db);
    const auto r = store.requireRun(1);
    QCOMPARE(r.status, RunStatus::Interrupted);
    QVERIFY(std::int64_t(store.iterations(1).size()) >= before); // nothing committed was lost
    QVERIFY(store.integrityOk());
}

void TestRunStore::twoWritersLoseNothing()
{
    const auto db = QString::fromStdString(test::pathIn(m_dir, "two.db"));
    const QStringList args{"--db", db, "compare", m_data, "--dim", "8", "--k", "64", "--iters", "40", "--json", "-q"};
    auto* a = startGsrq(args, this);
    auto* b = startGsrq(args + QStringList{"--seed", "1"}, this);
    QVERIFY(a->waitForFinished(test::waitMs(240000)) && b->waitForFinished(test::waitMs(240000)));
    QVERIFY2(a->exitCode() == 0, a->readAllStandardError().constData());
    QVERIFY2(b->exitCode() == 0, b->readAllStandardError().constData());
    RunStore store(db.toStdString());
    for (auto* p : {a, b}) {
        const QByteArray out = p->readAllStandardOutput();
        const auto j = QJsonDocument::fromJson(out).object();
        QVERIFY2(j.contains("run_id"), out.left(400).constData()); // --json: one JSON object on stdout
        const auto id = std::int64_t(j["run_id"].toInteger());
        std::int64_t expected = 0;
        for (const char* m : {"km", "gskm"})
            for (const auto& block : j[m].toObject()["blocks"].toArray())
                expected += block.toObject()["history"].toArray().size();
        QCOMPARE(store.requireRun(id).status, RunStatus::Done);
        QCOMPARE(std::int64_t(store.iterations(id).size()), expected); // every pass, once
    }
    QCOMPARE(store.listRuns().size(), size_t(2));
    QVERIFY(store.integrityOk());
}

void TestRunStore::fullDiskFailsCleanly()
{
    // The shell caps the size of any file gsrq writes (ulimit -f, in KiB) and ignores SIGXFSZ, so
    // writes past the cap fail as on a full disk.
    if (test::kThreadSanitizer)
        QSKIP("under ThreadSanitizer the CLI links LLVM's OpenMP runtime, whose start-up dies of SIGBUS "
              "in a process with a file-size limit, before gsrq runs; the normal and ASan suites run this");
    const auto db = QString::fromStdString(test::pathIn(m_dir, "full.db"));
    {
        // An earlier run, recorded before the disk fills: it must survive whole.
        QProcess first;
        first.start(QStringLiteral(GSRQ_CLI_PATH),
                    {"--db", db, "compare", m_data, "--dim", "32", "--k", "8", "--iters", "3", "-q"});
        QVERIFY(first.waitForFinished(test::waitMs(120000)) && first.exitCode() == 0);
    }
    const auto earlierIterations = count(db.toStdString(), "iterations", 1);
    QVERIFY(earlierIterations > 0);
    QProcess p;
    p.start("sh", {"-c", QString("ulimit -f 160; trap '' XFSZ; exec '%1' --db '%2' train '%3' --dim 8 --stages 64 "
                                 "--k 64 --iters 100 -q --attention-queries 0")
                             .arg(GSRQ_CLI_PATH, db, m_data)});
    QVERIFY(p.waitForFinished(test::waitMs(240000)));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 1); // a failure at run time, reported, not a crash
    QVERIFY2(p.readAllStandardError().contains("run store"), "the message names the run store");
    RunStore store(db.toStdString()); // still readable and consistent
    QVERIFY(store.integrityOk());
    const auto runs = store.listRuns(); // newest first
    QCOMPARE(runs.size(), size_t(2));
    QVERIFY(runs[0].status == RunStatus::Failed || runs[0].status == RunStatus::Interrupted);
    QCOMPARE(runs[1].status, RunStatus::Done);
    QCOMPARE(count(db.toStdString(), "iterations", runs[1].id), earlierIterations);
}

namespace {

// Runs gsrq as a user the permission bits bind. Root passes them (CAP_DAC_OVERRIDE), so as root
// the child runs without that capability (setpriv, util-linux); nothing else changes.
QStringList withoutRootOverride(const QStringList& args)
{
    if (geteuid() != 0)
        return QStringList{QStringLiteral(GSRQ_CLI_PATH)} + args;
    return QStringList{"setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--",
                       QStringLiteral(GSRQ_CLI_PATH)} +
           args;
}

} // namespace

void TestRunStore::readOnlyStoreBrowsedNotWritten()
{
    const auto db = test::pathIn(m_dir, "readonly/runs.db");
    const auto qdb = QString::fromStdString(db);
    QProcess first;
    first.start(QStringLiteral(GSRQ_CLI_PATH),
                {"--db", qdb, "compare", m_data, "--dim", "32", "--k", "8", "--iters", "2", "-q"});
    QVERIFY(first.waitForFinished(test::waitMs(120000)) && first.exitCode() == 0);
    // The store file read-only (its directory stays writable: SQLite keeps its shared-memory index
    // of the write-ahead log beside it even to read).
    QVERIFY(!std::filesystem::exists(db + "-wal")); // the last writer folded its log into the file
    std::filesystem::permissions(db, std::filesystem::perms(0444));
    const auto before = fileHash(db);
    auto gsrq = [&](const QStringList& args) {
        const auto cmd = withoutRootOverride(QStringList{"--db", qdb} + args);
        QProcess p;
        p.start(cmd.first(), cmd.mid(1));
        p.waitForFinished(test::waitMs(120000));
        return std::make_tuple(p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()),
                               QString::fromUtf8(p.readAllStandardError()));
    };
    const auto [listCode, listOut, listErr] = gsrq({"runs", "list"});
    const auto [runCode, runOut, runErr] = gsrq({"compare", m_data, "--dim", "32", "--k", "8", "--iters", "2", "-q"});
    std::filesystem::permissions(db, std::filesystem::perms(0644));
    QVERIFY2(listCode == 0, qPrintable(listErr)); // browsing needs no write
    QVERIFY2(listOut.contains("compare"), qPrintable(listOut));
    QCOMPARE(runCode, 2); // the store the user named is unusable: bad input
    QVERIFY2(runErr.contains(qdb) && runErr.contains("--no-db"), qPrintable(runErr));
    QCOMPARE(fileHash(db), before); // untouched
}

void TestRunStore::lockedStoreRefusedAfterBusyTimeout()
{
    const auto db = test::pathIn(m_dir, "locked.db");
    const auto qdb = QString::fromStdString(db);
    RunStore store(db);
    RunInfo info;
    info.kind = "compare";
    const auto earlier = store.beginRun(info);
    store.finishRun(earlier, RunStatus::Done, "{}", "");
    // Another process's writer holds the lock for longer than gsrq waits (its busy timeout, 10 s).
    sql::Db holder(db, SQLITE_OPEN_READWRITE);
    holder.exec("BEGIN IMMEDIATE");
    QElapsedTimer t;
    t.start();
    QProcess p;
    p.start(QStringLiteral(GSRQ_CLI_PATH),
            {"--db", qdb, "compare", m_data, "--dim", "32", "--k", "8", "--iters", "2", "-q"});
    QVERIFY(p.waitForFinished(test::waitMs(120000)));
    const auto err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(err.contains(qdb) && err.contains("lock"), qPrintable(err));
    QVERIFY2(t.elapsed() >= 9000, "gsrq waits out the busy timeout before giving up"); // 10 s, less scheduling slack
    holder.exec("ROLLBACK");
    QVERIFY(store.integrityOk());
    QCOMPARE(store.listRuns().size(), size_t(1)); // nothing half-recorded, the earlier run kept
}

void TestRunStore::cliBrowsesTheStore()
{
    const QString db = QString::fromStdString(test::pathIn(m_dir, "cli.db"));
    auto gsrq = [&](QStringList args) {
        QProcess p;
        p.start(QStringLiteral(GSRQ_CLI_PATH), QStringList{"--db", db} + args);
        p.waitForFinished(test::waitMs(120000));
        return std::make_tuple(p.exitCode(), p.readAllStandardOutput(), p.readAllStandardError());
    };
    const QStringList compare{"compare", m_data, "--dim", "32", "--k", "16", "--iters", "5", "-q"};
    QCOMPARE(std::get<0>(gsrq(compare)), 0);
    QCOMPARE(std::get<0>(gsrq(compare + QStringList{"--seed", "7"})), 0);
    QCOMPARE(std::get<0>(gsrq(QStringList{"--no-db"} + compare)), 0); // records nothing

    auto [code, out, err] = gsrq({"runs", "list", "--json"});
    QCOMPARE(code, 0);
    const auto runs = QJsonDocument::fromJson(out).object()["runs"].toArray();
    QCOMPARE(runs.size(), 2);
    QCOMPARE(runs[0].toObject()["id"].toInt(), 2); // newest first
    QCOMPARE(runs[0].toObject()["settings"].toObject()["seed"].toInt(), 7);

    std::tie(code, out, err) = gsrq({"runs", "show", "1", "--json"});
    QCOMPARE(code, 0);
    const auto shown = QJsonDocument::fromJson(out).object();
    const auto iterations = shown["iterations"].toArray().size();
    QVERIFY(iterations >= 4); // 2 blocks × 2 methods, at least one pass each
    // nmse of each pass, from the clustering's own sums: positive, and at most 1 once centroids are
    // means or optimal gains of their members (Pythagoras); sampled rows at iteration 0 may exceed it.
    for (const auto& it : shown["iterations"].toArray()) {
        const double nmse = it.toObject()["nmse"].toDouble();
        QVERIFY(nmse > 0);
        if (it.toObject()["iteration"].toInt() > 0)
            QVERIFY(nmse <= 1.0 + 1e-9);
    }
    QVERIFY(shown["metrics"].toArray().size() > 10);

    const QString dir = m_dir.filePath("export1");
    QCOMPARE(std::get<0>(gsrq({"runs", "export", "1", "--csv", dir})), 0);
    QFile csv(dir + "/iterations.csv");
    QVERIFY(csv.open(QIODevice::ReadOnly));
    QCOMPARE(csv.readAll().count('\n'), iterations + 1); // a header, then one line per pass
    QVERIFY(QFile::exists(dir + "/settings.json") && QFile::exists(dir + "/metrics.csv"));

    std::tie(code, out, err) = gsrq({"runs", "compare", "1", "2"});
    QCOMPARE(code, 0);
    QVERIFY(out.contains("seed") && out.contains("final data gskm nmse"));
    QCOMPARE(std::get<0>(gsrq({"runs", "note", "1", "baseline"})), 0);
    std::tie(code, out, err) = gsrq({"runs", "show", "1"});
    QVERIFY(out.contains("baseline"));
    QCOMPARE(std::get<0>(gsrq({"runs", "delete", "2"})), 0);
    std::tie(code, out, err) = gsrq({"runs", "list", "--json"});
    QCOMPARE(QJsonDocument::fromJson(out).object()["runs"].toArray().size(), 1);
    std::tie(code, out, err) = gsrq({"runs", "show", "2"});
    QCOMPARE(code, 2);
    QVERIFY(err.contains("no run 2"));
}

// Each pass's share of codeword scores skipped by exact bounds reaches the store and `runs show`: none
// on the first pass (no bounds yet) or with --exact-bounds off, and some once the sample's values
// settle (measured: over half by the eighth pass).
void TestRunStore::skippedWorkRecordedPerPass()
{
    const QString db = QString::fromStdString(test::pathIn(m_dir, "skipped.db"));
    for (const QString bounds : {"on", "off"}) {
        QProcess p;
        p.start(QStringLiteral(GSRQ_CLI_PATH),
                {"--db", db, "compare", test::sourcePath("resources/samples/pydocs-hd128"), "--tensor",
                 "layers.2.value", "--dim", "128", "--k", "64", "--iters", "8", "--methods", "km", "--backend", "cpu",
                 "--exact-bounds", bounds, "-q"});
        QVERIFY(p.waitForFinished(test::waitMs(120000)) && p.exitCode() == 0);
    }
    for (const int run : {1, 2}) {
        QProcess p;
        p.start(QStringLiteral(GSRQ_CLI_PATH), {"--db", db, "runs", "show", QString::number(run), "--json"});
        QVERIFY(p.waitForFinished(test::waitMs(60000)) && p.exitCode() == 0);
        const auto passes = QJsonDocument::fromJson(p.readAllStandardOutput()).object()["iterations"].toArray();
        QVERIFY(passes.size() >= 4);
        double most = 0;
        for (const auto& it : passes) {
            const double skipped = it.toObject()["skipped"].toDouble(-1);
            QVERIFY(skipped >= 0 && skipped < 1);
            if (it.toObject()["iteration"].toInt() == 0)
                QCOMPARE(skipped, 0.0);
            most = std::max(most, skipped);
        }
        // The bounds use the vector kernels; a CPU without AVX2 scores every codeword (cpu_backend.cpp).
        if (run == 1 && nearest::bestNearest().width > 0)
            QVERIFY2(most > 0.25, qPrintable(QString("at most %1 skipped").arg(most)));
        else
            QCOMPARE(most, 0.0);
    }
}

// Ctrl-C stops the job at its next iteration; the run is closed as cancelled, nothing exported.
// SIGTERM does the same however often it comes (a scheduler may send it to the process and
// through its batch script at once).
void TestRunStore::ctrlCRecordsCancelled()
{
    QFETCH(int, sig);
    QFETCH(bool, repeat);
    const auto db = test::pathIn(m_dir, qPrintable(QString("cancel-%1.db").arg(QTest::currentDataTag())));
    const QString out = m_dir.filePath("never.safetensors");
    auto* p = startGsrq({"--db", QString::fromStdString(db), "train", m_data, "--dim", "8", "--stages", "64", "--k",
                         "64", "--iters", "100", "-q", "--attention-queries", "0", "--out", out},
                        this);
    QVERIFY(p->waitForStarted());
    std::int64_t rows = 0;
    for (int i = 0; i < 600 * test::kWaitScale && rows < 100; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        try {
            rows = std::filesystem::exists(db) ? count(db, "iterations", 1) : 0;
        } catch (const Error&) {
            rows = 0;
        }
    }
    QVERIFY(rows >= 100);
    // The signal, then (for a repeated one) the same every millisecond until the process ends: two
    // sent at once may merge into one delivery, but these land while it closes its run.
    ::kill(pid_t(p->processId()), sig);
    bool finished = false;
    for (int i = 0; repeat && i < 30000 && !(finished = p->waitForFinished(1)); ++i)
        ::kill(pid_t(p->processId()), sig);
    QVERIFY(finished || p->waitForFinished(test::waitMs(30000)));
    QCOMPARE(p->exitStatus(), QProcess::NormalExit);
    QCOMPARE(p->exitCode(), 130);
    QVERIFY(p->readAllStandardError().contains("cancelled"));
    RunStore store(db);
    QCOMPARE(store.requireRun(1).status, RunStatus::Cancelled);
    QVERIFY(!QFile::exists(out));
}

void TestRunStore::ctrlCRecordsCancelled_data()
{
    QTest::addColumn<int>("sig");
    QTest::addColumn<bool>("repeat");
    QTest::newRow("ctrl-c") << int(SIGINT) << false;
    QTest::newRow("term, repeated") << int(SIGTERM) << true;
}

namespace {

// A finished run with a row in every child table, and a second one still running.
std::int64_t recordFullRun(RunStore& store, const std::string& group)
{
    RunInfo info;
    info.kind = "train";
    info.settingsJson = R"({"k": 16})";
    info.group = group;
    const auto id = store.beginRun(info);
    store.addIterations(id, {IterationRow{"gskm", "layers.0.key", 0, 1, 0, 2.0, 0.5, 10, 0, 0.1, 0.9, 0.2, 0.8},
                             IterationRow{"gskm", "layers.0.key", 0, 1, 1, 1.5, 0.4, 3, 0, 0.1}});
    store.addMetrics(id, {MetricRow{"final", "gskm", "layers.0.key", -1, -1, "nmse", 0.25}});
    store.addSeries(id, {{"curve", 1, 2}, {"curve", 2, 3}});
    store.addArtifact(id, {"/tmp/cb.safetensors", "codebooks", "abc", 42});
    store.addNote(id, "first");
    store.finishRun(id, RunStatus::Done, R"({"ok": true})");
    RunInfo running;
    running.kind = "train";
    store.beginRun(running); // this process is alive: it stays `running`
    return id;
}

} // namespace

// Runs are copied whole, keyed by uid: importing twice, or the same run by two routes, adds it once;
// a run still running in the source is left out and named.
void TestRunStore::importCopiesEachRunOnce()
{
    const auto a = test::pathIn(m_dir, "import/a.db"), b = test::pathIn(m_dir, "import/b.db"),
               c = test::pathIn(m_dir, "import/c.db");
    std::int64_t srcId = 0;
    {
        RunStore src(a);
        srcId = recordFullRun(src, "plan-x");
    }
    const auto sourceBefore = fileHash(a);
    RunStore dst(b);
    {
        RunInfo own;
        own.kind = "compare";
        dst.finishRun(dst.beginRun(own), RunStatus::Done); // ids in the two stores collide
    }
    auto rep = dst.importRuns(a);
    QCOMPARE(rep.added, 1);
    QCOMPARE(rep.alreadyPresent, 0);
    QCOMPARE(rep.sourceSchema, kRunStoreSchemaVersion);
    QCOMPARE(rep.stillRunning.size(), size_t(1));
    QCOMPARE(fileHash(a), sourceBefore); // opened read-only, never altered

    const auto imported = dst.listRuns({"train", std::nullopt, "plan-x", 0});
    QCOMPARE(imported.size(), size_t(1));
    const auto& r = imported[0];
    RunStore srcAgain(a);
    const auto orig = srcAgain.requireRun(srcId);
    QCOMPARE(r.uid, orig.uid);
    QCOMPARE(r.uid.size(), size_t(32)); // 128 random bits in hex
    QCOMPARE(r.status, RunStatus::Done);
    QCOMPARE(r.startedAt, orig.startedAt);
    QCOMPARE(r.summaryJson, orig.summaryJson);
    QVERIFY2(r.origin.find("import/a.db") != std::string::npos, r.origin.c_str());
    const auto its = dst.iterations(r.id);
    QCOMPARE(its.size(), size_t(2));
    QCOMPARE(its[0].cosine, 0.9);
    QVERIFY(std::isnan(its[1].cosine)); // NULL stays NULL
    QCOMPARE(its[1].objective, 1.5);
    QCOMPARE(dst.metrics(r.id).size(), size_t(1));
    QCOMPARE(dst.series(r.id).size(), size_t(2));
    QCOMPARE(dst.artifacts(r.id).at(0).bytes, std::int64_t(42));
    QCOMPARE(dst.notes(r.id).at(0).text, std::string("first"));

    rep = dst.importRuns(a);
    QCOMPARE(rep.added, 0);
    QCOMPARE(rep.alreadyPresent, 1);
    QCOMPARE(dst.listRuns().size(), size_t(2));

    // a → b → c and a → c: the run arrives once, and keeps the store it first came from.
    RunStore third(c);
    QCOMPARE(third.importRuns(b).added, 2);
    QCOMPARE(third.importRuns(a).added, 0);
    QCOMPARE(third.listRuns({"train", std::nullopt, "", 0}).at(0).origin, r.origin);
    QVERIFY_THROWS_EXCEPTION(Error, dst.importRuns(b)); // itself
    QVERIFY(dst.integrityOk() && third.integrityOk());
}

void TestRunStore::importRefusesNewerOrForeignStores()
{
    const auto dstPath = test::pathIn(m_dir, "import/refuse.db");
    RunStore dst(dstPath);
    const auto expectRefused = [&](const std::string& src, const char* says) {
        const auto before = fileHash(src);
        try {
            dst.importRuns(src);
            QFAIL(qPrintable(QString("importing %1 must be refused").arg(QString::fromStdString(src))));
        } catch (const Error& e) {
            QCOMPARE(e.kind(), ErrorKind::InvalidInput);
            QVERIFY2(std::string(e.what()).find(says) != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find(src) != std::string::npos, e.what()); // names the file
        }
        QCOMPARE(fileHash(src), before);
        QCOMPARE(dst.listRuns().size(), size_t(0));
    };
    const auto future = test::pathIn(m_dir, "import/future.db");
    {
        sql::Db d(future, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        d.exec("CREATE TABLE runs (id INTEGER PRIMARY KEY, future TEXT); PRAGMA user_version=99");
    }
    expectRefused(future, "schema version 99 is newer");
    const auto other = test::pathIn(m_dir, "import/other.db");
    {
        sql::Db d(other, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        d.exec("CREATE TABLE photos (id INTEGER PRIMARY KEY)");
    }
    expectRefused(other, "not a gsrq run store");
    const auto text = test::pathIn(m_dir, "import/notes.txt");
    std::ofstream(text) << "not a database at all, but long enough to fill SQLite's 100-byte header......"
                           "..........................................................................\n";
    expectRefused(text, "notes.txt");
    try {
        dst.importRuns(test::pathIn(m_dir, "import/missing.db"));
        QFAIL("a missing store must be refused");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("no such run store") != std::string::npos, e.what());
    }
}

// A store of schema version 3 imported as it is gets the same uids it gets when it is later
// migrated in place, so importing it again after the upgrade adds nothing.
void TestRunStore::importOfOlderStoreMatchesItsMigration()
{
    const auto a = test::pathIn(m_dir, "import/v3.db"), b = test::pathIn(m_dir, "import/v3-into.db");
    {
        RunStore src(a);
        RunInfo info;
        info.kind = "compare";
        for (int i = 0; i < 3; ++i)
            src.finishRun(src.beginRun(info), RunStatus::Done);
    }
    {
        sql::Db d(a, SQLITE_OPEN_READWRITE);
        d.exec("ALTER TABLE iterations DROP COLUMN skipped; "
               "DROP INDEX runs_uid; DROP INDEX runs_group; ALTER TABLE runs DROP COLUMN uid; "
               "ALTER TABLE runs DROP COLUMN run_group; ALTER TABLE runs DROP COLUMN origin; DROP TABLE samples; "
               "PRAGMA user_version=3");
    }
    RunStore dst(b);
    const auto rep = dst.importRuns(a);
    QCOMPARE(rep.sourceSchema, 3);
    QCOMPARE(rep.added, 3);
    RunStore migrated(a); // now version 4, uids derived by the migration
    QCOMPARE(migrated.schemaVersion(), kRunStoreSchemaVersion);
    QCOMPARE(dst.importRuns(a).added, 0);
    QCOMPARE(dst.listRuns().size(), size_t(3));
    QCOMPARE(migrated.listRuns().at(0).uid, dst.listRuns().at(0).uid);
}

// Samples (gsrq tasks): kept in order, refused twice under one key, kept when the run is resumed,
// cascaded on delete and carried by an import.
void TestRunStore::samplesResumeAndImport()
{
    const auto path = test::pathIn(m_dir, "samples.db");
    std::int64_t id = 0;
    {
        RunStore store(path);
        RunInfo info;
        info.kind = "tasks";
        id = store.beginRun(info);
        store.addSample(id, {"prompt/passkey/1024/0/0", std::nan(""), R"({"prompt_ids":[1,2]})"});
        store.addSample(id, {"answer/passkey/1024/0/0/fp16", 1.0, R"({"answer":"12345"})"});
        const auto twice = test::invalidInputMessage([&] {
            store.addSample(id, {"answer/passkey/1024/0/0/fp16", 0.0, "{}"});
        });
        QVERIFY2(twice.find("already") != std::string::npos, twice.c_str());
        // A running run cannot be resumed; a cancelled one can, keeping its samples.
        QVERIFY(test::invalidInputMessage([&] { store.resumeRun(id); }).find("still running") != std::string::npos);
        store.finishRun(id, RunStatus::Cancelled, "{}", "stopped on request");
        store.resumeRun(id);
        const auto r = store.requireRun(id);
        QCOMPARE(r.status, RunStatus::Running);
        QVERIFY(r.finishedAt.empty());
        QVERIFY(r.error.empty());
        store.addSample(id, {"answer/passkey/1024/0/0/kivi-1", 0.0, R"({"answer":"1"})"});
        store.finishRun(id, RunStatus::Done);
        const auto rows = store.samples(id);
        QCOMPARE(rows.size(), std::size_t(3));
        QCOMPARE(rows[0].key, std::string("prompt/passkey/1024/0/0"));
        QVERIFY(std::isnan(rows[0].score));
        QCOMPARE(rows[1].score, 1.0);
        QCOMPARE(rows[2].json, std::string(R"({"answer":"1"})"));
        QVERIFY(test::invalidInputMessage([&] { store.resumeRun(id + 100); }).find("no run") != std::string::npos);
    }
    const auto other = test::pathIn(m_dir, "samples-import.db");
    RunStore into(other);
    const auto rep = into.importRuns(path);
    QCOMPARE(rep.added, 1);
    const auto runs = into.listRuns();
    QCOMPARE(into.samples(runs.front().id).size(), std::size_t(3));
    into.deleteRun(runs.front().id);
    sql::Db d(other, SQLITE_OPEN_READONLY);
    sql::Stmt left(d, "SELECT COUNT(*) FROM samples");
    left.step();
    QCOMPARE(left.int64(0), std::int64_t(0));
}

// The Runs page's Result column and `gsrq runs list` read runHeadline: every kind of run says what it
// found, from the summary its job records.
void TestRunStore::everyKindHasAHeadline()
{
    QCOMPARE(runHeadline(R"({"tensors":60,"gskm_lower_nmse":41})"), std::string("GSKM lower nmse on 41 of 60 tensors"));
    QCOMPARE(runHeadline(R"({"backend":"cpu","device":"x","threads":2,"isa":"avx2","all_verified":true})"),
             std::string("cpu avx2, 2 threads; every path verified"));
    QCOMPARE(runHeadline(R"({"backend":"cuda","device":"NVIDIA H200","all_verified":false})"),
             std::string("cuda on NVIDIA H200; NOT every path verified"));
    QCOMPARE(
        runHeadline(
            R"({"prefill_tokens":512,"context_note":"","weights":"Q4_K blocks","isa":"avx2","threads":2,"points":6})"),
        std::string("6 points after a 512-token prefill, weights Q4_K blocks, 2 threads"));
    QCOMPARE(
        runHeadline(
            R"({"answers":4,"new_answers":4,"cells":[{"task":"passkey","context":512,"method":"fp16","accuracy":1.0},{"task":"passkey","context":512,"method":"kivi-1","accuracy":0.0}]})"),
        std::string("4 answers; fp16 1.00, kivi-1 0.00"));
    QCOMPARE(runHeadline(R"({"fp32_perplexity":12.5,"perplexity":13.25})"),
             std::string("perplexity 13.25 (FP32 12.5)"));
}

QTEST_GUILESS_MAIN(TestRunStore)
#include "tst_run_store.moc"
