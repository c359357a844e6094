#pragma once
// cuBLAS, loaded when the first CUDA backend is made rather than linked: the CLI and the app start
// (and run on the CPU) on machines without it, and pay no load time for it when no GPU is used.
// Internal to gsrq_gpu (CUDA types).

#include <cublas_v2.h>

namespace gsrq::gpu {

struct Cublas {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) setStream = nullptr;
    decltype(&cublasSetMathMode) setMathMode = nullptr;
    decltype(&cublasSgemm_v2) sgemm = nullptr;
    decltype(&cublasSgemmBatched) sgemmBatched = nullptr; // independent products of one shape, one launch
};

// The loaded library; throws gsrq::Error(Runtime) naming the library when it cannot be loaded.
const Cublas& cublas();

} // namespace gsrq::gpu
