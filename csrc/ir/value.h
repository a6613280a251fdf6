// Values that appear in a trace: tensor proxies, Python-like constants and containers of them.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/device.h"
#include "ir/dtype.h"
#include "ir/symbolic.h"

namespace thunder {

using Shape = std::vector<int64_t>;

/// A named stand-in for a tensor during tracing: everything known about it except its data.
struct TensorProxy {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
  bool requiresGrad = false;
  /// The strides (in elements) eager PyTorch gives this value, where they are not the contiguous
  /// strides of `shape`; empty: contiguous. Known for trace inputs and followed through views and
  /// elementwise ops (TensorIterator's layout); other results are contiguous, as eager's
  /// reductions are. Only
  /// the legality of `view` reads them (as eager's, a view of a non-viewable layout raises).
  std::vector<int64_t> strides;
  /// Per dimension, its expression over the trace's size symbols (ir/symbolic.h), nullptr for a
  /// static one; empty: every dimension static.
  std::vector<SymPtr> sym;

  /// Whether any dimension has an expression.
  bool symbolic() const {
    for (const SymPtr& e : sym)
      if (e) return true;
    return false;
  }
  /// Dimension d as a SymInt (d in [0, ndim)).
  SymInt dim(size_t d) const { return {shape[d], d < sym.size() ? sym[d] : nullptr}; }
  /// Every dimension as a SymInt.
  std::vector<SymInt> symShape() const;
  /// Sets the expressions of the dimensions (`dims` must hold the shape's hints).
  void setSymShape(const std::vector<SymInt>& dims);

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  /// `strides`, or the contiguous strides of `shape` where it is empty.
  std::vector<int64_t> stridesOrContiguous() const;
  /// Sets `strides` (empty where `s` is the contiguous layout of `shape`).
  void setStrides(std::vector<int64_t> s);
  int64_t numel() const;
  /// Type string used in comments: "cpu f32[2, 2]".
  std::string typeString() const;
};

using TensorPtr = std::shared_ptr<TensorProxy>;

/// The strides of a contiguous tensor of `shape`.
std::vector<int64_t> contiguousStrides(const Shape& shape);
/// Whether (shape, strides) is contiguous, as torch's is_contiguous (dims of length 1 ignored).
bool isContiguousLayout(const Shape& shape, const std::vector<int64_t>& strides);
/// torch's computeStride: the strides of a view of (shape, strides) with shape `to`, or false
/// where no view exists (a dimension of `to` spans two non-contiguous subspaces).
bool viewStrides(const Shape& shape, const std::vector<int64_t>& strides, const Shape& to,
                 std::vector<int64_t>& out);
/// The strides TensorIterator gives a new output of `shape` computed from operands of that shape
/// with `operands` strides (0 for broadcast dims): contiguous in the operands' dimension order
/// (the first operand decides, later ones break ties; length breaks equal strides).
std::vector<int64_t> iteratorStrides(const Shape& shape, const std::vector<std::vector<int64_t>>& operands);

/// One value of a trace: None, a Python scalar, a string, a dtype, a device, a tensor proxy, or a
/// tuple / list / dict (string keys) of values. Cheap to copy: containers share their items.
class Value {
 public:
  enum class Kind : uint8_t {
    None, Bool, Int, Float, Complex, String, DType, Device, Tensor, Tuple, List, Dict,
    Slice,     // Python's slice(start, stop, step); items are the three parts
    Ellipsis,  // Python's ...
  };

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  /// Assignments are safe where `o` lives inside this value (v = v.items()[0]): o is taken into
  /// a temporary before this value's containers are released (member-wise, the release freed
  /// o in the middle of the copy: ASan, heap-use-after-free).
  Value& operator=(const Value& o) {
    Value copy(o);
    return *this = std::move(copy);
  }
  Value& operator=(Value&& o) noexcept {
    Value tmp(std::move(o));
    kind_ = tmp.kind_;
    i_ = tmp.i_;
    sym_ = std::move(tmp.sym_);
    f_ = tmp.f_;
    im_ = tmp.im_;
    s_ = std::move(tmp.s_);
    t_ = std::move(tmp.t_);
    items_ = std::move(tmp.items_);
    keys_ = std::move(tmp.keys_);
    return *this;
  }
  Value(std::nullptr_t) {}
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  /// An int with its expression over the trace's size symbols (a plain int where e is null).
  Value(const SymInt& v) : kind_(Kind::Int), i_(v.hint), sym_(v.e) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::complex<double> v) : kind_(Kind::Complex), f_(v.real()), im_(v.imag()) {}
  Value(std::string s) : kind_(Kind::String), s_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(DType d) : kind_(Kind::DType), i_(static_cast<int64_t>(d)) {}
  Value(Device d) : kind_(Kind::Device), i_(static_cast<int64_t>(d.type)), im_(d.index) {}
  Value(TensorPtr t) : kind_(Kind::Tensor), t_(std::move(t)) {}

  static Value tuple(std::vector<Value> items);
  static Value list(std::vector<Value> items);
  static Value dict(std::vector<std::string> keys, std::vector<Value> items);
  /// slice(start, stop, step): each None or an int.
  static Value slice(Value start, Value stop, Value step);
  static Value ellipsis();
  /// A tuple of ints, the usual form of shapes and dims.
  static Value ints(const std::vector<int64_t>& xs);
  /// A tuple of sizes with their expressions over the size symbols (a proxy's symShape()).
  static Value sizes(const std::vector<SymInt>& xs);

  Kind kind() const { return kind_; }
  bool isNone() const { return kind_ == Kind::None; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isInt() const { return kind_ == Kind::Int; }
  bool isFloat() const { return kind_ == Kind::Float; }
  bool isComplex() const { return kind_ == Kind::Complex; }
  /// bool, int, float or complex.
  bool isNumber() const { return kind_ >= Kind::Bool && kind_ <= Kind::Complex; }
  bool isString() const { return kind_ == Kind::String; }
  bool isDType() const { return kind_ == Kind::DType; }
  bool isDevice() const { return kind_ == Kind::Device; }
  bool isTensor() const { return kind_ == Kind::Tensor; }
  bool isTuple() const { return kind_ == Kind::Tuple; }
  bool isList() const { return kind_ == Kind::List; }
  bool isSequence() const { return kind_ == Kind::Tuple || kind_ == Kind::List; }
  bool isDict() const { return kind_ == Kind::Dict; }
  bool isSlice() const { return kind_ == Kind::Slice; }
  bool isEllipsis() const { return kind_ == Kind::Ellipsis; }

  bool toBool() const;
  int64_t toInt() const;
  /// An int (or bool) with its expression; a plain int's is null.
  SymInt toSymInt() const;
  /// The expression of an int, null for any other value.
  const SymPtr& symExpr() const { return sym_; }
  /// Whether this value or an item of it (recursively) is an int with an expression.
  bool hasSymbolic() const;
  /// Any real number as a double.
  double toDouble() const;
  std::complex<double> toComplex() const;
  const std::string& toString() const;
  DType toDType() const;
  Device toDevice() const;
  const TensorPtr& toTensor() const;
  const TensorProxy& tensor() const { return *toTensor(); }
  const std::vector<Value>& items() const;
  const std::vector<std::string>& keys() const;
  /// A sequence of ints (or a single int) as a vector.
  std::vector<int64_t> toInts() const;

  /// Dtype of a number: bool8, int64, float32-category (float64 here) or complex128.
  DType numberDType() const;

  /// Appends every tensor proxy in this value (recursively) to out.
  void collectTensors(std::vector<TensorPtr>& out) const;
  /// Identity for tensors, structural equality otherwise.
  bool operator==(const Value& o) const;

 private:
  Kind kind_ = Kind::None;
  int64_t i_ = 0;
  SymPtr sym_;
  double f_ = 0, im_ = 0;
  std::shared_ptr<std::string> s_;
  TensorPtr t_;
  std::shared_ptr<std::vector<Value>> items_;
  std::shared_ptr<std::vector<std::string>> keys_;
};

/// The name of a value's kind, for error messages ("tensor", "int", ...).
std::string kindName(Value::Kind k);
/// Short description of a value for error messages: a tensor's name and type, or its repr.
std::string describe(const Value& v);

}  // namespace thunder
