// Appending to the CPU decode cache: tokens quantized (greedy, through the assignment kernels) and
// packed, or repeated, or random; the codes read back.

#include "core/decode/cpu_decode_impl.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/stats.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/nearest_kernels.h"
#include "core/lm/rope.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

namespace gsrq {

using cpudecode::CodeView;
using cpudecode::HeadDims;
using cpudecode::Kernels;
using cpudecodeimpl::FewPanels;
using namespace cpudecodeimpl;

// The panels of every (subspace, stage) of a book, packed at the first append of a few rows (or the
// first lookup step that reads the key panels): FP16 with an exact second look where the CPU has
// AVX-512, the books are large enough and every codeword fits FP16 (none is needed past that), else
// the assignment kernel's FP32 panels.
void cpudecodeimpl::packFewPanels(const Codebooks& cb, FewPanels& p, const nearest::NearestKernels& kernel)
{
    if (p.packed)
        return;
    const int M = cb.subspaces, R = cb.stages;
    if (cb.k >= kMinScreenedCodewords)
        for (int m = 0; m < M; ++m)
            for (int r = 0; r < R; ++r)
                p.screened.push_back(nearest::packScreened(MatrixRF(cb.book(m, r))));
    if (p.screened.empty() || std::any_of(p.screened.begin(), p.screened.end(), [](const auto& s) { return !s; })) {
        p.screened.clear();
        for (int m = 0; m < M; ++m)
            for (int r = 0; r < R; ++r)
                p.fp32.push_back(nearest::packCodewords(MatrixRF(cb.book(m, r)), kernel));
    }
    p.packed = true;
}

namespace {

// Greedy encoding of a few rows of keys and of values through every stage, as encode(X, cb, 1,
// backend) gives it with the CPU backend: each stage's label is the assignment kernel's nearest
// codeword of the residual (the backend's exact bounds pick that kernel's label bit for bit,
// nearest_kernels.h and exact_bounds.h; the FP16 screen picks the same, nearest_screened.h), and the
// residual drops that codeword, in float, as the backend subtracts it. Only for the vector kernels,
// which score a pair the same wherever it lies; the caller falls back to encode() elsewhere. Each
// (keys or values, row, subspace) is a chain of stages of its own: the chains run on the cache's
// threads, whose combined read rate the codebooks' bytes are bound by.
struct FewBooks {
    const Codebooks& keyBooks;
    const Codebooks& valueBooks;
    FewPanels& keyFew;
    FewPanels& valueFew;
    int threads;
};

void encodeFew(const MatrixRF& keys, const MatrixRF& values, const FewBooks& c, const nearest::NearestKernels& kernel,
               Codes& ck, Codes& cv)
{
    packFewPanels(c.keyBooks, c.keyFew, kernel);
    packFewPanels(c.valueBooks, c.valueFew, kernel);
    const int M = c.keyBooks.subspaces, R = c.keyBooks.stages, D = c.keyBooks.dim;
    const std::int64_t rows = keys.rows();
    ck.resize(rows, Eigen::Index(M) * R);
    cv.resize(rows, Eigen::Index(M) * R);
    const std::int64_t items = 2 * rows * M;
#pragma omp parallel for num_threads(c.threads) schedule(static) if (c.threads > 1 && items > 1)
    for (std::int64_t item = 0; item < items; ++item) {
        const bool isKey = item < rows * M;
        const std::int64_t i = (item % (rows * M)) / M;
        const int m = int(item % M);
        const MatrixRF& X = isKey ? keys : values;
        const auto& few = isKey ? c.keyFew : c.valueFew;
        Codes& codes = isKey ? ck : cv;
        thread_local std::vector<float> res, scratch;
        res.assign(X.row(i).data() + std::int64_t(m) * D, X.row(i).data() + std::int64_t(m + 1) * D);
        for (int r = 0; r < R; ++r) {
            const std::size_t at = std::size_t(m) * std::size_t(R) + std::size_t(r);
            std::int32_t label = 0;
            float score = 0;
            if (!few.screened.empty())
                nearest::nearestScreened(res.data(), few.screened[at], &label, &score, scratch);
            else
                kernel.nearest(res.data(), 1, D, few.fp32[at], &label, &score);
            codes(i, Eigen::Index(m) * R + r) = label;
            // The codeword from the bytes the search just read (the screen's FP32 copy, which scored
            // the winner again, or the FP32 panel, a codeword every `width` floats): the same values as
            // the book's row, which would be a miss to memory on the chain's critical path, stage
            // after stage (the decode step's weights evict the books between steps).
            const float* cw = nullptr;
            std::size_t stride = 1;
            if (!few.screened.empty()) {
                cw = few.screened[at].C.row(label).data();
            } else {
                const nearest::NearestPanels& pn = few.fp32[at];
                cw = pn.panels() + std::size_t(label / pn.width) * std::size_t(D) * std::size_t(pn.width) +
                     std::size_t(label % pn.width);
                stride = std::size_t(pn.width);
            }
            for (int d = 0; d < D; ++d)
                res[std::size_t(d)] -= cw[std::size_t(d) * stride];
        }
    }
}

} // namespace

std::pair<Codes, Codes> CpuDecodeCache::append(const MatrixRF& keys, const MatrixRF& values)
{
    return appendRows(keys, values, true);
}

void CpuDecodeCache::appendFp16(const MatrixRF& keys, const MatrixRF& values)
{
    if (!m->cfg.fp16)
        throwInvalid("appendFp16: this cache keeps no FP16 rows");
    appendRows(keys, values, false);
}

std::pair<Codes, Codes> CpuDecodeCache::appendRows(const MatrixRF& keys, const MatrixRF& values, bool quantize)
{
    const auto& s = m->cfg.shape;
    const std::int64_t F = std::int64_t(s.kvHeads) * s.headDim;
    const int B = m->cfg.batch;
    if (keys.cols() != F || values.cols() != F || keys.rows() != values.rows())
        throwInvalid("append: keys ", keys.rows(), "×", keys.cols(), " and values ", values.rows(), "×", values.cols(),
                     " must both be rows × ", F);
    if (keys.rows() % B)
        throwInvalid("append: ", keys.rows(), " rows are not a whole number per sequence of the batch of ", B);
    const std::int64_t n = keys.rows() / B;
    if (m->tokens + n > m->cfg.capacity)
        throwInvalid("append: the cache holds ", m->cfg.capacity, " tokens; ", m->tokens, " + ", n, " do not fit");
    if (n == 0)
        return {};
    const nearest::NearestKernels& kernel = nearest::bestNearest();
    const bool few = keys.rows() <= 16 && kernel.width > 0 && m->keyBooks.order.empty() && m->valueBooks.order.empty();
    // Without quantizing, the tokens' codes are code 0 of every stage (the FP16 path never reads them).
    const Codes zero = Codes::Zero(keys.rows(), Eigen::Index(m->keyBooks.subspaces) * m->keyBooks.stages);
    Codes ck, cv;
    if (!quantize) {
        ck = cv = zero;
    } else if (few) {
        encodeFew(keys, values, {m->keyBooks, m->valueBooks, m->keyFew, m->valueFew, m->threads}, kernel, ck, cv);
    } else {
        ck = encode(keys, m->keyBooks, 1, *m->encoder);
        cv = encode(values, m->valueBooks, 1, *m->encoder);
    }
    for (int b = 0; b < B; ++b) {
        appendCodes(m->kc[std::size_t(b)], ck.middleRows(std::int64_t(b) * n, n));
        appendCodes(m->vc[std::size_t(b)], cv.middleRows(std::int64_t(b) * n, n));
        if (m->cfg.fp16)
            for (std::int64_t i = 0; i < n; ++i)
                for (int h = 0; h < s.kvHeads; ++h)
                    for (int j = 0; j < s.headDim; ++j) {
                        const std::size_t at =
                            (std::size_t(h) * m->cfg.capacity + std::size_t(m->tokens + i)) * s.headDim + j;
                        const Eigen::Index row = std::int64_t(b) * n + i, col = Eigen::Index(h) * s.headDim + j;
                        m->k16[std::size_t(b)][at] = halfBits(keys(row, col));
                        m->v16[std::size_t(b)][at] = halfBits(values(row, col));
                    }
    }
    m->tokens += n;
    return {ck, cv};
}

void CpuDecodeCache::appendRepeat(std::int64_t n)
{
    const std::int64_t held = m->tokens, cap = m->cfg.capacity;
    if (held == 0)
        throwInvalid("appendRepeat: the cache holds no tokens to repeat");
    if (n < 0 || held + n > cap)
        throwInvalid("appendRepeat: the cache holds ", cap, " tokens; ", held, " + ", n, " do not fit");
    const auto& s = m->cfg.shape;
    for (int b = 0; b < m->cfg.batch; ++b) {
        for (auto* p : {&m->kc[std::size_t(b)], &m->vc[std::size_t(b)]}) {
            for (int sp = 0; sp < m->M; ++sp) {
                std::uint8_t* base = p->data.data() + std::size_t(sp) * std::size_t(p->capacity) * std::size_t(m->bpt);
                for (std::int64_t t = held; t < held + n; ++t)
                    std::memcpy(base + std::size_t(t) * std::size_t(m->bpt),
                                base + std::size_t(t % held) * std::size_t(m->bpt), std::size_t(m->bpt));
            }
            p->tokens += n;
        }
        if (m->cfg.fp16)
            for (auto* rows : {&m->k16[std::size_t(b)], &m->v16[std::size_t(b)]})
                for (int h = 0; h < s.kvHeads; ++h) {
                    std::uint16_t* base = rows->data() + std::size_t(h) * std::size_t(cap) * std::size_t(s.headDim);
                    for (std::int64_t t = held; t < held + n; ++t)
                        std::memcpy(base + std::size_t(t) * std::size_t(s.headDim),
                                    base + std::size_t(t % held) * std::size_t(s.headDim), std::size_t(s.headDim) * 2);
                }
    }
    m->tokens += n;
}

void CpuDecodeCache::appendRandom(std::int64_t n, std::uint64_t seed)
{
    if (n < 0 || m->tokens + n > m->cfg.capacity)
        throwInvalid("appendRandom: the cache holds ", m->cfg.capacity, " tokens; ", m->tokens, " + ", n,
                     " do not fit");
    const auto& s = m->cfg.shape;
    const int B = m->cfg.batch, R = m->d.R, K = m->d.K;
    const std::int64_t t0 = m->tokens, cap = m->cfg.capacity;
    // Each (sequence, subspace or KV head) has a generator of its own, so threads do not share one.
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (std::int64_t item = 0; item < std::int64_t(B) * m->M; ++item) {
        const int b = int(item / m->M), sp = int(item % m->M);
        std::mt19937_64 rng(seed * 7919 + std::uint64_t(item) * 104729 + 1);
        std::uniform_int_distribution<int> code(0, K - 1);
        for (auto* p : {&m->kc[std::size_t(b)], &m->vc[std::size_t(b)]})
            for (std::int64_t t = t0; t < t0 + n; ++t) {
                std::uint8_t* bytes = p->data.data() + (std::size_t(sp) * cap + std::size_t(t)) * m->bpt;
                if (m->bits == 8) {
                    for (int r = 0; r < R; ++r)
                        bytes[r] = std::uint8_t(code(rng));
                } else {
                    std::fill(bytes, bytes + m->bpt, 0);
                    for (int r = 0; r < R; ++r) {
                        const unsigned c = unsigned(code(rng));
                        for (int i = 0; i < m->bits; ++i)
                            if (c >> i & 1u)
                                bytes[(r * m->bits + i) / 8] |= std::uint8_t(1u << ((r * m->bits + i) % 8));
                    }
                }
            }
    }
    if (m->cfg.fp16) {
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
        for (std::int64_t item = 0; item < std::int64_t(B) * s.kvHeads; ++item) {
            const int b = int(item / s.kvHeads), h = int(item % s.kvHeads);
            std::mt19937_64 rng(seed * 6151 + std::uint64_t(item) * 15485863 + 2);
            std::uniform_real_distribution<float> u(-1.f, 1.f);
            for (auto* rows : {&m->k16[std::size_t(b)], &m->v16[std::size_t(b)]})
                for (std::int64_t t = t0; t < t0 + n; ++t) {
                    std::uint16_t* row = rows->data() + (std::size_t(h) * cap + std::size_t(t)) * s.headDim;
                    for (int j = 0; j < s.headDim; ++j)
                        row[j] = halfBits(u(rng));
                }
        }
    }
    m->tokens += n;
    for (int b = 0; b < B; ++b) {
        m->kc[std::size_t(b)].tokens = m->tokens;
        m->vc[std::size_t(b)].tokens = m->tokens;
    }
}

PackedCodes CpuDecodeCache::keyCodes(int b) const
{
    if (b < 0 || b >= m->cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m->cfg.batch);
    return m->kc[std::size_t(b)];
}

PackedCodes CpuDecodeCache::valueCodes(int b) const
{
    if (b < 0 || b >= m->cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m->cfg.batch);
    return m->vc[std::size_t(b)];
}

double CpuDecodeCache::timeAppend(int reps)
{
    if (m->tokens >= m->cfg.capacity)
        throwInvalid("timeAppend: the cache is full");
    const auto& s = m->cfg.shape;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    MatrixRF x(m->cfg.batch, std::int64_t(s.kvHeads) * s.headDim);
    for (Eigen::Index i = 0; i < x.size(); ++i)
        x.data()[i] = normal(rng);
    std::vector<double> t;
    for (int i = 0; i < reps + 2; ++i) {
        const auto start = std::chrono::steady_clock::now();
        append(x, x);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // The slot stays free: the counts go back.
        m->tokens -= 1;
        for (int b = 0; b < m->cfg.batch; ++b) {
            m->kc[std::size_t(b)].tokens = m->tokens;
            m->vc[std::size_t(b)].tokens = m->tokens;
        }
        if (i >= 2)
            t.push_back(sec);
    }
    return median(t);
}

} // namespace gsrq
