// The GPU side. Everywhere: device discovery explains an empty list, the backend factory picks
// the CPU (and says why) when there is no GPU, and asking for CUDA without a device is a clear
// input error from the CLI (exit 2). With a device: the CUDA backend against the CPU backend on
// seeded data, and proof that the GPU path really ran.

#include "core/base/error.h"
#include "core/cluster/clustering.h"
#include "core/cluster/quantizer.h"
#include "core/io/synth.h"
#include "gpu/cluster/backend.h"
#include "gpu/cluster/cuda_backend.h"
#include "gpu/cluster/gpu_check.h"
#include "gpu/cluster/pass_costs.h"
#include "gpu/device/device.h"
#include "gpu_test_util.h"
#include "test_util.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <numeric>

#if defined(GSRQ_TEST_EMULATOR)
#include "gpu/emulator/byte_counts.h"
#endif

using namespace gsrq;

// Seeded synthetic rows of M subspaces of width D, each around 16 KV-like centres with Gaussian noise
// of its own scale (0.2 to 0.5 of the centres' norm), so a stage's members converge after different
// numbers of iterations; and weights (0.5 to 2).
static MatrixRF memberRows(int n, int D, int M, std::vector<float>& w)
{
    MatrixRF X(n, M * D);
    for (int m = 0; m < M; ++m) {
        const MatrixRF centres = synthesize(SynthKind::KvLike, 16, D, 31 + std::uint64_t(m));
        const MatrixRF noise = synthesize(SynthKind::Gaussian, n, D, 41 + std::uint64_t(m));
        const float scale = (0.2f + 0.1f * float(m)) * centres.rowwise().norm().mean() / noise.rowwise().norm().mean();
        for (int i = 0; i < n; ++i)
            X.block(i, m * D, 1, D) = centres.row((i * (m + 3)) % 16) + scale * noise.row(i);
    }
    w.resize(std::size_t(n));
    for (int i = 0; i < n; ++i)
        w[std::size_t(i)] = 0.5f + float((i * 29) % 13) / 8.0f;
    return X;
}

#if defined(GSRQ_TEST_EMULATOR)
// The launches the emulator counted for a held pass and its update, each against pass_costs.h's term
// for it (distinct bytes of device memory, every shared-memory load and store): exact. Returns the
// launches compared; a mismatch fails the calling test (QtTest's checks in a helper: count 0 then).
static int compareToModel(const std::vector<emulator::LaunchBytes>& launches, const gpu::ClusterPassCase& pc,
                          const char* label)
{
    std::vector<gpu::KernelCost> model;
    for (const auto& k : gpu::clusterPassCosts(pc))
        if (!k.library) // the emulator's cuBLAS is host code, not a launch
            model.push_back(k);
    model.push_back(gpu::centroidUpdateCost(pc));
    if (launches.size() != model.size()) {
        QTest::qFail(
            qPrintable(QString("%1: %2 launches, the model %3").arg(label).arg(launches.size()).arg(model.size())),
            __FILE__, __LINE__);
        return 0;
    }
    int compared = 0;
    for (std::size_t i = 0; i < launches.size(); ++i) {
        const auto& l = launches[i];
        const auto& m = model[i];
        const QString what = QString("%1: %2").arg(label).arg(m.kernel.c_str());
        const double hbm = double(l.globalReadDistinct + l.globalWriteDistinct);
        const double shared = double(l.sharedRead + l.sharedWrite);
        if (hbm != m.hbmBytes || shared != m.sharedBytes) {
            QTest::qFail(qPrintable(QString("%1: %2 distinct and %3 shared bytes, the model %4 and %5")
                                        .arg(what)
                                        .arg(hbm)
                                        .arg(shared)
                                        .arg(m.hbmBytes)
                                        .arg(m.sharedBytes)),
                         __FILE__, __LINE__);
            return 0;
        }
        ++compared;
    }
    return compared;
}
#endif

class TestGpu : public QObject {
    Q_OBJECT

private slots:
    void queryNeverFailsSilently()
    {
        const auto q = gpu::queryDevices();
        if (q.devices.empty())
            QVERIFY2(!q.message.empty(), "an empty device list must say why");
#ifdef GSRQ_HAVE_CUDA
        QVERIFY(q.builtWithCuda);
#else
        QVERIFY(!q.builtWithCuda);
#endif
    }

    void fp32LanesFollowTheTable()
    {
        // H100 (9.0): 132 SMs × 128 lanes × 2 × 1.98 GHz ≈ 67 TFLOP/s, the datasheet's FP32 figure.
        QCOMPARE(gpu::fp32LanesPerSm(9, 0), 128);
        QCOMPARE(gpu::fp32LanesPerSm(8, 0), 64); // A100: 19.5 TFLOP/s from 108 SMs at 1.41 GHz
        QCOMPARE(gpu::fp32LanesPerSm(8, 6), 128);
        QCOMPARE(gpu::fp32LanesPerSm(7, 0), 64);
    }

    void backendKindsParse()
    {
        QVERIFY(gpu::parseBackendKind("auto") == gpu::BackendKind::Auto);
        QVERIFY(gpu::parseBackendKind("cpu") == gpu::BackendKind::Cpu);
        QVERIFY(gpu::parseBackendKind("cuda") == gpu::BackendKind::Cuda);
        try {
            gpu::parseBackendKind("gpu");
            QFAIL("'gpu' accepted");
        } catch (const Error& e) {
            QVERIFY(e.kind() == ErrorKind::InvalidInput);
            QVERIFY(QString(e.what()).contains("--backend"));
        }
    }

    void autoFallsBackToTheCpuAndSaysWhy()
    {
        QString why;
        if (test::haveCudaDevice(&why))
            QSKIP("a CUDA device is present: auto picks it (checked in cudaMatchesCpu)");
        const auto c = gpu::makeBackend({gpu::BackendKind::Auto, 0, 1, false});
        QCOMPARE(QString::fromStdString(c.backend->name()), QString("cpu"));
        QVERIFY2(QString::fromStdString(c.note).contains("no GPU"), c.note.c_str());
        const auto cpu = gpu::makeBackend({gpu::BackendKind::Cpu, 0, 1, false});
        QVERIFY(cpu.note.empty());
        QVERIFY(gpu::cudaStats(*cpu.backend) == nullptr);
    }

    void cudaWithoutDeviceIsAnInputError()
    {
        QString why;
        if (test::haveCudaDevice(&why))
            QSKIP(test::deviceIsPresent());
        try {
            gpu::makeBackend({gpu::BackendKind::Cuda, 0, 1, false});
            QFAIL("a CUDA backend was made without a device");
        } catch (const Error& e) {
            QVERIFY(e.kind() == ErrorKind::InvalidInput);
            QVERIFY2(QString(e.what()).contains("--backend cuda"), e.what());
        }
        // The CLI: exit 2 with the flag named, for training, for the check and for the benchmark.
        const QString sample = test::sourcePath("resources/samples/stories260K-gpl3.safetensors");
        for (const QStringList& args :
             {QStringList{"--no-db", "compare", sample, "--tensor", "layers.0.key", "--backend", "cuda"},
              QStringList{"check-gpu"}, QStringList{"--no-db", "bench-train", "--backend", "cuda"},
              QStringList{"--no-db", "compare", sample, "--tensor", "layers.0.key", "--backend", "tpu"}}) {
            const auto r = test::gsrqRun(args);
            QVERIFY2(r.code == 2, qPrintable(args.join(' ') + " → " + QString::number(r.code) + ": " + r.err));
            QVERIFY2(r.err.contains("--backend") || r.err.contains("check-gpu"), r.err.constData());
        }
    }

    void autoRunsOnTheCpuWithoutDevice()
    {
        QString why;
        if (test::haveCudaDevice(&why))
            QSKIP(test::deviceIsPresent());
        const QString sample = test::sourcePath("resources/samples/stories260K-gpl3.safetensors");
        const auto r = test::gsrqRun({"--no-db", "compare", sample, "--tensor", "layers.0.key", "--dim", "8", "--k",
                                      "16", "--iters", "2", "--json"});
        QCOMPARE(r.code, 0);
        QVERIFY2(r.err.contains("backend auto: no GPU"), r.err.constData());
        QVERIFY(r.out.contains("\"backend\": \"cpu\""));
    }

    void devicesArePlausible()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        for (const auto& d : gpu::queryDevices().devices) {
            if (test::kEmulated) {
                // The emulated device says what it is, and has an H100's launch geometry but no clocks.
                QVERIFY(QString::fromStdString(d.name).contains("emulator"));
                QCOMPARE(d.computeMajor, 9);
                QCOMPARE(d.multiprocessors, 132);
                QCOMPARE(d.peakFp32Flops, 0.0);
                continue;
            }
            QVERIFY(!d.name.empty());
            QVERIFY(d.memoryBytes > (1ull << 30));
            QVERIFY(d.computeMajor >= 5);
            QVERIFY(d.multiprocessors > 0);
            QVERIFY(d.peakFp32Flops > 1e12);
            QVERIFY(d.memoryBandwidth > 1e11);
        }
    }

    void cudaMatchesCpu()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // The same checks as `gsrq check-gpu` (tolerances and their reasons in gpu_check.cpp).
        const auto rep = gpu::runGpuCheck({});
        for (const auto& c : rep.items)
            QVERIFY2(c.pass(), qPrintable(QString("%1: %2 vs limit %3 (%4)")
                                              .arg(QString::fromStdString(c.name))
                                              .arg(c.value)
                                              .arg(c.limit)
                                              .arg(QString::fromStdString(c.detail))));
        QVERIFY2(rep.devicePasses > 0, "no assignment pass ran on the GPU");
        const auto a = gpu::makeBackend({gpu::BackendKind::Auto, 0, 0, false});
        QCOMPARE(QString::fromStdString(a.backend->name()), QString("cuda"));
    }

    void cudaKeepsWorkingBlockByBlock()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // The block operations a stage loop uses, resident and streamed, against the CPU backend:
        // gathered rows are copies (exact), the residual after subtraction is one float subtraction
        // per element (exact, same labels), labels agree but for near-ties.
        const MatrixRF X = synthesize(SynthKind::Gaussian, 5000, 48, 3);
        const MatrixRF C = X.topRows(32).middleCols(16, 16);
        for (bool streamed : {false, true}) {
            gpu::CudaOptions o;
            o.forceStreamed = streamed;
            auto g = gpu::makeCudaBackend(o);
            auto c = makeCpuBackend(1);
            for (auto* b : {g.get(), c.get()}) {
                b->bind(X.data(), X.rows(), 48, nullptr);
                b->selectBlock(16, 16, 1e-8f);
            }
            AssignStats sg, sc;
            g->assignPass(C, {true, true}, sg);
            c->assignPass(C, {true, true}, sc);
            // The row metrics' sums: equal but for the few near-tie rows and summation order
            // (a near-tie row moves its cosine by far less than 1; 1e-3 of 5000 rows' sum is 5).
            QCOMPARE(sg.cosineRows, sc.cosineRows);
            QVERIFY(std::abs(sg.cosineSum - sc.cosineSum) <= 1e-3 * std::abs(sc.cosineSum));
            QVERIFY(std::abs(sg.gainErrorSum - sc.gainErrorSum) <= 1e-3 * sc.gainErrorSum);
            QVERIFY(std::abs(sg.squaredNormSum - sc.squaredNormSum) <=
                    1e-6 * sc.squaredNormSum); // float row norms, summed in another order
            std::vector<std::int32_t> lg(5000), lc(5000);
            g->readLabels(lg);
            c->readLabels(lc);
            int differ = 0;
            for (int i = 0; i < 5000; ++i)
                differ += lg[std::size_t(i)] != lc[std::size_t(i)];
            QVERIFY2(differ <= 5, qPrintable(QString("%1 labels differ").arg(differ)));
            g->writeLabels(lc); // the same labels on both, so the residuals can be compared exactly
            g->subtractAssigned(C);
            c->subtractAssigned(C);
            std::vector<std::int64_t> all(5000);
            std::iota(all.begin(), all.end(), 0);
            QCOMPARE(g->gatherRows(all), c->gatherRows(all));
            const auto mg = g->reconstructionMetrics(), mc = c->reconstructionMetrics();
            QVERIFY(std::abs(mg.nmse - mc.nmse) <= 1e-12 * mc.nmse); // double sums of equal floats
            QCOMPARE(gpu::cudaStats(*g)->resident, !streamed);
            QVERIFY(gpu::cudaStats(*g)->devicePasses >= 1);
        }
    }

    void sumsAreExactRepeatableAndChunkFree()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // The per-cluster sums are taken without a sort, tile by tile in a fixed order. 9,000 weighted
        // rows of 40 columns against K = 2,000: three tiles of rows, two column groups (the second
        // partial), eight cluster ranges (the last partial), and streamed chunks of 4,096 rows (the
        // score block of K = 2,000 holds 4,194, cut to whole tiles).
        const std::int64_t n = 9000;
        const int d = 40, K = 2000;
        const MatrixRF X = synthesize(SynthKind::Gaussian, n, d, 5);
        const MatrixRF C = X.topRows(K);
        std::vector<float> w(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = 0.25f + float((i * 7919) % 1000) / 500.0f;
        AssignStats runs[2][2];
        std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
        for (bool streamed : {false, true}) {
            gpu::CudaOptions o;
            o.forceStreamed = streamed;
            auto g = gpu::makeCudaBackend(o);
            g->bind(X.data(), n, d, w.data());
            g->selectBlock(0, d, 1e-8f);
            for (auto& st : runs[streamed])
                g->assignPass(C, {true, false}, st);
            if (streamed)
                QVERIFY(gpu::cudaStats(*g)->chunkRows < n);
            g->readLabels(labels);
        }
        // Against sums in double over the labels the device chose. Sx and W: the same products in
        // another order, within n·2⁻⁵³ of the sum of magnitudes (1e-12 is far above that, far below a
        // missed or doubled row). Sy also carries the device's float 1/(‖x‖ + ε), 2⁻²³ relative.
        MatrixRD sx = MatrixRD::Zero(K, d), sy = MatrixRD::Zero(K, d), ax = sx, ay = sx;
        Eigen::VectorXd sw = Eigen::VectorXd::Zero(K);
        std::vector<std::int64_t> count(std::size_t(K), 0);
        for (std::int64_t i = 0; i < n; ++i) {
            const int k = labels[std::size_t(i)];
            QVERIFY(k >= 0 && k < K);
            const double wi = w[std::size_t(i)], inv = 1.0 / (X.row(i).cast<double>().norm() + 1e-8);
            const Eigen::RowVectorXd x = X.row(i).cast<double>();
            sx.row(k) += wi * x;
            sy.row(k) += wi * inv * x;
            ax.row(k) += (wi * x).cwiseAbs();
            ay.row(k) += (wi * inv * x).cwiseAbs();
            sw[k] += wi;
            ++count[std::size_t(k)];
        }
        const AssignStats& a = runs[0][0];
        for (int k = 0; k < K; ++k) {
            QCOMPARE(a.count[k], count[std::size_t(k)]);
            QVERIFY(std::abs(a.weightSum[k] - sw[k]) <= 1e-12 * sw[k]);
            for (int j = 0; j < d; ++j) {
                QVERIFY2(
                    std::abs(a.sumX(k, j) - sx(k, j)) <= 1e-12 * ax(k, j) + 1e-300,
                    qPrintable(QString("Sx[%1][%2]: %3 against %4").arg(k).arg(j).arg(a.sumX(k, j)).arg(sx(k, j))));
                QVERIFY(std::abs(a.sumY(k, j) - sy(k, j)) <= 1e-6 * ay(k, j) + 1e-300);
            }
        }
        // On a device with less shared memory per block (the emulator as an RTX 40 series, 99 KiB,
        // and as one of 48 KiB), a block takes fewer clusters (128, 32): more ranges, the same sums.
        std::vector<AssignStats> others = {runs[0][1], runs[1][0], runs[1][1]};
#if defined(GSRQ_TEST_EMULATOR)
        const std::vector<const char*> smallerDevices = {"99", "48"};
#else
        const std::vector<const char*> smallerDevices; // a real device's shared memory is what it is
#endif
        for (const char* kib : smallerDevices) {
            qputenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB", kib);
            auto g = gpu::makeCudaBackend({});
            g->bind(X.data(), n, d, w.data());
            g->selectBlock(0, d, 1e-8f);
            g->assignPass(C, {true, false}, others.emplace_back());
            qunsetenv("GSRQ_EMULATOR_SHARED_OPTIN_KIB");
        }
        // The same bits on a second pass, streamed in chunks as resident in one go, and on a smaller device.
        QCOMPARE(others.size(), 3 + smallerDevices.size());
        for (const AssignStats& b : others) {
            QVERIFY(b.sumX == a.sumX);
            QVERIFY(b.sumY == a.sumY);
            QVERIFY(b.weightSum == a.weightSum);
            QVERIFY(b.count == a.count);
            QCOMPARE(b.weightedError, a.weightedError);
        }
    }

    void gskmFollowsTheCpuPathOnTheDevice()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // GSKM's start (Algorithm 1: members by direction, then gains by mean projection) and its
        // iterations run in core on the backend's one primitive, so the device takes the CPU's
        // path: the same labels at the end. Seeded synthetic KV-like rows; with 3,000 rows and
        // K = 32 no row sits within float rounding of a tie, which a different summation order
        // could flip.
        const MatrixRF X = synthesize(SynthKind::KvLike, 3000, 16, 8);
        ClusteringParams p;
        p.k = 32;
        p.maxIterations = 30;
        p.seed = 4;
        auto g = gpu::makeCudaBackend({});
        auto c = makeCpuBackend(2);
        const auto a = cluster(X, nullptr, Method::GainShape, p, *c);
        const auto b = cluster(X, nullptr, Method::GainShape, p, *g);
        QCOMPARE(b.iterations, a.iterations);
        QVERIFY(b.labels == a.labels);
        // Float sums in another order: the objective of each pass agrees to 1e-5 relative.
        for (std::size_t i = 0; i < a.history.size(); ++i)
            QVERIFY(std::abs(a.history[i].objective - b.history[i].objective) <= 1e-5 * a.history[i].objective);
        QVERIFY(gpu::cudaStats(*g)->devicePasses >= 1 + std::int64_t(a.history.size())); // the start's pass too
    }

    void lloydIterationsStayOnTheDevice()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // Lloyd's iterations on the device: update_rule.h applied by a kernel, the centroids never
        // leaving it, each iteration reading back its ten scalars; against the CPU backend applying
        // the same rule in host memory. Seeded synthetic rows, weighted: 2,000 rows around 24
        // KV-like centres (each its centre plus Gaussian noise of 0.3 of the centres' norm),
        // clustered with K = 60, so GSKM's clusters empty out as a blob's extra centroids compete
        // (the re-seeding round trip runs). No two rows are equal: duplicated centroids would tie,
        // and which of two equal columns a GEMM scores higher is not defined on any device. Tighter
        // blobs are no good either: 2·x·c − ‖c‖² then cancels most of its digits, and the two
        // backends' roundings part rows near a boundary.
        const MatrixRF centres = synthesize(SynthKind::KvLike, 24, 16, 11);
        const MatrixRF noise = synthesize(SynthKind::Gaussian, 2000, 16, 12);
        const float scale = 0.3f * centres.rowwise().norm().mean() / noise.rowwise().norm().mean();
        MatrixRF X(2000, 16);
        std::vector<float> w(2000);
        for (int i = 0; i < 2000; ++i) {
            X.row(i) = centres.row(i % 24) + scale * noise.row(i);
            w[std::size_t(i)] = 0.5f + float((i * 37) % 11) / 8.0f;
        }
        struct Case {
            Method method;
            double ema;
            bool reseed;
        };
        int reseededInAll = 0;
        for (const Case& t :
             {Case{Method::KMeans, 0, false}, Case{Method::GainShape, 0, false}, Case{Method::KMeans, 0, true},
              Case{Method::GainShape, 0, true}, Case{Method::KMeans, 0.5, true}}) {
            const QString name =
                QString("%1, EMA %2, re-seeding %3").arg(methodName(t.method)).arg(t.ema).arg(t.reseed ? "on" : "off");
            ClusteringParams p;
            p.k = 60;
            p.maxIterations = 20;
            p.seed = 9;
            p.emaDecay = t.ema;
            p.reseedEmpty = t.reseed;
            auto c = makeCpuBackend(2);
            const auto a = cluster(X, w.data(), t.method, p, *c);
            auto g = gpu::makeCudaBackend({});
            const auto* stats = gpu::cudaStats(*g);
            // What a clustering reads back besides its iterations: the run stopped before any update.
            ClusteringParams none = p;
            none.maxIterations = 0;
            const std::int64_t before = stats->bytesToHost;
            cluster(X, w.data(), t.method, none, *g);
            const std::int64_t fixedBytes = stats->bytesToHost - before;
            const std::int64_t start = stats->bytesToHost;
            const auto b = cluster(X, w.data(), t.method, p, *g);
            const std::int64_t runBytes = stats->bytesToHost - start;
            const auto b2 = cluster(X, w.data(), t.method, p, *g);

            QVERIFY2(b.iterations == a.iterations && b.labels == a.labels, qPrintable(name));
            int reseeded = 0;
            for (std::size_t i = 0; i < a.history.size(); ++i) {
                // The sums of a pass in another order: objectives to 1e-5, the same empties and re-seeds.
                QVERIFY2(std::abs(a.history[i].objective - b.history[i].objective) <= 1e-5 * a.history[i].objective,
                         qPrintable(name));
                QCOMPARE(b.history[i].emptyClusters, a.history[i].emptyClusters);
                QCOMPARE(b.history[i].reseeded, a.history[i].reseeded);
                QCOMPARE(b.history[i].changed, a.history[i].changed);
                QVERIFY(std::abs(a.history[i].shrinkage - b.history[i].shrinkage) <= 1e-5 * a.history[i].shrinkage);
                reseeded += a.history[i].reseeded;
            }
            reseededInAll += reseeded;
            QVERIFY2((b.centroids - a.centroids).cwiseAbs().maxCoeff() <= 1e-5 * a.centroids.cwiseAbs().maxCoeff(),
                     qPrintable(name));
            // Bit-identical run to run: fixed-order sums and one update text.
            QVERIFY2(b2.centroids == b.centroids && b2.labels == b.labels, qPrintable(name));
            for (std::size_t i = 0; i < b.history.size(); ++i)
                QCOMPARE(b2.history[i].objective, b.history[i].objective);
            // Each iteration reads back its ten scalars (80 bytes) and nothing else; a re-seeding
            // iteration also the cluster totals and the state, down and up.
            const std::int64_t perIteration = 10 * sizeof(double);
            if (!t.reseed)
                QCOMPARE(runBytes - fixedBytes, perIteration * b.iterations);
            else
                QVERIFY(runBytes - fixedBytes >= perIteration * b.iterations);
        }
        QVERIFY2(reseededInAll > 0, "the data must exercise the re-seeding");
    }

    void independentClusteringsRunTogether()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // A stage's subspaces are independent clusterings of the same rows: the device runs them as
        // members of one batch (one batched GEMM, argmax, sums and update launch a pass for all), each
        // member stopping on its own. Member by member the result must be the CPU's, which trains the
        // subspaces one after another: the same codes, iteration counts, empties and re-seeds, the
        // objectives and codebooks to 1e-5 (float sums in another order, as in the tests above).
        // Seeded synthetic rows: 1,600 rows of four 16-wide subspaces, each around 16 KV-like centres
        // with Gaussian noise of its own scale (0.2 to 0.5 of the centres' norm), so the members
        // converge after different numbers of iterations and drop out of the batch at different times;
        // K = 32 against 16 centres empties clusters (re-seeding runs). Weighted rows.
        constexpr int n = 1600, D = 16, M = 4;
        std::vector<float> w;
        const MatrixRF X = memberRows(n, D, M, w);
        struct Case {
            Method method;
            double ema;
            bool reseed;
        };
        bool droppedOut = false;
        int reseeded = 0;
        for (const Case& t :
             {Case{Method::KMeans, 0, false}, Case{Method::GainShape, 0, true}, Case{Method::KMeans, 0.5, true}}) {
            const QString name =
                QString("%1, EMA %2, re-seeding %3").arg(methodName(t.method)).arg(t.ema).arg(t.reseed ? "on" : "off");
            RqSettings s;
            s.dim = D;
            s.stages = 2;
            s.k = 32;
            s.method = t.method;
            s.iterations = 25;
            s.seed = 5;
            s.reseedEmpty = t.reseed;
            s.emaDecay = t.ema;
            auto c = makeCpuBackend(2);
            const auto a = trainResidualQuantizer(X, w.data(), s, *c);
            auto g = gpu::makeCudaBackend({});
            const auto b = trainResidualQuantizer(X, w.data(), s, *g);
            const auto* stats = gpu::cudaStats(*g);
            QVERIFY2(stats->batchedPasses > 0 && stats->mostMembers == M, qPrintable(name));
            QVERIFY2(b.codes == a.codes, qPrintable(name));
            QCOMPARE(b.clusterings.size(), a.clusterings.size());
            for (std::size_t j = 0; j < a.clusterings.size(); ++j) {
                const auto &x = a.clusterings[j], &y = b.clusterings[j];
                QCOMPARE(y.subspace, x.subspace);
                QCOMPARE(y.stage, x.stage);
                QCOMPARE(y.iterations, x.iterations);
                QCOMPARE(y.history.size(), x.history.size());
                for (std::size_t i = 0; i < x.history.size(); ++i) {
                    QCOMPARE(y.history[i].changed, x.history[i].changed);
                    QCOMPARE(y.history[i].emptyClusters, x.history[i].emptyClusters);
                    QCOMPARE(y.history[i].reseeded, x.history[i].reseeded);
                    QVERIFY2(std::abs(y.history[i].objective - x.history[i].objective) <= 1e-5 * x.history[i].objective,
                             qPrintable(name));
                    reseeded += x.history[i].reseeded;
                }
                if (x.iterations != a.clusterings[j - j % M].iterations)
                    droppedOut = true; // a member of the stage stopped before another
            }
            for (int m = 0; m < M; ++m)
                for (int r = 0; r < s.stages; ++r) {
                    const MatrixRF ca = a.codebooks.book(m, r), cb = b.codebooks.book(m, r);
                    QVERIFY2((cb - ca).cwiseAbs().maxCoeff() <= 1e-5 * ca.cwiseAbs().maxCoeff(), qPrintable(name));
                }
            QVERIFY2(std::abs(b.metrics.nmse - a.metrics.nmse) <= 1e-5 * a.metrics.nmse, qPrintable(name));
            // Run to run the batch is bit-identical (fixed-order sums in every member).
            const auto b2 = trainResidualQuantizer(X, w.data(), s, *g);
            QVERIFY2(b2.codes == b.codes, qPrintable(name));
            for (int m = 0; m < M; ++m)
                QVERIFY2(MatrixRF(b2.codebooks.book(m, 0)) == MatrixRF(b.codebooks.book(m, 0)), qPrintable(name));
        }
        QVERIFY2(droppedOut, "the data must make members stop at different iterations");
        QVERIFY2(reseeded > 0, "the data must exercise the re-seeding");
    }

    void fusedArgmaxFollowsTheScores()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // With TF32 the pass scores and takes the argmax in one tensor-core kernel. Its labels against
        // the exact scores of the same TF32-rounded rows and codewords (double sums): a row's label
        // may differ from the exact best only where FP32 sums of the D products (in the tensor
        // cores' order) cannot tell them apart, |error| ≤ D·u·2Σ|x_j·c_j| + the subtraction's and
        // ‖c‖²'s roundings, u = 2⁻²⁴, each bound doubled. Its row terms against the same pass by
        // cuBLAS and the argmax kernel (the same TF32 operands, other sums: 1e-5 of the totals).
        // Seeded synthetic Gaussian rows, weighted; the block at column 4 of D + 8 (its rows 16-byte
        // aligned); 1,015 rows in at most 3 blocks (24 warps), so warps take several tiles (64 tiles
        // of 16 rows at D ≤ 64, the last of 7; at D = 128, 32 tiles of two row groups of 16, so 8
        // warps take two, and the last tile has 23 rows: its second group partial); K = 72 (a last
        // group of 8 codewords) and 256; D = 16, 48 (rows as they are) and 128 (padded); K = 300 is
        // not a multiple of 8 and takes the GEMM.
        struct Case {
            int D, K;
            bool fusedExpected;
        };
        constexpr std::int64_t n = 1015;
        const double u = std::ldexp(1.0, -24);
        for (const Case& t : {Case{16, 72, true}, Case{48, 256, true}, Case{128, 256, true}, Case{16, 300, false}}) {
            const QString name = QString("D=%1 K=%2").arg(t.D).arg(t.K);
            const int f = t.D + 8, col0 = 4;
            const MatrixRF X = synthesize(SynthKind::Gaussian, n, f, 11 + std::uint64_t(t.D));
            MatrixRF C = synthesize(SynthKind::Gaussian, t.K, t.D, 21 + std::uint64_t(t.K));
            // Equal codewords score equally: the lower index must win, within a lane's pair (0, 1)
            // and across lanes, tiles and groups (5, K − 1), as on the CPU. Codewords 0 and 5 are
            // rows 17 and 900's blocks, so those rows take them (by a margin: their distance is 0).
            C.row(0) = X.row(17).segment(col0, t.D);
            C.row(5) = X.row(900).segment(col0, t.D);
            C.row(1) = C.row(0);
            C.row(t.K - 1) = C.row(5);
            std::vector<float> w(static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < w.size(); ++i)
                w[i] = 0.25f + float(i % 11) / 4.0f;
            std::vector<std::int32_t> labels[2];
            AssignStats stats[2];
            std::int64_t fusedPasses[2] = {0, 0};
            for (int fused = 0; fused < 2; ++fused) {
                gpu::CudaOptions o;
                o.tf32 = true;
                o.fusedArgmax = fused == 1;
                o.fusedBlocks = 3;
                auto g = gpu::makeCudaBackend(o);
                g->bind(X.data(), n, f, w.data());
                g->selectBlock(col0, t.D, 1e-8f);
                g->assignPass(C, {true, true}, stats[fused]);
                labels[fused].resize(std::size_t(n));
                g->readLabels(labels[fused]);
                fusedPasses[fused] = gpu::cudaStats(*g)->fusedPasses;
            }
            QCOMPARE(fusedPasses[0], std::int64_t(0));
            QCOMPARE(fusedPasses[1], std::int64_t(t.fusedExpected ? 1 : 0));
            const auto tf32 = [](float v) {
                std::uint32_t b;
                std::memcpy(&b, &v, 4);
                b = (b + 0x1000u) & ~0x1fffu;
                std::memcpy(&v, &b, 4);
                return double(v);
            };
            int exact = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                double best = -1e300;
                std::vector<double> score(std::size_t(t.K)), bound(std::size_t(t.K));
                for (int k = 0; k < t.K; ++k) {
                    double dot = 0, mag = 0, n2 = 0;
                    for (int j = 0; j < t.D; ++j) {
                        const double p = tf32(X(i, col0 + j)) * tf32(C(k, j));
                        dot += p;
                        mag += std::abs(p);
                        n2 += double(C(k, j)) * double(C(k, j));
                    }
                    score[std::size_t(k)] = 2 * dot - n2;
                    bound[std::size_t(k)] = 2 * (t.D * u * 2 * mag + 4 * u * (2 * std::abs(dot) + n2));
                    best = std::max(best, score[std::size_t(k)]);
                }
                int bestK = 0;
                while (score[std::size_t(bestK)] != best)
                    ++bestK;
                const std::size_t l = std::size_t(labels[1][std::size_t(i)]);
                QVERIFY2(l < std::size_t(t.K), qPrintable(name));
                QVERIFY2(score[l] >= best - bound[l] - bound[std::size_t(bestK)],
                         qPrintable(QString("%1: row %2 took %3 (%4), the best is %5 (%6)")
                                        .arg(name)
                                        .arg(i)
                                        .arg(l)
                                        .arg(score[l])
                                        .arg(bestK)
                                        .arg(best)));
                exact += int(l) == bestK;
                QVERIFY2(l != 1 && l != std::size_t(t.K - 1),
                         qPrintable(QString("%1: row %2 took the higher of two equal codewords").arg(name).arg(i)));
            }
            // Gaussian scores have no near ties but by chance: nearly every row takes the exact best.
            QVERIFY2(exact >= n - 5, qPrintable(QString("%1: %2 of %3 rows").arg(name).arg(exact).arg(n)));
            QCOMPARE(labels[1][17], 0);
            QCOMPARE(labels[1][900], 5);
            // The terms against the GEMM's pass: the same but for float sums in another order and the
            // rows whose near tie went the other way (each moves its cosine by at most 2 and its gain
            // error by at most the larger codeword norm).
            int differ = 0;
            for (std::size_t i = 0; i < labels[0].size(); ++i)
                differ += labels[0][i] != labels[1][i];
            QVERIFY2(differ <= 5, qPrintable(QString("%1: %2 labels differ").arg(name).arg(differ)));
            const double maxNorm = C.rowwise().norm().maxCoeff();
            const AssignStats &a = stats[0], &b = stats[1];
            QVERIFY2(std::abs(b.weightedError - a.weightedError) <= 1e-5 * a.weightedSquaredNorm, qPrintable(name));
            QCOMPARE(b.weightedSquaredNorm, a.weightedSquaredNorm); // the same float norms, the same sums
            QCOMPARE(b.totalWeight, a.totalWeight);
            QVERIFY2(std::abs(b.cosineSum - a.cosineSum) <= 1e-5 * double(n) + 2.0 * differ, qPrintable(name));
            QVERIFY2(std::abs(b.gainErrorSum - a.gainErrorSum) <= 1e-5 * a.gainErrorSum + maxNorm * differ,
                     qPrintable(name));
            QCOMPARE(b.cosineRows, a.cosineRows);
            if (labels[0] == labels[1]) // the same labels: the same fixed-order sums
                QVERIFY2(b.sumX == a.sumX, qPrintable(name));
        }
    }

    void fusedTrainingFollowsTheCpu()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // Whole trainings with the fused kernel: a stage's subspaces as one batch (fused, members
        // dropping out), resident and streamed rows, KM and GSKM, against the CPU's FP32 training on
        // the same rows. TF32 scores move a near-tie row to its other codeword, and the trainings
        // part from there: the NMSE, not the codes, is what must agree (within 1%:
        // TF32 rounds every operand by up to 2⁻¹¹ of itself, and a training that parts at a near tie
        // ends in a nearby local optimum; measured here 0.2–0.3%, printed below).
        // The rows of independentClusteringsRunTogether, with 32-wide subspaces (the kernel's
        // D is a multiple of 16), K = 32.
        constexpr int n = 1600, D = 32, M = 4;
        std::vector<float> w;
        const MatrixRF X = memberRows(n, D, M, w);
        for (Method method : {Method::KMeans, Method::GainShape}) {
            RqSettings s;
            s.dim = D;
            s.stages = 2;
            s.k = 32;
            s.method = method;
            s.iterations = 25;
            s.seed = 5;
            auto c = makeCpuBackend(2);
            const auto a = trainResidualQuantizer(X, w.data(), s, *c);
            for (bool streamed : {false, true}) {
                const QString name = QString("%1, %2").arg(methodName(method)).arg(streamed ? "streamed" : "resident");
                gpu::CudaOptions o;
                o.tf32 = true;
                o.forceStreamed = streamed;
                auto g = gpu::makeCudaBackend(o);
                const auto b = trainResidualQuantizer(X, w.data(), s, *g);
                const auto* stats = gpu::cudaStats(*g);
                QVERIFY2(stats->fusedPasses > 0, qPrintable(name));
                if (!streamed)
                    QVERIFY2(stats->batchedPasses > 0, qPrintable(name));
                qInfo("%s: NMSE %.6f (CPU, FP32 %.6f)", qPrintable(name), b.metrics.nmse, a.metrics.nmse);
                QVERIFY2(std::abs(b.metrics.nmse - a.metrics.nmse) <= 0.01 * a.metrics.nmse, qPrintable(name));
            }
        }
    }

#if defined(GSRQ_TEST_EMULATOR)
    void fusedPassBytesMatchTheModel()
    {
        if (!emulator::byteCountsBuilt())
            QSKIP("this build's emulator has no byte counts (the AddressSanitizer build)");
        // passBytesMatchTheModel's launches with the fused kernel in place of the GEMM and the argmax,
        // alone and for two members together: 9,000 weighted rows, blocks of 32 columns (at 8, and
        // 48 for the second member), K = 296 (the sums' two cluster ranges; a multiple of 8); and a
        // block of 128 columns alone, whose warps take tiles of two row groups (9,000 rows: a last
        // tile of 8). The grid is the backend's on the emulator's geometry (132 SMs, 228 KiB each).
        const std::int64_t n = 9000;
        const int f = 144, K = 296;
        const int cols[2] = {8, 48};
        const MatrixRF X = synthesize(SynthKind::Gaussian, n, f, 6);
        std::vector<float> w(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = 0.5f + float(i % 7) / 4.0f;
        int compared = 0;
        struct Case {
            int members, d;
        };
        for (const Case& c : {Case{1, 32}, Case{2, 32}, Case { 1, 128 }})
            for (bool gskm : {false, true}) {
                const int members = c.members, d = c.d;
                gpu::CudaOptions o;
                o.tf32 = true;
                auto g = gpu::makeCudaBackend(o);
                g->bind(X.data(), n, f, w.data());
                g->selectBlocks(std::span<const int>(cols, std::size_t(members)), d, 1e-8f);
                for (int b = 0; b < members; ++b) {
                    g->focusMember(b);
                    CentroidState state;
                    state.centroids = X.middleRows(100 * b, K).middleCols(cols[b], d);
                    if (gskm) {
                        state.gs.gains = state.centroids.rowwise().norm().cast<double>();
                        state.gs.shapes = state.centroids.cast<double>().rowwise().normalized();
                    }
                    g->loadCentroids(state);
                }
                gpu::ClusterPassCase pc{n, d, K, true, gskm, true, 256, true};
                pc.members = members;
                pc.fused = true;
                pc.fusedBlocks =
                    gpu::fusedArgmaxGrid(n, d, members, 132, gpu::fusedArgmaxBlocksPerSm(K, d, 228 * 1024));
                const int both[2] = {0, 1};
                std::vector<AssignStats> out(static_cast<std::size_t>(members));
                emulator::startByteCounts();
                if (members == 1)
                    g->passHeld({gskm, true}, out[0]);
                else
                    g->passHeldBatch(std::span<const int>(both, 2), {gskm, true}, out);
                auto launches = emulator::stopByteCounts();
                emulator::startByteCounts();
                if (members == 1)
                    g->updateHeld({gskm ? update::Rule::GainShape : update::Rule::Mean, 1e-6, 0});
                else
                    g->updateHeldBatch(std::span<const int>(both, 2),
                                       {gskm ? update::Rule::GainShape : update::Rule::Mean, 1e-6, 0});
                const auto update = emulator::stopByteCounts();
                launches.insert(launches.end(), update.begin(), update.end());
                QCOMPARE(gpu::cudaStats(*g)->fusedPasses, std::int64_t(1));
                compared += compareToModel(launches, pc, gskm ? "fused gskm" : "fused km");
            }
        // fused, tile sums and reduce, row totals, cluster totals, update: three cases, KM and GSKM.
        QCOMPARE(compared, 6 * 6);
    }
#endif

#if defined(GSRQ_TEST_EMULATOR)
    void passBytesMatchTheModel()
    {
        if (!emulator::byteCountsBuilt())
            QSKIP("this build's emulator has no byte counts (the AddressSanitizer build)");
        // Each launch of a held pass and of the update after it, as the emulator counts its loads and
        // stores, against pass_costs.h's term for it: the training estimate's per-pass bytes are the
        // code's. 9,000 weighted synthetic rows of 48 features, the block of 40 columns at 8 (two
        // column groups of the sums, the second partial), K = 300 (two cluster ranges, the second
        // partial): one chunk, three tiles (the last partial) in one launch. Exact, as every term is
        // a count of what the code reads and writes; the centroids are distinct rows, so no cluster
        // is empty (the update's model assumes none).
        const std::int64_t n = 9000;
        const int f = 48, col0 = 8, d = 40, K = 300;
        const MatrixRF X = synthesize(SynthKind::Gaussian, n, f, 6);
        std::vector<float> w(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = 0.5f + float(i % 7) / 4.0f;
        int compared = 0;
        for (bool gskm : {false, true}) {
            auto g = gpu::makeCudaBackend({});
            g->bind(X.data(), n, f, w.data());
            g->selectBlock(col0, d, 1e-8f);
            CentroidState state;
            state.centroids = X.topRows(K).middleCols(col0, d);
            if (gskm) {
                state.gs.gains = state.centroids.rowwise().norm().cast<double>();
                state.gs.shapes = state.centroids.cast<double>().rowwise().normalized();
            }
            g->loadCentroids(state);
            const gpu::ClusterPassCase pc{n, d, K, true, gskm, true, 256, true};
            AssignStats out;
            emulator::startByteCounts();
            g->passHeld({gskm, true}, out);
            auto launches = emulator::stopByteCounts();
            QCOMPARE(out.emptyClusters, std::int64_t(0));
            emulator::startByteCounts();
            g->updateHeld({gskm ? update::Rule::GainShape : update::Rule::Mean, 1e-6, 0});
            const auto update = emulator::stopByteCounts();
            launches.insert(launches.end(), update.begin(), update.end());

            compared += compareToModel(launches, pc, gskm ? "gskm" : "km");
        }
        // argmax, tile sums and reduce, row totals, cluster totals, update: for KM and GSKM.
        QCOMPARE(compared, 2 * 6);
    }

    void batchedPassBytesMatchTheModel()
    {
        if (!emulator::byteCountsBuilt())
            QSKIP("this build's emulator has no byte counts (the AddressSanitizer build)");
        // The same for a pass of two clusterings together (a stage's subspaces as members of one
        // batch) and its update: each launch moves each member's bytes, the weights and the pointer
        // table once, and the member list. The rows of the test above, twice as wide, with the
        // members' blocks at columns 8 and 48.
        const std::int64_t n = 9000;
        const int f = 96, d = 40, K = 300;
        const int cols[2] = {8, 48};
        const MatrixRF X = synthesize(SynthKind::Gaussian, n, f, 6);
        std::vector<float> w(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = 0.5f + float(i % 7) / 4.0f;
        int compared = 0;
        for (bool gskm : {false, true}) {
            auto g = gpu::makeCudaBackend({});
            g->bind(X.data(), n, f, w.data());
            g->selectBlocks(cols, d, 1e-8f);
            for (int b = 0; b < 2; ++b) {
                g->focusMember(b);
                CentroidState state;
                state.centroids = X.middleRows(100 * b, K).middleCols(cols[b], d);
                if (gskm) {
                    state.gs.gains = state.centroids.rowwise().norm().cast<double>();
                    state.gs.shapes = state.centroids.cast<double>().rowwise().normalized();
                }
                g->loadCentroids(state);
            }
            gpu::ClusterPassCase pc{n, d, K, true, gskm, true, 256, true};
            pc.members = 2;
            const int both[2] = {0, 1};
            std::vector<AssignStats> out(2);
            emulator::startByteCounts();
            g->passHeldBatch(both, {gskm, true}, out);
            auto launches = emulator::stopByteCounts();
            QCOMPARE(out[0].emptyClusters + out[1].emptyClusters, std::int64_t(0));
            emulator::startByteCounts();
            g->updateHeldBatch(both, {gskm ? update::Rule::GainShape : update::Rule::Mean, 1e-6, 0});
            const auto update = emulator::stopByteCounts();
            launches.insert(launches.end(), update.begin(), update.end());

            compared += compareToModel(launches, pc, gskm ? "batched gskm" : "batched km");
        }
        QCOMPARE(compared, 2 * 6);
    }
#endif

    void benchTrainModelsANamedDevice()
    {
        // --model-device needs no device: the 1-BPA layer's pass as the backend would launch it (with
        // --no-fused-argmax 8 chunks of 32,768 rows, a GEMM and an argmax each; with TF32 otherwise
        // one fused launch; the sums and their reduction; the row and cluster totals; the update),
        // and the layer's at most 8 blocks × 16 stages clusterings of 41 passes, 40 updates and
        // GSKM's start.
        const auto gemm = test::gsrqRun(
            {"--no-db", "bench-train", "--model-device", "h200", "--tf32", "--no-fused-argmax", "--json"});
        QVERIFY2(gemm.code == 0, gemm.err.constData());
        const auto g = QJsonDocument::fromJson(gemm.out).object();
        QCOMPARE(g["launches"].toArray().size(), 8 * 2 + 2 + 2 + 1);
        QCOMPARE(g["scores"].toString(), QString("gemm+argmax"));
        const auto r = test::gsrqRun({"--no-db", "bench-train", "--model-device", "h200", "--tf32", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QVERIFY(j["modelled"].toBool());
        QCOMPARE(j["launches"].toArray().size(), 1 + 2 + 2 + 1);
        QCOMPARE(j["scores"].toString(), QString("fused"));
        QCOMPARE(j["launches"].toArray()[0].toObject()["launch"].toString(), QString("fused scores and argmax"));
        // The fused launch replaces 16 that wrote and read the scores: the model's pass is shorter.
        QVERIFY(j["pass_seconds"].toDouble() < g["pass_seconds"].toDouble());
        QCOMPARE(j["clusterings"].toInt(), 8 * 16);
        QCOMPARE(j["max_passes"].toInt(), 8 * 16 * 42);
        const double pass = j["pass_seconds"].toDouble(), update = j["update_seconds"].toDouble(),
                     start = j["start_pass_seconds"].toDouble();
        QVERIFY(pass > 0 && update > 0 && start > 0 && start < pass); // the start has no shape sums or metrics
        QVERIFY(std::abs(j["layer_seconds_at_most"].toDouble() - 128 * (41 * pass + 40 * update + start)) <=
                1e-12 * j["layer_seconds_at_most"].toDouble());
        // The launches' sum is the pass, each launch at its roofline.
        double sum = 0;
        for (const auto& l : j["launches"].toArray())
            if (l.toObject()["launch"].toString() != "centroid update")
                sum += l.toObject()["roofline_seconds"].toDouble();
        QVERIFY(std::abs(sum - pass) <= 1e-12 * pass);
        const auto bad = test::gsrqRun({"--no-db", "bench-train", "--model-device", "v100"});
        QCOMPARE(bad.code, 2);
        QVERIFY2(bad.err.contains("h100, h200"), bad.err.constData());
        const auto save = test::gsrqRun({"--no-db", "bench-train", "--model-device", "h100", "--save-data", "x"});
        QCOMPARE(save.code, 2);
        QVERIFY2(save.err.contains("--save-data"), save.err.constData());
    }

    void cliTrainsOnTheDeviceAsOnTheCpu()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // `gsrq train --backend cuda` on the bundled sample against `--backend cpu`: the same
        // seeded training, held to the 0.5% NMSE the backends must agree within.
        const QString sample = test::sourcePath("resources/samples/stories260K-gpl3.safetensors");
        auto train = [&](const char* backend) {
            return test::gsrqRun({"--no-db", "train", sample, "--layers", "1-2", "--dim", "8", "--stages", "2", "--k",
                                  "16", "--iters", "5", "--backend", backend, "--json", "-q"});
        };
        const auto rg = train("cuda"), rc = train("cpu");
        QVERIFY2(rg.code == 0, rg.err.constData());
        QVERIFY2(rc.code == 0, rc.err.constData());
        const QJsonObject g = QJsonDocument::fromJson(rg.out).object(), c = QJsonDocument::fromJson(rc.out).object();
        QCOMPARE(g["settings"].toObject()["backend"].toString(), QString("cuda"));
        const QJsonArray gt = g["tensors"].toArray(), ct = c["tensors"].toArray();
        QCOMPARE(gt.size(), 4); // keys and values of layers 1 and 2
        for (qsizetype i = 0; i < gt.size(); ++i) {
            const double ng = gt[i].toObject()["stages"].toArray().last().toObject()["nmse"].toDouble();
            const double nc = ct[i].toObject()["stages"].toArray().last().toObject()["nmse"].toDouble();
            QVERIFY2(
                nc > 0 && std::abs(ng - nc) <= 5e-3 * nc,
                qPrintable(QString("%1: cuda %2, cpu %3").arg(gt[i].toObject()["tensor"].toString()).arg(ng).arg(nc)));
        }
    }

    void cliRefinesOnTheDeviceAsOnTheCpu()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        // Joint refinement goes through the backend interface (its re-encode is the backend's), so a
        // device backend refines as the CPU does: each round's training NMSE within the same 0.5%, and
        // the objective never rising on the device either.
        const QString sample = test::sourcePath("resources/samples/stories260K-gpl3.safetensors");
        auto train = [&](const char* backend) {
            return test::gsrqRun(
                {"--no-db", "train",    sample,     "--layers",  "1",     "--tensors", "layers.1.value",
                 "--dim",   "8",        "--stages", "3",         "--k",   "16",        "--iters",
                 "5",       "--refine", "2",        "--backend", backend, "--json",    "-q"});
        };
        const auto rg = train("cuda"), rc = train("cpu");
        QVERIFY2(rg.code == 0, rg.err.constData());
        QVERIFY2(rc.code == 0, rc.err.constData());
        const QJsonObject g = QJsonDocument::fromJson(rg.out)["tensors"][0].toObject()["refinement"].toObject(),
                          c = QJsonDocument::fromJson(rc.out)["tensors"][0].toObject()["refinement"].toObject();
        const QJsonArray gr = g["rounds"].toArray(), cr = c["rounds"].toArray();
        QCOMPARE(gr.size(), 2);
        QCOMPARE(cr.size(), 2);
        double previous = g["before"].toObject()["objective"].toDouble();
        for (qsizetype i = 0; i < gr.size(); ++i) {
            const double ng = gr[i].toObject()["train"].toObject()["nmse"].toDouble();
            const double nc = cr[i].toObject()["train"].toObject()["nmse"].toDouble();
            QVERIFY2(nc > 0 && std::abs(ng - nc) <= 5e-3 * nc,
                     qPrintable(QString("round %1: cuda %2, cpu %3").arg(i + 1).arg(ng).arg(nc)));
            const double objective = gr[i].toObject()["objective"].toDouble();
            QVERIFY(objective <= previous * (1 + 1e-9));
            previous = objective;
        }
    }

    void cliBenchTrainReportsWhatItMeasured()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        const auto r = test::gsrqRun({"--no-db", "bench-train", "--rows", "4096", "--features", "64", "--dim", "32",
                                      "--stages", "2", "--k", "64", "--iters", "3", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["backend"].toString(), QString("cuda"));
        QVERIFY(j["seconds_per_iteration"].toDouble() > 0 && j["layer_seconds"].toDouble() > 0);
        // 2·N·F·K per iteration: the FLOP count the rate is computed from.
        QCOMPARE(j["assignment_flop_per_iteration"].toDouble(), 2.0 * 4096 * 32 * 64);
        QVERIFY(j["nmse"].toDouble() > 0 && j["nmse"].toDouble() < 1);
        // A rate against a peak only where the device reports one.
        if (j["peak_fp32_flops"].toDouble() > 0)
            QVERIFY(j["fraction_of_peak"].toDouble() > 0);
        else
            QVERIFY(j["fraction_of_peak"].isNull());
    }

    void outOfDeviceMemoryIsNamed()
    {
        if (!test::kEmulated)
            QSKIP("needs the emulator's device-memory limit (GSRQ_EMULATOR_MEMORY_MIB)");
        // A 16 MiB device: the run stops with an error that names what did not fit and what was
        // free (exit 1, a runtime failure), never a crash or a hang.
        qputenv("GSRQ_EMULATOR_MEMORY_MIB", "16");
        const auto r = test::gsrqRun({"--no-db", "bench-train", "--rows", "65536", "--features", "128", "--dim", "32",
                                      "--stages", "1", "--k", "64", "--iters", "1"});
        qunsetenv("GSRQ_EMULATOR_MEMORY_MIB");
        QVERIFY2(r.code == 1, r.err.constData());
        QVERIFY2(r.err.contains("out of device memory") && r.err.contains("MiB") && r.err.contains("free"),
                 r.err.constData());
    }

    void badDeviceIndexIsAnInputError()
    {
        QString why;
        if (!test::haveCudaDevice(&why))
            QSKIP(qPrintable(why));
        gpu::CudaOptions o;
        o.device = 64;
        QVERIFY_THROWS_EXCEPTION(Error, gpu::makeCudaBackend(o));
        const auto r = test::gsrqRun({"check-gpu", "--device", "64"});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.contains("--device 64"));
    }
};

QTEST_APPLESS_MAIN(TestGpu)
#include "tst_gpu.moc"
