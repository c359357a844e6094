#include "job_runner.h"

#include "core/base/error.h"

#include <QMetaObject>
#include <QThread>

namespace gsrq::studio {

void JobRunner::Context::post(std::function<void()> onGui) const
{
    JobRunner* runner = m_runner.data();
    if (!runner)
        return;
    const int id = m_id;
    QMetaObject::invokeMethod(
        runner,
        [runner, id, f = std::move(onGui)] {
            if (runner->m_current == id)
                f();
        },
        Qt::QueuedConnection);
}

JobRunner::JobRunner(QObject* parent) : QObject(parent) {}

JobRunner::~JobRunner()
{
    if (m_cancel)
        m_cancel->store(true);
    m_current = 0;
    for (QThread* t : m_threads) {
        t->wait();
        delete t;
    }
}

int JobRunner::start(const QString& what, Body body)
{
    cancel(); // a new job supersedes the running one
    const int id = m_next++;
    m_current = id;
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_returned = std::make_shared<std::atomic<bool>>(false);
    Context ctx;
    ctx.m_id = id;
    ctx.m_cancel = m_cancel;
    ctx.m_runner = this;
    QThread* thread = QThread::create([ctx, returned = m_returned, body = std::move(body)] {
        try {
            body(ctx);
            returned->store(true);
            if (ctx.cancelled())
                return;
            ctx.post([r = ctx.m_runner, id = ctx.m_id] {
                r->m_current = 0;
                emit r->finished(id);
            });
        } catch (const std::exception& e) {
            if (*ctx.m_onFailure) {
                try {
                    (*ctx.m_onFailure)(e.what());
                } catch (const std::exception&) {
                    // Recording the failure failed (the store); the window still hears of it.
                }
                *ctx.m_onFailure = nullptr; // the run's store is closed here, on the worker
            }
            returned->store(true);
            const QString message = QString::fromUtf8(e.what());
            ctx.post([r = ctx.m_runner, id = ctx.m_id, message] {
                r->m_current = 0;
                emit r->failed(id, message);
            });
        }
    });
    // Finished threads are reaped on the GUI thread; the destructor waits for the rest.
    connect(thread, &QThread::finished, this, [this, thread] {
        std::erase(m_threads, thread);
        thread->deleteLater();
    });
    m_threads.push_back(thread);
    emit started(id, what);
    thread->start();
    return id;
}

void JobRunner::cancel()
{
    if (!m_current)
        return;
    const int id = m_current;
    m_current = 0; // anything the job still posts is dropped
    if (m_returned->load()) {
        // Its work is done and its results were posted; only the runner's own notice was still
        // queued (and is now dropped): it finished, it was not cancelled.
        emit finished(id);
        return;
    }
    m_cancel->store(true);
    emit cancelled(id);
}

bool ProgressBatcher::add(const ProgressEvent& e)
{
    m_pending.push_back(e);
    if (m_clock.elapsed() >= 30)
        flush();
    return !m_ctx.cancelled();
}

void ProgressBatcher::flush()
{
    if (m_pending.empty())
        return;
    m_ctx.post([sink = m_sink, events = std::move(m_pending)] { sink(events); });
    m_pending.clear();
    m_clock.restart();
}

} // namespace gsrq::studio
