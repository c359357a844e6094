#pragma once
// Internal to the CUDA emulator: what its scheduler (emulator.cpp) and its runtime API
// (runtime.cpp) share.

#include "emulator.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gsrq::emulator::internal {

inline constexpr std::size_t kSharedPerBlock = 48 * 1024;
// The emulated device's shared memory per block with the opt-in: Hopper's 227 KiB, or
// GSRQ_EMULATOR_SHARED_OPTIN_KIB (read at every call, so a test can emulate a smaller device, e.g.
// 99 for an RTX 40 series or an L4).
std::size_t sharedOptin();
inline constexpr int kL2Bytes = 4 << 20;

// Sets cudaGetLastError()'s error (and cudaGetErrorString's reason, when one is given); returns it.
cudaError_t fail(cudaError_t e, std::string detail = {});

std::size_t pageBytes();

// Whether [p, p + bytes) lies in one live device allocation (p may be its end when bytes is 0).
bool deviceRange(const void* p, std::size_t bytes);

// The live device allocations: (start address, bytes), by address.
std::vector<std::pair<std::uintptr_t, std::size_t>> deviceAllocations();

// byte_counts.cpp: a launch's counting, begun before its first block (with its dynamic shared memory
// and the static shared section's bounds) and ended after its last. No-ops unless counting is on.
void beginLaunchCount(const void* kernel, dim3 grid, dim3 block, std::size_t dynamicShared, const void* shared,
                      const void* staticBegin, const void* staticEnd);
void endLaunchCount();

} // namespace gsrq::emulator::internal
