// gsrq._core: the engine for Python (nanobind). The package around it is app/python/gsrq/.
//
// Arrays come in as NumPy arrays or CPU torch tensors (buffer protocol / DLPack): float32, C-order
// rows are read where they are, anything else is converted once by nanobind. Every long call
// releases the GIL; its progress callback takes the GIL back once per iteration, to check for
// Ctrl-C (KeyboardInterrupt cancels the job at that iteration) and call the user's callback.
// gsrq::Error becomes gsrq.InvalidInput (a ValueError: a bad file, tensor or argument, named) or
// gsrq.GsrqError (a RuntimeError); nothing in here exits or aborts the interpreter.

#include "core/base/error.h"
#include "core/base/version.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/metrics.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/io/kv_dump.h"
#include "core/jobs/recorded_run.h"
#include "core/jobs/run_records.h"
#include "core/jobs/train_job.h"
#include "core/store/run_store.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <memory>
#include <optional>

namespace nb = nanobind;
using namespace nb::literals;
using namespace gsrq;

namespace {

PyObject* g_invalidInput = nullptr;
PyObject* g_gsrqError = nullptr;

using InRows = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using InVector = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using InCodes = nb::ndarray<const std::int64_t, nb::c_contig, nb::device::cpu>;
template <class T> using OutArray = nb::ndarray<nb::numpy, T>;

// An array that owns `values` (moved to the heap, freed with the array).
template <class T> OutArray<T> owned(std::vector<T>&& values, std::vector<std::size_t> shape)
{
    auto* heap = new std::vector<T>(std::move(values));
    nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    return OutArray<T>(heap->data(), shape.size(), shape.data(), owner);
}

OutArray<float> ownedMatrix(MatrixRF&& m)
{
    auto* heap = new MatrixRF(std::move(m));
    nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<MatrixRF*>(p); });
    const std::size_t shape[2] = {std::size_t(heap->rows()), std::size_t(heap->cols())};
    return OutArray<float>(heap->data(), 2, shape, owner);
}

// Rows as the engine reads them, in place; checked as the CLI checks a dump's tensor.
Eigen::Map<const MatrixRF> rowsOf(const InRows& a, const char* what)
{
    if (a.shape(0) == 0 || a.shape(1) == 0)
        throwInvalid(what, ": empty array of shape (", a.shape(0), ", ", a.shape(1), ")");
    Eigen::Map<const MatrixRF> x(a.data(), Eigen::Index(a.shape(0)), Eigen::Index(a.shape(1)));
    for (Eigen::Index i = 0; i < x.rows(); ++i)
        if (!x.row(i).allFinite())
            throwInvalid(what, ": row ", i, " holds NaN or Inf");
    return x;
}

const float* weightsOf(const std::optional<InVector>& w, std::int64_t rows, const char* what = "weights")
{
    if (!w)
        return nullptr;
    if (std::int64_t(w->shape(0)) != rows)
        throwInvalid(what, ": ", w->shape(0), " values for ", rows, " rows");
    return w->data();
}

nb::dict metricsDict(const QuantMetrics& m)
{
    nb::dict d;
    for (const auto& [name, value] : namedMetrics(m))
        d[name] = value;
    return d;
}

nb::dict iterationDict(const IterationStats& s)
{
    nb::dict d;
    d["iteration"] = s.iteration;
    d["objective"] = s.objective;
    d["nmse"] = s.nmse;
    d["cosine"] = s.cosine;
    d["gain_error"] = s.gainError;
    d["shrinkage"] = s.shrinkage;
    d["changed"] = s.changed;
    d["empty_clusters"] = s.emptyClusters;
    d["seconds"] = s.seconds;
    return d;
}

// The bridge between a job running without the GIL and Python: Ctrl-C and the user's callback.
class Poller {
public:
    explicit Poller(nb::object callback) : m_callback(std::move(callback)) {}
    // On the job's thread, GIL released. False cancels the job.
    template <class MakeInfo> bool poll(MakeInfo&& makeInfo)
    {
        nb::gil_scoped_acquire gil;
        if (m_error)
            return false;
        if (PyErr_CheckSignals() != 0) { // KeyboardInterrupt, or what a signal handler raised
            m_error.emplace();
            return false;
        }
        if (m_callback.is_valid() && !m_callback.is_none()) {
            try {
                nb::object r = m_callback(makeInfo());
                if (r.is(nb::handle(Py_False)))
                    m_cancelled = true;
            } catch (nb::python_error& e) {
                m_error.emplace(std::move(e));
            }
        }
        return !m_error && !m_cancelled;
    }
    ProgressFn progressFn()
    {
        return [this](const ProgressEvent& e) {
            return poll([&] {
                nb::dict d = iterationDict(e.iteration);
                d["what"] = e.what;
                d["fraction"] = e.fraction;
                d["subspace"] = e.subspace;
                d["stage"] = e.stage;
                return d;
            });
        };
    }
    IterationCallback iterationFn()
    {
        return [this](const IterationStats& s) { return poll([&] { return iterationDict(s); }); };
    }
    // With the GIL: raises what the job was stopped by (KeyboardInterrupt, the callback's exception).
    void rethrow()
    {
        if (m_error) {
            nb::python_error e = std::move(*m_error);
            m_error.reset();
            throw e;
        }
    }
    bool cancelled() const { return m_cancelled; }

private:
    nb::object m_callback;
    std::optional<nb::python_error> m_error;
    bool m_cancelled = false;
};

// ---- dumps -------------------------------------------------------------------------------------

struct PyDump {
    std::shared_ptr<KvDump> dump;
};

const KvTensor& tensorOf(const PyDump& d, const std::string& name)
{
    return d.dump->get(name);
}

nb::dict tensorInfo(const KvTensor& t)
{
    nb::dict d;
    d["name"] = t.view.name;
    d["dtype"] = dtypeName(t.view.dtype);
    nb::list shape;
    for (auto s : t.view.shape)
        shape.append(s);
    d["shape"] = nb::tuple(shape);
    d["layer"] = t.layer;
    d["kind"] = kvKindName(t.kind);
    d["file"] = t.view.file ? t.view.file->path() : std::string();
    d["address"] = reinterpret_cast<std::uintptr_t>(t.view.data);
    d["nbytes"] = t.view.nbytes;
    return d;
}

// The tensor's bytes in the mapped file: a read-only uint8 array that keeps the mapping alive.
nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>> tensorBytes(const PyDump& d, const std::string& name)
{
    const KvTensor& t = tensorOf(d, name);
    auto* keep = new std::shared_ptr<const MappedFile>(t.view.file);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const MappedFile>*>(p); });
    const std::size_t shape[1] = {t.view.nbytes};
    return {reinterpret_cast<const std::uint8_t*>(t.view.data), 1, shape, owner};
}

// ---- clustering --------------------------------------------------------------------------------

struct PyClusterResult {
    nb::object centroids, labels;
    nb::list history;
    std::string stop;
    int iterations = 0;
    double seconds = 0;
};

PyClusterResult runCluster(Method method, const InRows& xa, int k, int iterations, std::uint64_t seed,
                           const std::optional<InVector>& weights, bool reseedEmpty, nb::object progress, int threads)
{
    const auto x = rowsOf(xa, "x");
    const float* w = weightsOf(weights, x.rows());
    if (iterations < 0)
        throwInvalid("iterations ", iterations, ": must be ≥ 0");
    ClusteringParams p;
    p.k = k;
    p.maxIterations = iterations;
    p.seed = seed;
    p.reseedEmpty = reseedEmpty;
    Poller poller(std::move(progress));
    ClusteringResult r;
    {
        nb::gil_scoped_release release;
        auto backend = makeCpuBackend(threads);
        r = cluster(x, w, method, p, *backend, poller.iterationFn());
    }
    poller.rethrow();
    PyClusterResult out;
    out.centroids = nb::cast(ownedMatrix(std::move(r.centroids)));
    const std::size_t n = r.labels.size();
    out.labels = nb::cast(owned(std::move(r.labels), {n}));
    for (const auto& h : r.history)
        out.history.append(iterationDict(h));
    out.stop = stopReasonName(r.stop);
    out.iterations = r.iterations;
    out.seconds = r.seconds;
    return out;
}

// ---- codebooks ---------------------------------------------------------------------------------

struct PyCodebooks {
    Codebooks cb;
};

Codes codesOf(const InCodes& a, const Codebooks& cb)
{
    const std::int64_t MR = std::int64_t(cb.subspaces) * cb.stages;
    std::int64_t n = 0;
    if (a.ndim() == 3 && std::int64_t(a.shape(1)) == cb.subspaces && std::int64_t(a.shape(2)) == cb.stages)
        n = std::int64_t(a.shape(0));
    else if (a.ndim() == 2 && std::int64_t(a.shape(1)) == MR)
        n = std::int64_t(a.shape(0));
    else
        throwInvalid("codes: shape must be (N, ", cb.subspaces, ", ", cb.stages,
                     ") for these codebooks (M=", cb.subspaces, ", R=", cb.stages, ")");
    Codes c(n, MR);
    const std::int64_t* p = a.data();
    for (std::int64_t i = 0; i < n * MR; ++i) {
        if (p[i] < 0 || p[i] >= cb.k)
            throwInvalid("codes: ", p[i], " at row ", i / MR, " is outside 0..", cb.k - 1, " (K=", cb.k, ")");
        c.data()[i] = std::int32_t(p[i]);
    }
    return c;
}

OutArray<std::int32_t> codesArray(Codes&& c, const Codebooks& cb)
{
    std::vector<std::int32_t> v(c.data(), c.data() + c.size());
    return owned(std::move(v), {std::size_t(c.rows()), std::size_t(cb.subspaces), std::size_t(cb.stages)});
}

Codes encodeRows(const Codebooks& cb, const InRows& xa, int beam, int stages)
{
    const auto x = rowsOf(xa, "x");
    if (beam < 1)
        throwInvalid("beam ", beam, ": must be ≥ 1");
    if (stages > cb.stages)
        throwInvalid("stages ", stages, ": the codebooks have ", cb.stages);
    nb::gil_scoped_release release;
    auto backend = makeCpuBackend();
    return encode(x, cb, beam, *backend, stages);
}

struct PyCodebookFile {
    CodebookFile file;
};

// ---- training ----------------------------------------------------------------------------------

struct PyTrainResult {
    TrainSettings settings;
    TensorTrainResult result;
    std::vector<std::string> dumpFiles; // where the rows came from (for the run store's hash), if known
    std::string dumpPath;
    std::string backendName, backendDevice;
};

RqSettings shapeFor(std::optional<double> bpa, int dim, int stages, int k, std::int64_t features)
{
    RqSettings rq;
    const bool direct = dim || stages || k;
    if (bpa && direct)
        throwInvalid("bpa sets dim, stages and k; give either bpa or dim, stages and k");
    if (bpa) {
        auto c = paperBpa(*bpa);
        if (!c || features % c->dim != 0) {
            std::string hint;
            for (const auto& s : suggestBpa(*bpa, features))
                hint += cat(hint.empty() ? "" : "; ", "dim=", s.dim, ", stages=", s.stages, ", k=", s.k);
            throwInvalid("bpa=", *bpa,
                         c ? cat(": the paper's D=", c->dim, " does not divide the ", features, " features")
                           : std::string(": not one of the paper's settings (2, 1, 0.75, 0.375)"),
                         hint.empty() ? std::string("; no D, R, K reach it exactly")
                                      : cat("; settings that reach it exactly: ", hint));
        }
        rq.dim = c->dim;
        rq.stages = c->stages;
        rq.k = c->k;
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

// ---- the run store -----------------------------------------------------------------------------

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

NB_MODULE(_core, m)
{
    m.doc() = "The GSRQ engine (gsrq._core); import gsrq instead.";
    m.attr("__version__") = kVersion;
    g_invalidInput = PyErr_NewExceptionWithDoc(
        "gsrq.InvalidInput", "A bad file, tensor or argument, named in the message (the CLI's exit code 2).",
        PyExc_ValueError, nullptr);
    g_gsrqError = PyErr_NewExceptionWithDoc("gsrq.GsrqError", "A failure while running (the CLI's exit code 1).",
                                            PyExc_RuntimeError, nullptr);
    m.attr("InvalidInput") = nb::handle(g_invalidInput);
    m.attr("GsrqError") = nb::handle(g_gsrqError);
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const gsrq::Error& e) {
            PyErr_SetString(e.kind() == ErrorKind::InvalidInput ? g_invalidInput : g_gsrqError, e.what());
        } catch (const std::bad_alloc&) {
            PyErr_SetString(PyExc_MemoryError, "out of memory");
        }
    });

    // -- dumps
    nb::class_<PyDump>(m, "Dump")
        .def_prop_ro("path", [](const PyDump& d) { return d.dump->path(); })
        .def_prop_ro("format", [](const PyDump& d) { return d.dump->format(); })
        .def_prop_ro("files", [](const PyDump& d) { return d.dump->files(); })
        .def_prop_ro("metadata", [](const PyDump& d) { return d.dump->metadata(); })
        .def_prop_ro("names",
                     [](const PyDump& d) {
                         std::vector<std::string> n;
                         for (const auto& t : d.dump->tensors())
                             n.push_back(t.view.name);
                         return n;
                     })
        .def(
            "info", [](const PyDump& d, const std::string& name) { return tensorInfo(tensorOf(d, name)); }, "name"_a)
        .def("_bytes", &tensorBytes, "name"_a)
        .def(
            "load",
            [](const PyDump& d, const std::string& name, bool dropNonFinite) {
                LoadedTensor l = loadForClustering(tensorOf(d, name), dropNonFinite);
                return ownedMatrix(std::move(l.rows));
            },
            "name"_a, "drop_non_finite"_a = false)
        .def(
            "weights",
            [](const PyDump& d, const std::string& name, const std::string& mode, double tau) {
                const auto wm = weightModeFromName(mode);
                if (!wm)
                    throwInvalid("mode '", mode, "': expected none, grad-raw, grad-log or grad-sq");
                const KvTensor& t = tensorOf(d, name);
                LoadedTensor l = loadForClustering(t, false);
                Eigen::VectorXf w = weightsFor(*d.dump, t, l, *wm, tau);
                return owned(std::vector<float>(w.data(), w.data() + w.size()), {std::size_t(w.size())});
            },
            "name"_a, "mode"_a = "grad-log", "tau"_a = 1.0);
    m.def(
        "open_dump", [](const std::string& path) { return PyDump{std::make_shared<KvDump>(KvDump::open(path))}; },
        "path"_a);

    // -- clustering
    nb::class_<PyClusterResult>(m, "ClusterResult")
        .def_ro("centroids", &PyClusterResult::centroids)
        .def_ro("labels", &PyClusterResult::labels)
        .def_ro("history", &PyClusterResult::history)
        .def_ro("stop", &PyClusterResult::stop)
        .def_ro("iterations", &PyClusterResult::iterations)
        .def_ro("seconds", &PyClusterResult::seconds);
    for (const auto& [name, method] : {std::pair{"kmeans", Method::KMeans}, std::pair{"gskm", Method::GainShape}})
        m.def(
            name,
            [method](const InRows& x, int k, int iterations, std::uint64_t seed, std::optional<InVector> weights,
                     bool reseedEmpty, nb::object progress, int threads) {
                return runCluster(method, x, k, iterations, seed, weights, reseedEmpty, std::move(progress), threads);
            },
            "x"_a, "k"_a, nb::kw_only(), "iterations"_a = 50, "seed"_a = 0, "weights"_a = nb::none(),
            "reseed_empty"_a = false, "progress"_a = nb::none(), "threads"_a = 0);

    m.def(
        "metrics",
        [](const InRows& x, const InRows& xhat) {
            const auto a = rowsOf(x, "x");
            const auto b = rowsOf(xhat, "xhat");
            if (a.rows() != b.rows() || a.cols() != b.cols())
                throwInvalid("xhat: shape (", b.rows(), ", ", b.cols(), ") differs from x's (", a.rows(), ", ",
                             a.cols(), ")");
            return metricsDict(computeMetrics(a, b));
        },
        "x"_a, "xhat"_a);
    m.def(
        "gradient_weights",
        [](const InRows& grad, const std::string& mode, double tau) {
            const auto wm = weightModeFromName(mode);
            if (!wm)
                throwInvalid("mode '", mode, "': expected none, grad-raw, grad-log or grad-sq");
            const MatrixRF g = rowsOf(grad, "grad");
            Eigen::VectorXf w =
                *wm == WeightMode::None ? Eigen::VectorXf::Ones(g.rows()) : gradientWeights(g, *wm, tau);
            return owned(std::vector<float>(w.data(), w.data() + w.size()), {std::size_t(w.size())});
        },
        "grad"_a, "mode"_a = "grad-log", "tau"_a = 1.0);

    // -- codebooks
    nb::class_<PyCodebooks>(m, "Codebooks")
        .def_prop_ro("dim", [](const PyCodebooks& c) { return c.cb.dim; })
        .def_prop_ro("stages", [](const PyCodebooks& c) { return c.cb.stages; })
        .def_prop_ro("k", [](const PyCodebooks& c) { return c.cb.k; })
        .def_prop_ro("subspaces", [](const PyCodebooks& c) { return c.cb.subspaces; })
        .def_prop_ro("features", [](const PyCodebooks& c) { return c.cb.features(); })
        .def_prop_ro("bpa", [](const PyCodebooks& c) { return bitsPerActivation(c.cb.dim, c.cb.stages, c.cb.k); })
        .def_prop_ro(
            "codewords",
            [](PyCodebooks& c) {
                const std::size_t shape[4] = {std::size_t(c.cb.subspaces), std::size_t(c.cb.stages),
                                              std::size_t(c.cb.k), std::size_t(c.cb.dim)};
                // A view of the codewords that keeps these codebooks alive.
                return nb::ndarray<nb::numpy, const float, nb::ndim<4>>(c.cb.data.data(), 4, shape, nb::find(&c));
            },
            nb::rv_policy::automatic)
        .def_prop_ro("order",
                     [](const PyCodebooks& c) -> nb::object {
                         if (c.cb.order.empty())
                             return nb::none();
                         return nb::cast(owned(std::vector<std::int32_t>(c.cb.order), {c.cb.order.size()}));
                     })
        .def(
            "encode",
            [](const PyCodebooks& c, const InRows& x, int beam, int stages) {
                return codesArray(encodeRows(c.cb, x, beam, stages), c.cb);
            },
            "x"_a, "beam"_a = 1, "stages"_a = -1)
        .def(
            "decode",
            [](const PyCodebooks& c, const InCodes& codes, int stages) {
                if (stages > c.cb.stages)
                    throwInvalid("stages ", stages, ": the codebooks have ", c.cb.stages);
                Codes k = codesOf(codes, c.cb);
                nb::gil_scoped_release release;
                return ownedMatrix(decode(k, c.cb, stages));
            },
            "codes"_a, "stages"_a = -1)
        .def_static(
            "load",
            [](const std::string& path, std::optional<std::string> tensor) {
                const CodebookFile f = readCodebookFile(path);
                std::string names;
                for (const auto& e : f.entries)
                    names += (names.empty() ? "" : ", ") + e.tensor;
                if (!tensor) {
                    if (f.entries.size() != 1)
                        throwInvalid(path, ": holds codebooks for ", f.entries.size(), " tensors (", names,
                                     "); name one with tensor=");
                    return PyCodebooks{f.entries.front().codebooks};
                }
                const CodebookEntry* e = f.find(*tensor);
                if (!e)
                    throwInvalid(path, ": no codebooks for tensor '", *tensor, "' (it holds: ", names, ")");
                return PyCodebooks{e->codebooks};
            },
            "path"_a, "tensor"_a = nb::none())
        .def(
            "save",
            [](const PyCodebooks& c, const std::string& path, const std::string& tensor, const std::string& dtype,
               const std::map<std::string, std::string>& metadata) {
                if (dtype != "f32" && dtype != "f16")
                    throwInvalid("dtype '", dtype, "': expected f32 or f16");
                if (tensor.empty())
                    throwInvalid("tensor: a name is needed (e.g. layers.0.key)");
                CodebookFile f;
                f.metadata = metadata;
                f.metadata["dim"] = std::to_string(c.cb.dim);
                f.metadata["stages"] = std::to_string(c.cb.stages);
                f.metadata["k"] = std::to_string(c.cb.k);
                f.metadata["bpa"] = cat(bitsPerActivation(c.cb.dim, c.cb.stages, c.cb.k));
                f.metadata.try_emplace("key_rope", "pre");
                f.metadata.try_emplace("rope_pairing", "half");
                f.entries.push_back({tensor, c.cb, {}});
                writeCodebookFile(path, f, dtype == "f16" ? DType::F16 : DType::F32);
            },
            "path"_a, "tensor"_a = "rows", "dtype"_a = "f32", "metadata"_a = std::map<std::string, std::string>{})
        .def(
            "evaluate",
            [](const PyCodebooks& c, const InRows& x, int beam) {
                const Codes k = encodeRows(c.cb, x, beam, -1);
                return metricsDict(computeMetrics(rowsOf(x, "x"), decode(k, c.cb)));
            },
            "x"_a, "beam"_a = 1);

    nb::class_<PyCodebookFile>(m, "CodebookFile")
        .def(nb::init<>())
        .def_static(
            "load", [](const std::string& path) { return PyCodebookFile{readCodebookFile(path)}; }, "path"_a)
        .def(
            "save",
            [](const PyCodebookFile& f, const std::string& path, const std::string& dtype) {
                if (dtype != "f32" && dtype != "f16")
                    throwInvalid("dtype '", dtype, "': expected f32 or f16");
                if (f.file.entries.empty())
                    throwInvalid(path, ": the file holds no codebooks to save");
                writeCodebookFile(path, f.file, dtype == "f16" ? DType::F16 : DType::F32);
            },
            "path"_a, "dtype"_a = "f32")
        .def_prop_rw(
            "metadata", [](const PyCodebookFile& f) { return f.file.metadata; },
            [](PyCodebookFile& f, const std::map<std::string, std::string>& m) { f.file.metadata = m; })
        .def_prop_ro("tensors",
                     [](const PyCodebookFile& f) {
                         std::vector<std::string> n;
                         for (const auto& e : f.file.entries)
                             n.push_back(e.tensor);
                         return n;
                     })
        .def(
            "get",
            [](const PyCodebookFile& f, const std::string& tensor) {
                const CodebookEntry* e = f.file.find(tensor);
                if (!e) {
                    std::string names;
                    for (const auto& x : f.file.entries)
                        names += (names.empty() ? "" : ", ") + x.tensor;
                    throwInvalid("no codebooks for tensor '", tensor, "' (the file holds: ", names, ")");
                }
                return PyCodebooks{e->codebooks};
            },
            "tensor"_a)
        .def(
            "codes",
            [](const PyCodebookFile& f, const std::string& tensor) -> nb::object {
                const CodebookEntry* e = f.file.find(tensor);
                if (!e)
                    throwInvalid("no codebooks for tensor '", tensor, "'");
                if (!e->codes)
                    return nb::none();
                Codes c = *e->codes;
                return nb::cast(codesArray(std::move(c), e->codebooks));
            },
            "tensor"_a)
        .def(
            "put",
            [](PyCodebookFile& f, const std::string& tensor, const PyCodebooks& c, std::optional<InCodes> codes) {
                if (tensor.empty())
                    throwInvalid("tensor: a name is needed (e.g. layers.0.key)");
                CodebookEntry e{tensor, c.cb, {}};
                if (codes)
                    e.codes = codesOf(*codes, c.cb);
                for (auto& x : f.file.entries)
                    if (x.tensor == tensor) {
                        x = std::move(e);
                        return;
                    }
                f.file.entries.push_back(std::move(e));
            },
            "tensor"_a, "codebooks"_a, "codes"_a = nb::none());

    // -- training
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
           nb::object progress, int threads) {
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
            s.holdout = holdout;
            s.holdoutTail = holdoutTail;
            // What the weights were made from is the wrapper's to record (gsrq.train's grad, weight_mode).
            s.weights = WeightMode::None;
            const float* w = weightsOf(weights, x.rows());
            if (w)
                validateWeights(w, x.rows());
            if (holdout < 0 || holdout >= 1)
                throwInvalid("holdout ", holdout, ": must be a fraction in [0, 1)");
            validateRq(s.rq, std::int64_t(double(x.rows()) * (1 - holdout)), x.cols());
            Poller poller(std::move(progress));
            {
                nb::gil_scoped_release release;
                auto backend = makeCpuBackend(threads);
                out.backendName = backend->name();
                out.backendDevice = backend->device();
                out.result = trainTensorRows(x, w, s, *backend, poller.progressFn());
            }
            poller.rethrow();
            out.result.tensor = tensor;
            out.result.features = x.cols();
            return out;
        },
        "x"_a, nb::kw_only(), "bpa"_a = nb::none(), "dim"_a = 0, "stages"_a = 0, "k"_a = 0, "method"_a = "gskm",
        "iterations"_a = 25, "seed"_a = 0, "beam"_a = 1, "weights"_a = nb::none(), "holdout"_a = 0.0,
        "holdout_tail"_a = false, "refine"_a = 0, "refine_beam"_a = 0, "reseed_empty"_a = false, "tensor"_a = "rows",
        "progress"_a = nb::none(), "threads"_a = 0);
    m.def(
        "_set_train_source",
        [](PyTrainResult& r, const std::string& path, const std::vector<std::string>& files,
           const std::string& weightMode, double tau) {
            r.dumpPath = path;
            r.dumpFiles = files;
            const auto wm = weightModeFromName(weightMode);
            if (!wm)
                throwInvalid("weights '", weightMode, "': expected none, grad-raw, grad-log or grad-sq");
            r.settings.weights = *wm;
            r.settings.tau = tau;
            if (!r.result.tensor.empty())
                r.settings.tensorPatterns = {r.result.tensor};
        },
        "result"_a, "path"_a, "files"_a, "weights"_a, "tau"_a);

    // -- the run store
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
                auto backend = makeCpuBackend(1);
                info.settingsJson = trainRunSettings(r.settings, "", *backend).dump();
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
