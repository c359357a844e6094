// Token sequences to measure a model on (sequences.h).
#include "core/lm/sequences.h"

#include "core/base/error.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace gsrq {

namespace {

std::uint64_t splitmix64(std::uint64_t& s)
{
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

} // namespace

std::string reflowText(const std::string& raw)
{
    std::string out, para;
    bool pendingSpace = false;
    const auto endParagraph = [&] {
        if (para.empty())
            return;
        if (!out.empty())
            out += '\n';
        out += para;
        para.clear();
        pendingSpace = false;
    };
    std::size_t i = 0;
    while (i < raw.size()) {
        const std::size_t eol = std::min(raw.find('\n', i), raw.size());
        const std::string line = raw.substr(i, eol - i);
        const bool blank = std::all_of(line.begin(), line.end(), [](unsigned char ch) { return std::isspace(ch); });
        if (blank) {
            endParagraph();
        } else {
            for (unsigned char ch : line) {
                if (std::isspace(ch)) {
                    pendingSpace = !para.empty();
                } else {
                    if (pendingSpace)
                        para += ' ';
                    pendingSpace = false;
                    para += char(ch);
                }
            }
            pendingSpace = !para.empty(); // the line break inside a paragraph is a space
        }
        i = eol + 1;
    }
    endParagraph();
    return out;
}

std::vector<TokenSequence> textSequences(const std::vector<std::int32_t>& text, int seqLen, int sequences,
                                         std::optional<std::int32_t> bos, const std::string& lengthFlag)
{
    if (seqLen < 2)
        throwInvalid(lengthFlag, " ", seqLen, ": needs at least 2 (BOS and a token to predict)");
    if (sequences < 1)
        throwInvalid("--sequences ", sequences, ": needs at least 1");
    const int body = seqLen - (bos ? 1 : 0);
    const std::int64_t need = std::int64_t(sequences) * body;
    if (std::int64_t(text.size()) < need)
        throwInvalid("--text: ", text.size(), " tokens, but --sequences ", sequences, " × ",
                     bos ? cat("(", lengthFlag, " ", seqLen, " − 1)") : cat(lengthFlag, " ", seqLen), " needs ", need,
                     "; give a longer text or fewer sequences");
    std::vector<std::vector<std::int32_t>> out;
    for (int s = 0; s < sequences; ++s) {
        std::vector<std::int32_t> seq;
        if (bos)
            seq.push_back(*bos);
        const auto from = text.begin() + std::ptrdiff_t(s) * body;
        seq.insert(seq.end(), from, from + body);
        out.push_back(std::move(seq));
    }
    return out;
}

std::vector<TokenSequence> generateSequences(const TransformerModel& model, int seqLen, int sequences,
                                             std::uint64_t seed, std::int32_t bos, const std::string& lengthFlag)
{
    if (seqLen < 2 || seqLen > model.config().maxSeq)
        throwInvalid(lengthFlag, " ", seqLen, ": must be 2 to the model's ", model.config().maxSeq);
    if (sequences < 1)
        throwInvalid("--sequences ", sequences, ": needs at least 1");
    std::uint64_t state = seed;
    std::vector<std::vector<std::int32_t>> out;
    for (int s = 0; s < sequences; ++s) {
        std::vector<std::int32_t> seq{bos};
        TransformerModel::Cache cache;
        std::int32_t next = bos;
        while (int(seq.size()) < seqLen) {
            const MatrixRF logits = model.forward(std::span<const std::int32_t>(&next, 1), cache);
            const Eigen::RowVectorXf row = logits.row(0);
            Eigen::RowVectorXd p = (row.cast<double>().array() - double(row.maxCoeff())).exp();
            p /= p.sum();
            const double u = double(splitmix64(state) >> 11) * 0x1.0p-53;
            double acc = 0;
            next = std::int32_t(p.size() - 1);
            for (Eigen::Index i = 0; i < p.size(); ++i) {
                acc += p[i];
                if (u < acc) {
                    next = std::int32_t(i);
                    break;
                }
            }
            seq.push_back(next);
        }
        out.push_back(std::move(seq));
    }
    return out;
}

OpenedSequences openWithSequences(const std::string& modelPath, const std::string& tokenizerPath,
                                  const SequenceSource& source)
{
    OpenedSequences out{openModel(modelPath, tokenizerPath), {}};
    out.seqs = modelSequences(out.opened, source);
    return out;
}

ModelSequences modelSequences(const OpenedModel& m, const SequenceSource& s)
{
    const auto& cfg = m.model.config();
    ModelSequences out;
    if (s.generate) {
        if (m.format == ModelFormat::Gguf)
            throwInvalid(m.path, ": a GGUF model's perplexity is measured on a text: choose one");
        const Tokenizer& tok = m.vocabulary(); // the samples start with its BOS
        if (!tok.bos())
            throwInvalid("--generate: the ", tok.name(), " vocabulary has no BOS to start samples from");
        out.sequences = generateSequences(m.model, s.seqLen, s.sequences, s.seed, *tok.bos(), s.lengthFlag);
        return out;
    }
    if (s.text.empty())
        throwInvalid(m.path, ": give a text to measure the model on");
    if (s.seqLen > cfg.maxSeq)
        throwInvalid(s.lengthFlag, " ", s.seqLen, ": the model takes at most ", cfg.maxSeq);
    const Tokenizer& tok = m.vocabulary();
    std::ifstream f(s.text, std::ios::binary);
    if (!f)
        throwInvalid("--text ", s.text, ": cannot be read");
    std::stringstream text;
    text << f.rdbuf();
    std::vector<std::int32_t> ids;
    try {
        ids = tok.encode(reflowText(text.str()));
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::InvalidInput)
            throwInvalid("--text ", s.text, ": ", e.what());
        throw;
    }
    out.textTokens = std::int64_t(ids.size());
    out.sequences = textSequences(ids, s.seqLen, s.sequences, tok.bos(), s.lengthFlag);
    return out;
}

std::vector<TokenSequence> tokenIdSequences(const std::string& path, const ModelConfig& cfg)
{
    std::ifstream f(path);
    if (!f)
        throwInvalid("--token-ids ", path, ": cannot be read");
    std::vector<std::vector<std::int32_t>> out;
    std::string line;
    for (int lineNo = 1; std::getline(f, line); ++lineNo) {
        std::istringstream words(line);
        std::vector<std::int32_t> seq;
        for (std::string w; words >> w;) {
            std::size_t used = 0;
            long long id = -1;
            try {
                id = std::stoll(w, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != w.size() || id < 0 || id >= cfg.vocab)
                throwInvalid("--token-ids ", path, ":", lineNo, ": '", w, "' is not a token id of the model (0 to ",
                             cfg.vocab - 1, ")");
            seq.push_back(std::int32_t(id));
        }
        if (seq.empty())
            continue;
        if (seq.size() < 2 || std::int64_t(seq.size()) > cfg.maxSeq)
            throwInvalid("--token-ids ", path, ":", lineNo, ": a sequence of ", seq.size(),
                         " tokens (2 to the model's ", cfg.maxSeq, ")");
        out.push_back(std::move(seq));
    }
    if (out.empty())
        throwInvalid("--token-ids ", path, ": holds no sequence");
    return out;
}

std::int64_t predictedTokens(const std::vector<TokenSequence>& seqs)
{
    std::int64_t n = 0;
    for (const auto& q : seqs)
        n += std::int64_t(q.size()) - 1;
    return n;
}

std::int64_t cachedTokens(const std::vector<TokenSequence>& seqs)
{
    return predictedTokens(seqs) + std::int64_t(seqs.size());
}

int longestSequence(const std::vector<TokenSequence>& seqs)
{
    std::size_t n = 0;
    for (const auto& q : seqs)
        n = std::max(n, q.size());
    return int(n);
}

} // namespace gsrq
