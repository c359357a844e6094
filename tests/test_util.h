#pragma once
// Helpers shared by the test suites: seeded data and a scratch directory.

#include "tensor.h"

#include <QTemporaryDir>
#include <QtTest>

#include <random>
#include <string>

namespace gsrq::test {

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

} // namespace gsrq::test
