// The CUDA emulator (gpu/emulator), which the *_emulated suites run the kernels on: it must give CUDA's
// answers where CUDA defines them (barriers, shuffles, atomics, launch and memory errors, CUB, cuBLAS)
// and fail loudly where a kernel breaks CUDA's rules (a barrier in divergent code, a shuffle with
// exited lanes, a host pointer passed to a kernel), or its passing kernel tests would mean nothing.

#include <QtTest>

#include <Eigen/Core>

#include <numeric>
#include <random>
#include <vector>

// After the libraries: emulator.h defines CUDA's qualifiers and built-ins as macros.
#include "emulator.h"

#include <cublas_v2.h>

#include "byte_counts.h"

namespace {

using gsrq::emulator::launch;

template <class T> T* deviceArray(std::size_t n)
{
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess)
        return nullptr;
    return static_cast<T*>(p);
}

template <class T> std::vector<T> download(const T* d, std::size_t n)
{
    std::vector<T> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

// Each thread writes its slot, then reads its neighbour's: right only if the barrier holds.
__global__ void neighbourKernel(int* out, bool barrier)
{
    int* s = static_cast<int*>(gsrq::emulator::dynamicShared());
    const int t = int(threadIdx.x), n = int(blockDim.x);
    s[t] = t * 10 + int(blockIdx.x);
    if (barrier)
        __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % n];
}

// Lane t of each warp votes t % 3 == 0 and takes the mask; then the lowest voter and the count.
__global__ void ballotKernel(unsigned* out, int* lowest)
{
    const int t = int(threadIdx.x);
    out[t] = __ballot_sync(0xffffffffu, t % 32 % 3 == 0);
    lowest[t] = __ffs(int(out[t])) - 1 + 100 * __popc(out[t]);
}

__global__ void shuffleKernel(int* xorOut, int* downOut, int* bcastOut, float* sumOut)
{
    const int t = int(threadIdx.x);
    xorOut[t] = __shfl_xor_sync(0xffffffffu, t, 5);
    downOut[t] = __shfl_down_sync(0xffffffffu, t, 3, 16);
    bcastOut[t] = __shfl_sync(0xffffffffu, t, 7, 8);
    float v = float(t);
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    sumOut[t] = v;
}

// Half a warp waits at the block barrier, the other half at a shuffle that needs the first half.
__global__ void divergentBarrierKernel(int* out)
{
    int v = int(threadIdx.x);
    if (threadIdx.x % 32 < 16)
        __syncthreads();
    else
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

__global__ void exitedLaneKernel(int* out)
{
    if (threadIdx.x == 3)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void atomicKernel(int* counts, float* total)
{
    atomicAdd(counts + threadIdx.x % 7, 1);
    atomicAdd(total, 0.5f);
}

__global__ void indexKernel(unsigned* out)
{
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[block * blockDim.x * blockDim.y * blockDim.z + thread] = block * 1000 + thread;
}

__global__ void sharedKernel(float* out)
{
    float* s = static_cast<float*>(gsrq::emulator::dynamicShared());
    out[threadIdx.x] = s[threadIdx.x]; // never written: the emulator's shared memory starts as NaN
}

// Asks for exactly 48 KiB of dynamic shared memory in the test: with any static array beside it, over
// what a block may hold without the opt-in.
__global__ void fullSharedKernel(float* out)
{
    float* s = static_cast<float*>(gsrq::emulator::dynamicShared());
    out[threadIdx.x] = s[threadIdx.x];
}

// One warp's mma.m16n8k8 (TF32): each lane loads its fragments from A (16 × 8, row-major), B (8 × 8,
// row k, column n) and C (16 × 8) as the PTX ISA lays them out, and stores D in the same layout.
__global__ void mmaKernel(const float* A, const float* B, const float* C, float* D)
{
    const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
    const auto bits = [](float v) {
        std::uint32_t b;
        std::memcpy(&b, &v, 4);
        return b;
    };
    const std::uint32_t a[4] = {bits(A[g * 8 + t]), bits(A[(g + 8) * 8 + t]), bits(A[g * 8 + t + 4]),
                                bits(A[(g + 8) * 8 + t + 4])};
    const std::uint32_t b[2] = {bits(B[t * 8 + g]), bits(B[(t + 4) * 8 + g])};
    const float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    float d[4];
    gsrq::emulator::mmaTf32(d, a, b, c);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// Reads its static shared array before writing it, then writes it: every block must read NaN,
// also those that run after a block has written it.
__global__ void staticSharedKernel(float* out)
{
    __shared__ float s[32];
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
    s[threadIdx.x] = float(blockIdx.x + 1);
}

} // namespace

// emulator_counted_kernel.cpp: a kernel of known traffic, in a source of its own that is instrumented
// as the library's kernels are (the byte counters see only instrumented code).
void launchCountedKernel(unsigned blocks, const float* in, float* out);

class TestEmulator : public QObject {
    Q_OBJECT

private slots:
    void barriersHoldAndTheirAbsenceShows()
    {
        const int blocks = 3, threads = 256;
        int* out = deviceArray<int>(blocks * threads);
        launch(neighbourKernel, blocks, threads, threads * sizeof(int), nullptr, out, true);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        const auto a = download(out, blocks * threads);
        for (int b = 0; b < blocks; ++b)
            for (int t = 0; t < threads; ++t)
                QCOMPARE(a[std::size_t(b * threads + t)], ((t + 1) % threads) * 10 + b);
        // Without the barrier, threads run in a shuffled order: some read a slot not yet written
        // (the chance that none does is 1/256! per block), so a missing barrier fails a test here.
        launch(neighbourKernel, blocks, threads, threads * sizeof(int), nullptr, out, false);
        const auto b = download(out, blocks * threads);
        int stale = 0;
        for (int i = 0; i < blocks * threads; ++i)
            stale += b[std::size_t(i)] != a[std::size_t(i)];
        QVERIFY(stale > 0);
        cudaFree(out);
    }

    void shufflesFollowCuda()
    {
        int* x = deviceArray<int>(32);
        int* d = deviceArray<int>(32);
        int* c = deviceArray<int>(32);
        float* s = deviceArray<float>(32);
        launch(shuffleKernel, 1, 32, 0, nullptr, x, d, c, s);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        const auto hx = download(x, 32), hd = download(d, 32), hc = download(c, 32);
        const auto hs = download(s, 32);
        for (int t = 0; t < 32; ++t) {
            QCOMPARE(hx[std::size_t(t)], t ^ 5);
            // Down by 3 within segments of 16: lanes near a segment's end keep their own value.
            QCOMPARE(hd[std::size_t(t)], t % 16 + 3 < 16 ? t + 3 : t);
            // Lane 7 of each segment of 8.
            QCOMPARE(hc[std::size_t(t)], t / 8 * 8 + 7);
            QCOMPARE(hs[std::size_t(t)], 496.f); // 0 + 1 + ... + 31, exact in float
        }
        for (auto* p : {static_cast<void*>(x), static_cast<void*>(d), static_cast<void*>(c), static_cast<void*>(s)})
            cudaFree(p);
    }

    void ballotsFollowCuda()
    {
        // Every lane of a warp gets the mask of its warp's voting lanes (two warps: each its own).
        unsigned* out = deviceArray<unsigned>(64);
        int* lowest = deviceArray<int>(64);
        launch(ballotKernel, 1, 64, 0, nullptr, out, lowest);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        unsigned want = 0;
        for (int t = 0; t < 32; t += 3)
            want |= 1u << t;
        const auto got = download(out, 64);
        const auto low = download(lowest, 64);
        for (std::size_t t = 0; t < 64; ++t) {
            QCOMPARE(got[t], want);
            QCOMPARE(low[t], 0 + 100 * 11); // lane 0 votes, and 11 lanes of 32 do
        }
        cudaFree(out);
        cudaFree(lowest);
    }

    void brokenRulesFailTheLaunchAndTheNextOneRuns()
    {
        int* out = deviceArray<int>(64);
        launch(divergentBarrierKernel, 1, 64, 0, nullptr, out);
        const cudaError_t e = cudaGetLastError();
        QCOMPARE(e, cudaErrorLaunchFailure);
        QVERIFY2(QString(cudaGetErrorString(e)).contains("deadlock"), cudaGetErrorString(e));
        QCOMPARE(cudaGetLastError(), cudaSuccess); // read once, like CUDA's non-sticky errors

        launch(exitedLaneKernel, 1, 32, 0, nullptr, out);
        const cudaError_t e2 = cudaGetLastError();
        QCOMPARE(e2, cudaErrorLaunchFailure);
        QVERIFY2(QString(cudaGetErrorString(e2)).contains("exited"), cudaGetErrorString(e2));

        // The threads abandoned inside those kernels do not disturb the next launch.
        unsigned* idx = deviceArray<unsigned>(2 * 3 * 2 * 4 * 2 * 3);
        launch(indexKernel, dim3(2, 3, 2), dim3(4, 2, 3), 0, nullptr, idx);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        const auto h = download(idx, 2 * 3 * 2 * 24);
        for (unsigned i = 0; i < h.size(); ++i)
            QCOMPARE(h[i], i / 24 * 1000 + i % 24);
        cudaFree(out);
        cudaFree(idx);
    }

    void launchesAreChecked()
    {
        int* out = deviceArray<int>(2048);
        launch(divergentBarrierKernel, 1, 1025, 0, nullptr, out);
        QCOMPARE(cudaGetLastError(), cudaErrorInvalidConfiguration);
        launch(divergentBarrierKernel, dim3(1, 70000), 32, 0, nullptr, out);
        QCOMPARE(cudaGetLastError(), cudaErrorInvalidConfiguration);
        // Above 48 KiB of dynamic shared memory only once the kernel has been allowed it.
        float* f = deviceArray<float>(32);
        launch(sharedKernel, 1, 32, 64 * 1024, nullptr, f);
        QCOMPARE(cudaGetLastError(), cudaErrorInvalidValue);
        QCOMPARE(cudaFuncSetAttribute(sharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
                 cudaSuccess);
        launch(sharedKernel, 1, 32, 64 * 1024, nullptr, f);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        for (float v : download(f, 32))
            QVERIFY(std::isnan(v)); // unwritten shared memory is NaN, never a convenient zero
        // Static __shared__ arrays start as NaN in every block, not with the last block's values.
        float* st = deviceArray<float>(3 * 32);
        launch(staticSharedKernel, 3, 32, 0, nullptr, st);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        for (float v : download(st, 3 * 32))
            QVERIFY(std::isnan(v)); // a read before this block's write is caught
        cudaFree(st);
        // As on the device, a block's static shared arrays count against the same limits as its
        // dynamic memory: 48 KiB of dynamic memory beside any static array needs the opt-in, and the
        // opt-in limit is for the two together. The emulator counts every kernel's static arrays
        // (staticSharedKernel's 128 bytes among them), an upper bound for each kernel's own.
        cudaFuncAttributes attr{};
        QCOMPARE(cudaFuncGetAttributes(&attr, fullSharedKernel), cudaSuccess);
        QVERIFY(attr.sharedSizeBytes >= 32 * sizeof(float));
        launch(fullSharedKernel, 1, 32, 48 * 1024, nullptr, f);
        const cudaError_t over = cudaGetLastError();
        QCOMPARE(over, cudaErrorInvalidValue);
        QVERIFY2(QString(cudaGetErrorString(over)).contains("static shared memory"), cudaGetErrorString(over));
        const int optin = 227 * 1024; // the emulated device's sharedMemPerBlockOptin
        QCOMPARE(cudaFuncSetAttribute(fullSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      optin - int(attr.sharedSizeBytes) + 1),
                 cudaErrorInvalidValue);
        QCOMPARE(cudaGetLastError(), cudaErrorInvalidValue); // as CUDA does, the failure is also the last error
        QCOMPARE(cudaFuncSetAttribute(fullSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      optin - int(attr.sharedSizeBytes)),
                 cudaSuccess);
        launch(fullSharedKernel, 1, 32, 48 * 1024, nullptr, f);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        // A kernel can read only device memory.
        std::vector<int> host(64);
        launch(divergentBarrierKernel, 1, 32, 0, nullptr, host.data());
        const cudaError_t e = cudaGetLastError();
        QCOMPARE(e, cudaErrorInvalidValue);
        QVERIFY2(QString(cudaGetErrorString(e)).contains("parameter 0"), cudaGetErrorString(e));
        cudaFree(out);
        cudaFree(f);
    }

    void atomicsAddUp()
    {
        int* counts = deviceArray<int>(7);
        float* total = deviceArray<float>(1);
        cudaMemset(counts, 0, 7 * sizeof(int));
        cudaMemset(total, 0, sizeof(float));
        launch(atomicKernel, 4, 70, 0, nullptr, counts, total);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        const auto c = download(counts, 7);
        for (int k = 0; k < 7; ++k)
            QCOMPARE(c[std::size_t(k)], 40); // 70 threads: 10 per residue, 4 blocks
        QCOMPARE(download(total, 1)[0], 140.f);
        cudaFree(counts);
        cudaFree(total);
    }

    void memoryIsAccountedAndCopiesChecked()
    {
        std::size_t free0 = 0, total = 0;
        QCOMPARE(cudaMemGetInfo(&free0, &total), cudaSuccess);
        void* p = nullptr;
        QCOMPARE(cudaMalloc(&p, 1 << 20), cudaSuccess);
        std::size_t free1 = 0;
        cudaMemGetInfo(&free1, &total);
        QCOMPARE(free0 - free1, std::size_t(1 << 20));
        // More than the device has: the allocation fails, as on a full device.
        void* big = nullptr;
        QCOMPARE(cudaMalloc(&big, total + 1), cudaErrorMemoryAllocation);
        QVERIFY(big == nullptr);
        cudaGetLastError();
        std::vector<char> host(2 << 20);
        // Copies must stay inside the allocation and match their kind.
        QCOMPARE(cudaMemcpy(p, host.data(), 2 << 20, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
        QCOMPARE(cudaMemcpy(host.data(), host.data() + 1, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
        QCOMPARE(cudaMemcpy(p, host.data(), 1 << 20, cudaMemcpyHostToDevice), cudaSuccess);
        QCOMPARE(cudaFree(host.data()), cudaErrorInvalidValue);
        QCOMPARE(cudaFree(p), cudaSuccess);
        cudaMemGetInfo(&free1, &total);
        QCOMPARE(free1, free0);
        cudaGetLastError();
    }

    void byteCountsSeeEachAccess()
    {
        if (!gsrq::emulator::byteCountsBuilt())
            QSKIP("this build's emulator has no byte counts (the AddressSanitizer build)");
        float* in = deviceArray<float>(128);
        float* out = deviceArray<float>(128);
        QVERIFY(in && out);
        std::vector<float> h(128, 1.0f);
        QCOMPARE(cudaMemcpy(in, h.data(), 128 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        launchCountedKernel(2, in, out); // not counted
        gsrq::emulator::startByteCounts();
        launchCountedKernel(2, in, out);
        launchCountedKernel(1, in, out);
        const auto counts = gsrq::emulator::stopByteCounts();
        launchCountedKernel(2, in, out); // not counted
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        QCOMPARE(int(counts.size()), 2);
        const auto& c = counts[0];
        QVERIFY(c.kernel != nullptr && c.kernel == counts[1].kernel);
        QCOMPARE(c.grid[0], 2u);
        QCOMPARE(c.block[0], 64u);
        QCOMPARE(c.dynamicShared, 64 * sizeof(float));
        // 2 blocks × 64 threads: two 4-byte global reads and one write each; the 512 bytes of `in`
        // read by both blocks count once as distinct. Shared: 8 + 4 bytes written and read per thread.
        QCOMPARE(c.globalRead, std::uint64_t(2 * 64 * 8));
        QCOMPARE(c.globalReadDistinct, std::uint64_t(128 * 4));
        QCOMPARE(c.globalWrite, std::uint64_t(2 * 64 * 4));
        QCOMPARE(c.globalWriteDistinct, std::uint64_t(128 * 4));
        QCOMPARE(c.sharedWrite, std::uint64_t(2 * 64 * 12));
        QCOMPARE(c.sharedRead, std::uint64_t(2 * 64 * 12));
        // Each launch counts afresh: one block writes half of `out`.
        QCOMPARE(counts[1].globalWriteDistinct, std::uint64_t(64 * 4));
        QCOMPARE(counts[1].sharedRead, std::uint64_t(64 * 12));
        cudaFree(in);
        cudaFree(out);
    }

    void mmaFollowsThePtxLayout()
    {
        // D = A·B + C for the warp's m16n8k8 tile, each element placed as the PTX ISA's fragment
        // layouts for .tf32 say. Small integers (exact in TF32, exact sums): any misplaced element
        // or lane shows as a wrong entry, whatever the order of the sums.
        Eigen::Matrix<float, 16, 8, Eigen::RowMajor> A, C;
        Eigen::Matrix<float, 8, 8, Eigen::RowMajor> B;
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j) {
                A(i, j) = float((i * 7 + j * 3) % 11 - 5);
                C(i, j) = float((i + 2 * j) % 5);
            }
        for (int k = 0; k < 8; ++k)
            for (int n = 0; n < 8; ++n)
                B(k, n) = float((k * 5 + n * 2) % 9 - 4);
        float *dA = deviceArray<float>(128), *dB = deviceArray<float>(64), *dC = deviceArray<float>(128),
              *dD = deviceArray<float>(128);
        cudaMemcpy(dA, A.data(), 128 * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dB, B.data(), 64 * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dC, C.data(), 128 * 4, cudaMemcpyHostToDevice);
        launch(mmaKernel, dim3(1), dim3(32), 0, nullptr, dA, dB, dC, dD);
        QCOMPARE(cudaGetLastError(), cudaSuccess);
        const auto D = download(dD, 128);
        const Eigen::Matrix<float, 16, 8, Eigen::RowMajor> ref = A * B + C;
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j)
                QCOMPARE(D[std::size_t(i * 8 + j)], ref(i, j));
        for (void* p : {static_cast<void*>(dA), static_cast<void*>(dB), static_cast<void*>(dC), static_cast<void*>(dD)})
            cudaFree(p);
    }

    void sgemmMatchesItsDefinition()
    {
        // C (m×n) = α op(A) op(B) + β C, column-major, for the transposes the backend uses.
        const int m = 7, n = 5, k = 9;
        const Eigen::MatrixXf A = Eigen::MatrixXf::Random(k, m), B = Eigen::MatrixXf::Random(k, n);
        const Eigen::MatrixXf C0 = Eigen::MatrixXf::Random(m, n);
        float *dA = deviceArray<float>(A.size()), *dB = deviceArray<float>(B.size()),
              *dC = deviceArray<float>(C0.size());
        cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dC, C0.data(), C0.size() * 4, cudaMemcpyHostToDevice);
        cublasHandle_t h = nullptr;
        QCOMPARE(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
        const float alpha = 2.f, beta = 0.5f;
        QCOMPARE(cublasSgemm_v2(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, k, dB, k, &beta, dC, m),
                 CUBLAS_STATUS_SUCCESS);
        Eigen::MatrixXf C(m, n);
        cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
        const Eigen::MatrixXf ref = alpha * A.transpose() * B + beta * C0;
        QVERIFY((C - ref).cwiseAbs().maxCoeff() < 1e-5f); // FP32 sums of 9 products of values in ±1
        // TF32 keeps 10 mantissa bits: the same product off by ~1e-3 relative, not more.
        cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
        const float zero = 0.f;
        cublasSgemm_v2(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, k, dB, k, &zero, dC, m);
        cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
        const Eigen::MatrixXf exact = alpha * A.transpose() * B;
        const float err = (C - exact).cwiseAbs().maxCoeff();
        QVERIFY2(err > 0 && err < 2e-2f, qPrintable(QString::number(err)));
        // A host pointer is refused rather than read.
        QCOMPARE(cublasSgemm_v2(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, A.data(), k, dB, k, &zero, dC, m),
                 CUBLAS_STATUS_EXECUTION_FAILED);
        cublasDestroy_v2(h);
        for (void* p : {static_cast<void*>(dA), static_cast<void*>(dB), static_cast<void*>(dC)})
            cudaFree(p);
    }
};

QTEST_APPLESS_MAIN(TestEmulator)
#include "tst_emulator.moc"
