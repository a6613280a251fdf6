// Code generation for fusion regions: CUDA C++ (compiled at run time with NVRTC) and C++ with
// OpenMP (compiled by the system compiler), both from the kernel IR.
#pragma once

#include <string>

#include "codegen/kernel_ir.h"

namespace thunder::codegen {

/// The layout of the int64 geometry block both kinds of kernel receive (R = iteration rank,
/// I = number of inputs): sizes[R], strides[I][R] (in elements, 0 on broadcast dims), numel,
/// row length (the last size), number of rows.
struct Geometry {
  static size_t length(size_t rank, size_t inputs) { return rank + inputs * rank + 3; }
};

/// CUDA source of a kernel program. Entry points: `<name>` (generic strides) and, for pointwise
/// programs, `<name>_vec` (every input contiguous and 16-byte aligned: vectorized accesses).
/// Reduction programs launch one block per row.
std::string emitCuda(const KernelProgram& prog);

/// C++ source of a kernel program with entry point `extern "C" void <name>(void* const* inputs,
/// void* const* outputs, const int64_t* geometry)`. `innerStrides` has one character per input:
/// '1' (unit stride along the last dimension), '0' (broadcast along it) or 'g' (general); it is
/// baked into the source so the inner loop vectorizes.
std::string emitCpp(const KernelProgram& prog, const std::string& innerStrides);

}  // namespace thunder::codegen
