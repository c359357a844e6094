#pragma once
// The one error type of the engine. Library code never exits or aborts: it throws gsrq::Error,
// and the front ends (CLI, GUI) turn it into a message. The kind decides the CLI's exit code:
// InvalidInput (bad file, tensor or flag) -> 2, Runtime (failure while running) -> 1.

#include <sstream>
#include <stdexcept>
#include <string>

namespace gsrq {

enum class ErrorKind { InvalidInput, Runtime };

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}
    ErrorKind kind() const noexcept { return m_kind; }

private:
    ErrorKind m_kind;
};

// Concatenates anything streamable: cat("tensor '", name, "' has ", n, " rows").
template <class... Args> std::string cat(const Args&... args)
{
    std::ostringstream s;
    (s << ... << args);
    return s.str();
}

template <class... Args> [[noreturn]] void throwInvalid(const Args&... args)
{
    throw Error(ErrorKind::InvalidInput, cat(args...));
}

template <class... Args> [[noreturn]] void throwRuntime(const Args&... args)
{
    throw Error(ErrorKind::Runtime, cat(args...));
}

} // namespace gsrq
