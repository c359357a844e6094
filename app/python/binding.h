#pragma once
// The binding of the engine for Python (gsrq._core, nanobind), shared by its files: the array types
// it takes and returns, the checks arrays get, the dicts results become, the bridge that lets a job
// run without the GIL, and one bind function per part of the API (module.cpp calls them).
//
// Arrays come in as NumPy arrays or CPU torch tensors (buffer protocol / DLPack): float32, C-order
// rows are read where they are, anything else is converted once by nanobind. Every long call
// releases the GIL; its progress callback takes the GIL back once per iteration, to check for
// Ctrl-C (KeyboardInterrupt cancels the job at that iteration) and call the user's callback.

#include "core/base/error.h"
#include "core/cluster/clustering.h"
#include "core/cluster/codebook_file.h"
#include "core/cluster/metrics.h"
#include "core/cluster/progress.h"
#include "core/cluster/quantizer.h"
#include "core/cluster/weights.h"
#include "core/jobs/train_job.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <vector>

namespace gsrq::python {

namespace nb = nanobind;

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

// A float32 array that owns the matrix.
OutArray<float> ownedMatrix(MatrixRF&& m);
// Rows as the engine reads them, in place; checked as the CLI checks a dump's tensor (non-empty,
// finite), naming `what`.
Eigen::Map<const MatrixRF> rowsOf(const InRows& a, const char* what);
// One weight per row, or null; a length other than `rows` is refused naming `what`.
const float* weightsOf(const std::optional<InVector>& w, std::int64_t rows, const char* what = "weights");
// none, grad-raw, grad-log or grad-sq; anything else is refused naming `what`.
WeightMode weightModeOf(const std::string& name, const char* what = "mode");
nb::dict metricsDict(const QuantMetrics& m);
nb::dict iterationDict(const IterationStats& s);

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

// One tensor's codebooks (gsrq.Codebooks).
struct PyCodebooks {
    Codebooks cb;
};
// A whole codebooks file (gsrq.CodebookFile).
struct PyCodebookFile {
    CodebookFile file;
};
// Codes [N, M, R] (or [N, M·R]) checked against the codebooks, and back to an int32 [N, M, R] array.
Codes codesOf(const InCodes& a, const Codebooks& cb);
OutArray<std::int32_t> codesArray(Codes&& c, const Codebooks& cb);

// A training (gsrq.TrainResult) with what the run store records of it.
struct PyTrainResult {
    TrainSettings settings;
    TensorTrainResult result;
    std::vector<std::string> dumpFiles; // where the rows came from (for the run store's hash), if known
    std::string dumpPath;
    std::string backendName, backendDevice;
};

void bindDumps(nb::module_& m);
void bindClustering(nb::module_& m);
void bindCodebooks(nb::module_& m);
void bindTraining(nb::module_& m);
void bindRunStore(nb::module_& m);

} // namespace gsrq::python
