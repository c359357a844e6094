#include "core/store/sqlite_db.h"

#include "core/base/error.h"

namespace gsrq::sql {

Db::Db(const std::string& path, int flags) : m_path(path)
{
    const int rc = sqlite3_open_v2(path.c_str(), &m_db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        const std::string msg = m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
        sqlite3_close(m_db);
        m_db = nullptr;
        throwInvalid("run store ", path, ": cannot open: ", msg,
                     " (is the directory writable? --db picks another file, --no-db records nothing)");
    }
    sqlite3_extended_result_codes(m_db, 1);
}

Db::~Db()
{
    sqlite3_close_v2(m_db);
}

void Db::fail(int rc, std::string_view what) const
{
    const int primary = rc & 0xff;
    std::string msg = cat("run store ", m_path, ": ", what, ": ", sqlite3_errmsg(m_db));
    if (primary == SQLITE_READONLY)
        msg += " (the file or its directory may not be written; --db picks another store, --no-db records nothing)";
    else if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
        msg += " (another process held the store's lock past the busy timeout; try again when it is done, or "
               "--db picks another store)";
    // A file that is not a database (or a damaged one), one we may not write, or one another process
    // keeps locked is a problem of the store the user named (exit code 2); the rest is a failure at
    // run time (a full disk, an I/O error).
    if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT || primary == SQLITE_CANTOPEN ||
        primary == SQLITE_READONLY || primary == SQLITE_PERM || primary == SQLITE_AUTH || primary == SQLITE_BUSY ||
        primary == SQLITE_LOCKED)
        throw Error(ErrorKind::InvalidInput, msg);
    throw Error(ErrorKind::Runtime, msg);
}

void Db::exec(const std::string& sqlText)
{
    char* err = nullptr;
    const int rc = sqlite3_exec(m_db, sqlText.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        sqlite3_free(err);
        fail(rc, sqlText.substr(0, 60));
    }
}

Stmt::Stmt(Db& db, const std::string& sqlText) : m_db(db)
{
    const int rc = sqlite3_prepare_v2(db.handle(), sqlText.c_str(), int(sqlText.size()), &m_stmt, nullptr);
    if (rc != SQLITE_OK)
        db.fail(rc, cat("prepare '", sqlText.substr(0, 60), "'"));
}

Stmt::~Stmt()
{
    sqlite3_finalize(m_stmt);
}

Stmt& Stmt::bind(int i, std::int64_t v)
{
    sqlite3_bind_int64(m_stmt, i, v);
    return *this;
}

Stmt& Stmt::bind(int i, double v)
{
    sqlite3_bind_double(m_stmt, i, v);
    return *this;
}

Stmt& Stmt::bind(int i, const std::string& v)
{
    sqlite3_bind_text(m_stmt, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
}

Stmt& Stmt::bindNull(int i)
{
    sqlite3_bind_null(m_stmt, i);
    return *this;
}

bool Stmt::step()
{
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW)
        return true;
    if (rc == SQLITE_DONE)
        return false;
    sqlite3_reset(m_stmt);
    m_db.fail(rc, cat("'", std::string(sqlite3_sql(m_stmt)).substr(0, 60), "'"));
}

void Stmt::run()
{
    while (step()) {
    }
    reset();
}

void Stmt::reset()
{
    sqlite3_reset(m_stmt);
    sqlite3_clear_bindings(m_stmt);
}

std::string Stmt::text(int col) const
{
    const auto* p = sqlite3_column_text(m_stmt, col);
    return p ? std::string(reinterpret_cast<const char*>(p), std::size_t(sqlite3_column_bytes(m_stmt, col)))
             : std::string();
}

Transaction::Transaction(Db& db) : m_db(db)
{
    m_db.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction()
{
    if (!m_done)
        sqlite3_exec(m_db.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit()
{
    m_db.exec("COMMIT");
    m_done = true;
}

} // namespace gsrq::sql
