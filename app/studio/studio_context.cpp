#include "studio_context.h"

#include "gpu/device/device.h"

#include "core/base/error.h"

#include <QAbstractButton>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QStringList>

namespace gsrq::studio {

namespace {
// Where bundled models are: installed beside the app, or in the source tree of a build (app or tests).
QStringList bundledModelRoots()
{
    const QDir exe(QCoreApplication::applicationDirPath());
    QStringList out;
    for (const char* rel : {"../share/gsrq-studio/models", "../../../resources/models", "../../resources/models"})
        out << QDir::cleanPath(exe.absoluteFilePath(QString::fromLatin1(rel)));
    return out;
}
} // namespace

StudioContext::StudioContext(QString storePath, QObject* parent) : QObject(parent), m_storePath(std::move(storePath))
{
    QSettings settings;
    m_pplModel = settings.value("ppl/model").toString();
    m_pplTokenizer = settings.value("ppl/tokenizer").toString();
    m_pplChosen = !m_pplModel.isEmpty();
    if (!m_pplChosen)
        useBundledPplModel();
}

// None chosen: the model the open dump names where it is bundled, else the bundled stories260K.
void StudioContext::useBundledPplModel()
{
    m_pplModel.clear();
    m_pplTokenizer.clear();
    for (const QString& root : bundledModelRoots()) {
        const QString dir = root + "/stories260K";
        if (QFileInfo::exists(dir + "/stories260K.bin") && QFileInfo::exists(dir + "/tok512.bin")) {
            m_pplModel = QDir::cleanPath(dir + "/stories260K.bin");
            m_pplTokenizer = QDir::cleanPath(dir + "/tok512.bin");
            return;
        }
    }
}

std::pair<QString, QString> StudioContext::pplPaths() const
{
    if (!m_pplChosen && m_dump) {
        const auto it = m_dump->metadata().find("model");
        if (it != m_dump->metadata().end() && !it->second.empty()) {
            const QString named = QString::fromStdString(it->second);
            QStringList dirs{named};
            for (const QString& root : bundledModelRoots())
                dirs << root + "/" + QFileInfo(named).fileName();
            for (const QString& dir : dirs)
                if (QFileInfo::exists(dir + "/model.bin") && QFileInfo::exists(dir + "/tokenizer.bin"))
                    return {QDir::cleanPath(dir + "/model.bin"), QDir::cleanPath(dir + "/tokenizer.bin")};
        }
    }
    return {m_pplModel, m_pplTokenizer};
}

void StudioContext::setPplModel(const QString& model, const QString& tokenizer)
{
    m_pplModel = model;
    m_pplTokenizer = tokenizer;
    m_pplChosen = !model.isEmpty();
    if (!m_pplChosen) // cleared: back to the dump's bundled model
        useBundledPplModel();
    QSettings settings;
    settings.setValue("ppl/model", model);
    settings.setValue("ppl/tokenizer", tokenizer);
    emit pplModelChanged();
}

bool StudioContext::openDump(const QString& path)
{
    try {
        m_dump = std::make_shared<const KvDump>(KvDump::open(path.toStdString()));
    } catch (const std::exception& e) {
        emit message(QString::fromUtf8(e.what()), true);
        return false;
    }
    if (!m_selected.isEmpty() && !m_dump->find(m_selected.toStdString()))
        m_selected.clear();
    emit dumpChanged();
    return true;
}

QString StudioContext::backendDescription() const
{
    const QString cpu = QStringLiteral("CPU (%1 threads)").arg(resolveThreads(m_backend.threads));
    if (m_backend.kind == gpu::BackendKind::Cpu)
        return cpu;
    const auto q = gpu::queryDevices();
    for (const auto& d : q.devices)
        if (d.index == m_backend.device)
            return QStringLiteral("CUDA: %1 (device %2)%3")
                .arg(QString::fromStdString(d.name))
                .arg(d.index)
                .arg(m_backend.tf32 ? QStringLiteral(", TF32") : QString());
    if (m_backend.kind == gpu::BackendKind::Cuda)
        return QStringLiteral("CUDA requested, but %1")
            .arg(QString::fromStdString(q.message.empty() ? "that device is not present" : q.message));
    return cpu + QStringLiteral(" — no GPU: ") + QString::fromStdString(q.message);
}

void connectJobControls(StudioContext& ctx, QObject* page, const int* job, QAbstractButton* cancelButton,
                        std::function<void(const QString&)> onEnd)
{
    QObject::connect(cancelButton, &QAbstractButton::clicked, page, [&ctx, job] {
        if (ctx.runner().currentId() == *job)
            ctx.runner().cancel();
    });
    QObject::connect(&ctx.runner(), &JobRunner::cancelled, page, [job, onEnd](int id) {
        if (id == *job)
            onEnd(QObject::tr("Cancelled; what finished is recorded in the run store."));
    });
    QObject::connect(&ctx.runner(), &JobRunner::failed, page, [&ctx, job, onEnd](int id, const QString& message) {
        if (id != *job)
            return;
        ctx.showMessage(message);
        onEnd(message);
    });
}

void StudioContext::selectTensor(const QString& name)
{
    if (name == m_selected || (m_dump && !m_dump->find(name.toStdString())))
        return;
    m_selected = name;
    emit tensorSelected(name);
}

int StudioContext::selectedLayer() const
{
    const auto* t = m_dump && !m_selected.isEmpty() ? m_dump->find(m_selected.toStdString()) : nullptr;
    return t ? t->layer : -1;
}

void bindTensorBox(StudioContext& ctx, QComboBox* box)
{
    const auto show = [&ctx, box] {
        const int i = box->findText(ctx.selectedTensor());
        if (i >= 0)
            box->setCurrentIndex(i);
    };
    QObject::connect(box, &QComboBox::activated, &ctx, [&ctx, box](int i) { ctx.selectTensor(box->itemText(i)); });
    QObject::connect(&ctx, &StudioContext::tensorSelected, box, show);
    QObject::connect(&ctx, &StudioContext::dumpChanged, box, show);
}

RunInfo jobRunInfo(const char* kind, const ClusterBackend& backend, const KvDump& dump)
{
    RunInfo info;
    info.kind = kind;
    info.backend = backend.name();
    info.device = backend.device();
    info.dumpPath = dump.path();
    return info;
}

void fillClusterableTensors(QComboBox* box, const KvDump* dump)
{
    box->clear();
    if (!dump)
        return;
    for (const auto& t : dump->tensors())
        if (isFloat(t.view.dtype) && t.view.shape.size() >= 2 && t.kind != KvKind::KeyGrad &&
            t.kind != KvKind::ValueGrad)
            box->addItem(QString::fromStdString(t.view.name));
}

WorkerRecording::WorkerRecording(const QString& storePath, const RunInfo& info, const std::string& tensor,
                                 const JobRunner::Context& ctx, StudioContext* studio,
                                 const std::vector<std::string>& dumpFiles)
    : m_ctx(ctx)
{
    RunInfo i = info;
    i.command = "gsrq-studio";
    m_state->run.emplace(storePath.toStdString(), i, dumpFiles, tensor, StoreFailure::Unrecorded);
    if (!m_state->run->unrecordedReason().empty()) {
        const QString text = QStringLiteral("This run is not recorded: %1")
                                 .arg(QString::fromStdString(m_state->run->unrecordedReason()));
        QPointer<StudioContext> s(studio);
        ctx.post([s, text] {
            if (s)
                s->showStoreError(text);
        });
        return;
    }
    if (*m_state->run)
        ctx.onFailure([state = m_state](const std::string& message) { state->run->fail(message); });
}

WorkerRecording::~WorkerRecording()
{
    // Unwinding from the job's exception: the runner's catch closes the run with its message
    // (the handler keeps the store open until then). Otherwise the run ends here, as it was.
    if (std::uncaught_exceptions() > m_uncaught && m_state->run && !m_state->run->finished())
        return;
    m_ctx.onFailure({});
}

void WorkerRecording::finish(RunStatus status, const std::string& summary, const std::string& error)
{
    if (m_state->run)
        m_state->run->finish(status, summary, error); // Unrecorded: a failing write is dropped
}

QHBoxLayout* pathRow(QWidget* parent, QLineEdit* edit, const QString& filter, bool save)
{
    auto* b = new QPushButton(QObject::tr("Browse…"), parent);
    QObject::connect(b, &QPushButton::clicked, parent, [parent, edit, filter, save] {
        const QString p = save ? QFileDialog::getSaveFileName(parent, QObject::tr("Save as"), edit->text(), filter,
                                                              nullptr, QFileDialog::DontConfirmOverwrite)
                               : QFileDialog::getOpenFileName(parent, QObject::tr("Open"), edit->text(), filter);
        if (!p.isEmpty())
            edit->setText(p);
    });
    auto* row = new QHBoxLayout();
    row->addWidget(edit, 1);
    row->addWidget(b);
    return row;
}

} // namespace gsrq::studio
