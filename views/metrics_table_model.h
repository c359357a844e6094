#pragma once
// A read-only table of named rows × named numeric columns (methods × metrics, tensors × metrics).

#include <QAbstractTableModel>
#include <QColor>
#include <QStringList>

#include <optional>
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
    // Two more rows below the table: row b − row a ("Δ b − a") and its percentage of |a| ("Δ%"),
    // each cell coloured by the method that is better for its column's metric (core's betterOf):
    // b's colour where b is better, a's where a is, none for a tie or a column with no better
    // direction. The tooltip says which and why. A table without rows a and b gets no deltas.
    void setTableWithDeltas(QStringList rows, QStringList columns, std::vector<std::vector<double>> values, int a,
                            int b);
    // For a delta cell, which row is better (as betterOf: +1 row b, −1 row a, 0 neither); none
    // for any other cell.
    std::optional<int> betterAt(int row, int column) const;
    static QColor methodColor(int better); // +1: the second method's colour, −1: the first's
    double value(int row, int column) const { return m_values.at(std::size_t(row)).at(std::size_t(column)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QStringList m_rows, m_columns;
    std::vector<std::vector<double>> m_values;
    int m_deltaFrom = -1;      // first delta row; −1: none
    int m_a = -1, m_b = -1;    // the rows compared
    std::vector<int> m_better; // per column
};

} // namespace gsrq::views
