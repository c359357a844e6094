// The gsrq command line end to end: generated files in, JSON out, parsed and checked; exit codes
// for bad input; nothing overwritten by accident.

#include "core/io/kv_dump.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace gsrq;

namespace {

using test::gsrqRun;
using test::Run;

QJsonObject parseObject(const Run& r)
{
    QJsonParseError e;
    const auto doc = QJsonDocument::fromJson(r.out, &e);
    if (e.error != QJsonParseError::NoError || !doc.isObject())
        qWarning("not a JSON object: %s\nstderr: %s", r.out.constData(), r.err.constData());
    return doc.object();
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void compareJson();
    void compareTable();
    void compareWithGradientWeights();
    void compareEveryLayerWithDeltas();
    void sweepJson();
    void paperCheckJson();
    void infoJson();
    void synthRefusesToOverwrite();
    void synthWritesAModelOfLayers();
    void nonFiniteRowsRefusedOrDropped();
    void badInputExitsWithTwo_data();
    void badInputExitsWithTwo();

private:
    QTemporaryDir m_dir;
    QString m_data;
};

void TestCli::initTestCase()
{
    QVERIFY(m_dir.isValid());
    qputenv("XDG_DATA_HOME", m_dir.filePath("xdg").toUtf8()); // runs go to a store of our own
    m_data = m_dir.filePath("data.npy");
    const auto r = gsrqRun({"synth", "gaussian", "--rows", "3000", "--features", "32", "--seed", "1", "--out", m_data});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(r.err.contains("synthetic"));
}

void TestCli::compareJson()
{
    const auto r = gsrqRun({"compare", m_data, "--dim", "16", "--k", "32", "--iters", "300", "--seed", "0", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = parseObject(r);
    QCOMPARE(j["settings"].toObject()["dim"].toInt(), 16);
    QCOMPARE(j["settings"].toObject()["k"].toInt(), 32);
    QCOMPARE(j["blocks"].toInt(), 2);
    QCOMPARE(j["input"].toObject()["rows"].toInt(), 3000);

    // mse / nmse is E‖x‖² averaged over the blocks' own energies; compute it from the file.
    const MatrixRF x = toMatrix(readNpy(m_data.toStdString()));
    for (const char* method : {"km", "gskm"}) {
        const auto m = j[method].toObject();
        for (const char* key : {"mse", "nmse", "gain_error", "cosine", "shrinkage", "iterations", "seconds"})
            QVERIFY2(m.contains(key), key);
        QVERIFY(m["nmse"].toDouble() > 0 && m["nmse"].toDouble() < 1);
        QVERIFY(m["cosine"].toDouble() > 0 && m["cosine"].toDouble() <= 1);
        QVERIFY(m["iterations"].toInt() >= 1 && m["iterations"].toInt() <= 300);
        const auto blocks = m["blocks"].toArray();
        QCOMPARE(blocks.size(), 2);
        for (int b = 0; b < 2; ++b) {
            const auto bj = blocks[b].toObject();
            const double energy = x.middleCols(16 * b, 16).cast<double>().rowwise().squaredNorm().mean();
            // Both are printed from doubles with 17 digits: agreement to 1e-9 relative.
            QVERIFY(std::abs(bj["mse"].toDouble() / bj["nmse"].toDouble() - energy) <= 1e-9 * energy);
            QVERIFY(bj["history"].toArray().size() >= 2);
            // At convergence both updates are projections (KM: the members' mean; GSKM: the
            // optimal gain on its shape), so Pythagoras gives shrinkage + nmse = 1 exactly; the
            // reported values are doubles from float centroids: 1e-5.
            QCOMPARE(bj["stop"].toString(), QString("converged"));
            QVERIFY(std::abs(bj["shrinkage"].toDouble() + bj["nmse"].toDouble() - 1) < 1e-5);
        }
    }
}

// compare --tensors: every layer's key and value of the real sample, each with KM and GSKM, and
// GSKM − KM beside them; the JSON, the CSV and the table say the same.
void TestCli::compareEveryLayerWithDeltas()
{
    const QString sample = GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors";
    const QString csv = m_dir.filePath("model.csv");
    const auto r = gsrqRun({"--no-db", "compare", sample, "--tensors", "layers.*.*", "--dim", "8", "--k", "16",
                            "--iters", "5", "-q", "--json", "--csv", csv});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto tensors = QJsonDocument::fromJson(r.out).object()["tensors"].toArray();
    QCOMPARE(tensors.size(), 10); // 5 layers × {key, value}; queries and gradients are not clustered
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 1 + 10 * 5); // a header, then 5 metrics per tensor
    for (const auto& tv : tensors) {
        const auto t = tv.toObject();
        QVERIFY(t["kind"].toString() == "key" || t["kind"].toString() == "value");
        const auto km = t["km"].toObject(), gskm = t["gskm"].toObject();
        const auto deltas = t["gskm_minus_km"].toObject();
        for (const char* m : {"mse", "nmse", "gain_error", "cosine", "shrinkage"}) {
            const auto d = deltas[m].toObject();
            const double a = km[m].toDouble(), b = gskm[m].toDouble();
            QCOMPARE(d["delta"].toDouble(), b - a);
            QVERIFY(std::abs(d["delta_percent"].toDouble() - 100 * (b - a) / std::abs(a)) <=
                    1e-9 * std::abs(b - a) * 100 / std::abs(a) + 1e-12);
        }
        const QString nmseBetter = deltas["nmse"].toObject()["better"].toString();
        QCOMPARE(nmseBetter, gskm["nmse"].toDouble() < km["nmse"].toDouble()   ? QString("gskm")
                             : gskm["nmse"].toDouble() > km["nmse"].toDouble() ? QString("km")
                                                                               : QString("tie"));
        const QString cosBetter = deltas["cosine"].toObject()["better"].toString();
        QCOMPARE(cosBetter, gskm["cosine"].toDouble() > km["cosine"].toDouble()   ? QString("gskm")
                            : gskm["cosine"].toDouble() < km["cosine"].toDouble() ? QString("km")
                                                                                  : QString("tie"));
        // The CSV row of this tensor's nmse holds the same numbers (12 significant digits).
        const QString name = t["tensor"].toString();
        bool found = false;
        for (const auto& line : lines)
            if (line.startsWith((name + ",").toUtf8()) && line.contains(",nmse,")) {
                const auto cells = line.split(',');
                QCOMPARE(cells.size(), 9);
                QVERIFY(std::abs(cells[4].toDouble() - km["nmse"].toDouble()) <= 1e-8 * km["nmse"].toDouble());
                QCOMPARE(QString(cells[8]), nmseBetter);
                found = true;
            }
        QVERIFY2(found, qPrintable(name));
    }
    QCOMPARE(gsrqRun({"--no-db", "compare", sample, "--tensors", "layers.*.query", "--dim", "8"}).code, 2);
    QCOMPARE(gsrqRun({"--no-db", "compare", sample, "--tensor", "layers.0.key", "--csv", csv}).code, 2);
}

void TestCli::compareTable()
{
    const auto r = gsrqRun({"compare", m_data, "--dim", "32", "--k", "16", "--iters", "5"});
    QVERIFY2(r.code == 0, r.err.constData());
    const QString out = QString::fromUtf8(r.out);
    QVERIFY(out.contains(QRegularExpression("^km\\s+[0-9.e+-]+\\s+0\\.\\d+", QRegularExpression::MultilineOption)));
    QVERIFY(out.contains(QRegularExpression("^gskm\\s+", QRegularExpression::MultilineOption)));
    QVERIFY(out.contains("shrinkage"));
}

void TestCli::compareWithGradientWeights()
{
    const QString dump = m_dir.filePath("kv.safetensors");
    const MatrixRF v = test::randomRows(400, 8, 2);
    MatrixRF g = test::randomRows(400, 8, 3, 0.01f);
    g.row(5) *= 1000; // one row with a huge gradient
    writeSafetensors(dump.toStdString(), {makeFloatBlob("layers.0.value", v, DType::F32, {400, 2, 4}),
                                          makeFloatBlob("layers.0.value_grad", g, DType::BF16, {400, 2, 4})});
    auto r = gsrqRun({"compare", dump, "--tensor", "layers.0.value", "--k", "8", "--weights", "grad-log", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto w = parseObject(r)["input"].toObject()["weight_summary"].toObject();
    // The log compresses the outlier: raw max/median is ~1000×, the weights' far less.
    QVERIFY(w["raw_max_over_median"].toDouble() > 300);
    QVERIFY(w["weight_max_over_median"].toDouble() < 10);

    r = gsrqRun({"compare", m_data, "--k", "8", "--weights", "grad-log"}); // a plain .npy has no gradients
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("no gradient"));
}

void TestCli::sweepJson()
{
    const auto r =
        gsrqRun({"sweep", m_data, "--over", "dim", "--values", "8,16,32", "--k", "16", "--iters", "10", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = parseObject(r);
    const auto pts = j["points"].toArray();
    QCOMPARE(pts.size(), 3);
    QCOMPARE(pts[0].toObject()["dim"].toInt(), 8);
    QCOMPARE(pts[2].toObject()["blocks"].toInt(), 1);
    // With K fixed, wider subspaces are harder to quantize: nmse grows with D.
    const double n8 = pts[0].toObject()["km"].toObject()["nmse"].toDouble();
    const double n32 = pts[2].toObject()["km"].toObject()["nmse"].toDouble();
    QVERIFY(n32 > n8);
}

void TestCli::paperCheckJson()
{
    // A small paper check: two D, one more K, 1 BPA, on few rows. Its shape, its claims, and that
    // it is recorded; the figures themselves are the engine's tests' (tst_clustering, tst_quantizer).
    const auto r =
        gsrqRun({"paper-check", "--rows",       "3000",  "--iters",     "20",  "--dims", "32,256", "--fixed-k",
                 "64",          "--ks",         "16,64", "--fixed-dim", "256", "--bpas", "1",      "--rq-rows",
                 "3000",        "--rq-heldout", "500",   "--rq-iters",  "5",   "--json", "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = parseObject(r);
    QCOMPARE(j["command"].toString(), QString("paper-check"));
    QVERIFY(j["run_id"].toInt() > 0);
    const auto dims = j["sweep_dim"].toArray();
    QCOMPARE(dims.size(), 2);
    QCOMPARE(dims[1].toObject()["dim"].toInt(), 256);
    QCOMPARE(dims[0].toObject()["blocks"].toInt(), 8); // 256 features in blocks of 32
    const auto ks = j["sweep_k"].toArray();
    QCOMPARE(ks.size(), 2);
    // K = 64 at D = 256 is the D sweep's last point, reused, not run again.
    QCOMPARE(ks[1].toObject()["gskm"].toObject()["cosine"].toDouble(),
             dims[1].toObject()["gskm"].toObject()["cosine"].toDouble());
    const auto rq = j["rq"].toArray();
    QCOMPARE(rq.size(), 1);
    QCOMPARE(rq[0].toObject()["shannon_bound_nmse"].toDouble(), 0.25);
    QCOMPARE(rq[0].toObject()["dim"].toInt(), 128);
    QCOMPARE(rq[0].toObject()["stages"].toInt(), 16);
    QStringList ids;
    for (const auto& c : j["claims"].toArray()) {
        const auto o = c.toObject();
        ids << o["id"].toString();
        QVERIFY(o["holds"].isBool());
        QVERIFY(!o["detail"].toString().isEmpty());
    }
    QCOMPARE(ids,
             QStringList({"cosine", "gain_error", "mse", "shrinkage", "km_shrinkage", "under_capacity", "rq_heldout"}));
    // Refused before anything runs: a D that does not divide 256, a rate that is not the paper's.
    for (const auto& [args, phrase] : {std::pair{QStringList{"paper-check", "--dims", "16,24"}, QString("--dims")},
                                       std::pair{QStringList{"paper-check", "--bpas", "0.5"}, QString("--bpas")}}) {
        const auto bad = gsrqRun(args);
        QCOMPARE(bad.code, 2);
        QVERIFY2(QString::fromUtf8(bad.err).contains(phrase), bad.err.constData());
    }
}

void TestCli::infoJson()
{
    const auto r = gsrqRun({"info", GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = parseObject(r);
    QCOMPARE(j["format"].toString(), QString("safetensors"));
    int values = 0;
    for (const auto& t : j["tensors"].toArray())
        values += t.toObject()["kind"].toString() == "value";
    QCOMPARE(values, 5); // five layers
    QCOMPARE(j["metadata"].toObject()["key_rope"].toString(), QString("pre"));
}

void TestCli::synthRefusesToOverwrite()
{
    const QString path = m_dir.filePath("keep.npy");
    QVERIFY(gsrqRun({"synth", "kv", "--rows", "10", "--features", "4", "--out", path}).code == 0);
    const auto before = std::filesystem::file_size(path.toStdString());
    const auto r = gsrqRun({"synth", "gaussian", "--rows", "100", "--features", "4", "--out", path});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--force"));
    QCOMPARE(std::filesystem::file_size(path.toStdString()), before);
    QCOMPARE(gsrqRun({"synth", "gaussian", "--rows", "100", "--features", "4", "--out", path, "--force"}).code, 0);
    QVERIFY(std::filesystem::file_size(path.toStdString()) > before);
}

// synth --layers N: a dump of N layers' keys and values, each from its own seed, labelled
// synthetic, that the model comparison runs on; --layers with a .npy is refused (exit 2, naming it).
void TestCli::synthWritesAModelOfLayers()
{
    const QString path = m_dir.filePath("model3.safetensors");
    const auto w =
        gsrqRun({"synth", "kv", "--layers", "3", "--rows", "300", "--features", "8", "--seed", "4", "--out", path});
    QVERIFY2(w.code == 0, w.err.constData());
    const KvDump dump = KvDump::open(path.toStdString());
    QCOMPARE(dump.tensors().size(), size_t(6));
    QCOMPARE(dump.get("layers.2.value").view.shape, (std::vector<std::int64_t>{300, 8}));
    QVERIFY(dump.metadata().at("synthetic").find("layers=3") != std::string::npos);
    // Every tensor differs from every other (its own seed).
    const MatrixRF k0 = loadForClustering(dump.get("layers.0.key"), false).rows;
    const MatrixRF v0 = loadForClustering(dump.get("layers.0.value"), false).rows;
    const MatrixRF k1 = loadForClustering(dump.get("layers.1.key"), false).rows;
    QVERIFY(k0 != v0 && k0 != k1);
    const auto r = gsrqRun({"--no-db", "compare", path, "--tensors", "layers.*.*", "--dim", "4", "--k", "8", "--iters",
                            "5", "--json", "-q"});
    QVERIFY2(r.code == 0, r.err.constData());
    QCOMPARE(QJsonDocument::fromJson(r.out).object()["tensors"].toArray().size(), 6);
    const auto bad = gsrqRun({"synth", "kv", "--layers", "2", "--out", m_dir.filePath("x.npy")});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("--layers"), bad.err.constData());
    QVERIFY(!QFile::exists(m_dir.filePath("x.npy")));
}

void TestCli::nonFiniteRowsRefusedOrDropped()
{
    const QString path = m_dir.filePath("nan.npy");
    MatrixRF x = test::randomRows(300, 8, 9);
    x(10, 0) = std::numeric_limits<float>::quiet_NaN();
    x(20, 7) = -std::numeric_limits<float>::infinity();
    writeNpy(path.toStdString(), x);
    auto r = gsrqRun({"compare", path, "--k", "8"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("2 of 300 rows") && r.err.contains("--drop-nonfinite"), r.err.constData());
    r = gsrqRun({"compare", path, "--k", "8", "--drop-nonfinite", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QCOMPARE(parseObject(r)["input"].toObject()["dropped_nonfinite_rows"].toInt(), 2);
}

void TestCli::badInputExitsWithTwo_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("phrase");
    const QString d = m_dir.filePath("data.npy");
    QTest::newRow("dim does not divide") << QStringList{"compare", d, "--dim", "5"} << "--dim 5";
    QTest::newRow("k above rows") << QStringList{"compare", d, "--k", "5000"} << "--k 5000";
    QTest::newRow("missing file") << QStringList{"info", m_dir.filePath("nope.safetensors")} << "no such file";
    QTest::newRow("unknown flag") << QStringList{"compare", d, "--bogus"} << "bogus";
    QTest::newRow("unknown command") << QStringList{"frobnicate"} << "frobnicate";
    QTest::newRow("bad method") << QStringList{"compare", d, "--methods", "pq"} << "--methods";
    QTest::newRow("bad weights") << QStringList{"compare", d, "--weights", "x"} << "--weights";
    QTest::newRow("bad sweep values") << QStringList{"sweep", d, "--over", "k", "--values", "8,x"} << "--values";
    QTest::newRow("bad sweep axis") << QStringList{"sweep", d, "--over", "rows", "--values", "8"} << "--over";
    QTest::newRow("non-numeric k") << QStringList{"compare", d, "--k", "many"} << "--k";
    QTest::newRow("bad exact bounds") << QStringList{"compare", d, "--exact-bounds", "sometimes"} << "--exact-bounds";
    QTest::newRow("tensor missing") << QStringList{"compare",
                                                   GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors",
                                                   "--tensor", "layers.9.value"}
                                    << "no tensor named 'layers.9.value'";
    QTest::newRow("tensor not chosen") << QStringList{"compare",
                                                      GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors"}
                                       << "--tensor";
    QTest::newRow("synth bad kind") << QStringList{"synth", "uniform", "--out", m_dir.filePath("u.npy")} << "uniform";
    QTest::newRow("synth bad extension") << QStringList{"synth", "gaussian", "--out", m_dir.filePath("u.csv")}
                                         << "--out";
    QTest::newRow("synth unwritable") << QStringList{"synth", "gaussian", "--rows", "4", "--out", "/proc/gsrq/u.npy"}
                                      << "/proc/gsrq/u.npy";
}

void TestCli::badInputExitsWithTwo()
{
    QFETCH(QStringList, args);
    QFETCH(QString, phrase);
    const auto r = gsrqRun(args);
    QCOMPARE(r.code, 2);
    QVERIFY2(QString::fromUtf8(r.err).contains(phrase), r.err.constData());
    QVERIFY(r.out.isEmpty()); // nothing half-printed on stdout
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
