// The decode benchmark on a CUDA device (decode.h): the device's side of the one sweep
// (core/decode/decode_sweep.h). Each path of a cell is checked, warmed up and then timed alone over
// its repetitions with CUDA events, the L2 flushed before each; its costs, roofline and latency
// model come from gpu/decode/roofline.h.
#include "gpu/decode/decode.h"

#include "core/base/error.h"
#include "core/base/stats.h"
#include "core/decode/decode_sweep.h"
#include "core/lm/rope.h"
#include "gpu/decode/cuda_events.h"
#include "gpu/decode/decode_math.h"
#include "gpu/device/cuda_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>

namespace gsrq::gpu {

namespace {

using detail::check;
using detail::DeviceArray;
using detail::Events;

std::size_t freeDeviceBytes()
{
    std::size_t f = 0, t = 0;
    check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    return f;
}

double measureCopyBandwidth(cudaStream_t stream)
{
    const std::size_t bytes = std::min<std::size_t>(std::size_t(1) << 30, freeDeviceBytes() / 4);
    DeviceArray<std::uint8_t> a, b;
    a.ensure(bytes, "bandwidth probe", "device");
    b.ensure(bytes, "bandwidth probe", "device");
    check(cudaMemsetAsync(a.get(), 1, bytes, stream), "cudaMemset");
    Events ev;
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
        check(cudaEventRecord(ev.a, stream), "cudaEventRecord");
        check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
        check(cudaEventRecord(ev.b, stream), "cudaEventRecord");
        const double s = ev.seconds();
        if (i >= 2)
            t.push_back(s);
    }
    return 2.0 * double(bytes) / median(t);
}

class CudaSweep final : public DecodeSweepBackend {
public:
    CudaSweep(const DecodeBenchOptions& o, DecodeBenchReport& rep, const Codebooks& kb, const Codebooks& vb,
              const DeviceInfo& info, const cudaDeviceProp& prop, cudaStream_t stream)
        : m_o(o), m_rep(rep), m_kb(kb), m_vb(vb), m_prop(prop), m_stream(stream),
          m_invFreq(ropeInvFreq(o.ropeTheta, o.shape.headDim)),
          // Writing twice the L2's size evicts what the last run left there.
          m_flushBytes(std::max<std::size_t>(2 * info.l2Bytes, std::size_t(64) << 20))
    {
        m_flush.ensure(m_flushBytes, "L2 flush buffer", rep.device);
    }

    std::string prepare(int batch, std::int64_t ctx) override
    {
        const auto& s = m_o.shape;
        m_layers.clear();
        m_ctx = ctx;
        m_batch = batch;
        m_q = decodeBenchQuery(batch, s, m_o.seed);
        // Per layer: codes of keys and values, FP16 keys and values; the split workspace (≤ 64 MiB).
        const double need = m_o.layers * layerCacheAllocBytes({s, m_kb.dim, m_kb.stages, m_kb.k, ctx, batch}) +
                            double(std::size_t(64) << 20);
        const double freeB = double(freeDeviceBytes()) * 0.9;
        if (need > freeB)
            return cat("needs ", need / double(1 << 30), " GiB of device memory; ", freeB / double(1 << 30),
                       " GiB free");
        DecodeCacheConfig cfg{s, batch, ctx + 1, m_o.device, true, m_o.ropeTheta, m_stream};
        for (int l = 0; l < m_o.layers; ++l) {
            m_layers.push_back(makeDeviceDecodeCache(cfg, m_kb, m_vb));
            m_layers.back()->appendRandom(ctx, m_o.seed + std::uint64_t(l));
            m_layers.back()->setQuery(m_q);
        }
        if (!m_appendTimed) {
            m_rep.appendSeconds = m_layers.front()->timeAppend(m_o.reps);
            m_appendTimed = true;
        }
        return {};
    }

    bool check(DecodeBenchPoint& p) override
    {
        DeviceDecodeCache& c0 = *m_layers.front();
        p.skipped = c0.pathProblem(p.path);
        if (!p.skipped.empty())
            return false;
        p.splits = c0.plan(p.path).splits;
        if (m_o.verify) {
            const MatrixRF out = c0.decode(p.path, m_q);
            auto& ref = m_refs[{m_ctx, int(p.path)}];
            if (ref.size() == 0)
                ref = decodeReference(c0, p.path, m_q.row(0).transpose(), m_o.shape, m_invFreq);
            if (!verifyDecodePoint(p, out, ref))
                return false;
        }
        p.paperBins = p.path == DecodePath::Paper && c0.paperUsesBins();
        return true;
    }

    // Paths one after another, each warmed up and then timed alone (a device's timing does not drift
    // as a shared CPU's does).
    std::vector<std::vector<double>> time(const std::vector<DecodeBenchPoint>& points,
                                          const std::function<bool()>&) override
    {
        std::vector<std::vector<double>> t(points.size());
        for (std::size_t i = 0; i < points.size(); ++i) {
            const DecodePath path = points[i].path;
            for (int w = 0; w < m_o.warmup; ++w)
                for (auto& l : m_layers)
                    l->enqueue(path);
            for (auto& l : m_layers)
                l->synchronize();
            Events ev;
            for (int r = 0; r < m_o.reps; ++r) {
                detail::check(cudaMemsetAsync(m_flush.get(), r & 0xff, m_flushBytes, m_stream), "L2 flush");
                detail::check(cudaEventRecord(ev.a, m_stream), "cudaEventRecord");
                for (auto& l : m_layers) // all on the one stream, in order, like a model's layers
                    l->enqueue(path);
                detail::check(cudaEventRecord(ev.b, m_stream), "cudaEventRecord");
                t[i].push_back(ev.seconds() / m_o.layers);
            }
        }
        return t;
    }

    void model(DecodeBenchPoint& p) override
    {
        const auto& s = m_o.shape;
        const int S = s.headDim / m_kb.dim, group = s.heads / s.kvHeads;
        const std::size_t optin = m_prop.sharedMemPerBlockOptin;
        const bool staged = lookupStagesCodes(S, m_kb.stages, m_kb.k, optin);
        const bool walk = paperBinsWalk(group, S, m_kb.stages, m_kb.k, optin);
        const bool bins = m_layers.front()->paperUsesBins();
        p.costs = decodeCosts(p.path, {s, m_kb.dim, m_kb.stages, m_kb.k, m_ctx, m_batch, p.splits, bins, staged, walk});
        p.roofline = roofline(p.costs, m_rep.rates);
        p.latencyModelSeconds =
            decodeLatencyModel(p.path, {s, m_kb.dim, m_kb.stages, m_kb.k, m_ctx, m_batch, p.splits, bins, true, walk},
                               m_prop.multiProcessorCount, optin, m_rep.copyBytesPerSecond);
    }

    bool pairsRepetitions() const override { return false; }

private:
    const DecodeBenchOptions& m_o;
    DecodeBenchReport& m_rep;
    const Codebooks &m_kb, &m_vb;
    const cudaDeviceProp& m_prop;
    cudaStream_t m_stream;
    std::vector<double> m_invFreq;
    std::size_t m_flushBytes;
    DeviceArray<std::uint8_t> m_flush;
    bool m_appendTimed = false;
    std::int64_t m_ctx = 0;
    int m_batch = 0;
    MatrixRF m_q;
    std::vector<std::unique_ptr<DeviceDecodeCache>> m_layers;
    std::map<std::pair<std::int64_t, int>, Eigen::VectorXd> m_refs; // (context, path) → sequence 0's reference
};

} // namespace

DecodeBenchReport runDecodeBench(const DecodeBenchOptions& o, const Codebooks& keyBooks, const Codebooks& valueBooks,
                                 const std::string& source, const std::function<void(const DecodeBenchPoint&)>& onPoint,
                                 const std::function<bool()>& stop)
{
    const auto devices = queryDevices();
    if (devices.devices.empty())
        throwInvalid("bench-decode needs a CUDA device: ", devices.message);
    if (o.device < 0 || o.device >= int(devices.devices.size()))
        throwInvalid("--device ", o.device, ": this machine has ", devices.devices.size(), " CUDA device(s)");
    if (const auto why = decodeShapeProblem(o.shape, keyBooks.dim, keyBooks.stages, keyBooks.k); !why.empty())
        throwInvalid(why);
    if (o.layers < 1 || o.reps < 20 || o.warmup < 1)
        throwInvalid("--layers ≥ 1, --reps ≥ 20 and --warmup ≥ 1 (got ", o.layers, ", ", o.reps, ", ", o.warmup, ")");
    DecodeBenchReport rep;
    const DeviceInfo& info = devices.devices[std::size_t(o.device)];
    rep.backend = DecodeBackend::Cuda;
    rep.device = cat(info.name, " (device ", info.index, ")"); // as decodeDeviceName names it
    rep.nominalBandwidth = info.memoryBandwidth;
    rep.dim = keyBooks.dim;
    rep.stages = keyBooks.stages;
    rep.k = keyBooks.k;
    rep.codebookSource = source;
    check(cudaSetDevice(o.device), "cudaSetDevice");
    struct Stream {
        cudaStream_t s = nullptr;
        Stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
        ~Stream() { cudaStreamDestroy(s); }
    } benchStream;
    rep.copyBytesPerSecond = measureCopyBandwidth(benchStream.s);
    rep.rates = decodeRates(info, rep.copyBytesPerSecond, o.l2BytesPerSecond);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
    CudaSweep sweep(o, rep, keyBooks, valueBooks, info, prop, benchStream.s);
    runDecodeSweep(o, rep, sweep, onPoint, stop);
    return rep;
}

} // namespace gsrq::gpu
