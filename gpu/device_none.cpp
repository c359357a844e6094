#include "device.h"

namespace gsrq::gpu {

DeviceQuery queryDevices()
{
    DeviceQuery q;
    q.message = "built without CUDA (nvcc was not found at configure time); the CPU backend is used";
    return q;
}

} // namespace gsrq::gpu
