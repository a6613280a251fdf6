#include "ops/ltorch.h"

#include <cmath>
#include <mutex>
#include <numeric>
#include <set>

#include "ops/clang.h"
#include "ops/prims.h"
#include "ops/symbolic_rules.h"
#include "ops/utils.h"

namespace thunder::ltorch {
namespace {

using Args = std::vector<Value>;
using PK = PromotionKind;

std::vector<TorchName>& names() {
  static std::vector<TorchName> n;
  return n;
}

/// Defines an ltorch symbol: its signature (as PyTorch's), the PyTorch callables that map to it
/// ("~" marks a reflected operator) and its decomposition.
/// Sets the layout of the tensors of `r` that are not among `args` to contiguous.
void contiguousResults(const Value& r, const std::vector<Value>& args) {
  if (r.isTensor()) {
    for (const Value& a : args)
      if (a.isTensor() && a.toTensor() == r.toTensor()) return;
    r.toTensor()->strides.clear();
  } else if (r.isTuple() || r.isList()) {
    for (const Value& v : r.items()) contiguousResults(v, args);
  }
}

/// Ops that eager computes with kernels of their own, allocating contiguous results, where thunder
/// decomposes them into elementwise prims (whose results follow the operands' layout, as
/// TensorIterator's): a view of their result is legal as in eager (TensorProxy::strides).
bool contiguousInEager(const std::string& name) {
  static const std::set<std::string> names = {
      "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm",
      "instance_norm", "logsigmoid", "tril", "triu", "masked_fill"};
  return names.count(name) > 0;
}

void def(const std::string& name, const std::string& sig, std::vector<std::string> torch,
         SymbolFn fn, uint32_t tags = kNoTags) {
  if (contiguousInEager(name)) {
    fn = [impl = std::move(fn)](const std::vector<Value>& a) {
      Value r = impl(a);
      contiguousResults(r, a);
      return r;
    };
  }
  auto s = std::make_unique<Symbol>();
  s->module = "ltorch";
  s->name = name;
  s->params = parseSignature(sig);
  s->impl = std::move(fn);
  s->tags = tags;
  s->style = PrintStyle::Torch;
  std::string id = s->id();
  SymbolRegistry::get().add(std::move(s));
  for (std::string& q : torch) {
    bool swapped = !q.empty() && q[0] == '~';
    names().push_back({swapped ? q.substr(1) : q, id, swapped});
  }
}

std::string opn(const std::string& name) { return "ltorch." + name; }

const TensorProxy& T(const Value& v, const std::string& op, const char* arg = "a") {
  return expectTensor(v, opn(op), arg);
}

std::optional<DType> optDType(const Value& v) {
  if (v.isNone()) return std::nullopt;
  return v.toDType();
}

Device deviceOr(const Value& v, Device fallback = Device{}) {
  return v.isNone() ? fallback : v.toDevice();
}

int64_t dimArg(const Value& v, int64_t ndim, const std::string& op) {
  return canonicalizeDim(ndim, v.toInt(), opn(op));
}

// ---- elementwise ----------------------------------------------------------------------------

void defUnary(const std::string& name, clang::PrimUnary prim, PK kind,
              std::vector<std::string> extra = {}, bool identityOnIntegers = false) {
  std::vector<std::string> torch = {"torch." + name, "torch.Tensor." + name};
  for (auto& e : extra) torch.push_back(e);
  def(name, "a", torch, [=](const Args& a) -> Value {
    const TensorProxy& t = T(a[0], name);
    if (identityOnIntegers) {
      THUNDER_CHECK_KIND(t.dtype != DType::Bool, ErrorKind::NotImplemented, opn(name),
                         ": argument 'a' has dtype bool8, which is not supported");
      if (isIntegral(t.dtype)) return a[0];
    }
    return clang::unary(prim, a[0], kind, opn(name));
  }, kElementwise);
}

void defBinary(const std::string& name, clang::PrimBinary prim, PK kind,
               std::vector<std::string> extra = {}) {
  std::vector<std::string> torch = {"torch." + name, "torch.Tensor." + name};
  for (auto& e : extra) torch.push_back(e);
  def(name, "a, b", torch, [=](const Args& a) {
    return clang::binary(prim, a[0], a[1], kind, opn(name));
  }, kElementwise);
}

/// Eager converts some Python numbers to the tensor's dtype with a check (c10's checked_convert):
/// a clamp bound, a fill value, an alpha, a 16-bit or integer tensor's exponent. A finite number
/// outside the dtype's range raises RuntimeError there ("value cannot be converted to type
/// c10::Half without overflow"); thunder computed with inf or a wrapped integer.
void checkNumberFits(const std::string& name, const Value& v, DType d) {
  if (v.isTensor() || v.isNone() || v.isBool() || v.isComplex() || !v.isNumber()) return;
  double x = v.toDouble();
  bool fits = true;
  switch (d) {
    case DType::Float16: fits = !std::isfinite(x) || std::abs(x) <= 65504.0; break;
    case DType::BFloat16: fits = !std::isfinite(x) || std::abs(x) <= 3.3895313892515355e38; break;
    case DType::Float32: fits = !std::isfinite(x) || std::abs(x) <= 3.4028234663852886e38; break;
    case DType::Int8: fits = x >= -128 && x <= 127; break;
    case DType::Int16: fits = x >= -32768 && x <= 32767; break;
    case DType::Int32: fits = x >= -2147483648.0 && x <= 2147483647.0; break;
    case DType::UInt8: fits = x <= 255 && x >= -255; break;  // negative numbers wrap, as in eager
    default: break;
  }
  THUNDER_CHECK(fits, opn(name), ": value ", v.isInt() ? std::to_string(v.toInt()) : std::to_string(x),
                " cannot be converted to type ", dtypeName(d), " without overflow");
}

Value addAlpha(const Value& a, const Value& b, const Value& alpha, bool subtract,
               const std::string& name) {
  // eager: "Boolean alpha only supported for Boolean results" (fuzzer seed 13780)
  THUNDER_CHECK(!alpha.isBool() || elementwiseTypePromotion({a, b}, PK::Default).second == DType::Bool,
                opn(name), ": a bool alpha is only supported for bool results");
  {
    // eager checks this before anything else, alpha=1.0 and bool results included (seed 18909)
    DType r = elementwiseTypePromotion({a, b}, PK::Default).second;
    THUNDER_CHECK(isFloating(r) || isComplex(r) || !alpha.isFloat(), opn(name),
                  ": for integral input tensors, alpha must not be a floating point number, but got ",
                  alpha.toDouble());
  }
  checkNumberFits(name, alpha, elementwiseTypePromotion({a, b}, PK::Default).second);
  if (subtract) {
    auto isBool = [](const Value& v) {
      return v.isTensor() ? v.tensor().dtype == DType::Bool : v.isBool();
    };
    THUNDER_CHECK(!isBool(a) && !isBool(b), opn(name),
                       ": subtraction with a bool tensor is not supported (use ~ or "
                       "logical_not to invert a mask)");
  }
  if (!subtract && elementwiseTypePromotion({a, b}, PK::Default).second == DType::Bool) {
    // PyTorch adds bools as a logical or; alpha=False drops b.
    if (alpha.isBool() && !alpha.toBool()) return clang::maybeConvert(a, DType::Bool);
    return clang::binary(prims::logical_or, a, b, PK::AlwaysBool, opn(name));
  }
  Value rhs = b;
  if (!b.isTensor() && !alpha.isTensor() && !(alpha.isInt() && alpha.toInt() == 1)) {
    // torch.add(x, 0.1, alpha=2): the product of two numbers is a number (Python's arithmetic).
    THUNDER_CHECK_KIND(b.isNumber() && alpha.isNumber(), ErrorKind::Type, opn(name),
                       ": other and alpha must be numbers or tensors");
    bool ints = (b.isInt() || b.isBool()) && (alpha.isInt() || alpha.isBool());
    // a 16-bit tensor: other rounded to its dtype, then times alpha in float32 (eager's kernel)
    DType common = elementwiseTypePromotion({a, b}, PK::Default).second;
    bool round16 = isLowPrecision(common) && !b.isBool();
    double bv = round16 ? clang::roundToLowPrecision(b.toDouble(), common) : b.toDouble();
    rhs = ints && !round16 ? Value(b.toInt() * alpha.toInt())
          : round16       ? Value(static_cast<double>(static_cast<float>(bv) * static_cast<float>(alpha.toDouble())))
                          : Value(bv * alpha.toDouble());
    return clang::binary(subtract ? prims::sub : prims::add, a, rhs, PK::Default, opn(name), round16);
  }
  bool unitAlpha = (alpha.isInt() || alpha.isBool()) ? alpha.toInt() == 1
                   : alpha.isFloat()                ? alpha.toDouble() == 1.0
                                                    : false;
  if (unitAlpha) return clang::binary(subtract ? prims::sub : prims::add, a, b, PK::Default, opn(name));
  if (alpha.isTensor()) {
    rhs = clang::binary(prims::mul, b, alpha, PK::Default, opn(name));
    return clang::binary(subtract ? prims::sub : prims::add, a, rhs, PK::Default, opn(name));
  }
  // As eager: the dtypes come from a and b alone, and a + alpha * b is computed in the
  // computation dtype (float64 for a float64 result, float32 for 16-bit floats), rounded once.
  auto [computation, result] = elementwiseTypePromotion({a, b}, PK::Default);
  Value ca = a.isTensor() ? clang::maybeConvert(a, computation) : a;
  Value cb = b.isTensor() ? clang::maybeConvert(b, computation) : b;
  if (ca.isTensor() && cb.isTensor()) {
    // b broadcast before the product, as eager's: the gradient of a broadcast b then sums
    // g * alpha, not alpha * sum(g) (with an infinite alpha, NaN where eager's is: fuzzer seed 14820)
    std::vector<Value> both = clang::maybeBroadcast({ca, cb}, opn(name));
    ca = both[0];
    cb = both[1];
  }
  rhs = clang::binary(prims::mul, cb, alpha, PK::Default, opn(name));
  Value r = clang::binary(subtract ? prims::sub : prims::add, ca, rhs, PK::Default, opn(name));
  return clang::maybeConvert(r, result);
}

/// Runs a composite op in float32 for low precision inputs, rounding once at the end, as PyTorch's
/// CPU kernels do.
Value inFloat32(const Value& a, const std::function<Value(const Value&)>& f) {
  DType dt = a.isTensor() ? a.tensor().dtype : DType::Float32;
  if (!isLowPrecision(dt)) return f(a);
  return clang::maybeConvert(f(clang::maybeConvert(a, DType::Float32)), dt);
}

/// An operand in the computation dtype; a tensor is first rounded to a low precision result dtype,
/// as PyTorch's kernels see it (this matters at the jumps of floor and trunc).
Value computeIn(const Value& x, DType computation, DType result) {
  Value y = isLowPrecision(result) && x.isTensor() ? clang::maybeConvert(x, result) : x;
  return clang::maybeConvert(y, computation);
}

Value trueDivide(const Value& a, const Value& b) {
  return clang::binary(prims::div, a, b, PK::IntToFloat, "ltorch.div");
}

/// Python's floor division of floating point values, as PyTorch computes it (c10's
/// div_floor_floating): (a - fmod(a, b)) / b, corrected by the signs, rounded to the nearest
/// integer; a signed zero where that is 0; a / b where b is 0.
Value floorDivFloating(const Value& a, const Value& b, const std::string& name) {
  auto bin = [&](clang::PrimBinary p, const Value& x, const Value& y) {
    return clang::binary(p, x, y, PK::Default, name);
  };
  auto test = [&](clang::PrimBinary p, const Value& x, const Value& y) {
    return clang::binary(p, x, y, PK::AlwaysBool, name);
  };
  Value q = bin(prims::div, a, b);
  Value mod = bin(prims::fmod, a, b);
  Value div = bin(prims::div, bin(prims::sub, a, mod), b);
  Value modNegative = test(prims::lt, mod, 0);
  // b may be a number: its sign is known now.
  Value signDiff = b.isTensor() ? test(prims::ne, test(prims::lt, b, 0), modNegative)
                   : b.toDouble() < 0 ? test(prims::eq, modNegative, false)
                                      : modNegative;
  Value adjust = test(prims::logical_and, test(prims::ne, mod, 0), signDiff);
  div = clang::where(adjust, bin(prims::sub, div, 1), div, name);
  Value fl = prims::floor(div);
  fl = clang::where(test(prims::gt, bin(prims::sub, div, fl), 0.5), bin(prims::add, fl, 1), fl, name);
  Value r = clang::where(test(prims::ne, div, 0), fl, bin(prims::copysign, 0.0, q), name);
  if (!b.isTensor()) return b.toDouble() == 0 ? q : r;
  return clang::where(test(prims::eq, b, 0), q, r, name);
}

/// A view of t as `shape` must exist in t's eager layout (torch's computeStride), as eager's
/// view requires; reshape copies instead.
void checkView(const TensorProxy& t, const Shape& shape, const char* name) {
  std::vector<int64_t> out;
  THUNDER_CHECK(t.strides.empty() || viewStrides(t.shape, t.strides, shape, out), "ltorch.", name,
                ": view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces): a tensor of shape ",
                shapeStr(t.shape), " and strides ", shapeStr(t.strides), " viewed as ",
                shapeStr(shape), ". Use .reshape(...) instead.");
}

/// amax and amin over every dim of an empty tensor: a RuntimeError, as eager's (over a named
/// dim of length 0 the prim raises an IndexError, as eager does too).
void checkEmptyFullReduction(const Value& a, const Value& dim, const char* name) {
  const TensorProxy& t = T(a, name);
  bool all = dim.isNone() || ((dim.isTuple() || dim.isList()) && dim.items().empty());
  THUNDER_CHECK(!all || t.numel() > 0, "ltorch.", name, ": cannot reduce an empty tensor of shape ",
                shapeStr(t.shape), " over all dims; specify the reduction dim");
}

Value floorDivide(const Value& a, const Value& b) {
  auto [computation, result] = elementwiseTypePromotion({a, b}, PK::Default);
  if (isFloating(computation) || isLowPrecision(result)) {
    return clang::maybeConvert(floorDivFloating(computeIn(a, computation, result),
                                                computeIn(b, computation, result),
                                                "ltorch.floor_divide"),
                               result);
  }
  // Integers: truncating division, one less where the remainder is nonzero and the signs differ.
  Value q = clang::binary(prims::div, a, b, PK::Default, "ltorch.floor_divide");
  Value r = clang::binary(prims::fmod, a, b, PK::Default, "ltorch.floor_divide");
  const std::string name = "ltorch.floor_divide";
  Value rNonzero = clang::binary(prims::ne, r, 0, PK::AlwaysBool, name);
  Value rNegative = clang::binary(prims::lt, r, 0, PK::AlwaysBool, name);
  // b may be a number: its sign is known now.
  Value signDiff = b.isTensor()
      ? clang::binary(prims::ne, rNegative, clang::binary(prims::lt, b, 0, PK::AlwaysBool, name),
                      PK::AlwaysBool, name)
      : (b.toDouble() < 0 ? clang::binary(prims::eq, rNegative, false, PK::AlwaysBool, name)
                          : rNegative);
  Value adjust = clang::binary(prims::logical_and, rNonzero, signDiff, PK::AlwaysBool, name);
  return clang::where(adjust, clang::binary(prims::sub, q, 1, PK::Default, name), q, name);
}

void registerElementwise() {
  defUnary("abs", prims::abs, PK::ComplexToFloat, {"torch.Tensor.__abs__"});
  defUnary("acos", prims::acos, PK::IntToFloat);
  defUnary("acosh", prims::acosh, PK::IntToFloat);
  defUnary("asin", prims::asin, PK::IntToFloat);
  defUnary("asinh", prims::asinh, PK::IntToFloat);
  defUnary("atan", prims::atan, PK::IntToFloat);
  defUnary("atanh", prims::atanh, PK::IntToFloat);
  defUnary("bitwise_not", prims::bitwise_not, PK::Default, {"torch.Tensor.__invert__"});
  defUnary("ceil", prims::ceil, PK::Default, {}, true);
  defUnary("cos", prims::cos, PK::IntToFloat);
  defUnary("cosh", prims::cosh, PK::IntToFloat);
  defUnary("digamma", prims::digamma, PK::IntToFloat, {"torch.special.digamma"});
  // polygamma(n, a), the n-th derivative of digamma; Tensor.polygamma(n) takes the tensor first.
  def("polygamma", "n, a", {"torch.polygamma", "torch.special.polygamma"}, [](const Args& a) {
    THUNDER_CHECK_KIND(a[0].isInt(), ErrorKind::Type,
                       "ltorch.polygamma: expected 'n' to be an int, but got ", describe(a[0]));
    // eager's message
    THUNDER_CHECK(a[0].toInt() >= 0, "polygamma(n, x) does not support negative n.");
    T(a[1], "polygamma");
    DType dt = elementwiseTypePromotion({a[1]}, PK::IntToFloat).second;
    return prims::polygamma(a[0].toInt(), clang::maybeConvert(a[1], dt));
  }, kElementwise);
  def("tensor_polygamma", "a, n", {"torch.Tensor.polygamma"},
      [](const Args& a) { return op("polygamma", {a[1], a[0]}); }, kElementwise);
  defUnary("erf", prims::erf, PK::IntToFloat, {"torch.special.erf"});
  defUnary("erfc", prims::erfc, PK::IntToFloat, {"torch.special.erfc"});
  defUnary("erfinv", prims::erfinv, PK::IntToFloat, {"torch.special.erfinv"});
  defUnary("exp", prims::exp, PK::IntToFloat);
  def("exp2", "a", {"torch.exp2", "torch.Tensor.exp2", "torch.special.exp2"}, [](const Args& a) {
    // prims.exp2 is real only: 2**z = exp(z * ln 2) for complex z.
    if (isComplex(T(a[0], "exp2").dtype)) return op("exp", {op("mul", {a[0], M_LN2})});
    return clang::unary(prims::exp2, a[0], PK::IntToFloat, "ltorch.exp2");
  }, kElementwise);
  defUnary("expm1", prims::expm1, PK::IntToFloat, {"torch.special.expm1"});
  defUnary("floor", prims::floor, PK::Default, {}, true);
  defUnary("isfinite", prims::isfinite, PK::AlwaysBool);
  defUnary("lgamma", prims::lgamma, PK::IntToFloat, {"torch.special.gammaln"});
  defUnary("log", prims::log, PK::IntToFloat);
  defUnary("log10", prims::log10, PK::IntToFloat);
  defUnary("log1p", prims::log1p, PK::IntToFloat, {"torch.special.log1p"});
  defUnary("log2", prims::log2, PK::IntToFloat);
  defUnary("neg", prims::neg, PK::Default, {"torch.negative", "torch.Tensor.__neg__"});
  defUnary("reciprocal", prims::reciprocal, PK::IntToFloat);
  def("round", "a, *, decimals=0", {"torch.round", "torch.Tensor.round"}, [](const Args& a) -> Value {
    const char* name = "ltorch.round";
    const TensorProxy& t = T(a[0], "round");
    THUNDER_CHECK_KIND(t.dtype != DType::Bool, ErrorKind::NotImplemented, name,
                       ": argument 'a' has dtype bool8, which is not supported");
    int64_t decimals = a[1].toInt();
    if (decimals == 0) {
      if (isIntegral(t.dtype)) return a[0];
      return clang::unary(prims::round, a[0], PK::Default, name);
    }
    THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::NotImplemented, name, ": decimals=", decimals,
                       " needs a floating dtype, as eager's, but got ", dtypeName(t.dtype));
    // ATen's round_decimals: rint(x * 10^d) / 10^d, or rint(x / 10^-d) * 10^-d for d < 0, with
    // 10^|d| rounded to the math type (inf past its range, which makes the result NaN as eager's).
    double scale = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
    clang::PrimBinary in = decimals > 0 ? prims::mul : prims::div;
    clang::PrimBinary out = decimals > 0 ? prims::div : prims::mul;
    return inFloat32(a[0], [&](const Value& x) {
      Value scaled = clang::binary(in, x, scale, PK::Default, name);
      return clang::binary(out, clang::unary(prims::round, scaled, PK::Default, name), scale,
                           PK::Default, name);
    });
  }, kElementwise);
  defUnary("rsqrt", prims::rsqrt, PK::IntToFloat);
  def("sign", "a", {"torch.sign", "torch.Tensor.sign"}, [](const Args& a) {
    // The sign of a bool is itself.
    if (T(a[0], "sign").dtype == DType::Bool) return a[0];
    return clang::unary(prims::sign, a[0], PK::Default, "ltorch.sign");
  }, kElementwise);
  def("signbit", "a", {"torch.signbit", "torch.Tensor.signbit"}, [](const Args& a) {
    // Bools are never negative: signbit of their uint8 value.
    Value x = T(a[0], "signbit").dtype == DType::Bool ? clang::maybeConvert(a[0], DType::UInt8) : a[0];
    return clang::unary(prims::signbit, x, PK::AlwaysBool, "ltorch.signbit");
  }, kElementwise);
  defUnary("sin", prims::sin, PK::IntToFloat);
  defUnary("sinh", prims::sinh, PK::IntToFloat);
  defUnary("sqrt", prims::sqrt, PK::IntToFloat);
  defUnary("tan", prims::tan, PK::IntToFloat);
  defUnary("tanh", prims::tanh, PK::IntToFloat, {"torch.nn.functional.tanh"});
  defUnary("trunc", prims::trunc, PK::Default, {"torch.fix"}, true);
  defUnary("sigmoid", prims::sigmoid, PK::IntToFloat,
           {"torch.nn.functional.sigmoid", "torch.special.expit"});

  def("logical_not", "a", {"torch.logical_not", "torch.Tensor.logical_not"}, [](const Args& a) {
    T(a[0], "logical_not");
    return clang::binary(prims::eq, a[0], 0, PK::AlwaysBool, "ltorch.logical_not");
  }, kElementwise);
  def("square", "a", {"torch.square", "torch.Tensor.square"}, [](const Args& a) {
    T(a[0], "square");
    Value x = a[0].tensor().dtype == DType::Bool ? clang::maybeConvert(a[0], DType::Int64) : a[0];
    return clang::binary(prims::mul, x, x, PK::Default, "ltorch.square");
  }, kElementwise);

  def("add", "a, b, *, alpha=1",
      {"torch.add", "torch.Tensor.add", "torch.Tensor.__add__", "~torch.Tensor.__radd__"},
      [](const Args& a) { return addAlpha(a[0], a[1], a[2], false, "add"); }, kElementwise);
  def("sub", "a, b, *, alpha=1",
      {"torch.sub", "torch.subtract", "torch.Tensor.sub", "torch.Tensor.__sub__",
       "~torch.Tensor.__rsub__"},
      [](const Args& a) { return addAlpha(a[0], a[1], a[2], true, "sub"); }, kElementwise);
  def("mul", "a, b",
      {"torch.mul", "torch.multiply", "torch.Tensor.mul", "torch.Tensor.__mul__",
       "~torch.Tensor.__rmul__"},
      [](const Args& a) {
        // PyTorch multiplies bools as a logical and.
        if (elementwiseTypePromotion({a[0], a[1]}, PK::Default).second == DType::Bool)
          return clang::binary(prims::logical_and, a[0], a[1], PK::AlwaysBool, "ltorch.mul");
        return clang::binary(prims::mul, a[0], a[1], PK::Default, "ltorch.mul");
      },
      kElementwise);
  // `number / tensor`: eager's Tensor.__rtruediv__ is self.reciprocal() * other, two roundings
  // (a division differed from it by an ulp in a quarter of float32 and bfloat16 elements).
  def("rtruediv", "a, b", {"torch.Tensor.__rtruediv__", "torch.Tensor.__rdiv__"},
      [](const Args& a) -> Value {
        T(a[0], "rtruediv");
        return op("mul", {op("reciprocal", {a[0]}), a[1]});
      },
      kElementwise);
  def("div", "a, b, *, rounding_mode=None",
      {"torch.div", "torch.divide", "torch.true_divide", "torch.Tensor.div",
       "torch.Tensor.__truediv__"},
      [](const Args& a) -> Value {
        if (a[2].isNone()) return trueDivide(a[0], a[1]);
        const std::string& mode = a[2].toString();
        DType operands = elementwiseTypePromotion({a[0], a[1]}, PK::Default).second;
        THUNDER_CHECK_KIND(!isComplex(operands), ErrorKind::NotImplemented, "ltorch.div: rounding_mode='",
                           mode, "' is not supported for complex inputs (", dtypeName(operands),
                           ")");
        if (mode == "floor") return floorDivide(a[0], a[1]);
        THUNDER_CHECK(mode == "trunc",
                           "ltorch.div: rounding_mode must be None, 'trunc' or 'floor', but got '",
                           mode, "'");
        auto [computation, result] = elementwiseTypePromotion({a[0], a[1]}, PK::Default);
        // A CUDA tensor divided by a number: PyTorch's CUDA kernel multiplies by the reciprocal,
        // computed in its math type (float for float32 and below), and truncates the product
        // before rounding to the result dtype (div_trunc_kernel_cuda). trunc(0.3 / 0.1) is 2,
        // trunc(0.3 * 10.0) is 3: the same values as eager need the same arithmetic.
        if (isFloating(computation) && a[0].isTensor() && !a[1].isTensor() &&
            a[0].tensor().device.type == DeviceType::CUDA) {
          double b = a[1].toDouble();
          double reciprocal = computation == DType::Float64
                                  ? 1.0 / b
                                  : static_cast<double>(1.0f / static_cast<float>(b));
          return clang::maybeConvert(
              prims::trunc(clang::binary(prims::mul, computeIn(a[0], computation, result),
                                         reciprocal, PK::Default, "ltorch.div")),
              result);
        }
        // Floats: the quotient rounded to the result dtype, then truncated (exact in any dtype).
        if (isFloating(computation))
          return prims::trunc(clang::maybeConvert(
              clang::binary(prims::div, computeIn(a[0], computation, result),
                            computeIn(a[1], computation, result), PK::Default, "ltorch.div"),
              result));
        return clang::binary(prims::div, a[0], a[1], PK::Default, "ltorch.div");
      },
      kElementwise);
  def("floor_divide", "a, b",
      {"torch.floor_divide", "torch.Tensor.floor_divide", "torch.Tensor.__floordiv__",
       "~torch.Tensor.__rfloordiv__"},
      [](const Args& a) { return floorDivide(a[0], a[1]); }, kElementwise);
  defBinary("remainder", prims::remainder, PK::Default,
            {"torch.Tensor.__mod__", "~torch.Tensor.__rmod__"});
  defBinary("fmod", prims::fmod, PK::Default);
  def("pow", "a, b", {"torch.pow", "torch.Tensor.pow", "torch.Tensor.__pow__", "~torch.Tensor.__rpow__"},
      [](const Args& a) {
        // Eager computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt: NaN for -inf (C's pow gives
        // inf: fuzzer seed 13385), -0.0 and -inf for -0.0
        if (a[0].isTensor() && a[1].isFloat() && std::abs(a[1].toDouble()) == 0.5) {
          auto [comp, result] = elementwiseTypePromotion({a[0], a[1]}, PK::Default);
          if (isFloating(result))
            return clang::maybeConvert(op(a[1].toDouble() > 0 ? "sqrt" : "rsqrt", {computeIn(a[0], comp, result)}),
                                       result);
        }
        // Bools: eager raises for a bool exponent tensor or a bool base number; a bool tensor to
        // a bool power stays bool (x ** True is x, x ** False is all True: fuzzer seed 17927,
        // where the trace said int64 and the kernels read a bool tensor as one).
        auto isBoolTensor = [](const Value& v) { return v.isTensor() && v.tensor().dtype == DType::Bool; };
        if (isBoolTensor(a[0]) || isBoolTensor(a[1])) {
          bool boolOnly = (isBoolTensor(a[0]) || a[0].isBool()) && (isBoolTensor(a[1]) || a[1].isBool());
          THUNDER_CHECK_KIND(!boolOnly || (a[0].isTensor() && a[1].isBool()), ErrorKind::NotImplemented,
                             "ltorch.pow: pow is not implemented for a bool exponent tensor or a bool base");
          if (boolOnly)
            return a[1].toBool() ? op("bitwise_and", {a[0], true}) : op("logical_or", {a[0], true});
        }
        if (a[0].isTensor() && !a[1].isTensor()) {
          DType r = elementwiseTypePromotion({a[0], a[1]}, PK::Default).second;
          if (isLowPrecision(r) || isIntegral(r)) checkNumberFits("pow", a[1], r);
        }
        return clang::binary(prims::pow, a[0], a[1], PK::Default, "ltorch.pow");
      }, kElementwise);
  defBinary("atan2", prims::atan2, PK::IntToFloat, {"torch.arctan2"});
  defBinary("maximum", prims::maximum, PK::Default);
  defBinary("minimum", prims::minimum, PK::Default);
  defBinary("copysign", prims::copysign, PK::IntToFloat);
  defBinary("eq", prims::eq, PK::AlwaysBool, {"torch.Tensor.__eq__"});
  defBinary("ne", prims::ne, PK::AlwaysBool, {"torch.not_equal", "torch.Tensor.__ne__"});
  defBinary("lt", prims::lt, PK::AlwaysBool, {"torch.less", "torch.Tensor.__lt__"});
  defBinary("le", prims::le, PK::AlwaysBool, {"torch.less_equal", "torch.Tensor.__le__"});
  defBinary("gt", prims::gt, PK::AlwaysBool, {"torch.greater", "torch.Tensor.__gt__"});
  defBinary("ge", prims::ge, PK::AlwaysBool, {"torch.greater_equal", "torch.Tensor.__ge__"});
  defBinary("bitwise_and", prims::bitwise_and, PK::Default,
            {"torch.Tensor.__and__", "~torch.Tensor.__rand__"});
  defBinary("bitwise_or", prims::bitwise_or, PK::Default,
            {"torch.Tensor.__or__", "~torch.Tensor.__ror__"});
  defBinary("bitwise_xor", prims::bitwise_xor, PK::Default,
            {"torch.Tensor.__xor__", "~torch.Tensor.__rxor__"});
  defBinary("logical_and", prims::logical_and, PK::AlwaysBool);
  defBinary("logical_or", prims::logical_or, PK::AlwaysBool);

  def("where", "condition, input, other", {"torch.where", "torch.Tensor.where"},
      [](const Args& a) { return clang::where(a[0], a[1], a[2], "ltorch.where"); }, kElementwise);
  def("masked_fill", "a, mask, value", {"torch.masked_fill", "torch.Tensor.masked_fill"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "masked_fill");
        checkNumberFits("masked_fill", a[2], t.dtype);
        Value v = a[2].isTensor() ? clang::maybeConvert(a[2], t.dtype) : a[2];
        Value r = clang::where(a[1], v, a[0], "ltorch.masked_fill");
        return clang::maybeConvert(r, t.dtype);
      }, kElementwise);
  def("clamp", "a, min=None, max=None",
      {"torch.clamp", "torch.clip", "torch.Tensor.clamp", "torch.Tensor.clip"},
      [](const Args& a) {
        THUNDER_CHECK(!a[1].isNone() || !a[2].isNone(),
                      "ltorch.clamp: at least one of 'min' or 'max' must not be None");
        Value r = a[0];
        DType result = elementwiseTypePromotion({a[0], a[1].isNone() ? a[0] : a[1], a[2].isNone() ? a[0] : a[2]},
                                                PK::Default).second;
        checkNumberFits("clamp", a[1], result);
        checkNumberFits("clamp", a[2], result);
        // PyTorch's clamp kernels with number bounds take no bool result ("clamp_scalar_cpu" not
        // implemented for 'Bool'); bool tensor bounds run through maximum and minimum (seed 94089).
        THUNDER_CHECK_KIND(result != DType::Bool || !((!a[1].isNone() && !a[1].isTensor()) ||
                                                      (!a[2].isNone() && !a[2].isTensor())),
                           ErrorKind::NotImplemented,
                           "ltorch.clamp: not implemented for a bool tensor with number bounds (min=",
                           describe(a[1]), ", max=", describe(a[2]), ")");
        if (!a[1].isNone()) r = clang::binary(prims::maximum, r, a[1], PK::Default, "ltorch.clamp");
        if (!a[2].isNone()) r = clang::binary(prims::minimum, r, a[2], PK::Default, "ltorch.clamp");
        return r;
      }, kElementwise);
  def("lerp", "a, end, weight", {"torch.lerp", "torch.Tensor.lerp"}, [](const Args& a) {
    // PyTorch's lerp kernels take floating and complex tensors only ("lerp_kernel_scalar" not
    // implemented for 'Long').
    for (const Value& v : {a[0], a[1]}) {
      DType d = T(v, "lerp").dtype;
      THUNDER_CHECK_KIND(isFloating(d) || isComplex(d), ErrorKind::NotImplemented,
                         "ltorch.lerp: not implemented for ", dtypeName(d),
                         " inputs (floating point or complex tensors are expected)");
    }
    // Nor do they promote: end, and a weight tensor of one or more dims, have the input's dtype
    // (fuzzer seed 40841: a float64 0-dim start and a float32 end, which eager refuses).
    DType d = T(a[0], "lerp").dtype;
    THUNDER_CHECK_KIND(T(a[1], "lerp").dtype == d, ErrorKind::Runtime, "ltorch.lerp: expected dtype ",
                       dtypeName(d), " for `end` but got dtype ", dtypeName(T(a[1], "lerp").dtype));
    THUNDER_CHECK_KIND(!a[2].isTensor() || a[2].tensor().ndim() == 0 || a[2].tensor().dtype == d,
                       ErrorKind::Runtime, "ltorch.lerp: expected dtype ", dtypeName(d),
                       " for `weight` but got dtype ", dtypeName(a[2].isTensor() ? a[2].tensor().dtype : d));
    // Eager's formula (ATen's lerp): a + w * (end - a) for |w| < 0.5, else
    // end - (end - a) * (1 - w), computed in the computation dtype and rounded once. One formula
    // for all weights differs at infinities (lerp(inf, 1, 0.7): inf + 0.7 * -inf is NaN, eager's
    // inf) and in rounding.
    auto [comp, out] = elementwiseTypePromotion({a[0], a[1], a[2]}, PromotionKind::Default);
    Value x = clang::maybeConvert(a[0], comp), e = clang::maybeConvert(a[1], comp), w = a[2];
    if (w.isTensor()) w = clang::maybeConvert(w, comp);
    Value diff = op("sub", {e, x});
    auto small = [&] { return op("add", {x, op("mul", {w, diff})}); };
    auto large = [&] {
      Value oneMinus = w.isTensor()    ? op("sub", {1, w})
                       : w.isComplex() ? Value(1.0 - w.toComplex())
                                       : Value(1.0 - w.toDouble());
      return op("sub", {e, op("mul", {diff, oneMinus})});
    };
    Value r;
    if (!w.isTensor()) {
      // A complex weight's size is its modulus, as eager's abs.
      double size = w.isComplex() ? std::abs(w.toComplex()) : std::abs(w.toDouble());
      r = size < 0.5 ? small() : large();
    } else {
      r = op("where", {op("lt", {op("abs", {w}), 0.5}), small(), large()});
    }
    return clang::maybeConvert(r, out);
  }, kElementwise);

  // Activations. PyTorch's kernels of these take floating inputs only (NotImplementedError, as
  // "GeluKernelImpl" not implemented for 'Long'); relu and relu6 take integers but not bools.
  auto floatingOnly = [](const Value& a, const char* name) {
    DType d = T(a, name).dtype;
    THUNDER_CHECK_KIND(isFloating(d), ErrorKind::NotImplemented, "ltorch.", name,
                       ": not implemented for ", dtypeName(d), " inputs (a floating point tensor is expected)");
  };
  auto noBool = [](const Value& a, const char* name) {
    THUNDER_CHECK(T(a, name).dtype != DType::Bool, "ltorch.", name, ": bool inputs are not supported");
  };
  def("relu", "a, inplace=False", {"torch.relu", "torch.Tensor.relu", "torch.nn.functional.relu"},
      [noBool](const Args& a) {
        THUNDER_CHECK_KIND(!a[1].toBool(), ErrorKind::NotImplemented,
                           "ltorch.relu: inplace=True is not supported");
        noBool(a[0], "relu");
        return clang::binary(prims::maximum, a[0], 0, PK::Default, "ltorch.relu");
      }, kElementwise);
  def("relu6", "a, inplace=False", {"torch.nn.functional.relu6"}, [noBool](const Args& a) {
    noBool(a[0], "relu6");
    // hardtanh(a, 0, 6), as F.relu6 is in PyTorch: its gradient is 0 at both bounds (a clamp's
    // would pass it through at a == 0 and a == 6, which bf16 inputs hit).
    return op("where", {op("le", {a[0], 0}), 0, op("where", {op("ge", {a[0], 6}), 6, a[0]})});
  }, kElementwise);
  def("gelu", "a, *, approximate='none'", {"torch.nn.functional.gelu"}, [floatingOnly](const Args& a) {
    floatingOnly(a[0], "gelu");
    const TensorProxy& t = T(a[0], "gelu");
    const std::string& approx = a[1].toString();
    DType dt = t.dtype;
    Value x = isLowPrecision(dt) ? clang::maybeConvert(a[0], DType::Float32) : a[0];
    Value r;
    if (approx == "none") {
      Value cdf = op("mul", {0.5, op("add", {1.0, op("erf", {op("mul", {x, M_SQRT1_2})})})});
      r = op("mul", {x, cdf});
    } else {
      THUNDER_CHECK(approx == "tanh",
                         "ltorch.gelu: approximate must be 'none' or 'tanh', but got '", approx, "'");
      Value inner = op("mul", {std::sqrt(2.0 / M_PI),
                               op("add", {x, op("mul", {0.044715, op("mul", {x, op("mul", {x, x})})})})});
      r = op("mul", {op("mul", {0.5, x}), op("add", {1.0, op("tanh", {inner})})});
    }
    return clang::maybeConvert(r, dt);
  }, kElementwise);
  def("silu", "a, inplace=False", {"torch.nn.functional.silu"}, [floatingOnly](const Args& a) {
    DType d = T(a[0], "silu").dtype;  // silu alone also takes complex inputs
    if (!isComplex(d)) floatingOnly(a[0], "silu");
    return inFloat32(a[0], [](const Value& x) { return op("mul", {x, op("sigmoid", {x})}); });
  }, kElementwise);
  // The activations' backward kernels, as ATen has them (torch.ops.aten.<name>): the gradient
  // from the output's or the input's values, in float32 for 16-bit values with one rounding. The
  // grad rules at symbolic sizes use them: a call at varying sizes runs whole in ATen, one kernel
  // where its formula would be several.
  auto activationBackward = [](const char* name, std::function<Value(const Value& g, const Value& v, const Args& a)> f) {
    def(name, std::string(name) == "gelu_backward" ? "grad_output, a, *, approximate='none'" : "grad_output, a", {},
        [f, name](const Args& a) {
          const TensorProxy &g = T(a[0], name, "grad_output"), &v = T(a[1], name, "a");
          THUNDER_CHECK(isFloating(g.dtype) && g.dtype == v.dtype && g.shape == v.shape, "ltorch.", name,
                        ": expected floating-point tensors of one dtype and shape, but got ", g.typeString(), " and ",
                        v.typeString());
          DType c = isLowPrecision(g.dtype) ? DType::Float32 : g.dtype;
          return clang::maybeConvert(f(clang::maybeConvert(a[0], c), clang::maybeConvert(a[1], c), a), g.dtype);
        }, kElementwise);
  };
  activationBackward("tanh_backward", [](const Value& g, const Value& y, const Args&) {
    return op("mul", {g, op("add", {op("neg", {op("mul", {y, y})}), 1.0})});
  });
  activationBackward("sigmoid_backward", [](const Value& g, const Value& y, const Args&) {
    return op("mul", {op("mul", {g, op("add", {op("neg", {y}), 1.0})}), y});
  });
  activationBackward("silu_backward", [](const Value& g, const Value& x, const Args&) {
    Value sg = op("sigmoid", {x});
    return op("mul", {op("mul", {g, sg}), op("add", {op("mul", {x, op("add", {op("neg", {sg}), 1.0})}), 1.0})});
  });
  activationBackward("gelu_backward", [](const Value& g, const Value& x, const Args& a) {
    Value d;
    if (a[2].toString() == "tanh") {
      const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
      Value xsq = op("mul", {x, x});
      Value t = op("tanh", {op("mul", {op("add", {x, op("mul", {op("mul", {xsq, x}), kappa})}), beta})});
      Value left = op("mul", {op("add", {t, 1.0}), 0.5});
      Value right = op("mul", {op("mul", {op("mul", {op("mul", {x, 0.5}), op("add", {op("neg", {op("mul", {t, t})}), 1.0})}), beta}),
                               op("add", {op("mul", {xsq, 3.0 * kappa}), 1.0})});
      d = op("add", {left, right});
    } else {
      Value cdf = op("mul", {op("add", {op("erf", {op("mul", {x, M_SQRT1_2})}), 1.0}), 0.5});
      Value pdf = op("mul", {op("exp", {op("mul", {op("mul", {x, -0.5}), x})}), 0.5 * M_2_SQRTPI * M_SQRT1_2});
      d = op("add", {cdf, op("mul", {x, pdf})});
    }
    return op("mul", {g, d});
  });
  def("softplus", "a, beta=1.0, threshold=20.0", {"torch.nn.functional.softplus"},
      [floatingOnly](const Args& a) {
        floatingOnly(a[0], "softplus");
        return inFloat32(a[0], [&](const Value& x) {
          Value scaled = op("mul", {x, a[1]});
          // exp of at most the threshold: beyond it the branch is not taken, and exp(scaled) = inf
          // there would make its zero gradient 0 * inf = NaN (fuzzer seed 10713; eager's
          // softplus_backward passes g there)
          Value above = op("gt", {scaled, a[2]});
          Value capped = op("where", {above, a[2], scaled});  // NaN passes (and its gradient)
          Value soft = op("div", {op("log1p", {op("exp", {capped})}), a[1]});
          return op("where", {above, x, soft});
        });
      }, kElementwise);
  def("leaky_relu", "a, negative_slope=0.01, inplace=False", {"torch.nn.functional.leaky_relu"},
      [floatingOnly](const Args& a) {
        floatingOnly(a[0], "leaky_relu");
        return op("where", {op("gt", {a[0], 0}), a[0], op("mul", {a[0], a[1]})});
      }, kElementwise);
  def("elu", "a, alpha=1.0, inplace=False", {"torch.nn.functional.elu"}, [floatingOnly](const Args& a) {
    floatingOnly(a[0], "elu");
    return inFloat32(a[0], [&](const Value& x) {
      return op("where", {op("gt", {x, 0}), x, op("mul", {op("expm1", {x}), a[1]})});
    });
  }, kElementwise);
  def("hardswish", "a, inplace=False", {"torch.nn.functional.hardswish"}, [floatingOnly](const Args& a) {
    floatingOnly(a[0], "hardswish");
    return inFloat32(a[0], [](const Value& x) {
      return op("div", {op("mul", {x, op("relu6", {op("add", {x, 3})})}), 6});
    });
  }, kElementwise);
  def("mish", "a, inplace=False", {"torch.nn.functional.mish"}, [floatingOnly](const Args& a) {
    floatingOnly(a[0], "mish");
    return inFloat32(a[0], [](const Value& x) {
      return op("mul", {x, op("tanh", {op("softplus", {x})})});
    });
  }, kElementwise);
}

// ---- type conversion ------------------------------------------------------------------------

void defConvert(const std::string& name, DType dt) {
  def(name, "a", {"torch.Tensor." + name}, [dt, name](const Args& a) {
    T(a[0], name);
    return clang::maybeConvert(a[0], dt);
  });
}

void registerConversions() {
  def("to", "a, device=None, dtype=None, non_blocking=False, copy=False", {"torch.Tensor.to"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "to");
        Value r = a[0];
        // Converted on the side where it is smaller, as a cast on the source's device first
        // would move the wider values.
        bool castFirst = !a[2].isNone() && dtypeItemSize(a[2].toDType()) < dtypeItemSize(t.dtype);
        if (castFirst) r = clang::maybeConvert(r, a[2].toDType());
        if (!a[1].isNone() && a[1].toDevice() != t.device) r = prims::device_put(r, a[1].toDevice());
        if (!a[2].isNone() && !castFirst) r = clang::maybeConvert(r, a[2].toDType());
        return r;
      });
  def("type_as", "a, other", {"torch.Tensor.type_as"}, [](const Args& a) {
    return clang::maybeConvert(a[0], T(a[1], "type_as", "other").dtype);
  });
  defConvert("float", DType::Float32);
  defConvert("double", DType::Float64);
  defConvert("half", DType::Float16);
  defConvert("bfloat16", DType::BFloat16);
  defConvert("int", DType::Int32);
  defConvert("long", DType::Int64);
  defConvert("bool", DType::Bool);
}

// ---- shapes ---------------------------------------------------------------------------------

Value getitem(const Value& a, const Value& key);
Value wrapNegativeIndices(const Value& index, int64_t n);

void registerShapeOps() {
  def("reshape", "a, *shape", {"torch.reshape", "torch.Tensor.reshape"}, [](const Args& a) {
    return clang::reshape(a[0], a[1].toInts(), "ltorch.reshape");
  }, kShapeOp);
  def("view", "a, *shape", {"torch.Tensor.view"}, [](const Args& a) {
    THUNDER_CHECK_KIND(!a[1].isDType(), ErrorKind::NotImplemented,
                       "ltorch.view: viewing a tensor as another dtype is not supported");
    Value r = clang::reshape(a[0], a[1].toInts(), "ltorch.view");
    checkView(T(a[0], "view"), r.tensor().shape, "view");
    return r;
  }, kShapeOp);
  def("view_as", "a, other", {"torch.Tensor.view_as"}, [](const Args& a) {
    Value r = clang::reshape(a[0], T(a[1], "view_as", "other").shape, "ltorch.view_as");
    checkView(T(a[0], "view_as"), r.tensor().shape, "view_as");
    return r;
  }, kShapeOp);
  def("reshape_as", "a, other", {"torch.Tensor.reshape_as"}, [](const Args& a) {
    return clang::reshape(a[0], T(a[1], "reshape_as", "other").shape, "ltorch.reshape_as");
  }, kShapeOp);
  def("flatten", "a, start_dim=0, end_dim=-1", {"torch.flatten", "torch.Tensor.flatten"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "flatten");
        if (t.ndim() == 0) return clang::reshape(a[0], {1}, "ltorch.flatten");
        int64_t s = dimArg(a[1], t.ndim(), "flatten"), e = dimArg(a[2], t.ndim(), "flatten");
        THUNDER_CHECK(s <= e, "ltorch.flatten: start_dim ", a[1].toInt(),
                      " cannot come after end_dim ", a[2].toInt());
        Shape shape(t.shape.begin(), t.shape.begin() + s);
        int64_t n = 1;
        for (int64_t i = s; i <= e; ++i) n *= t.shape[i];
        shape.push_back(n);
        shape.insert(shape.end(), t.shape.begin() + e + 1, t.shape.end());
        return clang::reshape(a[0], shape, "ltorch.flatten");
      }, kShapeOp);
  def("unsqueeze", "a, dim", {"torch.unsqueeze", "torch.Tensor.unsqueeze"}, [](const Args& a) {
    return clang::unsqueeze(a[0], a[1].toInt(), "ltorch.unsqueeze");
  }, kShapeOp);
  def("squeeze", "a, dim=None", {"torch.squeeze", "torch.Tensor.squeeze"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "squeeze");
    std::vector<int64_t> dims;
    if (a[1].isNone()) {
      for (int64_t i = 0; i < t.ndim(); ++i)
        if (t.shape[i] == 1) dims.push_back(i);
    } else {
      // As PyTorch: a named dim whose length is not 1 is left alone.
      for (int64_t d : canonicalizeDims(t.ndim(), a[1].toInts(), "ltorch.squeeze"))
        if (t.ndim() > 0 && t.shape[d] == 1) dims.push_back(d);
    }
    if (dims.empty()) return a[0];
    return prims::squeeze(a[0], dims);
  }, kShapeOp);
  def("permute", "a, *dims", {"torch.permute", "torch.Tensor.permute"}, [](const Args& a) {
    return clang::permute(a[0], a[1].toInts(), "ltorch.permute");
  }, kShapeOp);
  def("transpose", "a, dim0, dim1",
      {"torch.transpose", "torch.Tensor.transpose", "torch.swapaxes", "torch.Tensor.swapaxes"},
      [](const Args& a) {
        return clang::transpose(a[0], a[1].toInt(), a[2].toInt(), "ltorch.transpose");
      }, kShapeOp);
  def("t", "a", {"torch.t", "torch.Tensor.t"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "t");
    THUNDER_CHECK(t.ndim() <= 2, "ltorch.t: expected a tensor with at most 2 dimensions, but got shape ",
                  shapeStr(t.shape));
    if (t.ndim() < 2) return a[0];
    return clang::transpose(a[0], 0, 1, "ltorch.t");
  }, kShapeOp);
  def("movedim", "a, source, destination", {"torch.movedim", "torch.Tensor.movedim"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "movedim");
        std::vector<int64_t> src = canonicalizeDims(t.ndim(), a[1].toInts(), "ltorch.movedim");
        std::vector<int64_t> dst = canonicalizeDims(t.ndim(), a[2].toInts(), "ltorch.movedim");
        THUNDER_CHECK(src.size() == dst.size(),
                      "ltorch.movedim: source and destination must have the same length");
        if (t.ndim() == 0) return a[0];
        std::vector<int64_t> perm(t.ndim(), -1), rest;
        for (size_t i = 0; i < src.size(); ++i) perm[dst[i]] = src[i];
        for (int64_t i = 0; i < t.ndim(); ++i)
          if (std::find(src.begin(), src.end(), i) == src.end()) rest.push_back(i);
        size_t r = 0;
        for (auto& p : perm)
          if (p < 0) p = rest[r++];
        return clang::permute(a[0], perm, "ltorch.movedim");
      }, kShapeOp);
  def("expand", "a, *shape", {"torch.Tensor.expand"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "expand");
    Shape shape = a[1].toInts();
    THUNDER_CHECK(shape.size() >= static_cast<size_t>(t.ndim()), "ltorch.expand: the number of sizes (",
                  shape.size(), ") must be at least the number of dimensions of ", shapeStr(t.shape));
    size_t off = shape.size() - t.ndim();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) {
        THUNDER_CHECK(i >= off, "ltorch.expand: -1 is not allowed in a new leading dimension");
        shape[i] = t.shape[i - off];
      }
    }
    return clang::expandTo(a[0], shape, "ltorch.expand");
  }, kShapeOp);
  def("expand_as", "a, other", {"torch.Tensor.expand_as"}, [](const Args& a) {
    return clang::expandTo(a[0], T(a[1], "expand_as", "other").shape, "ltorch.expand_as");
  }, kShapeOp);
  def("broadcast_to", "a, shape", {"torch.broadcast_to", "torch.Tensor.broadcast_to"},
      [](const Args& a) { return op("expand", {a[0], a[1]}); }, kShapeOp);
  def("contiguous", "a", {"torch.Tensor.contiguous"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "contiguous");
    std::vector<int64_t> order;
    for (int64_t i = t.ndim() - 1; i >= 0; --i) order.push_back(i);
    return prims::stride_order(a[0], order);
  });
  def("cat", "tensors, dim=0", {"torch.cat", "torch.concat", "torch.concatenate"},
      [](const Args& a) {
        const std::vector<Value>& ts = a[0].items();
        THUNDER_CHECK_KIND(!ts.empty(), ErrorKind::Value, "ltorch.cat: expected a non-empty list of tensors");
        std::vector<Value> kept;
        for (size_t i = 0; i < ts.size(); ++i) {
          const TensorProxy& t = expectTensor(ts[i], "ltorch.cat", "tensors[" + std::to_string(i) + "]");
          // Eager checks every tensor, the skipped ones and a lone one too (fuzzer seed 45915)
          THUNDER_CHECK(t.ndim() > 0, "ltorch.cat: zero-dimensional tensor (at position ", i,
                        ") cannot be concatenated");
          // PyTorch skips 1-D empty tensors in cat.
          if (!(t.ndim() == 1 && t.shape[0] == 0)) kept.push_back(ts[i]);
        }
        // dim is checked against the first tensor not skipped, even when it is the only one; with
        // every tensor skipped eager checks no dim.
        int64_t dim = kept.empty() ? 0 : canonicalizeDim(kept[0].tensor().ndim(), a[1].toInt(), "ltorch.cat");
        // With every tensor skipped, the (empty) result still comes from all of them: eager's
        // result has a gradient path when any of them needs a gradient (fuzzer seed 136322).
        if (kept.empty()) kept = ts;
        // The skipped tensors take part in the type promotion, as in eager (fuzzer seed 12315)
        DType dt = resultType(ts);
        for (auto& k : kept) k = clang::maybeConvert(k, dt);
        if (kept.size() == 1) return kept[0];
        return prims::cat(kept, dim);
      });
  def("stack", "tensors, dim=0", {"torch.stack"}, [](const Args& a) {
    const std::vector<Value>& ts = a[0].items();
    THUNDER_CHECK(!ts.empty(), "ltorch.stack: expected a non-empty list of tensors");
    const TensorProxy& first = expectTensor(ts[0], "ltorch.stack", "tensors[0]");
    int64_t dim = canonicalizeDim(first.ndim() + 1, a[1].toInt(), "ltorch.stack");
    std::vector<Value> parts;
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorProxy& t = expectTensor(ts[i], "ltorch.stack", "tensors[" + std::to_string(i) + "]");
      THUNDER_CHECK(t.shape == first.shape, "ltorch.stack: expected tensors of one shape, but got ",
                    shapeStr(first.shape), " and ", shapeStr(t.shape));
      parts.push_back(clang::unsqueeze(ts[i], dim, "ltorch.stack"));
    }
    return op("cat", {Value::list(parts), dim});
  });
  def("split", "a, split_size_or_sections, dim=0", {"torch.split", "torch.Tensor.split"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "split");
        // RuntimeError, as eager's: a 0-dim tensor has no dim to cut (fuzzer seed 3411)
        THUNDER_CHECK(t.ndim() > 0, "ltorch.split: expected a tensor of at least 1 dimension, but got a 0-dim tensor");
        int64_t dim = dimArg(a[2], t.ndim(), "split");
        int64_t n = t.shape[dim];
        std::vector<int64_t> sizes;
        if (a[1].isInt()) {
          int64_t s = a[1].toInt();
          THUNDER_CHECK(s > 0 || (s == 0 && n == 0), "ltorch.split: split_size must be positive, but got ", s);
          for (int64_t i = 0; i < n; i += s) sizes.push_back(std::min(s, n - i));
          if (sizes.empty()) sizes.push_back(0);
        } else {
          sizes = a[1].toInts();
          int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
          THUNDER_CHECK(total == n, "ltorch.split: split sizes ", shapeStr(sizes), " sum to ",
                        total, " but dimension ", dim, " has length ", n);
        }
        std::vector<Value> out;
        int64_t start = 0;
        for (int64_t s : sizes) {
          out.push_back(clang::sliceInDim(a[0], dim, start, start + s, 1, "ltorch.split"));
          start += s;
        }
        return Value::tuple(out);
      });
  def("chunk", "a, chunks, dim=0", {"torch.chunk", "torch.Tensor.chunk"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "chunk");
    // RuntimeError, as eager's: a 0-dim tensor has no dim to cut (fuzzer seed 3411)
    THUNDER_CHECK(t.ndim() > 0, "ltorch.chunk: expected a tensor of at least 1 dimension, but got a 0-dim tensor");
    int64_t chunks = a[1].toInt();
    THUNDER_CHECK(chunks > 0, "ltorch.chunk: chunks must be positive, but got ", chunks);
    int64_t dim = dimArg(a[2], t.ndim(), "chunk");
    int64_t n = t.shape[dim];
    int64_t size = (n + chunks - 1) / chunks;
    if (size == 0) size = 1;
    return op("split", {a[0], size, dim});
  });
  def("unbind", "a, dim=0", {"torch.unbind", "torch.Tensor.unbind"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "unbind");
    // IndexError, as eager's (a 0-dim tensor has no dim 0 to index: fuzzer seed 3411)
    THUNDER_CHECK_KIND(t.ndim() > 0, ErrorKind::Index, "ltorch.unbind: dimension specified as ",
                       a[1].toInt(), " but the tensor has no dimensions");
    int64_t dim = dimArg(a[1], t.ndim(), "unbind");
    std::vector<Value> out;
    for (int64_t i = 0; i < t.shape[dim]; ++i)
      out.push_back(prims::squeeze(clang::sliceInDim(a[0], dim, i, i + 1, 1, "ltorch.unbind"), {dim}));
    return Value::tuple(out);
  });
  def("narrow", "a, dim, start, length", {"torch.narrow", "torch.Tensor.narrow"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "narrow");
        // RuntimeError, as eager's: a 0-dim tensor has no dim to cut (fuzzer seed 3411)
        THUNDER_CHECK(t.ndim() > 0, "ltorch.narrow: expected a tensor of at least 1 dimension, but got a 0-dim tensor");
        int64_t dim = dimArg(a[1], t.ndim(), "narrow");
        int64_t start = a[2].toInt(), len = a[3].toInt();
        if (start < 0) start += t.shape[dim];
        THUNDER_CHECK(start >= 0 && len >= 0 && start + len <= t.shape[dim], "ltorch.narrow: start ",
                      a[2].toInt(), " and length ", len, " exceed dimension ", dim, " of length ",
                      t.shape[dim]);
        return clang::sliceInDim(a[0], dim, start, start + len, 1, "ltorch.narrow");
      }, kShapeOp);
  def("flip", "a, dims", {"torch.flip", "torch.Tensor.flip"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "flip");
    std::vector<int64_t> dims = canonicalizeDims(t.ndim(), a[1].toInts(), "ltorch.flip");
    if (dims.empty() || t.ndim() == 0) return a[0];
    return prims::flip(a[0], dims);
  });
  def("repeat", "a, *repeats", {"torch.Tensor.repeat"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "repeat");
    std::vector<int64_t> reps = a[1].toInts();
    THUNDER_CHECK(reps.size() >= static_cast<size_t>(t.ndim()),
                  "ltorch.repeat: number of repeats (", reps.size(),
                  ") cannot be smaller than the number of dimensions (", t.ndim(), ")");
    size_t off = reps.size() - t.ndim();
    // Put each input dim next to a new repeat dim, expand, then merge the pairs.
    Shape padded(off, 1);
    padded.insert(padded.end(), t.shape.begin(), t.shape.end());
    Shape inter, expanded, final;
    std::vector<int64_t> bdims;
    for (size_t i = 0; i < reps.size(); ++i) {
      inter.push_back(1);
      inter.push_back(padded[i]);
      expanded.push_back(reps[i]);
      expanded.push_back(padded[i]);
      final.push_back(reps[i] * padded[i]);
    }
    Value x = clang::reshape(a[0], inter, "ltorch.repeat");
    x = clang::expandTo(x, expanded, "ltorch.repeat");
    x = clang::reshape(x, final, "ltorch.repeat");
    // A new tensor, contiguous as eager's (with every repeat 1 the reshapes keep the input's
    // strides, and `x.t().repeat(1, 1).view(-1)` was refused).
    std::vector<int64_t> order;
    for (int64_t i = static_cast<int64_t>(final.size()) - 1; i >= 0; --i) order.push_back(i);
    return prims::stride_order(x, order);
  });
  def("index_select", "a, dim, index", {"torch.index_select", "torch.Tensor.index_select"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "index_select");
        // eager checks the index's rank before its dtype (fuzzer seed 18589)
        THUNDER_CHECK_KIND(!a[2].isTensor() || a[2].tensor().ndim() <= 1, ErrorKind::Index,
                           "ltorch.index_select: index is supposed to be a vector, but got shape ",
                           a[2].isTensor() ? shapeStr(a[2].tensor().shape) : std::string());
        return prims::take(a[0], a[2], dimArg(a[1], t.ndim(), "index_select"));
      });
  def("gather", "a, dim, index", {"torch.gather", "torch.Tensor.gather"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "gather");
    return prims::gather(a[0], a[2], dimArg(a[1], t.ndim(), "gather"));
  });
  def("take_along_dim", "a, indices, dim=None", {"torch.take_along_dim", "torch.Tensor.take_along_dim"},
      [](const Args& a) {
        const std::string op = "ltorch.take_along_dim";
        const TensorProxy& t = T(a[0], "take_along_dim");
        const TensorProxy& idx = T(a[1], "take_along_dim", "indices");
        THUNDER_CHECK_KIND(idx.dtype == DType::Int64, ErrorKind::Runtime, op,
                           ": dtype of indices should be Long (int64) but got ", dtypeName(idx.dtype));
        if (a[2].isNone())  // eager's: the flattened input at the flattened indices
          return prims::gather(clang::reshape(a[0], {t.numel()}, op), clang::reshape(a[1], {idx.numel()}, op), 0);
        int64_t dim = dimArg(a[2], t.ndim(), "take_along_dim");
        THUNDER_CHECK(idx.ndim() == t.ndim(), op, ": input and indices should have the same number of dimensions, "
                      "but got ", t.ndim(), " dimensions for input, and ", idx.ndim(), " dimensions for indices");
        // Eager broadcasts the input and the indices in every dim but `dim`, and reads a negative
        // index from the end of the dim.
        Shape selfShape = t.shape;
        selfShape[dim] = idx.shape[dim];
        Shape shape = clang::broadcastShapes({selfShape, idx.shape}, op);
        Value index = clang::expandTo(a[1], shape, op);
        shape[dim] = t.shape[dim];
        Value x = clang::expandTo(a[0], shape, op);
        return prims::gather(x, wrapNegativeIndices(index, t.shape[dim]), dim);
      });
  def("scatter_add", "a, dim, index, src", {"torch.scatter_add", "torch.Tensor.scatter_add"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "scatter_add");
        return prims::scatter_add(a[0], a[2], a[3], dimArg(a[1], t.ndim(), "scatter_add"));
      });
  def("pad", "a, pad, mode='constant', value=None", {"torch.nn.functional.pad"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "pad");
        std::vector<int64_t> p = a[1].toInts();
        if (a[2].toString() != "constant") return padModes(a[0], p, a[2].toString());
        THUNDER_CHECK(p.size() % 2 == 0 && p.size() / 2 <= static_cast<size_t>(t.ndim()),
                      "ltorch.pad: padding length ", p.size(),
                      " must be even and at most twice the number of dimensions (", t.ndim(), ")");
        std::vector<std::array<int64_t, 3>> cfg(t.ndim(), {0, 0, 0});
        for (size_t i = 0; i < p.size() / 2; ++i) cfg[t.ndim() - 1 - i] = {p[2 * i], p[2 * i + 1], 0};
        Value fill = a[3].isNone() ? Value(0) : a[3];
        return prims::pad(a[0], clang::maybeConvert(fill, t.dtype), cfg);
      });
  def("tril", "a, diagonal=0", {"torch.tril", "torch.Tensor.tril"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "tril");
    THUNDER_CHECK(t.ndim() >= 2, "ltorch.tril: expected at least 2 dimensions, but got shape ",
                  shapeStr(t.shape));
    int64_t r = t.shape[t.ndim() - 2], c = t.shape.back();
    Value rows = clang::unsqueeze(prims::iota(r, 0, 1, t.device, DType::Int64), 1, "ltorch.tril");
    Value cols = clang::unsqueeze(prims::iota(c, 0, 1, t.device, DType::Int64), 0, "ltorch.tril");
    Value mask = op("le", {op("sub", {cols, rows}), a[1]});
    return clang::where(mask, a[0], clang::maybeConvert(Value(0), t.dtype), "ltorch.tril");
  });
  def("triu", "a, diagonal=0", {"torch.triu", "torch.Tensor.triu"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "triu");
    THUNDER_CHECK(t.ndim() >= 2, "ltorch.triu: expected at least 2 dimensions, but got shape ",
                  shapeStr(t.shape));
    int64_t r = t.shape[t.ndim() - 2], c = t.shape.back();
    Value rows = clang::unsqueeze(prims::iota(r, 0, 1, t.device, DType::Int64), 1, "ltorch.triu");
    Value cols = clang::unsqueeze(prims::iota(c, 0, 1, t.device, DType::Int64), 0, "ltorch.triu");
    Value mask = op("ge", {op("sub", {cols, rows}), a[1]});
    return clang::where(mask, a[0], clang::maybeConvert(Value(0), t.dtype), "ltorch.triu");
  });
  def("getitem", "a, key", {"torch.Tensor.__getitem__"},
      [](const Args& a) { return getitem(a[0], a[1]); });
}

/// An index tensor's negative entries counted from the end of a dim of length n, as eager's
/// advanced indexing reads them (`x[[-1, 0]]`); entries below -n stay negative, and the gather
/// raises eager's IndexError for them. (Unsigned indices are never negative.)
Value wrapNegativeIndices(const Value& indexIn, int64_t n) {
  if (indexIn.tensor().dtype == DType::UInt8) return indexIn;
  // (a 0-dim int8 or int16 index, read as an int: ATen's gathers take int32 and int64 only)
  Value index = indexIn.tensor().dtype == DType::Int32 ? indexIn : clang::maybeConvert(indexIn, DType::Int64);
  return clang::where(op("lt", {index, 0}), op("add", {index, n}), index, "ltorch.getitem");
}

/// A 0-dim integer tensor in an index: eager reads its value as a Python int's (a view, one dim
/// dropped), not as an advanced index.
bool isIntegerScalarTensor(const Value& k) {
  return k.isTensor() && k.tensor().ndim() == 0 && isIntegral(k.tensor().dtype) &&
         k.tensor().dtype != DType::UInt8;
}

Value getitem(const Value& a, const Value& keyIn) {
  const std::string op = "ltorch.getitem";
  const TensorProxy& t = expectTensor(a, op, "a");
  std::vector<Value> key = keyIn.isTuple() ? keyIn.items() : std::vector<Value>{keyIn};
  // Advanced indexing with one integer tensor in front: a gather along dim 0.
  if (key.size() == 1 && key[0].isTensor()) {
    const TensorProxy& idx = key[0].tensor();
    // (uint8: eager's deprecated form of a boolean mask)
    THUNDER_CHECK_KIND(idx.dtype != DType::Bool && idx.dtype != DType::UInt8, ErrorKind::NotImplemented, op,
                       ": indexing with a boolean mask makes a data-dependent shape and is not supported "
                       "(thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture)");
    // (eager's message; int8 and int16 indices are refused too)
    THUNDER_CHECK_KIND(idx.dtype == DType::Int64 || idx.dtype == DType::Int32 || idx.ndim() == 0, ErrorKind::Index,
                       op, ": tensors used as indices must be long, int, byte or bool tensors, got ",
                       dtypeName(idx.dtype));
    THUNDER_CHECK_KIND(isIntegral(idx.dtype), ErrorKind::Index, op,
                       ": tensors used as indices must be integer tensors, got ", dtypeName(idx.dtype));
    THUNDER_CHECK_KIND(t.ndim() > 0, ErrorKind::Index, op, ": cannot index a 0-dim tensor with a tensor");
    Value index = wrapNegativeIndices(clang::indexOnDeviceOf(key[0], t), t.shape[0]);
    Value flat = idx.ndim() == 1 ? index : clang::reshape(index, {idx.numel()}, op);
    Value taken = prims::take(a, flat, 0);
    Shape out = idx.shape;
    out.insert(out.end(), t.shape.begin() + 1, t.shape.end());
    return clang::reshape(taken, out, op);
  }
  int64_t consumed = 0;
  for (const Value& k : key)  // (a mask anywhere in the key: the reason, before any other)
    THUNDER_CHECK_KIND(!k.isTensor() || (k.tensor().dtype != DType::Bool && k.tensor().dtype != DType::UInt8),
                       ErrorKind::NotImplemented, op,
                       ": indexing with a boolean mask makes a data-dependent shape and is not supported "
                       "(thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture)");
  for (const Value& k : key) {
    if (k.isInt() || k.isSlice() || isIntegerScalarTensor(k)) ++consumed;
    else if (k.isTensor()) {
      throw Error(ErrorKind::NotImplemented,
                  op + ": indexing with a tensor mixed with other indices is not supported");
    } else if (!k.isNone() && !k.isEllipsis()) {
      throw Error(ErrorKind::Index, str(op, ": unsupported index ", describe(k)));
    }
  }
  THUNDER_CHECK_KIND(consumed <= t.ndim(), ErrorKind::Index, op, ": too many indices for tensor of shape ",
                     shapeStr(t.shape), " (", consumed, " given)");
  Value x = a;
  int64_t dim = 0;  // current dim of x
  std::vector<int64_t> squeezeDims;
  for (size_t i = 0; i < key.size(); ++i) {
    const Value& k = key[i];
    if (k.isEllipsis()) {
      dim += t.ndim() - consumed;
      consumed = t.ndim();
    } else if (k.isNone()) {
      x = clang::unsqueeze(x, dim, op);
      ++dim;
    } else if (k.isTensor()) {  // a 0-dim integer tensor: as its value, an int
      int64_t n = x.tensor().shape[dim];
      Value index = wrapNegativeIndices(clang::indexOnDeviceOf(k, t), n);
      x = prims::take(x, clang::reshape(index, {1}, op), dim);
      squeezeDims.push_back(dim);
      ++dim;
    } else if (k.isInt()) {
      int64_t n = x.tensor().shape[dim];
      int64_t idx = k.toInt();
      THUNDER_CHECK_KIND(idx >= -n && idx < n, ErrorKind::Index, op, ": index ", idx,
                         " is out of bounds for dimension ", dim, " with size ", n);
      if (idx < 0) idx += n;
      x = clang::sliceInDim(x, dim, idx, idx + 1, 1, op);
      squeezeDims.push_back(dim);
      ++dim;
    } else {
      const std::vector<Value>& s = k.items();
      int64_t step = s[2].isNone() ? 1 : s[2].toInt();
      THUNDER_CHECK_KIND(step > 0, ErrorKind::Value, op, ": slice step must be positive, got ", step);
      std::optional<int64_t> start, stop;
      if (!s[0].isNone()) start = s[0].toInt();
      if (!s[1].isNone()) stop = s[1].toInt();
      x = clang::sliceInDim(x, dim, start, stop, step, op);
      ++dim;
    }
  }
  if (!squeezeDims.empty()) x = prims::squeeze(x, squeezeDims);
  return x;
}

// ---- reductions -----------------------------------------------------------------------------

/// Reduces with a prim in the computation dtype, keeping dims if asked.
Value reduce(Value (*prim)(const Value&, const std::vector<int64_t>&), const Value& a,
             const Value& dim, bool keepdim, std::optional<DType> dtype, const std::string& name,
             bool intToLong) {
  const TensorProxy& t = T(a, name);
  std::vector<int64_t> dims = clang::reductionDims(t, dim, opn(name));
  DType result = dtype.value_or(t.dtype);
  if (!dtype && intToLong && (isIntegral(t.dtype) || t.dtype == DType::Bool)) result = DType::Int64;
  DType computation = isLowPrecision(result) ? DType::Float32 : result;
  // A requested dtype: eager converts the input to it, then reduces as for an input of that
  // dtype (sum(dtype=float16) of 70000 and -70000 is inf - inf = NaN, not 0).
  Value x = clang::maybeConvert(clang::maybeConvert(a, result), computation);
  Value r = prim(x, dims);
  r = clang::maybeConvert(r, result);
  return keepdim ? clang::keepDims(r, t.shape, dims) : r;
}

int64_t reducedCount(const TensorProxy& t, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= t.shape[d];
  return n;
}

Value meanImpl(const Value& a, const Value& dim, bool keepdim, std::optional<DType> dtype) {
  const TensorProxy& t = T(a, "mean");
  DType result = dtype.value_or(t.dtype);
  // RuntimeError, as eager's.
  THUNDER_CHECK_KIND(isFloating(result) || isComplex(result), ErrorKind::Runtime,
                     "ltorch.mean: could not infer output dtype. Input dtype must be either a floating "
                     "point or complex dtype. Got: ", dtypeName(result));
  std::vector<int64_t> dims = clang::reductionDims(t, dim, "ltorch.mean");
  DType computation = isLowPrecision(result) ? DType::Float32 : result;
  Value s = prims::sum(clang::maybeConvert(a, computation), dims);
  Value m = prims::div(s, clang::maybeConvert(Value(static_cast<double>(reducedCount(t, dims))), computation));
  m = clang::maybeConvert(m, result);
  return keepdim ? clang::keepDims(m, t.shape, dims) : m;
}

/// var, or std (`root`): the square root taken before the conversion back to a 16-bit input's
/// dtype, so std rounds once as eager's does (sqrt of a var rounded to bfloat16 differed from
/// eager's std in one row of eight).
Value varImpl(const Value& a, const Value& dim, const Value& correction, bool keepdim,
              const std::string& name, bool root = false) {
  const TensorProxy& t = T(a, name);
  std::vector<int64_t> dims = clang::reductionDims(t, dim, opn(name));
  double corr = correction.isNone() ? 1.0 : correction.toDouble();
  DType computation = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  // RuntimeError, as eager's "std and var only support floating point and complex dtypes".
  THUNDER_CHECK(isFloating(t.dtype) || isComplex(t.dtype), opn(name),
                ": expected a floating point or complex tensor, but got ", dtypeName(t.dtype));
  Value v = prims::var(clang::maybeConvert(a, computation), dims, corr);
  if (root) v = op("sqrt", {v});
  v = clang::maybeConvert(v, complexToReal(t.dtype));
  return keepdim ? clang::keepDims(v, t.shape, dims) : v;
}

Value softmaxImpl(const Value& a, const Value& dimV, const Value& dtypeV, bool log,
                  const std::string& name) {
  const TensorProxy& t = T(a, name);
  THUNDER_CHECK(!dimV.isNone(), opn(name), ": dim must be given");
  int64_t dim = dimArg(dimV, t.ndim(), name);
  DType result = optDType(dtypeV).value_or(t.dtype);
  // Eager dispatches no kernel for an empty tensor: an empty result of any dtype, bool and
  // integers too. Otherwise its kernels exist for floats only; it raises NotImplementedError
  // ("softmax_lastdim_kernel_impl not implemented for 'Long'"), a RuntimeError here: thunder
  // keeps NotImplementedError for ops it hands to eager (fallback.py).
  if (t.numel() == 0 && !isFloating(result) && !isComplex(result))
    return prims::full(t.shape, clang::maybeConvert(Value(0), result), t.device, result);
  THUNDER_CHECK_KIND(isFloating(result) || isComplex(result), ErrorKind::Runtime, opn(name),
                     ": expected a floating point tensor, but got ", dtypeName(result));
  DType computation = isLowPrecision(result) ? DType::Float32 : result;
  Value x = clang::maybeConvert(a, computation);
  if (t.numel() == 0)  // nothing to normalize (a length-0 dim has no max): an empty result
    return clang::maybeConvert(op("sub", {x, x}), result);
  if (t.ndim() == 0) {
    Value r = log ? op("sub", {x, x}) : op("add", {op("mul", {x, 0.0}), 1.0});
    return clang::maybeConvert(r, result);
  }
  Value m = clang::keepDims(prims::amax(x, {dim}), t.shape, {dim});
  Value shifted = op("sub", {x, m});
  Value e = op("exp", {shifted});
  Value s = clang::keepDims(prims::sum(e, {dim}), t.shape, {dim});
  Value r = log ? op("sub", {shifted, op("log", {s})}) : op("div", {e, s});
  return clang::maybeConvert(r, result);
}

void registerReductions() {
  def("sum", "a, dim=None, keepdim=False, *, dtype=None", {"torch.sum", "torch.Tensor.sum"},
      [](const Args& a) {
        return reduce(prims::sum, a[0], a[1], a[2].toBool(), optDType(a[3]), "sum", true);
      }, kReductionOp);
  def("prod", "a, dim=None, keepdim=False, *, dtype=None", {"torch.prod", "torch.Tensor.prod"},
      [](const Args& a) {
        return reduce(prims::prod, a[0], a[1], a[2].toBool(), optDType(a[3]), "prod", true);
      }, kReductionOp);
  def("amax", "a, dim=(), keepdim=False", {"torch.amax", "torch.Tensor.amax"}, [](const Args& a) {
    checkEmptyFullReduction(a[0], a[1], "amax");
    return reduce(prims::amax, a[0], a[1], a[2].toBool(), std::nullopt, "amax", false);
  }, kReductionOp);
  def("amin", "a, dim=(), keepdim=False", {"torch.amin", "torch.Tensor.amin"}, [](const Args& a) {
    checkEmptyFullReduction(a[0], a[1], "amin");
    return reduce(prims::amin, a[0], a[1], a[2].toBool(), std::nullopt, "amin", false);
  }, kReductionOp);
  def("mean", "a, dim=None, keepdim=False, *, dtype=None", {"torch.mean", "torch.Tensor.mean"},
      [](const Args& a) { return meanImpl(a[0], a[1], a[2].toBool(), optDType(a[3])); },
      kReductionOp);
  def("var", "a, dim=None, *, correction=None, keepdim=False", {"torch.var", "torch.Tensor.var"},
      [](const Args& a) { return varImpl(a[0], a[1], a[2], a[3].toBool(), "var"); }, kReductionOp);
  def("std", "a, dim=None, *, correction=None, keepdim=False", {"torch.std", "torch.Tensor.std"},
      [](const Args& a) { return varImpl(a[0], a[1], a[2], a[3].toBool(), "std", true); },
      kReductionOp);
  def("var_mean", "a, dim=None, *, correction=None, keepdim=False", {"torch.var_mean"},
      [](const Args& a) {
        Value v = varImpl(a[0], a[1], a[2], a[3].toBool(), "var_mean");
        Value m = meanImpl(a[0], a[1], a[3].toBool(), std::nullopt);
        return Value::tuple({v, m});
      }, kReductionOp);
  def("argmax", "a, dim=None, keepdim=False", {"torch.argmax", "torch.Tensor.argmax"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "argmax");
        if (a[1].isNone()) {
          Value r = prims::argmax(a[0], std::nullopt);
          return a[2].toBool() ? clang::reshape(r, Shape(t.ndim(), 1), "ltorch.argmax") : r;
        }
        int64_t d = dimArg(a[1], t.ndim(), "argmax");
        Value r = prims::argmax(a[0], d);
        return a[2].toBool() && t.ndim() > 0 ? clang::keepDims(r, t.shape, {d}) : r;
      }, kReductionOp);
  def("argmin", "a, dim=None, keepdim=False", {"torch.argmin", "torch.Tensor.argmin"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "argmin");
        if (a[1].isNone()) {
          Value r = prims::argmin(a[0], std::nullopt);
          return a[2].toBool() ? clang::reshape(r, Shape(t.ndim(), 1), "ltorch.argmin") : r;
        }
        int64_t d = dimArg(a[1], t.ndim(), "argmin");
        Value r = prims::argmin(a[0], d);
        return a[2].toBool() && t.ndim() > 0 ? clang::keepDims(r, t.shape, {d}) : r;
      }, kReductionOp);
  for (const char* which : {"max", "min"}) {
    std::string name = which;
    bool isMax = name == "max";
    def(name, "a, dim=None, keepdim=False", {"torch." + name, "torch.Tensor." + name},
        [isMax, name](const Args& a) -> Value {
          const TensorProxy& t = T(a[0], name);
          if (a[1].isTensor())  // torch.max(a, b) is maximum
            return op(isMax ? "maximum" : "minimum", {a[0], a[1]});
          if (a[1].isNone()) {
            THUNDER_CHECK(t.numel() > 0, "ltorch.", name, ": cannot reduce an empty tensor of shape ",
                          shapeStr(t.shape));
            return op(isMax ? "amax" : "amin", {a[0], Value::tuple({})});
          }
          int64_t d = dimArg(a[1], t.ndim(), name);
          if (t.ndim() == 0 || t.shape[d] == 0) {  // amax/amin check and raise as eager does
            // A 0-d tensor's value is its one element, its gradient passes through (amax's,
            // shared among the elements equal to the result, is NaN at a NaN: fuzzer seed 60560)
            Value values = t.ndim() == 0 ? op("clone", {a[0]}) : op(isMax ? "amax" : "amin", {a[0], a[1], a[2]});
            Value x = t.dtype == DType::Bool ? clang::maybeConvert(a[0], DType::UInt8) : a[0];
            return Value::tuple({values, op(isMax ? "argmax" : "argmin", {x, a[1], a[2]})});
          }
          // argmax/argmin take no bools: the index of the first true (false) is the same in uint8.
          Value x = t.dtype == DType::Bool ? clang::maybeConvert(a[0], DType::UInt8) : a[0];
          Value idx = op(isMax ? "argmax" : "argmin", {x, a[1], true});
          // The values are the elements at the indices, as eager's: their gradient goes to the
          // index returned, not shared among ties as amax's is.
          Value values = prims::gather(a[0], idx, d);
          if (!a[2].toBool()) {
            values = op("squeeze", {values, d});
            idx = op("squeeze", {idx, d});
          }
          return Value::tuple({values, idx});
        }, kReductionOp);
  }
  // any and all return bool, except uint8 for uint8 inputs, as in PyTorch.
  def("any", "a, dim=None, keepdim=False", {"torch.any", "torch.Tensor.any"}, [](const Args& a) {
    DType dt = T(a[0], "any").dtype == DType::UInt8 ? DType::UInt8 : DType::Bool;
    Value nz = clang::maybeConvert(op("ne", {a[0], 0}), DType::Int64);
    return clang::maybeConvert(op("gt", {op("sum", {nz, a[1], a[2]}), 0}), dt);
  }, kReductionOp);
  def("all", "a, dim=None, keepdim=False", {"torch.all", "torch.Tensor.all"}, [](const Args& a) {
    DType dt = T(a[0], "all").dtype == DType::UInt8 ? DType::UInt8 : DType::Bool;
    Value z = clang::maybeConvert(op("eq", {a[0], 0}), DType::Int64);
    return clang::maybeConvert(op("eq", {op("sum", {z, a[1], a[2]}), 0}), dt);
  }, kReductionOp);
  def("logsumexp", "a, dim, keepdim=False", {"torch.logsumexp", "torch.Tensor.logsumexp"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "logsumexp");
        DType result = isFloating(t.dtype) || isComplex(t.dtype) ? t.dtype : DType::Float32;
        DType computation = isLowPrecision(result) ? DType::Float32 : result;
        Value x = clang::maybeConvert(a[0], computation);
        std::vector<int64_t> dims = clang::reductionDims(t, a[1], "ltorch.logsumexp");
        int64_t reduced = 1;
        for (int64_t d : dims) reduced *= t.shape[d];
        if (reduced == 0) {
          // Over no element: log of an empty sum, -inf as eager's (amax of nothing has no value
          // to shift by).
          Value r = clang::maybeConvert(op("log", {prims::sum(op("exp", {x}), dims)}), result);
          return a[2].toBool() ? clang::keepDims(r, t.shape, dims) : r;
        }
        // Complex inputs shift by the largest real part.
        Value m = prims::amax(isComplex(computation) ? prims::real(x) : x, dims);
        // Where the max is infinite, shifting by it would make nan; shift by 0 there.
        Value safeM = op("where", {op("isfinite", {m}), m, 0.0});
        Value shifted = op("sub", {x, clang::keepDims(safeM, t.shape, dims)});
        Value r = op("add", {op("log", {prims::sum(op("exp", {shifted}), dims)}), safeM});
        r = clang::maybeConvert(r, result);
        return a[2].toBool() ? clang::keepDims(r, t.shape, dims) : r;
      }, kReductionOp);
  def("softmax", "a, dim, *, dtype=None",
      {"torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax", "torch.special.softmax"},
      [](const Args& a) { return softmaxImpl(a[0], a[1], a[2], false, "softmax"); });
  def("log_softmax", "a, dim, *, dtype=None",
      {"torch.log_softmax", "torch.Tensor.log_softmax", "torch.nn.functional.log_softmax",
       "torch.special.log_softmax"},
      [](const Args& a) { return softmaxImpl(a[0], a[1], a[2], true, "log_softmax"); });
}

// ---- creation -------------------------------------------------------------------------------

DType fillDType(const Value& fill, const Value& dtype) {
  if (!dtype.isNone()) return dtype.toDType();
  DType d = fill.numberDType();
  if (d == DType::Float64) return defaultFloat();
  if (d == DType::Complex128) return realToComplex(defaultFloat());
  return d;
}

void registerCreation() {
  def("full", "shape, fill_value, *, device=None, dtype=None", {"torch.full"}, [](const Args& a) {
    checkNumberFits("full", a[1], fillDType(a[1], a[3]));
    return prims::full(a[0].toInts(), a[1], deviceOr(a[2]), fillDType(a[1], a[3]));
  }, kCreation);
  for (const char* which : {"zeros", "ones", "empty"}) {
    std::string name = which;
    double fill = name == "ones" ? 1.0 : 0.0;
    def(name, "*shape, device=None, dtype=None, requires_grad=False", {"torch." + name},
        [fill](const Args& a) {
          DType dt = optDType(a[2]).value_or(defaultFloat());
          return prims::full(a[0].toInts(), clang::maybeConvert(Value(fill), dt), deviceOr(a[1]), dt);
        }, kCreation);
    std::string like = name + "_like";
    def(like, "a, *, device=None, dtype=None", {"torch." + like}, [fill, like](const Args& a) {
      const TensorProxy& t = T(a[0], like);
      DType dt = optDType(a[2]).value_or(t.dtype);
      return prims::full(t.shape, clang::maybeConvert(Value(fill), dt), deviceOr(a[1], t.device), dt);
    }, kCreation);
  }
  def("full_like", "a, fill_value, *, device=None, dtype=None", {"torch.full_like"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "full_like");
        DType dt = optDType(a[3]).value_or(t.dtype);
        checkNumberFits("full_like", a[1], dt);
        return prims::full(t.shape, clang::maybeConvert(a[1], dt), deviceOr(a[2], t.device), dt);
      }, kCreation);
  def("arange", "start, end=None, step=1, *, device=None, dtype=None", {"torch.arange"},
      [](const Args& a) {
        Value start = a[1].isNone() ? Value(0) : a[0];
        Value end = a[1].isNone() ? a[0] : a[1];
        const Value& step = a[2];
        bool allInt = start.isInt() && end.isInt() && step.isInt();
        DType dt = optDType(a[4]).value_or(allInt ? DType::Int64 : defaultFloat());
        THUNDER_CHECK_KIND(dt != DType::Bool && !isComplex(dt), ErrorKind::Type,
                           "ltorch.arange: dtype ", dtypeName(dt), " is not supported");
        double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
        THUNDER_CHECK(st != 0, "ltorch.arange: step must be nonzero");
        THUNDER_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
                      "ltorch.arange: upper bound and larger bound inconsistent with step sign");
        int64_t length = static_cast<int64_t>(std::ceil((e - s) / st));
        Device dev = deviceOr(a[3]);
        if (allInt && isIntegral(dt))
          return prims::iota(length, start.toInt(), step.toInt(), dev, dt);
        Value idx = prims::iota(length, 0, 1, dev, DType::Int64);
        DType comp = isIntegral(dt) ? DType::Float64 : (isLowPrecision(dt) ? DType::Float32 : dt);
        Value r = op("add", {op("mul", {clang::maybeConvert(idx, comp), st}), s});
        return clang::maybeConvert(r, dt);
      }, kCreation);
  // Complex draws: independent real and imaginary parts of the matching real dtype, each scaled
  // by `scale`.
  auto complexOf = [](auto draw, const Shape& shape, Device dev, DType dt, double scale) {
    DType real = complexToReal(dt);
    Value re = draw(shape, dev, real), im = draw(shape, dev, real);
    return op("add", {op("mul", {re, scale}), op("mul", {im, std::complex<double>(0.0, scale)})});
  };
  auto rand = [complexOf](const Shape& shape, Device dev, DType dt) -> Value {
    auto draw = [](const Shape& s, Device d, DType t) { return prims::uniform(s, 0.0, 1.0, d, t); };
    return isComplex(dt) ? complexOf(draw, shape, dev, dt, 1.0) : draw(shape, dev, dt);
  };
  def("rand", "*shape, device=None, dtype=None, requires_grad=False", {"torch.rand"},
      [rand](const Args& a) {
        return rand(a[0].toInts(), deviceOr(a[1]), optDType(a[2]).value_or(defaultFloat()));
      }, kCreation | kRandomOp);
  def("rand_like", "a, *, device=None, dtype=None", {"torch.rand_like"}, [rand](const Args& a) {
    const TensorProxy& t = T(a[0], "rand_like");
    return rand(t.shape, deviceOr(a[1], t.device), optDType(a[2]).value_or(t.dtype));
  }, kCreation | kRandomOp);
  // A draw per element: 1 with probability p (a number, or the elements of `a` when p is None),
  // else 0, in a's dtype. The probabilities are compared with a float32 uniform draw for the
  // low-precision dtypes (as dropout does). timm's DropPath: x.new_empty(shape).bernoulli_(keep).
  def("bernoulli", "a, p=None, *, generator=None", {"torch.bernoulli", "torch.Tensor.bernoulli"},
      [](const Args& a) -> Value {
        const TensorProxy& t = T(a[0], "bernoulli");
        THUNDER_CHECK_KIND(a[2].isNone(), ErrorKind::NotImplemented,
                           "ltorch.bernoulli: a generator argument is not supported");
        THUNDER_CHECK_KIND(!isComplex(t.dtype) && (isFloating(t.dtype) || !a[1].isNone()), ErrorKind::NotImplemented,
                           "ltorch.bernoulli: the input must be a real floating-point tensor of probabilities, "
                           "or p given, but got ", dtypeName(t.dtype), " with p=None");
        if (!a[1].isNone()) {
          double p = a[1].toDouble();
          THUNDER_CHECK_KIND(p >= 0 && p <= 1, ErrorKind::Runtime,  // (eager's RuntimeError)
                             "ltorch.bernoulli: p must be in [0, 1], but got ", p);
        }
        DType draw = isFloating(t.dtype) && !isLowPrecision(t.dtype) ? t.dtype : DType::Float32;
        Value u = prims::uniform(t.shape, 0.0, 1.0, t.device, draw);
        Value prob = a[1].isNone() ? a[0] : a[1];
        return clang::maybeConvert(op("lt", {u, prob}), t.dtype);
      }, kRandomOp);
  auto normal = [](const Shape& shape, Device dev, DType dt) {
    // Box-Muller over two uniform draws.
    DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
    Value u1 = prims::uniform(shape, 1e-7, 1.0, dev, comp);
    Value u2 = prims::uniform(shape, 0.0, 1.0, dev, comp);
    Value r = op("sqrt", {op("mul", {op("log", {u1}), -2.0})});
    Value z = op("mul", {r, op("cos", {op("mul", {u2, 2 * M_PI})})});
    return clang::maybeConvert(z, dt);
  };
  // A complex standard normal has variance 1/2 in each part.
  auto randn = [normal, complexOf](const Shape& shape, Device dev, DType dt) -> Value {
    return isComplex(dt) ? complexOf(normal, shape, dev, dt, M_SQRT1_2) : normal(shape, dev, dt);
  };
  def("randn", "*shape, device=None, dtype=None, requires_grad=False", {"torch.randn"},
      [randn](const Args& a) {
        return randn(a[0].toInts(), deviceOr(a[1]), optDType(a[2]).value_or(defaultFloat()));
      }, kCreation | kRandomOp);
  def("randn_like", "a, *, device=None, dtype=None", {"torch.randn_like"}, [randn](const Args& a) {
    const TensorProxy& t = T(a[0], "randn_like");
    return randn(t.shape, deviceOr(a[1], t.device), optDType(a[2]).value_or(t.dtype));
  }, kCreation | kRandomOp);
}

// ---- neural network ops ---------------------------------------------------------------------

void checkSameDType(const Value& a, const Value& b, const std::string& op) {
  if (!a.isTensor() || !b.isTensor()) return;
  // RuntimeError, as eager's "expected m1 and m2 to have the same dtype".
  THUNDER_CHECK_KIND(a.tensor().dtype == b.tensor().dtype, ErrorKind::Runtime, op,
                     ": expected both arguments to have the same dtype, but got ",
                     dtypeName(a.tensor().dtype), " and ", dtypeName(b.tensor().dtype));
}

Value normalize(const Value& x, const std::vector<int64_t>& dims, const Shape& shape, double eps,
                bool subtractMean) {
  if (subtractMean) {
    Value mean = clang::keepDims(
        prims::div(prims::sum(x, dims), static_cast<double>(numelOf(Shape(shape.end() - dims.size(), shape.end())))),
        shape, dims);
    Value centered = op("sub", {x, mean});
    Value var = clang::keepDims(prims::var(x, dims, 0.0), shape, dims);
    return op("mul", {centered, op("rsqrt", {op("add", {var, eps})})});
  }
  Value ms = op("mean", {op("mul", {x, x}), Value::ints(dims), true});
  return op("mul", {x, op("rsqrt", {op("add", {ms, eps})})});
}

Value normImpl(const Args& a, bool layer, const std::string& name) {
  const TensorProxy& t = T(a[0], name);
  Shape normShape = a[1].toInts();
  int64_t k = static_cast<int64_t>(normShape.size());
  // eager checks the shape first (fuzzer seed 13047), then the dtype
  THUNDER_CHECK(k >= 1, opn(name), ": expected normalized_shape to have at least one element, but got ",
                shapeStr(normShape));
  THUNDER_CHECK(k <= t.ndim() && Shape(t.shape.end() - k, t.shape.end()) == normShape, opn(name),
                ": normalized_shape ", shapeStr(normShape), " does not match the trailing dimensions of input shape ",
                shapeStr(t.shape));
  std::vector<int64_t> dims;
  for (int64_t i = t.ndim() - k; i < t.ndim(); ++i) dims.push_back(i);
  // Integers and bools: NotImplementedError, as eager's kernels ("LayerNormKernelImpl" not
  // implemented for 'Long'); complex inputs, which eager takes, are unsupported here (TypeError)
  THUNDER_CHECK_KIND(isFloating(t.dtype), isComplex(t.dtype) ? ErrorKind::Type : ErrorKind::NotImplemented,
                     opn(name), ": expected a floating point input, but got ", dtypeName(t.dtype));
  if (layer && t.device.type == DeviceType::CPU) {
    // PyTorch's CPU layer_norm takes weight and bias of the input's dtype, or float32 ones with a
    // bfloat16/float16 input, and raises otherwise (a float64 weight on float32 input).
    for (size_t i : {size_t{2}, size_t{3}}) {
      if (!a[i].isTensor()) continue;
      DType p = a[i].tensor().dtype;
      THUNDER_CHECK(p == t.dtype || (isLowPrecision(t.dtype) && p == DType::Float32), opn(name),
                    ": mixed dtype (CPU): ", i == 2 ? "weight" : "bias", " has dtype ", dtypeName(p),
                    " but the input has ", dtypeName(t.dtype), "; expected ", dtypeName(t.dtype),
                    isLowPrecision(t.dtype) ? " or float32" : "");
    }
  }
  DType computation = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  Value x = clang::maybeConvert(a[0], computation);
  double eps = layer ? a[4].toDouble() : (a[3].isNone() ? 1.1920928955078125e-07 : a[3].toDouble());
  if (!layer && a[3].isNone() && t.dtype == DType::Float64) eps = 2.220446049250313e-16;
  Value y = normalize(x, dims, t.shape, eps, layer);
  const Value& w = a[2];
  if (!w.isNone()) {
    THUNDER_CHECK(T(w, name, "weight").shape == normShape, opn(name), ": weight of shape ",
                  shapeStr(w.tensor().shape), " does not match normalized_shape ", shapeStr(normShape));
    y = op("mul", {y, w});
  }
  if (layer && !a[3].isNone()) {
    THUNDER_CHECK(T(a[3], name, "bias").shape == normShape, opn(name), ": bias of shape ",
                  shapeStr(a[3].tensor().shape), " does not match normalized_shape ", shapeStr(normShape));
    y = op("add", {y, a[3]});
  }
  return clang::maybeConvert(y, t.dtype);
}

Value nllLossImpl(const Value& logp, const Value& target, const Value& weight, int64_t ignoreIndex,
                  const std::string& reduction, const std::string& name) {
  // logp: (N, C, ...) or (C,); target: (N, ...) or () of class indices.
  const TensorProxy& lp = logp.tensor();
  const TensorProxy& tg = T(target, name, "target");
  THUNDER_CHECK_KIND(isIntegral(tg.dtype), ErrorKind::NotImplemented, opn(name),
                     ": only integer class-index targets are supported, got dtype ", dtypeName(tg.dtype));
  int64_t classDim = lp.ndim() == 1 ? 0 : 1;
  Shape expected = lp.shape;
  expected.erase(expected.begin() + classDim);
  // A batch size mismatch is a ValueError, as eager's "Expected input batch_size (N) to match
  // target batch_size (M)"; other shapes are RuntimeErrors.
  THUNDER_CHECK_KIND(lp.ndim() < 2 || tg.ndim() < 1 || tg.shape[0] == lp.shape[0], ErrorKind::Value,
                     opn(name), ": expected target of shape ", shapeStr(expected), " for input of shape ",
                     shapeStr(lp.shape), ", but got ", shapeStr(tg.shape), " (batch sizes differ)");
  THUNDER_CHECK(tg.shape == expected, opn(name), ": expected target of shape ", shapeStr(expected),
                " for input of shape ", shapeStr(lp.shape), ", but got ", shapeStr(tg.shape));
  Value valid = op("ne", {target, ignoreIndex});
  Value safeTarget = op("where", {valid, target, 0});
  Value idx = clang::unsqueeze(safeTarget, classDim, opn(name));
  Value picked = prims::squeeze(prims::gather(logp, idx, classDim), {classDim});
  Value w = clang::maybeConvert(valid, lp.dtype);
  if (!weight.isNone()) {
    const TensorProxy& wt = T(weight, name, "weight");
    THUNDER_CHECK(wt.ndim() == 1 && wt.shape[0] == lp.shape[classDim], opn(name),
                  ": expected a weight of shape (", lp.shape[classDim], ",), but got ", shapeStr(wt.shape));
    Value classWeight = prims::take(weight, clang::reshape(safeTarget, {tg.numel()}, opn(name)), 0);
    w = op("mul", {w, clang::reshape(classWeight, tg.shape, opn(name))});
  }
  Value losses = op("neg", {op("mul", {picked, w})});
  if (reduction == "none") return losses;
  Value total = op("sum", {losses});
  if (reduction == "sum") return total;
  THUNDER_CHECK_KIND(reduction == "mean", ErrorKind::Value, opn(name),
                     ": reduction must be 'none', 'mean' or 'sum', but got '", reduction, "'");
  return op("div", {total, op("sum", {w})});
}

void registerNN() {
  def("linear", "a, weight, bias=None", {"torch.nn.functional.linear"}, [](const Args& a) {
    T(a[0], "linear");
    T(a[1], "linear", "weight");
    checkSameDType(a[0], a[1], "ltorch.linear");
    return prims::linear(a[0], a[1], a[2]);
  }, kMatmulOp);
  def("matmul", "a, b", {"torch.matmul", "torch.Tensor.matmul", "torch.Tensor.__matmul__"},
      [](const Args& a) {
        T(a[0], "matmul");
        T(a[1], "matmul", "b");
        checkSameDType(a[0], a[1], "ltorch.matmul");
        return prims::matmul(a[0], a[1]);
      }, kMatmulOp);
  def("mm", "a, b", {"torch.mm", "torch.Tensor.mm"}, [](const Args& a) {
    THUNDER_CHECK(T(a[0], "mm").ndim() == 2 && T(a[1], "mm", "b").ndim() == 2,
                  "ltorch.mm: expected 2-dimensional tensors, but got shapes ",
                  shapeStr(a[0].tensor().shape), " and ", shapeStr(a[1].tensor().shape));
    checkSameDType(a[0], a[1], "ltorch.mm");
    return prims::matmul(a[0], a[1]);
  }, kMatmulOp);
  def("bmm", "a, b", {"torch.bmm", "torch.Tensor.bmm"}, [](const Args& a) {
    const TensorProxy &x = T(a[0], "bmm"), &y = T(a[1], "bmm", "b");
    THUNDER_CHECK(x.ndim() == 3 && y.ndim() == 3, "ltorch.bmm: expected 3-dimensional tensors, but got shapes ",
                  shapeStr(x.shape), " and ", shapeStr(y.shape));
    THUNDER_CHECK(x.shape[0] == y.shape[0], "ltorch.bmm: batch sizes differ: ", shapeStr(x.shape),
                  " and ", shapeStr(y.shape));
    checkSameDType(a[0], a[1], "ltorch.bmm");
    return prims::matmul(a[0], a[1]);
  }, kMatmulOp);
  def("layer_norm", "a, normalized_shape, weight=None, bias=None, eps=1e-05",
      {"torch.nn.functional.layer_norm", "torch.layer_norm"},
      [](const Args& a) { return normImpl(a, true, "layer_norm"); });
  def("rms_norm", "a, normalized_shape, weight=None, eps=None",
      {"torch.nn.functional.rms_norm", "torch.rms_norm"},
      [](const Args& a) { return normImpl(a, false, "rms_norm"); });
  def("embedding", "a, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False",
      {"torch.nn.functional.embedding"}, [](const Args& a) {
        THUNDER_CHECK_KIND(a[3].isNone(), ErrorKind::NotImplemented,
                           "ltorch.embedding: max_norm is not supported");
        // (PyTorch's embedding runs these: the gradient scaled by each id's count in the batch,
        // a sparse gradient; thunder's ignored both, the first silently giving other gradients)
        THUNDER_CHECK_KIND(!a[5].toBool(), ErrorKind::NotImplemented,
                           "ltorch.embedding: scale_grad_by_freq is not supported");
        THUNDER_CHECK_KIND(!a[6].toBool(), ErrorKind::NotImplemented,
                           "ltorch.embedding: sparse is not supported");
        const TensorProxy& w = T(a[1], "embedding", "weight");
        std::optional<int64_t> pad;
        if (!a[2].isNone()) pad = canonicalizeDim(w.ndim() ? w.shape[0] : 1, a[2].toInt(), "ltorch.embedding");
        return prims::embedding(a[0], a[1], pad);
      });
  def("dropout", "a, p=0.5, training=True, inplace=False",
      {"torch.nn.functional.dropout", "torch.dropout"}, [](const Args& a) -> Value {
        const TensorProxy& t = T(a[0], "dropout");
        double p = a[1].toDouble();
        THUNDER_CHECK_KIND(p >= 0 && p <= 1, ErrorKind::Value,
                           "ltorch.dropout: dropout probability has to be between 0 and 1, but got ", p);
        if (!a[2].toBool() || p == 0) return a[0];
        if (p == 1) return op("mul", {a[0], 0});
        Value keep = op("ge", {prims::uniform(t.shape, 0.0, 1.0, t.device,
                                              isLowPrecision(t.dtype) ? DType::Float32 : t.dtype), p});
        return op("mul", {op("mul", {a[0], keep}), 1.0 / (1.0 - p)});
      }, kRandomOp);
  def("nll_loss",
      "a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction='mean'",
      {"torch.nn.functional.nll_loss"}, [](const Args& a) {
        return nllLossImpl(a[0], a[1], a[2], a[4].toInt(), a[6].toString(), "nll_loss");
      });
  def("cross_entropy",
      "a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction='mean', "
      "label_smoothing=0.0",
      {"torch.nn.functional.cross_entropy"}, [](const Args& a) {
        const TensorProxy& t = T(a[0], "cross_entropy");
        if (t.ndim() == 0) {
          // As eager: a target of the input's shape (0-d as well) holds class probabilities,
          // whose dtype is checked first; then the class dim, 1, is out of range (IndexError,
          // not RuntimeError: fuzzer seed 37737).
          const TensorProxy& tg = T(a[1], "cross_entropy", "target");
          THUNDER_CHECK(tg.ndim() != 0 || isFloating(tg.dtype),
                        "ltorch.cross_entropy: expected floating point type for target with class "
                        "probabilities, got ", dtypeName(tg.dtype));
          THUNDER_CHECK_KIND(false, ErrorKind::Index,
                             "ltorch.cross_entropy: dimension specified as 1 but the input has no dimensions");
        }
        double smoothing = a[7].toDouble();
        THUNDER_CHECK_KIND(
            smoothing >= 0.0 && smoothing <= 1.0, ErrorKind::Value,
            "ltorch.cross_entropy: label_smoothing must be between 0.0 and 1.0, but got ",
            smoothing);
        int64_t classDim = t.ndim() == 1 ? 0 : 1;
        int64_t classes = t.shape[classDim];
        const std::string& reduction = a[6].toString();
        THUNDER_CHECK_KIND(
            reduction == "none" || reduction == "sum" || reduction == "mean", ErrorKind::Value,
            "ltorch.cross_entropy: reduction must be 'none', 'mean' or 'sum', but got '", reduction,
            "'");
        Value logp = op("log_softmax", {a[0], classDim});
        // The class weights shaped to broadcast along the class dim.
        Value w;
        if (!a[2].isNone()) {
          const TensorProxy& wt = T(a[2], "cross_entropy", "weight");
          THUNDER_CHECK(wt.ndim() == 1 && wt.shape[0] == classes,
                        "ltorch.cross_entropy: expected a weight of shape (", classes,
                        ",), but got ", shapeStr(wt.shape));
          Shape ws(t.ndim(), 1);
          ws[classDim] = classes;
          w = op("reshape", {a[2], Value::ints(ws)});
        }
        if (isFloating(T(a[1], "cross_entropy", "target").dtype)) {
          // Class probabilities: -sum_c w_c p_c log q_c, the mean over the batch elements.
          // A float target of another shape is eager's class-index path, which checks the batch
          // size first (ValueError), then the dtype (fuzzer seed 18496).
          const TensorProxy& tg = a[1].tensor();
          int64_t targetBatch = tg.ndim() == 0 ? 0 : tg.shape[0];
          THUNDER_CHECK_KIND(tg.shape == t.shape || t.ndim() < 2 || targetBatch == t.shape[0], ErrorKind::Value,
                             "ltorch.cross_entropy: expected input batch_size (", t.shape[0],
                             ") to match target batch_size (", targetBatch, ")");
          THUNDER_CHECK(a[1].tensor().shape == t.shape,
                        "ltorch.cross_entropy: expected target of shape ", shapeStr(t.shape),
                        " (class probabilities), but got ", shapeStr(a[1].tensor().shape));
          Value p = smoothing > 0
                        ? op("add", {op("mul", {a[1], 1.0 - smoothing}), smoothing / classes})
                        : a[1];
          // As eager's cross_entropy_loss_prob_target: -(q * p * w) summed over the class dim
          // ('none') or over everything at once ('sum', 'mean'; summing each row first and
          // negating before the total changes rounding and the sign of a zero loss, which a
          // later division turns into an infinity of the other sign: fuzzer seed 15043).
          Value prod = op("mul", {logp, p});
          if (!w.isNone()) prod = op("mul", {prod, w});
          if (reduction == "none") return op("neg", {op("sum", {prod, Value::ints({classDim})})});
          Value total = op("neg", {op("sum", {prod})});
          if (reduction == "sum") return total;
          return op("div", {total, static_cast<double>(t.numel() / std::max<int64_t>(classes, 1))});
        }
        Value nll = nllLossImpl(logp, a[1], a[2], a[4].toInt(), reduction, "cross_entropy");
        if (smoothing == 0) return nll;
        // Label smoothing: (1 - e) nll + e / C * (-sum_c w_c log q_c), ignored targets excluded,
        // the mean divided by the same weight sum as nll's.
        Value prod = w.isNone() ? logp : op("mul", {logp, w});
        Value smooth = op("neg", {op("sum", {prod, Value::ints({classDim})})});
        Value valid = op("ne", {a[1], a[4]});
        smooth = op("where", {valid, smooth, 0.0});
        Value reduced;
        if (reduction == "none") {
          reduced = smooth;
        } else if (reduction == "sum") {
          reduced = op("sum", {smooth});
        } else {
          Value denom = clang::maybeConvert(valid, t.dtype);
          if (!a[2].isNone()) {
            Value safeTarget = op("where", {valid, a[1], 0});
            const TensorProxy& tg = a[1].tensor();
            Value tw = prims::take(
                a[2], clang::reshape(safeTarget, {tg.numel()}, "ltorch.cross_entropy"), 0);
            denom = op("mul", {denom, clang::reshape(tw, tg.shape, "ltorch.cross_entropy")});
          }
          reduced = op("div", {op("sum", {smooth}), op("sum", {denom})});
        }
        return op("add",
                  {op("mul", {nll, 1.0 - smoothing}), op("mul", {reduced, smoothing / classes})});
      });
  // a's values, with the result's gradient passed to both a and b: what the in-place handling
  // makes of an update that keeps another tensor's gradient path (`x.detach().mul_(2)` changes
  // x's values, and x keeps differentiating to what it came from). `a + (b - b.detach())` had
  // those values only where b is finite (an inf in b made them nan). Not a PyTorch callable.
  def("pass_gradient", "a, b", {}, [](const Args& a) {
    const TensorProxy& x = T(a[0], "pass_gradient");
    const TensorProxy& y = T(a[1], "pass_gradient", "b");
    THUNDER_CHECK(x.shape == y.shape && x.dtype == y.dtype, "ltorch.pass_gradient: expected a and b of one shape "
                  "and dtype, but got ", x.typeString(), " and ", y.typeString());
    return prims::convert_element_type(a[0], x.dtype);
  });
  // cross_entropy(a.to(torch.float32), ...) for bfloat16 / float16 logits: what the cross-entropy
  // upcast fold (transforms/xent_upcast.h) makes of `F.cross_entropy(logits.float(), ...)`, so
  // that a fused cross-entropy executor reads the logits as they are. Not a PyTorch callable.
  def("cross_entropy_upcast",
      "a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction='mean', "
      "label_smoothing=0.0",
      {}, [](const Args& a) {
        THUNDER_CHECK_KIND(isFloating(T(a[0], "cross_entropy_upcast").dtype), ErrorKind::Type,
                           "ltorch.cross_entropy_upcast: expected floating-point logits, but got ",
                           dtypeName(a[0].tensor().dtype));
        Args up = a;
        // (a torch-language conversion: the decomposition serves symbolic sizes as traced)
        if (a[0].tensor().dtype != DType::Float32) up[0] = op("to", {a[0], Value(), DType::Float32});
        return op("cross_entropy", std::move(up));
      });
  def("mse_loss", "a, target, size_average=None, reduce=None, reduction='mean', weight=None",
      {"torch.nn.functional.mse_loss"}, [](const Args& a) {
        const TensorProxy& t = T(a[0], "mse_loss");
        // As PyTorch, input and target are broadcast to one shape first, so the result's dtype
        // is promoted from two tensors of that shape: a 0-dim f32 target with a bf16 input
        // gives f32, not the bf16 that scalar-like promotion of a 0-dim tensor would.
        Shape shape = clang::broadcastShapes({t.shape, T(a[1], "mse_loss", "target").shape},
                                             "ltorch.mse_loss");
        auto expandTo = [&](const Value& x) {
          return x.tensor().shape == shape ? x : op("expand", {x, Value::ints(shape)});
        };
        Value x = expandTo(a[0]), y = expandTo(a[1]);
        // Eager's kernel computes (x - y)^2 in the promoted dtype, of floats only: a bool target
        // (or input) is a number there, where thunder's sub refuses bool (fuzzer seed 48432).
        DType dt = resultType(std::vector<Value>{x, y});
        THUNDER_CHECK_KIND(isFloating(dt), ErrorKind::NotImplemented, "ltorch.mse_loss: not implemented for ",
                           dtypeName(dt), " (input ", dtypeName(t.dtype), ", target ",
                           dtypeName(a[1].tensor().dtype), ")");
        Value d = op("sub", {clang::maybeConvert(x, dt), clang::maybeConvert(y, dt)});
        Value sq = op("mul", {d, d});
        const std::string& r = a[4].toString();
        THUNDER_CHECK_KIND(r == "none" || r == "sum" || r == "mean", ErrorKind::Value,
                           "ltorch.mse_loss: reduction must be 'none', 'mean' or 'sum', but got '", r, "'");
        const Value& w = a[5];
        if (!w.isNone()) {
          // As PyTorch: a weight of the input's shape scales each squared error; the mean
          // divides by the sum of the weights.
          THUNDER_CHECK_KIND(T(w, "mse_loss", "weight").shape == t.shape, ErrorKind::Value,
                             "ltorch.mse_loss: weight of shape ", shapeStr(w.tensor().shape),
                             " must have the input's shape ", shapeStr(t.shape));
          sq = op("mul", {sq, w});
          if (r == "mean") return op("div", {op("sum", {sq}), op("sum", {w})});
        }
        if (r == "none") return sq;
        if (r == "sum") return op("sum", {sq});
        return op("mean", {sq});
      });
  def("scaled_dot_product_attention",
      "query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, "
      "enable_gqa=False",
      {"torch.nn.functional.scaled_dot_product_attention"}, [](const Args& a) {
        const TensorProxy& q = T(a[0], "scaled_dot_product_attention", "query");
        const TensorProxy& k = T(a[1], "scaled_dot_product_attention", "key");
        T(a[2], "scaled_dot_product_attention", "value");
        double dropoutP = a[4].toDouble();
        THUNDER_CHECK_KIND(dropoutP >= 0.0 && dropoutP <= 1.0, ErrorKind::Value,
                           "ltorch.scaled_dot_product_attention: dropout_p must be in [0, 1], but got ",
                           dropoutP);
        THUNDER_CHECK(q.ndim() >= 2 && k.ndim() >= 2,
                      "ltorch.scaled_dot_product_attention: query and key need at least 2 dimensions");
        // Sizes read as numbers through staticSize and shapes given with their expressions: the
        // decomposition serves symbolic sizes (autodiff traces it again with them).
        Value key = a[1], value = a[2];
        if (a[7].toBool() && q.ndim() >= 3 && k.shape[k.ndim() - 3] != q.shape[q.ndim() - 3]) {
          int64_t heads = staticSize(k, k.ndim() - 3);
          int64_t rep = staticSize(q, q.ndim() - 3) / heads;
          auto repeatHeads = [&](const Value& x) {
            const TensorProxy& t = x.tensor();
            Value u = op("unsqueeze", {x, t.ndim() - 2});
            std::vector<SymInt> s = u.tensor().symShape();
            s[t.ndim() - 2] = {rep, nullptr};
            Value e = op("expand", {u, Value::sizes(s)});
            std::vector<SymInt> merged = t.symShape();
            merged[t.ndim() - 3] = {heads * rep, nullptr};
            return op("reshape", {e, Value::sizes(merged)});
          };
          key = repeatHeads(key);
          value = repeatHeads(value);
        }
        double scale = a[6].isNone() ? 1.0 / std::sqrt(static_cast<double>(staticSize(q, q.ndim() - 1)))
                                     : a[6].toDouble();
        DType dt = q.dtype;
        // Low precision inputs: both matmuls and the softmax in float32, one rounding at the end.
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        auto convert = [](const Value& x, DType d) {
          return x.tensor().dtype == d ? x : op("to", {x, Value(), d});
        };
        Value query = convert(a[0], comp);
        key = convert(key, comp);
        value = convert(value, comp);
        Value scores = op("mul", {op("matmul", {query, op("transpose", {key, -2, -1})}), scale});
        if (a[5].toBool()) {
          Value sizes = Value::sizes({q.dim(q.ndim() - 2), k.dim(k.ndim() - 2)});
          Value mask = op("tril", {op("full", {sizes, true}, {{"device", q.device}, {"dtype", DType::Bool}})});
          scores = op("masked_fill", {scores, op("logical_not", {mask}), -INFINITY});
        }
        if (!a[3].isNone()) {
          if (a[3].tensor().dtype == DType::Bool)
            scores = op("masked_fill", {scores, op("logical_not", {a[3]}), -INFINITY});
          else
            scores = op("add", {scores, a[3]});
        }
        Value probs;
        if (a[3].isNone()) {
          probs = op("softmax", {scores, -1});
        } else {
          // A row the mask hides whole attends to nothing: its weights are 0, as eager's math
          // backend makes them (_safe_softmax), not the NaN of a softmax over -inf. The row is
          // replaced by zeros before the softmax too, so that its gradient is 0, not NaN.
          Value hidden = op("eq", {op("amax", {scores, Value::ints({-1}), true}), Value(-INFINITY)});
          probs = op("where", {hidden, 0.0, op("softmax", {op("where", {hidden, 0.0, scores}), -1})});
        }
        // Dropout of the attention weights, as PyTorch's math backend applies it.
        if (dropoutP > 0.0) probs = op("dropout", {probs, dropoutP});
        return convert(op("matmul", {probs, value}), dt);
      });
}

}  // namespace

void registerLTorch() {
  static std::once_flag once;
  std::call_once(once, [] {
    prims::registerPrims();
    registerElementwise();
    registerConversions();
    registerShapeOps();
    registerReductions();
    registerCreation();
    registerNN();
    registerNNOps();
    registerTensorOps();
  });
}

void define(const std::string& name, const std::string& sig, std::vector<std::string> torch,
            SymbolFn fn, uint32_t tags) {
  def(name, sig, std::move(torch), std::move(fn), tags);
}

const std::vector<TorchName>& torchNames() {
  registerLTorch();
  return names();
}

const Symbol& symbol(const std::string& name) {
  return SymbolRegistry::get().at("ltorch." + name);
}

Value op(const std::string& name, std::vector<Value> args,
         const std::vector<std::pair<std::string, Value>>& kwargs) {
  const Symbol& s = symbol(name);
  return call(s, s.bind(std::move(args), kwargs));
}

}  // namespace thunder::ltorch
