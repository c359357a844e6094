#pragma once
// Helpers shared by the test suites: seeded data and a scratch directory.

#include "core/base/error.h"
#include "core/io/tensor.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <random>
#include <string>

namespace gsrq::test {

// The source tree and the gsrq binary the suite was built against; GSRQ_TEST_SOURCE_DIR and
// GSRQ_TEST_CLI override them where the built suites run from elsewhere (tools/gpu/bundle.sh).
inline QString sourcePath(const char* relative)
{
    const QByteArray dir = qgetenv("GSRQ_TEST_SOURCE_DIR");
    return (dir.isEmpty() ? QStringLiteral(GSRQ_SOURCE_DIR) : QString::fromLocal8Bit(dir)) + QLatin1Char('/') +
           QString::fromUtf8(relative);
}

// The bundled llama2.c model and its tokenizer (resources/models/stories260K).
inline std::string stories260KModel()
{
    return sourcePath("resources/models/stories260K/stories260K.bin").toStdString();
}
inline std::string stories260KTokenizer()
{
    return sourcePath("resources/models/stories260K/tok512.bin").toStdString();
}

inline QString cliPath()
{
    const QByteArray cli = qgetenv("GSRQ_TEST_CLI");
    return cli.isEmpty() ? QStringLiteral(GSRQ_CLI_PATH) : QString::fromLocal8Bit(cli);
}

// Sanitized builds run the same work several times slower (ThreadSanitizer 5 to 15 times,
// AddressSanitizer about 2): the waits a test gives a training or a child process to finish, sized
// for a normal build, are stretched by this much there. A wait is a bound on a hang, never a timing.
#if defined(__SANITIZE_THREAD__) // GCC
#define GSRQ_TEST_TSAN 1
#elif defined(__has_feature) // clang
#if __has_feature(thread_sanitizer)
#define GSRQ_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GSRQ_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GSRQ_TEST_ASAN 1
#endif
#endif
#ifdef GSRQ_TEST_TSAN
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
// How much longer a wait for a job may be than on the plain build: the sanitizers run several times
// slower, and the emulated suites run every kernel on the CPU's fibers (the app's auto backend picks
// the emulated device, so its trainings too: on two loaded cores a 2-stage training of one tensor
// took past 30 s). A wait is a hang guard, never a timing assertion.
#if defined(GSRQ_TEST_TSAN) || defined(GSRQ_TEST_ASAN)
inline constexpr int kWaitScale = 10;
#elif defined(GSRQ_TEST_EMULATOR)
inline constexpr int kWaitScale = 4;
#else
inline constexpr int kWaitScale = 1;
#endif

inline int waitMs(int ms)
{
    return ms * kWaitScale;
}

// The message of the Error(InvalidInput) that f() throws; empty where it throws none (any other
// exception propagates, failing the test).
template <class F> std::string invalidInputMessage(F&& f)
{
    try {
        f();
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::InvalidInput)
            return e.what();
        throw;
    }
    return {};
}

// n × d standard-normal rows, seeded.
inline MatrixRF randomRows(Eigen::Index n, Eigen::Index d, std::uint64_t seed, float scale = 1.0f)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, scale);
    MatrixRF x(n, d);
    for (Eigen::Index i = 0; i < x.size(); ++i)
        x.data()[i] = g(rng);
    return x;
}

inline std::string pathIn(const QTemporaryDir& dir, const char* name)
{
    return dir.filePath(QString::fromUtf8(name)).toStdString();
}

// The gsrq binary run to completion: exit code (−1 timed out, −2 crashed) and its output.
struct Run {
    int code = -1;
    QByteArray out, err;
};

inline Run gsrqRun(const QStringList& args, int timeoutMs = 240000)
{
    QProcess p;
    p.start(cliPath(), args);
    Run r;
    if (!p.waitForFinished(waitMs(timeoutMs))) {
        p.kill();
        p.waitForFinished();
        r.err = "timed out";
        return r;
    }
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

} // namespace gsrq::test
