// One decode step of the CPU cache: the path's token splits run on the threads, then the split
// partials combined (cpu_decode.h); the inner loops are cpu_kernels.cpp's.

#include "core/decode/cpu_decode_impl.h"
#include "core/decode/cpu_panel_kernels.h"

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
#include <string_view>

namespace gsrq {

using cpudecode::CodeView;
using cpudecode::HeadDims;
using cpudecode::Kernels;
using namespace cpudecodeimpl;

bool CpuDecodeCache::Impl::tablesFromKeyPanels()
{
    if (std::string_view(kernels->isa) != "avx512" || !cpudecode::panelKernelsRun(d) || !keyBooks.order.empty() ||
        keyBooks.k < kMinScreenedCodewords)
        return false;
    packFewPanels(keyBooks, keyFew, nearest::bestNearest());
    if (keyFew.screened.empty())
        return false;
    if (keyPanels.empty())
        for (const auto& panel : keyFew.screened)
            keyPanels.push_back(panel.first());
    return true;
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

    const bool panels = path == DecodePath::Lookup && tablesFromKeyPanels();
    const auto buildTables = [&](std::int64_t i) {
        const int b = int(i / H), h = int(i % H);
        const float* qh = qs.data() + (std::size_t(b) * s.heads + std::size_t(h) * G) * hd;
        float* T = tables.data() + std::size_t(i) * binsPerItem();
        if (panels)
            cpudecode::tablesFromPanels(d, qh, keyPanels.data() + std::size_t(h) * d.P * d.R, T);
        else
            k.tables(d, qh, kbh.data() + std::size_t(h) * booksPerHead, T);
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
        const CodeView vv = view(vc[std::size_t(b)], h, t0, t1, std::size_t(i), true, path);
        const CodeView kv = view(kc[std::size_t(b)], h, t0, t1, std::size_t(i), false, path);
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

} // namespace gsrq
