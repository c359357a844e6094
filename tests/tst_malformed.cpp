// The malformed-input corpus: each case must raise gsrq::Error of kind InvalidInput (the CLI's exit
// code 2) whose message names the file or tensor and says what is wrong. Never a crash.

#include "core/base/error.h"
#include "core/io/kv_dump.h"
#include "core/io/npy.h"
#include "core/io/safetensors.h"
#include "core/jobs/compare_job.h"
#include "test_util.h"

#include <QtTest>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

using namespace gsrq;

namespace {

std::string u64(std::uint64_t v)
{
    return std::string(reinterpret_cast<const char*>(&v), 8);
}

// A safetensors file from a literal header and data section; headerLen overrides the length field.
std::string st(const std::string& header, const std::string& data = std::string(16, '\0'), std::int64_t headerLen = -1)
{
    return u64(headerLen < 0 ? header.size() : std::uint64_t(headerLen)) + header + data;
}

std::string npy(const std::string& dict, const std::string& data, char major = 1)
{
    std::string h = dict;
    while ((10 + h.size() + 1) % 64)
        h.push_back(' ');
    h.push_back('\n');
    std::string out = "\x93NUMPY";
    out.push_back(major);
    out.push_back(0);
    out.push_back(char(h.size() & 0xff));
    out.push_back(char(h.size() >> 8));
    return out + h + data;
}

std::string floats(std::initializer_list<float> v)
{
    return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

const std::string kF32x4 = R"("x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";

struct Case {
    const char* name;
    const char* file; // written into a fresh directory ("" = none)
    std::string bytes;
    const char* expect; // a phrase the message must hold
    // What to do with the path; default: open it as a dump and load its only tensor for clustering.
    std::function<void(const std::string&)> action;
};

void openAndLoad(const std::string& path)
{
    const auto d = KvDump::open(path);
    loadForClustering(d.only(), false);
}

std::vector<Case> corpus()
{
    const std::string nan = floats({1, 2, std::numeric_limits<float>::quiet_NaN(), 4, 5, 6});
    return {
        {"st empty file", "a.safetensors", "", "empty", {}},
        {"st shorter than length field", "a.safetensors", "abcd", "truncated", {}},
        {"st header longer than file", "a.safetensors", st("{}", "", 500), "truncated", {}},
        {"st implausible header length", "a.safetensors", st("{}", "", std::int64_t(1) << 40), "implausible", {}},
        {"st header not JSON", "a.safetensors", st("{\"x\": [1, 2"), "not valid JSON", {}},
        {"st header is an array", "a.safetensors", st("[1,2,3]"), "not a JSON object", {}},
        {"st entry not an object", "a.safetensors", st(R"({"x": 5})"), "not a JSON object", {}},
        {"st missing dtype", "a.safetensors", st(R"({"x":{"shape":[2,2],"data_offsets":[0,16]}})"), "'dtype'", {}},
        {"st unknown dtype",
         "a.safetensors",
         st(R"({"x":{"dtype":"F12","shape":[2,2],"data_offsets":[0,16]}})"),
         "unknown dtype 'F12'",
         {}},
        {"st negative shape",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})"),
         "non-negative",
         {}},
        {"st shape not array",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})"),
         "'shape'",
         {}},
        {"st missing offsets", "a.safetensors", st(R"({"x":{"dtype":"F32","shape":[2,2]}})"), "data_offsets", {}},
        {"st offsets reversed",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})"),
         "after end",
         {}},
        {"st data past end of file",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}})"),
         "truncated",
         {}},
        {"st header lies about size",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})"),
         "needs 24 bytes",
         {}},
        {"st overlapping tensors",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
         "overlap",
         {}},
        {"st shape overflows",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})"),
         "overflows",
         {}},
        {"st metadata not object", "a.safetensors", st(R"({"__metadata__":[1],)" + kF32x4 + "}"), "__metadata__", {}},
        {"st metadata value not string",
         "a.safetensors",
         st(R"({"__metadata__":{"a":1},)" + kF32x4 + "}"),
         "not a string",
         {}},
        {"st kv tensor is 1-D",
         "a.safetensors",
         st(R"({"layers.0.key":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
         "neither",
         {}},
        {"st integer tensor clustered",
         "a.safetensors",
         st(R"({"x":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})"),
         "not a float type",
         {}},
        {"st empty tensor",
         "a.safetensors",
         st(R"({"x":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", ""),
         "is empty",
         {}},
        {"npy bad magic", "a.npy", "NOTNUMPYFILE", "magic", {}},
        {"npy version 4",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", floats({1}), 4),
         "version 4",
         {}},
        {"npy big-endian",
         "a.npy",
         npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1, 1), }", floats({1})),
         "big-endian",
         {}},
        {"npy integer dtype",
         "a.npy",
         npy("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1), }", floats({1})),
         "'<i4' is not supported",
         {}},
        {"npy Fortran order",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }", floats({1})),
         "Fortran",
         {}},
        {"npy truncated data",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", floats({1, 2, 3})),
         "truncated",
         {}},
        {"npy trailing bytes",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", floats({1, 2})),
         "disagree",
         {}},
        {"npy header missing shape",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, }", floats({1})),
         "malformed .npy header",
         {}},
        {"npy header garbage", "a.npy", npy("{'descr': <f4}", floats({1})), "malformed .npy header", {}},
        {"npy 3-D as a plain dump",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2), }", floats({1, 2})),
         "must be 2-D",
         {}},
        {"npy NaN rows refused",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", nan),
         "1 of 3 rows hold NaN",
         {}},
        {"npy all zeros",
         "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", floats({0, 0, 0, 0})),
         "every value is zero",
         {}},
        {"missing file", "", "", "no such file", {}},
        {"directory without shards", "notes.txt", "hello", "no .safetensors shards",
         [](const std::string& p) { KvDump::open(std::filesystem::path(p).parent_path().string()); }},
        {"k larger than rows", "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", floats({1, 2, 3, 4})), "--k 5 is larger",
         [](const std::string& p) {
             const auto d = KvDump::open(p);
             CompareSettings s;
             s.k = 5;
             validateCompare(s, d.only().view.rows(), d.only().view.features());
         }},
        {"dim does not divide features", "a.npy",
         npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", floats({1, 2, 3, 4, 5, 6})),
         "--dim 2 does not divide the 3 features",
         [](const std::string& p) {
             const auto d = KvDump::open(p);
             CompareSettings s;
             s.dim = 2;
             s.k = 1;
             validateCompare(s, d.only().view.rows(), d.only().view.features());
         }},
    };
}

} // namespace

class TestMalformed : public QObject {
    Q_OBJECT

private slots:
    void corpusIsLarge() { QVERIFY(corpus().size() >= 25); }
    void eachIsAClearError_data();
    void eachIsAClearError();
    void failedWriteLeavesOldFile();
};

void TestMalformed::eachIsAClearError_data()
{
    QTest::addColumn<int>("index");
    const auto cases = corpus();
    for (std::size_t i = 0; i < cases.size(); ++i)
        QTest::newRow(cases[i].name) << int(i);
}

void TestMalformed::eachIsAClearError()
{
    QFETCH(int, index);
    const Case c = corpus()[std::size_t(index)];
    QTemporaryDir dir;
    const std::string path = test::pathIn(dir, *c.file ? c.file : "absent.safetensors");
    if (*c.file) {
        std::ofstream(path, std::ios::binary) << c.bytes;
        // fuzz/make_seeds.py collects the corpus as the fuzz targets' seeds.
        if (const char* seeds = std::getenv("GSRQ_SEED_DIR"))
            std::ofstream(std::filesystem::path(seeds) /
                              (std::string("malformed-") + std::to_string(index) + "-" + c.file),
                          std::ios::binary)
                << c.bytes;
    }
    try {
        (c.action ? c.action : openAndLoad)(path);
        QFAIL("no error raised");
    } catch (const Error& e) {
        const std::string m = e.what();
        QCOMPARE(e.kind(), ErrorKind::InvalidInput);
        QVERIFY2(m.find(c.expect) != std::string::npos, qPrintable(QString::fromStdString("message: " + m)));
        // Every message names what it is about: the file, or the flag for settings errors.
        const bool namesFile = m.find(std::filesystem::path(path).filename().string()) != std::string::npos ||
                               m.find(dir.path().toStdString()) != std::string::npos;
        QVERIFY2(namesFile || m.rfind("--", 0) == 0, qPrintable(QString::fromStdString("message: " + m)));
    }
}

// A writer that fails must leave the previous file as it was (write to a temporary, then rename).
void TestMalformed::failedWriteLeavesOldFile()
{
    QTemporaryDir dir;
    const auto path = test::pathIn(dir, "keep.safetensors");
    writeSafetensors(path, {makeFloatBlob("x", test::randomRows(2, 2, 1), DType::F32)});
    const auto before = std::filesystem::file_size(path);
    TensorBlob bad{"y", DType::F32, {3, 3}, std::vector<std::byte>(4)}; // shape needs 36 bytes
    QVERIFY_THROWS_EXCEPTION(Error, writeSafetensors(path, {bad}));
    QCOMPARE(std::filesystem::file_size(path), before);
    QCOMPARE(readSafetensors(path).tensors.at(0).name, std::string("x"));
    int files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path().toStdString()))
        ++files;
    QCOMPARE(files, 1); // no temporary left behind
}

QTEST_APPLESS_MAIN(TestMalformed)
#include "tst_malformed.moc"
