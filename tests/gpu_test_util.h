#pragma once
// For the suites that test the GPU side: whether a CUDA device is there, and why not.

#include "device.h"

#include <QString>

namespace gsrq::test {

inline bool haveCudaDevice(QString* why)
{
    const auto q = gpu::queryDevices();
    if (q.devices.empty())
        *why = QString::fromStdString("no CUDA device: " + q.message);
    return !q.devices.empty();
}

} // namespace gsrq::test
