#include "long_context_page.h"

#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/base/text.h"
#include "core/base/version.h"
#include "core/lm/open_model.h"
#include "views/chart_panel.h"
#include "views/heatmap_view.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace gsrq::studio {

namespace {

// Where tools/fetch_model.py and tools/texts.py keep what they fetch (gsrqtools.paths.cache_root).
QString cacheRoot()
{
    const QString gsrq = qEnvironmentVariable("GSRQ_CACHE");
    if (!gsrq.isEmpty())
        return gsrq;
    const QString xdg = qEnvironmentVariable("XDG_CACHE_HOME");
    return (xdg.isEmpty() ? QDir::homePath() + "/.cache" : xdg) + "/gsrq-studio";
}

QString existing(const QString& path)
{
    return QFileInfo::exists(path) ? path : QString();
}

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throwInvalid("Text ", path, ": cannot be read");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The series a method belongs to on the bits chart: gsrq@1 and gsrq@0.375 on one line, KIVI with
// its FP16 window apart from KIVI without it, a codebooks file by its name.
QString methodFamily(const std::string& name)
{
    if (name.rfind("kivi-", 0) == 0)
        return name.find('r') != std::string::npos ? QStringLiteral("kivi, FP16 window") : QStringLiteral("kivi");
    if (QString::fromStdString(name).endsWith(".safetensors"))
        return QFileInfo(QString::fromStdString(name)).completeBaseName();
    const auto at = name.find('@');
    if (at != std::string::npos)
        return QString::fromStdString(name.substr(0, at));
    return QString::fromStdString(name);
}

QString pct(double v)
{
    return QStringLiteral("%1%").arg(100 * v, 0, 'f', 0);
}

} // namespace

LongContextPage::LongContextPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_model = new QLineEdit(existing(cacheRoot() + "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), this);
    m_model->setPlaceholderText(tr("a GGUF model (bash tools/run.sh fetches SmolLM2)"));
    m_tokenizer = new QLineEdit(this);
    m_tokenizer->setPlaceholderText(tr("llama2.c models only: their tokenizer (.bin)"));
    m_haystack = new QLineEdit(existing(cacheRoot() + "/texts/devil.eval.txt"), this);
    m_haystack->setPlaceholderText(tr("UTF-8 text the needles hide in (tools/texts.py)"));
    m_tasks = new QLineEdit(QStringLiteral("passkey,niah-single"), this);
    m_tasks->setToolTip(tr("passkey, niah-single, niah-multikey, niah-multivalue, niah-multiquery, vt, or all"));
    m_contexts = new QLineEdit(QStringLiteral("1024"), this);
    m_contexts->setToolTip(tr("Context lengths in the model's tokens (prompt and answer), e.g. 1024,4096"));
    m_depths = new QLineEdit(QStringLiteral("0,25,50,75,100"), this);
    m_samples = new QSpinBox(this);
    m_samples->setRange(1, 10000);
    m_samples->setValue(5);
    m_samples->setToolTip(tr("Samples per task and context, spread over the depths"));
    m_methods = new QLineEdit(QStringLiteral("fp16,kivi-2,kivi-1"), this);
    m_methods->setToolTip(tr("fp16, fp32, kivi-B[gG][rN], codebooks files, or names bound under Codebooks"));
    m_codebooks = new QLineEdit(this);
    m_codebooks->setPlaceholderText(tr("gsrq@1=FILE.safetensors, …"));
    m_prefill = new QComboBox(this);
    m_prefill->addItem(tr("deployed: full precision, then each cache"), "deployed");
    m_prefill->addItem(tr("quantized: attends over each cache"), "quantized");
    auto* form = new QFormLayout();
    form->addRow(tr("Model"), pathRow(this, m_model, tr("GGUF models (*.gguf);;llama2.c models (*.bin)")));
    form->addRow(tr("Tokenizer"), pathRow(this, m_tokenizer, tr("llama2.c tokenizers (*.bin)")));
    form->addRow(tr("Text"), pathRow(this, m_haystack, tr("Text (*.txt);;All files (*)")));
    form->addRow(tr("Tasks"), m_tasks);
    form->addRow(tr("Context lengths"), m_contexts);
    form->addRow(tr("Depths (%)"), m_depths);
    form->addRow(tr("Samples"), m_samples);
    form->addRow(tr("Methods"), m_methods);
    form->addRow(tr("Codebooks"), m_codebooks);
    form->addRow(tr("Prefill"), m_prefill);
    m_run = new QPushButton(tr("Run"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_status = new QLabel(tr("Runs each task's prompts through the model and answers them over each method's "
                             "cache."),
                          this);
    m_status->setWordWrap(true);
    auto* buttons = new QHBoxLayout();
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    auto* left = new QVBoxLayout();
    left->addLayout(form);
    left->addLayout(buttons);
    left->addWidget(m_progress);
    left->addWidget(m_status);
    left->addStretch(1);
    auto* leftBox = new QWidget(this);
    leftBox->setLayout(left);
    leftBox->setMaximumWidth(460);

    m_taskShown = new QComboBox(this);
    auto* heatBox = new QWidget(this);
    m_heatRow = new QHBoxLayout(heatBox);
    auto* scroll = new QScrollArea(this);
    scroll->setWidget(heatBox);
    scroll->setWidgetResizable(true);
    scroll->setMinimumHeight(220);
    m_chart = new views::ChartPanel(tr("Accuracy against bits per cached value"), tr("bits per cached value"),
                                    tr("accuracy"), this);
    m_chart->setLogX(true);
    m_chart->setEmptyText(tr("Run the tasks to see each method's accuracy at its bits."));
    m_table = new QTableWidget(0, 7, this);
    m_table->setHorizontalHeaderLabels(
        {tr("method"), tr("depth"), tr("sample"), tr("expected"), tr("answer"), tr("score"), tr("the prompt's end")});
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    auto* showRow = new QHBoxLayout();
    showRow->addWidget(new QLabel(tr("Task shown"), this));
    showRow->addWidget(m_taskShown, 1);
    auto* right = new QSplitter(Qt::Vertical, this);
    auto* top = new QWidget(this);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addLayout(showRow);
    topLayout->addWidget(scroll, 1);
    right->addWidget(top);
    right->addWidget(m_chart);
    right->addWidget(m_table);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(leftBox);
    layout->addWidget(right, 1);

    connect(m_run, &QPushButton::clicked, this, &LongContextPage::start);
    connect(m_cancel, &QPushButton::clicked, this, &LongContextPage::cancel);
    connect(m_taskShown, &QComboBox::currentIndexChanged, this, &LongContextPage::redraw);
    const auto onEnd = [this](int id, bool ok) {
        if (id != m_job)
            return;
        setRunning(false);
        emit runFinished(ok);
    };
    connect(&m_ctx.runner(), &JobRunner::finished, this, [onEnd](int id) { onEnd(id, true); });
    connect(&m_ctx.runner(), &JobRunner::cancelled, this, [this, onEnd](int id) {
        if (id == m_job)
            m_status->setText(tr("Cancelled: %1 answers kept (recorded in the run store)").arg(m_answers.size()));
        onEnd(id, false);
    });
    connect(&m_ctx.runner(), &JobRunner::failed, this, [this, onEnd](int id, const QString& msg) {
        if (id == m_job)
            m_status->setText(tr("Failed: %1").arg(msg));
        onEnd(id, false);
    });
}

QString LongContextPage::statusText() const
{
    return m_status->text();
}

void LongContextPage::setRunning(bool on)
{
    m_run->setEnabled(!on);
    m_cancel->setEnabled(on);
}

void LongContextPage::cancel()
{
    if (m_job && m_ctx.runner().currentId() == m_job)
        m_ctx.runner().cancel();
}

void LongContextPage::start()
{
    ContextTasksSettings s;
    std::string haystack;
    try {
        s.model = m_model->text().trimmed().toStdString();
        if (s.model.empty())
            throwInvalid("Model: give a GGUF model (bash tools/run.sh fetches SmolLM2)");
        s.tasks = parseContextTasks(m_tasks->text().toStdString(), "Tasks");
        s.contexts = parseIntList("Context lengths", m_contexts->text().toStdString(), 1);
        s.depths = parseIntList("Depths", m_depths->text().toStdString());
        s.samples = m_samples->value();
        s.mode = parsePrefillMode(m_prefill->currentData().toString().toStdString());
        s.haystack = m_haystack->text().trimmed().toStdString();
        std::vector<std::string> books;
        for (const auto& b : m_codebooks->text().split(',', Qt::SkipEmptyParts))
            books.push_back(b.trimmed().toStdString());
        resolveMethodNames(m_methods->text().toStdString(), books, s);
        if (!std::any_of(s.tasks.begin(), s.tasks.end(), needsHaystack))
            s.haystack.clear();
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        emit runFinished(false); // nothing started
        return;
    }
    m_settings = s;
    m_answers.clear();
    m_prompts.clear();
    m_methodBits.clear();
    m_table->setRowCount(0);
    m_progress->setValue(0);
    m_taskShown->blockSignals(true);
    m_taskShown->clear();
    for (auto t : s.tasks)
        m_taskShown->addItem(QString::fromUtf8(contextTaskName(t)));
    m_taskShown->blockSignals(false);
    redraw();
    m_status->setText(tr("Loading %1…").arg(QString::fromStdString(s.model)));
    setRunning(true);
    const QString storePath = m_ctx.storePath();
    s.tokenizer = m_tokenizer->text().trimmed().toStdString();
    const std::string tokenizer = s.tokenizer;
    m_job = m_ctx.runner().start(tr("Long-context tasks"), [=, this](const JobRunner::Context& job) {
        OpenedModel opened = openModel(s.model, tokenizer);
        const auto& vocab = opened.vocabulary();
        const PromptFormat format = promptFormatOf(opened.chatTemplate, true);
        const std::string text = s.haystack.empty() ? std::string() : readFile(s.haystack);
        const TaskGenerator generator(vocab, format, text, s.haystack);
        validateContextTasks(s, opened, generator);
        auto backend = makeCpuBackend();
        const auto methods = buildContextMethods(s, opened.model.config(), *backend);
        std::vector<std::pair<std::string, double>> bits;
        for (const auto& m : methods)
            bits.emplace_back(m.cache.name, m.bits);
        job.post([this, bits, format] {
            m_methodBits = bits;
            m_status->setText(tr("Prompt format: %1").arg(QString::fromStdString(format.describe())));
            redraw();
        });
        RunInfo info;
        info.kind = "tasks";
        info.dumpPath = s.model; // the run's input, as the CLI records it
        info.backend = backend->name();
        info.device = backend->device();
        info.settingsJson =
            contextTasksSettingsJson(s, sha256Files({s.model}),
                                     s.haystack.empty() ? std::string() : sha256Files({s.haystack}), format)
                .dump();
        WorkerRecording rec(storePath, info, "", job, &m_ctx, {s.model});
        ProgressBatcher batch(job, [this](const std::vector<ProgressEvent>& events) {
            const auto& e = events.back();
            m_progress->setValue(int(1000 * e.fraction));
            m_status->setText(QString::fromStdString(e.what));
        });
        const auto r = runContextTasks(
            opened, generator, s, methods, {},
            [&](const std::string& key, double score, const nlohmann::ordered_json& record) {
                if (rec)
                    rec->recordSample({key, score, record.dump()});
                job.post([this, key, record] {
                    if (key.rfind("prompt/", 0) == 0) {
                        m_prompts[key] = record;
                    } else {
                        m_answers.push_back(record);
                        redraw();
                    }
                });
            },
            [&](const ProgressEvent& e) { return batch.add(e); });
        batch.flush();
        const auto summary = contextTasksSummary(r, s);
        rec.finish(r.cancelled ? RunStatus::Cancelled : RunStatus::Done, summary.dump());
        const int n = r.newAnswers;
        const double prefill = r.prefillSeconds, rest = r.methodSeconds;
        job.post([this, n, prefill, rest] {
            m_progress->setValue(1000);
            m_status->setText(tr("%1 answers: %2 s of prefill, %3 s of the methods' caches, questions and answers")
                                  .arg(n)
                                  .arg(prefill, 0, 'f', 1)
                                  .arg(rest, 0, 'f', 1));
        });
    });
}

void LongContextPage::redraw()
{
    const QString task = m_taskShown->currentText();
    const auto cells = contextCells(m_answers, m_settings, true);
    // One heatmap per method: rows the depths, columns the context lengths.
    const std::size_t methods = m_methodBits.size();
    while (m_heatmaps.size() > methods) {
        delete m_heatmaps.back();
        m_heatmaps.pop_back();
    }
    while (m_heatmaps.size() < methods) {
        auto* h = new views::HeatmapView(QString(), this);
        h->setScale(QColor(0xd7, 0x30, 0x27), QColor(0x1a, 0x98, 0x50), tr("not found"), tr("found"));
        h->setFixedScale(0.5, {tr("0% found"), tr("50%"), tr("100%")});
        h->setMinimumWidth(220);
        const int index = int(m_heatmaps.size());
        connect(h, &views::HeatmapView::cellClicked, this,
                [this, index](int row, int column) { showCell(index, row, column); });
        m_heatRow->addWidget(h);
        m_heatmaps.push_back(h);
    }
    QStringList rows, columns;
    for (int d : m_settings.depths)
        rows << tr("%1%").arg(d);
    for (int c : m_settings.contexts)
        columns << QString::number(c);
    m_chart->clear();
    for (std::size_t mi = 0; mi < methods; ++mi) {
        const auto& name = m_methodBits[mi].first;
        std::vector<views::HeatmapView::Cell> grid(std::size_t(rows.size() * columns.size()));
        for (auto& g : grid)
            g.score = std::nan("");
        for (const auto& c : cells) {
            if (c.method != name || QString::fromStdString(c.task) != task || c.depth < 0)
                continue;
            const auto r = std::find(m_settings.depths.begin(), m_settings.depths.end(), c.depth);
            const auto k = std::find(m_settings.contexts.begin(), m_settings.contexts.end(), c.context);
            if (r == m_settings.depths.end() || k == m_settings.contexts.end())
                continue;
            auto& g =
                grid[std::size_t((r - m_settings.depths.begin()) * columns.size() + (k - m_settings.contexts.begin()))];
            // The colour scale is centred on zero: 50% is white, 0% and 100% full colour.
            g.score = c.accuracy.value - 0.5;
            g.text = pct(c.accuracy.value);
            g.tooltip = tr("%1, %2 tokens, depth %3%: %4 of %5 samples [%6, %7]")
                            .arg(QString::fromStdString(name))
                            .arg(c.context)
                            .arg(c.depth)
                            .arg(c.accuracy.value * c.samples, 0, 'g', 3)
                            .arg(c.samples)
                            .arg(pct(c.accuracy.lo), pct(c.accuracy.hi));
        }
        const QString shown = QString::fromStdString(name).endsWith(".safetensors")
                                  ? QFileInfo(QString::fromStdString(name)).completeBaseName()
                                  : QString::fromStdString(name);
        m_heatmaps[mi]->setTitle(QStringLiteral("%1 (%2 bits)").arg(shown).arg(m_methodBits[mi].second, 0, 'g', 3));
        m_heatmaps[mi]->setGrid(rows, columns, grid);
    }
    // Accuracy against bits with 95% intervals, for the task shown: one series per family of methods
    // (fp16; KIVI with and without its window; each codebook method over its rates) and context length.
    std::vector<QString> families;
    std::map<QString, std::vector<std::pair<double, const ContextCell*>>> series;
    for (int context : m_settings.contexts)
        for (const auto& [name, bits] : m_methodBits)
            for (const auto& c : cells)
                if (c.depth < 0 && c.method == name && c.context == context && QString::fromStdString(c.task) == task) {
                    const QString s = m_settings.contexts.size() > 1
                                          ? tr("%1, %2 tokens").arg(methodFamily(name)).arg(context)
                                          : methodFamily(name);
                    if (!series.count(s))
                        families.push_back(s);
                    series[s].emplace_back(bits, &c);
                }
    for (const auto& s : families) {
        auto points = series[s];
        std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        QList<QPointF> pts;
        QList<QPair<double, double>> bars;
        for (const auto& [bits, c] : points) {
            pts << QPointF(bits, c->accuracy.value);
            bars << qMakePair(c->accuracy.lo, c->accuracy.hi);
        }
        m_chart->setSeries(s, pts);
        m_chart->setIntervals(s, bars);
    }
}

void LongContextPage::showCell(int method, int row, int column)
{
    if (method < 0 || std::size_t(method) >= m_methodBits.size() || row < 0 ||
        std::size_t(row) >= m_settings.depths.size() || column < 0 || std::size_t(column) >= m_settings.contexts.size())
        return;
    const std::string name = m_methodBits[std::size_t(method)].first, task = m_taskShown->currentText().toStdString();
    const int depth = m_settings.depths[std::size_t(row)], context = m_settings.contexts[std::size_t(column)];
    m_table->setRowCount(0);
    for (const auto& a : m_answers) {
        if (a.value("method", "") != name || a.value("task", "") != task || a.value("depth", -1) != depth ||
            a.value("context", 0) != context)
            continue;
        const int r = m_table->rowCount();
        m_table->insertRow(r);
        QString expected;
        for (const auto& e : a["expected"])
            expected += (expected.isEmpty() ? "" : ", ") + QString::fromStdString(e.get<std::string>());
        const auto p = m_prompts.find(a.value("prompt", ""));
        const QString end =
            p == m_prompts.end()
                ? QString()
                : QString::fromStdString(p->second.value("context_tail", "") + " " + p->second.value("question", ""));
        const QStringList cells{QString::fromStdString(name),
                                QString::number(depth),
                                QString::number(a.value("sample", 0)),
                                expected,
                                QString::fromStdString(a.value("answer", "")),
                                QString::number(a.value("score", 0.0)),
                                end};
        for (int c = 0; c < cells.size(); ++c)
            m_table->setItem(r, c, new QTableWidgetItem(cells[c]));
    }
    m_table->resizeColumnsToContents();
}

} // namespace gsrq::studio
