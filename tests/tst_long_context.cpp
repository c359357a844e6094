// Long-context tasks: the chunked prefill against one forward call and token-by-token decoding, the
// task generator (determinism, layout, refusals), scoring and its interval, answering over each
// method's cache, and the job's resume. On the bundled stories260K model (llama2.c, plain prompts)
// and a byte-level vocabulary for ChatML layouts; `gsrq tasks` on a real GGUF model and against
// transformers: tests/python/test_real_model.py.

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/jobs/context_tasks_job.h"
#include "core/lm/context_eval.h"
#include "core/lm/context_tasks.h"
#include "core/lm/llama2c_model.h"
#include "core/lm/open_model.h"
#include "test_util.h"

#include <QtTest>

#include <cmath>
#include <random>

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

// A vocabulary of bytes (ids 0-255) and ChatML's two markers (256, 257), enough to lay out prompts
// whose token counts are the text's byte counts.
class ByteVocab final : public Tokenizer {
public:
    std::vector<std::int32_t> encode(const std::string& text) const override
    {
        std::vector<std::int32_t> out;
        for (std::size_t i = 0; i < text.size();) {
            if (text.compare(i, 12, "<|im_start|>") == 0) {
                out.push_back(256);
                i += 12;
            } else if (text.compare(i, 10, "<|im_end|>") == 0) {
                out.push_back(257);
                i += 10;
            } else {
                out.push_back(static_cast<unsigned char>(text[i++]));
            }
        }
        return out;
    }
    std::string piece(std::int32_t id) const override
    {
        return id == 256 ? "<|im_start|>" : id == 257 ? "<|im_end|>" : std::string(1, char(id));
    }
    int size() const override { return 258; }
    std::optional<std::int32_t> bos() const override { return std::nullopt; }
    std::optional<std::int32_t> eos() const override { return std::nullopt; }
    std::string name() const override { return "bytes"; }
};

std::string decodeAll(const std::vector<std::int32_t>& ids, const Tokenizer& v)
{
    std::string s;
    for (auto id : ids)
        s += v.piece(id);
    return s;
}

const char* kProse = "The first sentence is here. A second one follows it! Does a third ask? The fourth ends the "
                     "paragraph.\n\nA new paragraph starts. It has two sentences.";

double maxAbs(const Eigen::RowVectorXf& a, const Eigen::RowVectorXf& b)
{
    return double((a - b).cwiseAbs().maxCoeff());
}

} // namespace

class TestLongContext : public QObject {
    Q_OBJECT
private slots:
    void chunkedPrefillEqualsOneCallAndTokenByToken();
    void logitRows();
    void generatorIsDeterministic();
    void generatorLaysOutTheContext();
    void generatorRefusesBadInput();
    void chatTemplates();
    void scoringAndWilson();
    void answersAreValidUtf8();
    void methodsSeeTheCache();
    void jobResumesWhereItStopped();
    void methodNamesAndRefusals();
};

void TestLongContext::chunkedPrefillEqualsOneCallAndTokenByToken()
{
    // 2,200 tokens: past the model's trained 512 positions (allowed here; RoPE is defined at any
    // position), so the check covers a context of the length long-context tasks run at.
    auto model = loadLlama2cModel(modelPath());
    const int n = 2200;
    model.allowPositions(n);
    std::mt19937 rng(7);
    std::vector<std::int32_t> tokens(n);
    for (auto& t : tokens)
        t = std::int32_t(rng() % std::uint32_t(model.config().vocab));

    TransformerModel::Cache one, chunked, single;
    const Eigen::RowVectorXf a = model.forward(tokens, one, {}, TransformerModel::Logits::Last).row(0);
    const Eigen::RowVectorXf b = model.prefill(tokens, chunked, 300); // chunks of 300: the last one partial
    const Eigen::RowVectorXf c = model.prefill(tokens, single, 1);    // token by token, as decoding runs
    QCOMPARE(chunked.length, n);
    QCOMPARE(single.length, n);
    // The same float32 arithmetic over the same keys, summed in other orders (a chunk's GEMM against
    // one call's): logits of magnitude ~10 agree to ~1e-5 relative; 2e-3 absolute leaves room and
    // still fails for any misplaced position or mask (those move logits by whole units).
    const double scale = double(a.cwiseAbs().maxCoeff());
    QVERIFY(scale > 1);
    QVERIFY2(maxAbs(a, b) < 2e-3, qPrintable(QString::number(maxAbs(a, b))));
    QVERIFY2(maxAbs(a, c) < 2e-3, qPrintable(QString::number(maxAbs(a, c))));
    for (int l = 0; l < model.config().layers; ++l) {
        QVERIFY(float((one.keys[l] - chunked.keys[l]).cwiseAbs().maxCoeff()) < 1e-3f);
        QVERIFY(float((one.values[l] - single.values[l]).cwiseAbs().maxCoeff()) < 1e-3f);
    }
    // A chunked prefill that skipped the earlier chunks' keys (attending only within its chunk)
    // would differ: the check can fail.
    TransformerModel::Cache lastOnly;
    const Eigen::RowVectorXf d =
        model.forward(std::span(tokens).subspan(n - 100), lastOnly, {}, TransformerModel::Logits::Last).row(0);
    QVERIFY(maxAbs(a, d) > 0.1);
}

void TestLongContext::logitRows()
{
    const auto model = loadLlama2cModel(modelPath());
    const std::vector<std::int32_t> tokens{1, 50, 60, 70, 80};
    TransformerModel::Cache c1, c2, c3;
    const MatrixRF all = model.forward(tokens, c1);
    const MatrixRF last = model.forward(tokens, c2, {}, TransformerModel::Logits::Last);
    const MatrixRF none = model.forward(tokens, c3, {}, TransformerModel::Logits::None);
    QCOMPARE(all.rows(), Eigen::Index(5));
    QCOMPARE(last.rows(), Eigen::Index(1));
    QCOMPARE(none.rows(), Eigen::Index(0));
    // The same row; one row's product is summed in another order than five rows' (Eigen's GEMV
    // against its GEMM), so float rounding apart.
    QVERIFY((all.row(4) - last.row(0)).cwiseAbs().maxCoeff() < 1e-4f * all.row(4).cwiseAbs().maxCoeff());
    QCOMPARE(c3.length, 5);
}

void TestLongContext::generatorIsDeterministic()
{
    const ByteVocab v;
    const TaskGenerator g(v, promptFormatOf("", true), kProse, "prose");
    for (auto task : allContextTasks()) {
        const auto a = g.make(task, 2000, 50, 3, 11), b = g.make(task, 2000, 50, 3, 11);
        QCOMPARE(a.promptIds(), b.promptIds());
        QCOMPARE(a.expected, b.expected);
        // Another seed or sample draws other values.
        QVERIFY(g.make(task, 2000, 50, 3, 12).expected != a.expected);
        QVERIFY(g.make(task, 2000, 50, 4, 11).expected != a.expected);
    }
    // The draws are the standard's mt19937_64 with plain modulo: fixed across platforms. A change
    // to the generator changes this sample (its value and its prompt's ids, pinned here), and with it
    // every recorded run's prompts: gsrq tasks --resume refuses such a run (checkRecordedPrompts).
    const auto p = g.make(ContextTask::NiahMultiKey, 1000, 25, 2, 7);
    std::uint64_t hash = 1469598103934665603ULL; // FNV-1a over the prompt's ids
    for (auto id : p.promptIds())
        hash = (hash ^ std::uint64_t(std::uint32_t(id))) * 1099511628211ULL;
    QCOMPARE(p.expected, std::vector<std::string>{"4751952"});
    QCOMPARE(hash, std::uint64_t(13777477889827503217ULL));
}

void TestLongContext::generatorLaysOutTheContext()
{
    const ByteVocab v;
    PromptFormat chat = promptFormatOf("{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}", true);
    const TaskGenerator g(v, chat, kProse, "prose");
    for (auto task : allContextTasks())
        for (int context : {1000, 3000}) {
            const auto p = g.make(task, context, 50, 0, 5);
            // The prompt and its answer budget fill at most the context, and all but less than one
            // haystack sentence of it (the longest is under 60 bytes).
            QVERIFY2(p.promptTokens() + p.answerTokens <= context, contextTaskName(task));
            QVERIFY2(p.promptTokens() + p.answerTokens > context - 60, contextTaskName(task));
            const std::string text = decodeAll(p.contextIds, v);
            QVERIFY(text.rfind("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n", 0) == 0);
            const std::string q = decodeAll(p.questionIds, v);
            QVERIFY(q.find("<|im_end|>\n<|im_start|>assistant\n") != std::string::npos);
            for (const auto& e : p.expected)
                QVERIFY2(text.find(e) != std::string::npos, qPrintable(QString::fromStdString(e)));
            if (needsHaystack(task))
                QVERIFY(text.find("A new paragraph starts.") != std::string::npos);
            else
                QVERIFY(text.find("The grass is green.") != std::string::npos);
        }
    // The needle moves with the depth: right after the instruction at 0%, right before the
    // question at 100%.
    std::vector<std::size_t> at;
    for (int depth : {0, 50, 100}) {
        const auto p = g.make(ContextTask::NiahSingle, 3000, depth, 0, 5);
        const std::string text = decodeAll(p.contextIds, v);
        at.push_back(text.find("One of the special magic numbers"));
        QVERIFY(at.back() != std::string::npos);
        if (depth == 0)
            QVERIFY(text.find("afterwards. One of the special magic numbers") != std::string::npos);
        if (depth == 100)
            QVERIFY(text.substr(text.size() - 60).find(p.expected[0] + ".") != std::string::npos);
    }
    QVERIFY(at[0] < at[1] && at[1] < at[2]);
    // vt: the chain in order, each name once.
    const auto vt = g.make(ContextTask::VariableTracking, 3000, 20, 1, 5);
    const std::string text = decodeAll(vt.contextIds, v);
    QCOMPARE(vt.expected.size(), std::size_t(5));
    for (std::size_t i = 1; i < vt.expected.size(); ++i)
        QVERIFY(text.find("VAR " + vt.expected[i] + " = VAR " + vt.expected[i - 1]) != std::string::npos);
}

void TestLongContext::generatorRefusesBadInput()
{
    const ByteVocab v;
    const TaskGenerator g(v, promptFormatOf("", true), kProse, "prose.txt");
    QVERIFY(test::invalidInputMessage([&] { g.make(ContextTask::Passkey, 100, 0, 0, 0); }).find("--context 100") !=
            std::string::npos);
    QVERIFY(g.minimumContext(ContextTask::Passkey) > 100);
    for (auto task : allContextTasks()) // the minimum fits every sample, whatever its draws
        if (!needsHaystack(task))
            for (int sample = 0; sample < 50; ++sample)
                g.make(task, g.minimumContext(task), 50, sample, 3);
    QVERIFY(test::invalidInputMessage([&] { g.make(ContextTask::Passkey, 2000, 101, 0, 0); }).find("--depths") !=
            std::string::npos);
    const TaskGenerator none(v, promptFormatOf("", true), "", "");
    QVERIFY(test::invalidInputMessage([&] { none.make(ContextTask::NiahSingle, 2000, 0, 0, 0); }).find("--haystack") !=
            std::string::npos);
    none.make(ContextTask::VariableTracking, 2000, 0, 0, 0); // filler needs no text
    QVERIFY(test::invalidInputMessage([] { parseContextTasks("passkey,needle"); }).find("unknown task 'needle'") !=
            std::string::npos);
    QVERIFY(test::invalidInputMessage([] { parseContextTasks("vt,vt"); }).find("twice") != std::string::npos);
    QCOMPARE(parseContextTasks("all").size(), allContextTasks().size());
}

void TestLongContext::chatTemplates()
{
    // SmolLM2's template writes its default system turn with a line break; Qwen2.5's escapes it and
    // also writes a system turn from the conversation (an expression, not taken).
    const auto smol = promptFormatOf("{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                                     "You are a helpful AI assistant named SmolLM<|im_end|>\n' }}{% endif %}",
                                     true);
    QVERIFY(smol.chatml);
    QVERIFY(!smol.bos);
    QCOMPARE(smol.system, std::string("You are a helpful AI assistant named SmolLM"));
    const auto qwen = promptFormatOf(
        "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- "
        "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}",
        true);
    QCOMPARE(qwen.system, std::string("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    const auto plain = promptFormatOf("", true);
    QVERIFY(!plain.chatml);
    QVERIFY(plain.bos);
    QCOMPARE(plain.describe(), std::string("<BOS>{prompt}\n{question}\n{answer_prefix}"));
}

void TestLongContext::scoringAndWilson()
{
    QCOMPARE(scoreAnswer({"12345"}, " 12345."), 1.0);
    QCOMPARE(scoreAnswer({"12345"}, " 1234"), 0.0);
    QCOMPARE(scoreAnswer({"ABCDE", "FGHIJ"}, "abcde and xyz"), 0.5); // case ignored, as RULER's
    // Wilson's interval in closed form: 5 of 10 at z = 1.96 is 0.5 ± 0.2634 (centre 0.5);
    // 0 of 4 is [0, z²/(n + z²)] = [0, 0.4899].
    const auto half = wilsonInterval(5, 10);
    QCOMPARE(half.value, 0.5);
    QVERIFY(std::abs(half.lo - 0.2366) < 1e-4 && std::abs(half.hi - 0.7634) < 1e-4);
    const auto zero = wilsonInterval(0, 4);
    QCOMPARE(zero.lo, 0.0);
    QVERIFY(std::abs(zero.hi - 0.4899) < 1e-4);
    const auto all = wilsonInterval(4, 4);
    QVERIFY(std::abs(all.lo - 0.5101) < 1e-4);
    QCOMPARE(all.hi, 1.0);
    QVERIFY(std::isnan(wilsonInterval(0, 0).value));
}

void TestLongContext::answersAreValidUtf8()
{
    // An answer cut inside a character, or stray byte tokens of a broken cache, become U+FFFD: the
    // record stays valid JSON text. Valid text, four-byte characters included, is kept as it is.
    const std::string fffd = "\xEF\xBF\xBD";
    QCOMPARE(validUtf8("12345 caf\xC3\xA9 \xF0\x9F\x98\x80"), std::string("12345 caf\xC3\xA9 \xF0\x9F\x98\x80"));
    QCOMPARE(validUtf8("a\xE2\x82"), "a" + fffd + fffd);            // cut after two of three bytes
    QCOMPARE(validUtf8("\xC0\xAF"), fffd + fffd);                   // an overlong '/'
    QCOMPARE(validUtf8("\xED\xA0\x80x"), fffd + fffd + fffd + "x"); // a surrogate
    QCOMPARE(validUtf8("\x80"), fffd);
    nlohmann::ordered_json j = {{"answer", validUtf8("\xFF 1")}};
    QCOMPARE(nlohmann::ordered_json::parse(j.dump())["answer"].get<std::string>(), fffd + " 1");
}

void TestLongContext::methodsSeeTheCache()
{
    const auto opened = openModel(modelPath(), tokenizerPath());
    const auto& model = opened.model;
    const auto& vocab = opened.vocabulary();
    const TaskGenerator g(vocab, promptFormatOf("", true), "", "");
    const auto p = g.make(ContextTask::Passkey, 400, 50, 0, 3);
    // FP32 as computed; the same in the quantized mode (one call instead of chunks); a cache whose
    // values were zeroed. The deployed FP32 answer is what greedy decoding after one full forward
    // pass gives.
    const KvHook zeroValues = [](int, MatrixRF&, MatrixRF& v, const std::vector<std::int64_t>&) { v.setZero(); };
    const std::vector<CacheMethod> methods{{"fp32", {}}, {"fp16", fp16Hook()}, {"zeroed", zeroValues}};
    ContextEvalSettings s;
    s.chunk = 64;
    std::vector<TaskAnswer> deployed(3), quantized(3);
    answerWithMethods(model, vocab, p, methods, s, {}, [&](std::size_t i, const TaskAnswer& a) {
        deployed[i] = a;
        return true;
    });
    s.mode = PrefillMode::Quantized;
    answerWithMethods(model, vocab, p, methods, s, {}, [&](std::size_t i, const TaskAnswer& a) {
        quantized[i] = a;
        return true;
    });
    TransformerModel::Cache cache;
    model.forward(p.contextIds, cache);
    const auto reference = greedyAnswer(model, cache, p.questionIds, p.answerTokens, {});
    QCOMPARE(deployed[0].answerIds, reference);
    QCOMPARE(quantized[0].answerIds, reference);
    QCOMPARE(int(reference.size()), p.answerTokens); // no stop token given: the whole budget
    // FP16 moves the logits by ~1e-3: a greedy answer of this model keeps its tokens.
    QCOMPARE(deployed[1].answerIds, reference);
    // Zeroed values reach the answer: the method's cache is what the question attends over.
    QVERIFY(deployed[2].answerIds != reference);
    QVERIFY(quantized[2].answerIds != reference);
    // Only the wanted methods run; a false from done stops before the next.
    std::vector<std::string> ran;
    answerWithMethods(
        model, vocab, p, methods, s, [](std::size_t i) { return i != 1; },
        [&](std::size_t, const TaskAnswer& a) {
            ran.push_back(a.method);
            return false;
        });
    QCOMPARE(ran, std::vector<std::string>{"fp32"});
    // A prompt past the model's positions is refused, naming --context.
    const auto tooLong = g.make(ContextTask::Passkey, 2000, 50, 0, 3);
    QVERIFY(test::invalidInputMessage([&] {
                answerWithMethods(model, vocab, tooLong, methods, s, {}, {});
            }).find("--context 2000") != std::string::npos);
}

void TestLongContext::jobResumesWhereItStopped()
{
    const auto opened = openModel(modelPath(), tokenizerPath());
    ContextTasksSettings s;
    s.model = modelPath();
    s.tasks = {ContextTask::Passkey, ContextTask::VariableTracking};
    s.contexts = {448, 512};
    s.depths = {0, 100};
    s.samples = 2;
    s.methods = {"fp32", "fp16"};
    const TaskGenerator g(opened.vocabulary(), promptFormatOf("", true), "", "");
    validateContextTasks(s, opened, g);
    auto backend = makeCpuBackend();
    const auto methods = buildContextMethods(s, opened.model.config(), *backend);

    std::map<std::string, nlohmann::ordered_json> store;
    const RecordFn record = [&](const std::string& key, double, const nlohmann::ordered_json& r) {
        QVERIFY(!store.count(key)); // nothing is recorded twice
        store[key] = r;
    };
    const auto whole = runContextTasks(opened, g, s, methods, {}, {});
    QCOMPARE(whole.newAnswers, 2 * 2 * 2 * 2); // tasks × contexts × samples × methods
    QVERIFY(!whole.cancelled);

    // Stopped after five answers, then resumed from what was recorded: the same answers, none
    // run twice.
    int seen = 0;
    const auto first = runContextTasks(opened, g, s, methods, {}, record, [&](const ProgressEvent& e) {
        return e.what.find(": prefill") != std::string::npos || ++seen < 5;
    });
    QVERIFY(first.cancelled);
    QCOMPARE(first.newAnswers, 5);
    const auto second = runContextTasks(opened, g, s, methods, store, record);
    QVERIFY(!second.cancelled);
    QCOMPARE(second.resumedAnswers, 5);
    QCOMPARE(second.newAnswers, 11);
    QCOMPARE(second.answers.size(), whole.answers.size());
    std::map<std::string, nlohmann::ordered_json> a, b;
    for (const auto& r : whole.answers)
        a[r["key"].get<std::string>()] = r["answer_ids"];
    for (const auto& r : second.answers)
        b[r["key"].get<std::string>()] = r["answer_ids"];
    QVERIFY(a == b);
    QCOMPARE(second.prompts.size(), std::size_t(8));
    // The cells: every task × context × method, with its samples.
    const auto cells = contextCells(second.answers, s);
    QCOMPARE(cells.size(), std::size_t(8));
    for (const auto& c : cells)
        QCOMPARE(c.samples, 2);

    // The recorded prompts are the generator's; one that is not (another generator) is refused.
    checkRecordedPrompts(g, s, store);
    auto changed = store;
    for (auto& [key, rec] : changed)
        if (key.rfind("prompt/", 0) == 0) {
            rec["prompt_ids"][3] = 7;
            break;
        }
    QVERIFY(test::invalidInputMessage([&] { checkRecordedPrompts(g, s, changed); }).find("--resume") !=
            std::string::npos);
    // Settings that differ name what differs.
    const PromptFormat f = promptFormatOf("", true);
    auto other = s;
    other.contexts = {448, 640};
    const auto diff =
        settingsDifference(contextTasksSettingsJson(s, "m", "", f), contextTasksSettingsJson(other, "m", "", f));
    QVERIFY2(diff.find("context") == 0, diff.c_str());
    QVERIFY(
        settingsDifference(contextTasksSettingsJson(s, "m", "", f), contextTasksSettingsJson(s, "m", "", f)).empty());
    // A run recorded before the products' weights were a setting ran them in FP32: it resumes with
    // the default and is refused with 8-bit activations.
    auto legacy = contextTasksSettingsJson(s, "m", "", f);
    QCOMPARE(legacy["weights"], nlohmann::ordered_json("fp32"));
    legacy.erase("weights");
    QVERIFY(settingsDifference(legacy, contextTasksSettingsJson(s, "m", "", f)).empty());
    auto q8 = s;
    q8.weights = TransformerModel::StepWeights::BlocksQ8;
    const auto wdiff = settingsDifference(legacy, contextTasksSettingsJson(q8, "m", "", f));
    QVERIFY2(wdiff.find("weights") == 0, wdiff.c_str());
    QVERIFY(settingsDifference(contextTasksSettingsJson(s, "m", "", f), contextTasksSettingsJson(q8, "m", "", f))
                .find("weights: \"fp32\" in that run, \"blocks-q8\" now") == 0);
}

void TestLongContext::methodNamesAndRefusals()
{
    ContextTasksSettings s;
    resolveMethodNames("fp16,kivi-1", {}, s);
    QCOMPARE(s.methods, (std::vector<std::string>{"fp16", "kivi-1"}));
    QVERIFY(test::invalidInputMessage([&] { resolveMethodNames("fp16,gsrq@1", {}, s); }).find("-c gsrq@1=FILE") !=
            std::string::npos);
    QVERIFY(test::invalidInputMessage([&] { resolveMethodNames("fp16,int4", {}, s); }).find("unknown method 'int4'") !=
            std::string::npos);
    QVERIFY(test::invalidInputMessage([&] {
                resolveMethodNames("fp16", {"gsrq@1=/no/such.safetensors"}, s);
            }).find("does not exist") != std::string::npos);
    QVERIFY(test::invalidInputMessage([&] { resolveMethodNames("fp16,fp16", {}, s); }).find("twice") !=
            std::string::npos);

    const auto opened = openModel(modelPath(), tokenizerPath());
    const TaskGenerator g(opened.vocabulary(), promptFormatOf("", true), "", "");
    ContextTasksSettings v;
    v.tasks = {ContextTask::Passkey};
    v.contexts = {256};
    v.depths = {50};
    v.methods = {"fp16"};
    validateContextTasks(v, opened, g);
    v.contexts = {4096}; // stories260K was trained for 512 positions
    const auto past = test::invalidInputMessage([&] { validateContextTasks(v, opened, g); });
    QVERIFY2(past.find("--context 4096") != std::string::npos && past.find("512") != std::string::npos, past.c_str());
    v.beyondTrained = true;
    validateContextTasks(v, opened, g);
    v.contexts = {256};
    v.depths = {-5};
    QVERIFY(test::invalidInputMessage([&] { validateContextTasks(v, opened, g); }).find("--depths") !=
            std::string::npos);
    v.depths = {50, 50};
    QVERIFY(test::invalidInputMessage([&] {
                validateContextTasks(v, opened, g);
            }).find("--depths: 50 is listed twice") != std::string::npos);
    v.depths = {50};
    v.samples = 0;
    QVERIFY(test::invalidInputMessage([&] { validateContextTasks(v, opened, g); }).find("--samples") !=
            std::string::npos);
    v.samples = 1;
    v.tasks = {ContextTask::NiahSingle};
    QVERIFY(test::invalidInputMessage([&] { validateContextTasks(v, opened, g); }).find("--haystack") !=
            std::string::npos);
}

QTEST_GUILESS_MAIN(TestLongContext)
#include "tst_long_context.moc"
