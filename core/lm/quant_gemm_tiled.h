#pragma once
// What quant_gemm.cpp shares with its tiled many-token kernel (quant_gemm_tiled.cpp): one unpacked
// weight row, and the tiled AVX-512 VNNI product. Internal to core/lm; quant_gemm.h is the API.

#include "core/lm/quant_gemm.h"

#include <cstdint>
#include <vector>

namespace gsrq::detail {

// One row of W unpacked: w (cols bytes), ls (cols/4 scales), oc (cols/16 offset coefficients).
// Q8_0's signed quants: stored as they are (no offset; the AVX2 and portable kernels take them with
// the sign trick or plainly), or shifted by 128 into unsigned bytes with a −128·d offset (the VNNI
// kernels, whose vpdpbusd multiplies unsigned by signed bytes without saturating).
struct UnpackedRow {
    std::vector<std::uint8_t> w;
    std::vector<float> ls, oc;
    void size(std::int64_t cols)
    {
        w.resize(std::size_t(cols));
        ls.resize(std::size_t(cols / 4));
        oc.resize(std::size_t(cols / 16));
    }
};

// Row b (its blocks) of a matrix of this type unpacked, with the AVX2 build where the CPU has it.
void unpackGemmRow(GgmlType type, const std::uint8_t* b, std::int64_t cols, bool shiftQ8, UnpackedRow& u);

// Y = X·Wᵀ as quantGemm() defines it, for many tokens on a CPU with AVX-512 VNNI: W packed 32 rows
// at a time so that one vpdpbusd multiplies 16 rows by 4 of a token's values (no sums across lanes),
// a tile of 32 rows × 6 tokens in registers, the scales applied once per 16 or 32 values. False,
// nothing written, where the CPU lacks VNNI, the type is not one the kernels read or the shapes differ.
bool tiledGemmVnni(const QuantMatrix& w, const Q8Activations& x, float* y, std::int64_t ldy);

} // namespace gsrq::detail
