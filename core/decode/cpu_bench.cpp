// The CPU decode benchmark and its roofline: probes of the machine's rates, the cost model, the sweep.

#include "core/decode/cpu_bench.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/stats.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/cpu_kernels.h"
#include "core/decode/decode_sweep.h"
#include "core/lm/decode_cache.h"
#include "core/lm/rope.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

namespace gsrq {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads `bytes` of `buf` split across the threads, folding 64-bit words with XOR (which the compiler
// vectorises; the result keeps the loop from being dropped). Returns the median bytes per second.
double readRate(const std::vector<std::uint64_t>& buf, int threads, int passes, int reps, bool perThreadCopy)
{
    std::vector<double> rates;
    volatile std::uint64_t sink = 0;
    for (int rep = 0; rep < reps; ++rep) {
        std::uint64_t fold = 0;
        const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(^ : fold)
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            std::size_t lo = 0, hi = buf.size();
            if (!perThreadCopy) {
                lo = buf.size() * std::size_t(t) / std::size_t(n);
                hi = buf.size() * std::size_t(t + 1) / std::size_t(n);
            } else {
                // Each thread reads its own slice, sized for its L2, over and over.
                const std::size_t per = buf.size() / std::size_t(n);
                lo = per * std::size_t(t);
                hi = lo + per;
            }
            std::uint64_t x = 0;
            for (int p = 0; p < passes; ++p)
                for (std::size_t i = lo; i < hi; ++i)
                    x ^= buf[i] + std::uint64_t(p);
            fold ^= x;
        }
        const double sec = since(t0);
        sink = sink ^ fold;
        rates.push_back(double(buf.size()) * 8.0 * passes / sec);
    }
    (void)sink;
    return median(rates);
}

// The sanity check beside the FP16 path: dense attention in Eigen FP32 over the same cache (its FP16
// rows converted once), per (sequence, KV head) scores = K·Qᵀ for the group's query heads, a softmax
// and out = Vᵀ·P, threads over (sequence, KV head). It reads twice the FP16 path's bytes; a strong
// FP16 loop must beat it, or its ratios mean nothing.
class EigenAttention {
public:
    EigenAttention(const CpuDecodeCache& c, const DecodeShape& s, int batch) : s_(s), batch_(batch)
    {
        for (int b = 0; b < batch; ++b) {
            const MatrixRF keys = c.fp16Keys(b), values = c.fp16Values(b);
            for (int h = 0; h < s.kvHeads; ++h) {
                k_.emplace_back(keys.middleCols(Eigen::Index(h) * s.headDim, s.headDim));
                v_.emplace_back(values.middleCols(Eigen::Index(h) * s.headDim, s.headDim));
            }
        }
        out_.resize(batch, Eigen::Index(s.heads) * s.headDim);
    }
    const MatrixRF& run(const MatrixRF& q, int threads)
    {
        const int H = s_.kvHeads, G = s_.heads / s_.kvHeads, hd = s_.headDim;
        const float scale = 1.f / std::sqrt(float(hd));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int i = 0; i < batch_ * H; ++i) {
            const int b = i / H, h = i % H;
            MatrixRF qg(G, hd);
            for (int g = 0; g < G; ++g)
                qg.row(g) = q.block(b, Eigen::Index(h * G + g) * hd, 1, hd) * scale;
            Eigen::MatrixXf p = k_[std::size_t(i)] * qg.transpose(); // tokens × G
            for (int g = 0; g < G; ++g) {
                const float mx = p.col(g).maxCoeff();
                p.col(g) = (p.col(g).array() - mx).exp().matrix();
                p.col(g) /= p.col(g).sum();
            }
            const Eigen::MatrixXf o = v_[std::size_t(i)].transpose() * p; // hd × G
            for (int g = 0; g < G; ++g)
                out_.block(b, Eigen::Index(h * G + g) * hd, 1, hd) = o.col(g).transpose();
        }
        return out_;
    }

private:
    DecodeShape s_;
    int batch_;
    std::vector<MatrixRF> k_, v_;
    MatrixRF out_;
};

} // namespace

CpuRates measureCpuRates(int threads, const DecodeShape& shape, int dim, int stages, int k, const std::string& isa)
{
    threads = cpuDecodeThreads(threads);
    const cpudecode::Kernels* kernels = cpudecode::kernelsNamed(isa);
    if (!kernels)
        throwInvalid(cpuDecodeIsaProblem(isa));
    CpuRates r;
    {
        // DRAM: 8 × the last-level cache (at least 256 MiB), first touched by the threads that read it.
        const std::size_t bytes = std::max<std::size_t>(8 * lastLevelCacheBytes(), std::size_t(256) << 20);
        std::vector<std::uint64_t> buf(bytes / 8);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (std::size_t i = 0; i < buf.size(); ++i)
            buf[i] = i * 0x9E3779B97F4A7C15ull;
        r.readBytesPerSecond = readRate(buf, threads, 1, 7, false);
    }
    {
        // L2: 192 KiB per thread (within any L2 of the last decade), 40 passes.
        std::vector<std::uint64_t> buf(std::size_t(threads) * (std::size_t(192) << 10) / 8);
        for (std::size_t i = 0; i < buf.size(); ++i)
            buf[i] = i;
        r.l2BytesPerSecond = readRate(buf, threads, 40, 7, true);
    }
    {
        // Lookups: the lookup loop itself over 4,096 tokens of random codes per thread, tables and bins
        // of the run's size (L1 and L2 resident after the first pass).
        cpudecode::HeadDims d;
        d.G = std::max(1, shape.heads / std::max(1, shape.kvHeads));
        d.Gp = d.G <= 4 ? 4 : 8;
        d.hd = shape.headDim;
        d.D = dim;
        d.P = std::max(1, shape.headDim / std::max(1, dim));
        d.R = stages;
        d.K = std::min(k, 256);
        const std::int64_t n = 4096, entries = std::int64_t(d.P) * d.R * d.K * d.Gp;
        const auto& kern = *kernels;
        std::vector<double> rates;
        for (int rep = 0; rep < 5; ++rep) {
            double seconds = 0;
#pragma omp parallel num_threads(threads) reduction(max : seconds)
            {
                std::mt19937 rng(unsigned(17 + omp_get_thread_num()));
                // Codes as the step reads them: packed two a byte where the loop reads them so (any byte
                // then holds two codes of 0..15), else a byte each.
                const bool nibbles = cpudecode::lookupReadsNibbles(d);
                const int perSubspace = nibbles ? PackedCodes::bytesFor(d.R, 4) : d.R;
                std::uniform_int_distribution<int> code(0, nibbles ? 255 : d.K - 1);
                std::vector<std::uint8_t> kc(std::size_t(n * d.P * perSubspace)), vc(kc.size());
                for (auto& c : kc)
                    c = std::uint8_t(code(rng));
                for (auto& c : vc)
                    c = std::uint8_t(code(rng));
                std::vector<float> T(static_cast<std::size_t>(entries)), W(static_cast<std::size_t>(entries), 0.f),
                    m(8), l(8);
                std::normal_distribution<float> normal;
                for (auto& t : T)
                    t = normal(rng);
                const int bits = nibbles ? 4 : 8;
                const cpudecode::CodeView kv{kc.data(), std::int64_t(d.P) * perSubspace, perSubspace, bits},
                    vv{vc.data(), std::int64_t(d.P) * perSubspace, perSubspace, bits};
                std::fill(m.begin(), m.end(), -1e30f);
                kern.lookup(d, T.data(), kv, vv, n, m.data(), l.data(), W.data()); // warm
#pragma omp barrier
                const auto t0 = Clock::now();
                for (int pass = 0; pass < 4; ++pass)
                    kern.lookup(d, T.data(), kv, vv, n, m.data(), l.data(), W.data());
                seconds = since(t0);
            }
            rates.push_back(double(threads) * 4.0 * double(n) * d.P * d.R * 2.0 / seconds);
        }
        r.lookupsPerSecond = median(rates);
    }
    r.flops = measureFmaRate(threads, *kernels);
    return r;
}

double measureFmaRate(int threads, const cpudecode::Kernels& kern)
{
    threads = cpuDecodeThreads(threads);
    const std::int64_t iters = 20'000'000;
    std::vector<double> rates;
    volatile float sink = 0;
    for (int rep = 0; rep < 3; ++rep) {
        double seconds = 0;
        float s = 0;
#pragma omp parallel num_threads(threads) reduction(max : seconds) reduction(+ : s)
        {
            const auto t0 = Clock::now();
            s += kern.fmaLoop(iters);
            seconds = since(t0);
        }
        sink = sink + s;
        rates.push_back(double(threads) * double(iters) * 12.0 * kern.lanes * 2.0 / seconds);
    }
    (void)sink;
    return median(rates);
}

DecodeRates cpuDecodeRates(const CpuRates& c)
{
    DecodeRates r;
    r.memory = c.readBytesPerSecond;
    r.memoryName = "dram";
    r.l2 = c.l2BytesPerSecond;
    r.l2Source = "measured";
    r.lookups = c.lookupsPerSecond;
    r.flops = c.flops;
    return r;
}

DecodeCosts cpuDecodeCosts(DecodePath path, const CpuDecodeCostCase& c)
{
    const double d = c.shape.headDim, G = double(c.shape.heads) / c.shape.kvHeads, D = c.dim, R = c.stages, K = c.k;
    const double S = d / D;                                                      // subspaces per KV head
    const double tokens = double(c.batch) * c.shape.kvHeads * double(c.context); // (sequence, KV head, token)
    const double heads = double(c.batch) * c.shape.heads;
    DecodeCosts k;
    k.memoryBytes = layerBytes(path, c).total(); // FP16 keys and values once per GQA group, or codes and books
    if (path == DecodePath::Fp16) {
        k.flops = tokens * G * 4.0 * d; // q·k and p·v per query head
        return k;
    }
    if (path == DecodePath::Lookup) {
        // Per token and subspace: R table loads and R bin updates, each one access of a group's lanes.
        k.lookups = tokens * S * R * 2.0;
        // The tables (q · every key codeword) and the value product (bins · every value codeword).
        k.flops = heads * S * R * K * D * 2.0 * 2.0;
        return k;
    }
    // Paper path: per token the key's R codewords gathered (from the L2), summed, rotated, dotted; the
    // RoPE table (cos and sin per token) read with it; values binned as in the lookup path.
    k.memoryBytes += double(c.context) * d * 4.0;
    k.l2Bytes = tokens * S * R * D * 2.0;
    k.lookups = tokens * S * R;
    k.flops = tokens * (S * R * D + 3.0 * d + G * 2.0 * d) + heads * S * R * K * D * 2.0; // rotation: 6 per pair
    return k;
}

namespace {

// The CPU's side of the sweep: the caches of every layer, checked against the double reference,
// timed in turn within each repetition after a cache flush, with the FP16 rows read alone in
// alternation and Eigen's FP32 attention as the sanity check.
class CpuSweep final : public DecodeSweepBackend {
public:
    CpuSweep(const DecodeBenchOptions& o, DecodeBenchReport& rep, const Codebooks& kb, const Codebooks& vb)
        : m_o(o), m_rep(rep), m_kb(kb), m_vb(vb), m_invFreq(ropeInvFreq(o.ropeTheta, o.shape.headDim)),
          // Reading twice the last-level cache evicts what the last run left there. Read, not written:
          // dirty lines would have to be written back during the timed run, charging it for the flush.
          m_flush(std::max<std::size_t>(2 * lastLevelCacheBytes(), std::size_t(64) << 20) / 8)
    {
        for (std::size_t i = 0; i < m_flush.size(); ++i)
            m_flush[i] = i;
        m_eigen = std::find(o.paths.begin(), o.paths.end(), DecodePath::Fp16) != o.paths.end();
    }

    std::string prepare(int batch, std::int64_t ctx) override
    {
        const auto& s = m_o.shape;
        m_layers.clear();
        m_readRows.clear();
        m_batch = batch;
        m_ctx = ctx;
        m_q = decodeBenchQuery(batch, s, m_o.seed);
        // The caches, the paper path's RoPE table, and the double references of sequence 0 (FP32 and
        // double copies of its keys and values while they are built).
        const double features = double(s.kvHeads) * s.headDim;
        // The Eigen FP32 sanity check: FP32 keys and values of the batch, and one sequence's
        // full-width copy while they are built.
        const double eigenNeed = m_eigen ? 8.0 * double(batch + 1) * double(ctx) * features : 0.0;
        const double need = m_o.layers * layerCacheAllocBytes({s, m_kb.dim, m_kb.stages, m_kb.k, ctx, batch}) +
                            double(ctx) * s.headDim * 4.0 + (m_o.verify ? 24.0 * double(ctx) * features : 0.0) +
                            eigenNeed;
        const double avail = availableMemoryBytes() * 0.7;
        if (avail > 0 && need > avail)
            return cat("needs ", need / 1e9, " GB of memory; ", avail / 0.7 / 1e9, " GB available");
        CpuDecodeConfig cfg{s, batch, ctx + 1, true, m_o.ropeTheta, m_o.threads, m_o.isa};
        for (int l = 0; l < m_o.layers; ++l) {
            m_layers.push_back(std::make_unique<CpuDecodeCache>(cfg, m_kb, m_vb));
            m_layers.back()->appendRandom(ctx, m_o.seed + std::uint64_t(l));
            m_layers.back()->setQuery(m_q);
        }
        if (!m_appendTimed) {
            m_rep.appendSeconds = m_layers.front()->timeAppend(std::max(5, m_o.reps / 5));
            m_appendTimed = true;
        }
        return {};
    }

    bool check(DecodeBenchPoint& p) override
    {
        CpuDecodeCache& c0 = *m_layers.front();
        p.splits = c0.splits(p.path);
        if (m_o.verify) {
            const MatrixRF out = c0.decode(p.path, m_q);
            if (!verifyDecodePoint(p, out, reference(p.path)))
                return false;
        }
        for (int w = 0; w < m_o.warmup; ++w)
            for (auto& l : m_layers)
                l->run(p.path);
        return true;
    }

    // Each repetition times every path in turn (each run after a cache flush), so the paths' times,
    // and the speed-ups taken from them, come from the same moments of a machine whose speed drifts
    // from minute to minute.
    std::vector<std::vector<double>> time(const std::vector<DecodeBenchPoint>& points,
                                          const std::function<bool()>& stop) override
    {
        std::vector<std::vector<double>> t(points.size());
        for (int r = 0; r < m_o.reps; ++r) {
            for (std::size_t i = 0; i < points.size(); ++i) {
                flushCaches();
                const auto t0 = Clock::now();
                for (auto& l : m_layers) // one after another, like a model's layers
                    l->run(points[i].path);
                t[i].push_back(since(t0) / m_o.layers);
                if (points[i].path == DecodePath::Fp16) {
                    // The same rows read and nothing else, in alternation with the steps, so the
                    // fraction compares the two at the same moments of a shared machine.
                    flushCaches();
                    const auto t1 = Clock::now();
                    for (auto& l : m_layers)
                        m_sink = m_sink ^ l->readFp16Rows();
                    m_readRows.push_back(since(t1) / m_o.layers);
                }
            }
            if (stop && stop())
                break;
        }
        return t;
    }

    void model(DecodeBenchPoint& p) override
    {
        const auto& s = m_o.shape;
        if (p.path == DecodePath::Fp16 && !m_readRows.empty())
            p.readRowsSeconds = median(m_readRows);
        if (p.path == DecodePath::Fp16 && m_eigen) {
            EigenAttention sanity(*m_layers.front(), s, m_batch);
            const MatrixRF& out = sanity.run(m_q, m_rep.threads);
            const double e =
                m_o.verify ? decodeRelativeError(out.row(0).transpose().cast<double>(), reference(DecodePath::Fp16))
                           : -1;
            if (e <= kDecodeTolerance) { // unverified (−1) or within the tolerance
                std::vector<double> te;
                for (int r = 0; r < std::max(5, m_o.reps / 5); ++r) {
                    flushCaches();
                    const auto t0 = Clock::now();
                    sanity.run(m_q, m_rep.threads);
                    te.push_back(since(t0));
                }
                p.eigenFp32Seconds = median(te);
            }
        }
        p.paperBins = p.path == DecodePath::Paper;
        p.costs = cpuDecodeCosts(p.path, {s, m_kb.dim, m_kb.stages, m_kb.k, m_ctx, m_batch});
        p.roofline = roofline(p.costs, m_rep.rates);
    }

    bool pairsRepetitions() const override { return true; }

private:
    // Sequence 0's double reference of a path at this context (the same for every batch).
    const Eigen::VectorXd& reference(DecodePath path)
    {
        auto& ref = m_refs[{m_ctx, int(path)}];
        if (ref.size() == 0)
            ref = decodeReference(*m_layers.front(), path, m_q.row(0).transpose(), m_o.shape, m_invFreq);
        return ref;
    }
    void flushCaches()
    {
        std::uint64_t x = 0;
        for (std::uint64_t v : m_flush)
            x ^= v;
        m_sink = m_sink ^ x;
    }

    const DecodeBenchOptions& m_o;
    DecodeBenchReport& m_rep;
    const Codebooks &m_kb, &m_vb;
    std::vector<double> m_invFreq;
    std::vector<std::uint64_t> m_flush;
    volatile std::uint64_t m_sink = 0;
    bool m_eigen = false, m_appendTimed = false;
    int m_batch = 0;
    std::int64_t m_ctx = 0;
    MatrixRF m_q;
    std::vector<std::unique_ptr<CpuDecodeCache>> m_layers;
    std::vector<double> m_readRows;
    std::map<std::pair<std::int64_t, int>, Eigen::VectorXd> m_refs; // (context, path) → sequence 0's reference
};

} // namespace

DecodeBenchReport runCpuDecodeBench(const DecodeBenchOptions& o, const Codebooks& keyBooks, const Codebooks& valueBooks,
                                    const std::string& source,
                                    const std::function<void(const DecodeBenchPoint&)>& onPoint,
                                    const std::function<bool()>& stop)
{
    if (const auto why = cpuDecodeShapeProblem(o.shape, keyBooks.dim, keyBooks.stages, keyBooks.k); !why.empty())
        throwInvalid(why);
    if (o.layers < 1 || o.reps < 20 || o.warmup < 1)
        throwInvalid("--layers ≥ 1, --reps ≥ 20 and --warmup ≥ 1 (got ", o.layers, ", ", o.reps, ", ", o.warmup, ")");
    if (o.threads < 0 || o.threads > kMaxDecodeThreads)
        throwInvalid("--threads ", o.threads, ": 0 (one per core) to ", kMaxDecodeThreads);
    if (!(o.ropeTheta > 0))
        throwInvalid("--rope-theta ", o.ropeTheta, ": must be > 0");
    checkDecodeBooks(o.shape, keyBooks, valueBooks);
    DecodeBenchReport rep;
    rep.backend = DecodeBackend::Cpu;
    rep.threads = cpuDecodeThreads(o.threads);
    rep.device = cpuModelName();
    if (const auto why = cpuDecodeIsaProblem(o.isa); !why.empty())
        throwInvalid(why);
    rep.isa = cpudecode::kernelsNamed(o.isa)->isa;
    rep.dim = keyBooks.dim;
    rep.stages = keyBooks.stages;
    rep.k = keyBooks.k;
    rep.codebookSource = source;
    const CpuRates rates = measureCpuRates(rep.threads, o.shape, keyBooks.dim, keyBooks.stages, keyBooks.k, o.isa);
    rep.readBytesPerSecond = rates.readBytesPerSecond;
    rep.rates = cpuDecodeRates(rates);

    CpuSweep sweep(o, rep, keyBooks, valueBooks);
    runDecodeSweep(o, rep, sweep, onPoint, stop);
    return rep;
}

} // namespace gsrq
