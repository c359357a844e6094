// The decode benchmark's driver and a layer's bytes (decode_sweep.h).
#include "core/decode/decode_sweep.h"

#include "core/base/stats.h"

#include <algorithm>

namespace gsrq {

LayerBytes layerBytes(DecodePath path, const DecodeStepCase& c)
{
    const CacheBytes cb = cacheBytes(std::int64_t(c.batch) * c.context, c.shape, c.dim, c.stages, c.k);
    LayerBytes b;
    b.io = 2.0 * c.batch * c.shape.heads * c.shape.headDim * 4.0;
    if (path == DecodePath::Fp16) {
        b.cache = cb.fp16;
    } else {
        b.cache = cb.codes;
        b.codebooks = cb.codebooks;
    }
    return b;
}

double layerCacheAllocBytes(const DecodeStepCase& c)
{
    const CacheBytes cb = cacheBytes(std::int64_t(c.batch) * (c.context + 1), c.shape, c.dim, c.stages, c.k);
    return cb.codes + cb.fp16;
}

void runDecodeSweep(const DecodeBenchOptions& o, DecodeBenchReport& rep, DecodeSweepBackend& backend,
                    const std::function<void(const DecodeBenchPoint&)>& onPoint, const std::function<bool()>& stop)
{
    const auto stopped = [&] { return stop && stop(); };
    const auto report = [&](const DecodeBenchPoint& p) {
        rep.points.push_back(p);
        if (onPoint)
            onPoint(p);
    };
    for (int batch : o.batches)
        for (std::int64_t ctx : o.contexts) {
            if (stopped())
                return;
            const std::string skipped = backend.prepare(batch, ctx);
            std::vector<DecodeBenchPoint> checked;
            for (DecodePath path : o.paths) {
                if (stopped())
                    return;
                DecodeBenchPoint p;
                p.context = ctx;
                p.batch = batch;
                p.path = path;
                p.skipped = skipped;
                if (!p.skipped.empty() || !backend.check(p)) {
                    report(p);
                    continue;
                }
                checked.push_back(p);
            }
            if (checked.empty())
                continue;
            const auto t = backend.time(checked, stop);
            const auto fp16 = std::find_if(checked.begin(), checked.end(),
                                           [](const DecodeBenchPoint& p) { return p.path == DecodePath::Fp16; });
            const std::size_t f = std::size_t(fp16 - checked.begin());
            const DecodeStepCase c{o.shape, rep.dim, rep.stages, rep.k, ctx, batch};
            for (std::size_t i = 0; i < checked.size(); ++i) {
                DecodeBenchPoint& p = checked[i];
                timeDecodePoint(p, t[i], layerBytes(p.path, c).total());
                if (fp16 != checked.end() && p.seconds > 0)
                    p.speedupVsFp16 = backend.pairsRepetitions() ? pairedSpeedup(t[f], t[i]) : median(t[f]) / p.seconds;
                backend.model(p);
                p.rooflineFraction = p.seconds > 0 ? p.roofline.seconds / p.seconds : 0;
                report(p);
            }
        }
}

} // namespace gsrq
