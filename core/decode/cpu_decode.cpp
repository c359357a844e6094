// The CPU decode cache: storage, threads, token splits and the combine of split partials. The
// inner loops are cpu_kernels.cpp's.

#include "core/decode/cpu_decode.h"

#include "core/base/error.h"
#include "core/base/process.h"
#include "core/base/stats.h"
#include "core/cluster/cluster_backend.h"
#include "core/cluster/nearest_kernels.h"
#include "core/decode/cpu_kernels.h"
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

namespace {

std::uint16_t halfBits(float v)
{
    return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(v));
}

float halfValue(std::uint16_t b)
{
    return float(Eigen::numext::bit_cast<Eigen::half>(b));
}

std::vector<std::uint16_t> halves(const Codebooks& cb)
{
    std::vector<std::uint16_t> h(cb.data.size());
    for (std::size_t i = 0; i < h.size(); ++i)
        h[i] = halfBits(cb.data[i]);
    return h;
}

// A split pays fixed costs (the lookup path's table, the bins zeroed and merged), so none is shorter.
constexpr std::int64_t kMinFp16SplitTokens = 512;
constexpr std::int64_t kMinBinSplitTokens = 2048;

} // namespace

std::string cpuDecodeShapeProblem(const DecodeShape& s, int dim, int stages, int k)
{
    if (s.heads < 1 || s.kvHeads < 1 || s.heads % s.kvHeads)
        return cat("--heads ", s.heads, " must be a positive multiple of --kv-heads ", s.kvHeads);
    if (s.heads / s.kvHeads > 8)
        return cat(s.heads / s.kvHeads, " query heads per KV head: the CPU decode paths take at most 8");
    if (s.headDim < 16 || s.headDim > 512 || s.headDim % 16)
        return cat("--head-dim ", s.headDim, ": the CPU decode paths take a multiple of 16 up to 512");
    if (dim < 8 || dim % 8 || s.headDim % dim)
        return cat("D = ", dim, ": the CPU decode paths need a multiple of 8 that divides head_dim ", s.headDim);
    if (k < 2 || k > 256 || (k & (k - 1)))
        return cat("K = ", k, ": the CPU decode paths take a power of two from 2 to 256 (a code in a byte)");
    if (stages < 1)
        return cat("R = ", stages, " (--stages): at least one stage");
    if (std::int64_t(stages) * PackedCodes::bitsFor(k) > 256)
        return cat("R·log2 K = ", std::int64_t(stages) * PackedCodes::bitsFor(k),
                   " bits per token (--stages, --k): the CPU decode paths take up to 256");
    return {};
}

const char* cpuDecodeIsa()
{
    return cpudecode::bestKernels().isa;
}

std::string cpuDecodeIsaProblem(const std::string& isa)
{
    if (cpudecode::kernelsNamed(isa))
        return {};
    std::string known = "best";
    for (const auto& n : cpuDecodeIsas())
        known += ", " + n;
    return cat("--isa ", isa, ": this CPU runs the decode kernels ", known);
}

std::vector<std::string> cpuDecodeIsas()
{
    std::vector<std::string> names;
    for (const auto* k : cpudecode::availableKernels())
        names.emplace_back(k->isa);
    return names;
}

std::string cpuModelName()
{
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                const auto start = line.find_first_not_of(" \t", colon + 1);
                if (start != std::string::npos)
                    return line.substr(start);
            }
        }
    return "CPU";
}

int cpuDecodeThreads(int requested)
{
    if (requested > 0)
        return requested;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return std::max(1, CPU_COUNT(&set));
    return std::max(1, omp_get_num_procs());
}

struct CpuDecodeCache::Impl {
    CpuDecodeConfig cfg;
    const Kernels* kernels = nullptr;
    int threads = 1;
    HeadDims d;
    int M = 0, bits = 0, bpt = 0;
    Codebooks keyBooks, valueBooks;          // as given (FP32), for encoding new tokens
    std::unique_ptr<ClusterBackend> encoder; // the quantizer's greedy encode of new tokens, made once
    // A decode step's few new rows are encoded by the assignment kernel directly, on codewords packed
    // once per (subspace, stage) (made at the first such append): the backend's labels, bit for bit
    // (see encodeFew), without its per-call packing, binding and threads.
    std::vector<nearest::NearestPanels> keyPanels, valuePanels;
    Codebooks kb16, vb16; // rounded to FP16, as floats (for references)
    std::vector<std::uint16_t> kbh, vbh;
    std::vector<PackedCodes> kc, vc;                  // per sequence, with room for `capacity` tokens
    std::vector<std::vector<std::uint16_t>> k16, v16; // per sequence: kvHeads × capacity × headDim
    std::int64_t tokens = 0;
    MatrixRF q, out;
    std::int64_t positionOffset = 0;
    bool haveQuery = false;
    std::vector<double> invFreq;
    std::vector<float> rope; // tokens × headDim: cos of each pair, then sin, at the token's position
    std::int64_t ropeOffset = -1, ropeTokens = -1;
    // Per work item (sequence, KV head, split): running reference, sum, and output or bins.
    std::vector<float> pm, pl, acc, tables, qs;
    std::vector<std::vector<std::uint8_t>> unpacked; // per work item, codes when they are not bytes

    std::int64_t headBooks() const { return std::int64_t(d.P) * d.R * d.K * d.D; }
    std::int64_t binsPerItem() const { return std::int64_t(d.P) * d.R * d.K * d.Gp; }

    int splitsFor(DecodePath path) const
    {
        const std::int64_t items = std::int64_t(cfg.batch) * cfg.shape.kvHeads;
        if (threads <= items || tokens <= 0)
            return 1;
        const std::int64_t want = (threads + items - 1) / items;
        const std::int64_t minTokens = path == DecodePath::Fp16 ? kMinFp16SplitTokens : kMinBinSplitTokens;
        return int(std::max<std::int64_t>(1, std::min(want, tokens / minTokens)));
    }

    CodeView view(const PackedCodes& p, int head, std::int64_t t0, std::int64_t t1, std::size_t item, bool values)
    {
        if (bits == 8)
            return {p.data.data() + (std::size_t(head) * d.P * p.capacity + std::size_t(t0)) * bpt, bpt,
                    std::int64_t(p.capacity) * bpt};
        // Codes narrower than a byte: unpacked once per step into the item's buffer, [token][subspace][stage].
        auto& buf = unpacked[item * 2 + (values ? 1 : 0)];
        const std::int64_t n = t1 - t0, per = std::int64_t(d.P) * d.R;
        buf.resize(std::size_t(n * per));
        for (std::int64_t t = 0; t < n; ++t)
            for (int sp = 0; sp < d.P; ++sp)
                for (int r = 0; r < d.R; ++r)
                    buf[std::size_t(t * per + sp * d.R + r)] = std::uint8_t(packedCode(p, head * d.P + sp, t0 + t, r));
        return {buf.data(), per, d.R};
    }

    void ensureRope()
    {
        if (ropeOffset == positionOffset && ropeTokens == tokens)
            return;
        const int hd = cfg.shape.headDim, half = hd / 2;
        // The same offset and more tokens (decode appends): only the new positions are computed.
        const std::int64_t from =
            ropeOffset == positionOffset && ropeTokens >= 0 && ropeTokens < tokens ? ropeTokens : 0;
        rope.resize(std::size_t(tokens) * hd);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (std::int64_t t = from; t < tokens; ++t)
            for (int i = 0; i < half; ++i) {
                const double a = double(positionOffset + t) * invFreq[std::size_t(i)];
                rope[std::size_t(t) * hd + i] = float(std::cos(a));
                rope[std::size_t(t) * hd + half + i] = float(std::sin(a));
            }
        ropeOffset = positionOffset;
        ropeTokens = tokens;
    }

    void step(DecodePath path);
};

CpuDecodeCache::CpuDecodeCache(const CpuDecodeConfig& config, const Codebooks& keyBooks, const Codebooks& valueBooks)
    : m(std::make_unique<Impl>())
{
    const DecodeShape& s = config.shape;
    if (const auto why = cpuDecodeShapeProblem(s, keyBooks.dim, keyBooks.stages, keyBooks.k); !why.empty())
        throwInvalid(why);
    checkDecodeBooks(s, keyBooks, valueBooks);
    const std::int64_t F = std::int64_t(s.kvHeads) * s.headDim;
    if (config.batch < 1 || config.capacity < 1)
        throwInvalid("batch ", config.batch, " and capacity ", config.capacity, " must be positive");
    if (config.threads < 0 || config.threads > kMaxDecodeThreads)
        throwInvalid("--threads ", config.threads, ": 0 (one per core) to ", kMaxDecodeThreads);
    m->cfg = config;
    m->threads = cpuDecodeThreads(config.threads);
    if (const auto why = cpuDecodeIsaProblem(config.isa); !why.empty())
        throwInvalid(why);
    m->kernels = cpudecode::kernelsNamed(config.isa);
    auto& d = m->d;
    d.G = s.heads / s.kvHeads;
    d.Gp = d.G <= 4 ? 4 : 8;
    d.hd = s.headDim;
    d.D = keyBooks.dim;
    d.P = s.headDim / keyBooks.dim;
    d.R = keyBooks.stages;
    d.K = keyBooks.k;
    m->M = keyBooks.subspaces;
    m->bits = PackedCodes::bitsFor(keyBooks.k);
    m->bpt = PackedCodes::bytesFor(keyBooks.stages, m->bits);

    const double need =
        double(config.batch) * double(config.capacity) * (2.0 * m->M * m->bpt + (config.fp16 ? 4.0 * double(F) : 0.0));
    if (const double avail = availableMemoryBytes(); avail > 0 && need > 0.8 * avail)
        throwInvalid("a decode cache of ", config.batch, " × ", config.capacity, " tokens needs ", need / 1e9, " GB; ",
                     avail / 1e9, " GB of memory is available");

    m->keyBooks = keyBooks;
    m->valueBooks = valueBooks;
    m->encoder = makeCpuBackend(m->threads);
    m->kb16 = codebooksRoundedToHalf(keyBooks);
    m->vb16 = codebooksRoundedToHalf(valueBooks);
    m->kbh = halves(keyBooks);
    m->vbh = halves(valueBooks);
    PackedCodes empty;
    empty.subspaces = m->M;
    empty.stages = d.R;
    empty.bits = m->bits;
    empty.bytesPerToken = m->bpt;
    empty.capacity = config.capacity;
    m->kc.resize(std::size_t(config.batch));
    m->vc.resize(std::size_t(config.batch));
    for (int b = 0; b < config.batch; ++b) {
        for (auto* p : {&m->kc[std::size_t(b)], &m->vc[std::size_t(b)]}) {
            *p = empty;
            p->data.assign(std::size_t(m->M) * std::size_t(config.capacity) * std::size_t(m->bpt), 0);
        }
        if (config.fp16) {
            m->k16.emplace_back(std::size_t(F) * std::size_t(config.capacity), 0);
            m->v16.emplace_back(std::size_t(F) * std::size_t(config.capacity), 0);
        }
    }
    m->invFreq = ropeInvFreq(config.ropeTheta, s.headDim);
    m->out = MatrixRF::Zero(config.batch, std::int64_t(s.heads) * s.headDim);
}

CpuDecodeCache::~CpuDecodeCache() = default;

std::int64_t CpuDecodeCache::tokens() const
{
    return m->tokens;
}

const CpuDecodeConfig& CpuDecodeCache::config() const
{
    return m->cfg;
}

int CpuDecodeCache::threads() const
{
    return m->threads;
}

const char* CpuDecodeCache::isa() const
{
    return m->kernels->isa;
}

const Codebooks& CpuDecodeCache::keyBooks16() const
{
    return m->kb16;
}

const Codebooks& CpuDecodeCache::valueBooks16() const
{
    return m->vb16;
}

namespace {

// Greedy encoding of a few rows through every stage, as encode(X, cb, 1, backend) gives it with the
// CPU backend: each stage's label is the assignment kernel's nearest codeword of the residual (the
// backend's exact bounds pick that kernel's label bit for bit, nearest_kernels.h and exact_bounds.h),
// and the residual drops that codeword, in float, as the backend subtracts it. Only for the vector
// kernels, which score a pair the same wherever it lies; the caller falls back to encode() elsewhere.
Codes encodeFew(const MatrixRF& X, const Codebooks& cb, std::vector<nearest::NearestPanels>& panels,
                const nearest::NearestKernels& kernel)
{
    const int M = cb.subspaces, R = cb.stages, D = cb.dim;
    if (panels.empty()) {
        panels.reserve(std::size_t(M) * std::size_t(R));
        for (int m = 0; m < M; ++m)
            for (int r = 0; r < R; ++r)
                panels.push_back(nearest::packCodewords(MatrixRF(cb.book(m, r)), kernel));
    }
    Codes codes(X.rows(), Eigen::Index(M) * R);
    MatrixRF res = X;
    for (Eigen::Index i = 0; i < X.rows(); ++i)
        for (int m = 0; m < M; ++m)
            for (int r = 0; r < R; ++r) {
                std::int32_t label = 0;
                float score = 0;
                kernel.nearest(res.data() + i * res.cols() + Eigen::Index(m) * D, 1, res.cols(),
                               panels[std::size_t(m) * std::size_t(R) + std::size_t(r)], &label, &score);
                codes(i, Eigen::Index(m) * R + r) = label;
                res.block(i, Eigen::Index(m) * D, 1, D) -= cb.book(m, r).row(label);
            }
    return codes;
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
    const Codes ck = !quantize ? zero
                     : few     ? encodeFew(keys, m->keyBooks, m->keyPanels, kernel)
                               : encode(keys, m->keyBooks, 1, *m->encoder);
    const Codes cv = !quantize ? zero
                     : few     ? encodeFew(values, m->valueBooks, m->valuePanels, kernel)
                               : encode(values, m->valueBooks, 1, *m->encoder);
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

namespace {

MatrixRF fp16Rows(const std::vector<std::uint16_t>& h, std::int64_t tokens, std::int64_t capacity, const DecodeShape& s)
{
    MatrixRF out(tokens, std::int64_t(s.kvHeads) * s.headDim);
    for (std::int64_t t = 0; t < tokens; ++t)
        for (int g = 0; g < s.kvHeads; ++g)
            for (int j = 0; j < s.headDim; ++j)
                out(t, Eigen::Index(g) * s.headDim + j) =
                    halfValue(h[(std::size_t(g) * capacity + std::size_t(t)) * s.headDim + j]);
    return out;
}

} // namespace

MatrixRF CpuDecodeCache::fp16Keys(int b) const
{
    if (!m->cfg.fp16)
        throwInvalid("this cache keeps no FP16 copy");
    if (b < 0 || b >= m->cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m->cfg.batch);
    return fp16Rows(m->k16[std::size_t(b)], m->tokens, m->cfg.capacity, m->cfg.shape);
}

MatrixRF CpuDecodeCache::fp16Values(int b) const
{
    if (!m->cfg.fp16)
        throwInvalid("this cache keeps no FP16 copy");
    if (b < 0 || b >= m->cfg.batch)
        throwInvalid("sequence ", b, " of a batch of ", m->cfg.batch);
    return fp16Rows(m->v16[std::size_t(b)], m->tokens, m->cfg.capacity, m->cfg.shape);
}

void CpuDecodeCache::setQuery(const MatrixRF& q, std::int64_t positionOffset)
{
    const auto& s = m->cfg.shape;
    if (q.rows() != m->cfg.batch || q.cols() != std::int64_t(s.heads) * s.headDim)
        throwInvalid("query ", q.rows(), "×", q.cols(), ": expected batch × heads·head_dim = ", m->cfg.batch, "×",
                     std::int64_t(s.heads) * s.headDim);
    if (positionOffset < 0)
        throwInvalid("position offset ", positionOffset, " must be ≥ 0");
    m->q = q;
    m->positionOffset = positionOffset;
    m->haveQuery = true;
}

int CpuDecodeCache::splits(DecodePath path) const
{
    return m->splitsFor(path);
}

void CpuDecodeCache::Impl::step(DecodePath path)
{
    const auto& s = cfg.shape;
    if (!haveQuery)
        throwInvalid("decode: no query set");
    if (tokens < 1)
        throwInvalid("decode: the cache holds no tokens");
    if (path == DecodePath::Fp16 && !cfg.fp16)
        throwInvalid("decode: this cache keeps no FP16 copy for the fp16 path");
    const int B = cfg.batch, H = s.kvHeads, G = d.G, hd = d.hd;
    const int S = splitsFor(path);
    const std::int64_t heads = std::int64_t(B) * H, items = heads * S;
    const std::int64_t per = (tokens + S - 1) / S;
    const float scale = float(1.0 / std::sqrt(double(hd)) / std::log(2.0)); // log2(e)/√head_dim
    const bool bins = path != DecodePath::Fp16;
    const int lanes = bins ? d.Gp : G;

    // Queries, scaled into log2 units (the paper path's rotated at the query's position first).
    qs.resize(std::size_t(B) * s.heads * hd);
    for (int b = 0; b < B; ++b) {
        if (path == DecodePath::Paper) {
            const Eigen::VectorXd r =
                ropeRow(q.row(b).transpose().cast<double>(), hd, positionOffset + tokens, invFreq);
            for (Eigen::Index j = 0; j < r.size(); ++j)
                qs[std::size_t(b) * s.heads * hd + std::size_t(j)] = float(r[j]) * scale;
        } else {
            for (Eigen::Index j = 0; j < q.cols(); ++j)
                qs[std::size_t(b) * s.heads * hd + std::size_t(j)] = q(b, j) * scale;
        }
    }
    if (path == DecodePath::Paper)
        ensureRope();
    pm.assign(std::size_t(items * lanes), -std::numeric_limits<float>::infinity());
    pl.assign(std::size_t(items * lanes), 0.f);
    const std::size_t accPer = bins ? std::size_t(binsPerItem()) : std::size_t(G) * hd;
    acc.assign(std::size_t(items) * accPer, 0.f);
    if (bits != 8)
        unpacked.resize(std::size_t(items) * 2);
    if (path == DecodePath::Lookup)
        tables.resize(std::size_t(heads) * std::size_t(binsPerItem()));
    const Kernels& k = *kernels;
    const std::size_t booksPerHead = std::size_t(headBooks());

    const auto buildTables = [&](std::int64_t i) {
        const int b = int(i / H), h = int(i % H);
        k.tables(d, qs.data() + (std::size_t(b) * s.heads + std::size_t(h) * G) * hd,
                 kbh.data() + std::size_t(h) * booksPerHead, tables.data() + std::size_t(i) * binsPerItem());
    };
    const auto partial = [&](std::int64_t i) {
        const std::int64_t head = i / S;
        const int b = int(head / H), h = int(head % H), sp = int(i % S);
        const std::int64_t t0 = sp * per, t1 = std::min(tokens, t0 + per);
        if (t1 <= t0)
            return;
        const float* qh = qs.data() + (std::size_t(b) * s.heads + std::size_t(h) * G) * hd;
        float* mi = pm.data() + std::size_t(i) * lanes;
        float* li = pl.data() + std::size_t(i) * lanes;
        float* ai = acc.data() + std::size_t(i) * accPer;
        if (path == DecodePath::Fp16) {
            const std::size_t base = (std::size_t(h) * cfg.capacity + std::size_t(t0)) * hd;
            k.fp16(d, k16[std::size_t(b)].data() + base, v16[std::size_t(b)].data() + base, t1 - t0, qh, mi, li, ai);
            return;
        }
        const CodeView vv = view(vc[std::size_t(b)], h, t0, t1, std::size_t(i), true);
        const CodeView kv = view(kc[std::size_t(b)], h, t0, t1, std::size_t(i), false);
        if (path == DecodePath::Lookup)
            k.lookup(d, tables.data() + std::size_t(head) * binsPerItem(), kv, vv, t1 - t0, mi, li, ai);
        else
            k.paper(d, qh, kbh.data() + std::size_t(h) * booksPerHead, rope.data() + std::size_t(t0) * hd, kv, vv,
                    t1 - t0, mi, li, ai);
    };
    // Combine: each split's sums and outputs (or bins) scaled to the largest reference; the binned
    // paths then take their one product with the value codebooks.
    const auto combine = [&](std::int64_t i) {
        const int b = int(i / H), h = int(i % H);
        const std::size_t first = std::size_t(i) * S;
        float mx[8], total[8], f[8];
        for (int g = 0; g < lanes; ++g) {
            mx[g] = -std::numeric_limits<float>::infinity();
            for (int sp = 0; sp < S; ++sp)
                mx[g] = std::max(mx[g], pm[(first + sp) * lanes + g]);
            total[g] = 0;
        }
        float* a0 = acc.data() + first * accPer;
        if (S == 1) {
            for (int g = 0; g < lanes; ++g)
                total[g] = pl[first * lanes + g];
        } else {
            for (int sp = 0; sp < S; ++sp) {
                const std::size_t it = first + sp;
                for (int g = 0; g < lanes; ++g) {
                    const float mv = pm[it * lanes + g];
                    f[g] = mv == -std::numeric_limits<float>::infinity() ? 0.f : std::exp2(mv - mx[g]);
                    total[g] += f[g] * pl[it * lanes + g];
                }
                const float* a = acc.data() + it * accPer;
                // Bins hold a group's lanes innermost; FP16 outputs are head by head.
                const std::size_t inner = bins ? std::size_t(lanes) : 1, run = bins ? 1 : std::size_t(hd);
                for (std::size_t e = 0; e < accPer; ++e) {
                    const float v = a[e] * f[bins ? e % inner : e / run];
                    a0[e] = sp == 0 ? v : a0[e] + v;
                }
            }
        }
        float* o = out.data() + (std::size_t(b) * s.heads + std::size_t(h) * G) * hd;
        if (bins)
            k.values(d, a0, vbh.data() + std::size_t(h) * booksPerHead, o);
        else
            std::copy(a0, a0 + std::size_t(G) * hd, o);
        for (int g = 0; g < G; ++g)
            for (int j = 0; j < hd; ++j)
                o[std::size_t(g) * hd + j] /= total[g];
    };

    if (S == 1) {
        // One task per (sequence, KV head): its table, its tokens, its combine. Threads drift apart
        // over the tasks, so one streams a head's codebooks from memory while another runs its
        // tokens' lookups, instead of all waiting on memory at once between barriers.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (std::int64_t i = 0; i < heads; ++i) {
            if (path == DecodePath::Lookup)
                buildTables(i);
            partial(i);
            combine(i);
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        if (path == DecodePath::Lookup) {
#pragma omp for schedule(static)
            for (std::int64_t i = 0; i < heads; ++i)
                buildTables(i);
        }
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t i = 0; i < items; ++i)
            partial(i);
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < heads; ++i)
            combine(i);
    }
}

void CpuDecodeCache::run(DecodePath path)
{
    m->step(path);
}

const MatrixRF& CpuDecodeCache::output() const
{
    return m->out;
}

MatrixRF CpuDecodeCache::decode(DecodePath path, const MatrixRF& q, std::int64_t positionOffset)
{
    setQuery(q, positionOffset);
    // Poisoned first, so an output element the paths never wrote cannot pass.
    m->out.setConstant(std::numeric_limits<float>::quiet_NaN());
    run(path);
    return m->out;
}

std::uint64_t CpuDecodeCache::readFp16Rows()
{
    if (!m->cfg.fp16)
        throwInvalid("this cache keeps no FP16 copy");
    const int H = m->cfg.shape.kvHeads;
    const std::int64_t items = std::int64_t(m->cfg.batch) * H;
    const std::size_t rowWords = std::size_t(m->cfg.shape.headDim) / 4; // 64-bit words per FP16 row
    std::uint64_t fold = 0;
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1) reduction(^ : fold)
    for (std::int64_t i = 0; i < items; ++i) {
        const int b = int(i / H), h = int(i % H);
        const std::size_t base = std::size_t(h) * std::size_t(m->cfg.capacity) * rowWords * 4;
        std::uint64_t x = 0;
        for (const auto* rows : {&m->k16[std::size_t(b)], &m->v16[std::size_t(b)]}) {
            const std::uint16_t* p = rows->data() + base;
            const std::size_t words = std::size_t(m->tokens) * rowWords;
            for (std::size_t w = 0; w < words; ++w) {
                std::uint64_t v;
                std::memcpy(&v, p + 4 * w, sizeof v);
                x ^= v;
            }
        }
        fold ^= x;
    }
    return fold;
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
