// The CPU decode cache: the machine's facts, storage, threads, token splits; what it decodes and
// times. Appending is cpu_decode_append.cpp's, a step's splits and their combine cpu_decode_step.cpp's,
// the inner loops cpu_kernels.cpp's; its state is cpu_decode_impl.h.

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
using namespace cpudecodeimpl;

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

} // namespace gsrq
