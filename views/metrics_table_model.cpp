#include "views/metrics_table_model.h"

#include "core/cluster/metrics.h"

#include <cmath>

namespace gsrq::views {

void MetricsTableModel::setTable(QStringList rows, QStringList columns, std::vector<std::vector<double>> values)
{
    beginResetModel();
    m_rows = std::move(rows);
    m_columns = std::move(columns);
    m_values = std::move(values);
    m_deltaFrom = m_a = m_b = -1;
    m_better.clear();
    endResetModel();
}

void MetricsTableModel::setTableWithDeltas(QStringList rows, QStringList columns,
                                           std::vector<std::vector<double>> values, int a, int b)
{
    const int n = int(rows.size());
    if (a < 0 || b < 0 || a >= n || b >= n || a == b || int(values.size()) != n) {
        setTable(std::move(rows), std::move(columns), std::move(values));
        return;
    }
    std::vector<double> delta, percent;
    std::vector<int> better;
    for (int c = 0; c < int(columns.size()); ++c) {
        const double va = values[std::size_t(a)].at(std::size_t(c)), vb = values[std::size_t(b)].at(std::size_t(c));
        delta.push_back(vb - va);
        percent.push_back(va != 0 ? 100.0 * (vb - va) / std::abs(va) : std::nan(""));
        better.push_back(betterOf(columns[c].toStdString(), va, vb));
    }
    const QString first = rows[a], second = rows[b];
    rows << tr("Δ %1 − %2").arg(second, first) << tr("Δ%");
    values.push_back(std::move(delta));
    values.push_back(std::move(percent));
    setTable(std::move(rows), std::move(columns), std::move(values));
    m_deltaFrom = n;
    m_a = a;
    m_b = b;
    m_better = std::move(better);
}

std::optional<int> MetricsTableModel::betterAt(int row, int column) const
{
    if (m_deltaFrom < 0 || row < m_deltaFrom || row >= int(m_rows.size()) || column < 0 ||
        column >= int(m_better.size()))
        return std::nullopt;
    return m_better[std::size_t(column)];
}

QColor MetricsTableModel::methodColor(int better)
{
    // The charts' colours of the two methods: the first (KM) blue, the second (GSKM) orange.
    return better > 0 ? QColor(0xd9, 0x5f, 0x02) : better < 0 ? QColor(0x1f, 0x77, 0xb4) : QColor();
}

int MetricsTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_rows.size());
}

int MetricsTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_columns.size());
}

QString formatMetric(double v)
{
    if (!std::isfinite(v))
        return QStringLiteral("—");
    if (v == std::round(v) && std::abs(v) < 1e15)
        return QString::number(v, 'f', 0); // counts and bytes
    if (v > 0.9 && v < 1) {
        // Cosines and shrinkage near 1 differ in their distance from 1: give it three digits.
        const int decimals = std::min(12, int(std::ceil(-std::log10(1 - v))) + 2);
        return QString::number(v, 'f', decimals);
    }
    return QString::number(v, 'g', 4);
}

QVariant MetricsTableModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= m_rows.size() || index.column() >= m_columns.size())
        return {};
    const double v = m_values[std::size_t(index.row())][std::size_t(index.column())];
    const bool deltaRow = m_deltaFrom >= 0 && index.row() >= m_deltaFrom;
    if (deltaRow) {
        const int better = m_better[std::size_t(index.column())];
        if (role == Qt::DisplayRole) {
            if (!std::isfinite(v))
                return QStringLiteral("—");
            if (index.row() == m_deltaFrom + 1)
                return QString::asprintf("%+.2f%%", v);
            const QString s = formatMetric(v);
            return v > 0 ? "+" + s : s;
        }
        if (role == Qt::ForegroundRole && better != 0)
            return methodColor(better);
        if (role == Qt::ToolTipRole) {
            const QString metric = m_columns[index.column()];
            if (better == 0)
                return tr("%1: no better method").arg(metric);
            const QString why = metric == "cosine"      ? tr("higher cosine")
                                : metric == "shrinkage" ? tr("shrinkage nearer 1")
                                                        : tr("lower %1").arg(metric);
            return tr("%1 is better: %2").arg(better > 0 ? m_rows[m_b] : m_rows[m_a], why);
        }
    }
    if (role == Qt::DisplayRole)
        return formatMetric(v);
    if (role == Qt::UserRole)
        return v;
    if (role == Qt::TextAlignmentRole)
        return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant MetricsTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole)
        return {};
    if (orientation == Qt::Horizontal)
        return section < m_columns.size() ? m_columns[section] : QVariant();
    return section < m_rows.size() ? m_rows[section] : QVariant();
}

} // namespace gsrq::views
