// Readers: round trips in every dtype, the KV dump model over safetensors, shard directories and
// .npy, and the bundled sample against the real data it was made from.

#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/io/kv_dump.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "test_util.h"

#include <QtTest>

#include <cstring>
#include <filesystem>
#include <fstream>

using namespace gsrq;

class TestReaders : public QObject {
    Q_OBJECT

private slots:
    void safetensorsRoundTrip_data();
    void safetensorsRoundTrip();
    void npyRoundTrip_data();
    void npyRoundTrip();
    void npyVersions23();
    void dataSectionIsAligned();
    void kvNamesRecognised();
    void shardDirectoryMerges();
    void shardIndexNamesTheShards_data();
    void shardIndexNamesTheShards();
    void integerTensors();
    void nonFiniteRowsCountedAndDropped();
    void bundledSampleMatchesRealData();
    void sha256KnownVectors();
};

void TestReaders::safetensorsRoundTrip_data()
{
    QTest::addColumn<int>("dtype");
    QTest::addColumn<double>("relTol");
    // Tolerances are each format's unit roundoff: F32/F64 hold float32 exactly; F16 rounds to
    // 11 significant bits (2^-11), BF16 to 8 (2^-8).
    QTest::newRow("F32") << int(DType::F32) << 0.0;
    QTest::newRow("F64") << int(DType::F64) << 0.0;
    QTest::newRow("F16") << int(DType::F16) << std::ldexp(1.0, -11);
    QTest::newRow("BF16") << int(DType::BF16) << std::ldexp(1.0, -8);
}

void TestReaders::safetensorsRoundTrip()
{
    QFETCH(int, dtype);
    QFETCH(double, relTol);
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "rt.safetensors");
    const MatrixRF x = test::randomRows(37, 12, 7, 3.0f);
    writeSafetensors(path, {makeFloatBlob("layers.3.value", x, DType(dtype), {37, 3, 4})}, {{"model", "test"}});

    const auto f = readSafetensors(path);
    QCOMPARE(f.tensors.size(), size_t(1));
    QCOMPARE(f.metadata.at("model"), std::string("test"));
    const auto& t = f.tensors[0];
    QCOMPARE(t.dtype, DType(dtype));
    QCOMPARE(t.shape, (std::vector<std::int64_t>{37, 3, 4}));
    const MatrixRF y = toMatrix(t);
    QCOMPARE(y.rows(), 37);
    QCOMPARE(y.cols(), 12);
    for (Eigen::Index i = 0; i < x.size(); ++i) {
        const double a = x.data()[i], b = y.data()[i];
        QVERIFY2(std::abs(a - b) <= relTol * std::abs(a),
                 qPrintable(QString("element %1: %2 vs %3").arg(i).arg(a).arg(b)));
    }
    if (DType(dtype) == DType::F16) // the library type's rounding, bit for bit
        QCOMPARE(y(0, 0), static_cast<float>(Eigen::half(x(0, 0))));
    if (DType(dtype) == DType::BF16)
        QCOMPARE(y(0, 0), static_cast<float>(Eigen::bfloat16(x(0, 0))));
}

void TestReaders::npyRoundTrip_data()
{
    QTest::addColumn<int>("dtype");
    QTest::addColumn<double>("relTol");
    QTest::newRow("f4") << int(DType::F32) << 0.0;
    QTest::newRow("f8") << int(DType::F64) << 0.0;
    QTest::newRow("f2") << int(DType::F16) << std::ldexp(1.0, -11);
}

void TestReaders::npyRoundTrip()
{
    QFETCH(int, dtype);
    QFETCH(double, relTol);
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "data.npy");
    const MatrixRF x = test::randomRows(50, 16, 3);
    writeNpy(path, x, DType(dtype));
    const auto d = KvDump::open(path);
    QCOMPARE(d.format(), std::string("npy"));
    QCOMPARE(d.tensors().size(), size_t(1));
    QCOMPARE(d.only().view.name, std::string("data"));
    const MatrixRF y = toMatrix(d.only().view);
    QCOMPARE(y.rows(), 50);
    QCOMPARE(y.cols(), 16);
    QVERIFY(((x - y).cwiseAbs().array() <= relTol * x.cwiseAbs().array()).all());
}

// Versions 2.0 and 3.0 differ from 1.0 only in a 4-byte header length (3.0: UTF-8 header).
void TestReaders::npyVersions23()
{
    for (int version : {2, 3}) {
        QTemporaryDir dir;
        const auto path = test::pathIn(dir, "v.npy");
        std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        while ((12 + header.size() + 1) % 64)
            header.push_back(' ');
        header.push_back('\n');
        std::string bytes = "\x93NUMPY";
        bytes.push_back(char(version));
        bytes.push_back(0);
        const std::uint32_t len = static_cast<std::uint32_t>(header.size());
        bytes.append(reinterpret_cast<const char*>(&len), 4);
        bytes += header;
        const float v[6] = {1, 2, 3, 4, 5, 6};
        bytes.append(reinterpret_cast<const char*>(v), sizeof v);
        std::ofstream(path, std::ios::binary) << bytes;
        const MatrixRF y = toMatrix(readNpy(path));
        QCOMPARE(y.rows(), 2);
        QCOMPARE(y(1, 2), 6.0f);
    }
}

void TestReaders::dataSectionIsAligned()
{
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "a.safetensors");
    writeSafetensors(path, {makeFloatBlob("x", test::randomRows(3, 5, 1), DType::F32)}, {{"k", "v"}});
    std::ifstream in(path, std::ios::binary);
    std::uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    QCOMPARE((8 + n) % 8, std::uint64_t(0)); // readers that map F32 data directly expect this
}

void TestReaders::kvNamesRecognised()
{
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "kv.safetensors");
    writeSafetensors(path,
                     {makeFloatBlob("layers.10.key", test::randomRows(8, 6, 1), DType::F16, {8, 2, 3}),
                      makeFloatBlob("layers.2.value_grad", test::randomRows(8, 6, 2), DType::BF16),
                      makeFloatBlob("layers.2.value", test::randomRows(8, 6, 3), DType::F32),
                      makeFloatBlob("layers.10.key_grad", test::randomRows(8, 6, 4), DType::F32, {8, 2, 3}),
                      makeFloatBlob("extra", test::randomRows(2, 2, 5), DType::F32)},
                     {{"key_rope", "pre"}});
    const auto d = KvDump::open(path);
    QCOMPARE(d.tensors().size(), size_t(5));
    const auto& key = d.get("layers.10.key");
    QCOMPARE(key.layer, 10);
    QCOMPARE(key.kind, KvKind::Key);
    QCOMPARE(key.view.features(), 6);
    QCOMPARE(d.get("layers.2.value_grad").kind, KvKind::ValueGrad);
    QCOMPARE(d.get("extra").kind, KvKind::Other);
    QCOMPARE(d.gradientOf(key)->view.name, std::string("layers.10.key_grad"));
    QCOMPARE(d.gradientOf(d.get("layers.2.value"))->view.name, std::string("layers.2.value_grad"));
    QVERIFY(d.gradientOf(d.get("extra")) == nullptr);
    // Layers sort numerically: 2 before 10.
    QCOMPARE(d.tensors()[1].layer, 2);
    QCOMPARE(d.metadata().at("key_rope"), std::string("pre"));
    QVERIFY_THROWS_EXCEPTION(Error, d.get("layers.0.key"));
    QVERIFY_THROWS_EXCEPTION(Error, d.only());
}

void TestReaders::shardDirectoryMerges()
{
    QTemporaryDir dir;
    writeSafetensors(test::pathIn(dir, "layer0.safetensors"),
                     {makeFloatBlob("layers.0.key", test::randomRows(4, 4, 1), DType::F32)}, {{"model", "m"}});
    writeSafetensors(test::pathIn(dir, "layer1.safetensors"),
                     {makeFloatBlob("layers.1.key", test::randomRows(4, 4, 2), DType::F32)});
    std::ofstream(test::pathIn(dir, "README.txt")) << "not a shard";
    const auto d = KvDump::open(dir.path().toStdString());
    QCOMPARE(d.format(), std::string("safetensors-dir"));
    QCOMPARE(d.files().size(), size_t(2));
    QCOMPARE(d.tensors().size(), size_t(2));
    QCOMPARE(d.metadata().at("model"), std::string("m"));

    writeSafetensors(test::pathIn(dir, "layer1b.safetensors"),
                     {makeFloatBlob("layers.1.key", test::randomRows(4, 4, 3), DType::F32)});
    try {
        KvDump::open(dir.path().toStdString());
        QFAIL("a tensor in two shards must be refused");
    } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("appears twice") != std::string::npos, e.what());
    }
}

void TestReaders::shardIndexNamesTheShards_data()
{
    QTest::addColumn<QString>("index");
    QTest::addColumn<QString>("expect"); // empty: opens; else a phrase of the error
    const QString map = R"("layers.0.key":"a.safetensors","layers.1.key":"b.safetensors")";
    QTest::newRow("valid") << QString(R"({"metadata":{"total_size":128},"weight_map":{%1}})").arg(map) << "";
    QTest::newRow("not JSON") << "{\"weight_map\":"
                              << "not valid JSON";
    QTest::newRow("no weight_map") << R"({"metadata":{}})"
                                   << "weight_map";
    QTest::newRow("shard missing")
        << R"({"weight_map":{"layers.0.key":"a.safetensors","layers.1.key":"c.safetensors"}})"
        << "c.safetensors";
    QTest::newRow("shard outside the directory")
        << R"({"weight_map":{"layers.0.key":"a.safetensors","layers.1.key":"../b.safetensors"}})"
        << "not a .safetensors file name";
    QTest::newRow("tensor in another shard")
        << R"({"weight_map":{"layers.0.key":"b.safetensors","layers.1.key":"a.safetensors"}})"
        << "places it in";
    QTest::newRow("tensor not listed") << R"({"weight_map":{"layers.1.key":"old.safetensors"}})"
                                       << "not listed in the index";
    QTest::newRow("tensor listed, absent")
        << QString(R"({"weight_map":{%1,"layers.2.key":"a.safetensors"}})").arg(map) << "does not hold it";
}

// A Hugging Face style index picks the shards and must agree with them; a stray shard beside it
// (old.safetensors) is not read.
void TestReaders::shardIndexNamesTheShards()
{
    QFETCH(QString, index);
    QFETCH(QString, expect);
    QTemporaryDir dir;
    writeSafetensors(test::pathIn(dir, "a.safetensors"),
                     {makeFloatBlob("layers.0.key", test::randomRows(4, 4, 1), DType::F32)});
    writeSafetensors(test::pathIn(dir, "b.safetensors"),
                     {makeFloatBlob("layers.1.key", test::randomRows(4, 4, 2), DType::F32)});
    writeSafetensors(test::pathIn(dir, "old.safetensors"),
                     {makeFloatBlob("layers.0.key", test::randomRows(4, 4, 3), DType::F32)});
    std::ofstream(test::pathIn(dir, "model.safetensors.index.json")) << index.toStdString();
    try {
        const auto d = KvDump::open(dir.path().toStdString());
        QVERIFY2(expect.isEmpty(), "an inconsistent index must be refused");
        QCOMPARE(d.files().size(), size_t(2));
        QCOMPARE(d.tensors().size(), size_t(2));
        QCOMPARE(d.metadata().at("total_size"), std::string("128"));
        // layers.0.key is a.safetensors' rows (seed 1), not the stray shard's (seed 3).
        QCOMPARE(loadForClustering(*d.find("layers.0.key"), false).rows, test::randomRows(4, 4, 1));
    } catch (const Error& e) {
        QVERIFY2(!expect.isEmpty(), e.what());
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY2(std::string(e.what()).find(expect.toStdString()) != std::string::npos, e.what());
    }
}

void TestReaders::integerTensors()
{
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "pos.safetensors");
    TensorBlob b{"positions", DType::I32, {4}, {}};
    const std::int32_t v[4] = {0, 1, 2, -3};
    b.bytes.resize(sizeof v);
    std::memcpy(b.bytes.data(), v, sizeof v);
    writeSafetensors(path, {b});
    const auto f = readSafetensors(path);
    QCOMPARE(toInt64(f.tensors[0]), (std::vector<std::int64_t>{0, 1, 2, -3}));
    QVERIFY_THROWS_EXCEPTION(Error, toMatrix(f.tensors[0])); // not a float tensor
}

void TestReaders::nonFiniteRowsCountedAndDropped()
{
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "nan.npy");
    MatrixRF x = test::randomRows(10, 4, 1);
    x(2, 1) = std::numeric_limits<float>::quiet_NaN();
    x(7, 3) = std::numeric_limits<float>::infinity();
    writeNpy(path, x);
    const auto d = KvDump::open(path);
    try {
        loadForClustering(d.only(), false);
        QFAIL("NaN rows must be refused");
    } catch (const Error& e) {
        const std::string m = e.what();
        QVERIFY2(m.find("2 of 10 rows") != std::string::npos && m.find("row 2") != std::string::npos, e.what());
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
    }
    const auto t = loadForClustering(d.only(), true);
    QCOMPARE(t.rows.rows(), 8);
    QCOMPARE(t.droppedRows, (std::vector<std::int64_t>{2, 7}));
    QCOMPARE(t.rows.row(2), x.row(3)); // rows after a dropped one move up
}

void TestReaders::bundledSampleMatchesRealData()
{
    const std::string sample = GSRQ_SOURCE_DIR "/resources/samples/stories260K-gpl3.safetensors";
    const auto d = KvDump::open(sample);
    QCOMPARE(d.metadata().at("key_rope"), std::string("pre"));
    const auto& v = d.get("layers.2.value");
    QCOMPARE(v.view.shape, (std::vector<std::int64_t>{2048, 4, 8}));
    QCOMPARE(d.get("layers.4.query").view.features(), 64);
    QCOMPARE(toInt64(d.get("positions").view)[513], std::int64_t(1)); // row = sequence·512 + position

    const std::string original = GSRQ_SOURCE_DIR "/../shared/data/realkv/stories260K-gpl3/layer02_v.npy";
    if (!std::filesystem::exists(original))
        QSKIP("the original real dump (../shared/data/realkv) is not beside this checkout");
    const MatrixRF a = toMatrix(readNpy(original));
    const MatrixRF b = toMatrix(v.view);
    // The sample stores values as F16: each element within F16's relative rounding 2^-11
    // (plus F16's subnormal spacing 2^-24 for values near zero).
    QVERIFY(((a - b).cwiseAbs().array() <= std::ldexp(1.0f, -11) * a.cwiseAbs().array() + std::ldexp(1.0f, -24)).all());
}

// FIPS 180-4 examples, and a million 'a' fed in odd-sized pieces (exercises the block buffer).
void TestReaders::sha256KnownVectors()
{
    auto hex = [](const std::string& s) {
        Sha256 h;
        h.update(s.data(), s.size());
        return h.hexDigest();
    };
    QCOMPARE(hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    QCOMPARE(hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    QCOMPARE(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
             std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    Sha256 h;
    const std::string chunk(997, 'a');
    std::size_t left = 1000000;
    while (left) {
        const std::size_t n = std::min(left, chunk.size());
        h.update(chunk.data(), n);
        left -= n;
    }
    QCOMPARE(h.hexDigest(), std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

QTEST_APPLESS_MAIN(TestReaders)
#include "tst_readers.moc"
