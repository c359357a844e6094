#pragma once
// The compressed KV cache that decode reads, and the CPU references the GPU decode paths are held to.
//
// Packed layout (PackedCodes): for each subspace m (a run of D features of the KV row: with
// D = head_dim, one KV head), tokens in order, each token's R stage codes packed little-endian at
// log2(K) bits each into `bytesPerToken` bytes, padded to a multiple of 4 so a thread can fetch a
// token's codes with aligned 32-bit (for R·log2 K = 128 bits: one 128-bit) loads, and a warp reading
// 32 consecutive tokens reads one contiguous span:
//   byte offset of (m, t) = (m · capacity + t) · bytesPerToken
// K = 256 gives one byte per code. `capacity` leaves room to append tokens during decode.
//
// References, in double:
//   decodeAttention: the paper path. Keys stored before RoPE: decode k_t = Σ_r C^k[r][code], rotate
//     at position t (rotate-half pairing), scores q·k_t/√d with a softmax over the context, output
//     Σ_t p_t v_t with v_t decoded the same way. Query head h reads KV head h / (heads/kvHeads).
//   lookupAttention: keys stored after RoPE, so q·k_t = Σ_m Σ_r q_m·C^k[m][r][code]: one table of
//     q_m·codeword per (m, r, k), scores as sums of R·M entries; values as Σ_r Σ_k W[m][r][k]·C^v with
//     W the softmax weight each codeword collected. The same numbers as decoding, in another order.
//   naiveAttention: attention over given FP32 keys/values, to check the two above.

#include "core/cluster/quantizer.h"
#include "core/lm/rope.h"

#include <cstdint>
#include <vector>

namespace gsrq {

struct PackedCodes {
    int subspaces = 0, stages = 0, bits = 0;
    std::int64_t tokens = 0, capacity = 0;
    int bytesPerToken = 0;
    std::vector<std::uint8_t> data; // subspaces × capacity × bytesPerToken

    static int bitsFor(int k);                 // log2 K; K must be a power of two ≤ 65,536
    static int bytesFor(int stages, int bits); // ⌈R·bits/8⌉ rounded up to a multiple of 4
};

// Packs codes (N × M·R, as the quantizer's Codes) with room for `capacity` ≥ N tokens.
PackedCodes packCodes(const Codes& codes, int subspaces, int stages, int k, std::int64_t capacity = -1);
// One code back out of the packed layout.
int packedCode(const PackedCodes& p, int subspace, std::int64_t token, int stage);
// All codes back (N × M·R): the round trip of packCodes.
Codes unpackCodes(const PackedCodes& p);
// Appends the codes of new tokens (rows × M·R) after the last one; Error(InvalidInput) when full.
void appendCodes(PackedCodes& p, const Codes& codes);

struct DecodeShape {
    int heads = 0, kvHeads = 0, headDim = 0;
};

// q: heads·headDim (one decode step's query, before RoPE for decodeAttention, after for lookup);
// keys/values: codebooks over kvHeads·headDim features; positions of the cached tokens; the query's
// own position `queryPosition`. Returns heads·headDim outputs.
Eigen::VectorXd decodeAttention(const Eigen::VectorXf& q, std::int64_t queryPosition, const PackedCodes& keyCodes,
                                const Codebooks& keyBooks, const PackedCodes& valueCodes, const Codebooks& valueBooks,
                                const std::vector<std::int64_t>& positions, const std::vector<double>& invFreq,
                                const DecodeShape& shape);

Eigen::VectorXd lookupAttention(const Eigen::VectorXf& qPost, const PackedCodes& keyCodes, const Codebooks& keyBooks,
                                const PackedCodes& valueCodes, const Codebooks& valueBooks, const DecodeShape& shape);

// keys, values: tokens × kvHeads·headDim, used as given (no RoPE).
Eigen::VectorXd naiveAttention(const Eigen::VectorXd& q, const MatrixRD& keys, const MatrixRD& values,
                               const DecodeShape& shape);

// Rotate-half RoPE of one row of concatenated heads at one position, in double.
Eigen::VectorXd ropeRow(const Eigen::VectorXd& x, int headDim, std::int64_t position,
                        const std::vector<double>& invFreq);

// Bytes of one layer's cache: FP16 keys and values, and codes of both plus their codebooks (F16).
struct CacheBytes {
    double fp16 = 0, codes = 0, codebooks = 0;
};
CacheBytes cacheBytes(std::int64_t tokens, const DecodeShape& shape, int dim, int stages, int k);

} // namespace gsrq
