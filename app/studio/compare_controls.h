#pragma once
// The settings of a KM-against-GSKM comparison as controls, shared by the KM vs GSKM and Model
// pages: subspace width D, codewords K, iterations (max), seed and weights.

#include "core/jobs/compare_job.h"

#include <QString>

class QComboBox;
class QFormLayout;
class QSpinBox;
class QWidget;

namespace gsrq::studio {

QSpinBox* makeSpinBox(int lo, int hi, int value, QWidget* parent);

struct CompareControls {
    explicit CompareControls(QWidget* parent);
    void addRows(QFormLayout* form) const; // one row each, in the order above
    CompareSettings settings() const;      // D, K, iterations and seed (not the methods or residual)
    void set(const CompareSettings& s, const QString& weights);

    QSpinBox *dim, *k, *iters, *seed;
    QComboBox* weights; // none, grad-raw, grad-log
};

} // namespace gsrq::studio
