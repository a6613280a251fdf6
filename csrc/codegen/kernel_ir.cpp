#include "codegen/kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "codegen/python_printer.h"
#include "ir/error.h"

namespace thunder::codegen {
namespace {

const std::set<std::string> kUnary = {
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_not", "ceil", "cos",
    "cosh", "erf", "erfc", "exp", "exp2", "expm1", "floor", "isfinite", "lgamma", "log",
    "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sign", "signbit", "sin",
    "sinh", "sqrt", "tan", "tanh", "trunc", "sigmoid"};
const std::set<std::string> kBinary = {
    "add", "sub", "mul", "div", "pow", "atan2", "maximum", "minimum", "eq", "ne", "lt", "le",
    "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "fmod",
    "remainder", "copysign"};
// Integer fmod and remainder stay with ATen: a kernel cannot raise eager's ZeroDivisionError
// for a zero divisor, and INT_MIN % -1 traps (SIGFPE) in C++ where ATen returns 0.
const std::set<std::string> kFloatOnly = {
    "fmod", "remainder", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc",
    "exp", "exp2", "expm1", "floor", "lgamma", "log", "log10", "log1p", "log2", "reciprocal",
    "round", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "sigmoid", "atan2",
    "copysign", "pow", "div"};

bool dtypeOk(DType d) { return !isComplex(d); }

/// The dims of `shape` whose length is not 1, in order.
std::vector<int> nonUnitDims(const Shape& shape) {
  std::vector<int> out;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) out.push_back(static_cast<int>(d));
  return out;
}

/// Whether two shapes differ only by length-1 dims (the same non-1 lengths, in the same order).
/// Then a tensor of one shape is a relabeling of the dims of the other: a contiguous tensor has
/// the same layout in both, and a reshape between them moves no element.
bool sameUpToUnitDims(const Shape& a, const Shape& b) {
  std::vector<int> da = nonUnitDims(a), db = nonUnitDims(b);
  if (da.size() != db.size()) return false;
  for (size_t k = 0; k < da.size(); ++k)
    if (a[da[k]] != b[db[k]]) return false;
  return true;
}

/// For shapes that differ only by length-1 dims: for each dim of `from`, the dim of `to` it is
/// (the k-th non-1 dim of one is the k-th non-1 dim of the other; length-1 dims are -1).
std::vector<int> unitDimMap(const Shape& from, const Shape& to) {
  std::vector<int> f = nonUnitDims(from), t = nonUnitDims(to), out(from.size(), -1);
  for (size_t k = 0; k < f.size(); ++k) out[f[k]] = t[k];
  return out;
}

/// A fusible reduction over a length-1 dim (sum, amax or amin; var is 0/0 there): it is that
/// dim's one element, so it lowers as a reshape dropping the dim, with no reduction phase.
bool isUnitReduction(const BoundSymbol& b) {
  const std::string& n = b.sym->name;
  if (n != "sum" && n != "amax" && n != "amin") return false;
  const Shape& in = b.args[0].tensor().shape;
  // Over the last dim alone: a column sum of an [M, 1] input (dims (0,)) also has a last dim of
  // length 1, and read as a unit reduction it was the first row only (fuzzer seed 12434)
  std::vector<int64_t> dims = b.args[1].toInts();
  return !in.empty() && in.back() == 1 && dims.size() == 1 &&
         dims[0] == static_cast<int64_t>(in.size()) - 1;
}

}  // namespace

bool isColumnSum(const BoundSymbol& b) {
  // A float sum over every dimension but the last: the bias-gradient pattern.
  if (!b.sym->isPrim() || b.sym->name != "sum") return false;
  const TensorProxy& a = b.args[0].tensor();
  if (a.dtype != DType::Float32 && a.dtype != DType::Float64) return false;
  std::vector<int64_t> dims = b.args[1].toInts();
  if (a.ndim() < 2 || static_cast<int64_t>(dims.size()) != a.ndim() - 1 || a.shape.back() <= 0) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

bool isFusiblePrim(const BoundSymbol& b) {
  if (!b.sym->isPrim()) return false;
  const std::string& n = b.sym->name;
  for (const TensorPtr& t : b.inputTensors())
    if (!dtypeOk(t->dtype)) return false;
  for (const TensorPtr& t : b.outputTensors())
    if (!dtypeOk(t->dtype)) return false;
  for (const Value& a : b.args)
    if (a.isComplex()) return false;
  std::vector<TensorPtr> ins = b.inputTensors();
  DType inDt = ins.empty() ? DType::Float32 : ins[0]->dtype;
  if (kUnary.count(n) || kBinary.count(n)) {
    if (kFloatOnly.count(n) && !isFloating(inDt)) return false;
    return true;
  }
  if (n == "where" || n == "convert_element_type" || n == "broadcast_in_dim") return true;
  if (isColumnSum(b)) return true;
  if (n == "reshape" || n == "squeeze") {
    // Only when length-1 dims are inserted or removed ([M] -> [M, 1], [M, 1] -> [M]): that
    // relabels dims, which the lowering expresses by remapping them like broadcast_in_dim. Any
    // other reshape moves elements between dims.
    return sameUpToUnitDims(b.args[0].tensor().shape, b.outputTensors()[0]->shape);
  }
  if (n == "sum" || n == "amax" || n == "amin" || n == "var") {
    // Row reductions over the last dimension only.
    const TensorProxy& a = b.args[0].tensor();
    std::vector<int64_t> dims = b.args[1].toInts();
    // Block reductions shuffle 32- and 64-bit values only; ltorch computes 16-bit floats in f32.
    if (a.dtype != DType::Float32 && a.dtype != DType::Float64 &&
        (n == "sum" || n == "var" || (a.dtype != DType::Int32 && a.dtype != DType::Int64)))
      return false;
    return a.ndim() >= 1 && dims.size() == 1 && dims[0] == a.ndim() - 1 && a.shape.back() > 0;
  }
  return false;
}

std::string registerType(DType d, bool cuda) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8_t";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::BFloat16:
    case DType::Float16:
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    default: throw InternalError("codegen: no register type for " + std::string(dtypeName(d)));
  }
}

std::string storageType(DType d, bool cuda) {
  if (d == DType::BFloat16 || d == DType::Float16) return "uint16_t";
  return registerType(d, cuda);
}

namespace {

/// Lowers tensors to nodes, memoized on (tensor, dimension map from iteration dims).
class Lowering {
 public:
  Lowering(KernelProgram& prog, const std::vector<BoundSymbol>& prims,
           const std::vector<TensorPtr>& inputs)
      : prog_(prog) {
    for (const BoundSymbol& b : prims)
      for (const TensorPtr& t : b.outputTensors()) producer_[t.get()] = &b;
    for (size_t i = 0; i < inputs.size(); ++i) inputIndex_[inputs[i].get()] = static_cast<int>(i);
  }

  /// The node computing tensor t at iteration index, where dimMap[d] is the dim of t read by
  /// iteration dim d (-1: not read).
  int lower(const TensorPtr& t, const std::vector<int>& dimMap) {
    auto key = std::make_pair(t.get(), dimMap);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int id = build(t, dimMap);
    memo_[key] = id;
    return id;
  }

  /// Whether region output t is a column sum, possibly followed by dtype conversions: then the
  /// summed tensor, the sum's dtype and the conversions after it.
  bool columnSource(const TensorPtr& t, TensorPtr& summed, DType& acc, std::vector<DType>& epilogue) const {
    std::vector<DType> converts;
    const TensorProxy* cur = t.get();
    for (;;) {
      auto pr = producer_.find(cur);
      if (pr == producer_.end()) return false;
      const BoundSymbol& b = *pr->second;
      if (b.sym->name == "convert_element_type") {
        converts.insert(converts.begin(), cur->dtype);
        cur = b.args[0].toTensor().get();
        continue;
      }
      if (!isColumnSum(b) || b.args[0].tensor().shape != prog_.iterShape) return false;
      summed = b.args[0].toTensor();
      acc = cur->dtype;
      epilogue = converts;
      return true;
    }
  }

  std::string whyNot;

 private:
  int add(KNode n) {
    prog_.nodes.push_back(std::move(n));
    return static_cast<int>(prog_.nodes.size()) - 1;
  }

  int constant(const Value& v, DType dt) {
    KNode n;
    n.kind = KNode::Kind::Const;
    n.dtype = dt;
    if (v.isBool()) {
      n.literal = v.toBool() ? "true" : "false";
    } else if (v.isInt() && !isFloating(dt)) {
      n.literal = std::to_string(v.toInt());
    } else {
      double x = v.toDouble();
      if (std::isinf(x)) n.literal = x > 0 ? "THUNDER_INF" : "(-THUNDER_INF)";
      else if (std::isnan(x)) n.literal = "THUNDER_NAN";
      else {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", x);
        n.literal = buf;
        if (n.literal.find_first_of(".eE") == std::string::npos) n.literal += ".0";
      }
    }
    return add(std::move(n));
  }

  int build(const TensorPtr& t, const std::vector<int>& dimMap) {
    auto in = inputIndex_.find(t.get());
    if (in != inputIndex_.end()) {
      KInput k{t, dimMap};
      for (int& d : k.dimMap)
        if (d >= 0 && t->shape[d] == 1) d = -1;  // a length-1 dim broadcasts
      int idx = -1;
      for (size_t i = 0; i < prog_.inputs.size(); ++i)
        if (prog_.inputs[i].tensor == t && prog_.inputs[i].dimMap == k.dimMap) idx = static_cast<int>(i);
      if (idx < 0) {
        prog_.inputs.push_back(k);
        idx = static_cast<int>(prog_.inputs.size()) - 1;
      }
      KNode n;
      n.kind = KNode::Kind::Load;
      n.input = idx;
      n.dtype = t->dtype;
      return add(std::move(n));
    }
    auto pr = producer_.find(t.get());
    THUNDER_INTERNAL(pr != producer_.end(), "fusion: ", t->name, " has no producer in the region");
    const BoundSymbol& b = *pr->second;
    const std::string& op = b.sym->name;
    if (op == "broadcast_in_dim") {
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int64_t> bdims = b.args[2].toInts();
      std::vector<int> inner(dimMap.size(), -1);
      for (size_t d = 0; d < dimMap.size(); ++d) {
        if (dimMap[d] < 0) continue;
        for (size_t i = 0; i < bdims.size(); ++i)
          if (bdims[i] == dimMap[d] && src->shape[i] != 1) inner[d] = static_cast<int>(i);
      }
      return lower(src, inner);
    }
    if (op == "reshape" || op == "squeeze") {
      // Only length-1 dims differ (isFusiblePrim): the k-th non-1 dim of t is the k-th non-1 dim
      // of the source, and t's length-1 dims read nothing.
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int> toSrc = unitDimMap(t->shape, src->shape);
      std::vector<int> inner(dimMap.size(), -1);
      for (size_t d = 0; d < dimMap.size(); ++d)
        if (dimMap[d] >= 0) inner[d] = toSrc[dimMap[d]];
      return lower(src, inner);
    }
    if (isUnitReduction(b)) {
      // t is the input without its last dim, of length 1: t's dims are the input's first dims.
      int x = lower(b.args[0].toTensor(), dimMap);
      // A float sum adds its element to 0.0, as ATen's does: -0.0 sums to +0.0 (the element
      // alone kept -0.0: rsqrt of a zero loss was inf where eager's is -inf, fuzzer seed 20653).
      DType dt = b.args[0].tensor().dtype;
      if (x < 0 || op != "sum" || !isFloating(dt)) return x;
      return binary("add", x, constant(Value(0.0), dt), dt);
    }
    if (isColumnSum(b)) {
      whyNot = "a column sum whose value is used inside the region";
      return -1;
    }
    if (op == "sum" || op == "amax" || op == "amin" || op == "var") {
      // Reduced values are read per row: the reduced tensor's dims are the leading iteration dims.
      // The input has the iteration shape, up to length-1 dims ([M, N] in a [1, M, N] region),
      // and its last dim is the last iteration dim, the one reduced.
      const TensorPtr& src = b.args[0].toTensor();
      int rank = static_cast<int>(prog_.iterShape.size());
      std::vector<int> srcMap(rank);  // iteration dim -> dim of src
      if (src->shape == prog_.iterShape) {
        for (int d = 0; d < rank; ++d) srcMap[d] = d;
      } else if (rank > 0 && sameUpToUnitDims(prog_.iterShape, src->shape) &&
                 unitDimMap(prog_.iterShape, src->shape).back() == src->ndim() - 1) {
        srcMap = unitDimMap(prog_.iterShape, src->shape);
      } else {
        whyNot = "a reduction whose input is not of the iteration shape";
        return -1;
      }
      // The value of a row is read in that row only: each iteration dim reads the dim of the
      // reduced tensor it reads of the input, the last none (length-1 dims do not matter). A
      // broadcast that moves the reduced dims, as in x.sum(-1)[None, :], reads across rows.
      for (int d = 0; d < rank; ++d) {
        if (prog_.iterShape[d] != 1 && dimMap[d] != (d + 1 < rank ? srcMap[d] : -1)) {
          whyNot = "a row reduction read across rows";
          return -1;
        }
      }
      int x = lower(src, srcMap);
      if (x < 0) return -1;
      if (op != "var") return reduce(op, x, src->dtype);
      // var = sum((x - mean)^2) / (N - correction), mean = sum(x) / N
      int n = rowLength(src->dtype);
      int mean = binary("div", reduce("sum", x, src->dtype), n, src->dtype);
      int d = binary("sub", x, mean, src->dtype);
      int ss = reduce("sum", binary("mul", d, d, src->dtype), src->dtype);
      int denom = binary("sub", n, constant(Value(b.args[2].toDouble()), src->dtype), src->dtype);
      return binary("div", ss, denom, src->dtype);
    }
    KNode n;
    n.kind = KNode::Kind::Op;
    n.op = op;
    n.dtype = t->dtype;
    DType peer = t->dtype;
    for (const Value& a : b.args)
      if (a.isTensor()) peer = a.tensor().dtype;
    if (op == "convert_element_type") {
      int x = lower(b.args[0].toTensor(), dimMap);
      if (x < 0) return -1;
      n.operands = {x};
    } else {
      // Elementwise: operands have t's shape, so they are read through the same map.
      for (size_t i = 0; i < b.args.size(); ++i) {
        const Value& a = b.args[i];
        int x;
        if (a.isTensor()) {
          x = lower(a.toTensor(), dimMap);
        } else {
          // where's branches are of its output dtype (its only tensor may be the predicate).
          DType cdt = op == "where" ? (i == 0 ? DType::Bool : t->dtype) : peer;
          x = constant(a, cdt);
        }
        if (x < 0) return -1;
        n.operands.push_back(x);
      }
    }
    return finish(std::move(n));
  }

  int finish(KNode n) {
    for (int o : n.operands) n.phase = std::max(n.phase, prog_.nodes[o].phase);
    return add(std::move(n));
  }

  int binary(const char* op, int a, int b, DType dt) {
    KNode n;
    n.op = op;
    n.dtype = dt;
    n.operands = {a, b};
    return finish(std::move(n));
  }

  int reduce(const std::string& op, int x, DType dt) {
    KNode n;
    n.kind = KNode::Kind::Reduce;
    n.op = op;
    n.dtype = dt;
    n.operands = {x};
    n.phase = prog_.nodes[x].phase + 1;
    prog_.numPhases = std::max(prog_.numPhases, n.phase);
    return add(std::move(n));
  }

  int rowLength(DType dt) {
    KNode n;
    n.kind = KNode::Kind::Const;
    n.dtype = dt;
    n.literal = "THUNDER_ROW_LEN";
    return add(std::move(n));
  }

  KernelProgram& prog_;
  std::map<const TensorProxy*, const BoundSymbol*> producer_;
  std::map<const TensorProxy*, int> inputIndex_;
  std::map<std::pair<const TensorProxy*, std::vector<int>>, int> memo_;
};

}  // namespace

bool lowerRegion(const std::string& name, const std::vector<BoundSymbol>& prims,
                 const std::vector<TensorPtr>& inputs, const std::vector<TensorPtr>& outputs,
                 KernelProgram& out, std::string& whyNot) {
  out = KernelProgram{};
  out.name = name;
  // The iteration shape: the largest shape among the values the region computes or reduces,
  // first by rank, then by number of elements (a region that starts with per-row [M, 1] values
  // still iterates over [M, N]). Ties keep the first shape, except that a reduction's input wins.
  auto larger = [&](const Shape& s, bool winTies) {
    int64_t r = static_cast<int64_t>(s.size()), cur = static_cast<int64_t>(out.iterShape.size());
    if (r != cur) return r > cur;
    int64_t n = 1, m = 1;
    for (int64_t x : s) n *= x;
    for (int64_t x : out.iterShape) m *= x;
    return winTies ? n >= m : n > m;
  };
  bool reduces = false;
  for (const BoundSymbol& b : prims) {
    for (const TensorPtr& t : b.outputTensors())
      if (larger(t->shape, false)) out.iterShape = t->shape;
    if (b.sym->hasTag(kReductionOp)) {
      reduces |= !isUnitReduction(b);
      const TensorProxy& a = b.args[0].tensor();
      if (larger(a.shape, true)) out.iterShape = a.shape;
    }
  }
  Shape reduced(out.iterShape.begin(), out.iterShape.empty() ? out.iterShape.end() : out.iterShape.end() - 1);
  Shape keepdim = reduced;
  if (!out.iterShape.empty()) keepdim.push_back(1);
  Lowering low(out, prims, inputs);
  int rank = static_cast<int>(out.iterShape.size());
  for (const TensorPtr& t : outputs) {
    // map[d]: the dim of t that iteration dim d stores to (-1: none). Outputs are contiguous and
    // stored in iteration order, so a shape that differs from the iteration shape (or the reduced
    // shape) only by length-1 dims has the same layout.
    std::vector<int> map(rank, -1);
    TensorPtr summed;
    KOutput col{t, -1, false, true};
    if (low.columnSource(t, summed, col.accDtype, col.epilogue)) {
      // A column sum: the kernel accumulates the full-size value per column.
      for (int d = 0; d < rank; ++d) map[d] = d;
      col.node = low.lower(summed, map);
      if (col.node < 0) {
        whyNot = low.whyNot;
        return false;
      }
      out.outputs.push_back(col);
      continue;
    }
    bool isReduced;
    if (t->shape == out.iterShape) {
      for (int d = 0; d < rank; ++d) map[d] = d;
      isReduced = false;
    } else if (rank > 0 && reduces && (t->shape == reduced || t->shape == keepdim)) {
      // One value per row: the reduced shape, or it with a trailing 1 (keepdim).
      for (int d = 0; d + 1 < rank; ++d) map[d] = d;
      isReduced = true;
    } else if (sameUpToUnitDims(t->shape, out.iterShape)) {
      map = unitDimMap(out.iterShape, t->shape);
      isReduced = false;
    } else if (rank > 0 && reduces && sameUpToUnitDims(t->shape, reduced)) {
      std::vector<int> rows = unitDimMap(reduced, t->shape);
      std::copy(rows.begin(), rows.end(), map.begin());
      isReduced = true;
    } else {
      whyNot = "output " + t->name + " has shape " + t->typeString() + ", not the iteration shape";
      return false;
    }
    int node = low.lower(t, map);
    if (node < 0) {
      whyNot = low.whyNot;
      return false;
    }
    out.outputs.push_back({t, node, isReduced});
  }
  for (const KOutput& o : out.outputs)
    if (o.reduced && !out.hasReduction()) {
      whyNot = "a reduced-shape output without a reduction";
      return false;
    }
  return true;
}

}  // namespace thunder::codegen
