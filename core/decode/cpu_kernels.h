#pragma once
// The CPU decode paths' inner loops over one (sequence, KV head) and a run of tokens, built three times
// on x86-64: plain C++ over arrays; AVX2 registers with FMA and F16C; and the same with the FP16 path
// over AVX-512 registers. The vector builds are compiled whatever the build's target (a package for
// x86-64-v3 carries all three) and chosen at run time by what the CPU runs: the decode cache uses the
// widest (bestKernels), a caller may name one (kernelsNamed), and the tests hold every build to the
// references and the vector ones to the plain C++. The cache, threads, splits and combine are
// cpu_decode.cpp's.
//
// Scores are in log2 units: the caller folds log2(e)/√head_dim into the queries (or tables), and
// softmax weights are exp2(score − reference). The reference is raised only when a score exceeds it by
// more than kLazyRescale (a factor of 2^8 in the weights, far from FP32's range), so the running sums
// and bins are rescaled a few times per context instead of at every new maximum; the final division
// by the weights' sum makes the result independent of the reference.

#include <cstdint>
#include <string_view>
#include <vector>

namespace gsrq::cpudecode {

inline constexpr float kLazyRescale = 8.0f;

struct HeadDims {
    int G = 1;  // query heads per KV head (1..8)
    int Gp = 4; // lanes of a table entry or bin: 4 for G ≤ 4, else 8 (a group's entries in one load)
    int hd = 0; // head_dim, a multiple of 16 (the paper path rotates halves of 8-wide chunks)
    int D = 0;  // subspace width, a multiple of 8 dividing head_dim
    int P = 1;  // subspaces per head: hd / D
    int R = 0;  // stages
    int K = 0;  // codewords per stage, ≤ 256
};

// Codes of one KV head: code(t, p, r) is field r, `bits` wide and least significant first, of the bytes
// at data + t·tokenStride + p·subspaceStride. With 8 bits (every path) it is byte r; with 4 (the lookup
// path's shapes of lookupReadsNibbles, read as the cache packs them) the low nibble of byte r/2 for an
// even r, the high one for an odd r. The cache's views of keys and values agree in `bits`, and 4 is
// given only to the lookup path for those shapes: the other loops read a byte per code.
struct CodeView {
    const std::uint8_t* data = nullptr;
    std::int64_t tokenStride = 0, subspaceStride = 0;
    int bits = 8;
};

// The shapes whose codes the lookup path reads packed, 4 bits apiece (K = 16 with R = 8, 16 or 32: 1 bit
// per activation at D = 64 with R = 16, and at D = 128 with R = 32), with no copy a byte per code.
inline bool lookupReadsNibbles(const HeadDims& d)
{
    return d.K == 16 && (d.R == 8 || d.R == 16 || d.R == 32);
}

struct Kernels {
    const char* isa; // "avx512", "avx2+fma+f16c" or "portable"
    int lanes;       // floats per vector of the FP16 path and of fmaLoop (16, 8, 8)
    // FP16 flash-decoding over n rows of keys and values (head_dim halves each, consecutive), for the
    // G query heads of the group (q: G × hd, scaled); m, l (G) and acc (G × hd) carry the running
    // reference, weight sum and unnormalised output (start: −inf, 0, 0).
    void (*fp16)(const HeadDims& d, const std::uint16_t* keys, const std::uint16_t* values, std::int64_t n,
                 const float* q, float* m, float* l, float* acc);
    // Lookup tables of q · codeword for every (subspace of the head, stage, codeword): books are the
    // head's P × R × K × D halves; T is P × R × K × Gp floats (lanes past G are zero).
    void (*tables)(const HeadDims& d, const float* q, const std::uint16_t* books, float* T);
    // Lookup path over n tokens: scores as sums of table entries, softmax weights binned by value
    // codeword into W (P × R × K × Gp); m, l have Gp lanes.
    void (*lookup)(const HeadDims& d, const float* T, CodeView keys, CodeView values, std::int64_t n, float* m,
                   float* l, float* W);
    // Paper path over n tokens: each key decoded from its R codewords (books: the head's key codebooks),
    // rotated by RoPE (rope: n × hd/2 pairs of cos, sin), dotted with q (G × hd, rotated and scaled);
    // values binned as in lookup.
    void (*paper)(const HeadDims& d, const float* q, const std::uint16_t* books, const float* rope, CodeView keys,
                  CodeView values, std::int64_t n, float* m, float* l, float* W);
    // out (G × hd) = Σ over (subspace, stage, codeword) of W's weight times the value codeword.
    void (*values)(const HeadDims& d, const float* W, const std::uint16_t* books, float* out);
    // 12 independent chains of `lanes`-wide fused multiply-adds, `iterations` long (24 · lanes FLOPs
    // each): the FP32 rate a roofline divides by. Returns a sum so the work is not optimised away.
    float (*fmaLoop)(std::int64_t iterations);
};

const Kernels& portableKernels(); // plain C++
const Kernels* avx2Kernels();     // null where not built (not x86-64) or the CPU lacks AVX2, FMA or F16C
const Kernels* avx512Kernels();   // null where not built or the CPU lacks AVX-512 F, BW, VL or DQ (or AVX2)
const Kernels& bestKernels();     // the widest of those
std::vector<const Kernels*> availableKernels(); // portable first, then each vector build the CPU runs
// A build by name: "best" or empty, "avx512", "avx2" (or "avx2+fma+f16c"), "portable"; null when this
// CPU cannot run it.
const Kernels* kernelsNamed(std::string_view isa);

namespace detail {
const Kernels& avx2Build();   // unchecked: only through avx2Kernels()
const Kernels& avx512Build(); // unchecked: only through avx512Kernels()
} // namespace detail

} // namespace gsrq::cpudecode
