#include "codegen/fusion_codegen.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/cpu_math.h"
#include "ir/error.h"

namespace thunder::codegen {
namespace {

/// Source text built without iostreams (see ir/error.h): `out << "x" << 3`.
class Out {
 public:
  template <typename T>
  Out& operator<<(const T& v) {
    detail::appendOne(text_, v);
    return *this;
  }
  std::string str() const { return text_; }
  size_t size() const { return text_.size(); }

 private:
  std::string text_;
};

// Helpers shared by both targets: conversions of the 16-bit floats held as bits, and constants.
const char* kCudaDefs = R"(#define THUNDER_DEVICE __device__
#define THUNDER_ROW_LEN L
#define THUNDER_INF __int_as_float(0x7f800000)
#define THUNDER_NAN __int_as_float(0x7fffffff)
__device__ inline uint32_t thunder_bits(float f) { return __float_as_uint(f); }
__device__ inline float thunder_float(uint32_t u) { return __uint_as_float(u); }
)";

const char* kCppDefs = R"(#define THUNDER_DEVICE
#define THUNDER_ROW_LEN L
// Fewer elements run on the calling thread: waking the OpenMP team costs more than they take.
#define THUNDER_PARALLEL_MIN 32768
#define THUNDER_INF (__builtin_inff())
#define THUNDER_NAN (__builtin_nanf(""))
inline uint32_t thunder_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float thunder_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

)";

const char* kPrelude = R"(THUNDER_DEVICE inline float thunder_bf16_to_float(uint16_t h) {
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
)";

// Emitted only into kernels with an FP8 input or output (usesFloat8).
const char* kFloat8Prelude = R"(// FP8 as torch's `.to()` rounds: to nearest even. e4m3fn (bias 7, 3 mantissa bits, largest 448)
// has no inf: a value that rounds past 448 (|x| >= 464, inf) saturates to +-448 as torch 2.13
// converts, or becomes NaN (0x7f) as torch 2.11 does (THUNDER_E4M3_SATURATES, defined before this
// text: setFloat8E4M3Saturates); NaN stays NaN. e5m2 (bias 15, 2 mantissa bits, largest 57344) rounds past it
// to inf. Values below the smallest normal round on the subnormal grid: adding 2**14 (e4m3) or
// 2**7 (e5m2), whose float ulp is the format's smallest subnormal, rounds |x| to that grid in one
// float addition, and the low bits of the sum are the subnormal's code.
// Branch-free (selects), so that C++ loops with a conversion still vectorize.
THUNDER_DEVICE inline uint8_t thunder_float_to_e4m3(float f) {
  uint32_t u = thunder_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  uint32_t sub = thunder_bits(thunder_float(a) + 16384.0f) - 0x46800000u;          // below 2**-6
  uint32_t r = (a + ((7u - 127u) << 23) + 0x7ffffu + ((a >> 20) & 1u)) >> 20;       // normal
  r = a < 0x3c800000u ? sub : r;
#if THUNDER_E4M3_SATURATES
  r = a >= 0x43e80000u ? 0x7eu : r;  // >= 464, inf: 448
#else
  r = a >= 0x43f00000u ? 0x7fu : r;  // >= 480, inf: NaN
#endif
  r = a > 0x7f800000u ? 0x7fu : r;   // nan
  return static_cast<uint8_t>(sign | r);
}
THUNDER_DEVICE inline uint8_t thunder_float_to_e5m2(float f) {
  uint32_t u = thunder_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  uint32_t sub = thunder_bits(thunder_float(a) + 128.0f) - 0x43000000u;            // below 2**-14
  uint32_t r = (a + ((15u - 127u) << 23) + 0xfffffu + ((a >> 21) & 1u)) >> 21;      // normal
  r = a < 0x38800000u ? sub : r;
  r = a >= 0x47800000u ? 0x7cu : r;  // >= 65536, inf: inf
  r = a > 0x7f800000u ? 0x7fu : r;   // nan
  return static_cast<uint8_t>(sign | (r & 0xffu));
}
THUNDER_DEVICE inline float thunder_e4m3_to_float(uint8_t b) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
  uint32_t r = thunder_bits(static_cast<float>(m) * 0.001953125f);  // subnormal: m * 2**-9
  r = e != 0 ? ((e + 120u) << 23) | (m << 20) : r;
  r = (e == 0xfu && m == 7u) ? 0x7fc00000u : r;
  return thunder_float(sign | r);
}
THUNDER_DEVICE inline float thunder_e5m2_to_float(uint8_t b) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24, e = (b >> 2) & 0x1fu, m = b & 3u;
  uint32_t r = thunder_bits(static_cast<float>(m) * 0.0000152587890625f);  // subnormal: m * 2**-16
  r = e != 0 ? ((e + 112u) << 23) | (m << 21) : r;
  r = e == 0x1fu ? 0x7f800000u | (m << 21) : r;  // inf, nan
  return thunder_float(sign | r);
}
THUNDER_DEVICE inline float thunder_round_e4m3(float x) { return thunder_e4m3_to_float(thunder_float_to_e4m3(x)); }
THUNDER_DEVICE inline float thunder_round_e5m2(float x) { return thunder_e5m2_to_float(thunder_float_to_e5m2(x)); }
)";

bool e4m3Saturates = true;

/// The FP8 helpers, after the e4m3fn overflow rule of the torch in use.
std::string float8Prelude() {
  return std::string("#define THUNDER_E4M3_SATURATES ") + (e4m3Saturates ? "1\n" : "0\n") + kFloat8Prelude;
}

/// Whether a program reads or writes an FP8 tensor.
bool usesFloat8(const KernelProgram& p) {
  for (const KInput& in : p.inputs)
    if (isFloat8(in.tensor->dtype)) return true;
  for (const KOutput& o : p.outputs)
    if (isFloat8(o.tensor->dtype)) return true;
  return false;
}

bool isF(DType d) { return isFloating(d); }

/// A float math function: expf for float registers, exp for double.
std::string fm(const std::string& name, DType d) {
  return d == DType::Float64 ? name : name + "f";
}

/// For some outer iteration dims, the range [lo, hi) of the index: a block of rows.
using Region = std::map<int, std::pair<int64_t, int64_t>>;

/// The blocks of rows that a pointwise kernel's index ranges on outer dims (a cat's pieces along
/// a dim before the last, a pad there, the guards of the inputs they read) cut its rows into:
/// inside one, every such range test has one answer. RoPE's backward writes the query, key and
/// value gradients into one [B, T, groups, 4 + 1 + 1, head] buffer: three blocks along the
/// fourth dim, each reading its own 4 to 15 inputs. Empty where no outer dim is cut, or where the
/// blocks would be more than `limit`.
std::vector<Region> outerRegions(const KernelProgram& p, size_t limit = 8) {
  size_t R = p.iterShape.size();
  std::map<int, std::set<int64_t>> cuts;
  auto cut = [&](int d, int64_t lo, int64_t hi) {
    if (d < 0 || static_cast<size_t>(d) + 1 >= R) return;
    for (int64_t b : {lo, hi})
      if (b > 0 && b < p.iterShape[d]) cuts[d].insert(b);
  };
  for (const KNode& n : p.nodes)
    if (n.kind == KNode::Kind::InRange) cut(n.dim, n.lo, n.hi);
  for (const KInput& in : p.inputs)
    for (size_t d = 0; d < in.guard.size(); ++d) cut(static_cast<int>(d), in.guard[d].first, in.guard[d].second);
  if (cuts.empty()) return {};
  std::vector<Region> regions{Region{}};
  for (auto& [d, bounds] : cuts) {
    if (bounds.empty()) continue;
    std::vector<int64_t> b{0};
    b.insert(b.end(), bounds.begin(), bounds.end());
    b.push_back(p.iterShape[d]);
    std::vector<Region> next;
    for (const Region& r : regions)
      for (size_t i = 0; i + 1 < b.size(); ++i) {
        Region x = r;
        x[d] = {b[i], b[i + 1]};
        next.push_back(std::move(x));
      }
    regions = std::move(next);
    if (regions.size() > limit) return {};
  }
  return regions.size() > 1 ? regions : std::vector<Region>{};
}

/// Whether input `in` is read anywhere in `region` (its guard meets the region on every dim).
bool readIn(const KInput& in, const Region& region) {
  for (const auto& [d, range] : region)
    if (static_cast<size_t>(d) < in.guard.size() &&
        (in.guard[d].second <= range.first || in.guard[d].first >= range.second))
      return false;
  return true;
}

/// The index ranges of a program (its InRange nodes, its guarded inputs' ranges) as the list
/// rangeBounds returns (`bounds`), two entries each, lo then hi: InRange nodes in node order, then
/// the guarded inputs in order, each over its iteration dims; and where each one's lo sits in it.
class RangeSlots {
 public:
  explicit RangeSlots(const KernelProgram& p) {
    for (size_t id = 0; id < p.nodes.size(); ++id)
      if (p.nodes[id].kind == KNode::Kind::InRange) {
        node_[static_cast<int>(id)] = static_cast<int>(bounds.size());
        bounds.insert(bounds.end(), {p.nodes[id].lo, p.nodes[id].hi});
      }
    for (size_t k = 0; k < p.inputs.size(); ++k)
      for (size_t d = 0; d < p.inputs[k].guard.size(); ++d) {
        guard_[{static_cast<int>(k), static_cast<int>(d)}] = static_cast<int>(bounds.size());
        bounds.insert(bounds.end(), {p.inputs[k].guard[d].first, p.inputs[k].guard[d].second});
      }
  }
  int node(int id) const { return find(node_, id); }
  int guard(int input, int dim) const { return find(guard_, std::make_pair(input, dim)); }
  std::vector<int64_t> bounds;

 private:
  template <class M, class K>
  static int find(const M& m, const K& k) {
    auto it = m.find(k);
    return it == m.end() ? -1 : it->second;
  }
  std::map<int, int> node_;
  std::map<std::pair<int, int>, int> guard_;
};

class Emitter {
 public:
  Emitter(const KernelProgram& p, bool cuda) : p_(p), cuda_(cuda) {}

  std::string rt(DType d) const { return registerType(d, cuda_); }

  /// A stored element (the bits of a 16-bit float) as its register type.
  static std::string fromStorage(DType d, const std::string& x) {
    if (d == DType::BFloat16) return "thunder_bf16_to_float(" + x + ")";
    if (d == DType::Float16) return "thunder_f16_to_float(" + x + ")";
    if (d == DType::Float8E4M3FN) return "thunder_e4m3_to_float(" + x + ")";
    if (d == DType::Float8E5M2) return "thunder_e5m2_to_float(" + x + ")";
    return x;
  }

  /// A register value converted to dtype d (16-bit floats rounded, held in float).
  static std::string convert(DType from, DType d, const std::string& a, bool cuda) {
    if (d == DType::Bool) return "(" + a + " != 0)";
    if (from == DType::Bool) {
      // 0 or 1 as a select: GCC 12 vectorizes no loop that casts a bool made by a 64-bit
      // comparison to float (the one-hot target of cross-entropy's backward, iota == target, ran
      // scalar: 2.4 ns per element on one core). Exact in every dtype, 16-bit floats too.
      std::string t = registerType(d, cuda);
      return "(" + a + " ? static_cast<" + t + ">(1) : static_cast<" + t + ">(0))";
    }
    std::string c = "static_cast<" + registerType(d, cuda) + ">(" + a + ")";
    if (isF(from) && !isF(d)) {  // defined for every value (thunder_f2i64 above)
      c = d == DType::Int64 ? "thunder_f2i64(" + a + ")" : d == DType::Int32 ? "thunder_f2i32(" + a + ")"
          : "static_cast<" + registerType(d, cuda) + ">(thunder_f2i32(" + a + "))";
    }
    if (d == DType::BFloat16) return "thunder_round_bf16(" + c + ")";
    if (d == DType::Float16) return "thunder_round_f16(" + c + ")";
    if (d == DType::Float8E4M3FN) return "thunder_round_e4m3(" + c + ")";
    if (d == DType::Float8E5M2) return "thunder_round_e5m2(" + c + ")";
    return c;
  }

  std::string load(int input, const std::string& offset) const {
    std::string x = fromStorage(p_.inputs[input].tensor->dtype, "in" + std::to_string(input) + "[" + offset + "]");
    std::string cond = guardCond(input, false);
    if (cond.empty()) return x;
    return "(" + cond + " ? " + x + " : static_cast<" + rt(p_.inputs[input].tensor->dtype) + ">(0))";
  }

  /// The condition under which a guarded input is read ("" when it always is). With `groupStart`
  /// the last dim is tested at the start of a group of VEC columns (the runtime checks that its
  /// bounds are multiples of VEC).
  std::string guardCond(int input, bool groupStart) const {
    const KInput& in = p_.inputs[input];
    std::string c;
    size_t R = p_.iterShape.size();
    for (size_t d = 0; d < in.guard.size(); ++d) {
      auto [lo, hi] = in.guard[d];
      if (lo <= 0 && hi >= p_.iterShape[d]) continue;
      std::string i = groupStart && d + 1 == R ? std::string("col") : indexVar(static_cast<int>(d));
      std::string t = dimTest(static_cast<int>(d), i, lo, hi, slots_.guard(input, static_cast<int>(d)));
      if (t == "true") continue;
      if (t == "false") return "false";
      if (!c.empty()) c += " && ";
      c += t;
    }
    return c.empty() ? c : "(" + c + ")";
  }

  /// The rows being emitted, where a kernel's code is specialized per region (outerRegions):
  /// for each outer dim, the range [lo, hi) its index lies in. Index-range tests on those dims
  /// are then constants.
  Region region;
  /// Elements per wide access in the tiled pointwise form: a range test on the last dim whose
  /// bounds are multiples of it has one answer for the whole group, and tests `col`.
  int groupVec = 1;

  /// rangeTest(i, lo, hi) for iteration dim d: "true" or "false" where the region decides it.
  /// `slot`: where the kernel reads lo (and hi after it) at run time (RangeSlots), -1: nowhere.
  std::string dimTest(int d, const std::string& i, int64_t lo, int64_t hi, int slot = -1) const {
    auto r = region.find(d);
    if (r != region.end()) {
      auto [rlo, rhi] = r->second;
      if (lo <= rlo && rhi <= hi) return "true";
      if (hi <= rlo || lo >= rhi) return "false";
    }
    if (slot < 0 || cuda_) return rangeTest(i, lo, hi);
    return rangeTest(i, lo, hi, boundRef(slot), boundRef(slot + 1));
  }

  /// lo <= i < hi for an iteration index i >= 0, which may be unsigned (32-bit CUDA indices): a
  /// bound below 0 is never compared. The bounds are printed as `loText` and `hiText` where given
  /// (the geometry entries C++ kernels read them from); which comparisons are made is decided
  /// by their values here, so that kernels sharing a source make the same ones.
  static std::string rangeTest(const std::string& i, int64_t lo, int64_t hi, const std::string& loText = "",
                               const std::string& hiText = "") {
    if (hi <= lo || hi <= 0) return "false";
    std::string upper = "(" + i + " < " + (hiText.empty() ? std::to_string(hi) : hiText) + ")";
    return lo > 0 ? "(" + i + " >= " + (loText.empty() ? std::to_string(lo) : loText) + " && " + upper + ")" : upper;
  }

  /// The geometry entry of run-time bound `slot` (C++ kernels: after the geometry proper).
  std::string boundRef(int slot) const { return "g[" + std::to_string(Geometry::length(p_) + slot) + "]"; }

  /// The iteration index of dim d in the code being emitted (set per kernel form).
  std::function<std::string(int)> indexVar = [](int d) { return "i" + std::to_string(d); };
  /// Appended to every value's name (`v3` + suffix): the copies of an interleaved loop body.
  std::string suffix;

  static std::string store(DType d, const std::string& v) {
    if (d == DType::BFloat16) return "thunder_float_to_bf16(" + v + ")";
    if (d == DType::Float16) return "thunder_float_to_f16(" + v + ")";
    if (d == DType::Float8E4M3FN) return "thunder_float_to_e4m3(" + v + ")";
    if (d == DType::Float8E5M2) return "thunder_float_to_e5m2(" + v + ")";
    return v;
  }

  /// pow(a, c) for a float a and a constant c that eager's pow computes without pow: a * a for
  /// 2 (RMSNorm's x.pow(2)), a * a * a for 3, sqrt, rsqrt and reciprocals for 0.5, -0.5, -1,
  /// -2, as ATen's pow_tensor_scalar does. pow is a long routine in CUDA's libdevice (RMSNorm's
  /// forward at [4096, 2048] was compute-bound on it) and keeps a CPU loop from vectorizing.
  /// Empty where the general pow is needed.
  std::string powByConstant(const KNode& n, DType d, const std::string& a) const {
    if (!isF(d) || n.operands.size() != 2) return "";
    const KNode& e = p_.nodes[n.operands[1]];
    if (e.kind != KNode::Kind::Const || e.literal.empty()) return "";
    char* end = nullptr;
    double c = std::strtod(e.literal.c_str(), &end);
    if (end == e.literal.c_str() || *end != '\0') return "";
    std::string T = rt(d), one = "static_cast<" + T + ">(1)";
    if (c == 0.0) return one;  // pow(x, 0) is 1 for every x, NaN included
    if (c == 1.0) return a;
    if (c == 2.0) return "(" + a + " * " + a + ")";
    if (c == 3.0) return "(" + a + " * " + a + " * " + a + ")";
    if (c == 0.5) return fm("sqrt", d) + "(" + a + ")";
    if (c == -0.5) return cuda_ ? fm("rsqrt", d) + "(" + a + ")" : "(" + one + " / " + fm("sqrt", d) + "(" + a + "))";
    if (c == -1.0) return "(" + one + " / " + a + ")";
    if (c == -2.0) return "(" + one + " / (" + a + " * " + a + "))";
    return "";
  }

  /// The unsigned type CUDA code computes integer add, sub, mul and neg of dtype d in, so that
  /// they wrap around as eager's: signed overflow is undefined in C++ (NVCC folds (a + 1) > a to
  /// true) and NVRTC has no -fwrapv. "" where the plain operators wrap: floats, C++ kernels
  /// (compiled with -fwrapv), and integers narrower than int (promoted to int, which their sums
  /// and products cannot overflow; the conversion back keeps the low bits).
  std::string wrapType(DType d) const {
    if (!cuda_) return "";
    if (d == DType::Int32) return "uint32_t";
    if (d == DType::Int64) return "uint64_t";
    return "";
  }

  std::string expr(int id, const std::vector<std::string>& o) const {
    const KNode& n = p_.nodes[id];
    DType d = n.dtype;
    const std::string& op = n.op;
    DType od = n.operands.empty() ? d : p_.nodes[n.operands[0]].dtype;
    std::string a = o.empty() ? "" : o[0], b = o.size() > 1 ? o[1] : "";
    std::string T = rt(d);
    if (op == "convert_element_type") return convert(od, d, a, cuda_);
    if (!cuda_ && isF(d) && d != DType::Float64 && !cpuMathFunction(op).empty())
      return cpuMathFunction(op) + "(" + a + ")";  // vectorizable float math (cpu_math.h)
    if (op == "where") return "(" + a + " ? " + b + " : " + o[2] + ")";
    std::string U = wrapType(d);
    std::string negA = U.empty() ? "(-" + a + ")" : "static_cast<" + T + ">(-static_cast<" + U + ">(" + a + "))";
    if (op == "abs") return isF(d) ? fm("fabs", d) + "(" + a + ")" : d == DType::Bool ? a : "(" + a + " < 0 ? " + negA + " : " + a + ")";
    if (op == "neg") return negA;
    if (op == "reciprocal") return "(static_cast<" + T + ">(1) / " + a + ")";
    if (op == "rsqrt") return cuda_ ? fm("rsqrt", d) + "(" + a + ")" : "(static_cast<" + T + ">(1) / " + fm("sqrt", d) + "(" + a + "))";
    if (op == "sigmoid") return "(static_cast<" + T + ">(1) / (static_cast<" + T + ">(1) + " + fm("exp", d) + "(-" + a + ")))";
    // (a > 0) - (a < 0), as eager's kernels: sign(NaN) is 0 (fuzzer seed 3423)
    if (op == "sign") return "static_cast<" + T + ">((" + a + " > 0) - (" + a + " < 0))";
    if (op == "signbit") return isF(od) ? "(" + fm("copysign", od) + "(1, " + a + ") < 0)" : "(" + a + " < 0)";
    if (op == "isfinite") return isF(od) ? "(" + fm("fabs", od) + "(" + a + ") < THUNDER_INF)" : "true";
    if (op == "bitwise_not") return d == DType::Bool ? "(!" + a + ")" : "static_cast<" + T + ">(~" + a + ")";
    if (op == "round") return fm("rint", d) + "(" + a + ")";
    static const std::set<std::string> direct = {"acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc", "exp", "exp2", "expm1", "floor", "lgamma", "log", "log10", "log1p", "log2", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"};
    if (direct.count(op)) return fm(op, d) + "(" + a + ")";
    static const std::map<std::string, std::string> ring = {{"add", " + "}, {"sub", " - "}, {"mul", " * "}};
    if (auto r = ring.find(op); r != ring.end()) {
      if (U.empty()) return "(" + a + r->second + b + ")";
      return "static_cast<" + T + ">(static_cast<" + U + ">(" + a + ")" + r->second + "static_cast<" + U + ">(" + b + "))";
    }
    if (op == "div") return "(" + a + " / " + b + ")";
    if (op == "pow") {
      if (std::string p = powByConstant(n, d, a); !p.empty()) return p;
      return fm("pow", d) + "(" + a + ", " + b + ")";
    }
    if (op == "atan2") return fm("atan2", d) + "(" + a + ", " + b + ")";
    if (op == "copysign") return fm("copysign", d) + "(" + a + ", " + b + ")";
    if (op == "maximum" || op == "minimum") {
      const char* cmp = op == "maximum" ? " > " : " < ";
      // NaN from either operand, else the larger (smaller), b where they compare equal as eager's
      // vectorized kernels give (maximum(-0.0, 0.0) is 0.0). One NaN test and one comparison: GCC
      // vectorizes this form, not one testing a too (a clamp after a bfloat16 SwiGLU ran scalar,
      // 9x eager's time).
      if (isF(d)) {
        const char* keepB = op == "maximum" ? " <= " : " >= ";
        return "(" + b + " != " + b + " ? " + b + " : (" + a + keepB + b + " ? " + b + " : " + a + "))";
      }
      return "(" + a + cmp + b + " ? " + a + " : " + b + ")";
    }
    static const std::map<std::string, std::string> cmps = {{"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
    if (cmps.count(op)) return "(" + a + " " + cmps.at(op) + " " + b + ")";
    if (op == "bitwise_and") return d == DType::Bool ? "(" + a + " && " + b + ")" : "static_cast<" + T + ">(" + a + " & " + b + ")";
    if (op == "bitwise_or") return d == DType::Bool ? "(" + a + " || " + b + ")" : "static_cast<" + T + ">(" + a + " | " + b + ")";
    if (op == "bitwise_xor") return d == DType::Bool ? "(" + a + " != " + b + ")" : "static_cast<" + T + ">(" + a + " ^ " + b + ")";
    if (op == "logical_and") return "((" + a + " != 0) && (" + b + " != 0))";
    if (op == "logical_or") return "((" + a + " != 0) || (" + b + " != 0))";
    if (op == "fmod") return isF(d) ? fm("fmod", d) + "(" + a + ", " + b + ")" : "(" + b + " == 0 ? static_cast<" + T + ">(0) : static_cast<" + T + ">(" + a + " % " + b + "))";
    if (op == "remainder") {
      std::string r = isF(d) ? fm("fmod", d) + "(" + a + ", " + b + ")" : "(" + b + " == 0 ? static_cast<" + T + ">(0) : static_cast<" + T + ">(" + a + " % " + b + "))";
      return "thunder_remainder<" + T + ">(" + r + ", " + b + ")";
    }
    throw InternalError("codegen: no code for prims." + op);
  }

  /// Emits the statements computing `targets` (and what they need) into `out`, one line each;
  /// nodes already available (loads at the same offsets, earlier reductions) are reused.
  void emitNodes(const std::vector<int>& targets, const std::set<int>& available,
                 const std::function<std::string(int)>& offsetOf, const std::string& indent,
                 std::string& out, const std::map<int, std::string>* loadFrom = nullptr) const {
    std::set<int> need;
    std::function<void(int)> mark = [&](int id) {
      if (need.count(id) || available.count(id)) return;
      need.insert(id);
      if (p_.nodes[id].kind != KNode::Kind::Reduce)
        for (int o : p_.nodes[id].operands) mark(o);
    };
    for (int t : targets) mark(t);
    if (branchSelects) {
      emitBranches(need, targets, offsetOf, indent, out, loadFrom);
      return;
    }
    for (int id : need) emitNode(id, offsetOf, indent, out, loadFrom);
  }

  /// Emit selects between index ranges (a cat's pieces, a pad's inside) as branches: where(c, x,
  /// y) computes only the side c picks, with the nodes used by that side alone inside it. A
  /// straight-line select computes every piece at every element: RoPE's backward (the query,
  /// key and value gradients cat'd, the key and value ones summed over four heads, each rotated
  /// by halves) spent its time in the arithmetic of the pieces it discarded.
  bool branchSelects = false;

  void emitBranches(const std::set<int>& ids, const std::vector<int>& targets,
                    const std::function<std::string(int)>& offsetOf, const std::string& indent, std::string& out,
                    const std::map<int, std::string>* loadFrom) const {
    std::map<int, std::vector<int>> users;  // within `ids`
    for (int id : ids)
      for (int o : p_.nodes[id].operands)
        if (ids.count(o)) users[o].push_back(id);
    std::set<int> pinned(targets.begin(), targets.end());
    // The nodes of `ids` used only through `root` (root included), none of them assigned yet.
    auto exclusive = [&](int root, int select, const std::set<int>& assigned) {
      std::set<int> s;
      // Read by the select alone, once (not where(c, x, x)).
      if (!ids.count(root) || assigned.count(root) || pinned.count(root) || users[root] != std::vector<int>{select})
        return s;
      s.insert(root);
      for (auto it = ids.find(root); it != ids.begin();) {
        int id = *--it;
        if (assigned.count(id) || pinned.count(id)) continue;
        bool only = !users[id].empty();
        for (int u : users[id]) only = only && s.count(u);
        if (only) s.insert(id);
      }
      return s;
    };
    auto isSelect = [&](int id) {
      const KNode& n = p_.nodes[id];
      if (n.kind != KNode::Kind::Op || n.op != "where" || n.operands.size() != 3) return false;
      std::function<bool(int)> rangeCond = [&](int c) {
        const KNode& m = p_.nodes[c];
        if (m.kind == KNode::Kind::InRange) return true;
        return m.kind == KNode::Kind::Op && m.op == "logical_and" && rangeCond(m.operands[0]) && rangeCond(m.operands[1]);
      };
      return rangeCond(n.operands[0]);
    };
    // Outer selects first (a select's users come after it): each claims its sides' nodes.
    std::set<int> assigned;
    std::map<int, std::pair<std::set<int>, std::set<int>>> sides;
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      int id = *it;
      if (assigned.count(id) || !isSelect(id)) continue;
      const KNode& n = p_.nodes[id];
      std::set<int> x = exclusive(n.operands[1], id, assigned);
      assigned.insert(x.begin(), x.end());
      std::set<int> y = exclusive(n.operands[2], id, assigned);
      assigned.insert(y.begin(), y.end());
      if (!x.empty() || !y.empty()) sides[id] = {std::move(x), std::move(y)};
    }
    for (int id : ids) {
      if (assigned.count(id)) continue;
      auto side = sides.find(id);
      if (side == sides.end()) {
        emitNode(id, offsetOf, indent, out, loadFrom);
        continue;
      }
      const KNode& n = p_.nodes[id];
      std::string v = "v" + std::to_string(id) + suffix;
      auto name = [&](int o) { return "v" + std::to_string(o) + suffix; };
      out += indent + rt(n.dtype) + " " + v + ";  // where, by index range\n";
      out += indent + "if (" + name(n.operands[0]) + ") {\n";
      emitBranches(side->second.first, {n.operands[1]}, offsetOf, indent + "  ", out, loadFrom);
      out += indent + "  " + v + " = " + name(n.operands[1]) + ";\n" + indent + "} else {\n";
      emitBranches(side->second.second, {n.operands[2]}, offsetOf, indent + "  ", out, loadFrom);
      out += indent + "  " + v + " = " + name(n.operands[2]) + ";\n" + indent + "}\n";
    }
  }

  void emitNode(int id, const std::function<std::string(int)>& offsetOf, const std::string& indent, std::string& out,
                const std::map<int, std::string>* loadFrom) const {
    {
      const KNode& n = p_.nodes[id];
      std::string v = "v" + std::to_string(id) + suffix;
      std::string line;
      switch (n.kind) {
        case KNode::Kind::Load: {
          auto cached = loadFrom ? loadFrom->find(id) : std::map<int, std::string>::const_iterator();
          std::string x = loadFrom && cached != loadFrom->end() ? cached->second : load(n.input, offsetOf(n.input));
          line = "const " + rt(n.dtype) + " " + v + " = " + x + ";";
          break;
        }
        case KNode::Kind::Const:
          line = "const " + rt(n.dtype) + " " + v + " = static_cast<" + rt(n.dtype) + ">(" + n.literal + ");";
          break;
        case KNode::Kind::Op: {
          std::vector<std::string> ops;
          for (int o : n.operands) ops.push_back("v" + std::to_string(o) + suffix);
          line = "const " + rt(n.dtype) + " " + v + " = " + expr(id, ops) + ";";
          break;
        }
        case KNode::Kind::InRange: {
          size_t R = p_.iterShape.size();
          bool group = static_cast<size_t>(n.dim) + 1 == R && groupVec > 1 && n.lo % groupVec == 0 &&
                       (n.hi % groupVec == 0 || n.hi >= p_.iterShape[R - 1]);
          std::string i = group ? std::string("col") : indexVar(n.dim);
          line = "const bool " + v + " = " + dimTest(n.dim, i, n.lo, n.hi, slots_.node(id)) + ";";
          break;
        }
        case KNode::Kind::Reduce:
          throw InternalError("codegen: reduction v" + std::to_string(id) + " used before it is computed");
      }
      out += indent + line + "  // " + describe(n) + "\n";
    }
  }

  std::string describe(const KNode& n) const {
    switch (n.kind) {
      // By position (the header names the tensors): same-program kernels share one source.
      case KNode::Kind::Load: return "load in" + std::to_string(n.input);
      case KNode::Kind::Const: return "constant";
      case KNode::Kind::InRange: return "index range";
      default: return n.op;
    }
  }

  const KernelProgram& p_;
  bool cuda_;
  RangeSlots slots_{p_};
};

/// Store statements for the outputs of one kind (row values when `reduced`, else full-size):
/// `<indent><prefix><j>[<index>] = <value><end>` each, converting 16-bit floats to their bits;
/// the values are named with `suffix` (Emitter::suffix).
std::string storeLines(const KernelProgram& p, bool reduced, const std::string& prefix,
                       const std::string& index, const std::string& indent, const std::string& end,
                       const std::string& suffix = "") {
  std::string out;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const KOutput& o = p.outputs[j];
    if (o.reduced != reduced || o.column || o.scattered()) continue;
    out += indent + prefix + std::to_string(j) + "[" + index + "] = " +
           Emitter::store(o.tensor->dtype, "v" + std::to_string(o.node) + suffix) + end;
  }
  return out;
}

std::string paramList(const KernelProgram& p, bool cuda) {
  std::string s;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    s += "const " + storageType(p.inputs[i].tensor->dtype, cuda) + "* __restrict__ in" + std::to_string(i) + ", ";
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const KOutput& o = p.outputs[i];
    if (o.column) s += registerType(o.accDtype, cuda) + "* __restrict__ part" + std::to_string(i) + ", ";
    else s += storageType(o.tensor->dtype, cuda) + "* __restrict__ out" + std::to_string(i) + ", ";
  }
  return s;
}

std::string header(const KernelProgram& p, const char* target) {
  std::string s = std::string("// thunder fusion ") + p.name + " (" + target + "), iteration rank " +
                  std::to_string(p.iterShape.size()) + ", " + std::to_string(p.numPhases) + " row reduction phase(s)\n";
  s += "// inputs:";
  for (const KInput& in : p.inputs) s += " " + in.tensor->name + ":" + std::string(dtypeShortName(in.tensor->dtype));
  s += "\n// outputs:";
  for (const KOutput& o : p.outputs) s += " " + o.tensor->name + ":" + std::string(dtypeShortName(o.tensor->dtype)) + (o.reduced ? "(row)" : o.column ? "(column sum)" : "");
  return s + "\n";
}

const char* kRemainder = R"(template <typename T>
THUNDER_DEVICE inline T thunder_remainder(T r, T b) {
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}
)";

/// C++ kernels' sum over a long row: the row's running sum of its blocks' partial sums is moved
/// into a cascade every 16 blocks (as ATen's cascade_sum), so that each addition rounds a sum of
/// at most 16 values. Added straight into the row's sum, the partials of a row of 10M float32
/// elements (9766 blocks) gave 200 times eager's error. A row of up to 16 blocks never reaches
/// the cascade: its sum is the one it was before, in the same order, and short rows take the
/// same time (a softmax over [65536, 16]: 1.11 ms before and after, on 2 cores).
const char* kCascade = R"(template <typename T> struct thunder_cascade {
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
)";

/// Whether a kernel has a sum reduction.
bool hasSum(const KernelProgram& p) {
  return std::any_of(p.nodes.begin(), p.nodes.end(),
                     [](const KNode& n) { return n.kind == KNode::Kind::Reduce && n.op == "sum"; });
}

/// Reduction identity and combine, as C expressions.
std::string reduceInit(const KNode& n, bool cuda) {
  std::string T = registerType(n.dtype, cuda);
  if (n.op == "sum") return "static_cast<" + T + ">(0)";
  bool mx = n.op == "amax";
  if (isFloating(n.dtype)) return std::string(mx ? "-" : "") + "THUNDER_INF";
  return std::string("thunder_limit<") + T + ">(" + (mx ? "false" : "true") + ")";
}

std::string reduceCombine(const KNode& n, const std::string& acc, const std::string& v) {
  if (n.op == "sum") return acc + " + " + v;
  const char* cmp = n.op == "amax" ? " > " : " < ";
  if (isFloating(n.dtype)) return "(" + v + " != " + v + " || " + v + cmp + acc + ") ? " + v + " : " + acc;
  return "(" + v + cmp + acc + ") ? " + v + " : " + acc;
}

const char* kLimits = R"(template <typename T> THUNDER_DEVICE inline T thunder_limit(bool max);
template <> THUNDER_DEVICE inline bool thunder_limit<bool>(bool m) { return m; }
template <> THUNDER_DEVICE inline uint8_t thunder_limit<uint8_t>(bool m) { return m ? 255 : 0; }
template <> THUNDER_DEVICE inline int8_t thunder_limit<int8_t>(bool m) { return m ? 127 : -128; }
template <> THUNDER_DEVICE inline int16_t thunder_limit<int16_t>(bool m) { return m ? 32767 : -32768; }
template <> THUNDER_DEVICE inline int32_t thunder_limit<int32_t>(bool m) { return m ? 2147483647 : -2147483647 - 1; }
template <> THUNDER_DEVICE inline int64_t thunder_limit<int64_t>(bool m) { return m ? 9223372036854775807LL : -9223372036854775807LL - 1; }
)";

/// Reductions of each phase, in order.
std::vector<std::vector<int>> reductionsByPhase(const KernelProgram& p) {
  std::vector<std::vector<int>> out(p.numPhases);
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i].kind == KNode::Kind::Reduce) out[p.nodes[i].phase - 1].push_back(static_cast<int>(i));
  return out;
}

/// The calls to the vectorizable float functions of cpu_math.h a C++ kernel makes per element.
size_t cpuMathCalls(const KernelProgram& p) {
  size_t calls = 0;
  for (const KNode& n : p.nodes)
    if (n.kind == KNode::Kind::Op && isF(n.dtype) && n.dtype != DType::Float64 && !cpuMathFunction(n.op).empty())
      ++calls;
  return calls;
}

/// Whether a C++ kernel calls one of them.
bool usesCpuMath(const KernelProgram& p) { return cpuMathCalls(p) > 0; }

}  // namespace

void divisionMagic(int64_t d, int64_t& magic, int64_t& shift) {
  shift = 0;
  while ((int64_t(1) << shift) < d) ++shift;
  magic = static_cast<int64_t>((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(d)) / uint64_t(d) + 1);
}

int cudaVecWidth(const KernelProgram& p) {
  size_t R = p.iterShape.size();
  int maxSize = 1;
  for (const KInput& in : p.inputs)
    if (R > 0 && in.dimMap[R - 1] >= 0) maxSize = std::max(maxSize, dtypeItemSize(in.tensor->dtype));
  for (const KOutput& o : p.outputs)
    if (!o.reduced && !o.column) maxSize = std::max(maxSize, dtypeItemSize(o.tensor->dtype));
  return std::max(1, 16 / maxSize);
}

namespace {

/// The strides input `in` is expected to have: its eager layout as traced, except where its 4-D
/// tensors are taken as channels-last (`channelsLast`, or a channel sum's region: the fuser makes
/// those only where the activations are channels-last at run time), whose 4-D inputs traced as
/// contiguous are then channels-last: predicted as traced, each kernel of a channels-last CNN was
/// compiled again on the critical path of the first call (a ConvNeXt-T step's first call took
/// 11 s where it took 5).
std::vector<int64_t> expectedStrides(const KernelProgram& p, const KInput& in, bool channelsLast) {
  const TensorProxy& t = *in.tensor;
  if ((p.order.empty() && !channelsLast) || t.ndim() != 4 || !t.strides.empty()) return t.stridesOrContiguous();
  const Shape& s = t.shape;
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

/// The stride of input `in` along iteration dim d, from its expected layout.
int64_t tracedStride(const KernelProgram& p, const KInput& in, size_t d, bool channelsLast = false) {
  if (in.dimMap[d] < 0) return 0;
  std::vector<int64_t> st = expectedStrides(p, in, channelsLast);
  return st[in.dimMap[d]] * in.coef[d];
}

/// The inner-stride pattern of the inputs in their expected layouts (contiguousPattern).
std::string expectedPattern(const KernelProgram& p, bool channelsLast) {
  std::string pattern;
  size_t R = p.iterShape.size();
  for (const KInput& in : p.inputs) {
    int64_t s = R ? tracedStride(p, in, R - 1, channelsLast) : 0;
    pattern += s == 0 ? '0' : s == 1 ? '1' : 'g';
  }
  return pattern;
}

}  // namespace

std::string contiguousPattern(const KernelProgram& p) {
  // Inputs as traced: contiguous ones, and views whose layout the trace knows (a permute, a
  // slice read through an index remapping).
  return expectedPattern(p, false);
}

int pow2ceil(int64_t x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

RowLaunch chooseRowLaunch(int64_t L, int vec, int threads, bool columns, int64_t rows, bool packed) {
  int64_t chunks = (L + vec - 1) / vec;
  RowLaunch r;
  // Few rows (decoding's single token: one row of the model width) leave most SMs idle whatever
  // the launch; a block per row then spreads each row over more threads, a chunk or two each,
  // instead of one warp holding up to eight (a [1, 2048] bf16 RMSNorm took 8.7 us on one warp).
  bool fewRows = rows >= 0 && rows < kFewRows && chunks > 32 && !columns;
  // Column sums keep ITEMS x VEC float accumulators per column output besides the row's chunks:
  // a warp per [4096, 2048] bf16 RMSNorm-backward row (8 chunks of 8 per lane) took 168 registers,
  // one block of 256 threads per multiprocessor. Past two chunks per lane a block per row takes
  // them, a chunk per thread (46 registers).
  // THUNDER_FUSER_COLUMN_LANE_CHUNKS: the most chunks per lane of a warp per row with column
  // sums (experiments; 2 by default).
  static const int64_t laneChunks = [] {
    const char* e = std::getenv("THUNDER_FUSER_COLUMN_LANE_CHUNKS");
    int64_t n = e ? std::atoll(e) : 0;
    return n >= 1 && n <= 8 ? n : int64_t(2);
  }();
  bool wideColumns = columns && chunks > 32 * laneChunks;
  if (chunks <= 32 * 8 && !fewRows && !wideColumns) {  // short rows: one warp per row, eight rows per block, no shared memory
    r.warp = true;
    r.threads = 256;
    // Rows of fewer than 32 chunks: as many lanes per row as chunks (a power of two), several rows
    // per warp. One row per warp left 20 of 32 lanes idle on ConvNeXt's 96-channel LayerNorm
    // ([64, 56, 56, 96] bf16: 93 us, 0.8 TB/s).
    // Rows of single elements (an odd length: no wide access) take several chunks per lane, and
    // fewer lanes per row: a row per warp had a warp's 32 two-byte loads in flight, too few to
    // cover memory latency (Swin's [4096, 3, 49, 49] bf16 softmax ran at 1.5 TB/s).
    // THUNDER_FUSER_NARROW_CHUNKS: chunks per lane for such rows (experiments; 4 by default).
    static const int64_t narrow = [] {
      const char* e = std::getenv("THUNDER_FUSER_NARROW_CHUNKS");
      int64_t n = e ? std::atoll(e) : 0;
      return n >= 1 && n <= 16 ? n : int64_t(4);
    }();
    const int64_t perLane = vec == 1 ? narrow : 1;
    r.tpr = packed && !columns ? std::min(32, pow2ceil((chunks + perLane - 1) / perLane)) : 32;
    r.items = pow2ceil((chunks + r.tpr - 1) / r.tpr);
    return r;
  }
  // Long rows: one block per row, about 32 elements per thread held in registers (8 chunks of
  // four floats, 4 of eight bf16 values): on an H200 that beat 4 chunks of either by up to 6%
  // for row lengths 2K to 32K, and 2 chunks lost up to 20% to shared-memory reductions. Few
  // rows: a chunk per thread, as many threads as chunks.
  if (threads > 0) r.threads = threads;
  else if (fewRows || wideColumns) r.threads = std::min<int>(1024, std::max<int64_t>(64, pow2ceil(chunks)));
  else r.threads = std::min<int>(1024, std::max<int>(columns ? 256 : 128, pow2ceil((L + 31) / 32)));
  r.items = pow2ceil((chunks + r.threads - 1) / r.threads);
  if (r.items > 16) r.items = 0;  // longer than 16 chunks per thread: re-read the row per phase
  return r;
}

bool columnsPerBlock(const KernelProgram& p, const CudaVariant& v) {
  if (!v.row || !v.warp || v.items <= 0 || v.threads <= 32) return false;
  int64_t bytes = 0;
  for (const KOutput& o : p.outputs)
    if (o.column) bytes += int64_t(v.items) * 32 * v.vec * dtypeItemSize(o.accDtype);
  return bytes > 0 && bytes <= 32768;
}

std::string CudaVariant::entry(const std::string& kernel) const {
  if (row) {
    return kernel + "_r" + std::to_string(items) + "_v" + std::to_string(vec) + (warp ? "_w" : "_b") +
           std::to_string(threads) + (warp && tpr != 32 ? "_p" + std::to_string(tpr) : "");
  }
  return kernel + (vec > 1 ? "_t" + std::to_string(unroll) + "_v" + std::to_string(vec) + "_" + pattern : "") +
         (idx32 ? "_32" : "");
}

void fitSmallLaunch(CudaVariant& v, int64_t numel, int sms, bool unrollForced) {
  if (v.row || sms <= 0) return;
  int64_t wave = int64_t(sms) * 256;
  if (!unrollForced && numel / (int64_t(v.vec) * v.unroll) < wave) v.unroll = 1;
  if (numel / v.vec < wave) {
    v.vec = 1;
    v.pattern.clear();
  }
}

void fitRegisters(const KernelProgram& p, CudaVariant& v, int64_t budget) {
  if (v.row || v.vec <= 1) return;
  // Kernels specialized per block of rows stage only the inputs their block reads.
  // (It runs on every launch: kernels whose rows no range cuts allocate nothing here.)
  static const std::vector<Region> whole{Region{}};
  std::vector<Region> cut = outerRegions(p);
  const std::vector<Region>& regions = cut.empty() ? whole : cut;
  auto staged = [&] {
    int64_t worst = 0;
    for (const Region& region : regions) {
      int64_t bytes = 0;
      for (size_t k = 0; k < p.inputs.size(); ++k)
        if (readIn(p.inputs[k], region))
          bytes += (k < v.pattern.size() && v.pattern[k] == '0' ? 1 : v.vec) * dtypeItemSize(p.inputs[k].tensor->dtype);
      worst = std::max(worst, bytes);
    }
    return worst * v.unroll;
  };
  while (v.unroll > 1 && staged() > budget) v.unroll /= 2;
  // Narrower accesses stay valid: the row length, strides, offsets and guard bounds that are
  // multiples of VEC are multiples of VEC / 2. Four elements per access at least.
  while (v.vec > 4 && staged() > budget) v.vec /= 2;
}

CudaVariant predictCudaVariant(const KernelProgram& p, int sms, bool channelsLast) {
  CudaVariant v;
  size_t R = p.iterShape.size();
  int64_t numel = 1;
  for (int64_t s : p.iterShape) numel *= s;
  int64_t L = R ? p.iterShape[R - 1] : 1;
  int w = cudaVecWidth(p);
  // The inputs' traced layouts: rows start VEC-aligned when L, the outer strides and the offsets
  // are multiples of VEC (the runtime decides from the actual tensors; a different variant there
  // is one more compile on the first call).
  bool vecOk = R > 0 && L % w == 0;
  std::string pat = expectedPattern(p, channelsLast);
  for (size_t k = 0; k < p.inputs.size() && vecOk; ++k) {
    const KInput& in = p.inputs[k];
    if (in.guarded() && (in.guard[R - 1].first % w != 0 || (in.guard[R - 1].second % w != 0 && in.guard[R - 1].second < L)))
      vecOk = false;
    if (pat[k] == 'g' && p.rowKernel()) vecOk = false;
    if (pat[k] != '1') continue;
    for (size_t d = 0; d + 1 < R; ++d) vecOk = vecOk && tracedStride(p, in, d, channelsLast) % w == 0;
    std::vector<int64_t> st = expectedStrides(p, in, channelsLast);
    if (in.gathers()) vecOk = vecOk && st[in.gatherDim] % w == 0;
    int64_t off = 0;
    for (size_t j = 0; j < in.offset.size(); ++j) off += in.offset[j] * st[j];
    vecOk = vecOk && off % w == 0;
  }
  if (p.rowKernel()) {
    v.row = true;
    v.vec = vecOk ? w : 1;
    RowLaunch l = chooseRowLaunch(L, v.vec, 0, p.hasColumns(), L ? numel / L : 0, !p.indexed());
    v.items = l.items;
    v.warp = l.warp;
    v.tpr = l.tpr;
    v.threads = l.threads;
  } else {
    v.vec = vecOk && !p.indexed() ? w : 1;  // gathers and scatters: element by element
    v.idx32 = numel < (int64_t(1) << 31);
    for (const KInput& in : p.inputs)
      if (in.gathers()) v.idx32 = v.idx32 && in.tensor->numel() < (int64_t(1) << 31);
    for (const KOutput& o : p.outputs)
      if (o.scattered()) v.idx32 = v.idx32 && o.into->numel() < (int64_t(1) << 31);
    if (v.vec > 1) v.pattern = pat;
    fitSmallLaunch(v, numel, sms);
    fitRegisters(p, v);
  }
  return v;
}

std::vector<CudaVariant> predictCudaVariants(const KernelProgram& p, int sms) {
  std::vector<CudaVariant> vs = {predictCudaVariant(p, sms)};
  if (p.channelsLastHint) {
    CudaVariant last = predictCudaVariant(p, sms, true);
    if (last.entry(p.name) != vs[0].entry(p.name)) vs.push_back(last);
  }
  return vs;
}

/// A column output's stored value: its sum `v` (in the accumulation dtype) converted through each
/// dtype of the epilogue in turn, as the output's storage holds it.
static std::string columnEpilogue(const KOutput& o, std::string v, bool cuda) {
  DType from = o.accDtype;
  for (DType d : o.epilogue) {
    v = Emitter::convert(from, d, v, cuda);
    from = d;
  }
  return Emitter::store(o.tensor->dtype, v);
}

/// The end of a row kernel's column sums, in the kernel: no second launch (ATen's sum over the
/// partial rows, then a conversion: two launches per column output, 200 in a BERT training step).
/// Launches use it where THUNDER_FUSER_KERNEL_COLUMN_SUMS=1 (see the runtime's CudaLaunch).
/// Blocks form groups of about sqrt(blocks) whose last block to finish (a counter per group)
/// adds the group's partial rows into its first row; the last group to finish adds those rows
/// and stores the sums, converted through the epilogue. The order of additions is fixed: the
/// result does not vary between runs. The counters, the module's (`thunder_done`, zero when it
/// loads), are set back to zero by the blocks that finish, ready for the next launch: two
/// launches of one module must not run at once (the runtime finishes in the kernel on one stream
/// only). Variants that add into their partial row with atomics (ITEMS == 0), and launches with
/// `finish` 0, leave the partial rows to the host.
static void finishColumns(Out& s, const KernelProgram& p, bool perBlock) {
  std::vector<size_t> cols;
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (p.outputs[j].column) cols.push_back(j);
  s << "  if constexpr (ITEMS > 0) {\n";
  s << "    if (!finish || gridDim.x > " << kColumnFinishBlocks << ") return;\n";
  s << "    unsigned int* done = thunder_done;\n";
  s << "    constexpr unsigned prb = " << (perBlock ? "1" : "(unsigned)rpb") << ";  // partial rows per block\n";
  s << "    const unsigned nb = gridDim.x;\n";
  s << "    unsigned G = 1;\n    while ((G + 1) * (G + 1) * prb <= nb) ++G;\n";
  s << "    const unsigned grp = blockIdx.x / G, groups = (nb + G - 1) / G;\n";
  s << "    const unsigned members = min(G, nb - grp * G);\n";
  s << "    __shared__ bool last;\n";
  s << "    __threadfence();\n    __syncthreads();\n";
  s << "    if (threadIdx.x == 0) last = atomicAdd(done + grp, 1u) == members - 1;\n";
  s << "    __syncthreads();\n    if (!last) return;\n    __threadfence();\n";
  s << "    const int64_t r0 = (int64_t)grp * G * prb, nr = (int64_t)members * prb;\n";
  s << "    for (int64_t c = threadIdx.x; c < L; c += THREADS) {\n";
  for (size_t j : cols) {
    std::string T = registerType(p.outputs[j].accDtype, true), js = std::to_string(j);
    s << "      part" << js << "[r0 * L + c] = thunder_rows_sum<" << T << ">(part" << js << " + r0 * L + c, nr, L);\n";
  }
  s << "    }\n";
  s << "    if (threadIdx.x == 0) done[grp] = 0;\n";
  s << "    __threadfence();\n    __syncthreads();\n";
  s << "    if (threadIdx.x == 0) last = atomicAdd(done + groups, 1u) == groups - 1;\n";
  s << "    __syncthreads();\n    if (!last) return;\n    __threadfence();\n";
  s << "    for (int64_t c = threadIdx.x; c < L; c += THREADS) {\n";
  for (size_t j : cols) {
    const KOutput& o = p.outputs[j];
    std::string T = registerType(o.accDtype, true), js = std::to_string(j);
    s << "      const " << T << " s" << js << " = thunder_rows_sum<" << T << ">(part" << js << " + c, groups, (int64_t)G * prb * L);\n";
    s << "      fin" << js << "[c] = " << columnEpilogue(o, "s" + js, true) << ";\n";
  }
  s << "    }\n";
  s << "    if (threadIdx.x == 0) done[groups] = 0;\n";
  s << "  }\n";
}

void setFloat8E4M3Saturates(bool saturates) { e4m3Saturates = saturates; }

std::string emitCuda(const KernelProgram& p) { return emitCuda(p, predictCudaVariant(p)); }

std::string anonymousSource(const std::string& src, const std::string& name) {
  static const std::string kAnonymous = kAnonymousEntry;
  std::string text = src;
  for (int line = 0; line < 3; ++line) text.erase(0, text.find('\n') + 1);  // header(): 3 lines
  for (size_t at = text.find(name); !name.empty() && at != std::string::npos; at = text.find(name, at + kAnonymous.size()))
    text.replace(at, name.size(), kAnonymous);
  return text;
}

std::string emitCuda(const KernelProgram& p, const CudaVariant& variant) {
  const bool cuda = true;
  Emitter e(p, cuda);
  size_t R = p.iterShape.size(), I = p.inputs.size();
  Out s;
  s << header(p, "CUDA");
  s << "typedef unsigned char uint8_t;\ntypedef signed char int8_t;\ntypedef short int16_t;\n"
       "typedef unsigned short uint16_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
       "typedef long long int64_t;\ntypedef unsigned long long uint64_t;\n";
  s << kCudaDefs << kPrelude << (usesFloat8(p) ? float8Prelude() : std::string()) << kRemainder << kLimits;
  if (p.hasColumns()) {
    s << "__device__ unsigned int thunder_done[" << kColumnFinishBlocks + 1 << "] = {};\n";
    // The finishing blocks' sums of n partial rows `stride` apart: eight loads in flight (a
    // chain of dependent L2 loads, one per row, took tens of microseconds on the critical path),
    // added in a fixed order.
    s << R"(template <typename T>
__device__ __forceinline__ T thunder_rows_sum(const T* p, int64_t n, int64_t stride) {
  T a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    a0 += __ldcg(p + (r + 0) * stride); a1 += __ldcg(p + (r + 1) * stride);
    a2 += __ldcg(p + (r + 2) * stride); a3 += __ldcg(p + (r + 3) * stride);
    a4 += __ldcg(p + (r + 4) * stride); a5 += __ldcg(p + (r + 5) * stride);
    a6 += __ldcg(p + (r + 6) * stride); a7 += __ldcg(p + (r + 7) * stride);
  }
  for (; r < n; ++r) a0 += __ldcg(p + r * stride);
  return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}
)";
  }
  if (p.indexed()) {
    // A gathered or scattered index outside its dim stops the kernel (the launch fails), as
    // eager's device-side assert does: never a read or write out of bounds.
    s << "__device__ __forceinline__ int64_t thunder_index(int64_t i, int64_t n) {\n"
         "  if ((unsigned long long)i >= (unsigned long long)n) __trap();\n  return i;\n}\n";
  }
  size_t G = Geometry::length(p);
  s << "struct Geometry { int64_t v[" << G << "]; };\n";
  // Wide accesses: VEC elements of one type moved as one 1- to 16-byte word.
  s << R"(struct alignas(16) thunder_v16 { uint32_t x, y, z, w; };
struct alignas(8) thunder_v8 { uint32_t x, y; };
template <int N> struct thunder_raw;
template <> struct thunder_raw<16> { typedef thunder_v16 type; };
template <> struct thunder_raw<8> { typedef thunder_v8 type; };
template <> struct thunder_raw<4> { typedef uint32_t type; };
template <> struct thunder_raw<2> { typedef uint16_t type; };
template <> struct thunder_raw<1> { typedef uint8_t type; };
template <int VEC, typename T>
__device__ __forceinline__ void thunder_vcopy(T* dst, const T* src) {
  typedef typename thunder_raw<sizeof(T) * VEC>::type V;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}
)";
  const std::string gNumel = std::to_string(R + I * R), gL = std::to_string(R + I * R + 1),
                    gRows = std::to_string(R + I * R + 2);
  auto strideOf = [&](size_t input, size_t d) { return "g.v[" + std::to_string(R + input * R + d) + "]"; };
  std::string params = paramList(p, cuda) + "const Geometry g";
  std::string argNames;
  for (size_t i = 0; i < I; ++i) argNames += "in" + std::to_string(i) + ", ";
  for (size_t j = 0; j < p.outputs.size(); ++j) argNames += (p.outputs[j].column ? "part" : "out") + std::to_string(j) + ", ";
  argNames += "g";
  if (p.hasColumns()) {
    // Column sums end in the kernel (see finishColumns): each one's output, in its dtype, and
    // whether this launch finishes them (0: the host adds the partial rows).
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      if (!p.outputs[j].column) continue;
      params += ", " + storageType(p.outputs[j].tensor->dtype, cuda) + "* __restrict__ fin" + std::to_string(j);
      argNames += ", fin" + std::to_string(j);
    }
    params += ", const int finish";
    argNames += ", finish";
  }
  std::vector<int> fullOuts, colOuts;
  for (const KOutput& o : p.outputs)
    if (o.column) colOuts.push_back(o.node);
    else if (!o.reduced) fullOuts.push_back(o.node);
  auto rowVarying = [&](size_t k) { return R > 0 && p.inputs[k].dimMap[R - 1] >= 0; };
  // Whether input k differs from row to row (depends on a dim before the last).
  auto perRow = [&](size_t k) {
    const KInput& in = p.inputs[k];
    if (in.gathers()) return true;  // (at an index per row: lowerOver)
    for (size_t d = 0; d + 1 < R; ++d)
      if (in.dimMap[d] >= 0 || (in.guarded() && (in.guard[d].first > 0 || in.guard[d].second < p.iterShape[d])))
        return true;
    return false;
  };
  // Whether some index range (a cat's piece, a pad) tests an outer iteration index.
  bool outerRanges = false;
  for (const KNode& n : p.nodes)
    outerRanges |= n.kind == KNode::Kind::InRange && static_cast<size_t>(n.dim) + 1 < R;
  auto fromStorage = [&](size_t k, const std::string& x) { return Emitter::fromStorage(p.inputs[k].tensor->dtype, x); };

  if (!p.rowKernel()) {
    e.branchSelects = true;  // (row kernels read no index ranges)
    auto indexDecomposition = [&](const char* var, size_t dims, const char* indent) {
      // i<dims-1> ... i0 from a linear index over the first `dims` dims; the outermost needs no
      // modulo.
      if (dims == 0) return;
      s << indent << "IdxT rem = " << var << ";\n";
      for (size_t k = dims; k-- > 0;) {
        if (k == 0) s << indent << "const IdxT i0 = rem;\n";
        else s << indent << "const IdxT i" << k << " = thunder_divmod<IdxT>(rem, g.v[" << k << "], g.v["
               << Geometry::magic(R, I, k) << "], g.v[" << Geometry::magic(R, I, k) + 1 << "]);\n";
      }
    };
    // 32-bit indices divide with a multiply-high by the host's magic number: a few instructions
    // where a division by a value known only at run time takes tens.
    s << R"(template <typename IdxT>
__device__ __forceinline__ IdxT thunder_divmod(IdxT& rem, int64_t size, int64_t magic, int64_t shift) {
  if constexpr (sizeof(IdxT) == 4) {
    const uint32_t q = (__umulhi((uint32_t)rem, (uint32_t)magic) + (uint32_t)rem) >> (uint32_t)shift;
    const IdxT r = rem - q * (uint32_t)size;
    rem = q;
    return r;
  } else {
    const IdxT r = rem % (IdxT)size;
    rem /= (IdxT)size;
    return r;
  }
}
)";
    auto offsetOf = [&](int input) {
      std::string o;
      const KInput& in = p.inputs[input];
      for (size_t d = 0; d < R; ++d) {
        if (in.dimMap[d] < 0) continue;
        if (!o.empty()) o += " + ";
        o += "i" + std::to_string(d) + " * (IdxT)" + strideOf(input, d);
      }
      if (in.gathers()) {
        if (!o.empty()) o += " + ";
        o += "(IdxT)thunder_index((int64_t)v" + std::to_string(in.gatherNode) + ", " +
             std::to_string(in.tensor->shape[in.gatherDim]) + ") * (IdxT)g.v[" +
             std::to_string(Geometry::gatherStride(R, I, input)) + "]";
      }
      return o.empty() ? std::string("0") : o;
    };
    if (variant.vec <= 1) {
      // Generic strides: one element per thread and iteration.
      s << "template <typename IdxT>\n__device__ __forceinline__ void " << p.name << "_body(" << params << ") {\n";
      s << "  const IdxT numel = (IdxT)g.v[" << gNumel << "];\n";
      s << "  for (IdxT i = blockIdx.x * (IdxT)blockDim.x + threadIdx.x; i < numel; i += (IdxT)gridDim.x * blockDim.x) {\n";
      indexDecomposition("i", R, "    ");
      std::vector<int> targets = fullOuts;
      for (const KOutput& o : p.outputs)
        if (o.scattered()) targets.push_back(o.scatterNode);
      std::string body;
      e.emitNodes(targets, {}, offsetOf, "    ", body);
      s << body << storeLines(p, false, "out", "i", "    ", ";\n");
      for (size_t j = 0; j < p.outputs.size(); ++j) {
        // Scattered: into the buffer at its strides, the index along the scattered dim.
        const KOutput& o = p.outputs[j];
        if (!o.scattered()) continue;
        std::string at = "(IdxT)thunder_index((int64_t)v" + std::to_string(o.scatterNode) + ", " +
                         std::to_string(o.into->shape[o.scatterDim]) + ") * (IdxT)g.v[" +
                         std::to_string(Geometry::outputStride(R, I, j, R)) + "]";
        for (size_t d = 0; d < R; ++d)
          if (o.dimMap[d] >= 0 && o.dimMap[d] != o.scatterDim)
            at += " + i" + std::to_string(d) + " * (IdxT)g.v[" + std::to_string(Geometry::outputStride(R, I, j, d)) + "]";
        s << "    out" << j << "[" << at << "] = "
          << Emitter::store(o.tensor->dtype, "v" + std::to_string(o.node)) << ";\n";
      }
      s << "  }\n}\n";
      s << "extern \"C\" __global__ void __launch_bounds__(256) " << variant.entry(p.name) << "(" << params << ") { "
        << p.name << "_body<" << (variant.idx32 ? "uint32_t" : "int64_t") << ">(" << argNames << "); }\n";
      return s.str();
    }
    // Tiled: the iteration space is viewed as [rows, L]. A block is TX groups of VEC columns by
    // TY rows (TX * TY = 256); each thread takes one group of columns in ROWS rows. Inputs that
    // depend only on the column (a bias, a norm weight) are read once per thread and reused for
    // every row; the others are read for all ROWS rows before any compute, so each thread keeps
    // several wide reads in flight. The variant's pattern says, per input, how it is read along
    // the row: '1' unit stride (one wide access per group: the host checks that rows are a
    // multiple of VEC long and start aligned), 'g' any other stride (element by element), '0'
    // constant along the row (one element). Outputs are written with wide stores.
    const std::string& pat = variant.pattern;
    THUNDER_CHECK(pat.size() == I, "fuser: pointwise pattern '", pat, "' for ", I, " inputs");
    auto strideExpr = [&](size_t k, size_t d) { return "(IdxT)" + strideOf(k, d); };
    // Reads group `dst` of input k at row offset `ro` ("" for none).
    auto readGroup = [&](size_t k, const std::string& dst, const std::string& ro, const std::string& indent0) {
      std::string ks = std::to_string(k), base = ro.empty() ? "in" + ks : "(in" + ks + " + " + ro + ")";
      std::string indent = indent0;
      std::string cond = e.guardCond(static_cast<int>(k), true);
      if (cond == "false") {  // not read in the block of rows being emitted
        s << indent << "for (int v = 0; v < " << (pat[k] == '0' ? "1" : "VEC") << "; ++v) " << dst << "[v] = 0;\n";
        return;
      }
      if (!cond.empty()) {
        // Outside its range a guarded input reads as zeros.
        s << indent << "if (!" << cond << ") { for (int v = 0; v < " << (pat[k] == '0' ? "1" : "VEC") << "; ++v) "
          << dst << "[v] = 0; } else {\n";
        indent += "  ";
      }
      if (pat[k] == '1') {
        s << indent << "thunder_vcopy<VEC>(" << dst << ", " << base << " + col);\n";
      } else if (pat[k] == 'g') {
        s << indent << "for (int v = 0; v < VEC; ++v) " << dst << "[v] = " << base << "[(col + v) * "
          << strideExpr(k, R - 1) << "];\n";
      } else {
        s << indent << dst << "[0] = " << base << "[0];\n";
      }
      if (!cond.empty()) s << indent0 << "}\n";
    };
    // Input k's offset of the row (i0, ..., i(R-2)); empty for an input that varies by row only
    // through its guard.
    auto rowOffset = [&](size_t k) {
      std::string ro;
      for (size_t d = 0; d + 1 < R; ++d) {
        if (p.inputs[k].dimMap[d] < 0) continue;
        ro += (ro.empty() ? "" : " + ") + ("i" + std::to_string(d) + " * " + strideExpr(k, d));
      }
      return ro.empty() ? ro : "(" + ro + ")";
    };
    s << "template <typename IdxT>\n__device__ __forceinline__ void " << p.name << "_tile_body(" << params << ") {\n";
    s << "  constexpr int VEC = " << variant.vec << ", ROWS = " << variant.unroll << ";\n";
    s << "  const IdxT L = (IdxT)g.v[" << gL << "], rows = (IdxT)g.v[" << gRows << "];\n";
    s << "  const IdxT col = ((IdxT)blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n";
    s << "  if (col >= L) return;\n";
    for (size_t k = 0; k < I; ++k) {
      if (perRow(k)) continue;
      std::string st = storageType(p.inputs[k].tensor->dtype, cuda), ks = std::to_string(k);
      s << "  alignas(16) " << st << " a" << ks << "[" << (pat[k] == '0' ? "1" : "VEC") << "];\n";
      readGroup(k, "a" + ks, "", "  ");
    }
    s << "  const IdxT step = (IdxT)gridDim.y * blockDim.y * ROWS;\n";
    s << "  for (IdxT r0 = ((IdxT)blockIdx.y * blockDim.y + threadIdx.y) * ROWS; r0 < rows; r0 += step) {\n";
    std::map<int, std::string> staged;
    for (size_t id = 0; id < p.nodes.size(); ++id) {
      const KNode& n = p.nodes[id];
      if (n.kind != KNode::Kind::Load) continue;
      size_t k = static_cast<size_t>(n.input);
      std::string at = pat[k] == '0' ? "[0]" : "[k]";
      staged[static_cast<int>(id)] = fromStorage(k, "a" + std::to_string(k) + (perRow(k) ? "[u]" : "") + at);
    }
    e.indexVar = [R](int d) { return static_cast<size_t>(d) + 1 == R ? std::string("(col + k)") : "i" + std::to_string(d); };
    e.groupVec = variant.vec;
    // The row's load-and-compute for one block of rows (all rows where the kernel is not
    // specialized): stage the inputs read there, compute VEC elements, store them.
    auto rowCode = [&](const std::string& in) {
      for (size_t k = 0; k < I; ++k) {
        if (!perRow(k)) continue;
        s << in << "alignas(16) " << storageType(p.inputs[k].tensor->dtype, cuda) << " a" << k << "[ROWS]["
          << (pat[k] == '0' ? "1" : "VEC") << "];\n";
        readGroup(k, "a" + std::to_string(k) + "[u]", rowOffset(k), in);
      }
      for (size_t j = 0; j < p.outputs.size(); ++j)
        s << in << "alignas(16) " << storageType(p.outputs[j].tensor->dtype, cuda) << " b" << j << "[VEC];\n";
      s << "#pragma unroll\n" << in << "for (int k = 0; k < VEC; ++k) {\n";
      std::string body;
      e.emitNodes(fullOuts, {}, offsetOf, in + "  ", body, &staged);
      s << body << storeLines(p, false, "b", "k", in + "  ", ";\n") << in << "}\n";
      for (size_t j = 0; j < p.outputs.size(); ++j) s << in << "thunder_vcopy<VEC>(out" << j << " + r * L + col, b" << j << ");\n";
    };
    if (std::vector<Region> regions = outerRegions(p); !regions.empty()) {
      // Specialized per block of rows: each row takes the branch of its block, whose code has
      // the block's range tests folded to constants and reads only the inputs used there.
      // Rows are taken with the cut dims outermost, so the threads of a warp share a block (the
      // blocks of RoPE's backward alternate every few rows of the natural order: a warp ran two
      // or three branches one after the other, each waiting for its own loads); r is the row's
      // place in the natural order, where the output is written.
      std::vector<size_t> order;
      for (size_t d = 0; d + 1 < R; ++d)
        if (regions[0].count(static_cast<int>(d))) order.push_back(d);
      for (size_t d = 0; d + 1 < R; ++d)
        if (!regions[0].count(static_cast<int>(d))) order.push_back(d);
      s << "#pragma unroll\n    for (int u = 0; u < ROWS; ++u) {\n";
      s << "      if (r0 + u >= rows) break;\n";
      s << "      IdxT rem = r0 + u;\n";
      for (size_t k = order.size(); k-- > 0;) {
        size_t d = order[k];
        if (k == 0) s << "      const IdxT i" << d << " = rem;\n";
        else s << "      const IdxT i" << d << " = thunder_divmod<IdxT>(rem, g.v[" << d << "], g.v["
               << Geometry::magic(R, I, d) << "], g.v[" << Geometry::magic(R, I, d) + 1 << "]);\n";
      }
      std::string natural = "i0";
      for (size_t d = 1; d + 1 < R; ++d) natural = "(" + natural + ") * (IdxT)g.v[" + std::to_string(d) + "] + i" + std::to_string(d);
      s << "      const IdxT r = " << natural << ";\n";
      for (size_t b = 0; b < regions.size(); ++b) {
        std::string cond;
        for (const auto& [d, range] : regions[b])
          cond += (cond.empty() ? "" : " && ") + Emitter::rangeTest("i" + std::to_string(d), range.first, range.second);
        s << "      " << (b == 0 ? "if (" + cond + ") {" : b + 1 < regions.size() ? "} else if (" + cond + ") {" : "} else {")
          << "  // rows of block " << b << "\n";
        e.region = regions[b];
        rowCode("        ");
      }
      e.region.clear();
      s << "      }\n    }\n  }\n}\n";
      s << "extern \"C\" __global__ void __launch_bounds__(256) " << variant.entry(p.name) << "(" << params << ") { "
        << p.name << "_tile_body<" << (variant.idx32 ? "uint32_t" : "int64_t") << ">(" << argNames << "); }\n";
      return s.str();
    }
    for (size_t k = 0; k < I; ++k) {
      if (!perRow(k)) continue;
      std::string st = storageType(p.inputs[k].tensor->dtype, cuda);
      s << "    alignas(16) " << st << " a" << k << "[ROWS][" << (pat[k] == '0' ? "1" : "VEC") << "];\n";
    }
    s << "#pragma unroll\n    for (int u = 0; u < ROWS; ++u) {\n";
    s << "      const IdxT r = r0 + u;\n      if (r >= rows) break;\n";
    // The row index over the outer dims R-2 ... 0.
    bool anyRowInput = false;
    for (size_t k = 0; k < I; ++k) anyRowInput = anyRowInput || perRow(k);
    if (anyRowInput) indexDecomposition("r", R - 1, "      ");
    for (size_t k = 0; k < I; ++k) {
      if (!perRow(k)) continue;
      readGroup(k, "a" + std::to_string(k) + "[u]", rowOffset(k), "      ");
    }
    s << "    }\n";
    s << "#pragma unroll\n    for (int u = 0; u < ROWS; ++u) {\n";
    s << "      const IdxT r = r0 + u;\n      if (r >= rows) break;\n";
    if (outerRanges) indexDecomposition("r", R - 1, "      ");
    for (size_t j = 0; j < p.outputs.size(); ++j)
      s << "      alignas(16) " << storageType(p.outputs[j].tensor->dtype, cuda) << " b" << j << "[VEC];\n";
    s << "#pragma unroll\n      for (int k = 0; k < VEC; ++k) {\n";
    std::string body;
    e.emitNodes(fullOuts, {}, offsetOf, "        ", body, &staged);
    s << body << storeLines(p, false, "b", "k", "        ", ";\n") << "      }\n";
    for (size_t j = 0; j < p.outputs.size(); ++j)
      s << "      thunder_vcopy<VEC>(out" << j << " + r * L + col, b" << j << ");\n";
    s << "    }\n  }\n}\n";
    s << "extern \"C\" __global__ void __launch_bounds__(256) " << variant.entry(p.name) << "(" << params << ") { "
      << p.name << "_tile_body<" << (variant.idx32 ? "uint32_t" : "int64_t") << ">(" << argNames << "); }\n";
    return s.str();
  }

  // Row reductions over the last dimension. A row is handled by one warp (WARP: short rows,
  // several rows per block, shuffles only) or by one block (shuffles, then shared memory). Each
  // thread takes chunks of VEC consecutive elements, chunk `it` at column (it * TPR + lane) * VEC.
  // With ITEMS > 0 the thread keeps its (at most ITEMS) chunks of every input that varies along
  // the row in registers, in their storage type: read once, reused by every phase. ITEMS == 0
  // re-reads the row in each phase (rows of any length).
  s << R"(template <bool WARP, int TPR, typename T, typename F>
__device__ __forceinline__ T thunder_reduce(T v, F combine, T* shared, T identity) {
  // WARP: a row's TPR lanes (an aligned group of a warp whose lanes all take part) combine.
  for (int o = (WARP ? TPR : 32) >> 1; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (WARP) return v;
  // Across warps: each warp's result goes through shared memory, and every warp reduces the
  // (at most 32) partial results with shuffles again.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// A row's index in each iteration dim: with 32-bit rows, a multiply-high by the host's magic
// number per dim, where a 64-bit division by a size known only at run time takes tens of
// instructions per dim and row (Swin's [4096, 3, 49, 49] softmax: 600K rows of 49).
__device__ __forceinline__ int64_t thunder_row_divmod(uint32_t& rem, int64_t magic, int64_t shift, int64_t size) {
  const uint32_t q = (__umulhi(rem, (uint32_t)magic) + rem) >> (uint32_t)shift;
  const uint32_t r = rem - q * (uint32_t)size;
  rem = q;
  return r;
}
)";
  // THREADS (the block size) is a compile-time constant so that the columns of a thread's chunks
  // are constant offsets from one address: fewer registers than one 64-bit address per chunk.
  // WARP with TPR < 32: 32 / TPR rows per warp, TPR lanes each. The rows loop runs per warp (its
  // shuffles need every lane); a lane group past the last row recomputes the last row and stores
  // nothing (`valid`).
  s << "template <int ITEMS, int VEC, bool WARP, int THREADS, int TPR>\n__device__ __forceinline__ void " << p.name << "_row(" << params << ") {\n";
  s << "  __shared__ double shared_d[32];\n";
  s << "  const int64_t L = g.v[" << gL << "], rows = g.v[" << gRows << "];\n";
  s << "  const int lane = WARP ? (threadIdx.x & (TPR - 1)) : threadIdx.x;\n";
  s << "  constexpr int tpr = WARP ? TPR : THREADS;\n";
  s << "  constexpr int64_t rpb = WARP ? (THREADS / TPR) : 1;\n";
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const KOutput& o = p.outputs[j];
    if (!o.column) continue;
    s << "  " << registerType(o.accDtype, cuda) << " col" << j << "[ITEMS ? ITEMS : 1][VEC];\n";
    s << "#pragma unroll\n  for (int it = 0; it < (ITEMS ? ITEMS : 1); ++it)\n#pragma unroll\n    for (int v = 0; v < VEC; ++v) col" << j
      << "[it][v] = 0;\n";
  }
  s << "  for (int64_t row0 = (int64_t)blockIdx.x * rpb + (WARP ? (threadIdx.x >> 5) * (32 / TPR) : 0); row0 < rows; row0 += (int64_t)gridDim.x * rpb) {\n";
  s << "    const int64_t mine = row0 + (WARP ? (threadIdx.x & 31) / TPR : 0);\n";
  s << "    const bool valid = mine < rows;\n";
  s << "    const int64_t row = valid ? mine : rows - 1;\n";
  s << "    (void)valid;\n";
  if (R > 1) {
    s << "    int64_t";
    for (size_t k = 0; k + 1 < R; ++k) s << (k ? ", i" : " i") << k;
    s << ";\n";
    s << "    if (rows <= 0x7fffffffLL) {\n      uint32_t rem = static_cast<uint32_t>(row);\n";
    for (size_t k = R - 1; k-- > 0;) {
      if (k == 0) s << "      i0 = rem;\n";
      else s << "      i" << k << " = thunder_row_divmod(rem, g.v[" << Geometry::magic(R, I, k) << "], g.v["
             << Geometry::magic(R, I, k) + 1 << "], g.v[" << k << "]);\n";
    }
    s << "    } else {\n      int64_t rem = row;\n";
    for (size_t k = R - 1; k-- > 0;) {
      if (k == 0) s << "      i0 = rem;\n";
      else s << "      i" << k << " = rem % g.v[" << k << "]; rem /= g.v[" << k << "];\n";
    }
    s << "    }\n";
  }
  // Per input: the row's base offset and the stride along the row. A gathered input's base adds
  // its index (lowerOver: a load, the same along the row, of an input that gathers nothing).
  for (int gathered = 0; gathered < 2; ++gathered)
    for (size_t k = 0; k < I; ++k) {
      const KInput& in = p.inputs[k];
      if (in.gathers() != (gathered == 1)) continue;
      std::string b;
      for (size_t d = 0; d + 1 < R; ++d) {
        if (in.dimMap[d] < 0) continue;
        if (!b.empty()) b += " + ";
        b += "i" + std::to_string(d) + " * " + strideOf(k, d);
      }
      if (in.gathers()) {
        int m = p.nodes[in.gatherNode].input;
        if (!b.empty()) b += " + ";
        b += "thunder_index((int64_t)in" + std::to_string(m) + "[b" + std::to_string(m) + "], " +
             std::to_string(in.tensor->shape[in.gatherDim]) + ") * g.v[" + std::to_string(Geometry::gatherStride(R, I, k)) + "]";
      }
      s << "    const int64_t b" << k << " = " << (b.empty() ? "0" : b) << ";\n";
      if (rowVarying(k)) s << "    const int64_t s" << k << " = " << strideOf(k, R - 1) << ";\n";
    }
  std::vector<size_t> varying;
  for (size_t k = 0; k < I; ++k)
    if (rowVarying(k)) varying.push_back(k);
  auto loadChunk = [&](const std::string& dst, size_t k, const char* indent) {
    std::string ks = std::to_string(k);
    std::string load = std::string(indent) + "if constexpr (VEC > 1) thunder_vcopy<VEC>(" + dst + ", in" + ks + " + b" +
                       ks + " + col);\n" + indent + "else " + dst + "[0] = in" + ks + "[b" + ks + " + col * s" + ks + "];\n";
    // A guarded input (a cat's or a roll's piece along a dim before the last) is read for whole
    // rows or not at all (lowerRegion): outside its range its chunk reads as zeros.
    std::string cond = e.guardCond(static_cast<int>(k), false);
    if (cond.empty()) return load;
    return std::string(indent) + "if (" + cond + ") {\n" + load + indent + "} else {\n" + indent +
           "  for (int z = 0; z < VEC; ++z) " + dst + "[z] = 0;\n" + indent + "}\n";
  };
  // Inputs that differ from row to row are kept in registers; inputs the same for every row
  // (a weight along the row) are re-read where used, from cache, to save registers.
  std::vector<size_t> cached, streamed;
  for (size_t k : varying) {
    (perRow(k) ? cached : streamed).push_back(k);
  }
  for (size_t k : cached)
    s << "    alignas(16) " << storageType(p.inputs[k].tensor->dtype, cuda) << " c" << k << "[ITEMS ? ITEMS : 1][VEC];\n";
  if (!cached.empty()) {
    s << "    if constexpr (ITEMS > 0) {\n#pragma unroll\n      for (int it = 0; it < ITEMS; ++it) {\n";
    s << "        const int64_t col = ((int64_t)it * tpr + lane) * VEC;\n        if (col < L) {\n";
    for (size_t k : cached) s << loadChunk("c" + std::to_string(k) + "[it]", k, "          ");
    s << "        }\n      }\n    }\n";
  }
  // Loads of row-varying inputs read the chunk registers X<k>[v]; the others read in<k>[b<k>].
  std::map<int, std::string> fromChunk;
  for (size_t id = 0; id < p.nodes.size(); ++id) {
    const KNode& n = p.nodes[id];
    if (n.kind == KNode::Kind::Load && rowVarying(static_cast<size_t>(n.input)))
      fromChunk[static_cast<int>(id)] = fromStorage(n.input, "X" + std::to_string(n.input) + "[v]");
  }
  std::function<std::string(int)> rowOff = [&](int input) { return "b" + std::to_string(input); };
  std::string colVar = "i" + std::to_string(R - 1);
  auto chunkLoad = [&](size_t k) {
    return "          alignas(16) " + storageType(p.inputs[k].tensor->dtype, cuda) + " X" + std::to_string(k) + "[VEC];\n" +
           loadChunk("X" + std::to_string(k), k, "          ");
  };
  // One pass over the thread's chunks running `body` (per element, column `col + v`); only the
  // inputs the body reads are loaded.
  auto pass = [&](const std::string& body, const std::string& chunkHead, const std::string& chunkTail,
                  const std::string& streamBody = "") {
    std::string registers, loads;
    for (size_t k : varying) {
      std::string X = "X" + std::to_string(k) + "[v]";
      if (body.find(X) == std::string::npos) continue;
      bool isCached = std::find(cached.begin(), cached.end(), k) != cached.end();
      registers += isCached ? "          const " + storageType(p.inputs[k].tensor->dtype, cuda) + "* X" + std::to_string(k) +
                                  " = c" + std::to_string(k) + "[it];\n"
                            : chunkLoad(k);
      loads += chunkLoad(k);
    }
    auto perElement = [&](const std::string& b) {
      return "#pragma unroll\n          for (int v = 0; v < VEC; ++v) {\n            const int64_t " + colVar + " = col + v;\n            (void)" +
             colVar + ";\n" + b + "          }\n";
    };
    s << "    if constexpr (ITEMS > 0) {\n#pragma unroll\n      for (int it = 0; it < ITEMS; ++it) {\n";
    s << "        const int64_t col = ((int64_t)it * tpr + lane) * VEC;\n        if (col < L) {\n";
    s << registers << chunkHead << perElement(body) << chunkTail << "        }\n      }\n";
    s << "    } else {\n      for (int64_t col = (int64_t)lane * VEC; col < L; col += (int64_t)tpr * VEC) {\n";
    s << "        {\n" << loads << chunkHead << perElement(streamBody.empty() ? body : streamBody) << chunkTail
      << "        }\n      }\n    }\n";
  };
  std::set<int> available;
  auto phases = reductionsByPhase(p);
  for (size_t ph = 0; ph < phases.size(); ++ph) {
    for (int r : phases[ph])
      s << "    " << e.rt(p.nodes[r].dtype) << " acc" << r << " = " << reduceInit(p.nodes[r], cuda) << ";\n";
    std::vector<int> operands;
    for (int r : phases[ph]) operands.push_back(p.nodes[r].operands[0]);
    std::string body;
    e.emitNodes(operands, available, rowOff, "            ", body, &fromChunk);
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string acc = "acc" + std::to_string(r), v = "v" + std::to_string(n.operands[0]);
      body += "            " + acc + " = " + reduceCombine(n, acc, v) + ";\n";
    }
    pass(body, "", "");
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string T = e.rt(n.dtype);
      s << "    const " << T << " v" << r << " = thunder_reduce<WARP, TPR, " << T << ">(acc" << r << ", [](" << T << " a, " << T
        << " b) { return " << reduceCombine(n, "a", "b") << "; }, reinterpret_cast<" << T << "*>(shared_d), "
        << reduceInit(n, cuda) << ");\n";
      available.insert(r);
    }
  }
  if (!fullOuts.empty() || !colOuts.empty()) {
    std::vector<int> targets = fullOuts;
    targets.insert(targets.end(), colOuts.begin(), colOuts.end());
    std::string body;
    e.emitNodes(targets, available, rowOff, "            ", body, &fromChunk);
    body += storeLines(p, false, "o", "v", "            ", ";\n");
    // Column sums: cached rows add into the thread's column registers; re-read rows (ITEMS == 0)
    // add into the zeroed partial row with atomics.
    std::string streamBody = body;
    std::string head, tail;
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const KOutput& o = p.outputs[j];
      std::string js = std::to_string(j), v = "v" + std::to_string(o.node);
      if (o.column) {
        body += "            col" + js + "[it][v] += " + v + ";\n";
        streamBody += "            atomicAdd(part" + js + " + col + v, " + v + ");\n";
        continue;
      }
      if (o.reduced) continue;
      head += "          alignas(16) " + storageType(o.tensor->dtype, cuda) + " o" + js + "[VEC];\n";
      tail += "          if (valid) thunder_vcopy<VEC>(out" + js + " + row * L + col, o" + js + ");\n";
    }
    pass(body, head, tail, streamBody);
  }
  std::vector<int> rowOuts;
  for (const KOutput& o : p.outputs)
    if (o.reduced) rowOuts.push_back(o.node);
  if (!rowOuts.empty()) {
    s << "    if (lane == 0 && valid) {\n";
    std::string rb;
    e.emitNodes(rowOuts, available, rowOff, "      ", rb);
    s << rb << storeLines(p, true, "out", "row", "      ", ";\n") << "    }\n";
  }
  s << "    if (!WARP) __syncthreads();\n  }\n";
  if (!colOuts.empty()) {
    // Each block writes its column sums as one partial row (or each warp of a warp-per-row block
    // one, where the sums do not fit in shared memory); the host adds the partial rows.
    if (columnsPerBlock(p, variant)) {
      // Warp-per-row blocks add their warps' sums first, in shared memory, warp after warp (a
      // fixed order: the result does not vary between runs), laid out so that a warp's lanes
      // touch consecutive words; the block writes one partial row. One partial row per warp
      // was a float32 row per input row at 4096 rows (32 MB for a [4096, 2048] RMSNorm).
      for (size_t j = 0; j < p.outputs.size(); ++j)
        if (p.outputs[j].column)
          s << "  __shared__ " << registerType(p.outputs[j].accDtype, cuda) << " cs" << j << "[ITEMS * 32 * VEC];\n";
      s << "  const int wid = threadIdx.x >> 5;\n";
      s << "  for (int w = 0; w < (int)rpb; ++w) {\n    if (wid == w) {\n";
      s << "#pragma unroll\n      for (int it = 0; it < ITEMS; ++it)\n#pragma unroll\n        for (int v = 0; v < VEC; ++v) {\n";
      s << "          const int sidx = (it * VEC + v) * 32 + lane;\n";
      for (size_t j = 0; j < p.outputs.size(); ++j)
        if (p.outputs[j].column)
          s << "          cs" << j << "[sidx] = w == 0 ? col" << j << "[it][v] : cs" << j << "[sidx] + col" << j << "[it][v];\n";
      s << "        }\n    }\n    __syncthreads();\n  }\n";
      // Column c of the row is chunk it = c / (32 VEC), lane (c / VEC) % 32, element c % VEC.
      s << "  for (int64_t c = threadIdx.x; c < L; c += THREADS) {\n";
      s << "    const int64_t q = c / VEC;\n";
      s << "    const int sidx = (int)(((q >> 5) * VEC + (c - q * VEC)) * 32 + (q & 31));\n";
      for (size_t j = 0; j < p.outputs.size(); ++j)
        if (p.outputs[j].column) s << "    part" << j << "[(int64_t)blockIdx.x * L + c] = cs" << j << "[sidx];\n";
      s << "  }\n";
    } else {
      s << "  if constexpr (ITEMS > 0) {\n";
      s << "    const int64_t prow = (int64_t)blockIdx.x * rpb + (WARP ? (threadIdx.x >> 5) : 0);\n";
      s << "#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {\n";
      s << "      const int64_t col = ((int64_t)it * tpr + lane) * VEC;\n      if (col < L) {\n";
      for (size_t j = 0; j < p.outputs.size(); ++j)
        if (p.outputs[j].column)
          s << "#pragma unroll\n        for (int v = 0; v < VEC; ++v) part" << j << "[prow * L + col + v] = col" << j << "[it][v];\n";
      s << "      }\n    }\n  }\n";
    }
    finishColumns(s, p, columnsPerBlock(p, variant));
  }
  s << "}\n";
  s << "extern \"C\" __global__ void __launch_bounds__(" << variant.threads << ") " << variant.entry(p.name) << "("
    << params << ") { " << p.name << "_row<" << variant.items << ", " << variant.vec << ", "
    << (variant.warp ? "true" : "false") << ", " << variant.threads << ", " << (variant.warp ? variant.tpr : 32) << ">("
    << argNames << "); }\n";
  return s.str();
}

std::vector<int64_t> rangeBounds(const KernelProgram& p) { return RangeSlots(p).bounds; }

std::string emitCpp(const KernelProgram& p, const std::string& innerStrides) {
  const bool cuda = false;
  Emitter e(p, cuda);
  size_t R = p.iterShape.size(), I = p.inputs.size();
  THUNDER_INTERNAL(innerStrides.size() == I, "codegen: one inner-stride code per input expected");
  THUNDER_INTERNAL(!p.indexed(), "codegen: ", p.name, " gathers or scatters, which C++ kernels do not");
  Out s;
  s << header(p, "C++");
  s << kCppIncludes;
  s << kCppDefs << kPrelude << (usesFloat8(p) ? float8Prelude() : std::string());
  const size_t mathAt = s.size();  // where a long kernel defines THUNDER_MATH
  if (usesCpuMath(p)) s << cpuMathSource();
  s << kRemainder << kLimits << (hasSum(p) ? kCascade : "");
  s << "extern \"C\" void " << p.name << "(void* const* inputs, void* const* outputs, const int64_t* g) {\n";
  for (size_t i = 0; i < I; ++i) {
    std::string st = storageType(p.inputs[i].tensor->dtype, cuda);
    s << "  const " << st << "* __restrict__ in" << i << " = static_cast<const " << st << "*>(inputs[" << i << "]);\n";
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    std::string st = storageType(p.outputs[j].tensor->dtype, cuda);
    s << "  " << st << "* __restrict__ out" << j << " = static_cast<" << st << "*>(outputs[" << j << "]);\n";
  }
  s << "  const int64_t L = g[" << R + I * R + 1 << "], rows = g[" << R + I * R + 2 << "];\n";
  // Offsets: outer dims through a base per input, the last dim through the inner stride.
  auto innerStride = [&](size_t i) -> std::string {
    if (R == 0 || p.inputs[i].dimMap[R - 1] < 0 || innerStrides[i] == '0') return "0";
    if (innerStrides[i] == '1') return "1";
    return "g[" + std::to_string(R + i * R + R - 1) + "]";
  };
  // The offset of an input's element at last-dim index `n`.
  auto offsetAt = [&](int input, const std::string& n) {
    std::string st = innerStride(input);
    if (st == "0") return "base" + std::to_string(input);
    if (st == "1") return "base" + std::to_string(input) + " + " + n;
    return "base" + std::to_string(input) + " + " + n + " * " + st;
  };
  auto offsetOf = [&](int input) { return offsetAt(input, "n"); };
  auto emitBases = [&](const std::string& indent) {
    s << indent << "int64_t rem = row;\n";
    for (size_t i = 0; i < I; ++i) s << indent << "int64_t base" << i << " = 0;\n";
    for (size_t k = R > 0 ? R - 1 : 0; k-- > 0;) {
      s << indent << "const int64_t i" << k << " = rem % g[" << k << "]; rem /= g[" << k << "]; (void)i" << k << ";";
      for (size_t i = 0; i < I; ++i)
        if (p.inputs[i].dimMap[k] >= 0) s << " base" << i << " += i" << k << " * g[" << R + i * R + k << "];";
      s << "\n";
    }
  };
  e.indexVar = [R](int d) { return static_cast<size_t>(d) + 1 == R ? std::string("n") : "i" + std::to_string(d); };
  std::vector<int> fullOuts, colOuts;
  for (const KOutput& o : p.outputs)
    if (o.column) colOuts.push_back(o.node);
    else if (!o.reduced) fullOuts.push_back(o.node);
  if (!p.rowKernel()) {
    // Pointwise: rows are split into chunks so a long last dimension still runs in parallel.
    s << "  const int64_t chunk = 16384;\n  const int64_t per_row = (L + chunk - 1) / chunk;\n";
    s << "  #pragma omp parallel for schedule(static) if (rows * L >= THUNDER_PARALLEL_MIN)\n";
    s << "  for (int64_t task = 0; task < rows * per_row; ++task) {\n";
    s << "    const int64_t row = task / per_row, n0 = (task % per_row) * chunk;\n";
    s << "    const int64_t n1 = n0 + chunk < L ? n0 + chunk : L;\n";
    emitBases("    ");
    std::string start = "n0";  // of the plain loop
    std::string plain;
    e.emitNodes(fullOuts, {}, offsetOf, "      ", plain);
    plain += storeLines(p, false, "out", "row * L + n", "      ", ";\n");
    // GCC's time grows steeply with a simd loop's length, and each inlined math call is long:
    // RWKV's fused backward (a 1,700-line body, 100 inputs) compiled for more than 5 minutes
    // interleaved, 20 s as one simd loop and 1.8 s as a plain loop (which -O3 still vectorizes
    // where it can); another of its kernels (24 exp calls, 190 lines) took 61 s interleaved and
    // 3.8 s as one simd loop. Only short chains with few math calls (cpu_chain's 5, a GELU's 1)
    // are interleaved, and long bodies are not forced to simd: their per-element work dwarfs
    // what either saves.
    const size_t bodyLines = static_cast<size_t>(std::count(plain.begin(), plain.end(), '\n'));
    constexpr size_t kInterleaveMaxLines = 300, kInterleaveMaxMath = 8, kSimdMaxLines = 600;
    const size_t mathCalls = cpuMathCalls(p);
    if (mathCalls > 0 && mathCalls <= kInterleaveMaxMath && bodyLines <= kInterleaveMaxLines) {
      // The vectorized math is a long chain of dependent instructions per element (the chain of
      // benchmarks/run.py's cpu_chain: about 280 AVX-512 instructions per 16 elements), longer
      // than the core's out-of-order window: one vector's chain ran at a fifth of the core's
      // throughput. The chunk is cut in kInterleave parts computed in one loop, their statements
      // interleaved node by node, so that independent chains sit side by side (4.42 -> 2.02 ns
      // per element on one core; 6 and 8 parts gave 1.84 and 1.80 for a longer compile; GCC
      // ignores `simdlen(32)`, which would interleave within statements). Each part starts on a
      // multiple of 16 elements; the rest runs in the plain loop below. The math is always
      // inlined (cpu_math.cpp): four copies of a body exceed GCC's inlining limits otherwise.
      constexpr int kInterleave = 4;
      s << "    const int64_t h = (n1 - n0) / " << kInterleave * 16 << " * 16;\n";
      s << "    #pragma omp simd\n    for (int64_t n = n0; n < n0 + h; ++n) {\n      const int64_t m0 = n";
      for (int k = 1; k < kInterleave; ++k) s << ", m" << k << " = n + " << k << " * h";
      s << ";\n";
      std::vector<std::vector<std::string>> parts(kInterleave);
      auto plainIndex = e.indexVar;
      for (int k = 0; k < kInterleave; ++k) {
        const std::string m = "m" + std::to_string(k);
        e.suffix = "_" + std::to_string(k);
        e.indexVar = [R, m](int d) { return static_cast<size_t>(d) + 1 == R ? m : "i" + std::to_string(d); };
        std::string body;
        e.emitNodes(fullOuts, {}, [&](int input) { return offsetAt(input, m); }, "      ", body);
        body += storeLines(p, false, "out", "row * L + " + m, "      ", ";\n", e.suffix);
        std::istringstream lines(body);
        for (std::string line; std::getline(lines, line);) parts[k].push_back(line);
      }
      e.suffix.clear();
      e.indexVar = plainIndex;
      for (size_t i = 0; i < parts[0].size(); ++i)
        for (int k = 0; k < kInterleave; ++k) {
          THUNDER_INTERNAL(parts[k].size() == parts[0].size(), "codegen: interleaved parts differ");
          s << parts[k][i] << "\n";
        }
      s << "    }\n";
      start = "n0 + " + std::to_string(kInterleave) + " * h";
    }
    if (bodyLines <= kSimdMaxLines) s << "    #pragma omp simd\n";
    s << "    for (int64_t n = " << start << "; n < n1; ++n) {\n" << plain;
    s << "    }\n  }\n}\n";
    std::string code = s.str();
    // A plain loop gains nothing from inlined math, and hundreds of inlined copies are slow to
    // compile: GCC inlines what its limits allow (the same functions: the same results)
    if (bodyLines > kSimdMaxLines && mathCalls > 0)
      code.insert(mathAt, "#define THUNDER_MATH static inline\n");
    return code;
  }
  // Column sums: each thread adds into its own row of sums, then the rows are added.
  bool columns = !colOuts.empty();
  if (columns) {
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.outputs[j].column)
        s << "  std::vector<" << registerType(p.outputs[j].accDtype, cuda) << "> colsum" << j << "(L, 0);\n";
    s << "  #pragma omp parallel if (rows * L >= THUNDER_PARALLEL_MIN)\n  {\n";
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.outputs[j].column)
        s << "  std::vector<" << registerType(p.outputs[j].accDtype, cuda) << "> col" << j << "(L, 0);\n";
    s << "  #pragma omp for schedule(static)\n";
  } else {
    s << "  #pragma omp parallel for schedule(static) if (rows * L >= THUNDER_PARALLEL_MIN)\n";
  }
  s << "  for (int64_t row = 0; row < rows; ++row) {\n";
  emitBases("    ");
  std::set<int> available;
  auto phases = reductionsByPhase(p);
  for (size_t ph = 0; ph < phases.size(); ++ph) {
    bool allSums = true;
    for (int r : phases[ph]) allSums &= p.nodes[r].op == "sum";
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      s << "    " << e.rt(n.dtype) << " v" << r << " = " << reduceInit(n, cuda) << ";\n";
    }
    // Sums are added in blocks of kSumBlock elements, the blocks' (vectorized) partial sums then
    // in a cascade (thunder_cascade): a row of 16384 (a GroupNorm group) summed straight through
    // by 16 lanes took 1024 roundings a lane, twice the error of ATen's cascaded sum.
    constexpr int kSumBlock = 1024;
    // Float maxima and minima: the loop keeps a plain max (min) and, apart, whether a NaN was
    // seen, so that it vectorizes as an OpenMP max (min) reduction; the combine testing each
    // element for NaN ran scalar (a [256, 2048] float32 row amax took 3x eager's time).
    bool allFloatExtrema = !allSums;
    for (int r : phases[ph])
      allFloatExtrema &= (p.nodes[r].op == "amax" || p.nodes[r].op == "amin") && isFloating(p.nodes[r].dtype);
    std::string in = "    ", suffix;
    if (allFloatExtrema) {
      for (int r : phases[ph]) s << "    int nan" << r << " = 0;\n";
      s << "    #pragma omp simd";
      for (int r : phases[ph])
        s << " reduction(" << (p.nodes[r].op == "amax" ? "max" : "min") << ":v" << r << ") reduction(|:nan" << r << ")";
      s << "\n";
      s << "    for (int64_t n = 0; n < L; ++n) {\n";
    } else if (allSums) {
      for (int r : phases[ph])
        s << "    thunder_cascade<" << e.rt(p.nodes[r].dtype) << "> v" << r << "_c;\n";
      s << "    for (int64_t b = 0; b < L; b += " << kSumBlock << ") {\n";
      s << "      const int64_t bn = b + " << kSumBlock << " < L ? b + " << kSumBlock << " : L;\n";
      for (int r : phases[ph]) {
        const KNode& n = p.nodes[r];
        s << "      " << e.rt(n.dtype) << " v" << r << "_b = " << reduceInit(n, cuda) << ";\n";
      }
      s << "      #pragma omp simd reduction(+:";
      for (size_t k = 0; k < phases[ph].size(); ++k) s << (k ? ", v" : "v") << phases[ph][k] << "_b";
      s << ")\n";
      in = "      ";
      suffix = "_b";
      s << in << "for (int64_t n = b; n < bn; ++n) {\n";
    } else {
      s << "    for (int64_t n = 0; n < L; ++n) {\n";
    }
    std::vector<int> operands;
    for (int r : phases[ph]) operands.push_back(p.nodes[r].operands[0]);
    std::string body;
    e.emitNodes(operands, available, offsetOf, in + "  ", body);
    s << body;
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string acc = "v" + std::to_string(r) + suffix, v = "v" + std::to_string(n.operands[0]);
      if (allFloatExtrema) {
        s << in << "  nan" << r << " |= (" << v << " != " << v << ");\n";
        s << in << "  " << acc << " = " << v << (n.op == "amax" ? " > " : " < ") << acc << " ? " << v << " : " << acc << ";\n";
      } else {
        s << in << "  " << acc << " = " << reduceCombine(n, acc, v) << ";\n";
      }
    }
    s << in << "}\n";
    if (allFloatExtrema)
      for (int r : phases[ph]) s << "    if (nan" << r << ") v" << r << " = THUNDER_NAN;\n";
    if (allSums) {
      for (int r : phases[ph]) {
        std::string acc = "v" + std::to_string(r);
        s << "      " << acc << " = " << reduceCombine(p.nodes[r], acc, acc + "_b") << ";\n";
      }
      s << "      if (b / " << kSumBlock << " % 16 == 15) {\n";
      for (int r : phases[ph]) {
        std::string acc = "v" + std::to_string(r);
        s << "        " << acc << "_c.add(" << acc << ");\n";
        s << "        " << acc << " = " << reduceInit(p.nodes[r], cuda) << ";\n";
      }
      s << "      }\n    }\n";
      for (int r : phases[ph]) {
        std::string acc = "v" + std::to_string(r);
        s << "    if (" << acc << "_c.added) " << acc << " = " << acc << "_c.total(" << acc << ");\n";
      }
    }
    for (int r : phases[ph]) available.insert(r);
  }
  // Independent elements (stores and column sums at n): as a simd loop GCC if-converts the
  // selects (a clamp, a conversion's NaN test) that kept it scalar ("control flow in loop").
  s << "    #pragma omp simd\n";
  s << "    for (int64_t n = 0; n < L; ++n) {\n";
  std::vector<int> targets = fullOuts;
  targets.insert(targets.end(), colOuts.begin(), colOuts.end());
  std::string body;
  e.emitNodes(targets, available, offsetOf, "      ", body);
  s << body;
  s << storeLines(p, false, "out", "row * L + n", "      ", ";\n");
  for (size_t j = 0; j < p.outputs.size(); ++j)
    if (p.outputs[j].column) s << "      col" << j << "[n] += v" << p.outputs[j].node << ";\n";
  s << "    }\n";
  std::vector<int> rowOuts;
  for (const KOutput& o : p.outputs)
    if (o.reduced) rowOuts.push_back(o.node);
  if (!rowOuts.empty()) {
    s << "    {\n      const int64_t n = 0;\n      (void)n;\n";
    std::string rb;
    e.emitNodes(rowOuts, available, offsetOf, "      ", rb);
    s << rb;
    s << storeLines(p, true, "out", "row", "      ", ";\n");
    s << "    }\n";
  }
  s << "  }\n";
  if (columns) {
    s << "  #pragma omp critical\n  {\n";
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.outputs[j].column) s << "    for (int64_t n = 0; n < L; ++n) colsum" << j << "[n] += col" << j << "[n];\n";
    s << "  }\n  }\n";
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const KOutput& o = p.outputs[j];
      if (!o.column) continue;
      s << "  for (int64_t n = 0; n < L; ++n) out" << j << "[n] = "
        << columnEpilogue(o, "colsum" + std::to_string(j) + "[n]", cuda) << ";\n";
    }
  }
  s << "}\n";
  return s.str();
}

}  // namespace thunder::codegen
