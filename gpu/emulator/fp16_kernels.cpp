// fp16_kernels.cu built for the CUDA emulator: the built-ins nvcc provides implicitly come first.
#include "emulator.h"

#include "gpu/decode/fp16_kernels.cu"
