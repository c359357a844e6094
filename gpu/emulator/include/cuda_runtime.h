#pragma once
// The CUDA emulator's cuda_runtime.h: its runtime API (cuda_runtime_api.h).
#include <cuda_runtime_api.h>
