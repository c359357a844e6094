#pragma once
// For the suites that test the GPU side: whether a CUDA device is there, and why not. The same
// suites are built twice: against gsrq_gpu (a real device, or none) and against the CUDA emulator
// (GSRQ_TEST_EMULATOR: every kernel runs on the CPU; the no-device paths are the other build's).

#include "gpu/device/device.h"

#include <QString>

namespace gsrq::test {

#if defined(GSRQ_TEST_EMULATOR)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

inline bool haveCudaDevice(QString* why)
{
    const auto q = gpu::queryDevices();
    if (q.devices.empty())
        *why = QString::fromStdString("no CUDA device: " + q.message);
    return !q.devices.empty();
}

// Why a no-device test does not run here.
inline const char* deviceIsPresent()
{
    return kEmulated ? "built on the CUDA emulator: the no-device path is tested by the suite built without it"
                     : "a CUDA device is present";
}

} // namespace gsrq::test
