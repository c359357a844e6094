// Perplexity with codebooks, as one job (codebook_perplexity.h).
#include "core/jobs/codebook_perplexity.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/jobs/run_records.h"
#include "core/lm/perplexity.h"

#include <chrono>

namespace gsrq {

namespace {

void setPerplexity(CodebookPerplexityRow& row, const PerplexityResult& r)
{
    row.perplexity = r.perplexity();
    row.sequenceNll = r.sequenceNll;
    row.sequenceTokens = r.sequenceTokens;
}

} // namespace

std::optional<double> CodebookPerplexityResult::single() const
{
    std::optional<double> one;
    int files = 0;
    for (const auto& r : rows)
        if (r.codebooks != "FP32" && !r.perLayer) {
            one = r.perplexity;
            ++files;
        }
    return files == 1 ? one : std::nullopt;
}

CodebookPerplexityRow measureCodebooks(const TransformerModel& model, const std::vector<TokenSequence>& sequences,
                                       const CodebookFile& file, const std::string& label,
                                       const std::vector<int>& layers, const std::string& layersText,
                                       ClusterBackend& backend)
{
    const auto& cfg = model.config();
    const auto quantized = quantizedLayers(file, layers);
    if (quantized.empty())
        throwInvalid(label, ": has no codebooks for layers.L.key or layers.L.value",
                     layers.empty() ? std::string() : " of --layers " + layersText);
    // Codewords stored once, spread over the cache they serve: these sequences' tokens.
    const auto cost = codebookCost(file, quantized, cachedTokens(sequences), cfg.kvDim());
    CodebookPerplexityRow row;
    row.codebooks = label;
    row.method = cost.method;
    row.layers = joinInts(quantized);
    row.bpa = cost.bpa;
    row.effectiveBpa = cost.effectiveBpa;
    setPerplexity(row, perplexity(model, sequences, codebookHook(file, label, cfg, layers, backend)));
    return row;
}

CodebookPerplexityResult runCodebookPerplexity(const TransformerModel& model,
                                               const std::vector<TokenSequence>& sequences,
                                               const std::vector<LabelledCodebooks>& files,
                                               const CodebookPerplexitySettings& s, ClusterBackend& backend,
                                               const ProgressFn& progress)
{
    CodebookPerplexityResult out;
    // Passes: FP32, each file, and each of its layers alone where asked.
    double passes = 1;
    for (const auto& f : files) {
        const auto n = quantizedLayers(f.file, s.layers).size();
        passes += 1 + (s.perLayer && n > 1 ? double(n) : 0);
    }
    double done = 0;
    const auto report = [&](const std::string& what) {
        if (!progress)
            return true;
        ProgressEvent e;
        e.fraction = done / passes;
        e.what = what;
        return progress(e);
    };
    if (!report("FP32")) {
        out.cancelled = true;
        return out;
    }
    const auto t0 = std::chrono::steady_clock::now();
    CodebookPerplexityRow fp32;
    fp32.codebooks = "FP32";
    fp32.bpa = fp32.effectiveBpa = 32;
    setPerplexity(fp32, perplexity(model, sequences));
    out.rows.push_back(fp32);
    out.fp32Seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++done;
    for (const auto& f : files) {
        if (!report(f.label)) {
            out.cancelled = true;
            return out;
        }
        auto row = measureCodebooks(model, sequences, f.file, f.label, s.layers, s.layersText, backend);
        row.deltaInterval = deltaPercentInterval(row.sequenceNll, fp32.sequenceNll, fp32.sequenceTokens);
        out.rows.push_back(row);
        ++done;
        const auto quantized = quantizedLayers(f.file, s.layers);
        if (!s.perLayer || quantized.size() < 2)
            continue;
        for (int l : quantized) {
            if (!report(cat(f.label, " layer ", l))) {
                out.cancelled = true;
                return out;
            }
            auto one = row;
            one.layers = std::to_string(l);
            one.perLayer = true;
            setPerplexity(one,
                          perplexity(model, sequences, codebookHook(f.file, f.label, model.config(), {l}, backend)));
            one.deltaInterval = deltaPercentInterval(one.sequenceNll, fp32.sequenceNll, fp32.sequenceTokens);
            out.rows.push_back(one);
            ++done;
        }
    }
    return out;
}

std::vector<MetricRow> codebookPerplexityMetrics(const CodebookPerplexityResult& r)
{
    std::vector<MetricRow> ms;
    for (const auto& row : r.rows) {
        if (row.codebooks != "FP32" && !row.perLayer) { // one point per file: all its layers
            for (auto& m : pplMetrics(row.method, row.codebooks, row.layers, row.perplexity, row.bpa, row.effectiveBpa))
                ms.push_back(std::move(m));
        } else {
            ms.push_back(pplMetric(row.method, row.codebooks, row.layers, row.perplexity));
        }
        const MetricRow& at = ms.back();
        for (auto& m : sequenceMetrics(at.method, at.tensor, row.sequenceNll, row.sequenceTokens, row.deltaInterval))
            ms.push_back(std::move(m));
    }
    return ms;
}

std::vector<SeriesPoint> codebookPerplexitySeries(const CodebookPerplexityResult& r)
{
    std::vector<SeriesPoint> series;
    for (const auto& row : r.rows)
        if (row.codebooks != "FP32" && !row.perLayer)
            for (auto& p : perplexitySeries(row.method, row.bpa, row.perplexity, r.fp32()))
                series.push_back(std::move(p));
    return series;
}

nlohmann::ordered_json codebookPerplexitySummary(const CodebookPerplexityResult& r)
{
    return pplRunSummary(r.fp32(), r.single());
}

} // namespace gsrq
