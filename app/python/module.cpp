// gsrq._core: the engine for Python (nanobind); the package around it is app/python/gsrq/. Each
// part of the API is bound in its own file (binding.h). gsrq::Error becomes gsrq.InvalidInput (a
// ValueError: a bad file, tensor or argument, named) or gsrq.GsrqError (a RuntimeError); nothing
// in here exits or aborts the interpreter.

#include "app/python/binding.h"
#include "core/base/error.h"
#include "core/base/version.h"

#include <new>

namespace {
PyObject* g_invalidInput = nullptr;
PyObject* g_gsrqError = nullptr;
} // namespace

NB_MODULE(_core, m)
{
    using namespace gsrq;
    m.doc() = "The GSRQ engine (gsrq._core); import gsrq instead.";
    m.attr("__version__") = kVersion;
    g_invalidInput = PyErr_NewExceptionWithDoc(
        "gsrq.InvalidInput", "A bad file, tensor or argument, named in the message (the CLI's exit code 2).",
        PyExc_ValueError, nullptr);
    g_gsrqError = PyErr_NewExceptionWithDoc("gsrq.GsrqError", "A failure while running (the CLI's exit code 1).",
                                            PyExc_RuntimeError, nullptr);
    m.attr("InvalidInput") = nanobind::handle(g_invalidInput);
    m.attr("GsrqError") = nanobind::handle(g_gsrqError);
    nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const Error& e) {
            PyErr_SetString(e.kind() == ErrorKind::InvalidInput ? g_invalidInput : g_gsrqError, e.what());
        } catch (const std::bad_alloc&) {
            PyErr_SetString(PyExc_MemoryError, "out of memory");
        }
    });

    python::bindDumps(m);
    python::bindClustering(m);
    python::bindCodebooks(m);
    python::bindTraining(m);
    python::bindRunStore(m);
}
