#pragma once
// The lookup path's tables (cpu_kernels.h's Kernels::tables) over the key codewords as the new token's
// encoding reads them: FP16 panels of 16 codewords, a feature's 16 values together
// (nearest_screened.h). The append's screen and the query's tables then read the same bytes one after
// the other, where they read two copies of every key book, each from memory at short contexts; and 16
// codewords fill a register, so the products need no sums across lanes. (The output's product with
// the value panels was tried as well: its lanes must be summed at the end, and it was no faster than
// Kernels::values over the book's rows.)

#include "core/decode/cpu_kernels.h"

#include <cstdint>

namespace gsrq::cpudecode {

// Whether the panel kernels run here: a CPU with AVX-512 (where the panels exist) and a book whose
// codewords fill whole panels (K a multiple of 16).
bool panelKernelsRun(const HeadDims& d);

// T (P × R × K × Gp floats, lanes past G zero: Kernels::tables' layout) from q (G × hd, scaled) and
// panels[p·R + r], the K codewords of subspace p, stage r: K/16 groups × D × 16 halves. Each entry is
// the FP32 sum of D products of q with the codeword's FP16 value, in feature order.
void tablesFromPanels(const HeadDims& d, const float* q, const std::uint16_t* const* panels, float* T);

} // namespace gsrq::cpudecode
