#include "core/jobs/train_job.h"

#include "core/base/error.h"
#include "core/base/sha256.h"
#include "core/cluster/weights.h"
#include "core/lm/attention.h"
#include "core/lm/rope.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fnmatch.h>
#include <map>
#include <set>

namespace gsrq {

namespace {

double elapsed(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int headDimOf(const KvDump& d, const KvTensor& t)
{
    if (t.view.shape.size() == 3)
        return int(t.view.shape[2]);
    if (auto it = d.metadata().find("head_dim"); it != d.metadata().end())
        return std::stoi(it->second);
    throwInvalid(t.view.where(), ": is [tokens, features] and the dump's metadata has no head_dim");
}

// Keys before RoPE rotated to after it, with the dump's positions and frequencies.
MatrixRF ropeKeys(const KvDump& d, const KvTensor& t, const MatrixRF& x)
{
    const auto* pos = d.find("positions");
    if (!pos)
        throwInvalid(d.path(), ": --key-rope post needs a 'positions' tensor");
    const int hd = headDimOf(d, t);
    std::vector<double> invFreq;
    // Layers of different types may rotate with different frequencies (Gemma 3's local and global
    // layers): the dump then holds rope.inv_freq.TYPE beside rope.inv_freq, and layer_types says
    // which type each layer is.
    const KvTensor* perType = nullptr;
    if (auto it = d.metadata().find("layer_types"); it != d.metadata().end() && t.layer >= 0) {
        std::vector<std::string> types;
        std::string cur;
        for (char c : it->second + ",") {
            if (c == ',') {
                types.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
        if (std::size_t(t.layer) < types.size())
            perType = d.find("rope.inv_freq." + types[std::size_t(t.layer)]);
    }
    if (perType) {
        const MatrixRF m = toMatrix(perType->view);
        invFreq.assign(m.data(), m.data() + m.size());
    } else if (const auto* f = d.find("rope.inv_freq")) {
        const MatrixRF m = toMatrix(f->view);
        invFreq.assign(m.data(), m.data() + m.size());
    } else if (auto it = d.metadata().find("rope_theta"); it != d.metadata().end()) {
        invFreq = ropeInvFreq(std::stod(it->second), hd);
    } else {
        throwInvalid(d.path(), ": --key-rope post needs 'rope.inv_freq' or rope_theta metadata");
    }
    RopePairing pairing = RopePairing::RotateHalf;
    if (auto it = d.metadata().find("rope_pairing"); it != d.metadata().end()) {
        const auto p = ropePairingFromName(it->second);
        if (!p)
            throwInvalid(d.path(), ": rope_pairing '", it->second, "' is neither interleaved nor half");
        pairing = *p;
    }
    return applyRope(x, hd, toInt64(pos->view), invFreq, pairing);
}

bool keysStoredPost(const KvDump& d)
{
    const auto it = d.metadata().find("key_rope");
    return it != d.metadata().end() && it->second == "post";
}

// The rows a tensor trains on, the way training saw them (RoPE applied if asked).
MatrixRF preparedRows(const KvDump& d, const KvTensor& t, KeyRope rope, bool dropNonFinite, LoadedTensor* loaded,
                      bool* ropeApplied)
{
    LoadedTensor l = loadForClustering(t, dropNonFinite);
    const bool apply = rope == KeyRope::Post && t.kind == KvKind::Key && !keysStoredPost(d);
    if (apply && !l.droppedRows.empty())
        throwInvalid(t.view.where(), ": cannot apply RoPE after dropping non-finite rows (positions would shift)");
    MatrixRF x = apply ? ropeKeys(d, t, l.rows) : std::move(l.rows);
    if (ropeApplied)
        *ropeApplied = apply;
    if (loaded) {
        *loaded = std::move(l);
        loaded->rows.resize(0, 0);
    }
    return x;
}

QuantMetrics metricsOf(const MatrixRF& x, const Codebooks& cb, int beam, ClusterBackend& be, double* seconds)
{
    const auto t0 = std::chrono::steady_clock::now();
    const Codes c = encode(x, cb, beam, be);
    const auto m = computeMetrics(x, decode(c, cb));
    *seconds = elapsed(t0);
    return m;
}

// Attention fidelity per layer with queries, positions and sequence ids, the reconstructions of a
// layer's keys and values in `recon` (keys after RoPE where `keysReconPost`, as the dump otherwise).
std::vector<LayerAttention> layerAttentions(const KvDump& dump, std::map<int, std::map<KvKind, MatrixRF>>& recon,
                                            bool keysReconPost, int queries, std::uint64_t seed,
                                            std::vector<std::string>& notes)
{
    std::vector<LayerAttention> out;
    for (auto& [layer, parts] : recon) {
        const auto* q = dump.find(cat("layers.", layer, ".query"));
        const auto* k = dump.find(cat("layers.", layer, ".key"));
        const auto* v = dump.find(cat("layers.", layer, ".value"));
        const auto* pos = dump.find("positions");
        const auto* seq = dump.find("sequence_ids");
        if (!q || !k || !v || !pos || !seq) {
            notes.push_back(cat("attention fidelity of layer ", layer,
                                " skipped: the dump needs query, key, value, positions and sequence_ids"));
            continue;
        }
        const int hd = headDimOf(dump, *k);
        AttentionInputs in;
        MatrixRF qx = toMatrix(q->view), kx = toMatrix(k->view), vx = toMatrix(v->view);
        in.positions = toInt64(pos->view);
        in.sequenceIds = toInt64(seq->view);
        in.headDim = hd;
        in.heads = int(qx.cols() / hd);
        in.kvHeads = int(kx.cols() / hd);
        const bool keysPre = !keysStoredPost(dump);
        MatrixRF kHat = parts.count(KvKind::Key) ? parts[KvKind::Key] : kx;
        const MatrixRF vHat = parts.count(KvKind::Value) ? parts[KvKind::Value] : vx;
        if (keysPre) {
            // Attention sees rotated queries and keys; keys reconstructed after RoPE are already rotated.
            const bool keyReconPost = keysReconPost && parts.count(KvKind::Key);
            MatrixRF qr = ropeKeys(dump, *q, qx), kr = ropeKeys(dump, *k, kx);
            if (!keyReconPost)
                kHat = ropeKeys(dump, *k, kHat);
            qx = std::move(qr);
            kx = std::move(kr);
        }
        in.q = &qx;
        in.k = &kx;
        in.v = &vx;
        in.kHat = &kHat;
        in.vHat = &vHat;
        LayerAttention la;
        la.layer = layer;
        la.keys = parts.count(KvKind::Key) ? "quantized" : "exact";
        la.values = parts.count(KvKind::Value) ? "quantized" : "exact";
        la.fidelity = attentionFidelity(in, queries, seed);
        out.push_back(la);
    }
    return out;
}

} // namespace

std::vector<const KvTensor*> selectTensors(const KvDump& dump, const std::vector<std::string>& patterns,
                                           const std::string& layers)
{
    const std::set<int> wanted = layers.empty() ? std::set<int>{} : parseLayerList(layers);
    std::vector<const KvTensor*> out;
    for (const auto& t : dump.tensors()) {
        bool match = false;
        if (patterns.empty())
            match = t.kind == KvKind::Key || t.kind == KvKind::Value || (dump.format() == "npy");
        for (const auto& p : patterns)
            match = match || fnmatch(p.c_str(), t.view.name.c_str(), 0) == 0;
        if (!match)
            continue;
        if (!wanted.empty() && (t.layer < 0 || !wanted.count(t.layer)))
            continue;
        out.push_back(&t);
    }
    if (out.empty()) {
        std::string pats;
        for (const auto& p : patterns)
            pats += (pats.empty() ? "" : ",") + p;
        throwInvalid(dump.path(), ": no tensor matches --tensors '", pats.empty() ? "(keys and values)" : pats, "'",
                     layers.empty() ? "" : cat(" with --layers ", layers));
    }
    return out;
}

HoldoutSplit splitHoldout(Eigen::Index rows, double fraction, bool tail, std::uint64_t seed)
{
    const Eigen::Index trainRows = fraction > 0 ? Eigen::Index(double(rows) * (1 - fraction)) : rows;
    HoldoutSplit out;
    std::vector<char> held(std::size_t(rows), 0);
    if (tail) {
        std::fill(held.begin() + trainRows, held.end(), 1);
    } else if (trainRows < rows) {
        for (auto i : sampleRows(rows, int(rows - trainRows), seed ^ 0x9e3779b97f4a7c15ull))
            held[std::size_t(i)] = 1;
    }
    for (Eigen::Index i = 0; i < rows; ++i)
        (held[std::size_t(i)] ? out.heldout : out.train).push_back(i);
    return out;
}

TensorTrainResult trainTensorRows(const RowsRef& x, const float* weights, const TrainSettings& s,
                                  ClusterBackend& backend, const ProgressFn& progress, const MatrixRF* evalRows,
                                  HoldoutSplit* splitOut, Codes* heldoutCodes)
{
    if (s.holdout < 0 || s.holdout >= 1)
        throwInvalid("--holdout ", s.holdout, ": must be a fraction in [0, 1)");
    TensorTrainResult r;
    r.features = x.cols();
    const HoldoutSplit split = splitHoldout(x.rows(), s.holdout, s.holdoutTail, s.rq.seed);
    // Nothing held out: the rows are trained on where they are (a caller's array is not copied).
    std::optional<MatrixRF> xTrainCopy;
    Eigen::VectorXf wTrainCopy;
    const float* wp = weights;
    if (!split.heldout.empty()) {
        xTrainCopy = x(split.train, Eigen::all);
        if (weights) {
            wTrainCopy = Eigen::Map<const Eigen::VectorXf>(weights, x.rows())(split.train);
            wp = wTrainCopy.data();
        }
    }
    const RowsRef xTrain = xTrainCopy ? RowsRef(*xTrainCopy) : x;

    // Held-out rows (a share of these, or the caller's evalRows), encoded as at the end: each
    // refinement round's held-out metrics, so over-fitting shows.
    std::optional<MatrixRF> heldRows;
    if (!split.heldout.empty())
        heldRows = x(split.heldout, Eigen::all);
    const MatrixRF* held = heldRows ? &*heldRows : evalRows;
    const HeldoutFn roundHeldout = s.rq.refine > 0 && held ? HeldoutFn([&](const Codebooks& cb) {
        return computeMetrics(*held, decode(encode(*held, cb, s.rq.beam, backend), cb));
    })
                                                           : HeldoutFn();
    r.train = trainResidualQuantizer(xTrain, wp, s.rq, backend, progress, roundHeldout);
    if (r.train.cancelled)
        return r;
    r.rows = xTrain.rows();
    r.bpa = bitsPerActivation(r.train.codebooks.dim, s.rq.stages, s.rq.k);
    r.codebookBytes = std::uint64_t(r.train.codebooks.data.size() * (s.exportDType == DType::F16 ? 16 : 32) / 8);
    r.effectiveBpa = r.bpa + double(r.codebookBytes) * 8 / (double(x.rows()) * double(r.features));
    if (held) {
        r.heldoutRows = held->rows();
        const auto t0 = std::chrono::steady_clock::now();
        Codes codes = encode(*held, r.train.codebooks, s.rq.beam, backend);
        r.heldout = computeMetrics(*held, decode(codes, r.train.codebooks));
        r.heldoutSeconds = elapsed(t0);
        if (heldoutCodes && heldRows)
            *heldoutCodes = std::move(codes);
    }
    if (splitOut)
        *splitOut = split;
    return r;
}

TrainJobResult runTrain(const KvDump& dump, const TrainSettings& s, ClusterBackend& backend, const ProgressFn& progress)
{
    if (s.holdout < 0 || s.holdout >= 1)
        throwInvalid("--holdout ", s.holdout, ": must be a fraction in [0, 1)");
    if (s.holdout > 0 && !s.evalPath.empty())
        throwInvalid("--holdout and --eval: choose one source of held-out rows");
    const auto selected = selectTensors(dump, s.tensorPatterns, s.layers);
    std::optional<KvDump> evalDump;
    if (!s.evalPath.empty())
        evalDump = KvDump::open(s.evalPath);

    // Check every tensor's settings before any work starts.
    for (const auto* t : selected) {
        const auto rows = std::int64_t(double(t->view.rows()) * (1 - s.holdout));
        validateRq(s.rq, rows, t->view.features());
        if (s.weights != WeightMode::None && !dump.gradientOf(*t))
            throwInvalid("--weights ", weightModeName(s.weights), ": ", dump.path(), " has no gradient for '",
                         t->view.name, "' (expected layers.L.key_grad or layers.L.value_grad)");
        if (evalDump) {
            const KvTensor& e =
                evalDump->format() == "npy" && dump.format() == "npy" ? evalDump->only() : evalDump->get(t->view.name);
            if (e.view.features() != t->view.features())
                throwInvalid(e.view.where(), ": has ", e.view.features(), " features, the training tensor ",
                             t->view.features());
        }
    }

    TrainJobResult out;
    const int D = s.rq.dim;
    out.file.metadata = {
        {"dim", std::to_string(D)},
        {"stages", std::to_string(s.rq.stages)},
        {"k", std::to_string(s.rq.k)},
        {"method", s.methodLabel.empty() ? std::string(methodName(s.rq.method)) : s.methodLabel},
        {"weights", weightModeName(s.weights)},
        {"tau", cat(s.tau)},
        {"beam", std::to_string(s.rq.beam)},
        {"iterations", std::to_string(s.rq.iterations)},
        {"seed", std::to_string(s.rq.seed)},
        {"bpa", cat(bitsPerActivation(D, s.rq.stages, s.rq.k))},
        {"key_rope", s.keyRope == KeyRope::Post || keysStoredPost(dump) ? "post" : "pre"},
        {"rope_pairing", dump.metadata().count("rope_pairing") ? dump.metadata().at("rope_pairing") : "half"},
        {"source", dump.path()},
        {"settings", nlohmann::ordered_json{{"dim", D},
                                            {"stages", s.rq.stages},
                                            {"k", s.rq.k},
                                            {"method", methodName(s.rq.method)},
                                            {"iterations", s.rq.iterations},
                                            {"seed", s.rq.seed},
                                            {"beam", s.rq.beam},
                                            {"beam_train", s.rq.trainOnAllBeams ? "all" : "best"},
                                            {"reseed_empty", s.rq.reseedEmpty},
                                            {"strided_groups", s.rq.stridedGroups},
                                            {"ema_decay", s.rq.emaDecay},
                                            {"weights", weightModeName(s.weights)},
                                            {"tau", s.tau},
                                            {"tensors", s.tensorPatterns},
                                            {"layers", s.layers},
                                            {"holdout", s.holdout},
                                            {"eval", s.evalPath},
                                            {"key_rope", s.keyRope == KeyRope::Post ? "post" : "as-dumped"},
                                            {"drop_nonfinite", s.dropNonFinite},
                                            {"refine", s.rq.refine},
                                            {"refine_beam", s.rq.refineBeam}}
                         .dump()},
        {"source_sha256", s.sourceSha256.empty() ? sha256Files(dump.files()) : s.sourceSha256}};

    std::map<int, std::map<KvKind, MatrixRF>> recon; // per layer: full reconstructions for attention
    const double perTensor = 1.0 / double(selected.size());
    for (std::size_t ti = 0; ti < selected.size() && !out.cancelled; ++ti) {
        const KvTensor& t = *selected[ti];
        LoadedTensor loaded;
        bool ropeApplied = false;
        MatrixRF x = preparedRows(dump, t, s.keyRope, s.dropNonFinite, &loaded, &ropeApplied);
        std::optional<MatrixRF> evalRows;
        if (evalDump && s.holdout == 0) {
            const KvTensor& e =
                evalDump->format() == "npy" && dump.format() == "npy" ? evalDump->only() : evalDump->get(t.view.name);
            evalRows = preparedRows(*evalDump, e, s.keyRope, s.dropNonFinite, nullptr, nullptr);
        }
        WeightSummary summary;
        const Eigen::VectorXf w = weightsFor(dump, t, loaded, s.weights, s.tau, &summary);
        HoldoutSplit split;
        Codes heldCodes;
        TensorTrainResult r = trainTensorRows(
            x, w.size() ? w.data() : nullptr, s, backend,
            [&](const ProgressEvent& e) {
                if (!progress)
                    return true;
                ProgressEvent ev = e;
                ev.what = cat(t.view.name, " ", e.what);
                ev.fraction = (double(ti) + e.fraction) * perTensor;
                ev.tensor = t.view.name;
                return progress(ev);
            },
            evalRows ? &*evalRows : nullptr, &split, &heldCodes);
        if (r.train.cancelled) {
            out.cancelled = true;
            break;
        }
        r.tensor = t.view.name;
        r.weightSummary = summary;
        r.droppedRows = std::int64_t(loaded.droppedRows.size());
        r.ropeApplied = ropeApplied;
        r.effectiveBpa = r.bpa + double(r.codebookBytes) * 8 / (double(t.view.rows()) * double(r.features));

        if (s.attentionQueries > 0 && t.layer >= 0 && r.droppedRows == 0 &&
            (t.kind == KvKind::Key || t.kind == KvKind::Value)) {
            MatrixRF full(x.rows(), x.cols());
            full(split.train, Eigen::all) = decode(r.train.codes, r.train.codebooks);
            if (heldCodes.rows())
                full(split.heldout, Eigen::all) = decode(heldCodes, r.train.codebooks);
            recon[t.layer][t.kind] = std::move(full);
        }
        CodebookEntry entry{t.view.name, r.train.codebooks, {}};
        if (s.keepCodes)
            entry.codes = r.train.codes;
        out.file.entries.push_back(std::move(entry));
        out.tensors.push_back(std::move(r));
    }

    out.attention = layerAttentions(dump, recon, s.keyRope == KeyRope::Post, s.attentionQueries, s.rq.seed, out.notes);
    return out;
}

std::vector<EvalResult> runEval(const KvDump& dump, const CodebookFile& file, int beam, ClusterBackend& backend,
                                bool dropNonFinite)
{
    const auto keyRope = file.metadata.count("key_rope") ? file.metadata.at("key_rope") : std::string("pre");
    if (keyRope == "pre" && keysStoredPost(dump))
        throwInvalid(dump.path(), ": keys are stored after RoPE but the codebooks were trained before it");
    std::vector<EvalResult> out;
    for (const auto& e : file.entries) {
        const KvTensor& t = dump.format() == "npy" && file.entries.size() == 1 ? dump.only() : dump.get(e.tensor);
        if (t.view.features() != e.codebooks.features())
            throwInvalid(t.view.where(), ": has ", t.view.features(), " features but its codebooks cover ",
                         e.codebooks.features(), " (M=", e.codebooks.subspaces, " × D=", e.codebooks.dim, ")");
        const MatrixRF x = preparedRows(dump, t, keyRope == "post" ? KeyRope::Post : KeyRope::AsDumped, dropNonFinite,
                                        nullptr, nullptr);
        EvalResult r;
        r.tensor = e.tensor;
        r.rows = x.rows();
        r.metrics = metricsOf(x, e.codebooks, beam, backend, &r.seconds);
        out.push_back(r);
    }
    return out;
}

} // namespace gsrq

namespace gsrq {

bool keysCanBeRotated(const KvDump& dump)
{
    return dump.find("positions") && (dump.find("rope.inv_freq") || dump.metadata().count("rope_theta"));
}

void checkKiviEval(const KvDump& dump, const KiviEvalSettings& s)
{
    for (const auto* t : selectTensors(dump, s.tensorPatterns, s.layers))
        validateKivi(s.kivi, t->view.features(), t->kind == KvKind::Key ? KiviAxis::Key : KiviAxis::Value);
}

KiviEvalResult runKiviEval(const KvDump& dump, const KiviEvalSettings& s, const ProgressFn& progress)
{
    checkKiviEval(dump, s);
    const auto selected = selectTensors(dump, s.tensorPatterns, s.layers);
    std::vector<std::int64_t> seqIds;
    if (const auto* seq = dump.find("sequence_ids"))
        seqIds = toInt64(seq->view);
    KiviEvalResult out;
    std::map<int, std::map<KvKind, MatrixRF>> recon;
    for (std::size_t ti = 0; ti < selected.size(); ++ti) {
        const KvTensor& t = *selected[ti];
        if (progress) {
            ProgressEvent ev;
            ev.fraction = double(ti) / double(selected.size());
            ev.what = cat(t.view.name, " KIVI");
            ev.tensor = t.view.name;
            if (!progress(ev)) {
                out.cancelled = true;
                break;
            }
        }
        KiviTensorResult r;
        r.tensor = t.view.name;
        const auto t0 = std::chrono::steady_clock::now();
        const MatrixRF x = preparedRows(dump, t, s.keyRope, false, nullptr, &r.ropeApplied);
        if (!seqIds.empty() && std::int64_t(seqIds.size()) != x.rows())
            throwInvalid(dump.path(), ": sequence_ids has ", seqIds.size(), " entries but ", t.view.where(), " has ",
                         x.rows(), " rows");
        // Keys are quantized per channel, everything else (values, a .npy of one tensor) per token.
        const auto axis = t.kind == KvKind::Key ? KiviAxis::Key : KiviAxis::Value;
        auto q = kiviQuantize(x, axis, s.kivi, seqIds);
        r.rows = x.rows();
        r.features = x.cols();
        r.bits = q.bits;
        r.metrics = computeMetrics(x, q.reconstruction);
        r.seconds = elapsed(t0);
        if (s.attentionQueries > 0 && t.layer >= 0 && (t.kind == KvKind::Key || t.kind == KvKind::Value))
            recon[t.layer][t.kind] = std::move(q.reconstruction);
        out.tensors.push_back(std::move(r));
    }
    if (!out.cancelled && s.attentionQueries > 0)
        out.attention = layerAttentions(dump, recon, s.keyRope == KeyRope::Post, s.attentionQueries, s.seed, out.notes);
    return out;
}

} // namespace gsrq
