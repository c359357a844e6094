#pragma once
// What the pages share: the open dump, the run store's path, the CPU backend settings, the job
// runner and a place for messages. Owned by the main window; GUI thread only.

#include "core/cluster/cluster_backend.h"
#include "core/io/kv_dump.h"
#include "core/jobs/recorded_run.h"
#include "gpu/cluster/backend.h"
#include "job_runner.h"

#include <QObject>

#include <functional>

class QAbstractButton;
class QComboBox;
class QHBoxLayout;
class QLineEdit;
class QWidget;
#include <QString>

#include <exception>
#include <memory>
#include <optional>
#include <utility>

namespace gsrq::studio {

class StudioContext : public QObject {
    Q_OBJECT

public:
    explicit StudioContext(QString storePath, QObject* parent = nullptr);

    std::shared_ptr<const KvDump> dump() const { return m_dump; }
    // The tensor the user chose last, on any page: every page with a tensor picker follows it.
    // Kept when another dump is opened if that dump has it, else cleared.
    QString selectedTensor() const { return m_selected; }
    void selectTensor(const QString& name); // emits tensorSelected when it changes
    // The selected tensor's layer, or −1.
    int selectedLayer() const;
    // Opens a dump (validated by core's readers); on failure emits message() and keeps the old one.
    bool openDump(const QString& path);

    QString storePath() const { return m_storePath; }
    void setStorePath(const QString& p) { m_storePath = p; }
    // Where jobs cluster: auto (the GPU when there is one), cpu or cuda, with threads and device.
    gpu::BackendRequest backendRequest() const { return m_backend; }
    void setBackendRequest(const gpu::BackendRequest& r) { m_backend = r; }
    QString backendDescription() const;

    // The llama2.c model and tokenizer the GSRQ page measures perplexity with: the Preferences'
    // choice; else the model the open dump was made from, where its `model` metadata names a
    // directory holding model.bin and tokenizer.bin (as it is, or by name among the bundled models:
    // the pydocs-hd128 sample's); else the bundled stories260K (installed, or in the source tree);
    // else empty.
    QString pplModelPath() const { return pplPaths().first; }
    QString pplTokenizerPath() const { return pplPaths().second; }
    // A GGUF model needs no tokenizer (empty). An empty model clears the choice: the dump's or the
    // bundled model again.
    void setPplModel(const QString& model, const QString& tokenizer);

    JobRunner& runner() { return m_runner; }
    void showMessage(const QString& text, bool error = true) { emit message(text, error); }
    // The run store cannot be used (not SQLite, read-only, locked, of a newer schema...): the
    // window says so in a dialog, as well as in the banner.
    void showStoreError(const QString& text)
    {
        emit message(text, true);
        emit storeError(text);
    }

signals:
    void dumpChanged();
    void tensorSelected(const QString& name);
    void message(const QString& text, bool error);
    void storeError(const QString& text);
    // The perplexity model was set in Preferences (a new dump may change it too: dumpChanged).
    void pplModelChanged();

private:
    std::shared_ptr<const KvDump> m_dump;
    QString m_selected;
    QString m_storePath;
    gpu::BackendRequest m_backend;
    std::pair<QString, QString> pplPaths() const;
    void useBundledPplModel();
    QString m_pplModel, m_pplTokenizer;
    bool m_pplChosen = false; // set in Preferences: used whatever dump is open
    JobRunner m_runner;
};

// Wires a page to the runner: `cancelButton` cancels the page's job (the id in *job), and when
// that job is cancelled or fails, onEnd(message) runs (a failure also goes to the message banner).
void connectJobControls(StudioContext& ctx, QObject* page, const int* job, QAbstractButton* cancelButton,
                        std::function<void(const QString&)> onEnd);

// A job's run as the store records it: its kind, where it clusters and the dump it reads.
RunInfo jobRunInfo(const char* kind, const ClusterBackend& backend, const KvDump& dump);

// The float matrices a user may cluster (gradients excluded), for a tensor picker.
void fillClusterableTensors(QComboBox* box, const KvDump* dump);

// Ties a page's tensor picker to the shared selection: the user's choice in the box becomes the
// selection, and the selection (made on another page, or kept over opening a dump) is shown in
// the box whenever the box has it. Call after the page's own dumpChanged connection, so the box is
// filled first.
void bindTensorBox(StudioContext& ctx, QComboBox* box);

// A form row of a path field and its Browse… button, which opens a file dialog on the field's path
// with `filter` (a save dialog with `save`: a file that may not exist yet) and puts the choice in
// the field.
QHBoxLayout* pathRow(QWidget* parent, QLineEdit* edit, const QString& filter, bool save = false);

// A run recorded from a worker thread through that thread's own store connection: core's
// RecordedRun with StoreFailure::Unrecorded (a store that cannot be opened leaves the job
// unrecorded and says why in the window; the job still runs). When the job throws, the run is
// closed as failed with the exception's message (through the job's Context::onFailure), as the CLI
// records it.
class WorkerRecording {
public:
    // dumpFiles: hashed (through the store's cache) into the run's dump_sha256.
    WorkerRecording(const QString& storePath, const RunInfo& info, const std::string& tensor,
                    const JobRunner::Context& ctx, StudioContext* studio, const std::vector<std::string>& dumpFiles);
    ~WorkerRecording();
    WorkerRecording(const WorkerRecording&) = delete;
    WorkerRecording& operator=(const WorkerRecording&) = delete;
    RunRecorder* operator->() { return m_state->run ? m_state->run->operator->() : nullptr; }
    explicit operator bool() const { return m_state->run && bool(*m_state->run); }
    void progress(const ProgressEvent& e)
    {
        if (m_state->run)
            m_state->run->progress(e);
    }
    void finish(RunStatus status, const std::string& summary = "{}", const std::string& error = "");

private:
    struct State {
        std::optional<RecordedRun> run; // core's, with StoreFailure::Unrecorded
    };
    std::shared_ptr<State> m_state = std::make_shared<State>();
    JobRunner::Context m_ctx;
    int m_uncaught = std::uncaught_exceptions();
};

} // namespace gsrq::studio
