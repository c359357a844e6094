// The CUDA emulator's cuBLAS (cublas_v2.h here): handles, streams, math modes and SGEMM with cuBLAS's
// column-major conventions, computed with Eigen on the CPU. In TF32 mode the inputs are rounded to
// TF32 (10 mantissa bits, to nearest) first, as the tensor cores read them, so the accuracy TF32
// costs shows in the emulator too. Also the emulator build's gsrq::gpu::cublas(), in place of
// cublas_loader.cpp's library loading.

#include "emulator.h"
#include "gpu/device/cublas_loader.h"

#include <Eigen/Core>

#include <cstring>

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

namespace {

using ColMajor = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;

float toTf32(float v)
{
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    if ((b & 0x7f800000u) != 0x7f800000u) // finite: round the low 13 bits away, ties away from zero
        b = (b + 0x1000u) & ~0x1fffu;
    std::memcpy(&v, &b, 4);
    return v;
}

// op(X) as a dense matrix (rounded to TF32 when asked).
Eigen::MatrixXf operand(const float* p, int rows, int cols, int ld, cublasOperation_t op, bool tf32)
{
    const ColMajor stored(p, op == CUBLAS_OP_N ? rows : cols, op == CUBLAS_OP_N ? cols : rows,
                          Eigen::OuterStride<>(ld));
    Eigen::MatrixXf x = op == CUBLAS_OP_N ? Eigen::MatrixXf(stored) : Eigen::MatrixXf(stored.transpose());
    if (tf32)
        x = x.unaryExpr(&toTf32);
    return x;
}

} // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || !alpha || !beta || ldc < std::max(1, m) ||
        lda < std::max(1, transa == CUBLAS_OP_N ? m : k) || ldb < std::max(1, transb == CUBLAS_OP_N ? k : n))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    using gsrq::emulator::detail::isDeviceRange;
    const auto span = [](int ld, int cols, int rows) { return (std::size_t(cols) - 1) * ld + std::size_t(rows); };
    const bool aN = transa == CUBLAS_OP_N, bN = transb == CUBLAS_OP_N;
    if ((k > 0 && (!isDeviceRange(A, span(lda, aN ? k : m, aN ? m : k) * 4) ||
                   !isDeviceRange(B, span(ldb, bN ? n : k, bN ? k : n) * 4))) ||
        !isDeviceRange(C, span(ldc, n, m) * 4))
        return CUBLAS_STATUS_EXECUTION_FAILED; // a device kernel would fault on these
    const bool tf32 = handle->mode == CUBLAS_TF32_TENSOR_OP_MATH;
    Eigen::MatrixXf product = Eigen::MatrixXf::Zero(m, n);
    if (k > 0)
        product.noalias() = operand(A, m, k, lda, transa, tf32) * operand(B, k, n, ldb, transb, tf32);
    Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> c(C, m, n, Eigen::OuterStride<>(ldc));
    if (*beta == 0.f)
        c = *alpha * product; // C is not read: it may hold anything, as in cuBLAS
    else
        c = *alpha * product + *beta * c;
    return CUBLAS_STATUS_SUCCESS;
}

// The pointer arrays are device memory, as cuBLAS reads them; each product is SGEMM's.
cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                  int n, int k, const float* alpha, const float* const Aarray[], int lda,
                                  const float* const Barray[], int ldb, const float* beta, float* const Carray[],
                                  int ldc, int batchCount)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (batchCount < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    using gsrq::emulator::detail::isDeviceRange;
    const std::size_t arrayBytes = std::size_t(batchCount) * sizeof(void*);
    if (batchCount > 0 && (!isDeviceRange(Aarray, arrayBytes) || !isDeviceRange(Barray, arrayBytes) ||
                           !isDeviceRange(Carray, arrayBytes)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int i = 0; i < batchCount; ++i)
        if (const auto s = cublasSgemm_v2(handle, transa, transb, m, n, k, alpha, Aarray[i], lda, Barray[i], ldb, beta,
                                          Carray[i], ldc);
            s != CUBLAS_STATUS_SUCCESS)
            return s;
    return CUBLAS_STATUS_SUCCESS;
}

namespace gsrq::gpu {

const Cublas& cublas()
{
    static const Cublas api{&cublasCreate_v2,   &cublasDestroy_v2, &cublasSetStream_v2,
                            &cublasSetMathMode, &cublasSgemm_v2,   &cublasSgemmBatched};
    return api;
}

} // namespace gsrq::gpu
