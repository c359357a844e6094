// gsrq.RunStore: the app's and the CLI's run store, read and written from Python.

#include "app/python/binding.h"

#include "core/jobs/recorded_run.h"
#include "core/jobs/run_records.h"
#include "core/store/run_store.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

namespace gsrq::python {

using namespace nb::literals;

namespace {

nb::dict runDict(const RunInfo& r)
{
    nb::dict d;
    d["id"] = r.id;
    d["kind"] = r.kind;
    d["status"] = runStatusName(r.status);
    d["started_at"] = r.startedAt;
    d["finished_at"] = r.finishedAt;
    d["tool_version"] = r.toolVersion;
    d["backend"] = r.backend;
    d["device"] = r.device;
    d["dump_path"] = r.dumpPath;
    d["dump_sha256"] = r.dumpSha256;
    d["settings"] = r.settingsJson;
    d["summary"] = r.summaryJson;
    d["command"] = r.command;
    d["group"] = r.group;
    return d;
}

struct PyRunStore {
    std::string path;
};

} // namespace

void bindRunStore(nb::module_& m)
{
    nb::class_<PyRunStore>(m, "RunStore")
        .def(
            "__init__",
            [](PyRunStore* self, std::optional<std::string> path) {
                const std::string p = path ? *path : RunStore::defaultPath();
                RunStore open(p); // creates or migrates it now, so a bad path fails here, named
                new (self) PyRunStore{p};
            },
            "path"_a = nb::none())
        .def_prop_ro("path", [](const PyRunStore& s) { return s.path; })
        .def(
            "record_train",
            [](const PyRunStore& s, const PyTrainResult& r, const std::string& command) {
                if (r.result.train.cancelled)
                    throwInvalid("result: a cancelled training is not recorded");
                RunInfo info;
                info.kind = "train";
                info.backend = r.backendName;
                info.device = r.backendDevice;
                info.dumpPath = r.dumpPath;
                info.command = command;
                info.settingsJson = trainRunSettings(r.settings, "", r.backendName, r.backendDevice).dump();
                RecordedRun run(s.path, info, r.dumpFiles, r.result.tensor, StoreFailure::Stop);
                TrainJobResult job;
                job.tensors.push_back(r.result);
                run->recordTrain(job);
                const std::int64_t id = run->id();
                run.finish(RunStatus::Done, trainRunSummary(job).dump());
                return id;
            },
            "result"_a, "command"_a = "python: gsrq.train")
        .def(
            "runs",
            [](const PyRunStore& s, std::optional<std::string> kind) {
                RunStore store(s.path);
                nb::list l;
                for (const auto& r : store.listRuns())
                    if (!kind || r.kind == *kind)
                        l.append(runDict(r));
                return l;
            },
            "kind"_a = nb::none())
        .def(
            "metrics",
            [](const PyRunStore& s, std::int64_t id) {
                RunStore store(s.path);
                store.requireRun(id);
                nb::list l;
                for (const auto& r : store.metrics(id)) {
                    nb::dict d;
                    d["scope"] = r.scope;
                    d["method"] = r.method;
                    d["tensor"] = r.tensor;
                    d["stage"] = r.stage;
                    d["subspace"] = r.subspace;
                    d["name"] = r.name;
                    d["value"] = r.value;
                    l.append(d);
                }
                return l;
            },
            "run_id"_a)
        .def(
            "series",
            [](const PyRunStore& s, std::int64_t id) {
                RunStore store(s.path);
                store.requireRun(id);
                nb::dict d;
                for (const auto& p : store.series(id)) {
                    nb::str key(p.name.c_str());
                    if (!d.contains(key))
                        d[key] = nb::list();
                    nb::borrow<nb::list>(d[key]).append(nb::make_tuple(p.x, p.y));
                }
                return d;
            },
            "run_id"_a);
}

} // namespace gsrq::python
