// The desktop app across what a user does over a session on a real model's results: the
// perplexity chart of several evaluations, comparing two trainings of many tensors, watching a
// training's stages as they end, and closing the app and opening it again. Offscreen, Fusion style,
// real widgets; the store and settings are the test's own.

#include "latency_page.h"
#include "main_window.h"
#include "model_page.h"
#include "page_settings.h"
#include "perplexity_chart.h"
#include "runs_page.h"
#include "test_util.h"
#include "train_page.h"
#include "views/chart_panel.h"
#include "views/heatmap_view.h"

#include "core/io/safetensors.h"
#include "core/io/synth.h"
#include "core/store/run_store.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QtTest>

using namespace gsrq;
using namespace gsrq::studio;

namespace {
const QString kSample = QStringLiteral(GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors");

PerplexityPoint point(const char* family, double bits, double perplexity)
{
    PerplexityPoint p;
    p.family = family;
    p.label = family;
    p.bits = p.effectiveBits = bits;
    p.perplexity = perplexity;
    return p;
}
} // namespace

class TestStudioSession : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void perplexityChartNamesWhatDiffers();
    void runsOfManyTensorsCompareAsTheirMedians();
    void trainingDrawsEachStageAsItEnds();
    void settingsAndTheLastModelRunSurviveARestart();
    void changedPageRestoresNothing();
    void latencyTabOffersToTrainWhatItNeeds();
    void walkEveryPage();
    void modelPageFollowsTheDumpsHeads();
    void perplexityShowsProgressAndCancels();

private:
    QTemporaryDir m_dir;
};

void TestStudioSession::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true); // QSettings and paths away from the user's
    QSettings().clear();                      // and from an earlier run of this suite
    QApplication::setStyle("Fusion");
}

// The Runs page's "Perplexity of every evaluation" of one model on two texts (numbers as measured on
// SmolLM2-135M, the Devil's Dictionary and the Debian reference): each series named by the text,
// not by the model every set shares (eight legend entries read "SmolLM2-135M-I…"), each text's FP32
// line its own; GSRQ and KM-RQ at the same effective bits drawn side by side; KIVI-1's 76,531 named
// above the axis, which stays on the others' scale.
void TestStudioSession::perplexityChartNamesWhatDiffers()
{
    const QString model = QStringLiteral("SmolLM2-135M-Instruct.Q4_1.gguf");
    PerplexitySet devil{model + ", devil.eval.txt, 8×512 tokens",
                        {model, "devil.eval.txt", "8×512 tokens"},
                        74.38,
                        {point("gsrq", 1.06, 91.1), point("km-rq", 1.06, 91.7), point("kivi", 1.5, 76531)},
                        {1},
                        {}};
    PerplexitySet debian{model + ", debian-reference.eval.txt, 8×512 tokens",
                         {model, "debian-reference.eval.txt", "8×512 tokens"},
                         8.21,
                         {point("gsrq", 1.06, 10.4), point("km-rq", 1.06, 10.6)},
                         {2},
                         {}};
    QCOMPARE(shortSetNames({devil, debian}), QStringList({"devil.eval.txt", "debian-reference.eval.txt"}));
    views::ChartPanel chart("p", "bits", "perplexity");
    chart.resize(700, 450);
    chart.show();
    QVERIFY(drawPerplexity(chart, {devil, debian}));
    chart.flush();
    for (const auto& name : chart.seriesNames())
        QVERIFY2(!name.contains("SmolLM2"), qPrintable(name));
    QVERIFY(chart.seriesNames().contains("devil.eval.txt: FP32 74.380"));
    QVERIFY(chart.seriesNames().contains("debian-reference.eval.txt: FP32 8.210"));
    QVERIFY(chart.drawnPoints("devil.eval.txt: gsrq")[0].x() != chart.drawnPoints("devil.eval.txt: km-rq")[0].x());
    QCOMPARE(chart.points("devil.eval.txt: gsrq")[0].x(), 1.06);
    QCOMPARE(chart.clippedPoints(), QStringList{"devil.eval.txt: kivi at 1.5: 7.653e+04"});
    // One evaluation by runs of codebooks calibrated on two texts (in and out of domain): a series
    // for each calibration, not one line joining them.
    PerplexitySet mixed = devil;
    mixed.points = {point("gsrq", 1.06, 91.1), point("gsrq", 1.06, 104.2)};
    mixed.calibration = {"calib-32x512", "calib-debian-reference-32x512"};
    QVERIFY(drawPerplexity(chart, {mixed}));
    chart.flush();
    QCOMPARE(chart.points("gsrq [calib-32x512]").size(), 1);
    QCOMPARE(chart.points("gsrq [debian-reference]").size(), 1); // what tells the dumps apart
    // One set: its methods by name alone.
    QVERIFY(drawPerplexity(chart, {devil}));
    chart.flush();
    QVERIFY(chart.seriesNames().contains("gsrq"));
    QVERIFY(chart.seriesNames().contains("FP32 74.380"));
}

// Two trainings of 60 tensors each (SmolLM2's 30 layers' keys and values): selecting both draws each
// run's median over its tensors at each stage with bars from the 25th to the 75th percentile, two
// series where 120 curves overlaid were a tangle; "Every curve" draws all 120.
void TestStudioSession::runsOfManyTensorsCompareAsTheirMedians()
{
    const QString path = m_dir.filePath("many.db");
    std::vector<std::int64_t> ids;
    {
        RunStore store(path.toStdString());
        for (int run = 0; run < 2; ++run) {
            RunInfo info;
            info.kind = "train";
            const auto id = store.beginRun(info);
            std::vector<SeriesPoint> series;
            for (int t = 0; t < 60; ++t)
                for (int stage = 1; stage <= 4; ++stage)
                    series.push_back({cat("layers.", t / 2, t % 2 ? ".value" : ".key", ".nmse_vs_stage"), double(stage),
                                      (t + 1) * 0.1 / stage * (run + 1)});
            store.addSeries(id, series);
            store.finishRun(id, RunStatus::Done);
            ids.push_back(id);
        }
    }
    MainWindow window(path);
    window.resize(1200, 800);
    window.show();
    auto* runs = window.runsPage();
    runs->refresh();
    runs->selectRuns({qint64(ids[0]), qint64(ids[1])});
    auto* chart = runs->overlayChart();
    chart->flush();
    const QString first = QStringLiteral("run %1: median of 60 curves").arg(ids[0]);
    QCOMPARE(chart->seriesNames(), QStringList({first, QStringLiteral("run %1: median of 60 curves").arg(ids[1])}));
    // Stage 1 of the first run: the values 0.1, 0.2, ..., 6.0; median 3.05, quartiles (type 7) at
    // 0.25 · 59 = 14.75 and 0.75 · 59 = 44.25 of the sorted values: 1.575 and 4.525.
    QCOMPARE(chart->points(first).size(), 4);
    QVERIFY(std::abs(chart->points(first)[0].y() - 3.05) < 1e-9);
    QVERIFY(std::abs(chart->intervals(first)[0].first - 1.575) < 1e-9);
    QVERIFY(std::abs(chart->intervals(first)[0].second - 4.525) < 1e-9);
    QVERIFY(runs->everyCurveBox()->isEnabled());
    runs->everyCurveBox()->setChecked(true);
    chart->flush();
    QCOMPARE(chart->seriesNames().size(), 120);
    QVERIFY(chart->seriesNames().contains(QStringLiteral("run %1: layers.29.value").arg(ids[1])));
}

// "After each stage" fills while the training runs: a stage's point is on the chart while the run
// is still going (it stayed empty until the whole training finished, then showed every stage at
// once), and a cancel leaves the page ready. Then a short training's every stage, live and final.
void TestStudioSession::trainingDrawsEachStageAsItEnds()
{
    MainWindow window(m_dir.filePath("train.db"));
    window.resize(1200, 800);
    window.show();
    QVERIFY(window.openDump(kSample));
    auto* page = window.trainPage();
    window.showPage("train");
    // Long enough to be watched: 16 stages of K = 256 on every value of the sample (seconds).
    page->tensorsEdit()->setText("layers.*.value");
    page->dimBox()->setValue(8);
    page->stagesBox()->setValue(16);
    page->kBox()->setValue(256);
    QSignalSpy done(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!page->stageChart()->seriesNames().isEmpty() || !done.isEmpty(), test::waitMs(60000));
    QVERIFY2(done.isEmpty() && !page->runButton()->isEnabled(), "no stage was drawn before the training ended");
    QVERIFY(page->liveStagePoints() >= 1);
    QTest::mouseClick(page->cancelButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(page->runButton()->isEnabled(), test::waitMs(60000));

    page->tensorsEdit()->setText("layers.1.value,layers.2.value");
    page->stagesBox()->setValue(3);
    page->kBox()->setValue(16);
    done.clear();
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(60000)));
    QVERIFY(done.first().first().toBool());
    QCOMPARE(page->liveStagePoints(), 2 * 3); // two tensors, three stages each, as they ended
    QCOMPARE(page->stageChart()->points("layers.2.value").size(), 3);
}

// Closing the app keeps each page's settings and the Model page's last run: the next start shows the
// same D, K, iterations and tensors, the GSRQ page's stages, and the model run's maps (the same cells)
// with its run number, read back from the store.
void TestStudioSession::settingsAndTheLastModelRunSurviveARestart()
{
    QSettings().clear();
    const QString store = m_dir.filePath("restart.db");
    std::int64_t runId = 0;
    QStringList cells;
    {
        MainWindow window(store);
        window.resize(1200, 800);
        window.show();
        QVERIFY(window.openDump(kSample));
        auto* page = window.modelPage();
        window.showPage("model");
        page->tensorsEdit()->setText("layers.0.*,layers.3.*");
        page->dimBox()->setValue(16);
        page->kBox()->setValue(32);
        page->itersBox()->setValue(5);
        window.trainPage()->stagesBox()->setValue(7);
        QSignalSpy done(page, &ModelPage::runFinished);
        QTest::mouseClick(page->runButton(), Qt::LeftButton);
        QVERIFY(done.wait(test::waitMs(120000)));
        QVERIFY2(done.first().first().toBool(), qPrintable(page->statusLabel()->text()));
        runId = page->lastRunId();
        QVERIFY(runId > 0);
        auto* map = page->heatmap("nmse");
        for (int r = 0; r < map->rowCount(); ++r)
            for (int c = 0; c < map->columnCount(); ++c)
                cells << map->cell(r, c).text;
        QVERIFY(window.close()); // saves, as quitting does
    }
    MainWindow again(store);
    auto* page = again.modelPage();
    QCOMPARE(page->tensorsEdit()->text(), QString("layers.0.*,layers.3.*"));
    QCOMPARE(page->dimBox()->value(), 16);
    QCOMPARE(page->kBox()->value(), 32);
    QCOMPARE(page->itersBox()->value(), 5);
    QCOMPARE(again.trainPage()->stagesBox()->value(), 7);
    QCOMPARE(page->lastRunId(), runId);
    auto* map = page->heatmap("nmse");
    QCOMPARE(map->rowCount(), 2);
    QStringList restored;
    for (int r = 0; r < map->rowCount(); ++r)
        for (int c = 0; c < map->columnCount(); ++c)
            restored << map->cell(r, c).text;
    QCOMPARE(restored, cells);
    QVERIFY(page->statusLabel()->text().contains(QString::number(runId)));
    // Opening the dump again keeps the restored D and K (the dump's heads are those they were set for),
    // and the GSRQ page's preset list comes back by its place though its labels follow the dump.
    QVERIFY(again.openDump(kSample));
    QCOMPARE(page->dimBox()->value(), 16);
    QCOMPARE(page->kBox()->value(), 32);
    QCOMPARE(again.trainPage()->stagesBox()->value(), 7);
    // Another store's window shows none of this store's runs as its last.
    MainWindow other(m_dir.filePath("other.db"));
    QCOMPARE(other.modelPage()->lastRunId(), std::int64_t(0));
}

// Settings saved from a page whose controls were others (an older version's) are not restored: no
// value lands in the wrong control.
void TestStudioSession::changedPageRestoresNothing()
{
    QSettings settings;
    QWidget before, after;
    auto* a = new QSpinBox(&before);
    a->setRange(0, 100);
    a->setValue(42);
    savePageSettings(settings, "t", &before);
    auto* b = new QSpinBox(&after);
    b->setRange(0, 100);
    new QCheckBox(&after); // a control the saved page did not have
    QVERIFY(!restorePageSettings(settings, "t", &after));
    QCOMPARE(b->value(), 0);
    auto* slider = new QSlider(&before); // sliders too (the Gradient weights page's τ)
    slider->setRange(0, 100);
    slider->setValue(30);
    savePageSettings(settings, "s", &before);
    QWidget withSlider;
    new QSpinBox(&withSlider);
    auto* restoredSlider = new QSlider(&withSlider);
    restoredSlider->setRange(0, 100);
    QVERIFY(restorePageSettings(settings, "s", &withSlider));
    QCOMPARE(restoredSlider->value(), 30);
    delete slider;
    auto* c = new QSpinBox(&before); // the same controls: restored
    QWidget same;
    auto* d = new QSpinBox(&same);
    new QSpinBox(&same);
    c->setValue(7);
    savePageSettings(settings, "t", &before);
    QVERIFY(restorePageSettings(settings, "t", &same));
    QCOMPARE(d->value(), 42);
}

// The Latency page's real-model tab needs codebooks of keys after RoPE: "Train them…" opens the
// GSRQ page set for them (every layer's keys and values, keys after RoPE), saying what comes next.
void TestStudioSession::latencyTabOffersToTrainWhatItNeeds()
{
    MainWindow window(m_dir.filePath("latency.db"));
    window.resize(1200, 800);
    window.show();
    window.showPage("latency");
    auto* train = window.trainPage();
    QVERIFY(!train->isVisible());
    window.latencyPage()->trainCodebooksButton()->click();
    QVERIFY(train->isVisible());
    QCOMPARE(train->keyRopeBox()->currentData().toString(), QString("post"));
    QCOMPARE(train->tensorsEdit()->text(), QString("layers.*.key,layers.*.value"));
    QVERIFY(train->statusLabel()->text().contains("Latency"));
}

// Every page of the window at the documentation's size (1440 × 900) on the bundled sample after a
// training and a model run: each laid out within the window (none squeezed below its minimum) and
// drawn. The pictures stay beside the suite (walk/<page>.png in its build folder) for a person to
// look at; tools/screenshots.sh --smollm2 takes the same walk on SmolLM2's dump for docs/app.md.
void TestStudioSession::walkEveryPage()
{
    MainWindow window(m_dir.filePath("walk.db"));
    window.resize(1440, 900);
    window.show();
    QVERIFY(window.openDump(kSample));
    auto* model = window.modelPage();
    window.showPage("model");
    model->tensorsEdit()->setText("layers.*.*");
    model->dimBox()->setValue(8);
    model->kBox()->setValue(16);
    model->itersBox()->setValue(4);
    QSignalSpy modelDone(model, &ModelPage::runFinished);
    QTest::mouseClick(model->runButton(), Qt::LeftButton);
    QVERIFY(modelDone.wait(test::waitMs(120000)));
    const QString dir = QCoreApplication::applicationDirPath() + QStringLiteral("/walk");
    QVERIFY(QDir().mkpath(dir));
    for (const QString page :
         {"dataset", "model", "compare", "sweeps", "train", "weights", "runs", "latency", "long-context"}) {
        QVERIFY(window.showPage(page));
        QTest::qWait(100); // coalesced chart updates land
        auto* shown = window.findChild<QTabWidget*>()->currentWidget();
        QVERIFY2(shown->minimumSizeHint().height() <= shown->height() &&
                     shown->minimumSizeHint().width() <= shown->width(),
                 qPrintable(QString("%1: needs %2 × %3, has %4 × %5")
                                .arg(page)
                                .arg(shown->minimumSizeHint().width())
                                .arg(shown->minimumSizeHint().height())
                                .arg(shown->width())
                                .arg(shown->height())));
        const QImage image = window.grab().toImage();
        QVERIFY(image.save(dir + "/" + page + ".png"));
        // Drawn: more than a background (a blank page is one or two colours).
        QSet<QRgb> colours;
        for (int y = 0; y < image.height() && colours.size() < 50; y += 7)
            for (int x = 0; x < image.width(); x += 7)
                colours.insert(image.pixel(x, y));
        QVERIFY2(colours.size() >= 50, qPrintable(page));
    }
}

// The Model page on a dump of heads of 64 (3 KV heads, as SmolLM2's; synthetic rows) compares whole
// heads with K = 256, as the KM vs GSKM page does (it stayed at D = 8, K = 64), and the GSRQ page
// trains at the paper's 1 bit (it stayed at custom D = 8, R = 4, K = 64); the bundled sample's
// heads of 8 keep D = 8, K = 64.
void TestStudioSession::modelPageFollowsTheDumpsHeads()
{
    const QString path = m_dir.filePath("hd64.safetensors");
    writeSafetensors(
        path.toStdString(),
        {makeFloatBlob("layers.0.key", synthesize(SynthKind::KvLike, 600, 192, 7), DType::F32, {600, 3, 64}),
         makeFloatBlob("layers.0.value", synthesize(SynthKind::Gaussian, 600, 192, 8), DType::F32, {600, 3, 64})},
        {});
    QSettings().clear(); // a first start: no page settings restored (the restart test saved some)
    MainWindow window(m_dir.filePath("heads.db"));
    QVERIFY(window.openDump(path));
    QCOMPARE(window.modelPage()->dimBox()->value(), 64);
    QCOMPARE(window.modelPage()->kBox()->value(), 256);
    // The GSRQ page, at its toy defaults (custom D = 8, R = 4, K = 64), takes the paper's 1 bit there.
    QCOMPARE(window.trainPage()->presetBox()->currentIndex(), 2);
    QCOMPARE(window.trainPage()->dimBox()->value(), 64);
    QCOMPARE(window.trainPage()->stagesBox()->value(), 8);
    QCOMPARE(window.trainPage()->kBox()->value(), 256);
    QVERIFY(window.openDump(kSample));
    QCOMPARE(window.modelPage()->dimBox()->value(), 8);
    QCOMPARE(window.modelPage()->kBox()->value(), 64);
}

// "Perplexity with these codebooks" shows its progress and can be cancelled like every job longer
// than a moment (on SmolLM2 it runs minutes): a Cancel pressed while it loads leaves a cancelled run
// and the page ready; run again, it measures, its bar filled, and hides its bar and Cancel.
void TestStudioSession::perplexityShowsProgressAndCancels()
{
    const QString store = m_dir.filePath("ppl.db");
    MainWindow window(store);
    window.resize(1200, 800);
    window.show();
    QVERIFY(window.openDump(kSample));
    window.context().setPplModel(QString::fromStdString(test::stories260KModel()),
                                 QString::fromStdString(test::stories260KTokenizer()));
    auto* page = window.trainPage();
    window.showPage("train");
    page->tensorsEdit()->setText("layers.*.key,layers.*.value");
    page->dimBox()->setValue(8);
    page->stagesBox()->setValue(2);
    page->kBox()->setValue(16);
    QSignalSpy trained(page, &TrainPage::runFinished);
    QTest::mouseClick(page->runButton(), Qt::LeftButton);
    QVERIFY(trained.wait(test::waitMs(60000)));
    QSignalSpy done(page, &TrainPage::pplFinished);
    QTest::mouseClick(page->pplButton(), Qt::LeftButton);
    QVERIFY(page->pplProgress()->isVisible());
    QVERIFY(page->pplCancelButton()->isEnabled());
    QVERIFY(!page->pplButton()->isEnabled());
    QTest::mouseClick(page->pplCancelButton(), Qt::LeftButton); // before its first forward pass ends
    QVERIFY(!done.isEmpty() || done.wait(test::waitMs(10000)));
    QVERIFY(!done.first().first().toBool());
    QVERIFY(page->pplButton()->isEnabled());
    QVERIFY(!page->pplProgress()->isVisible());
    QVERIFY(page->pplResultText().contains("cancelled"));
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
            RunStore s(store.toStdString());
            const auto runs = s.listRuns({"ppl", std::nullopt, "", 1});
            return !runs.empty() && runs.front().status == RunStatus::Cancelled;
        }(),
        test::waitMs(30000));
    done.clear();
    QTest::mouseClick(page->pplButton(), Qt::LeftButton);
    QVERIFY(done.wait(test::waitMs(120000)));
    QVERIFY2(done.first().first().toBool(), qPrintable(page->pplResultText()));
    QVERIFY(!page->pplProgress()->isVisible());
    QVERIFY(!page->pplCancelButton()->isEnabled());
    QVERIFY(page->pplResultText().startsWith("FP32"));
}

QTEST_MAIN(TestStudioSession)
#include "tst_studio_session.moc"
