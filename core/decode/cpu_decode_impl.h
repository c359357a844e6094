#pragma once
// Internal to the CPU decode cache (cpu_decode.cpp, cpu_decode_append.cpp, cpu_decode_step.cpp): its
// state and the FP16 helpers they share. Not a public header.

#include "core/cluster/cluster_backend.h"
#include "core/cluster/nearest_kernels.h"
#include "core/cluster/nearest_screened.h"
#include "core/decode/cpu_decode.h"
#include "core/decode/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

namespace gsrq {

namespace cpudecodeimpl {

inline std::uint16_t halfBits(float v)
{
    return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(v));
}

inline float halfValue(std::uint16_t b)
{
    return float(Eigen::numext::bit_cast<Eigen::half>(b));
}

inline std::vector<std::uint16_t> halves(const Codebooks& cb)
{
    std::vector<std::uint16_t> h(cb.data.size());
    for (std::size_t i = 0; i < h.size(); ++i)
        h[i] = halfBits(cb.data[i]);
    return h;
}

// A split pays fixed costs (the lookup path's table, the bins zeroed and merged), so none is shorter.
inline constexpr std::int64_t kMinFp16SplitTokens = 512;
inline constexpr std::int64_t kMinBinSplitTokens = 2048;

// A book's codewords packed per (subspace, stage) for encoding a few rows: where the CPU has AVX-512
// they are read in FP16 and the few that could win scored again in FP32 (nearest_screened.h: the
// same labels from half the bytes), else the assignment kernel's FP32 panels.
struct FewPanels {
    std::vector<nearest::NearestPanels> fp32;
    std::vector<nearest::ScreenedPanels> screened; // empty where not used
    bool packed = false;
};

// Below this many codewords a stage's book is a few KB (16 × 64 FP32 values: 4 KB), read from the
// inner caches: the append's FP16 screen would cost more than the bytes it saves (FP32 panels then).
inline constexpr int kMinScreenedCodewords = 64;

// Packs p from cb at its first use (cpu_decode_append.cpp): FP16 panels with an exact second look
// where the CPU has AVX-512, the books are large enough and every codeword fits FP16, else the
// assignment kernel's FP32 panels.
void packFewPanels(const Codebooks& cb, FewPanels& p, const nearest::NearestKernels& kernel);

} // namespace cpudecodeimpl

struct CpuDecodeCache::Impl {
    CpuDecodeConfig cfg;
    const cpudecode::Kernels* kernels = nullptr;
    int threads = 1;
    cpudecode::HeadDims d;
    int M = 0, bits = 0, bpt = 0;
    Codebooks keyBooks, valueBooks;          // as given (FP32), for encoding new tokens
    std::unique_ptr<ClusterBackend> encoder; // the quantizer's greedy encode of new tokens, made once
    // A decode step's few new rows are encoded by the assignment kernel directly, on codewords packed
    // once per (subspace, stage) (made at the first such append): the backend's labels, bit for bit
    // (see encodeFew), without its per-call packing and binding.
    cpudecodeimpl::FewPanels keyFew, valueFew;
    // The lookup path's tables read the key panels the append searches (cpu_panel_kernels.h), where
    // there are FP16 ones: per (KV head, subspace, stage), each panel's first half.
    std::vector<const std::uint16_t*> keyPanels;
    Codebooks kb16, vb16; // rounded to FP16, as floats (for references)
    std::vector<std::uint16_t> kbh, vbh;
    std::vector<PackedCodes> kc, vc;                  // per sequence, with room for `capacity` tokens
    std::vector<std::vector<std::uint16_t>> k16, v16; // per sequence: kvHeads × capacity × headDim
    std::int64_t tokens = 0;
    MatrixRF q, out;
    std::int64_t positionOffset = 0;
    bool haveQuery = false;
    std::vector<double> invFreq;
    std::vector<float> rope; // tokens × headDim: cos of each pair, then sin, at the token's position
    std::int64_t ropeOffset = -1, ropeTokens = -1;
    // Per work item (sequence, KV head, split): running reference, sum, and output or bins.
    std::vector<float> pm, pl, acc, tables, qs;
    std::vector<std::vector<std::uint8_t>> unpacked; // per work item, codes when they are not bytes

    std::int64_t headBooks() const { return std::int64_t(d.P) * d.R * d.K * d.D; }
    std::int64_t binsPerItem() const { return std::int64_t(d.P) * d.R * d.K * d.Gp; }

    int splitsFor(DecodePath path) const
    {
        const std::int64_t items = std::int64_t(cfg.batch) * cfg.shape.kvHeads;
        if (threads <= items || tokens <= 0)
            return 1;
        const std::int64_t want = (threads + items - 1) / items;
        const std::int64_t minTokens =
            path == DecodePath::Fp16 ? cpudecodeimpl::kMinFp16SplitTokens : cpudecodeimpl::kMinBinSplitTokens;
        return int(std::max<std::int64_t>(1, std::min(want, tokens / minTokens)));
    }

    // The codes of tokens [t0, t1) of a KV head as the path reads them: as packed where a code is a byte,
    // or where the lookup path reads 4-bit codes packed (cpu_kernels.h's lookupReadsNibbles).
    cpudecode::CodeView view(const PackedCodes& p, int head, std::int64_t t0, std::int64_t t1, std::size_t item,
                             bool values, DecodePath path)
    {
        const bool nibbles = bits == 4 && path == DecodePath::Lookup && cpudecode::lookupReadsNibbles(d);
        if (bits == 8 || nibbles)
            return {p.data.data() + (std::size_t(head) * d.P * p.capacity + std::size_t(t0)) * bpt, bpt,
                    std::int64_t(p.capacity) * bpt, bits};
        // Other codes narrower than a byte: unpacked once per step into the item's buffer, [token][subspace][stage].
        auto& buf = unpacked[item * 2 + (values ? 1 : 0)];
        const std::int64_t n = t1 - t0, per = std::int64_t(d.P) * d.R;
        buf.resize(std::size_t(n * per));
        for (std::int64_t t = 0; t < n; ++t)
            for (int sp = 0; sp < d.P; ++sp)
                for (int r = 0; r < d.R; ++r)
                    buf[std::size_t(t * per + sp * d.R + r)] = std::uint8_t(packedCode(p, head * d.P + sp, t0 + t, r));
        return {buf.data(), per, d.R, 8};
    }

    void ensureRope()
    {
        if (ropeOffset == positionOffset && ropeTokens == tokens)
            return;
        const int hd = cfg.shape.headDim, half = hd / 2;
        // The same offset and more tokens (decode appends): only the new positions are computed.
        const std::int64_t from =
            ropeOffset == positionOffset && ropeTokens >= 0 && ropeTokens < tokens ? ropeTokens : 0;
        rope.resize(std::size_t(tokens) * hd);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (std::int64_t t = from; t < tokens; ++t)
            for (int i = 0; i < half; ++i) {
                const double a = double(positionOffset + t) * invFreq[std::size_t(i)];
                rope[std::size_t(t) * hd + i] = float(std::cos(a));
                rope[std::size_t(t) * hd + half + i] = float(std::sin(a));
            }
        ropeOffset = positionOffset;
        ropeTokens = tokens;
    }

    // Whether the lookup path's tables come from the append's key panels here (the AVX-512 kernels,
    // FP16 panels, contiguous subspaces), packing them at the first such step.
    bool tablesFromKeyPanels();

    void step(DecodePath path);
};

} // namespace gsrq
