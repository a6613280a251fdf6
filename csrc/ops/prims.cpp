#include "ops/prims.h"

#include <algorithm>
#include <array>
#include <mutex>

#include "ops/utils.h"

namespace thunder::prims {
namespace {

std::array<const Symbol*, static_cast<size_t>(PrimId::NumPrims)> gPrims{};
const Symbol* gDel = nullptr;

TensorPtr newTensor(const Shape& shape, DType dtype, Device device) {
  return requireContext("prims").newTensor(shape, dtype, device);
}

std::string opName(const char* n) { return std::string("prims.") + n; }

/// r laid out as TensorIterator lays out an elementwise result of the tensor operands (eager's
/// strides; see TensorProxy::strides). Reductions are contiguous in eager (their outputs are
/// allocated without strides), as every other new proxy here.
TensorPtr laidOut(TensorPtr r, std::initializer_list<const Value*> operands) {
  std::vector<std::vector<int64_t>> strides;
  bool any = false;
  for (const Value* v : operands) {
    if (!v->isTensor() || v->tensor().shape != r->shape) continue;
    any = any || !v->tensor().strides.empty();
    strides.push_back(v->tensor().stridesOrContiguous());
  }
  if (any) r->setStrides(iteratorStrides(r->shape, strides));
  return r;
}


/// Accepted dtype kinds of an elementwise prim, from a string such as "BIFC".
bool kindAccepted(const char* kinds, DType d) {
  char k = "BIFC"[static_cast<int>(dtypeKind(d))];
  for (const char* p = kinds; *p; ++p)
    if (*p == k) return true;
  return false;
}

enum class OutRule { Same, Bool, Real };

DType outDType(OutRule r, DType in) {
  switch (r) {
    case OutRule::Same: return in;
    case OutRule::Bool: return DType::Bool;
    case OutRule::Real: return complexToReal(in);
  }
  return in;
}

void checkKind(const std::string& op, const char* kinds, const Value& v, const char* arg) {
  DType d = v.isTensor() ? v.tensor().dtype : v.numberDType();
  // NotImplementedError, as PyTorch's kernels raise for a dtype they have no implementation for
  // ("bitwise_and_cpu" not implemented for 'Float', a Python float operand included).
  THUNDER_CHECK_KIND(kindAccepted(kinds, d), ErrorKind::NotImplemented, op, ": argument '", arg,
                     "' has dtype ", dtypeName(d), ", which this prim does not support");
}

Value unaryMeta(const std::string& op, const char* kinds, OutRule rule, const Value& a) {
  THUNDER_CHECK_KIND(a.isTensor(), ErrorKind::Type, op, ": expected argument 'a' to be a tensor, but got ",
                     describe(a));
  checkKind(op, kinds, a, "a");
  const TensorProxy& t = a.tensor();
  return laidOut(newTensor(t.shape, outDType(rule, t.dtype), t.device), {&a});
}

Value binaryMeta(const std::string& op, const char* kinds, OutRule rule, const Value& a,
                 const Value& b) {
  THUNDER_CHECK_KIND(a.isTensor() || a.isNumber(), ErrorKind::Type, op,
                     ": expected argument 'a' to be a tensor or a number, but got ", describe(a));
  THUNDER_CHECK_KIND(b.isTensor() || b.isNumber(), ErrorKind::Type, op,
                     ": expected argument 'b' to be a tensor or a number, but got ", describe(b));
  THUNDER_CHECK_KIND(a.isTensor() || b.isTensor(), ErrorKind::Type, op,
                     ": expected at least one tensor argument");
  checkKind(op, kinds, a, "a");
  checkKind(op, kinds, b, "b");
  const TensorProxy* ref = a.isTensor() ? &a.tensor() : &b.tensor();
  Device device = ref->device;
  if (a.isTensor() && b.isTensor()) {
    const TensorProxy &ta = a.tensor(), &tb = b.tensor();
    THUNDER_CHECK(ta.shape == tb.shape, op, ": expected tensors of the same shape, but a is ",
                  shapeStr(ta.shape), " and b is ", shapeStr(tb.shape));
    THUNDER_CHECK_KIND(ta.dtype == tb.dtype, ErrorKind::Type, op,
                       ": expected tensors of the same dtype, but a is ", dtypeName(ta.dtype),
                       " and b is ", dtypeName(tb.dtype));
    // A 0-dim CPU tensor may meet a tensor on another device; the result lives there.
    device = commonDevice({a, b}, op);
  }
  return laidOut(newTensor(ref->shape, outDType(rule, ref->dtype), device), {&a, &b});
}

const TensorProxy& tensorArg(const Value& v, const char* op, const char* arg) {
  return expectTensor(v, opName(op), arg);
}

// ---- meta functions of the PRIM entries -------------------------------------------------------

Value meta_where(const std::vector<Value>& args) {
  const std::string op = "prims.where";
  const Value &pred = args[0], &a = args[1], &b = args[2];
  THUNDER_CHECK_KIND(pred.isTensor() || pred.isBool(), ErrorKind::Type, op,
                     ": expected 'pred' to be a bool tensor or a bool, but got ", describe(pred));
  if (pred.isTensor())
    THUNDER_CHECK(pred.tensor().dtype == DType::Bool, op,
                       ": expected 'pred' to have dtype bool8, but it has ",
                       dtypeName(pred.tensor().dtype));
  const TensorProxy* ref = nullptr;
  for (const Value* v : {&pred, &a, &b}) {
    if (!v->isTensor()) continue;
    if (ref)
      THUNDER_CHECK(ref->shape == v->tensor().shape, op, ": expected tensors of the same shape, but ",
                    ref->name, " is ", shapeStr(ref->shape), " and ", v->tensor().name, " is ",
                    shapeStr(v->tensor().shape));
    ref = &v->tensor();
  }
  THUNDER_CHECK_KIND(ref, ErrorKind::Type, op, ": expected at least one tensor argument");
  DType dt;
  if (a.isTensor() && b.isTensor()) {
    THUNDER_CHECK_KIND(a.tensor().dtype == b.tensor().dtype, ErrorKind::Type, op,
                       ": expected 'a' and 'b' of the same dtype, but got ",
                       dtypeName(a.tensor().dtype), " and ", dtypeName(b.tensor().dtype));
    dt = a.tensor().dtype;
  } else if (a.isTensor()) {
    dt = a.tensor().dtype;
  } else if (b.isTensor()) {
    dt = b.tensor().dtype;
  } else {
    THUNDER_CHECK_KIND(a.isNumber() && b.isNumber(), ErrorKind::Type, op,
                       ": expected 'a' and 'b' to be tensors or numbers");
    // No type promotion in a prim: two numbers must be of one Python type.
    THUNDER_CHECK_KIND(a.numberDType() == b.numberDType(), ErrorKind::Type, op,
                       ": expected 'a' and 'b' of the same dtype, but got ",
                       dtypeName(a.numberDType()), " and ", dtypeName(b.numberDType()));
    dt = a.numberDType();
    if (dt == DType::Float64) dt = DType::Float32;
  }
  Device dev = commonDevice({pred, a, b}, op);
  return laidOut(newTensor(ref->shape, dt, dev), {&pred, &a, &b});
}

Value meta_convert_element_type(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "convert_element_type", "a");
  return laidOut(newTensor(a.shape, args[1].toDType(), a.device), {&args[0]});
}

Value meta_convert_element_types(const std::vector<Value>& args) {
  const std::string op = "prims.convert_element_types";
  THUNDER_CHECK_KIND(args[0].isSequence(), ErrorKind::Type, op, ": expected 'tensors' to be a sequence of tensors, but got ",
                     describe(args[0]));
  DType dtype = args[1].toDType();
  std::vector<Value> outs;
  const std::vector<Value>& ts = args[0].items();
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorProxy& a = expectTensor(ts[i], op, "tensors[" + std::to_string(i) + "]");
    outs.push_back(laidOut(newTensor(a.shape, dtype, a.device), {&ts[i]}));
  }
  return Value::tuple(outs);
}

Value meta_polygamma(const std::vector<Value>& args) {
  const std::string op = "prims.polygamma";
  THUNDER_CHECK_KIND(args[0].isInt(), ErrorKind::Type, op, ": expected 'n' to be an int, but got ",
                     describe(args[0]));
  THUNDER_CHECK(args[0].toInt() >= 0, op, ": expected a non-negative n, but got ", args[0].toInt());
  const TensorProxy& a = tensorArg(args[1], "polygamma", "a");
  checkKind(op, "F", args[1], "a");
  return laidOut(newTensor(a.shape, a.dtype, a.device), {&args[1]});
}

Value meta_device_put(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "device_put", "a");
  THUNDER_CHECK_KIND(args[1].isDevice(), ErrorKind::Type, "prims.device_put: expected 'device' to be a device, but got ",
                     describe(args[1]));
  return laidOut(newTensor(a.shape, a.dtype, args[1].toDevice()), {&args[0]});
}

Value meta_full(const std::vector<Value>& args) {
  Shape shape = args[0].toInts();
  checkValidShape(shape, "prims.full");
  THUNDER_CHECK_KIND(args[1].isNumber(), ErrorKind::Type,
                     "prims.full: expected 'fill_value' to be a number, but got ", describe(args[1]));
  return newTensor(shape, args[3].toDType(), args[2].toDevice());
}

Value meta_iota(const std::vector<Value>& args) {
  int64_t length = args[0].toInt();
  THUNDER_CHECK(length >= 0, "prims.iota: expected a non-negative length, but got ", length);
  THUNDER_CHECK(args[2].toInt() != 0, "prims.iota: step must be nonzero");
  return newTensor({length}, args[4].toDType(), args[3].toDevice());
}

Value meta_uniform(const std::vector<Value>& args) {
  Shape shape = args[0].toInts();
  checkValidShape(shape, "prims.uniform");
  DType dt = args[4].toDType();
  THUNDER_CHECK_KIND(isFloating(dt), ErrorKind::Type,
                     "prims.uniform: expected a floating dtype, but got ", dtypeName(dt));
  return newTensor(shape, dt, args[3].toDevice());
}

Value meta_broadcast_in_dim(const std::vector<Value>& args) {
  const std::string op = "prims.broadcast_in_dim";
  const TensorProxy& a = tensorArg(args[0], "broadcast_in_dim", "a");
  Shape shape = args[1].toInts();
  std::vector<int64_t> bdims = args[2].toInts();
  checkValidShape(shape, op);
  THUNDER_CHECK(static_cast<int64_t>(bdims.size()) == a.ndim(), op, ": expected ", a.ndim(),
                " broadcast dimensions for a tensor of shape ", shapeStr(a.shape), ", but got ",
                bdims.size());
  int64_t prev = -1;
  for (size_t i = 0; i < bdims.size(); ++i) {
    int64_t d = bdims[i];
    THUNDER_CHECK_KIND(d >= 0 && d < static_cast<int64_t>(shape.size()), ErrorKind::Index, op,
                       ": broadcast dimension ", d, " is out of range for shape ", shapeStr(shape));
    THUNDER_CHECK(d > prev, op, ": broadcast dimensions must be strictly increasing");
    prev = d;
    THUNDER_CHECK(a.shape[i] == shape[d] || a.shape[i] == 1, op, ": dimension ", i,
                  " of the input (length ", a.shape[i], ") cannot be broadcast to length ",
                  shape[d], " in shape ", shapeStr(shape));
  }
  TensorPtr r = newTensor(shape, a.dtype, a.device);
  // As eager's expand: new and broadcast dims have stride 0.
  std::vector<int64_t> in = a.stridesOrContiguous(), out(shape.size(), 0);
  for (size_t i = 0; i < bdims.size(); ++i) out[bdims[i]] = a.shape[i] == shape[bdims[i]] ? in[i] : 0;
  r->setStrides(out);
  return r;
}

Value meta_reshape(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "reshape", "a");
  Shape shape = args[1].toInts();
  checkValidShape(shape, "prims.reshape");
  THUNDER_CHECK(numelOf(shape) == a.numel(), "prims.reshape: shape ", shapeStr(shape),
                " is invalid for a tensor of shape ", shapeStr(a.shape), " (", a.numel(),
                " elements)");
  TensorPtr r = newTensor(shape, a.dtype, a.device);
  // As eager's reshape: a view where the layout allows one (then view's strides), else a copy.
  std::vector<int64_t> out;
  if (!a.strides.empty() && viewStrides(a.shape, a.strides, shape, out)) r->setStrides(out);
  return r;
}

Value meta_slice(const std::vector<Value>& args) {
  const std::string op = "prims.slice";
  const TensorProxy& a = tensorArg(args[0], "slice", "a");
  std::vector<int64_t> start = args[1].toInts(), end = args[2].toInts();
  std::vector<int64_t> strides =
      args[3].isNone() ? std::vector<int64_t>(a.ndim(), 1) : args[3].toInts();
  THUNDER_CHECK(static_cast<int64_t>(start.size()) == a.ndim() &&
                    static_cast<int64_t>(end.size()) == a.ndim() &&
                    static_cast<int64_t>(strides.size()) == a.ndim(),
                op, ": expected start, end and strides of length ", a.ndim(), " for shape ",
                shapeStr(a.shape));
  Shape out;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    THUNDER_CHECK(start[i] >= 0 && start[i] <= end[i] && end[i] <= a.shape[i], op,
                  ": invalid slice [", start[i], ", ", end[i], ") of dimension ", i,
                  " with length ", a.shape[i]);
    THUNDER_CHECK(strides[i] > 0, op, ": stride ", strides[i], " of dimension ", i,
                  " must be positive");
    out.push_back((end[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  TensorPtr r = newTensor(out, a.dtype, a.device);
  std::vector<int64_t> in = a.stridesOrContiguous();
  for (int64_t i = 0; i < a.ndim(); ++i) in[i] *= strides[i];
  r->setStrides(in);
  return r;
}

Value meta_squeeze(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "squeeze", "a");
  std::vector<int64_t> dims = canonicalizeDims(a.ndim(), args[1].toInts(), "prims.squeeze");
  Shape out;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    bool drop = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (drop) {
      THUNDER_CHECK(a.shape[i] == 1, "prims.squeeze: cannot squeeze dimension ", i,
                    " of length ", a.shape[i]);
    } else {
      out.push_back(a.shape[i]);
    }
  }
  TensorPtr r = newTensor(out, a.dtype, a.device);
  std::vector<int64_t> in = a.stridesOrContiguous(), kept;
  for (int64_t i = 0; i < a.ndim(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(in[i]);
  r->setStrides(kept);
  return r;
}

void checkPermutation(const std::vector<int64_t>& perm, int64_t ndim, const std::string& op) {
  THUNDER_CHECK(static_cast<int64_t>(perm.size()) == ndim, op, ": expected a permutation of ",
                ndim, " dimensions, but got ", perm.size());
  std::vector<bool> seen(ndim, false);
  for (int64_t p : perm) {
    THUNDER_CHECK_KIND(p >= 0 && p < ndim, ErrorKind::Index, op, ": dimension ", p,
                       " is out of range for ", ndim, " dimensions");
    THUNDER_CHECK(!seen[p], op, ": dimension ", p, " appears twice in the permutation");
    seen[p] = true;
  }
}

Value meta_transpose(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "transpose", "a");
  std::vector<int64_t> perm = args[1].toInts();
  checkPermutation(perm, a.ndim(), "prims.transpose");
  Shape out;
  for (int64_t p : perm) out.push_back(a.shape[p]);
  TensorPtr r = newTensor(out, a.dtype, a.device);
  std::vector<int64_t> in = a.stridesOrContiguous(), st;
  for (int64_t p : perm) st.push_back(in[p]);
  r->setStrides(st);
  return r;
}

Value meta_flip(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "flip", "a");
  canonicalizeDims(a.ndim(), args[1].toInts(), "prims.flip");
  return laidOut(newTensor(a.shape, a.dtype, a.device), {&args[0]});  // empty_like's preserved layout
}

Value meta_stride_order(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "stride_order", "a");
  checkPermutation(args[1].toInts(), a.ndim(), "prims.stride_order");
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_cat(const std::vector<Value>& args) {
  const std::string op = "prims.cat";
  const std::vector<Value>& ts = args[0].items();
  THUNDER_CHECK(!ts.empty(), op, ": expected a non-empty sequence of tensors");
  const TensorProxy& first = expectTensor(ts[0], op, "tensors[0]");
  THUNDER_CHECK(first.ndim() > 0, op, ": zero-dimensional tensor ", first.name,
                " cannot be concatenated");
  int64_t dim = canonicalizeDim(first.ndim(), args[1].toInt(), op);
  Shape out = first.shape;
  out[dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorProxy& t = expectTensor(ts[i], op, "tensors[" + std::to_string(i) + "]");
    THUNDER_CHECK(t.ndim() == first.ndim(), op, ": tensors must have the same number of dimensions, but ",
                  first.name, " has shape ", shapeStr(first.shape), " and ", t.name, " has shape ",
                  shapeStr(t.shape));
    THUNDER_CHECK_KIND(t.dtype == first.dtype, ErrorKind::Type, op,
                       ": expected tensors of one dtype, but got ", dtypeName(first.dtype), " and ",
                       dtypeName(t.dtype));
    for (int64_t d = 0; d < t.ndim(); ++d)
      THUNDER_CHECK(d == dim || t.shape[d] == first.shape[d], op, ": sizes of tensors must match except in dimension ",
                    dim, ", but ", first.name, " has shape ", shapeStr(first.shape), " and ", t.name,
                    " has shape ", shapeStr(t.shape));
    out[dim] += t.shape[dim];
  }
  commonDevice(ts, op);
  return newTensor(out, first.dtype, first.device);
}

Value meta_pad(const std::vector<Value>& args) {
  const std::string op = "prims.pad";
  const TensorProxy& a = tensorArg(args[0], "pad", "a");
  THUNDER_CHECK_KIND(args[1].isNumber(), ErrorKind::Type, op,
                     ": expected 'padding_value' to be a number");
  const std::vector<Value>& cfg = args[2].items();
  THUNDER_CHECK(static_cast<int64_t>(cfg.size()) == a.ndim(), op, ": expected ", a.ndim(),
                " padding configurations for shape ", shapeStr(a.shape), ", but got ", cfg.size());
  Shape out;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    std::vector<int64_t> c = cfg[i].toInts();
    THUNDER_CHECK(c.size() == 3, op, ": each padding configuration is (low, high, interior)");
    THUNDER_CHECK(c[2] >= 0, op, ": interior padding must be non-negative, got ", c[2]);
    int64_t n = a.shape[i];
    int64_t len = n + c[0] + c[1] + (n > 0 ? (n - 1) * c[2] : 0);
    THUNDER_CHECK(len >= 0, op, ": padding ", shapeStr(c), " makes dimension ", i,
                  " of length ", n, " negative");
    out.push_back(len);
  }
  return newTensor(out, a.dtype, a.device);
}

void checkIndexDType(const TensorProxy& idx, const std::string& op) {
  // RuntimeError, as eager's index_select, gather and embedding (fuzzer seed 3307)
  THUNDER_CHECK_KIND(isIntegral(idx.dtype), ErrorKind::Runtime, op,
                     ": expected integer indices, but got dtype ", dtypeName(idx.dtype));
}

Value meta_take(const std::vector<Value>& args) {
  const std::string op = "prims.take";
  const TensorProxy& a = tensorArg(args[0], "take", "a");
  const TensorProxy& idx = tensorArg(args[1], "take", "indices");
  checkIndexDType(idx, op);
  THUNDER_CHECK(idx.ndim() <= 1, op, ": expected 0- or 1-dimensional indices, but got shape ",
                shapeStr(idx.shape));
  int64_t dim = canonicalizeDim(a.ndim(), args[2].toInt(), op);
  Shape out = a.shape;
  if (a.ndim() > 0) out[dim] = idx.numel();
  commonDevice({args[0], args[1]}, op);
  return newTensor(out, a.dtype, a.device);
}

Value meta_gather(const std::vector<Value>& args) {
  const std::string op = "prims.gather";
  const TensorProxy& a = tensorArg(args[0], "gather", "a");
  const TensorProxy& idx = tensorArg(args[1], "gather", "indices");
  checkIndexDType(idx, op);
  int64_t dim = canonicalizeDim(a.ndim(), args[2].toInt(), op);
  THUNDER_CHECK(idx.ndim() == a.ndim(), op, ": expected indices with ", a.ndim(),
                " dimensions, but got shape ", shapeStr(idx.shape));
  for (int64_t d = 0; d < a.ndim(); ++d)
    THUNDER_CHECK(d == dim || idx.shape[d] <= a.shape[d], op, ": indices of shape ",
                  shapeStr(idx.shape), " exceed the input's shape ", shapeStr(a.shape),
                  " in dimension ", d);
  commonDevice({args[0], args[1]}, op);
  return newTensor(idx.shape, a.dtype, a.device);
}

/// scatter and scatter_add: as torch's, indices no larger than value anywhere, nor than a
/// outside `dim`; a and value of one dtype.
Value scatterMeta(const std::vector<Value>& args, const char* name) {
  const std::string op = std::string("prims.") + name;
  const TensorProxy& a = tensorArg(args[0], name, "a");
  const TensorProxy& idx = tensorArg(args[1], name, "indices");
  const TensorProxy& val = tensorArg(args[2], name, "value");
  checkIndexDType(idx, op);
  int64_t dim = canonicalizeDim(a.ndim(), args[3].toInt(), op);
  THUNDER_CHECK(idx.ndim() == a.ndim() && val.ndim() == a.ndim(), op,
                ": expected a, indices and value with the same number of dimensions, but got ",
                shapeStr(a.shape), ", ", shapeStr(idx.shape), " and ", shapeStr(val.shape));
  for (int64_t d = 0; d < a.ndim(); ++d) {
    THUNDER_CHECK(idx.shape[d] <= val.shape[d], op, ": indices of shape ", shapeStr(idx.shape),
                  " exceed value's shape ", shapeStr(val.shape), " in dimension ", d);
    THUNDER_CHECK(d == dim || idx.shape[d] <= a.shape[d], op, ": indices of shape ",
                  shapeStr(idx.shape), " exceed the input's shape ", shapeStr(a.shape),
                  " in dimension ", d);
  }
  THUNDER_CHECK_KIND(a.dtype == val.dtype, ErrorKind::Type, op,
                     ": expected a and value of the same dtype, but got ", dtypeName(a.dtype),
                     " and ", dtypeName(val.dtype));
  commonDevice({args[0], args[1], args[2]}, op);
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_scatter_add(const std::vector<Value>& args) { return scatterMeta(args, "scatter_add"); }

Shape reducedShape(const TensorProxy& a, const std::vector<int64_t>& dims) {
  Shape out;
  for (int64_t i = 0; i < a.ndim(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) out.push_back(a.shape[i]);
  return out;
}

Value reductionMeta(const std::vector<Value>& args, const char* name, bool allowBool) {
  std::string op = opName(name);
  const TensorProxy& a = tensorArg(args[0], name, "a");
  std::vector<int64_t> dims = canonicalizeDims(a.ndim(), args[1].toInts(), op);
  if (!allowBool)
    THUNDER_CHECK_KIND(a.dtype != DType::Bool, ErrorKind::Type, op,
                       ": bool tensors are not supported (convert to an integer dtype first)");
  return newTensor(reducedShape(a, dims), a.dtype, a.device);
}

Value meta_sum(const std::vector<Value>& args) { return reductionMeta(args, "sum", false); }
Value meta_prod(const std::vector<Value>& args) { return reductionMeta(args, "prod", false); }

Value minmaxMeta(const std::vector<Value>& args, const char* name) {
  std::string op = opName(name);
  const TensorProxy& a = tensorArg(args[0], name, "a");
  std::vector<int64_t> dims = canonicalizeDims(a.ndim(), args[1].toInts(), op);
  for (int64_t d : dims)
    THUNDER_CHECK_KIND(a.ndim() == 0 || a.shape[d] > 0, ErrorKind::Index, op, ": cannot reduce dimension ", d,
                  " of length 0 of shape ", shapeStr(a.shape), " (the operation has no identity)");
  THUNDER_CHECK_KIND(!isComplex(a.dtype), ErrorKind::Type, op, ": complex tensors are not supported");
  return newTensor(reducedShape(a, dims), a.dtype, a.device);
}

Value meta_amax(const std::vector<Value>& args) { return minmaxMeta(args, "amax"); }
Value meta_amin(const std::vector<Value>& args) { return minmaxMeta(args, "amin"); }

Value meta_var(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "var", "a");
  THUNDER_CHECK_KIND(isFloating(a.dtype) || isComplex(a.dtype), ErrorKind::Type,
                     "prims.var: expected a floating or complex tensor, but got ",
                     dtypeName(a.dtype));
  std::vector<int64_t> dims = canonicalizeDims(a.ndim(), args[1].toInts(), "prims.var");
  return newTensor(reducedShape(a, dims), complexToReal(a.dtype), a.device);
}

Value argMeta(const std::vector<Value>& args, const char* name) {
  std::string op = opName(name);
  const TensorProxy& a = tensorArg(args[0], name, "a");
  THUNDER_CHECK_KIND(!isComplex(a.dtype), ErrorKind::Type, op, ": complex tensors are not supported");
  if (args[1].isNone()) {
    THUNDER_CHECK_KIND(a.numel() > 0, ErrorKind::Index, op, ": cannot reduce an empty tensor of shape ", shapeStr(a.shape));
    return newTensor({}, DType::Int64, a.device);
  }
  int64_t dim = canonicalizeDim(a.ndim(), args[1].toInt(), op);
  // an IndexError, as eager's "Expected reduction dim 0 to have non-zero size" (fuzzer seed 16939)
  THUNDER_CHECK_KIND(a.ndim() == 0 || a.shape[dim] > 0, ErrorKind::Index, op, ": cannot reduce dimension ", dim,
                     " of length 0 of shape ", shapeStr(a.shape));
  return newTensor(reducedShape(a, {dim}), DType::Int64, a.device);
}

Value meta_argmax(const std::vector<Value>& args) { return argMeta(args, "argmax"); }
Value meta_argmin(const std::vector<Value>& args) { return argMeta(args, "argmin"); }

Value meta_matmul(const std::vector<Value>& args) {
  const std::string op = "prims.matmul";
  const TensorProxy& a = tensorArg(args[0], "matmul", "a");
  const TensorProxy& b = tensorArg(args[1], "matmul", "b");
  THUNDER_CHECK_KIND(a.dtype == b.dtype, ErrorKind::Type, op,
                     ": expected tensors of the same dtype, but got ", dtypeName(a.dtype), " and ",
                     dtypeName(b.dtype));
  THUNDER_CHECK(a.ndim() > 0 && b.ndim() > 0, op,
                ": both arguments need at least one dimension, but got shapes ", shapeStr(a.shape),
                " and ", shapeStr(b.shape));
  commonDevice({args[0], args[1]}, op);
  // As torch.matmul: 1-D operands are promoted to matrices and the added dimension removed.
  int64_t k1 = a.shape.back();
  int64_t k2 = b.ndim() == 1 ? b.shape[0] : b.shape[b.ndim() - 2];
  THUNDER_CHECK(k1 == k2, op, ": shapes ", shapeStr(a.shape), " and ", shapeStr(b.shape),
                " cannot be multiplied (", k1, " != ", k2, ")");
  if (a.ndim() == 1 && b.ndim() == 1) return newTensor({}, a.dtype, a.device);
  Shape aBatch = a.ndim() > 2 ? Shape(a.shape.begin(), a.shape.end() - 2) : Shape{};
  Shape bBatch = b.ndim() > 2 ? Shape(b.shape.begin(), b.shape.end() - 2) : Shape{};
  size_t n = std::max(aBatch.size(), bBatch.size());
  Shape batch(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - aBatch.size() ? 1 : aBatch[i - (n - aBatch.size())];
    int64_t y = i < n - bBatch.size() ? 1 : bBatch[i - (n - bBatch.size())];
    THUNDER_CHECK(x == y || x == 1 || y == 1, op, ": batch dimensions of ", shapeStr(a.shape),
                  " and ", shapeStr(b.shape), " cannot be broadcast");
    batch[i] = x == 1 ? y : x;
  }
  Shape out = batch;
  if (a.ndim() > 1) out.push_back(a.shape[a.ndim() - 2]);
  if (b.ndim() > 1) out.push_back(b.shape.back());
  return newTensor(out, a.dtype, a.device);
}

Value meta_linear(const std::vector<Value>& args) {
  const std::string op = "prims.linear";
  const TensorProxy& a = tensorArg(args[0], "linear", "a");
  const TensorProxy& w = tensorArg(args[1], "linear", "w");
  THUNDER_CHECK(w.ndim() == 1 || w.ndim() == 2, op, ": expected a 1- or 2-dimensional weight, but got shape ",
                shapeStr(w.shape));
  THUNDER_CHECK(a.ndim() >= 1, op, ": expected an input with at least one dimension");
  THUNDER_CHECK(a.shape.back() == w.shape.back(), op, ": input of shape ", shapeStr(a.shape),
                " and weight of shape ", shapeStr(w.shape),
                " cannot be multiplied (", a.shape.back(), " != ", w.shape.back(), ")");
  THUNDER_CHECK(a.dtype == w.dtype, op, ": expected input and weight of the same dtype, but got ",
                     dtypeName(a.dtype), " and ", dtypeName(w.dtype));
  Shape out(a.shape.begin(), a.shape.end() - 1);
  if (w.ndim() == 2) out.push_back(w.shape[0]);
  if (!args[2].isNone()) {
    const TensorProxy& bias = tensorArg(args[2], "linear", "bias");
    THUNDER_CHECK_KIND(bias.dtype == a.dtype, ErrorKind::Type, op, ": expected bias of dtype ",
                       dtypeName(a.dtype), ", but got ", dtypeName(bias.dtype));
    int64_t outFeatures = w.ndim() == 2 ? w.shape[0] : 1;
    THUNDER_CHECK(bias.ndim() <= 1 && (bias.numel() == outFeatures || bias.numel() == 1), op,
                  ": bias of shape ", shapeStr(bias.shape), " does not match ", outFeatures,
                  " output features");
  }
  commonDevice(args, op);
  return newTensor(out, a.dtype, a.device);
}

Value meta_embedding(const std::vector<Value>& args) {
  const std::string op = "prims.embedding";
  const TensorProxy& a = tensorArg(args[0], "embedding", "a");
  const TensorProxy& w = tensorArg(args[1], "embedding", "weight");
  checkIndexDType(a, op);
  THUNDER_CHECK(w.ndim() == 2, op, ": expected a 2-dimensional weight, but got shape ",
                shapeStr(w.shape));
  Shape out = a.shape;
  out.push_back(w.shape[1]);
  commonDevice({args[0], args[1]}, op);
  return newTensor(out, w.dtype, w.device);
}

Value meta_embedding_backward(const std::vector<Value>& args) {
  const std::string op = "prims.embedding_backward";
  const TensorProxy& g = tensorArg(args[0], "embedding_backward", "grad");
  const TensorProxy& idx = tensorArg(args[1], "embedding_backward", "indices");
  checkIndexDType(idx, op);
  THUNDER_CHECK(g.ndim() == idx.ndim() + 1, op, ": expected grad to have one more dim than indices ",
                shapeStr(idx.shape), ", but got shape ", shapeStr(g.shape));
  for (int64_t d = 0; d < idx.ndim(); ++d)
    THUNDER_CHECK(g.shape[d] == idx.shape[d], op, ": expected grad's leading dims to be indices' ",
                  shapeStr(idx.shape), ", but got shape ", shapeStr(g.shape));
  int64_t n = args[2].toInt();
  THUNDER_CHECK(n >= 0, op, ": expected num_weights to be non-negative, but got ", n);
  if (!args[3].isNone()) {
    int64_t pad = args[3].toInt();
    THUNDER_CHECK(pad >= 0 && pad < n, op, ": expected padding_idx in [0, ", n, "), but got ", pad);
  }
  commonDevice({args[0], args[1]}, op);
  return newTensor({n, g.shape.back()}, g.dtype, g.device);
}

// ---- nn ops ----

/// Checks a per-spatial-dim list argument of an nn prim: `k` entries, each >= `min`.
std::vector<int64_t> spatialArg(const Value& v, size_t k, int64_t min, const std::string& op,
                                const char* arg) {
  std::vector<int64_t> xs = v.toInts();
  THUNDER_CHECK(xs.size() == k, op, ": expected ", arg, " to have ", k, " entries, but got ",
                shapeStr(xs));
  for (int64_t x : xs)
    THUNDER_CHECK(x >= min, op, ": expected every entry of ", arg, " to be at least ", min,
                  ", but got ", shapeStr(xs));
  return xs;
}

void checkFloatingNN(const TensorProxy& t, const std::string& op, const char* arg) {
  THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::Type, op, ": expected a floating point ", arg,
                     ", but got ", dtypeName(t.dtype));
}

/// The input of a pooling or resampling prim: (C, *spatial) or (N, C, *spatial), k spatial dims.
void checkPoolInput(const TensorProxy& a, size_t k, bool allowUnbatched, const std::string& op) {
  int64_t n = static_cast<int64_t>(k);
  THUNDER_CHECK(a.ndim() == n + 2 || (allowUnbatched && a.ndim() == n + 1), op, ": expected a ",
                allowUnbatched ? std::to_string(n + 1) + "- or " : std::string(), n + 2,
                "-dimensional input for ", k, " spatial dimensions, but got shape ",
                shapeStr(a.shape));
  for (int64_t d = a.ndim() - n; d < a.ndim(); ++d)
    THUNDER_CHECK(a.shape[d] > 0, op, ": expected non-empty spatial dimensions, but got shape ",
                  shapeStr(a.shape));
  checkFloatingNN(a, op, "input");
}

/// PyTorch's output length of a pooling window (pooling_output_shape).
int64_t pooledLength(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  // The last window must start inside the input or its left padding.
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

Shape pooledShape(const TensorProxy& a, const std::vector<int64_t>& k,
                  const std::vector<int64_t>& s, const std::vector<int64_t>& p,
                  const std::vector<int64_t>& d, bool ceil, const std::string& op) {
  Shape out = a.shape;
  size_t n = k.size();
  for (size_t i = 0; i < n; ++i) {
    THUNDER_CHECK(p[i] <= (d[i] * (k[i] - 1) + 1) / 2, op,
                  ": padding should be at most half of the effective kernel size, but got padding ",
                  shapeStr(p), ", kernel_size ", shapeStr(k), " and dilation ", shapeStr(d));
    size_t dim = a.shape.size() - n + i;
    int64_t len = pooledLength(a.shape[dim], k[i], s[i], p[i], d[i], ceil);
    THUNDER_CHECK(len >= 1, op, ": the output of input shape ", shapeStr(a.shape),
                  " with kernel_size ", shapeStr(k), ", stride ", shapeStr(s), ", padding ",
                  shapeStr(p), " and dilation ", shapeStr(d), " would be empty");
    out[dim] = len;
  }
  return out;
}

Value meta_convolution(const std::vector<Value>& args) {
  const std::string op = "prims.convolution";
  const TensorProxy& a = tensorArg(args[0], "convolution", "a");
  const TensorProxy& w = tensorArg(args[1], "convolution", "weight");
  THUNDER_CHECK(a.ndim() >= 3 && a.ndim() <= 5, op,
                ": expected a 3-, 4- or 5-dimensional input (N, C, *spatial), but got shape ",
                shapeStr(a.shape));
  THUNDER_CHECK(w.ndim() == a.ndim(), op, ": expected a ", a.ndim(),
                "-dimensional weight for input of shape ", shapeStr(a.shape), ", but got shape ",
                shapeStr(w.shape));
  checkFloatingNN(a, op, "input");
  THUNDER_CHECK(a.dtype == w.dtype, op,
                     ": expected input and weight of the same dtype, but got ", dtypeName(a.dtype),
                     " and ", dtypeName(w.dtype));
  size_t k = static_cast<size_t>(a.ndim() - 2);
  auto stride = spatialArg(args[3], k, 1, op, "stride");
  auto padding = spatialArg(args[4], k, 0, op, "padding");
  auto dilation = spatialArg(args[5], k, 1, op, "dilation");
  bool transposed = args[6].toBool();
  auto outPad = spatialArg(args[7], k, 0, op, "output_padding");
  int64_t groups = args[8].toInt();
  THUNDER_CHECK(groups >= 1, op, ": expected groups to be positive, but got ", groups);
  int64_t cin = a.shape[1];
  THUNDER_CHECK(cin % groups == 0, op, ": input channels ", cin, " are not divisible by groups ",
                groups);
  int64_t cout;
  if (transposed) {
    THUNDER_CHECK(w.shape[0] == cin, op, ": weight of shape ", shapeStr(w.shape), " expects ",
                  w.shape[0], " input channels, but the input of shape ", shapeStr(a.shape),
                  " has ", cin);
    cout = w.shape[1] * groups;
    for (size_t i = 0; i < k; ++i)
      THUNDER_CHECK(outPad[i] < stride[i] || outPad[i] < dilation[i], op,
                    ": output_padding must be smaller than either stride or dilation, but got "
                    "output_padding ",
                    shapeStr(outPad), ", stride ", shapeStr(stride), " and dilation ",
                    shapeStr(dilation));
  } else {
    THUNDER_CHECK(w.shape[1] * groups == cin, op, ": weight of shape ", shapeStr(w.shape),
                  " with groups=", groups, " expects ", w.shape[1] * groups,
                  " input channels, but the input of shape ", shapeStr(a.shape), " has ", cin);
    cout = w.shape[0];
    THUNDER_CHECK(cout % groups == 0, op, ": output channels ", cout,
                  " are not divisible by groups ", groups);
  }
  Shape out = {a.shape[0], cout};
  for (size_t i = 0; i < k; ++i) {
    int64_t in = a.shape[2 + i], kw = w.shape[2 + i];
    int64_t len =
        transposed ? (in - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kw - 1) + outPad[i] + 1
                   : (in + 2 * padding[i] - dilation[i] * (kw - 1) - 1) / stride[i] + 1;
    bool fits = transposed || in + 2 * padding[i] >= dilation[i] * (kw - 1) + 1;
    THUNDER_CHECK(fits && len >= 1, op, ": kernel of shape ", shapeStr(w.shape), " with dilation ",
                  shapeStr(dilation), " does not fit the padded input of shape ", shapeStr(a.shape),
                  " (padding ", shapeStr(padding), ")");
    out.push_back(len);
  }
  if (!args[2].isNone()) {
    const TensorProxy& b = tensorArg(args[2], "convolution", "bias");
    THUNDER_CHECK(b.ndim() == 1 && b.shape[0] == cout, op, ": expected a bias of shape (", cout,
                  ",), but got ", shapeStr(b.shape));
    THUNDER_CHECK_KIND(b.dtype == a.dtype, ErrorKind::Type, op, ": expected bias of dtype ",
                       dtypeName(a.dtype), ", but got ", dtypeName(b.dtype));
  }
  commonDevice(args, op);
  return newTensor(out, a.dtype, a.device);
}

Value meta_convolution_backward(const std::vector<Value>& args) {
  const std::string op = "prims.convolution_backward";
  const TensorProxy& g = tensorArg(args[0], "convolution_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "convolution_backward", "a");
  const TensorProxy& w = tensorArg(args[2], "convolution_backward", "weight");
  THUNDER_CHECK(g.ndim() == a.ndim() && w.ndim() == a.ndim(), op,
                ": grad, input and weight must have the same number of dimensions, but got shapes ",
                shapeStr(g.shape), ", ", shapeStr(a.shape), " and ", shapeStr(w.shape));
  commonDevice({args[0], args[1], args[2]}, op);
  return Value::tuple(
      {newTensor(a.shape, a.dtype, a.device), newTensor(w.shape, w.dtype, w.device)});
}

/// The dtype batch_norm computes its statistics in: float32 for half types, else the input's.
DType batchNormStatDType(DType d) { return isLowPrecision(d) ? DType::Float32 : d; }

Value meta_batch_norm(const std::vector<Value>& args) {
  const std::string op = "prims.batch_norm";
  const TensorProxy& a = tensorArg(args[0], "batch_norm", "a");
  THUNDER_CHECK(a.ndim() >= 2, op, ": expected an input with at least 2 dimensions, but got shape ",
                shapeStr(a.shape));
  THUNDER_CHECK_KIND(isFloating(a.dtype), ErrorKind::Type, op,
                     ": expected a floating point input, but got ", dtypeName(a.dtype));
  int64_t c = a.shape[1];
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i <= 4; ++i) {
    if (args[i].isNone()) continue;
    const TensorProxy& p = tensorArg(args[i], "batch_norm", names[i - 1]);
    THUNDER_CHECK(p.ndim() == 1 && p.shape[0] == c, op, ": expected ", names[i - 1], " of shape (",
                  c, ",) for input of shape ", shapeStr(a.shape), ", but got ", shapeStr(p.shape));
  }
  THUNDER_CHECK(args[3].isNone() == args[4].isNone(), op,
                ": running_mean and running_var must both be given or both be None");
  commonDevice({args[0], args[1], args[2], args[3], args[4]}, op);
  DType stat = batchNormStatDType(a.dtype);
  std::vector<Value> outs = {newTensor(a.shape, a.dtype, a.device), newTensor({c}, stat, a.device),
                             newTensor({c}, stat, a.device)};
  for (int i = 3; i <= 4 && !args[3].isNone(); ++i)
    outs.push_back(newTensor({c}, args[i].tensor().dtype, a.device));
  return Value::tuple(outs);
}

Value meta_batch_norm_backward(const std::vector<Value>& args) {
  const std::string op = "prims.batch_norm_backward";
  const TensorProxy& g = tensorArg(args[0], "batch_norm_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "batch_norm_backward", "a");
  THUNDER_CHECK(g.shape == a.shape && a.ndim() >= 2, op,
                ": expected grad of the input's shape ", shapeStr(a.shape), ", but got shape ",
                shapeStr(g.shape));
  commonDevice({args[0], args[1], args[2], args[3], args[4]}, op);
  // The parameters' gradients in the weight's dtype (the statistics' without a weight).
  DType pd = args[2].isNone() ? batchNormStatDType(a.dtype) : args[2].tensor().dtype;
  int64_t c = a.shape[1];
  return Value::tuple({newTensor(a.shape, a.dtype, a.device), newTensor({c}, pd, a.device),
                       newTensor({c}, pd, a.device)});
}

Value meta_max_pool(const std::vector<Value>& args) {
  const std::string op = "prims.max_pool";
  const TensorProxy& a = tensorArg(args[0], "max_pool", "a");
  size_t k = args[1].toInts().size();
  THUNDER_CHECK(k == 2 || k == 3, op, ": expected 2 or 3 spatial dimensions, but got kernel_size ",
                shapeStr(args[1].toInts()));
  checkPoolInput(a, k, false, op);
  Shape out =
      pooledShape(a, spatialArg(args[1], k, 1, op, "kernel_size"),
                  spatialArg(args[2], k, 1, op, "stride"), spatialArg(args[3], k, 0, op, "padding"),
                  spatialArg(args[4], k, 1, op, "dilation"), args[5].toBool(), op);
  return Value::tuple({newTensor(out, a.dtype, a.device), newTensor(out, DType::Int64, a.device)});
}

Value meta_max_pool_backward(const std::vector<Value>& args) {
  const std::string op = "prims.max_pool_backward";
  const TensorProxy& g = tensorArg(args[0], "max_pool_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "max_pool_backward", "a");
  const TensorProxy& idx = tensorArg(args[2], "max_pool_backward", "indices");
  THUNDER_CHECK(g.shape == idx.shape, op, ": grad of shape ", shapeStr(g.shape),
                " does not match indices of shape ", shapeStr(idx.shape));
  commonDevice({args[0], args[1], args[2]}, op);
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_avg_pool(const std::vector<Value>& args) {
  const std::string op = "prims.avg_pool";
  const TensorProxy& a = tensorArg(args[0], "avg_pool", "a");
  size_t k = args[1].toInts().size();
  THUNDER_CHECK(k == 2 || k == 3, op, ": expected 2 or 3 spatial dimensions, but got kernel_size ",
                shapeStr(args[1].toInts()));
  checkPoolInput(a, k, false, op);
  if (!args[6].isNone())
    THUNDER_CHECK(args[6].toInt() != 0, op, ": divisor_override must be nonzero");
  Shape out = pooledShape(
      a, spatialArg(args[1], k, 1, op, "kernel_size"), spatialArg(args[2], k, 1, op, "stride"),
      spatialArg(args[3], k, 0, op, "padding"), std::vector<int64_t>(k, 1), args[4].toBool(), op);
  return newTensor(out, a.dtype, a.device);
}

Value meta_avg_pool_backward(const std::vector<Value>& args) {
  const std::string op = "prims.avg_pool_backward";
  tensorArg(args[0], "avg_pool_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "avg_pool_backward", "a");
  commonDevice({args[0], args[1]}, op);
  return newTensor(a.shape, a.dtype, a.device);
}

Shape adaptiveShape(const std::vector<Value>& args, const std::string& op) {
  const TensorProxy& a = expectTensor(args[0], op, "a");
  std::vector<int64_t> size = args[1].toInts();
  size_t k = size.size();
  THUNDER_CHECK(k == 2 || k == 3, op, ": expected 2 or 3 output sizes, but got ", shapeStr(size));
  checkPoolInput(a, k, false, op);
  std::vector<int64_t> checked = spatialArg(args[1], k, 0, op, "output_size");
  Shape out = a.shape;
  std::copy(checked.begin(), checked.end(), out.end() - static_cast<int64_t>(k));
  return out;
}

Value meta_adaptive_avg_pool(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "adaptive_avg_pool", "a");
  return newTensor(adaptiveShape(args, "prims.adaptive_avg_pool"), a.dtype, a.device);
}

Value meta_adaptive_avg_pool_backward(const std::vector<Value>& args) {
  tensorArg(args[0], "adaptive_avg_pool_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "adaptive_avg_pool_backward", "a");
  commonDevice({args[0], args[1]}, "prims.adaptive_avg_pool_backward");
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_adaptive_max_pool(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "adaptive_max_pool", "a");
  Shape out = adaptiveShape(args, "prims.adaptive_max_pool");
  return Value::tuple({newTensor(out, a.dtype, a.device), newTensor(out, DType::Int64, a.device)});
}

Value meta_adaptive_max_pool_backward(const std::vector<Value>& args) {
  tensorArg(args[0], "adaptive_max_pool_backward", "grad");
  const TensorProxy& a = tensorArg(args[1], "adaptive_max_pool_backward", "a");
  tensorArg(args[2], "adaptive_max_pool_backward", "indices");
  commonDevice({args[0], args[1], args[2]}, "prims.adaptive_max_pool_backward");
  return newTensor(a.shape, a.dtype, a.device);
}

/// The spatial dims each upsampling mode works on.
size_t upsampleDims(const std::string& mode, const std::string& op) {
  if (mode == "nearest" || mode == "nearest-exact") return 0;
  if (mode == "linear") return 1;
  if (mode == "bilinear" || mode == "bicubic") return 2;
  if (mode == "trilinear") return 3;
  THUNDER_CHECK_KIND(false, ErrorKind::NotImplemented, op,
                     ": mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic' "
                     "or 'trilinear', but got '",
                     mode, "'");
  return 0;
}

Value meta_upsample(const std::vector<Value>& args) {
  const std::string op = "prims.upsample";
  const TensorProxy& a = tensorArg(args[0], "upsample", "a");
  std::vector<int64_t> size = args[1].toInts();
  size_t k = size.size();
  size_t need = upsampleDims(args[2].toString(), op);
  THUNDER_CHECK(k >= 1 && k <= 3 && (need == 0 || need == k), op, ": mode '", args[2].toString(),
                "' cannot produce output_size ", shapeStr(size));
  checkPoolInput(a, k, false, op);
  spatialArg(args[1], k, 1, op, "output_size");
  if (!args[4].isNone())
    THUNDER_CHECK(args[4].items().size() == k, op, ": expected ", k, " scales");
  Shape out = {a.shape[0], a.shape[1]};
  out.insert(out.end(), size.begin(), size.end());
  return newTensor(out, a.dtype, a.device);
}

Value meta_upsample_backward(const std::vector<Value>& args) {
  const std::string op = "prims.upsample_backward";
  const TensorProxy& g = tensorArg(args[0], "upsample_backward", "grad");
  Shape in = args[1].toInts();
  THUNDER_CHECK(in.size() == static_cast<size_t>(g.ndim()), op, ": input_size ", shapeStr(in),
                " does not match grad of shape ", shapeStr(g.shape));
  return newTensor(in, g.dtype, g.device);
}

// ---- end nn ops ----

Value meta_copy_(const std::vector<Value>& args) {
  const std::string op = "prims.copy_";
  const TensorProxy& src = tensorArg(args[0], "copy_", "src");
  const TensorProxy& dst = tensorArg(args[1], "copy_", "dst");
  THUNDER_CHECK(src.shape == dst.shape, op, ": src of shape ", shapeStr(src.shape),
                " does not match dst of shape ", shapeStr(dst.shape));
  THUNDER_CHECK_KIND(src.dtype == dst.dtype, ErrorKind::Type, op, ": src has dtype ",
                     dtypeName(src.dtype), " but dst has dtype ", dtypeName(dst.dtype));
  commonDevice({args[0], args[1]}, op);
  return newTensor(dst.shape, dst.dtype, dst.device);
}

// ---- tensor ops ----

Value meta_cumsum(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "cumsum", "a");
  canonicalizeDim(a.ndim(), args[1].toInt(), "prims.cumsum");
  THUNDER_CHECK_KIND(a.dtype != DType::Bool, ErrorKind::Type,
                     "prims.cumsum: bool tensors are not supported (convert to an integer dtype ",
                     "first)");
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_cumprod(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "cumprod", "a");
  canonicalizeDim(a.ndim(), args[1].toInt(), "prims.cumprod");
  THUNDER_CHECK_KIND(a.dtype != DType::Bool, ErrorKind::Type,
                     "prims.cumprod: bool tensors are not supported (convert to an integer dtype ",
                     "first)");
  return newTensor(a.shape, a.dtype, a.device);
}

Value meta_sort(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "sort", "a");
  canonicalizeDim(a.ndim(), args[1].toInt(), "prims.sort");
  THUNDER_CHECK_KIND(!isComplex(a.dtype), ErrorKind::Type,
                     "prims.sort: complex tensors are not supported");
  return Value::tuple(
      {newTensor(a.shape, a.dtype, a.device), newTensor(a.shape, DType::Int64, a.device)});
}

Value meta_topk(const std::vector<Value>& args) {
  const TensorProxy& a = tensorArg(args[0], "topk", "a");
  int64_t k = args[1].toInt();
  int64_t dim = canonicalizeDim(a.ndim(), args[2].toInt(), "prims.topk");
  int64_t n = a.ndim() == 0 ? 1 : a.shape[dim];
  THUNDER_CHECK_KIND(!isComplex(a.dtype), ErrorKind::Type,
                     "prims.topk: complex tensors are not supported");
  THUNDER_CHECK_KIND(k >= 0 && k <= n, ErrorKind::Index, "prims.topk: k (", k,
                     ") is out of range for dimension ", dim, " of length ", n, " of shape ",
                     shapeStr(a.shape));
  Shape out = a.shape;
  if (a.ndim() > 0) out[dim] = k;
  return Value::tuple({newTensor(out, a.dtype, a.device), newTensor(out, DType::Int64, a.device)});
}

Value meta_scatter(const std::vector<Value>& args) { return scatterMeta(args, "scatter"); }

Value delMeta(const std::vector<Value>&) { return Value(); }

Symbol* makePrim(const char* name, const std::string& sig, uint32_t tags, SymbolFn meta) {
  auto s = std::make_unique<Symbol>();
  s->module = "prims";
  s->name = name;
  s->params = parseSignature(sig);
  s->tags = tags;
  s->meta = std::move(meta);
  return SymbolRegistry::get().add(std::move(s));
}

}  // namespace

void registerPrims() {
  static std::once_flag once;
  std::call_once(once, [] {
#define UNARY(n, k, o)                                                                   \
  gPrims[static_cast<size_t>(PrimId::n)] =                                               \
      makePrim(#n, "a", kElementwise, [](const std::vector<Value>& args) {               \
        return unaryMeta("prims." #n, #k, OutRule::o, args[0]);                           \
      });
#define BINARY(n, k, o)                                                                  \
  gPrims[static_cast<size_t>(PrimId::n)] =                                               \
      makePrim(#n, "a, b", kElementwise, [](const std::vector<Value>& args) {            \
        return binaryMeta("prims." #n, #k, OutRule::o, args[0], args[1]);                 \
      });
#define PRIM(n, s, t) gPrims[static_cast<size_t>(PrimId::n)] = makePrim(#n, s, t, meta_##n);
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM
    auto d = std::make_unique<Symbol>();
    d->name = "del";
    d->params = parseSignature("*names");
    d->tags = kDel | kDontDce;
    d->meta = delMeta;
    gDel = SymbolRegistry::get().add(std::move(d));
  });
}

const Symbol& symbol(PrimId id) {
  registerPrims();
  return *gPrims[static_cast<size_t>(id)];
}

const Symbol& delSymbol() {
  registerPrims();
  return *gDel;
}

#define UNARY(n, k, o) \
  Value n(const Value& a) { return call(symbol(PrimId::n), {a}); }
#define BINARY(n, k, o) \
  Value n(const Value& a, const Value& b) { return call(symbol(PrimId::n), {a, b}); }
#define PRIM(n, s, t)
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM

Value where(const Value& pred, const Value& a, const Value& b) {
  return call(symbol(PrimId::where), {pred, a, b});
}
Value convert_element_type(const Value& a, DType dtype) {
  return call(symbol(PrimId::convert_element_type), {a, dtype});
}
Value polygamma(int64_t n, const Value& a) { return call(symbol(PrimId::polygamma), {n, a}); }
Value device_put(const Value& a, Device device) { return call(symbol(PrimId::device_put), {a, device}); }
Value full(const Shape& shape, const Value& fill, Device device, DType dtype) {
  return call(symbol(PrimId::full), {Value::ints(shape), fill, device, dtype});
}
Value iota(int64_t length, int64_t start, int64_t step, Device device, DType dtype) {
  return call(symbol(PrimId::iota), {length, start, step, device, dtype});
}
Value uniform(const Shape& shape, const Value& minval, const Value& maxval, Device device,
              DType dtype) {
  return call(symbol(PrimId::uniform), {Value::ints(shape), minval, maxval, device, dtype});
}
Value broadcast_in_dim(const Value& a, const Shape& shape, const std::vector<int64_t>& bdims) {
  return call(symbol(PrimId::broadcast_in_dim),
              {a, Value::list({shape.begin(), shape.end()}), Value::list({bdims.begin(), bdims.end()})});
}
Value reshape(const Value& a, const Shape& shape) {
  return call(symbol(PrimId::reshape), {a, Value::ints(shape)});
}
Value slice(const Value& a, const std::vector<int64_t>& start, const std::vector<int64_t>& end,
            const std::vector<int64_t>& strides) {
  return call(symbol(PrimId::slice), {a, Value::ints(start), Value::ints(end), Value::ints(strides)});
}
Value squeeze(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::squeeze), {a, Value::ints(dims)});
}
Value transpose(const Value& a, const std::vector<int64_t>& permutation) {
  return call(symbol(PrimId::transpose), {a, Value::ints(permutation)});
}
Value flip(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::flip), {a, Value::ints(dims)});
}
Value stride_order(const Value& a, const std::vector<int64_t>& order) {
  return call(symbol(PrimId::stride_order), {a, Value::ints(order)});
}
Value cat(const std::vector<Value>& tensors, int64_t dim) {
  return call(symbol(PrimId::cat), {Value::list(tensors), dim});
}
Value pad(const Value& a, const Value& padValue, const std::vector<std::array<int64_t, 3>>& config) {
  std::vector<Value> cfg;
  for (const auto& c : config) cfg.push_back(Value::ints({c[0], c[1], c[2]}));
  return call(symbol(PrimId::pad), {a, padValue, Value::list(cfg)});
}
Value take(const Value& a, const Value& indices, int64_t dim) {
  return call(symbol(PrimId::take), {a, indices, dim});
}
Value gather(const Value& a, const Value& indices, int64_t dim) {
  return call(symbol(PrimId::gather), {a, indices, dim});
}
Value scatter_add(const Value& a, const Value& indices, const Value& value, int64_t dim) {
  return call(symbol(PrimId::scatter_add), {a, indices, value, dim});
}
Value sum(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::sum), {a, Value::ints(dims)});
}
Value prod(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::prod), {a, Value::ints(dims)});
}
Value amax(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::amax), {a, Value::ints(dims)});
}
Value amin(const Value& a, const std::vector<int64_t>& dims) {
  return call(symbol(PrimId::amin), {a, Value::ints(dims)});
}
Value var(const Value& a, const std::vector<int64_t>& dims, double correction) {
  return call(symbol(PrimId::var), {a, Value::ints(dims), correction});
}
Value argmax(const Value& a, std::optional<int64_t> dim) {
  return call(symbol(PrimId::argmax), {a, dim ? Value(*dim) : Value()});
}
Value argmin(const Value& a, std::optional<int64_t> dim) {
  return call(symbol(PrimId::argmin), {a, dim ? Value(*dim) : Value()});
}
Value matmul(const Value& a, const Value& b) { return call(symbol(PrimId::matmul), {a, b}); }
Value linear(const Value& a, const Value& w, const Value& bias) {
  return call(symbol(PrimId::linear), {a, w, bias});
}
Value embedding(const Value& a, const Value& weight, std::optional<int64_t> paddingIdx) {
  return call(symbol(PrimId::embedding), {a, weight, paddingIdx ? Value(*paddingIdx) : Value()});
}
// ---- nn ops ----
Value convolution(const Value& a, const Value& weight, const Value& bias,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                  const std::vector<int64_t>& dilation, bool transposed,
                  const std::vector<int64_t>& outputPadding, int64_t groups) {
  return call(symbol(PrimId::convolution),
              {a, weight, bias, Value::ints(stride), Value::ints(padding), Value::ints(dilation),
               transposed, Value::ints(outputPadding), groups});
}
// ---- end nn ops ----
Value copy_(const Value& src, const Value& dst) { return call(symbol(PrimId::copy_), {src, dst}); }

// ---- tensor ops ----
Value cumsum(const Value& a, int64_t dim) { return call(symbol(PrimId::cumsum), {a, dim}); }
Value cumprod(const Value& a, int64_t dim) { return call(symbol(PrimId::cumprod), {a, dim}); }
Value sort(const Value& a, int64_t dim, bool descending, bool stable) {
  return call(symbol(PrimId::sort), {a, dim, descending, stable});
}
Value topk(const Value& a, int64_t k, int64_t dim, bool largest) {
  return call(symbol(PrimId::topk), {a, k, dim, largest});
}
Value scatter(const Value& a, const Value& indices, const Value& value, int64_t dim) {
  return call(symbol(PrimId::scatter), {a, indices, value, dim});
}

}  // namespace thunder::prims
