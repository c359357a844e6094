#pragma once
// Per-row weights from loss gradients (GSRQ paper):
//   none      w_i = 1
//   grad-raw  w_i = ‖∂L/∂x_i‖
//   grad-log  w_i = log(1 + λ‖∂L/∂x_i‖),  λ = τ / (median‖∂L/∂x‖ + ε)
//   grad-sq   w_i = ‖∂L/∂x_i‖²: the diagonal Fisher information summed over the row, the weighting
//             of coupled quantization (CQ, Zhang et al. 2024)
// The log compresses the raw spread (often > 400× max/median) to under 10×.

#include "core/base/stats.h"
#include "core/io/kv_dump.h"
#include "core/io/tensor.h"

#include <Eigen/Core>
#include <optional>
#include <string>

namespace gsrq {

enum class WeightMode { None, GradRaw, GradLog, GradSq };
std::optional<WeightMode> weightModeFromName(const std::string& s); // "none", "grad-raw", "grad-log", "grad-sq"
const char* weightModeName(WeightMode m);

struct WeightSummary {
    double rawMax = 0, rawMedian = 0;       // of ‖g‖
    double weightMax = 0, weightMedian = 0; // of the weights used
    double lambda = 0;                      // grad-log only
};

// grad: n × d gradient rows (finite). Returns n weights ≥ 0.
Eigen::VectorXf gradientWeights(const MatrixRF& grad, WeightMode mode, double tau = 1.0,
                                WeightSummary* summary = nullptr, double epsilon = 1e-12);

// The same weights from the gradient norms ‖g_i‖ already computed: the one copy of each formula.
Eigen::VectorXd weightsFromNorms(const Eigen::VectorXd& norms, WeightMode mode, double tau = 1.0,
                                 WeightSummary* summary = nullptr, double epsilon = 1e-12);

// Per-row weights of a loaded tensor from its gradient (layers.L.key_grad / value_grad), with the
// same rows dropped; empty for WeightMode::None. Errors (no gradient, row counts that differ,
// NaN/Inf in the gradient) name the tensor and the --weights flag.
Eigen::VectorXf weightsFor(const KvDump& dump, const KvTensor& t, const LoadedTensor& loaded, WeightMode mode,
                           double tau, WeightSummary* summary = nullptr);

} // namespace gsrq
