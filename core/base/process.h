#pragma once
// This process and its host: the clock as the run store writes it, host and process identity (so a
// store can tell a run whose process died from one still running), random ids, and the running
// executable, the memory and caches it has. Thread-safety: every function may be called from any thread.

#include <cstddef>
#include <cstdint>
#include <string>

namespace gsrq {

// Now, UTC, to the millisecond: "2026-11-25T10:45:26.123Z".
std::string isoNowUtc();
std::string hostName();
// Whether the process `pid` on this host, started at `startTicks` (0: unknown), still runs.
bool processAlive(std::int64_t pid, std::int64_t startTicks);
// Field 22 of /proc/PID/stat (clock ticks since boot), or 0 when it cannot be read.
std::int64_t processStartTicks(std::int64_t pid);

// `chars` lowercase hex digits from the system's random device (run uids: 32; plan ids: 6).
std::string randomHex(int chars);

// The absolute path of the running executable (/proc/self/exe), or `fallback` when unreadable.
std::string selfExe(const std::string& fallback);

// Memory the system could give a process now (MemAvailable), in bytes (0 when it cannot tell).
double availableMemoryBytes();
// The largest data cache a core sees (the last level), in bytes; 8 MiB when the system does not say.
std::size_t lastLevelCacheBytes();

} // namespace gsrq
