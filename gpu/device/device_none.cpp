#include "gpu/device/device.h"

namespace gsrq::gpu {

DeviceQuery queryDevices()
{
    DeviceQuery q;
    q.message = "built without CUDA (nvcc was not found at configure time)";
    return q;
}

} // namespace gsrq::gpu
