#pragma once
// The run store's runs as a table: id, kind, status, group (a plan's id), started, dump, headline. GUI thread only;
// the rows are handed in (read through core's store API by the caller), never queried here.

#include "core/store/run_store.h"

#include <QAbstractTableModel>

#include <vector>

namespace gsrq::views {

class RunsTableModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { Id, Kind, Status, Group, Started, Dump, Summary, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setRuns(std::vector<RunInfo> runs);
    const RunInfo* runAt(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<RunInfo> m_runs;
};

} // namespace gsrq::views
