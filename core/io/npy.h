#pragma once
// NumPy .npy reader (validated, memory-mapped) and writer.
// Accepted: format versions 1.0, 2.0 and 3.0; dtypes '<f2', '<f4', '<f8' (also '=' / native
// little-endian spellings); C order. Fortran order, big-endian or other dtypes are refused with
// a message naming the file. The data must fill the rest of the file exactly.

#include "core/io/tensor.h"

#include <string>

namespace gsrq {

// The array as a tensor view named `name` (the file's stem when empty).
TensorView readNpy(const std::string& path, const std::string& name = {});

// Writes a 2-D float array (F16, F32 or F64) as version 1.0 .npy, atomically.
void writeNpy(const std::string& path, const MatrixRF& m, DType dtype = DType::F32);

} // namespace gsrq
