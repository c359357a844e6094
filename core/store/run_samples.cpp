// The run store's samples and resumed runs (run_store.h).
#include "core/base/error.h"
#include "core/base/process.h"
#include "core/store/run_store.h"

#include <sqlite3.h>
#include <unistd.h>

namespace gsrq {

void RunStore::resumeRun(std::int64_t run)
{
    sql::Transaction tx(m_db);
    const auto r = requireRun(run);
    if (r.status == RunStatus::Running)
        throwInvalid("run ", run, " is still running (process ", r.pid, " on ", r.host,
                     "); it can be resumed once it ends");
    sql::Stmt s(m_db, "UPDATE runs SET status='running', finished_at=NULL, error='', host=?, pid=?, pid_start=? "
                      "WHERE id=?");
    const std::int64_t pid = ::getpid();
    s.bind(1, hostName()).bind(2, pid).bind(3, processStartTicks(pid)).bind(4, run).run();
    tx.commit();
}

void RunStore::addSample(std::int64_t run, const SampleRow& sample)
{
    sql::Transaction tx(m_db);
    {
        sql::Stmt q(m_db, "SELECT 1 FROM samples WHERE run_id=? AND key=?");
        q.bind(1, run).bind(2, sample.key);
        if (q.step())
            throwInvalid("run ", run, " has sample '", sample.key, "' already");
    }
    sql::Stmt s(m_db, "INSERT INTO samples (run_id, key, score, json, created_at) VALUES (?,?,?,?,?)");
    s.bind(1, run).bind(2, sample.key).bind(3, std::isnan(sample.score) ? std::optional<double>() : sample.score);
    s.bind(4, sample.json).bind(5, isoNowUtc()).run();
    tx.commit();
}

std::vector<SampleRow> RunStore::samples(std::int64_t run)
{
    sql::Stmt s(m_db, "SELECT key, score, json FROM samples WHERE run_id=? ORDER BY rowid");
    s.bind(1, run);
    std::vector<SampleRow> out;
    while (s.step())
        out.push_back({s.text(0), s.isNull(1) ? std::nan("") : s.real(1), s.text(2)});
    return out;
}

} // namespace gsrq
