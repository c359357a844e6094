#pragma once
// The decode benchmark's one driver, for every backend that times or models decode steps (the CPU's,
// core/decode/cpu_bench.h; a CUDA device's, gpu/decode/decode.h; a named device's model,
// gpu/decode/roofline.h), and the one definition of what a step of one layer must read.
//
// The sweep walks batches × contexts; in each cell the backend builds what the cell needs, checks
// each path (verification, plans, shapes it cannot run), times the paths that passed, and models
// them; the driver fills each point's bytes from layerBytes, its time from the repetitions, its
// speed-up over FP16 and its roofline fraction, and reports the point (onPoint, then the report).
// A point skipped or failed in its check is reported at once; the timed ones of a cell together.

#include "core/decode/decode_bench.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gsrq {

// One decode step's size: the model's heads, the codebooks' D, R and K, the cached tokens and the
// sequences of the batch.
struct DecodeStepCase {
    DecodeShape shape;
    int dim = 0, stages = 0, k = 0;
    std::int64_t context = 0;
    int batch = 1;
};

// What one decode step of one layer must read at least, for the whole batch: the cache (FP16 keys and
// values, or the codes of both), the codebooks of keys and values (FP16) once for compressed paths,
// and the FP32 queries in and outputs out. Built on cacheBytes (core/lm/decode_cache.h). A backend's
// cost model counts more (split partials, tables, a RoPE table), never less.
struct LayerBytes {
    double cache = 0, codebooks = 0, io = 0;
    double total() const { return cache + codebooks + io; }
};
LayerBytes layerBytes(DecodePath path, const DecodeStepCase& c);

// A cell's memory: the caches of one layer with room for one more token (codes of keys and values
// and their FP16 rows, both kept by every backend's cache).
double layerCacheAllocBytes(const DecodeStepCase& c);

class DecodeSweepBackend {
public:
    virtual ~DecodeSweepBackend() = default;
    // Builds what the (batch, context) cell needs; a non-empty reason skips every path of it.
    virtual std::string prepare(int batch, std::int64_t context) = 0;
    // Before timing: fills what the backend knows of the path (splits, paperBins) and checks it
    // (shapes it cannot run, verification). False: the point is reported as it stands.
    virtual bool check(DecodeBenchPoint& p) = 0;
    // Times the checked points of the cell (the same order): per point, seconds per layer and step
    // of each repetition in the order run. May stop early when stop() returns true.
    virtual std::vector<std::vector<double>> time(const std::vector<DecodeBenchPoint>& points,
                                                  const std::function<bool()>& stop) = 0;
    // After timing: the path's model (costs, roofline, latency model) and the backend's extras.
    virtual void model(DecodeBenchPoint& p) = 0;
    // How a path's speed-up over FP16 is taken: paired by repetition (where the paths are timed in
    // turn and the machine's speed drifts, pairedSpeedup), or as the ratio of the medians.
    virtual bool pairsRepetitions() const = 0;
};

// The sweep of `options` (its batches, contexts and paths) into `report`'s points; stop() returning
// true ends it before the next cell or path check.
void runDecodeSweep(const DecodeBenchOptions& options, DecodeBenchReport& report, DecodeSweepBackend& backend,
                    const std::function<void(const DecodeBenchPoint&)>& onPoint, const std::function<bool()>& stop);

} // namespace gsrq
