#include "core/cluster/exact_bounds.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace gsrq {

namespace {

// v rounded down to a float (never above v, never below 0): a lower bound stays one when stored.
float floatBelow(double v)
{
    if (!(v > 0))
        return 0.0f;
    float f = static_cast<float>(v);
    if (static_cast<double>(f) > v)
        f = std::nextafter(f, 0.0f);
    return f;
}

// ‖x − c‖² in float over sixteen partial sums (a fixed order, so the same bits wherever the rows lie,
// and one the compiler vectorises). Each difference and square rounds once and the D non-negative terms
// are summed: within (D + 2)·2⁻²⁴ of the exact value (the callers allow twice that).
float squaredDistanceFloat(const float* x, const float* c, int D)
{
    float part[16] = {};
    int j = 0;
    for (; j + 16 <= D; j += 16)
        for (int l = 0; l < 16; ++l) {
            const float d = x[j + l] - c[j + l];
            part[l] += d * d;
        }
    for (int l = 0; j < D; ++j, ++l) {
        const float d = x[j] - c[j];
        part[l] += d * d;
    }
    for (int w = 8; w >= 1; w /= 2) // pairwise, in a fixed order
        for (int l = 0; l < w; ++l)
            part[l] += part[l + w];
    return part[0];
}

} // namespace

int ExactBounds::groupSizeFor(int K, int D, int panel)
{
    // About 4,096 multiply-adds a row and group (32 codewords at D = 128), in whole panels.
    int size = std::max(panel, (4096 / std::max(1, D) + panel - 1) / panel * panel);
    const int atMost32Groups = (K + 31) / 32;
    return std::max(size, (atMost32Groups + panel - 1) / panel * panel);
}

void ExactBounds::begin(const MatrixRF& C, std::int64_t n, int panel)
{
    const int K = static_cast<int>(C.rows()), D = static_cast<int>(C.cols());
    const int size = groupSizeFor(K, D, panel);
    const int groups = (K + size - 1) / size;
    m_fresh =
        !m_valid || m_prev.rows() != K || m_prev.cols() != D || m_rows != n || m_groupSize != size || m_panel != panel;
    m_groupSize = size;
    m_groups = groups;
    m_panel = panel;
    m_rows = n;
    std::vector<double> groupDrift(static_cast<std::size_t>(groups), 0.0); // the farthest a codeword moved
    const double rel = (D + 2) * std::ldexp(1.0, -23); // a float d² is within rel·d² of the exact one
    if (m_fresh) {
        m_lower.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(groups), 0.0f);
    } else {
        for (int k = 0; k < K; ++k) {
            // Summed in float, raised by its rounding bound (and a little for the square root's).
            const double moved =
                std::sqrt(squaredDistanceFloat(C.row(k).data(), m_prev.row(k).data(), D) * (1 + rel)) * (1 + 1e-9);
            auto& g = groupDrift[static_cast<std::size_t>(k / size)];
            g = std::max(g, moved);
        }
    }
    m_groupDriftUp.resize(groupDrift.size());
    for (std::size_t g = 0; g < groupDrift.size(); ++g) // rounded up to a float
        m_groupDriftUp[g] = static_cast<float>(groupDrift[g] * (1 + 1e-6));
    m_maxNorm = 0;
    for (int k = 0; k < K; ++k)
        m_maxNorm = std::max(m_maxNorm, std::sqrt(C.row(k).cast<double>().squaredNorm()));
    m_valid = false; // until end(): a pass cut short leaves no bounds behind
}

void ExactBounds::end(const MatrixRF& C)
{
    m_prev = C;
    m_valid = true;
}

std::int64_t ExactBounds::assign(const float* x, std::int64_t ldx, std::int64_t r0, std::int64_t m,
                                 const double* sqNorm, const MatrixRF& C, const nearest::NearestKernels& kernel,
                                 const nearest::NearestPanels& panels, std::int32_t* labels, double* score)
{
    const int K = static_cast<int>(C.rows()), D = static_cast<int>(C.cols());
    const int G = m_groups, size = m_groupSize, panel = m_panel;
    const int P = (K + panel - 1) / panel;              // panels of the whole range
    const double unit = (D + 4) * std::ldexp(1.0, -23); // E = unit·(‖x‖ + max‖c‖)²
    const double rel = (D + 2) * std::ldexp(1.0, -23);  // a float d² is within rel·d² of the exact one
    const auto errorOf = [&](std::int64_t row) {
        const double reach = std::sqrt(sqNorm[row]) + m_maxNorm;
        return unit * reach * reach;
    };
    constexpr float kNone = -std::numeric_limits<float>::infinity();
    const auto ui = [](std::int64_t i) { return static_cast<std::size_t>(i); };

    struct Scratch {
        std::vector<std::uint32_t> need, more;          // per row: the groups scored (more: in the second round)
        std::vector<std::uint8_t> whole;                // per row: scored against every codeword in one call
        std::vector<std::uint8_t> ownWins;              // per row: its unscored own codeword clears the rest
        std::vector<double> ownSquared;                 // per row: d(x, c_label)², summed in float
        std::vector<std::int32_t> gLabel;               // per row and group scored: its best codeword
        std::vector<float> gBest, gSecond;              // and the two largest scores there
        std::vector<std::int32_t> wLabel;               // whole rows: the best codeword,
        std::vector<float> wSecond;                     // the second-largest score
        std::vector<float> wPanel;                      // and every panel's largest (rows × P)
        std::vector<std::vector<std::int64_t>> members; // per group: the rows scored against it
        std::vector<std::int64_t> list;
        std::vector<float> gathered; // rows copied D floats apart
        std::vector<std::int32_t> outLabel;
        std::vector<float> outBest, outSecond, outPanel;
    };
    thread_local Scratch t;
    t.need.assign(ui(m), 0);
    t.more.assign(ui(m), 0);
    t.whole.assign(ui(m), 0);
    t.ownWins.assign(ui(m), 0);
    t.ownSquared.assign(ui(m), 0.0);
    t.gLabel.resize(ui(m) * G);
    t.gBest.resize(ui(m) * G);
    t.gSecond.resize(ui(m) * G);
    t.wLabel.resize(ui(m));
    t.wSecond.resize(ui(m));
    t.wPanel.resize(ui(m) * P);

    std::int64_t computed = 0;
    // The kernel over codewords [k0, k1) for the chunk's rows in `rows` (gathered unless they are all).
    const auto run = [&](const std::vector<std::int64_t>& rows, int k0, int k1, bool panelMax) {
        const auto count = static_cast<std::int64_t>(rows.size());
        computed += count * (k1 - k0);
        t.outLabel.resize(ui(count));
        t.outBest.resize(ui(count));
        t.outSecond.resize(ui(count));
        t.outPanel.resize(panelMax ? ui(count) * P : 0);
        float* pm = panelMax ? t.outPanel.data() : nullptr;
        const int pmStride = (k1 - k0 + panel - 1) / panel;
        if (2 * count >= m) {
            // Most of the chunk: consecutive rows are scored where they lie, not copied.
            for (std::int64_t j = 0; j < count;) {
                std::int64_t e = j + 1;
                while (e < count && rows[ui(e)] == rows[ui(e - 1)] + 1)
                    ++e;
                kernel.nearestRange(x + rows[ui(j)] * ldx, e - j, ldx, panels, k0, k1, t.outLabel.data() + j,
                                    t.outBest.data() + j, t.outSecond.data() + j, pm ? pm + j * pmStride : nullptr);
                j = e;
            }
            return;
        }
        t.gathered.resize(ui(count) * D);
        for (std::int64_t j = 0; j < count; ++j)
            std::copy_n(x + rows[ui(j)] * ldx, D, t.gathered.data() + j * D);
        kernel.nearestRange(t.gathered.data(), count, D, panels, k0, k1, t.outLabel.data(), t.outBest.data(),
                            t.outSecond.data(), pm);
    };
    // Scores every (row, group) that `masks` names, one group at a time, into gLabel, gBest, gSecond.
    const auto scoreGroups = [&](const std::vector<std::uint32_t>& masks) {
        t.members.resize(ui(G));
        for (auto& list : t.members)
            list.clear();
        for (std::int64_t i = 0; i < m; ++i)
            for (std::uint32_t bits = masks[ui(i)]; bits; bits &= bits - 1)
                t.members[ui(std::countr_zero(bits))].push_back(i);
        for (int g = 0; g < G; ++g) {
            const auto& list = t.members[ui(g)];
            if (list.empty())
                continue;
            run(list, g * size, std::min(K, (g + 1) * size), false);
            for (std::size_t j = 0; j < list.size(); ++j) {
                const auto at = ui(list[j]) * G + g;
                t.gLabel[at] = t.outLabel[j];
                t.gBest[at] = t.outBest[j];
                t.gSecond[at] = t.outSecond[j];
            }
        }
    };
    // The largest score over the groups scored, in index order and strictly greater: the lowest
    // index keeps a tie, as in one scan of every codeword.
    const auto bestOf = [&](std::int64_t i, std::uint32_t mask, float& best) {
        best = kNone;
        std::int32_t label = -1;
        for (std::uint32_t bits = mask; bits; bits &= bits - 1) {
            const auto at = ui(i) * G + ui(std::countr_zero(bits));
            if (t.gBest[at] > best) {
                best = t.gBest[at];
                label = t.gLabel[at];
            }
        }
        return label;
    };
    // A distance bound from the largest kernel score of the others, less that score's possible error:
    // √(‖x‖² − score − E) in float, shrunk by 2⁻²² so that neither the conversion nor the square root
    // nor the product (each within 2⁻²⁴) can round it above the exact value. No score (−∞): +∞.
    const auto lowerFrom = [](float other, double sq, double error) {
        const float v = static_cast<float>(std::max(0.0, sq - double(other) - error));
        return std::sqrt(v) * (1.0f - 0x1p-22f);
    };

    // 1. Each row's distance to its own codeword, and the groups whose bounds do not clear it.
    const float* drift = m_groupDriftUp.data();
    for (std::int64_t i = 0; i < m; ++i) {
        if (m_fresh) {
            t.whole[ui(i)] = 1;
            continue;
        }
        const std::int64_t row = r0 + i;
        const double d2 = squaredDistanceFloat(x + i * ldx, C.row(labels[i]).data(), D);
        t.ownSquared[ui(i)] = d2;
        // A bound must exceed √(d² + 2E) for the largest d² the float sum allows, rounded up to a float.
        const float clear = static_cast<float>(std::sqrt(d2 * (1 + rel) + 2 * errorOf(row)) * (1 + 1e-6));
        float* lower = &m_lower[ui(row) * G];
        std::uint32_t mask = 0;
        for (int g = 0; g < G; ++g) {
            // Each bound drops by its group's drift, in float and shrunk by 2⁻²² so the two roundings
            // cannot lift it above the exact difference (each is at most 2⁻²⁴ of the bound).
            const float l = std::max(0.0f, lower[g] * (1.0f - 0x1p-22f) - drift[g]);
            lower[g] = l;
            mask |= std::uint32_t(!(l > clear)) << g;
        }
        // A row that needs half the groups or more is scored against all of them at once: the
        // kernel's full speed for a little more work.
        if (G > 1 && 2 * std::popcount(mask) >= G)
            t.whole[ui(i)] = 1;
        else
            t.need[ui(i)] = mask;
    }
    t.list.clear();
    for (std::int64_t i = 0; i < m; ++i)
        if (t.whole[ui(i)])
            t.list.push_back(i);
    if (!t.list.empty()) {
        run(t.list, 0, K, true);
        for (std::size_t j = 0; j < t.list.size(); ++j) {
            const auto i = ui(t.list[j]);
            t.wLabel[i] = t.outLabel[j];
            t.wSecond[i] = t.outSecond[j];
            std::copy_n(t.outPanel.data() + j * P, P, t.wPanel.data() + i * P);
        }
    }
    scoreGroups(t.need);

    // 2. Where the own codeword's group was not scored, its score decides against the best of
    // the others unless the two lie within the kernel's error of each other; then its group is scored
    // too, so the comparison is the kernel's own.
    bool any = false;
    for (std::int64_t i = 0; i < m; ++i) {
        const std::uint32_t mask = t.need[ui(i)];
        if (!mask || (mask >> (labels[i] / size) & 1))
            continue;
        float best;
        bestOf(i, mask, best);
        const double own = sqNorm[r0 + i] - t.ownSquared[ui(i)];
        const double error = errorOf(r0 + i) + rel * t.ownSquared[ui(i)]; // the kernel's and the float d²'s
        if (double(best) < own - error) {
            t.ownWins[ui(i)] = 1; // decided here, once: phase 3 reads the verdict, not a recomputation
        } else if (!(double(best) > own + error)) {
            t.more[ui(i)] = std::uint32_t(1) << (labels[i] / size);
            any = true;
        }
    }
    if (any)
        scoreGroups(t.more);

    // 3. Labels, the bounds of the groups scored, and each row's score from its distance.
    for (std::int64_t i = 0; i < m; ++i) {
        const std::int64_t row = r0 + i;
        double d2 = t.ownSquared[ui(i)];
        float* lower = &m_lower[ui(row) * G];
        std::int32_t label = labels[i];
        if (t.whole[ui(i)]) {
            const double error = errorOf(row);
            label = t.wLabel[ui(i)];
            const float* pm = t.wPanel.data() + ui(i) * P;
            const int perGroup = size / panel;
            for (int g = 0; g < G; ++g) {
                float other = kNone;
                for (int q = g * perGroup; q < std::min(P, (g + 1) * perGroup); ++q)
                    other = std::max(other, pm[q]);
                lower[g] = lowerFrom(other, sqNorm[row], error);
            }
            // The label's own group takes the second-largest score of all, which is at least that of
            // the others in its group.
            lower[label / size] = lowerFrom(t.wSecond[ui(i)], sqNorm[row], error);
        } else if (const std::uint32_t mask = t.need[ui(i)] | t.more[ui(i)]) {
            const std::int32_t own = labels[i];
            const double error = errorOf(row);
            float best;
            label = bestOf(i, mask, best);
            const bool ownScored = mask >> (own / size) & 1;
            if (!ownScored && t.ownWins[ui(i)])
                label = own; // its score clears every kernel score made by more than both errors
            for (std::uint32_t bits = mask; bits; bits &= bits - 1) {
                const int g = std::countr_zero(bits);
                const auto at = ui(i) * G + ui(g);
                lower[g] = lowerFrom(g == label / size ? t.gSecond[at] : t.gBest[at], sqNorm[row], error);
            }
            if (!ownScored && label != own) { // the old codeword joins its group's others
                float& l = lower[own / size];
                l = std::min(l, floatBelow(std::sqrt(d2 * (1 - rel))));
            }
        }
        if (m_fresh || label != labels[i])
            d2 = squaredDistanceFloat(x + i * ldx, C.row(label).data(), D);
        labels[i] = label;
        score[i] = sqNorm[row] - d2;
    }
    return computed;
}

} // namespace gsrq
