#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal and the job has run
// for more than a second, redrawn at most ten times a second.

#include <chrono>
#include <string>

namespace gsrq::cli {

class ProgressBar {
public:
    explicit ProgressBar(bool enabled);
    ~ProgressBar();
    void update(double fraction, const std::string& what);
    void finish();

private:
    bool m_enabled;
    bool m_drawn = false;
    std::chrono::steady_clock::time_point m_start, m_last;
};

} // namespace gsrq::cli
