// The default grad rules: one per differentiable prim, plus faster rules for a few torch-language
// symbols. Backward computations are written in the torch language, so a backward trace reads
// like PyTorch and every executor can claim its calls.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <mutex>

#include "ir/error.h"
#include "ops/clang.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "ops/symbolic_rules.h"
#include "ops/utils.h"
#include "transforms/autodiff.h"
#include "transforms/sdpa_rules.h"

namespace thunder {
namespace {

using Args = std::vector<Value>;
using X = const Value&;
using prims::PrimId;

Value op(const char* name, std::vector<Value> args) { return ltorch::op(name, std::move(args)); }
// A number operand goes second where that computes the same (a * b = b * a, a - b = -b + a):
// ATen takes no number first, and a call at symbolic sizes must run whole in ATen.
Value mul(X a, X b) { return a.isTensor() || !b.isTensor() ? op("mul", {a, b}) : op("mul", {b, a}); }
Value div(X a, X b) { return op("div", {a, b}); }
Value add(X a, X b) { return a.isTensor() || !b.isTensor() ? op("add", {a, b}) : op("add", {b, a}); }
Value sub(X a, X b) { return a.isTensor() || !b.isTensor() ? op("sub", {a, b}) : op("add", {op("neg", {b}), a}); }
Value neg(X a) { return a.isTensor() ? op("neg", {a}) : Value(-a.toDouble()); }
Value un(const char* name, X a) { return op(name, {a}); }
Value sq(X a) { return a.isTensor() ? mul(a, a) : Value(a.toDouble() * a.toDouble()); }
/// Zeros of `like`'s dtype and device in `shape` (sizes with their expressions).
Value zerosOf(const std::vector<SymInt>& shape, const TensorProxy& like) {
  return ltorch::op("full", {Value::sizes(shape), 0.0}, {{"device", like.device}, {"dtype", like.dtype}});
}
/// Zeros of a tensor's metadata; reads only its shape, so the backward need not keep it.
Value zerosLike(X a) { return zerosOf(a.tensor().symShape(), a.tensor()); }
Value toDType(X a, DType d) {
  return a.tensor().dtype == d ? a : ltorch::op("to", {a, Value(), d});
}
/// Computes low-precision floats in float32, as PyTorch's backward kernels do.
Value up(X a) { return isLowPrecision(a.tensor().dtype) ? toDType(a, DType::Float32) : a; }

const Symbol& sym(PrimId id) { return prims::symbol(id); }

/// A reduced gradient broadcast back over the reduced dims of `shape`.
Value expandBack(X g, const Shape& shape, const std::vector<int64_t>& dims) {
  Shape keep = shape;
  for (int64_t d : dims) keep[d] = 1;
  Value r = op("reshape", {g, Value::ints(keep)});
  return op("expand", {r, Value::ints(shape)});
}

/// The complex conjugate of a complex tensor or number (2 re(z) - z, exact); other values as
/// they are.
Value conj(X z) {
  if (z.isComplex()) return Value(std::conj(z.toComplex()));
  if (!z.isTensor() || !isComplex(z.tensor().dtype)) return z;
  Value re = prims::convert_element_type(prims::real(z), z.tensor().dtype);
  return sub(mul(re, 2.0), z);
}

using UnaryGrad = Value (*)(X x, X y, X g);
using BinaryGrad = std::pair<Value, Value> (*)(X a, X b, X y, X g);

void unary(PrimId id, UnaryGrad f) {
  registerGradRule(sym(id).id(), [id, f](const Args& a) {
    Value y = call(sym(id), a);
    Value g = getGrad(y);
    putGrad(a[0], f(a[0], y, g));
    return y;
  });
}

void binary(PrimId id, BinaryGrad f) {
  registerGradRule(sym(id).id(), [id, f](const Args& a) {
    Value y = call(sym(id), a);
    Value g = getGrad(y);
    auto [ga, gb] = f(a[0], a[1], y, g);
    putGrad(a[0], ga);
    putGrad(a[1], gb);
    return y;
  });
}

/// A rule over a call's bound arguments: `f(args, y, g)` puts the gradients.
void rule(const Symbol& s, void (*f)(const Args& a, X y, X g)) {
  const Symbol* p = &s;
  registerGradRule(s.id(), [p, f](const Args& a) {
    Value y = call(*p, a);
    f(a, y, getGrad(y));
    return y;
  });
}

/// A rule for an op of one floating tensor (complex inputs go through the decomposition):
/// `grad(x, g, args)` is the input's gradient, computed in float32 for 16-bit inputs when
/// `upcast` (as eager's backward kernels do), converted back to the input's dtype.
void floatRule(const Symbol& s, bool upcast, Value (*grad)(const Value& x, const Value& g, const Args& a)) {
  const Symbol* p = &s;
  registerGradRule(
      s.id(),
      [p, upcast, grad](const Args& a) {
        Value y = call(*p, a);
        Value g = getGrad(y);
        DType d = a[0].tensor().dtype;
        DType c = !upcast || d == DType::Float64 ? d : DType::Float32;
        putGrad(a[0], toDType(grad(toDType(a[0], c), toDType(g, c), a), d));
        return y;
      },
      [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
        return !b.args.empty() && b.args[0].isTensor() && isFloating(b.args[0].tensor().dtype);
      });
}

const double kPi = 3.14159265358979323846;

const std::pair<PrimId, UnaryGrad> kUnary[] = {
    // For complex x (a real |x|): g * sgn(x), sgn(x) = x / |x| and 0 at 0, as eager's abs_backward.
    {PrimId::abs,
     [](X x, X y, X g) {
       if (!isComplex(x.tensor().dtype)) return mul(g, un("sign", x));
       return mul(g, op("where", {op("eq", {y, 0.0}), 0.0, div(x, y)}));
     }},
    // eager's formulas (derivatives.yaml), in its order of operations: g * rsqrt(1 - x^2), not
    // g / sqrt(1 - x^2) (an ulp apart), and so on; see registerLowPrecisionUnaryRules.
    {PrimId::acos, [](X x, X, X g) { return mul(g, neg(un("rsqrt", sub(1.0, sq(x))))); }},
    {PrimId::acosh, [](X x, X, X g) { return mul(g, un("rsqrt", sub(sq(x), 1.0))); }},
    {PrimId::asin, [](X x, X, X g) { return mul(g, un("rsqrt", sub(1.0, sq(x)))); }},
    {PrimId::asinh, [](X x, X, X g) { return mul(g, un("rsqrt", add(sq(x), 1.0))); }},
    {PrimId::atan, [](X x, X, X g) { return div(g, add(sq(x), 1.0)); }},
    {PrimId::atanh, [](X x, X, X g) { return div(g, sub(1.0, sq(x))); }},
    {PrimId::ceil, [](X x, X, X) { return zerosLike(x); }},
    {PrimId::floor, [](X x, X, X) { return zerosLike(x); }},
    {PrimId::round, [](X x, X, X) { return zerosLike(x); }},
    {PrimId::trunc, [](X x, X, X) { return zerosLike(x); }},
    {PrimId::sign, [](X x, X, X) { return zerosLike(x); }},
    {PrimId::cos, [](X x, X, X g) { return mul(g, neg(un("sin", x))); }},
    {PrimId::cosh, [](X x, X, X g) { return mul(g, un("sinh", x)); }},
    {PrimId::erf,
     [](X x, X, X g) { return mul(g, mul(2.0 / std::sqrt(kPi), un("exp", neg(sq(x))))); }},
    {PrimId::erfc,
     [](X x, X, X g) { return mul(g, mul(-2.0 / std::sqrt(kPi), un("exp", neg(sq(x))))); }},
    {PrimId::erfinv,
     [](X, X y, X g) { return mul(g, mul(std::sqrt(kPi) / 2.0, un("exp", sq(y)))); }},
    // (conjugated: PyTorch's convention for a complex x; exact for a real one)
    {PrimId::exp, [](X, X y, X g) { return mul(g, conj(y)); }},
    {PrimId::exp2, [](X, X y, X g) { return mul(mul(g, y), std::log(2.0)); }},
    {PrimId::expm1, [](X, X y, X g) { return mul(g, add(y, 1.0)); }},
    {PrimId::digamma, [](X x, X, X g) { return mul(g, op("polygamma", {1, x})); }},
    {PrimId::lgamma, [](X x, X, X g) { return mul(g, un("digamma", x)); }},
    {PrimId::log, [](X x, X, X g) { return div(g, x); }},
    {PrimId::log10, [](X x, X, X g) { return div(g, mul(x, std::log(10.0))); }},
    {PrimId::log1p, [](X x, X, X g) { return div(g, add(x, 1.0)); }},
    {PrimId::log2, [](X x, X, X g) { return div(g, mul(x, std::log(2.0))); }},
    {PrimId::neg, [](X, X, X g) { return neg(g); }},
    {PrimId::reciprocal, [](X, X y, X g) { return mul(g, neg(sq(y))); }},
    // -0.5 * g * y^3, the cube as eager's pow(y, 3): y * y * y, in float32 rounded once for
    // float16 (CPU and CUDA), each product rounded for bfloat16 (CPU)
    {PrimId::rsqrt,
     [](X, X y, X g) {
       Value cube = y.tensor().dtype == DType::Float16 ? op("pow", {y, 3.0}) : mul(y, sq(y));
       return mul(mul(g, -0.5), cube);
     }},
    {PrimId::sin, [](X x, X, X g) { return mul(g, un("cos", x)); }},
    {PrimId::sinh, [](X x, X, X g) { return mul(g, un("cosh", x)); }},
    {PrimId::sqrt, [](X, X y, X g) { return div(g, mul(y, 2.0)); }},
    {PrimId::tan, [](X, X y, X g) { return mul(g, add(sq(y), 1.0)); }},
    {PrimId::tanh, [](X, X y, X g) { return mul(g, sub(1.0, sq(y))); }},
    // eager's sigmoid_backward, (g * (1 - y)) * y: g * (y * (1 - y)) rounded otherwise in a third
    // of float32 elements
    {PrimId::sigmoid, [](X, X y, X g) { return mul(mul(g, sub(1.0, y)), y); }},
};

using VV = std::pair<Value, Value>;

const std::pair<PrimId, BinaryGrad> kBinary[] = {
    {PrimId::add, [](X, X, X, X g) { return VV{g, g}; }},
    {PrimId::sub, [](X, X, X, X g) { return VV{g, neg(g)}; }},
    // Complex operands enter conjugated (PyTorch's convention for complex gradients).
    {PrimId::mul, [](X a, X b, X, X g) { return VV{mul(conj(b), g), mul(conj(a), g)}; }},
    {PrimId::div,
     [](X a, X b, X, X g) {
       // As eager's div_tensor_other_backward: -g * ((a / b) / b), exactly 0 for a / a (through
       // g * a / b^2 the two gradients of a / a cancel only up to rounding: fuzzer seed 11357)
       Value gb = b.isTensor() ? neg(mul(g, conj(div(div(a, b), b)))) : Value();
       return VV{div(g, conj(b)), gb};
     }},
    {PrimId::pow,
     [](X a, X b, X y, X g) {
       Value ga, gb;
       if (a.isTensor()) {
         // d/da a^b = b * a^(b - 1); where b == 0 the gradient is 0 whatever g is (eager's
         // pow_backward: a NaN or infinite g gives 0 there, not g * 0; fuzzer seed 30173).
         Value bm1 = b.isTensor() ? sub(b, 1.0) : Value(b.toDouble() - 1.0);
         Value d = mul(b, op("pow", {a, bm1}));
         if (b.isTensor()) ga = op("where", {op("eq", {b, 0.0}), 0.0, mul(g, d)});
         else if (b.toDouble() == 0.0) ga = zerosLike(a);
         else ga = mul(g, d);
       }
       if (b.isTensor()) {
         // d/db a^b = a^b * log(a), zero where a == 0 and b >= 0; a in the result's dtype first
         // (as eager's pow_backward_exponent: a float32 base of a bfloat16 power is rounded).
         Value loga = a.isTensor() ? un("log", toDType(a, y.tensor().dtype)) : Value(std::log(a.toDouble()));
         Value d = mul(y, loga);
         if (a.isTensor())
           d = op("where", {op("logical_and", {op("eq", {a, 0.0}), op("ge", {b, 0.0})}), 0.0, d});
         else if (a.toDouble() == 0.0)
           d = op("where", {op("ge", {b, 0.0}), 0.0, d});
         gb = mul(g, d);
       }
       return VV{ga, gb};
     }},
    {PrimId::atan2,
     [](X a, X b, X, X g) {
       // As eager's atan2_backward, g * b / (a^2 + b^2) and g * -a / (a^2 + b^2) with the
       // quotients 0 where a^2 + b^2 is 0: the gradient at the origin is g * 0, so 0 and yet NaN
       // for an infinite or NaN g (fuzzer seed 14288; a where() over the product gave 0). The
       // quotient is one division (eager multiplies by a reciprocal, of a float64 0-dim operand
       // squared before its conversion, which a prim's converted operands cannot repeat: fewer
       // roundings keep the float32 result as close to the float64 one as eager's, seed 22882).
       Value den = add(sq(a), sq(b));
       Value atOrigin = op("eq", {den, 0.0});
       return VV{mul(g, op("where", {atOrigin, 0.0, div(b, den)})),
                 mul(g, op("where", {atOrigin, 0.0, div(neg(a), den)}))};
     }},
    {PrimId::maximum,
     [](X a, X b, X, X g) {
       Value half = op("where", {op("eq", {a, b}), mul(g, 0.5), g});
       return VV{op("where", {op("lt", {a, b}), 0.0, half}),
                 op("where", {op("gt", {a, b}), 0.0, half})};
     }},
    {PrimId::minimum,
     [](X a, X b, X, X g) {
       Value half = op("where", {op("eq", {a, b}), mul(g, 0.5), g});
       return VV{op("where", {op("gt", {a, b}), 0.0, half}),
                 op("where", {op("lt", {a, b}), 0.0, half})};
     }},
    {PrimId::copysign,
     [](X a, X b, X y, X g) {
       Value ga = a.isTensor() ? mul(g, op("where", {op("eq", {a, 0.0}), 0.0, div(y, a)})) : Value();
       return VV{ga, b.isTensor() ? zerosLike(b) : Value()};
     }},
    {PrimId::fmod,
     [](X a, X b, X, X g) {
       Value gb = b.isTensor() ? neg(mul(g, un("trunc", div(a, b)))) : Value();
       return VV{g, gb};
     }},
    {PrimId::remainder,
     [](X a, X b, X, X g) {
       // As eager's -g * a.div(b, rounding_mode='floor'): floor division through fmod, so an
       // infinite a gives NaN, not floor(a / b) = inf (fuzzer seed 3730).
       Value gb = b.isTensor() ? neg(mul(g, op("floor_divide", {a, b}))) : Value();
       return VV{g, gb};
     }},
};

void registerShapeRules() {
  rule(sym(PrimId::where), [](const Args& a, X, X g) {
    putGrad(a[1], op("where", {a[0], g, 0.0}));
    putGrad(a[2], op("where", {a[0], 0.0, g}));
  });
  // d/da polygamma(n, a) = polygamma(n + 1, a)
  rule(sym(PrimId::polygamma), [](const Args& a, X, X g) {
    putGrad(a[1], mul(g, op("polygamma", {a[0].toInt() + 1, a[1]})));
  });
  rule(sym(PrimId::device_put), [](const Args& a, X, X g) {
    putGrad(a[0], prims::device_put(g, a[0].tensor().device));
  });
  rule(sym(PrimId::convert_element_type), [](const Args& a, X, X g) {
    DType from = a[0].tensor().dtype;
    if (!isFloating(from) && !isComplex(from)) return;
    // A real value made complex gets the real part of the gradient; a complex value made real
    // (its imaginary part dropped) gets the gradient as its real part.
    Value gin = g;
    if (isComplex(g.tensor().dtype) && !isComplex(from)) gin = prims::real(g);
    putGrad(a[0], toDType(gin, from));
  });
  rule(sym(PrimId::real), [](const Args& a, X, X g) {
    putGrad(a[0], toDType(g, a[0].tensor().dtype));
  });
  rule(sym(PrimId::imag), [](const Args& a, X, X g) {
    putGrad(a[0], mul(toDType(g, a[0].tensor().dtype), Value(std::complex<double>(0.0, 1.0))));
  });
  rule(sym(PrimId::broadcast_in_dim), [](const Args& a, X, X g) {
    // Sum over the dims that are new or broadcast from length 1. A length-1 dim of the output
    // holds one value: summing over it is a reshape, which the reshape below already does (and a
    // sum would be a needless reduction phase in a fused kernel).
    const TensorProxy& t = a[0].tensor();
    Shape shape = a[1].toInts();
    std::vector<int64_t> bdims = a[2].toInts(), dims;
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (shape[d] == 1) continue;
      auto it = std::find(bdims.begin(), bdims.end(), d);
      if (it == bdims.end() || t.shape[it - bdims.begin()] == 1) dims.push_back(d);
    }
    Value r = dims.empty() ? g : op("sum", {g, Value::ints(dims)});
    putGrad(a[0], op("reshape", {r, Value::ints(t.shape)}));
  });
  rule(sym(PrimId::reshape), [](const Args& a, X, X g) {
    putGrad(a[0], op("reshape", {g, Value::ints(a[0].tensor().shape)}));
  });
  rule(sym(PrimId::squeeze), [](const Args& a, X, X g) {
    putGrad(a[0], op("reshape", {g, Value::ints(a[0].tensor().shape)}));
  });
  rule(sym(PrimId::transpose), [](const Args& a, X, X g) {
    std::vector<int64_t> perm = a[1].toInts(), inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
    putGrad(a[0], op("permute", {g, Value::ints(inv)}));
  });
  rule(sym(PrimId::flip), [](const Args& a, X, X g) { putGrad(a[0], op("flip", {g, a[1]})); });
  rule(sym(PrimId::stride_order), [](const Args& a, X, X g) { putGrad(a[0], g); });
  rule(sym(PrimId::slice), [](const Args& a, X y, X g) {
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> start = a[1].toInts();
    std::vector<int64_t> strides = a[3].isNone() ? std::vector<int64_t>(t.ndim(), 1) : a[3].toInts();
    std::vector<std::array<int64_t, 3>> cfg;
    for (int64_t d = 0; d < t.ndim(); ++d) {
      int64_t n = y.tensor().shape[d];
      int64_t covered = n > 0 ? (n - 1) * strides[d] + 1 : 0;
      cfg.push_back({start[d], t.shape[d] - start[d] - covered, strides[d] - 1});
    }
    putGrad(a[0], prims::pad(g, 0.0, cfg));
  });
  rule(sym(PrimId::pad), [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    const std::vector<Value>& cfg = a[2].items();
    std::vector<std::array<int64_t, 3>> undo;
    std::vector<int64_t> starts, ends, steps;
    bool anyNegative = false;
    for (int64_t d = 0; d < t.ndim(); ++d) {
      std::vector<int64_t> c = cfg[d].toInts();
      int64_t lo = c[0], hi = c[1], step = c[2] + 1, n = t.shape[d];
      undo.push_back({std::max<int64_t>(-lo, 0), std::max<int64_t>(-hi, 0), 0});
      anyNegative |= lo < 0 || hi < 0;
      int64_t s = std::max<int64_t>(lo, 0);
      starts.push_back(s);
      ends.push_back(n > 0 ? s + (n - 1) * step + 1 : s);
      steps.push_back(step);
    }
    Value g2 = anyNegative ? prims::pad(g, 0.0, undo) : g;
    putGrad(a[0], prims::slice(g2, starts, ends, steps));
  });
  rule(sym(PrimId::cat), [](const Args& a, X, X g) {
    const std::vector<Value>& ts = a[0].items();
    int64_t dim = a[1].toInt(), offset = 0;
    for (const Value& t : ts) {
      int64_t len = t.tensor().shape[canonicalizeDim(t.tensor().ndim(), dim, "prims.cat")];
      putGrad(t, op("narrow", {g, dim, offset, len}));
      offset += len;
    }
  });
}

Value asLong(X idx) { return toDType(idx, DType::Int64); }

void registerIndexingRules() {
  rule(sym(PrimId::take), [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    if (t.ndim() == 0) {
      putGrad(a[0], op("reshape", {g, Value::ints({})}));
      return;
    }
    int64_t dim = canonicalizeDim(t.ndim(), a[2].toInt(), "prims.take");
    const TensorProxy& idx = a[1].tensor();
    Value flat = idx.ndim() == 1 ? a[1] : op("reshape", {a[1], Value::ints({idx.numel()})});
    Value spread = prims::broadcast_in_dim(asLong(flat), g.tensor().shape, {dim});
    putGrad(a[0], op("scatter_add", {zerosLike(a[0]), dim, spread, g}));
  });
  rule(sym(PrimId::gather), [](const Args& a, X, X g) {
    putGrad(a[0], op("scatter_add", {zerosLike(a[0]), a[2], asLong(a[1]), g}));
  });
  rule(sym(PrimId::scatter_add), [](const Args& a, X, X g) {
    putGrad(a[0], g);
    const TensorProxy &idx = a[1].tensor(), &val = a[2].tensor();
    Value gv = op("gather", {g, a[3], asLong(a[1])});
    if (idx.shape != val.shape) {
      std::vector<std::array<int64_t, 3>> cfg;
      for (int64_t d = 0; d < val.ndim(); ++d) cfg.push_back({0, val.shape[d] - idx.shape[d], 0});
      gv = prims::pad(gv, 0.0, cfg);
    }
    putGrad(a[2], gv);
  });
  rule(sym(PrimId::embedding), [](const Args& a, X, X g) {
    int64_t rows = a[1].tensor().shape[0];
    putGrad(a[1], call(sym(PrimId::embedding_backward), {g, a[0], rows, a[2]}));
  });
  // out[r] sums grad[i] over the i with indices[i] == r, except the padding row: grad[i]'s
  // gradient is g's row indices[i], zero where that is the padding row.
  rule(sym(PrimId::embedding_backward), [](const Args& a, X, X g) {
    Value rows = call(sym(PrimId::embedding), {a[1], g, Value()});
    if (!a[3].isNone()) {
      Value isPad = op("unsqueeze", {op("eq", {a[1], a[3]}), -1});
      rows = op("where", {isPad, 0.0, rows});
    }
    putGrad(a[0], rows);
  });
}

void registerReductionRules() {
  rule(sym(PrimId::sum), [](const Args& a, X, X g) {
    putGrad(a[0], expandBack(g, a[0].tensor().shape, a[1].toInts()));
  });
  rule(sym(PrimId::prod), [](const Args& a, X y, X g) {
    // Eager's formula (prod_backward), so that infinities and NaNs give what eager's give (a
    // zero next to an infinity: inf * 0 is NaN in the product of the others, fuzzer seed 60560):
    // with no zero anywhere in the input, prod / a_i; otherwise the product of the others
    // computed without division, as exclusive cumulative products from both ends along the
    // reduced dim (the input flattened where every dim is reduced; two or more zeros then give
    // 0 everywhere, as eager's backward does).
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> dims = a[1].toInts();
    if (dims.empty()) {
      putGrad(a[0], g);
      return;
    }
    Value ge = expandBack(g, t.shape, dims);
    const bool all = dims.size() == static_cast<size_t>(t.ndim());
    if (t.numel() == 0 || (!all && dims.size() > 1)) {
      // (no prims.prod over some but not all of several dims comes from ltorch)
      Value isZero = op("eq", {a[0], 0});
      Value nonzero = op("where", {isZero, 1, a[0]});
      Value prodNonzero = expandBack(call(sym(PrimId::prod), {nonzero, a[1]}), t.shape, dims);
      Value zeros = expandBack(call(sym(PrimId::sum), {toDType(isZero, t.dtype), a[1]}), t.shape, dims);
      Value lone = op("logical_and", {op("eq", {zeros, 1}), isZero});
      putGrad(a[0], mul(ge, op("where", {op("eq", {zeros, 0}), div(prodNonzero, nonzero),
                                         op("where", {lone, prodNonzero, 0})})));
      return;
    }
    Value x = all ? op("reshape", {a[0], Value::ints({t.numel()})}) : a[0];
    Shape xs = all ? Shape{t.numel()} : t.shape;
    const int64_t d = all ? 0 : dims[0], n = xs[d];
    Value others;
    if (n == 1) {
      others = ltorch::op("full", {Value::ints(xs), 1.0}, {{"device", t.device}, {"dtype", t.dtype}});
    } else {
      Shape os = xs;
      os[d] = 1;
      auto ones = [&] { return ltorch::op("full", {Value::ints(os), 1.0}, {{"device", t.device}, {"dtype", t.dtype}}); };
      Value before = op("cumprod", {op("cat", {Value::list({ones(), op("narrow", {x, d, 0, n - 1})}), d}), d});
      Value rest = op("flip", {op("narrow", {x, d, 1, n - 1}), Value::ints({d})});
      Value after = op("flip", {op("cumprod", {op("cat", {Value::list({ones(), rest}), d}), d}), Value::ints({d})});
      others = mul(before, after);
    }
    Value zeroCount = op("sum", {toDType(op("eq", {a[0], 0}), DType::Int64)});
    if (all) {
      others = op("where", {op("gt", {zeroCount, 1}), 0, others});
      others = op("reshape", {others, Value::ints(t.shape)});
    }
    Value divided = div(expandBack(y, t.shape, dims), a[0]);
    putGrad(a[0], mul(ge, op("where", {op("eq", {zeroCount, 0}), divided, others})));
  });
  // amax and amin share the gradient evenly among the elements equal to the result. The result
  // is taken again in the backward, from the input the mask compares: the backward may compute
  // that input again (rematerialization) in another kernel than the forward's, an ulp off (atan
  // of the fuser and of ATen), and against the forward's result no element was equal: 0 / 0
  // (fuzzer seed 21329). A minimum or maximum of the same values is exact.
  for (PrimId id : {PrimId::amax, PrimId::amin}) {
    registerGradRule(sym(id).id(), [id](const Args& a) {
      Value y = call(sym(id), a);
      Value g = getGrad(y);
      const TensorProxy& t = a[0].tensor();
      std::vector<int64_t> dims = a[1].toInts();
      Value again = call(sym(id), a);
      Value mask = toDType(op("eq", {a[0], expandBack(again, t.shape, dims)}), t.dtype);
      // No reduced dim (a 0-d input): each element is its own group, g / 1 * 1, and g / 0 * 0 =
      // NaN for a NaN input as eager's (it passed g: fuzzer seed 36352, amax of a 0-d NaN).
      Value count = dims.empty() ? mask : op("sum", {mask, Value::ints(dims)});
      putGrad(a[0], mul(expandBack(div(g, count), t.shape, dims), mask));
      return y;
    });
  }
  rule(sym(PrimId::var), [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> dims = a[1].toInts();
    if (dims.empty()) {
      // Each element is its own sample (n = 1): 2 (x - x) / (1 - correction). With no degree of
      // freedom left (correction >= 1) eager's var_backward of a 0-dim input is g * NaN where x
      // equals its mean and g * inf elsewhere, that is for a NaN x (the division gave NaN there:
      // fuzzer seed 27271).
      double dof = 1.0 - a[2].toDouble();
      if (dof <= 0) {
        const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
        putGrad(a[0], mul(g, op("where", {op("eq", {a[0], a[0]}), nan, inf})));
      } else {
        putGrad(a[0], mul(g, div(mul(sub(a[0], a[0]), 2.0), dof)));
      }
      return;
    }
    int64_t n = 1;
    for (int64_t d : dims) n *= t.shape[d];
    Value mean = expandBack(div(op("sum", {a[0], Value::ints(dims)}), static_cast<double>(n)),
                            t.shape, dims);
    double scale = 2.0 / (static_cast<double>(n) - a[2].toDouble());
    // eager's association, (scale * g) * (x - mean): each product rounds as eager's does
    putGrad(a[0], mul(mul(expandBack(g, t.shape, dims), scale), sub(a[0], mean)));
  });
}

/// eager's var_backward over the non-empty `dims` of a real floating x: (2 / (n - correction)) *
/// g * (x - x.mean(dims, keepdim=True)), each step in x's dtype. For bfloat16 and float16 eager
/// rounds the mean, the difference and each product to x's dtype; through var's decomposition
/// (float32 throughout, one rounding at the end) the gradient of a bfloat16 var differed from
/// eager's by several bfloat16 steps where terms cancel downstream (fuzzer seed 25723).
Value varBackward(X x, X g, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  const TensorProxy& t = x.tensor();
  int64_t n = 1;
  for (int64_t d : dims) n *= t.shape[d];
  Value gk = g;
  if (!keepdim) {
    Shape keep = t.shape;
    for (int64_t d : dims) keep[d] = 1;
    gk = op("reshape", {g, Value::ints(keep)});
  }
  Value mean = ltorch::op("mean", {x, Value::ints(dims), true});
  return mul(mul(gk, 2.0 / (static_cast<double>(n) - correction)), sub(x, mean));
}

/// The reduced dims of a var/std/var_mean call whose own rule applies: a real floating input
/// with at least one element and one reduced dim (others go through the decomposition).
bool varRuleApplies(const BoundSymbol& b, const char* name) {
  if (b.args.size() < 4 || !b.args[0].isTensor()) return false;
  const TensorProxy& t = b.args[0].tensor();
  if (!isFloating(t.dtype) || t.numel() == 0 || t.ndim() == 0) return false;
  return !clang::reductionDims(t, b.args[1], name).empty();
}

void registerMatmulRules() {
  rule(sym(PrimId::matmul), [](const Args& a, X y, X g) {
    const TensorProxy &ta = a[0].tensor(), &tb = a[1].tensor();
    // Matrices of 1-D operands, as torch.matmul; the gradients are summed over broadcast batch
    // dims by putGrad.
    Value a2 = ta.ndim() == 1 ? op("unsqueeze", {a[0], 0}) : a[0];
    Value b2 = tb.ndim() == 1 ? op("unsqueeze", {a[1], -1}) : a[1];
    Shape yShape = y.tensor().shape;
    if (tb.ndim() == 1) yShape.push_back(1);
    if (ta.ndim() == 1) yShape.insert(yShape.end() - 1, 1);
    Value g2 = op("reshape", {g, Value::ints(yShape)});
    Value ga = op("matmul", {g2, op("transpose", {b2, -2, -1})});
    if (ta.ndim() == 1) ga = op("squeeze", {ga, -2});
    Value gb = op("matmul", {op("transpose", {a2, -2, -1}), g2});
    if (tb.ndim() == 1) gb = op("squeeze", {gb, -1});
    putGrad(a[0], ga);
    putGrad(a[1], gb);
  });
  rule(sym(PrimId::linear), [](const Args& a, X, X g) {
    const TensorProxy &x = a[0].tensor(), &w = a[1].tensor();
    int64_t in = x.shape.back();
    // The rows as a number, not -1: with a length-0 feature dim, -1 would be ambiguous.
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < x.shape.size(); ++d) rows *= x.shape[d];
    if (w.ndim() == 2) {
      int64_t out = w.shape[0];
      putGrad(a[0], op("matmul", {g, a[1]}));
      Value g2 = op("reshape", {g, Value::ints({rows, out})});
      Value x2 = op("reshape", {a[0], Value::ints({rows, in})});
      putGrad(a[1], op("matmul", {op("transpose", {g2, 0, 1}), x2}));
    } else {
      putGrad(a[0], mul(op("unsqueeze", {g, -1}), a[1]));
      putGrad(a[1], op("matmul", {op("reshape", {g, Value::ints({-1})}),
                                  op("reshape", {a[0], Value::ints({rows, in})})}));
    }
    putGrad(a[2], g);
  });
}

// ---- nn ops ----

/// A rule for an nn prim whose backward is another prim: `backward(args, outputs, grad)` returns
/// the gradient of the input a[0]. Multi-output prims (values, indices) get the values' grad.
void nnRule(PrimId id, Value (*backward)(const Args& a, X y, X g)) {
  registerGradRule(sym(id).id(), [id, backward](const Args& a) {
    Value y = call(sym(id), a);
    Value g = getGrad(y.isTuple() ? y.items()[0] : y);
    putGrad(a[0], backward(a, y, g));
    return y;
  });
}

void registerNNRules() {
  registerGradRule(sym(PrimId::convolution).id(), [](const Args& a) {
    Value y = call(sym(PrimId::convolution), a);
    Value g = getGrad(y);
    Value grads = call(sym(PrimId::convolution_backward),
                       {g, a[0], a[1], a[3], a[4], a[5], a[6], a[7], a[8]});
    putGrad(a[0], grads.items()[0]);
    putGrad(a[1], grads.items()[1]);
    if (!a[2].isNone()) {
      std::vector<int64_t> dims = {0};
      for (int64_t d = 2; d < y.tensor().ndim(); ++d) dims.push_back(d);
      putGrad(a[2], op("sum", {g, Value::ints(dims)}));
    }
    return y;
  });
  registerGradRule(sym(PrimId::batch_norm).id(), [](const Args& a) {
    Value y = call(sym(PrimId::batch_norm), a);
    Value g = getGrad(y.items()[0]);
    Value grads = call(sym(PrimId::batch_norm_backward),
                       {g, a[0], a[1], y.items()[1], y.items()[2], a[6]});
    putGrad(a[0], grads.items()[0]);
    if (!a[1].isNone()) {
      putGrad(a[1], toDType(grads.items()[1], a[1].tensor().dtype));
      if (!a[2].isNone()) putGrad(a[2], toDType(grads.items()[2], a[2].tensor().dtype));
    } else if (!a[2].isNone()) {
      // Without a weight ATen's CPU kernel sums the bias's gradient in float32 (2e-7 off in
      // float64): the sum over every dim but the channels.
      std::vector<int64_t> dims = {0};
      for (int64_t d = 2; d < a[0].tensor().ndim(); ++d) dims.push_back(d);
      putGrad(a[2], toDType(op("sum", {g, Value::ints(dims)}), a[2].tensor().dtype));
    }
    return y;
  });
  nnRule(PrimId::max_pool, [](const Args& a, X y, X g) {
    return call(sym(PrimId::max_pool_backward),
                {g, a[0], y.items()[1], a[1], a[2], a[3], a[4], a[5]});
  });
  nnRule(PrimId::avg_pool, [](const Args& a, X, X g) {
    return call(sym(PrimId::avg_pool_backward), {g, a[0], a[1], a[2], a[3], a[4], a[5], a[6]});
  });
  nnRule(PrimId::adaptive_avg_pool, [](const Args& a, X, X g) {
    return call(sym(PrimId::adaptive_avg_pool_backward), {g, a[0]});
  });
  nnRule(PrimId::adaptive_max_pool, [](const Args& a, X y, X g) {
    return call(sym(PrimId::adaptive_max_pool_backward), {g, a[0], y.items()[1]});
  });
  nnRule(PrimId::upsample, [](const Args& a, X, X g) {
    return call(sym(PrimId::upsample_backward),
                {g, Value::ints(a[0].tensor().shape), a[1], a[2], a[3], a[4]});
  });
}

// ---- end nn ops ----

/// xlogy's and xlog1py's gradients (`onePlus`), eager's formulas (derivatives.yaml): for x,
/// xlogy(g, y) (xlog1py(g, y)), 0 where g == 0 unless y is NaN, set to 0 where x == 0 and y <= 0
/// (y <= -1), or, for a number y, everywhere x == 0 unless y > 0 (> -1), NaN included; for y,
/// g * x / y (g * x / (y + 1)), NaN at x == y == 0. (The decomposition's own gradients differ at
/// x == 0: log(y) for x, 0 for y.)
void xlogyGrads(const Args& a, X g, bool onePlus) {
  const Value &x = a[0], &y = a[1];
  const double edge = onePlus ? -1.0 : 0.0;  // where log(y) (log1p(y)) stops being finite
  if (x.isTensor() && needsGrad(x)) {
    Value gx = op(onePlus ? "xlog1py" : "xlogy", {g, y});
    Value mask;
    if (y.isTensor()) mask = op("logical_and", {op("eq", {x, 0}), op("le", {y, edge})});
    else if (!(y.toDouble() > edge)) mask = op("eq", {x, 0});
    putGrad(x, mask.isNone() ? gx : op("where", {mask, 0.0, gx}));
  }
  if (y.isTensor() && needsGrad(y)) putGrad(y, div(mul(g, x), onePlus ? add(y, 1.0) : y));
}

void registerTorchRules() {
  // clamp passes the gradient where min <= x <= max, bounds included, as PyTorch does (through
  // maximum/minimum a value exactly at a bound would get half of it); tensor bounds get the rest.
  rule(ltorch::symbol("clamp"), [](const Args& a, X y, X g) {
    Value pass = Value(true);
    auto both = [](X p, X q) { return p.isBool() ? q : op("logical_and", {p, q}); };
    // With both bounds and min > max the result is max (clamp is min(max(x, lo), hi)): the
    // gradient goes to max there, and min gets none, as PyTorch's clamp_backward_min_max.
    bool bounded = !a[1].isNone() && !a[2].isNone();
    if (!a[1].isNone()) {
      pass = both(pass, op("ge", {a[0], a[1]}));
      if (a[1].isTensor()) {
        Value below = op("lt", {a[0], a[1]});
        if (bounded) below = op("logical_and", {below, op("lt", {a[1], a[2]})});
        putGrad(a[1], op("where", {below, g, 0.0}));
      }
    }
    if (!a[2].isNone()) {
      pass = both(pass, op("le", {a[0], a[2]}));
      if (a[2].isTensor()) {
        Value above = op("gt", {a[0], a[2]});
        if (bounded) above = op("logical_or", {above, op("lt", {a[2], a[1]})});
        putGrad(a[2], op("where", {above, g, 0.0}));
      }
    }
    putGrad(a[0], op("where", {pass, g, 0.0}));
  });
  // div with a rounding mode is piecewise constant: a zero gradient everywhere, as PyTorch's
  // (through the decomposition, the true quotient a / b of a zero divisor would give NaN).
  // torch.floor_divide has no derivative in PyTorch, so it gets no rule here.
  {
    const Symbol* div = &ltorch::symbol("div");
    registerGradRule(
        div->id(),
        [div](const Args& a) {
          Value y = call(*div, a);
          getGrad(y);
          for (size_t i = 0; i < 2; ++i)
            if (a[i].isTensor() && isFloating(a[i].tensor().dtype)) putGrad(a[i], zerosLike(a[i]));
          return y;
        },
        [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
          return b.args.size() > 2 && !b.args[2].isNone();
        });
  }
  // max() and min() over all elements share the gradient evenly among the elements equal to the
  // result, NaN counting as equal to a NaN result: eager's evenly_distribute_backward (amax's
  // rule would give NaN everywhere for an all-NaN input: fuzzer seed 3453). The reductions over
  // a dim go through gather and need no rule.
  for (const char* which : {"max", "min"}) {
    const Symbol* s = &ltorch::symbol(which);
    registerGradRule(
        s->id(),
        [s](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          Value again = call(*s, a);  // from the input the mask compares, as amax's rule
          Value mask = op("logical_or", {op("eq", {a[0], again}),
                                         op("logical_and", {op("isnan", {a[0]}), op("isnan", {again})})});
          Value count = op("sum", {mask});  // int64, as eager's mask.sum()
          putGrad(a[0], op("where", {mask, div(g, count), 0.0}));
          return y;
        },
        [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
          return b.args.size() > 1 && b.args[1].isNone() && b.args[0].isTensor() &&
                 isFloating(b.args[0].tensor().dtype);
        });
  }
  // silu: eager's silu_backward, g * s * (1 + x * (1 - s)) with s = sigmoid(x), in float32 for
  // 16-bit inputs. Through the decomposition x * sigmoid(x) the term g * x * s * (1 - s) is
  // inf * 0 = NaN for a large x and an infinite g, where eager's product is inf (fuzzer seed
  // 19121). Complex inputs go through the decomposition.
  floatRule(ltorch::symbol("silu"), true, [](const Value& x, const Value& gc, const Args&) {
    Value sg = op("sigmoid", {x});
    Value oneMinus = op("add", {op("neg", {sg}), 1.0});
    return op("mul", {op("mul", {gc, sg}), op("add", {op("mul", {x, oneMinus}), 1.0})});
  });
  // lerp: eager's rule, g * (1 - w) for a, g * w for end, g * (end - a) for a tensor weight.
  // Through the decomposition's two branches an infinite g gave inf - inf = NaN where eager's
  // product is infinite (fuzzer seeds 13903, 18826).
  rule(ltorch::symbol("pass_gradient"), [](const Args& a, X, X g) {
    putGrad(a[0], g);
    putGrad(a[1], g);
  });
  rule(ltorch::symbol("xlogy"), [](const Args& a, X, X g) { xlogyGrads(a, g, false); });
  rule(ltorch::symbol("xlog1py"), [](const Args& a, X, X g) { xlogyGrads(a, g, true); });
  rule(ltorch::symbol("lerp"), [](const Args& a, X, X g) {
    const Value& w = a[2];
    Value oneMinus = w.isTensor()    ? sub(1.0, w)
                     : w.isComplex() ? Value(1.0 - w.toComplex())
                                     : Value(1.0 - w.toDouble());
    putGrad(a[0], mul(g, conj(oneMinus)));
    putGrad(a[1], mul(g, conj(w)));
    if (w.isTensor()) putGrad(w, mul(g, conj(sub(a[1], a[0]))));
  });
  // gelu: eager's gelu_backward, g * (cdf + x * pdf) ('none') or g * (0.5 * (1 + t) +
  // 0.5 * x * (1 - t^2) * b * (1 + 3k x^2)) with t = tanh(b * (x + k x^3)) ('tanh'), in float32
  // for 16-bit inputs. Through the decomposition's product rule an infinite g at a large x gave
  // inf * 1 + inf * x * 0 = NaN where eager's g * 1 is infinite (fuzzer seed 20485).
  floatRule(ltorch::symbol("gelu"), true, [](const Value& x, const Value& gc, const Args& a) {
    Value deriv;
    if (a[1].toString() == "tanh") {
      const double beta = std::sqrt(2.0 / kPi), kappa = 0.044715;
      Value xsq = mul(x, x);
      Value inner = mul(beta, add(x, mul(kappa, mul(xsq, x))));
      Value t = un("tanh", inner);
      Value left = mul(0.5, add(t, 1.0));
      Value right = mul(mul(mul(mul(0.5, x), sub(1.0, mul(t, t))), beta), add(mul(3.0 * kappa, xsq), 1.0));
      deriv = add(left, right);
    } else {
      const double alpha = 0.5 * 2.0 / std::sqrt(kPi) / std::sqrt(2.0);  // 1 / sqrt(2 pi)
      Value cdf = mul(0.5, add(un("erf", mul(x, 1.0 / std::sqrt(2.0))), 1.0));
      Value pdf = mul(alpha, un("exp", mul(mul(x, -0.5), x)));
      deriv = add(cdf, mul(x, pdf));
    }
    return mul(gc, deriv);
  });
  // nan_to_num: eager's g * isfinite(x), NaN where g is NaN or infinite at a replaced value
  // (a where() dropped it: fuzzer seed 18794). Complex inputs go through the decomposition.
  floatRule(ltorch::symbol("nan_to_num"), false,
            [](const Value& x, const Value& g, const Args&) { return mul(g, op("isfinite", {x})); });
  rule(ltorch::symbol("relu"), [](const Args& a, X y, X g) {
    // As eager's threshold_backward: 0 where y <= 0, else g (NaN inputs pass g: fuzzer seed 3695)
    putGrad(a[0], op("where", {op("le", {y, 0}), 0.0, g}));
  });
  // std = sqrt(var): through sqrt the gradient at std == 0 is inf * 0 = NaN. PyTorch defines it
  // as 0 there (a constant row has no direction of steepest ascent), so std has its own rule:
  // d std / dx = (x - mean) / ((n - correction) * std), and 0 where std == 0.
  // Real inputs only: complex std is differentiated through its decomposition.
  const Symbol* stdSym = &ltorch::symbol("std");
  registerGradRule(stdSym->id(), [stdSym](const Args& a) {
    Value y = call(*stdSym, a);
    Value g = getGrad(y);
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> dims = clang::reductionDims(t, a[1], "ltorch.std");
    if (t.numel() == 0) {
      putGrad(a[0], zerosLike(a[0]));
      return y;
    }
    int64_t n = 1;
    for (int64_t d : dims) n *= t.shape[d];
    double corr = a[2].isNone() ? 1.0 : a[2].toDouble();
    if (!dims.empty()) {
      // eager's std_backward: var_backward of (g / (std * 2)) with 0 where std == 0, each step
      // in the input's dtype (as var's rule)
      Value gv = op("where", {op("eq", {y, 0.0}), 0.0, div(g, mul(y, 2.0))});
      putGrad(a[0], varBackward(a[0], gv, dims, corr, a[3].toBool()));
      return y;
    }
    // No reduced dim (a 0-d input): each element is its own mean.
    Value x = up(a[0]);
    Value yb = up(y), gb = up(g);
    Value scale = op("where", {op("eq", {yb, 0.0}), 0.0,
                               div(gb, mul(yb, static_cast<double>(n) - corr))});
    putGrad(a[0], mul(scale, sub(x, x)));
    return y;
  }, [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
    return b.args[0].isTensor() && isFloating(b.args[0].tensor().dtype);
  });
  // roll: the gradient rolled back (roll is a permutation of the elements), so that the call stays
  // whole for the torch executor's roll kernel instead of becoming slices and a cat.
  const Symbol* rollSym = &ltorch::symbol("roll");
  registerGradRule(rollSym->id(), [rollSym](const Args& a) {
    Value y = call(*rollSym, a);
    std::vector<int64_t> back = a[1].isInt() ? std::vector<int64_t>{a[1].toInt()} : a[1].toInts();
    for (int64_t& s : back) s = -s;
    putGrad(a[0], call(*rollSym, {getGrad(y), Value::ints(back), a[2]}));
    return y;
  });
  // var and var_mean: eager's var_backward (varBackward above); var_mean's mean gets eager's
  // mean_backward, g expanded / n in the input's dtype, added after the var's term as eager adds.
  const Symbol* varSym = &ltorch::symbol("var");
  registerGradRule(varSym->id(), [varSym](const Args& a) {
    Value y = call(*varSym, a);
    Value g = getGrad(y);
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> dims = clang::reductionDims(t, a[1], "ltorch.var");
    double corr = a[2].isNone() ? 1.0 : a[2].toDouble();
    putGrad(a[0], varBackward(a[0], g, dims, corr, a[3].toBool()));
    return y;
  }, [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
    return varRuleApplies(b, "ltorch.var");
  });
  const Symbol* varMeanSym = &ltorch::symbol("var_mean");
  registerGradRule(varMeanSym->id(), [varMeanSym](const Args& a) {
    Value y = call(*varMeanSym, a);
    Value gv = getGrad(y.items()[0]), gm = getGrad(y.items()[1]);
    const TensorProxy& t = a[0].tensor();
    std::vector<int64_t> dims = clang::reductionDims(t, a[1], "ltorch.var_mean");
    double corr = a[2].isNone() ? 1.0 : a[2].toDouble();
    bool keepdim = a[3].toBool();
    putGrad(a[0], varBackward(a[0], gv, dims, corr, keepdim));
    int64_t n = 1;
    for (int64_t d : dims) n *= t.shape[d];
    Value gmk = keepdim ? gm : op("reshape", {gm, Value::ints([&] {
                                              Shape keep = t.shape;
                                              for (int64_t d : dims) keep[d] = 1;
                                              return keep;
                                            }())});
    putGrad(a[0], div(op("expand", {gmk, Value::ints(t.shape)}), static_cast<double>(n)));
    return y;
  }, [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
    return varRuleApplies(b, "ltorch.var_mean");
  });
  // logsumexp: eager's backward, g * exp(x - y), with g and y kept along the reduced dims. Through
  // the decomposition the max it shifts by took a gradient too, g - g * sum(softmax): NaN for an
  // infinite g where eager's is inf (fuzzer seed 96590). Complex inputs take the decomposition.
  const Symbol* lseSym = &ltorch::symbol("logsumexp");
  // A 16-bit input's result is computed in float32 and rounded, as the decomposition does, and
  // the backward reads the float32 result (eager's reads the rounded one: a bfloat16 result
  // near 2 is off by up to 2**-8 in the exponent).
  registerGradRule(lseSym->id(), [lseSym](const Args& a) {
    const TensorProxy& t = a[0].tensor();
    Value x = up(a[0]);
    Value y32 = call(*lseSym, {x, a[1], a[2]});
    Value y = clang::maybeConvert(y32, t.dtype);
    Value g = getGrad(y);
    std::vector<int64_t> dims = clang::reductionDims(t, a[1], "ltorch.logsumexp");
    bool keep = a[2].toBool();
    Value yk = keep ? y32 : expandBack(y32, t.shape, dims);
    Value gk = keep ? up(g) : expandBack(up(g), t.shape, dims);
    putGrad(a[0], clang::maybeConvert(mul(gk, un("exp", sub(x, yk))), t.dtype));
    return y;
  }, [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
    return !b.args.empty() && b.args[0].isTensor() && isFloating(b.args[0].tensor().dtype);
  });
  // softmax and log_softmax keep their forward as one call: the backward reads only the output.
  rule(ltorch::symbol("softmax"), [](const Args& a, X y, X g) {
    Value y32 = up(y), g32 = up(g);
    Value s = ltorch::op("sum", {mul(g32, y32), Value::ints({a[1].toInt()}), true});
    putGrad(a[0], mul(y32, sub(g32, s)));
  });
  rule(ltorch::symbol("log_softmax"), [](const Args& a, X y, X g) {
    Value y32 = up(y), g32 = up(g);
    Value s = ltorch::op("sum", {g32, Value::ints({a[1].toInt()}), true});
    putGrad(a[0], sub(g32, mul(un("exp", y32), s)));
  });
  // round(x, decimals): 0, as eager's (through the decomposition, x * 10^d, it was
  // 0 * inf = NaN where 10^d overflows the dtype).
  rule(ltorch::symbol("round"), [](const Args& a, X, X) { putGrad(a[0], zerosLike(a[0])); });
  // detach: the forward only, no gradient.
  registerGradRule("ltorch.detach", [](const Args& a) {
    return call(SymbolRegistry::get().at("ltorch.detach"), a);
  });
}

// ---- tensor ops ----

/// Moves dim `d` of x to the end.
Value dimToEnd(X x, int64_t d) { return op("movedim", {x, d, -1}); }

void registerTensorOpRules() {
  // cumsum: each input contributes to every later output, a reversed cumulative sum.
  rule(sym(PrimId::cumsum), [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    if (t.ndim() == 0) return putGrad(a[0], g);
    int64_t d = canonicalizeDim(t.ndim(), a[1].toInt(), "prims.cumsum");
    Value dims = Value::ints({d});
    putGrad(a[0], op("flip", {op("cumsum", {op("flip", {g, dims}), d}), dims}));
  });
  // cumprod: d y_j / d x_i is the product of x_k for k <= j, k != i (exact at zeros):
  // C[i, j] = cumprod over k of x with x_i replaced by 1, and grad_i = sum_{j >= i} g_j C[i, j].
  rule(sym(PrimId::cumprod), [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    if (t.ndim() == 0) return putGrad(a[0], g);
    int64_t d = canonicalizeDim(t.ndim(), a[1].toInt(), "prims.cumprod");
    int64_t n = t.shape[d];
    Value x = dimToEnd(a[0], d), gl = dimToEnd(g, d);
    Shape sq = x.tensor().shape;
    sq.push_back(n);
    Value rows = op("unsqueeze", {prims::iota(n, 0, 1, t.device, DType::Int64), 1});
    Value cols = op("unsqueeze", {prims::iota(n, 0, 1, t.device, DType::Int64), 0});
    Value eye = op("eq", {rows, cols});
    Value x2 = op("expand", {op("unsqueeze", {x, -2}), Value::ints(sq)});
    Value c = op("cumprod", {op("where", {eye, 1, x2}), -1});
    Value later = op("ge", {cols, rows});
    Value terms = op("where", {later, mul(c, op("unsqueeze", {gl, -2})), 0});
    putGrad(a[0], op("movedim", {op("sum", {terms, -1}), -1, d}));
  });
  // sort and topk: the values' cotangent goes back to where each value came from.
  for (auto [id, dimArg] : {std::pair{PrimId::sort, 1}, std::pair{PrimId::topk, 2}}) {
    const Symbol* p = &sym(id);
    int dimIndex = dimArg;
    registerGradRule(p->id(), [p, dimIndex](const Args& a) {
      Value y = call(*p, a);
      const TensorProxy& t = a[0].tensor();
      Value g = getGrad(y.items()[0]);
      if (t.ndim() == 0) {
        putGrad(a[0], op("reshape", {g, Value::ints({})}));
      } else {
        int64_t d = canonicalizeDim(t.ndim(), a[dimIndex].toInt(), p->name);
        putGrad(a[0], op("scatter_add", {zerosLike(a[0]), d, y.items()[1], g}));
      }
      return y;
    });
  }
  // scatter: the written positions of a get no gradient; value[i] gets the gradient of where it
  // was written.
  rule(sym(PrimId::scatter), [](const Args& a, X, X g) {
    const TensorProxy &idx = a[1].tensor(), &val = a[2].tensor();
    int64_t d = a[3].toInt();
    Value zeros = ltorch::op("full", {Value::ints(idx.shape), 0.0},
                             {{"device", idx.device}, {"dtype", g.tensor().dtype}});
    putGrad(a[0], prims::scatter(g, asLong(a[1]), zeros, d));
    Value gv = op("gather", {g, d, asLong(a[1])});
    if (idx.shape != val.shape) {
      std::vector<std::array<int64_t, 3>> cfg;
      for (int64_t i = 0; i < val.ndim(); ++i) cfg.push_back({0, val.shape[i] - idx.shape[i], 0});
      gv = prims::pad(gv, 0.0, cfg);
    }
    putGrad(a[2], gv);
  });
}

}  // namespace

// ---- cross-entropy with class indices ----

/// F.cross_entropy(x [N, C] float32/float64, t [N] class indices), no class weights: the rule
/// keeps the forward to row reductions over x (max, sum of exponentials, the target's logit as a
/// masked sum) and saves the log-sum-exp per row, not the [N, C] log-probabilities; the backward
/// is one pointwise expression, (softmax(x) - (1 - s) onehot(t) - s / C) * g_row. The one-hot
/// compares a column index (arange(C), broadcast) with each row's target, so both directions are
/// single fused kernels, and with logits upcast from bf16 (`logits.float()`) neither the float32
/// logits nor their float32 gradient is ever written to memory.
Value crossEntropyRule(const Args& a) {
  const TensorProxy& x = a[0].tensor();
  // (the rows may vary with the size symbols: shapes carry their expressions)
  SymInt n = x.dim(0);
  int64_t c = x.shape[1];
  int64_t ignore = a[4].toInt();
  const std::string reduction = a[6].toString();
  double s = a[7].toDouble();
  Value cols = ltorch::op("arange", {c}, {{"device", x.device}, {"dtype", c <= (int64_t(1) << 31) - 1 ? DType::Int32 : DType::Int64}});
  Value full = Value::sizes({n, SymInt{c, nullptr}});
  Value colsB = op("expand", {op("unsqueeze", {cols, 0}), full});
  Value valid = op("ne", {a[1], ignore});
  Value safe = op("where", {valid, a[1], 0});
  Value onehot = op("eq", {colsB, op("expand", {op("unsqueeze", {safe, 1}), full})});
  Value dims = Value::ints({1});
  Value m = ltorch::op("amax", {a[0], dims, true});
  Value sumExp = op("sum", {un("exp", sub(a[0], m)), dims, true});
  Value lse = add(un("log", sumExp), m);  // [N, 1]
  Value xt = op("sum", {op("where", {onehot, a[0], 0.0}), dims});
  Value lse1 = op("reshape", {lse, Value::sizes({n})});
  Value rowLoss = sub(lse1, xt);
  if (s > 0) {
    Value meanX = div(op("sum", {a[0], dims}), static_cast<double>(c));
    rowLoss = add(mul(rowLoss, 1.0 - s), mul(sub(lse1, meanX), s));
  }
  rowLoss = op("where", {valid, rowLoss, 0.0});
  Value count;
  Value loss;
  if (reduction == "none") {
    loss = rowLoss;
  } else if (reduction == "sum") {
    loss = op("sum", {rowLoss});
  } else {
    count = op("sum", {toDType(valid, x.dtype)});
    loss = div(op("sum", {rowLoss}), count);
  }

  Value g = getGrad(loss);
  Value rowG;
  if (reduction == "none") {
    rowG = g;
  } else {
    rowG = op("expand", {op("reshape", {g, Value::ints({1})}), Value::sizes({n})});
    if (reduction == "mean") rowG = div(rowG, count);
  }
  rowG = op("where", {valid, rowG, 0.0});
  Value rowG2 = op("expand", {op("unsqueeze", {rowG, 1}), full});
  Value p = un("exp", sub(a[0], op("expand", {lse, full})));
  Value target = mul(toDType(onehot, x.dtype), 1.0 - s);  // (a where of two numbers would be float32)
  Value dx = sub(p, target);
  if (s > 0) dx = sub(dx, s / static_cast<double>(c));
  putGrad(a[0], mul(dx, rowG2));
  return loss;
}

void registerCrossEntropyRule() {
  markSymbolicGrad(ltorch::symbol("cross_entropy").id());  // (shapes with their expressions)
  registerGradRule(
      ltorch::symbol("cross_entropy").id(), crossEntropyRule,
      [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>& differentiable) {
        if (b.args.size() < 8 || !b.args[0].isTensor() || !b.args[1].isTensor()) return false;
        const TensorProxy &x = b.args[0].tensor(), &t = b.args[1].tensor();
        bool floatLogits = x.dtype == DType::Float32 || x.dtype == DType::Float64;
        return floatLogits && x.ndim() == 2 && x.shape[0] > 0 && x.shape[1] > 0 && t.ndim() == 1 &&
               isIntegral(t.dtype) && t.shape[0] == x.shape[0] && b.args[2].isNone() &&
               b.args[3].isNone() && b.args[5].isNone() && b.args[4].isInt() && b.args[6].isString() &&
               (b.args[7].isFloat() || b.args[7].isInt()) && !differentiable(t);
      });
}

/// 16-bit float inputs of the unary ops above: eager's backward formulas run in the input's
/// dtype, each step rounded to it (g * x.cos() rounds the cosine to bfloat16 first) and reading
/// the rounded output (g * y with y = exp(x) in bfloat16). The prims' rules see float32 values
/// (ltorch's ops compute 16-bit floats in float32), the output unrounded, and round once at the
/// end: an ulp of bfloat16 from eager's gradient in one element of four, past the tolerance
/// where terms cancel downstream (fuzzer seed 25723, through var's gradient). The ltorch
/// symbol of each op gets the prim's formula on its 16-bit values, every ltorch op rounding as
/// eager's does; tanh's and sigmoid's backward are eager kernels (float32 arithmetic on the
/// rounded output, one rounding): the formula in float32 on the rounded output.
void registerLowPrecisionUnaryRules() {
  for (const auto& [id, f] : kUnary) {
    const std::string name = sym(id).name;
    const Symbol* s = SymbolRegistry::get().find("ltorch." + name);
    if (s == nullptr || id == PrimId::ceil || id == PrimId::floor || id == PrimId::round ||
        id == PrimId::trunc || id == PrimId::sign)
      continue;
    // (eager's CPU sigmoid_backward of float16 rounds each step to float16, its CUDA kernel
    // computes in float32 as for bfloat16: thunder follows the latter)
    bool kernel = id == PrimId::tanh || id == PrimId::sigmoid;
    UnaryGrad grad = f;
    registerGradRule(
        s->id(),
        [s, grad, kernel](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          DType d = a[0].tensor().dtype;
          putGrad(a[0], kernel ? toDType(grad(up(a[0]), up(y), up(g)), d) : grad(a[0], y, g));
          return y;
        },
        [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
          return b.args.size() == 1 && b.args[0].isTensor() && isLowPrecision(b.args[0].tensor().dtype);
        });
  }
}

/// pow with a 16-bit float result: eager's pow_backward formulas run in that dtype, each step
/// rounded to it, (b - 1) included: for a bfloat16 exponent of -300, b - 1 is -300 again, so
/// eager's gradient with respect to the base is a^-300 times b where the prim's rule (float32
/// throughout, one rounding) took a^-301, 30% apart for a = 0.77 (fuzzer seed 40402). The
/// ltorch symbol gets the prim's formula on the call's own operands, every ltorch op rounding
/// (and promoting a float32 0-dim base to the power's dtype) as eager's does.
void registerLowPrecisionPowRule() {
  const Symbol* s = SymbolRegistry::get().find("ltorch.pow");
  if (s == nullptr) return;
  BinaryGrad grad = nullptr;
  for (const auto& [id, f] : kBinary)
    if (id == PrimId::pow) grad = f;
  registerGradRule(
      s->id(),
      [s, grad](const Args& a) {
        Value y = call(*s, a);
        Value g = getGrad(y);
        auto [ga, gb] = grad(a[0], a[1], y, g);
        if (a[0].isTensor()) putGrad(a[0], ga);
        if (a[1].isTensor()) putGrad(a[1], gb);
        return y;
      },
      [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
        if (b.args.size() != 2 || !b.output.isTensor() || !isLowPrecision(b.output.tensor().dtype)) return false;
        for (const Value& v : b.args)
          if (!v.isTensor() && !v.isInt() && !v.isFloat()) return false;
        return true;
      });
}

/// hypot: eager's hypot_backward, g * a / y and g * b / y. Through the decomposition's where
/// (an infinite operand gives inf) an infinite operand's gradient would be 0, eager's is
/// inf / inf = NaN.
void registerHypotRule() {
  const Symbol* s = SymbolRegistry::get().find("ltorch.hypot");
  if (s == nullptr) return;
  registerGradRule(s->id(), [s](const Args& a) {
    Value y = call(*s, a);
    Value g = getGrad(y);
    putGrad(a[0], div(mul(g, a[0]), y));
    putGrad(a[1], div(mul(g, a[1]), y));
    return y;
  });
}


/// special.entr: eager's backward, g * -(1 + log x), at every x: inf at 0 and NaN below it, where
/// the decomposition's where (0 at 0, -inf below) would give 0.
void registerEntrRule() {
  const Symbol* s = SymbolRegistry::get().find("ltorch.entr");
  if (s == nullptr) return;
  registerGradRule(s->id(), [s](const Args& a) {
    Value y = call(*s, a);
    Value g = getGrad(y);
    putGrad(a[0], mul(g, neg(add(un("log", a[0]), 1.0))));
    return y;
  });
}

// ---- rules at symbolic sizes ----
//
// A training trace with size symbols differentiates the calls that read symbols the trace does
// not pin with these rules (registerSymbolicGradRule): the forward call runs whole, and the
// backward is written in torch-language ops whose symbolic rules follow the sizes, every shape
// given as the proxies' sizes with their expressions (sizesOf). A call none of them takes pins the
// symbols it reads (docs/symbolic_sizes.md).

/// The sizes of a tensor with their expressions, as a shape argument.
Value sizesOf(X t) { return Value::sizes(t.tensor().symShape()); }

/// Whether a value is a real floating tensor, or a number (whose gradient nobody reads).
bool realOrNumber(X v) {
  if (!v.isTensor()) return v.isNumber() && !v.isComplex();
  return !isComplex(v.tensor().dtype);
}

bool realTensor(X v) { return v.isTensor() && isFloating(v.tensor().dtype); }

/// `g` grown along dimension `d` to `before + len + after`, the new parts zero (the gradient of
/// a slice); both lengths may vary with the symbols.
Value padDim(Value g, int64_t d, const SymInt& before, const SymInt& after) {
  std::vector<Value> parts;
  const TensorProxy& t = g.tensor();
  auto zeros = [&](const SymInt& n) {
    std::vector<SymInt> shape = t.symShape();
    shape[d] = n;
    return zerosOf(shape, t);
  };
  if (before.symbolic() || before.hint != 0) parts.push_back(zeros(before));
  parts.push_back(g);
  if (after.symbolic() || after.hint != 0) parts.push_back(zeros(after));
  if (parts.size() == 1) return g;
  return op("cat", {Value::list(parts), d});
}

/// The dims of a varargs shape or permutation (`x.permute(0, 2, 1)` or `x.permute((0, 2, 1))`).
std::vector<int64_t> varargInts(X v) {
  if (v.isSequence() && v.items().size() == 1 && v.items()[0].isSequence()) return v.items()[0].toInts();
  return v.toInts();
}

using Cond = GradRuleCondition;
using Diff = std::function<bool(const TensorProxy&)>;

/// A symbolic rule for ltorch's `name`: `f(args, y, g)` puts the gradients.
void symRule(const char* name, void (*f)(const Args& a, X y, X g), Cond applies) {
  const Symbol* s = SymbolRegistry::get().find(std::string("ltorch.") + name);
  THUNDER_INTERNAL(s != nullptr, "no ltorch symbol ", name);
  registerSymbolicGradRule(
      s->id(),
      [s, f](const Args& a) {
        Value y = call(*s, a);
        f(a, y, getGrad(y));
        return y;
      },
      std::move(applies));
}

/// Calls whose output and every tensor argument are real floating tensors (ints and bools, which
/// get no gradient, too); `n` the number of arguments the condition looks at.
Cond realCall(size_t n) {
  return [n](const BoundSymbol& b, const Diff&) {
    if (!b.output.isTensor() || !isFloating(b.output.tensor().dtype)) return false;
    for (size_t i = 0; i < n && i < b.args.size(); ++i)
      if (b.args[i].isTensor() && isComplex(b.args[i].tensor().dtype)) return false;
    return true;
  };
}

/// The dims a sum or mean call reduces (every dim for None or ()).
std::vector<int64_t> reducedDims(const Args& a) {
  const TensorProxy& t = a[0].tensor();
  std::vector<int64_t> dims;
  if (a[1].isNone() || (a[1].isSequence() && a[1].items().empty())) {
    for (int64_t d = 0; d < t.ndim(); ++d) dims.push_back(d);
    return dims;
  }
  return canonicalizeDims(t.ndim(), a[1].toInts(), "sum");
}

/// The gradient of a sum or mean broadcast back over the dims it reduced.
Value expandReduced(const Args& a, X g) {
  const TensorProxy& t = a[0].tensor();
  std::vector<SymInt> keep = t.symShape();
  for (int64_t d : reducedDims(a)) keep[d] = {1, nullptr};
  return op("expand", {op("reshape", {g, Value::sizes(keep)}), sizesOf(a[0])});
}

/// The number of elements over `dims`, as an int with its expression (ATen divides by it at
/// each run); a product of two symbols is read as a number (staticSize).
Value countOf(const TensorProxy& t, const std::vector<int64_t>& dims) {
  int varying = 0;
  for (int64_t d : dims) varying += t.dim(d).symbolic();
  SymInt n{1, nullptr};
  for (int64_t d : dims) {
    SymInt size = varying > 1 ? SymInt{staticSize(t, d), nullptr} : t.dim(d);
    bool ok = true;
    n = mulSym(n, size, ok);  // (at most one factor varies)
  }
  return Value(n);
}

/// Basic indexing: the gradient of `a[key]` grown back to `a`'s sizes. False where the key is
/// not ints, step-1 slices, None and an ellipsis.
bool indexGrad(X a, X key, Value& g) {
  const TensorProxy& t = a.tensor();
  std::vector<Value> items = key.isTuple() ? key.items() : std::vector<Value>{key};
  size_t used = 0;
  for (const Value& k : items) {
    if (k.isTensor() || k.isSequence() || k.isBool()) return false;
    if (k.isInt() || k.isSlice()) ++used;
  }
  if (used > t.shape.size()) return false;
  std::vector<Value> expanded;
  bool seenEllipsis = false;
  for (const Value& k : items) {
    if (k.isEllipsis()) {
      if (seenEllipsis) return false;
      seenEllipsis = true;
      for (size_t i = 0; i < t.shape.size() - used; ++i) expanded.push_back(Value::slice(Value(), Value(), Value()));
    } else {
      expanded.push_back(k);
    }
  }
  int64_t pos = 0, in = 0;
  for (const Value& k : expanded) {
    if (k.isNone()) {
      g = op("squeeze", {g, pos});
      continue;
    }
    SymInt size = t.dim(in);
    if (k.isInt()) {
      SymInt i = k.toSymInt();
      if (i.hint < 0) {
        if (i.symbolic()) return false;
        i = size + i;
      }
      g = op("unsqueeze", {g, pos});
      g = padDim(g, pos, i, size - i - SymInt{1, nullptr});
    } else {
      const Value &lo = k.items()[0], &st = k.items()[2];  // (the stop is the result's length)
      if (!st.isNone() && (st.symExpr() || st.toInt() != 1)) return false;
      if (!lo.isNone() && !lo.isInt()) return false;
      SymInt start{0, nullptr};
      if (!lo.isNone()) {
        start = lo.toSymInt();
        if (start.hint < 0) {
          if (start.symbolic()) return false;
          start = size + start;
          if (start.hint < 0) start = {0, nullptr};
        }
        if (start.hint > size.hint) start = size;
      }
      SymInt len = g.tensor().dim(pos);
      g = padDim(g, pos, start, size - start - len);
    }
    ++pos;
    ++in;
  }
  return true;
}

void registerSymbolicRules() {
  // Elementwise ops of one tensor: the prims' formulas on the call's own values, each op rounding
  // to a 16-bit dtype as eager's formulas do (registerLowPrecisionUnaryRules); tanh's and
  // sigmoid's as ATen's one kernel.
  for (const auto& [id, f] : kUnary) {
    const Symbol* s = SymbolRegistry::get().find("ltorch." + sym(id).name);
    if (s == nullptr) continue;
    UnaryGrad grad = f;
    // tanh's and sigmoid's gradient as ATen's one kernel (from the output), the others' formulas
    const char* kernel = id == PrimId::tanh ? "tanh_backward" : id == PrimId::sigmoid ? "sigmoid_backward" : nullptr;
    registerSymbolicGradRule(
        s->id(),
        [s, grad, kernel](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          DType d = a[0].tensor().dtype;
          putGrad(a[0], kernel ? op(kernel, {toDType(g, d), y}) : toDType(grad(a[0], y, g), d));
          return y;
        },
        [](const BoundSymbol& b, const Diff&) {
          return b.args.size() == 1 && realTensor(b.args[0]) && b.output.isTensor() &&
                 b.output.tensor().dtype == b.args[0].tensor().dtype;
        });
  }
  // Elementwise ops of two: the prims' formulas on the broadcast operands; putGrad sums each
  // gradient back to its operand's sizes.
  for (const auto& [id, f] : kBinary) {
    const Symbol* s = SymbolRegistry::get().find("ltorch." + sym(id).name);
    if (s == nullptr) continue;
    if (id != PrimId::add && id != PrimId::sub && id != PrimId::mul && id != PrimId::div &&
        id != PrimId::pow && id != PrimId::maximum && id != PrimId::minimum)
      continue;
    BinaryGrad grad = f;
    bool alpha = id == PrimId::add || id == PrimId::sub;
    registerSymbolicGradRule(
        s->id(),
        [s, grad, alpha](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          // The prims' formulas take operands of the result's dtype (type promotion done): a 0-dim
          // float64 tensor times a float32 one computes in float32, and so do their gradients
          // (putGrad converts each back to its operand's dtype).
          DType d = y.tensor().dtype;
          auto promoted = [d](X v) { return v.isTensor() ? toDType(v, d) : v; };
          // a + alpha * b: b's gradient is alpha times the plain sum's
          bool scaled = alpha && !(a[2].isInt() && a[2].toInt() == 1);
          auto [ga, gb] = grad(promoted(a[0]), promoted(a[1]), y, g);
          putGrad(a[0], ga);
          putGrad(a[1], scaled && gb.isTensor() ? mul(gb, a[2]) : gb);
          return y;
        },
        [id](const BoundSymbol& b, const Diff&) {
          if (b.args.size() < 2 || !b.output.isTensor() || !isFloating(b.output.tensor().dtype)) return false;
          if (!realOrNumber(b.args[0]) || !realOrNumber(b.args[1])) return false;
          if (id == PrimId::div && b.args.size() > 2 && !b.args[2].isNone()) return false;  // rounding_mode
          if ((id == PrimId::add || id == PrimId::sub) && !(b.args[2].isInt() || b.args[2].isFloat())) return false;
          if ((id == PrimId::maximum || id == PrimId::minimum) && !(b.args[0].isTensor() && b.args[1].isTensor()))
            return false;
          return true;
        });
  }
  // silu and gelu: ATen's backward kernels (the default rules' formulas, one call).
  symRule("silu", [](const Args& a, X, X g) { putGrad(a[0], op("silu_backward", {toDType(g, a[0].tensor().dtype), a[0]})); },
          [](const BoundSymbol& b, const Diff&) { return realTensor(b.args[0]); });
  symRule("gelu", [](const Args& a, X, X g) {
    putGrad(a[0], ltorch::op("gelu_backward", {toDType(g, a[0].tensor().dtype), a[0]}, {{"approximate", a[1]}}));
  }, [](const BoundSymbol& b, const Diff&) { return realTensor(b.args[0]) && b.args[1].isString(); });
  symRule("where", [](const Args& a, X, X g) {
    putGrad(a[1], op("where", {a[0], g, 0.0}));
    putGrad(a[2], op("where", {a[0], 0.0, g}));
  }, [](const BoundSymbol& b, const Diff&) {
    return b.args.size() == 3 && b.output.isTensor() && isFloating(b.output.tensor().dtype) &&
           realOrNumber(b.args[1]) && realOrNumber(b.args[2]);
  });
  symRule("masked_fill", [](const Args& a, X, X g) { putGrad(a[0], op("where", {a[1], 0.0, g})); },
          [](const BoundSymbol& b, const Diff&) {
            return b.args.size() == 3 && realTensor(b.args[0]) && b.args[2].isNumber();
          });
  // Conversions: the gradient in the input's dtype.
  for (const char* name : {"to", "type_as", "float", "contiguous", "clone"}) {
    symRule(name, [](const Args& a, X, X g) { putGrad(a[0], toDType(g, a[0].tensor().dtype)); },
            [](const BoundSymbol& b, const Diff&) {
              return realTensor(b.args[0]) && b.output.isTensor() && isFloating(b.output.tensor().dtype) &&
                     b.output.tensor().device == b.args[0].tensor().device;
            });
  }
  // Shapes: the gradient reshaped or permuted back.
  for (const char* name : {"reshape", "view", "flatten", "unsqueeze", "squeeze"}) {
    symRule(name, [](const Args& a, X, X g) { putGrad(a[0], op("reshape", {g, sizesOf(a[0])})); }, realCall(1));
  }
  symRule("expand", [](const Args& a, X, X g) { putGrad(a[0], g); }, realCall(1));  // (putGrad sums)
  symRule("transpose", [](const Args& a, X, X g) { putGrad(a[0], op("transpose", {g, a[1], a[2]})); },
          realCall(1));
  symRule("permute", [](const Args& a, X, X g) {
    std::vector<int64_t> perm = varargInts(a[1]), inv(perm.size());
    int64_t n = static_cast<int64_t>(perm.size());
    for (int64_t i = 0; i < n; ++i) inv[canonicalizeDim(n, perm[i], "permute")] = i;
    putGrad(a[0], op("permute", {g, Value::ints(inv)}));
  }, realCall(1));
  symRule("getitem", [](const Args& a, X, X g) {
    Value grad = g;
    // (the condition below takes only the keys indexGrad covers: none gets no gradient)
    THUNDER_INTERNAL(indexGrad(a[0], a[1], grad), "autodiff: the gradient of getitem at symbolic sizes for key ",
                     describe(a[1]));
    putGrad(a[0], grad);
  }, [](const BoundSymbol& b, const Diff&) {
    if (b.args.size() != 2 || !realTensor(b.args[0]) || !b.output.isTensor()) return false;
    const Value& key = b.args[1];
    std::vector<Value> items = key.isTuple() ? key.items() : std::vector<Value>{key};
    for (const Value& k : items) {
      if (k.isTensor() || k.isSequence() || k.isBool()) return false;
      if (k.isSlice()) {
        const Value &lo = k.items()[0], &st = k.items()[2];
        if (!st.isNone() && (st.symExpr() || !st.isInt() || st.toInt() != 1)) return false;
        if (!lo.isNone() && (!lo.isInt() || (lo.symExpr() && lo.toInt() < 0))) return false;
      } else if (k.isInt() && k.symExpr() && k.toInt() < 0) {
        return false;
      }
    }
    return true;
  });
  // Factories that read only their argument's metadata: no gradient flows.
  for (const char* name : {"new_zeros", "new_ones", "new_empty", "new_full", "zeros_like", "ones_like", "full_like",
                           "empty_like", "rand_like", "randn_like"}) {
    const Symbol* s = &ltorch::symbol(name);
    registerSymbolicGradRule(s->id(), [s](const Args& a) { return call(*s, a); });
  }
  symRule("stack", [](const Args& a, X, X g) {
    const std::vector<Value>& ts = a[0].items();
    int64_t dim = canonicalizeDim(g.tensor().ndim(), a[1].toInt(), "stack");
    for (size_t i = 0; i < ts.size(); ++i) putGrad(ts[i], op("select", {g, dim, static_cast<int64_t>(i)}));
  }, [](const BoundSymbol& b, const Diff&) {
    if (!b.output.isTensor() || !isFloating(b.output.tensor().dtype) || !b.args[0].isSequence()) return false;
    for (const Value& t : b.args[0].items())
      if (!t.isTensor() || isComplex(t.tensor().dtype)) return false;
    return b.args[1].isInt();
  });
  symRule("narrow", [](const Args& a, X y, X g) {
    const TensorProxy& t = a[0].tensor();
    int64_t d = canonicalizeDim(t.ndim(), a[1].toInt(), "narrow");
    SymInt start = a[2].toSymInt();
    if (start.hint < 0) start = t.dim(d) + start;
    putGrad(a[0], padDim(g, d, start, t.dim(d) - start - y.tensor().dim(d)));
  }, [](const BoundSymbol& b, const Diff&) {
    return realTensor(b.args[0]) && b.args[1].isInt() && b.args[2].isInt() &&
           !(b.args[2].symExpr() && b.args[2].toInt() < 0);
  });
  symRule("cat", [](const Args& a, X, X g) {
    const std::vector<Value>& ts = a[0].items();
    int64_t dim = a[1].toInt();
    SymInt offset{0, nullptr};
    for (const Value& t : ts) {
      if (!t.isTensor()) continue;
      int64_t d = canonicalizeDim(t.tensor().ndim(), dim, "cat");
      SymInt len = t.tensor().dim(d);
      putGrad(t, op("narrow", {g, d, offset, len}));
      offset = offset + len;
    }
  }, [](const BoundSymbol& b, const Diff&) {
    if (!b.output.isTensor() || !isFloating(b.output.tensor().dtype) || !b.args[0].isSequence()) return false;
    for (const Value& t : b.args[0].items())
      if (!t.isTensor() || isComplex(t.tensor().dtype) || t.tensor().ndim() != b.output.tensor().ndim()) return false;
    return true;
  });
  // Reductions: the gradient broadcast back over the reduced dims.
  Cond reduction = [](const BoundSymbol& b, const Diff&) {
    return realTensor(b.args[0]) && b.output.isTensor() && isFloating(b.output.tensor().dtype) &&
           b.args[2].isBool() && (b.args.size() < 4 || b.args[3].isNone()) && b.args[0].tensor().ndim() > 0;
  };
  symRule("sum", [](const Args& a, X, X g) {
    putGrad(a[0], toDType(expandReduced(a, g), a[0].tensor().dtype));
  }, reduction);
  symRule("mean", [](const Args& a, X, X g) {
    const TensorProxy& t = a[0].tensor();
    putGrad(a[0], toDType(div(expandReduced(a, g), countOf(t, reducedDims(a))), t.dtype));
  }, reduction);
  // layer_norm and rms_norm over their last dims, in float32 for 16-bit inputs: eager's
  // formulas, gx = rstd * (gxh - mean(gxh) - xh * mean(gxh * xh)) with xh the normalized input
  // and gxh its gradient (without the mean term for rms_norm); the weight's and bias's gradients
  // summed over the other dims by putGrad.
  for (bool layer : {true, false}) {
    const Symbol* s = &ltorch::symbol(layer ? "layer_norm" : "rms_norm");
    registerSymbolicGradRule(
        s->id(),
        [s, layer](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          const TensorProxy& t = a[0].tensor();
          int64_t k = static_cast<int64_t>(a[1].toInts().size());
          std::vector<int64_t> dims;
          for (int64_t d = t.ndim() - k; d < t.ndim(); ++d) dims.push_back(d);
          Value dv = Value::ints(dims);
          auto mean = [&](X v) { return ltorch::op("mean", {v, dv, true}); };
          Value x = up(a[0]), gy = up(g);
          double eps = layer ? a[4].toDouble() : (a[3].isNone() ? 1.1920928955078125e-07 : a[3].toDouble());
          if (!layer && a[3].isNone() && t.dtype == DType::Float64) eps = 2.220446049250313e-16;
          Value xc = layer ? sub(x, mean(x)) : x;
          Value rstd = un("rsqrt", add(mean(mul(xc, xc)), eps));
          Value xh = mul(xc, rstd);
          const Value& w = a[2];
          if (w.isTensor()) putGrad(w, toDType(mul(gy, xh), w.tensor().dtype));
          if (layer && a[3].isTensor()) putGrad(a[3], toDType(gy, a[3].tensor().dtype));
          Value gxh = w.isTensor() ? mul(gy, up(w)) : gy;
          Value inner = sub(gxh, mul(xh, mean(mul(gxh, xh))));
          if (layer) inner = sub(inner, mean(gxh));
          putGrad(a[0], toDType(mul(rstd, inner), t.dtype));
          return y;
        },
        [layer](const BoundSymbol& b, const Diff&) {
          if (!realTensor(b.args[0]) || !b.args[1].isSequence()) return false;
          for (size_t i : {size_t{2}, size_t{3}})
            if (i < b.args.size() && (layer || i == 2) && !b.args[i].isNone() && !realTensor(b.args[i])) return false;
          return layer ? b.args[4].isFloat() || b.args[4].isInt() : b.args[3].isNone() || b.args[3].isFloat();
        });
  }
  // amax and amin: the gradient shared evenly among the elements equal to the result (taken
  // again, as the prims' rule does).
  for (const char* name : {"amax", "amin"}) {
    const Symbol* s = &ltorch::symbol(name);
    registerSymbolicGradRule(
        s->id(),
        [s](const Args& a) {
          Value y = call(*s, a);
          Value g = getGrad(y);
          Value again = call(*s, a);
          const TensorProxy& t = a[0].tensor();
          Value mask = toDType(op("eq", {a[0], expandReduced(a, again)}), t.dtype);
          Value count = ltorch::op("sum", {mask, Value::ints(reducedDims(a)), true});
          putGrad(a[0], mul(div(expandReduced(a, g), count), mask));
          return y;
        },
        [](const BoundSymbol& b, const Diff&) {
          return realTensor(b.args[0]) && b.args[0].tensor().ndim() > 0 && b.args[2].isBool();
        });
  }
  // Products of matrices, of at least 2 dims each; putGrad sums over broadcast batch dims.
  symRule("matmul", [](const Args& a, X, X g) {
    putGrad(a[0], op("matmul", {g, op("transpose", {a[1], -2, -1})}));
    putGrad(a[1], op("matmul", {op("transpose", {a[0], -2, -1}), g}));
  }, [](const BoundSymbol& b, const Diff&) {
    return realTensor(b.args[0]) && realTensor(b.args[1]) && b.args[0].tensor().ndim() >= 2 &&
           b.args[1].tensor().ndim() >= 2 && b.args[0].tensor().dtype == b.args[1].tensor().dtype;
  });
  symRule("bmm", [](const Args& a, X, X g) {
    putGrad(a[0], op("bmm", {g, op("transpose", {a[1], 1, 2})}));
    putGrad(a[1], op("bmm", {op("transpose", {a[0], 1, 2}), g}));
  }, realCall(2));
  // Pieces: their gradients joined again.
  for (const char* name : {"split", "chunk", "unbind"}) {
    const Symbol* s = &ltorch::symbol(name);
    bool stack = std::string(name) == "unbind";
    registerSymbolicGradRule(
        s->id(),
        [s, stack](const Args& a) {
          Value y = call(*s, a);
          std::vector<Value> gs;
          for (const Value& piece : y.items()) gs.push_back(getGrad(piece));
          int64_t dim = stack ? a[1].toInt() : a[2].toInt();
          putGrad(a[0], op(stack ? "stack" : "cat", {Value::list(gs), dim}));
          return y;
        },
        [stack](const BoundSymbol& b, const Diff&) {
          if (!realTensor(b.args[0]) || !b.output.isSequence()) return false;
          for (const Value& piece : b.output.items())
            if (!piece.isTensor()) return false;
          return stack ? b.args[1].isInt() : b.args[2].isInt();
        });
  }
  symRule("addmm", [](const Args& a, X, X g) {
    auto scaled = [](X v, X k) { return k.isInt() && k.toInt() == 1 ? v : mul(v, k); };
    putGrad(a[0], scaled(g, a[3]));
    putGrad(a[1], scaled(op("matmul", {g, op("transpose", {a[2], 0, 1})}), a[4]));
    putGrad(a[2], scaled(op("matmul", {op("transpose", {a[1], 0, 1}), g}), a[4]));
  }, [](const BoundSymbol& b, const Diff&) {
    return realTensor(b.args[0]) && realTensor(b.args[1]) && realTensor(b.args[2]) &&
           b.args[0].tensor().dtype == b.args[1].tensor().dtype && b.args[1].tensor().dtype == b.args[2].tensor().dtype &&
           b.args[1].tensor().ndim() == 2 && b.args[2].tensor().ndim() == 2 && b.args[3].isNumber() &&
           !b.args[3].isComplex() && b.args[4].isNumber() && !b.args[4].isComplex();
  });
  symRule("linear", [](const Args& a, X, X g) {
    const TensorProxy& w = a[1].tensor();
    int64_t in = w.shape[1], out = w.shape[0];
    putGrad(a[0], op("matmul", {g, a[1]}));
    Value g2 = op("reshape", {g, Value::ints({-1, out})});
    Value x2 = op("reshape", {a[0], Value::ints({-1, in})});
    putGrad(a[1], op("matmul", {op("transpose", {g2, 0, 1}), x2}));
    if (a[2].isTensor()) putGrad(a[2], op("sum", {g2, Value::ints({0})}));
  }, [](const BoundSymbol& b, const Diff&) {
    if (!realTensor(b.args[0]) || !realTensor(b.args[1])) return false;
    const TensorProxy &x = b.args[0].tensor(), &w = b.args[1].tensor();
    return w.ndim() == 2 && x.ndim() >= 2 && w.shape[0] > 0 && w.shape[1] > 0 && !w.symbolic() &&
           x.dtype == w.dtype &&
           (b.args[2].isNone() || (realTensor(b.args[2]) && b.args[2].tensor().ndim() == 1 && b.args[2].tensor().dtype == x.dtype));
  });
  symRule("embedding", [](const Args& a, X, X g) {
    const TensorProxy& w = a[1].tensor();
    Value g2 = op("reshape", {g, Value::ints({-1, w.shape[1]})});
    Value idx = op("reshape", {a[0], Value::ints({-1})});
    putGrad(a[1], call(sym(PrimId::embedding_backward), {g2, idx, w.shape[0], a[2]}));
  }, [](const BoundSymbol& b, const Diff&) {
    return b.args[0].isTensor() && isIntegral(b.args[0].tensor().dtype) && realTensor(b.args[1]) &&
           b.args[1].tensor().ndim() == 2 && !b.args[1].tensor().symbolic() && b.args[3].isNone() &&
           !(b.args[5].isBool() && b.args[5].toBool()) && !(b.args[6].isBool() && b.args[6].toBool());
  });
}

void registerGradRules() {
  static std::once_flag once;
  std::call_once(once, [] {
    ltorch::registerLTorch();
    for (const auto& [id, f] : kUnary) unary(id, f);
    for (const auto& [id, f] : kBinary) binary(id, f);
    registerShapeRules();
    registerIndexingRules();
    registerReductionRules();
    registerMatmulRules();
    registerNNRules();
    registerTorchRules();
    registerSdpaGradRule();
    registerTensorOpRules();
    registerCrossEntropyRule();
    registerLowPrecisionUnaryRules();
    registerLowPrecisionPowRule();
    registerHypotRule();
    registerEntrRule();
    registerSymbolicRules();
    // Torch-language rules that read no sizes: they serve symbolic sizes as written.
    for (const char* n : {"clamp", "silu", "gelu", "relu", "softmax", "log_softmax", "lerp", "pass_gradient",
                          "nan_to_num", "detach"})
      markSymbolicGrad("ltorch." + std::string(n));
    // Decompositions of torch-language calls that read no size as a number.
    markSymbolicGrad("ltorch.cross_entropy_upcast");
    // Rules that hold for complex values as written (linear maps, or conjugating above).
    for (PrimId id : {PrimId::abs, PrimId::exp, PrimId::add, PrimId::sub, PrimId::neg, PrimId::mul, PrimId::div, PrimId::sum,
                      PrimId::where, PrimId::convert_element_type, PrimId::real, PrimId::imag,
                      PrimId::broadcast_in_dim, PrimId::reshape, PrimId::slice, PrimId::squeeze,
                      PrimId::transpose, PrimId::flip, PrimId::stride_order, PrimId::cat,
                      PrimId::pad})
      markComplexSafe(sym(id).id());
  });
}

}  // namespace thunder
