// A kernel of known traffic for tst_emulator's byte counters, compiled with the instrumentation the
// counters need (tests/CMakeLists.txt), apart from the suite, whose Qt and Eigen code it would
// instrument too.
#include "emulator.h"

namespace {

// Per thread: global reads of in[t] and in[64 + t] (the same 128 floats in every block), a write of
// out; shared: a float2 of the static array and a float of the dynamic one written, then read.
__global__ void countedKernel(const float* in, float* out)
{
    __shared__ float2 pairs[64];
    float* s = static_cast<float*>(gsrq::emulator::dynamicShared());
    const int t = int(threadIdx.x);
    const float a = in[t];
    pairs[t].x = a;
    pairs[t].y = -a;
    s[t] = in[64 + t];
    __syncthreads();
    const float2 p = pairs[63 - t];
    out[blockIdx.x * 64 + t] = p.x - p.y + s[(t + 1) % 64];
}

} // namespace

void launchCountedKernel(unsigned blocks, const float* in, float* out)
{
    gsrq::emulator::launch(countedKernel, blocks, 64, 64 * sizeof(float), nullptr, in, out);
}
