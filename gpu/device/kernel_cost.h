#pragma once
// What one kernel launch moves and computes, as a cost model counts it from the kernel's code (the
// decode step's in gpu/decode/roofline.h, a clustering pass's in gpu/cluster/pass_costs.h). The CUDA
// emulator counts the same launches (gpu/emulator/byte_counts.h), and the GPU suites hold each
// launch to its term.

#include <string>

namespace gsrq::gpu {

struct KernelCost {
    std::string kernel;
    double hbmBytes = 0;    // distinct bytes of device memory read and written (each byte once per launch)
    double l2Bytes = 0;     // bytes read again after the first read: codeword gathers, books read per sequence
    double sharedBytes = 0; // bytes the threads load and store in shared memory (a warp's load of 4-byte
                            // words moves 128 of them, one shared-memory cycle's worth)
    double flops = 0;
    bool library = false;     // a library call (cuBLAS), which the emulator runs as host code: not counted there
    bool tensorCores = false; // its flops are tensor-core products (at the GEMM's rate, as a library GEMM's)
};

} // namespace gsrq::gpu
