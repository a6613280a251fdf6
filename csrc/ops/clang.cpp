#include "ops/clang.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/utils.h"

namespace thunder::clang {

Value maybeConvert(const Value& a, DType dtype) {
  if (a.isTensor()) {
    if (a.tensor().dtype == dtype) return a;
    return prims::convert_element_type(a, dtype);
  }
  if (!a.isNumber()) return a;
  switch (dtypeKind(dtype)) {
    case DTypeKind::Bool:
      return a.isComplex() ? Value(a.toComplex() != std::complex<double>(0, 0))
                           : Value(a.toDouble() != 0);
    case DTypeKind::Integer: return a.isFloat() || a.isComplex() ? a : Value(a.toInt());
    case DTypeKind::Float: return a.isComplex() ? a : Value(a.toDouble());
    case DTypeKind::Complex: return Value(a.toComplex());
  }
  return a;
}

double roundToLowPrecision(double v, DType d) {
  float f = static_cast<float>(v);  // as c10's BFloat16 and Half from a double: through float
  if (!std::isfinite(f) || f == 0.0f) return f;
  bool bf16 = d == DType::BFloat16;
  int digits = bf16 ? 8 : 11, minExp = bf16 ? -126 : -14;
  double maxFinite = bf16 ? 3.3895313892515355e38 : 65504.0;
  int e = 0;
  std::frexp(f, &e);  // |f| in [2^(e-1), 2^e)
  double ulp = std::ldexp(1.0, std::max(e - 1, minExp) - (digits - 1));
  double r = std::nearbyint(static_cast<double>(f) / ulp) * ulp;  // to nearest, ties to even
  return std::fabs(r) > maxFinite ? std::copysign(std::numeric_limits<double>::infinity(), r) : r;
}

Shape broadcastShapes(const std::vector<Shape>& shapes, const std::string& op) {
  size_t n = 0;
  for (const Shape& s : shapes) n = std::max(n, s.size());
  Shape out(n, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      size_t j = n - s.size() + i;
      int64_t x = s[i];
      if (x == out[j] || x == 1) continue;
      if (out[j] == 1) {
        out[j] = x;
        continue;
      }
      std::string all;
      for (size_t k = 0; k < shapes.size(); ++k) all += (k ? " and " : "") + shapeStr(shapes[k]);
      throw Error(ErrorKind::Runtime, str(op, ": shapes ", all, " cannot be broadcast together (",
                                          out[j], " != ", x, " at dimension ", j, ")"));
    }
  }
  return out;
}

Value expandTo(const Value& a, const Shape& shape, const std::string& op) {
  const TensorProxy& t = a.tensor();
  if (t.shape == shape) return a;
  THUNDER_CHECK(t.ndim() <= static_cast<int64_t>(shape.size()), op, ": cannot expand shape ",
                shapeStr(t.shape), " to ", shapeStr(shape));
  size_t offset = shape.size() - t.shape.size();
  std::vector<int64_t> bdims;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    THUNDER_CHECK(t.shape[i] == 1 || t.shape[i] == shape[offset + i], op, ": cannot expand shape ",
                  shapeStr(t.shape), " to ", shapeStr(shape));
    bdims.push_back(static_cast<int64_t>(offset + i));
  }
  return prims::broadcast_in_dim(a, shape, bdims);
}

Value indexOnDeviceOf(const Value& index, const TensorProxy& indexed) {
  if (!index.isTensor() || index.tensor().device.type != DeviceType::CPU ||
      indexed.device.type == DeviceType::CPU)
    return index;
  return prims::device_put(index, indexed.device);
}

std::vector<Value> maybeBroadcast(const std::vector<Value>& args, const std::string& op) {
  std::vector<Shape> shapes;
  for (const Value& v : args)
    if (v.isTensor()) shapes.push_back(v.tensor().shape);
  if (shapes.size() < 2) return args;
  Shape common = broadcastShapes(shapes, op);
  // A 0-dim CPU tensor beside tensors on another device (`torch.where(m, torch.tensor(3), x)` on
  // CUDA, as DeBERTa's relative positions write it) is read there, as PyTorch reads it: moved
  // before it is expanded, since an expanded CPU tensor may not meet a CUDA one.
  const TensorProxy* elsewhere = nullptr;
  for (const Value& v : args)
    if (v.isTensor() && v.tensor().device.type != DeviceType::CPU) elsewhere = &v.tensor();
  std::vector<Value> out;
  for (const Value& v : args) {
    if (!v.isTensor()) {
      out.push_back(v);
      continue;
    }
    const TensorProxy& t = v.tensor();
    bool move = elsewhere && t.ndim() == 0 && !common.empty() && t.device.type == DeviceType::CPU;
    out.push_back(expandTo(move ? prims::device_put(v, elsewhere->device) : v, common, op));
  }
  return out;
}

Value unary(PrimUnary prim, const Value& a, PromotionKind kind, const std::string& op) {
  expectTensor(a, op, "a");
  auto [computation, result] = elementwiseTypePromotion({a}, kind);
  Value x = maybeConvert(a, computation);
  return maybeConvert(prim(x), result);
}

Value binary(PrimBinary prim, const Value& a, const Value& b, PromotionKind kind,
             const std::string& op, bool exactNumbers) {
  THUNDER_CHECK_KIND(a.isTensor() || a.isNumber(), ErrorKind::Type, op,
                     ": expected argument 'a' to be a tensor or a number, but got ", describe(a));
  THUNDER_CHECK_KIND(b.isTensor() || b.isNumber(), ErrorKind::Type, op,
                     ": expected argument 'b' to be a tensor or a number, but got ", describe(b));
  THUNDER_CHECK_KIND(a.isTensor() || b.isTensor(), ErrorKind::Type, op,
                     ": expected at least one tensor argument, but got ", describe(a), " and ",
                     describe(b));
  auto [computation, result] = elementwiseTypePromotion({a, b}, kind);
  // As PyTorch's kernels: a tensor of another dtype (a 0-dim f32 with an f16) is first rounded to
  // a low precision common dtype, then computed in float32 (comparisons too).
  DType common = elementwiseTypePromotion({a, b}, PromotionKind::Default).second;
  std::vector<Value> ab = {a, b};
  // A Python number too (TensorIterator casts it to the common dtype: 1e4 is 9984 in bfloat16,
  // so (b % 1e4) - 1e4 is 0 where b % 1e4 rounds to 9984; fuzzer seed 38326), except by mul and
  // div, whose kernels read the number exactly.
  bool roundNumbers = !exactNumbers && prim != prims::mul && prim != prims::div;
  if (isLowPrecision(common))
    for (Value& v : ab) {
      if (v.isTensor()) v = maybeConvert(v, common);
      else if (roundNumbers && (v.isFloat() || v.isInt())) v = Value(roundToLowPrecision(v.toDouble(), common));
    }
  // Converted before broadcast, as eager's autograd sums a broadcast operand's gradient in the
  // computation dtype and then rounds it to the operand's: the other order rounded each term to
  // bfloat16 before the sum (fuzzer seed 21113).
  ab = {maybeConvert(ab[0], computation), maybeConvert(ab[1], computation)};
  ab = maybeBroadcast(ab, op);
  commonDevice(ab, op);
  return maybeConvert(prim(ab[0], ab[1]), result);
}

Value where(const Value& pred, const Value& a, const Value& b, const std::string& op) {
  THUNDER_CHECK_KIND(pred.isTensor() || pred.isBool(), ErrorKind::Type, op,
                     ": expected 'condition' to be a bool tensor, but got ", describe(pred));
  DType dt = elementwiseTypePromotion({a, b}, PromotionKind::Default).second;
  // Converted before broadcast (see binary).
  std::vector<Value> args = maybeBroadcast({pred, maybeConvert(a, dt), maybeConvert(b, dt)}, op);
  return prims::where(args[0], args[1], args[2]);
}

std::vector<int64_t> reductionDims(const TensorProxy& a, const Value& dim, const std::string& op) {
  if (dim.isNone() || (dim.isSequence() && dim.items().empty())) {
    std::vector<int64_t> all;
    for (int64_t i = 0; i < a.ndim(); ++i) all.push_back(i);
    return all;
  }
  std::vector<int64_t> dims = canonicalizeDims(a.ndim(), dim.toInts(), op);
  if (a.ndim() == 0) dims.clear();
  std::sort(dims.begin(), dims.end());
  return dims;
}

Value keepDims(const Value& reduced, const Shape& original, const std::vector<int64_t>& dims) {
  if (dims.empty()) return reduced;
  Shape shape = original;
  std::vector<int64_t> bdims;
  for (int64_t i = 0; i < static_cast<int64_t>(original.size()); ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) shape[i] = 1;
    else bdims.push_back(i);
  }
  return prims::broadcast_in_dim(reduced, shape, bdims);
}

Value reshape(const Value& a, const Shape& shapeIn, const std::string& op) {
  const TensorProxy& t = expectTensor(a, op, "a");
  Shape shape = shapeIn;
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      THUNDER_CHECK(inferred < 0, op, ": only one dimension can be inferred in shape ",
                    shapeStr(shapeIn));
      inferred = static_cast<int64_t>(i);
    } else {
      THUNDER_CHECK(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " in ",
                    shapeStr(shapeIn));
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    THUNDER_CHECK(known != 0 && t.numel() % known == 0, op, ": shape ", shapeStr(shapeIn),
                  " is invalid for input of size ", t.numel());
    shape[inferred] = t.numel() / known;
  }
  THUNDER_CHECK(numelOf(shape) == t.numel(), op, ": shape ", shapeStr(shapeIn),
                " is invalid for input of shape ", shapeStr(t.shape), " (", t.numel(),
                " elements)");
  if (shape == t.shape) return a;
  return prims::reshape(a, shape);
}

Value unsqueeze(const Value& a, int64_t dim, const std::string& op) {
  const TensorProxy& t = expectTensor(a, op, "a");
  int64_t d = canonicalizeDim(t.ndim() + 1, dim, op);
  Shape shape = t.shape;
  shape.insert(shape.begin() + d, 1);
  std::vector<int64_t> bdims;
  for (int64_t i = 0; i < t.ndim() + 1; ++i)
    if (i != d) bdims.push_back(i);
  return prims::broadcast_in_dim(a, shape, bdims);
}

Value permute(const Value& a, const std::vector<int64_t>& dims, const std::string& op) {
  const TensorProxy& t = expectTensor(a, op, "a");
  THUNDER_CHECK(static_cast<int64_t>(dims.size()) == t.ndim(), op, ": expected ", t.ndim(),
                " dims for a tensor of shape ", shapeStr(t.shape), ", but got ", dims.size());
  std::vector<int64_t> perm = canonicalizeDims(t.ndim(), dims, op);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return a;
  return prims::transpose(a, perm);
}

Value transpose(const Value& a, int64_t d0, int64_t d1, const std::string& op) {
  const TensorProxy& t = expectTensor(a, op, "a");
  if (t.ndim() == 0) {
    canonicalizeDim(0, d0, op);
    canonicalizeDim(0, d1, op);
    return a;
  }
  int64_t x = canonicalizeDim(t.ndim(), d0, op), y = canonicalizeDim(t.ndim(), d1, op);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < t.ndim(); ++i) perm.push_back(i);
  std::swap(perm[x], perm[y]);
  return permute(a, perm, op);
}

Value sliceInDim(const Value& a, int64_t dim, std::optional<int64_t> start,
                 std::optional<int64_t> stop, int64_t step, const std::string& op) {
  const TensorProxy& t = expectTensor(a, op, "a");
  THUNDER_CHECK(step > 0, op, ": slice step must be positive, but got ", step);
  int64_t d = canonicalizeDim(t.ndim(), dim, op);
  int64_t n = t.shape[d];
  auto clampIdx = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  int64_t s = start ? clampIdx(*start) : 0;
  int64_t e = stop ? clampIdx(*stop) : n;
  if (e < s) e = s;
  if (s == 0 && e == n && step == 1) return a;
  std::vector<int64_t> starts(t.ndim(), 0), ends = t.shape, steps(t.ndim(), 1);
  starts[d] = s;
  ends[d] = e;
  steps[d] = step;
  return prims::slice(a, starts, ends, steps);
}

Value fullLike(const Value& a, const Value& fill, std::optional<DType> dtype) {
  const TensorProxy& t = a.tensor();
  return prims::full(t.shape, fill, t.device, dtype.value_or(t.dtype));
}

}  // namespace thunder::clang
