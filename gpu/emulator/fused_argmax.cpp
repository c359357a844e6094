// fused_argmax.cu built for the CUDA emulator: the built-ins nvcc provides implicitly come first.
#include "emulator.h"

#include "gpu/cluster/fused_argmax.cu"
