// The desktop app on the offscreen platform with the Fusion style: real widgets and controllers,
// waiting on their signals, checking chart series and table models.

#include "compare_page.h"
#include "core/base/error.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/nearest_kernels.h"
#include "core/decode/decode_bench.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "core/io/synth.h"
#include "core/jobs/run_records.h"
#include "dataset_page.h"
#include "gpu/decode/decode.h"
#include "gpu_test_util.h"
#include "latency_page.h"
#include "long_context_page.h"
#include "main_window.h"
#include "model_page.h"
#include "runs_page.h"
#include "sweeps_page.h"
#include "test_util.h"
#include "train_page.h"
#include "views/chart_panel.h"
#include "views/heatmap_view.h"
#include "views/metrics_table_model.h"
#include "views/runs_table_model.h"
#include "weights_page.h"

#include <QAbstractItemModelTester>
#include <QAbstractTextDocumentLayout>
#include <QApplication>
#include <QAreaSeries>
#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QElapsedTimer>
#include <QGuiApplication>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineEdit>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QScreen>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableView>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTextDocument>
#include <QTextTable>
#include <QTimer>
#include <QTreeWidget>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <optional>
#include <random>
#include <set>
#include <thread>

using namespace gsrq;
using namespace gsrq::studio;

namespace {
const QString kSample = QStringLiteral(GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors");

// A synthetic dump of `layers` layers: key-like keys (and, with `values`, Gaussian values), each
// rows × features from a seed of its own.
void writeSyntheticModel(const QString& path, int layers, std::int64_t rows, int features, bool values)
{
    std::vector<TensorBlob> blobs;
    for (int l = 0; l < layers; ++l) {
        blobs.push_back(makeFloatBlob(cat("layers.", l, ".key"), synthesize(SynthKind::KvLike, rows, features, 100 + l),
                                      DType::F32));
        if (values)
            blobs.push_back(makeFloatBlob(cat("layers.", l, ".value"),
                                          synthesize(SynthKind::Gaussian, rows, features, 200 + l), DType::F32));
    }
    writeSafetensors(path.toStdString(), blobs, {{"synthetic", values ? "kv keys, gaussian values" : "kv keys"}});
}
// The tables of a document laid out for print: how many, and where a cell takes more than one line
// or a table reaches past `textWidth` (what it says is empty when neither happens).
QString tablesThatBreak(QTextDocument& doc, double textWidth, int* tables)
{
    QString problems;
    std::function<void(QTextFrame*)> visit = [&](QTextFrame* frame) {
        for (QTextFrame* child : frame->childFrames()) {
            if (auto* t = qobject_cast<QTextTable*>(child)) {
                ++*tables;
                const QRectF box = doc.documentLayout()->frameBoundingRect(t);
                if (box.right() > textWidth + doc.documentMargin() + 0.5)
                    problems += QStringLiteral("table %1 ends at %2 of %3 pixels; ")
                                    .arg(*tables)
                                    .arg(box.right())
                                    .arg(textWidth + doc.documentMargin());
                for (int r = 0; r < t->rows(); ++r)
                    for (int c = 0; c < t->columns(); ++c) {
                        const QTextBlock b = t->cellAt(r, c).firstCursorPosition().block();
                        if (b.layout() && b.layout()->lineCount() > 1)
                            problems += QStringLiteral("table %1 cell (%2, %3) \"%4\" wraps; ")
                                            .arg(*tables)
                                            .arg(r)
                                            .arg(c)
                                            .arg(b.text());
                    }
            }
            visit(child);
        }
    };
    doc.documentLayout()->documentSize(); // lays the document out
    visit(doc.rootFrame());
    return problems;
}
} // namespace

class TestStudio : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void jobRunnerDropsSupersededResults();
    void openSampleShowsTensorsAndStats();
    void malformedFileLeavesWindowUsable();
    void compareDrawsBothMethods();
    void cancelledTrainingKeepsTheFinishedOne();
    void metricNumbersReadable();
    void deltaRowsSignsAndColours();
    void heatmapColoursDivergeFromZero();
    void modelPageOnSixteenLayers();
    void pdfReportFitsItsPages();
    void oneSelectionAcrossPages();
    void modelPageCancelsAndRunsOnTheSample();
    void reportIsOneSelfContainedFile();
    void firstWindowFillsTheScreenThenRemembers();
    void trainFillsTableAndExports();
    void trainPresetsFollowTheDumpsHeadDim();
    void trainRefinesAndDrawsEachRound();
    void perplexityOfTrainedCodebooks();
    void compareMethodsOnTheModel();
    void compareMethodsOnAGgufModel();
    void cancelMidTraining();
    void runsPageListsAndOverlays();
    void runsPageImportsStoresAndGroupsThem();
    void unusableStoreIsADialog();
    void chartsExportPngSvgCsv();
    void logAxesKeepTheEndPointsInside();
    void seriesWithErrorBarsKeepTheirColours();
    void histogramsAreBars();
    void legendNamesWrapWhereTheyDoNotFit();
    void badSettingIsAMessage();
    void screenshotModeRendersAPage();
    void recentFilesPersist();
    void sweepOverDimWithResidual();
    void paperCheckDrawsBothSweepsAndJudgesTheClaims();
    void shrinkageStudyOfKeysAndValues();
    void weightsFollowTau();
    void latencyPageSaysHowToMeasure();
    void latencyPageShowsStoredRuns();
    void latencyFrontierPrefersMeasuredPoints();
    void latencyRunFillsTheChartOnTheCpu();
    void latencyRunFillsTheChartOnAGpu();
    void latencyPageDecodesARealModel();
    void perplexityModelFollowsTheDump();
    void failedRunRecordsTheEnginesMessage();
    void nestedSettingsDifferKeyByKey();
    void eachRunKindRecordsTheSameSettingsFromBothFaces();
    void longContextPageRunsTheTasks();
    void preferencesKeepTheSavedStore();
    void trainingKeysAfterRope();
    void methodComparisonShowsProgressAndCancels();

private:
    // The GSRQ page's small training of the sample's layers.1.value (D = 8, R = 2, K = 16), run from
    // its button; whether it finished.
    bool trainSmall()
    {
        auto* page = m_window->trainPage();
        m_window->showPage("train");
        page->tensorsEdit()->setText("layers.1.value");
        page->dimBox()->setValue(8);
        page->stagesBox()->setValue(2);
        page->kBox()->setValue(16);
        QSignalSpy done(page, &TrainPage::runFinished);
        QTest::mouseClick(page->runButton(), Qt::LeftButton);
        return done.wait(test::waitMs(30000)) && done.first().first().toBool();
    }
    // KM vs GSKM on the sample's layers.1.value (D = 16, K = 16, 5 iterations), run from its button;
    // whether it finished in time.
    bool compareSmall()
    {
        auto* compare = m_window->comparePage();
        m_window->showPage("compare");
        compare->tensorBox()->setCurrentText("layers.1.value");
        compare->dimBox()->setValue(16);
        compare->kBox()->setValue(16);
        compare->itersBox()->setValue(5);
        QSignalSpy done(compare, &ComparePage::runFinished);
        QTest::mouseClick(compare->runButton(), Qt::LeftButton);
        return done.wait(test::waitMs(30000));
    }
    // Whether the newest run of `kind` in the window's store has `status` (*seen: what it has).
    bool latestRunIs(const char* kind, const char* status, std::string* seen)
    {
        RunStore store(m_store.toStdString());
        const auto runs = store.listRuns({kind, std::nullopt, "", 1});
        *seen = runs.empty() ? cat("no ", kind, " run")
                             : cat("run ", runs.front().id, " ", runStatusName(runs.front().status));
        return !runs.empty() && runStatusName(runs.front().status) == std::string_view(status);
    }

    QTemporaryDir m_dir;
    QString m_store;
    std::unique_ptr<MainWindow> m_window;
};

void TestStudio::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true); // QSettings and paths away from the user's
    QSettings().clear();                      // and from an earlier run's (pages restore what it saved)
    QApplication::setStyle("Fusion");
    m_store = m_dir.filePath("runs.db");
    m_window = std::make_unique<MainWindow>(m_store);
    m_window->resize(1200, 800);
    m_window->show();
}

void TestStudio::jobRunnerDropsSupersededResults()
{
    JobRunner runner;
    int delivered = 0;
    QSignalSpy cancelled(&runner, &JobRunner::cancelled);
    QSignalSpy finished(&runner, &JobRunner::finished);
    runner.start("slow", [&](const JobRunner::Context& job) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        job.post([&] { delivered += 100; }); // superseded by then: must not arrive
    });
    const int second = runner.start("fast", [&](const JobRunner::Context& job) { job.post([&] { delivered += 1; }); });
    QVERIFY(finished.wait(test::waitMs(5000)));
    QCOMPARE(finished.first().first().toInt(), second);
    QCOMPARE(cancelled.size(), 1);
    QTest::qWait(400); // the slow job has posted by now
    QCOMPARE(delivered, 1);
}

void TestStudio::openSampleShowsTensorsAndStats()
{
    QVERIFY(m_window->openDump(kSample));
    auto* page = m_window->datasetPage();
    QCOMPARE(page->tree()->topLevelItemCount(), 6); // "other" and five layers
    // With a dump open and no tensor picked yet, the charts say what to do next, not "Open a dump".
    QVERIFY2(page->normChart()->emptyText().startsWith("Pick a tensor"), qPrintable(page->normChart()->emptyText()));
    QSignalSpy ready(page, &DatasetPage::statsReady);
    page->selectTensor("layers.2.key");
    QVERIFY(ready.wait(test::waitMs(10000)));
    page->normChart()->flush();
    page->channelChart()->flush();
    QCOMPARE(page->normChart()->points("layers.2.key").size(), 60);    // 60 histogram bins
    QCOMPARE(page->channelChart()->points("layers.2.key").size(), 32); // one RMS per channel
    double rows = 0;
    for (const auto& p : page->normChart()->points("layers.2.key"))
        rows += p.y();
    QCOMPARE(rows, 2048.0); // every row lands in a bin
    QVERIFY(page->statsText().contains("0 rows with NaN/Inf"));
}

void TestStudio::malformedFileLeavesWindowUsable()
{
    const QString bad = m_dir.filePath("broken.safetensors");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("\x10\x00\x00\x00\x00\x00\x00\x00{not json", 17);
    f.close();
    QSignalSpy shown(m_window.get(), &MainWindow::messageShown);
    QVERIFY(!m_window->openDump(bad));
    QCOMPARE(shown.size(), 1);
    QVERIFY(shown.first().first().toString().contains("broken.safetensors"));
    QVERIFY(shown.first().at(1).toBool()); // shown as an error
    QVERIFY(m_window->context().dump());   // the sample stays open
    QVERIFY(m_window->comparePage()->runButton()->isEnabled());
}

void TestStudio::compareDrawsBothMethods()
{
    auto* page = m_window->comparePage();
    m_window->showPage("compare");
    page->tensorBox()->setCurrentText("layers.2.value");
    page->dimBox()->setValue(16);
    page->kBox()->setValue(32);
    page->itersBox()->setValue(20);
    // A larger font than the style's (a user's system font): the table still shows every row.
    QFont font = page->resultsTable()->font();
    font.setPointSizeF(font.pointSizeF() * 2);
    page->resultsTable()->setFont(font);
    QSignalSpy done(page, &ComparePage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(30000)));
    QVERIFY(done.first().first().toBool());
    auto* chart = page->convergenceChart();
    chart->flush();
    QVERIFY(!chart->emptyTextShown());
    // One curve per method, the mean of the 2 blocks pass by pass (not the blocks end to end).
    QCOMPARE(chart->seriesNames(), QStringList({"km", "gskm"}));
    auto* model = page->resultsModel();
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model->rowCount(), 4); // km, gskm, then GSKM − KM and its percentage
    // Every row in view: nothing to scroll to.
    page->resultsTable()->verticalHeader()->resizeSections(QHeaderView::ResizeToContents);
    QCoreApplication::processEvents();
    QCOMPARE(page->resultsTable()->verticalScrollBar()->maximum(), 0);
    QCOMPARE(model->headerData(2, Qt::Vertical).toString(), QString("Δ gskm − km"));
    QCOMPARE(model->headerData(1, Qt::Horizontal).toString(), QString("nmse"));
    QCOMPARE(model->headerData(3, Qt::Horizontal).toString(), QString("cosine"));
    for (int c = 0; c < 5; ++c) // the deltas are those of the two rows above
        QCOMPARE(model->value(2, c), model->value(1, c) - model->value(0, c));
    for (int r = 0; r < 2; ++r) {
        QVERIFY(model->value(r, 1) > 0 && model->value(r, 1) < 1);
        const auto pts = chart->points(r == 0 ? "km" : "gskm");
        QVERIFY(pts.size() >= 2);
        QCOMPARE(pts.front().x(), 0.0);
        // The last pass's centroids are the final ones: the curve ends at the table's mean over
        // blocks (unweighted here; 1e-4 covers the float score the pass derives its error from).
        QVERIFY(std::abs(pts.back().y() - model->value(r, 1)) <= 1e-4 * model->value(r, 1));
    }
    page->convergenceMetricBox()->setCurrentText("cosine");
    chart->flush();
    for (int r = 0; r < 2; ++r) {
        const auto pts = chart->points(r == 0 ? "km" : "gskm");
        QVERIFY(pts.back().y() > 0 && pts.back().y() <= 1);
        QVERIFY(std::abs(pts.back().y() - model->value(r, 3)) <= 1e-5);
    }
    // The share of the distance work exact bounds skipped, pass by pass: none on the first pass (no
    // bounds yet), then most as the clusters settle. Only the CPU backend keeps bounds, with its
    // vector kernels; on a CUDA device (or the emulator's) the app's auto backend scores everything.
    page->convergenceMetricBox()->setCurrentText("skipped");
    chart->flush();
    const bool bounds = gpu::queryDevices().devices.empty() && nearest::bestNearest().width > 0;
    for (int r = 0; r < 2; ++r) {
        const auto pts = chart->points(r == 0 ? "km" : "gskm");
        QCOMPARE(pts.front().y(), 0.0);
        double most = 0;
        for (const auto& p : pts) {
            QVERIFY(p.y() >= 0 && p.y() < 1);
            most = std::max(most, p.y());
        }
        if (bounds) // measured: 0.91 (KM) and 0.81 (GSKM) at their best pass
            QVERIFY(most > 0.25);
        else
            QCOMPARE(most, 0.0);
    }
    page->convergenceMetricBox()->setCurrentText("nmse");
    // Another tensor opened (as the model page's cell opens it) or picked: the chart and the table no
    // longer show layers.2.value's results under its name; the same tensor keeps them.
    page->openTensor("layers.2.value", false, CompareSettings{}, "none");
    QCOMPARE(model->rowCount(), 4);
    page->openTensor("layers.1.value", false, CompareSettings{}, "none");
    chart->flush();
    QCOMPARE(model->rowCount(), 0);
    QVERIFY(chart->seriesNames().isEmpty());
    QVERIFY(page->statusText().contains("layers.1.value"));
    page->tensorBox()->setCurrentText("layers.2.value");
    page->dimBox()->setValue(16);
    page->kBox()->setValue(32);
    page->itersBox()->setValue(20);
    page->runButton()->click();
    QVERIFY(done.wait(test::waitMs(30000)));
    QCOMPARE(model->rowCount(), 4);
    page->tensorBox()->setCurrentText("layers.1.key");
    QCOMPARE(model->rowCount(), 0);
}

void TestStudio::metricNumbersReadable()
{
    QCOMPARE(views::formatMetric(0.000507339), QString("0.0005073"));
    QCOMPARE(views::formatMetric(0.214814), QString("0.2148"));
    QCOMPARE(views::formatMetric(26), QString("26"));
    QCOMPARE(views::formatMetric(32768), QString("32768"));
    QCOMPARE(views::formatMetric(0.999923), QString("0.9999230")); // 1 − v = 7.70e-5: three digits
    QCOMPARE(views::formatMetric(0.93), QString("0.9300"));
    QCOMPARE(views::formatMetric(std::nan("")), QString("—"));
    views::MetricsTableModel model;
    model.setTable({"km"}, {"nmse"}, {{0.000507339}});
    QCOMPARE(model.data(model.index(0, 0)).toString(), QString("0.0005073"));
    QCOMPARE(model.data(model.index(0, 0), Qt::UserRole).toDouble(), 0.000507339); // full precision kept
}

// The Δ rows on a case where the better method is known for every column: GSKM's lower nmse,
// KM's higher cosine, GSKM's shrinkage nearer 1 although larger, equal gain error, iterations with
// no better direction. Each delta cell's sign is b − a and its colour that of the better method.
void TestStudio::deltaRowsSignsAndColours()
{
    views::MetricsTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setTableWithDeltas({"km", "gskm"}, {"nmse", "cosine", "shrinkage", "gain_error", "iterations"},
                             {{0.20, 0.95, 0.80, 0.5, 12}, {0.10, 0.90, 1.10, 0.5, 20}}, 0, 1);
    QCOMPARE(model.rowCount(), 4);
    QCOMPARE(model.headerData(2, Qt::Vertical).toString(), QString("Δ gskm − km"));
    QCOMPARE(model.headerData(3, Qt::Vertical).toString(), QString("Δ%"));
    const auto text = [&](int r, int c) { return model.data(model.index(r, c)).toString(); };
    QCOMPARE(text(2, 0), QString("-0.1")); // nmse: 0.10 − 0.20
    QCOMPARE(text(3, 0), QString("-50.00%"));
    QCOMPARE(text(2, 2), QString("+0.3"));    // shrinkage 1.10 − 0.80
    QCOMPARE(text(3, 4), QString("+66.67%")); // iterations 20 against 12
    const QColor km = views::MetricsTableModel::methodColor(-1), gskm = views::MetricsTableModel::methodColor(1);
    QVERIFY(km != gskm && km.isValid() && gskm.isValid());
    const auto colour = [&](int r, int c) { return model.data(model.index(r, c), Qt::ForegroundRole); };
    for (int r : {2, 3}) {
        QCOMPARE(model.betterAt(r, 0), std::optional<int>(1));
        QCOMPARE(colour(r, 0).value<QColor>(), gskm); // lower nmse
        QCOMPARE(colour(r, 1).value<QColor>(), km);   // higher cosine
        QCOMPARE(colour(r, 2).value<QColor>(), gskm); // |1 − 1.10| < |1 − 0.80|
        QVERIFY(!colour(r, 3).isValid());             // a tie: no colour
        QVERIFY(!colour(r, 4).isValid());             // iterations: neither is better
    }
    QVERIFY(model.data(model.index(2, 1), Qt::ToolTipRole).toString().startsWith("km is better: higher cosine"));
    QCOMPARE(model.betterAt(0, 0), std::nullopt); // not a delta cell
    QVERIFY(!model.data(model.index(0, 0), Qt::ForegroundRole).isValid());
    // Without both rows there is nothing to subtract.
    model.setTableWithDeltas({"km"}, {"nmse"}, {{0.2}}, 0, -1);
    QCOMPARE(model.rowCount(), 1);
}

// A diverging scale: the most negative score in full negative colour, zero white, half the largest
// positive score halfway from white to the positive colour; a missing cell grey.
void TestStudio::heatmapColoursDivergeFromZero()
{
    views::HeatmapView map("t");
    const QColor neg(0x1f, 0x77, 0xb4), pos(0xd9, 0x5f, 0x02);
    map.setScale(neg, pos, "a", "b", "%");
    map.setGrid({"0", "1"}, {"x", "y"}, {{-4, "", ""}, {0, "", ""}, {2, "", ""}});
    QCOMPARE(map.scaleMax(), 4.0);
    QCOMPARE(map.colorAt(0, 0), neg);
    QCOMPARE(map.colorAt(0, 1), QColor(Qt::white));
    const QColor half = map.colorAt(1, 0);
    // Halfway, within one 8-bit step of rounding.
    QVERIFY(std::abs(half.red() - (255 + pos.red()) / 2) <= 1 && std::abs(half.blue() - (255 + pos.blue()) / 2) <= 1);
    QVERIFY(!std::isfinite(map.cell(1, 1).score)); // never set
    QCOMPARE(map.colorAt(1, 1), QColor(0xdd, 0xdd, 0xdd));
}

// A synthetic 16-layer dump (key-like keys, Gaussian values): the model page fills one cell per
// layer and tensor on each metric's map, coloured by the method the numbers say is better, records
// one run with every tensor's metrics, and a click opens that tensor on the KM vs GSKM page.
void TestStudio::modelPageOnSixteenLayers()
{
    const QString path = m_dir.filePath("sixteen.safetensors");
    writeSyntheticModel(path, 16, 512, 16, true);
    QVERIFY(m_window->openDump(path));
    auto* page = m_window->modelPage();
    m_window->showPage("model");
    page->dimBox()->setValue(8);
    page->kBox()->setValue(8);
    page->itersBox()->setValue(8);
    page->residualsBox()->setChecked(false);
    QSignalSpy done(page, &ModelPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(60000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(page->statusLabel()->text()));
    QCOMPARE(page->cells().size(), size_t(32));
    QCOMPARE(page->progressBar()->value(), 1000);
    for (const auto& metric : ModelPage::metrics()) {
        auto* map = page->heatmap(metric);
        QVERIFY(map);
        QCOMPARE(map->rowCount(), 16);
        QCOMPARE(map->columnCount(), 2);
        for (const auto& cell : page->cells()) {
            const int r = cell.target.layer, c = cell.target.kind == KvKind::Key ? 0 : 1;
            const auto& km = cell.result.find(Method::KMeans)->metrics;
            const auto& gs = cell.result.find(Method::GainShape)->metrics;
            const double a = metricByName(km, metric.toStdString()), b = metricByName(gs, metric.toStdString());
            const int better = betterOf(metric.toStdString(), a, b);
            const auto& shown = map->cell(r, c);
            // The score's sign is the better method; its size the relative change in percent.
            QCOMPARE(shown.score > 0 ? 1 : shown.score < 0 ? -1 : 0, better);
            QVERIFY(std::abs(std::abs(shown.score) - 100 * std::abs(b - a) / std::abs(a)) <=
                    1e-9 * std::max(1.0, std::abs(shown.score)));
            // Orange has more red than blue, blue the reverse; a cell under a tenth of the map's
            // largest change is too near white for 8-bit channels to tell.
            const QColor fill = map->colorAt(r, c);
            if (better != 0 && std::abs(shown.score) >= 0.1 * map->scaleMax())
                QVERIFY(better > 0 ? fill.red() > fill.blue() : fill.blue() > fill.red());
            QVERIFY(shown.tooltip.contains(QString::fromStdString(cell.target.tensor)));
            QVERIFY(shown.tooltip.contains(views::formatMetric(a)));
        }
    }
    QVERIFY(page->summaryText().contains("nmse: GSKM better on"));
    // Recorded: one compare run with the metrics of all 32 tensors.
    QVERIFY(page->lastRunId() > 0);
    {
        RunStore store(m_store.toStdString());
        const auto run = store.requireRun(page->lastRunId());
        QCOMPARE(run.status, RunStatus::Done);
        QCOMPARE(QString::fromStdString(run.kind), QString("compare"));
        QVERIFY(QString::fromStdString(run.settingsJson).contains("\"tensors\":\"layers.*.*\""));
        std::set<std::string> tensors;
        for (const auto& m : store.metrics(run.id))
            if (m.scope == "final")
                tensors.insert(m.tensor);
        QCOMPARE(tensors.size(), size_t(32));
    }
    // A click on layer 3's value opens it on the KM vs GSKM page with the same settings.
    auto* map = page->heatmap("nmse");
    QTest::mouseClick(map, Qt::LeftButton, {}, map->cellRect(3, 1).center());
    auto* compare = m_window->comparePage();
    QCOMPARE(m_window->findChild<QTabWidget*>()->currentWidget(), static_cast<QWidget*>(compare));
    QCOMPARE(compare->tensorBox()->currentText(), QString("layers.3.value"));
    QCOMPARE(compare->dimBox()->value(), 8);
    QCOMPARE(compare->kBox()->value(), 8);
    QCOMPARE(compare->itersBox()->value(), 8);
    QVERIFY(!compare->residualBox()->isChecked());
}

// The PDF report of the 16-layer model (the previous test's): no cell of its tables wraps and every
// table fits the page's text width, in the printed document's own layout; then each page of the
// written PDF, rendered by pdftoppm at 50 dpi, has no ink in its right margin (20 points, 14 pixels:
// the 8 outermost are checked). A table too wide even for landscape is split into column groups
// that each fit, every column in one of them.
void TestStudio::pdfReportFitsItsPages()
{
    m_window->showPage("model");
    QCOMPARE(m_window->modelPage()->cells().size(), size_t(32));
    {
        const Report report = m_window->buildReport();
        QTextDocument doc;
        const auto layout = report.pdfLayout(doc);
        // The model table's 12 columns of numbers are wider than portrait A4's text.
        QCOMPARE(layout.orientation, QPageLayout::Landscape);
        int tables = 0;
        const QString problems = tablesThatBreak(doc, layout.textWidth, &tables);
        QVERIFY2(problems.isEmpty(), qPrintable(problems));
        QVERIFY(tables >= 1);
        QVERIFY(doc.toPlainText().contains("layers.15.value"));
    }
    {
        QStandardItemModel wide(3, 40);
        for (int c = 0; c < 40; ++c) {
            wide.setHeaderData(c, Qt::Horizontal, QStringLiteral("gain_error gskm %1").arg(c));
            for (int r = 0; r < 3; ++r)
                wide.setData(wide.index(r, c), QString::number(0.0123456 * (r + 1) * (c + 1), 'g', 6));
        }
        Report report("wide");
        report.table(wide);
        QTextDocument doc;
        const auto layout = report.pdfLayout(doc);
        int tables = 0;
        const QString problems = tablesThatBreak(doc, layout.textWidth, &tables);
        QVERIFY2(problems.isEmpty(), qPrintable(problems));
        QVERIFY2(tables >= 3, qPrintable(QString::number(tables))); // 40 columns of ~100 pixels
        for (int c = 0; c < 40; ++c)
            QCOMPARE(doc.toPlainText().count(QRegularExpression(QStringLiteral("gain_error gskm %1\\b").arg(c))), 1);
    }
    const QString pdf = m_dir.filePath("sixteen.pdf");
    QVERIFY2(m_window->exportReport(pdf), qPrintable(m_window->lastMessage()));
    const QString pdftoppm = QStandardPaths::findExecutable("pdftoppm");
    QVERIFY2(!pdftoppm.isEmpty(), "pdftoppm (Debian's poppler-utils, installed by tools/setup.sh) is needed");
    const QString prefix = m_dir.filePath("sixteen-page");
    QCOMPARE(QProcess::execute(pdftoppm, {"-r", "50", "-png", pdf, prefix}), 0);
    const auto pages = QDir(m_dir.path()).entryList({"sixteen-page-*.png"}, QDir::Files, QDir::Name);
    QVERIFY(pages.size() >= 2);
    for (const auto& name : pages) {
        const QImage page(m_dir.filePath(name));
        QVERIFY(!page.isNull());
        QVERIFY2(page.width() > page.height(), qPrintable(name)); // landscape
        int inked = 0;
        for (int y = 0; y < page.height(); ++y)
            for (int x = page.width() - 8; x < page.width(); ++x)
                inked += qGray(page.pixel(x, y)) < 250;
        QVERIFY2(inked == 0, qPrintable(QStringLiteral("%1: %2 pixels in the right margin").arg(name).arg(inked)));
    }
}

// The tensor chosen on one page is the one the others open with: the dataset tree, the KM vs GSKM
// and sweep pickers and the gradient page's layer follow a choice made on any of them, and the
// choice outlives reopening a dump that has it.
void TestStudio::oneSelectionAcrossPages()
{
    QVERIFY(m_window->openDump(kSample));
    auto* tree = m_window->datasetPage()->findChild<QTreeWidget*>();
    QVERIFY(tree);
    auto* compare = m_window->comparePage()->tensorBox();
    auto* sweeps = m_window->sweepsPage()->tensorBox();
    auto* layer = m_window->weightsPage()->layerBox();
    m_window->datasetPage()->selectTensor("layers.3.value"); // as a click in the tree does
    QCOMPARE(m_window->context().selectedTensor(), QString("layers.3.value"));
    QCOMPARE(compare->currentText(), QString("layers.3.value"));
    QCOMPARE(sweeps->currentText(), QString("layers.3.value"));
    QCOMPARE(layer->currentData().toInt(), 3);
    // A choice in the KM vs GSKM picker (the user's: activated).
    compare->setCurrentIndex(compare->findText("layers.1.key"));
    emit compare->activated(compare->currentIndex());
    QCOMPARE(tree->currentItem()->text(0), QString("layers.1.key"));
    QCOMPARE(sweeps->currentText(), QString("layers.1.key"));
    QCOMPARE(layer->currentData().toInt(), 1);
    // A layer chosen on the gradient page keeps the kind: layer 4's key.
    layer->setCurrentIndex(layer->findData(4));
    emit layer->activated(layer->currentIndex());
    QCOMPARE(m_window->context().selectedTensor(), QString("layers.4.key"));
    QCOMPARE(compare->currentText(), QString("layers.4.key"));
    // Reopening a dump that has the tensor keeps it everywhere.
    QVERIFY(m_window->openDump(kSample));
    QCOMPARE(compare->currentText(), QString("layers.4.key"));
    QCOMPARE(sweeps->currentText(), QString("layers.4.key"));
    QCOMPARE(tree->currentItem()->text(0), QString("layers.4.key"));
    QCOMPARE(layer->currentData().toInt(), 4);
}

// Cancelling mid-job ends it within an iteration (the run closes as cancelled); then two layers of
// the bundled sample run with their 1st residuals: four columns.
void TestStudio::modelPageCancelsAndRunsOnTheSample()
{
    const QString data = m_dir.filePath("big-model.safetensors");
    writeSyntheticModel(data, 4, 20000, 64, false); // slow to cluster at K = 256
    QVERIFY(m_window->openDump(data));
    auto* page = m_window->modelPage();
    m_window->showPage("model");
    page->dimBox()->setValue(8);
    page->kBox()->setValue(256);
    page->itersBox()->setValue(200);
    QSignalSpy done(page, &ModelPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(page->progressBar()->value() > 0, test::waitMs(30000)); // live progress arrived
    QTest::mouseClick(page->cancelButton(), Qt::LeftButton);
    QCOMPARE(done.size(), 1);
    QVERIFY(!done.first().first().toBool());
    QVERIFY(page->runButton()->isEnabled());
    std::string seen;
    QTRY_VERIFY2_WITH_TIMEOUT(latestRunIs("compare", "cancelled", &seen), seen.c_str(), test::waitMs(20000));

    // The first and last layers (the emulated GPU suite runs this too, many times slower).
    QVERIFY(m_window->openDump(kSample));
    page->tensorsEdit()->setText("layers.0.*,layers.4.*");
    page->dimBox()->setValue(8);
    page->kBox()->setValue(16);
    page->itersBox()->setValue(6);
    page->residualsBox()->setChecked(true);
    done.clear();
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(120000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(page->statusLabel()->text()));
    page->residualsBox()->setChecked(false);
    page->tensorsEdit()->setText("layers.*.*");
    auto* map = page->heatmap("cosine");
    QCOMPARE(map->rowCount(), 2);
    QCOMPARE(map->columnCount(), 4);
    QCOMPARE(page->cells().size(), size_t(8));
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 4; ++c)
            QVERIFY(std::isfinite(map->cell(r, c).score));
}

// File ▸ Export report: one HTML file with every image inline (nothing else to copy), the model
// page's maps and table, the open page's settings, chart and table; the same as a PDF; a folder
// that does not exist is a message naming the file, and nothing is written.
void TestStudio::reportIsOneSelfContainedFile()
{
    QVERIFY(!m_window->modelPage()->cells().empty()); // two of the sample's layers, with 1st residuals
    QVERIFY(compareSmall());
    const QString html = m_dir.filePath("report.html");
    QVERIFY2(m_window->exportReport(html), qPrintable(m_window->lastMessage()));
    QFile f(html);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY(text.startsWith("<!DOCTYPE html>"));
    QVERIFY(text.contains("Model: KM against GSKM on every layer"));
    QVERIFY(text.contains("layers.4.value (1st residual)")); // the table's last row
    QVERIFY(text.contains("KM vs GSKM page"));
    QVERIFY(text.contains("Subspace width D")); // the open page's settings
    QVERIFY(text.contains("Δ gskm − km"));      // and its table, with the deltas
    // Two images, both inline: the model's maps and the convergence chart.
    QCOMPARE(text.count("<img src=\"data:image/png;base64,"), 2);
    QCOMPARE(text.count("<img "), 2);
    const int at = int(text.indexOf("base64,")) + 7;
    const QImage maps = QImage::fromData(QByteArray::fromBase64(text.mid(at, text.indexOf('"', at) - at).toLatin1()));
    QVERIFY(!maps.isNull() && maps.width() > maps.height() / 4);

    const QString pdf = m_dir.filePath("report.pdf");
    QVERIFY2(m_window->exportReport(pdf), qPrintable(m_window->lastMessage()));
    QFile p(pdf);
    QVERIFY(p.open(QIODevice::ReadOnly));
    const QByteArray bytes = p.readAll();
    QVERIFY(bytes.startsWith("%PDF-"));
    QVERIFY(bytes.trimmed().endsWith("%%EOF"));

    const QString nowhere = m_dir.filePath("no-such-folder/report.html");
    QVERIFY(!m_window->exportReport(nowhere));
    QVERIFY2(m_window->lastMessage().contains(nowhere), qPrintable(m_window->lastMessage()));
    QVERIFY(!QFile::exists(nowhere));
}

// With no saved geometry the window takes 85% of the screen's available area, centred; closed and
// opened again it comes back as it was left.
void TestStudio::firstWindowFillsTheScreenThenRemembers()
{
    QSettings().remove("window/geometry");
    const QRect avail = QGuiApplication::primaryScreen()->availableGeometry();
    QTemporaryDir dir;
    QSize left;
    {
        MainWindow w(dir.filePath("a.db"));
        const QSize want = QSize(avail.width() * 85 / 100, avail.height() * 85 / 100).expandedTo(w.minimumSizeHint());
        QCOMPARE(w.size(), want);
        QVERIFY(std::abs((w.pos() + QPoint(w.width() / 2, w.height() / 2) - avail.center()).manhattanLength()) <= 2);
        w.show();
        w.resize(w.size() + QSize(57, 33)); // the user's own size (larger: the layout has a minimum)
        left = w.size();
        QVERIFY(left != want);
        QVERIFY(w.close()); // saves the geometry
    }
    MainWindow again(dir.filePath("a.db"));
    QCOMPARE(again.size(), left);
}

void TestStudio::trainFillsTableAndExports()
{
    auto* page = m_window->trainPage();
    QVERIFY(trainSmall());
    auto* model = page->resultsModel();
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model->rowCount(), 1);
    QCOMPARE(model->headerData(0, Qt::Vertical).toString(), QString("layers.1.value"));
    QCOMPARE(model->value(0, 0), 2 * 4.0 / 8);        // bits: R·log2(K)/D
    QVERIFY(model->value(0, 1) > model->value(0, 0)); // codebooks cost bits
    const auto stages = page->stageChart()->points("layers.1.value");
    QCOMPARE(stages.size(), 2);
    QVERIFY(stages[1].y() < stages[0].y()); // the second stage removes error
    const QString out = m_dir.filePath("gui-codebooks.safetensors");
    QVERIFY(page->exportCodebooks(out));
    const auto file = readCodebookFile(out.toStdString());
    QCOMPARE(file.entries.size(), size_t(1));
    QCOMPARE(file.entries[0].codebooks.stages, 2);
    page->stageMetricBox()->setCurrentText("cosine");
    const auto cosines = page->stageChart()->points("layers.1.value");
    QCOMPARE(cosines.size(), 2);
    QVERIFY(cosines[1].y() > cosines[0].y() && cosines[1].y() <= 1); // stages add detail
    page->stageMetricBox()->setCurrentText("nmse");
}

void TestStudio::trainPresetsFollowTheDumpsHeadDim()
{
    // A dump of heads of 64 (3 KV heads, as SmolLM2's): the paper's rates at D = head_dim, K = 256,
    // R = BPA·D/8, in the presets' labels and in the boxes they fill; the bundled sample's toy heads
    // of 8 keep the paper's own settings. Synthetic rows.
    const QString path = m_dir.filePath("hd64.safetensors");
    writeSafetensors(
        path.toStdString(),
        {makeFloatBlob("layers.0.key", synthesize(SynthKind::KvLike, 600, 192, 7), DType::F32, {600, 3, 64}),
         makeFloatBlob("layers.0.value", synthesize(SynthKind::Gaussian, 600, 192, 8), DType::F32, {600, 3, 64})});
    auto* page = m_window->trainPage();
    QVERIFY(m_window->openDump(path));
    page->presetBox()->setCurrentIndex(2); // 1 bit
    QCOMPARE(page->dimBox()->value(), 64);
    QCOMPARE(page->stagesBox()->value(), 8);
    QCOMPARE(page->kBox()->value(), 256);
    QVERIFY2(page->presetBox()->itemText(2).contains("D=64, R=8"), qPrintable(page->presetBox()->itemText(2)));
    page->presetBox()->setCurrentIndex(4); // 0.375: three heads, so one head per subspace
    QCOMPARE(page->dimBox()->value(), 64);
    QCOMPARE(page->stagesBox()->value(), 3);
    // KM vs GSKM follows the heads too: a head whole, the paper's K.
    QCOMPARE(m_window->comparePage()->dimBox()->value(), 64);
    QCOMPARE(m_window->comparePage()->kBox()->value(), 256);
    QVERIFY(m_window->openDump(kSample)); // heads of 8: the paper's D = 256, R = 12 again
    QCOMPARE(page->dimBox()->value(), 256);
    QCOMPARE(page->stagesBox()->value(), 12);
    QCOMPARE(m_window->comparePage()->dimBox()->value(), 8); // the sample's toy heads: D = 8, K = 64
    QCOMPARE(m_window->comparePage()->kBox()->value(), 64);
    page->presetBox()->setCurrentIndex(0); // back to custom for the tests that follow
}

void TestStudio::trainRefinesAndDrawsEachRound()
{
    // Refinement rounds from the form: each round's train and held-out NMSE drawn after the last
    // stage (x = R + round, from the greedy stages' point at x = R), the training error never rising.
    auto* page = m_window->trainPage();
    page->refineBox()->setValue(2);
    const bool trained = trainSmall();
    page->refineBox()->setValue(0);
    QVERIFY(trained);
    const auto train = page->stageChart()->points("layers.1.value refined");
    const auto held = page->stageChart()->points("layers.1.value held-out");
    QCOMPARE(train.size(), 3);
    QCOMPARE(held.size(), 3);
    QCOMPARE(train[0].x(), 2.0);
    QCOMPARE(train[2].x(), 4.0);
    QCOMPARE(train[0].y(), page->stageChart()->points("layers.1.value").last().y());
    QVERIFY(train[1].y() <= train[0].y() * (1 + 1e-9) && train[2].y() <= train[1].y() * (1 + 1e-9));
    QVERIFY(page->stageChart()->view()->chart()->title().contains("refinement round"));
}

// The training's codebooks (layers.1.value, 1 bit per activation) on the bundled model: the perplexity of its own
// samples rises over FP32 (it can only lose with one layer's values coarsened), the evaluation is
// recorded, and the Runs page draws every evaluation against its bits beside FP32.
void TestStudio::perplexityOfTrainedCodebooks()
{
    auto* page = m_window->trainPage();
    QVERIFY(page->pplButton()->isEnabled());
    QSignalSpy done(page, &TrainPage::pplFinished);
    QElapsedTimer wall;
    wall.start();
    QTest::mouseClick(page->pplButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(60000)));
    const qint64 wallMs = wall.elapsed();
    QVERIFY2(done.first().first().toBool(), qPrintable(page->pplResultText()));
    const QString text = page->pplResultText();
    {
        // The run is recorded from its start: its start and finish span the measurement (the model's
        // loading aside), not the last millisecond after it.
        RunStore store(m_store.toStdString());
        const auto r = store.listRuns({"ppl", std::nullopt, "", 1}).front();
        const auto at = [](const std::string& iso) {
            return QDateTime::fromString(QString::fromStdString(iso), Qt::ISODateWithMs).toMSecsSinceEpoch();
        };
        const qint64 recordedMs = at(r.finishedAt) - at(r.startedAt);
        qDebug("ppl run: %lld ms recorded of %lld ms", recordedMs, wallMs);
        QVERIFY2(recordedMs >= wallMs / 2 - 20, qPrintable(QString("%1 ms of %2").arg(recordedMs).arg(wallMs)));
    }
    const QRegularExpression re(R"(FP32 ([0-9.]+); with these gskm codebooks at 1 BPA ([0-9.]+))");
    const auto m = re.match(text);
    QVERIFY2(m.hasMatch(), qPrintable(text));
    QVERIFY2(m.captured(2).toDouble() > m.captured(1).toDouble(), qPrintable(text));
    QVERIFY(text.contains("recorded as run"));

    auto* runs = m_window->runsPage();
    runs->refresh();
    // The ppl run's Result says what it measured.
    {
        RunStore store(m_store.toStdString());
        const auto ppl = store.listRuns({"ppl", std::nullopt, "", 1});
        QVERIFY(!ppl.empty());
        auto* model = runs->table()->model();
        QString result;
        for (int row = 0; row < model->rowCount(); ++row)
            if (model->index(row, views::RunsTableModel::Id).data().toLongLong() == ppl.front().id)
                result = model->index(row, views::RunsTableModel::Summary).data().toString();
        QVERIFY2(result.startsWith("perplexity " + QString::number(m.captured(2).toDouble(), 'g', 4)),
                 qPrintable(result));
    }
    // The GSRQ page draws it at its effective bits (codewords counted: above the nominal 1 bit), FP32
    // as a dashed line across.
    const auto pplRuns = [&] {
        RunStore store(m_store.toStdString());
        return store.listRuns({"ppl", std::nullopt, "", 0});
    };
    const auto effectiveBitsOf = [&](std::int64_t id) {
        RunStore store(m_store.toStdString());
        for (const auto& row : store.metrics(id))
            if (row.name == "effective_bits")
                return row.value;
        return std::nan("");
    };
    const std::int64_t first = pplRuns().front().id;
    const double ppl1 = m.captured(2).toDouble(), fp32 = m.captured(1).toDouble();
    const double eff1 = effectiveBitsOf(first);
    QVERIFY2(eff1 > 1 && eff1 < 2, qPrintable(QString::number(eff1)));
    auto* chart = page->compareChart();
    chart->flush();
    QVERIFY(chart->isVisibleTo(page));
    QCOMPARE(chart->points("gskm").size(), 1);
    QCOMPARE(chart->points("gskm")[0].x(), eff1);
    QVERIFY(std::abs(chart->points("gskm")[0].y() - ppl1) <= 1e-3 * ppl1); // the text prints 3 decimals
    const QString fp32Name = chart->seriesNames().filter(QRegularExpression("^FP32 ")).value(0);
    QVERIFY2(chart->isReference(fp32Name), qPrintable(chart->seriesNames().join(" | ")));

    // A second training at 2 bits (4 stages) and its perplexity: the page's chart holds both.
    page->stagesBox()->setValue(4);
    QSignalSpy trained(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(trained.wait(test::waitMs(30000)));
    QVERIFY(trained.first().first().toBool());
    QSignalSpy done2(page, &TrainPage::pplFinished);
    QTest::mouseClick(page->pplButton(), Qt::LeftButton);
    QVERIFY(done2.wait(test::waitMs(60000)));
    QVERIFY2(done2.first().first().toBool(), qPrintable(page->pplResultText()));
    const QRegularExpression re2(R"(FP32 ([0-9.]+); with these gskm codebooks at 2 BPA ([0-9.]+))");
    const auto m2 = re2.match(page->pplResultText());
    QVERIFY2(m2.hasMatch(), qPrintable(page->pplResultText()));
    QCOMPARE(m2.captured(1), m.captured(1)); // the same tokens: FP32 is the same
    const double ppl2 = m2.captured(2).toDouble();
    const std::int64_t second = pplRuns().front().id;
    QVERIFY(second > first);
    const double eff2 = effectiveBitsOf(second);
    QVERIFY(eff2 > 2 && eff2 > eff1);
    chart->flush();
    const auto onPage = chart->points("gskm");
    QCOMPARE(onPage.size(), 2);
    QCOMPARE(onPage[0].x(), eff1); // in order of bits
    QCOMPARE(onPage[1].x(), eff2);
    page->stagesBox()->setValue(2);

    // The Runs page: the two runs selected give the same figure, one series per method, and their
    // details compare the perplexities.
    runs->refresh();
    runs->selectRuns({first, second});
    runs->overlayChart()->flush();
    QCOMPARE(runs->overlayMetric()->currentText(), QString("perplexity"));
    const auto names = runs->overlayChart()->seriesNames();
    QCOMPARE(names.size(), 2);
    const auto gskm = runs->overlayChart()->points("gskm");
    QCOMPARE(gskm.size(), 2);
    QCOMPARE(gskm[0].x(), eff1);
    QCOMPARE(gskm[1].x(), eff2);
    QVERIFY(std::abs(gskm[0].y() - ppl1) <= 1e-3 * ppl1);
    QVERIFY(std::abs(gskm[1].y() - ppl2) <= 1e-3 * ppl2);
    QVERIFY(runs->overlayChart()->pointsDrawn("gskm"));
    const QString fp32Line = names.filter(QRegularExpression("^FP32 ")).value(0);
    QVERIFY2(runs->overlayChart()->isReference(fp32Line), qPrintable(names.join(" | ")));
    const auto line = runs->overlayChart()->points(fp32Line);
    QCOMPARE(line.size(), 2);
    QVERIFY(line[0].x() < eff1 && line[1].x() > eff2); // across the points, none on the plot's edge
    QVERIFY(std::abs(line[0].y() - fp32) <= 1e-3 * fp32);
    const QString details = runs->detailsText();
    QVERIFY2(details.contains(QRegularExpression(R"(\n  perplexity: [0-9.]+  \|  run \d+ [0-9.]+, Δ)")),
             qPrintable(details));
    QVERIFY2(!details.contains("no final metric in common"), qPrintable(details));
    // "Perplexity of every evaluation" selects every ppl run and draws the same.
    runs->overlayMetric()->setCurrentText("nmse");
    runs->showAllPerplexity();
    runs->overlayChart()->flush();
    QCOMPARE(runs->overlayMetric()->currentText(), QString("perplexity"));
    QCOMPARE(runs->overlayChart()->points("gskm").size(), 2);
    runs->overlayMetric()->setCurrentText("nmse");
}

// The paper's table on the bundled model from the GSRQ page: KIVI at two bit widths and GSRQ trained
// on the open dump (the model's own), a row each beside FP32, a series per method on the chart, and
// one ppl run in the store with the methods' perplexities.
void TestStudio::compareMethodsOnTheModel()
{
    auto* page = m_window->trainPage();
    m_window->showPage("train");
    page->compareMethodsEdit()->setText("fp32,kivi-4,kivi-2,gsrq@1");
    QSignalSpy done(page, &TrainPage::compareFinished);
    QTest::mouseClick(page->compareButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(120000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(page->pplResultText()));
    auto* model = page->compareModel();
    QCOMPARE(model->rowCount(), 4);
    QCOMPARE(model->index(0, 0).data().toString(), QString("fp32"));
    const auto ppl = [&](int row) { return model->index(row, 2).data().toString().toDouble(); };
    QVERIFY(ppl(2) > ppl(1));                                     // KIVI: 2 bits cost more than 4
    QCOMPARE(model->index(3, 1).data().toString(), QString("1")); // gsrq@1's bits
    QVERIFY(model->index(3, 5).data().toString().toDouble() > 0); // its attention error on the dump
    // Each method's Δ% carries its paired bootstrap interval (FP32's own row none), and the interval
    // holds the Δ% it is about: the percentile interval of a mean over a few sequences holds the mean
    // itself; one of another method's or FP32's figures would not hold KIVI-2's tens of percent.
    QCOMPARE(model->index(0, 4).data().toString(), QString("-"));
    for (int r = 1; r < 4; ++r) {
        const QString in = model->index(r, 4).data().toString();
        const auto m = QRegularExpression(R"(^\[([-+][0-9.]+), ([-+][0-9.]+)\]$)").match(in);
        QVERIFY2(m.hasMatch(), qPrintable(in));
        const double dp = model->index(r, 3).data().toString().chopped(1).toDouble();
        QVERIFY2(m.captured(1).toDouble() <= dp + 0.005 && dp <= m.captured(2).toDouble() + 0.005,
                 qPrintable(QString("%1 %2").arg(dp).arg(in)));
    }
    page->compareChart()->flush();
    QCOMPARE(page->compareChart()->intervals("kivi").size(), 2); // error bars on the chart
    const auto names = page->compareChart()->seriesNames();
    QVERIFY2(names.contains("kivi") && names.contains("gsrq") && names.filter(QRegularExpression("^FP32 ")).size() == 1,
             qPrintable(names.join(" | ")));
    QCOMPARE(page->compareChart()->points("kivi").size(), 2);
    QVERIFY(page->pplResultText().contains("recorded as run"));
    QVERIFY(!page->compareProgress()->isVisible()); // shown while it ran
    QVERIFY(!page->compareCancelButton()->isEnabled());
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"ppl", std::nullopt, "", 1});
    QVERIFY(!runs.empty());
    const auto summary = QJsonDocument::fromJson(QByteArray::fromStdString(runs.front().summaryJson)).object();
    QCOMPARE(summary["methods"].toObject().size(), 4);
    // The Runs page: the run's Result names the table, and selecting it alone draws perplexity
    // against bits, a series per method.
    auto* runsPage = m_window->runsPage();
    runsPage->refresh();
    runsPage->overlayMetric()->setCurrentText("nmse");
    runsPage->selectRuns({runs.front().id});
    runsPage->overlayChart()->flush();
    QCOMPARE(runsPage->overlayMetric()->currentText(), QString("perplexity"));
    const auto overlay = runsPage->overlayChart()->seriesNames();
    QVERIFY2(overlay.contains("kivi") && overlay.contains("gsrq"), qPrintable(overlay.join(" | ")));
    QCOMPARE(runsPage->overlayChart()->points("kivi").size(), 2);
    // The run recorded each method's sequences and interval: the Runs page draws the same error bars.
    QCOMPARE(runsPage->overlayChart()->intervals("kivi"), page->compareChart()->intervals("kivi"));
    runsPage->overlayMetric()->setCurrentText("nmse");
    // A bad method is named, and nothing runs.
    page->compareMethodsEdit()->setText("fp32,pq@1");
    QSignalSpy refused(page, &TrainPage::compareFinished);
    QTest::mouseClick(page->compareButton(), Qt::LeftButton);
    QCOMPARE(refused.size(), 1);
    QVERIFY(!refused.first().first().toBool());
}

// A GGUF model (the bundled synthetic tiny llama, with its own vocabulary: no tokenizer file) in the
// same comparison, on a text: KIVI's rows beside FP32. The open dump is another model's (stories260K's
// 5 layers against the GGUF's 2): its layers do not decide the table.
void TestStudio::compareMethodsOnAGgufModel()
{
    auto* page = m_window->trainPage();
    m_window->showPage("train");
    const QString oldText = page->pplTextEdit()->text();
    m_window->context().setPplModel(QStringLiteral(GSRQ_SOURCE_DIR "/tests/data/tiny-llama.gguf"), QString());
    page->pplTextEdit()->setText(QStringLiteral(GSRQ_SOURCE_DIR "/README.md"));
    page->compareMethodsEdit()->setText("fp32,kivi-4g8,kivi-2g8");
    QSignalSpy done(page, &TrainPage::compareFinished);
    QTest::mouseClick(page->compareButton(), Qt::LeftButton);
    const bool finished = done.wait(test::waitMs(120000));
    const QString text = page->pplResultText();
    m_window->context().setPplModel(QString(), QString()); // none chosen: the model follows the dump again
    page->pplTextEdit()->setText(oldText);
    QVERIFY(finished);
    QVERIFY2(done.first().first().toBool(), qPrintable(text));
    auto* model = page->compareModel();
    QCOMPARE(model->rowCount(), 3);
    const auto ppl = [&](int row) { return model->index(row, 2).data().toString().toDouble(); };
    QVERIFY2(ppl(0) > 1 && std::isfinite(ppl(0)), qPrintable(text));
    QVERIFY(ppl(1) != ppl(0)); // KIVI changed the cache
    QVERIFY2(text.contains("every layer"), qPrintable(text));
}

// The GSRQ page's perplexity runs the model the open dump was made from when it is bundled (the
// head_dim-128 sample's codebooks do not fit stories260K), and the bundled stories260K otherwise.
void TestStudio::perplexityModelFollowsTheDump()
{
    QVERIFY(m_window->openDump(QStringLiteral(GSRQ_SOURCE_DIR "/resources/samples/pydocs-hd128")));
    QVERIFY2(m_window->context().pplModelPath().endsWith("models/pydocs-hd128/model.bin"),
             qPrintable(m_window->context().pplModelPath()));
    QVERIFY(m_window->context().pplTokenizerPath().endsWith("models/pydocs-hd128/tokenizer.bin"));
    QVERIFY(m_window->openDump(kSample));
    QVERIFY2(m_window->context().pplModelPath().endsWith("models/stories260K/stories260K.bin"),
             qPrintable(m_window->context().pplModelPath()));
}

// A job that fails on the engine's check records that message, as `gsrq train` does for the same
// mistake, and the Runs table shows it in the run's Result.
void TestStudio::failedRunRecordsTheEnginesMessage()
{
    QVERIFY(m_window->openDump(kSample));
    auto* page = m_window->trainPage();
    m_window->showPage("train");
    page->tensorsEdit()->setText("layers.1.value");
    page->dimBox()->setValue(128); // the sample's values have 4 KV heads × 8 = 32 features
    page->stagesBox()->setValue(1);
    page->kBox()->setValue(16);
    QSignalSpy done(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(30000)));
    QVERIFY(!done.first().first().toBool());
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"train", std::nullopt, "", 1});
    QVERIFY(!runs.empty());
    QCOMPARE(runs.front().status, RunStatus::Failed);
    const QString error = QString::fromStdString(runs.front().error);
    QVERIFY2(error.contains("does not divide") && error.contains("32 features"), qPrintable(error));

    auto* runsPage = m_window->runsPage();
    runsPage->refresh();
    auto* model = runsPage->table()->model();
    bool shown = false;
    for (int row = 0; row < model->rowCount(); ++row)
        if (model->index(row, views::RunsTableModel::Id).data().toLongLong() == runs.front().id)
            shown = model->index(row, views::RunsTableModel::Summary).data().toString() == error;
    QVERIFY2(shown, "the failed run's message is not in the Runs table");
    page->dimBox()->setValue(8);

    // The CLI, given the same mistake, exits 2 and records its message as well; the table shows it.
    const auto r = test::gsrqRun({"--db", m_store, "train", kSample, "--tensors", "layers.1.value", "--dim", "128",
                                  "--stages", "1", "--k", "16"});
    QCOMPARE(r.code, 2);
    const auto cli = RunStore(m_store.toStdString()).listRuns({"train", std::nullopt, "", 1});
    QVERIFY(!cli.empty() && cli.front().id > runs.front().id);
    QCOMPARE(cli.front().status, RunStatus::Failed);
    const QString cliError = QString::fromStdString(cli.front().error);
    QVERIFY2(cliError.contains("does not divide the 32 features") && r.err.contains(cliError.toUtf8()),
             qPrintable(cliError));
    runsPage->refresh();
    shown = false;
    for (int row = 0; row < model->rowCount(); ++row)
        if (model->index(row, views::RunsTableModel::Id).data().toLongLong() == cli.front().id)
            shown = model->index(row, views::RunsTableModel::Summary).data().toString() == cliError;
    QVERIFY2(shown, "the CLI's failed run's message is not in the Runs table");
}

// Two perplexity runs whose codebooks' settings (JSON text inside the run's settings) differ in one
// key: the Runs page lists that leaf alone, not the escaped settings string.
void TestStudio::nestedSettingsDifferKeyByKey()
{
    QList<qint64> ids;
    {
        RunStore store(m_store.toStdString());
        for (int stages : {4, 8}) {
            RunInfo info;
            info.kind = "ppl";
            info.settingsJson =
                nlohmann::ordered_json{
                    {"model", "m.bin"},
                    {"codebook_settings",
                     {{"method", "gskm"},
                      {"settings", nlohmann::ordered_json{{"dim", 8}, {"stages", stages}, {"k", 16}}.dump()}}}}
                    .dump();
            ids << store.beginRun(info);
            store.finishRun(ids.back(), RunStatus::Done, "{}");
        }
    }
    auto* page = m_window->runsPage();
    page->refresh();
    page->selectRuns(ids);
    const QString text = page->detailsText();
    QVERIFY2(text.contains("codebook_settings.settings.stages: 4  |  8"), qPrintable(text));
    QVERIFY2(!text.contains("settings.dim") && !text.contains("\\\""), qPrintable(text));
}

// Every chart exports what it shows: a PNG of its size, an SVG drawing, and CSV rows per point.
void TestStudio::chartsExportPngSvgCsv()
{
    // The chart of a comparison run here (an earlier test's results are cleared once another tensor
    // or dump is opened).
    QVERIFY(compareSmall());
    auto* chart = m_window->comparePage()->convergenceChart();
    chart->flush();
    int points = 0;
    for (const auto& name : chart->seriesNames())
        points += int(chart->points(name).size());
    QVERIFY(points > 0);
    const QString png = m_dir.filePath("chart.png"), svg = m_dir.filePath("chart.svg"),
                  csv = m_dir.filePath("chart.csv");
    QVERIFY(chart->exportPng(png));
    QVERIFY(chart->exportSvg(svg));
    QVERIFY(chart->exportCsv(csv));
    const QImage image(png);
    QCOMPARE(image.size(), chart->view()->size() * chart->view()->devicePixelRatio());
    QFile s(svg);
    QVERIFY(s.open(QIODevice::ReadOnly) && s.readAll().contains("<svg"));
    QFile c(csv);
    QVERIFY(c.open(QIODevice::ReadOnly));
    QCOMPARE(c.readAll().count('\n'), points + 1); // a header, then one row per point
}

// A histogram is drawn as touching bars from zero (an area under a step outline), its data stays
// the bins; on a log axis the bars rise from half the smallest count; the pages' histograms
// (row norms, gradient norms) are bars.
// Names that do not fit a row under the chart go to a column beside it, and one too wide for the
// column is wrapped at its spaces (every word kept, in order), not cut; short names stay a row.
void TestStudio::legendNamesWrapWhereTheyDoNotFit()
{
    views::ChartPanel chart("legend", "x", "y");
    chart.resize(460, 420);
    chart.show();
    const QStringList names{"stories260K.bin, own samples (seed 0): gskm", "stories260K.bin, own samples (seed 0): km",
                            "FP32 3.525"};
    for (const auto& name : names)
        chart.setSeries(name, {QPointF(1, 4), QPointF(2, 3)});
    chart.flush();
    auto* legend = chart.view()->chart()->legend();
    QCOMPARE(legend->alignment(), Qt::AlignRight);
    int wrapped = 0;
    for (auto* marker : legend->markers()) {
        const QString label = marker->label();
        QString plain = label;
        plain.replace("<br>", " ");
        QVERIFY2(names.contains(plain), qPrintable(label));
        wrapped += label.contains("<br>");
    }
    QCOMPARE(wrapped, 2); // the two long names; FP32's fits
    views::ChartPanel small("legend", "x", "y");
    small.resize(460, 420);
    small.show();
    small.setSeries("km", {QPointF(1, 4)});
    small.setSeries("gskm", {QPointF(1, 3)});
    small.flush();
    QCOMPARE(small.view()->chart()->legend()->alignment(), Qt::AlignBottom);
}

// On a log x axis (the latency and frontier charts) the end points lie inside the axis, their
// markers whole: the axis reaches 1.1× past the data at each end, no further. A reference line
// across the plot (two points at one y: the perplexity chart's FP32) is drawn across the whole
// axis so fitted; its data (the CSV export) stays as given.
void TestStudio::logAxesKeepTheEndPointsInside()
{
    views::ChartPanel chart("t", "µs", "error");
    chart.setLogX(true);
    chart.setSeries("lookup", {QPointF(148, 0.26), QPointF(779, 0.07)});
    chart.setSeries("fp32", {QPointF(120, 0.5), QPointF(900, 0.5)});
    chart.setReference("fp32");
    chart.flush();
    auto* axis = qobject_cast<QLogValueAxis*>(chart.view()->chart()->axes(Qt::Horizontal).value(0));
    QVERIFY(axis);
    QCOMPARE(axis->min(), 120 / 1.1);
    QCOMPARE(axis->max(), 900 * 1.1);
    QCOMPARE(chart.points("fp32"), QList<QPointF>({{120 / 1.1, 0.5}, {900 * 1.1, 0.5}})); // as drawn
    chart.setSeries("lookup", {QPointF(148, 0.26), QPointF(779, 0.07)});                  // redrawn: the same axis
    chart.flush();
    QCOMPARE(axis->min(), 120 / 1.1);
    QCOMPARE(axis->max(), 900 * 1.1);
    const QString csv = m_dir.filePath("reference.csv");
    QVERIFY(chart.exportCsv(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.readAll().contains("\"fp32\",120,0.5\n\"fp32\",900,0.5\n")); // as given
}

// Every series keeps a colour of its own: three methods, each with error bars (which are series of
// the chart too), drawn in three colours, and each whisker in its series' colour. (With the theme's
// five-colour cycle, whiskers took colours and the third method came out in the first's.)
void TestStudio::seriesWithErrorBarsKeepTheirColours()
{
    views::ChartPanel chart("c", "bits", "perplexity");
    for (const QString name : {"gsrq", "kivi", "km-rq"}) {
        chart.setSeries(name, {{1, 80}, {2, 70}});
        chart.setIntervals(name, {{75, 85}, {65, 75}});
    }
    chart.flush();
    QMap<QString, QColor> colours;
    QList<QColor> whiskers;
    for (auto* s : chart.view()->chart()->series()) {
        auto* line = qobject_cast<QLineSeries*>(s);
        QVERIFY(line);
        if (s->name().isEmpty())
            whiskers << line->pen().color();
        else
            colours[s->name()] = line->color();
    }
    QCOMPARE(colours.size(), 3);
    QVERIFY(colours["gsrq"] != colours["kivi"] && colours["kivi"] != colours["km-rq"] &&
            colours["gsrq"] != colours["km-rq"]);
    QCOMPARE(whiskers.size(), 6);
    for (const auto& c : whiskers)
        QVERIFY(colours.values().contains(c));
}

void TestStudio::histogramsAreBars()
{
    views::ChartPanel chart("h", "x", "rows");
    chart.setHistogram("h", Histogram{{0.5, 1.5, 2.5}, {4, 0, 6}});
    chart.flush();
    QVERIFY(chart.isHistogram("h"));
    QCOMPARE(chart.points("h"), QList<QPointF>({{0.5, 4}, {1.5, 0}, {2.5, 6}}));
    const auto series = chart.view()->chart()->series();
    QCOMPARE(series.size(), 1);
    auto* area = qobject_cast<QAreaSeries*>(series.first());
    QVERIFY(area);
    const QList<QPointF> outline{{0, 0}, {0, 4}, {1, 4}, {1, 0}, {1, 0}, {1, 0},
                                 {2, 0}, {2, 0}, {2, 0}, {2, 6}, {3, 6}, {3, 0}};
    QCOMPARE(area->upperSeries()->points(), outline);
    QCOMPARE(area->lowerSeries()->points(), QList<QPointF>({{0, 0}, {3, 0}}));
    chart.setLogY(true);
    chart.flush();
    QCOMPARE(area->lowerSeries()->points(), QList<QPointF>({{0, 2}, {3, 2}})); // half of 4
    QCOMPARE(area->upperSeries()->points()[5], QPointF(1, 2));                 // the empty bin sits on the baseline
    // A CSV of a histogram is its bins.
    const QString csv = m_dir.filePath("hist.csv");
    QVERIFY(chart.exportCsv(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("series,x,y\n\"h\",0.5,4\n\"h\",1.5,0\n\"h\",2.5,6\n"));

    QVERIFY(m_window->openDump(kSample));
    QSignalSpy stats(m_window->datasetPage(), &DatasetPage::statsReady);
    m_window->datasetPage()->selectTensor("layers.1.key");
    QVERIFY(stats.wait(test::waitMs(20000)));
    auto* norms = m_window->datasetPage()->findChildren<views::ChartPanel*>().value(0);
    QVERIFY(norms && norms->isHistogram("layers.1.key"));
    auto* weights = m_window->weightsPage();
    QSignalSpy ready(weights, &WeightsPage::normsReady);
    weights->layerBox()->setCurrentIndex(weights->layerBox()->count() - 1);
    QVERIFY(ready.count() > 0 || ready.wait(test::waitMs(20000)));
    for (auto* c : {weights->rawChart(), weights->logChart()})
        for (const auto& name : c->seriesNames())
            QVERIFY2(c->isHistogram(name), qPrintable(name));
}

void TestStudio::badSettingIsAMessage()
{
    auto* page = m_window->comparePage();
    page->tensorBox()->setCurrentText("layers.2.value"); // 32 features
    page->dimBox()->setValue(5);
    QSignalSpy done(page, &ComparePage::runFinished);
    QSignalSpy shown(m_window.get(), &MainWindow::messageShown);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(10000)));
    QVERIFY(!done.first().first().toBool());
    QVERIFY(!shown.isEmpty());
    QVERIFY2(shown.last().first().toString().contains("does not divide the 32 features"),
             qPrintable(shown.last().first().toString()));
    QVERIFY(page->runButton()->isEnabled()); // usable again
    page->dimBox()->setValue(16);
}

// The README's pictures come from this mode: a page rendered after a job, without a display.
void TestStudio::screenshotModeRendersAPage()
{
    const QString png = m_dir.filePath("shot.png");
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(GSRQ_STUDIO_PATH),
            {"--screenshot", png, "--page", "compare", "--open", kSample, "--run", "compare", "--tensor",
             "layers.1.key", "--store", m_dir.filePath("shot.db")});
    QVERIFY(p.waitForFinished(test::waitMs(60000)));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const QImage image(png);
    QCOMPARE(image.size(), QSize(1440, 900));
    RunStore store(m_dir.filePath("shot.db").toStdString());
    QCOMPARE(store.listRuns().size(), size_t(1)); // the job behind the picture is recorded
    p.start(QStringLiteral(GSRQ_STUDIO_PATH), {"--screenshot", png, "--page", "nowhere"});
    QVERIFY(p.waitForFinished(test::waitMs(60000)));
    QCOMPARE(p.exitCode(), 2);
    // Its usage needs no display at all (no platform plugin can start here): printed, exit 0.
    env.insert("QT_QPA_PLATFORM", "xcb");
    env.remove("DISPLAY");
    env.remove("WAYLAND_DISPLAY");
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(GSRQ_STUDIO_PATH), {"--help"});
    QVERIFY(p.waitForFinished(test::waitMs(60000)));
    QCOMPARE(p.exitCode(), 0);
    const QString usage = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(usage.contains("--screenshot") && usage.contains("gsrq-studio"), qPrintable(usage));
}

void TestStudio::recentFilesPersist()
{
    const QStringList recent = QSettings().value("files/recent").toStringList();
    QVERIFY(!recent.isEmpty());
    QCOMPARE(recent.first(), QFileInfo(kSample).absoluteFilePath()); // the last dump opened comes first
}

void TestStudio::cancelMidTraining()
{
    // Synthetic data large enough that training lasts well beyond the cancel.
    const QString data = m_dir.filePath("big.npy");
    writeNpy(data.toStdString(), synthesize(SynthKind::Gaussian, 20000, 64, 5));
    QVERIFY(m_window->openDump(data));
    auto* page = m_window->trainPage();
    page->tensorsEdit()->clear();
    page->dimBox()->setValue(8);
    page->stagesBox()->setValue(64);
    page->kBox()->setValue(64);
    page->itersBox()->setValue(100);
    QSignalSpy redrawn(page->liveChart(), &views::ChartPanel::redrawn);
    QSignalSpy done(page, &TrainPage::runFinished);

    // The GUI thread's longest pause while the job runs: a 5 ms timer's largest gap.
    QElapsedTimer clock;
    qint64 last = 0, worst = 0;
    QTimer probe;
    probe.setInterval(5);
    connect(&probe, &QTimer::timeout, [&] {
        const qint64 now = clock.elapsed();
        worst = std::max(worst, now - last);
        last = now;
    });
    clock.start();
    probe.start();
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(redrawn.wait(test::waitMs(20000))); // live progress reached the chart
    QTest::qWait(500);
    probe.stop();
    qInfo("longest event-loop pause while training: %lld ms", static_cast<long long>(worst));
    QTest::mouseClick(page->cancelButton(), Qt::LeftButton);
    QCOMPARE(done.size(), 1); // reported at once; the worker stops at its next iteration
    QVERIFY(!done.first().first().toBool());
    QVERIFY(page->runButton()->isEnabled());
    // The worker closes its run as cancelled within an iteration or so.
    std::string seen;
    QTRY_VERIFY2_WITH_TIMEOUT(latestRunIs("train", "cancelled", &seen),
                              qPrintable(QString::fromStdString(seen) + " / last message: " + m_window->lastMessage()),
                              test::waitMs(20000));
    QVERIFY(m_window->openDump(kSample));
}

// A cancelled training leaves the one that finished before it: its table, Export and "Perplexity with
// these codebooks" (disabled while the new one runs). A failure's banner clears when the next job starts.
void TestStudio::cancelledTrainingKeepsTheFinishedOne()
{
    auto* page = m_window->trainPage();
    page->itersBox()->setValue(25);
    QVERIFY(trainSmall());
    auto* model = page->resultsModel();
    QCOMPARE(model->rowCount(), 1);
    const double nmse = model->value(0, 3);
    m_window->context().showMessage("an earlier failure");
    QVERIFY(m_window->bannerShown());

    // A long one (every tensor, 64 stages), cancelled once it shows progress.
    page->tensorsEdit()->clear();
    page->stagesBox()->setValue(64);
    page->itersBox()->setValue(100);
    QSignalSpy redrawn(page->liveChart(), &views::ChartPanel::redrawn);
    QSignalSpy done(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(!m_window->bannerShown()); // the new job superseded it
    QVERIFY(!page->exportButton()->isEnabled() && !page->pplButton()->isEnabled());
    QVERIFY(redrawn.wait(test::waitMs(20000)));
    QTest::mouseClick(page->cancelButton(), Qt::LeftButton);
    QCOMPARE(done.size(), 1);
    QVERIFY(!done.first().first().toBool());
    QCOMPARE(model->rowCount(), 1);
    QCOMPARE(model->headerData(0, Qt::Vertical).toString(), QString("layers.1.value"));
    QCOMPARE(model->value(0, 3), nmse);
    QVERIFY(page->exportButton()->isEnabled() && page->pplButton()->isEnabled());
    QVERIFY(page->exportCodebooks(m_dir.filePath("kept-codebooks.safetensors")));
    QCOMPARE(readCodebookFile(m_dir.filePath("kept-codebooks.safetensors").toStdString()).entries[0].codebooks.stages,
             2);
    // Let the worker close its cancelled run before the next test.
    std::string seen;
    QTRY_VERIFY2_WITH_TIMEOUT(latestRunIs("train", "cancelled", &seen), seen.c_str(), test::waitMs(20000));
}

// A store that is not SQLite: the Runs page says so in one dialog naming the file (however often it
// is refreshed), the file is left as it was, and a good store afterwards lists runs again.
void TestStudio::unusableStoreIsADialog()
{
    const QString bad = QDir(QStandardPaths::writableLocation(QStandardPaths::TempLocation))
                            .filePath(QString("gsrq-not-a-store-%1.db").arg(QCoreApplication::applicationPid()));
    {
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("these are notes, not a run store\n");
    }
    auto& ctx = m_window->context();
    const QString good = ctx.storePath();
    auto* page = m_window->runsPage();
    page->refresh();
    const int runs = page->model()->rowCount();
    ctx.setStorePath(bad);
    page->refresh();
    page->refresh();
    const auto dialogs = m_window->findChildren<QMessageBox*>("storeErrorDialog");
    QCOMPARE(dialogs.size(), 1);
    QVERIFY(dialogs[0]->isVisible());
    QVERIFY2(dialogs[0]->informativeText().contains(bad), qPrintable(dialogs[0]->informativeText()));
    QCOMPARE(page->model()->rowCount(), 0);
    dialogs[0]->close();
    QFile f(bad);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("these are notes, not a run store\n"));
    f.remove();
    ctx.setStorePath(good);
    page->refresh();
    QCOMPARE(page->model()->rowCount(), runs);
    QTRY_COMPARE(m_window->findChildren<QMessageBox*>("storeErrorDialog").size(), 0); // closed, none new
}

// Stores recorded elsewhere (a plan's task stores) come in through the Runs page's import, once;
// their group is offered as a filter and shown as a column.
void TestStudio::runsPageImportsStoresAndGroupsThem()
{
    auto* page = m_window->runsPage();
    m_window->showPage("runs");
    QTemporaryDir dir;
    const QString a = dir.filePath("task-0.sqlite"), b = dir.filePath("task-1.sqlite");
    for (const auto& [store, layer] : {std::pair{a, "0"}, std::pair{b, "1"}}) {
        const auto r = test::gsrqRun({"--db", store, "--group", "plan-gui", "train", kSample, "--layers", layer,
                                      "--dim", "8", "--stages", "1", "--k", "8", "--iters", "3", "-q"});
        QVERIFY2(r.code == 0, r.err.constData());
    }
    page->refresh();
    auto* model = page->model();
    const int before = model->rowCount();
    QString summary = page->importStores({a, b});
    QVERIFY2(summary.startsWith("Imported 2 run(s) from 2 store(s)"), qPrintable(summary));
    QCOMPARE(model->rowCount(), before + 2);
    summary = page->importStores({a, b});
    QVERIFY2(summary.contains("Imported 0") && summary.contains("2 already here"), qPrintable(summary));
    QCOMPARE(model->rowCount(), before + 2);
    summary = page->importStores({dir.filePath("missing.sqlite")});
    QVERIFY2(summary.contains("Not imported") && summary.contains("missing.sqlite"), qPrintable(summary));

    auto* group = page->groupFilter();
    const int at = group->findText("plan-gui");
    QVERIFY(at > 0);
    group->setCurrentIndex(at); // refreshes with the filter
    QCOMPARE(model->rowCount(), 2);
    for (int r = 0; r < 2; ++r) {
        QCOMPARE(model->data(model->index(r, views::RunsTableModel::Group)).toString(), QString("plan-gui"));
        QVERIFY(model->data(model->index(r, views::RunsTableModel::Kind), Qt::ToolTipRole)
                    .toString()
                    .startsWith("Imported from " + dir.path()));
    }
    group->setCurrentIndex(0);
    QCOMPARE(model->rowCount(), before + 2);
}

void TestStudio::runsPageListsAndOverlays()
{
    auto* page = m_window->runsPage();
    m_window->showPage("runs");
    page->refresh();
    auto* model = page->model();
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(model->rowCount() >= 3); // compare, train, the cancelled train
    // A CLI run into the same store shows up on refresh.
    QCOMPARE(test::gsrqRun(
                 {"--db", m_store, "compare", kSample, "--tensor", "layers.0.value", "--k", "8", "--iters", "3", "-q"})
                 .code,
             0);
    const int before = model->rowCount();
    page->refresh();
    QCOMPARE(model->rowCount(), before + 1);
    QCOMPARE(model->data(model->index(0, views::RunsTableModel::Kind)).toString(), QString("compare"));

    // Compares of one tensor each (the model page's runs cover many).
    QList<qint64> ids;
    RunStore store(m_store.toStdString());
    for (int r = 0; r < model->rowCount(); ++r)
        if (model->data(model->index(r, views::RunsTableModel::Kind)).toString() == "compare") {
            const qint64 id = model->data(model->index(r, 0), Qt::UserRole).toLongLong();
            if (store.requireRun(id).settingsJson.find("\"tensors\"") == std::string::npos)
                ids << id;
        }
    QVERIFY(ids.size() >= 2);
    QVERIFY(page->overlayChart()->emptyTextShown()); // nothing selected: the chart says what to do
    page->selectRuns(ids.mid(0, 2));
    page->overlayChart()->flush();
    QVERIFY(!page->overlayChart()->emptyTextShown());
    // Per run, each method's passes averaged over its blocks: 2 runs × {km, gskm}.
    const auto names = page->overlayChart()->seriesNames();
    QCOMPARE(names.size(), 4);
    for (const auto& name : names)
        QVERIFY2(name.startsWith("run ") && (name.contains(" km ") || name.contains(" gskm ")), qPrintable(name));
    // The CLI's run clustered all features as one block; the window's run two blocks of 16.
    QCOMPARE(names.filter("(mean of 2 blocks)").size(), 2);
    QVERIFY(page->detailsText().contains("differ"));

    page->overlayMetric()->setCurrentText("cosine");
    page->overlayChart()->flush();
    QCOMPARE(page->overlayChart()->seriesNames().size(), 4);
    for (const auto& name : page->overlayChart()->seriesNames())
        for (const auto& p : page->overlayChart()->points(name))
            QVERIFY(p.y() > 0 && p.y() <= 1);
    page->overlayMetric()->setCurrentText("nmse");

    // The metric deltas between two runs of one tensor: K = 64 against K = 8. Eight times the
    // codewords on the same data leave KM a lower nmse (a margin no seed undoes), so the second
    // run is marked better, and its Δ is negative.
    const qint64 k8 = model->data(model->index(0, 0), Qt::UserRole).toLongLong();
    QCOMPARE(test::gsrqRun(
                 {"--db", m_store, "compare", kSample, "--tensor", "layers.0.value", "--k", "64", "--iters", "3", "-q"})
                 .code,
             0);
    page->refresh();
    const qint64 k64 = model->data(model->index(0, 0), Qt::UserRole).toLongLong();
    page->selectRuns({k8, k64});
    const QString details = page->detailsText();
    QVERIFY2(details.contains(QString("Final metrics, each run against run %1").arg(k8)), qPrintable(details));
    const auto line =
        QRegularExpression(
            QString("layers.0.value km nmse: \\S+  \\|  run %1 \\S+, Δ -\\S+ \\(-[0-9.]+%\\) \\*run %1").arg(k64))
            .match(details);
    QVERIFY2(line.hasMatch(), qPrintable(details));
}

void TestStudio::sweepOverDimWithResidual()
{
    auto* page = m_window->sweepsPage();
    m_window->showPage("sweeps");
    page->tensorBox()->setCurrentText("layers.2.value");
    page->axisBox()->setCurrentIndex(0);
    page->valuesEdit()->setText("4,8");
    page->fixedBox()->setValue(16);
    page->itersBox()->setValue(10);
    page->residualBox()->setChecked(true);
    page->metricBox()->setCurrentText("nmse");
    QSignalSpy done(page, &SweepsPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(60000)));
    QVERIFY(done.first().first().toBool());
    auto* chart = page->sweepChart();
    chart->flush();
    QCOMPARE(chart->seriesNames().size(), 4); // km, gskm, and both on the 1st residual
    const auto km = chart->points("km");
    QCOMPARE(km.size(), 2);
    QCOMPARE(km[0].x(), 4.0);
    QVERIFY(km[1].y() > km[0].y()); // K fixed: wider subspaces are harder
    page->metricBox()->setCurrentText("cosine");
    chart->flush();
    for (const auto& p : chart->points("gskm"))
        QVERIFY(p.y() > 0 && p.y() <= 1); // now cosines
}

void TestStudio::paperCheckDrawsBothSweepsAndJudgesTheClaims()
{
    auto* page = m_window->sweepsPage();
    m_window->showPage("sweeps");
    PaperCheckSettings s; // a small check: the figures are the engine's tests', the drawing is this one's
    s.rows = 2000;
    s.iterations = 10;
    s.dims = {32, 256};
    s.fixedK = 32;
    s.ks = {16, 32};
    s.bpas = {1};
    s.rqTrainRows = 1000;
    s.rqHeldOutRows = 200;
    s.rqIterations = 3;
    page->setPaperCheckSettings(s);
    QVERIFY(page->paperCheckButton()->isEnabled()); // no dump needed
    QSignalSpy done(page, &SweepsPage::runFinished);
    QTest::mouseClick(page->paperCheckButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(120000)));
    QVERIFY(done.first().first().toBool());
    QCOMPARE(page->metricBox()->currentText(), QString("cosine"));
    auto* overD = page->sweepChart();
    auto* overK = page->shrinkageChart();
    overD->flush();
    overK->flush();
    QCOMPARE(overD->points("km").size(), 2);
    QCOMPARE(overD->points("gskm")[1].x(), 256.0);
    QCOMPARE(overK->points("gskm").size(), 2);
    QCOMPARE(overK->points("km")[0].x(), 16.0);
    for (const auto& p : overK->points("gskm"))
        QVERIFY(p.y() > 0 && p.y() <= 1); // cosines
    QVERIFY(overK->view()->chart()->title().contains("vs K"));
    const QString report = page->paperCheckReport()->toPlainText();
    QVERIFY2(report.contains("of 7 hold"), qPrintable(report));
    QVERIFY(report.contains("Shannon bound"));
    // GSKM-RQ's change against KM-RQ beside them, coloured by the lower NMSE.
    QVERIFY(report.contains("Δ% GSKM − KM"));
    const QString html = page->paperCheckReport()->toHtml();
    QVERIFY(html.contains(views::MetricsTableModel::methodColor(1).name()) ||
            html.contains(views::MetricsTableModel::methodColor(-1).name()));
    page->metricBox()->setCurrentText("gain_error"); // both charts follow the metric
    overK->flush();
    QVERIFY(overK->points("km")[0].y() > 1); // gain errors of 256-wide rows, not cosines
}

void TestStudio::shrinkageStudyOfKeysAndValues()
{
    auto* page = m_window->sweepsPage();
    page->valuesEdit()->setText("8,16");
    page->shrinkageKsEdit()->setText("16,64");
    page->itersBox()->setValue(10);
    QSignalSpy done(page, &SweepsPage::runFinished);
    QTest::mouseClick(page->shrinkageButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(60000)));
    QVERIFY(done.first().first().toBool());
    auto* chart = page->shrinkageChart();
    chart->flush();
    QCOMPARE(chart->seriesNames().size(), 4); // keys and values at K = 16 and 64
    for (const auto& name : chart->seriesNames()) {
        const auto pts = chart->points(name);
        QCOMPARE(pts.size(), 2);
        for (const auto& p : pts)
            QVERIFY(p.y() > 0 && p.y() < 1); // KM centroids are means: always shorter on average
    }
    // More codewords, less shrinkage (centroids average fewer rows).
    QVERIFY(chart->points("values, K=64")[1].y() > chart->points("values, K=16")[1].y());
}

void TestStudio::weightsFollowTau()
{
    auto* page = m_window->weightsPage();
    m_window->showPage("weights");
    QCOMPARE(page->layerBox()->count(), 5);
    QSignalSpy ready(page, &WeightsPage::normsReady);
    page->layerBox()->setCurrentIndex(2);
    QVERIFY(ready.wait(test::waitMs(10000)));
    page->logChart()->flush();
    const auto before = page->logChart()->points("values");
    QCOMPARE(before.size(), 50);
    QVERIFY(page->ratiosText().contains("raw max/median"));
    // The chart is titled with the control's τ (λ = τ / median‖g‖ is the header's name for it).
    QVERIFY(page->logChart()->title().contains("τ") && !page->logChart()->title().contains("λ"));
    page->tauSlider()->setValue(10); // τ = 10: λ ten times larger, weights spread further
    QCOMPARE(page->tau(), 10.0);
    page->logChart()->flush();
    const auto after = page->logChart()->points("values");
    QVERIFY(after.last().x() > before.last().x());
}

void TestStudio::latencyPageSaysHowToMeasure()
{
    auto* page = m_window->latencyPage();
    m_window->showPage("latency");
    page->refresh();
    QVERIFY(page->messageText().contains("No decode-latency results"));
    // Run is there on every machine: the CPU is always a choice, CUDA only with a device.
    QVERIFY(page->runButton()->isEnabled());
    QCOMPARE(page->backendBox()->itemData(0).toString(), QString("cpu"));
    const bool device = !gpu::queryDevices().devices.empty();
    QCOMPARE(page->backendBox()->count(), device ? 2 : 1);
    QVERIFY(page->messageText().contains("Press <b>Run</b>"));
    if (!device) {
        QVERIFY(page->messageText().contains("No CUDA device here"));
        QVERIFY2(page->chart()->emptyText().contains("this CPU"), qPrintable(page->chart()->emptyText()));
    }
}

void TestStudio::latencyPageShowsStoredRuns()
{
    // A benchmark run recorded elsewhere (by the CLI on a GPU machine, here written directly with
    // made-up figures): its curves appear per path and batch, x = context, y = µs.
    std::int64_t id = 0;
    {
        RunStore store(m_store.toStdString());
        RunInfo info;
        info.kind = "bench-decode";
        id = store.beginRun(info);
        for (auto [path, us] : {std::pair{DecodePath::Fp16, 40.0}, std::pair{DecodePath::Lookup, 10.0}})
            for (std::int64_t ctx : {1024, 32768}) {
                DecodeBenchPoint p;
                p.context = ctx;
                p.batch = 8;
                p.path = path;
                p.seconds = us * 1e-6 * double(ctx) / 1024.0;
                store.addSeries(id, decodeSeries(p));
                store.addMetrics(id, decodeMetrics(p));
            }
        store.finishRun(id, RunStatus::Done);
    }
    auto* page = m_window->latencyPage();
    page->refresh();
    QVERIFY(page->messageText().contains("latest 1"));
    page->chart()->flush();
    const auto pts = page->chart()->points(QString("run %1: lookup b=8").arg(id));
    QCOMPARE(pts.size(), 2);
    QCOMPARE(pts[1].x(), 32768.0);
    QVERIFY(std::abs(pts[1].y() - 320.0) < 1e-9);
    QCOMPARE(page->chart()->points(QString("run %1: fp16 b=8").arg(id)).size(), 2);
    {
        RunStore store(m_store.toStdString());
        store.deleteRun(id);
    }
}

void TestStudio::latencyFrontierPrefersMeasuredPoints()
{
    // The frontier joins train runs' attention error with GPU decode times of the same D, R, K:
    // a modelled run (bench-decode --model-device) for every path, then a measured one for lookup
    // and FP16 only, which take the modelled points' places. Written directly, with made-up figures.
    std::vector<std::int64_t> ids;
    {
        RunStore store(m_store.toStdString());
        auto train = [&](const char* rope, double error) {
            RunInfo info;
            info.kind = "train";
            info.settingsJson = nlohmann::json{{"dim", 64}, {"stages", 6}, {"k", 256}, {"key_rope", rope}}.dump();
            const auto id = store.beginRun(info);
            store.addMetrics(id, {{"attention", "", "layers.2", -1, -1, "relative_l2", error}});
            store.finishRun(id, RunStatus::Done);
            ids.push_back(id);
        };
        train("as-dumped", 0.15);
        train("post", 0.25);
        auto decode = [&](const char* backend, const char* device, std::vector<std::pair<DecodePath, double>> us) {
            RunInfo info;
            info.kind = "bench-decode";
            info.backend = backend;
            info.device = device;
            info.settingsJson = nlohmann::json{{"dim", 64}, {"stages", 6}, {"k", 256}}.dump();
            const auto id = store.beginRun(info);
            for (auto [path, t] : us)
                for (std::int64_t ctx : {8192, 32768}) { // only 32K, batch 1 is the frontier's point
                    DecodeBenchPoint p;
                    p.context = ctx;
                    p.batch = 1;
                    p.path = path;
                    p.seconds = t * 1e-6 * (ctx == 32768 ? 1.0 : 0.25);
                    store.addMetrics(id, decodeMetrics(p));
                }
            store.finishRun(id, RunStatus::Done);
            ids.push_back(id);
        };
        decode("model", "model of the NVIDIA H200",
               {{DecodePath::Fp16, 32}, {DecodePath::Paper, 38}, {DecodePath::Lookup, 10}});
        decode("cuda", "NVIDIA H200 (device 0)", {{DecodePath::Fp16, 40}, {DecodePath::Lookup, 30}});
        decode("model", "model of the NVIDIA H100", {{DecodePath::Paper, 50}});             // another GPU's model
        decode("cpu", "2 threads", {{DecodePath::Fp16, 7000}, {DecodePath::Lookup, 3000}}); // not a GPU's
    }
    auto* page = m_window->latencyPage();
    page->frontierAt()->setCurrentIndex(0); // 32K tokens, batch 1
    page->refresh();
    auto* chart = page->frontierChart();
    chart->flush();
    const auto lookup = chart->points("lookup, D=64 (measured)");
    QCOMPARE(lookup.size(), 1);
    QVERIFY(std::abs(lookup[0].x() - 30) < 1e-9 && lookup[0].y() == 0.25); // keys after RoPE
    QVERIFY(chart->points("lookup, D=64 (model of the NVIDIA H200)").isEmpty());
    const auto paper = chart->points("paper, D=64 (model of the NVIDIA H200)"); // not measured: the model's stays
    QCOMPARE(paper.size(), 1);
    QVERIFY(std::abs(paper[0].x() - 38) < 1e-9 && paper[0].y() == 0.15);
    QCOMPARE(chart->points("paper, D=64 (model of the NVIDIA H100)").size(), 1); // apart from the H200's
    const QString fp16 = "fp16, exact cache (NVIDIA H200 (device 0))";
    QVERIFY(chart->isReference(fp16));
    QVERIFY(std::abs(chart->points(fp16).front().x() - 40) < 1e-9);
    {
        RunStore store(m_store.toStdString());
        for (auto id : ids)
            store.deleteRun(id);
    }
    page->refresh();
    chart->flush();
    QVERIFY(chart->seriesNames().isEmpty());
}

void TestStudio::latencyRunFillsTheChartOnTheCpu()
{
    // The form's sweep on the CPU, live: one point per path at batch 1, each verified, recorded as a
    // cpu run, and listed in the speed–quality table with the attention error of the train run of
    // the same D, R, K when there is one (none here: "no train run").
    auto* page = m_window->latencyPage();
    page->backendBox()->setCurrentIndex(0);
    page->findChild<QLineEdit*>("contexts")->setText("300,2100");
    page->findChild<QLineEdit*>("batches")->setText("1");
    page->findChild<QSpinBox*>("heads")->setValue(8);
    page->findChild<QSpinBox*>("kvHeads")->setValue(2);
    page->findChild<QSpinBox*>("threads")->setValue(2);
    QSignalSpy done(&m_window->context().runner(), &JobRunner::finished);
    page->runButton()->click();
    QVERIFY(done.wait(test::waitMs(120000)));
    page->chart()->flush();
    for (const char* path : {"fp16", "paper", "lookup"}) {
        QCOMPARE(page->chart()->points(QString("%1 b=1").arg(path)).size(), 2);
        QCOMPARE(page->chart()->points(QString("roofline %1 b=1").arg(path)).size(), 2);
    }
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"bench-decode", RunStatus::Done, "", 1});
    QCOMPARE(int(runs.size()), 1);
    QCOMPARE(runs[0].backend, std::string("cpu"));
    QVERIFY(QString::fromStdString(runs[0].device).contains("2 threads"));
    const auto summary = nlohmann::json::parse(runs[0].summaryJson);
    QVERIFY(summary["all_verified"].get<bool>());
    QVERIFY(summary["read_bytes_per_second"].get<double>() > 0);
    auto* table = page->speedQualityTable();
    QCOMPARE(table->rowCount(), 3); // fp16, lookup, paper of the one run
    QCOMPARE(table->columnCount(), 5 + 2);
    // The rows come per path in name order: fp16 (an FP16 cache: no attention error), lookup, paper.
    QCOMPARE(table->item(0, 4)->text(), QString("fp16"));
    QVERIFY(table->item(0, 3)->text().contains("FP16 cache"));
    QVERIFY(table->item(1, 3)->text().contains("no train run"));
    QVERIFY(page->messageText().contains("latest 1"));
    for (int r = 0; r < 3; ++r)
        QVERIFY2(table->item(r, 6)->text().contains("s"), qPrintable(table->item(r, 6)->text()));
}

// The Latency page's second tab decodes a GGUF model token by token (the bundled synthetic tiny
// llama with its weights in blocks, random codebooks of keys after RoPE: timing does not depend on their values) at two
// contexts, fills its chart per path, and records a generate run with the CLI's metrics.
void TestStudio::latencyPageDecodesARealModel()
{
    auto* page = m_window->latencyPage();
    m_window->showPage("latency");
    const QString gguf = QStringLiteral(GSRQ_SOURCE_DIR "/tests/data/tiny-llama-q.gguf"); // weights in blocks
    QTemporaryDir dir;
    const QString books = dir.filePath("post.safetensors");
    {
        CodebookFile f;
        f.metadata = {{"key_rope", "post"}, {"method", "gskm"}, {"dim", "8"}, {"stages", "2"}, {"k", "16"}};
        std::mt19937 rng(3);
        std::normal_distribution<float> n(0.f, 0.5f);
        for (int l = 0; l < 2; ++l) // the tiny model: 2 layers, KV width 16
            for (const char* kind : {"key", "value"}) {
                CodebookEntry e;
                e.tensor = "layers." + std::to_string(l) + "." + kind;
                e.codebooks.allocate(8, 2, 16, 2);
                for (auto& v : e.codebooks.data)
                    v = n(rng);
                f.entries.push_back(std::move(e));
            }
        writeCodebookFile(books.toStdString(), f, DType::F32);
    }
    page->findChild<QLineEdit*>("genModel")->setText(gguf);
    page->findChild<QLineEdit*>("genText")->setText(QStringLiteral(GSRQ_SOURCE_DIR "/README.md"));
    page->findChild<QLineEdit*>("genCodebooks")->setText(QString());
    page->findChild<QLineEdit*>("genContexts")->setText("64,200");
    page->findChild<QSpinBox*>("genPrefill")->setValue(32);
    page->findChild<QSpinBox*>("genTokens")->setValue(2);
    page->findChild<QSpinBox*>("threads")->setValue(1);
    // No codebooks: said, nothing started.
    QSignalSpy shown(m_window.get(), &MainWindow::messageShown);
    page->decodeModelButton()->click();
    QCOMPARE(shown.size(), 1);
    QVERIFY(shown.first().first().toString().contains("Codebooks"));
    QVERIFY(page->decodeModelButton()->isEnabled());

    page->findChild<QLineEdit*>("genCodebooks")->setText(books);
    QSignalSpy done(&m_window->context().runner(), &JobRunner::finished);
    page->decodeModelButton()->click();
    QVERIFY(!page->decodeModelButton()->isEnabled());
    QVERIFY2(done.wait(test::waitMs(120000)), qPrintable(page->modelLog()));
    QTRY_VERIFY(page->modelLog().contains("32-token prefill"));
    QVERIFY2(page->modelLog().contains("Q4_0, Q4_1, Q8_0 blocks for 15 of 15 matrices"), qPrintable(page->modelLog()));
    page->modelChart()->flush();
    for (const char* series : {"fp16 ms/token", "lookup ms/token", "fp16 attention ms", "lookup attention ms"}) {
        const auto pts = page->modelChart()->points(series);
        QCOMPARE(pts.size(), 2);
        QCOMPARE(pts[0].x(), 64.0);
        QCOMPARE(pts[1].x(), 200.0);
        QVERIFY(pts[0].y() > 0);
    }
    // The attention is part of the step.
    QVERIFY(page->modelChart()->points("lookup attention ms")[1].y() <
            page->modelChart()->points("lookup ms/token")[1].y());
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"generate", RunStatus::Done, "", 1});
    QCOMPARE(int(runs.size()), 1);
    const auto settings = nlohmann::json::parse(runs[0].settingsJson);
    QCOMPARE(settings["prefill"].get<int>(), 32);
    QCOMPARE(settings["paths"], nlohmann::json::parse(R"(["fp16","lookup"])"));
    int cacheBytes = 0;
    for (const auto& m : store.metrics(runs[0].id))
        if (m.name == "cache_bytes" && m.scope == "lookup@200") {
            // 2 layers × 200 tokens × 2 subspaces × 4 bytes of packed codes × (keys and values), as
            // the CLI's JSON reports it (tst_model generateReportsLatencyPerPath)
            QCOMPARE(m.value, 2 * 200.0 * 2 * 4 * 2);
            ++cacheBytes;
        }
    QCOMPARE(cacheBytes, 1);
    // Show stored runs draws the recorded run's series.
    page->refresh();
    page->modelChart()->flush();
    QCOMPARE(page->modelChart()->points(QString("run %1: lookup ms/token").arg(runs[0].id)).size(), 2);
}

void TestStudio::latencyRunFillsTheChartOnAGpu()
{
    if (gpu::queryDevices().devices.empty())
        QSKIP("no CUDA device: the CPU is the only choice (checked in latencyPageSaysHowToMeasure)");
    auto* page = m_window->latencyPage();
    page->backendBox()->setCurrentIndex(1);
    page->findChild<QLineEdit*>("contexts")->setText("2048");
    page->findChild<QLineEdit*>("batches")->setText("1");
    page->findChild<QSpinBox*>("heads")->setValue(32);
    page->findChild<QSpinBox*>("kvHeads")->setValue(8);
    if (test::kEmulated) { // every thread on one CPU core: a smaller model, the same steps
        page->findChild<QSpinBox*>("heads")->setValue(8);
        page->findChild<QSpinBox*>("kvHeads")->setValue(2);
        page->findChild<QLineEdit*>("contexts")->setText("256");
    }
    QSignalSpy done(&m_window->context().runner(), &JobRunner::finished);
    page->runButton()->click();
    QVERIFY(done.wait(test::waitMs(120000)));
    page->chart()->flush();
    // Exactly the form's sweep: one point per path at batch 1, and no other batch.
    for (const char* path : {"fp16", "paper", "lookup"})
        QCOMPARE(page->chart()->points(QString("%1 b=1").arg(path)).size(), 1);
    QVERIFY(page->chart()->points("fp16 b=8").isEmpty());
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"bench-decode", RunStatus::Done, "", 1});
    QCOMPARE(int(runs.size()), 1);
    QCOMPARE(runs[0].backend, std::string("cuda"));
    QVERIFY(nlohmann::json::parse(runs[0].summaryJson)["all_verified"].get<bool>());
}

// A run of one kind records the same settings keys whichever face ran it (core/jobs/run_records.h
// builds them for both): the app's runs are those the tests above recorded, the CLI runs each kind
// here into a store of its own. Summaries whose keys do not depend on the data are compared too.
void TestStudio::eachRunKindRecordsTheSameSettingsFromBothFaces()
{
    const QString cliDb = m_dir.filePath("cli-faces.db");
    const QString models = QStringLiteral(GSRQ_SOURCE_DIR "/resources/models/stories260K/");
    const QString books = m_dir.filePath("gui-codebooks.safetensors"); // trainFillsTableAndExports wrote it
    QVERIFY(QFile::exists(books));
    struct Case {
        const char* kind;
        bool many;        // compare: over many tensors (settings with "tensors"); ppl: a table of --methods
        bool summaryKeys; // the summary's keys do not depend on the data: compared too
        QStringList args;
    };
    std::vector<Case> cases = {
        {"compare",
         false,
         false,
         {"compare", kSample, "--tensor", "layers.2.value", "--dim", "16", "--k", "8", "--iters", "3", "-q"}},
        {"compare",
         true,
         true,
         {"compare", kSample, "--tensors", "layers.*.value", "--dim", "16", "--k", "8", "--iters", "3", "-q"}},
        {"sweep",
         false,
         true,
         {"sweep", kSample, "--tensor", "layers.2.value", "--over", "dim", "--values", "4,8", "--k", "8", "--iters",
          "3", "-q"}},
        {"train",
         false,
         false,
         {"train", kSample, "--tensors", "layers.1.value", "--dim", "8", "--stages", "2", "--k", "16", "--iters", "3",
          "-q"}},
        {"ppl",
         false,
         true,
         {"ppl", models + "stories260K.bin", "--tokenizer", models + "tok512.bin", "--generate", "--seq-len", "32",
          "--sequences", "2", "--codebooks", books}},
        // The comparison table (compareMethodsOnTheModel): `many` marks a ppl run with methods.
        {"ppl",
         true,
         true,
         {"ppl", models + "stories260K.bin", "--tokenizer", models + "tok512.bin", "--generate", "--seq-len", "32",
          "--sequences", "2", "--methods", "fp32,kivi-2", "--train-dump", kSample}},
        {"paper-check",
         false,
         true,
         {"paper-check", "--rows", "1024", "--iters", "3", "--dims", "8,16", "--fixed-k", "16", "--ks", "8,16",
          "--fixed-dim", "8", "--bpas", "", "-q"}},
    };
    // The Latency page ran on the CPU (latencyRunFillsTheChartOnTheCpu) and, with a device, on it last
    // (latencyRunFillsTheChartOnAGpu): the CLI's default backend picks the same.
    cases.push_back({"bench-decode",
                     false,
                     true,
                     {"bench-decode", "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--ctx", "256", "--batch",
                      "1", "--reps", "20", "--warmup", "1", "--threads", "2"}});

    const auto keysOf = [](const std::string& json) {
        std::set<std::string> keys;
        const auto j = nlohmann::json::parse(json);
        for (auto it = j.begin(); it != j.end(); ++it)
            keys.insert(it.key());
        return keys;
    };
    const auto text = [](const std::set<std::string>& keys) {
        std::string s;
        for (const auto& k : keys)
            s += " " + k;
        return s;
    };
    // The newest run of `kind` a face recorded (the app's command is "gsrq-studio").
    const auto newest = [&](const QString& db, const Case& c, bool app) -> std::optional<RunInfo> {
        RunStore store(db.toStdString());
        for (const auto& r : store.listRuns({c.kind, RunStatus::Done, "", 0}))
            if ((r.command == "gsrq-studio") == app &&
                (std::string_view(c.kind) != "compare" || keysOf(r.settingsJson).count("tensors") == c.many) &&
                (std::string_view(c.kind) != "ppl" ||
                 nlohmann::json::parse(r.settingsJson)["methods"].empty() != c.many))
                return r;
        return std::nullopt;
    };
    for (const auto& c : cases) {
        const auto r = test::gsrqRun(QStringList{"--db", cliDb} + c.args);
        QVERIFY2(r.code == 0, (std::string(c.kind) + ": " + r.err.toStdString()).c_str());
        const auto fromApp = newest(m_store, c, true);
        const auto fromCli = newest(cliDb, c, false);
        QVERIFY2(fromApp, cat("no ", c.kind, " run from the app").c_str());
        QVERIFY2(fromCli, cat("no ", c.kind, " run from the CLI").c_str());
        const auto a = keysOf(fromApp->settingsJson), b = keysOf(fromCli->settingsJson);
        QVERIFY2(a == b,
                 cat(c.kind, c.many ? " (many tensors)" : "", " settings: app", text(a), "; cli", text(b)).c_str());
        QVERIFY2(!fromApp->backend.empty() && !fromCli->backend.empty(), c.kind);
        QVERIFY2(!fromApp->device.empty() && !fromCli->device.empty(), c.kind);
        if (c.summaryKeys) {
            const auto sa = keysOf(fromApp->summaryJson), sb = keysOf(fromCli->summaryJson);
            QVERIFY2(sa == sb, cat(c.kind, " summary: app", text(sa), "; cli", text(sb)).c_str());
        }
    }
}

// The Long context page on the bundled stories260K (llama2.c, plain prompts): the passkey task at
// two context lengths and two depths over FP32 and 1-bit KIVI caches, one heatmap per method, the
// accuracy-against-bits chart with its intervals (exported with them), a cell's samples, the run
// recorded with every answer; bad settings are a message.
void TestStudio::longContextPageRunsTheTasks()
{
    auto* page = m_window->longContextPage();
    QVERIFY(m_window->showPage("long-context"));
    page->modelEdit()->setText(test::sourcePath("resources/models/stories260K/stories260K.bin"));
    page->tokenizerEdit()->setText(test::sourcePath("resources/models/stories260K/tok512.bin"));
    page->tasksEdit()->setText("passkey");
    page->contextsEdit()->setText("448,512");
    page->depthsEdit()->setText("0,100");
    page->samplesBox()->setValue(2);
    page->methodsEdit()->setText("fp32,kivi-1");
    page->codebooksEdit()->clear();
    QSignalSpy done(page, &LongContextPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(120000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(page->statusText()));
    QCOMPARE(page->answers().size(), std::size_t(2 * 2 * 2)); // contexts × samples × methods
    QCOMPARE(page->heatmaps().size(), std::size_t(2));
    for (auto* h : page->heatmaps()) {
        QCOMPARE(h->rowCount(), 2);    // depths 0 and 100
        QCOMPARE(h->columnCount(), 2); // 448 and 512 tokens
        for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 2; ++c)
                QVERIFY(h->cell(r, c).text.endsWith('%')); // one sample per depth and length: 0% or 100%
    }
    QVERIFY(page->heatmaps()[0]->title().startsWith("fp32"));
    auto* chart = page->bitsChart();
    chart->flush();
    // A series per method family and length: FP32's point at 32 bits, KIVI-1's at 2 (one bit, an FP16
    // scale and zero per 32), each with its 95% interval (two samples: wider than 0.3 either way).
    const auto fp32 = chart->points("fp32, 448 tokens"), kivi = chart->points("kivi, 512 tokens");
    QCOMPARE(fp32.size(), 1);
    QCOMPARE(kivi.size(), 1);
    QCOMPARE(fp32[0].x(), 32.0);
    QCOMPARE(kivi[0].x(), 2.0);
    for (const char* name : {"fp32, 448 tokens", "fp32, 512 tokens", "kivi, 448 tokens", "kivi, 512 tokens"}) {
        const auto p = chart->points(name);
        const auto bars = chart->intervals(name);
        QCOMPARE(bars.size(), 1);
        QVERIFY(bars[0].first <= p[0].y() && p[0].y() <= bars[0].second && bars[0].second - bars[0].first > 0.3);
    }
    const QString csv = m_dir.filePath("long-context.csv");
    QVERIFY(chart->exportCsv(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readLine().trimmed(), QByteArray("series,x,y,low,high"));
    // A cell's samples: FP32 at depth 0 and 448 tokens is sample 0, its prompt ending in the question.
    page->showCell(0, 0, 0);
    QCOMPARE(page->samplesTable()->rowCount(), 1);
    QCOMPARE(page->samplesTable()->item(0, 0)->text(), QString("fp32"));
    QVERIFY(page->samplesTable()->item(0, 6)->text().endsWith("The pass key is"));
    QCOMPARE(page->samplesTable()->item(0, 3)->text().size(), 5); // the 5-digit key
    // Recorded: the run with its prompts and answers.
    RunStore store(m_store.toStdString());
    const auto runs = store.listRuns({"tasks", std::nullopt, "", 1});
    QCOMPARE(runs.size(), std::size_t(1));
    QCOMPARE(runs.front().status, RunStatus::Done);
    QCOMPARE(store.samples(runs.front().id).size(), std::size_t(4 + 8));
    // A method it does not know is a message, and nothing runs.
    page->methodsEdit()->setText("fp32,int4");
    QSignalSpy shown(m_window.get(), &MainWindow::messageShown);
    done.clear();
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QCOMPARE(done.size(), 1);
    QVERIFY(!done.first().first().toBool());
    QVERIFY(m_window->lastMessage().contains("int4"));
}

// Preferences: every path has a Browse button; OK without a change keeps the saved store (the
// window's store came from --store, this session's only); a store chosen there is saved.
void TestStudio::preferencesKeepTheSavedStore()
{
    QSettings().remove("store/path");
    const QString other = m_dir.filePath("chosen.db");
    int browse = 0;
    const auto answer = [&](const QString& newStore) {
        QTimer::singleShot(0, [&, newStore] {
            auto* d = qobject_cast<QDialog*>(QApplication::activeModalWidget());
            QVERIFY(d);
            browse = 0;
            for (auto* b : d->findChildren<QPushButton*>())
                browse += b->text() == "Browse…" ? 1 : 0;
            for (auto* e : d->findChildren<QLineEdit*>())
                if (e->text() == m_window->context().storePath() && !newStore.isEmpty())
                    e->setText(newStore);
            d->accept();
        });
        m_window->showPreferences();
    };
    answer({});
    QCOMPARE(browse, 3); // the store, the model and its tokenizer
    QVERIFY2(!QSettings().contains("store/path"), qPrintable(QSettings().value("store/path").toString()));
    QCOMPARE(m_window->context().storePath(), m_store);
    answer(other);
    QCOMPARE(QSettings().value("store/path").toString(), other);
    QCOMPARE(m_window->context().storePath(), other);
    answer(m_store); // back to this suite's store
    QCOMPARE(m_window->context().storePath(), m_store);
    QSettings().remove("store/path");
}

// The GSRQ page trains keys after RoPE when asked (what the lookup path and the Latency page's
// real-model tab need): the file says so; as dumped stays the default.
void TestStudio::trainingKeysAfterRope()
{
    QVERIFY(m_window->openDump(kSample));
    auto* page = m_window->trainPage();
    m_window->showPage("train");
    QCOMPARE(page->keyRopeBox()->currentData().toString(), QString("as-dumped"));
    page->keyRopeBox()->setCurrentIndex(page->keyRopeBox()->findData("post"));
    page->tensorsEdit()->setText("layers.1.key");
    page->dimBox()->setValue(8);
    page->stagesBox()->setValue(2);
    page->kBox()->setValue(16);
    QSignalSpy done(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(30000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(m_window->lastMessage()));
    const QString out = m_dir.filePath("post.safetensors");
    QVERIFY(page->exportCodebooks(out));
    QCOMPARE(readCodebookFile(out.toStdString()).metadata.at("key_rope"), std::string("post"));
    page->keyRopeBox()->setCurrentIndex(page->keyRopeBox()->findData("as-dumped"));
    // The Latency page's real-model tab follows the model Preferences set, until the user types one.
    auto* genModel = m_window->latencyPage()->findChild<QLineEdit*>("genModel");
    QVERIFY(genModel);
    const QString model = test::sourcePath("resources/models/stories260K/stories260K.bin");
    const QString before = m_window->context().pplModelPath(), tokenizer = m_window->context().pplTokenizerPath();
    m_window->context().setPplModel(model + ".chosen", tokenizer);
    QCOMPARE(genModel->text(), model + ".chosen");
    genModel->setText("typed.gguf");
    genModel->setModified(true); // as typing does
    m_window->context().setPplModel(model, tokenizer);
    QCOMPARE(genModel->text(), QString("typed.gguf"));
    genModel->setModified(false);
    m_window->context().setPplModel(before == model ? QString() : before, tokenizer);
}

// The method comparison trains and measures for minutes on a real model: it shows its progress and
// can be cancelled, leaving a cancelled run and the page ready for another.
void TestStudio::methodComparisonShowsProgressAndCancels()
{
    QVERIFY(m_window->openDump(kSample));
    auto* page = m_window->trainPage();
    m_window->showPage("train");
    page->compareMethodsEdit()->setText("fp32,km-rq@2,gsrq@2,km-rq@1,gsrq@1");
    QSignalSpy done(page, &TrainPage::compareFinished);
    QTest::mouseClick(page->compareButton(), Qt::LeftButton);
    QVERIFY(page->compareProgress()->isVisible());
    QVERIFY(page->compareCancelButton()->isEnabled());
    QVERIFY(!page->compareButton()->isEnabled());
    QTRY_VERIFY_WITH_TIMEOUT(page->compareProgress()->value() > 0 || !done.isEmpty(), test::waitMs(60000));
    QVERIFY2(done.isEmpty(), "the comparison ended before it could be cancelled");
    QTest::mouseClick(page->compareCancelButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(10000)) || !done.isEmpty());
    QVERIFY(!done.first().first().toBool());
    QVERIFY(page->compareButton()->isEnabled());
    QVERIFY(!page->compareProgress()->isVisible());
    QVERIFY(page->pplResultText().contains("cancelled"));
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
            std::string seen;
            return latestRunIs("ppl", "cancelled", &seen);
        }(),
        test::waitMs(30000));
}

QTEST_MAIN(TestStudio)
#include "tst_studio.moc"
