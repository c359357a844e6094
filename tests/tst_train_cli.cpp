// gsrq train / eval / codebooks end to end on the bundled real sample and on generated files.

#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "test_util.h"

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRandomGenerator>
#include <QThread>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace gsrq;

namespace {

using test::gsrqRun;
using test::Run;

QJsonObject json(const Run& r)
{
    return QJsonDocument::fromJson(r.out).object();
}

const QString kSample = QStringLiteral(GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors");

bool close(double a, double b, double rel)
{
    return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

} // namespace

class TestTrainCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { qputenv("XDG_DATA_HOME", m_dir.filePath("xdg").toUtf8()); } // a store of our own
    void trainSampleThenEvalReproduces();
    void holdoutAndNpyEval();
    void mergeLayersTrainedApart();
    void bpaThatCannotBeMet();
    void badInputs_data();
    void badInputs();
    void existingOutputKept();
    void killedTrainLeavesOldOrNewFile();
    void planSpreadsLayersAndRefusesBadOptions();
    void planTasksThenMergeWithoutSlurm();

private:
    QTemporaryDir m_dir;
};

void TestTrainCli::trainSampleThenEvalReproduces()
{
    const QString cb = m_dir.filePath("layer2.safetensors");
    auto r = gsrqRun({"train", kSample, "--layers", "2", "--dim", "8", "--stages", "3", "--k", "32", "--weights",
                      "grad-log", "--out", cb, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = json(r);
    const auto tensors = j["tensors"].toArray();
    QCOMPARE(tensors.size(), 2); // layers.2.key and layers.2.value
    for (const auto& tv : tensors) {
        const auto t = tv.toObject();
        const auto train = t["train"].toObject();
        for (const char* key : {"mse", "nmse", "gain_error", "cosine", "shrinkage", "iterations", "seconds"})
            QVERIFY2(train.contains(key), key);
        QCOMPARE(t["stages"].toArray().size(), 3);
        QCOMPARE(t["bpa"].toDouble(), 3 * 5.0 / 8);                // R·log2(K)/D
        QCOMPARE(t["codebook_bytes"].toInt(), 4 * 3 * 32 * 8 * 4); // M·R·K·D float32
        // Codebooks add their bits over the dump's 2,048 tokens × 32 features.
        QVERIFY(
            close(t["effective_bpa"].toDouble(), t["bpa"].toDouble() + 4.0 * 3 * 32 * 8 * 32 / (2048.0 * 32), 1e-12));
        QVERIFY(t["weight_summary"].toObject()["raw_max_over_median"].toDouble() > 1);
        QVERIFY(train["nmse"].toDouble() < t["stages"].toArray()[0].toObject()["nmse"].toDouble());
    }
    const auto att = j["attention"].toArray();
    QCOMPARE(att.size(), 1);
    QCOMPARE(att[0].toObject()["layer"].toInt(), 2);
    QVERIFY(att[0].toObject()["top8_overlap"].toDouble() > 0.5);

    // The file alone reproduces the training metrics (float32 codebooks, same rows, same encoding).
    r = gsrqRun({"eval", kSample, "--codebooks", cb, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto ev = json(r)["tensors"].toArray();
    QCOMPARE(ev.size(), 2);
    for (int i = 0; i < 2; ++i) {
        const auto a = tensors[i].toObject()["train"].toObject(), b = ev[i].toObject();
        for (const char* key : {"mse", "nmse", "gain_error", "cosine", "shrinkage"})
            QVERIFY2(close(a[key].toDouble(), b[key].toDouble(), 1e-12), key);
    }
    r = gsrqRun({"codebooks", "info", cb, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QCOMPARE(json(r)["metadata"].toObject()["weights"].toString(), QString("grad-log"));
}

void TestTrainCli::holdoutAndNpyEval()
{
    auto r = gsrqRun({"train", kSample, "--tensors", "layers.4.value", "--dim", "16", "--stages", "2", "--k", "16",
                      "--holdout", "0.25", "--json", "--attention-queries", "0"});
    QVERIFY2(r.code == 0, r.err.constData());
    auto t = json(r)["tensors"].toArray()[0].toObject();
    QCOMPARE(t["rows"].toInt(), 1536);
    QCOMPARE(t["heldout_rows"].toInt(), 512);
    QVERIFY(t["heldout"].toObject()["nmse"].toDouble() > 0);

    const QString train = m_dir.filePath("train.npy"), test = m_dir.filePath("test.npy");
    QCOMPARE(gsrqRun({"synth", "gaussian", "--rows", "2000", "--features", "16", "--seed", "1", "--out", train}).code,
             0);
    QCOMPARE(gsrqRun({"synth", "gaussian", "--rows", "500", "--features", "16", "--seed", "2", "--out", test}).code, 0);
    r = gsrqRun(
        {"train", train, "--dim", "8", "--stages", "2", "--k", "16", "--method", "km", "--eval", test, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    t = json(r)["tensors"].toArray()[0].toObject();
    QCOMPARE(t["heldout_rows"].toInt(), 500);
    // Fresh Gaussian rows are quantized a little worse than the rows the codebooks were fit to.
    QVERIFY(t["heldout"].toObject()["nmse"].toDouble() > t["train"].toObject()["nmse"].toDouble());
}

void TestTrainCli::mergeLayersTrainedApart()
{
    const QString a = m_dir.filePath("l1.safetensors"), b = m_dir.filePath("l3.safetensors"),
                  all = m_dir.filePath("all.safetensors"), other = m_dir.filePath("other.safetensors");
    const QStringList common{"--dim", "8", "--stages", "2", "--k", "16", "--attention-queries", "0", "-q"};
    QCOMPARE(gsrqRun(QStringList{"train", kSample, "--layers", "1", "--out", a} + common).code, 0);
    QCOMPARE(gsrqRun(QStringList{"train", kSample, "--layers", "3", "--out", b} + common).code, 0);
    auto r = gsrqRun({"codebooks", "merge", a, b, "-o", all});
    QVERIFY2(r.code == 0, r.err.constData());
    r = gsrqRun({"codebooks", "info", all, "--json"});
    QCOMPARE(json(r)["tensors"].toArray().size(), 4);
    r = gsrqRun({"eval", kSample, "--codebooks", all, "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QCOMPARE(json(r)["tensors"].toArray().size(), 4);

    QCOMPARE(gsrqRun({"train", kSample, "--layers", "0", "--dim", "8", "--stages", "2", "--k", "32", "-q",
                      "--attention-queries", "0", "--out", other})
                 .code,
             0);
    r = gsrqRun({"codebooks", "merge", a, other, "-o", m_dir.filePath("bad.safetensors")});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("k = 32"), r.err.constData());
    QVERIFY(!std::filesystem::exists(m_dir.filePath("bad.safetensors").toStdString()));
}

void TestTrainCli::bpaThatCannotBeMet()
{
    auto r = gsrqRun({"train", kSample, "--bpa", "1"});
    QCOMPARE(r.code, 2); // D = 128 does not divide the sample's 32 features
    QVERIFY2(r.err.contains("settings that reach it exactly") && r.err.contains("--dim 32 --stages 4 --k 256"),
             r.err.constData());
    r = gsrqRun({"train", kSample, "--bpa", "0.3"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("not one of the paper's settings"));
}

void TestTrainCli::badInputs_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("phrase");
    const QString nanDump = m_dir.filePath("nangrad.safetensors");
    MatrixRF v = test::randomRows(64, 8, 1), g = test::randomRows(64, 8, 2);
    g(7, 3) = std::numeric_limits<float>::quiet_NaN();
    writeSafetensors(nanDump.toStdString(), {makeFloatBlob("layers.0.value", v, DType::F32),
                                             makeFloatBlob("layers.0.value_grad", g, DType::F32)});
    const QString narrow = m_dir.filePath("narrow.npy");
    writeNpy(narrow.toStdString(), test::randomRows(100, 16, 3));
    const QString wide = m_dir.filePath("wide.npy");
    writeNpy(wide.toStdString(), test::randomRows(100, 32, 4));
    const QString wideCb = m_dir.filePath("wide.safetensors");
    gsrqRun({"train", wide, "--dim", "8", "--stages", "1", "--k", "4", "--out", wideCb, "-q"});

    QTest::newRow("NaN in gradients") << QStringList{"train", nanDump, "--dim", "4",         "--stages",
                                                     "1",     "--k",   "4",     "--weights", "grad-log"}
                                      << "NaN";
    QTest::newRow("weights without gradients")
        << QStringList{"train", narrow, "--dim", "4", "--stages", "1", "--k", "4", "--weights", "grad-raw"}
        << "no gradient";
    QTest::newRow("codebooks cover other features")
        << QStringList{"eval", narrow, "--codebooks", wideCb} << "features but its codebooks cover 32";
    QTest::newRow("tensor missing for codebooks")
        << QStringList{"eval", kSample, "--codebooks", wideCb} << "no tensor named 'wide'";
    QTest::newRow("not a codebooks file")
        << QStringList{"eval", narrow, "--codebooks", kSample} << "not a GSRQ codebooks";
    QTest::newRow("no tensor selected") << QStringList{"train", kSample,    "--tensors", "layers.*.keys", "--dim",
                                                       "8",     "--stages", "1",         "--k",           "4"}
                                        << "no tensor matches";
    QTest::newRow("K not a power of two")
        << QStringList{"train", narrow, "--dim", "4", "--stages", "1", "--k", "12"} << "power of two";
    QTest::newRow("bpa with dim") << QStringList{"train", narrow, "--bpa", "1", "--dim", "4"} << "either --bpa";
    QTest::newRow("bad holdout") << QStringList{"train", narrow, "--dim", "4",         "--stages",
                                                "1",     "--k",  "4",     "--holdout", "1.5"}
                                 << "--holdout";
    QTest::newRow("bad layers") << QStringList{"train", kSample,    "--layers", "2-x", "--dim",
                                               "8",     "--stages", "1",        "--k", "4"}
                                << "--layers";
}

void TestTrainCli::badInputs()
{
    QFETCH(QStringList, args);
    QFETCH(QString, phrase);
    const auto r = gsrqRun(args);
    QCOMPARE(r.code, 2);
    QVERIFY2(QString::fromUtf8(r.err).contains(phrase), r.err.constData());
}

void TestTrainCli::existingOutputKept()
{
    const QString out = m_dir.filePath("keep.safetensors");
    const QStringList args{"train",    kSample, "--layers", "0", "--dim", "8",
                           "--stages", "1",     "--k",      "8", "-q",    "--attention-queries",
                           "0",        "--out", out};
    QCOMPARE(gsrqRun(args).code, 0);
    const auto before = std::filesystem::last_write_time(out.toStdString());
    const auto r = gsrqRun(args);
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--force"));
    QCOMPARE(std::filesystem::last_write_time(out.toStdString()), before);
}

// SIGKILL at random moments of `gsrq train --out --force` over an existing file: each time the file
// is the old one or the new one, byte for byte, never a mix or a truncation (temporary + rename).
void TestTrainCli::killedTrainLeavesOldOrNewFile()
{
    auto args = [&](const QString& out, int seed) {
        return QStringList{"--no-db",
                           "train",
                           kSample,
                           "--layers",
                           "0",
                           "--dim",
                           "8",
                           "--stages",
                           "2",
                           "--k",
                           "16",
                           "-q",
                           "--with-codes",
                           "--attention-queries",
                           "0",
                           "--seed",
                           QString::number(seed),
                           "--force",
                           "--out",
                           out};
    };
    auto bytes = [](const QString& path) {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    const QString oldRef = m_dir.filePath("kill-old.safetensors"), newRef = m_dir.filePath("kill-new.safetensors");
    QCOMPARE(gsrqRun(args(oldRef, 1)).code, 0);
    QElapsedTimer clock;
    clock.start();
    QCOMPARE(gsrqRun(args(newRef, 2)).code, 0);
    const qint64 fullRunMs = std::max<qint64>(clock.elapsed(), 50);
    const QByteArray oldBytes = bytes(oldRef), newBytes = bytes(newRef);
    QVERIFY(!oldBytes.isEmpty() && oldBytes != newBytes); // the seeds give different codebooks

    const QString out = m_dir.filePath("kill.safetensors");
    QRandomGenerator rng(20261123);
    int sawNew = 0;
    for (int i = 0; i < 20; ++i) {
        QFile::remove(out);
        QVERIFY(QFile::copy(oldRef, out));
        QProcess p;
        p.start(QStringLiteral(GSRQ_CLI_PATH), args(out, 2));
        QVERIFY(p.waitForStarted());
        // From the first tenth of a run to a little past its end: most kills land while training,
        // the later ones around the write itself.
        QThread::msleep(std::uint64_t(fullRunMs / 10 + rng.bounded(fullRunMs)));
        p.kill();
        p.waitForFinished(30000);
        const QByteArray now = bytes(out);
        QVERIFY2(now == oldBytes || now == newBytes,
                 qPrintable(QString("kill %1 left a file of %2 bytes that is neither the old nor the new one")
                                .arg(i)
                                .arg(now.size())));
        sawNew += now == newBytes;
    }
    qInfo("%d of 20 kills came after the new file was in place", sawNew);
}

// gsrq plan: layers spread over the tasks largest first, and everything a task would trip over on
// the cluster refused here with exit code 2.
void TestTrainCli::planSpreadsLayersAndRefusesBadOptions()
{
    const QString dir = m_dir.filePath("plan-spread");
    const QStringList rate{"--", "--dim", "8", "--stages", "1", "--k", "16"};
    auto r = gsrqRun(QStringList{"plan", kSample, "--jobs", "2", "--out", dir} + rate);
    QVERIFY2(r.code == 0, r.err.constData());
    QFile f(dir + "/plan.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto plan = QJsonDocument::fromJson(f.readAll()).object();
    const auto tasks = plan["tasks"].toArray();
    // Five layers of 2,048 rows each: the least-loaded task takes the next layer, so 3 and 2.
    QCOMPARE(tasks.size(), 2);
    QCOMPARE(tasks[0].toObject()["layers"].toArray(), QJsonArray({0, 2, 4}));
    QCOMPARE(tasks[1].toObject()["layers"].toArray(), QJsonArray({1, 3}));
    QCOMPARE(tasks[0].toObject()["rows"].toInt(), 3 * 2 * 2048); // keys and values of 3 layers
    QCOMPARE(plan["tensors_by_layer"].toObject()["3"].toArray(), QJsonArray({"layers.3.key", "layers.3.value"}));
    QFile sb(dir + "/array.sbatch");
    QVERIFY(sb.open(QIODevice::ReadOnly));
    const auto script = sb.readAll();
    QVERIFY(script.contains("#SBATCH --array=0-1\n"));
    QVERIFY(script.contains("#SBATCH --gres=gpu:1\n"));
    QVERIFY(script.contains("#SBATCH --requeue\n"));
    QVERIFY(script.contains("--dependency=\"afterok:$SLURM_ARRAY_JOB_ID\""));

    // More tasks than layers: one layer each.
    r = gsrqRun(QStringList{"plan", kSample, "--jobs", "9", "--gpus-per-job", "0", "--out", dir + "-9"} + rate);
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(r.out.contains("5 tasks instead of 9"));

    const auto refused = [&](const QStringList& args, const char* says) {
        const auto rr = gsrqRun(args);
        QVERIFY2(rr.code == 2, qPrintable(args.join(' ') + ": " + rr.err));
        QVERIFY2(rr.err.contains(says), qPrintable(args.join(' ') + ": " + rr.err));
    };
    refused(QStringList{"plan", kSample, "--jobs", "2", "--out", dir} + rate, "exists"); // no --force
    refused(QStringList{"plan", kSample, "--jobs", "0", "--out", dir + "-x"} + rate, "--jobs 0");
    refused({"plan", kSample, "--jobs", "2", "--out", dir + "-x"}, "rate");
    refused(QStringList{"plan", kSample, "--jobs", "2", "--out", dir + "-x"} + rate + QStringList{"--out", "x"},
            "--out is set by the plan");
    refused(QStringList{"plan", kSample, "--jobs", "2", "--out", dir + "-x"} + rate + QStringList{"--bogus"},
            "do not parse");
    refused(QStringList{"plan", kSample, "--jobs", "2", "--layers", "7", "--out", dir + "-x"} + rate, "--layers 7");
    refused({"plan", "status", m_dir.filePath("nowhere")}, "no plan here");
    refused(QStringList{"plan", kSample, "--jobs", "2", "--partition", "gpu\n#SBATCH --x", "--out", dir + "-x"} + rate,
            "--partition");
    QVERIFY(!QFile::exists(dir + "-x/plan.json"));
}

// The array's tasks run by hand (the script works without Slurm given SLURM_ARRAY_TASK_ID); the
// merge names what is missing, refuses a layer trained with other settings, and joins the rest
// into exactly what one gsrq train writes; its import of the tasks' runs is idempotent.
void TestTrainCli::planTasksThenMergeWithoutSlurm()
{
    const QString dir = m_dir.filePath("plan-merge"), db = m_dir.filePath("plan-user.db");
    const QStringList train{"--dim", "8", "--stages", "2", "--k", "16", "--seed", "5"};
    auto r = gsrqRun(QStringList{"--db", db, "plan", kSample, "--jobs", "2", "--out", dir, "--"} + train);
    QVERIFY2(r.code == 0, r.err.constData());
    const auto runTask = [&](int task) {
        QProcess p;
        auto env = QProcessEnvironment::systemEnvironment();
        env.insert("SLURM_ARRAY_TASK_ID", QString::number(task));
        env.remove("SLURM_ARRAY_JOB_ID");
        env.insert("GSRQ", test::cliPath());
        p.setProcessEnvironment(env);
        p.start("bash", {dir + "/array.sbatch"});
        QVERIFY(p.waitForFinished(240000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    };
    runTask(1);
    r = gsrqRun({"--db", db, "plan", "merge", dir});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("no codebooks yet for layers 0,2,4 (tasks 0;"), r.err.constData());
    r = gsrqRun({"plan", "status", dir, "--json"});
    QCOMPARE(QJsonDocument::fromJson(r.out).object()["trained"].toInt(), 2);

    runTask(0);
    runTask(0); // run again (a requeue after it finished): every layer is skipped
    r = gsrqRun({"--db", db, "plan", "merge", dir});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(r.out.contains("5 layers, 10 tensors, same settings"));
    QVERIFY2(r.out.contains("imported 5 runs"), r.out.constData()); // one per layer, none twice
    r = gsrqRun({"--db", db, "plan", "merge", dir});
    QVERIFY2(r.out.contains("imported 0 runs"), r.out.constData());

    const QString single = m_dir.filePath("plan-single.safetensors");
    r = gsrqRun(QStringList{"--no-db", "train", kSample, "--out", single, "-q"} + train);
    QVERIFY2(r.code == 0, r.err.constData());
    const auto a = readSafetensors(single.toStdString());
    const auto b = readSafetensors((dir + "/codebooks.safetensors").toStdString());
    QCOMPARE(a.tensors.size(), b.tensors.size());
    for (const auto& t : a.tensors) {
        const auto u = std::find_if(b.tensors.begin(), b.tensors.end(), [&](auto& x) { return x.name == t.name; });
        QVERIFY2(u != b.tensors.end(), t.name.c_str());
        QCOMPARE(u->shape, t.shape);
        QCOMPARE(u->nbytes, t.nbytes);
        QVERIFY2(std::memcmp(u->data, t.data, t.nbytes) == 0, t.name.c_str()); // bit for bit
    }

    // A file that is not one of the plan's layers is refused; a writer's temporary is not.
    QFile::copy(dir + "/codebooks/layer-3.safetensors", dir + "/codebooks/layer-3.safetensors.tmp-x1y2z3");
    QVERIFY2(gsrqRun({"--no-db", "plan", "merge", dir}).code == 0, "a temporary was taken for a layer");
    QFile::copy(dir + "/codebooks/layer-3.safetensors", dir + "/codebooks/layer-3.safetensors.bak");
    r = gsrqRun({"--no-db", "plan", "merge", dir});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("layer-3.safetensors.bak is not one of the plan's layers"), r.err.constData());
    QFile::remove(dir + "/codebooks/layer-3.safetensors.bak");

    // A layer retrained with another seed does not pass for the plan's.
    r = gsrqRun({"--no-db", "train", kSample, "--layers", "3", "--dim", "8", "--stages", "2", "--k", "16", "--seed",
                 "6", "--out", dir + "/codebooks/layer-3.safetensors", "--force", "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    r = gsrqRun({"--db", db, "plan", "merge", dir});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("layer-3.safetensors was trained with seed = 6"), r.err.constData());
}

QTEST_GUILESS_MAIN(TestTrainCli)
#include "tst_train_cli.moc"
