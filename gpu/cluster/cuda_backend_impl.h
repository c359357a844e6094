#pragma once
// The CUDA clustering backend's class (cuda_backend.h says what it does), shared by its two sources:
// cuda_backend.cpp (binding, one block at a time, Lloyd's iterations on held centroids, the
// reconstruction) and cuda_backend_batch.cpp (several blocks as members of one launch). Internal
// to gsrq_gpu: CUDA types.
//
// Members: selectBlocks() selects several blocks of one width, evenly spaced (a layer's subspaces);
// each member has its own row norms, labels, per-row terms, sums, totals and held centroids, in
// slots of member-sized strides (the per-row arrays n apart, the per-cluster K or K × d apart), so
// a batched launch reaches member b's data at b times the stride (kernels::Members). The single-block
// calls act on the focused member's slots; selectBlock() is one member.

#include "core/cluster/cluster_backend.h"
#include "gpu/cluster/cluster_kernels.h"
#include "gpu/cluster/cuda_backend.h"
#include "gpu/device/cublas_loader.h"
#include "gpu/device/cuda_util.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace gsrq::gpu::detail {

inline void check(cublasStatus_t s, const char* what)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        throwRuntime("CUDA backend: ", what, " failed (cuBLAS status ", int(s), ")");
}

class CudaBackend final : public ClusterBackend {
public:
    explicit CudaBackend(const CudaOptions& o);
    ~CudaBackend() override;

    std::string name() const override { return "cuda"; }
    std::string device() const override { return m_opt.tf32 ? m_device + ", TF32" : m_device; }
    const CudaBackendStats& stats() const { return m_stats; }

    void bind(const float* x, std::int64_t n, int features, const float* weights) override;
    std::int64_t rows() const override { return m_n; }
    void selectBlock(int col0, int dim, float epsilon) override;
    MatrixRF gatherRows(std::span<const std::int64_t> idx) override;
    void assignPass(const MatrixRF& C, const AssignRequest& what, AssignStats& out) override;

    void loadCentroids(const CentroidState& s) override;
    void passHeld(const AssignRequest& what, AssignStats& out) override;
    void updateHeld(const update::Params& rule) override;
    void heldClusterTotals(AssignStats& out) override;
    void storeCentroids(CentroidState& s) override;

    // cuda_backend_batch.cpp
    int batchCapacity(int dim, int k) const override;
    void selectBlocks(std::span<const int> col0, int dim, float epsilon) override;
    void focusMember(int member) override;
    void passHeldBatch(std::span<const int> active, const AssignRequest& what, std::span<AssignStats> out) override;
    void updateHeldBatch(std::span<const int> active, const update::Params& rule) override;

    void readLabels(std::span<std::int32_t> out) override;
    void writeLabels(std::span<const std::int32_t> in) override;
    void subtractAssigned(const MatrixRF& C) override;
    QuantMetrics reconstructionMetrics() override;

private:
    // Row terms summed per pass; a member's scalars are their sums, then the cluster totals' two.
    static constexpr int kRowTerms = 8;
    static constexpr int kScalars = kRowTerms + 2;
    // Members one batch takes at most (a layer's subspaces: 8 at the paper's D = 128 of 1,024 features).
    static constexpr int kMaxMembers = 16;
    // Per-row device arrays of a member: norms (2 floats), label, and eight doubles of per-row terms.
    static constexpr std::size_t kPerRowBytes = 2 * sizeof(float) + sizeof(std::int32_t) + 8 * sizeof(double);
    // Set aside for cuBLAS's workspace and the work buffers one block already holds when sizing a batch.
    static constexpr std::size_t kBatchReserve = std::size_t(256) << 20;

    // A member's held centroids: loaded for which selection, with which of the rule's state, and
    // whether its sums are of a pass on them.
    struct Held {
        std::int64_t block = -1;
        bool gs = false, ema = false, passed = false, passShape = false;
    };

    void use() { check(cudaSetDevice(m_opt.device), "cudaSetDevice"); }
    // Adds the wall time of its scope to one of CudaBackendStats' call totals.
    struct Timed {
        double& total;
        std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
        ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    };
    template <class T> void upload(T* to, const T* from, std::size_t count, const char* what)
    {
        check(cudaMemcpyAsync(to, from, count * sizeof(T), cudaMemcpyHostToDevice, m_stream), what);
    }
    template <class T> void download(T* to, const T* from, std::size_t count)
    {
        toHost(to, from, count * sizeof(T), "copying centroids back");
    }
    void toHost(void* to, const void* from, std::size_t bytes, const char* what);
    void bindRows(const float* x, std::int64_t n, int features, const float* weights);
    Held& requireHeld(const char* call) { return requireHeldOf(m_cur, call); }
    Held& requireHeldOf(int member, const char* call);
    void downloadLabels(std::int32_t* out); // the focused member's, synchronized

    // The focused member's slots.
    std::int64_t rowSlot(int b) const { return std::int64_t(b) * m_n; }
    std::size_t kSlot(int b) const { return std::size_t(b) * std::size_t(m_heldK); }
    std::size_t kdSlot(int b) const { return kSlot(b) * std::size_t(m_d); }
    int col0() const { return m_cols[std::size_t(m_cur)]; }

    void runPass(const float* C, const float* cNorm, int K, const AssignRequest& what);
    // Whether a pass scores with the fused kernel: rows x (ld; members colStride apart) 16-byte aligned,
    // the shape within fusedArgmaxFits; and the blocks a member's launch takes for m rows.
    bool fusedFor(int K, const float* x, std::int64_t ld, std::int64_t colStride) const;
    int fusedBlocks(std::int64_t m, int K, int members) const;
    void copyClusterTotals(int K, int b, double* h);
    static void takeClusterTotals(int K, const double* h, AssignStats& out);
    static void takeScalars(const double* s, const AssignRequest& what, AssignStats& out);
    void countPass(std::chrono::steady_clock::time_point start);
    const float* wPtr() const { return m_hasWeights ? m_w.get() : nullptr; }
    void checkLabelSpan(std::size_t n) const;
    void stageChunk(std::int64_t r0, std::int64_t m);
    void prepareWork(int K);
    void uploadCentroids(const MatrixRF& C);
    void prepareRecon();
    void sumRowTerms(int count, int b);
    // cuda_backend_batch.cpp: the pass of several members on their held centroids.
    void runPassBatch(std::span<const int> active, const AssignRequest& what);
    kernels::Members uploadMembers(std::span<const int> active, DeviceArray<int>& to, std::vector<int>& host);

    CudaOptions m_opt;
    std::string m_device;
    cudaStream_t m_stream = nullptr;
    cublasHandle_t m_handle = nullptr;
    CudaBackendStats m_stats;

    const float* m_hostX = nullptr;
    std::int64_t m_n = 0;
    int m_f = 0, m_d = 0;
    std::vector<int> m_cols{0}; // the members' first columns
    int m_members = 1, m_cur = 0;
    int m_colStride = 0; // columns from one member's block to the next
    bool m_resident = true, m_hasWeights = false, m_reconReady = false;
    std::int64_t m_chunk = 0, m_tileRows = 0, m_batchChunk = 0;
    int m_workK = 0;
    std::size_t m_sharedOptin = 0;
    // The fused score-and-argmax kernel: usable on this device (sm_80+, tf32, asked for), and the
    // device's geometry that sizes its grid.
    bool m_fusedDevice = false;
    int m_multiprocessors = 0;
    std::size_t m_sharedPerSm = 0;

    DeviceArray<float> m_res, m_x, m_rec, m_w, m_sq, m_inv, m_stage, m_S, m_C, m_cNorm, m_rowsOut;
    // The members' held centroids of Lloyd's iterations and the rule's state (K × d or K a member).
    DeviceArray<float> m_heldC, m_heldNorm;
    DeviceArray<double> m_gain, m_shape, m_emaW, m_emaS;
    int m_heldK = 0;
    std::vector<Held> m_held{Held{}};
    std::int64_t m_blockSerial = 0;
    DeviceArray<std::int32_t> m_labels;
    DeviceArray<std::int64_t> m_idx;
    DeviceArray<double> m_sumX, m_sumY, m_wsum, m_scalars, m_partials;
    DeviceArray<long long> m_count;
    DeviceArray<const double*> m_ptrs;
    DeviceArray<double> m_rowTerms[kRowTerms];
    // A batch's members on the device (the pass's, the update's) and the batched SGEMM's operands.
    DeviceArray<int> m_passMembers, m_updateMembers;
    std::vector<int> m_passMembersHost, m_updateMembersHost;
    DeviceArray<const float*> m_gemmA, m_gemmB;
    DeviceArray<float*> m_gemmC;
    std::vector<std::uintptr_t> m_gemmKey;  // what the operands above were made for
    DeviceArray<const double*> m_batchPtrs; // the row terms' tables of a batched pass
    std::vector<const double*> m_batchPtrsHost;
    PinnedArray<float> m_hostRes;
    PinnedArray<double> m_hostSums;
    std::vector<float> m_hostRec;
};

} // namespace gsrq::gpu::detail
