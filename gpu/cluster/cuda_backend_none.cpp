// The CUDA backend's entry points in a build without CUDA.
#include "gpu/cluster/cuda_backend.h"

#include "core/base/error.h"

namespace gsrq::gpu {

std::unique_ptr<ClusterBackend> makeCudaBackend(const CudaOptions&)
{
    throwRuntime("--backend cuda: this gsrq was built without CUDA (configure with nvcc on the PATH or "
                 "CMAKE_CUDA_COMPILER set, and GSRQ_ENABLE_CUDA=ON)");
}

const CudaBackendStats* cudaStats(const ClusterBackend&)
{
    return nullptr;
}

} // namespace gsrq::gpu
