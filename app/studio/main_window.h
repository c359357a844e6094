#pragma once
// The main window only wires pages (STYLE 14): dataset, KM vs GSKM, GSRQ training, runs. It owns
// the shared context (open dump, store, backend), the menus, recent files, drag and drop, the
// message banner and the persisted window state.

#include "report.h"
#include "studio_context.h"

#include <QMainWindow>
#include <QMessageBox>
#include <QPointer>

class QLabel;
class QMenu;
class QTabWidget;

namespace gsrq::studio {

class DatasetPage;
class ComparePage;
class ModelPage;
class TrainPage;
class RunsPage;
class SweepsPage;
class WeightsPage;
class LatencyPage;
class LongContextPage;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    // restoreSession: each page's settings and the Model page's last run as the last window left them
    // (off for --screenshot and --report, which show what their flags ask for alone).
    explicit MainWindow(QString storePath, QWidget* parent = nullptr, bool restoreSession = true);
    ~MainWindow() override;

    StudioContext& context() { return *m_ctx; }
    bool openDump(const QString& path);
    // Page names: dataset, model, compare, sweeps, train, weights, runs, latency.
    bool showPage(const QString& name);
    DatasetPage* datasetPage() const { return m_dataset; }
    ModelPage* modelPage() const { return m_model; }
    ComparePage* comparePage() const { return m_compare; }
    TrainPage* trainPage() const { return m_train; }
    RunsPage* runsPage() const { return m_runs; }
    SweepsPage* sweepsPage() const { return m_sweeps; }
    WeightsPage* weightsPage() const { return m_weights; }
    LatencyPage* latencyPage() const { return m_latency; }
    LongContextPage* longContextPage() const { return m_longContext; }
    QString lastMessage() const { return m_lastMessage; }
    // Settings ▸ Preferences (modal): backend, threads, the run store, the perplexity model, each
    // path with a Browse button.
    void showPreferences();
    bool bannerShown() const;
    // File ▸ Export report: the model page's results, the open page (its settings, charts and
    // tables) and the session's facts, as HTML or (for .pdf) PDF, or a picture of its top (.png).
    // False with the reason in a message when it cannot be written.
    bool exportReport(const QString& path);
    // What exportReport writes: the model page's maps and table, then the open page's settings,
    // charts and tables.
    Report buildReport() const;
    // The window's geometry and page, every settings page's controls (page_settings.h) and the Model
    // page's last run, as the next start restores them; done on close.
    void saveSettings();

signals:
    void messageShown(const QString& text, bool error);

protected:
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;
    void closeEvent(QCloseEvent* e) override;

private:
    void buildMenus();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void onMessage(const QString& text, bool error);
    void updateStatus();
    QList<QPair<QString, QWidget*>> persistentPages() const;

    StudioContext* m_ctx;
    QTabWidget* m_tabs;
    QLabel* m_banner;
    QPointer<QMessageBox> m_storeDialog; // one at a time, however many pages fail
    QLabel* m_statusBackend;
    QLabel* m_statusJob;
    QMenu* m_recent = nullptr;
    DatasetPage* m_dataset;
    ModelPage* m_model;
    ComparePage* m_compare;
    TrainPage* m_train;
    RunsPage* m_runs;
    SweepsPage* m_sweeps;
    WeightsPage* m_weights;
    LatencyPage* m_latency;
    LongContextPage* m_longContext;
    QString m_lastMessage;
    bool m_storeFromCommandLine = false;
};

} // namespace gsrq::studio
