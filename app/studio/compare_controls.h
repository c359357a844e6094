#pragma once
// The settings of a KM-against-GSKM comparison as controls, shared by the KM vs GSKM and Model
// pages: subspace width D, codewords K, iterations (max), seed and weights.

#include "core/io/kv_dump.h"
#include "core/jobs/compare_job.h"

#include <QString>

class QComboBox;
class QFormLayout;
class QSpinBox;
class QWidget;

namespace gsrq::studio {

QSpinBox* makeSpinBox(int lo, int hi, int value, QWidget* parent);
// The dump's first key tensor laid out as [tokens, heads, head_dim] (a model's dump), or null: what
// the pages' defaults follow (D = head_dim where heads are 32 features or more).
const KvTensor* headedKey(const KvDump* dump);

struct CompareControls {
    explicit CompareControls(QWidget* parent);
    void addRows(QFormLayout* form) const; // one row each, in the order above
    CompareSettings settings() const;      // D, K, iterations and seed (not the methods or residual)
    void set(const CompareSettings& s, const QString& weights);
    // D and K for a dump, as the GSRQ page's presets choose: a model's heads (of 32 features or more)
    // whole with the paper's K = 256; the toy sample's heads of 8 (or no dump) D = 8, K = 64.
    // Only when the dump's heads differ from those D and K last followed (headsFollowed): reopening a
    // dump of the same heads keeps the user's D and K (restored after a restart too).
    void followHeads(const KvDump* dump);
    int headsFollowed = -1; // the head_dim D and K were set for (0: no heads; −1: none yet)

    QSpinBox *dim, *k, *iters, *seed;
    QComboBox* weights; // none, grad-raw, grad-log
};

} // namespace gsrq::studio
