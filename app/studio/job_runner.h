#pragma once
// Runs one job at a time off the GUI thread (STYLE 11–12). A job is a function of a Context; it
// reports back with Context::post(f), which runs f on the GUI thread only while the job is still
// the current one: results of a cancelled or superseded job are dropped. Starting a job cancels the
// one before; cancelling takes effect at the job's next progress check (once per iteration).

#include "core/jobs/compare_job.h"

#include <QElapsedTimer>
#include <QObject>
#include <QPointer>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

class QThread;

namespace gsrq::studio {

class JobRunner : public QObject {
    Q_OBJECT

public:
    class Context {
    public:
        int id() const { return m_id; }
        bool cancelled() const { return m_cancel->load(); }
        void post(std::function<void()> onGui) const;
        // Called on the worker with the exception's message when the body throws, after the
        // body's locals are gone (a run recorder hands its unfinished run over here, so the run
        // is closed with the engine's message rather than a generic one).
        void onFailure(std::function<void(const std::string&)> f) const { *m_onFailure = std::move(f); }

    private:
        friend class JobRunner;
        int m_id = 0;
        std::shared_ptr<std::function<void(const std::string&)>> m_onFailure =
            std::make_shared<std::function<void(const std::string&)>>();
        std::shared_ptr<std::atomic<bool>> m_cancel;
        QPointer<JobRunner> m_runner;
    };
    using Body = std::function<void(const Context&)>;

    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override; // cancels every job and waits for the threads

    int start(const QString& what, Body body);
    void cancel();
    int currentId() const { return m_current; }

signals:
    void started(int id, const QString& what);
    void finished(int id);                       // the current job ended normally
    void failed(int id, const QString& message); // it threw gsrq::Error or another exception
    void cancelled(int id);

private:
    int m_next = 1;
    int m_current = 0;
    std::shared_ptr<std::atomic<bool>> m_cancel;
    std::shared_ptr<std::atomic<bool>> m_returned; // the current job's body has returned
    std::vector<QThread*> m_threads;
};

// Collects progress events on the worker and posts them in batches at most every 30 ms, so a
// fast clustering does not flood the GUI thread with one event per iteration.
class ProgressBatcher {
public:
    using Sink = std::function<void(const std::vector<ProgressEvent>&)>;
    ProgressBatcher(const JobRunner::Context& ctx, Sink sink) : m_ctx(ctx), m_sink(std::move(sink)) { m_clock.start(); }
    // Returns false when the job was cancelled (the progress callback's answer).
    bool add(const ProgressEvent& e);
    void flush();

private:
    const JobRunner::Context& m_ctx;
    Sink m_sink;
    std::vector<ProgressEvent> m_pending;
    QElapsedTimer m_clock;
};

} // namespace gsrq::studio
