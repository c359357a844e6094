#pragma once
// Element types, read-only tensor views over mapped files, and conversion to float32 matrices.
//
// A TensorView points into a MappedFile (kept alive by the view). Data may be unaligned (the
// safetensors header has any length), so elements are always read with memcpy.
// Thread-safety: views are immutable; conversions allocate their own output.

#include "core/base/mapped_file.h"

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gsrq {

enum class DType { Bool, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

std::size_t dtypeSize(DType t);
const char* dtypeName(DType t); // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtypeFromName(const std::string& name);
bool isFloat(DType t);

// Row-major float32 matrix: the layout every algorithm takes (n rows × d features).
using MatrixRF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Rows the algorithms read without owning them: a MatrixRF, or a Map over memory that is not ours
// (a NumPy array or a torch tensor, with no copy). Where a backend binds the rows they must be
// contiguous; a view with another row stride is copied first (contiguousRows).
using RowsRef = Eigen::Ref<const MatrixRF>;
inline bool isContiguous(const RowsRef& x)
{
    return x.rows() <= 1 || x.outerStride() == x.cols();
}

struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    const std::byte* data = nullptr;
    std::size_t nbytes = 0;
    std::shared_ptr<const MappedFile> file; // keeps `data` alive

    std::int64_t numel() const;
    // Rows = shape[0]; features = product of the remaining dims (1 for a 1-D tensor).
    std::int64_t rows() const;
    std::int64_t features() const;
    std::string shapeString() const; // "[2048, 4, 8]"
    std::string where() const;       // "tensor 'name' in file.safetensors"
};

// Converts a floating-point tensor (F16, BF16, F32, F64) to [rows, features] float32.
// Throws Error(InvalidInput) for other dtypes, naming the tensor.
MatrixRF toMatrix(const TensorView& t);
// Converts any numeric tensor to int64 (positions, sequence ids).
std::vector<std::int64_t> toInt64(const TensorView& t);

// Rows holding NaN or Inf: their indices, ascending.
std::vector<std::int64_t> nonFiniteRows(const MatrixRF& x);
// Removes the listed rows (ascending indices).
MatrixRF dropRows(const MatrixRF& x, const std::vector<std::int64_t>& rows);

// Encodes float32 values to a float dtype's little-endian bytes (F16, BF16, F32, F64);
// used by the writers and the tests' round trips.
std::vector<std::byte> encodeFloats(const float* values, std::size_t n, DType t);

} // namespace gsrq
