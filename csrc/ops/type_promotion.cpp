#include "ops/type_promotion.h"

#include <atomic>
#include <optional>

#include "ir/error.h"

namespace thunder {

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  // As PyTorch (a RuntimeError there too): FP8 values are converted explicitly.
  THUNDER_CHECK(!isFloat8(a) && !isFloat8(b), "promotion of float8 dtypes is not supported: ",
                dtypeName(a), " and ", dtypeName(b), " (convert one explicitly)");
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  DTypeKind ka = dtypeKind(a), kb = dtypeKind(b);
  if (ka == DTypeKind::Integer && kb == DTypeKind::Integer) {
    // uint8 and int8 meet at int16; otherwise the wider type (uint8 is the narrowest).
    if ((a == DType::UInt8 && b == DType::Int8) || (a == DType::Int8 && b == DType::UInt8))
      return DType::Int16;
    if (a == DType::UInt8) return b;
    if (b == DType::UInt8) return a;
    return dtypeItemSize(a) >= dtypeItemSize(b) ? a : b;
  }
  if (ka != kb) {
    // Different categories: the higher category wins; a float meeting a complex widens it.
    DType hi = ka > kb ? a : b, lo = ka > kb ? b : a;
    if (dtypeKind(hi) == DTypeKind::Complex && dtypeKind(lo) == DTypeKind::Float) {
      return (lo == DType::Float64 || hi == DType::Complex128) ? DType::Complex128
                                                                : DType::Complex64;
    }
    return hi;
  }
  if (ka == DTypeKind::Float) {
    if (isLowPrecision(a) && isLowPrecision(b)) return DType::Float32;
    return dtypeItemSize(a) >= dtypeItemSize(b) ? a : b;
  }
  return dtypeItemSize(a) >= dtypeItemSize(b) ? a : b;  // complex
}

namespace {

using Slot = std::optional<DType>;

Slot promoteSlot(Slot s, DType d) { return s ? promoteTypes(*s, d) : d; }

// PyTorch's combine_categories(higher, lower).
Slot combine(Slot higher, Slot lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (isComplex(*higher)) return higher;
  // A complex value of lower priority keeps the float's width: float32 -> complex64.
  if (isComplex(*lower)) return isFloating(*higher) ? realToComplex(*higher) : *lower;
  if (isFloating(*higher)) return higher;
  if (*higher == DType::Bool || isFloating(*lower)) return promoteTypes(*higher, *lower);
  return higher;
}

}  // namespace

namespace {
std::atomic<DType> gDefaultFloat{DType::Float32};
}  // namespace

DType defaultFloat() { return gDefaultFloat.load(std::memory_order_relaxed); }

void setDefaultFloat(DType d) {
  THUNDER_CHECK_KIND(isFloating(d), ErrorKind::Type, "the default dtype must be a floating-point dtype, but got ",
                     dtypeName(d));
  gDefaultFloat.store(d, std::memory_order_relaxed);
}

DType resultType(const std::vector<Value>& args) {
  Slot dim, zero, wrapped;
  for (const Value& v : args) {
    if (v.isTensor()) {
      const TensorProxy& t = v.tensor();
      if (t.ndim() > 0) dim = promoteSlot(dim, t.dtype);
      else zero = promoteSlot(zero, t.dtype);
    } else if (v.isNumber()) {
      // Python numbers take the default dtype of their category.
      DType d = v.numberDType();
      if (d == DType::Float64) d = defaultFloat();
      if (d == DType::Complex128) d = realToComplex(defaultFloat());
      wrapped = promoteSlot(wrapped, d);
    }
  }
  Slot r = combine(dim, combine(zero, wrapped));
  THUNDER_CHECK_KIND(r.has_value(), ErrorKind::Type,
                     "type promotion needs at least one tensor or number argument");
  return *r;
}

std::pair<DType, DType> elementwiseTypePromotion(const std::vector<Value>& args,
                                                 PromotionKind kind) {
  DType promoted = resultType(args);
  DType result = promoted;
  switch (kind) {
    case PromotionKind::Default: break;
    case PromotionKind::IntToFloat:
      if (!isFloating(promoted) && !isComplex(promoted)) result = defaultFloat();
      break;
    case PromotionKind::AlwaysBool: result = DType::Bool; break;
    case PromotionKind::ComplexToFloat: result = complexToReal(promoted); break;
    case PromotionKind::BoolToLong:
      if (promoted == DType::Bool) result = DType::Int64;
      break;
  }
  DType computation = kind == PromotionKind::AlwaysBool ? promoted : result;
  if (kind == PromotionKind::ComplexToFloat) computation = promoted;
  if (isLowPrecision(computation)) computation = DType::Float32;
  if (kind == PromotionKind::AlwaysBool && isLowPrecision(promoted)) computation = DType::Float32;
  return {computation, result};
}

}  // namespace thunder
