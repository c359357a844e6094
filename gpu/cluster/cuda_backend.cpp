#include "gpu/cluster/cuda_backend.h"

#include "core/base/error.h"
#include "gpu/cluster/cuda_backend_impl.h"

#include <algorithm>
#include <cstring>

namespace gsrq::gpu {

namespace detail {

namespace {

// Set aside for chunk buffers, sums and cuBLAS when deciding whether the rows fit resident.
constexpr std::size_t kWorkReserve = std::size_t(512) << 20;

} // namespace

CudaBackend::CudaBackend(const CudaOptions& o) : m_opt(o)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        throwRuntime("--backend cuda: no usable CUDA driver or device (", cudaGetErrorString(e), ")");
    if (o.device < 0 || o.device >= count)
        throwInvalid("--device ", o.device, ": this machine has ", count, count == 1 ? " CUDA device" : " CUDA devices",
                     count ? cat(" (0..", count - 1, ")") : std::string());
    check(cudaSetDevice(o.device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
    m_device = cat(prop.name, " (device ", o.device, ")");
    m_sharedOptin = prop.sharedMemPerBlockOptin;
    m_fusedDevice = o.tf32 && o.fusedArgmax && prop.major >= 8 && kernels::fusedArgmaxAvailable();
    m_multiprocessors = prop.multiProcessorCount;
    m_sharedPerSm = prop.sharedMemPerMultiprocessor;
    const Cublas& api = cublas();
    check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(api.create(&m_handle), "cublasCreate");
    check(api.setStream(m_handle, m_stream), "cublasSetStream");
    check(api.setMathMode(m_handle, o.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
}

CudaBackend::~CudaBackend()
{
    cudaSetDevice(m_opt.device);
    if (m_handle)
        cublas().destroy(m_handle);
    if (m_stream)
        cudaStreamDestroy(m_stream);
}

void CudaBackend::bind(const float* x, std::int64_t n, int features, const float* weights)
{
    bindRows(x, n, features, weights);
    selectBlock(0, features, 1e-8f);
}

void CudaBackend::bindRows(const float* x, std::int64_t n, int features, const float* weights)
{
    const Timed timed{m_stats.bindSeconds};
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
    const double budget = m_opt.memoryFraction * double(freeB);
    m_resident = !m_opt.forceStreamed && double(need) <= budget;
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
}

void CudaBackend::selectBlock(int col0, int dim, float epsilon)
{
    const int cols[1] = {col0};
    selectBlocks(cols, dim, epsilon);
}

MatrixRF CudaBackend::gatherRows(std::span<const std::int64_t> idx)
{
    const Timed timed{m_stats.startSeconds};
    use();
    for (auto r : idx)
        if (r < 0 || r >= m_n)
            throwRuntime("CUDA backend: row ", r, " outside the ", m_n, " rows bound");
    const int k = int(idx.size());
    MatrixRF out(k, m_d);
    if (!m_resident) {
        for (int i = 0; i < k; ++i)
            std::memcpy(out.row(i).data(), m_hostRes.get() + idx[std::size_t(i)] * m_f + col0(),
                        std::size_t(m_d) * sizeof(float));
        return out;
    }
    m_idx.ensure(std::size_t(k), "row indices", m_device);
    m_rowsOut.ensure(std::size_t(k) * m_d, "gathered rows", m_device);
    check(cudaMemcpyAsync(m_idx.get(), idx.data(), std::size_t(k) * sizeof(std::int64_t), cudaMemcpyHostToDevice,
                          m_stream),
          "copying row indices");
    check(kernels::launchGatherRows(m_res.get() + col0(), m_f, m_idx.get(), k, m_d, m_rowsOut.get(), m_stream),
          "gathering rows");
    toHost(out.data(), m_rowsOut.get(), std::size_t(k) * m_d * sizeof(float), "copying rows back");
    check(cudaStreamSynchronize(m_stream), "gathering rows");
    return out;
}

void CudaBackend::assignPass(const MatrixRF& C, const AssignRequest& what, AssignStats& out)
{
    const auto start = std::chrono::steady_clock::now();
    use();
    const int K = int(C.rows()), D = m_d;
    if (C.cols() != D || K < 1)
        throwRuntime("CUDA backend: centroids ", C.rows(), "×", C.cols(), " do not match the block width ", D);
    if (m_members > 1 && m_heldK != 0 && K != m_heldK)
        throwRuntime("CUDA backend: ", K, " centroids for a member of a batch of ", m_heldK);
    if (m_members > 1)
        m_heldK = K; // the members' slots are K apart
    prepareWork(K);
    uploadCentroids(C);
    m_held[std::size_t(m_cur)].passed = false; // the sums are this pass's now, not the held centroids'
    runPass(m_C.get(), m_cNorm.get(), K, what);

    // One transfer of the K × D sums and the scalars.
    const std::size_t kd = std::size_t(K) * D;
    const std::size_t sums = std::size_t(m_cur) * kd, scalars = std::size_t(m_cur) * kScalars;
    double* h = m_hostSums.get();
    toHost(h, m_sumX.get() + sums, kd * sizeof(double), "copying sums");
    if (what.shapeSums)
        toHost(h + kd, m_sumY.get() + sums, kd * sizeof(double), "copying sums");
    copyClusterTotals(K, m_cur, h + 2 * kd);
    toHost(h + 2 * kd + 2 * K, m_scalars.get() + scalars, kScalars * sizeof(double), "copying totals");
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

// ---- Lloyd's iterations on the device: the centroids and the rule's state stay there --------------

void CudaBackend::loadCentroids(const CentroidState& s)
{
    const Timed timed{m_stats.startSeconds};
    use();
    const int K = int(s.centroids.rows());
    if (s.centroids.cols() != m_d || K < 1)
        throwRuntime("CUDA backend: centroids ", s.centroids.rows(), "×", s.centroids.cols(),
                     " do not match the block width ", m_d);
    if (m_members > 1 && m_heldK != 0 && K != m_heldK)
        throwRuntime("CUDA backend: ", K, " centroids for a member of a batch of ", m_heldK);
    prepareWork(K);
    m_heldK = K;
    const std::size_t kd = std::size_t(K) * m_d, all = std::size_t(m_members);
    Held& held = m_held[std::size_t(m_cur)];
    held = Held{};
    held.block = m_blockSerial;
    held.gs = s.gs.gains.size() == K;
    held.ema = s.emaWeight.size() == K;
    // Every member's slots at once: a later member's load must not move an earlier one's.
    m_heldC.ensure(all * kd, "centroids", m_device);
    m_heldNorm.ensure(all * K, "centroid norms", m_device);
    const std::size_t ck = kSlot(m_cur), ckd = kdSlot(m_cur);
    upload(m_heldC.get() + ckd, s.centroids.data(), kd, "copying centroids");
    if (held.gs) {
        m_gain.ensure(all * K, "gains", m_device);
        m_shape.ensure(all * kd, "shapes", m_device);
        upload(m_gain.get() + ck, s.gs.gains.data(), std::size_t(K), "copying gains");
        upload(m_shape.get() + ckd, s.gs.shapes.data(), kd, "copying shapes");
    }
    if (held.ema) {
        m_emaW.ensure(all * K, "running weights", m_device);
        m_emaS.ensure(all * kd, "running sums", m_device);
        upload(m_emaW.get() + ck, s.emaWeight.data(), std::size_t(K), "copying running weights");
        upload(m_emaS.get() + ckd, s.emaSum.data(), kd, "copying running sums");
    }
    check(kernels::launchCentroidNorms(K, m_d, m_heldC.get() + ckd, m_heldNorm.get() + ck, m_stream), "centroid norms");
    check(cudaStreamSynchronize(m_stream), "copying centroids");
}

void CudaBackend::passHeld(const AssignRequest& what, AssignStats& out)
{
    const auto start = std::chrono::steady_clock::now();
    use();
    Held& held = requireHeld("passHeld");
    prepareWork(m_heldK);
    const std::size_t ckd = kdSlot(m_cur), scalars = std::size_t(m_cur) * kScalars;
    runPass(m_heldC.get() + ckd, m_heldNorm.get() + kSlot(m_cur), m_heldK, what);
    check(kernels::launchClusterTotals(m_heldK, m_d, m_count.get() + kSlot(m_cur), m_heldC.get() + ckd,
                                       m_scalars.get() + scalars + kRowTerms, m_stream),
          "cluster totals");
    // The one read of the iteration: its scalars.
    double* h = m_hostSums.get();
    toHost(h, m_scalars.get() + scalars, kScalars * sizeof(double), "copying totals");
    check(cudaStreamSynchronize(m_stream), "an assignment pass");
    countPass(start);
    held.passed = true;
    held.passShape = what.shapeSums;
    out = AssignStats{};
    takeScalars(h, what, out);
    out.emptyClusters = std::int64_t(h[kRowTerms]);
    out.reconstructionSquaredNorm = h[kRowTerms + 1];
}

void CudaBackend::updateHeld(const update::Params& rule)
{
    const int cur = m_cur;
    updateHeldBatch(std::span<const int>(&cur, 1), rule);
}

void CudaBackend::heldClusterTotals(AssignStats& out)
{
    const Timed timed{m_stats.readSeconds};
    use();
    requireHeld("heldClusterTotals");
    double* h = m_hostSums.get();
    copyClusterTotals(m_heldK, m_cur, h);
    check(cudaStreamSynchronize(m_stream), "copying cluster totals");
    takeClusterTotals(m_heldK, h, out);
}

void CudaBackend::storeCentroids(CentroidState& s)
{
    const Timed timed{m_stats.readSeconds};
    use();
    const Held& held = requireHeld("storeCentroids");
    const int K = m_heldK;
    const std::size_t kd = std::size_t(K) * m_d, ck = kSlot(m_cur), ckd = kdSlot(m_cur);
    s.centroids.resize(K, m_d);
    download(s.centroids.data(), m_heldC.get() + ckd, kd);
    if (held.gs) {
        s.gs.gains.resize(K);
        s.gs.shapes.resize(K, m_d);
        download(s.gs.gains.data(), m_gain.get() + ck, std::size_t(K));
        download(s.gs.shapes.data(), m_shape.get() + ckd, kd);
    }
    if (held.ema) {
        s.emaWeight.resize(K);
        s.emaSum.resize(K, m_d);
        download(s.emaWeight.data(), m_emaW.get() + ck, std::size_t(K));
        download(s.emaSum.data(), m_emaS.get() + ckd, kd);
    }
    check(cudaStreamSynchronize(m_stream), "copying centroids");
}

void CudaBackend::readLabels(std::span<std::int32_t> out)
{
    const Timed timed{m_stats.readSeconds};
    use();
    checkLabelSpan(out.size());
    downloadLabels(out.data());
}

void CudaBackend::downloadLabels(std::int32_t* out)
{
    toHost(out, m_labels.get() + rowSlot(m_cur), std::size_t(m_n) * sizeof(std::int32_t), "copying labels");
    check(cudaStreamSynchronize(m_stream), "copying labels");
}

void CudaBackend::writeLabels(std::span<const std::int32_t> in)
{
    const Timed timed{m_stats.startSeconds};
    use();
    checkLabelSpan(in.size());
    check(cudaMemcpyAsync(m_labels.get() + rowSlot(m_cur), in.data(), in.size() * sizeof(std::int32_t),
                          cudaMemcpyHostToDevice, m_stream),
          "copying labels");
    check(cudaStreamSynchronize(m_stream), "copying labels");
}

void CudaBackend::subtractAssigned(const MatrixRF& C)
{
    const Timed timed{m_stats.residualSeconds};
    use();
    if (C.cols() != m_d || C.rows() < 1)
        throwRuntime("CUDA backend: centroids ", C.rows(), "×", C.cols(), " do not match the block width ", m_d);
    if (!m_resident) {
        std::vector<std::int32_t> labels(static_cast<std::size_t>(m_n));
        downloadLabels(labels.data());
        if (m_hostRec.empty())
            m_hostRec.assign(std::size_t(m_n) * m_f, 0.0f);
        for (std::int64_t i = 0; i < m_n; ++i) {
            const float* c = C.row(labels[std::size_t(i)]).data();
            float* res = m_hostRes.get() + i * m_f + col0();
            float* rec = m_hostRec.data() + i * m_f + col0();
            for (int j = 0; j < m_d; ++j) {
                res[j] -= c[j];
                rec[j] += c[j];
            }
        }
        return;
    }
    prepareRecon();
    m_C.ensure(std::size_t(C.size()), "centroids", m_device);
    check(cudaMemcpyAsync(m_C.get(), C.data(), std::size_t(C.size()) * sizeof(float), cudaMemcpyHostToDevice, m_stream),
          "copying centroids");
    check(kernels::launchSubtractAssigned(m_res.get() + col0(), m_rec.get() + col0(), m_f, m_n, m_d,
                                          m_labels.get() + rowSlot(m_cur), m_C.get(), m_stream),
          "subtracting codewords");
    check(cudaStreamSynchronize(m_stream), "subtracting codewords");
}

QuantMetrics CudaBackend::reconstructionMetrics()
{
    const Timed timed{m_stats.residualSeconds};
    use();
    if (!m_resident) {
        const Eigen::Map<const MatrixRF> X(m_hostX, m_n, m_f);
        if (m_hostRec.empty())
            return computeMetrics(X, MatrixRF::Zero(m_n, m_f));
        return computeMetrics(X, Eigen::Map<const MatrixRF>(m_hostRec.data(), m_n, m_f));
    }
    prepareRecon();
    check(kernels::launchRowMetrics(m_x.get(), m_rec.get(), m_n, m_f, m_rowTerms[0].get(), m_rowTerms[1].get(),
                                    m_rowTerms[2].get(), m_rowTerms[3].get(), m_rowTerms[4].get(), m_rowTerms[5].get(),
                                    m_stream),
          "row metrics");
    sumRowTerms(6, 0);
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

// ---- private ------------------------------------------------------------------------------------

// Every copy to the host goes through here, counted (CudaBackendStats::bytesToHost).
void CudaBackend::toHost(void* to, const void* from, std::size_t bytes, const char* what)
{
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, m_stream), what);
    m_stats.bytesToHost += std::int64_t(bytes);
}

CudaBackend::Held& CudaBackend::requireHeldOf(int member, const char* call)
{
    Held& held = m_held[std::size_t(member)];
    if (m_heldK == 0 || held.block < 0)
        throwRuntime("CUDA backend: ", call, " before loadCentroids");
    if (held.block != m_blockSerial)
        throwRuntime("CUDA backend: ", call, " on centroids loaded for another block");
    return held;
}

// The focused member's pass on centroids C (K × m_d) with norms cNorm, all on the device: per chunk the
// GEMM and the argmax, then the per-cluster sums and the row terms' totals (its scalars' first kRowTerms).
void CudaBackend::runPass(const float* C, const float* cNorm, int K, const AssignRequest& what)
{
    const int D = m_d, b = m_cur;
    const std::size_t kd = std::size_t(K) * D;
    const std::int64_t rows = rowSlot(b);
    double* sumX = m_sumX.get() + std::size_t(b) * kd;
    double* sumY = m_sumY.get() + std::size_t(b) * kd;
    double* wsum = m_wsum.get() + std::size_t(b) * K;
    long long* count = m_count.get() + std::size_t(b) * K;
    check(cudaMemsetAsync(sumX, 0, kd * sizeof(double), m_stream), "clearing sums");
    if (what.shapeSums)
        check(cudaMemsetAsync(sumY, 0, kd * sizeof(double), m_stream), "clearing sums");
    check(cudaMemsetAsync(wsum, 0, std::size_t(K) * sizeof(double), m_stream), "clearing sums");
    check(cudaMemsetAsync(count, 0, std::size_t(K) * sizeof(long long), m_stream), "clearing sums");

    kernels::RowMetricTerms metricTerms;
    if (what.rowMetrics)
        metricTerms = {m_rowTerms[4].get() + rows, m_rowTerms[5].get() + rows, m_rowTerms[6].get() + rows,
                       m_rowTerms[7].get() + rows};
    const float one = 1.0f, zero = 0.0f;
    float* const sq = m_sq.get() + rows;
    float* const inv = m_inv.get() + rows;
    std::int32_t* const labels = m_labels.get() + rows;
    const bool fused = fusedFor(K, m_resident ? m_res.get() + col0() : m_stage.get(), m_resident ? m_f : D, 0);
    if (fused)
        ++m_stats.fusedPasses;
    // Labels and row terms of rows r0 .. r0+m−1 (xb: row r0's block, ld): the fused kernel, or the GEMM
    // and the argmax.
    auto score = [&](const float* xb, std::int64_t ld, std::int64_t r0, std::int64_t m) {
        if (fused) {
            check(kernels::launchFusedScoreArgmax(xb, ld, D, C, K, cNorm, r0, m, sq, wPtr(), labels,
                                                  m_rowTerms[0].get() + rows, m_rowTerms[1].get() + rows,
                                                  m_rowTerms[2].get() + rows, m_rowTerms[3].get() + rows, metricTerms,
                                                  fusedBlocks(m, K, 1), m_stream),
                  "fused scores and argmax");
            return;
        }
        // Column-major view: Sᵀ (K × m) = C (K × D, stored as Cᵀ D × K) · Xᵀ (D × m, ld).
        check(cublas().sgemm(m_handle, CUBLAS_OP_T, CUBLAS_OP_N, K, int(m), D, &one, C, D, xb, int(ld), &zero,
                             m_S.get(), K),
              "SGEMM of rows and centroids");
        check(kernels::launchArgmaxRows(m_S.get(), K, cNorm, r0, m, sq, wPtr(), labels, m_rowTerms[0].get() + rows,
                                        m_rowTerms[1].get() + rows, m_rowTerms[2].get() + rows,
                                        m_rowTerms[3].get() + rows, metricTerms, m_stream),
              "argmax");
    };
    // Resident rows with the fused kernel: all of them in one launch (no score block to keep in the L2).
    const std::int64_t step = fused && m_resident ? m_n : m_chunk;
    for (std::int64_t r0 = 0; r0 < m_n; r0 += step) {
        const std::int64_t m = std::min(step, m_n - r0);
        const float* xb;
        std::int64_t ld;
        if (m_resident) {
            xb = m_res.get() + r0 * m_f + col0();
            ld = m_f;
        } else {
            stageChunk(r0, m);
            xb = m_stage.get();
            ld = D;
        }
        score(xb, ld, r0, m);
        if (!m_resident) // the staged chunk is overwritten by the next
            check(kernels::launchAccumulate(xb, ld, r0, m, D, m_workK, m_tileRows, m_sharedOptin, labels, wPtr(), inv,
                                            sumX, what.shapeSums ? sumY : nullptr, wsum, count, m_partials.get(),
                                            m_stream),
                  "accumulating sums");
    }
    if (m_resident) // all the rows at once, now that every label is set
        check(kernels::launchAccumulate(m_res.get() + col0(), m_f, 0, m_n, D, m_workK, m_tileRows, m_sharedOptin,
                                        labels, wPtr(), inv, sumX, what.shapeSums ? sumY : nullptr, wsum, count,
                                        m_partials.get(), m_stream),
              "accumulating sums");
    sumRowTerms(what.rowMetrics ? kRowTerms : 4, b);
}

bool CudaBackend::fusedFor(int K, const float* x, std::int64_t ld, std::int64_t colStride) const
{
    return m_fusedDevice && fusedArgmaxFits(K, m_d, m_sharedOptin) && std::uintptr_t(x) % 16 == 0 && ld % 4 == 0 &&
           colStride % 4 == 0;
}

int CudaBackend::fusedBlocks(std::int64_t m, int K, int members) const
{
    const int blocks =
        fusedArgmaxGrid(m, m_d, members, m_multiprocessors, fusedArgmaxBlocksPerSm(K, m_d, m_sharedPerSm));
    return m_opt.fusedBlocks > 0 ? std::min(blocks, m_opt.fusedBlocks) : blocks;
}

// Member b's W and counts (K each) into h (2K doubles' room), enqueued.
void CudaBackend::copyClusterTotals(int K, int b, double* h)
{
    toHost(h, m_wsum.get() + std::size_t(b) * K, std::size_t(K) * sizeof(double), "copying sums");
    toHost(h + K, m_count.get() + std::size_t(b) * K, std::size_t(K) * sizeof(long long), "copying counts");
}

void CudaBackend::takeClusterTotals(int K, const double* h, AssignStats& out)
{
    out.weightSum = Eigen::Map<const Eigen::VectorXd>(h, K);
    const auto* counts = reinterpret_cast<const long long*>(h + K);
    out.count.resize(K);
    for (int k = 0; k < K; ++k)
        out.count[k] = counts[k];
}

void CudaBackend::takeScalars(const double* s, const AssignRequest& what, AssignStats& out)
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

void CudaBackend::countPass(std::chrono::steady_clock::time_point start)
{
    ++m_stats.devicePasses;
    m_stats.passSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CudaBackend::checkLabelSpan(std::size_t n) const
{
    if (std::int64_t(n) != m_n)
        throwRuntime("CUDA backend: ", n, " labels for ", m_n, " rows");
}

// The block columns of rows r0 .. r0+m−1 of the host residual into the staging buffer (ld = D).
void CudaBackend::stageChunk(std::int64_t r0, std::int64_t m)
{
    check(cudaMemcpy2DAsync(m_stage.get(), std::size_t(m_d) * sizeof(float), m_hostRes.get() + r0 * m_f + col0(),
                            std::size_t(m_f) * sizeof(float), std::size_t(m_d) * sizeof(float), std::size_t(m),
                            cudaMemcpyHostToDevice, m_stream),
          "copying a chunk to the device");
}

void CudaBackend::prepareWork(int K)
{
    // The chunk's score block stays in the L2 between the GEMM and the argmax; the sums' tiles follow
    // from the chunk (K and n alone), and streamed chunks are whole tiles: resident and streamed
    // rows are summed in the same order (pass_costs.h plans both). A batch's members share the L2:
    // their chunk is a member's share of it (the sums' tiles stay those of one member alone).
    const std::int64_t chunk = passChunkRows(m_n, K);
    const std::int64_t tileRows = tileRowsFor(chunk);
    const std::size_t B = std::size_t(m_members);
    m_tileRows = tileRows;
    if (chunk != m_chunk || K != m_workK) {
        m_chunk = chunk;
        m_workK = K;
        m_stats.chunkRows = chunk;
    }
    m_batchChunk = m_members > 1 ? passChunkRows(m_n, K * m_members) : chunk;
    m_S.ensure(std::max(std::size_t(chunk), B * std::size_t(m_batchChunk)) * K, "the score block of a chunk", m_device);
    m_partials.ensure(B * kernels::tilePartialDoubles(m_resident ? m_n : chunk, m_d, K, m_tileRows), "per-tile sums",
                      m_device);
    if (!m_resident)
        m_stage.ensure(std::size_t(chunk) * m_d, "a streamed chunk", m_device);
    const std::size_t kd = std::size_t(K) * m_d;
    m_C.ensure(kd, "centroids", m_device);
    m_cNorm.ensure(std::size_t(K), "centroid norms", m_device);
    m_sumX.ensure(B * kd, "sums", m_device);
    m_sumY.ensure(B * kd, "shape sums", m_device);
    m_wsum.ensure(B * K, "weight sums", m_device);
    m_count.ensure(B * K, "counts", m_device);
    m_scalars.ensure(B * kScalars, "totals", m_device);
    m_ptrs.ensure(kRowTerms, "pointers", m_device);
    m_hostSums.ensure(std::max(2 * kd + 2 * std::size_t(K) + kScalars, B * kScalars), "sums", m_device);
}

void CudaBackend::uploadCentroids(const MatrixRF& C)
{
    // ‖c‖² as every backend rounds it (update_rule.h's squaredNorm, as the held passes' kernels do).
    Eigen::VectorXf cNorm(C.rows());
    for (Eigen::Index k = 0; k < C.rows(); ++k)
        cNorm[k] = update::squaredNorm(C.row(k).data(), int(C.cols()));
    check(cudaMemcpyAsync(m_C.get(), C.data(), std::size_t(C.size()) * sizeof(float), cudaMemcpyHostToDevice, m_stream),
          "copying centroids");
    check(cudaMemcpyAsync(m_cNorm.get(), cNorm.data(), std::size_t(C.rows()) * sizeof(float), cudaMemcpyHostToDevice,
                          m_stream),
          "copying centroid norms");
}

// The original rows and a zero reconstruction, made when the residual is first changed.
void CudaBackend::prepareRecon()
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

// Member b's scalars [0, count) = Σ rows of its m_rowTerms slots.
void CudaBackend::sumRowTerms(int count, int b)
{
    const double* ptrs[kRowTerms];
    for (int a = 0; a < kRowTerms; ++a)
        ptrs[a] = m_rowTerms[std::size_t(a)].get() + rowSlot(b);
    m_ptrs.ensure(kRowTerms, "pointers", m_device);
    m_scalars.ensure(std::size_t(m_members) * kScalars, "totals", m_device);
    check(cudaMemcpyAsync(m_ptrs.get(), ptrs, sizeof ptrs, cudaMemcpyHostToDevice, m_stream), "copying pointers");
    check(kernels::launchSumArrays(m_ptrs.get(), count, m_n, m_scalars.get() + std::size_t(b) * kScalars, m_stream),
          "summing rows");
}

} // namespace detail

std::unique_ptr<ClusterBackend> makeCudaBackend(const CudaOptions& options)
{
    return std::make_unique<detail::CudaBackend>(options);
}

const CudaBackendStats* cudaStats(const ClusterBackend& backend)
{
    const auto* b = dynamic_cast<const detail::CudaBackend*>(&backend);
    return b ? &b->stats() : nullptr;
}

} // namespace gsrq::gpu
