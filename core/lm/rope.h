#pragma once
// Rotary position embedding, applied to rows of concatenated heads.
// X: n × (heads·headDim) row-major; positions: n; invFreq: headDim/2 (θ^(−2i/headDim)).
// Pair i of a head is rotated by angle positions[t]·invFreq[i]:
//   Interleaved (GPT-J, llama2.c): pairs (x[2i], x[2i+1])
//   RotateHalf  (Hugging Face Llama/Mistral/Qwen): pairs (x[i], x[i + headDim/2])

#include "core/io/tensor.h"

#include <optional>
#include <string>
#include <vector>

namespace gsrq {

enum class RopePairing { Interleaved, RotateHalf };
std::optional<RopePairing> ropePairingFromName(const std::string& s); // "interleaved", "half"

MatrixRF applyRope(const MatrixRF& X, int headDim, const std::vector<std::int64_t>& positions,
                   const std::vector<double>& invFreq, RopePairing pairing);

std::vector<double> ropeInvFreq(double theta, int headDim);

} // namespace gsrq
