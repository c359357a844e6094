// The llama2.c tokenizer (llama2c_tokenizer.h).
#include "core/lm/llama2c_tokenizer.h"

#include "core/base/error.h"
#include "core/base/mapped_file.h"

#include <cstring>
#include <queue>

namespace gsrq {

Llama2cTokenizer Llama2cTokenizer::load(const std::string& path, int vocab)
{
    if (vocab < 3)
        throwInvalid(path, ": a vocabulary of ", vocab, " tokens has no room for <unk>, <s> and </s>");
    const auto file = MappedFile::open(path);
    const auto* p = reinterpret_cast<const unsigned char*>(file->data());
    const std::size_t n = file->size();
    std::size_t at = 0;
    const auto read = [&](void* out, std::size_t bytes, std::int32_t id) {
        if (bytes > n - at)
            throwInvalid(path, ": ends inside token ", id, " (", n, " bytes); not a llama2.c tokenizer for a ", vocab,
                         "-token model");
        std::memcpy(out, p + at, bytes);
        at += bytes;
    };
    std::int32_t maxLen = 0;
    read(&maxLen, 4, -1);
    if (maxLen <= 0 || maxLen > 4096)
        throwInvalid(path, ": max_token_length ", maxLen, " is not that of a llama2.c tokenizer");
    Llama2cTokenizer tok;
    for (std::int32_t id = 0; id < vocab; ++id) {
        float score;
        std::int32_t len;
        read(&score, 4, id);
        read(&len, 4, id);
        if (len < 0 || len > maxLen)
            throwInvalid(path, ": token ", id, " has length ", len, " (max_token_length ", maxLen, ")");
        std::string s(std::size_t(len), '\0');
        read(s.data(), std::size_t(len), id);
        tok.m_pieces.push_back(std::move(s));
        tok.m_scores.push_back(score);
    }
    if (at != n)
        throwInvalid(path, ": ", n - at, " bytes left after ", vocab,
                     " tokens: a tokenizer of a larger vocabulary than the model's (", vocab, ")");
    // A piece that appears twice maps to its first id, as a sorted-vocabulary search finds it.
    for (std::int32_t id = 0; id < vocab; ++id)
        tok.m_index.emplace(tok.m_pieces[std::size_t(id)], id);
    return tok;
}

std::int32_t Llama2cTokenizer::lookup(const std::string& s) const
{
    const auto it = m_index.find(s);
    return it == m_index.end() ? -1 : it->second;
}

std::vector<std::int32_t> Llama2cTokenizer::encode(const std::string& text) const
{
    std::vector<std::int32_t> ids;
    if (text.empty())
        return ids;
    // sentencepiece's dummy prefix: a leading space.
    if (const auto space = lookup(" "); space >= 0)
        ids.push_back(space);
    // UTF-8 characters (a lead byte and its continuation bytes), each a token or its bytes.
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = 1;
        while (i + len < text.size() && len < 4 && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80)
            ++len;
        const std::string ch = text.substr(i, len);
        if (const auto id = lookup(ch); id >= 0) {
            ids.push_back(id);
        } else {
            // Byte fallback: <0x00>..<0xFF> are ids 3..258; a vocabulary without them gives <unk>.
            for (unsigned char b : ch)
                ids.push_back(3 + int(b) < size() ? 3 + std::int32_t(b) : 0);
        }
        i += len;
    }
    // Merge the best-scoring adjacent pair until no pair's concatenation is a token; among equal
    // scores the leftmost first. A heap of candidate pairs over a linked list: O(n log n), where
    // rescanning the whole sequence after every merge would be quadratic in the text's length.
    struct Cand {
        float score;
        std::int32_t left, right, leftId, rightId, id;
        bool operator<(const Cand& o) const { return score != o.score ? score < o.score : left > o.left; }
    };
    const auto n = std::int32_t(ids.size());
    std::vector<std::int32_t> next(static_cast<std::size_t>(n)), prev(static_cast<std::size_t>(n));
    std::vector<char> alive(std::size_t(n), 1);
    for (std::int32_t i = 0; i < n; ++i) {
        next[std::size_t(i)] = i + 1 < n ? i + 1 : -1;
        prev[std::size_t(i)] = i - 1;
    }
    std::priority_queue<Cand> heap;
    const auto consider = [&](std::int32_t a, std::int32_t b) {
        if (a < 0 || b < 0)
            return;
        const auto idA = ids[std::size_t(a)], idB = ids[std::size_t(b)];
        if (idA >= size() || idB >= size()) // a byte token a small vocabulary lacks: never merged
            return;
        if (const auto id = lookup(m_pieces[std::size_t(idA)] + m_pieces[std::size_t(idB)]); id >= 0)
            heap.push({m_scores[std::size_t(id)], a, b, idA, idB, id});
    };
    for (std::int32_t i = 0; i + 1 < n; ++i)
        consider(i, i + 1);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        // Stale: a side was merged away or changed since the pair was seen.
        if (!alive[std::size_t(c.left)] || !alive[std::size_t(c.right)] || next[std::size_t(c.left)] != c.right ||
            ids[std::size_t(c.left)] != c.leftId || ids[std::size_t(c.right)] != c.rightId)
            continue;
        ids[std::size_t(c.left)] = c.id;
        alive[std::size_t(c.right)] = 0;
        const auto after = next[std::size_t(c.right)];
        next[std::size_t(c.left)] = after;
        if (after >= 0)
            prev[std::size_t(after)] = c.left;
        consider(prev[std::size_t(c.left)], c.left);
        consider(c.left, after);
    }
    std::vector<std::int32_t> out;
    for (std::int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[std::size_t(i)])
        out.push_back(ids[std::size_t(i)]);
    return out;
}

} // namespace gsrq
