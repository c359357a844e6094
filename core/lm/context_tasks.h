#pragma once
// Long-context retrieval tasks, generated in the model's own tokens: does a cache still find one
// fact among thousands of tokens? All synthetic and exactly reproducible from a seed, so every
// method and every run sees the same prompts:
//   passkey            a 5-digit key in repeated filler (Mohtashami & Jaggi, 2023)
//   niah-single        RULER's needle in a haystack (Hsieh et al., 2024): "One of the special magic
//                      numbers for <key> is: <7 digits>." in a real-text haystack, asked for the key
//   niah-multikey      the same with three distractor needles of other keys
//   niah-multivalue    one key with four values, all expected
//   niah-multiquery    four keys, one value each, all asked at once
//   vt                 RULER's variable tracking: a chain VAR A = 12345, VAR B = VAR A, ... (four
//                      hops) in filler; every name bound to the value is expected
// The haystack of the niah tasks is the text given (sentences taken in order from a point drawn per
// sample, wrapping around); passkey and vt use the passkey paper's filler. The needle (vt: the
// chain's first assignment, its later hops spread evenly after it; the multi-needle tasks: the first
// needle, the others at drawn places) sits at `depth` percent of the haystack, at a sentence
// boundary. The question follows the haystack, then the answer's first words (RULER's answer
// prefix), all wrapped in the model's chat format where its template is ChatML, plain text
// otherwise.
// Scoring as RULER's string_match_all: the fraction of expected values found in the answer (case
// ignored), per sample; a cell's accuracy is their mean with a Wilson 95% interval.
#include "core/lm/tokenizer.h"
#include <cstdint>
#include <string>
#include <vector>

namespace gsrq {

enum class ContextTask { Passkey, NiahSingle, NiahMultiKey, NiahMultiValue, NiahMultiQuery, VariableTracking };
const std::vector<ContextTask>& allContextTasks();
const char* contextTaskName(ContextTask t); // "passkey", "niah-single", ...
// A comma-separated list of task names, or "all". Throws Error(InvalidInput) naming `flag` and the
// entry for an unknown or repeated task.
std::vector<ContextTask> parseContextTasks(const std::string& list, const std::string& flag = "--tasks");
// Whether the task's haystack is the real text (the niah family) rather than filler.
bool needsHaystack(ContextTask t);

// How a prompt is wrapped. ChatML: "<|im_start|>system\n{system}<|im_end|>\n" (where the template
// has a default system message) "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
// then the answer prefix; plain: "{prompt}\n{answer prefix}" after BOS where the vocabulary has one.
struct PromptFormat {
    bool chatml = false;
    std::string system; // the template's default system message; "" for none
    bool bos = false;   // the prompt starts with the vocabulary's BOS
    // The wrapping with {prompt} and {answer_prefix} in place of the task's text, as it is fed.
    std::string describe() const;
};
// ChatML where the GGUF file's chat template (tokenizer.chat_template) writes <|im_start|>, with the
// default system message the template writes when a conversation has none; plain otherwise. `bos`:
// whether to start with BOS (a ChatML model's template does not: neither fetched model's).
PromptFormat promptFormatOf(const std::string& chatTemplate, bool bosForPlain);

struct TaskPrompt {
    ContextTask task = ContextTask::Passkey;
    int context = 0; // the length asked for, in tokens: the prompt and the answer's budget
    int depth = 0;   // percent of the haystack before the needle
    int sample = 0;
    // The prompt in two parts: what a deployment prefills and then compresses (BOS, the template's
    // head, the instruction, the haystack with its needles), and what follows over the compressed
    // cache (the question, the template's tail, the answer prefix).
    std::vector<std::int32_t> contextIds, questionIds;
    std::vector<std::string> expected;
    int answerTokens = 0; // the greedy answer's budget
    std::string question; // the question and answer prefix, as text
    std::vector<std::int32_t> promptIds() const;
    int promptTokens() const { return int(contextIds.size() + questionIds.size()); }
};

class TaskGenerator {
public:
    // `haystack`: the real text of the niah tasks (UTF-8; may be empty when none of them runs),
    // named `haystackName` in messages.
    TaskGenerator(const Tokenizer& vocab, PromptFormat format, const std::string& haystack,
                  const std::string& haystackName);
    // The prompt of one sample: the filler or haystack fills the context so that the prompt and
    // the answer's budget take at most `context` tokens (RULER's max_seq_length). Deterministic in (task, context,
    // depth, sample, seed). Throws Error(InvalidInput) naming --context when the context cannot hold the task's
    // instruction, needles and question with some haystack, and naming the haystack when a niah task has none.
    TaskPrompt make(ContextTask task, int context, int depth, int sample, std::uint64_t seed) const;
    // The shortest context a task takes: its instruction, needles, question and answer budget at
    // their longest over 64 draws, and 64 tokens of haystack. make() takes any context from it on
    // (it refuses only below 32 tokens of haystack), for messages and checks before a run.
    int minimumContext(ContextTask task) const;
    // Whether the haystack text has any sentence.
    bool hasHaystack() const { return !m_sentences.empty(); }

private:
    const Tokenizer& m_vocab;
    PromptFormat m_format;
    std::string m_haystackName;
    std::vector<std::vector<std::int32_t>> m_sentences, m_filler; // each with its leading space
};

// RULER's string_match_all: the fraction of `expected` found in `answer`, case ignored.
double scoreAnswer(const std::vector<std::string>& expected, const std::string& answer);

// A proportion with its Wilson score interval: `successes` (a sum of per-sample scores in [0, 1])
// of `n` samples, z = 1.96 for 95%. n = 0 gives NaN.
struct Proportion {
    double value = 0, lo = 0, hi = 0;
};
Proportion wilsonInterval(double successes, double n, double z = 1.959963984540054);

} // namespace gsrq
