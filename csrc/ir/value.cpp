#include "ir/value.h"

#include <algorithm>
#include <charconv>

#include "ir/error.h"

namespace thunder {

int64_t TensorProxy::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int64_t> contiguousStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

bool isContiguousLayout(const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::vector<int64_t> TensorProxy::stridesOrContiguous() const {
  return strides.size() == shape.size() ? strides : contiguousStrides(shape);
}

void TensorProxy::setStrides(std::vector<int64_t> s) {
  if (s.size() != shape.size() || isContiguousLayout(shape, s)) s.clear();
  strides = std::move(s);
}

bool viewStrides(const Shape& shape, const std::vector<int64_t>& strides, const Shape& to,
                 std::vector<int64_t>& out) {
  out.assign(to.size(), 0);
  if (shape.empty()) {
    out.assign(to.size(), 1);
    return true;
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel == 0) {
    out = shape == to ? strides : contiguousStrides(to);
    return true;
  }
  // Walk the input from its last dim, in chunks of dims that are contiguous with each other;
  // the dims of `to` must each fall inside one chunk.
  int64_t v = static_cast<int64_t>(to.size()) - 1;
  int64_t base = strides.back(), chunkNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    chunkNumel *= shape[d];
    bool chunkEnds = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != chunkNumel * base);
    if (!chunkEnds) continue;
    while (v >= 0 && (viewNumel < chunkNumel || to[v] == 1)) {
      out[v] = viewNumel * base;
      viewNumel *= to[v];
      --v;
    }
    if (viewNumel != chunkNumel) return false;
    if (d > 0) {
      base = strides[d - 1];
      chunkNumel = 1;
      viewNumel = 1;
    }
  }
  return v == -1;
}

std::vector<int64_t> iteratorStrides(const Shape& shape, const std::vector<std::vector<int64_t>>& operands) {
  int64_t n = static_cast<int64_t>(shape.size());
  // 1: dim0 goes inside dim1 (swap), -1: keep, 0: undecided.
  auto order = [&](int64_t d0, int64_t d1) {
    for (const std::vector<int64_t>& s : operands) {
      if (s.size() != shape.size() || s[d0] == 0 || s[d1] == 0) continue;
      if (s[d0] < s[d1]) return -1;
      if (s[d0] > s[d1]) return 1;
      if (shape[d0] > shape[d1]) return 1;
    }
    return 0;
  };
  // perm[0] is the innermost dim; an insertion sort from the reversed order, as TensorIterator's
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  for (int64_t i = 1; i < n; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      int c = order(perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::vector<int64_t> out(n);
  int64_t acc = 1;
  for (int64_t i = 0; i < n; ++i) {
    out[perm[i]] = acc;
    acc *= std::max<int64_t>(shape[perm[i]], 1);
  }
  return out;
}

std::string TensorProxy::typeString() const {
  std::string s = device.str() + " " + std::string(dtypeShortName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += i < sym.size() && sym[i] ? sym[i]->str() : std::to_string(shape[i]);
  }
  return s + "]";
}

Value Value::tuple(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Tuple;
  v.items_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v = tuple(std::move(items));
  v.kind_ = Kind::List;
  return v;
}

Value Value::dict(std::vector<std::string> keys, std::vector<Value> items) {
  THUNDER_INTERNAL(keys.size() == items.size(), "dict keys and values differ in length");
  Value v = tuple(std::move(items));
  v.kind_ = Kind::Dict;
  v.keys_ = std::make_shared<std::vector<std::string>>(std::move(keys));
  return v;
}

Value Value::slice(Value start, Value stop, Value step) {
  Value v = tuple({std::move(start), std::move(stop), std::move(step)});
  v.kind_ = Kind::Slice;
  return v;
}

Value Value::ellipsis() {
  Value v;
  v.kind_ = Kind::Ellipsis;
  return v;
}

Value Value::ints(const std::vector<int64_t>& xs) {
  std::vector<Value> items(xs.begin(), xs.end());
  return tuple(std::move(items));
}

Value Value::sizes(const std::vector<SymInt>& xs) {
  std::vector<Value> items(xs.begin(), xs.end());
  return tuple(std::move(items));
}

std::string kindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::Complex: return "complex";
    case Value::Kind::String: return "str";
    case Value::Kind::DType: return "dtype";
    case Value::Kind::Device: return "device";
    case Value::Kind::Tensor: return "tensor";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Slice: return "slice";
    case Value::Kind::Ellipsis: return "ellipsis";
  }
  return "?";
}

std::string describe(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Tensor: return "tensor " + v.tensor().name + ": " + v.tensor().typeString();
    case Value::Kind::Int: return "int " + std::to_string(v.toInt());
    case Value::Kind::Float: {
      // The shortest text that reads back as the same double ("1.5", not "1.500000").
      char buf[32];
      auto res = std::to_chars(buf, buf + sizeof(buf), v.toDouble());
      return "float " + std::string(buf, res.ptr);
    }
    case Value::Kind::Bool: return v.toBool() ? "True" : "False";
    case Value::Kind::String: return "'" + v.toString() + "'";
    default: return kindName(v.kind());
  }
}

static Error typeError(const char* want, const Value& v) {
  return Error(ErrorKind::Type, str("expected ", want, " but got ", describe(v)));
}

bool Value::toBool() const {
  if (kind_ == Kind::Bool) return i_ != 0;
  throw typeError("a bool", *this);
}

int64_t Value::toInt() const {
  if (kind_ == Kind::Int || kind_ == Kind::Bool) return i_;
  throw typeError("an int", *this);
}

double Value::toDouble() const {
  if (kind_ == Kind::Float) return f_;
  if (kind_ == Kind::Int || kind_ == Kind::Bool) return static_cast<double>(i_);
  throw typeError("a real number", *this);
}

std::complex<double> Value::toComplex() const {
  if (kind_ == Kind::Complex) return {f_, im_};
  return {toDouble(), 0.0};
}

const std::string& Value::toString() const {
  if (kind_ == Kind::String) return *s_;
  throw typeError("a string", *this);
}

DType Value::toDType() const {
  if (kind_ == Kind::DType) return static_cast<DType>(i_);
  throw typeError("a dtype", *this);
}

Device Value::toDevice() const {
  if (kind_ == Kind::Device) return {static_cast<DeviceType>(i_), static_cast<int>(im_)};
  if (kind_ == Kind::String) return Device::parse(*s_);
  throw typeError("a device", *this);
}

const TensorPtr& Value::toTensor() const {
  if (kind_ == Kind::Tensor) return t_;
  throw typeError("a tensor", *this);
}

const std::vector<Value>& Value::items() const {
  if (items_) return *items_;
  throw typeError("a sequence", *this);
}

const std::vector<std::string>& Value::keys() const {
  if (keys_) return *keys_;
  throw typeError("a dict", *this);
}

std::vector<int64_t> Value::toInts() const {
  if (kind_ == Kind::Int) return {i_};
  std::vector<int64_t> out;
  for (const Value& v : items()) out.push_back(v.toInt());
  return out;
}

DType Value::numberDType() const {
  switch (kind_) {
    case Kind::Bool: return DType::Bool;
    case Kind::Int: return DType::Int64;
    case Kind::Float: return DType::Float64;
    case Kind::Complex: return DType::Complex128;
    default: throw typeError("a number", *this);
  }
}

void Value::collectTensors(std::vector<TensorPtr>& out) const {
  if (kind_ == Kind::Tensor) {
    out.push_back(t_);
  } else if (items_) {
    for (const Value& v : *items_) v.collectTensors(out);
  }
}

bool Value::operator==(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::None: return true;
    case Kind::Tensor: return t_ == o.t_;
    case Kind::String: return *s_ == *o.s_;
    case Kind::Float: case Kind::Complex: return f_ == o.f_ && im_ == o.im_;
    case Kind::Device: return i_ == o.i_ && im_ == o.im_;
    case Kind::Ellipsis: return true;
    case Kind::Tuple: case Kind::List: case Kind::Dict: case Kind::Slice:
      return *items_ == *o.items_ && (!keys_ || *keys_ == *o.keys_);
    case Kind::Int:
      // A symbolic int equals only the same expression: `arange(s0)` is not `arange(7)` where the
      // hint of s0 is 7.
      if (sym_ || o.sym_) return i_ == o.i_ && sym_ && o.sym_ && *sym_ == *o.sym_;
      return i_ == o.i_;
    default: return i_ == o.i_;
  }
}

SymInt Value::toSymInt() const { return {toInt(), kind_ == Kind::Int ? sym_ : nullptr}; }

bool Value::hasSymbolic() const {
  if (sym_) return true;
  if (items_)
    for (const Value& x : *items_)
      if (x.hasSymbolic()) return true;
  return false;
}

std::vector<SymInt> TensorProxy::symShape() const {
  std::vector<SymInt> out;
  out.reserve(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) out.push_back(dim(d));
  return out;
}

void TensorProxy::setSymShape(const std::vector<SymInt>& dims) {
  sym.clear();
  bool any = false;
  for (const SymInt& d : dims) any |= d.symbolic();
  if (!any) return;
  for (const SymInt& d : dims) sym.push_back(d.e);
}

}  // namespace thunder
