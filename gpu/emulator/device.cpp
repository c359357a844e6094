// device_cuda.cu built for the CUDA emulator: device discovery answers with the emulated device.
#include "emulator.h"

#include "gpu/device/device_cuda.cu"
