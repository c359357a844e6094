#pragma once
// The assignment step's kernel: for each row x, the codeword c of largest score 2·x·c − ‖c‖² (the
// nearest in Euclidean distance; for GSKM's unit shapes, the largest cosine) and that score. The
// product's accumulators stay in registers and each panel's scores are folded into the row's running
// best (per lane, in L1) as soon as they are made, so no N × K score matrix is written.
// Ties go to the lowest index, as a scan of the scores in order would.
//
// Built three times on x86-64 (GSRQ_NEAREST_ISA): plain C++ over Eigen's GEMM (0, also the dispatch),
// AVX2 with FMA (1), AVX-512 (2), the vector builds with their instruction sets on by a target pragma and
// chosen at run time by what the CPU runs. The vector builds tile 12 (AVX-512) or 6 (AVX2) rows against
// 32 or 16 codewords, the product's accumulators all in registers; the codewords are packed once per
// pass into panels of that width (NearestPanels).

#include "core/io/tensor.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace gsrq::nearest {

// The codewords of one pass packed for a kernel of `width` lanes: panel g holds codewords
// [g·width, (g+1)·width) as D rows of width floats (zero past K), bias their −‖c‖² (−∞ past K).
struct NearestPanels {
    NearestPanels() = default;
    NearestPanels(NearestPanels&&) = default; // the storage moves with its alignment
    NearestPanels& operator=(NearestPanels&&) = default;
    NearestPanels(const NearestPanels&) = delete; // a copy's buffer would sit at another offset
    NearestPanels& operator=(const NearestPanels&) = delete;

    int K = 0, D = 0, width = 0, groups = 0;
    std::vector<float> storage; // over-allocated so that panels() is 64-byte aligned
    std::vector<float> bias;    // groups · width
    Eigen::MatrixXf Ct;         // D × K, the portable build's GEMM operand
    const float* panels() const;
};

struct NearestKernels {
    const char* isa; // "avx512", "avx2+fma" or "portable"
    int width;       // codewords per panel (32, 16; the portable build uses Ct)
    int panel;       // codewords per panel of nearestRange's panelMax: width, or 32 for the portable build
    // label[i], score[i] for rows x + i·ldx, i < n (each D floats).
    void (*nearest)(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, std::int32_t* label,
                    float* score);
    // The same over codewords [k0, k1) only (k0 a multiple of `panel`; label an index into C), with each
    // row's second-largest score there (−∞ where the range holds one codeword) and, unless panelMax is
    // null, the largest score of each `panel` codewords of the range (row i's at panelMax + i·panels):
    // what exact bounds need. In the vector builds a pair (x, c) scores the same bits here as in
    // `nearest`, wherever either lies in its tile or range; the portable build's GEMM does not promise
    // that (its rounding may follow a codeword's column), so exact bounds do not use it.
    void (*nearestRange)(const float* x, std::int64_t n, std::int64_t ldx, const NearestPanels& p, int k0, int k1,
                         std::int32_t* label, float* score, float* second, float* panelMax);
};

// Packs C (K × D) for k.
NearestPanels packCodewords(const MatrixRF& C, const NearestKernels& k);

const NearestKernels& portableNearest();
const NearestKernels* avx2Nearest();                   // null where not built or the CPU lacks AVX2 and FMA
const NearestKernels* avx512Nearest();                 // null where not built or the CPU lacks AVX-512 F, BW, VL, DQ
const NearestKernels& bestNearest();                   // the widest of those
std::vector<const NearestKernels*> availableNearest(); // portable first

namespace detail {
const NearestKernels& avx2Build();
const NearestKernels& avx512Build();
} // namespace detail

} // namespace gsrq::nearest
