#include "gpu/device/device.h"

namespace gsrq::gpu {

int fp32LanesPerSm(int major, int minor)
{
    // FP32 results per clock per SM, from the CUDA programming guide's arithmetic throughput table.
    if (major == 6 && minor == 0)
        return 64; // P100
    if (major == 7)
        return 64; // V100, T4
    if (major == 8 && minor == 0)
        return 64; // A100
    return 128;    // Maxwell, other Pascal, GA10x/Ada (8.6, 8.9), Hopper (9.0), Blackwell
}

} // namespace gsrq::gpu
