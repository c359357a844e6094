// Byte-level BPE from a GGUF vocabulary (gguf_tokenizer.h).
#include "core/lm/gguf_tokenizer.h"

#include "core/base/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>

namespace gsrq {

namespace {

// transformers' byte-level split (GPT-2's), and Qwen2's: case-insensitive contractions, a letter run
// with at most one leading non-letter, digits one at a time.
constexpr const char* kGpt2Split = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's map of bytes to printable characters: 33–126, 161–172 and 174–255 stand for themselves,
// the other 68 bytes for U+0100 onwards in byte order.
void byteChars(std::uint32_t (&cp)[256])
{
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b)
        cp[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 ? std::uint32_t(b) : next++;
}

std::string utf8(std::uint32_t c)
{
    std::string s;
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xC0 | (c >> 6));
        s += char(0x80 | (c & 0x3F));
    } else {
        s += char(0xE0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    }
    return s;
}

std::uint64_t pairKey(std::int32_t a, std::int32_t b)
{
    return std::uint64_t(std::uint32_t(a)) << 32 | std::uint32_t(b);
}

} // namespace

struct BpeTokenizer::Regex {
    pcre2_code* code = nullptr;
    ~Regex()
    {
        if (code)
            pcre2_code_free(code);
    }
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::fromGguf(const GgufFile& f)
{
    const std::string model = f.find("tokenizer.ggml.model") ? f.string("tokenizer.ggml.model") : std::string();
    if (model != "gpt2")
        throwInvalid(f.path(), ": tokenizer.ggml.model '", model,
                     "': the engine tokenizes byte-level BPE vocabularies ('gpt2') only");
    BpeTokenizer t;
    t.m_pre = f.find("tokenizer.ggml.pre") ? f.string("tokenizer.ggml.pre") : "default";
    const char* pattern = nullptr;
    if (t.m_pre == "qwen2")
        pattern = kQwen2Split;
    else if (t.m_pre == "smollm" || t.m_pre == "gpt2" || t.m_pre == "default")
        pattern = kGpt2Split;
    else
        throwInvalid(f.path(), ": tokenizer.ggml.pre '", t.m_pre,
                     "': a pre-tokenizer the engine does not know (it takes qwen2, smollm, gpt2 and default)");

    const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
    const GgufValue* merges = f.find("tokenizer.ggml.merges");
    if (!tokens || tokens->type != GgufValueType::Array || tokens->elementType != GgufValueType::String)
        throwInvalid(f.path(), ": GGUF tokenizer.ggml.tokens is missing or not an array of strings");
    if (!merges || merges->type != GgufValueType::Array || merges->elementType != GgufValueType::String)
        throwInvalid(f.path(), ": GGUF tokenizer.ggml.merges is missing or not an array of strings");
    if (tokens->strings.size() > std::size_t(INT32_MAX))
        throwInvalid(f.path(), ": GGUF tokenizer.ggml.tokens holds too many tokens");
    t.m_tokens = tokens->strings;
    for (std::size_t i = 0; i < t.m_tokens.size(); ++i)
        t.m_index.emplace(t.m_tokens[i], std::int32_t(i)); // a token listed twice keeps its first id

    std::uint32_t cp[256];
    byteChars(cp);
    // A byte whose character the vocabulary lacks (SmolLM2's has no control characters) is dropped,
    // as transformers' BPE drops a character it cannot look up when there is no unknown token.
    int bytesKnown = 0;
    for (int b = 0; b < 256; ++b) {
        const auto it = t.m_index.find(utf8(cp[b]));
        t.m_byteId[b] = it == t.m_index.end() ? -1 : it->second;
        bytesKnown += it != t.m_index.end();
    }
    if (bytesKnown < 128)
        throwInvalid(f.path(), ": GGUF vocabulary has tokens for only ", bytesKnown,
                     " of the 256 bytes: not a byte-level BPE vocabulary");
    for (std::size_t r = 0; r < merges->strings.size(); ++r) {
        const std::string& m = merges->strings[r];
        const auto space = m.find(' ', 1); // a merge is "left right"; left is never empty
        if (space == std::string::npos)
            throwInvalid(f.path(), ": GGUF tokenizer.ggml.merges[", r, "] '", m, "' is not two tokens");
        const auto a = t.m_index.find(m.substr(0, space)), b = t.m_index.find(m.substr(space + 1));
        const auto ab = t.m_index.find(m.substr(0, space) + m.substr(space + 1));
        if (a == t.m_index.end() || b == t.m_index.end() || ab == t.m_index.end())
            throwInvalid(f.path(), ": GGUF tokenizer.ggml.merges[", r, "] '", m, "' names tokens the vocabulary lacks");
        t.m_rank.emplace(pairKey(a->second, b->second), std::int32_t(r)); // the first listing ranks
    }
    if (const GgufValue* types = f.find("tokenizer.ggml.token_type");
        types && types->type == GgufValueType::Array && types->numbers.size() == t.m_tokens.size())
        for (std::size_t i = 0; i < t.m_tokens.size(); ++i)
            if ((types->numbers[i] == 3 || types->numbers[i] == 4) && !t.m_tokens[i].empty()) // control, user-defined
                t.m_special.emplace_back(t.m_tokens[i], std::int32_t(i));
    std::stable_sort(t.m_special.begin(), t.m_special.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    if (const auto bos = f.optionalInteger("tokenizer.ggml.bos_token_id")) {
        if (*bos < 0 || *bos >= std::int64_t(t.m_tokens.size()))
            throwInvalid(f.path(), ": GGUF tokenizer.ggml.bos_token_id ", *bos, " is not a token of the vocabulary");
        t.m_bos = std::int32_t(*bos);
    }
    if (const auto eos = f.optionalInteger("tokenizer.ggml.eos_token_id")) {
        if (*eos < 0 || *eos >= std::int64_t(t.m_tokens.size()))
            throwInvalid(f.path(), ": GGUF tokenizer.ggml.eos_token_id ", *eos, " is not a token of the vocabulary");
        t.m_eos = std::int32_t(*eos);
    }

    t.m_regex = std::make_unique<Regex>();
    int err = 0;
    PCRE2_SIZE at = 0;
    t.m_regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &at, nullptr);
    if (!t.m_regex->code)
        throwRuntime("the ", t.m_pre, " pre-tokenizer's expression does not compile in this PCRE2 (error ", err, " at ",
                     at, ")");
    pcre2_jit_compile(t.m_regex->code, PCRE2_JIT_COMPLETE); // faster where PCRE2 has its JIT; optional
    return t;
}

std::string BpeTokenizer::piece(std::int32_t id) const
{
    std::uint32_t cp[256];
    byteChars(cp);
    if (id < 0 || id >= size())
        throwInvalid("token id ", id, " is outside the vocabulary (", size(), " tokens)");
    std::string out;
    const std::string& s = m_tokens[std::size_t(id)];
    for (std::size_t i = 0; i < s.size();) {
        const auto c0 = static_cast<unsigned char>(s[i]);
        const int len = c0 < 0x80 ? 1 : c0 < 0xE0 ? 2 : c0 < 0xF0 ? 3 : 4;
        std::uint32_t c = len == 1 ? c0 : len == 2 ? c0 & 0x1F : len == 3 ? c0 & 0x0F : c0 & 0x07;
        for (int k = 1; k < len && i + std::size_t(k) < s.size(); ++k)
            c = c << 6 | (static_cast<unsigned char>(s[i + std::size_t(k)]) & 0x3F);
        const auto b = std::find(std::begin(cp), std::end(cp), c);
        if (b != std::end(cp))
            out += char(b - std::begin(cp));
        else
            out += s.substr(i, std::size_t(len)); // a special token's own text
        i += std::size_t(len);
    }
    return out;
}

void BpeTokenizer::encodePiece(const std::string& bytes, std::vector<std::int32_t>& out) const
{
    {
        const std::lock_guard<std::mutex> lock(*m_cacheMutex);
        if (const auto hit = m_cache.find(bytes); hit != m_cache.end()) {
            out.insert(out.end(), hit->second.begin(), hit->second.end());
            return;
        }
    }
    std::vector<std::int32_t> sym;
    sym.reserve(bytes.size());
    for (unsigned char b : bytes)
        if (m_byteId[b] >= 0)
            sym.push_back(m_byteId[b]);
    // The adjacent pair of lowest rank merges first (the leftmost of equals), until none has a rank.
    for (;;) {
        std::int32_t best = INT32_MAX;
        std::size_t at = 0;
        for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
            const auto it = m_rank.find(pairKey(sym[i], sym[i + 1]));
            if (it != m_rank.end() && it->second < best) {
                best = it->second;
                at = i;
            }
        }
        if (best == INT32_MAX)
            break;
        sym[at] = m_index.at(m_tokens[std::size_t(sym[at])] + m_tokens[std::size_t(sym[at + 1])]);
        sym.erase(sym.begin() + std::ptrdiff_t(at) + 1);
    }
    if (bytes.size() <= 64) {
        const std::lock_guard<std::mutex> lock(*m_cacheMutex);
        if (m_cache.size() < (1u << 20))
            m_cache.emplace(bytes, sym);
    }
    out.insert(out.end(), sym.begin(), sym.end());
}

std::vector<std::int32_t> BpeTokenizer::encode(const std::string& text) const
{
    std::vector<std::int32_t> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(m_regex->code, nullptr);
    if (!md)
        throwRuntime("PCRE2 could not allocate its match data");
    struct Free {
        pcre2_match_data* md;
        ~Free() { pcre2_match_data_free(md); }
    } freeMd{md};
    // The regular text between special tokens, split by the pre-tokenizer; gaps between matches are
    // pieces too (transformers' "isolated" split).
    const auto split = [&](std::size_t from, std::size_t to) {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        std::size_t pos = from;
        std::uint32_t options = 0;
        while (pos < to) {
            const int rc = pcre2_match(m_regex->code, subject, to, pos, options, md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) {
                encodePiece(text.substr(pos, to - pos), out);
                return;
            }
            if (rc < 0) {
                PCRE2_SIZE bad = pcre2_get_startchar(md);
                if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
                    throwInvalid("the text is not UTF-8 (an invalid sequence near byte ", bad, ")");
                throwRuntime("the pre-tokenizer's expression failed (PCRE2 error ", rc, ")");
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            if (ov[0] > pos)
                encodePiece(text.substr(pos, ov[0] - pos), out);
            if (ov[1] > ov[0]) {
                encodePiece(text.substr(ov[0], ov[1] - ov[0]), out);
                pos = ov[1];
            } else { // an empty match: step one character
                std::size_t next = ov[0] + 1;
                while (next < to && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80)
                    ++next;
                encodePiece(text.substr(ov[0], next - ov[0]), out);
                pos = next;
            }
            options = PCRE2_NO_UTF_CHECK; // checked once, on the first match
        }
    };
    std::size_t pos = 0;
    while (pos < text.size()) {
        // The earliest special token at or after pos (the longest where two start together).
        std::size_t best = std::string::npos;
        const std::pair<std::string, std::int32_t>* which = nullptr;
        for (const auto& s : m_special) {
            const auto at = text.find(s.first, pos);
            if (at != std::string::npos && (at < best || (at == best && s.first.size() > which->first.size()))) {
                best = at;
                which = &s;
            }
        }
        const std::size_t end = which ? best : text.size();
        if (end > pos)
            split(pos, end);
        if (!which)
            break;
        out.push_back(which->second);
        pos = best + which->first.size();
    }
    return out;
}

} // namespace gsrq
