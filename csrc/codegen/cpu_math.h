// Float math for the generated C++ kernels: branch-free polynomial approximations that GCC and
// Clang vectorize inside `#pragma omp simd` loops (libm's expf, tanhf, ... are scalar calls that
// block vectorization). Double precision keeps libm.
#pragma once

#include <string>

namespace thunder::codegen {

/// C++ source defining `thunder_<op>f(float)` for each op `cpuMathFunction` names; it expects
/// `thunder_bits` and `thunder_float` (the bit casts of the C++ kernel prelude) to be defined.
const char* cpuMathSource();

/// The vectorizable float function for a unary prim (`exp` -> `thunder_expf`), or "" when the
/// kernels use the C library's. Maximum errors, measured over every float by
/// tests/cpp/test_cpu_math.cpp, are listed in cpu_math.cpp.
std::string cpuMathFunction(const std::string& op);

}  // namespace thunder::codegen
