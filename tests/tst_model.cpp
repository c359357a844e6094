// The llama2.c forward pass, tokenizer and re-flow, perplexity with codebooks, and `gsrq ppl` on the
// bundled model. The forward pass itself is checked against an independent float64 NumPy
// implementation in tests/python/test_llama2c_reference.py.

#include "core/base/cpu_features.h"
#include "core/base/error.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/codebook_file.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/generate.h"
#include "core/jobs/codebook_perplexity.h"
#include "core/jobs/run_records.h"
#include "core/lm/gguf_model.h"
#include "core/lm/gguf_tokenizer.h"
#include "core/lm/llama2c_model.h"
#include "core/lm/llama2c_tokenizer.h"
#include "core/lm/open_model.h"
#include "core/lm/perplexity.h"
#include "core/lm/quant_matvec.h"
#include "core/lm/sequences.h"
#include "test_blocks.h"
#include "test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <tuple>

using namespace gsrq;

namespace {

std::string modelPath()
{
    return test::stories260KModel();
}

std::string tokenizerPath()
{
    return test::stories260KTokenizer();
}

void writeBytes(const std::string& path, const std::vector<char>& bytes)
{
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

template <class T> void put(std::vector<char>& out, T v)
{
    const auto* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
}

} // namespace

class TestModel : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }
    void loadsTheBundledModel();
    void incrementalEqualsWholeSequence();
    void badCheckpointsAreRefused();
    void reflowJoinsParagraphs();
    void tokenizerMergesByScore();
    void openModelGivesModelAndVocabulary();
    void exactCodebooksLeavePerplexityUnchanged();
    void postRopeCodebooksRoundTrip();
    void cliReportsAndRefuses();
    void perplexityFallsAsBitsRise();
    void ggufDecodeStepsMatchTheForwardPass();
    void generateReportsLatencyPerPath();
    void quantMatVecEqualsTheDequantizedProduct();

private:
    QTemporaryDir m_dir;
};

void TestModel::loadsTheBundledModel()
{
    const auto m = loadLlama2cModel(modelPath());
    const auto& c = m.config();
    QCOMPARE(c.dim, 64);
    QCOMPARE(c.hidden, 172);
    QCOMPARE(c.layers, 5);
    QCOMPARE(c.heads, 8);
    QCOMPARE(c.kvHeads, 4);
    QCOMPARE(c.vocab, 512);
    QCOMPARE(c.kvDim(), 32);
    QVERIFY(c.sharedClassifier);
    const auto tok = Llama2cTokenizer::load(tokenizerPath(), c.vocab);
    QCOMPARE(tok.size(), 512);
    QCOMPARE(tok.piece(Llama2cTokenizer::kBos), std::string("\n<s>\n"));
}

// The cache appends each layer's keys and values: one token at a time gives the logits of the
// whole sequence at once (float rounding of different GEMM shapes: 1e-4 of the logits' scale).
void TestModel::incrementalEqualsWholeSequence()
{
    const auto m = loadLlama2cModel(modelPath());
    const auto tok = Llama2cTokenizer::load(tokenizerPath(), 512);
    auto ids = tok.encode("Once upon a time, there was a little girl named Lily.");
    ids.insert(ids.begin(), Llama2cTokenizer::kBos);
    TransformerModel::Cache whole, step;
    const MatrixRF all = m.forward(ids, whole);
    QCOMPARE(whole.length, int(ids.size()));
    for (std::size_t t = 0; t < ids.size(); ++t) {
        const MatrixRF one = m.forward(std::span<const std::int32_t>(&ids[t], 1), step);
        const double scale = all.row(Eigen::Index(t)).cwiseAbs().maxCoeff();
        QVERIFY((one.row(0) - all.row(Eigen::Index(t))).cwiseAbs().maxCoeff() <= 1e-4 * scale);
    }
    // The model knows its stories: "Lily" after "named" is likely (rank among the top 5).
    const auto named = std::find(ids.begin(), ids.end(), tok.encode("named").back()) - ids.begin();
    const Eigen::RowVectorXf next = all.row(Eigen::Index(named));
    const float lily = next[ids[std::size_t(named) + 1]];
    QVERIFY((next.array() > lily).count() < 5);
}

void TestModel::badCheckpointsAreRefused()
{
    const auto expectInvalid = [&](const std::vector<char>& bytes, const char* needle) {
        const auto path = test::pathIn(m_dir, "bad.bin");
        writeBytes(path, bytes);
        try {
            loadLlama2cModel(path);
            QFAIL("a bad checkpoint must be refused");
        } catch (const Error& e) {
            QCOMPARE(e.kind(), ErrorKind::InvalidInput);
            QVERIFY2(std::string(e.what()).find(path) != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find(needle) != std::string::npos, e.what());
        }
    };
    std::vector<char> header;
    for (int v : {64, 172, 5, 8, 4, 512, 512})
        put(header, std::int32_t(v));
    expectInvalid(header, "needs at least"); // a header and no weights
    std::vector<char> odd;
    for (int v : {64, 172, 5, 7, 4, 512, 512})
        put(odd, std::int32_t(v));
    expectInvalid(odd, "heads must divide");
    std::vector<char> huge;
    for (int v : {1 << 30, 172, 5, 8, 4, 512, 512})
        put(huge, std::int32_t(v));
    expectInvalid(huge, "implausibly large"); // refused before anything is allocated
    // The real file cut short.
    std::ifstream f(modelPath(), std::ios::binary);
    std::vector<char> real((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    real.resize(real.size() / 2);
    expectInvalid(real, "needs at least");
}

void TestModel::reflowJoinsParagraphs()
{
    QCOMPARE(reflowText("  The quick\nbrown   fox.\n\n\nJumps\tover\n  the dog.  \n"),
             std::string("The quick brown fox.\nJumps over the dog."));
    QCOMPARE(reflowText("\n \n"), std::string());
    QCOMPARE(reflowText("one line"), std::string("one line"));
}

// A hand-made vocabulary: the highest-scoring pair merges first, the leftmost among equals, and a
// character outside the vocabulary falls back to its bytes' tokens (3 + byte), or to <unk> where, as
// here, the vocabulary is too small to hold them: never to an id past its end.
void TestModel::tokenizerMergesByScore()
{
    const std::vector<std::pair<std::string, float>> vocab = {{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}, {" ", 0},
                                                              {"a", 0},     {"b", 0},   {"ab", 2},   {"ba", 3},
                                                              {" a", 1},    {"aba", 5}};
    std::vector<char> bytes;
    put(bytes, std::int32_t(8));
    for (const auto& [s, score] : vocab) {
        put(bytes, score);
        put(bytes, std::int32_t(s.size()));
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    const auto path = test::pathIn(m_dir, "tok.bin");
    writeBytes(path, bytes);
    const auto tok = Llama2cTokenizer::load(path, int(vocab.size()));
    // " ab": [" ", "a", "b"] → " a" (1) vs "ab" (2): "ab" first → [" ", "ab"]; " ab" is not a token.
    QCOMPARE(tok.encode("ab"), (std::vector<std::int32_t>{3, 6}));
    // " aba": "ba" (3) beats "ab" (2) → [" ", "a", "ba"]; then "aba" (5) → [" ", "aba"].
    QCOMPARE(tok.encode("aba"), (std::vector<std::int32_t>{3, 9}));
    // "c" is not in the vocabulary and its byte token 3 + 0x63 = 102 is past these 10 tokens: <unk>.
    QCOMPARE(tok.encode("c"), (std::vector<std::int32_t>{3, 0}));
    QCOMPARE(tok.encode(""), std::vector<std::int32_t>());
    // A tokenizer of another vocabulary, larger or smaller than the model's, is refused, naming the file.
    for (int vocabSize : {100, 5}) {
        try {
            Llama2cTokenizer::load(path, vocabSize);
            QFAIL("a tokenizer of another vocabulary must be refused");
        } catch (const Error& e) {
            QCOMPARE(e.kind(), ErrorKind::InvalidInput);
            QVERIFY(std::string(e.what()).find(path) != std::string::npos);
        }
    }
}

// One entry opens either format once and hands back the model with its vocabulary behind the one
// interface: what the format-specific loaders give, id for id and logit for logit.
void TestModel::openModelGivesModelAndVocabulary()
{
    const std::string text = "Once upon a time, there was a little girl named Lily.";
    const auto opened = openModel(modelPath(), tokenizerPath());
    QCOMPARE(opened.format, ModelFormat::Llama2c);
    QVERIFY(opened.tokenizer);
    QCOMPARE(opened.tokenizer->name(), std::string("llama2.c"));
    QCOMPARE(opened.tokenizer->bos(), std::optional<std::int32_t>(Llama2cTokenizer::kBos));
    const auto direct = Llama2cTokenizer::load(tokenizerPath(), 512);
    QCOMPARE(opened.tokenizer->encode(text), direct.encode(text));
    QCOMPARE(opened.tokenizer->piece(Llama2cTokenizer::kBos), direct.piece(Llama2cTokenizer::kBos));
    // The model's own samples start with its vocabulary's BOS, and are those of the loader's model.
    SequenceSource samples;
    samples.generate = true;
    samples.seqLen = 16;
    samples.sequences = 2;
    samples.seed = 5;
    QCOMPARE(modelSequences(opened, samples).sequences, generateSequences(loadLlama2cModel(modelPath()), 16, 2, 5));
    const auto bare = openModel(modelPath());
    QVERIFY(!bare.tokenizer);
    QVERIFY(test::invalidInputMessage([&] { modelSequences(bare, samples); }).find("needs its tokenizer") !=
            std::string::npos);
    // A text needs the vocabulary: the message names what is missing.
    SequenceSource fromText;
    fromText.text = test::sourcePath("tests/data/make_tiny_gguf.py").toStdString();
    fromText.seqLen = 8;
    fromText.sequences = 1;
    QVERIFY(test::invalidInputMessage([&] { modelSequences(bare, fromText); }).find("needs its tokenizer") !=
            std::string::npos);

    const std::string gguf = test::sourcePath("tests/data/tiny-llama.gguf").toStdString();
    const auto g = openModel(gguf, "ignored: a GGUF model brings its own vocabulary");
    QCOMPARE(g.format, ModelFormat::Gguf);
    QVERIFY(g.tokenizer);
    const auto file = GgufFile::open(gguf);
    const auto bpe = BpeTokenizer::fromGguf(file);
    QCOMPARE(g.tokenizer->encode("hello world"), bpe.encode("hello world"));
    QCOMPARE(g.tokenizer->bos(), bpe.bos());
    QCOMPARE(g.tokenizer->size(), bpe.size());
    // The same weights as the GGUF loader's: the logits of a few tokens agree exactly.
    const auto loaded = loadGgufModel(file);
    const std::vector<std::int32_t> ids{1, 2, 3};
    TransformerModel::Cache a, b;
    QCOMPARE(g.model.forward(ids, a), loaded.forward(ids, b));
    // Its sequences start with its own BOS, and a GGUF model is measured on a text, not samples.
    fromText.sequences = 2;
    const auto seqs = modelSequences(g, fromText);
    QCOMPARE(seqs.sequences.size(), std::size_t(2));
    QCOMPARE(seqs.sequences[0].front(), *bpe.bos());
    QVERIFY(seqs.textTokens >= 14);
    QVERIFY(test::invalidInputMessage([&] { modelSequences(g, samples); }).find("measured on a text") !=
            std::string::npos);
}

// Codebooks whose codewords include every row exactly (K = the rows, one stage) reconstruct the
// cache without loss: the perplexity is the FP32 one (to 1e-9: the same floats in the same order).
void TestModel::exactCodebooksLeavePerplexityUnchanged()
{
    const auto m = loadLlama2cModel(modelPath());
    const auto seqs = generateSequences(m, 24, 2, 7);
    QCOMPARE(seqs.size(), size_t(2));
    QCOMPARE(seqs[0].front(), Llama2cTokenizer::kBos);
    QCOMPARE(generateSequences(m, 24, 2, 7), seqs); // seeded
    QVERIFY(generateSequences(m, 24, 2, 8) != seqs);
    const double fp32 = perplexity(m, seqs).perplexity();
    QVERIFY(fp32 > 1 && fp32 < 50);

    // Record every layer's keys and values of the two sequences, then make them the codebooks.
    std::vector<MatrixRF> keys(5), values(5);
    for (const auto& s : seqs) {
        TransformerModel::Cache c;
        m.forward(s, c, [&](int l, MatrixRF& k, MatrixRF& v, const std::vector<std::int64_t>&) {
            auto& K = keys[std::size_t(l)];
            auto& V = values[std::size_t(l)];
            K.conservativeResize(K.rows() + k.rows(), 32);
            V.conservativeResize(V.rows() + v.rows(), 32);
            K.bottomRows(k.rows()) = k;
            V.bottomRows(v.rows()) = v;
        });
    }
    CodebookFile file;
    file.metadata = {{"format", kCodebookFormat}, {"format_version", "1"}, {"bpa", "32"},
                     {"method", "exact"},         {"key_rope", "pre"},     {"beam", "1"}};
    for (int l = 0; l < 5; ++l)
        for (const auto& [kind, x] : {std::pair{"key", &keys[std::size_t(l)]}, {"value", &values[std::size_t(l)]}}) {
            CodebookEntry e;
            e.tensor = "layers." + std::to_string(l) + "." + kind;
            e.codebooks.allocate(32, 1, int(x->rows()), 1);
            e.codebooks.book(0, 0) = *x;
            file.entries.push_back(std::move(e));
        }
    auto backend = makeCpuBackend(1);
    const auto hook = codebookHook(file, "exact.safetensors", m.config(), {}, *backend);
    QVERIFY(std::abs(perplexity(m, seqs, hook).perplexity() - fp32) <= 1e-9 * fp32);
    QCOMPARE(quantizedLayers(file, {1, 3}), (std::vector<int>{1, 3}));

    // Coarse codebooks (one codeword: the mean) move it, and only on the layers asked for.
    CodebookFile coarse = file;
    for (auto& e : coarse.entries) {
        const Eigen::RowVectorXf mean = e.codebooks.book(0, 0).colwise().mean();
        e.codebooks.allocate(32, 1, 1, 1);
        e.codebooks.book(0, 0) = mean;
    }
    const double all = perplexity(m, seqs, codebookHook(coarse, "coarse", m.config(), {}, *backend)).perplexity();
    const double one = perplexity(m, seqs, codebookHook(coarse, "coarse", m.config(), {4}, *backend)).perplexity();
    QVERIFY2(all > one && one > fp32, qPrintable(QString("fp32 %1, layer 4 %2, all %3").arg(fp32).arg(one).arg(all)));

    // The one perplexity job (core/jobs/codebook_perplexity.h) gives the same figures: FP32 first, then
    // each file over its layers, and with --per-layer each of them alone after it; the exact file
    // costs its nominal 32 bits plus its codewords over these 48 cached tokens.
    CodebookPerplexitySettings cs;
    cs.perLayer = true;
    const auto job = runCodebookPerplexity(m, seqs, {{"exact", file}, {"coarse", coarse}}, cs, *backend);
    QVERIFY(!job.cancelled);
    QCOMPARE(job.rows.size(), std::size_t(1 + 2 * (1 + 5)));
    QCOMPARE(job.rows[0].codebooks, std::string("FP32"));
    QCOMPARE(job.fp32(), fp32); // the same forward passes, the same floats
    QCOMPARE(job.rows[1].codebooks, std::string("exact"));
    QCOMPARE(job.rows[1].layers, std::string("0,1,2,3,4"));
    QVERIFY(std::abs(job.rows[1].perplexity - fp32) <= 1e-9 * fp32);
    QCOMPARE(job.rows[1].bpa, 32.0);
    // Each layer's codewords: one 32-wide F16 codeword per cached row (48 rows), over 48 tokens × 32.
    QVERIFY(std::abs(job.rows[1].effectiveBpa - (32 + 16.0 * 48 * 32 / (48.0 * 32))) < 1e-9);
    QCOMPARE(job.rows[7].codebooks, std::string("coarse"));
    QCOMPARE(job.rows[7].perplexity, all);
    QVERIFY(job.rows[12].perLayer && job.rows[12].layers == "4");
    QCOMPARE(job.rows[12].perplexity, one);
    QVERIFY(!job.single()); // two files: no one perplexity in the summary
    // A file: ppl, bits, effective; every row its sequences' NLL and tokens, and beside FP32 its Δ%
    // interval (low, high).
    const std::size_t rows = job.rows.size(), sequences = seqs.size();
    QCOMPARE(codebookPerplexityMetrics(job).size(),
             std::size_t(1 + 2 * 3 + 2 * 5) + rows * 2 * sequences + (rows - 1) * 2);
    QCOMPARE(codebookPerplexitySeries(job).size(), std::size_t(2 * 2));
    const auto solo = runCodebookPerplexity(m, seqs, {{"exact", file}}, {}, *backend);
    QCOMPARE(codebookPerplexitySummary(solo).value("perplexity", 0.0), solo.rows[1].perplexity);
    // Cancelled after FP32: the FP32 row kept, nothing else measured.
    int events = 0;
    const auto stopped = runCodebookPerplexity(m, seqs, {{"exact", file}}, {}, *backend,
                                               [&](const ProgressEvent&) { return events++ < 1; });
    QVERIFY(stopped.cancelled);
    QCOMPARE(stopped.rows.size(), std::size_t(1));
    // A file with none of the layers asked for is refused, naming it.
    CodebookPerplexitySettings layer9;
    layer9.layers = {9};
    layer9.layersText = "9";
    QVERIFY_THROWS_EXCEPTION(Error, runCodebookPerplexity(m, seqs, {{"exact", file}}, layer9, *backend));

    // Codebooks of another width are refused, naming the file and the tensor.
    CodebookFile wide = file;
    wide.entries[0].codebooks.allocate(16, 1, 1, 1);
    try {
        codebookHook(wide, "wide.safetensors", m.config(), {}, *backend);
        QFAIL("codebooks of another width must be refused");
    } catch (const Error& e) {
        QVERIFY(std::string(e.what()).find("wide.safetensors: layers.0.key") != std::string::npos);
    }
}

// Codebooks trained on keys after RoPE: the hook rotates, reconstructs and rotates back. Exact
// post-RoPE codebooks (the rotated keys themselves) give the FP32 perplexity up to the float
// rounding of rotating there and back (1e-5 relative).
void TestModel::postRopeCodebooksRoundTrip()
{
    const auto m = loadLlama2cModel(modelPath());
    const auto seqs = generateSequences(m, 16, 1, 3);
    const double fp32 = perplexity(m, seqs).perplexity();
    std::vector<MatrixRF> keys(5);
    TransformerModel::Cache c;
    m.forward(seqs[0], c);
    CodebookFile file;
    file.metadata = {{"key_rope", "post"}, {"beam", "1"}};
    for (int l = 0; l < 5; ++l) {
        CodebookEntry e;
        e.tensor = "layers." + std::to_string(l) + ".key";
        e.codebooks.allocate(32, 1, int(c.keys[std::size_t(l)].rows()), 1);
        e.codebooks.book(0, 0) = c.keys[std::size_t(l)]; // the cache holds keys after RoPE
        file.entries.push_back(std::move(e));
    }
    auto backend = makeCpuBackend(1);
    const double post = perplexity(m, seqs, codebookHook(file, "post", m.config(), {}, *backend)).perplexity();
    QVERIFY2(std::abs(post - fp32) <= 1e-5 * fp32, qPrintable(QString("%1 vs %2").arg(post).arg(fp32)));
}

void TestModel::cliReportsAndRefuses()
{
    const QString model = QString::fromStdString(modelPath()), tok = QString::fromStdString(tokenizerPath());
    const QString text = test::sourcePath("README.md");
    auto r = test::gsrqRun(
        {"--no-db", "ppl", model, "--tokenizer", tok, "--generate", "--seq-len", "32", "--sequences", "2", "--json"});
    QCOMPARE(r.code, 0);
    const auto j = QJsonDocument::fromJson(r.out).object();
    const auto rows = j["results"].toArray();
    QCOMPARE(rows.size(), 1);
    QCOMPARE(rows[0].toObject()["codebooks"].toString(), QString("FP32"));
    QVERIFY(rows[0].toObject()["perplexity"].toDouble() > 1);
    QCOMPARE(j["predicted_tokens"].toInt(), 2 * 31);
    // Bad input: exit 2 with the flag or file named.
    const double sampled = rows[0].toObject()["perplexity"].toDouble();
    r = test::gsrqRun({"--no-db", "ppl", model, "--tokenizer", tok});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--text FILE, --generate or --token-ids FILE"));
    // The same sequences as token ids (one per line): the same perplexity, no tokenizer needed. The
    // sampled sequences are regenerated from the same seed through the engine.
    {
        const auto m = loadLlama2cModel(modelPath());
        const auto seqs = generateSequences(m, 32, 2, 0);
        QTemporaryDir dir;
        const QString ids = dir.filePath("ids.txt");
        QFile f(ids);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (const auto& q : seqs) {
            QStringList words;
            for (auto t : q)
                words << QString::number(t);
            f.write((words.join(' ') + "\n\n").toUtf8()); // blank lines between are skipped
        }
        f.close();
        r = test::gsrqRun({"--no-db", "ppl", model, "--token-ids", ids, "--json"});
        QCOMPARE(r.code, 0);
        const auto jt = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(jt["results"].toArray()[0].toObject()["perplexity"].toDouble(), sampled);
        QCOMPARE(jt["predicted_tokens"].toInt(), 2 * 31);
        // A word that is not an id of the vocabulary: the file and line named, exit 2.
        QVERIFY(f.open(QIODevice::Append));
        f.write("1 2 999999\n");
        f.close();
        r = test::gsrqRun({"--no-db", "ppl", model, "--token-ids", ids});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("ids.txt:5: '999999' is not a token id"), r.err.constData());
        r = test::gsrqRun({"--no-db", "ppl", model, "--token-ids", ids, "--text", text});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--token-ids: not with --text"));
    }
    // A GGUF model (the bundled synthetic tiny llama) brings its vocabulary: --text alone; the
    // sequences start with its BOS (<|endoftext|>, the last id) and hold the README's tokens.
    {
        const QString gguf = test::sourcePath("tests/data/tiny-llama.gguf");
        r = test::gsrqRun({"--no-db", "ppl", gguf, "--text", text, "--seq-len", "64", "--sequences", "3", "--json"});
        QCOMPARE(r.code, 0);
        const auto jg = QJsonDocument::fromJson(r.out).object();
        const double p = jg["results"].toArray()[0].toObject()["perplexity"].toDouble();
        QVERIFY2(p > 1 && std::isfinite(p), r.out.constData());
        QCOMPARE(jg["predicted_tokens"].toInt(), 3 * 63);
        QVERIFY(jg["text_tokens"].toInt() > 3 * 63);
        QVERIFY(jg["fp32_seconds"].toDouble() > 0);
        r = test::gsrqRun({"--no-db", "ppl", gguf, "--generate"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--generate: llama2.c models only"));
        r = test::gsrqRun({"--no-db", "ppl", gguf, "--text", text, "--tokenizer", tok});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("brings its own vocabulary"));
        // gsrq tokenize: "the" is one token (merges t·h, th·e), a space-led word starts with Ġ's merge.
        QTemporaryDir dir;
        QFile f(dir.filePath("t.txt"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("the");
        f.close();
        r = test::gsrqRun({"tokenize", gguf, "--text", f.fileName()});
        QCOMPARE(r.code, 0);
        QCOMPARE(r.out.trimmed().split(' ').size(), 1);
        QVERIFY(r.out.trimmed().toInt() >= 256); // a merged token, past the 256 byte tokens
        r = test::gsrqRun({"tokenize", model, "--text", f.fileName()});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("not a GGUF model"));
        // Not UTF-8: the file named, exit 2.
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("ok \xff\xfe bad");
        f.close();
        r = test::gsrqRun({"tokenize", gguf, "--text", f.fileName()});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("t.txt") && r.err.contains("not UTF-8"), r.err.constData());
    }
    r = test::gsrqRun({"--no-db", "ppl", model, "--tokenizer", tok, "--generate", "--seq-len", "9999"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--seq-len"));
    r = test::gsrqRun({"--no-db", "ppl", tok, "--tokenizer", tok, "--generate"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("tok512.bin"));
    r = test::gsrqRun({"--no-db", "ppl", model, "--tokenizer", tok, "--generate", "--layers", "7"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--layers"));
    if (QFile::exists(text)) {
        r = test::gsrqRun({"--no-db", "ppl", model, "--tokenizer", tok, "--text", text, "--sequences", "100000"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--text"));
    }
}

// GSKM codebooks trained on the bundled sample (its KV cache, from licence text) at 0.5, 1, 2 and 4
// bits per activation, and KM's at 1 and 0.5, evaluated on 16 × 256 tokens the model sampled (seed
// 0): the model's own domain, where compression can only cost.
void TestModel::perplexityFallsAsBitsRise()
{
    const QString sample = test::sourcePath("resources/samples/stories260K-gpl3.safetensors");
    struct Setting {
        const char *name, *method, *dim, *stages;
    };
    const Setting settings[] = {{"gskm-0.5", "gskm", "16", "1"}, {"gskm-1", "gskm", "8", "1"},
                                {"gskm-2", "gskm", "8", "2"},    {"gskm-4", "gskm", "8", "4"},
                                {"km-0.5", "km", "16", "1"},     {"km-1", "km", "8", "1"}};
    const QString db = QString::fromStdString(test::pathIn(m_dir, "ppl-runs.db"));
    QStringList args{"--db",        db,
                     "ppl",         QString::fromStdString(modelPath()),
                     "--tokenizer", QString::fromStdString(tokenizerPath()),
                     "--generate",  "--seed",
                     "0",           "--json"};
    for (const auto& s : settings) {
        const QString out = QString::fromStdString(test::pathIn(m_dir, s.name)) + ".safetensors";
        const auto r = test::gsrqRun({"--no-db", "train", sample, "--dim", s.dim, "--stages", s.stages, "--k", "256",
                                      "--method", s.method, "--weights", "grad-log", "--out", out, "--force", "-q"});
        QVERIFY2(r.code == 0, r.err.constData());
        args << "-c" << out;
    }
    const auto r = test::gsrqRun(args);
    QVERIFY2(r.code == 0, r.err.constData());
    const auto rows = QJsonDocument::fromJson(r.out).object()["results"].toArray();
    QCOMPARE(rows.size(), 7);
    std::vector<double> ppl;
    for (const auto& row : rows)
        ppl.push_back(row.toObject()["perplexity"].toDouble());
    const QString figures = QString("FP32 %1; GSKM 0.5 %2, 1 %3, 2 %4, 4 %5; KM 0.5 %6, 1 %7")
                                .arg(ppl[0])
                                .arg(ppl[1])
                                .arg(ppl[2])
                                .arg(ppl[3])
                                .arg(ppl[4])
                                .arg(ppl[5])
                                .arg(ppl[6]);
    // Measured: 3.53 FP32, then 5.8, 4.8, 4.06, 3.71: each step is 5–20 times the spread over
    // training seeds (sd 0.01–0.12), so strict order is what the data warrant.
    QVERIFY2(ppl[1] > ppl[2] && ppl[2] > ppl[3] && ppl[3] > ppl[4] && ppl[4] > ppl[0], qPrintable(figures));
    // GSKM-RQ no worse than KM-RQ beyond three standard deviations of KM's perplexity over training
    // seeds 0-2 (measured: 0.124 at 0.5 BPA, 0.010 at 1 BPA).
    QVERIFY2(ppl[1] <= ppl[5] + 3 * 0.124, qPrintable(figures));
    QVERIFY2(ppl[2] <= ppl[6] + 3 * 0.010, qPrintable(figures));

    // The run in the store gives back what the JSON printed, for the perplexity-against-bits chart:
    // FP32, and each file's perplexity at its nominal and effective bits, in order.
    RunStore store(db.toStdString());
    const auto runId = QJsonDocument::fromJson(r.out).object()["run_id"].toInteger();
    const auto back = runPerplexities(store.metrics(runId), store.series(runId));
    QVERIFY(back.fp32.has_value());
    QCOMPARE(*back.fp32, ppl[0]);
    QCOMPARE(back.points.size(), std::size_t(6));
    for (std::size_t i = 0; i < 6; ++i) {
        const auto row = rows[qsizetype(i + 1)].toObject();
        QCOMPARE(back.points[i].perplexity, ppl[i + 1]);
        QCOMPARE(back.points[i].bits, row["bpa"].toDouble());
        QCOMPARE(back.points[i].effectiveBits, row["effective_bpa"].toDouble());
        QVERIFY(back.points[i].effectiveBits > back.points[i].bits); // the codewords cost bits
        QCOMPARE(QString::fromStdString(back.points[i].family), QString(settings[i].method));
    }
    // Each row carries its 16 sequences' mean NLL per token, whose token-weighted mean is the row's
    // log perplexity (JSON keeps every digit; the sums run in another order), and a paired 95% interval of its Δ% that
    // holds the Δ% (the percentile interval of a mean over 16 sequences holds the mean) and that the store gives back;
    // FP32's own row has none. Between GSKM at 4 and at 0.5 BPA, tens of percent apart, the interval of the smaller is
    // wholly below the other's: the gap is not the sequences' noise.
    const auto tokens = QJsonDocument::fromJson(r.out).object()["sequence_tokens"].toArray();
    QCOMPARE(tokens.size(), 16);
    for (qsizetype i = 0; i < rows.size(); ++i) {
        const auto row = rows[i].toObject();
        const auto nll = row["sequence_nll"].toArray();
        QCOMPARE(nll.size(), tokens.size());
        double sum = 0, n = 0;
        for (qsizetype q = 0; q < nll.size(); ++q) {
            sum += nll[q].toDouble() * tokens[q].toDouble();
            n += tokens[q].toDouble();
        }
        QVERIFY2(std::abs(std::exp(sum / n) / row["perplexity"].toDouble() - 1) < 1e-9, qPrintable(QString::number(i)));
        const auto in = row["delta_percent_interval"];
        if (i == 0) {
            QVERIFY(in.isNull());
            QCOMPARE(back.fp32SequenceNll.size(), std::size_t(16));
            continue;
        }
        const double dp = row["delta_percent"].toDouble(), lo = in.toArray()[0].toDouble(),
                     hi = in.toArray()[1].toDouble();
        QVERIFY2(lo <= dp && dp <= hi, qPrintable(QString("%1: %2 [%3, %4]").arg(i).arg(dp).arg(lo).arg(hi)));
        QCOMPARE(back.points[std::size_t(i - 1)].deltaInterval.lo, lo);
        QCOMPARE(back.points[std::size_t(i - 1)].deltaInterval.hi, hi);
        QCOMPARE(back.points[std::size_t(i - 1)].sequenceNll.size(), std::size_t(16));
    }
    const auto interval = [&](int i) { return rows[i].toObject()["delta_percent_interval"].toArray(); };
    QVERIFY2(interval(4)[1].toDouble() < interval(1)[0].toDouble(), qPrintable(figures));
}

namespace {

// Seeded random codebooks for every layer's keys and values of a model: D = 8, R = 2, K = 16 (the
// decode paths' smallest shapes), marked as trained on keys after RoPE.
CodebookFile randomBooks(const ModelConfig& cfg, bool post)
{
    CodebookFile f;
    f.metadata = {{"key_rope", post ? "post" : "pre"},
                  {"method", "gskm"},
                  {"bpa", "1"},
                  {"dim", "8"},
                  {"stages", "2"},
                  {"k", "16"}};
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0.f, 0.5f);
    for (int l = 0; l < cfg.layers; ++l)
        for (const char* kind : {"key", "value"}) {
            CodebookEntry e;
            e.tensor = "layers." + std::to_string(l) + "." + kind;
            e.codebooks.allocate(8, 2, 16, cfg.kvDim() / 8);
            for (auto& v : e.codebooks.data)
                v = n(rng);
            f.entries.push_back(std::move(e));
        }
    return f;
}

} // namespace

// One decode step of the bundled synthetic GGUF llama with its attention over the CPU decode cache's
// FP16 path (keys after RoPE, the prefill's cache appended) gives the logits of the whole forward
// pass over the prefill and that token: the cache holds the keys and values in FP16 (relative
// rounding 2^-11), so the logits agree to about 1e-3 of their scale (held to 1e-2).
void TestModel::ggufDecodeStepsMatchTheForwardPass()
{
    const auto model = loadGgufModel(GgufFile::open(test::sourcePath("tests/data/tiny-llama.gguf").toStdString()));
    const auto& cfg = model.config();
    QCOMPARE(cfg.architecture, std::string("llama"));
    QVERIFY(cfg.pairing == RopePairing::RotateHalf);
    std::vector<std::int32_t> seq;
    for (int i = 0; i < 41; ++i)
        seq.push_back(std::int32_t((i * 37 + 11) % cfg.vocab));
    TransformerModel::Cache whole;
    const MatrixRF ref = model.forward(seq, whole);
    const std::vector<std::int32_t> prefill(seq.begin(), seq.end() - 1);
    TransformerModel::Cache pc;
    model.forward(prefill, pc);
    const auto books = randomBooks(cfg, true);
    std::vector<std::unique_ptr<CpuDecodeCache>> caches;
    for (int l = 0; l < cfg.layers; ++l) {
        CpuDecodeConfig cc;
        cc.shape = {cfg.heads, cfg.kvHeads, cfg.headDim()};
        cc.capacity = 64;
        cc.threads = 1;
        caches.push_back(
            std::make_unique<CpuDecodeCache>(cc, books.find("layers." + std::to_string(l) + ".key")->codebooks,
                                             books.find("layers." + std::to_string(l) + ".value")->codebooks));
        caches.back()->append(pc.keys[std::size_t(l)], pc.values[std::size_t(l)]);
    }
    const auto logits = model.decodeStep(seq.back(), std::int64_t(prefill.size()),
                                         [&](int layer, const Eigen::RowVectorXf& q, const Eigen::RowVectorXf& k,
                                             const Eigen::RowVectorXf& v) -> Eigen::RowVectorXf {
                                             auto& c = *caches[std::size_t(layer)];
                                             c.append(MatrixRF(k), MatrixRF(v));
                                             return c.decode(DecodePath::Fp16, MatrixRF(q)).row(0);
                                         });
    const Eigen::RowVectorXf last = ref.row(ref.rows() - 1);
    const float scale = last.cwiseAbs().maxCoeff();
    const float err = (logits - last).cwiseAbs().maxCoeff();
    QVERIFY2(scale > 0.1f, qPrintable(QString::number(scale))); // logits of a real size: the bound says something
    QVERIFY2(err <= 1e-2f * scale, qPrintable(QString("%1 of %2").arg(err).arg(scale)));
}

// gsrq generate on the bundled synthetic GGUF llama: a row per context and path with the step's
// time split into attention and append, the compressed cache a fraction of the FP16 one's bytes, each
// path's steps from the same state; bad settings named, exit 2.
void TestModel::generateReportsLatencyPerPath()
{
    const QString gguf = test::sourcePath("tests/data/tiny-llama.gguf"), text = test::sourcePath("README.md");
    const auto model = loadGgufModel(GgufFile::open(gguf.toStdString()));
    QTemporaryDir dir;
    const QString post = dir.filePath("post.safetensors"), pre = dir.filePath("pre.safetensors");
    writeCodebookFile(post.toStdString(), randomBooks(model.config(), true), DType::F32);
    writeCodebookFile(pre.toStdString(), randomBooks(model.config(), false), DType::F32);
    auto r = test::gsrqRun({"--no-db", "generate", gguf, "--text", text, "-c", post, "--context", "64,200", "--prefill",
                            "32", "--tokens", "3", "--threads", "1", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    const auto j = QJsonDocument::fromJson(r.out).object();
    const auto pts = j["points"].toArray();
    QCOMPARE(pts.size(), 4);
    QVERIFY(j["context_note"].toString().contains("32-token prefill"));
    // At each context both paths start from the same state and decode greedily; the FP16 path's
    // first token is the model's own argmax after the context (the compressed path's may differ).
    QCOMPARE(pts[0].toObject()["context"].toInt(), 64);
    QCOMPARE(pts[1].toObject()["context"].toInt(), 64);
    for (const auto& v : pts) {
        const auto p = v.toObject();
        QVERIFY(p["step_ms"].toDouble() > 0);
        QVERIFY(p["attention_ms"].toDouble() > 0 && p["attention_ms"].toDouble() < p["step_ms"].toDouble());
        QCOMPARE(p["tokens"].toArray().size(), 3);
    }
    // 2 layers × 200 tokens: FP16 keys and values 16 × 2 bytes each; codes 2 subspaces × 4 bytes each.
    const auto at = [&](int i) { return pts[i].toObject(); };
    QCOMPARE(at(2)["path"].toString(), QString("fp16"));
    QCOMPARE(at(3)["path"].toString(), QString("lookup"));
    QCOMPARE(at(2)["cache_bytes"].toDouble(), 2 * 200.0 * 16 * 2 * 2);
    QCOMPARE(at(3)["cache_bytes"].toDouble(), 2 * 200.0 * 2 * 4 * 2);
    // The lookup path needs keys after RoPE; a context shorter than the prefill is refused.
    r = test::gsrqRun({"--no-db", "generate", gguf, "--text", text, "-c", pre, "--context", "64", "--prefill", "32"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("keys after RoPE"), r.err.constData());
    r = test::gsrqRun({"--no-db", "generate", gguf, "--text", text, "-c", post, "--context", "16", "--prefill", "32"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--context 16"), r.err.constData());
    r = test::gsrqRun({"--no-db", "generate", gguf, "--text", text, "-c", post, "--paths", "paper"});
    QCOMPARE(r.code, 2);
    // The step's weights: the F32/F16 model has no blocks; its quantized twin's products read them,
    // and --weights fp32 the dequantized matrices.
    QCOMPARE(j["weights"].toString(), QString("FP32"));
    const QString q = test::sourcePath("tests/data/tiny-llama-q.gguf");
    for (const auto& [w, want] :
         {std::pair<QString, QString>{"blocks",
                                      "GGUF Q4_0, Q4_1, Q8_0 blocks for 15 of 15 matrices (FP32 activations)"},
          {"blocks-q8", "GGUF Q4_0, Q4_1, Q8_0 blocks for 15 of 15 matrices (8-bit activations"},
          {"fp32", "FP32"}}) {
        r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "-c", post, "--context", "64", "--prefill", "32",
                           "--tokens", "2", "--weights", w, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto o = QJsonDocument::fromJson(r.out).object();
        QVERIFY2(o["weights"].toString().startsWith(want), r.out.constData());
        // The prefill's time beside the steps: 32 tokens, in the top level and each point.
        QCOMPARE(o["prefill_tokens"].toInt(), 32);
        QVERIFY(o["prefill_seconds"].toDouble() > 0);
        QVERIFY(std::abs(o["prefill_tokens_per_second"].toDouble() * o["prefill_seconds"].toDouble() - 32) < 1e-6);
        QCOMPARE(o["points"].toArray()[0].toObject()["prefill_tokens"].toInt(), 32);
    }
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "-c", post, "--weights", "q4"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--weights"));
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "-c", post, "--prefill-weights", "q8"});
    QCOMPARE(r.code, 2);
    QVERIFY(r.err.contains("--prefill-weights 'q8'"));
    // By default the step and the prefill read the blocks with 8-bit activations (the fastest of each).
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "-c", post, "--context", "64", "--prefill", "32",
                       "--tokens", "1", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QVERIFY(QJsonDocument::fromJson(r.out).object()["weights"].toString().contains("8-bit activations"));
    QVERIFY(QJsonDocument::fromJson(r.out).object()["prefill_weights"].toString().contains("8-bit activations"));
    // The FP16 path alone runs without codebooks; the lookup path needs them.
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "--paths", "fp16", "--context", "64", "--prefill",
                       "32", "--tokens", "2", "--json"});
    QVERIFY2(r.code == 0, r.err.constData());
    QCOMPARE(QJsonDocument::fromJson(r.out).object()["points"].toArray().size(), 1);
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "--context", "64", "--prefill", "32"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--codebooks"), r.err.constData());
    // A prefill past the model's positions (the tiny model has 512): exit 2 naming --prefill.
    r = test::gsrqRun({"--no-db", "generate", q, "--text", text, "-c", post, "--context", "700", "--prefill", "600"});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("--prefill 600"), r.err.constData());
}

// The decode step's products from GGUF blocks (core/lm/quant_matvec.h): random blocks of each type
// the kernels read, their FP16 scales finite, of several magnitudes and signs, one subnormal; y from
// the blocks (the widest build and the portable one) against the double-precision product of the
// values dequantizeGguf() gives. Both are FP32 sums of 512 terms in other groupings: the error bound
// of such a sum is n·u = 512 · 6e-8 ≈ 3e-5 of the sum of its terms' magnitudes, so a wrong quant,
// scale, shift or order (errors of the size of the terms) fails.
void TestModel::quantMatVecEqualsTheDequantizedProduct()
{
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.f, 1.f);
    // Every type on a small matrix (one thread), and Q4_K on one of 1.2 MB (the rows split over the
    // threads, row order included).
    std::vector<std::tuple<GgmlType, std::int64_t, std::int64_t>> cases;
    for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
        cases.emplace_back(type, 37, 512);
    cases.emplace_back(GgmlType::Q4_K, 1024, 2048);
    for (const auto& [type, rows, cols] : cases) {
        std::vector<float> x(static_cast<std::size_t>(cols));
        for (auto& v : x)
            v = normal(rng);
        const test::RandomBlocks b = test::randomBlocks(type, rows, cols, rng);
        const QuantMatrix& q = b.matrix;
        QVERIFY(q);
        QVERIFY(b.dequantizedOk);
        const std::vector<float>& w = b.dequantized;
        std::vector<std::vector<float>> builds;
        for (const char* isa : {"portable", "avx2+fma", "avx512"}) {
            std::vector<float> y(static_cast<std::size_t>(rows));
            if (quantMatVecBuild(isa, q, x.data(), y.data()))
                builds.push_back(std::move(y));
        }
        // Every build this CPU runs (x86: AVX2 and AVX-512 where present).
        QCOMPARE(int(builds.size()), 1 + int(cpuFeatures().avx2) + int(cpuFeatures().avx512));
        std::vector<float> best(static_cast<std::size_t>(rows));
        quantMatVec(q, x.data(), best.data());
        for (std::int64_t r = 0; r < rows; ++r) {
            double ref = 0, mag = 0;
            for (std::int64_t c = 0; c < cols; ++c) {
                const double wx = double(w[std::size_t(r * cols + c)]) * x[std::size_t(c)];
                ref += wx;
                mag += std::abs(wx);
            }
            // The offsets (Q4_0's −8·d, Q4_1's m, Q4_K's dmin·m) enter as offset·Σx over a block: with
            // them the summed terms are up to about 4× Σ|w·x| for these quants.
            mag *= 4;
            for (const auto& build : builds)
                for (const float y : {build[std::size_t(r)], best[std::size_t(r)]})
                    QVERIFY2(std::abs(y - ref) <= 3.1e-5 * mag,
                             qPrintable(QString("%1 row %2: %3 against %4 (Σ|w·x| %5)")
                                            .arg(ggmlTypeName(type))
                                            .arg(r)
                                            .arg(y)
                                            .arg(ref)
                                            .arg(mag)));
        }
        // A row order (llama's q and k): output row i is the stored row order[i].
        QuantMatrix reversed = q;
        for (std::int64_t r = rows - 1; r >= 0; --r)
            reversed.rowOrder.push_back(std::int32_t(r));
        std::vector<float> back(static_cast<std::size_t>(rows));
        quantMatVec(reversed, x.data(), back.data());
        for (std::int64_t r = 0; r < rows; ++r)
            QCOMPARE(back[std::size_t(r)], best[std::size_t(rows - 1 - r)]);
    }
    GgufTensor other;
    other.dims = {512, 37};
    other.type = GgmlType::Q5_K; // dequantized, but not read as blocks
    QVERIFY(!quantMatrix(other));
    QVERIFY(!quantMatVecTakes(GgmlType::F16));
}

QTEST_APPLESS_MAIN(TestModel)
#include "tst_model.moc"
