#pragma once
// Internal to the CUDA emulator: what its scheduler (emulator.cpp) and its runtime API
// (runtime.cpp) share.

#include "emulator.h"

#include <cstddef>
#include <string>

namespace gsrq::emulator::internal {

inline constexpr std::size_t kSharedPerBlock = 48 * 1024;
inline constexpr std::size_t kSharedOptin = 227 * 1024; // Hopper's opt-in limit per block
inline constexpr int kL2Bytes = 4 << 20;

// Sets cudaGetLastError()'s error (and cudaGetErrorString's reason, when one is given); returns it.
cudaError_t fail(cudaError_t e, std::string detail = {});

std::size_t pageBytes();

// Whether [p, p + bytes) lies in one live device allocation (p may be its end when bytes is 0).
bool deviceRange(const void* p, std::size_t bytes);

} // namespace gsrq::emulator::internal
