// gsrq plan's core (core/jobs/plan.h) without a process or a cluster: balancing, plan.json, the
// option checks, the sbatch scripts, layer states, the merge checks (both settings definitions) and
// the import of the tasks' stores. tst_train_cli and tests/slurm run the same code through gsrq.

#include "core/base/error.h"
#include "core/jobs/plan.h"
#include "core/jobs/run_recorder.h"
#include "test_util.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <numeric>

using namespace gsrq;
namespace fs = std::filesystem;

namespace {

// The message of the Error `f` throws ("" when it throws none).
template <class F> std::string errorOf(F&& f)
{
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

// A codebooks file as gsrq train writes it for `tensors` (D=2, R=1, K=2 over 4 features), with the
// training settings `settings` (JSON text) and `seed`.
CodebookFile layerFile(const std::vector<std::string>& tensors, int seed, const std::string& settings)
{
    CodebookFile f;
    f.metadata = {{"dim", "2"},
                  {"stages", "1"},
                  {"k", "2"},
                  {"method", "gskm"},
                  {"weights", "none"},
                  {"tau", "1"},
                  {"beam", "1"},
                  {"key_rope", "pre"},
                  {"iterations", "5"},
                  {"seed", std::to_string(seed)},
                  {"source_sha256", "ab"},
                  {"source", "/data/dump.safetensors"},
                  {"settings", settings}};
    for (const auto& t : tensors) {
        CodebookEntry e;
        e.tensor = t;
        e.codebooks.allocate(2, 1, 2, 2);
        std::iota(e.codebooks.data.begin(), e.codebooks.data.end(), float(seed));
        f.entries.push_back(std::move(e));
    }
    return f;
}

Plan twoTaskPlan(const std::string& dir)
{
    Plan p;
    p.id = "demo-abc123";
    p.dir = dir;
    p.dump = "/data/my dump.safetensors";
    p.store = "/home/u/runs.db";
    p.gsrq = "/usr/bin/gsrq";
    p.createdAt = "2026-01-01T00:00:00.000Z";
    p.toolVersion = "0.1.0";
    p.trainArgs = {"--bpa", "1", "--weights", "grad-log"};
    p.tensorsByLayer = {{0, {"layers.0.key", "layers.0.value"}}, {1, {"layers.1.key", "layers.1.value"}}};
    p.tasks = {{0, {0}, 10, 40}, {1, {1}, 10, 40}};
    return p;
}

} // namespace

class TestPlan : public QObject {
    Q_OBJECT
private slots:
    void balanceSpreadsEqualLayersRoundRobin();
    void balanceIsLongestFirst();
    void balanceKeepsEveryLayerOnce();
    void planJsonRoundTripsAndRefusesOthers();
    void trainOptionsAreChecked();
    void slurmOptionsAreChecked();
    void shellQuoting();
    void scriptsSayWhatTheyRun();
    void makePlanNeedsLayerNumbers();
    void layerStatesFollowTheFiles();
    void mergeNamesMissingLayersAndStrayFiles();
    void mergeChecksEachLayersTensors();
    void mergeRefusesOtherSettings();
    void mergeJoinsAndRecordsThePlan();
    void codebooksMergeComparesCodebookSettingsOnly();
    void importTakesTheTasksRunsOnce();
};

void TestPlan::balanceSpreadsEqualLayersRoundRobin()
{
    std::map<int, LayerWork> w;
    for (int l = 0; l < 5; ++l)
        w[l] = {100, 10};
    const auto t = balanceLayers(w, 2);
    QCOMPARE(t.size(), std::size_t(2));
    QCOMPARE(t[0].layers, (std::vector<int>{0, 2, 4})); // ties: the lower layer first, to the lower task
    QCOMPARE(t[1].layers, (std::vector<int>{1, 3}));
    QCOMPARE(t[0].rows, std::int64_t(30));
    QCOMPARE(t[1].values, std::int64_t(200));
    // More jobs than layers: one layer a task, no empty task.
    QCOMPARE(balanceLayers(w, 9).size(), std::size_t(5));
    QVERIFY(balanceLayers({}, 3).empty());
    QVERIFY(errorOf([&] { balanceLayers(w, 0); }).find("--jobs 0") != std::string::npos);
}

void TestPlan::balanceIsLongestFirst()
{
    // 10, 9, 8, 7, 6 over two tasks, largest first to the lighter task: {10, 7, 6} = 23 and
    // {9, 8} = 17. (The best split, 20/20, is not what LPT finds: Graham's bound is 4/3 of it.)
    std::map<int, LayerWork> w{{0, {10, 1}}, {1, {9, 1}}, {2, {8, 1}}, {3, {7, 1}}, {4, {6, 1}}};
    const auto t = balanceLayers(w, 2);
    QCOMPARE(t[0].layers, (std::vector<int>{0, 3, 4}));
    QCOMPARE(t[0].values, std::int64_t(23));
    QCOMPARE(t[1].layers, (std::vector<int>{1, 2}));
    QCOMPARE(t[1].values, std::int64_t(17));
    QVERIFY(double(std::max(t[0].values, t[1].values)) <= 4.0 / 3.0 * 20);
}

void TestPlan::balanceKeepsEveryLayerOnce()
{
    std::map<int, LayerWork> w;
    std::int64_t total = 0;
    for (int l = 0; l < 40; ++l) {
        w[l] = {std::int64_t(1000 + 37 * ((l * 7) % 11)), 3};
        total += w[l].values;
    }
    const auto tasks = balanceLayers(w, 7);
    std::vector<int> seen;
    std::int64_t sum = 0;
    for (const auto& t : tasks) {
        seen.insert(seen.end(), t.layers.begin(), t.layers.end());
        QVERIFY(std::is_sorted(t.layers.begin(), t.layers.end()));
        sum += t.values;
    }
    std::sort(seen.begin(), seen.end());
    QCOMPARE(seen.size(), std::size_t(40));
    QVERIFY(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    QCOMPARE(sum, total);
}

void TestPlan::planJsonRoundTripsAndRefusesOthers()
{
    const Plan p = twoTaskPlan("/scratch/demo");
    const Plan q = planFromJson(nlohmann::json::parse(planToJson(p).dump()), "/elsewhere/demo", "plan.json");
    QCOMPARE(q.id, p.id);
    QCOMPARE(q.dir, std::string("/elsewhere/demo")); // a moved plan reads its files where it is now
    QCOMPARE(q.trainArgs, p.trainArgs);
    QCOMPARE(q.tensorsByLayer, p.tensorsByLayer);
    QCOMPARE(q.tasks.size(), std::size_t(2));
    QCOMPARE(q.tasks[1].layers, std::vector<int>{1});
    QCOMPARE(q.toolVersion, p.toolVersion);
    QCOMPARE(q.layerFile(1), std::string("/elsewhere/demo/codebooks/layer-1.safetensors"));
    QCOMPARE(q.storeFile(0), std::string("/elsewhere/demo/stores/task-0.sqlite"));

    auto j = nlohmann::json::parse(planToJson(p).dump());
    j["format_version"] = kPlanFormatVersion + 1;
    QVERIFY(errorOf([&] { planFromJson(j, "/d", "/d/plan.json"); }).find("newer than this gsrq reads") !=
            std::string::npos);
    j = nlohmann::json::parse(planToJson(p).dump());
    j["format"] = "something-else";
    QVERIFY(errorOf([&] { planFromJson(j, "/d", "/d/plan.json"); }).find("not a plan written by gsrq plan") !=
            std::string::npos);
    j = nlohmann::json::parse(planToJson(p).dump());
    j.erase("tasks");
    QVERIFY(errorOf([&] { planFromJson(j, "/d", "/d/plan.json"); }).find("/d/plan.json") != std::string::npos);
    j = nlohmann::json::parse(planToJson(p).dump());
    j["tensors_by_layer"]["x"] = {"layers.x.key"};
    QVERIFY(errorOf([&] { planFromJson(j, "/d", "/d/plan.json"); }).find("/d/plan.json") != std::string::npos);
    QVERIFY(errorOf([] { readPlan("/nonexistent/plan-dir"); }).find("no plan here") != std::string::npos);
}

void TestPlan::trainOptionsAreChecked()
{
    for (const char* reserved : {"--out", "-o", "--layers", "--force", "--json", "--db", "--no-db", "--group"}) {
        QVERIFY2(reservedTrainOption(reserved), reserved);
        QVERIFY2(reservedTrainOption(std::string(reserved) + "=x"), reserved);
        QVERIFY(errorOf([&] {
                    checkTrainArgs({"--bpa", "1", reserved, "x"});
                }).find("is set by the plan itself") != std::string::npos);
    }
    QVERIFY(!reservedTrainOption("--output-dir")); // a prefix is not the option
    QVERIFY(errorOf([] {
                checkTrainArgs({"--weights", "grad-log"});
            }).find("give the training's rate") != std::string::npos);
    QVERIFY(errorOf([] {
                checkTrainArgs({"--bpa", "1", "--tensors", "layers.*.key"});
            }).find("give --tensors to gsrq plan") != std::string::npos);
    QVERIFY(errorOf([] { checkTrainArgs({"--bpa=1"}); }).empty());
    QVERIFY(errorOf([] { checkTrainArgs({"-d", "8", "--stages", "2", "--k", "256"}); }).empty());
    QVERIFY(errorOf([] { checkTrainArgs({"--method", "cq", "--channels", "4", "--bits", "8"}); }).empty());
    QCOMPARE(dtypeOf({"--bpa", "1"}), std::string("f32"));
    QCOMPARE(dtypeOf({"--dtype", "f16"}), std::string("f16"));
    QCOMPARE(dtypeOf({"--dtype=f16", "--bpa", "1"}), std::string("f16"));
}

void TestPlan::slurmOptionsAreChecked()
{
    QVERIFY(errorOf([] { checkSlurmOptions({"gpu", "proj_1", "2:00:00", 8}); }).empty());
    QVERIFY(errorOf([] {
                checkSlurmOptions({"gpu\n#SBATCH --x", "", "", 0});
            }).find("--partition") != std::string::npos);
    QVERIFY(errorOf([] { checkSlurmOptions({"", "a b", "", 0}); }).find("--account") != std::string::npos);
    QVERIFY(errorOf([] { checkSlurmOptions({"", "", "1#0", 0}); }).find("--time") != std::string::npos);
    QVERIFY(errorOf([] { checkSlurmOptions({"", "", "", -1}); }).find("--cpus-per-task") != std::string::npos);
}

void TestPlan::shellQuoting()
{
    QCOMPARE(shellQuote("layers.0.key"), std::string("layers.0.key"));
    QCOMPARE(shellQuote(""), std::string("''"));
    QCOMPARE(shellQuote("my dump"), std::string("'my dump'"));
    QCOMPARE(shellQuote("it's"), std::string("'it'\\''s'"));
    QCOMPARE(shellQuote("$HOME"), std::string("'$HOME'"));
}

void TestPlan::scriptsSayWhatTheyRun()
{
    Plan p = twoTaskPlan("/scratch/demo");
    const std::string a = arrayScript(p, {"gpu", "", "4:00:00", 8});
    QVERIFY(a.find("#SBATCH --array=0-1\n") != std::string::npos);
    QVERIFY(a.find("#SBATCH --gres=gpu:1\n") != std::string::npos);
    QVERIFY(a.find("#SBATCH --cpus-per-task=8\n") != std::string::npos);
    QVERIFY(a.find("#SBATCH --partition=gpu\n") != std::string::npos);
    QVERIFY(a.find("#SBATCH --time=4:00:00\n") != std::string::npos);
    QVERIFY(a.find("--account") == std::string::npos); // not given, not written
    QVERIFY(a.find("dump='/data/my dump.safetensors'") != std::string::npos);
    QVERIFY(a.find(" --bpa 1 --weights grad-log --out") != std::string::npos);
    QVERIFY(a.find("--group demo-abc123") != std::string::npos);
    QVERIFY(a.find("trap stop TERM USR1") != std::string::npos);
    p.gpusPerJob = 0;
    QVERIFY(arrayScript(p, {}).find("--gres") == std::string::npos);
    QVERIFY(arrayScript(p, {}).find("--cpus-per-task") == std::string::npos);

    const std::string m = mergeScript(p, {"gpu", "acct", "1:00:00", 0});
    QVERIFY(m.find("--db /home/u/runs.db plan merge /scratch/demo") != std::string::npos);
    QVERIFY(m.find("#SBATCH --account=acct\n") != std::string::npos);
    QVERIFY(m.find("--time") == std::string::npos); // the merge is short: no task time limit
    p.store.clear();
    QVERIFY(mergeScript(p, {}).find("--no-db plan merge") != std::string::npos);
}

void TestPlan::makePlanNeedsLayerNumbers()
{
    KvTensor a, b;
    a.view.name = "layers.3.key";
    a.view.shape = {100, 2, 4};
    a.layer = 3;
    b.view.name = "extra";
    b.view.shape = {10, 8};
    b.layer = -1;
    PlanRequest req;
    req.dir = "/p";
    req.id = "p-1";
    req.jobs = 4;
    req.trainArgs = {"--bpa", "1", "--dtype", "f16"};
    const Plan p = makePlan({&a}, req);
    QCOMPARE(p.tasks.size(), std::size_t(1));
    QCOMPARE(p.tasks[0].values, std::int64_t(800));
    QCOMPARE(p.dtype, std::string("f16"));
    QVERIFY(!p.toolVersion.empty());
    QVERIFY(errorOf([&] { makePlan({&a, &b}, req); }).find("has no layer number") != std::string::npos);
    req.gpusPerJob = 65;
    QVERIFY(errorOf([&] { makePlan({&a}, req); }).find("--gpus-per-job") != std::string::npos);
}

void TestPlan::layerStatesFollowTheFiles()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    QVERIFY(fs::exists(fs::path(p.dir) / "plan.json"));
    QVERIFY(fs::exists(fs::path(p.dir) / "array.sbatch"));
    QCOMPARE(readPlan(p.dir).id, p.id);
    auto states = layerStates(p);
    QCOMPARE(states.size(), std::size_t(2));
    QVERIFY(!states[0].present && !states[1].present);
    writeCodebookFile(p.layerFile(1), layerFile({"layers.1.key", "layers.1.value"}, 1, "{}"), DType::F32);
    states = layerStates(p);
    QVERIFY(!states[0].present && states[1].present);
    QCOMPARE(states[1].task, 1);
    QCOMPARE(p.taskOf(1), 1);
    QCOMPARE(p.taskOf(7), -1);
    // Codebooks of an earlier plan in codebooks/ would pass for this one's: a new plan refuses them.
    QVERIFY(errorOf([&] { writePlan(p, {}); }).find("holds codebooks of an earlier plan") != std::string::npos);
}

void TestPlan::mergeNamesMissingLayersAndStrayFiles()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    writeCodebookFile(p.layerFile(0), layerFile({"layers.0.key", "layers.0.value"}, 1, "{}"), DType::F32);
    const auto missing = errorOf([&] { mergePlan(p); });
    QVERIFY2(missing.find("no codebooks yet for layers 1 (tasks 1;") != std::string::npos, missing.c_str());
    writeCodebookFile(p.layerFile(1), layerFile({"layers.1.key", "layers.1.value"}, 1, "{}"), DType::F32);
    // A killed task's temporary is passed over; anything else is refused.
    std::ofstream(fs::path(p.dir) / "codebooks" / "layer-1.safetensors.tmp-AbC123") << "partial";
    QVERIFY(errorOf([&] { mergePlan(p); }).empty());
    std::ofstream(fs::path(p.dir) / "codebooks" / "layer-1.safetensors.bak") << "old";
    QVERIFY(errorOf([&] { mergePlan(p); }).find("layer-1.safetensors.bak is not one of the plan's layers") !=
            std::string::npos);
}

void TestPlan::mergeChecksEachLayersTensors()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    writeCodebookFile(p.layerFile(0), layerFile({"layers.0.key", "layers.0.value"}, 1, "{}"), DType::F32);
    writeCodebookFile(p.layerFile(1), layerFile({"layers.1.key", "layers.0.value"}, 1, "{}"), DType::F32);
    const auto e = errorOf([&] { mergePlan(p); });
    QVERIFY2(e.find("does not hold layer 1's tensors as planned: missing layers.1.value; unexpected "
                    "layers.0.value;") != std::string::npos,
             e.c_str());
}

void TestPlan::mergeRefusesOtherSettings()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    const std::string settings = R"({"holdout":0.1,"layers":"0"})";
    writeCodebookFile(p.layerFile(0), layerFile({"layers.0.key", "layers.0.value"}, 1, settings), DType::F32);
    // Another seed: one training split by layer has one seed.
    writeCodebookFile(p.layerFile(1),
                      layerFile({"layers.1.key", "layers.1.value"}, 6, R"({"holdout":0.1,"layers":"1"})"), DType::F32);
    auto e = errorOf([&] { mergePlan(p); });
    QVERIFY2(e.find("layer-1.safetensors was trained with seed = 6 but") != std::string::npos, e.c_str());
    // A setting inside the settings JSON; the layer list there differs by design and is not compared.
    writeCodebookFile(p.layerFile(1),
                      layerFile({"layers.1.key", "layers.1.value"}, 1, R"({"holdout":0.2,"layers":"1"})"), DType::F32);
    e = errorOf([&] { mergePlan(p); });
    QVERIFY2(e.find("settings.holdout = 0.2") != std::string::npos, e.c_str());
    // The source path may differ (a dump copied elsewhere); the layers' own lists are not compared.
    auto f = layerFile({"layers.1.key", "layers.1.value"}, 1, R"({"holdout":0.1,"layers":"1"})");
    f.metadata["source"] = "/other/copy.safetensors";
    writeCodebookFile(p.layerFile(1), f, DType::F32);
    QVERIFY(errorOf([&] { mergePlan(p); }).empty());
}

void TestPlan::mergeJoinsAndRecordsThePlan()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    writeCodebookFile(p.layerFile(0), layerFile({"layers.0.key", "layers.0.value"}, 1, R"({"layers":"0"})"),
                      DType::F32);
    writeCodebookFile(p.layerFile(1), layerFile({"layers.1.key", "layers.1.value"}, 1, R"({"layers":"1"})"),
                      DType::F32);
    const CodebookFile merged = mergePlan(p);
    QCOMPARE(merged.entries.size(), std::size_t(4));
    QCOMPARE(merged.metadata.at("plan"), p.id);
    QCOMPARE(nlohmann::json::parse(merged.metadata.at("settings"))["layers"].get<std::string>(), std::string("0,1"));
    const CodebookFile back = readCodebookFile(mergedPlanFile(p));
    QCOMPARE(back.entries.size(), std::size_t(4));
    QVERIFY(back.find("layers.1.value") != nullptr);
    QCOMPARE(back.find("layers.1.value")->codebooks.data, merged.find("layers.1.value")->codebooks.data);
}

void TestPlan::codebooksMergeComparesCodebookSettingsOnly()
{
    // gsrq codebooks merge joins files trained by hand: another seed is fine, another K is not.
    const auto a = layerFile({"layers.0.key"}, 1, "{}");
    auto b = layerFile({"layers.1.key"}, 7, R"({"holdout":0.3})");
    QVERIFY(comparableSettings(a, SettingsMatch::Codebooks) == comparableSettings(b, SettingsMatch::Codebooks));
    QVERIFY(comparableSettings(a, SettingsMatch::Training) != comparableSettings(b, SettingsMatch::Training));
    QCOMPARE(comparableSettings(b, SettingsMatch::Training).at("settings.holdout"), std::string("0.3"));
    QCOMPARE(mergeCodebookFiles({{"a", a}, {"b", b}}, SettingsMatch::Codebooks, "codebooks merge").entries.size(),
             std::size_t(2));
    b.metadata["k"] = "4";
    QVERIFY(errorOf([&] {
                mergeCodebookFiles({{"a", a}, {"b", b}}, SettingsMatch::Codebooks, "codebooks merge");
            }).find("codebooks merge: b was trained with k = 4 but a with 2") != std::string::npos);
    const auto twice = layerFile({"layers.0.key"}, 1, "{}");
    QVERIFY(errorOf([&] {
                mergeCodebookFiles({{"a", a}, {"c", twice}}, SettingsMatch::Codebooks, "x");
            }).find("tensor 'layers.0.key' is in more than one file (again in c)") != std::string::npos);
    QCOMPARE(mergeCodebookFiles({{"a", a}}, SettingsMatch::Training, "plan merge").entries.size(), std::size_t(1));
}

void TestPlan::importTakesTheTasksRunsOnce()
{
    QTemporaryDir tmp;
    const Plan p = twoTaskPlan(tmp.path().toStdString());
    writePlan(p, {});
    {
        RunStore task0(p.storeFile(0));
        RunInfo info;
        info.kind = "train";
        info.group = p.id;
        RunRecorder done(task0, info);
        done.finish(RunStatus::Done);
        RunRecorder still(task0, info); // a run whose process records on: not imported
        RunStore user(test::pathIn(tmp, "user.db"));
        const PlanImport first = importPlanRuns(p, user); // task 1 never wrote a store: skipped
        QCOMPARE(first.added, 1);
        QCOMPARE(first.stillRunning.size(), std::size_t(1));
        QVERIFY(first.stillRunning[0].find("task-0.sqlite") != std::string::npos);
        still.finish(RunStatus::Done);
        const PlanImport second = importPlanRuns(p, user);
        QCOMPARE(second.added, 1);
        QCOMPARE(second.alreadyPresent, 1);
        QCOMPARE(user.listRuns({"train", RunStatus::Done, p.id, 0}).size(), std::size_t(2));
    }
}

QTEST_GUILESS_MAIN(TestPlan)
#include "tst_plan.moc"
