#pragma once
// The nearest codeword of one row (a decode step's new token, stage by stage), reading the codewords
// in FP16: half the bytes of nearest_kernels.h's FP32 panels, where one row's encoding is bound by
// reading every stage's codebook (SmolLM2's 1-BPA books are 94 MB a step, against its 94 MB of
// weights). The FP16 scores only screen: a bound on their error against the FP32 scores (the
// codewords' rounding to FP16 and both sums' rounding) keeps every codeword that could be the
// nearest, and those few are scored again in FP32 exactly as the vector builds of nearest_kernels.h
// score a pair (one fused multiply-add per dimension in index order, then 2·s − ‖c‖² in one
// rounding). So the label and score are those kernels' bit for bit, ties to the lowest index.

#include "core/io/tensor.h"

#include <cstdint>
#include <vector>

namespace gsrq::nearest {

struct ScreenedPanels {
    ScreenedPanels() = default;
    ScreenedPanels(ScreenedPanels&&) = default; // the storage moves with its alignment
    ScreenedPanels& operator=(ScreenedPanels&&) = default;
    ScreenedPanels(const ScreenedPanels&) = delete; // a copy's buffer would sit at another offset
    ScreenedPanels& operator=(const ScreenedPanels&) = delete;

    int K = 0, D = 0, groups = 0;      // groups of 16 codewords
    std::vector<std::uint16_t> halves; // groups × D × 16 FP16 values (64-byte aligned from first())
    std::vector<float> bias;           // −‖c‖² as every backend rounds it, −∞ past K
    std::vector<float> norm;           // ‖c‖₂ of each codeword (for the bound), 0 past K
    MatrixRF C;                        // the codewords in FP32, for the exact scores
    const std::uint16_t* first() const;
    explicit operator bool() const { return K > 0; }
};

// Packs C (K × D). Empty (false) where screening does not apply: a CPU without AVX-512, a codeword
// beyond FP16's range (|c| > 60000), or a non-finite one; the caller keeps nearest_kernels.h then.
ScreenedPanels packScreened(const MatrixRF& C);

// The nearest codeword of x (D floats) and its score 2·x·c − ‖c‖²: the largest score, the lowest index
// among equal ones, as nearest_kernels.h's vector builds give them (for a row whose scores are all
// NaN, as theirs: codeword 0 at −∞). scratch: resized as needed.
void nearestScreened(const float* x, const ScreenedPanels& p, std::int32_t* label, float* score,
                     std::vector<float>& scratch);

// How many codewords the last calls on this thread scored again in FP32, and how many calls (the
// tests check that the screen screens; nothing else reads them).
struct ScreenedCounts {
    std::int64_t calls = 0, rescored = 0;
};
ScreenedCounts& screenedCounts();

} // namespace gsrq::nearest
