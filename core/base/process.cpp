#include "core/base/process.h"

#include "core/base/error.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <signal.h>
#include <sstream>
#include <unistd.h>

namespace gsrq {

std::string isoNowUtc()
{
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return cat(buf, ".", ms < 100 ? (ms < 10 ? "00" : "0") : "", ms, "Z");
}

std::string hostName()
{
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0)
        return "unknown";
    return buf;
}

std::int64_t processStartTicks(std::int64_t pid)
{
    // Field 22 of /proc/PID/stat: the start time in clock ticks since boot; with the pid it names
    // a process uniquely, so a reused pid does not pass for the one that died.
    std::ifstream in(cat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close == std::string::npos)
        return 0;
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; ++i)
        if (i == 22)
            return std::atoll(field.c_str());
    return 0;
}

bool processAlive(std::int64_t pid, std::int64_t startTicks)
{
    if (pid <= 0)
        return false;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
        return false;
    return startTicks == 0 || processStartTicks(pid) == startTicks;
}

std::string randomHex(int chars)
{
    std::random_device rd;
    std::string out;
    while (int(out.size()) < chars) {
        char buf[9];
        std::snprintf(buf, sizeof buf, "%08x", unsigned(rd()));
        out += buf;
    }
    return out.substr(0, std::size_t(chars));
}

std::string selfExe(const std::string& fallback)
{
    std::error_code ec;
    const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? fallback : p.string();
}

double availableMemoryBytes()
{
    // MemAvailable counts the page cache the kernel would give back; free pages alone would not.
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("MemAvailable:", 0) == 0) {
            const double kib = std::strtod(line.c_str() + 13, nullptr);
            if (kib > 0)
                return kib * 1024.0;
        }
    const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? double(pages) * double(size) : 0.0;
}

std::size_t lastLevelCacheBytes()
{
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::size_t(std::max({l3, l2, 8L << 20}));
}

} // namespace gsrq
