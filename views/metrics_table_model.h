#pragma once
// A read-only table of named rows × named numeric columns (methods × metrics, tensors × metrics).

#include <QAbstractTableModel>
#include <QStringList>

#include <vector>

namespace gsrq::views {

// A metric as the tables show it: four significant digits (0.0005073, not 0.000507339); whole
// numbers (iterations, bytes) without decimals; values just under 1 (cosine, shrinkage) with three
// digits of their distance from 1 (0.9999230); "—" for NaN or infinity.
QString formatMetric(double v);

class MetricsTableModel : public QAbstractTableModel {
    Q_OBJECT

public:
    using QAbstractTableModel::QAbstractTableModel;

    void setTable(QStringList rows, QStringList columns, std::vector<std::vector<double>> values);
    double value(int row, int column) const { return m_values.at(std::size_t(row)).at(std::size_t(column)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QStringList m_rows, m_columns;
    std::vector<std::vector<double>> m_values;
};

} // namespace gsrq::views
