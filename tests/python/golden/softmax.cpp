// thunder fusion cpuFusion0 (C++), iteration rank 2, 2 row reduction phase(s)
// inputs: t_0:f32
// outputs: t8:f32
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#define THUNDER_DEVICE
#define THUNDER_ROW_LEN L
// Fewer elements run on the calling thread: waking the OpenMP team costs more than they take.
#define THUNDER_PARALLEL_MIN 32768
#define THUNDER_INF (__builtin_inff())
#define THUNDER_NAN (__builtin_nanf(""))
inline uint32_t thunder_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float thunder_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

THUNDER_DEVICE inline float thunder_bf16_to_float(uint16_t h) {
  return thunder_float(static_cast<uint32_t>(h) << 16);
}
THUNDER_DEVICE inline uint16_t thunder_float_to_bf16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint16_t hw;  // one instruction: round to nearest even
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hw) : "f"(f));
  return hw;
#endif
  uint32_t u = thunder_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // nan
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
THUNDER_DEVICE inline float thunder_f16_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float hw;
  asm("cvt.f32.f16 %0, %1;" : "=f"(hw) : "h"(h));
  return hw;
#endif
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) { man <<= 1; --exp; }
      u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return thunder_float(u);
}
THUNDER_DEVICE inline uint16_t thunder_float_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t hw;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hw) : "f"(f));
  return hw;
#endif
  uint32_t u = thunder_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // nan
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // overflow to inf
  if (a < 0x38800000u) {                                              // subnormal or zero
    float af = thunder_float(a);
    uint32_t m = static_cast<uint32_t>(af * 16777216.0f + 0.5f);        // af / 2^-24, rounded
    float back = static_cast<float>(m);
    if (back - af * 16777216.0f == 0.5f && (m & 1u)) --m;              // ties to even
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - ((127 - 15) << 23);
  return static_cast<uint16_t>(sign | (r >> 13));
}
// Float to integer: C++ leaves a value outside the target's range (inf, NaN) undefined. These
// give what eager gives. On the CPU that is the host's truncating instruction: on x86 every
// out-of-range value becomes the 32- or 64-bit minimum (the narrower integers truncate the 32-bit
// result, as eager's compiled casts do); elsewhere, and on CUDA (cvt.rzi), values saturate and NaN
// becomes 0.
// GCC folds a float converted to an integer and back, (float)(int)x, into trunc(x) under
// -fno-trapping-math, which keeps the sign of a negative zero: -0.3 became -0.0 where the integer
// 0 converts to +0.0 (a / a.to(torch.int64) was inf, eager's -inf: fuzzer seed 18958). The
// barrier hides the conversion from that fold; it costs nothing else (the loop still vectorizes).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__) && __GNUC__ >= 12
#define THUNDER_INT_BARRIER(x) __builtin_assoc_barrier(x)
#else
#define THUNDER_INT_BARRIER(x) (x)
#endif
THUNDER_DEVICE inline int64_t thunder_f2i64(double x) {
#if defined(__CUDA_ARCH__)
  return __double2ll_rz(x);
#elif defined(__x86_64__) || defined(__i386__)
  return THUNDER_INT_BARRIER((x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? static_cast<int64_t>(x) : INT64_MIN);
#else
  return THUNDER_INT_BARRIER(x != x ? 0 : x <= -9223372036854775808.0 ? INT64_MIN : x >= 9223372036854775808.0 ? INT64_MAX : static_cast<int64_t>(x));
#endif
}
THUNDER_DEVICE inline int32_t thunder_f2i32(double x) {
#if defined(__CUDA_ARCH__)
  return __double2int_rz(x);
#elif defined(__x86_64__) || defined(__i386__)
  return THUNDER_INT_BARRIER((x > -2147483649.0 && x < 2147483648.0) ? static_cast<int32_t>(x) : INT32_MIN);
#else
  return THUNDER_INT_BARRIER(x != x ? 0 : x <= -2147483648.0 ? INT32_MIN : x >= 2147483647.0 ? INT32_MAX : static_cast<int32_t>(x));
#endif
}
THUNDER_DEVICE inline float thunder_round_bf16(float x) { return thunder_bf16_to_float(thunder_float_to_bf16(x)); }
THUNDER_DEVICE inline float thunder_round_f16(float x) { return thunder_f16_to_float(thunder_float_to_f16(x)); }
// ---- vectorizable float math (thunder codegen/cpu_math.cpp) ----
// Always inlined: a kernel whose loop holds many calls (four interleaved copies of its body, see
// emitCpp) reaches GCC's inlining limits, and one call left in the loop keeps it scalar. A kernel
// too long to be a simd loop defines THUNDER_MATH first: hundreds of forced copies (RWKV's
// backward: 292 exp calls) made one library a 26 s compile, 18 s where GCC chooses.
#ifndef THUNDER_MATH
#define THUNDER_MATH static inline __attribute__((always_inline))
#endif
THUNDER_MATH float thunder_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
// c ? a : b with both evaluated: a `?:` whose arm calls a function becomes a branch, and the
// predicated booleans that if-conversion then builds can stop GCC from vectorizing the loop.
THUNDER_MATH float thunder_sel(bool c, float a, float b) { return c ? a : b; }
THUNDER_MATH float thunder_pow2(int32_t k) {  // 2^k for -126 <= k <= 127
  return thunder_float(static_cast<uint32_t>(k + 127) << 23);
}
THUNDER_MATH float thunder_copysign(float m, float s) {
  return thunder_float((thunder_bits(m) & 0x7fffffffu) | (thunder_bits(s) & 0x80000000u));
}
// x = n ln2 + r with |r| <= ln2/2; returns expm1(r) and n. Needs |x| <= 104.
THUNDER_MATH float thunder_exp_reduce(float x, int32_t& n) {
  const float shifter = 0x1.8p23f;  // adding it rounds x/ln2 to an integer in the low bits
  const float kn = thunder_fma(x, 0x1.715476p+0f, shifter);
  n = static_cast<int32_t>(thunder_bits(kn) - thunder_bits(shifter));
  const float nf = kn - shifter;
  float r = thunder_fma(nf, -0x1.62e430p-1f, x);  // exact: n ln2_hi and x share the grid 2^-24
  r = thunder_fma(nf, 0x1.05c610p-29f, r);        // ln2 - ln2_hi
  float q = thunder_fma(r, 0x1.6c8b90p-10f, 0x1.120abap-7f);
  q = thunder_fma(q, r, 0x1.555584p-5f);
  q = thunder_fma(q, r, 0x1.5554dep-3f);
  q = thunder_fma(q, r, 0x1.0p-1f);
  return thunder_fma(r * r, q, r);  // r + r^2 q(r)
}
// e^x as (1 + expm1(r)) 2^n, the power split in two so subnormal results round once.
THUNDER_MATH float thunder_exp_scale(float em1r, int32_t n) {
  const int32_t h = n >> 1;
  return thunder_fma(em1r, thunder_pow2(h), thunder_pow2(h)) * thunder_pow2(n - h);
}
THUNDER_MATH float thunder_expf(float x) {
  float xc = thunder_sel(x < -104.0f, -104.0f, x);  // e^-104 rounds to 0, e^89 overflows
  xc = thunder_sel(xc > 89.0f, 89.0f, xc);
  int32_t n;
  const float em1r = thunder_exp_reduce(xc, n);
  const float y = thunder_exp_scale(em1r, n);
  return thunder_sel(x != x, x, y);
}
THUNDER_MATH float thunder_expm1f(float x) {
  float xc = thunder_sel(x < -30.0f, -30.0f, x);  // expm1(-30) rounds to -1
  xc = thunder_sel(xc > 89.0f, 89.0f, xc);
  int32_t n;
  const float em1r = thunder_exp_reduce(xc, n);
  const float s = thunder_pow2(n < 24 ? n : 24);
  const float small = thunder_fma(s, em1r, s - 1.0f);  // 2^n expm1(r) + (2^n - 1), s - 1 exact
  const float y = thunder_sel(n <= 24, small, thunder_exp_scale(em1r, n));  // -1: below 1/2 ulp
  return thunder_sel(x != x, x, thunder_sel(x == 0.0f, x, y));  // keeps -0
}
// log(x) + c for finite x > 0 in the normal range: x = 2^e m, sqrt(1/2) <= m < sqrt(2),
// log(x) = e ln2 + log1p(m - 1).
THUNDER_MATH float thunder_log_core(float x, float e0, float c) {
  const uint32_t t = thunder_bits(x) - 0x3f3504f3u;
  const int32_t e = static_cast<int32_t>(t) >> 23;
  const float f = thunder_float(thunder_bits(x) - (static_cast<uint32_t>(e) << 23)) - 1.0f;
  const float ef = static_cast<float>(e) + e0;
  float p = thunder_fma(f, 0x1.1893d0p-4f, -0x1.d36906p-4f);
  p = thunder_fma(p, f, 0x1.df313ap-4f);
  p = thunder_fma(p, f, -0x1.fd66b4p-4f);
  p = thunder_fma(p, f, 0x1.23d122p-3f);
  p = thunder_fma(p, f, -0x1.5558a6p-3f);
  p = thunder_fma(p, f, 0x1.999d4ap-3f);
  p = thunder_fma(p, f, -0x1.000002p-2f);
  p = thunder_fma(p, f, 0x1.555554p-2f);
  const float f2 = f * f;
  const float lo =
      thunder_fma(f2 * f, p, thunder_fma(ef, 0x1.7f7d1cp-20f, thunder_fma(f2, -0.5f, c)));
  return thunder_fma(ef, 0x1.62e400p-1f, f + lo);  // e ln2_hi is exact
}
THUNDER_MATH float thunder_logf(float x) {
  const bool sub = x < 0x1p-126f;
  const float xs = thunder_sel(sub, x * 0x1p23f, x);  // subnormals scaled to normal
  const float y = thunder_log_core(xs, thunder_sel(sub, -23.0f, 0.0f), 0.0f);
  const float r = thunder_sel(x == THUNDER_INF, x, thunder_sel(x == 0.0f, -THUNDER_INF, y));
  return thunder_sel(x < 0.0f, THUNDER_NAN, thunder_sel(x != x, x, r));
}
THUNDER_MATH float thunder_log1pf(float x) {
  const float u = 1.0f + x;
  const float c = (x - (u - 1.0f)) / u;  // log1p(x) = log(u) + log(1 + c) and log(1 + c) ~ c
  const float y = thunder_log_core(u, 0.0f, c);
  const float r0 = thunder_sel(x == 0.0f, x, y);  // keeps -0
  const float r = thunder_sel(x == THUNDER_INF, x, thunder_sel(x == -1.0f, -THUNDER_INF, r0));
  return thunder_sel(x < -1.0f, THUNDER_NAN, thunder_sel(x != x, x, r));
}
THUNDER_MATH float thunder_tanhf(float x) {
  float a = thunder_float(thunder_bits(x) & 0x7fffffffu);
  const float a2 = a * a;  // below 0.625: a + a^3 P(a^2)
  float p = thunder_fma(a2, 0x1.3fb08ep-9f, -0x1.168248p-7f);
  p = thunder_fma(p, a2, 0x1.65a42ap-6f);
  p = thunder_fma(p, a2, -0x1.ba1da6p-5f);
  p = thunder_fma(p, a2, 0x1.111142p-3f);
  p = thunder_fma(p, a2, -0x1.555556p-2f);
  const float small = thunder_fma(a, a2 * p, a);
  a = thunder_sel(a > 10.0f, 10.0f, a);  // tanh(10) rounds to 1
  // tanh(a) = 1 - 2 / (e^(2a) + 1), e^(2a) = 2^n (1 + expm1(r)) with 0 <= n <= 29: the sum
  // 2^n expm1(r) + (2^n + 1) rounds once (expm1 of 2a with its special cases costs more).
  int32_t n;
  const float em1r = thunder_exp_reduce(2.0f * a, n);
  const float s = thunder_pow2(n);
  const float large = 1.0f - 2.0f / thunder_fma(s, em1r, s + 1.0f);
  return thunder_copysign(thunder_sel(a < 0.625f, small, large), x);
}
THUNDER_MATH float thunder_sigmoidf(float x) {
  const float e = thunder_expf(-thunder_float(thunder_bits(x) & 0x7fffffffu));
  return thunder_sel(x >= 0.0f, 1.0f, e) / (1.0f + e);  // e^x / (1 + e^x) for x < 0: no overflow
}
// erf for |x| < 0.875 as x P(x^2); above, erfc(x) = e^(-x^2) R(1/x) with R fitted on
// [0.875, 2.2] and [2.2, 10.1] (erfc underflows to 0 beyond 10.06).
// erf(a) = hi + lo for 0 <= a < 0.875, hi = a * c0 rounded (2/sqrt(pi) = c0 + c1), so that
// erfc = (1 - hi) - lo keeps the bits 1 - erf cancels.
THUNDER_MATH float thunder_erf_small(float a, float& lo) {
  const float a2 = a * a;
  float p = thunder_fma(a2, 0x1.71207ep-14f, -0x1.b01558p-11f);
  p = thunder_fma(p, a2, 0x1.556934p-8f);
  p = thunder_fma(p, a2, -0x1.b81ea6p-6f);
  p = thunder_fma(p, a2, 0x1.ce2ec4p-4f);
  p = thunder_fma(p, a2, -0x1.812746p-2f);
  const float hi = a * 0x1.20dd76p+0f;
  lo = thunder_fma(a, 0x1.20dd76p+0f, -hi) + thunder_fma(a, -0x1.f7ac92p-25f, a * (a2 * p));
  return hi;
}
THUNDER_MATH float thunder_erfc_large(float a) {
  float ac = thunder_sel(a < 0.875f, 0.875f, a);
  ac = thunder_sel(ac > 10.1f, 10.1f, ac);
  const float t = 1.0f / ac;
  const bool far = ac >= 2.2f;
  float p = thunder_sel(far, -0x1.df6eeap-3f, 0x1.e63e94p-8f);
  p = thunder_fma(p, t, thunder_sel(far, 0x1.a9ae3ap-1f, -0x1.fd99f8p-5f));
  p = thunder_fma(p, t, thunder_sel(far, -0x1.372240p+0f, 0x1.df33f2p-3f));
  p = thunder_fma(p, t, thunder_sel(far, 0x1.ae8a5ap-1f, -0x1.07fd20p-1f));
  p = thunder_fma(p, t, thunder_sel(far, -0x1.7037e0p-4f, 0x1.6e8958p-1f));
  p = thunder_fma(p, t, thunder_sel(far, -0x1.141d08p-2f, -0x1.29e146p-1f));
  p = thunder_fma(p, t, thunder_sel(far, -0x1.1aa9e8p-10f, 0x1.377fcap-4f));
  p = thunder_fma(p, t, thunder_sel(far, 0x1.20e468p-1f, 0x1.1b341ap-1f));
  p = thunder_fma(p, t, thunder_sel(far, -0x1.2ea18ep-20f, 0x1.75726cp-11f));
  const float hi = ac * ac, lo = thunder_fma(ac, ac, -hi);  // a^2 = hi + lo exactly
  return thunder_expf(-hi) * (p * (1.0f - lo));             // e^(-hi-lo) ~ e^-hi (1 - lo)
}
// erf(a) = 1 - e^(-a^2) R(a) for 0.875 <= a <= 3.92 (erf rounds to 1 above 3.83), R(a) =
// e^(a^2) erfc(a) as a polynomial in a - 2.3975 fitted with weight e^(-a^2) (the error it makes
// in erf: 0.02 ulp): no division, one set of coefficients, and e^(-a^2) in the normal range
// (2^-23 < e^(-a^2) < 1, so 2^n (1 + expm1(r)) needs no subnormal split and no clamps).
THUNDER_MATH float thunder_erf_large(float a) {
  float ac = thunder_sel(a < 0.875f, 0.875f, a);
  ac = thunder_sel(ac > 3.92f, 3.92f, ac);
  const float u = ac - 0x1.32e148p+1f;
  float p = thunder_fma(u, -0x1.2ee344p-15f, -0x1.1c86aap-14f);
  p = thunder_fma(p, u, -0x1.348c1ep-13f);
  p = thunder_fma(p, u, 0x1.46a010p-12f);
  p = thunder_fma(p, u, -0x1.8b81c4p-11f);
  p = thunder_fma(p, u, 0x1.8086fcp-9f);
  p = thunder_fma(p, u, -0x1.2a729cp-7f);
  p = thunder_fma(p, u, 0x1.c35840p-6f);
  p = thunder_fma(p, u, -0x1.468dcap-4f);
  p = thunder_fma(p, u, 0x1.bfe4bap-3f);
  const float hi = ac * ac, lo = thunder_fma(ac, ac, -hi);  // a^2 = hi + lo exactly
  int32_t n;
  const float em1r = thunder_exp_reduce(-hi, n);
  const float e = thunder_fma(em1r, thunder_pow2(n), thunder_pow2(n));  // e^-hi
  return 1.0f - e * (p * (1.0f - lo));  // e^(-hi-lo) ~ e^-hi (1 - lo)
}
THUNDER_MATH float thunder_erff(float x) {
  const float a = thunder_float(thunder_bits(x) & 0x7fffffffu);
  float lo;
  const float hi = thunder_erf_small(a, lo);
  const float y = thunder_sel(a < 0.875f, hi + lo, thunder_erf_large(a));
  return thunder_copysign(y, x);
}
THUNDER_MATH float thunder_erfcf(float x) {
  const float a = thunder_float(thunder_bits(x) & 0x7fffffffu);
  const bool small = a < 0.875f;
  float lo;
  const float hi = thunder_erf_small(a, lo), c = thunder_erfc_large(a);
  const float pos = thunder_sel(small, (1.0f - hi) - lo, c);
  const float neg = thunder_sel(small, (1.0f + hi) + lo, 2.0f - c);
  return thunder_sel(x < 0.0f, neg, pos);
}
// sin and cos: x = N pi/2 + r with |r| <= pi/4 (+ rounding), evaluated in double and rounded
// once to float (under 0.51 ulp). |x| < 2^28: r = x - k pi/2 in double with pi/2 split in three
// (x - k P1 is exact: both are multiples of 2^-52 where x is not below 2^-29, k = 0 where it is).
// Above: |x| = M 2^e with an integer M < 2^24 and 5 <= e <= 104, written e = 5 + 24 j + b with
// 0 <= b < 24, and x 2/pi mod 4 = M 2^b G_j mod 4 with G_j = 2^(5 + 24 j) 2/pi mod 4. The five
// G_j are constants picked by selects, not rows of a table: a table lookup is a gather, and GCC
// keeps the loop scalar where it does not use the gather instruction (tuned for generic x86-64
// or AMD Zen) or has none (NEON). Each G_j is held in five parts of 24 bits (bits 2^1...2^-22,
// 2^-23...2^-46, ...): each product of a part with M 2^b (24 significant bits) is exact, and so
// is its remainder mod 4; r keeps about 2^-47 of relative precision where it is smallest (a
// float lies at least about 2^-29 from a multiple of pi/2).
THUNDER_MATH double thunder_mod4(double v) { return v - 4.0 * __builtin_floor(v * 0.25); }
// g_j for j = 0...4; j is a double so that GCC does not turn the selects into a switch (a table).
THUNDER_MATH double thunder_pick(double j, double g0, double g1, double g2, double g3, double g4) {
  return j < 0.5 ? g0 : (j < 1.5 ? g1 : (j < 2.5 ? g2 : (j < 3.5 ? g3 : g4)));
}
// r and the quadrant N mod 4 of a = |x| (finite).
THUNDER_MATH double thunder_trig_reduce(float a, double& q) {
  const double ad = static_cast<double>(a);
  const double k = __builtin_rint(ad * 0x1.45f306dc9c883p-1);
  double r = __builtin_fma(-k, 0x1.921fb54442d18p+0, ad);
  r = __builtin_fma(-k, 0x1.1a62633145c07p-54, r);
  r = __builtin_fma(-k, -0x1.f1976b7ed8fbcp-110, r);
  const uint32_t bits = thunder_bits(a);
  int32_t i = static_cast<int32_t>(bits >> 23) - 127 - 23 - 5;  // e - 5
  i = i < 0 ? 0 : (i > 99 ? 99 : i);
  const int32_t j = (i >= 24) + (i >= 48) + (i >= 72) + (i >= 96);
  const double m = static_cast<double>(static_cast<int32_t>((bits & 0x7fffffu) | 0x800000u)) *
                   static_cast<double>(thunder_pow2(i - 24 * j));  // M 2^b < 2^47
  const double jd = static_cast<double>(j);
  // Parts 0...4 of G_j.
  const double g0 = thunder_pick(jd, 0x1.7cc1bp-2, 0x1.c9c88p+0, 0x1.529fc2p+1, 0x1.d5f478p-1,
                                  0x1.534ddcp+1);
  const double g1 = thunder_pick(jd, 0x1.c9c88p-24, 0x1.529fc2p-23, 0x1.d5f478p-25, 0x1.534ddcp-23,
                                  0x1.b6c5p-28);
  const double g2 = thunder_pick(jd, 0x1.529fc2p-47, 0x1.d5f478p-49, 0x1.534ddcp-47, 0x1.b6c5p-52,
                                  0x1.5993c4p-47);
  const double g3 = thunder_pick(jd, 0x1.d5f478p-73, 0x1.534ddcp-71, 0x1.b6c5p-76, 0x1.5993c4p-71,
                                  0x1.c820fp-74);
  const double g4 = thunder_pick(jd, 0x1.534ddcp-95, 0x1.b6c5p-100, 0x1.5993c4p-95, 0x1.c820fp-98,
                                  0x1.e5163ap-95);
  // M 2^b g0 < 2^49 and M 2^b g1 < 2^25, each reduced mod 4: their sum is exact.
  const double hi = thunder_mod4(thunder_mod4(m * g0) + thunder_mod4(m * g1));
  const double t2 = m * g2, t3 = m * g3, t4 = m * g4;  // below 2, 2^-23 and 2^-47
  const double n = __builtin_rint(hi + t2);
  const double rl = ((((hi - n) + t2) + t3) + t4) * 0x1.921fb54442d18p+0;
  const bool large = a >= 0x1p28f;
  q = thunder_mod4(large ? n : k);
  return large ? rl : r;
}
THUNDER_MATH double thunder_sin_poly(double r) {  // |r| <= 0.79: Taylor to r^13 (error < 2^-37)
  const double r2 = r * r;
  double p = __builtin_fma(r2, 1.0 / 6227020800.0, -1.0 / 39916800.0);
  p = __builtin_fma(p, r2, 1.0 / 362880.0);
  p = __builtin_fma(p, r2, -1.0 / 5040.0);
  p = __builtin_fma(p, r2, 1.0 / 120.0);
  p = __builtin_fma(p, r2, -1.0 / 6.0);
  return __builtin_fma(r * r2, p, r);
}
THUNDER_MATH double thunder_cos_poly(double r) {  // |r| <= 0.79: Taylor to r^14 (error < 2^-40)
  const double r2 = r * r;
  double p = __builtin_fma(r2, -1.0 / 87178291200.0, 1.0 / 479001600.0);
  p = __builtin_fma(p, r2, -1.0 / 3628800.0);
  p = __builtin_fma(p, r2, 1.0 / 40320.0);
  p = __builtin_fma(p, r2, -1.0 / 720.0);
  p = __builtin_fma(p, r2, 1.0 / 24.0);
  p = __builtin_fma(p, r2, -0.5);
  return __builtin_fma(r2, p, 1.0);
}
// sin(|x|) (shift 0) or cos(|x|) (shift 1: cos t = sin(t + pi/2), one quadrant on) for finite
// x; inf and NaN give a finite value the callers replace.
THUNDER_MATH double thunder_sin_quadrant(float x, double shift) {
  const float a = thunder_float(thunder_bits(x) & 0x7fffffffu);
  double q;
  const double r = thunder_trig_reduce(thunder_sel(a < THUNDER_INF, a, 0.0f), q);
  const double s = thunder_sin_poly(r), c = thunder_cos_poly(r);
  q = thunder_mod4(q + shift);
  return q == 0.0 ? s : (q == 1.0 ? c : (q == 2.0 ? -s : -c));
}
THUNDER_MATH float thunder_sinf(float x) {
  // sin is odd: the sign of x flips the result's (-0 stays -0).
  const float v = static_cast<float>(thunder_sin_quadrant(x, 0.0));
  const float y = thunder_float(thunder_bits(v) ^ (thunder_bits(x) & 0x80000000u));
  return thunder_sel(x - x == 0.0f, y, x - x);  // inf, NaN: NaN
}
THUNDER_MATH float thunder_cosf(float x) {
  const float y = static_cast<float>(thunder_sin_quadrant(x, 1.0));
  return thunder_sel(x - x == 0.0f, y, x - x);
}
// ---- end of vectorizable float math ----
template <typename T>
THUNDER_DEVICE inline T thunder_remainder(T r, T b) {
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}
template <typename T> THUNDER_DEVICE inline T thunder_limit(bool max);
template <> THUNDER_DEVICE inline bool thunder_limit<bool>(bool m) { return m; }
template <> THUNDER_DEVICE inline uint8_t thunder_limit<uint8_t>(bool m) { return m ? 255 : 0; }
template <> THUNDER_DEVICE inline int8_t thunder_limit<int8_t>(bool m) { return m ? 127 : -128; }
template <> THUNDER_DEVICE inline int16_t thunder_limit<int16_t>(bool m) { return m ? 32767 : -32768; }
template <> THUNDER_DEVICE inline int32_t thunder_limit<int32_t>(bool m) { return m ? 2147483647 : -2147483647 - 1; }
template <> THUNDER_DEVICE inline int64_t thunder_limit<int64_t>(bool m) { return m ? 9223372036854775807LL : -9223372036854775807LL - 1; }
template <typename T> struct thunder_cascade {
  T level[3] = {};  // level l: a sum of up to 16 sums of level l - 1 (level 0: of 16 blocks each)
  int64_t added = 0;
  void add(T sum16) {
    level[0] = level[0] + sum16;
    for (int64_t k = ++added, l = 0; l < 2 && k % 16 == 0; k /= 16, ++l) {
      level[l + 1] = level[l + 1] + level[l];
      level[l] = static_cast<T>(0);
    }
  }
  // The row's sum, `rest` the sum of the blocks added since the last add.
  T total(T rest) const { return level[2] + (level[1] + (level[0] + rest)); }
};
extern "C" void cpuFusion0(void* const* inputs, void* const* outputs, const int64_t* g) {
  const float* __restrict__ in0 = static_cast<const float*>(inputs[0]);
  float* __restrict__ out0 = static_cast<float*>(outputs[0]);
  const int64_t L = g[5], rows = g[6];
  #pragma omp parallel for schedule(static) if (rows * L >= THUNDER_PARALLEL_MIN)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row;
    int64_t base0 = 0;
    const int64_t i0 = rem % g[0]; rem /= g[0]; (void)i0; base0 += i0 * g[2];
    float v1 = -THUNDER_INF;
    int nan1 = 0;
    #pragma omp simd reduction(max:v1) reduction(|:nan1)
    for (int64_t n = 0; n < L; ++n) {
      const float v0 = in0[base0 + n];  // load in0
      nan1 |= (v0 != v0);
      v1 = v0 > v1 ? v0 : v1;
    }
    if (nan1) v1 = THUNDER_NAN;
    float v4 = static_cast<float>(0);
    thunder_cascade<float> v4_c;
    for (int64_t b = 0; b < L; b += 1024) {
      const int64_t bn = b + 1024 < L ? b + 1024 : L;
      float v4_b = static_cast<float>(0);
      #pragma omp simd reduction(+:v4_b)
      for (int64_t n = b; n < bn; ++n) {
        const float v0 = in0[base0 + n];  // load in0
        const float v2 = (v0 - v1);  // sub
        const float v3 = thunder_expf(v2);  // exp
        v4_b = v4_b + v3;
      }
      v4 = v4 + v4_b;
      if (b / 1024 % 16 == 15) {
        v4_c.add(v4);
        v4 = static_cast<float>(0);
      }
    }
    if (v4_c.added) v4 = v4_c.total(v4);
    #pragma omp simd
    for (int64_t n = 0; n < L; ++n) {
      const float v0 = in0[base0 + n];  // load in0
      const float v2 = (v0 - v1);  // sub
      const float v3 = thunder_expf(v2);  // exp
      const float v5 = (v3 / v4);  // div
      out0[row * L + n] = v5;
    }
  }
}
