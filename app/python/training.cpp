// gsrq.train (gsrq._core.train, which gsrq/__init__.py wraps) and gsrq.TrainResult.

#include "app/python/binding.h"

#include "core/cluster/codebook_file.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace gsrq::python {

using namespace nb::literals;

namespace {

RqSettings shapeFor(std::optional<double> bpa, int dim, int stages, int k, std::int64_t features)
{
    RqSettings rq;
    if (bpa && (dim || stages || k))
        throwInvalid("bpa sets dim, stages and k; give either bpa or dim, stages and k");
    if (bpa) {
        const BpaChoice c = paperBpaFor(*bpa, features, ArgStyle::Python);
        rq.dim = c.dim;
        rq.stages = c.stages;
        rq.k = c.k;
    } else {
        if (!dim || !stages || !k)
            throwInvalid("give bpa, or dim, stages and k");
        rq.dim = dim;
        rq.stages = stages;
        rq.k = k;
    }
    return rq;
}

nb::dict roundDict(const RefineRound& r)
{
    nb::dict d;
    d["round"] = r.round;
    d["objective_after_update"] = r.objectiveAfterUpdate;
    d["objective"] = r.objective;
    d["train"] = metricsDict(r.train);
    d["heldout"] = r.heldout ? nb::object(metricsDict(*r.heldout)) : nb::none();
    d["rows_recoded"] = r.rowsRecoded;
    d["update_reverted"] = r.updateReverted;
    d["seconds"] = r.seconds;
    return d;
}

} // namespace

void bindTraining(nb::module_& m)
{
    nb::class_<PyTrainResult>(m, "TrainResult")
        .def_prop_ro("codebooks", [](const PyTrainResult& r) { return PyCodebooks{r.result.train.codebooks}; })
        .def_prop_ro(
            "codes",
            [](const PyTrainResult& r) {
                Codes c = r.result.train.codes;
                return codesArray(std::move(c), r.result.train.codebooks);
            },
            nb::rv_policy::automatic)
        .def_prop_ro("metrics", [](const PyTrainResult& r) { return metricsDict(r.result.train.metrics); })
        .def_prop_ro("heldout",
                     [](const PyTrainResult& r) -> nb::object {
                         return r.result.heldout ? nb::object(metricsDict(*r.result.heldout)) : nb::none();
                     })
        .def_prop_ro("after_stage",
                     [](const PyTrainResult& r) {
                         nb::list l;
                         for (const auto& s : r.result.train.afterStage)
                             l.append(metricsDict(s));
                         return l;
                     })
        .def_prop_ro("refinement",
                     [](const PyTrainResult& r) {
                         nb::list l;
                         for (const auto& x : r.result.train.refinement)
                             l.append(roundDict(x));
                         return l;
                     })
        .def_prop_ro("kept_round", [](const PyTrainResult& r) { return r.result.train.keptRound; })
        .def_prop_ro("clusterings",
                     [](const PyTrainResult& r) {
                         nb::list l;
                         for (const auto& c : r.result.train.clusterings) {
                             nb::dict d;
                             d["subspace"] = c.subspace;
                             d["stage"] = c.stage;
                             d["iterations"] = c.iterations;
                             d["stop"] = stopReasonName(c.stop);
                             d["seconds"] = c.seconds;
                             nb::list h;
                             for (const auto& s : c.history)
                                 h.append(iterationDict(s));
                             d["history"] = h;
                             l.append(d);
                         }
                         return l;
                     })
        .def_prop_ro("rows", [](const PyTrainResult& r) { return r.result.rows; })
        .def_prop_ro("heldout_rows", [](const PyTrainResult& r) { return r.result.heldoutRows; })
        .def_prop_ro("bpa", [](const PyTrainResult& r) { return r.result.bpa; })
        .def_prop_ro("seconds", [](const PyTrainResult& r) { return r.result.train.seconds; })
        .def_prop_ro("cancelled", [](const PyTrainResult& r) { return r.result.train.cancelled; })
        .def_prop_ro("tensor", [](const PyTrainResult& r) { return r.result.tensor; })
        .def(
            "to_file",
            [](const PyTrainResult& r, bool withCodes) {
                PyCodebookFile f;
                f.file.metadata = {{"dim", std::to_string(r.settings.rq.dim)},
                                   {"stages", std::to_string(r.settings.rq.stages)},
                                   {"k", std::to_string(r.settings.rq.k)},
                                   {"method", methodName(r.settings.rq.method)},
                                   {"weights", weightModeName(r.settings.weights)},
                                   {"tau", cat(r.settings.tau)},
                                   {"beam", std::to_string(r.settings.rq.beam)},
                                   {"iterations", std::to_string(r.settings.rq.iterations)},
                                   {"seed", std::to_string(r.settings.rq.seed)},
                                   {"bpa", cat(r.result.bpa)},
                                   {"key_rope", "pre"},
                                   {"rope_pairing", "half"},
                                   {"source", r.dumpPath}};
                CodebookEntry e{r.result.tensor, r.result.train.codebooks, {}};
                if (withCodes)
                    e.codes = r.result.train.codes;
                f.file.entries.push_back(std::move(e));
                return f;
            },
            "with_codes"_a = false);

    m.def(
        "train",
        [](const InRows& xa, std::optional<double> bpa, int dim, int stages, int k, const std::string& method,
           int iterations, std::uint64_t seed, int beam, std::optional<InVector> weights, double holdout,
           bool holdoutTail, int refine, int refineBeam, bool reseedEmpty, const std::string& tensor,
           nb::object progress, int threads, const std::string& weightMode, double tau, const std::string& sourcePath,
           const std::vector<std::string>& sourceFiles, const std::string& beamTrain, bool exactBounds) {
            const auto x = rowsOf(xa, "x");
            PyTrainResult out;
            TrainSettings& s = out.settings;
            s.rq = shapeFor(bpa, dim, stages, k, x.cols());
            const auto mm = methodFromName(method);
            if (!mm)
                throwInvalid("method '", method, "': expected km or gskm");
            s.rq.method = *mm;
            s.rq.iterations = iterations;
            s.rq.seed = seed;
            s.rq.beam = beam;
            s.rq.refine = refine;
            s.rq.refineBeam = refineBeam;
            s.rq.reseedEmpty = reseedEmpty;
            if (beamTrain != "all" && beamTrain != "best")
                throwInvalid("beam_train '", beamTrain, "': expected all or best");
            s.rq.trainOnAllBeams = beamTrain == "all";
            s.holdout = holdout;
            s.holdoutTail = holdoutTail;
            // What the weights were made from (gsrq.train's grad and weight_mode), for the run store.
            s.weights = weightModeOf(weightMode, "weight_mode");
            s.tau = tau;
            s.tensorPatterns = {tensor};
            out.dumpPath = sourcePath;
            out.dumpFiles = sourceFiles;
            const float* w = weightsOf(weights, x.rows());
            if (w)
                validateWeights(w, x.rows());
            Poller poller(std::move(progress));
            {
                nb::gil_scoped_release release;
                auto backend = makeCpuBackend(threads);
                backend->setExactBounds(exactBounds);
                out.backendName = backend->name();
                out.backendDevice = backend->device();
                out.result = trainTensorRows(x, w, s, *backend, poller.progressFn());
            }
            poller.rethrow();
            out.result.tensor = tensor;
            return out;
        },
        "x"_a, nb::kw_only(), "bpa"_a = nb::none(), "dim"_a = 0, "stages"_a = 0, "k"_a = 0, "method"_a = "gskm",
        "iterations"_a = 25, "seed"_a = 0, "beam"_a = 1, "weights"_a = nb::none(), "holdout"_a = 0.0,
        "holdout_tail"_a = false, "refine"_a = 0, "refine_beam"_a = 0, "reseed_empty"_a = false, "tensor"_a = "rows",
        "progress"_a = nb::none(), "threads"_a = 0, "weight_mode"_a = "none", "tau"_a = 1.0, "source_path"_a = "",
        "source_files"_a = std::vector<std::string>{}, "beam_train"_a = "all", "exact_bounds"_a = true);
}

} // namespace gsrq::python
