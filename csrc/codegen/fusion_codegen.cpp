#include "codegen/fusion_codegen.h"

#include <functional>
#include <map>
#include <set>

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
#define THUNDER_INF (__builtin_inff())
#define THUNDER_NAN (__builtin_nanf(""))
inline uint32_t thunder_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float thunder_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

)";

const char* kPrelude = R"(THUNDER_DEVICE inline float thunder_bf16_to_float(uint16_t h) {
  return thunder_float(static_cast<uint32_t>(h) << 16);
}
THUNDER_DEVICE inline uint16_t thunder_float_to_bf16(float f) {
  uint32_t u = thunder_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // nan
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
THUNDER_DEVICE inline float thunder_f16_to_float(uint16_t h) {
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
THUNDER_DEVICE inline float thunder_round_bf16(float x) { return thunder_bf16_to_float(thunder_float_to_bf16(x)); }
THUNDER_DEVICE inline float thunder_round_f16(float x) { return thunder_f16_to_float(thunder_float_to_f16(x)); }
)";

bool isF(DType d) { return isFloating(d); }

/// A float math function: expf for float registers, exp for double.
std::string fm(const std::string& name, DType d) {
  return d == DType::Float64 ? name : name + "f";
}

class Emitter {
 public:
  Emitter(const KernelProgram& p, bool cuda) : p_(p), cuda_(cuda) {}

  std::string rt(DType d) const { return registerType(d, cuda_); }

  std::string load(int input, const std::string& offset) const {
    const KInput& in = p_.inputs[input];
    std::string x = "in" + std::to_string(input) + "[" + offset + "]";
    if (in.tensor->dtype == DType::BFloat16) return "thunder_bf16_to_float(" + x + ")";
    if (in.tensor->dtype == DType::Float16) return "thunder_f16_to_float(" + x + ")";
    return x;
  }

  static std::string store(DType d, const std::string& v) {
    if (d == DType::BFloat16) return "thunder_float_to_bf16(" + v + ")";
    if (d == DType::Float16) return "thunder_float_to_f16(" + v + ")";
    return v;
  }

  std::string expr(int id, const std::vector<std::string>& o) const {
    const KNode& n = p_.nodes[id];
    DType d = n.dtype;
    const std::string& op = n.op;
    DType od = n.operands.empty() ? d : p_.nodes[n.operands[0]].dtype;
    std::string a = o.empty() ? "" : o[0], b = o.size() > 1 ? o[1] : "";
    std::string T = rt(d);
    if (op == "convert_element_type") {
      if (d == DType::Bool) return "(" + a + " != 0)";
      std::string c = "static_cast<" + T + ">(" + a + ")";
      if (d == DType::BFloat16) return "thunder_round_bf16(" + c + ")";
      if (d == DType::Float16) return "thunder_round_f16(" + c + ")";
      return c;
    }
    if (op == "where") return "(" + a + " ? " + b + " : " + o[2] + ")";
    if (op == "abs") return isF(d) ? fm("fabs", d) + "(" + a + ")" : d == DType::Bool ? a : "(" + a + " < 0 ? -" + a + " : " + a + ")";
    if (op == "neg") return "(-" + a + ")";
    if (op == "reciprocal") return "(static_cast<" + T + ">(1) / " + a + ")";
    if (op == "rsqrt") return cuda_ ? fm("rsqrt", d) + "(" + a + ")" : "(static_cast<" + T + ">(1) / " + fm("sqrt", d) + "(" + a + "))";
    if (op == "sigmoid") return "(static_cast<" + T + ">(1) / (static_cast<" + T + ">(1) + " + fm("exp", d) + "(-" + a + ")))";
    if (op == "sign") return isF(d) ? "(" + a + " != " + a + " ? " + a + " : static_cast<" + T + ">((" + a + " > 0) - (" + a + " < 0)))" : "static_cast<" + T + ">((" + a + " > 0) - (" + a + " < 0))";
    if (op == "signbit") return isF(od) ? "(" + fm("copysign", od) + "(1, " + a + ") < 0)" : "(" + a + " < 0)";
    if (op == "isfinite") return isF(od) ? "(" + fm("fabs", od) + "(" + a + ") < THUNDER_INF)" : "true";
    if (op == "bitwise_not") return d == DType::Bool ? "(!" + a + ")" : "static_cast<" + T + ">(~" + a + ")";
    if (op == "round") return fm("rint", d) + "(" + a + ")";
    static const std::set<std::string> direct = {"acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc", "exp", "exp2", "expm1", "floor", "lgamma", "log", "log10", "log1p", "log2", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"};
    if (direct.count(op)) return fm(op, d) + "(" + a + ")";
    if (op == "add") return "(" + a + " + " + b + ")";
    if (op == "sub") return "(" + a + " - " + b + ")";
    if (op == "mul") return "(" + a + " * " + b + ")";
    if (op == "div") return "(" + a + " / " + b + ")";
    if (op == "pow") return fm("pow", d) + "(" + a + ", " + b + ")";
    if (op == "atan2") return fm("atan2", d) + "(" + a + ", " + b + ")";
    if (op == "copysign") return fm("copysign", d) + "(" + a + ", " + b + ")";
    if (op == "maximum" || op == "minimum") {
      const char* cmp = op == "maximum" ? " > " : " < ";
      if (isF(d)) return "(" + a + " != " + a + " ? " + a + " : (" + b + " != " + b + " ? " + b + " : (" + a + cmp + b + " ? " + a + " : " + b + ")))";
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
    for (int id : need) {  // ids are in dependency order
      const KNode& n = p_.nodes[id];
      std::string v = "v" + std::to_string(id);
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
          for (int o : n.operands) ops.push_back("v" + std::to_string(o));
          line = "const " + rt(n.dtype) + " " + v + " = " + expr(id, ops) + ";";
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
      case KNode::Kind::Load: return "load " + p_.inputs[n.input].tensor->name;
      case KNode::Kind::Const: return "constant";
      default: return n.op;
    }
  }

  const KernelProgram& p_;
  bool cuda_;
};

/// Store statements for the outputs of one kind (row values when `reduced`, else full-size):
/// `<indent><prefix><j>[<index>] = <value><end>` each, converting 16-bit floats to their bits.
std::string storeLines(const KernelProgram& p, bool reduced, const std::string& prefix,
                       const std::string& index, const std::string& indent, const std::string& end) {
  std::string out;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const KOutput& o = p.outputs[j];
    if (o.reduced != reduced) continue;
    out += indent + prefix + std::to_string(j) + "[" + index + "] = " +
           Emitter::store(o.tensor->dtype, "v" + std::to_string(o.node)) + end;
  }
  return out;
}

std::string paramList(const KernelProgram& p, bool cuda) {
  std::string s;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    s += "const " + storageType(p.inputs[i].tensor->dtype, cuda) + "* __restrict__ in" + std::to_string(i) + ", ";
  for (size_t i = 0; i < p.outputs.size(); ++i)
    s += storageType(p.outputs[i].tensor->dtype, cuda) + "* __restrict__ out" + std::to_string(i) + ", ";
  return s;
}

std::string header(const KernelProgram& p, const char* target) {
  std::string s = std::string("// thunder fusion ") + p.name + " (" + target + "), iteration rank " +
                  std::to_string(p.iterShape.size()) + ", " + std::to_string(p.numPhases) + " row reduction phase(s)\n";
  s += "// inputs:";
  for (const KInput& in : p.inputs) s += " " + in.tensor->name + ":" + std::string(dtypeShortName(in.tensor->dtype));
  s += "\n// outputs:";
  for (const KOutput& o : p.outputs) s += " " + o.tensor->name + ":" + std::string(dtypeShortName(o.tensor->dtype)) + (o.reduced ? "(row)" : "");
  return s + "\n";
}

const char* kRemainder = R"(template <typename T>
THUNDER_DEVICE inline T thunder_remainder(T r, T b) {
  return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
}
)";

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

}  // namespace

std::string emitCuda(const KernelProgram& p) {
  const bool cuda = true;
  Emitter e(p, cuda);
  size_t R = p.iterShape.size(), I = p.inputs.size();
  Out s;
  s << header(p, "CUDA");
  s << "typedef unsigned char uint8_t;\ntypedef signed char int8_t;\ntypedef short int16_t;\n"
       "typedef unsigned short uint16_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
       "typedef long long int64_t;\n";
  s << kCudaDefs << kPrelude << kRemainder << kLimits;
  size_t G = Geometry::length(R, I);
  s << "struct Geometry { int64_t v[" << G << "]; };\n";
  auto offsetExpr = [&](const std::string& idxPrefix) {
    return [&, idxPrefix](int input) {
      std::string o;
      for (size_t d = 0; d < R; ++d) {
        if (p.inputs[input].dimMap[d] < 0) continue;
        if (!o.empty()) o += " + ";
        o += idxPrefix + std::to_string(d) + " * (IdxT)g.v[" + std::to_string(R + input * R + d) + "]";
      }
      return o.empty() ? std::string("0") : o;
    };
  };
  std::string params = paramList(p, cuda) + "const Geometry g";
  std::string argNames;
  for (size_t i = 0; i < I; ++i) argNames += "in" + std::to_string(i) + ", ";
  for (size_t j = 0; j < p.outputs.size(); ++j) argNames += "out" + std::to_string(j) + ", ";
  argNames += "g";
  // Each kernel body is a template over its index type; `<name>_32` instantiates it with 32-bit
  // indices, which the host picks when every offset fits (64-bit division is slow on GPUs).
  auto entryPoints = [&](const std::string& kernel) {
    s << "extern \"C\" __global__ void " << kernel << "(" << params << ") { " << kernel
      << "_body<int64_t>(" << argNames << "); }\n";
    s << "extern \"C\" __global__ void " << kernel << "_32(" << params << ") { " << kernel
      << "_body<uint32_t>(" << argNames << "); }\n";
  };
  std::vector<int> fullOuts;
  for (const KOutput& o : p.outputs)
    if (!o.reduced) fullOuts.push_back(o.node);
  auto indexDecomposition = [&](const char* var) {
    // i<R-1> ... i0 from the linear index; the outermost needs no modulo.
    s << "    IdxT rem = " << var << ";\n";
    for (size_t k = R; k-- > 0;) {
      if (k == 0) {
        s << "    const IdxT i0 = rem;\n";
      } else {
        s << "    const IdxT i" << k << " = rem % (IdxT)g.v[" << k << "]; rem /= (IdxT)g.v[" << k << "];\n";
      }
    }
  };
  if (!p.hasReduction()) {
    s << "template <typename IdxT>\n__device__ __forceinline__ void " << p.name << "_body(" << params << ") {\n";
    s << "  const IdxT numel = (IdxT)g.v[" << R + I * R << "];\n";
    s << "  for (IdxT i = blockIdx.x * (IdxT)blockDim.x + threadIdx.x; i < numel; i += (IdxT)gridDim.x * blockDim.x) {\n";
    indexDecomposition("i");
    std::string body;
    e.emitNodes(fullOuts, {}, offsetExpr("i"), "    ", body);
    s << body;
    s << storeLines(p, false, "out", "i", "    ", ";\n");
    s << "  }\n}\n";
    entryPoints(p.name);
    s << "\n";
    // Vectorized variant: each thread takes VEC consecutive elements of one row (the host checks
    // that the row length is a multiple of VEC); inputs with unit stride along the row are read
    // with one wide access, the others element by element. Outputs are written with wide stores.
    int maxSize = 1;
    for (const KInput& in : p.inputs) maxSize = std::max(maxSize, dtypeItemSize(in.tensor->dtype));
    for (const KOutput& o : p.outputs) maxSize = std::max(maxSize, dtypeItemSize(o.tensor->dtype));
    int vec = 16 / maxSize;
    s << "template <int N> struct alignas(N) Bytes { unsigned char b[N]; };\n";
    s << "template <typename IdxT>\n__device__ __forceinline__ void " << p.name << "_vec_body(" << params << ") {\n";
    s << "  constexpr int VEC = " << vec << ";\n";
    s << "  const IdxT groups = (IdxT)(g.v[" << R + I * R << "] / VEC);\n";
    s << "  for (IdxT grp = blockIdx.x * (IdxT)blockDim.x + threadIdx.x; grp < groups; grp += (IdxT)gridDim.x * blockDim.x) {\n";
    s << "    const IdxT base = grp * VEC;\n";
    indexDecomposition("base");
    auto off = offsetExpr("i");
    for (size_t k = 0; k < I; ++k) {
      std::string st = storageType(p.inputs[k].tensor->dtype, cuda), ks = std::to_string(k);
      s << "    " << st << " a" << ks << "[VEC];\n";
      s << "    {\n      const IdxT off = " << off(static_cast<int>(k)) << ";\n";
      if (R > 0 && p.inputs[k].dimMap[R - 1] >= 0) {
        s << "      const IdxT sk = (IdxT)g.v[" << R + k * R + R - 1 << "];\n";
        s << "      if (sk == 1) {\n        *reinterpret_cast<Bytes<sizeof(" << st << ") * VEC>*>(a" << ks
          << ") = *reinterpret_cast<const Bytes<sizeof(" << st << ") * VEC>*>(in" << ks << " + off);\n";
        s << "      } else {\n#pragma unroll\n        for (int k = 0; k < VEC; ++k) a" << ks << "[k] = in" << ks
          << "[off + k * sk];\n      }\n";
      } else {
        s << "#pragma unroll\n      for (int k = 0; k < VEC; ++k) a" << ks << "[k] = in" << ks << "[off];\n";
      }
      s << "    }\n";
    }
    for (size_t j = 0; j < p.outputs.size(); ++j)
      s << "    " << storageType(p.outputs[j].tensor->dtype, cuda) << " b" << j << "[VEC];\n";
    s << "#pragma unroll\n    for (int k = 0; k < VEC; ++k) {\n";
    std::string tmp;
    e.emitNodes(fullOuts, {}, [](int) { return std::string("k"); }, "      ", tmp);
    // Loads read the staged registers a<input>[k].
    for (size_t k = 0; k < I; ++k) {
      std::string from = "in" + std::to_string(k) + "[k]", to = "a" + std::to_string(k) + "[k]";
      for (size_t pos = tmp.find(from); pos != std::string::npos; pos = tmp.find(from, pos + to.size()))
        tmp.replace(pos, from.size(), to);
    }
    s << tmp;
    s << storeLines(p, false, "b", "k", "      ", ";\n");
    s << "    }\n";
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      std::string st = storageType(p.outputs[j].tensor->dtype, cuda);
      s << "    *reinterpret_cast<Bytes<sizeof(" << st << ") * VEC>*>(out" << j << " + base) = *reinterpret_cast<const Bytes<sizeof(" << st << ") * VEC>*>(b" << j << ");\n";
    }
    s << "  }\n}\n";
    entryPoints(p.name + "_vec");
    return s.str();
  }
  // Row reduction: one block per row; each phase loops over the row, reduces across the block
  // (warp shuffles, then shared memory), and the last phase stores.
  s << R"(template <typename T, typename F>
__device__ inline T thunder_block_reduce(T v, F combine, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < warps; ++w) v = combine(v, shared[w]);
  return v;
}
)";
  // The body is a template over ITEMS: with ITEMS > 0 each thread keeps its (at most ITEMS)
  // elements of the row in registers, loaded once and reused by every phase, so the row is read
  // from memory once; ITEMS == 0 loops over the row in each phase (rows of any length).
  s << "template <int ITEMS>\n__device__ __forceinline__ void " << p.name << "_body(" << params << ") {\n";
  s << "  using IdxT = int64_t;\n";
  s << "  __shared__ double shared_d[32];\n";
  s << "  const int64_t L = g.v[" << R + I * R + 1 << "], rows = g.v[" << R + I * R + 2 << "];\n";
  s << "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  s << "    int64_t rem = row;\n";
  for (size_t k = R - 1; k-- > 0;) {
    if (k == 0) {
      s << "    const int64_t i0 = rem;\n";
    } else {
      s << "    const int64_t i" << k << " = rem % g.v[" << k << "]; rem /= g.v[" << k << "];\n";
    }
  }
  auto off = offsetExpr("i");
  std::function<std::string(int)> rowOff = [&](int input) { return off(input); };
  std::string L = "i" + std::to_string(R - 1);
  // Loads that vary along the row are the ones worth keeping in registers.
  std::vector<int> rowLoads;
  for (size_t id = 0; id < p.nodes.size(); ++id) {
    const KNode& n = p.nodes[id];
    if (n.kind == KNode::Kind::Load && p.inputs[n.input].dimMap[R - 1] >= 0) rowLoads.push_back(static_cast<int>(id));
  }
  std::map<int, std::string> fromRegisters;
  for (int id : rowLoads) fromRegisters[id] = "c" + std::to_string(id) + "[it]";
  auto loopOpen = [&](const char* indent) {
    s << indent << "#pragma unroll\n" << indent << "for (int it = 0; it < (ITEMS ? ITEMS : 1); ++it) {\n";
    s << indent << "  for (int64_t " << L << " = threadIdx.x + (int64_t)it * blockDim.x; " << L
      << " < L; " << L << " += (ITEMS ? L : blockDim.x)) {\n";
  };
  auto loopClose = [&](const char* indent) { s << indent << "  }\n" << indent << "}\n"; };
  // Both forms share one loop shape: with ITEMS > 0 the inner loop runs at most once.
  auto bodyFor = [&](const std::vector<int>& targets, const std::set<int>& available) {
    std::string cachedBody, plainBody;
    e.emitNodes(targets, available, rowOff, "        ", cachedBody, &fromRegisters);
    e.emitNodes(targets, available, rowOff, "        ", plainBody);
    if (cachedBody == plainBody) return plainBody;
    return "        if constexpr (ITEMS > 0) {\n" + cachedBody + "        PHASE_TAIL\n        } else {\n" + plainBody +
           "        PHASE_TAIL\n        }\n";
  };
  if (!rowLoads.empty()) {
    for (int id : rowLoads)
      s << "    " << e.rt(p.nodes[id].dtype) << " c" << id << "[ITEMS ? ITEMS : 1];\n";
    s << "    if constexpr (ITEMS > 0) {\n";
    loopOpen("      ");
    for (int id : rowLoads)
      s << "        c" << id << "[it] = " << e.load(p.nodes[id].input, rowOff(p.nodes[id].input)) << ";\n";
    loopClose("      ");
    s << "    }\n";
  }
  std::set<int> available;
  auto phases = reductionsByPhase(p);
  for (size_t ph = 0; ph < phases.size(); ++ph) {
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      s << "    " << e.rt(n.dtype) << " acc" << r << " = " << reduceInit(n, cuda) << ";\n";
    }
    std::vector<int> operands;
    for (int r : phases[ph]) operands.push_back(p.nodes[r].operands[0]);
    std::string tail;
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string acc = "acc" + std::to_string(r), v = "v" + std::to_string(n.operands[0]);
      tail += acc + " = " + reduceCombine(n, acc, v) + "; ";
    }
    std::string body = bodyFor(operands, available);
    if (body.find("PHASE_TAIL") == std::string::npos) body += "        PHASE_TAIL\n";
    for (size_t pos; (pos = body.find("PHASE_TAIL")) != std::string::npos;) body.replace(pos, 10, tail);
    loopOpen("    ");
    s << body;
    loopClose("    ");
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string T = e.rt(n.dtype);
      s << "    const " << T << " v" << r << " = thunder_block_reduce<" << T << ">(acc" << r << ", [](" << T << " a, " << T << " b) { return " << reduceCombine(n, "a", "b") << "; }, reinterpret_cast<" << T << "*>(shared_d));\n";
      available.insert(r);
    }
  }
  std::string stores = storeLines(p, false, "out", "row * L + " + L, "", "; ");
  std::string body = bodyFor(fullOuts, available);
  if (body.find("PHASE_TAIL") == std::string::npos) body += "        PHASE_TAIL\n";
  for (size_t pos; (pos = body.find("PHASE_TAIL")) != std::string::npos;) body.replace(pos, 10, stores);
  loopOpen("    ");
  s << body;
  loopClose("    ");
  std::vector<int> rowOuts;
  for (const KOutput& o : p.outputs)
    if (o.reduced) rowOuts.push_back(o.node);
  if (!rowOuts.empty()) {
    s << "    if (threadIdx.x == 0) {\n      const int64_t " << L << " = 0;\n      (void)" << L << ";\n";
    std::string rb;
    e.emitNodes(rowOuts, available, rowOff, "      ", rb);
    s << rb;
    s << storeLines(p, true, "out", "row", "      ", ";\n");
    s << "    }\n";
  }
  s << "    __syncthreads();\n  }\n}\n";
  // Entry points: `<name>` loops over rows of any length; `<name>_c<K>` keeps K elements per thread.
  s << "extern \"C\" __global__ void " << p.name << "(" << params << ") { " << p.name << "_body<0>(" << argNames << "); }\n";
  for (int k : {1, 2, 4, 8, 16})
    s << "extern \"C\" __global__ void " << p.name << "_c" << k << "(" << params << ") { " << p.name << "_body<" << k << ">(" << argNames << "); }\n";
  return s.str();
}

std::string emitCpp(const KernelProgram& p, const std::string& innerStrides) {
  const bool cuda = false;
  Emitter e(p, cuda);
  size_t R = p.iterShape.size(), I = p.inputs.size();
  THUNDER_INTERNAL(innerStrides.size() == I, "codegen: one inner-stride code per input expected");
  Out s;
  s << header(p, "C++");
  s << "#include <cmath>\n#include <cstdint>\n#include <cstring>\n";
  s << kCppDefs << kPrelude << kRemainder << kLimits;
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
  auto offsetOf = [&](int input) {
    std::string st = innerStride(input);
    if (st == "0") return "base" + std::to_string(input);
    if (st == "1") return "base" + std::to_string(input) + " + n";
    return "base" + std::to_string(input) + " + n * " + st;
  };
  auto emitBases = [&](const std::string& indent) {
    s << indent << "int64_t rem = row;\n";
    for (size_t i = 0; i < I; ++i) s << indent << "int64_t base" << i << " = 0;\n";
    for (size_t k = R > 0 ? R - 1 : 0; k-- > 0;) {
      s << indent << "{ const int64_t idx = rem % g[" << k << "]; rem /= g[" << k << "];";
      for (size_t i = 0; i < I; ++i)
        if (p.inputs[i].dimMap[k] >= 0) s << " base" << i << " += idx * g[" << R + i * R + k << "];";
      s << " }\n";
    }
  };
  std::vector<int> fullOuts;
  for (const KOutput& o : p.outputs)
    if (!o.reduced) fullOuts.push_back(o.node);
  if (!p.hasReduction()) {
    // Pointwise: rows are split into chunks so a long last dimension still runs in parallel.
    s << "  const int64_t chunk = 16384;\n  const int64_t per_row = (L + chunk - 1) / chunk;\n";
    s << "  #pragma omp parallel for schedule(static)\n";
    s << "  for (int64_t task = 0; task < rows * per_row; ++task) {\n";
    s << "    const int64_t row = task / per_row, n0 = (task % per_row) * chunk;\n";
    s << "    const int64_t n1 = n0 + chunk < L ? n0 + chunk : L;\n";
    emitBases("    ");
    s << "    #pragma omp simd\n    for (int64_t n = n0; n < n1; ++n) {\n";
    std::string body;
    e.emitNodes(fullOuts, {}, offsetOf, "      ", body);
    s << body;
    s << storeLines(p, false, "out", "row * L + n", "      ", ";\n");
    s << "    }\n  }\n}\n";
    return s.str();
  }
  s << "  #pragma omp parallel for schedule(static)\n";
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
    if (allSums) {
      s << "    #pragma omp simd reduction(+:";
      for (size_t k = 0; k < phases[ph].size(); ++k) s << (k ? ", v" : "v") << phases[ph][k];
      s << ")\n";
    }
    s << "    for (int64_t n = 0; n < L; ++n) {\n";
    std::vector<int> operands;
    for (int r : phases[ph]) operands.push_back(p.nodes[r].operands[0]);
    std::string body;
    e.emitNodes(operands, available, offsetOf, "      ", body);
    s << body;
    for (int r : phases[ph]) {
      const KNode& n = p.nodes[r];
      std::string acc = "v" + std::to_string(r), v = "v" + std::to_string(n.operands[0]);
      s << "      " << acc << " = " << reduceCombine(n, acc, v) << ";\n";
    }
    s << "    }\n";
    for (int r : phases[ph]) available.insert(r);
  }
  s << "    for (int64_t n = 0; n < L; ++n) {\n";
  std::string body;
  e.emitNodes(fullOuts, available, offsetOf, "      ", body);
  s << body;
  s << storeLines(p, false, "out", "row * L + n", "      ", ";\n");
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
  s << "  }\n}\n";
  return s.str();
}

}  // namespace thunder::codegen
