#include "progress_bar.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>

namespace gsrq::cli {

ProgressBar::ProgressBar(bool enabled)
    : m_enabled(enabled && ::isatty(STDERR_FILENO)), m_start(std::chrono::steady_clock::now()), m_last(m_start)
{
}

ProgressBar::~ProgressBar()
{
    finish();
}

void ProgressBar::update(double fraction, const std::string& what)
{
    if (!m_enabled)
        return;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - m_start).count();
    if (elapsed < 1.0 || now - m_last < std::chrono::milliseconds(100))
        return;
    m_last = now;
    fraction = std::clamp(fraction, 0.0, 1.0);
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.append(static_cast<std::size_t>(kWidth - filled), '.');
    const double eta = fraction > 0.01 ? elapsed * (1 - fraction) / fraction : 0;
    std::fprintf(stderr, "\r[%s] %3.0f%%  %5.1fs  eta %5.1fs  %-36.36s", bar.c_str(), fraction * 100, elapsed, eta,
                 what.c_str());
    std::fflush(stderr);
    m_drawn = true;
}

void ProgressBar::finish()
{
    if (m_drawn) {
        std::fprintf(stderr, "\r%*s\r", 100, "");
        std::fflush(stderr);
        m_drawn = false;
    }
}

} // namespace gsrq::cli
