#include "gpu/cluster/cuda_backend.h"

#include "core/base/error.h"
#include "gpu/cluster/cluster_kernels.h"
#include "gpu/device/cublas_loader.h"
#include "gpu/device/cuda_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace gsrq::gpu {

namespace {

void check(cublasStatus_t s, const char* what)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        throwRuntime("CUDA backend: ", what, " failed (cuBLAS status ", int(s), ")");
}

using detail::check;
using detail::DeviceArray;
using detail::mib;
using detail::outOfMemory;
using detail::PinnedArray;

// Set aside for chunk buffers, sums and cuBLAS when deciding whether the rows fit resident.
constexpr std::size_t kWorkReserve = std::size_t(512) << 20;
// Per-row device arrays: norms (2 floats), label, and eight doubles of per-row terms.
constexpr std::size_t kPerRowBytes = 2 * sizeof(float) + sizeof(std::int32_t) + 8 * sizeof(double);

class CudaBackend final : public ClusterBackend {
public:
    explicit CudaBackend(const CudaOptions& o) : m_opt(o)
    {
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess)
            throwRuntime("--backend cuda: no usable CUDA driver or device (", cudaGetErrorString(e), ")");
        if (o.device < 0 || o.device >= count)
            throwInvalid("--device ", o.device, ": this machine has ", count,
                         count == 1 ? " CUDA device" : " CUDA devices",
                         count ? cat(" (0..", count - 1, ")") : std::string());
        check(cudaSetDevice(o.device), "cudaSetDevice");
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
        m_device = cat(prop.name, " (device ", o.device, ")");
        m_sharedOptin = prop.sharedMemPerBlockOptin;
        const Cublas& api = cublas();
        check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
        check(api.create(&m_handle), "cublasCreate");
        check(api.setStream(m_handle, m_stream), "cublasSetStream");
        check(api.setMathMode(m_handle, o.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
              "cublasSetMathMode");
    }

    ~CudaBackend() override
    {
        cudaSetDevice(m_opt.device);
        if (m_handle)
            cublas().destroy(m_handle);
        if (m_stream)
            cudaStreamDestroy(m_stream);
    }

    std::string name() const override { return "cuda"; }
    std::string device() const override { return m_opt.tf32 ? m_device + ", TF32" : m_device; }
    const CudaBackendStats& stats() const { return m_stats; }

    void bind(const float* x, std::int64_t n, int features, const float* weights) override
    {
        use();
        m_hostX = x;
        m_n = n;
        m_f = features;
        m_reconReady = false;
        m_hostRec.clear();
        m_x.release();
        m_rec.release();
        m_res.release();
        const std::size_t data = std::size_t(n) * features * sizeof(float);
        std::size_t freeB = 0, totalB = 0;
        check(cudaMemGetInfo(&freeB, &totalB), "cudaMemGetInfo");
        const std::size_t need = 3 * data + std::size_t(n) * kPerRowBytes + kWorkReserve;
        m_resident = !m_opt.forceStreamed && double(need) <= m_opt.memoryFraction * double(freeB);
        m_stats.resident = m_resident;

        m_sq.ensure(std::size_t(n), "row norms", m_device);
        m_inv.ensure(std::size_t(n), "inverse row norms", m_device);
        m_labels.ensure(std::size_t(n), "labels", m_device);
        for (auto& a : m_rowTerms)
            a.ensure(std::size_t(n), "per-row sums", m_device);
        if (m_resident) {
            m_res.ensure(std::size_t(n) * features, "the rows (residual)", m_device);
            check(cudaMemcpyAsync(m_res.get(), x, data, cudaMemcpyHostToDevice, m_stream), "copying the rows");
        } else {
            m_hostRes.ensure(std::size_t(n) * features, "the rows (streamed residual)", m_device);
            std::memcpy(m_hostRes.get(), x, data);
        }
        m_hasWeights = weights != nullptr;
        if (weights) {
            m_w.ensure(std::size_t(n), "weights", m_device);
            check(cudaMemcpyAsync(m_w.get(), weights, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice, m_stream),
                  "copying the weights");
        }
        selectBlock(0, features, 1e-8f);
    }

    std::int64_t rows() const override { return m_n; }

    void selectBlock(int col0, int dim, float epsilon) override
    {
        use();
        if (col0 < 0 || dim < 1 || col0 + dim > m_f)
            throwRuntime("CUDA backend: block [", col0, ", ", col0 + dim, ") outside the ", m_f, " features bound");
        m_col0 = col0;
        m_d = dim;
        ++m_blockSerial;
        m_chunk = 0; // chunk size depends on K: chosen at the first pass
        if (m_resident) {
            check(
                kernels::launchRowNorms(m_res.get() + col0, m_f, m_n, dim, epsilon, m_sq.get(), m_inv.get(), m_stream),
                "row norms");
        } else {
            const std::int64_t chunk = std::max<std::int64_t>(1, std::min<std::int64_t>(m_n, 65536));
            m_stage.ensure(std::size_t(chunk) * dim, "a streamed chunk", m_device);
            for (std::int64_t r0 = 0; r0 < m_n; r0 += chunk) {
                const std::int64_t m = std::min(chunk, m_n - r0);
                stageChunk(r0, m);
                check(kernels::launchRowNorms(m_stage.get(), dim, m, dim, epsilon, m_sq.get() + r0, m_inv.get() + r0,
                                              m_stream),
                      "row norms");
            }
        }
        check(cudaMemsetAsync(m_labels.get(), 0xff, std::size_t(m_n) * sizeof(std::int32_t), m_stream),
              "resetting labels");
        check(cudaStreamSynchronize(m_stream), "selecting a block");
    }

    MatrixRF gatherRows(std::span<const std::int64_t> idx) override
    {
        use();
        for (auto r : idx)
            if (r < 0 || r >= m_n)
                throwRuntime("CUDA backend: row ", r, " outside the ", m_n, " rows bound");
        const int k = int(idx.size());
        MatrixRF out(k, m_d);
        if (!m_resident) {
            for (int i = 0; i < k; ++i)
                std::memcpy(out.row(i).data(), m_hostRes.get() + idx[std::size_t(i)] * m_f + m_col0,
                            std::size_t(m_d) * sizeof(float));
            return out;
        }
        m_idx.ensure(std::size_t(k), "row indices", m_device);
        m_rowsOut.ensure(std::size_t(k) * m_d, "gathered rows", m_device);
        check(cudaMemcpyAsync(m_idx.get(), idx.data(), std::size_t(k) * sizeof(std::int64_t), cudaMemcpyHostToDevice,
                              m_stream),
              "copying row indices");
        check(kernels::launchGatherRows(m_res.get() + m_col0, m_f, m_idx.get(), k, m_d, m_rowsOut.get(), m_stream),
              "gathering rows");
        toHost(out.data(), m_rowsOut.get(), std::size_t(k) * m_d * sizeof(float), "copying rows back");
        check(cudaStreamSynchronize(m_stream), "gathering rows");
        return out;
    }

    void assignPass(const MatrixRF& C, const AssignRequest& what, AssignStats& out) override
    {
        const auto start = std::chrono::steady_clock::now();
        use();
        const int K = int(C.rows()), D = m_d;
        if (C.cols() != D || K < 1)
            throwRuntime("CUDA backend: centroids ", C.rows(), "×", C.cols(), " do not match the block width ", D);
        prepareWork(K);
        uploadCentroids(C);
        m_heldPassed = false; // the sums are this pass's now, not the held centroids'
        runPass(m_C.get(), m_cNorm.get(), K, what);

        // One transfer of the K × D sums and the scalars.
        const std::size_t kd = std::size_t(K) * D;
        double* h = m_hostSums.get();
        toHost(h, m_sumX.get(), kd * sizeof(double), "copying sums");
        if (what.shapeSums)
            toHost(h + kd, m_sumY.get(), kd * sizeof(double), "copying sums");
        copyClusterTotals(K, h + 2 * kd);
        toHost(h + 2 * kd + 2 * K, m_scalars.get(), kScalars * sizeof(double), "copying totals");
        check(cudaStreamSynchronize(m_stream), "an assignment pass");
        countPass(start);

        out.sumX = Eigen::Map<const MatrixRD>(h, K, D);
        if (what.shapeSums)
            out.sumY = Eigen::Map<const MatrixRD>(h + kd, K, D);
        else
            out.sumY.resize(0, 0);
        takeClusterTotals(K, h + 2 * kd, out);
        takeScalars(h + 2 * kd + 2 * K, what, out);
    }

    // ---- Lloyd's iterations on the device: the centroids and the rule's state stay there ----------

    void loadCentroids(const CentroidState& s) override
    {
        use();
        const int K = int(s.centroids.rows());
        if (s.centroids.cols() != m_d || K < 1)
            throwRuntime("CUDA backend: centroids ", s.centroids.rows(), "×", s.centroids.cols(),
                         " do not match the block width ", m_d);
        prepareWork(K);
        const std::size_t kd = std::size_t(K) * m_d;
        m_heldK = K;
        m_heldBlock = m_blockSerial;
        m_heldGs = s.gs.gains.size() == K;
        m_heldEma = s.emaWeight.size() == K;
        m_heldC.ensure(kd, "centroids", m_device);
        m_heldNorm.ensure(std::size_t(K), "centroid norms", m_device);
        upload(m_heldC.get(), s.centroids.data(), kd, "copying centroids");
        if (m_heldGs) {
            m_gain.ensure(std::size_t(K), "gains", m_device);
            m_shape.ensure(kd, "shapes", m_device);
            upload(m_gain.get(), s.gs.gains.data(), std::size_t(K), "copying gains");
            upload(m_shape.get(), s.gs.shapes.data(), kd, "copying shapes");
        }
        if (m_heldEma) {
            m_emaW.ensure(std::size_t(K), "running weights", m_device);
            m_emaS.ensure(kd, "running sums", m_device);
            upload(m_emaW.get(), s.emaWeight.data(), std::size_t(K), "copying running weights");
            upload(m_emaS.get(), s.emaSum.data(), kd, "copying running sums");
        }
        check(kernels::launchCentroidNorms(K, m_d, m_heldC.get(), m_heldNorm.get(), m_stream), "centroid norms");
        m_heldPassed = false;
        check(cudaStreamSynchronize(m_stream), "copying centroids");
    }

    void passHeld(const AssignRequest& what, AssignStats& out) override
    {
        const auto start = std::chrono::steady_clock::now();
        use();
        requireHeld("passHeld");
        prepareWork(m_heldK);
        runPass(m_heldC.get(), m_heldNorm.get(), m_heldK, what);
        check(kernels::launchClusterTotals(m_heldK, m_d, m_count.get(), m_heldC.get(), m_scalars.get() + kRowTerms,
                                           m_stream),
              "cluster totals");
        // The one read of the iteration: its scalars.
        double* h = m_hostSums.get();
        toHost(h, m_scalars.get(), kScalars * sizeof(double), "copying totals");
        check(cudaStreamSynchronize(m_stream), "an assignment pass");
        countPass(start);
        m_heldPassed = true;
        m_heldPassShape = what.shapeSums;
        out = AssignStats{};
        takeScalars(h, what, out);
        out.emptyClusters = std::int64_t(h[kRowTerms]);
        out.reconstructionSquaredNorm = h[kRowTerms + 1];
    }

    void updateHeld(const update::Params& rule) override
    {
        const auto start = std::chrono::steady_clock::now();
        use();
        requireHeld("updateHeld");
        if (!m_heldPassed)
            throwRuntime("CUDA backend: updateHeld without a pass on the held centroids");
        const bool gs = rule.rule == update::Rule::GainShape, ema = rule.rule == update::Rule::Ema;
        if ((gs && (!m_heldGs || !m_heldPassShape)) || (ema && !m_heldEma))
            throwRuntime("CUDA backend: the ", gs ? "gain-shape" : "EMA", " update without its state or sums");
        check(kernels::launchUpdateCentroids(rule, m_heldK, m_d, m_wsum.get(), m_sumX.get(),
                                             gs ? m_sumY.get() : nullptr, ema ? m_emaW.get() : nullptr,
                                             ema ? m_emaS.get() : nullptr, gs ? m_gain.get() : nullptr,
                                             gs ? m_shape.get() : nullptr, m_heldC.get(), m_heldNorm.get(), m_stream),
              "updating centroids");
        m_heldPassed = false; // the sums belong to the centroids before the update
        // Not synchronized: the next pass on the stream waits for it, and its time lands there.
        m_stats.passSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    void heldClusterTotals(AssignStats& out) override
    {
        use();
        requireHeld("heldClusterTotals");
        double* h = m_hostSums.get();
        copyClusterTotals(m_heldK, h);
        check(cudaStreamSynchronize(m_stream), "copying cluster totals");
        takeClusterTotals(m_heldK, h, out);
    }

    void storeCentroids(CentroidState& s) override
    {
        use();
        requireHeld("storeCentroids");
        const int K = m_heldK;
        const std::size_t kd = std::size_t(K) * m_d;
        s.centroids.resize(K, m_d);
        download(s.centroids.data(), m_heldC.get(), kd);
        if (m_heldGs) {
            s.gs.gains.resize(K);
            s.gs.shapes.resize(K, m_d);
            download(s.gs.gains.data(), m_gain.get(), std::size_t(K));
            download(s.gs.shapes.data(), m_shape.get(), kd);
        }
        if (m_heldEma) {
            s.emaWeight.resize(K);
            s.emaSum.resize(K, m_d);
            download(s.emaWeight.data(), m_emaW.get(), std::size_t(K));
            download(s.emaSum.data(), m_emaS.get(), kd);
        }
        check(cudaStreamSynchronize(m_stream), "copying centroids");
    }

    void readLabels(std::span<std::int32_t> out) override
    {
        use();
        checkLabelSpan(out.size());
        toHost(out.data(), m_labels.get(), out.size() * sizeof(std::int32_t), "copying labels");
        check(cudaStreamSynchronize(m_stream), "copying labels");
    }

    void writeLabels(std::span<const std::int32_t> in) override
    {
        use();
        checkLabelSpan(in.size());
        check(cudaMemcpyAsync(m_labels.get(), in.data(), in.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                              m_stream),
              "copying labels");
        check(cudaStreamSynchronize(m_stream), "copying labels");
    }

    void subtractAssigned(const MatrixRF& C) override
    {
        use();
        if (C.cols() != m_d || C.rows() < 1)
            throwRuntime("CUDA backend: centroids ", C.rows(), "×", C.cols(), " do not match the block width ", m_d);
        if (!m_resident) {
            std::vector<std::int32_t> labels(static_cast<std::size_t>(m_n));
            readLabels(labels);
            if (m_hostRec.empty())
                m_hostRec.assign(std::size_t(m_n) * m_f, 0.0f);
            for (std::int64_t i = 0; i < m_n; ++i) {
                const float* c = C.row(labels[std::size_t(i)]).data();
                float* res = m_hostRes.get() + i * m_f + m_col0;
                float* rec = m_hostRec.data() + i * m_f + m_col0;
                for (int j = 0; j < m_d; ++j) {
                    res[j] -= c[j];
                    rec[j] += c[j];
                }
            }
            return;
        }
        prepareRecon();
        m_C.ensure(std::size_t(C.size()), "centroids", m_device);
        check(cudaMemcpyAsync(m_C.get(), C.data(), std::size_t(C.size()) * sizeof(float), cudaMemcpyHostToDevice,
                              m_stream),
              "copying centroids");
        check(kernels::launchSubtractAssigned(m_res.get() + m_col0, m_rec.get() + m_col0, m_f, m_n, m_d, m_labels.get(),
                                              m_C.get(), m_stream),
              "subtracting codewords");
        check(cudaStreamSynchronize(m_stream), "subtracting codewords");
    }

    QuantMetrics reconstructionMetrics() override
    {
        use();
        if (!m_resident) {
            const Eigen::Map<const MatrixRF> X(m_hostX, m_n, m_f);
            if (m_hostRec.empty())
                return computeMetrics(X, MatrixRF::Zero(m_n, m_f));
            return computeMetrics(X, Eigen::Map<const MatrixRF>(m_hostRec.data(), m_n, m_f));
        }
        prepareRecon();
        check(kernels::launchRowMetrics(m_x.get(), m_rec.get(), m_n, m_f, m_rowTerms[0].get(), m_rowTerms[1].get(),
                                        m_rowTerms[2].get(), m_rowTerms[3].get(), m_rowTerms[4].get(),
                                        m_rowTerms[5].get(), m_stream),
              "row metrics");
        sumRowTerms(6);
        double s[6];
        toHost(s, m_scalars.get(), sizeof s, "copying metrics");
        check(cudaStreamSynchronize(m_stream), "metrics");
        QuantMetrics q;
        if (m_n == 0)
            return q;
        const double err = s[0], sqX = s[1], sqXh = s[2], gain = s[3], cosSum = s[4], cosRows = s[5];
        q.mse = err / double(m_n);
        q.nmse = sqX > 0 ? err / sqX : 0.0;
        q.gainError = gain / double(m_n);
        q.cosine = cosRows > 0 ? cosSum / cosRows : 0.0;
        q.shrinkage = sqX > 0 ? sqXh / sqX : 0.0;
        return q;
    }

private:
    void use() { check(cudaSetDevice(m_opt.device), "cudaSetDevice"); }

    template <class T> void upload(T* to, const T* from, std::size_t count, const char* what)
    {
        check(cudaMemcpyAsync(to, from, count * sizeof(T), cudaMemcpyHostToDevice, m_stream), what);
    }
    template <class T> void download(T* to, const T* from, std::size_t count)
    {
        toHost(to, from, count * sizeof(T), "copying centroids back");
    }
    // Every copy to the host goes through here, counted (CudaBackendStats::bytesToHost).
    void toHost(void* to, const void* from, std::size_t bytes, const char* what)
    {
        check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, m_stream), what);
        m_stats.bytesToHost += std::int64_t(bytes);
    }

    void requireHeld(const char* call) const
    {
        if (m_heldK == 0)
            throwRuntime("CUDA backend: ", call, " before loadCentroids");
        if (m_heldBlock != m_blockSerial)
            throwRuntime("CUDA backend: ", call, " on centroids loaded for another block");
    }

    // The pass on centroids C (K × m_d) with norms cNorm, all on the device: per chunk the GEMM and the
    // argmax, then the per-cluster sums and the row terms' totals (m_scalars[0 .. kRowTerms)).
    void runPass(const float* C, const float* cNorm, int K, const AssignRequest& what)
    {
        const int D = m_d;
        const std::size_t kd = std::size_t(K) * D;
        check(cudaMemsetAsync(m_sumX.get(), 0, kd * sizeof(double), m_stream), "clearing sums");
        if (what.shapeSums)
            check(cudaMemsetAsync(m_sumY.get(), 0, kd * sizeof(double), m_stream), "clearing sums");
        check(cudaMemsetAsync(m_wsum.get(), 0, std::size_t(K) * sizeof(double), m_stream), "clearing sums");
        check(cudaMemsetAsync(m_count.get(), 0, std::size_t(K) * sizeof(long long), m_stream), "clearing sums");

        kernels::RowMetricTerms metricTerms;
        if (what.rowMetrics)
            metricTerms = {m_rowTerms[4].get(), m_rowTerms[5].get(), m_rowTerms[6].get(), m_rowTerms[7].get()};
        const float one = 1.0f, zero = 0.0f;
        for (std::int64_t r0 = 0; r0 < m_n; r0 += m_chunk) {
            const std::int64_t m = std::min(m_chunk, m_n - r0);
            const float* xb;
            std::int64_t ld;
            if (m_resident) {
                xb = m_res.get() + r0 * m_f + m_col0;
                ld = m_f;
            } else {
                stageChunk(r0, m);
                xb = m_stage.get();
                ld = D;
            }
            // Column-major view: Sᵀ (K × m) = C (K × D, stored as Cᵀ D × K) · Xᵀ (D × m, ld).
            check(cublas().sgemm(m_handle, CUBLAS_OP_T, CUBLAS_OP_N, K, int(m), D, &one, C, D, xb, int(ld), &zero,
                                 m_S.get(), K),
                  "SGEMM of rows and centroids");
            check(kernels::launchArgmaxRows(m_S.get(), K, cNorm, r0, m, m_sq.get(), wPtr(), m_labels.get(),
                                            m_rowTerms[0].get(), m_rowTerms[1].get(), m_rowTerms[2].get(),
                                            m_rowTerms[3].get(), metricTerms, m_stream),
                  "argmax");
            if (!m_resident) // the staged chunk is overwritten by the next
                accumulate(xb, ld, r0, m, what.shapeSums);
        }
        if (m_resident) // all the rows at once, now that every label is set
            accumulate(m_res.get() + m_col0, m_f, 0, m_n, what.shapeSums);
        sumRowTerms(what.rowMetrics ? kRowTerms : 4);
    }

    // W and the counts (K each) into h (2K doubles' room), enqueued.
    void copyClusterTotals(int K, double* h)
    {
        toHost(h, m_wsum.get(), std::size_t(K) * sizeof(double), "copying sums");
        toHost(h + K, m_count.get(), std::size_t(K) * sizeof(long long), "copying counts");
    }

    static void takeClusterTotals(int K, const double* h, AssignStats& out)
    {
        out.weightSum = Eigen::Map<const Eigen::VectorXd>(h, K);
        const auto* counts = reinterpret_cast<const long long*>(h + K);
        out.count.resize(K);
        for (int k = 0; k < K; ++k)
            out.count[k] = counts[k];
    }

    static void takeScalars(const double* s, const AssignRequest& what, AssignStats& out)
    {
        out.weightedError = s[0];
        out.weightedSquaredNorm = s[1];
        out.totalWeight = s[2];
        out.changed = std::int64_t(s[3]);
        out.gainErrorSum = what.rowMetrics ? s[4] : 0.0;
        out.cosineSum = what.rowMetrics ? s[5] : 0.0;
        out.cosineRows = what.rowMetrics ? std::int64_t(s[6]) : 0;
        out.squaredNormSum = what.rowMetrics ? s[7] : 0.0;
    }

    void countPass(std::chrono::steady_clock::time_point start)
    {
        ++m_stats.devicePasses;
        m_stats.passSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    const float* wPtr() const { return m_hasWeights ? m_w.get() : nullptr; }

    void checkLabelSpan(std::size_t n) const
    {
        if (std::int64_t(n) != m_n)
            throwRuntime("CUDA backend: ", n, " labels for ", m_n, " rows");
    }

    // The block columns of rows r0 .. r0+m−1 of the host residual into the staging buffer (ld = D).
    void stageChunk(std::int64_t r0, std::int64_t m)
    {
        check(cudaMemcpy2DAsync(m_stage.get(), std::size_t(m_d) * sizeof(float), m_hostRes.get() + r0 * m_f + m_col0,
                                std::size_t(m_f) * sizeof(float), std::size_t(m_d) * sizeof(float), std::size_t(m),
                                cudaMemcpyHostToDevice, m_stream),
              "copying a chunk to the device");
    }

    // Sums of rows r0 .. r0+m−1 (x: row r0) into the pass's sums, for the current labels.
    void accumulate(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t m, bool withShapeSums)
    {
        check(kernels::launchAccumulate(x, ld, r0, m, m_d, m_workK, m_tileRows, m_sharedOptin, m_labels.get(), wPtr(),
                                        m_inv.get(), m_sumX.get(), withShapeSums ? m_sumY.get() : nullptr, m_wsum.get(),
                                        m_count.get(), m_partials.get(), m_stream),
              "accumulating sums");
    }

    void prepareWork(int K)
    {
        // The chunk's score block stays in the L2 between the GEMM and the argmax; the sums' tiles follow
        // from the chunk (K and n alone), and streamed chunks are whole tiles: resident and streamed
        // rows are summed in the same order (pass_costs.h plans both).
        const std::int64_t chunk = passChunkRows(m_n, K);
        const std::int64_t tileRows = tileRowsFor(chunk);
        m_tileRows = tileRows;
        if (chunk != m_chunk || K != m_workK) {
            m_chunk = chunk;
            m_workK = K;
            m_stats.chunkRows = chunk;
            m_S.ensure(std::size_t(chunk) * K, "the score block of a chunk", m_device);
        }
        m_partials.ensure(kernels::tilePartialDoubles(m_resident ? m_n : chunk, m_d, K, m_tileRows), "per-tile sums",
                          m_device);
        if (!m_resident)
            m_stage.ensure(std::size_t(chunk) * m_d, "a streamed chunk", m_device);
        const std::size_t kd = std::size_t(K) * m_d;
        m_C.ensure(kd, "centroids", m_device);
        m_cNorm.ensure(std::size_t(K), "centroid norms", m_device);
        m_sumX.ensure(kd, "sums", m_device);
        m_sumY.ensure(kd, "shape sums", m_device);
        m_wsum.ensure(std::size_t(K), "weight sums", m_device);
        m_count.ensure(std::size_t(K), "counts", m_device);
        m_scalars.ensure(kScalars, "totals", m_device);
        m_ptrs.ensure(kRowTerms, "pointers", m_device);
        m_hostSums.ensure(2 * kd + 2 * std::size_t(K) + kScalars, "sums", m_device);
    }

    void uploadCentroids(const MatrixRF& C)
    {
        // ‖c‖² as every backend rounds it (update_rule.h's squaredNorm, as the held passes' kernels do).
        Eigen::VectorXf cNorm(C.rows());
        for (Eigen::Index k = 0; k < C.rows(); ++k)
            cNorm[k] = update::squaredNorm(C.row(k).data(), int(C.cols()));
        check(cudaMemcpyAsync(m_C.get(), C.data(), std::size_t(C.size()) * sizeof(float), cudaMemcpyHostToDevice,
                              m_stream),
              "copying centroids");
        check(cudaMemcpyAsync(m_cNorm.get(), cNorm.data(), std::size_t(C.rows()) * sizeof(float),
                              cudaMemcpyHostToDevice, m_stream),
              "copying centroid norms");
    }

    // The original rows and a zero reconstruction, made when the residual is first changed.
    void prepareRecon()
    {
        if (m_reconReady)
            return;
        const std::size_t n = std::size_t(m_n) * m_f;
        m_x.ensure(n, "the original rows", m_device);
        m_rec.ensure(n, "the reconstruction", m_device);
        check(cudaMemcpyAsync(m_x.get(), m_res.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, m_stream),
              "keeping the original rows");
        check(cudaMemsetAsync(m_rec.get(), 0, n * sizeof(float), m_stream), "clearing the reconstruction");
        m_reconReady = true;
    }

    // m_scalars[a] = Σ rows of m_rowTerms[a], a < count.
    void sumRowTerms(int count)
    {
        const double* ptrs[kRowTerms];
        for (int a = 0; a < kRowTerms; ++a)
            ptrs[a] = m_rowTerms[std::size_t(a)].get();
        m_ptrs.ensure(kRowTerms, "pointers", m_device);
        m_scalars.ensure(kScalars, "totals", m_device);
        check(cudaMemcpyAsync(m_ptrs.get(), ptrs, sizeof ptrs, cudaMemcpyHostToDevice, m_stream), "copying pointers");
        check(kernels::launchSumArrays(m_ptrs.get(), count, m_n, m_scalars.get(), m_stream), "summing rows");
    }

    CudaOptions m_opt;
    std::string m_device;
    cudaStream_t m_stream = nullptr;
    cublasHandle_t m_handle = nullptr;
    CudaBackendStats m_stats;

    const float* m_hostX = nullptr;
    std::int64_t m_n = 0;
    int m_f = 0, m_col0 = 0, m_d = 0;
    bool m_resident = true, m_hasWeights = false, m_reconReady = false;
    std::int64_t m_chunk = 0, m_tileRows = 0;
    int m_workK = 0;
    std::size_t m_sharedOptin = 0;

    DeviceArray<float> m_res, m_x, m_rec, m_w, m_sq, m_inv, m_stage, m_S, m_C, m_cNorm, m_rowsOut;
    // The held centroids of Lloyd's iterations and the rule's state.
    DeviceArray<float> m_heldC, m_heldNorm;
    DeviceArray<double> m_gain, m_shape, m_emaW, m_emaS;
    int m_heldK = 0;
    std::int64_t m_blockSerial = 0, m_heldBlock = -1;
    bool m_heldGs = false, m_heldEma = false, m_heldPassed = false, m_heldPassShape = false;
    DeviceArray<std::int32_t> m_labels;
    DeviceArray<std::int64_t> m_idx;
    DeviceArray<double> m_sumX, m_sumY, m_wsum, m_scalars, m_partials;
    DeviceArray<long long> m_count;
    DeviceArray<const double*> m_ptrs;
    // Row terms summed per pass; the scalars are their sums, then the cluster totals' two.
    static constexpr int kRowTerms = 8;
    static constexpr int kScalars = kRowTerms + 2;
    DeviceArray<double> m_rowTerms[kRowTerms];
    PinnedArray<float> m_hostRes;
    PinnedArray<double> m_hostSums;
    std::vector<float> m_hostRec;
};

} // namespace

std::unique_ptr<ClusterBackend> makeCudaBackend(const CudaOptions& options)
{
    return std::make_unique<CudaBackend>(options);
}

const CudaBackendStats* cudaStats(const ClusterBackend& backend)
{
    const auto* b = dynamic_cast<const CudaBackend*>(&backend);
    return b ? &b->stats() : nullptr;
}

} // namespace gsrq::gpu
