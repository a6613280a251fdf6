// The vectorizable float math of the C++ kernels (codegen/cpu_math.cpp), measured the way the
// kernels run it: the source is compiled by the system compiler with the runtime's flags
// (-march=$THUNDER_CPU_MARCH, native where unset) into a checker that evaluates each function in
// a `#pragma omp simd` loop over every float (every 97th by default; THUNDER_EXHAUSTIVE=1 for all
// 2^32) and compares with the double-precision C library in ulps of the float result. Skips when
// no C++ compiler runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "codegen/cpu_math.h"

using namespace thunder::codegen;

namespace {

const char* kCheckerHead = R"(#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#define THUNDER_INF (__builtin_inff())
#define THUNDER_NAN (__builtin_nanf(""))
inline uint32_t thunder_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float thunder_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
)";

const char* kCheckerBody = R"(
#define EVAL(fn) static void eval_##fn(const float* __restrict__ x, float* __restrict__ y, int n) { \
  _Pragma("omp simd") for (int i = 0; i < n; ++i) y[i] = thunder_##fn##f(x[i]); }
EVAL(exp)
EVAL(expm1)
EVAL(log)
EVAL(log1p)
EVAL(tanh)
EVAL(sigmoid)
EVAL(erf)
EVAL(erfc)
EVAL(sin)
EVAL(cos)
// Shaped like a generated kernel: 64-bit index, the functions composed (a branch that one
// function's inlined body leaves can keep the whole loop scalar).
void chain(const float* __restrict__ x, float* __restrict__ y, int64_t n0, int64_t n1) {
  _Pragma("omp simd") for (int64_t n = n0; n < n1; ++n) y[n] = thunder_erff(thunder_log1pf(thunder_expf(thunder_sigmoidf(x[n]) - thunder_tanhf(x[n]))) * 2.0f - thunder_expm1f(x[n]) + thunder_logf(x[n]) * thunder_erfcf(x[n]));
}
static double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }
struct Fn { const char* name; void (*eval)(const float*, float*, int); double (*ref)(double); };
static const Fn kFns[] = {
  {"exp", eval_exp, [](double x) { return std::exp(x); }},
  {"expm1", eval_expm1, [](double x) { return std::expm1(x); }},
  {"log", eval_log, [](double x) { return std::log(x); }},
  {"log1p", eval_log1p, [](double x) { return std::log1p(x); }},
  {"tanh", eval_tanh, [](double x) { return std::tanh(x); }},
  {"sigmoid", eval_sigmoid, sigmoid},
  {"erf", eval_erf, [](double x) { return std::erf(x); }},
  {"erfc", eval_erfc, [](double x) { return std::erfc(x); }},
  {"sin", eval_sin, [](double x) { return std::sin(x); }},
  {"cos", eval_cos, [](double x) { return std::cos(x); }},
};
// Error of y in ulps of the float nearest to r (subnormals: units of 2^-149); 1e30 for a wrong
// NaN, infinity or signed zero.
static double ulpError(float y, double r) {
  if (std::isnan(r)) return std::isnan(y) ? 0 : 1e30;
  const float rf = static_cast<float>(r);
  if (std::isinf(rf)) return y == rf ? 0 : 1e30;
  if (std::isnan(y) || std::isinf(y)) return 1e30;
  if (r == 0) return y == 0 && std::signbit(y) == std::signbit(r) ? 0 : 1e30;
  int e;
  std::frexp(r, &e);
  return std::fabs(static_cast<double>(y) - r) / std::ldexp(1.0, std::max(e - 24, -149));
}
int main(int argc, char** argv) {
  const uint64_t stride = std::strtoull(argv[1], nullptr, 10);
  const uint64_t count = ((uint64_t(1) << 32) + stride - 1) / stride, block = 4096;
  const uint64_t blocks = (count + block - 1) / block;
  for (const Fn& fn : kFns) {
    double worst = 0;
    uint32_t worstBits = 0;
    #pragma omp parallel
    {
      std::vector<float> x(block), y(block);
      double w = 0;
      uint32_t wb = 0;
      #pragma omp for schedule(dynamic, 64)
      for (uint64_t b = 0; b < blocks; ++b) {
        const uint64_t i0 = b * block, n = std::min(block, count - i0);
        for (uint64_t i = 0; i < n; ++i) {
          const uint32_t u = static_cast<uint32_t>((i0 + i) * stride);
          std::memcpy(&x[i], &u, 4);
        }
        fn.eval(x.data(), y.data(), static_cast<int>(n));
        for (uint64_t i = 0; i < n; ++i) {
          const double err = ulpError(y[i], fn.ref(static_cast<double>(x[i])));
          if (err > w) { w = err; std::memcpy(&wb, &x[i], 4); }
        }
      }
      #pragma omp critical
      if (w > worst) { worst = w; worstBits = wb; }
    }
    float wx;
    std::memcpy(&wx, &worstBits, 4);
    std::printf("%s %.4f %a\n", fn.name, worst, wx);
  }
  // Inputs the sweep may step over: signed zeros, infinities, NaN, domain edges, thresholds.
  const float specials[] = {0.0f, -0.0f, THUNDER_INF, -THUNDER_INF, THUNDER_NAN, -THUNDER_NAN,
                            1.0f, -1.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f, -0x1p-126f, 0x1.fffffep127f,
                            -0x1.fffffep127f, 88.7228394f, 88.7228317f, -87.3365479f, -103.972084f,
                            -103.278931f, -2.0f, 10.0546875f, 9.19422f, -9.19422f, 3.9192059f,
                            0.875f, 2.2f, -0.875f, -2.2f, 0x1.8p-24f, -0x1.fffffep-1f,
                            0x1p28f, -0x1p28f, 0x1.fffffep27f, 0x1.921fb6p+0f, 0x1.921fb6p+1f,
                            0x1.2d97c8p+3f, 0x1.fffffep-30f, 0x1p-29f, 16367173.0f, 0x1.9d2a36p+117f};
  const int ns = sizeof(specials) / sizeof(float);
  for (const Fn& fn : kFns) {
    float y[64];
    fn.eval(specials, y, ns);
    for (int i = 0; i < ns; ++i) {
      const double err = ulpError(y[i], fn.ref(static_cast<double>(specials[i])));
      if (err > 8) std::printf("special %s(%a) = %a, expected %a\n", fn.name, specials[i], y[i], fn.ref(specials[i]));
    }
  }
  return 0;
}
)";

std::string run(const std::string& cmd, int& rc) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    rc = -1;
    return out;
  }
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  rc = pclose(pipe);
  return out;
}

}  // namespace

TEST(CpuMath, FunctionTableNamesDefinedFunctions) {
  std::string src = cpuMathSource();
  for (const char* op : {"exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "erfc", "sin", "cos"}) {
    std::string fn = cpuMathFunction(op);
    ASSERT_EQ(fn, std::string("thunder_") + op + "f");
    EXPECT_NE(src.find("THUNDER_MATH float " + fn + "(float x)"), std::string::npos) << fn;
  }
  EXPECT_EQ(cpuMathFunction("tan"), "");
  EXPECT_EQ(cpuMathFunction("lgamma"), "");
}

TEST(CpuMath, UlpErrorOverTheFloatsAndSpecialValues) {
  const char* cxxEnv = std::getenv("CXX");
  std::string cxx = cxxEnv ? cxxEnv : "c++";
  int rc = 0;
  run(cxx + " --version > /dev/null 2>&1", rc);
  if (rc != 0) GTEST_SKIP() << "no C++ compiler";
  std::string dir = "/tmp/thunder_cpu_math_" + std::to_string(getpid());
  run("mkdir -p " + dir, rc);
  {
    std::ofstream f(dir + "/check.cpp");
    f << kCheckerHead << cpuMathSource() << kCheckerBody;
  }
  // The runtime's flags (csrc/runtime/fusion_runtime.cpp); the report says which loops vectorized.
  const char* marchEnv = std::getenv("THUNDER_CPU_MARCH");
  std::string march = std::string(" -march=") + (marchEnv && *marchEnv ? marchEnv : "native");
  std::string log = run(cxx + " -O3" + march + " -fopenmp -fno-math-errno -fno-trapping-math -std=c++17 " +
                            "-fopt-info-vec-optimized -o " + dir + "/check " + dir + "/check.cpp 2>&1",
                        rc);
  ASSERT_EQ(rc, 0) << log;
  // Every evaluation loop vectorized (each is on a line of its own): the math is branch-free and
  // loads no table (a gather, which GCC leaves scalar when tuning for generic x86-64 or AMD Zen,
  // and on NEON). That needs a fused multiply-add instruction (x86-64-v3 and up, every AArch64):
  // without one (x86-64 up to v2) __builtin_fma is a call to the C library's fma and the loops
  // stay scalar, with the same results; there only the error bounds are checked.
  std::string macros = run(cxx + march + " -dM -E -x c++ /dev/null", rc);
  ASSERT_EQ(rc, 0) << macros;
  const bool fma = macros.find("#define __FMA__ ") != std::string::npos ||
                   macros.find("#define __ARM_FEATURE_FMA ") != std::string::npos;
  if (!fma) std::cout << "no fused multiply-add with" << march << ": vectorization not checked\n";
  std::string src = std::string(kCheckerHead) + cpuMathSource() + kCheckerBody;
  std::istringstream lines(src);
  std::string line;
  int loops = 0;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.rfind("EVAL(", 0) != 0 && line.find("_Pragma(\"omp simd\") for (int64_t") == std::string::npos) continue;
    ++loops;
    std::string at = "check.cpp:" + std::to_string(number) + ":";
    bool vectorized = false;
    for (size_t pos = log.find(at); pos != std::string::npos; pos = log.find(at, pos + 1)) {
      std::string report = log.substr(pos, log.find('\n', pos) - pos);
      vectorized |= report.find("optimized: loop vectorized") != std::string::npos;
    }
    EXPECT_TRUE(vectorized || !fma) << "not vectorized with" << march << ": " << line << "\n" << log;
  }
  EXPECT_EQ(loops, 11);
  const char* exhaustive = std::getenv("THUNDER_EXHAUSTIVE");
  std::string stride = exhaustive && std::string(exhaustive) == "1" ? "1" : "97";
  std::string out = run(dir + "/check " + stride, rc);
  run("rm -rf " + dir, rc);
  ASSERT_EQ(rc, 0) << out;
  std::cout << "max ulp error (stride " << stride << "):\n" << out;
  EXPECT_EQ(out.find("special"), std::string::npos) << out;
  // The bounds cpu_math.cpp states (the maxima over every float).
  const std::map<std::string, double> bound = {{"exp", 1.08}, {"expm1", 1.6},  {"log", 0.85},
                                               {"log1p", 0.94}, {"tanh", 1.2},  {"sigmoid", 2.41},
                                               {"erf", 1.19},   {"erfc", 4.81}, {"sin", 0.51},
                                               {"cos", 0.51}};
  std::istringstream in(out);
  std::string name, at;
  double ulps;
  int seen = 0;
  while (in >> name) {
    if (name == "special") break;
    in >> ulps >> at;
    ASSERT_TRUE(bound.count(name)) << name;
    EXPECT_LE(ulps, bound.at(name)) << name << " at " << at;
    ++seen;
  }
  EXPECT_EQ(seen, 10) << out;
}
