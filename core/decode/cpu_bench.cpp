// The CPU decode benchmark and its roofline: probes of the machine's rates, the cost model, the sweep.

#include "core/decode/cpu_bench.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/stats.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/cpu_kernels.h"
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
                std::uniform_int_distribution<int> code(0, d.K - 1);
                std::vector<std::uint8_t> kc(std::size_t(n * d.P * d.R)), vc(kc.size());
                for (auto& c : kc)
                    c = std::uint8_t(code(rng));
                for (auto& c : vc)
                    c = std::uint8_t(code(rng));
                std::vector<float> T(static_cast<std::size_t>(entries)), W(static_cast<std::size_t>(entries), 0.f),
                    m(8), l(8);
                std::normal_distribution<float> normal;
                for (auto& t : T)
                    t = normal(rng);
                const cpudecode::CodeView kv{kc.data(), std::int64_t(d.P) * d.R, d.R},
                    vv{vc.data(), std::int64_t(d.P) * d.R, d.R};
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
    const double S = d / D;                                                        // subspaces per KV head
    const double bpt = PackedCodes::bytesFor(c.stages, PackedCodes::bitsFor(c.k)); // per token and subspace
    const double tokens = double(c.batch) * c.shape.kvHeads * double(c.context);   // (sequence, KV head, token)
    const double heads = double(c.batch) * c.shape.heads;
    const double io = heads * d * 4.0 * 2.0; // FP32 queries in, outputs out
    DecodeCosts k;
    if (path == DecodePath::Fp16) {
        k.memoryBytes = tokens * 4.0 * d + io; // FP16 key and value, once per GQA group
        k.flops = tokens * G * 4.0 * d;        // q·k and p·v per query head
        return k;
    }
    const double books = double(c.shape.kvHeads) * S * R * K * D * 2.0; // FP16 codewords of one of keys, values
    k.memoryBytes = tokens * 2.0 * S * bpt + 2.0 * books + io;
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

    const auto& s = o.shape;
    const int M = keyBooks.subspaces;
    const int bpt = PackedCodes::bytesFor(keyBooks.stages, PackedCodes::bitsFor(keyBooks.k));
    const auto invFreq = ropeInvFreq(o.ropeTheta, s.headDim);
    // Cache flush: reading twice the last-level cache evicts what the last run left there. Read, not
    // written: dirty lines would have to be written back during the timed run, charging it for the flush.
    std::vector<std::uint64_t> flush(std::max<std::size_t>(2 * lastLevelCacheBytes(), std::size_t(64) << 20) / 8);
    for (std::size_t i = 0; i < flush.size(); ++i)
        flush[i] = i;
    volatile std::uint64_t flushSink = 0;

    std::map<std::pair<std::int64_t, int>, Eigen::VectorXd> refs; // (context, path) → sequence 0's reference
    bool appendTimed = false;
    for (int batch : o.batches)
        for (std::int64_t ctx : o.contexts) {
            if (stop && stop())
                return rep;
            const double perLayer = double(batch) * double(ctx + 1) * (2.0 * M * bpt + 4.0 * s.kvHeads * s.headDim);
            // The caches, the paper path's RoPE table, and the double references of sequence 0 (FP32 and
            // double copies of its keys and values while they are built).
            const double features = double(s.kvHeads) * s.headDim;
            const bool eigen = std::find(o.paths.begin(), o.paths.end(), DecodePath::Fp16) != o.paths.end();
            // The Eigen FP32 sanity check: FP32 keys and values of the batch, and one sequence's
            // full-width copy while they are built.
            const double eigenNeed = eigen ? 8.0 * double(batch + 1) * double(ctx) * features : 0.0;
            const double need = o.layers * perLayer + double(ctx) * s.headDim * 4.0 +
                                (o.verify ? 24.0 * double(ctx) * features : 0.0) + eigenNeed;
            const double avail = availableMemoryBytes() * 0.7;
            std::vector<std::unique_ptr<CpuDecodeCache>> layers;
            const MatrixRF q = decodeBenchQuery(batch, s, o.seed);
            std::string skipped;
            if (avail > 0 && need > avail) {
                skipped = cat("needs ", need / 1e9, " GB of memory; ", avail / 0.7 / 1e9, " GB available");
            } else {
                CpuDecodeConfig cfg{s, batch, ctx + 1, true, o.ropeTheta, o.threads, o.isa};
                for (int l = 0; l < o.layers; ++l) {
                    layers.push_back(std::make_unique<CpuDecodeCache>(cfg, keyBooks, valueBooks));
                    layers.back()->appendRandom(ctx, o.seed + std::uint64_t(l));
                    layers.back()->setQuery(q);
                }
                if (!appendTimed) {
                    rep.appendSeconds = layers.front()->timeAppend(std::max(5, o.reps / 5));
                    appendTimed = true;
                }
            }
            // Each path checked against its reference first; those that pass are warmed up, then
            // timed in turn within every repetition (each run after a cache flush), so the paths'
            // times, and the speed-ups taken from them, come from the same moments of a machine whose
            // speed drifts from minute to minute.
            std::vector<DecodeBenchPoint> points;
            std::vector<DecodePath> timed;
            const auto report = [&](const DecodeBenchPoint& p) {
                rep.points.push_back(p);
                if (onPoint)
                    onPoint(p);
            };
            for (DecodePath path : o.paths) {
                if (stop && stop())
                    return rep;
                DecodeBenchPoint p;
                p.context = ctx;
                p.batch = batch;
                p.path = path;
                p.skipped = skipped;
                if (!p.skipped.empty()) {
                    report(p);
                    continue;
                }
                CpuDecodeCache& c0 = *layers.front();
                p.splits = c0.splits(path);
                if (o.verify) {
                    const MatrixRF out = c0.decode(path, q);
                    auto& ref = refs[{ctx, int(path)}];
                    if (ref.size() == 0)
                        ref = decodeReference(c0, path, q.row(0).transpose(), s, invFreq);
                    if (!verifyDecodePoint(p, out, ref)) {
                        report(p);
                        continue;
                    }
                }
                for (int w = 0; w < o.warmup; ++w)
                    for (auto& l : layers)
                        l->run(path);
                points.push_back(p);
                timed.push_back(path);
            }
            if (timed.empty())
                continue;
            const auto flushCaches = [&] {
                std::uint64_t x = 0;
                for (std::uint64_t v : flush)
                    x ^= v;
                flushSink = flushSink ^ x;
            };
            std::vector<std::vector<double>> t(timed.size());
            std::vector<double> tr;
            for (int r = 0; r < o.reps; ++r) {
                for (std::size_t i = 0; i < timed.size(); ++i) {
                    flushCaches();
                    const auto t0 = Clock::now();
                    for (auto& l : layers) // one after another, like a model's layers
                        l->run(timed[i]);
                    t[i].push_back(since(t0) / o.layers);
                    if (timed[i] == DecodePath::Fp16) {
                        // The same rows read and nothing else, in alternation with the steps, so the
                        // fraction compares the two at the same moments of a shared machine.
                        flushCaches();
                        const auto t1 = Clock::now();
                        for (auto& l : layers)
                            flushSink = flushSink ^ l->readFp16Rows();
                        tr.push_back(since(t1) / o.layers);
                    }
                }
                if (stop && stop())
                    break;
            }
            const auto fp16 = std::find(timed.begin(), timed.end(), DecodePath::Fp16);
            for (std::size_t i = 0; i < timed.size(); ++i) {
                DecodeBenchPoint& p = points[i];
                const DecodePath path = timed[i];
                if (path == DecodePath::Fp16 && !tr.empty())
                    p.readRowsSeconds = median(tr);
                timeDecodePoint(p, t[i], decodeStepBytes(path, s, keyBooks, ctx, batch));
                // Paired by repetition (timeDecodePoint sorted a copy: t keeps the runs' order); the
                // FP16 point's own is 1.
                if (fp16 != timed.end())
                    p.speedupVsFp16 = pairedSpeedup(t[std::size_t(fp16 - timed.begin())], t[i]);
                if (path == DecodePath::Fp16 && eigen) {
                    CpuDecodeCache& c0 = *layers.front();
                    EigenAttention sanity(c0, s, batch);
                    const MatrixRF& out = sanity.run(q, rep.threads);
                    const double e = o.verify ? decodeRelativeError(out.row(0).transpose().cast<double>(),
                                                                    refs[{ctx, int(DecodePath::Fp16)}])
                                              : -1;
                    if (e <= kDecodeTolerance) { // unverified (−1) or within the tolerance
                        std::vector<double> te;
                        for (int r = 0; r < std::max(5, o.reps / 5); ++r) {
                            flushCaches();
                            const auto t0 = Clock::now();
                            sanity.run(q, rep.threads);
                            te.push_back(since(t0));
                        }
                        p.eigenFp32Seconds = median(te);
                    }
                }
                p.paperBins = path == DecodePath::Paper;
                p.costs = cpuDecodeCosts(path, {s, keyBooks.dim, keyBooks.stages, keyBooks.k, ctx, batch});
                p.roofline = roofline(p.costs, rep.rates);
                p.rooflineFraction = p.roofline.seconds / p.seconds;
                report(p);
            }
        }
    return rep;
}

} // namespace gsrq
