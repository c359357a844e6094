// device_cuda.cu built for the CUDA emulator: device discovery answers with the emulated device.
#include "emulator.h"

#include "../device_cuda.cu"
