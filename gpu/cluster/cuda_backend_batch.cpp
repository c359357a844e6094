// The CUDA backend's members (cuda_backend_impl.h): several blocks of one width selected together and
// their Lloyd iterations run as one. A batched pass is one batched SGEMM and one argmax per chunk, one
// launch of tile sums and its reduction, one sum of the row terms and one of the cluster totals for
// every active member, and one read of their scalars; a batched update is one launch. Each member's
// arithmetic after its scores is that of its pass alone, in the same order (the same tiles, the same
// trees). Its scores come from cuBLAS's batched SGEMM, whose kernel on a device may round them
// differently in the last bits from the single SGEMM's, as two devices' SGEMMs may (the emulator's are
// the same products), so a row within rounding of a tie may take the other label.

#include "core/base/error.h"
#include "gpu/cluster/cuda_backend_impl.h"

#include <algorithm>
#include <cstdint>

namespace gsrq::gpu::detail {

int CudaBackend::batchCapacity(int dim, int k) const
{
    if (!m_resident || m_n == 0 || dim < 1 || k < 1)
        return 1; // streamed rows: one block at a time
    // What each member beyond the first adds, for blocks of `dim` columns and k codewords: its per-row
    // arrays, its tile partials, its share of the score blocks (a batch keeps the total of one
    // block's), its sums, and its held centroids with GSKM's and the EMA's state.
    const std::size_t K = std::size_t(k), kd = K * std::size_t(dim);
    const std::int64_t tileRows = tileRowsFor(passChunkRows(m_n, k));
    const std::size_t member = std::size_t(m_n) * kPerRowBytes +
                               kernels::tilePartialDoubles(m_n, dim, k, tileRows) * sizeof(double) +
                               std::size_t(256) * K * sizeof(float) + // the 256-row floor of a member's score block
                               kd * 2 * sizeof(double) + K * (sizeof(double) + sizeof(long long)) +
                               kd * (sizeof(float) + 2 * sizeof(double)) + K * (sizeof(float) + 2 * sizeof(double));
    std::size_t freeB = 0, totalB = 0;
    if (cudaSetDevice(m_opt.device) != cudaSuccess || cudaMemGetInfo(&freeB, &totalB) != cudaSuccess)
        return 1;
    const double spare = m_opt.memoryFraction * double(freeB) - double(kBatchReserve);
    return int(std::clamp(1.0 + spare / double(member), 1.0, double(kMaxMembers)));
}

void CudaBackend::selectBlocks(std::span<const int> cols, int dim, float epsilon)
{
    const Timed timed{m_stats.selectSeconds};
    use();
    const int B = int(cols.size());
    if (B < 1 || B > kMaxMembers || (B > 1 && !m_resident))
        throwRuntime("CUDA backend: ", B, " blocks at once; this binding takes 1 to ", m_resident ? kMaxMembers : 1);
    for (int c : cols)
        if (c < 0 || dim < 1 || c + dim > m_f)
            throwRuntime("CUDA backend: block [", c, ", ", c + dim, ") outside the ", m_f, " features bound");
    const int stride = B > 1 ? cols[1] - cols[0] : 0;
    for (int b = 1; b < B; ++b)
        if (cols[std::size_t(b)] != cols[0] + b * stride)
            throwRuntime("CUDA backend: the blocks of a batch must be evenly spaced");
    m_cols.assign(cols.begin(), cols.end());
    m_members = B;
    m_cur = 0;
    m_colStride = stride;
    m_d = dim;
    ++m_blockSerial;
    m_chunk = 0; // chunk size depends on K: chosen at the first pass
    m_heldK = 0;
    m_held.assign(std::size_t(B), Held{});
    const std::size_t rows = std::size_t(B) * std::size_t(m_n);
    m_sq.ensure(rows, "row norms", m_device);
    m_inv.ensure(rows, "inverse row norms", m_device);
    m_labels.ensure(rows, "labels", m_device);
    for (auto& a : m_rowTerms)
        a.ensure(rows, "per-row sums", m_device);
    if (m_resident) {
        for (int b = 0; b < B; ++b)
            check(kernels::launchRowNorms(m_res.get() + cols[std::size_t(b)], m_f, m_n, dim, epsilon,
                                          m_sq.get() + rowSlot(b), m_inv.get() + rowSlot(b), m_stream),
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
    check(cudaMemsetAsync(m_labels.get(), 0xff, rows * sizeof(std::int32_t), m_stream), "resetting labels");
    check(cudaStreamSynchronize(m_stream), "selecting a block");
}

void CudaBackend::focusMember(int member)
{
    if (member < 0 || member >= m_members)
        throwRuntime("CUDA backend: member ", member, " of ", m_members, " selected blocks");
    m_cur = member;
}

kernels::Members CudaBackend::uploadMembers(std::span<const int> active, DeviceArray<int>& to, std::vector<int>& host)
{
    for (int b : active)
        if (b < 0 || b >= m_members)
            throwRuntime("CUDA backend: member ", b, " of ", m_members, " selected blocks");
    to.ensure(std::size_t(kMaxMembers), "a batch's members", m_device);
    if (!std::equal(active.begin(), active.end(), host.begin(), host.end())) {
        host.assign(active.begin(), active.end());
        upload(to.get(), host.data(), host.size(), "copying a batch's members");
    }
    kernels::Members m;
    m.active = to.get();
    m.count = int(active.size());
    m.rowStride = m_n;
    m.colStride = m_colStride;
    m.scoreStride = m_batchChunk * m_heldK;
    m.partialStride = std::int64_t(kernels::tilePartialDoubles(m_n, m_d, m_heldK, m_tileRows));
    m.scalarStride = kScalars;
    return m;
}

void CudaBackend::passHeldBatch(std::span<const int> active, const AssignRequest& what, std::span<AssignStats> out)
{
    if (out.size() != active.size())
        throwRuntime("CUDA backend: ", out.size(), " results for ", active.size(), " members");
    if (m_members == 1) { // one block: the single pass
        ClusterBackend::passHeldBatch(active, what, out);
        return;
    }
    if (active.empty())
        return;
    const auto start = std::chrono::steady_clock::now();
    use();
    for (int b : active) {
        if (b < 0 || b >= m_members)
            throwRuntime("CUDA backend: member ", b, " of ", m_members, " selected blocks");
        requireHeldOf(b, "passHeldBatch");
    }
    runPassBatch(active, what);
    double* h = m_hostSums.get();
    // The one read of the iteration: every member's scalars.
    toHost(h, m_scalars.get(), std::size_t(m_members) * kScalars * sizeof(double), "copying totals");
    check(cudaStreamSynchronize(m_stream), "an assignment pass");
    countPass(start);
    if (active.size() > 1)
        ++m_stats.batchedPasses;
    m_stats.mostMembers = std::max(m_stats.mostMembers, int(active.size()));
    for (std::size_t i = 0; i < active.size(); ++i) {
        const int b = active[i];
        Held& held = m_held[std::size_t(b)];
        held.passed = true;
        held.passShape = what.shapeSums;
        const double* s = h + std::size_t(b) * kScalars;
        out[i] = AssignStats{};
        takeScalars(s, what, out[i]);
        out[i].emptyClusters = std::int64_t(s[kRowTerms]);
        out[i].reconstructionSquaredNorm = s[kRowTerms + 1];
    }
}

void CudaBackend::runPassBatch(std::span<const int> active, const AssignRequest& what)
{
    const int K = m_heldK, D = m_d, count = int(active.size());
    prepareWork(K);
    const kernels::Members members = uploadMembers(active, m_passMembers, m_passMembersHost);
    const std::size_t kd = std::size_t(K) * D, B = std::size_t(m_members);
    // Every member's sums cleared (B × (K × D) doubles: a few MiB, less than a launch per member), so
    // none but this pass's members has the sums of a pass on its held centroids.
    for (Held& held : m_held)
        held.passed = false;
    check(cudaMemsetAsync(m_sumX.get(), 0, B * kd * sizeof(double), m_stream), "clearing sums");
    if (what.shapeSums)
        check(cudaMemsetAsync(m_sumY.get(), 0, B * kd * sizeof(double), m_stream), "clearing sums");
    check(cudaMemsetAsync(m_wsum.get(), 0, B * K * sizeof(double), m_stream), "clearing sums");
    check(cudaMemsetAsync(m_count.get(), 0, B * K * sizeof(long long), m_stream), "clearing sums");

    const bool fused = fusedFor(K, m_res.get() + m_cols[0], m_f, members.colStride);
    // The batched SGEMM's operands, chunk after chunk: member b's centroids, its block of the chunk's
    // rows and its score block; made again only when the members or the buffers change (a copy from
    // the host would otherwise wait on the update before every pass).
    const std::int64_t chunks = (m_n + m_batchChunk - 1) / m_batchChunk;
    const std::size_t operands = std::size_t(chunks) * std::size_t(count);
    std::vector<std::uintptr_t> key = {std::uintptr_t(m_blockSerial), std::uintptr_t(m_heldC.get()),
                                       std::uintptr_t(m_S.get()),     std::uintptr_t(m_res.get()),
                                       std::uintptr_t(m_batchChunk),  std::uintptr_t(K)};
    key.insert(key.end(), active.begin(), active.end());
    if (!fused && key != m_gemmKey) {
        std::vector<const float*> a(operands), x(operands);
        std::vector<float*> s(operands);
        for (std::int64_t c = 0; c < chunks; ++c)
            for (int i = 0; i < count; ++i) {
                const int b = active[std::size_t(i)];
                const std::size_t o = std::size_t(c) * std::size_t(count) + std::size_t(i);
                a[o] = m_heldC.get() + kdSlot(b);
                x[o] = m_res.get() + c * m_batchChunk * m_f + m_cols[std::size_t(b)];
                s[o] = m_S.get() + std::size_t(b) * std::size_t(members.scoreStride);
            }
        m_gemmA.ensure(operands, "SGEMM operands", m_device);
        m_gemmB.ensure(operands, "SGEMM operands", m_device);
        m_gemmC.ensure(operands, "SGEMM operands", m_device);
        upload(m_gemmA.get(), a.data(), operands, "copying SGEMM operands");
        upload(m_gemmB.get(), x.data(), operands, "copying SGEMM operands");
        upload(m_gemmC.get(), s.data(), operands, "copying SGEMM operands");
        m_gemmKey = std::move(key);
    }

    kernels::RowMetricTerms metricTerms;
    if (what.rowMetrics)
        metricTerms = {m_rowTerms[4].get(), m_rowTerms[5].get(), m_rowTerms[6].get(), m_rowTerms[7].get()};
    const float one = 1.0f, zero = 0.0f;
    if (fused) { // every member's rows in one launch, no score block
        ++m_stats.fusedPasses;
        check(kernels::launchFusedScoreArgmax(m_res.get() + m_cols[0], m_f, D, m_heldC.get(), K, m_heldNorm.get(), 0,
                                              m_n, m_sq.get(), wPtr(), m_labels.get(), m_rowTerms[0].get(),
                                              m_rowTerms[1].get(), m_rowTerms[2].get(), m_rowTerms[3].get(),
                                              metricTerms, fusedBlocks(m_n, K, count), m_stream, members),
              "fused scores and argmax");
    }
    for (std::int64_t c = 0; !fused && c < chunks; ++c) {
        const std::int64_t r0 = c * m_batchChunk, m = std::min(m_batchChunk, m_n - r0);
        const std::size_t o = std::size_t(c) * std::size_t(count);
        // Per member, column-major: Sᵀ (K × m) = C (stored as Cᵀ, D × K) · Xᵀ (D × m, ld F).
        check(cublas().sgemmBatched(m_handle, CUBLAS_OP_T, CUBLAS_OP_N, K, int(m), D, &one, m_gemmA.get() + o, D,
                                    m_gemmB.get() + o, m_f, &zero, m_gemmC.get() + o, K, count),
              "batched SGEMM of rows and centroids");
        check(kernels::launchArgmaxRows(m_S.get(), K, m_heldNorm.get(), r0, m, m_sq.get(), wPtr(), m_labels.get(),
                                        m_rowTerms[0].get(), m_rowTerms[1].get(), m_rowTerms[2].get(),
                                        m_rowTerms[3].get(), metricTerms, m_stream, members),
              "argmax");
    }
    check(kernels::launchAccumulate(m_res.get() + m_cols[0], m_f, 0, m_n, D, K, m_tileRows, m_sharedOptin,
                                    m_labels.get(), wPtr(), m_inv.get(), m_sumX.get(),
                                    what.shapeSums ? m_sumY.get() : nullptr, m_wsum.get(), m_count.get(),
                                    m_partials.get(), m_stream, members),
          "accumulating sums");
    // The row terms' first slots, a table made again only when they move.
    std::vector<const double*> table(kRowTerms);
    for (int t = 0; t < kRowTerms; ++t)
        table[std::size_t(t)] = m_rowTerms[std::size_t(t)].get();
    m_batchPtrs.ensure(kRowTerms, "pointers", m_device);
    if (table != m_batchPtrsHost) {
        m_batchPtrsHost = table;
        upload(m_batchPtrs.get(), m_batchPtrsHost.data(), kRowTerms, "copying pointers");
    }
    check(kernels::launchSumArrays(m_batchPtrs.get(), what.rowMetrics ? kRowTerms : 4, m_n, m_scalars.get(), m_stream,
                                   members),
          "summing rows");
    check(kernels::launchClusterTotals(K, D, m_count.get(), m_heldC.get(), m_scalars.get() + kRowTerms, m_stream,
                                       members),
          "cluster totals");
}

void CudaBackend::updateHeldBatch(std::span<const int> active, const update::Params& rule)
{
    if (active.empty())
        return;
    const auto start = std::chrono::steady_clock::now();
    use();
    const bool gs = rule.rule == update::Rule::GainShape, ema = rule.rule == update::Rule::Ema;
    for (int b : active) {
        if (b < 0 || b >= m_members)
            throwRuntime("CUDA backend: member ", b, " of ", m_members, " selected blocks");
        Held& held = requireHeldOf(b, "updateHeld");
        if (!held.passed)
            throwRuntime("CUDA backend: updateHeld without a pass on the held centroids");
        if ((gs && (!held.gs || !held.passShape)) || (ema && !held.ema))
            throwRuntime("CUDA backend: the ", gs ? "gain-shape" : "EMA", " update without its state or sums");
    }
    kernels::Members members;
    if (m_members > 1)
        members = uploadMembers(active, m_updateMembers, m_updateMembersHost);
    else if (active.size() != 1 || active[0] != 0)
        throwRuntime("CUDA backend: updateHeld for members of one selected block");
    check(kernels::launchUpdateCentroids(rule, m_heldK, m_d, m_wsum.get(), m_sumX.get(), gs ? m_sumY.get() : nullptr,
                                         ema ? m_emaW.get() : nullptr, ema ? m_emaS.get() : nullptr,
                                         gs ? m_gain.get() : nullptr, gs ? m_shape.get() : nullptr, m_heldC.get(),
                                         m_heldNorm.get(), m_stream, members),
          "updating centroids");
    for (int b : active)
        m_held[std::size_t(b)].passed = false; // the sums belong to the centroids before the update
    // Not synchronized: the next pass on the stream waits for it, and its time lands there.
    m_stats.passSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace gsrq::gpu::detail
