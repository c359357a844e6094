// gsrq runs: browse, export, annotate, compare and delete the recorded runs.

#include "cli_common.h"
#include "commands.h"
#include "core/base/error.h"
#include "core/io/safetensors.h"
#include "core/jobs/method_table.h"
#include "core/jobs/result_json.h"
#include "core/jobs/run_records.h"
#include "recording.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace gsrq::cli {

namespace {

std::unique_ptr<RunStore> requireStore()
{
    if (globalOptions().noDb)
        throwInvalid("--no-db: the runs commands need a run store");
    return openStore();
}

nlohmann::ordered_json runJson(const RunInfo& r)
{
    auto parse = [](const std::string& s) {
        auto j = nlohmann::ordered_json::parse(s, nullptr, false);
        return j.is_discarded() ? nlohmann::ordered_json(s) : j;
    };
    return {{"id", r.id},
            {"kind", r.kind},
            {"status", runStatusName(r.status)},
            {"started_at", r.startedAt},
            {"finished_at", r.finishedAt},
            {"tool_version", r.toolVersion},
            {"host", r.host},
            {"pid", r.pid},
            {"backend", r.backend},
            {"device", r.device},
            {"dump_path", r.dumpPath},
            {"dump_sha256", r.dumpSha256},
            {"command", r.command},
            {"settings", parse(r.settingsJson)},
            {"summary", parse(r.summaryJson)},
            {"error", r.error},
            {"uid", r.uid},
            {"group", r.group},
            {"origin", r.origin}};
}

std::string csvField(const std::string& s)
{
    if (s.find_first_of(",\"\n") == std::string::npos)
        return s;
    std::string q = "\"";
    for (char c : s)
        q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

void writeText(const std::filesystem::path& p, const std::string& text)
{
    writeFileAtomic(p.string(), {text});
}

std::string safeName(const std::string& s)
{
    std::string out;
    for (char c : s)
        out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    return out;
}

std::string metricKey(const MetricRow& m)
{
    return cat(m.scope, " ", m.tensor, m.method.empty() ? "" : " " + m.method,
               m.stage >= 0 ? cat(" stage ", m.stage + 1) : std::string(),
               m.subspace >= 0 ? cat(" block ", m.subspace) : std::string(), " ", m.name);
}

std::string fmt(const char* format, double v)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

// Within one run, every two methods at the same bits (GSRQ against KM-RQ at 1 BPA, say): the gap in
// points of Δ% with its paired 95% interval, where the run recorded its sequences.
void printGaps(const RunPerplexities& p, std::int64_t id, int seeds)
{
    if (p.fp32SequenceNll.empty() || p.sequenceTokens.size() != p.fp32SequenceNll.size())
        return;
    bool header = false;
    for (std::size_t i = 0; i < p.points.size(); ++i)
        for (std::size_t j = i + 1; j < p.points.size(); ++j) {
            const auto &a = p.points[i], &b = p.points[j];
            if (a.bits != b.bits || a.sequenceNll.size() != p.sequenceTokens.size() ||
                b.sequenceNll.size() != p.sequenceTokens.size())
                continue;
            if (!header) {
                std::printf("\nrun %lld, methods at the same bits: the gap in points of Δ%% with its 95%% interval "
                            "(paired over the same sequences; an interval without 0 is not the sequences' noise)\n",
                            static_cast<long long>(id));
                if (seeds > 1)
                    std::printf("  (its rows are the means of %d training seeds: these intervals cover the sequences, "
                                "not the seeds; tools/claims.py gives intervals over both)\n",
                                seeds);
                header = true;
            }
            const double gap = deltaPercent(a.sequenceNll, p.fp32SequenceNll, p.sequenceTokens) -
                               deltaPercent(b.sequenceNll, p.fp32SequenceNll, p.sequenceTokens);
            const Interval in = gapInterval(a.sequenceNll, b.sequenceNll, p.fp32SequenceNll, p.sequenceTokens);
            std::printf("  %s − %s at %.4g bits: %+.2f [%+.2f, %+.2f]\n", a.label.c_str(), b.label.c_str(), a.bits, gap,
                        in.lo, in.hi);
        }
}

// The perplexity rows of two runs side by side, as the Runs page compares them: FP32, then each
// evaluated cache (a codebooks file or a comparison's method) with its bits, effective bits, and
// each run's perplexity with its Δ against that run's own FP32. Nothing when neither run has any.
void printPerplexities(RunStore& store, std::int64_t idA, std::int64_t idB)
{
    const RunPerplexities pa = runPerplexities(store.metrics(idA), store.series(idA));
    const RunPerplexities pb = runPerplexities(store.metrics(idB), store.series(idB));
    if (!pa.fp32 && !pb.fp32 && pa.points.empty() && pb.points.empty())
        return;
    struct Row {
        std::optional<double> bitsA, bitsB, effA, effB; // each run's own (they differ for other settings)
        std::optional<double> a, b;
        Interval ia, ib; // Δ% against each run's FP32, 95%
    };
    std::vector<std::string> order;
    std::map<std::string, Row> rows;
    auto add = [&](const RunPerplexities& p, bool first) {
        for (const auto& pt : p.points) {
            if (!rows.count(pt.label))
                order.push_back(pt.label);
            Row& r = rows[pt.label];
            (first ? r.bitsA : r.bitsB) = pt.bits;
            (first ? r.effA : r.effB) = pt.effectiveBits;
            (first ? r.a : r.b) = pt.perplexity;
            (first ? r.ia : r.ib) = pt.deltaInterval;
        }
    };
    add(pa, true);
    add(pb, false);
    auto cell = [](std::optional<double> v, std::optional<double> fp32, const Interval& interval) {
        if (!v)
            return std::string("-");
        if (!fp32 || *fp32 <= 0)
            return fmt("%.4f", *v);
        return cat(fmt("%.4f", *v), " (", fmt("%+.2f", 100 * (*v - *fp32) / *fp32), "%",
                   interval.valid() ? cat(" [", fmt("%+.2f", interval.lo), ", ", fmt("%+.2f", interval.hi), "]") : "",
                   ")");
    };
    std::printf("\nperplexity (Δ against each run's FP32 with its 95%% interval, a paired bootstrap over the "
                "sequences; bits a/b where the runs differ):\n%-40s %7s %11s %38s %38s\n",
                "method", "bits", "eff. bits", cat("run ", idA).c_str(), cat("run ", idB).c_str());
    std::printf("%-40s %7s %11s %38s %38s\n", "fp32", "32", "32", cell(pa.fp32, std::nullopt, {}).c_str(),
                cell(pb.fp32, std::nullopt, {}).c_str());
    for (const auto& label : order) {
        const Row& r = rows[label];
        // One figure where both runs agree (or one has the row), else run A's / run B's.
        auto both = [](std::optional<double> x, std::optional<double> y) {
            if (x && y && fmt("%.4g", *x) != fmt("%.4g", *y))
                return fmt("%.4g", *x) + "/" + fmt("%.4g", *y);
            return fmt("%.4g", x ? *x : *y);
        };
        std::printf("%-40s %7s %11s %38s %38s\n", label.c_str(), both(r.bitsA, r.bitsB).c_str(),
                    both(r.effA, r.effB).c_str(), cell(r.a, pa.fp32, r.ia).c_str(), cell(r.b, pb.fp32, r.ib).c_str());
    }
    const auto seedsOf = [&](std::int64_t id) {
        const auto j = nlohmann::json::parse(store.requireRun(id).settingsJson, nullptr, false);
        return j.is_object() && j.contains("seeds") && j["seeds"].is_number_integer() ? j["seeds"].get<int>() : 1;
    };
    printGaps(pa, idA, seedsOf(idA));
    if (idB != idA)
        printGaps(pb, idB, seedsOf(idB));
}

// A perplexity table measured outside gsrq (tools/real_table.py's table.json: a transformers or GGUF
// model through tools/hf_ppl.py) recorded as one ppl run, with the rows and series the Runs page's
// perplexity chart and `runs compare` read. Throws Error(InvalidInput) naming the file and field.
void addPplTable(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throwInvalid("runs add-ppl: ", path, ": no such file");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        throwInvalid("runs add-ppl: ", path, ": not a JSON object (tools/real_table.py's table.json)");
    auto field = [&](const nlohmann::json& o, const char* key, auto fallback) {
        using T = decltype(fallback);
        if (!o.contains(key))
            throwInvalid("runs add-ppl: ", path, ": no \"", key, "\"");
        try {
            return o.at(key).template get<T>();
        } catch (const std::exception&) {
            throwInvalid("runs add-ppl: ", path, ": \"", key, "\" has the wrong type");
        }
    };
    auto numbers = [&](const nlohmann::json& a, const std::string& what) {
        std::vector<double> v;
        if (!a.is_array())
            throwInvalid("runs add-ppl: ", path, ": ", what, " is not a list of numbers");
        for (const auto& x : a) {
            if (!x.is_number() || !std::isfinite(x.get<double>()))
                throwInvalid("runs add-ppl: ", path, ": ", what, " is not a list of numbers");
            v.push_back(x.get<double>());
        }
        return v;
    };
    MethodTableResult r;
    if (!j.contains("rows") || !j["rows"].is_array() || j["rows"].empty())
        throwInvalid("runs add-ppl: ", path, ": no \"rows\"");
    for (const auto& row : j["rows"]) {
        MethodTableRow m;
        m.name = field(row, "name", std::string());
        m.family = field(row, "family", std::string());
        m.bits = field(row, "bits", 0.0);
        m.effectiveBits = row.contains("effective_bits") && row["effective_bits"].is_number()
                              ? row["effective_bits"].get<double>()
                              : m.bits;
        m.perplexity = field(row, "perplexity", 0.0);
        m.settings = row.value("settings", std::string());
        if (!(m.perplexity > 0) || !std::isfinite(m.perplexity))
            throwInvalid("runs add-ppl: ", path, ": ", m.name, "'s perplexity is not a positive number");
        // Its sequences' NLL (of the seeds' mean, with seeds) and its interval, where the table has them.
        if (row.contains("sequence_nll"))
            m.sequenceNll = numbers(row["sequence_nll"], cat(m.name, "'s \"sequence_nll\""));
        if (row.contains("delta_percent_interval") && !row["delta_percent_interval"].is_null()) {
            const auto in = numbers(row["delta_percent_interval"], cat(m.name, "'s \"delta_percent_interval\""));
            if (in.size() != 2 || !(in[0] <= in[1]))
                throwInvalid("runs add-ppl: ", path, ": ", m.name, "'s \"delta_percent_interval\" is not [low, high]");
            m.deltaInterval = {in[0], in[1]};
        }
        r.rows.push_back(std::move(m));
    }
    if (j.contains("sequence_tokens")) {
        const auto tokens = numbers(j["sequence_tokens"], "\"sequence_tokens\"");
        for (double t : tokens)
            if (!(t > 0))
                throwInvalid("runs add-ppl: ", path, ": \"sequence_tokens\" holds ", t,
                             ": each sequence's count of predicted tokens must be positive");
        for (auto& m : r.rows) {
            if (m.sequenceNll.empty())
                continue;
            if (m.sequenceNll.size() != tokens.size())
                throwInvalid("runs add-ppl: ", path, ": ", m.name, " has ", m.sequenceNll.size(),
                             " sequences' NLL for ", tokens.size(), " sequences");
            m.sequenceTokens = tokens;
        }
        // A row with its sequences and no interval of its own gets the engine's (FP32's row has none).
        const auto& fp32 = r.rows.front();
        for (std::size_t i = 1; i < r.rows.size(); ++i) {
            auto& m = r.rows[i];
            if (!m.deltaInterval.valid() && !m.sequenceNll.empty() && fp32.sequenceNll.size() == m.sequenceNll.size())
                m.deltaInterval = deltaPercentInterval(m.sequenceNll, fp32.sequenceNll, tokens);
        }
    }
    if (r.rows.front().family != "fp32")
        throwInvalid("runs add-ppl: ", path, ": the first row must be fp32 (every Δ is against it)");
    PplRunSettings ps;
    ps.model = field(j, "model", std::string());
    ps.text = j.value("eval_text", std::string());
    ps.seqLen = field(j, "seq_len", 0);
    ps.sequences = field(j, "eval_sequences", 0);
    for (const auto& m : r.rows)
        ps.methods.push_back(m.name);
    ps.trainDump = j.value("calibration_dump", std::string());
    ps.trainIterations = j.value("iters", 0);
    auto settings = pplRunSettings(ps);
    settings["measured_by"] = "tools/hf_ppl.py (transformers)";
    settings["model_type"] = j.value("model_type", std::string());
    settings["budget"] = j.value("budget", std::string());
    settings["calib_samples"] = j.value("calib_samples", 0);
    settings["seeds"] = j.contains("seeds") && j["seeds"].is_number_integer() ? j["seeds"].get<int>() : 1;
    std::vector<std::string> files;
    if (std::filesystem::is_regular_file(ps.model))
        files.push_back(ps.model);
    CliRun run("ppl", settings.dump(), ps.model, files, "transformers", j.value("device", std::string("cpu")));
    run.guard([&] {
        if (run) {
            run->recordMetrics(methodTableMetrics(r));
            run->recordSeries(methodTableSeries(r));
        }
        run.done(methodTableSummary(r).dump());
    });
    std::printf("%s: recorded as a ppl run of %zu methods\n", path.c_str(), r.rows.size());
}

} // namespace

Command registerRuns(CLI::App& root)
{
    struct Opts {
        std::string kind, status, group, csvDir, note, table;
        std::vector<std::string> sources;
        std::int64_t id = 0, other = 0;
        int limit = 50;
        bool json = false, all = false;
    };
    auto o = std::make_shared<Opts>();
    auto* cmd =
        root.add_subcommand("runs", "Browse the run store: list, show, export, compare, note, delete, import, add-ppl");
    cmd->require_subcommand(1);
    auto* list = cmd->add_subcommand("list", "Recorded runs, newest first");
    list->add_option(
        "--kind", o->kind,
        "Only runs of this kind (compare, sweep, train, eval, ppl, bench-cluster, bench-decode, paper-check)");
    list->add_option("--status", o->status,
                     "Only runs with this status (running, done, failed, cancelled, interrupted)");
    list->add_option("--group", o->group, "Only runs of this group (a plan's id)");
    list->add_option("--limit", o->limit, "At most this many (0: all)")->capture_default_str();
    list->add_flag("--json", o->json, "Print JSON");
    auto* show = cmd->add_subcommand("show", "One run: settings, metrics, curves, artifacts, notes");
    show->add_option("id", o->id, "Run id")->required();
    show->add_flag("--json", o->json, "Print JSON (with every iteration and series point)");
    auto* exp = cmd->add_subcommand("export", "Write a run's data as CSV files and settings.json");
    exp->add_option("id", o->id, "Run id")->required();
    exp->add_option("--csv", o->csvDir, "Directory to write into (created if missing)")->required();
    auto* del = cmd->add_subcommand("delete", "Delete a run and everything recorded for it");
    del->add_option("id", o->id, "Run id")->required();
    auto* cmp = cmd->add_subcommand("compare", "Settings that differ, and final metrics side by side");
    cmp->add_option("a", o->id, "First run id")->required();
    cmp->add_option("b", o->other, "Second run id")->required();
    cmp->add_flag("--all", o->all, "Show every metric, not only the final ones");
    auto* note = cmd->add_subcommand("note", "Attach a note to a run");
    note->add_option("id", o->id, "Run id")->required();
    note->add_option("text", o->note, "The note")->required();
    auto* imp =
        cmd->add_subcommand("import", "Copy the runs of other stores into this one (importing twice adds nothing)");
    imp->add_option("stores", o->sources, "Run store files, e.g. plan/stores/*.sqlite")->required();
    imp->add_flag("--json", o->json, "Print JSON");
    auto* addPpl = cmd->add_subcommand(
        "add-ppl", "Record a perplexity table measured by tools/real_table.py (its table.json) as a ppl run");
    addPpl->add_option("table", o->table, "tools/real_table.py's table.json")->required();

    return {
        cmd, [o, list, show, exp, del, cmp, note, imp, addPpl] {
            if (addPpl->parsed()) {
                if (globalOptions().noDb)
                    throwInvalid("--no-db: runs add-ppl records into the run store");
                addPplTable(o->table);
                return;
            }
            auto store = requireStore();
            if (imp->parsed()) {
                // Every source is checked before any is imported: a bad one leaves the store as it was.
                for (const auto& src : o->sources)
                    if (!std::filesystem::is_regular_file(src))
                        throwInvalid("runs import: ", src, ": no such run store");
                nlohmann::ordered_json arr = nlohmann::ordered_json::array();
                int added = 0, present = 0;
                for (const auto& src : o->sources) {
                    const auto rep = store->importRuns(src);
                    added += rep.added;
                    present += rep.alreadyPresent;
                    arr.push_back({{"store", src},
                                   {"schema", rep.sourceSchema},
                                   {"added", rep.added},
                                   {"already_present", rep.alreadyPresent},
                                   {"still_running", rep.stillRunning}});
                    if (!o->json) {
                        std::printf("%s: %d runs added, %d already present", src.c_str(), rep.added,
                                    rep.alreadyPresent);
                        if (!rep.stillRunning.empty()) {
                            std::printf(", %zu still running there and left out (ids", rep.stillRunning.size());
                            for (auto id : rep.stillRunning)
                                std::printf(" %lld", static_cast<long long>(id));
                            std::printf(")");
                        }
                        std::printf("\n");
                    }
                }
                if (o->json)
                    printJson(
                        {{"store", store->path()}, {"added", added}, {"already_present", present}, {"sources", arr}});
                else
                    std::printf("%s: %d runs added in all\n", store->path().c_str(), added);
                return;
            }
            if (list->parsed()) {
                std::optional<RunStatus> status;
                if (!o->status.empty()) {
                    status = runStatusFromName(o->status);
                    if (!status)
                        throwInvalid("--status ", o->status,
                                     ": expected running, done, failed, cancelled or interrupted");
                }
                const auto runs = store->listRuns({o->kind, status, o->group, o->limit});
                if (o->json) {
                    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
                    for (const auto& r : runs)
                        arr.push_back(runJson(r));
                    printJson({{"store", store->path()}, {"runs", arr}});
                    return;
                }
                std::printf("%s\n%6s  %-13s %-11s %-24s %-30s %s\n", store->path().c_str(), "id", "kind", "status",
                            "started (UTC)", "dump", "result");
                for (const auto& r : runs)
                    std::printf("%6lld  %-13s %-11s %-24s %-30s %s\n", static_cast<long long>(r.id), r.kind.c_str(),
                                runStatusName(r.status), r.startedAt.c_str(),
                                std::filesystem::path(r.dumpPath).filename().string().c_str(),
                                runHeadline(r.summaryJson).c_str());
                return;
            }
            if (show->parsed()) {
                const auto r = store->requireRun(o->id);
                const auto metrics = store->metrics(o->id);
                const auto series = store->series(o->id);
                const auto artifacts = store->artifacts(o->id);
                const auto notes = store->notes(o->id);
                const auto iterations = store->iterations(o->id);
                if (o->json) {
                    auto j = runJson(r);
                    nlohmann::ordered_json ms = nlohmann::ordered_json::array(), ss = ms, as = ms, ns = ms, is = ms;
                    for (const auto& m : metrics)
                        ms.push_back({{"scope", m.scope},
                                      {"method", m.method},
                                      {"tensor", m.tensor},
                                      {"stage", m.stage},
                                      {"subspace", m.subspace},
                                      {"name", m.name},
                                      {"value", m.value}});
                    for (const auto& p : series)
                        ss.push_back({{"name", p.name}, {"x", p.x}, {"y", p.y}});
                    for (const auto& a : artifacts)
                        as.push_back({{"path", a.path}, {"kind", a.kind}, {"sha256", a.sha256}, {"bytes", a.bytes}});
                    for (const auto& n : notes)
                        ns.push_back({{"id", n.id}, {"created_at", n.createdAt}, {"text", n.text}});
                    for (const auto& it : iterations)
                        is.push_back({{"method", it.method},
                                      {"tensor", it.tensor},
                                      {"subspace", it.subspace},
                                      {"stage", it.stage},
                                      {"iteration", it.iteration},
                                      {"objective", it.objective},
                                      {"nmse", it.nmse},
                                      {"cosine", it.cosine},
                                      {"gain_error", it.gainError},
                                      {"shrinkage", it.shrinkage},
                                      {"changed", it.changed},
                                      {"skipped", it.skipped},
                                      {"empty_clusters", it.emptyClusters},
                                      {"seconds", it.seconds}});
                    j["metrics"] = ms;
                    j["series"] = ss;
                    j["artifacts"] = as;
                    j["notes"] = ns;
                    j["iterations"] = is;
                    nlohmann::ordered_json sa = nlohmann::ordered_json::array();
                    for (const auto& sample : store->samples(o->id)) {
                        auto rec = nlohmann::ordered_json::parse(sample.json, nullptr, false);
                        sa.push_back(rec.is_discarded() ? nlohmann::ordered_json(sample.json) : rec);
                    }
                    j["samples"] = sa;
                    printJson(j);
                    return;
                }
                std::printf("run %lld: %s, %s\n  started  %s\n  finished %s\n  host %s (pid %lld), gsrq %s, %s (%s)\n",
                            static_cast<long long>(r.id), r.kind.c_str(), runStatusName(r.status), r.startedAt.c_str(),
                            r.finishedAt.empty() ? "-" : r.finishedAt.c_str(), r.host.c_str(),
                            static_cast<long long>(r.pid), r.toolVersion.c_str(), r.backend.c_str(), r.device.c_str());
                if (!r.group.empty())
                    std::printf("  group %s\n", r.group.c_str());
                if (!r.origin.empty())
                    std::printf("  imported from %s\n", r.origin.c_str());
                std::printf("  dump %s\n  sha256 %s\n  command %s\n  settings %s\n", r.dumpPath.c_str(),
                            r.dumpSha256.c_str(), r.command.c_str(), r.settingsJson.c_str());
                if (!r.error.empty())
                    std::printf("  error %s\n", r.error.c_str());
                std::printf("\n  %zu iteration rows, %zu series points", iterations.size(), series.size());
                if (const auto samples = store->samples(o->id); !samples.empty())
                    std::printf(", %zu samples (a tasks run's prompts and answers: gsrq runs show %lld --json)",
                                samples.size(), static_cast<long long>(o->id));
                std::printf("\n");
                bool header = false;
                for (const auto& m : metrics) {
                    if (m.scope != "final" && m.scope != "heldout" && m.scope != "attention")
                        continue;
                    if (!header)
                        std::printf("\n  metrics\n");
                    header = true;
                    std::printf("    %-56s %.6g\n", metricKey(m).c_str(), m.value);
                }
                for (const auto& a : artifacts)
                    std::printf("\n  artifact %s (%s, %lld bytes, sha256 %s)", a.path.c_str(), a.kind.c_str(),
                                static_cast<long long>(a.bytes), a.sha256.c_str());
                if (!artifacts.empty())
                    std::printf("\n");
                for (const auto& n : notes)
                    std::printf("\n  note %lld (%s): %s\n", static_cast<long long>(n.id), n.createdAt.c_str(),
                                n.text.c_str());
                return;
            }
            if (exp->parsed()) {
                const auto r = store->requireRun(o->id);
                const std::filesystem::path dir(o->csvDir);
                std::error_code ec;
                std::filesystem::create_directories(dir, ec);
                if (!std::filesystem::is_directory(dir))
                    throwInvalid("--csv ", o->csvDir, ": cannot create the directory");
                writeText(dir / "settings.json", runJson(r).dump(2) + "\n");
                std::string it =
                    "method,tensor,subspace,stage,iteration,objective,nmse,cosine,gain_error,shrinkage,changed,"
                    "empty_clusters,seconds,skipped\n";
                for (const auto& x : store->iterations(o->id))
                    it +=
                        cat(csvField(x.method), ",", csvField(x.tensor), ",", x.subspace, ",", x.stage, ",",
                            x.iteration, ",", csvNumber(x.objective), ",", csvNumber(x.nmse), ",", csvNumber(x.cosine),
                            ",", csvNumber(x.gainError), ",", csvNumber(x.shrinkage), ",", x.changed, ",",
                            x.emptyClusters, ",", csvNumber(x.seconds), ",", csvNumber(x.skipped), "\n");
                writeText(dir / "iterations.csv", it);
                std::string ms = "scope,method,tensor,stage,subspace,name,value\n";
                for (const auto& m : store->metrics(o->id))
                    ms += cat(m.scope, ",", csvField(m.method), ",", csvField(m.tensor), ",", m.stage, ",", m.subspace,
                              ",", m.name, ",", csvNumber(m.value), "\n");
                writeText(dir / "metrics.csv", ms);
                std::map<std::string, std::string> perSeries;
                for (const auto& p : store->series(o->id)) {
                    auto& text = perSeries[p.name];
                    if (text.empty())
                        text = "x,y\n";
                    text += cat(csvNumber(p.x), ",", csvNumber(p.y), "\n");
                }
                for (const auto& [name, text] : perSeries)
                    writeText(dir / ("series_" + safeName(name) + ".csv"), text);
                std::fprintf(stderr, "wrote settings.json, iterations.csv, metrics.csv and %zu series to %s\n",
                             perSeries.size(), o->csvDir.c_str());
                return;
            }
            if (del->parsed()) {
                store->deleteRun(o->id);
                std::fprintf(stderr, "deleted run %lld\n", static_cast<long long>(o->id));
                return;
            }
            if (note->parsed()) {
                const auto id = store->addNote(o->id, o->note);
                std::fprintf(stderr, "note %lld added to run %lld\n", static_cast<long long>(id),
                             static_cast<long long>(o->id));
                return;
            }
            if (cmp->parsed()) {
                const auto a = store->requireRun(o->id), b = store->requireRun(o->other);
                auto sa = flattenSettings(a.settingsJson), sb = flattenSettings(b.settingsJson);
                std::printf("run %lld (%s) vs run %lld (%s)\n\nsettings that differ:\n", static_cast<long long>(a.id),
                            a.kind.c_str(), static_cast<long long>(b.id), b.kind.c_str());
                const auto differ = settingsThatDiffer({sa, sb});
                for (const auto& k : differ)
                    std::printf("  %-28s %-24s %s\n", k.c_str(), sa.count(k) ? sa[k].c_str() : "-",
                                sb.count(k) ? sb[k].c_str() : "-");
                if (differ.empty())
                    std::printf("  (none)\n");
                std::map<std::string, std::pair<std::string, std::string>> rows;
                for (const auto& m : store->metrics(a.id))
                    if (o->all || m.scope == "final" || m.scope == "heldout")
                        rows[metricKey(m)].first = cat(m.value);
                for (const auto& m : store->metrics(b.id))
                    if (o->all || m.scope == "final" || m.scope == "heldout")
                        rows[metricKey(m)].second = cat(m.value);
                if (!rows.empty() || (a.kind != "ppl" && b.kind != "ppl")) {
                    std::printf("\n%-58s %14s %14s\n", "metric", cat("run ", a.id).c_str(), cat("run ", b.id).c_str());
                    for (const auto& [k, v] : rows)
                        std::printf("%-58s %14s %14s\n", k.c_str(), v.first.empty() ? "-" : v.first.c_str(),
                                    v.second.empty() ? "-" : v.second.c_str());
                }
                printPerplexities(*store, a.id, b.id);
            }
        }};
}

} // namespace gsrq::cli
