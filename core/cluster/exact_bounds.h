#pragma once
// Exact acceleration of the assignment pass: Yinyang K-means' group bounds (Ding, Zhao, Shen,
// Musuvathi and Mytkowicz, ICML 2015) kept by the CPU backend from pass to pass.
//
// The codewords are split into groups of consecutive indices. Every row keeps, per group, a lower bound
// on its distance to the group's codewords other than its own; after an update each bound drops by the
// farthest any codeword of the group moved. A row's squared distance to its own codeword is summed every
// pass (in float, which is within (D + 2)·2⁻²³ of the exact value: that much is added), and a group is
// scored (by the assignment kernel) only where its bound does not clear that distance by a margin:
//
//   group g skipped  ⇔  L_g² > d(x, c_label)²·(1 + (D + 2)·2⁻²³) + 2E,  E = (D + 4)·2⁻²³·(‖x‖ + max‖c‖)²
//
// E bounds the float error of a kernel score 2x·c − ‖c‖² (a D-term dot product, its bias and a final
// rounding, with a factor of two to spare), so a skipped codeword's kernel score is strictly below the
// own codeword's, and the row's group is always scored: the label is the one the brute-force pass would
// pick, bit for bit, ties to the lowest index included, because a pair scores the same bits in every
// call of the kernel (nearest_kernels.h). The bounds themselves are derived from kernel scores less E and
// stored rounded down, so they stay lower bounds of the true distances.
//
// GSKM assigns by the same rule to c_k = g_k·s_k after its start, so the same bounds serve both methods.

#include "core/cluster/nearest_kernels.h"
#include "core/io/tensor.h"

#include <cstdint>
#include <vector>

namespace gsrq {

class ExactBounds {
public:
    // Forgets every bound: the next pass scores every codeword (and sets the bounds afresh).
    void invalidate() { m_valid = false; }

    // Before a pass over n rows with centroids C: how far each group moved since the pass the bounds
    // are for, or a fresh start when there is none (or K, D or n changed).
    // panel: the kernel's (NearestKernels::panel); groups are whole panels.
    void begin(const MatrixRF& C, std::int64_t n, int panel);

    // Rows [r0, r0 + m) of the pass (x: row r0, ldx floats apart). labels: theirs, in (the last pass's;
    // ignored on a fresh start) and out. score[i]: 2x·c − ‖c‖² of the new label, as ‖x‖² − d² with
    // d² summed in float. sqNorm: every row's ‖x‖² in double. Returns the codeword scores the kernel
    // computed. Called from several threads at once on disjoint rows.
    std::int64_t assign(const float* x, std::int64_t ldx, std::int64_t r0, std::int64_t m, const double* sqNorm,
                        const MatrixRF& C, const nearest::NearestKernels& kernel, const nearest::NearestPanels& panels,
                        std::int32_t* labels, double* score);

    // After the pass: the bounds hold for C.
    void end(const MatrixRF& C);

    // Codewords per group for K codewords of D, in whole panels: about 4,096 multiply-adds a row (32
    // codewords at D = 128, more at smaller D, where a group's product would be shorter than its
    // bookkeeping), and at most 32 groups (32 bounds a row).
    static int groupSizeFor(int K, int D, int panel);

private:
    bool m_valid = false;
    bool m_fresh = true;
    int m_groups = 0, m_groupSize = 0, m_panel = 0;
    std::int64_t m_rows = 0;
    MatrixRF m_prev;                   // the centroids the bounds are for
    std::vector<float> m_groupDriftUp; // per group: the farthest one of its codewords moved, rounded up
    double m_maxNorm = 0;              // max ‖c‖ of this pass's centroids
    std::vector<float> m_lower;        // rows × groups
};

} // namespace gsrq
