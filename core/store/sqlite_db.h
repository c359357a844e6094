#pragma once
// A small RAII layer over SQLite's C API: a connection, prepared statements with bound values,
// and transactions. Every failure throws gsrq::Error with SQLite's message and the database path.
// Thread-safety: one Db per thread (SQLite's own rule for a connection we share nowhere).

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gsrq::sql {

class Db {
public:
    // flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE or SQLITE_OPEN_READONLY.
    Db(const std::string& path, int flags);
    ~Db();
    Db(const Db&) = delete;
    Db& operator=(const Db&) = delete;

    void exec(const std::string& sqlText); // statements without results
    sqlite3* handle() const { return m_db; }
    const std::string& path() const { return m_path; }
    std::int64_t lastInsertId() const { return sqlite3_last_insert_rowid(m_db); }
    [[noreturn]] void fail(int rc, std::string_view what) const;

private:
    sqlite3* m_db = nullptr;
    std::string m_path;
};

class Stmt {
public:
    Stmt(Db& db, const std::string& sqlText);
    ~Stmt();
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    // Bind by 1-based position. std::nullopt and empty optionals bind NULL.
    Stmt& bind(int i, std::int64_t v);
    Stmt& bind(int i, int v) { return bind(i, std::int64_t(v)); }
    Stmt& bind(int i, double v);
    Stmt& bind(int i, const std::string& v);
    Stmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
    Stmt& bindNull(int i);
    template <class T> Stmt& bind(int i, const std::optional<T>& v) { return v ? bind(i, *v) : bindNull(i); }

    bool step(); // true while a row is available
    void run();  // step to completion, then reset for reuse
    void reset();

    std::int64_t int64(int col) const { return sqlite3_column_int64(m_stmt, col); }
    double real(int col) const { return sqlite3_column_double(m_stmt, col); }
    std::string text(int col) const;
    bool isNull(int col) const { return sqlite3_column_type(m_stmt, col) == SQLITE_NULL; }
    sqlite3_stmt* raw() const { return m_stmt; }

private:
    Db& m_db;
    sqlite3_stmt* m_stmt = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back if destroyed uncommitted (an exception in between).
class Transaction {
public:
    explicit Transaction(Db& db);
    ~Transaction();
    void commit();

private:
    Db& m_db;
    bool m_done = false;
};

} // namespace gsrq::sql
