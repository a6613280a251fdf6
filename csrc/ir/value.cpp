#include "ir/value.h"

#include <charconv>

#include "ir/error.h"

namespace thunder {

int64_t TensorProxy::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string TensorProxy::typeString() const {
  std::string s = device.str() + " " + std::string(dtypeShortName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
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
    default: return i_ == o.i_;
  }
}

}  // namespace thunder
