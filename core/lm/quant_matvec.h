#pragma once
// A GGUF weight matrix read straight from its quantized blocks, for one activation vector at a time
// (a decode step): y = W·x with W's values exactly those dequantizeGguf() gives and x in FP32. No
// activation is quantized (llama.cpp rounds x to 8 bits for its integer dot products; this does
// not). What differs from the FP32 product over dequantized weights is the order and grouping of the
// sums: each block's scale multiplies the block's sum (d·Σq·x rather than Σ(d·q)·x), so results agree
// to FP32 rounding (about 1e-6 relative), not bit for bit. A decode step is bound by reading the
// weights: a 4-bit block is a seventh of the FP32 bytes.

#include "core/io/gguf.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gsrq {

struct QuantMatrix {
    GgmlType type = GgmlType::F32;
    const std::uint8_t* data = nullptr; // rows × rowBytes, in the mapped file
    std::int64_t rows = 0, cols = 0, rowBytes = 0;
    std::vector<std::int32_t> rowOrder; // empty, or output row i is the stored row rowOrder[i]
    explicit operator bool() const { return data != nullptr; }
};

// The types the kernels read: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K (what the llama and qwen2 files people run
// are made of; others stay on the FP32 path).
bool quantMatVecTakes(GgmlType type);

// Values and bytes per block of a type the kernels read ({0, 0} for another); quant_gemm.h's too.
struct QuantBlockLayout {
    int elements = 0, bytes = 0;
};
QuantBlockLayout quantBlockLayout(GgmlType type);

// Tensor t (GGUF dims {cols, rows}) as a matrix of its blocks; an empty one (false) for a type the
// kernels do not take or a tensor that is not 2-D. The tensor's data must outlive the view.
QuantMatrix quantMatrix(const GgufTensor& t);

// Rows [row0, row0 + count) of W in output order (the row order applied) as FP32, into out (count ×
// w.cols): exactly dequantizeGguf()'s values. How many-token products read a matrix kept only as
// blocks: a panel at a time (TransformerModel's forward pass), never the whole matrix.
void quantRows(const QuantMatrix& w, std::int64_t row0, std::int64_t count, float* out);

// Whether every value of W is finite, read from its blocks' FP16 scales alone (Q4_0, Q8_0 and Q6_K's
// d; Q4_1's d and m; Q4_K's d and dmin): a value is a finite scale times a small integer, plus a
// finite minimum, so it is finite exactly when every scale is, and a NaN or infinite scale makes
// some value of its block NaN or infinite (an infinite one times a zero quant is NaN). What the
// loader checks of a matrix kept only as blocks: no dequantization, a few bytes a block.
bool quantMatrixFinite(const QuantMatrix& w);

// y (w.rows values) = W·x (w.cols values), rows split over OpenMP's threads; the widest build the CPU
// runs. quantMatVecIsa() names it: "avx512", "avx2+fma" or "portable".
void quantMatVec(const QuantMatrix& w, const float* x, float* y);
const char* quantMatVecIsa();

// One build by name (the tests compare them): false, nothing written, where the CPU lacks it or the
// matrix is empty. quantMatVec() writes nothing for an empty matrix.
bool quantMatVecBuild(const std::string& isa, const QuantMatrix& w, const float* x, float* y);

// A GGUF model's linear weights as blocks (TransformerModel's products read these where present; the
// loader keeps no FP32 copy of a matrix it has here): per layer q, k, v, o, gate (w1), down (w2), up
// (w3), the classifier (output.weight, or token_embd.weight when tied) and the token embedding, whose
// rows the forward pass reads one token at a time. An empty matrix: that tensor's type is not taken.
struct ModelWeightBlocks {
    GgufFile file; // keeps the mapping the views point into
    std::vector<QuantMatrix> wq, wk, wv, wo, w1, w2, w3;
    QuantMatrix classifier, embed;
    int matrices() const;      // linear weights in all
    int blockMatrices() const; // of which read from blocks
    std::string types() const; // the block types read, e.g. "Q4_K, Q6_K"
};

} // namespace gsrq
