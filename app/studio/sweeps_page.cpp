#include "sweeps_page.h"

#include "core/jobs/run_records.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/jobs/result_json.h"
#include "views/chart_panel.h"
#include "views/metrics_table_model.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace gsrq::studio {

namespace {

// One line per series of `points`: the metric named against x.
void drawSeries(views::ChartPanel& chart, const std::map<QString, std::vector<std::pair<double, QuantMetrics>>>& points,
                const QString& metric)
{
    for (const auto& [name, pts] : points) {
        QList<QPointF> line;
        for (const auto& [x, m] : pts)
            line << QPointF(x, metricByName(m, metric.toStdString()));
        chart.setSeries(name, line);
    }
    chart.flush();
}

} // namespace

SweepsPage::SweepsPage(StudioContext& ctx, QWidget* parent) : QWidget(parent), m_ctx(ctx)
{
    m_tensor = new QComboBox(this);
    m_axis = new QComboBox(this);
    m_axis->addItems({tr("D (K fixed)"), tr("K (D fixed)")});
    m_values = new QLineEdit("2,4,8,16,32", this);
    m_fixed = new QSpinBox(this);
    m_fixed->setRange(1, 65536);
    m_fixed->setValue(64);
    m_iters = new QSpinBox(this);
    m_iters->setRange(0, 10000);
    m_iters->setValue(25);
    m_residual = new QCheckBox(tr("also on the 1st residual"), this);
    m_residual->setChecked(true);
    m_metric = new QComboBox(this);
    m_metric->addItems({"nmse", "shrinkage", "gain_error", "cosine", "mse"});
    m_run = new QPushButton(tr("Run sweep"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setEnabled(false);
    m_layer = new QSpinBox(this);
    m_layer->setRange(0, 4096);
    m_shrinkKs = new QLineEdit("256,1024", this);
    m_shrinkRun = new QPushButton(tr("Run shrinkage study"), this);
    m_paperRun = new QPushButton(tr("Run paper check"), this);
    m_paperRun->setToolTip(tr("KM vs GSKM over D and K on synthetic i.i.d. Gaussian rows (20,000 × 256), and "
                              "GSKM-RQ against the Shannon bound at 0.375, 0.75 and 1 BPA: about half a minute "
                              "on two cores"));
    m_paperReport = new QTextBrowser(this);
    m_paperReport->setMinimumHeight(160);
    m_paperReport->setFrameShape(QFrame::NoFrame);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);

    auto* form = new QFormLayout();
    form->addRow(tr("Tensor"), m_tensor);
    form->addRow(tr("Vary"), m_axis);
    form->addRow(tr("Values"), m_values);
    form->addRow(tr("Fixed K (or D)"), m_fixed);
    form->addRow(tr("Iterations (max)"), m_iters);
    form->addRow(QString(), m_residual);
    form->addRow(tr("Show"), m_metric);
    auto* buttons = new QHBoxLayout();
    buttons->addWidget(m_run);
    buttons->addWidget(m_cancel);
    form->addRow(buttons);
    auto* shrinkTitle = new QLabel(tr("<b>Shrinkage E‖μ‖²/E‖x‖² vs D</b> (KM, keys and values; D from Values)"), this);
    shrinkTitle->setWordWrap(true);
    form->addRow(shrinkTitle);
    form->addRow(tr("Layer"), m_layer);
    form->addRow(tr("K values"), m_shrinkKs);
    form->addRow(m_shrinkRun);
    auto* paperTitle = new QLabel(tr("<b>Paper check</b> (synthetic Gaussian; no dump needed)"), this);
    paperTitle->setWordWrap(true);
    form->addRow(paperTitle);
    form->addRow(m_paperRun);
    form->addRow(m_progress);
    form->addRow(m_status);
    form->addRow(m_paperReport);

    m_chart = new views::ChartPanel(tr("Sweep"), tr("D"), tr("nmse"), this);
    m_chart->setLogX(true);
    m_shrinkChart = new views::ChartPanel(tr("Shrinkage E‖μ‖²/E‖x‖² (KM)"), tr("D"), tr("shrinkage"), this);
    m_shrinkChart->setLogX(true);
    m_chart->setEmptyText(tr("Choose the values of D or K and press Run: one point per value and method."));
    m_shrinkChart->setEmptyText(tr("Run a sweep over D to see how K-means shrinks as D grows."));
    auto* charts = new QVBoxLayout();
    charts->addWidget(m_chart, 1);
    charts->addWidget(m_shrinkChart, 1);
    auto* formBox = new QWidget(this);
    formBox->setLayout(form);
    formBox->setMaximumWidth(380);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(formBox);
    layout->addLayout(charts, 1);

    connect(&m_ctx, &StudioContext::dumpChanged, this, &SweepsPage::onDumpChanged);
    connect(m_run, &QPushButton::clicked, this, &SweepsPage::startSweep);
    connect(m_shrinkRun, &QPushButton::clicked, this, &SweepsPage::startShrinkage);
    connect(m_paperRun, &QPushButton::clicked, this, &SweepsPage::startPaperCheck);
    connect(m_metric, &QComboBox::currentIndexChanged, this, &SweepsPage::redraw);
    bindTensorBox(m_ctx, m_tensor);
    connectJobControls(m_ctx, this, &m_job, m_cancel, [this](const QString& text) { finishUi(false, text); });
    onDumpChanged();
}

void SweepsPage::onDumpChanged()
{
    const auto dump = m_ctx.dump();
    fillClusterableTensors(m_tensor, dump.get());
    m_run->setEnabled(bool(dump));
    m_shrinkRun->setEnabled(bool(dump));
}

void SweepsPage::finishUi(bool ok, const QString& text)
{
    m_status->setText(text);
    m_run->setEnabled(bool(m_ctx.dump()));
    m_shrinkRun->setEnabled(bool(m_ctx.dump()));
    m_paperRun->setEnabled(true);
    m_cancel->setEnabled(false);
    if (ok)
        m_progress->setValue(1000);
    emit runFinished(ok);
}

void SweepsPage::setRunning(const QString& status)
{
    m_progress->setValue(0);
    m_status->setText(status);
    m_run->setEnabled(false);
    m_shrinkRun->setEnabled(false);
    m_paperRun->setEnabled(false);
    m_cancel->setEnabled(true);
    m_job = 0;
}

void SweepsPage::redraw()
{
    const QString metric = m_metric->currentText();
    const QString axis = m_paperK.empty() ? (m_axis->currentIndex() == 0 ? "D" : "K") : "D";
    m_chart->clear();
    m_chart->view()->chart()->setTitle(
        m_paperK.empty()
            ? tr("%1 vs %2").arg(metric, axis)
            : tr("Paper check: %1 vs D (K = %2, synthetic Gaussian)").arg(metric).arg(m_paperSettings.fixedK));
    m_chart->setAxisTitles(axis, metric);
    drawSeries(*m_chart, m_points, metric);
    if (m_paperK.empty())
        return;
    m_shrinkChart->clear();
    m_shrinkChart->view()->chart()->setTitle(
        tr("Paper check: %1 vs K (D = %2, synthetic Gaussian)").arg(metric).arg(m_paperSettings.fixedDim));
    m_shrinkChart->setAxisTitles("K", metric);
    drawSeries(*m_shrinkChart, m_paperK, metric);
}

void SweepsPage::startSweep()
{
    const auto dump = m_ctx.dump();
    if (!dump)
        return;
    std::vector<int> values;
    try {
        values = parseIntList("Values", m_values->text().toStdString(), 1);
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        return;
    }
    const bool overDim = m_axis->currentIndex() == 0;
    CompareSettings base;
    base.iterations = m_iters->value();
    (overDim ? base.k : base.dim) = m_fixed->value();
    const bool residual = m_residual->isChecked();
    const std::string tensor = m_tensor->currentText().toStdString();
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    m_points.clear();
    m_paperK.clear();
    redraw();
    setRunning(tr("Running…"));
    m_job = m_ctx.runner().start(tr("sweep"), [=, this](const JobRunner::Context& job) {
        const LoadedTensor data = loadForClustering(dump->get(tensor), false);
        auto backend = gpu::makeBackend(backendRequest).backend;
        const int passes = residual ? 2 : 1;
        for (int pass = 0; pass < passes && !job.cancelled(); ++pass) {
            CompareSettings s = base;
            s.residual = pass == 1;
            RunInfo info = jobRunInfo("sweep", *backend, *dump);
            const SweepAxis axis = overDim ? SweepAxis::Dim : SweepAxis::K;
            info.settingsJson =
                sweepRunSettings(s, weightModeName(WeightMode::None), 1.0, false, *backend, axis, values).dump();
            WorkerRecording rec(storePath, info, tensor, job, &m_ctx, dump->files());
            ProgressBatcher batch(job, [this, pass, passes](const std::vector<ProgressEvent>& events) {
                m_progress->setValue(int((pass + events.back().fraction) / passes * 1000));
                m_status->setText(QString::fromStdString(events.back().what));
            });
            const auto points = runSweep(
                data.rows, nullptr, s, axis, values, *backend,
                [&](const ProgressEvent& e) {
                    rec.progress(e);
                    return batch.add(e);
                },
                [&](const SweepPoint& p) {
                    batch.flush();
                    std::vector<std::pair<QString, QuantMetrics>> add;
                    for (const auto& m : p.result.methods)
                        add.push_back({QString(methodName(m.method)) + (s.residual ? tr(" (1st residual)") : QString()),
                                       m.metrics});
                    job.post([this, add, x = double(p.value)] {
                        for (const auto& [name, m] : add)
                            m_points[name].push_back({x, m});
                        redraw();
                    });
                });
            batch.flush();
            if (rec)
                rec->recordSweep(points, overDim ? "dim" : "k", tensor);
            const bool cut = points.size() < values.size() || (!points.empty() && points.back().result.cancelled);
            rec.finish(cut ? RunStatus::Cancelled : RunStatus::Done);
        }
        if (!job.cancelled())
            job.post([this] { finishUi(true, tr("Done; recorded in the run store.")); });
    });
}

void SweepsPage::startShrinkage()
{
    const auto dump = m_ctx.dump();
    if (!dump)
        return;
    std::vector<int> dims, ks;
    try {
        dims = parseIntList("Values", m_values->text().toStdString(), 1);
        ks = parseIntList("K values", m_shrinkKs->text().toStdString(), 1);
    } catch (const std::exception& e) {
        m_ctx.showMessage(QString::fromUtf8(e.what()));
        return;
    }
    const int layer = m_layer->value();
    const int iterations = m_iters->value();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    m_paperK.clear();
    m_shrinkChart->clear();
    m_shrinkChart->view()->chart()->setTitle(tr("Shrinkage E‖μ‖²/E‖x‖² (KM)"));
    m_shrinkChart->setAxisTitles("D", "shrinkage");
    setRunning(tr("Running the shrinkage study…"));
    m_job = m_ctx.runner().start(tr("shrinkage study"), [=, this](const JobRunner::Context& job) {
        auto backend = gpu::makeBackend(backendRequest).backend;
        const std::vector<std::string> kinds{"key", "value"};
        const double total = double(kinds.size() * ks.size() * dims.size());
        double done = 0;
        for (const auto& kind : kinds) {
            const auto& t = dump->get(cat("layers.", layer, ".", kind));
            const LoadedTensor data = loadForClustering(t, false);
            for (int k : ks) {
                const QString name = QStringLiteral("%1s, K=%2").arg(QString::fromStdString(kind)).arg(k);
                for (int d : dims) {
                    if (job.cancelled())
                        return;
                    if (data.rows.cols() % d != 0 || k > data.rows.rows()) {
                        done += 1;
                        continue; // not every D divides every tensor; those points are left out
                    }
                    CompareSettings s;
                    s.dim = d;
                    s.k = k;
                    s.iterations = iterations;
                    s.methods = {Method::KMeans};
                    const auto r = runCompare(data.rows, nullptr, s, *backend,
                                              [&](const ProgressEvent&) { return !job.cancelled(); });
                    if (r.cancelled)
                        return;
                    done += 1;
                    job.post([this, name, d, v = r.methods.front().metrics.shrinkage, f = done / total] {
                        m_shrinkChart->appendPoint(name, QPointF(d, v));
                        m_progress->setValue(int(f * 1000));
                    });
                }
            }
        }
        job.post([this] {
            m_shrinkChart->flush();
            finishUi(true, tr("Shrinkage study done."));
        });
    });
}

void SweepsPage::startPaperCheck()
{
    const QString storePath = m_ctx.storePath();
    const gpu::BackendRequest backendRequest = m_ctx.backendRequest();
    const PaperCheckSettings settings = m_paperSettings;
    m_points.clear();
    m_paperK.clear();
    m_chart->clear();
    m_shrinkChart->clear();
    m_paperReport->clear();
    setRunning(tr("Running the paper check…"));
    m_job = m_ctx.runner().start(tr("paper check"), [=, this](const JobRunner::Context& job) {
        auto backend = gpu::makeBackend(backendRequest).backend;
        RunInfo info;
        info.kind = "paper-check";
        info.backend = backend->name();
        info.device = backend->device();
        info.settingsJson = paperCheckRunSettings(settings, *backend).dump();
        WorkerRecording rec(storePath, info, "synthetic gaussian", job, &m_ctx, {});
        ProgressBatcher batch(job, [this](const std::vector<ProgressEvent>& events) {
            m_progress->setValue(int(events.back().fraction * 1000));
            m_status->setText(QString::fromStdString(events.back().what));
        });
        const auto r = runPaperCheck(settings, *backend, [&](const ProgressEvent& e) {
            rec.progress(e);
            return batch.add(e);
        });
        batch.flush();
        if (rec)
            rec->recordPaperCheck(r);
        rec.finish(r.cancelled ? RunStatus::Cancelled : RunStatus::Done, paperCheckSummary(r).dump());
        if (!r.cancelled)
            job.post([this, r] {
                showPaperCheck(r);
                finishUi(true, tr("Paper check done; recorded in the run store."));
            });
    });
}

void SweepsPage::showPaperCheck(const PaperCheckResult& r)
{
    m_points.clear();
    m_paperK.clear();
    for (const auto& p : r.dimSweep)
        for (const auto& m : p.result.methods)
            m_points[QString(methodName(m.method))].push_back({double(p.value), m.metrics});
    for (const auto& p : r.kSweep)
        for (const auto& m : p.result.methods)
            m_paperK[QString(methodName(m.method))].push_back({double(p.value), m.metrics});
    if (m_metric->currentText() == "cosine")
        redraw();
    else
        m_metric->setCurrentText("cosine"); // the paper's headline metric; redraws
    QString html = tr("<b>The paper's claims: %1 of %2 hold</b><br>").arg(claimsHolding(r)).arg(r.claims.size());
    for (const auto& c : r.claims)
        html +=
            QStringLiteral("<span style='color:%1'>%2</span> %3<br><small>%4</small><br>")
                .arg(c.holds ? "#1b7f3b" : "#b3261e", c.holds ? tr("✔ holds") : tr("✘ does not hold"),
                     QString::fromStdString(c.text).toHtmlEscaped(), QString::fromStdString(c.detail).toHtmlEscaped());
    if (!r.rq.empty()) {
        html += tr("<br><b>Held-out NMSE vs the Shannon bound</b><table cellspacing=4>"
                   "<tr><th>BPA</th><th>bound</th><th>KM-RQ</th><th>GSKM-RQ</th><th>Δ% GSKM − KM</th>"
                   "<th>÷ bound</th><th>GSKM beam</th><th>÷ bound</th><th>refined</th><th>÷ bound</th></tr>");
        for (const auto& p : r.rq) {
            // GSKM-RQ's change against KM-RQ, in the colour of the method with the lower NMSE.
            const int better = betterOf("nmse", p.kmHeldOut, p.gskmHeldOut);
            const QString colour = better ? views::MetricsTableModel::methodColor(better).name() : QString("#000000");
            html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td>"
                                   "<td style='color:%5'>%6%7%</td><td>%8×</td><td>%9</td><td>%10×</td><td>%11</td>"
                                   "<td>%12×</td></tr>")
                        .arg(p.bpa)
                        .arg(p.shannon, 0, 'f', 3)
                        .arg(p.kmHeldOut, 0, 'f', 3)
                        .arg(p.gskmHeldOut, 0, 'f', 3)
                        .arg(colour)
                        .arg(p.gskmHeldOut >= p.kmHeldOut ? "+" : "")
                        .arg(100 * (p.gskmHeldOut - p.kmHeldOut) / p.kmHeldOut, 0, 'f', 2)
                        .arg(p.gskmHeldOut / p.shannon, 0, 'f', 2)
                        .arg(p.gskmBeamHeldOut, 0, 'f', 3)
                        .arg(p.gskmBeamHeldOut / p.shannon, 0, 'f', 2)
                        .arg(p.gskmRefinedHeldOut, 0, 'f', 3)
                        .arg(p.gskmRefinedHeldOut / p.shannon, 0, 'f', 2);
        }
        html += QStringLiteral("</table>");
    }
    m_paperReport->setHtml(html);
}

} // namespace gsrq::studio
