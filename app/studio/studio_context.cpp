#include "studio_context.h"

#include "error.h"
#include "version.h"

#include <QPointer>

namespace gsrq::studio {

StudioContext::StudioContext(QString storePath, QObject* parent) : QObject(parent), m_storePath(std::move(storePath)) {}

bool StudioContext::openDump(const QString& path)
{
    try {
        m_dump = std::make_shared<const KvDump>(KvDump::open(path.toStdString()));
    } catch (const std::exception& e) {
        emit message(QString::fromUtf8(e.what()), true);
        return false;
    }
    emit dumpChanged();
    return true;
}

QString StudioContext::backendDescription() const
{
    return QStringLiteral("CPU (%1 threads)").arg(resolveThreads(m_threads));
}

WorkerRecording::WorkerRecording(const QString& storePath, const RunInfo& info, const std::string& tensor,
                                 const JobRunner::Context& ctx, StudioContext* studio)
{
    if (storePath.isEmpty())
        return;
    try {
        m_store = std::make_unique<RunStore>(storePath.toStdString());
        RunInfo i = info;
        i.toolVersion = kVersion;
        i.command = "gsrq-studio";
        m_recorder.emplace(*m_store, i, tensor);
    } catch (const std::exception& e) {
        m_recorder.reset();
        const QString text = QStringLiteral("This run is not recorded: %1").arg(QString::fromUtf8(e.what()));
        QPointer<StudioContext> s(studio);
        ctx.post([s, text] {
            if (s)
                s->showMessage(text);
        });
    }
}

void WorkerRecording::finish(const std::string& status, const std::string& summary, const std::string& error)
{
    if (!m_recorder)
        return;
    try {
        m_recorder->finish(status, summary, error);
    } catch (const std::exception&) {
        // The store failed mid-run; the job's own result still reaches the window.
    }
}

} // namespace gsrq::studio
