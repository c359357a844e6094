#include "gpu/decode/decode.h"

#include "core/decode/decode_bench.h"

#include "core/base/error.h"
#include "core/base/stats.h"
#include "core/lm/rope.h"
#include "gpu/decode/cuda_events.h"
#include "gpu/decode/decode_kernels.h"
#include "gpu/decode/decode_math.h"
#include "gpu/device/cuda_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace gsrq::gpu {

namespace {

using detail::check;
using detail::DeviceArray;
using detail::Events;

std::uint16_t halfBits(float v)
{
    return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(v));
}

} // namespace

class CudaDecodeCache final : public DeviceDecodeCache {
public:
    CudaDecodeCache(const DecodeCacheConfig& config, const Codebooks& keyBooks, const Codebooks& valueBooks);
    ~CudaDecodeCache() override;
    std::int64_t tokens() const override;
    const DecodeCacheConfig& config() const override;
    std::pair<Codes, Codes> append(const MatrixRF& keys, const MatrixRF& values) override;
    void appendRandom(std::int64_t tokens, std::uint64_t seed) override;
    PackedCodes keyCodes(int sequence) const override;
    PackedCodes valueCodes(int sequence) const override;
    MatrixRF fp16Keys(int sequence) const override;
    MatrixRF fp16Values(int sequence) const override;
    const Codebooks& keyBooks16() const override;
    const Codebooks& valueBooks16() const override;
    void setQuery(const MatrixRF& q, std::int64_t positionOffset) override;
    void enqueue(DecodePath path) override;
    MatrixRF output() override;
    MatrixRF decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset) override;
    SplitPlan plan(DecodePath path) const override;
    std::string pathProblem(DecodePath path) const override;
    bool paperUsesBins() const override;
    double timeAppend(int reps) override;
    void synchronize() override;
    void* stream() const override;

    struct Impl;

private:
    std::unique_ptr<Impl> m;
};

struct CudaDecodeCache::Impl {
    DecodeCacheConfig cfg;
    kernels::DecodeDims dims;
    std::string device;
    int sms = 0;
    std::size_t sharedOptin = 0;
    cudaStream_t stream = nullptr;
    bool ownStream = false;
    Codebooks kb16, vb16;
    DeviceArray<std::uint8_t> kc, vc;
    DeviceArray<std::uint16_t> kbh, vbh, k16, v16;
    DeviceArray<float> kb32T, vb32T, kn, vn, turns, q, out, acc, pm, pl, tables, weights, stageK, stageV, stageOut;
    DeviceArray<std::int32_t> codesOut;
    DeviceArray<unsigned> done;  // finished blocks per (sequence, KV head) of a one-launch merge, zero between steps
    DeviceArray<unsigned> order; // the lookup step's tickets and per-pair counts, zero between steps
    std::int64_t tokens = 0, positionOffset = 0;
    bool haveQuery = false;

    ~Impl()
    {
        if (stream && ownStream) {
            cudaSetDevice(cfg.device);
            cudaStreamDestroy(stream);
        }
    }
    void use() const { check(cudaSetDevice(cfg.device), "cudaSetDevice"); }
    std::size_t codeBytes() const
    {
        return std::size_t(cfg.batch) * dims.subspaces() * std::size_t(cfg.capacity) * dims.bytesPerToken;
    }
    std::size_t fp16Elements() const
    {
        return std::size_t(cfg.batch) * cfg.shape.kvHeads * std::size_t(cfg.capacity) * cfg.shape.headDim;
    }
    // The step's dimensions with a split plan.
    kernels::DecodeDims dimsWith(const SplitPlan& p) const
    {
        kernels::DecodeDims d = dims;
        d.tokens = tokens;
        d.positionOffset = positionOffset;
        d.splits = p.splits;
        d.tokensPerSplit = p.tokensPerSplit;
        return d;
    }
    // The split-K plan of the paper path: the binned one (with bins) takes longer splits, as its
    // per-split bins cost more than the split-K partials.
    kernels::DecodeDims plannedDims(bool bins) const
    {
        kernels::DecodeDims d = dimsWith(
            planPaperSplits(tokens, cfg.batch, cfg.shape, dims.dim, dims.stages, dims.k, bins, sms, sharedOptin));
        d.ropeWalk = !bins || paperBinsWalk(d.group(), d.subspacesPerHead(), d.stages, d.k, sharedOptin);
        return d;
    }
    kernels::DecodeDims stepDims(DecodePath path) const
    {
        if (path == DecodePath::Fp16)
            return dimsWith(planFp16Splits(tokens, cfg.batch, cfg.shape.kvHeads, cfg.shape.headDim,
                                           cfg.shape.heads / cfg.shape.kvHeads, sms, sharedOptin));
        if (path == DecodePath::Lookup)
            return dimsWith(planLookupSplits(tokens, cfg.batch, cfg.shape.heads, cfg.shape.heads / cfg.shape.kvHeads,
                                             dims.subspacesPerHead(), dims.stages, dims.k, sms, sharedOptin));
        return plannedDims(path == DecodePath::Paper && paperBinsFit());
    }
    // The paper path takes values through per-codeword weights when its bins and the combine's merged
    // weights fit in a block's shared memory (planned as the binned paths plan their splits); else it
    // sums each token's value codewords.
    bool paperBinsFit() const
    {
        const kernels::DecodeDims d = plannedDims(true);
        return std::max(kernels::paperBinsSharedBytes(d), kernels::lookupCombineSharedBytes(d)) <= sharedOptin;
    }
    void uploadBooks(const Codebooks& cb, DeviceArray<std::uint16_t>& h, DeviceArray<float>& f,
                     DeviceArray<float>& norms, const char* what)
    {
        std::vector<std::uint16_t> bits(cb.data.size());
        for (std::size_t i = 0; i < bits.size(); ++i)
            bits[i] = halfBits(cb.data[i]);
        const std::size_t rows = std::size_t(cb.subspaces) * cb.stages * cb.k;
        std::vector<float> n(rows);
        for (std::size_t i = 0; i < rows; ++i) {
            float s = 0;
            for (int j = 0; j < cb.dim; ++j)
                s += cb.data[i * cb.dim + j] * cb.data[i * cb.dim + j];
            n[i] = s;
        }
        // FP32 copy transposed per (subspace, stage) for quantize-and-pack: [M][R][D][K].
        std::vector<float> t(cb.data.size());
        const std::size_t K = std::size_t(cb.k), D = std::size_t(cb.dim);
        for (std::size_t b = 0; b < std::size_t(cb.subspaces) * cb.stages; ++b)
            for (std::size_t k = 0; k < K; ++k)
                for (std::size_t j = 0; j < D; ++j)
                    t[(b * D + j) * K + k] = cb.data[(b * K + k) * D + j];
        h.ensure(bits.size(), what, device);
        f.ensure(t.size(), what, device);
        norms.ensure(rows, what, device);
        check(cudaMemcpy(h.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), "codebook upload");
        check(cudaMemcpy(f.get(), t.data(), t.size() * 4, cudaMemcpyHostToDevice), "codebook upload");
        check(cudaMemcpy(norms.get(), n.data(), rows * 4, cudaMemcpyHostToDevice), "codebook upload");
    }
};

CudaDecodeCache::CudaDecodeCache(const DecodeCacheConfig& config, const Codebooks& keyBooks,
                                 const Codebooks& valueBooks)
    : m(std::make_unique<Impl>())
{
    m->cfg = config;
    const DecodeShape& s = config.shape;
    if (const auto why = decodeShapeProblem(s, keyBooks.dim, keyBooks.stages, keyBooks.k); !why.empty())
        throwInvalid(why);
    checkDecodeBooks(s, keyBooks, valueBooks);
    if (config.batch < 1 || config.capacity < 1)
        throwInvalid("batch ", config.batch, " and capacity ", config.capacity, " must be positive");

    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
        throwRuntime("decode on the GPU: no usable CUDA driver or device (", cudaGetErrorString(e), ")");
    if (config.device < 0 || config.device >= count)
        throwInvalid("--device ", config.device, ": this machine has ", count,
                     count == 1 ? " CUDA device" : " CUDA devices");
    m->use();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, config.device), "cudaGetDeviceProperties");
    m->device = cat(prop.name, " (device ", config.device, ")");
    m->sms = prop.multiProcessorCount;
    m->sharedOptin = prop.sharedMemPerBlockOptin;
    if (config.stream) {
        m->stream = static_cast<cudaStream_t>(config.stream);
    } else {
        check(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate");
        m->ownStream = true;
    }

    auto& d = m->dims;
    d.batch = config.batch;
    d.heads = s.heads;
    d.kvHeads = s.kvHeads;
    d.headDim = s.headDim;
    d.dim = keyBooks.dim;
    d.stages = keyBooks.stages;
    d.k = keyBooks.k;
    d.bits = PackedCodes::bitsFor(keyBooks.k);
    d.bytesPerToken = PackedCodes::bytesFor(keyBooks.stages, d.bits);
    d.capacity = config.capacity;
    d.stagedCodes = lookupStagesCodes(d.subspacesPerHead(), d.stages, d.k, m->sharedOptin);
    d.chained = prop.major >= 9 && kernels::lookupLaunchesChainable();

    m->kb16 = codebooksRoundedToHalf(keyBooks);
    m->vb16 = codebooksRoundedToHalf(valueBooks);
    m->uploadBooks(keyBooks, m->kbh, m->kb32T, m->kn, "key codebooks");
    m->uploadBooks(valueBooks, m->vbh, m->vb32T, m->vn, "value codebooks");
    m->kc.ensure(m->codeBytes(), "packed key codes", m->device);
    m->vc.ensure(m->codeBytes(), "packed value codes", m->device);
    check(cudaMemset(m->kc.get(), 0, m->codeBytes()), "cudaMemset");
    check(cudaMemset(m->vc.get(), 0, m->codeBytes()), "cudaMemset");
    if (config.fp16) {
        m->k16.ensure(m->fp16Elements(), "FP16 keys", m->device);
        m->v16.ensure(m->fp16Elements(), "FP16 values", m->device);
    }
    // The FP16 kernel's and the lookup combine's finished blocks per (sequence, KV head).
    const std::size_t pairs = std::size_t(config.batch) * s.kvHeads;
    m->done.ensure(pairs, "block counters", m->device);
    check(cudaMemset(m->done.get(), 0, pairs * sizeof(unsigned)), "cudaMemset");
    // The lookup step's block tickets and its phases' counts per (sequence, KV head).
    const std::size_t counters = kernels::lookupOrderCounters(d);
    m->order.ensure(counters, "block order counters", m->device);
    check(cudaMemset(m->order.get(), 0, counters * sizeof(unsigned)), "cudaMemset");
    const auto inv = ropeInvFreq(config.ropeTheta, s.headDim);
    std::vector<float> turns;
    for (double f : inv) {
        const auto t = turnsPerPosition(f);
        turns.push_back(t.hi);
        turns.push_back(t.lo);
    }
    m->turns.ensure(turns.size(), "RoPE table", m->device);
    check(cudaMemcpy(m->turns.get(), turns.data(), turns.size() * 4, cudaMemcpyHostToDevice), "RoPE upload");
    m->out.ensure(std::size_t(config.batch) * s.heads * s.headDim, "outputs", m->device);
}

CudaDecodeCache::~CudaDecodeCache() = default;

std::unique_ptr<DeviceDecodeCache> makeDeviceDecodeCache(const DecodeCacheConfig& config, const Codebooks& keyBooks,
                                                         const Codebooks& valueBooks)
{
    return std::make_unique<CudaDecodeCache>(config, keyBooks, valueBooks);
}

std::int64_t CudaDecodeCache::tokens() const
{
    return m->tokens;
}

const DecodeCacheConfig& CudaDecodeCache::config() const
{
    return m->cfg;
}

const Codebooks& CudaDecodeCache::keyBooks16() const
{
    return m->kb16;
}

const Codebooks& CudaDecodeCache::valueBooks16() const
{
    return m->vb16;
}

void* CudaDecodeCache::stream() const
{
    return m->stream;
}

void CudaDecodeCache::synchronize()
{
    m->use();
    check(cudaStreamSynchronize(m->stream), "decode");
}

std::pair<Codes, Codes> CudaDecodeCache::append(const MatrixRF& keys, const MatrixRF& values)
{
    const auto& d = m->dims;
    const std::int64_t F = std::int64_t(d.kvHeads) * d.headDim;
    if (keys.cols() != F || values.cols() != F || keys.rows() != values.rows())
        throwInvalid("append: keys ", keys.rows(), "×", keys.cols(), " and values ", values.rows(), "×", values.cols(),
                     " must both be rows × ", F);
    if (keys.rows() % d.batch)
        throwInvalid("append: ", keys.rows(), " rows are not a whole number per sequence of the batch of ", d.batch);
    const int n = int(keys.rows() / d.batch);
    if (m->tokens + n > d.capacity)
        throwInvalid("append: the cache holds ", d.capacity, " tokens; ", m->tokens, " + ", n, " do not fit");
    if (n == 0)
        return {};
    m->use();
    const std::size_t rows = std::size_t(keys.rows()), M = std::size_t(d.subspaces()), R = std::size_t(d.stages);
    m->stageK.ensure(rows * F, "new keys", m->device);
    m->stageV.ensure(rows * F, "new values", m->device);
    m->codesOut.ensure(rows * 2 * M * R, "new codes", m->device);
    check(cudaMemcpyAsync(m->stageK.get(), keys.data(), rows * F * 4, cudaMemcpyHostToDevice, m->stream), "upload");
    check(cudaMemcpyAsync(m->stageV.get(), values.data(), rows * F * 4, cudaMemcpyHostToDevice, m->stream), "upload");
    check(kernels::launchQuantizeAppend(d, m->stageK.get(), m->stageV.get(), n, m->tokens, m->kb32T.get(), m->kn.get(),
                                        m->vb32T.get(), m->vn.get(), m->kc.get(), m->vc.get(), m->codesOut.get(),
                                        m->stream),
          "quantize-and-pack");
    if (m->cfg.fp16)
        check(kernels::launchAppendFp16(d, m->stageK.get(), m->stageV.get(), n, m->tokens, m->k16.get(), m->v16.get(),
                                        m->stream),
              "FP16 append");
    std::vector<std::int32_t> codes(rows * 2 * M * R);
    check(cudaMemcpyAsync(codes.data(), m->codesOut.get(), codes.size() * 4, cudaMemcpyDeviceToHost, m->stream),
          "download");
    check(cudaStreamSynchronize(m->stream), "quantize-and-pack");
    m->tokens += n;
    Codes ck(Eigen::Index(rows), Eigen::Index(M * R)), cv(Eigen::Index(rows), Eigen::Index(M * R));
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t c = 0; c < M * R; ++c) {
            ck(Eigen::Index(i), Eigen::Index(c)) = codes[(i * 2 + 0) * M * R + c];
            cv(Eigen::Index(i), Eigen::Index(c)) = codes[(i * 2 + 1) * M * R + c];
        }
    return {ck, cv};
}

void CudaDecodeCache::appendRandom(std::int64_t n, std::uint64_t seed)
{
    if (n < 0 || m->tokens + n > m->dims.capacity)
        throwInvalid("appendRandom: the cache holds ", m->dims.capacity, " tokens; ", m->tokens, " + ", n,
                     " do not fit");
    m->use();
    check(kernels::launchFillRandom(m->dims, m->tokens, m->tokens + n, seed, m->kc.get(), m->vc.get(),
                                    m->cfg.fp16 ? m->k16.get() : nullptr, m->cfg.fp16 ? m->v16.get() : nullptr,
                                    m->stream),
          "synthetic fill");
    check(cudaStreamSynchronize(m->stream), "synthetic fill");
    m->tokens += n;
}

namespace {

PackedCodes downloadCodes(const CudaDecodeCache::Impl& m, const std::uint8_t* base, int b)
{
    if (b < 0 || b >= m.cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m.cfg.batch);
    m.use();
    PackedCodes p;
    p.subspaces = m.dims.subspaces();
    p.stages = m.dims.stages;
    p.bits = m.dims.bits;
    p.bytesPerToken = m.dims.bytesPerToken;
    p.tokens = p.capacity = m.tokens;
    p.data.resize(std::size_t(p.subspaces) * std::size_t(p.tokens) * std::size_t(p.bytesPerToken));
    if (p.tokens == 0)
        return p;
    const std::size_t pitch = std::size_t(m.cfg.capacity) * p.bytesPerToken;
    const std::uint8_t* src = base + std::size_t(b) * p.subspaces * pitch;
    check(cudaMemcpy2D(p.data.data(), std::size_t(p.tokens) * p.bytesPerToken, src, pitch,
                       std::size_t(p.tokens) * p.bytesPerToken, std::size_t(p.subspaces), cudaMemcpyDeviceToHost),
          "code download");
    return p;
}

MatrixRF downloadFp16(const CudaDecodeCache::Impl& m, const std::uint16_t* base, int b)
{
    if (!m.cfg.fp16)
        throwInvalid("this cache keeps no FP16 copy");
    if (b < 0 || b >= m.cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m.cfg.batch);
    m.use();
    const int G = m.cfg.shape.kvHeads, d = m.cfg.shape.headDim;
    const std::size_t T = std::size_t(m.tokens);
    std::vector<std::uint16_t> h(std::size_t(G) * T * d);
    if (T) {
        const std::size_t pitch = std::size_t(m.cfg.capacity) * d * 2;
        check(cudaMemcpy2D(h.data(), T * d * 2, base + std::size_t(b) * G * m.cfg.capacity * d, pitch, T * d * 2,
                           std::size_t(G), cudaMemcpyDeviceToHost),
              "FP16 download");
    }
    MatrixRF x(Eigen::Index(T), Eigen::Index(G) * d);
    for (int g = 0; g < G; ++g)
        for (std::size_t t = 0; t < T; ++t)
            for (int j = 0; j < d; ++j)
                x(Eigen::Index(t), Eigen::Index(g) * d + j) =
                    float(Eigen::numext::bit_cast<Eigen::half>(h[(std::size_t(g) * T + t) * d + j]));
    return x;
}

} // namespace

PackedCodes CudaDecodeCache::keyCodes(int b) const
{
    return downloadCodes(*m, m->kc.get(), b);
}

PackedCodes CudaDecodeCache::valueCodes(int b) const
{
    return downloadCodes(*m, m->vc.get(), b);
}

MatrixRF CudaDecodeCache::fp16Keys(int b) const
{
    return downloadFp16(*m, m->k16.get(), b);
}

MatrixRF CudaDecodeCache::fp16Values(int b) const
{
    return downloadFp16(*m, m->v16.get(), b);
}

void CudaDecodeCache::setQuery(const MatrixRF& q, std::int64_t positionOffset)
{
    const auto& s = m->cfg.shape;
    if (q.rows() != m->cfg.batch || q.cols() != std::int64_t(s.heads) * s.headDim)
        throwInvalid("query of ", q.rows(), "×", q.cols(), "; the batch needs ", m->cfg.batch, "×",
                     std::int64_t(s.heads) * s.headDim);
    if (positionOffset < 0)
        throwInvalid("position offset ", positionOffset, " is negative");
    m->use();
    m->q.ensure(std::size_t(q.size()), "queries", m->device);
    check(cudaMemcpyAsync(m->q.get(), q.data(), std::size_t(q.size()) * 4, cudaMemcpyHostToDevice, m->stream),
          "query upload");
    check(cudaStreamSynchronize(m->stream), "query upload");
    m->positionOffset = positionOffset;
    m->haveQuery = true;
}

SplitPlan CudaDecodeCache::plan(DecodePath path) const
{
    const auto d = m->stepDims(path);
    return {d.splits, d.tokensPerSplit};
}

bool CudaDecodeCache::paperUsesBins() const
{
    return m->paperBinsFit();
}

std::string CudaDecodeCache::pathProblem(DecodePath path) const
{
    if (path == DecodePath::Fp16 && !m->cfg.fp16)
        return "this cache keeps no FP16 copy";
    if (path == DecodePath::Paper && m->positionOffset + m->tokens >= kMaxRopePosition)
        return cat("positions up to ", m->positionOffset + m->tokens, ": the paper path's RoPE takes positions below ",
                   kMaxRopePosition);
    if (path == DecodePath::Lookup) {
        const auto d = m->stepDims(path);
        const std::size_t need = kernels::lookupSharedBytes(d);
        if (need > m->sharedOptin)
            return cat("the lookup path's blocks need ", need / 1024, " KiB of shared memory per block; ", m->device,
                       " gives ", m->sharedOptin / 1024, " KiB");
    }
    return {};
}

void CudaDecodeCache::enqueue(DecodePath path)
{
    if (!m->haveQuery)
        throwInvalid("decode: no query set");
    if (m->tokens == 0)
        throwInvalid("decode: the cache is empty");
    if (const auto why = pathProblem(path); !why.empty())
        throwInvalid(why);
    m->use();
    const auto d = m->stepDims(path);
    const std::size_t bh = std::size_t(d.batch) * d.heads;
    if (path == DecodePath::Lookup) {
        const std::size_t per = std::size_t(d.subspacesPerHead()) * d.stages * d.k;
        m->tables.ensure(bh * per, "lookup tables", m->device);
        m->weights.ensure(bh * d.splits * per, "lookup weights", m->device);
        m->pm.ensure(bh * d.splits, "split maxima", m->device);
        m->pl.ensure(bh * d.splits, "split sums", m->device);
        m->stageOut.ensure(kernels::lookupStagePartialFloats(d), "per-stage outputs", m->device);
        check(kernels::launchLookupStep(d, m->q.get(), m->kbh.get(), m->tables.get(), m->kc.get(), m->vc.get(),
                                        m->weights.get(), m->pm.get(), m->pl.get(), m->vbh.get(), m->stageOut.get(),
                                        m->done.get(), m->out.get(), m->order.get(), m->stream),
              "lookup decode");
        return;
    }
    if (path == DecodePath::Paper && m->paperBinsFit()) {
        const std::size_t per = std::size_t(d.subspacesPerHead()) * d.stages * d.k;
        m->weights.ensure(bh * d.splits * per, "value-codeword weights", m->device);
        m->pm.ensure(bh * d.splits, "split maxima", m->device);
        m->pl.ensure(bh * d.splits, "split sums", m->device);
        check(kernels::launchPaperBins(d, m->q.get(), m->kc.get(), m->kbh.get(), m->vc.get(), m->turns.get(),
                                       m->weights.get(), m->pm.get(), m->pl.get(), m->stream),
              "paper-path decode");
        m->stageOut.ensure(kernels::lookupStagePartialFloats(d), "per-stage outputs", m->device);
        check(kernels::launchLookupCombine(d, m->weights.get(), m->pm.get(), m->pl.get(), m->vbh.get(),
                                           m->stageOut.get(), m->done.get(), m->out.get(), m->stream),
              "paper-path combine");
        return;
    }
    m->acc.ensure(bh * d.splits * d.headDim, "split partials", m->device);
    m->pm.ensure(bh * d.splits, "split maxima", m->device);
    m->pl.ensure(bh * d.splits, "split sums", m->device);
    const kernels::SplitPartials part{m->acc.get(), m->pm.get(), m->pl.get()};
    if (path == DecodePath::Fp16) {
        check(kernels::launchFp16Decode(d, m->q.get(), m->k16.get(), m->v16.get(), part, m->done.get(), m->out.get(),
                                        m->stream),
              "FP16 decode");
        return;
    }
    check(kernels::launchPaperDecode(d, m->q.get(), m->kc.get(), m->kbh.get(), m->vc.get(), m->vbh.get(),
                                     m->turns.get(), part, m->stream),
          "paper-path decode");
    check(kernels::launchCombine(d, part, m->out.get(), m->stream), "split combine");
}

MatrixRF CudaDecodeCache::output()
{
    m->use();
    const auto& s = m->cfg.shape;
    MatrixRF o(m->cfg.batch, std::int64_t(s.heads) * s.headDim);
    check(cudaMemcpyAsync(o.data(), m->out.get(), std::size_t(o.size()) * 4, cudaMemcpyDeviceToHost, m->stream),
          "output download");
    check(cudaStreamSynchronize(m->stream), "decode");
    return o;
}

MatrixRF CudaDecodeCache::decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset)
{
    setQuery(q, positionOffset);
    // Poisoned first (all bits set: NaN), so an output element the kernels never wrote cannot pass.
    check(cudaMemsetAsync(m->out.get(), 0xff, std::size_t(q.size()) * 4, m->stream), "cudaMemset");
    enqueue(path);
    return output();
}

double CudaDecodeCache::timeAppend(int reps)
{
    const auto& d = m->dims;
    if (m->tokens >= d.capacity)
        throwInvalid("timeAppend: the cache is full");
    m->use();
    const std::size_t F = std::size_t(d.kvHeads) * d.headDim, rows = std::size_t(d.batch);
    m->stageK.ensure(rows * F, "new keys", m->device);
    m->stageV.ensure(rows * F, "new values", m->device);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> x(rows * F);
    for (auto& v : x)
        v = normal(rng);
    check(cudaMemcpy(m->stageK.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(m->stageV.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
    Events ev;
    std::vector<double> t;
    for (int i = 0; i < reps + 2; ++i) {
        check(cudaEventRecord(ev.a, m->stream), "cudaEventRecord");
        check(kernels::launchQuantizeAppend(d, m->stageK.get(), m->stageV.get(), 1, m->tokens, m->kb32T.get(),
                                            m->kn.get(), m->vb32T.get(), m->vn.get(), m->kc.get(), m->vc.get(), nullptr,
                                            m->stream),
              "quantize-and-pack");
        check(cudaEventRecord(ev.b, m->stream), "cudaEventRecord");
        const double s = ev.seconds();
        if (i >= 2)
            t.push_back(s);
    }
    return median(t);
}

} // namespace gsrq::gpu
