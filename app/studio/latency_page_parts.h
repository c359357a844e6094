#pragma once
// Internal to the Latency page's files (latency_page.cpp, latency_runs.cpp, latency_results.cpp): a
// point's line in the log, the lists its fields take, the sweep's defaults per backend.

#include "core/base/error.h"
#include "core/decode/decode_bench.h"

#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace gsrq::studio::latency {

inline QString pointLine(const DecodeBenchPoint& p)
{
    const QString head = QString("ctx %1  batch %2  %3").arg(p.context).arg(p.batch).arg(decodePathName(p.path));
    if (!p.skipped.empty())
        return head + "  skipped: " + QString::fromStdString(p.skipped);
    QString s = head + QString("  %1 µs  %2 GB/s  %3")
                           .arg(p.seconds * 1e6, 0, 'f', 2)
                           .arg(p.bytesPerSecond / 1e9, 0, 'f', 0)
                           .arg(p.verified ? QString("err %1").arg(p.relError, 0, 'e', 1) : QString("unverified"));
    if (p.path != DecodePath::Fp16 && p.speedupVsFp16 > 0)
        s += QString("  %1× vs fp16").arg(p.speedupVsFp16, 0, 'f', 2);
    if (p.roofline.seconds > 0)
        s += QString("  %1% of its roofline (%2-bound)")
                 .arg(100 * p.rooflineFraction, 0, 'f', 0)
                 .arg(QString::fromStdString(p.roofline.bound));
    if (p.readRowsSeconds > 0)
        s += QString("  %1% of a plain read of its rows").arg(100 * p.readRowsSeconds / p.seconds, 0, 'f', 0);
    if (p.eigenFp32Seconds > 0)
        s += QString("  (Eigen FP32 %1 µs)").arg(p.eigenFp32Seconds * 1e6, 0, 'f', 0);
    return s;
}

inline std::vector<std::int64_t> parseList(const QString& text, const QString& what)
{
    std::vector<std::int64_t> out;
    for (const auto& part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const qlonglong v = part.trimmed().toLongLong(&ok);
        if (!ok || v < 1)
            throwInvalid(what.toStdString(), ": '", part.trimmed().toStdString(), "' is not a positive whole number");
        out.push_back(v);
    }
    if (out.empty())
        throwInvalid(what.toStdString(), ": give at least one value");
    return out;
}

// The sweep's defaults per backend: a CPU step at 128K tokens already takes tens of milliseconds.
inline constexpr const char* kCpuContexts = "4096,32768,131072";
inline constexpr const char* kCpuBatches = "1";
inline constexpr const char* kGpuContexts = "1024,8192,32768,65536,131072";
inline constexpr const char* kGpuBatches = "1,8,16,32";

} // namespace gsrq::studio::latency
