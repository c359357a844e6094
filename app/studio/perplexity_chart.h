#pragma once
// The paper's end-to-end figure, as the GSRQ page and the Runs page draw it: perplexity against the
// effective bits per activation (codewords counted), one series per method, FP32 a dashed reference
// line across them. Runs that measured different models or texts are drawn as separate sets.

#include "core/jobs/run_records.h"

#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace gsrq {
class RunStore;
}

namespace gsrq::views {
class ChartPanel;
}

namespace gsrq::studio {

// The evaluations of one model on one text (or on its own samples, one seed).
struct PerplexitySet {
    QString name;      // "<model>, <text>, <sequences>×<length> tokens"
    QStringList parts; // the name's parts: model, text, sequences × length
    std::optional<double> fp32;
    std::vector<PerplexityPoint> points;
    std::vector<std::int64_t> runs;
    // Each point's calibration: the file name of its run's `train_dump` (empty where none is recorded).
    // Where a set's runs were calibrated on different dumps, each method's series is split by it
    // ("gsrq [calib-debian-reference-32x512]"), rather than one line joining the two calibrations.
    std::vector<QString> calibration;
};

// The ppl runs among `ids`, grouped by what they measured (model, text or samples and seed,
// sequences of tokens); the other runs are left out.
std::vector<PerplexitySet> perplexitySets(RunStore& store, const std::vector<std::int64_t>& ids);
// Every ppl run in the store that measured what run `like` measured.
std::vector<PerplexitySet> perplexitySetOf(RunStore& store, std::int64_t like);

// Replaces what the chart shows. Series: "<method>" (or "<set>: <method>" for several sets, the set
// named by the parts of its name that differ between the sets: "devil.eval.txt", not the model
// every set shares) and "FP32 <perplexity>" (one for each set); x is log-scaled where the bits span a
// factor of 4, y where the perplexities below any far outlier span a decade. Methods at the same bits
// are drawn side by side, and a perplexity far above the rest (1-bit KIVI's) is named above the axis
// rather than flattening it. False (the chart cleared) where there is nothing to draw.
bool drawPerplexity(views::ChartPanel& chart, const std::vector<PerplexitySet>& sets);
// The sets' names, each made of the parts of its name that differ between them.
QStringList shortSetNames(const std::vector<PerplexitySet>& sets);

} // namespace gsrq::studio
