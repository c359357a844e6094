#include "gpu/device/cublas_loader.h"

#include "core/base/error.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#define GSRQ_STR2(x) #x
#define GSRQ_STR(x) GSRQ_STR2(x)
#define CUBLAS_MAJOR_TEXT GSRQ_STR(CUBLAS_VER_MAJOR)

namespace gsrq::gpu {

namespace {

template <class F> void bindSymbol(void* lib, const char* name, F& out)
{
    out = reinterpret_cast<F>(dlsym(lib, name));
    if (!out)
        throwRuntime("cuBLAS: symbol ", name, " missing from libcublas.so.", CUBLAS_VER_MAJOR);
}

// Where else cuBLAS is kept when the loader's search path lacks it: $GSRQ_CUBLAS (a file), the CUDA
// toolkit's own folders, and the NVIDIA wheels PyTorch installs (nvidia/cu13/lib, nvidia/cublas/lib).
std::vector<std::string> fallbackPaths(const std::string& soname)
{
    std::vector<std::string> out;
    if (const char* env = std::getenv("GSRQ_CUBLAS"); env && *env)
        out.emplace_back(env);
    std::vector<std::string> patterns = {"/usr/local/cuda/lib64/", "/usr/local/cuda-*/lib64/",
                                         "/usr/local/cuda/targets/*/lib/"};
    std::vector<std::string> prefixes = {"/usr/local/lib", "/usr/lib", "/opt/*/.venv/lib", "/opt/*/lib"};
    for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
        if (const char* env = std::getenv(var); env && *env)
            prefixes.insert(prefixes.begin(), std::string(env) + "/lib");
    if (const char* home = std::getenv("HOME"); home && *home)
        prefixes.push_back(std::string(home) + "/.local/lib");
    for (const auto& prefix : prefixes)
        for (const char* sub : {"site-packages", "dist-packages"})
            for (const char* lib : {"nvidia/cu" CUBLAS_MAJOR_TEXT "/lib/", "nvidia/cublas/lib/"})
                patterns.push_back(prefix + "/python3*/" + sub + "/" + lib);
    for (const auto& pattern : patterns) {
        glob_t g{};
        if (glob((pattern + soname).c_str(), 0, nullptr, &g) == 0)
            for (std::size_t i = 0; i < g.gl_pathc; ++i)
                out.emplace_back(g.gl_pathv[i]);
        globfree(&g);
    }
    return out;
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
            const std::string first = why ? why : "unknown reason";
            for (const auto& path : fallbackPaths(soname))
                if ((lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)))
                    break;
            if (!lib) {
                failure =
                    cat("cannot load ", soname, " (", first,
                        "); install the CUDA toolkit's cuBLAS, set GSRQ_CUBLAS to its file, or use --backend cpu");
                return;
            }
        }
        try {
            bindSymbol(lib, "cublasCreate_v2", api.create);
            bindSymbol(lib, "cublasDestroy_v2", api.destroy);
            bindSymbol(lib, "cublasSetStream_v2", api.setStream);
            bindSymbol(lib, "cublasSetMathMode", api.setMathMode);
            bindSymbol(lib, "cublasSgemm_v2", api.sgemm);
            bindSymbol(lib, "cublasSgemmBatched", api.sgemmBatched);
        } catch (const Error& e) {
            failure = e.what();
        }
    });
    if (!failure.empty())
        throwRuntime(failure);
    return api;
}

} // namespace gsrq::gpu
