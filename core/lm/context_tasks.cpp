// Long-context tasks: generation and scoring (context_tasks.h).
#include "core/lm/context_tasks.h"

#include "core/base/error.h"
#include "core/base/text.h"
#include "core/lm/sequences.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <random>
#include <set>

namespace gsrq {

namespace {

// The passkey paper's filler, which RULER's variable tracking uses as its noise too.
const char* const kFiller[] = {"The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                               "There and back again."};

// RULER draws its keys from English words; two short lists give 1,600 two-word keys.
const std::array<const char*, 40> kAdjectives = {
    "amber", "ancient", "bitter", "brave",  "bright", "calm",   "clever", "crimson", "curious", "distant",
    "eager", "faint",   "fierce", "gentle", "golden", "hidden", "hollow", "humble",  "icy",     "jolly",
    "kind",  "lively",  "lonely", "lucky",  "misty",  "narrow", "noble",  "polite",  "proud",   "quiet",
    "rapid", "rusty",   "silent", "silver", "steady", "swift",  "tender", "velvet",  "wild",    "young"};
const std::array<const char*, 40> kNouns = {
    "anchor", "badger", "barrel",  "beacon", "bridge", "candle",  "canyon", "castle",  "cellar", "comet",
    "copper", "cradle", "desert",  "dragon", "falcon", "forest",  "garden", "glacier", "harbor", "helmet",
    "island", "kettle", "lantern", "meadow", "mirror", "orchard", "parrot", "pepper",  "quarry", "river",
    "saddle", "shadow", "spider",  "summit", "teapot", "thistle", "tunnel", "valley",  "willow", "window"};

// splitmix64: the seed of one sample from the run's seed and the sample's coordinates.
std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Draws with std::mt19937_64, whose sequence the standard fixes, and plain modulo (not the
// library's distributions, whose results differ between standard libraries).
class Draw {
public:
    explicit Draw(std::uint64_t seed) : m_rng(seed) {}
    std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : m_rng() % n; }
    std::string digits(int n) // n digits, the first not 0
    {
        std::string s(1, char('1' + below(9)));
        for (int i = 1; i < n; ++i)
            s += char('0' + below(10));
        return s;
    }
    std::string key() { return cat(kAdjectives[below(kAdjectives.size())], "-", kNouns[below(kNouns.size())]); }
    std::string variable() // five capital letters, as RULER's
    {
        std::string s;
        for (int i = 0; i < 5; ++i)
            s += char('A' + below(26));
        return s;
    }

private:
    std::mt19937_64 m_rng;
};

// Sentences of reflowed prose: cut after '.', '?' or '!' followed by a space or a line break.
std::vector<std::string> sentencesOf(const std::string& raw)
{
    std::string text = reflowText(raw);
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::vector<std::string> out;
    std::string cur;
    for (std::size_t i = 0; i < text.size(); ++i) {
        cur += text[i];
        const char c = text[i];
        if ((c == '.' || c == '?' || c == '!') && (i + 1 == text.size() || text[i + 1] == ' ')) {
            const auto b = cur.find_first_not_of(' ');
            if (b != std::string::npos)
                out.push_back(cur.substr(b));
            cur.clear();
        }
    }
    const auto b = cur.find_first_not_of(' ');
    if (b != std::string::npos)
        out.push_back(cur.substr(b));
    return out;
}

std::string lower(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

std::string joinKeys(const std::vector<std::string>& keys)
{
    std::string s;
    for (std::size_t i = 0; i < keys.size(); ++i)
        s += cat(i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ", keys[i]);
    return s;
}

// What a task asks, before the haystack is laid out.
struct TaskText {
    std::string instruction, question, answerPrefix;
    std::vector<std::string> needles; // needles[0] sits at the depth
    std::vector<std::string> expected;
    int answerTokens = 0;
    bool spreadAfter = false; // vt: the later needles evenly after the first, in order
};

TaskText taskText(ContextTask task, Draw& d)
{
    TaskText t;
    const char* niah = "Some special magic numbers are hidden within the following text. Make sure to memorize "
                       "it. I will quiz you about the numbers afterwards.";
    const auto needle = [](const std::string& key, const std::string& value) {
        return cat("One of the special magic numbers for ", key, " is: ", value, ".");
    };
    switch (task) {
    case ContextTask::Passkey: {
        const std::string key = d.digits(5);
        t.instruction = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
                        "it. I will quiz you about the important information there.";
        t.needles = {cat("The pass key is ", key, ". Remember it. ", key, " is the pass key.")};
        t.question = "What is the pass key?";
        t.answerPrefix = "The pass key is";
        t.expected = {key};
        t.answerTokens = 10;
        break;
    }
    case ContextTask::NiahSingle:
    case ContextTask::NiahMultiKey: {
        std::set<std::string> used;
        std::string key = d.key();
        used.insert(key);
        const std::string value = d.digits(7);
        t.instruction = niah;
        t.needles = {needle(key, value)};
        if (task == ContextTask::NiahMultiKey)
            while (t.needles.size() < 4) {
                const std::string other = d.key();
                if (used.insert(other).second)
                    t.needles.push_back(needle(other, d.digits(7)));
            }
        t.question = cat("What is the special magic number for ", key, " mentioned in the provided text?");
        t.answerPrefix = cat("The special magic number for ", key, " mentioned in the provided text is");
        t.expected = {value};
        t.answerTokens = 16;
        break;
    }
    case ContextTask::NiahMultiValue: {
        const std::string key = d.key();
        t.instruction = niah;
        while (t.expected.size() < 4) {
            const std::string v = d.digits(7);
            if (std::find(t.expected.begin(), t.expected.end(), v) == t.expected.end()) {
                t.expected.push_back(v);
                t.needles.push_back(needle(key, v));
            }
        }
        t.question = cat("What are all the special magic numbers for ", key, " mentioned in the provided text?");
        t.answerPrefix = cat("The special magic numbers for ", key, " mentioned in the provided text are");
        t.answerTokens = 48;
        break;
    }
    case ContextTask::NiahMultiQuery: {
        std::vector<std::string> keys;
        t.instruction = niah;
        while (keys.size() < 4) {
            const std::string k = d.key();
            if (std::find(keys.begin(), keys.end(), k) != keys.end())
                continue;
            keys.push_back(k);
            t.expected.push_back(d.digits(7));
            t.needles.push_back(needle(k, t.expected.back()));
        }
        t.question =
            cat("What are all the special magic numbers for ", joinKeys(keys), " mentioned in the provided text?");
        t.answerPrefix = cat("The special magic numbers for ", joinKeys(keys), " mentioned in the provided text are");
        t.answerTokens = 48;
        break;
    }
    case ContextTask::VariableTracking: {
        const std::string value = d.digits(5);
        std::vector<std::string> names;
        while (names.size() < 5) {
            const std::string v = d.variable();
            if (std::find(names.begin(), names.end(), v) == names.end())
                names.push_back(v);
        }
        t.instruction = "Memorize and track the chain(s) of variable assignment hidden in the following text.";
        t.needles.push_back(cat("VAR ", names[0], " = ", value, "."));
        for (std::size_t i = 1; i < names.size(); ++i)
            t.needles.push_back(cat("VAR ", names[i], " = VAR ", names[i - 1], "."));
        t.question = cat("Question: Find all variables that are assigned the value ", value, " in the text above.");
        t.answerPrefix = cat("Answer: According to the chain(s) of variable assignment in the text above, ",
                             names.size(), " variables are assigned the value ", value, ", they are:");
        t.expected = names;
        t.answerTokens = 32;
        t.spreadAfter = true;
        break;
    }
    }
    return t;
}

std::string headText(const PromptFormat& f)
{
    if (!f.chatml)
        return {};
    std::string s;
    if (!f.system.empty())
        s = cat("<|im_start|>system\n", f.system, "<|im_end|>\n");
    return s + "<|im_start|>user\n";
}

std::string tailText(const PromptFormat& f, const std::string& question, const std::string& answerPrefix)
{
    return f.chatml ? cat("\n", question, "<|im_end|>\n<|im_start|>assistant\n", answerPrefix)
                    : cat("\n", question, "\n", answerPrefix);
}

} // namespace

const std::vector<ContextTask>& allContextTasks()
{
    static const std::vector<ContextTask> all = {ContextTask::Passkey,        ContextTask::NiahSingle,
                                                 ContextTask::NiahMultiKey,   ContextTask::NiahMultiValue,
                                                 ContextTask::NiahMultiQuery, ContextTask::VariableTracking};
    return all;
}

const char* contextTaskName(ContextTask t)
{
    switch (t) {
    case ContextTask::Passkey:
        return "passkey";
    case ContextTask::NiahSingle:
        return "niah-single";
    case ContextTask::NiahMultiKey:
        return "niah-multikey";
    case ContextTask::NiahMultiValue:
        return "niah-multivalue";
    case ContextTask::NiahMultiQuery:
        return "niah-multiquery";
    case ContextTask::VariableTracking:
        return "vt";
    }
    return "?";
}

std::vector<ContextTask> parseContextTasks(const std::string& list, const std::string& flag)
{
    if (list == "all")
        return allContextTasks();
    std::vector<ContextTask> out;
    for (const auto& name : splitTrimmed(list)) {
        if (name.empty())
            continue;
        const auto& all = allContextTasks();
        const auto it = std::find_if(all.begin(), all.end(), [&](ContextTask t) { return name == contextTaskName(t); });
        if (it == all.end()) {
            std::string names;
            for (auto t : all)
                names += cat(names.empty() ? "" : ", ", contextTaskName(t));
            throwInvalid(flag, ": unknown task '", name, "' (", names, ", or all)");
        }
        if (std::find(out.begin(), out.end(), *it) != out.end())
            throwInvalid(flag, ": '", name, "' is listed twice");
        out.push_back(*it);
    }
    if (out.empty())
        throwInvalid(flag, ": names no task");
    return out;
}

bool needsHaystack(ContextTask t)
{
    return t == ContextTask::NiahSingle || t == ContextTask::NiahMultiKey || t == ContextTask::NiahMultiValue ||
           t == ContextTask::NiahMultiQuery;
}

std::string PromptFormat::describe() const
{
    return cat(bos ? "<BOS>" : "", headText(*this), "{prompt}", tailText(*this, "{question}", "{answer_prefix}"));
}

PromptFormat promptFormatOf(const std::string& chatTemplate, bool bosForPlain)
{
    PromptFormat f;
    f.chatml = chatTemplate.find("<|im_start|>") != std::string::npos;
    f.bos = !f.chatml && bosForPlain;
    if (f.chatml) {
        // The default system message: the template's literal "<|im_start|>system\n…<|im_end|>", its
        // line break written as one (SmolLM2's) or escaped (Qwen2.5's), where it writes one when the
        // conversation has no system turn; not a Jinja expression (messages[0]['content'] and the like).
        for (const std::string& open : {std::string("<|im_start|>system\n"), std::string("<|im_start|>system\\n")})
            for (auto at = chatTemplate.find(open); at != std::string::npos && f.system.empty();
                 at = chatTemplate.find(open, at + 1)) {
                const auto from = at + open.size(), end = chatTemplate.find("<|im_end|>", from);
                if (end == std::string::npos)
                    break;
                const std::string body = chatTemplate.substr(from, end - from);
                if (!body.empty() && body.find_first_of("'\"{}+") == std::string::npos)
                    f.system = body;
            }
    }
    return f;
}

std::vector<std::int32_t> TaskPrompt::promptIds() const
{
    std::vector<std::int32_t> ids = contextIds;
    ids.insert(ids.end(), questionIds.begin(), questionIds.end());
    return ids;
}

TaskGenerator::TaskGenerator(const Tokenizer& vocab, PromptFormat format, const std::string& haystack,
                             const std::string& haystackName)
    : m_vocab(vocab), m_format(std::move(format)), m_haystackName(haystackName)
{
    if (m_format.bos && !m_vocab.bos())
        m_format.bos = false;
    for (const auto& s : sentencesOf(haystack))
        m_sentences.push_back(m_vocab.encode(" " + s));
    for (const char* s : kFiller)
        m_filler.push_back(m_vocab.encode(cat(" ", s)));
}

int TaskGenerator::minimumContext(ContextTask task) const
{
    std::size_t longest = 0;
    for (std::uint64_t draw = 0; draw < 64; ++draw) {
        Draw d(mix(draw));
        const TaskText t = taskText(task, d);
        std::size_t n = std::size_t(t.answerTokens) + (m_format.bos ? 1 : 0) +
                        m_vocab.encode(headText(m_format) + t.instruction).size() +
                        m_vocab.encode(tailText(m_format, t.question, t.answerPrefix)).size();
        for (const auto& s : t.needles)
            n += m_vocab.encode(" " + s).size();
        longest = std::max(longest, n);
    }
    return int(longest) + 64;
}

TaskPrompt TaskGenerator::make(ContextTask task, int context, int depth, int sample, std::uint64_t seed) const
{
    if (depth < 0 || depth > 100)
        throwInvalid("--depths: ", depth, " is outside 0-100 (percent of the haystack before the needle)");
    const bool real = needsHaystack(task);
    if (real && m_sentences.empty())
        throwInvalid("--haystack ", m_haystackName.empty() ? std::string("(none given)") : m_haystackName, ": ",
                     contextTaskName(task), " needs a text to hide its needles in");
    Draw d(mix(mix(mix(mix(seed) ^ std::uint64_t(task)) ^ std::uint64_t(context)) ^
               (std::uint64_t(depth) << 32 | std::uint32_t(sample))));
    const TaskText t = taskText(task, d);

    TaskPrompt p;
    p.task = task;
    p.context = context;
    p.depth = depth;
    p.sample = sample;
    p.expected = t.expected;
    p.answerTokens = t.answerTokens;
    p.question = cat(t.question, " ", t.answerPrefix);
    if (m_format.bos)
        p.contextIds.push_back(*m_vocab.bos());
    const auto head = m_vocab.encode(headText(m_format) + t.instruction);
    p.contextIds.insert(p.contextIds.end(), head.begin(), head.end());
    p.questionIds = m_vocab.encode(tailText(m_format, t.question, t.answerPrefix));
    std::vector<std::vector<std::int32_t>> needles;
    // The answer's budget is part of the context, as RULER's max_seq_length is.
    std::size_t fixed = p.contextIds.size() + p.questionIds.size() + std::size_t(t.answerTokens);
    for (const auto& s : t.needles) {
        needles.push_back(m_vocab.encode(" " + s));
        fixed += needles.back().size();
    }
    if (int(fixed) + 32 > context)
        throwInvalid("--context ", context, ": ", contextTaskName(task), " needs at least ", minimumContext(task),
                     " tokens of this model (its instruction, needles, question and answer, and 64 of haystack)");

    // The haystack: whole sentences, in order from a drawn one, until the next would overflow.
    const auto& pool = real ? m_sentences : m_filler;
    const std::size_t budget = std::size_t(context) - fixed;
    std::vector<std::size_t> chosen; // indices into pool
    std::size_t at = real ? d.below(pool.size()) : 0, used = 0;
    for (std::size_t guard = 0; guard < budget + pool.size(); ++guard) {
        const auto& s = pool[at];
        if (used + s.size() > budget)
            break;
        used += s.size();
        chosen.push_back(at);
        at = (at + 1) % pool.size();
    }
    // Where each needle goes: before haystack sentence slot[i] (slot = count: after the last).
    const std::size_t count = chosen.size();
    std::vector<std::size_t> slot(needles.size());
    slot[0] = std::size_t(std::llround(double(depth) / 100.0 * double(count)));
    for (std::size_t i = 1; i < needles.size(); ++i)
        slot[i] = t.spreadAfter ? slot[0] + (count - slot[0]) * i / needles.size() : d.below(count + 1);
    for (std::size_t s = 0; s <= count; ++s) {
        for (std::size_t i = 0; i < needles.size(); ++i)
            if (slot[i] == s)
                p.contextIds.insert(p.contextIds.end(), needles[i].begin(), needles[i].end());
        if (s < count)
            p.contextIds.insert(p.contextIds.end(), pool[chosen[s]].begin(), pool[chosen[s]].end());
    }
    return p;
}

double scoreAnswer(const std::vector<std::string>& expected, const std::string& answer)
{
    if (expected.empty())
        return 0;
    const std::string a = lower(answer);
    int found = 0;
    for (const auto& e : expected)
        found += a.find(lower(e)) != std::string::npos ? 1 : 0;
    return double(found) / double(expected.size());
}

Proportion wilsonInterval(double successes, double n, double z)
{
    if (!(n > 0))
        return {std::nan(""), std::nan(""), std::nan("")};
    const double p = successes / n, z2 = z * z;
    const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
    const double half = z / (1 + z2 / n) * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
    return {p, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

} // namespace gsrq
