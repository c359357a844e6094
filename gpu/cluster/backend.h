#pragma once
// Choosing a clustering backend: the CPU, the CUDA one, or the GPU when there is one (auto). No
// CUDA types; used by the CLI and the app alike.

#include "core/cluster/cluster_backend.h"

#include <memory>
#include <string>

namespace gsrq::gpu {

enum class BackendKind { Auto, Cpu, Cuda };

// "auto", "cpu", "cuda"; anything else is Error(InvalidInput) naming --backend.
BackendKind parseBackendKind(const std::string& text);
const char* backendKindName(BackendKind kind);

struct BackendRequest {
    BackendKind kind = BackendKind::Auto;
    int device = 0;    // CUDA device index
    int threads = 0;   // CPU threads (≤ 0: all cores)
    bool tf32 = false; // CUDA: TF32 for the distance product
    // CPU: exact bounds skip the scores that cannot change a label (exact_bounds.h); off: score all
    bool exactBounds = true;
    // CUDA with tf32: the scores and the argmax in one tensor-core kernel where the block's shape allows
    // (cuda_backend.h); off: cuBLAS's GEMM and the argmax kernel (to compare the two)
    bool fusedArgmax = true;
};

struct BackendChoice {
    std::unique_ptr<ClusterBackend> backend;
    std::string note; // one line saying which backend auto chose and why; empty for an explicit choice
};

// cuda without a usable device or a device index out of range: Error(InvalidInput) (exit 2) that
// says why. auto falls back to the CPU and says so in the note.
BackendChoice makeBackend(const BackendRequest& request);

} // namespace gsrq::gpu
