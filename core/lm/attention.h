#pragma once
// Attention fidelity: how much quantizing keys and values changes attention outputs.
// For a seeded sample of query rows, causal softmax attention inside each sequence, with GQA (query
// head h reads KV head h / (heads / kvHeads)), computed in double with exact keys/values and with
// their reconstructions. All inputs are post-RoPE where RoPE applies.
//   q: N × heads·headDim, k, v, kHat, vHat: N × kvHeads·headDim; positions, sequenceIds: N.

#include "core/io/tensor.h"

#include <vector>

namespace gsrq {

struct AttentionFidelity {
    double relativeL2 = 0;  // mean over (query, head) of ‖o − ô‖ / ‖o‖
    double top8Overlap = 0; // mean of |top8(p) ∩ top8(p̂)| / min(8, keys visible)
    int queries = 0;        // query rows sampled
};

struct AttentionInputs {
    const MatrixRF* q = nullptr;
    const MatrixRF* k = nullptr;
    const MatrixRF* v = nullptr;
    const MatrixRF* kHat = nullptr;
    const MatrixRF* vHat = nullptr;
    std::vector<std::int64_t> positions, sequenceIds;
    int heads = 0, kvHeads = 0, headDim = 0;
};

AttentionFidelity attentionFidelity(const AttentionInputs& in, int sampleQueries, std::uint64_t seed);

} // namespace gsrq
