#include "main_window.h"

#include "gpu/device/device.h"

#include "compare_page.h"
#include "dataset_page.h"
#include "latency_page.h"
#include "long_context_page.h"
#include "model_page.h"
#include "page_settings.h"
#include "report.h"
#include "runs_page.h"
#include "sweeps_page.h"
#include "train_page.h"
#include "weights_page.h"

#include "core/base/version.h"
#include "views/chart_panel.h"
#include "views/heatmap_view.h"

#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMimeData>
#include <QPushButton>
#include <QSaveFile>
#include <QScreen>
#include <QSettings>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

namespace gsrq::studio {

MainWindow::MainWindow(QString storePath, QWidget* parent, bool restoreSession) : QMainWindow(parent)
{
    QSettings settings;
    // A store given on the command line (--store) is this session's: Preferences keep the saved one
    // unless the user changes the field.
    m_storeFromCommandLine = !storePath.isEmpty();
    if (storePath.isEmpty())
        storePath = settings.value("store/path", QString::fromStdString(RunStore::defaultPath())).toString();
    m_ctx = new StudioContext(storePath, this);
    {
        gpu::BackendRequest r;
        const QString kind = settings.value("backend/kind", "auto").toString();
        r.kind = kind == "cpu"    ? gpu::BackendKind::Cpu
                 : kind == "cuda" ? gpu::BackendKind::Cuda
                                  : gpu::BackendKind::Auto;
        r.device = settings.value("backend/device", 0).toInt();
        r.tf32 = settings.value("backend/tf32", false).toBool();
        r.threads = settings.value("backend/threads", 0).toInt();
        r.exactBounds = settings.value("backend/exact_bounds", true).toBool();
        m_ctx->setBackendRequest(r);
    }

    m_banner = new QLabel(this);
    m_banner->setWordWrap(true);
    m_banner->setMargin(6);
    m_banner->hide();
    m_tabs = new QTabWidget(this);
    m_dataset = new DatasetPage(*m_ctx, this);
    m_model = new ModelPage(*m_ctx, this);
    m_compare = new ComparePage(*m_ctx, this);
    m_train = new TrainPage(*m_ctx, this);
    m_runs = new RunsPage(*m_ctx, this);
    m_sweeps = new SweepsPage(*m_ctx, this);
    m_weights = new WeightsPage(*m_ctx, this);
    m_latency = new LatencyPage(*m_ctx, this);
    m_longContext = new LongContextPage(*m_ctx, this);
    m_tabs->addTab(m_dataset, tr("Dataset"));
    m_tabs->addTab(m_model, tr("Model"));
    m_tabs->addTab(m_compare, tr("KM vs GSKM"));
    m_tabs->addTab(m_sweeps, tr("Sweeps"));
    m_tabs->addTab(m_train, tr("GSRQ training"));
    m_tabs->addTab(m_weights, tr("Gradient weights"));
    m_tabs->addTab(m_runs, tr("Runs"));
    m_tabs->addTab(m_latency, tr("Latency"));
    m_tabs->addTab(m_longContext, tr("Long context"));
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int i) {
        if (m_tabs->widget(i) == m_runs)
            m_runs->refresh();
        if (m_tabs->widget(i) == m_latency)
            m_latency->refresh();
    });

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_banner);
    layout->addWidget(m_tabs, 1);
    setCentralWidget(central);
    setAcceptDrops(true);
    setWindowTitle(tr("GSRQ Studio"));

    m_statusBackend = new QLabel(this);
    m_statusJob = new QLabel(this);
    statusBar()->addWidget(m_statusJob, 1);
    statusBar()->addPermanentWidget(m_statusBackend);
    connect(&m_ctx->runner(), &JobRunner::started, this, [this](int, const QString& what) {
        m_statusJob->setText(tr("Running: %1").arg(what));
        // A new job supersedes what the banner said of an earlier one (its failure stays in the Runs page).
        m_banner->hide();
    });
    connect(&m_ctx->runner(), &JobRunner::finished, this, [this] { m_statusJob->setText(tr("Ready")); });
    connect(&m_ctx->runner(), &JobRunner::cancelled, this, [this] { m_statusJob->setText(tr("Cancelled")); });
    connect(&m_ctx->runner(), &JobRunner::failed, this, [this] { m_statusJob->setText(tr("Failed")); });
    connect(m_ctx, &StudioContext::message, this, &MainWindow::onMessage);
    connect(m_ctx, &StudioContext::storeError, this, [this](const QString& text) {
        if (m_storeDialog) {
            m_storeDialog->setInformativeText(text);
            return;
        }
        m_storeDialog = new QMessageBox(QMessageBox::Warning, tr("Run store"),
                                        tr("The run store cannot be used; runs are not recorded or listed until "
                                           "this is fixed, or another store is chosen in Preferences."),
                                        QMessageBox::Ok, this);
        m_storeDialog->setObjectName("storeErrorDialog");
        m_storeDialog->setInformativeText(text);
        m_storeDialog->setAttribute(Qt::WA_DeleteOnClose);
        m_storeDialog->open();
    });
    connect(m_model, &ModelPage::openTensorRequested, this,
            [this](const QString& tensor, bool residual, const CompareSettings& s, const QString& weights) {
                m_compare->openTensor(tensor, residual, s, weights);
                m_tabs->setCurrentWidget(m_compare);
            });
    connect(m_latency, &LatencyPage::trainCodebooksRequested, this, [this] {
        m_train->prepareLookupCodebooks();
        m_tabs->setCurrentWidget(m_train);
    });
    connect(m_dataset, &DatasetPage::openRequested, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open KV dump"), {},
                                                          tr("KV dumps (*.safetensors *.npy);;All files (*)"));
        if (!path.isEmpty())
            openDump(path);
    });
    buildMenus();
    updateStatus();
    if (!restoreGeometry(settings.value("window/geometry").toByteArray())) {
        // The first start: most of the screen it opens on, centred; later starts restore the
        // geometry the window had when it was closed.
        if (const QScreen* screen = QGuiApplication::primaryScreen()) {
            const QRect avail = screen->availableGeometry();
            resize(QSize(avail.width() * 85 / 100, avail.height() * 85 / 100).expandedTo(minimumSizeHint()));
            move(avail.center() - QPoint(width() / 2, height() / 2));
        }
    }
    m_tabs->setCurrentIndex(settings.value("window/page", 0).toInt());
    // Each page's settings as the window left them, and the Model page's last run from the store.
    if (restoreSession) {
        for (const auto& [name, page] : persistentPages())
            if (restorePageSettings(settings, name, page)) {
                // The heads D and K were set for: reopening such a dump keeps them.
                if (page == m_model)
                    m_model->setHeadsFollowed(settings.value("heads/model", -1).toInt());
                if (page == m_compare)
                    m_compare->setHeadsFollowed(settings.value("heads/compare", -1).toInt());
            }
        // The last model run, of the store it was recorded in (another store's run N is another run).
        if (const qint64 run = settings.value("model/last_run", 0).toLongLong();
            run > 0 && settings.value("model/last_run_store").toString() == m_ctx->storePath())
            m_model->showRun(run);
    }
}

MainWindow::~MainWindow() = default;

QList<QPair<QString, QWidget*>> MainWindow::persistentPages() const
{
    // The pages whose controls are settings (the Dataset and Runs pages hold a selection instead).
    return {{"model", m_model},     {"compare", m_compare}, {"sweeps", m_sweeps},           {"train", m_train},
            {"weights", m_weights}, {"latency", m_latency}, {"long-context", m_longContext}};
}

void MainWindow::saveSettings()
{
    QSettings s;
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/page", m_tabs->currentIndex());
    for (const auto& [name, page] : persistentPages())
        savePageSettings(s, name, page);
    s.setValue("heads/model", m_model->headsFollowed());
    s.setValue("heads/compare", m_compare->headsFollowed());
    if (m_model->lastRunId() > 0) { // else the one saved before stays (a cancelled run replaces nothing)
        s.setValue("model/last_run", qint64(m_model->lastRunId()));
        s.setValue("model/last_run_store", m_ctx->storePath());
    }
}

void MainWindow::buildMenus()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open dump…"), QKeySequence::Open, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open KV dump"), {},
                                                          tr("KV dumps (*.safetensors *.npy);;All files (*)"));
        if (!path.isEmpty())
            openDump(path);
    });
    file->addAction(tr("Open &directory of shards…"), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a directory of safetensors shards"));
        if (!dir.isEmpty())
            openDump(dir);
    });
    m_recent = file->addMenu(tr("Open &recent"));
    rebuildRecentMenu();
    file->addSeparator();
    file->addAction(tr("&Export report…"), this, [this] {
        QString path = QFileDialog::getSaveFileName(this, tr("Export report"), tr("gsrq-report.html"),
                                                    tr("HTML, self-contained (*.html);;PDF (*.pdf)"));
        if (path.isEmpty())
            return;
        if (!path.endsWith(".html", Qt::CaseInsensitive) && !path.endsWith(".htm", Qt::CaseInsensitive) &&
            !path.endsWith(".pdf", Qt::CaseInsensitive))
            path += ".html";
        if (exportReport(path))
            m_ctx->showMessage(tr("Wrote the report %1").arg(path), false);
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
    auto* settingsMenu = menuBar()->addMenu(tr("&Settings"));
    settingsMenu->addAction(tr("&Preferences…"), this, &MainWindow::showPreferences);
}

Report MainWindow::buildReport() const
{
    Report report(tr("GSRQ Studio report"));
    QList<QPair<QString, QString>> facts{
        {tr("written"), QDateTime::currentDateTimeUtc().toString(Qt::ISODate)},
        {tr("tool"), QStringLiteral("GSRQ Studio %1").arg(QString::fromUtf8(kVersion))},
        {tr("clustering on"), m_ctx->backendDescription()},
        {tr("run store"), m_ctx->storePath()}};
    if (const auto dump = m_ctx->dump()) {
        facts << QPair<QString, QString>{tr("dump"), QString::fromStdString(dump->path())}
              << QPair<QString, QString>{tr("format"), QStringLiteral("%1, %2 tensors")
                                                           .arg(QString::fromStdString(dump->format()))
                                                           .arg(dump->tensors().size())};
        if (auto it = dump->metadata().find("synthetic"); it != dump->metadata().end())
            facts << QPair<QString, QString>{tr("synthetic data"), QString::fromStdString(it->second)};
    }
    report.facts(facts);
    m_model->addToReport(report);
    QWidget* page = m_tabs->currentWidget();
    if (page && page != m_model) {
        report.heading(tr("%1 page").arg(m_tabs->tabText(m_tabs->currentIndex()).remove('&')));
        // Its settings: every form row with a value.
        QList<QPair<QString, QString>> settings;
        for (auto* form : page->findChildren<QFormLayout*>())
            for (int r = 0; r < form->rowCount(); ++r) {
                auto* labelItem = form->itemAt(r, QFormLayout::LabelRole);
                auto* fieldItem = form->itemAt(r, QFormLayout::FieldRole);
                QWidget* field = fieldItem ? fieldItem->widget() : nullptr;
                if (!field || !field->isEnabled())
                    continue;
                auto* label = labelItem ? qobject_cast<QLabel*>(labelItem->widget()) : nullptr;
                QString name = label ? label->text() : QString();
                QString value;
                if (auto* s = qobject_cast<QSpinBox*>(field))
                    value = QString::number(s->value());
                else if (auto* c = qobject_cast<QComboBox*>(field))
                    value = c->currentText();
                else if (auto* l = qobject_cast<QLineEdit*>(field))
                    value = l->text();
                else if (auto* b = qobject_cast<QCheckBox*>(field)) {
                    value = b->isChecked() ? tr("yes") : tr("no");
                    name = name.isEmpty() ? b->text() : name + " " + b->text();
                } else
                    continue;
                settings << QPair<QString, QString>{name.remove('&'), value};
            }
        report.facts(settings);
        for (auto* chart : page->findChildren<views::ChartPanel*>()) {
            if (!chart->isVisibleTo(page) || chart->emptyTextShown())
                continue;
            chart->flush();
            report.image(chart->view()->grab().toImage(), chart->view()->chart()->title());
        }
        for (auto* map : page->findChildren<views::HeatmapView*>())
            if (map->isVisibleTo(page) && map->rowCount() > 0)
                report.image(map->toImage(map->size().expandedTo(map->sizeHint())), map->title());
        for (auto* view : page->findChildren<QTableView*>())
            if (view->isVisibleTo(page) && view->model() && view->model()->rowCount() > 0 &&
                view->model()->rowCount() <= 200)
                report.table(*view->model());
    }
    return report;
}

bool MainWindow::exportReport(const QString& path)
{
    const Report report = buildReport();
    QString error;
    bool ok = false;
    if (path.endsWith(".png", Qt::CaseInsensitive)) {
        QSaveFile f(path);
        ok = f.open(QIODevice::WriteOnly) && report.preview(900, 1400).save(&f, "PNG") && f.commit();
        if (!ok)
            error = tr("Cannot write %1: %2").arg(path, f.errorString());
    } else {
        ok = report.write(path, &error);
    }
    if (!ok)
        m_ctx->showMessage(error);
    return ok;
}

bool MainWindow::openDump(const QString& path)
{
    if (!m_ctx->openDump(path))
        return false;
    rememberRecent(QFileInfo(path).absoluteFilePath());
    m_banner->hide();
    setWindowTitle(tr("GSRQ Studio — %1").arg(QFileInfo(path).fileName()));
    return true;
}

bool MainWindow::showPage(const QString& name)
{
    const QList<QPair<QString, QWidget*>> pages{
        {"dataset", m_dataset}, {"model", m_model},     {"compare", m_compare},
        {"sweeps", m_sweeps},   {"train", m_train},     {"weights", m_weights},
        {"runs", m_runs},       {"latency", m_latency}, {"long-context", m_longContext}};
    for (const auto& [n, w] : pages)
        if (n == name) {
            m_tabs->setCurrentWidget(w);
            return true;
        }
    return false;
}

void MainWindow::rememberRecent(const QString& path)
{
    QSettings s;
    QStringList recent = s.value("files/recent").toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > 10)
        recent.removeLast();
    s.setValue("files/recent", recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    if (!m_recent)
        return;
    m_recent->clear();
    const QStringList recent = QSettings().value("files/recent").toStringList();
    for (const auto& path : recent)
        m_recent->addAction(path, this, [this, path] { openDump(path); });
    m_recent->setEnabled(!recent.isEmpty());
}

void MainWindow::showPreferences()
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Preferences"));
    const gpu::BackendRequest current = m_ctx->backendRequest();
    auto* threads = new QSpinBox(&dialog);
    threads->setRange(0, 1024);
    threads->setSpecialValueText(tr("all cores"));
    threads->setValue(current.threads);
    auto* exactBounds = new QCheckBox(tr("Exact bounds: skip the distance work that cannot change a label (the same "
                                         "labels and centroids, faster once clusters settle)"),
                                      &dialog);
    exactBounds->setObjectName("exactBounds");
    exactBounds->setChecked(current.exactBounds);
    auto* store = new QLineEdit(m_ctx->storePath(), &dialog);
    auto* backend = new QComboBox(&dialog);
    backend->setObjectName("backendKind");
    backend->addItem(tr("Auto: the GPU when there is one"), "auto");
    backend->addItem(tr("CPU (Eigen GEMM, OpenMP)"), "cpu");
    backend->addItem(tr("CUDA"), "cuda");
    backend->setCurrentIndex(backend->findData(gpu::backendKindName(current.kind)));
    auto* device = new QSpinBox(&dialog);
    device->setRange(0, 63);
    device->setValue(current.device);
    auto* tf32 = new QCheckBox(tr("TF32 tensor cores for the distance product (faster, less exact)"), &dialog);
    tf32->setChecked(current.tf32);
    const auto q = gpu::queryDevices();
    QStringList found;
    for (const auto& d : q.devices)
        found << QStringLiteral("%1: %2").arg(d.index).arg(QString::fromStdString(d.name));
    auto* devices = new QLabel(
        found.isEmpty() ? tr("No CUDA device: %1").arg(QString::fromStdString(q.message)) : found.join("\n"), &dialog);
    devices->setWordWrap(true);
    auto* pplModel = new QLineEdit(m_ctx->pplModelPath(), &dialog);
    pplModel->setToolTip(tr("A GGUF model (llama, qwen2; its own vocabulary) or a llama2.c checkpoint: the GSRQ "
                            "page measures its perplexity with the codebooks"));
    auto* pplTokenizer = new QLineEdit(m_ctx->pplTokenizerPath(), &dialog);
    pplTokenizer->setToolTip(tr("A llama2.c model's tokenizer (.bin); a GGUF model needs none"));
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    auto* form = new QFormLayout(&dialog);
    form->addRow(tr("Backend"), backend);
    form->addRow(tr("CUDA devices"), devices);
    form->addRow(tr("CUDA device"), device);
    form->addRow(QString(), tf32);
    form->addRow(tr("CPU threads"), threads);
    form->addRow(QString(), exactBounds);
    form->addRow(tr("Run store"), pathRow(&dialog, store, tr("Run stores (*.db);;All files (*)"), true));
    form->addRow(tr("Perplexity model"), pathRow(&dialog, pplModel, tr("Models (*.gguf *.bin);;All files (*)")));
    form->addRow(tr("Its tokenizer (llama2.c)"), pathRow(&dialog, pplTokenizer, tr("Tokenizers (*.bin)")));
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    gpu::BackendRequest r;
    r.kind = gpu::parseBackendKind(backend->currentData().toString().toStdString());
    r.device = device->value();
    r.tf32 = tf32->isChecked();
    r.threads = threads->value();
    r.exactBounds = exactBounds->isChecked();
    m_ctx->setBackendRequest(r);
    const bool storeChanged = store->text() != m_ctx->storePath();
    m_ctx->setStorePath(store->text());
    if (pplModel->text() != m_ctx->pplModelPath() || pplTokenizer->text() != m_ctx->pplTokenizerPath())
        m_ctx->setPplModel(pplModel->text(), pplTokenizer->text());
    QSettings s;
    s.setValue("backend/kind", backend->currentData().toString());
    s.setValue("backend/device", r.device);
    s.setValue("backend/tf32", r.tf32);
    s.setValue("backend/threads", threads->value());
    s.setValue("backend/exact_bounds", r.exactBounds);
    // The store is saved when the user chose one here, or when it is not this session's --store.
    if (storeChanged || !m_storeFromCommandLine)
        s.setValue("store/path", store->text());
    updateStatus();
}

void MainWindow::updateStatus()
{
    m_statusBackend->setText(tr("%1 · store %2").arg(m_ctx->backendDescription(), m_ctx->storePath()));
}

bool MainWindow::bannerShown() const
{
    return !m_banner->isHidden();
}

void MainWindow::onMessage(const QString& text, bool error)
{
    m_lastMessage = text;
    m_banner->setText(text);
    m_banner->setStyleSheet(error ? "background:#fbe3e4; color:#7a1f1f; border:1px solid #e0a0a0;"
                                  : "background:#e3f1fb; color:#1f4a7a; border:1px solid #a0c4e0;");
    m_banner->show();
    emit messageShown(text, error);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e)
{
    if (e->mimeData()->hasUrls())
        e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e)
{
    const auto urls = e->mimeData()->urls();
    if (!urls.isEmpty() && urls.first().isLocalFile())
        openDump(urls.first().toLocalFile());
}

void MainWindow::closeEvent(QCloseEvent* e)
{
    saveSettings();
    m_ctx->runner().cancel();
    QMainWindow::closeEvent(e);
}

} // namespace gsrq::studio
