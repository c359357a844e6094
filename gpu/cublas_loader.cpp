#include "cublas_loader.h"

#include "error.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace gsrq::gpu {

namespace {

template <class F> void bindSymbol(void* lib, const char* name, F& out)
{
    out = reinterpret_cast<F>(dlsym(lib, name));
    if (!out)
        throwRuntime("cuBLAS: symbol ", name, " missing from libcublas.so.", CUBLAS_VER_MAJOR);
}

} // namespace

const Cublas& cublas()
{
    static Cublas api;
    static std::string failure;
    static std::once_flag once;
    std::call_once(once, [] {
        const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
        void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char* why = dlerror();
            failure = cat("cannot load ", soname, " (", why ? why : "unknown reason",
                          "); install the CUDA toolkit's cuBLAS or use --backend cpu");
            return;
        }
        try {
            bindSymbol(lib, "cublasCreate_v2", api.create);
            bindSymbol(lib, "cublasDestroy_v2", api.destroy);
            bindSymbol(lib, "cublasSetStream_v2", api.setStream);
            bindSymbol(lib, "cublasSetMathMode", api.setMathMode);
            bindSymbol(lib, "cublasSgemm_v2", api.sgemm);
        } catch (const Error& e) {
            failure = e.what();
        }
    });
    if (!failure.empty())
        throwRuntime(failure);
    return api;
}

} // namespace gsrq::gpu
