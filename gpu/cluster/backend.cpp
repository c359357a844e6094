#include "gpu/cluster/backend.h"

#include "core/base/error.h"
#include "gpu/cluster/cuda_backend.h"
#include "gpu/device/device.h"

namespace gsrq::gpu {

namespace {

CudaOptions cudaOptions(const BackendRequest& r)
{
    CudaOptions o;
    o.device = r.device;
    o.tf32 = r.tf32;
    o.fusedArgmax = r.fusedArgmax;
    return o;
}

} // namespace

BackendKind parseBackendKind(const std::string& text)
{
    if (text == "auto")
        return BackendKind::Auto;
    if (text == "cpu")
        return BackendKind::Cpu;
    if (text == "cuda")
        return BackendKind::Cuda;
    throwInvalid("--backend ", text, ": expected auto, cpu or cuda");
}

const char* backendKindName(BackendKind kind)
{
    switch (kind) {
    case BackendKind::Auto:
        return "auto";
    case BackendKind::Cpu:
        return "cpu";
    case BackendKind::Cuda:
        return "cuda";
    }
    return "?";
}

namespace {

BackendChoice chooseBackend(const BackendRequest& r)
{
    BackendChoice out;
    if (r.kind == BackendKind::Cpu) {
        out.backend = makeCpuBackend(r.threads);
        return out;
    }
    const DeviceQuery q = queryDevices();
    if (r.kind == BackendKind::Cuda) {
        if (q.devices.empty())
            throwInvalid("--backend cuda: ", q.message.empty() ? std::string("no CUDA device") : q.message);
        out.backend = makeCudaBackend(cudaOptions(r));
        return out;
    }
    if (q.devices.empty()) {
        out.backend = makeCpuBackend(r.threads);
        out.note = cat("backend auto: no GPU (", q.message, "); using the CPU, ", out.backend->device());
        return out;
    }
    try {
        out.backend = makeCudaBackend(cudaOptions(r));
        out.note = cat("backend auto: using the GPU, ", out.backend->device());
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::InvalidInput)
            throw; // a --device that does not exist is the user's to fix, not a reason to fall back
        out.backend = makeCpuBackend(r.threads);
        out.note = cat("backend auto: the GPU cannot be used (", e.what(), "); using the CPU, ", out.backend->device());
    }
    return out;
}

} // namespace

BackendChoice makeBackend(const BackendRequest& r)
{
    BackendChoice out = chooseBackend(r);
    out.backend->setExactBounds(r.exactBounds);
    return out;
}

} // namespace gsrq::gpu
