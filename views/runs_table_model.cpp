#include "views/runs_table_model.h"

#include "core/jobs/result_json.h"

#include <QColor>
#include <QFileInfo>

namespace gsrq::views {

void RunsTableModel::setRuns(std::vector<RunInfo> runs)
{
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
}

const RunInfo* RunsTableModel::runAt(int row) const
{
    return row >= 0 && row < int(m_runs.size()) ? &m_runs[std::size_t(row)] : nullptr;
}

int RunsTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_runs.size());
}

int RunsTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const
{
    const RunInfo* r = index.isValid() ? runAt(index.row()) : nullptr;
    if (!r)
        return {};
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Id:
            return qlonglong(r->id);
        case Kind:
            return QString::fromStdString(r->kind);
        case Status:
            return QString(runStatusName(r->status));
        case Group:
            return QString::fromStdString(r->group);
        case Started:
            return QString::fromStdString(r->startedAt).replace('T', ' ').left(19);
        case Dump:
            return QFileInfo(QString::fromStdString(r->dumpPath)).fileName();
        case Summary:
            // A failed run's result is what went wrong: the engine's message, from either face.
            if (r->status == RunStatus::Failed && !r->error.empty())
                return QString::fromStdString(r->error);
            return QString::fromStdString(runHeadline(r->summaryJson));
        default:
            return {};
        }
    }
    if (role == Qt::ToolTipRole && index.column() == Dump)
        return QString::fromStdString(r->dumpPath);
    if (role == Qt::ToolTipRole && index.column() == Summary && !r->error.empty())
        return QString::fromStdString(r->error);
    if (role == Qt::ToolTipRole && !r->origin.empty())
        return tr("Imported from %1").arg(QString::fromStdString(r->origin));
    if (role == Qt::ForegroundRole && index.column() == Status) {
        if (r->status == RunStatus::Failed || r->status == RunStatus::Interrupted)
            return QColor(Qt::darkRed);
        if (r->status == RunStatus::Running)
            return QColor(Qt::darkBlue);
    }
    if (role == Qt::UserRole) // the run id, for selections through proxies
        return qlonglong(r->id);
    return {};
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Id:
        return tr("Run");
    case Kind:
        return tr("Kind");
    case Status:
        return tr("Status");
    case Group:
        return tr("Group");
    case Started:
        return tr("Started (UTC)");
    case Dump:
        return tr("Dump");
    case Summary:
        return tr("Result");
    default:
        return {};
    }
}

} // namespace gsrq::views
