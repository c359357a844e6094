// The Latency page's tables from the run store: the speed-quality frontier and speed against quality.
#include "latency_page.h"
#include "latency_page_parts.h"

#include "core/base/error.h"
#include "core/decode/cpu_bench.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/decode_bench.h"
#include "core/decode/generate.h"
#include "core/jobs/decode_frontier.h"
#include "core/jobs/run_records.h"
#include "core/lm/sequences.h"
#include "gpu/decode/decode.h"
#include "views/chart_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace gsrq::studio {

using namespace latency;

void LatencyPage::fillFrontier()
{
    m_frontier->clear();
    try {
        RunStore store(m_ctx.storePath().toStdString());
        const QPoint at = m_frontierAt->currentData().toPoint();
        const DecodeFrontier f = decodeFrontier(store, at.x(), at.y());
        // A series per path and D (its points the bit rates, by time), named by where its times come from.
        std::map<QString, QList<QPointF>> series;
        double maxError = 0;
        for (const auto& p : f.points) {
            // "lookup, D=128 (measured)", or "(model of the NVIDIA H200)": models of two GPUs stay apart.
            const QString name = tr("%1, D=%2 (%3)")
                                     .arg(QString::fromStdString(p.path))
                                     .arg(p.dim)
                                     .arg(p.measured ? tr("measured") : QString::fromStdString(p.device));
            series[name] << QPointF(p.seconds * 1e6, p.error);
            maxError = std::max(maxError, p.error);
        }
        for (auto& [name, pts] : series) {
            std::sort(pts.begin(), pts.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
            m_frontier->setSeries(name, pts);
        }
        if (f.fp16Seconds > 0 && !series.empty()) {
            const QString name = tr("fp16, exact cache (%1)").arg(QString::fromStdString(f.fp16Device));
            m_frontier->setSeries(name, {QPointF(f.fp16Seconds * 1e6, 0), QPointF(f.fp16Seconds * 1e6, maxError)});
            m_frontier->setReference(name);
        }
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
    m_frontier->flush();
}

void LatencyPage::fillSpeedQuality()
{
    m_table->clear();
    m_table->setRowCount(0);
    try {
        RunStore store(m_ctx.storePath().toStdString());
        // Attention-output error per (D, R, K, keys after RoPE): the latest train run of that shape with
        // attention fidelity. The lookup path reads keys stored after RoPE, the paper path before.
        const AttentionErrors quality = latestAttentionErrors(store);
        struct Row {
            std::int64_t run;
            QString backend, bpa, quality, path;
            std::map<std::int64_t, QString> cells;
        };
        std::vector<Row> rows;
        std::set<std::int64_t> contexts;
        for (const auto& run : store.listRuns({"bench-decode", RunStatus::Done, "", 5}))
            try {
                const auto set = nlohmann::json::parse(run.settingsJson, nullptr, false);
                if (!set.is_object() || !set.contains("dim") || !set.contains("stages") || !set.contains("k"))
                    continue;
                // Codebooks the decode paths refuse (strided channel groups) time nothing here.
                if (set.value("strided_groups", false))
                    continue;
                const int D = set["dim"].get<int>(), R = set["stages"].get<int>(), K = set["k"].get<int>();
                const auto qualityOf = [&](const std::string& path) {
                    if (path == "fp16")
                        return tr("— (FP16 cache)");
                    const bool post = path == "lookup";
                    if (auto it = quality.find({D, R, K, post}); it != quality.end())
                        return tr("%1 (train run %2)").arg(it->second.first, 0, 'f', 4).arg(it->second.second);
                    return tr("no train run with D=%1 R=%2 K=%3, keys %4 RoPE")
                        .arg(D)
                        .arg(R)
                        .arg(K)
                        .arg(post ? tr("after") : tr("before"));
                };
                // Batch 1: per path, per context, the latency and the speed-up over the same run's FP16.
                std::map<std::string, std::map<std::int64_t, std::pair<double, double>>> byPath;
                for (const auto& m : store.metrics(run.id)) {
                    const auto at = m.tensor.find(" ctx=");
                    if (m.scope != "decode" || m.tensor.rfind("b=1 ", 0) != 0 || at == std::string::npos)
                        continue;
                    const std::int64_t ctx = std::stoll(m.tensor.substr(at + 5));
                    if (m.name == "seconds")
                        byPath[m.method][ctx].first = m.value;
                    else if (m.name == "speedup_vs_fp16")
                        byPath[m.method][ctx].second = m.value;
                }
                for (const auto& [path, points] : byPath) {
                    Row r{run.id,
                          QString::fromStdString(run.backend),
                          QString("%1 (D=%2 R=%3 K=%4)").arg(set.value("bpa", 0.0), 0, 'g', 3).arg(D).arg(R).arg(K),
                          qualityOf(path),
                          QString::fromStdString(path),
                          {}};
                    for (const auto& [ctx, v] : points) {
                        if (v.first <= 0)
                            continue;
                        contexts.insert(ctx);
                        QString cell = v.first >= 1e-3 ? QString("%1 ms").arg(v.first * 1e3, 0, 'f', 2)
                                                       : QString("%1 µs").arg(v.first * 1e6, 0, 'f', 1);
                        if (path != "fp16" && v.second > 0)
                            cell += QString(" (%1×)").arg(v.second, 0, 'f', 2);
                        r.cells[ctx] = cell;
                    }
                    rows.push_back(r);
                }
            } catch (const std::exception&) {
                continue;
            }
        QStringList headers{tr("run"), tr("backend"), tr("bits per activation"), tr("attention error"), tr("path")};
        for (std::int64_t c : contexts)
            headers << tr("ctx %1 (batch 1)").arg(c);
        m_table->setColumnCount(int(headers.size()));
        m_table->setHorizontalHeaderLabels(headers);
        m_table->setRowCount(int(rows.size()));
        for (int i = 0; i < int(rows.size()); ++i) {
            const auto& r = rows[std::size_t(i)];
            const QStringList fixed{QString::number(r.run), r.backend, r.bpa, r.quality, r.path};
            for (int c = 0; c < int(fixed.size()); ++c)
                m_table->setItem(i, c, new QTableWidgetItem(fixed[c]));
            int c = int(fixed.size());
            for (std::int64_t ctx : contexts) {
                auto it = r.cells.find(ctx);
                m_table->setItem(i, c++, new QTableWidgetItem(it == r.cells.end() ? QString("–") : it->second));
            }
        }
        m_table->resizeColumnsToContents();
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
    }
}

} // namespace gsrq::studio
