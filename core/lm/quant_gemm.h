#pragma once
// Products of GGUF block weights with activations rounded to 8 bits, for one token (a decode step)
// or many (a prefill): Y = X·Wᵀ with integer dot products, as llama.cpp computes them. Each 32
// activations share a scale (amax / 127) and round to integers in [−127, 127]; each weight block
// is unpacked once per row into unsigned bytes with a scale per 4 values and an offset term per 16
// (Q4_0's −8, Q4_1's m, Q4_K's dmin·m, Q6_K's −32), so one kernel per instruction set serves every
// block type: AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw, vpmaddwd), or plain C++. With VNNI a
// decode step (one token) reads each block straight into registers, and from 8 tokens on the rows
// are packed 32 at a time for an integer GEMM (quant_gemm_tiled.cpp).
//
// What the rounding costs: each activation moves by at most half its block's step, amax / 254, so
// |y − y_fp32| ≤ Σ_blocks (amax_b / 254) · Σ_{i∈b} |w_i| (quantGemmErrorBound computes it); the
// perplexity cost on real models is measured (docs/benchmarks.md). quant_matvec.h keeps the exact
// FP32-activation products, which `gsrq ppl` uses by default.

#include "core/base/cpu_features.h"
#include "core/lm/quant_matvec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gsrq {

// Rows of activations rounded to 8 bits per 32 values. cols: a multiple of 32.
struct Q8Activations {
    std::int64_t rows = 0, cols = 0;
    std::vector<std::int8_t> q;       // rows × cols
    std::vector<float> laneScale;     // rows × cols/4: each 4 values' scale (their block of 32's)
    std::vector<float> sum16;         // rows × cols/16: scale · Σq over each 16 values
    std::vector<std::int32_t> qsum16; // rows × cols/16: Σq over each 16 values
    std::vector<float> scale32;       // rows × cols/32: each block's scale
    std::vector<float> sum32;         // rows × cols/32: scale · Σq over each block
    std::vector<float> absMax;        // rows × cols/32: each block's amax (for the error bound)
};

// x: rows × cols floats, row r at x + r·ld. Throws Error(InvalidInput) when cols is not a multiple
// of 32 or a value is not finite.
void quantizeActivations(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, Q8Activations& out);
// The same without vector instructions (the tests check that both give the same bytes and scales).
void quantizeActivationsPortable(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 Q8Activations& out);

// y (x.rows × w.rows, row t at y + t·ldy) = X·Wᵀ, rows of W split over OpenMP's threads; the
// fastest build the CPU runs. quantGemmIsa() names it: "avx512-vnni", "avx2" or "portable".
void quantGemm(const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy);
const char* quantGemmIsa();
// The build a CPU with these features runs (the dispatch, testable without such a CPU).
const char* quantGemmIsaFor(const CpuFeatures& f);

// One build by name (the tests compare them): false, nothing written, where the CPU lacks it, the
// matrix is empty or its columns differ from the activations'.
bool quantGemmBuild(const std::string& isa, const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy);

// Per output (x.rows × w.rows, as y): the bound on |quantGemm − W·x over the FP32 activations|
// from rounding the activations (above), with the weights' values exactly dequantizeGguf()'s. Slow
// (it dequantizes W); for tests.
std::vector<double> quantGemmErrorBound(const QuantMatrix& w, const Q8Activations& x);

} // namespace gsrq
