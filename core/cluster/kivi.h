#pragma once
// KIVI (Liu et al., 2024): tuning-free asymmetric scalar quantization of the KV cache, the scalar
// baseline the GSRQ paper compares against at matched bits.
//
//   keys    per channel: each channel's min and max over groups of G consecutive tokens of a
//           sequence (keys have outlier channels, so a channel shares one range);
//   values  per token: min and max over groups of G consecutive channels of a row;
//   both    asymmetric, round to nearest: s = (max − min)/(2^B − 1), q = clamp(round((x − min)/s)),
//           x̂ = q·s + min, with s and min stored in FP16 (the reconstruction uses the FP16 values);
//   window  the last N tokens of each sequence stay in FP16; for keys, tokens before the window that
//           do not fill a group of G stay in FP16 too (KIVI quantizes keys a whole group at a time).
//
// Honest bits per value: B for each quantized value, 32 bits (an FP16 scale and zero) per group,
// 16 for each value kept in FP16, all divided by the values of the tensor.
// Rows are tokens; a sequence is a run of equal sequence ids (rows of one sequence are contiguous
// and in order, as dumps and the model's cache hold them); no ids: one sequence.
// Pure functions; any thread.

#include "core/io/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace gsrq {

enum class KiviAxis { Key, Value };

struct KiviSettings {
    int bits = 2;     // B, 1..8
    int group = 32;   // G: tokens (keys) or channels (values) sharing a scale and zero
    int residual = 0; // N: the last N tokens of each sequence kept in FP16
};

// Throws Error(InvalidInput) naming --bits (outside 1–8), --group (< 1, or for values a group that
// does not divide `features`) or --residual (< 0). `flagPrefix` is put before the flag names
// ("--kivi-" reads --kivi-bits).
void validateKivi(const KiviSettings& s, std::int64_t features, KiviAxis axis, const std::string& flagPrefix = "--");

struct KiviResult {
    MatrixRF reconstruction;
    std::int64_t quantizedValues = 0, fp16Values = 0, groups = 0;
    double bits = 0; // honest bits per value (see above)
};

KiviResult kiviQuantize(const MatrixRF& x, KiviAxis axis, const KiviSettings& s,
                        std::span<const std::int64_t> sequenceIds = {});

// "kivi-2", "kivi-2g128", "kivi-1g32r128": B, then optionally g<G> and r<N>, in that order.
// Throws Error(InvalidInput) naming `flag` for anything else.
KiviSettings parseKiviName(const std::string& name, const std::string& flag);
std::string kiviName(const KiviSettings& s); // kivi-2g32 (r<N> only when N > 0)

} // namespace gsrq
