// Answering long-context prompts over each method's cache (context_eval.h).
#include "core/lm/context_eval.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/lm/rope.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <numeric>

namespace gsrq {

namespace {

double since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::int32_t argmax(const Eigen::RowVectorXf& logits)
{
    Eigen::Index best = 0;
    for (Eigen::Index i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best])
            best = i;
    return std::int32_t(best);
}

} // namespace

KvHook fp16Hook()
{
    return [](int, MatrixRF& keys, MatrixRF& values, const std::vector<std::int64_t>&) {
        keys = keys.cast<Eigen::half>().cast<float>();
        values = values.cast<Eigen::half>().cast<float>();
    };
}

const char* prefillModeName(PrefillMode m)
{
    return m == PrefillMode::Deployed ? "deployed" : "quantized";
}

PrefillMode parsePrefillMode(const std::string& name)
{
    if (name == "deployed")
        return PrefillMode::Deployed;
    if (name == "quantized")
        return PrefillMode::Quantized;
    throwInvalid("--prefill: '", name,
                 "' is not a mode (deployed: a full-precision prefill, then each method's cache; quantized: the "
                 "prefill attends over each method's keys and values)");
}

std::vector<std::int32_t> stopTokens(const Tokenizer& vocab, const PromptFormat& format)
{
    std::vector<std::int32_t> stops;
    if (const auto e = vocab.eos())
        stops.push_back(*e);
    if (format.chatml) {
        const auto end = vocab.encode("<|im_end|>");
        if (end.size() == 1 && std::find(stops.begin(), stops.end(), end[0]) == stops.end())
            stops.push_back(end[0]);
    }
    return stops;
}

std::vector<std::int32_t> greedyAnswer(const TransformerModel& model, TransformerModel::Cache& cache,
                                       const std::vector<std::int32_t>& question, int maxTokens,
                                       const std::vector<std::int32_t>& stops, const KvHook& hook,
                                       TransformerModel::StepWeights weights)
{
    std::vector<std::int32_t> out;
    if (maxTokens < 1)
        return out;
    Eigen::RowVectorXf logits = model.forward(question, cache, hook, TransformerModel::Logits::Last, weights).row(0);
    for (int i = 0; i < maxTokens; ++i) {
        const std::int32_t next = argmax(logits);
        if (std::find(stops.begin(), stops.end(), next) != stops.end())
            break;
        out.push_back(next);
        if (i + 1 == maxTokens)
            break;
        const std::int32_t one[] = {next};
        logits = model.forward(one, cache, hook, TransformerModel::Logits::Last, weights).row(0);
    }
    return out;
}

double answerWithMethods(const TransformerModel& model, const Tokenizer& vocab, const TaskPrompt& prompt,
                         const std::vector<CacheMethod>& methods, const ContextEvalSettings& settings,
                         const std::function<bool(std::size_t)>& wanted,
                         const std::function<bool(std::size_t, const TaskAnswer&)>& done)
{
    const auto& cfg = model.config();
    const std::int64_t needed = std::int64_t(prompt.promptTokens()) + prompt.answerTokens;
    if (needed > cfg.maxSeq)
        throwInvalid("--context ", prompt.context, ": the prompt and its answer take ", needed,
                     " positions; the model was built for ", cfg.maxSeq);
    if (prompt.contextIds.empty())
        throwInvalid("a task prompt with no context");
    const int n = int(prompt.contextIds.size()), hd = cfg.headDim();
    std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
    std::iota(positions.begin(), positions.end(), std::int64_t(0));
    const auto invFreq = ropeInvFreq(cfg.ropeTheta, hd);

    // The deployed mode's shared prefill, recording each layer's keys before RoPE and values.
    TransformerModel::Cache prefilled;
    std::vector<MatrixRF> rawKeys, rawValues;
    double prefillSeconds = 0;
    const auto any = [&] {
        for (std::size_t i = 0; i < methods.size(); ++i)
            if (!wanted || wanted(i))
                return true;
        return false;
    }();
    if (settings.mode == PrefillMode::Deployed && any) {
        const auto t0 = std::chrono::steady_clock::now();
        rawKeys.assign(std::size_t(cfg.layers), MatrixRF(0, cfg.kvDim()));
        rawValues.assign(std::size_t(cfg.layers), MatrixRF(0, cfg.kvDim()));
        const KvHook record = [&](int layer, MatrixRF& k, MatrixRF& v, const std::vector<std::int64_t>&) {
            auto& K = rawKeys[std::size_t(layer)];
            auto& V = rawValues[std::size_t(layer)];
            const auto at = K.rows();
            K.conservativeResize(at + k.rows(), Eigen::NoChange);
            V.conservativeResize(at + v.rows(), Eigen::NoChange);
            K.bottomRows(k.rows()) = k;
            V.bottomRows(v.rows()) = v;
        };
        model.prefill(prompt.contextIds, prefilled, settings.chunk, record, settings.weights);
        prefillSeconds = since(t0);
    }

    for (std::size_t i = 0; i < methods.size(); ++i) {
        if (wanted && !wanted(i))
            continue;
        const auto& m = methods[i];
        const auto t0 = std::chrono::steady_clock::now();
        TransformerModel::Cache cache;
        if (settings.mode == PrefillMode::Quantized) {
            // One forward over the whole context, as the perplexity path runs a sequence.
            model.forward(prompt.contextIds, cache, m.hook, TransformerModel::Logits::None, settings.weights);
        } else if (!m.hook) {
            cache = prefilled;
        } else {
            cache.keys.resize(std::size_t(cfg.layers));
            cache.values.resize(std::size_t(cfg.layers));
            for (int l = 0; l < cfg.layers; ++l) {
                MatrixRF k = rawKeys[std::size_t(l)], v = rawValues[std::size_t(l)];
                m.hook(l, k, v, positions);
                cache.keys[std::size_t(l)] = applyRope(k, hd, positions, invFreq, cfg.pairing);
                cache.values[std::size_t(l)] = std::move(v);
            }
            cache.length = n;
        }
        TaskAnswer a;
        a.method = m.name;
        a.answerIds = greedyAnswer(model, cache, prompt.questionIds, prompt.answerTokens, settings.stops, m.hook,
                                   settings.weights);
        for (auto id : a.answerIds)
            a.answer += vocab.piece(id);
        a.answer = validUtf8(a.answer); // cut inside a character, or stray bytes: printable, JSON-safe
        a.score = scoreAnswer(prompt.expected, a.answer);
        a.seconds = since(t0);
        if (done && !done(i, a))
            break;
    }
    return prefillSeconds;
}

} // namespace gsrq
