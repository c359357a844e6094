#pragma once
// Synthetic data (always labelled synthetic in outputs): seeded and reproducible across platforms.
//   gaussian: i.i.d. N(0, 1)
//   kv:       key-like rows: a low-rank correlated part plus noise, per-channel scales drawn
//             log-normally and a few outlier channels 10× larger (as keys show in real models)

#include "core/io/tensor.h"

#include <optional>
#include <string>

namespace gsrq {

enum class SynthKind { Gaussian, KvLike };
std::optional<SynthKind> synthKindFromName(const std::string& s);

MatrixRF synthesize(SynthKind kind, std::int64_t rows, int features, std::uint64_t seed);

} // namespace gsrq
