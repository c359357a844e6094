#pragma once
// The byte-level BPE tokenizer of a GGUF model (tokenizer.ggml.model = "gpt2"): its vocabulary,
// merges and pre-tokenizer, giving the ids transformers' tokenizer gives for the same GGUF file
// (AutoTokenizer.from_pretrained(..., gguf_file=...)), which tools/dump_kv.py and tools/hf_ppl.py
// use, so the engine's perplexity and the dumps see the same tokens.
//
// Steps, as transformers' tokenizers run them: the special tokens (control and user-defined ids)
// are cut out of the text first; the rest is split by the pre-tokenizer's regular expression (PCRE2,
// UTF-8 with Unicode properties); each piece's bytes are mapped to GPT-2's printable characters;
// BPE merges the adjacent pair of lowest merge rank until none is left; the pieces are looked up.
// Pre-tokenizers: "qwen2" (Qwen2's split, digits one by one) and "smollm", "gpt2" and "default"
// (GPT-2's byte-level split, as transformers builds it for those files). Thread-safe: encode may run
// on one tokenizer from several threads (its cache of pieces is locked).

#include "core/io/gguf.h"
#include "core/lm/tokenizer.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gsrq {

class BpeTokenizer final : public Tokenizer {
public:
    // Throws Error(InvalidInput) naming the file and key for a vocabulary that is not byte-level BPE
    // or a pre-tokenizer it does not know (named, with the ones it takes).
    static BpeTokenizer fromGguf(const GgufFile& file);
    BpeTokenizer(BpeTokenizer&&) noexcept;
    BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
    ~BpeTokenizer() override;

    // The text's ids, without BOS. Throws Error(InvalidInput) for text that is not UTF-8.
    std::vector<std::int32_t> encode(const std::string& text) const override;
    std::optional<std::int32_t> bos() const override { return m_bos; }
    std::optional<std::int32_t> eos() const override { return m_eos; }
    std::string name() const override { return m_pre; }
    const std::string& pre() const { return m_pre; }
    int size() const override { return int(m_tokens.size()); }
    // The token's text (GPT-2's printable characters decoded back to bytes).
    std::string piece(std::int32_t id) const override;

private:
    BpeTokenizer();
    void encodePiece(const std::string& bytes, std::vector<std::int32_t>& out) const;
    std::string m_pre;
    std::vector<std::string> m_tokens;                           // as stored: GPT-2's printable characters
    std::unordered_map<std::string, std::int32_t> m_index;       // token → id
    std::unordered_map<std::uint64_t, std::int32_t> m_rank;      // (left id, right id) → merge rank
    std::vector<std::pair<std::string, std::int32_t>> m_special; // control and user-defined tokens, longest first
    std::int32_t m_byteId[256] = {};                             // each byte's one-character token, or −1
    std::optional<std::int32_t> m_bos, m_eos;
    struct Regex;
    std::unique_ptr<Regex> m_regex;
    mutable std::unordered_map<std::string, std::vector<std::int32_t>> m_cache; // piece → ids
    mutable std::unique_ptr<std::mutex> m_cacheMutex = std::make_unique<std::mutex>();
};

} // namespace gsrq
