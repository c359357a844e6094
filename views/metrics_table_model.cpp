#include "metrics_table_model.h"

#include <cmath>

namespace gsrq::views {

void MetricsTableModel::setTable(QStringList rows, QStringList columns, std::vector<std::vector<double>> values)
{
    beginResetModel();
    m_rows = std::move(rows);
    m_columns = std::move(columns);
    m_values = std::move(values);
    endResetModel();
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
