#pragma once
// The bytes each kernel launch moves, counted on the CUDA emulator: what the kernels do, to hold
// against the cost models (gpu/decode/roofline.h, the training estimate), not what they were meant
// to do.
//
// How: the emulated kernel sources are compiled with the compiler's thread-sanitizer
// instrumentation, which calls a hook before every load and store the code makes; the emulator's
// hooks (byte_counts.cpp) do nothing unless counting is on, and then sort each access by address
// into global memory (a live device allocation) or shared memory (the running block's dynamic or
// static shared memory); everything else (parameters, registers spilled to the stack) is neither.
// Builds whose compiler or sanitizer set cannot take the instrumentation (the AddressSanitizer
// build) have no counts: byteCountsBuilt() says so. No CUDA types here: tests include it as is.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gsrq::emulator {

struct LaunchBytes {
    const void* kernel = nullptr; // the kernel function
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    std::size_t dynamicShared = 0;
    // Global memory: the bytes of every load and store, and the distinct bytes (each byte of the
    // device's memory counted once per launch however often it is touched: what a cache as large as
    // the launch's footprint would take from DRAM).
    std::uint64_t globalRead = 0, globalWrite = 0;
    std::uint64_t globalReadDistinct = 0, globalWriteDistinct = 0;
    // Shared memory: the bytes of every load and store.
    std::uint64_t sharedRead = 0, sharedWrite = 0;
};

bool byteCountsBuilt();
// From now until stopByteCounts(), every launch is counted. Not for concurrent use with launches on
// other threads (the emulator runs one launch at a time; counting follows that launch).
void startByteCounts();
std::vector<LaunchBytes> stopByteCounts();

} // namespace gsrq::emulator
