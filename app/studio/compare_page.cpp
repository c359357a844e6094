#include "compare_page.h"

#include "core/jobs/run_records.h"

#include "compare_controls.h"
#include "core/cluster/weights.h"
#include "core/jobs/pass_curves.h"
#include "core/jobs/result_json.h"
#include "views/chart_panel.h"
#include "views/metrics_table_model.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

namespace gsrq::studio {

ComparePage::ComparePage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx), m_controls(this)
{
    m_tensor = new QComboBox(this);
    m_residual = new QCheckBox(tr("on the 1st residual"), this);
    m_residual->setToolTip(tr("Cluster what a KM pass on each block leaves (the paper's 1st-residual experiment)"));
    m_run = new QPushButton(tr("Run"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);

    auto* form = new QFormLayout();
    form->addRow(tr("Tensor"), m_tensor);
    m_controls.addRows(form);
    form->addRow(QString(), m_residual);
    auto* buttons = new QHBoxLayout();
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    form->addRow(buttons);
    form->addRow(m_progress);
    form->addRow(m_status);

    m_chart = new views::ChartPanel(tr("Convergence"), tr("assignment pass"), tr("nmse"), this);
    m_chart->setIntegerX(true);
    m_chart->setEmptyText(tr("Pick a tensor and press Run: each method's passes are drawn here as they happen."));
    m_curveMetric = new QComboBox(this);
    for (const auto& name : passMetricNames())
        if (name != "objective") // nmse is the objective over Σw‖x‖²: the same curve, comparable across tensors
            m_curveMetric->addItem(QString::fromStdString(name));
    m_curveMetric->setToolTip(tr("The metric of every assignment pass the chart shows"));
    m_model = new views::MetricsTableModel(this);
    m_table = new QTableView(this);
    m_table->setModel(m_model);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_table->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // As tall as its rows (both methods, their difference and its percentage), none hidden behind a
    // scroll bar; the chart takes the rest.
    const auto fitRows = [this] {
        // Rows as tall as the table's font needs (a larger font than the style's default too).
        m_table->resizeRowsToContents();
        const int row = std::max(m_table->verticalHeader()->defaultSectionSize(), m_table->fontMetrics().height() + 8);
        const int rows = m_model->rowCount() >= 4 ? m_table->verticalHeader()->length() : 4 * row;
        m_table->setFixedHeight(m_table->horizontalHeader()->sizeHint().height() + rows + 2 * m_table->frameWidth() +
                                m_table->horizontalScrollBar()->sizeHint().height());
    };
    connect(m_model, &QAbstractItemModel::modelReset, this, fitRows);
    fitRows();

    auto* right = new QVBoxLayout();
    auto* metricBar = new QHBoxLayout();
    metricBar->addWidget(new QLabel(tr("Convergence of"), this));
    metricBar->addWidget(m_curveMetric);
    metricBar->addStretch();
    right->addLayout(metricBar);
    right->addWidget(m_chart, 1);
    right->addWidget(m_table);
    auto* layout = new QHBoxLayout(this);
    auto* formBox = new QWidget(this);
    formBox->setLayout(form);
    formBox->setMaximumWidth(340);
    layout->addWidget(formBox);
    layout->addLayout(right, 1);

    connect(&m_ctx, &StudioContext::dumpChanged, this, &ComparePage::onDumpChanged);
    connect(m_tensor, &QComboBox::currentIndexChanged, this, &ComparePage::onTensorChanged);
    bindTensorBox(m_ctx, m_tensor);
    connect(m_run, &QPushButton::clicked, this, &ComparePage::start);
    connect(m_curveMetric, &QComboBox::currentIndexChanged, this, &ComparePage::drawConvergence);
    connectJobControls(m_ctx, this, &m_job, m_cancel, [this](const QString& text) {
        m_status->setText(text);
        m_run->setEnabled(true);
        m_cancel->setEnabled(false);
        emit runFinished(false);
    });
    onDumpChanged();
}

void ComparePage::onDumpChanged()
{
    const auto dump = m_ctx.dump();
    fillClusterableTensors(m_tensor, dump.get()); // the first tensor's width bounds D
    m_controls.followHeads(dump.get());           // D and K follow the dump's heads
    m_run->setEnabled(bool(dump));
}

QString ComparePage::statusText() const
{
    return m_status->text();
}

void ComparePage::clearResultsOf(const QString& tensor, bool residual)
{
    if (m_resultsTensor.isEmpty() || (tensor == m_resultsTensor && residual == m_resultsResidual))
        return;
    // The chart and the table show another tensor's run: none is better than a wrong one.
    m_resultsTensor.clear();
    m_last.reset();
    m_chart->clear();
    m_model->setTable({}, {}, {});
    m_progress->setValue(0);
    m_status->setText(tr("%1: press Run to compare KM and GSKM on it").arg(tensor));
}

void ComparePage::onTensorChanged()
{
    clearResultsOf(m_tensor->currentText(), m_residual->isChecked());
    const auto dump = m_ctx.dump();
    if (!dump || m_tensor->currentText().isEmpty())
        return;
    const auto* t = dump->find(m_tensor->currentText().toStdString());
    if (!t)
        return;
    m_controls.dim->setMaximum(int(t->view.features()));
    const bool hasGrad = dump->gradientOf(*t) != nullptr;
    m_controls.weights->setEnabled(hasGrad);
    if (!hasGrad)
        m_controls.weights->setCurrentIndex(0);
}

void ComparePage::openTensor(const QString& tensor, bool residual, const CompareSettings& s, const QString& weights)
{
    m_ctx.selectTensor(tensor); // every page follows (this one too)
    m_tensor->setCurrentText(tensor);
    m_controls.set(s, weights);
    m_residual->setChecked(residual);
    clearResultsOf(tensor, residual);
    m_status->setText(tr("%1%2 with the model page's settings: press Run to see both methods converge")
                          .arg(tensor, residual ? tr(" (1st residual)") : QString()));
}

void ComparePage::start()
{
    const auto dump = m_ctx.dump();
    if (!dump || m_tensor->currentText().isEmpty())
        return;
    CompareSettings s = m_controls.settings();
    s.residual = m_residual->isChecked();
    const std::string tensor = m_tensor->currentText().toStdString();
    const WeightMode mode = *weightModeFromName(m_controls.weights->currentText().toStdString());
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();

    m_last.reset();
    m_resultsTensor = m_tensor->currentText();
    m_resultsResidual = m_residual->isChecked();
    m_chart->clear();
    const std::string metric = m_curveMetric->currentText().toStdString();
    m_chart->setTitle(tr("Convergence: %1 of each pass, the block in progress").arg(m_curveMetric->currentText()));
    m_chart->setAxisTitles(tr("assignment pass"), m_curveMetric->currentText());
    m_model->setTable({}, {}, {});
    m_progress->setValue(0);
    m_status->setText(tr("Running…"));
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
    // Per method, the block in progress and its passes so far (GUI thread only).
    auto live = std::make_shared<std::map<std::string, std::pair<int, QList<QPointF>>>>();

    m_job = 0; // the runner cancels whatever runs; that notice is not about this run
    m_job = m_ctx.runner().start(tr("compare %1").arg(m_tensor->currentText()), [=,
                                                                                 this](const JobRunner::Context& job) {
        const auto& t = dump->get(tensor);
        const LoadedTensor data = loadForClustering(t, false);
        validateCompare(s, data.rows.rows(), data.rows.cols());
        WeightSummary ws;
        const Eigen::VectorXf w = weightsFor(*dump, t, data, mode, 1.0, &ws);
        auto backend = gpu::makeBackend(backendRequest).backend;
        RunInfo info = jobRunInfo("compare", *backend, *dump);
        info.settingsJson = compareRunSettings(s, weightModeName(mode), 1.0, false, *backend).dump();
        WorkerRecording rec(storePath, info, tensor, job, &m_ctx, dump->files());
        ProgressBatcher batch(job, [this, live, metric](const std::vector<ProgressEvent>& events) {
            for (const auto& e : events) {
                auto& [block, pts] = (*live)[methodName(e.method)];
                if (block != e.subspace || e.iteration.iteration == 0)
                    pts.clear();
                block = e.subspace;
                pts << QPointF(e.iteration.iteration, passMetric(e.iteration, metric));
                const QString prefix = QString::fromUtf8(methodName(e.method)) + tr(", block ");
                const QString name = prefix + QString::number(e.subspace + 1);
                // One live series per method: the block before this one leaves the chart.
                for (const auto& other : m_chart->seriesNames())
                    if (other.startsWith(prefix) && other != name)
                        m_chart->removeSeries(other);
                m_chart->setSeries(name, pts);
                m_progress->setValue(int(e.fraction * 1000));
                m_status->setText(QString::fromStdString(e.what));
            }
        });
        const auto r = runCompare(data.rows, w.size() ? w.data() : nullptr, s, *backend, [&](const ProgressEvent& e) {
            rec.progress(e);
            return batch.add(e);
        });
        batch.flush();
        if (rec)
            rec->recordCompare(r, tensor);
        rec.finish(r.cancelled ? RunStatus::Cancelled : RunStatus::Done, compareRunSummary(r).dump());
        if (r.cancelled)
            return;
        QStringList rows;
        std::vector<std::vector<double>> values;
        for (const auto& m : r.methods) {
            rows << methodName(m.method);
            values.push_back({m.metrics.mse, m.metrics.nmse, m.metrics.gainError, m.metrics.cosine, m.metrics.shrinkage,
                              double(m.iterations), m.seconds});
        }
        const QString summaryText = tr("D=%1 (%2 blocks), K=%3; recorded as run %4")
                                        .arg(r.dim)
                                        .arg(r.blocks)
                                        .arg(s.k)
                                        .arg(rec ? QString::number(rec->id()) : tr("— (not recorded)"));
        auto result = std::make_shared<const CompareResult>(r);
        job.post([this, rows, values, summaryText, result] {
            // With both methods, GSKM − KM and its percentage below them, coloured by the better.
            m_model->setTableWithDeltas(rows,
                                        {"mse", "nmse", "gain_error", "cosine", "shrinkage", "iterations", "seconds"},
                                        values, int(rows.indexOf("km")), int(rows.indexOf("gskm")));
            m_last = result;
            drawConvergence();
            m_progress->setValue(1000);
            m_status->setText(summaryText);
            m_run->setEnabled(true);
            m_cancel->setEnabled(false);
            emit runFinished(true);
        });
    });
}

void ComparePage::drawConvergence()
{
    if (!m_last)
        return;
    const std::string metric = m_curveMetric->currentText().toStdString();
    m_chart->clear();
    m_chart->setTitle(tr("Convergence: %1 of each pass, mean of %2 blocks (a block that stopped keeps its last value)")
                          .arg(m_curveMetric->currentText())
                          .arg(m_last->blocks));
    m_chart->setAxisTitles(tr("assignment pass"), m_curveMetric->currentText());
    for (const auto& m : m_last->methods) {
        const auto curve = meanPassCurve(m, metric);
        QList<QPointF> pts;
        for (std::size_t i = 0; i < curve.size(); ++i)
            pts << QPointF(double(i), curve[i]);
        m_chart->setSeries(QString::fromUtf8(methodName(m.method)), pts);
    }
    m_chart->flush();
}

} // namespace gsrq::studio
