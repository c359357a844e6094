#pragma once
// The decode-latency benchmark on the CPU: contexts × batches × paths, each point checked against the
// double reference before it is timed (caches flushed between timed runs), with its roofline beside
// it at rates measured in the same run: DRAM and L2 read bandwidth, the lookup loop's rate on tables
// of the run's size, and FP32 fused multiply-adds, all with the run's threads.

#include "core/decode/cpu_kernels.h"
#include "core/decode/decode_bench.h"
#include "core/decode/decode_sweep.h"

#include <functional>
#include <string>

namespace gsrq {

struct CpuRates {
    double readBytesPerSecond = 0; // DRAM: a buffer many times the last-level cache, read by every thread
    double l2BytesPerSecond = 0;   // a buffer per thread that fits its L2, read over and over
    double lookupsPerSecond = 0;   // the lookup loop's table loads and bin updates, tables of the run's size
    double flops = 0;              // FP32 fused multiply-adds, 2 FLOPs each
};
// Each probe runs for a fraction of a second with `threads` threads; the codebook shape sizes the
// lookup probe's tables; `isa` names the kernel build whose loops are timed (empty: the widest).
CpuRates measureCpuRates(int threads, const DecodeShape& shape, int dim, int stages, int k,
                         const std::string& isa = {});
DecodeRates cpuDecodeRates(const CpuRates& rates);
// FP32 FLOP/s of `threads` threads running independent chains of the kernels' widest fused
// multiply-adds from registers: the machine's arithmetic peak, the bound of any SGEMM (median of 3).
double measureFmaRate(int threads, const cpudecode::Kernels& kernels);

// What one decode step of a path moves and computes on the CPU, for the whole batch and every KV head.
// Its memory bytes are layerBytes' (decode_sweep.h), plus the paper path's RoPE table.
using CpuDecodeCostCase = DecodeStepCase;
DecodeCosts cpuDecodeCosts(DecodePath path, const CpuDecodeCostCase& c);

// Runs the sweep with options.threads threads and the kernels options.isa names (options.device is
// ignored). Each FP16 point is also run as Eigen FP32 dense attention over the same cache, checked
// against the same reference (eigenFp32Seconds; left 0 when it fails the check). The paths of a context
// and batch are timed in turn within each repetition: onPoint sees a point that is skipped or fails
// its check at once, and the timed ones together once their context is measured; stop() returning
// true ends the sweep before the next path's check or after the current repetition (the paths of
// that context then reported with the repetitions they had).
DecodeBenchReport runCpuDecodeBench(const DecodeBenchOptions& options, const Codebooks& keyBooks,
                                    const Codebooks& valueBooks, const std::string& codebookSource,
                                    const std::function<void(const DecodeBenchPoint&)>& onPoint = {},
                                    const std::function<bool()>& stop = {});

} // namespace gsrq
