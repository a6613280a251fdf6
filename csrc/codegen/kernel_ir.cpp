#include "codegen/kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_set>

#include "codegen/python_printer.h"
#include "ir/error.h"

namespace thunder::codegen {
namespace {

/// THUNDER_FUSER_FLOAT32_CHAINS: 0 never computes chains in float32, 1 on every device, unset on
/// CUDA (read at each lowering, so a test can set it between two jits).
bool float32Chains(DeviceType device) {
  const char* e = std::getenv("THUNDER_FUSER_FLOAT32_CHAINS");
  if (e == nullptr || *e == '\0') return device == DeviceType::CUDA;
  return *e != '0';
}

/// Ops whose result moves continuously with their float operands (operand `i` of `n`): where
/// they read a value rounded to 16 bits they may read it unrounded. Comparisons, rounding to
/// integers, remainders and casts to integers are left reading eager's rounded values (their
/// results jump at the rounding's boundaries).
bool continuousIn(const KNode& n, size_t i) {
  static const std::set<std::string> ops = {
      "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "erf", "erfc", "erfinv",
      "exp", "exp2", "expm1", "lgamma", "digamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
      "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "sigmoid", "add", "sub", "mul", "div", "atan2",
      "maximum", "minimum", "pow", "copysign"};
  if (n.kind == KNode::Kind::Reduce) return n.op == "sum" || n.op == "amax" || n.op == "amin";
  if (n.kind != KNode::Kind::Op) return false;
  if (n.op == "where") return i > 0;
  if (n.op == "convert_element_type") return n.dtype == DType::Float32 || n.dtype == DType::Float64;
  return ops.count(n.op) > 0;
}

/// A conversion to bfloat16 or float16 (held in float registers: a rounding).
bool roundsTo16Bits(const KNode& k) {
  return k.kind == KNode::Kind::Op && k.op == "convert_element_type" &&
         (k.dtype == DType::BFloat16 || k.dtype == DType::Float16);
}

/// CUDA kernels compute a chain of 16-bit ops in float32: an operand that is a float32 value
/// rounded to bfloat16 or float16 and converted back (every 16-bit op's decomposition: upcast,
/// compute, round) is read unrounded where its reader is continuous in it, as inductor and
/// nvFuser compute. The rounds are conversion instructions at a quarter of the ALU's rate: GPT-2's
/// tanh GELU, eight rounds per element, ran at twice the time of torch.compile's kernel. The
/// results are at least as close to a float64 run as eager's (one rounding instead of several);
/// stored values are rounded as before. A rounding the program asked for (`x.to(torch.bfloat16)`,
/// KNode::asked) is kept: dropping it changes what the program computes (inductor treats a lost
/// explicit cast as a correctness bug, pytorch#179561).
void readUnrounded(KernelProgram& p) {
  // The rounding node of x where x widens to float32 a float32 value rounded to 16 bits; else -1.
  auto roundingOf = [&](int x) -> int {
    const KNode& back = p.nodes[x];
    if (back.kind != KNode::Kind::Op || back.op != "convert_element_type" || back.dtype != DType::Float32) return -1;
    const int r = back.operands[0];
    return roundsTo16Bits(p.nodes[r]) && p.nodes[p.nodes[r].operands[0]].dtype == DType::Float32 ? r : -1;
  };
  // Whether node v widens a value of dtype d (rounding it to d again changes nothing).
  auto widenedFrom = [&](int v, DType d) {
    const KNode& w = p.nodes[v];
    return w.kind == KNode::Kind::Op && w.op == "convert_element_type" && p.nodes[w.operands[0]].dtype == d;
  };
  for (KNode& n : p.nodes)
    for (int& x : n.operands) {
      const int r = roundingOf(x);
      if (r < 0) continue;
      const KNode& rounding = p.nodes[r];
      const int v = rounding.operands[0];
      const size_t i = static_cast<size_t>(&x - n.operands.data());
      // A continuous reader reads the value unrounded, unless the program asked for the rounding
      // and it changes something. A rounding to the same dtype reads the value before both: the
      // same bits (a gradient converted back and forth by autodiff).
      if (continuousIn(n, i) ? !rounding.asked || widenedFrom(v, rounding.dtype)
                             : roundsTo16Bits(n) && n.dtype == rounding.dtype)
        x = v;
    }
}

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

// FP8 tensors run in ATen: PyTorch's conversion of a value beyond an e4m3fn's range differs by
// version (NaN in older ones, the largest finite value in 2.13), so a fused one would not match.
bool dtypeOk(DType d) { return !isComplex(d) && !isFloat8(d); }

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

bool isUnrolledSum(const BoundSymbol& b) {
  if (!b.sym->isPrim() || b.sym->name != "sum" || b.args.size() < 2 || !b.args[0].isTensor()) return false;
  const TensorProxy& a = b.args[0].tensor();
  if (a.dtype != DType::Float32 && a.dtype != DType::Float64) return false;
  std::vector<int64_t> dims = b.args[1].toInts();
  int64_t extent = 1, rank = a.ndim();
  for (int64_t d : dims) {
    if (d < 0 || d >= rank - 1) return false;  // the last dim: a row reduction
    extent *= a.shape[d];
  }
  for (int64_t x : b.outputTensors()[0]->shape)
    if (x == 0) return false;
  return !dims.empty() && extent >= 2 && extent <= kUnrolledSum;
}

bool isColumnSum(const BoundSymbol& b) {
  // A float sum over every dimension but the last: the bias-gradient pattern.
  if (!b.sym->isPrim() || b.sym->name != "sum") return false;
  const TensorProxy& a = b.args[0].tensor();
  if (a.dtype != DType::Float32 && a.dtype != DType::Float64) return false;
  std::vector<int64_t> dims = b.args[1].toInts();
  if (a.ndim() < 2 || static_cast<int64_t>(dims.size()) != a.ndim() - 1 || a.shape.back() <= 0) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return !isUnrolledSum(b);  // a few rows: additions of loads, no partial sums
}

bool isPermutedColumnSum(const BoundSymbol& b) {
  if (!b.sym->isPrim() || b.sym->name != "sum" || b.args.size() < 2 || !b.args[0].isTensor()) return false;
  const TensorProxy& a = b.args[0].tensor();
  if ((a.dtype != DType::Float32 && a.dtype != DType::Float64) || a.ndim() != 4) return false;
  for (int64_t x : a.shape)
    if (x <= 0) return false;
  std::vector<int64_t> dims = b.args[1].toInts();
  std::sort(dims.begin(), dims.end());
  return dims == std::vector<int64_t>{0, 2, 3};
}

bool isTerminalSum(const BoundSymbol& b) { return isColumnSum(b) || isPermutedColumnSum(b); }

bool isFusibleGather(const BoundSymbol& b) {
  // Indices of up to 64 bits; the source is read where it lies (a region input: Lowering::gather).
  const std::string& n = b.sym->name;
  if (!b.sym->isPrim() || (n != "take" && n != "embedding")) return false;
  const TensorProxy& src = n == "take" ? b.args[0].tensor() : b.args[1].tensor();
  const TensorProxy& index = n == "take" ? b.args[1].tensor() : b.args[0].tensor();
  return dtypeOk(src.dtype) && src.ndim() > 0 && src.numel() > 0 &&
         (index.dtype == DType::Int64 || index.dtype == DType::Int32);
}

bool isFusiblePrim(const BoundSymbol& b) {
  if (!b.sym->isPrim()) return false;
  const std::string& n = b.sym->name;
  // FP8 tensors enter and leave kernels through conversions only (`(x * s).clamp(-m, m).to(f8)`,
  // `x8.float()`), as in eager, where no other op computes on them. Data movement of FP8 tensors
  // (views, copies into a layout) stays with ATen.
  bool conversion = n == "convert_element_type";
  auto ok = [&](const TensorPtr& t) { return dtypeOk(t->dtype) || (conversion && isFloat8(t->dtype)); };
  const std::vector<TensorPtr> ins = b.inputTensors(), outs = b.outputTensors();
  for (const TensorPtr& t : ins)
    if (!ok(t)) return false;
  for (const TensorPtr& t : outs)
    if (!ok(t)) return false;
  for (const Value& a : b.args)
    if (a.isComplex()) return false;
  // A kernel reads every operand on its own device: a 0-dim CPU tensor meeting CUDA tensors
  // (`cuda_sum * torch.tensor(0.5)`, which PyTorch allows) stays with ATen, which reads it on the
  // host. A CUDA kernel given its pointer faulted.
  if (!outs.empty())
    for (const TensorPtr& t : ins)
      if (t->device != outs[0]->device) return false;
  DType inDt = ins.empty() ? DType::Float32 : ins[0]->dtype;
  if (kUnary.count(n) || kBinary.count(n)) {
    if (kFloatOnly.count(n) && !isFloating(inDt)) return false;
    return true;
  }
  if (n == "where" || n == "convert_element_type" || n == "broadcast_in_dim") return true;
  if (n == "take" || n == "embedding") {
    // Gathers, on CUDA only: an out-of-range index stops a CUDA kernel as eager's device-side
    // assert does, where a C++ kernel has no way to raise eager's IndexError.
    return b.args[n == "take" ? 0 : 1].tensor().device.type == DeviceType::CUDA && isFusibleGather(b);
  }
  // Index remapping, read inside the kernel (see KInput): slices of unit step, permutes, cats,
  // and pads without interior padding.
  // A copy into a layout (`contiguous`) keeps every value: inside a kernel it reads through.
  if (n == "transpose" || n == "cat" || n == "stride_order") return true;
  if (n == "slice") {
    if (b.args.size() < 4 || b.args[3].isNone()) return true;
    for (int64_t st : b.args[3].toInts())
      if (st != 1) return false;
    return true;
  }
  if (n == "pad") {
    if (!b.args[1].isNumber() || b.args[1].isComplex()) return false;
    for (const Value& c : b.args[2].items())
      if (c.toInts()[2] != 0) return false;
    return true;
  }
  if (isColumnSum(b) || isUnrolledSum(b)) return true;
  if (isPermutedColumnSum(b)) return b.args[0].tensor().device.type == DeviceType::CUDA;
  if (n == "squeeze") return sameUpToUnitDims(b.args[0].tensor().shape, b.outputTensors()[0]->shape);
  if (n == "reshape") {
    // Inserting or removing length-1 dims relabels dims. Merging and splitting dims reads the
    // source through a finer iteration space (see Lowering::reshape); empty tensors stay out.
    for (int64_t x : b.args[0].tensor().shape)
      if (x == 0) return false;
    return true;
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
    case DType::Float8E4M3FN:
    case DType::Float8E5M2:
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    default: throw InternalError("codegen: no register type for " + std::string(dtypeName(d)));
  }
}

std::string storageType(DType d, bool cuda) {
  if (d == DType::BFloat16 || d == DType::Float16) return "uint16_t";
  if (isFloat8(d)) return "uint8_t";
  return registerType(d, cuda);
}

namespace {

/// A Load node of kernel input `k`, which is added where no equal one is there yet; a gather's
/// index node comes before the load.
int addLoad(KernelProgram& prog, const KInput& k) {
  int idx = -1;
  for (size_t i = 0; i < prog.inputs.size() && idx < 0; ++i) {
    const KInput& o = prog.inputs[i];
    if (o.tensor == k.tensor && o.dimMap == k.dimMap && o.coef == k.coef && o.offset == k.offset && o.guard == k.guard &&
        o.gatherDim == k.gatherDim && o.gatherNode == k.gatherNode)
      idx = static_cast<int>(i);
  }
  if (idx < 0) {
    prog.inputs.push_back(k);
    idx = static_cast<int>(prog.inputs.size()) - 1;
  }
  KNode n;
  n.kind = KNode::Kind::Load;
  n.input = idx;
  n.dtype = k.tensor->dtype;
  if (k.gathers()) n.operands = {k.gatherNode};
  prog.nodes.push_back(std::move(n));
  return static_cast<int>(prog.nodes.size()) - 1;
}

/// If `shape` merges consecutive dims of `iter` (length-1 dims aside), the dims of `shape` each
/// iteration dim indexes and with which coefficient (a contiguous tensor of `shape` has the
/// iteration order's layout).
bool mergeMap(const Shape& iter, const Shape& shape, std::vector<int>& dimMap, std::vector<int64_t>& coef) {
  int rank = static_cast<int>(iter.size());
  for (int64_t x : iter)
    if (x == 0) return false;  // empty: nothing to store, and no sizes to divide by
  dimMap.assign(rank, -1);
  coef.assign(rank, 1);
  int j = static_cast<int>(shape.size()) - 1;
  auto skipUnit = [&] {
    while (j >= 0 && shape[j] == 1) --j;
  };
  skipUnit();
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (iter[d] == 1) continue;
    if (j < 0 || shape[j] % (acc * iter[d]) != 0) return false;
    dimMap[d] = j;
    coef[d] = acc;
    acc *= iter[d];
    if (acc == shape[j]) {
      --j;
      acc = 1;
      skipUnit();
    }
  }
  return j < 0 && acc == 1;
}

/// How a tensor is read at an iteration index (see KInput): its index along dim j is the sum of
/// coef[d] * i_d over the iteration dims d with dimMap[d] == j, plus offset[j].
struct View {
  std::vector<int> dimMap;
  std::vector<int64_t> coef;
  std::vector<int64_t> offset;
  /// Per iteration dim, the range [lo, hi) every load below must stay in (empty: no limit). Set
  /// where a shifted dim is merged with others, so its own range can no longer be read off it.
  std::vector<std::pair<int64_t, int64_t>> guard;
  bool operator<(const View& o) const {
    return std::tie(dimMap, coef, offset, guard) < std::tie(o.dimMap, o.coef, o.offset, o.guard);
  }
  /// A plain relabeling: coefficients 1, no offsets.
  static View of(const std::vector<int>& dimMap, size_t rank) {
    return View{dimMap, std::vector<int64_t>(dimMap.size(), 1), std::vector<int64_t>(rank, 0), {}};
  }
  /// The same coefficients and guards, new dims: none read, no offsets, for a tensor of `rank` dims.
  View remapped(size_t rank) const {
    return View{std::vector<int>(dimMap.size(), -1), coef, std::vector<int64_t>(rank, 0), guard};
  }
  bool plain() const {
    if (!guard.empty()) return false;
    for (int64_t c : coef)
      if (c != 1) return false;
    for (int64_t o : offset)
      if (o != 0) return false;
    return true;
  }
  /// The iteration dims that read dim j.
  std::vector<int> readers(int j) const {
    std::vector<int> out;
    for (size_t d = 0; d < dimMap.size(); ++d)
      if (dimMap[d] == j) out.push_back(static_cast<int>(d));
    return out;
  }
};

/// Lowers tensors to nodes, memoized on (tensor, view from the iteration space).
class Lowering {
 public:
  Lowering(KernelProgram& prog, const std::vector<BoundSymbol>& prims,
           const std::vector<TensorPtr>& inputs, const std::unordered_set<const TensorProxy*>* casts)
      : prog_(prog), casts_(casts) {
    for (const BoundSymbol& b : prims)
      for (const TensorPtr& t : b.outputTensors()) producer_[t.get()] = &b;
    for (size_t i = 0; i < inputs.size(); ++i) inputIndex_[inputs[i].get()] = static_cast<int>(i);
  }

  /// The node computing tensor t at iteration index, where dimMap[d] is the dim of t read by
  /// iteration dim d (-1: not read).
  int lower(const TensorPtr& t, const std::vector<int>& dimMap) { return lower(t, View::of(dimMap, t->shape.size())); }

  int lower(const TensorPtr& t, const View& v) {
    auto key = std::make_pair(t.get(), v);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int id = build(t, v);
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
      if (prog_.order.empty() ? !isColumnSum(b) || b.args[0].tensor().shape != prog_.iterShape
                              : !isPermutedColumnSum(b) || b.args[0].tensor().shape != logicalShape())
        return false;
      summed = b.args[0].toTensor();
      acc = cur->dtype;
      epilogue = converts;
      return true;
    }
  }

  /// The shape of the full-size values: the iteration shape in their own dim order.
  Shape logicalShape() const {
    if (prog_.order.empty()) return prog_.iterShape;
    Shape s(prog_.iterShape.size());
    for (size_t d = 0; d < s.size(); ++d) s[prog_.order[d]] = prog_.iterShape[d];
    return s;
  }

  std::string whyNot;
  /// Set when a reshape needs iteration dim `first` split into [size / second, second].
  std::optional<std::pair<int, int64_t>> split;

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

  /// take(src, index, dim) (index_select) or embedding(index, src): the source read at the index
  /// the kernel loads. t's dims are, for take, src's with dim `dim` taken at the index's one
  /// position; for embedding, the index's dims then src's last. The source must be a region input.
  int gather(const TensorPtr& t, const BoundSymbol& b, const View& view) {
    const bool take = b.sym->name == "take";
    const TensorPtr& src = take ? b.args[0].toTensor() : b.args[1].toTensor();
    const TensorPtr& index = take ? b.args[1].toTensor() : b.args[0].toTensor();
    if (!inputIndex_.count(src.get())) {
      whyNot = "a gather from a value computed in the region";
      return -1;
    }
    const int srcRank = static_cast<int>(src->shape.size()), idxRank = static_cast<int>(index->shape.size());
    int dim = take ? static_cast<int>(b.args[2].toInt()) : 0;
    if (take && dim < 0) dim += srcRank;
    // The index, read where t's index dims are: t's dim `dim` (take), its first idxRank dims (embedding).
    View iv = view.remapped(idxRank);
    View sv = view.remapped(srcRank);
    for (size_t d = 0; d < view.dimMap.size(); ++d) {
      int j = view.dimMap[d];
      if (j < 0) continue;
      if (take ? j == dim : j < idxRank) {
        if (idxRank) iv.dimMap[d] = take ? 0 : j;
      } else {
        sv.dimMap[d] = take ? j : 1;
      }
    }
    for (int j = 0; j < static_cast<int>(t->shape.size()); ++j) {
      if (take ? j == dim : j < idxRank) {
        if (idxRank) iv.offset[take ? 0 : j] = view.offset[j];
      } else {
        sv.offset[take ? j : 1] = view.offset[j];
      }
    }
    int ix = lower(index, iv);
    if (ix < 0) return -1;
    return load(src, sv, dim, ix);
  }

  /// An InRange node: lo <= i_dim < hi.
  int inRange(int dim, int64_t lo, int64_t hi) {
    KNode n;
    n.kind = KNode::Kind::InRange;
    n.dtype = DType::Bool;
    n.dim = dim;
    n.lo = lo;
    n.hi = hi;
    return add(std::move(n));
  }

  /// Limits the loads below a view to [lo, hi) of iteration dim d (a cat's piece, a pad's
  /// source): where the dim is dropped on the way to an input (a sum over it, a broadcast of a
  /// length-1 dim) its range could no longer be read off the input's offsets, and every element
  /// would load the piece only to discard it.
  void narrow(View& v, int d, int64_t lo, int64_t hi) const {
    if (lo <= 0 && hi >= prog_.iterShape[d]) return;
    if (v.guard.empty())
      for (int64_t e : prog_.iterShape) v.guard.push_back({0, e});
    auto& g = v.guard[d];
    g.first = std::max(g.first, lo);
    g.second = std::max(g.first, std::min(g.second, hi));
  }

  /// The iteration dim that alone reads dim j of a view with coefficient 1: -2 when no dim reads
  /// it (the index is the constant offset[j]), -1 when dims were merged into it.
  static int soleReader(const View& v, int j) {
    std::vector<int> r = v.readers(j);
    if (r.empty()) return -2;
    return r.size() == 1 && v.coef[r[0]] == 1 ? r[0] : -1;
  }

  /// A load of region input t at a view; with `gatherDim` >= 0, that dim of t is read at the
  /// index node `gatherNode` computes (the view reads it nowhere).
  int load(const TensorPtr& t, const View& view, int gatherDim = -1, int gatherNode = -1) {
    const std::vector<int>& dimMap = view.dimMap;
    {
      KInput k{t, dimMap, view.coef, view.offset, {}};
      k.gatherDim = gatherDim;
      k.gatherNode = gatherNode;
      // Where an iteration dim reaches outside the input (a cat's piece, a pad's source), the load
      // is guarded to the range it is inside.
      int rank = static_cast<int>(prog_.iterShape.size());
      bool narrower = false;
      std::vector<std::pair<int64_t, int64_t>> guard(rank);
      for (int d = 0; d < rank; ++d) {
        guard[d] = {0, prog_.iterShape[d]};
        if (!view.guard.empty() && (view.guard[d].first > 0 || view.guard[d].second < prog_.iterShape[d])) {
          guard[d] = view.guard[d];
          narrower = true;
        }
        // Only where d alone reads dim j: where several iteration dims were merged into it (a
        // reshape), the offset belongs to none of them, and the reshape guarded the dims it came
        // from (a cat's piece of a [2, 8, 8, 32] view of a [2, 64, 32] input, offset -16 in the
        // merged dim, once read as "i2 >= 16": never true, the piece was never loaded).
        int j = dimMap[d];
        if (j < 0 || view.coef[d] != 1 || soleReader(view, j) != d) continue;
        int64_t lo = std::max<int64_t>(0, -view.offset[j]), hi = std::min(prog_.iterShape[d], t->shape[j] - view.offset[j]);
        if (lo > guard[d].first || hi < guard[d].second) {
          lo = std::max(lo, guard[d].first);
          hi = std::min(hi, guard[d].second);
          guard[d] = {lo, std::max(lo, hi)};
          narrower = true;
        }
      }
      if (narrower) k.guard = guard;
      for (size_t d = 0; d < k.dimMap.size(); ++d) {
        int j = k.dimMap[d];
        if (j >= 0 && t->shape[j] == 1) {  // a length-1 dim broadcasts (inside the guard, its index is 0)
          k.dimMap[d] = -1;
          k.offset[j] = 0;
        }
      }
      return addLoad(prog_, k);
    }
  }

  int build(const TensorPtr& t, const View& view) {
    const std::vector<int>& dimMap = view.dimMap;
    if (inputIndex_.count(t.get())) return load(t, view);
    auto pr = producer_.find(t.get());
    THUNDER_INTERNAL(pr != producer_.end(), "fusion: ", t->name, " has no producer in the region");
    const BoundSymbol& b = *pr->second;
    const std::string& op = b.sym->name;
    if (op == "broadcast_in_dim") {
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int64_t> bdims = b.args[2].toInts();
      View inner = view.remapped(src->shape.size());
      for (size_t d = 0; d < dimMap.size(); ++d) {
        if (dimMap[d] < 0) continue;
        for (size_t i = 0; i < bdims.size(); ++i)
          if (bdims[i] == dimMap[d] && src->shape[i] != 1) inner.dimMap[d] = static_cast<int>(i);
      }
      for (size_t i = 0; i < bdims.size(); ++i)
        if (src->shape[i] != 1) inner.offset[i] = view.offset[bdims[i]];
      return lower(src, inner);
    }
    if (op == "reshape" && !sameUpToUnitDims(t->shape, b.args[0].tensor().shape))
      return reshape(b.args[0].toTensor(), t, view);
    if (op == "reshape" || op == "squeeze") {
      // Only length-1 dims differ (isFusiblePrim): the k-th non-1 dim of t is the k-th non-1 dim
      // of the source, and t's length-1 dims read nothing.
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int> toSrc = unitDimMap(t->shape, src->shape);
      View inner = view.remapped(src->shape.size());
      for (size_t d = 0; d < dimMap.size(); ++d)
        if (dimMap[d] >= 0) inner.dimMap[d] = toSrc[dimMap[d]];
      for (size_t j = 0; j < toSrc.size(); ++j)
        if (toSrc[j] >= 0) inner.offset[toSrc[j]] = view.offset[j];
      return lower(src, inner);
    }
    if (isUnitReduction(b)) {
      // t is the input without its last dim, of length 1: t's dims are the input's first dims.
      View inner = view;
      inner.offset.push_back(0);
      int x = lower(b.args[0].toTensor(), inner);
      // A float sum adds its element to 0.0, as ATen's does: -0.0 sums to +0.0 (the element
      // alone kept -0.0: rsqrt of a zero loss was inf where eager's is -inf, fuzzer seed 20653).
      DType dt = b.args[0].tensor().dtype;
      if (x < 0 || op != "sum" || !isFloating(dt)) return x;
      return binary("add", x, constant(Value(0.0), dt), dt);
    }
    if (op == "take" || op == "embedding") return gather(t, b, view);
    if (op == "stride_order") return lower(b.args[0].toTensor(), view);  // the same values
    if (op == "transpose") {
      // t's dim j is the source's dim perm[j].
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int64_t> perm = b.args[1].toInts();
      View inner = view.remapped(src->shape.size());
      for (size_t d = 0; d < dimMap.size(); ++d)
        if (dimMap[d] >= 0) inner.dimMap[d] = static_cast<int>(perm[dimMap[d]]);
      for (size_t j = 0; j < perm.size(); ++j) inner.offset[perm[j]] = view.offset[j];
      return lower(src, inner);
    }
    if (op == "slice") {
      View inner = view;
      std::vector<int64_t> start = b.args[1].toInts();
      for (size_t j = 0; j < start.size(); ++j) inner.offset[j] += start[j];
      return lower(b.args[0].toTensor(), inner);
    }
    if (op == "pad") {
      // Inside the source's range the source, elsewhere the padding value.
      const TensorPtr& src = b.args[0].toTensor();
      const std::vector<Value>& cfg = b.args[2].items();
      View inner = view;
      int cond = -1;
      bool outside = false;
      for (size_t j = 0; j < cfg.size(); ++j) {
        std::vector<int64_t> c = cfg[j].toInts();
        if (c[0] == 0 && c[1] == 0) continue;
        int jj = static_cast<int>(j);
        int64_t lo = c[0] - view.offset[j], hi = lo + src->shape[j];  // i_d + offset - low in [0, n)
        inner.offset[j] -= c[0];
        int d = soleReader(view, jj);
        if (d == -1) {
          whyNot = "a pad of merged dims";
          return -1;
        }
        if (d == -2) {  // a constant index
          outside |= view.offset[j] < c[0] || view.offset[j] >= c[0] + src->shape[j];
          continue;
        }
        if (lo <= 0 && hi >= prog_.iterShape[d]) continue;
        narrow(inner, d, lo, hi);
        int r = inRange(d, lo, hi);
        cond = cond < 0 ? r : binary("logical_and", cond, r, DType::Bool);
      }
      int fill = constant(b.args[1], t->dtype);
      if (outside) return fill;
      int x = lower(src, inner);
      if (x < 0 || cond < 0) return x;
      KNode n;
      n.op = "where";
      n.dtype = t->dtype;
      n.operands = {cond, x, fill};
      return finish(std::move(n));
    }
    if (op == "cat") {
      // Piece p covers [start_p, start_p + n_p) of the cat dim: chosen by the index there.
      const std::vector<Value>& pieces = b.args[0].items();
      int64_t j = b.args[1].toInt();
      if (j < 0) j += static_cast<int64_t>(t->shape.size());
      int d = soleReader(view, static_cast<int>(j));
      if (d == -1) {
        whyNot = "a cat along merged dims";
        return -1;
      }
      struct Piece {
        int node;
        int64_t lo, hi;  // the range of i_d it covers
      };
      std::vector<Piece> chosen;
      int64_t start = 0;
      for (const Value& pv : pieces) {
        const TensorPtr& piece = pv.toTensor();
        int64_t n = piece->shape[j], lo = start - view.offset[j], hi = lo + n;
        start += n;
        if (n == 0) continue;
        if (d == -2 ? (lo > 0 || hi <= 0) : (hi <= 0 || lo >= prog_.iterShape[d])) continue;  // never read
        View inner = view;
        inner.offset[j] -= start - n;
        if (d >= 0) narrow(inner, d, lo, hi);
        int x = lower(piece, inner);
        if (x < 0) return -1;
        chosen.push_back({x, lo, hi});
      }
      // No piece is read: the iteration space is empty, and the value is never computed.
      if (chosen.empty()) return constant(Value(int64_t(0)), t->dtype);
      int acc = chosen.back().node;
      for (size_t k = chosen.size() - 1; k-- > 0;) {
        KNode n;
        n.op = "where";
        n.dtype = t->dtype;
        n.operands = {inRange(d, chosen[k].lo, chosen[k].hi), chosen[k].node, acc};
        acc = finish(std::move(n));
      }
      return acc;
    }
    if (isUnrolledSum(b)) {
      // t's dim k is the k-th dim of the source the sum keeps; each reduced dim is read at a
      // fixed index, every combination in order, added from 0 as ATen's sum does (-0.0 sums to
      // +0.0).
      const TensorPtr& src = b.args[0].toTensor();
      std::vector<int64_t> dims = b.args[1].toInts();
      std::sort(dims.begin(), dims.end());
      std::vector<int> kept;
      for (int j = 0; j < src->ndim(); ++j)
        if (!std::binary_search(dims.begin(), dims.end(), j)) kept.push_back(j);
      View inner = view.remapped(src->shape.size());
      for (size_t d = 0; d < dimMap.size(); ++d)
        if (dimMap[d] >= 0) inner.dimMap[d] = kept[dimMap[d]];
      for (size_t k = 0; k < kept.size(); ++k) inner.offset[kept[k]] = view.offset[k];
      int64_t count = 1;
      for (int64_t d : dims) count *= src->shape[d];
      int acc = constant(Value(0.0), src->dtype);
      for (int64_t i = 0; i < count; ++i) {
        int64_t rem = i;
        for (size_t k = dims.size(); k-- > 0;) {
          inner.offset[dims[k]] = rem % src->shape[dims[k]];
          rem /= src->shape[dims[k]];
        }
        int x = lower(src, inner);
        if (x < 0) return -1;
        acc = binary("add", acc, x, src->dtype);
      }
      return acc;
    }
    if (isTerminalSum(b)) {
      whyNot = "a column sum whose value is used inside the region";
      return -1;
    }
    if (op == "sum" || op == "amax" || op == "amin" || op == "var") {
      bool shifted = !view.guard.empty();
      for (int64_t o : view.offset) shifted |= o != 0;
      if (shifted) {
        whyNot = "a row reduction read through an index remapping";
        return -1;
      }
      // Reduced values are read per row: the reduced tensor's dims are the leading iteration dims.
      // The input has the iteration shape, up to length-1 dims ([M, N] in a [1, M, N] region),
      // or merges leading iteration dims (a region split finer for a reshape of its rows: the
      // tokens of [B, H * W, C] iterated as [B, H, W, C]); its last dim is the last iteration
      // dim, the one reduced.
      const TensorPtr& src = b.args[0].toTensor();
      int rank = static_cast<int>(prog_.iterShape.size());
      std::vector<int> srcMap(rank);  // iteration dim -> dim of src
      std::vector<int64_t> srcCoef(rank, 1);
      if (src->shape == prog_.iterShape) {
        for (int d = 0; d < rank; ++d) srcMap[d] = d;
      } else if (rank > 0 && sameUpToUnitDims(prog_.iterShape, src->shape) &&
                 unitDimMap(prog_.iterShape, src->shape).back() == src->ndim() - 1) {
        srcMap = unitDimMap(prog_.iterShape, src->shape);
      } else if (!(rank > 0 && !src->shape.empty() && src->shape.back() == prog_.iterShape.back() &&
                   mergeMap(prog_.iterShape, src->shape, srcMap, srcCoef) && srcMap[rank - 1] == src->ndim() - 1 &&
                   srcCoef[rank - 1] == 1)) {
        whyNot = "a reduction whose input is not of the iteration shape";
        return -1;
      }
      // The value of a row is read in that row only: each iteration dim reads the dim of the
      // reduced tensor it reads of the input, with the same coefficient, the last none (length-1
      // dims do not matter). A broadcast that moves the reduced dims, as in x.sum(-1)[None, :],
      // reads across rows.
      for (int d = 0; d < rank; ++d) {
        if (prog_.iterShape[d] == 1) continue;
        int want = d + 1 < rank ? srcMap[d] : -1;
        if (dimMap[d] != want || (want >= 0 && view.coef[d] != srcCoef[d])) {
          whyNot = "a row reduction read across rows";
          return -1;
        }
      }
      int x = lower(src, View{srcMap, srcCoef, std::vector<int64_t>(src->shape.size(), 0), {}});
      if (x < 0) return -1;
      if (op != "var") return reduce(op, x, src->dtype);
      // var = sum((x - mean)^2) / max(N - correction, 0), mean = sum(x) / N: as eager's, no
      // degrees of freedom (N <= correction) give 0 / 0 = NaN or inf, not a value of flipped sign
      int n = rowLength(src->dtype);
      int mean = binary("div", reduce("sum", x, src->dtype), n, src->dtype);
      int d = binary("sub", x, mean, src->dtype);
      int ss = reduce("sum", binary("mul", d, d, src->dtype), src->dtype);
      int dof = binary("sub", n, constant(Value(b.args[2].toDouble()), src->dtype), src->dtype);
      int denom = binary("maximum", dof, constant(Value(0.0), src->dtype), src->dtype);
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
      int x = lower(b.args[0].toTensor(), view);
      if (x < 0) return -1;
      n.operands = {x};
      n.asked = casts_ != nullptr && casts_->count(t.get()) > 0;
    } else {
      // Elementwise: operands have t's shape, so they are read through the same map.
      for (size_t i = 0; i < b.args.size(); ++i) {
        const Value& a = b.args[i];
        int x;
        if (a.isTensor()) {
          x = lower(a.toTensor(), view);
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

  /// A reshape that merges or splits dims: t (of view `view`) is src reinterpreted. Dims of the
  /// two shapes form groups of equal size; within a group the elements are in the same row-major
  /// order, so the iteration dims that read t's dims of the group (their coefficients a mixed-radix
  /// number) are regrouped into src's dims. Where a src dim's boundary falls inside an iteration
  /// dim, that dim must be split first: `split` asks lowerRegion for a finer iteration space.
  int reshape(const TensorPtr& src, const TensorPtr& t, const View& view) {
    const Shape &A = t->shape, &B = src->shape;
    int rank = static_cast<int>(prog_.iterShape.size());
    for (const Shape* sh : {&A, &B, static_cast<const Shape*>(&prog_.iterShape)})
      for (int64_t x : *sh)
        if (x == 0) {
          whyNot = "a reshape of an empty tensor";
          return -1;
        }
    View inner{std::vector<int>(rank, -1), std::vector<int64_t>(rank, 1), std::vector<int64_t>(B.size(), 0), view.guard};
    size_t ja = 0, jb = 0;
    while (ja < A.size() && jb < B.size()) {
      std::vector<size_t> ga{ja}, gb{jb};
      int64_t pa = A[ja++], pb = B[jb++];
      while (pa != pb) {
        if (pa < pb && ja < A.size()) {
          ga.push_back(ja);
          pa *= A[ja++];
        } else if (pb < pa && jb < B.size()) {
          gb.push_back(jb);
          pb *= B[jb++];
        } else {
          whyNot = "a reshape between shapes of different sizes";
          return -1;
        }
      }
      if (ga.size() == 1 && gb.size() == 1) {  // one dim to one dim
        for (int d = 0; d < rank; ++d)
          if (view.dimMap[d] == static_cast<int>(ga[0])) {
            inner.dimMap[d] = static_cast<int>(gb[0]);
            inner.coef[d] = view.coef[d];
          }
        inner.offset[gb[0]] = view.offset[ga[0]];
        continue;
      }
      // The group's row-major index as terms coef * i_d, plus a constant.
      std::vector<std::pair<int64_t, int>> terms;  // (coefficient, iteration dim)
      int64_t strideA = 1, constant = 0;
      for (size_t k = ga.size(); k-- > 0;) {
        size_t j = ga[k];
        if (view.offset[j] != 0) {
          // A shifted dim (a slice, a cat's piece) merged into one source dim: the offset moves
          // into the source's, and the dim's own range becomes a guard on its iteration dim.
          int d = soleReader(view, static_cast<int>(j));
          if (gb.size() != 1 || d == -1) {
            whyNot = "a reshape of a shifted view";
            return -1;
          }
          constant += view.offset[j] * strideA;
          if (d >= 0) {
            if (inner.guard.empty())
              for (int e = 0; e < rank; ++e) inner.guard.push_back({0, prog_.iterShape[e]});
            inner.guard[d].first = std::max(inner.guard[d].first, -view.offset[j]);
            inner.guard[d].second = std::min(inner.guard[d].second, A[j] - view.offset[j]);
          }
        }
        // (An unread dim has the constant index offset[j].)
        for (int d = 0; d < rank; ++d)
          if (view.dimMap[d] == static_cast<int>(j) && prog_.iterShape[d] != 1)
            terms.push_back({view.coef[d] * strideA, d});
        strideA *= A[j];
      }
      std::sort(terms.begin(), terms.end());
      if (gb.size() == 1) {  // merged into one dim: any linear index is one
        for (auto [c, d] : terms) {
          inner.dimMap[d] = static_cast<int>(gb[0]);
          inner.coef[d] = c;
        }
        inner.offset[gb[0]] = constant;
        continue;
      }
      int64_t expect = 1;
      for (auto [c, d] : terms) {
        if (c != expect) {
          whyNot = "a reshape whose index is not a merge of iteration dims";
          return -1;
        }
        expect *= prog_.iterShape[d];
      }
      // Assign the terms, minor first, to src's dims of the group, minor first.
      size_t kb = gb.size();
      int64_t acc = 1;
      auto nextB = [&] {
        while (kb > 0 && B[gb[kb - 1]] == 1) --kb;
      };
      nextB();
      for (auto [c, d] : terms) {
        if (kb == 0) {
          whyNot = "a reshape with more index than its source";
          return -1;
        }
        int64_t size = prog_.iterShape[d], need = B[gb[kb - 1]] / acc;
        if (size > need) {
          if (size % need == 0 && !split) split = std::make_pair(d, need);
          whyNot = "a reshape that splits an iteration dim";
          return -1;
        }
        if (need % size != 0) {
          whyNot = "a reshape whose dims do not nest";
          return -1;
        }
        inner.dimMap[d] = static_cast<int>(gb[kb - 1]);
        inner.coef[d] = acc;
        acc *= size;
        if (acc == B[gb[kb - 1]]) {
          --kb;
          acc = 1;
          nextB();
        }
      }
    }
    return lower(src, inner);
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
  const std::unordered_set<const TensorProxy*>* casts_;
  std::map<const TensorProxy*, const BoundSymbol*> producer_;
  std::map<const TensorProxy*, int> inputIndex_;
  std::map<std::pair<const TensorProxy*, View>, int> memo_;
};

}  // namespace

bool lowerOver(const std::vector<BoundSymbol>& prims, const std::vector<TensorPtr>& inputs,
               const std::vector<TensorPtr>& outputs, bool reduces, KernelProgram& out, std::string& whyNot,
               std::optional<std::pair<int, int64_t>>& split, const std::unordered_set<const TensorProxy*>* casts);

std::unordered_set<const TensorProxy*> castOutputs(const Trace& trace) {
  std::unordered_set<const TensorProxy*> out;
  // A backward's conversions are its 16-bit ops' own: autodiff writes a bf16 op's gradient as
  // upcast, compute and round at the top level.
  if (trace.fnName == "backward") return out;
  std::vector<const BoundSymbol*> stack;
  for (const BoundSymbol& b : trace.bsyms) {
    // A conversion prim at the top level is a transform's (autodiff writes out the prims of the
    // calls it splits): the program's casts are calls of the torch language.
    if (b.sym->isPrim()) continue;
    bool cast = false;
    stack.assign(1, &b);
    while (!stack.empty()) {
      const BoundSymbol* c = stack.back();
      stack.pop_back();
      if (c->sym->isPrim()) {
        cast = c->sym->name == "convert_element_type";
        if (!cast) break;
      } else {
        if (c->subsymbols.empty()) {
          cast = false;
          break;
        }
        for (const BoundSymbol& s : c->subsymbols) stack.push_back(&s);
      }
    }
    if (cast)
      for (const TensorPtr& t : b.outputTensors()) out.insert(t.get());
  }
  return out;
}

bool lowerRegion(const std::string& name, const std::vector<BoundSymbol>& prims,
                 const std::vector<TensorPtr>& inputs, const std::vector<TensorPtr>& outputs,
                 KernelProgram& out, std::string& whyNot, const std::unordered_set<const TensorProxy*>* casts) {
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
  // Only values the kernel stores or reduces count: a view inside the region (a permute of an
  // input that a slice then narrows) may be larger than anything computed.
  std::set<const TensorProxy*> stored;
  for (const TensorPtr& t : outputs) stored.insert(t.get());
  bool reduces = false;
  for (const BoundSymbol& b : prims) {
    for (const TensorPtr& t : b.outputTensors())
      if (stored.count(t.get()) && larger(t->shape, false)) out.iterShape = t->shape;
    if (b.sym->hasTag(kReductionOp) && !isUnrolledSum(b)) {
      reduces |= !isUnitReduction(b);
      const TensorProxy& a = b.args[0].tensor();
      if (larger(a.shape, true)) out.iterShape = a.shape;
    }
  }
  // A channel sum: the region iterates its values as [N, H, W, C], where the sum is an ordinary
  // column sum. Every reduction of the region must be such a sum, over values of one shape.
  const TensorProxy* summed = nullptr;
  for (const BoundSymbol& b : prims) {
    if (!isPermutedColumnSum(b)) continue;
    if (summed && summed->shape != b.args[0].tensor().shape) {
      whyNot = "channel sums of values of different shapes";
      return false;
    }
    summed = &b.args[0].tensor();
  }
  if (summed) {
    for (const BoundSymbol& b : prims)
      if (b.sym->hasTag(kReductionOp) && !isPermutedColumnSum(b) && !isUnrolledSum(b) && !isUnitReduction(b)) {
        whyNot = "a channel sum beside another reduction";
        return false;
      }
    out.order = {0, 2, 3, 1};
    out.iterShape.clear();
    for (int d : out.order) out.iterShape.push_back(summed->shape[d]);
    std::optional<std::pair<int, int64_t>> split;
    return lowerOver(prims, inputs, outputs, true, out, whyNot, split, casts);
  }
  // A reshape inside the region may need a finer iteration space (an iteration dim split in
  // two): then the region is lowered again over it.
  for (int attempt = 0;; ++attempt) {
    std::optional<std::pair<int, int64_t>> split;
    if (lowerOver(prims, inputs, outputs, reduces, out, whyNot, split, casts)) return true;
    // (A row kernel's rows can be split, not its last dim: the one it reduces.)
    if (!split || attempt >= 8 || (reduces && split->first + 1 >= static_cast<int>(out.iterShape.size()))) return false;
    Shape finer = out.iterShape;
    auto [d, minor] = *split;
    finer[d] /= minor;
    finer.insert(finer.begin() + d + 1, minor);
    out = KernelProgram{};
    out.name = name;
    out.iterShape = finer;
  }
}

bool lowerOver(const std::vector<BoundSymbol>& prims, const std::vector<TensorPtr>& inputs,
               const std::vector<TensorPtr>& outputs, bool reduces, KernelProgram& out, std::string& whyNot,
               std::optional<std::pair<int, int64_t>>& split, const std::unordered_set<const TensorProxy*>* casts) {
  Shape reduced(out.iterShape.begin(), out.iterShape.empty() ? out.iterShape.end() : out.iterShape.end() - 1);
  Shape keepdim = reduced;
  if (!out.iterShape.empty()) keepdim.push_back(1);
  Lowering low(out, prims, inputs, casts);
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
      for (int d = 0; d < rank; ++d) map[d] = out.order.empty() ? d : out.order[d];
      col.node = low.lower(summed, map);
      if (col.node < 0) {
        whyNot = low.whyNot;
        return false;
      }
      out.outputs.push_back(col);
      continue;
    }
    // The iteration dims' coefficients in t's index (1 unless t merges iteration dims).
    std::vector<int64_t> coef(rank, 1);
    bool isReduced;
    std::vector<int> rowMap;
    std::vector<int64_t> rowCoef;
    if (!out.order.empty()) {
      // Iterated in `order`: full-size values only, stored in iteration order.
      if (t->shape != low.logicalShape()) {
        whyNot = "output " + t->name + " has shape " + t->typeString() + ", not the shape the permuted column sum reads";
        return false;
      }
      for (int d = 0; d < rank; ++d) map[d] = out.order[d];
      isReduced = false;
    } else if (t->shape == out.iterShape) {
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
    } else if (rank > 0 && reduces && mergeMap(reduced, t->shape, rowMap, rowCoef)) {
      // One value per row, of rows split finer than the reduced tensor's (stored in row order).
      std::copy(rowMap.begin(), rowMap.end(), map.begin());
      std::copy(rowCoef.begin(), rowCoef.end(), coef.begin());
      isReduced = true;
    } else if (mergeMap(out.iterShape, t->shape, map, coef) &&
               (!reduces || (rank > 0 && !t->shape.empty() && t->shape.back() == out.iterShape.back() && coef[rank - 1] == 1))) {
      // Coarser than the iteration space (dims merged): stored in the same order. A row kernel
      // keeps its rows: only the outer dims may merge (the normalized rows of an RMSNorm's
      // backward, stored as the [tokens, width] matrix a weight gradient's matmul reads).
      isReduced = false;
    } else {
      whyNot = "output " + t->name + " has shape " + t->typeString() + ", not the iteration shape";
      return false;
    }
    int node = low.lower(t, View{map, coef, std::vector<int64_t>(t->shape.size(), 0), {}});
    if (node < 0) {
      whyNot = low.whyNot;
      split = low.split;
      return false;
    }
    out.outputs.push_back({t, node, isReduced});
  }
  std::unordered_set<const TensorProxy*> laidOut;
  for (const BoundSymbol& p : prims)
    if (p.sym->name == "stride_order")
      for (const TensorPtr& o : p.outputTensors()) laidOut.insert(o.get());
  for (KOutput& o : out.outputs) o.rowMajor = laidOut.count(o.tensor.get()) > 0;
  if (casts != nullptr && !outputs.empty() && float32Chains(outputs.front()->device.type)) readUnrounded(out);
  // An output rounded to its own 16-bit dtype just before it is stored is stored from the float
  // value: the store rounds it (the same value, one conversion instead of two).
  for (KOutput& o : out.outputs) {
    if (o.column || o.node < 0) continue;
    const KNode& k = out.nodes[o.node];
    if (roundsTo16Bits(k) && k.dtype == o.tensor->dtype && out.nodes[k.operands[0]].dtype == DType::Float32)
      o.node = k.operands[0];
  }
  for (const KOutput& o : out.outputs)
    if (o.reduced && !out.hasReduction()) {
      whyNot = "a reduced-shape output without a reduction";
      return false;
    }
  if (out.rowKernel()) {
    // Row kernels read whole rows in chunks: a guarded load or an index range must decide per
    // row (a cat's or a roll's pieces along a dim before the last: whole rows), not along it.
    const int64_t L = rank > 0 ? out.iterShape[rank - 1] : 1;
    for (const KInput& in : out.inputs)
      if (in.guarded() && rank > 0 && (in.guard[rank - 1].first > 0 || in.guard[rank - 1].second < L)) {
        whyNot = "a guarded load (cat or pad) along a row kernel's rows";
        return false;
      }
    for (const KNode& n : out.nodes)
      if (n.kind == KNode::Kind::InRange && n.dim + 1 == rank) {
        whyNot = "a cat or pad along a row kernel's rows";
        return false;
      }
    // A gather reads each row at one index (an embedding's rows, a table's at a position): the
    // index is a load, the same along the row, of an input that gathers nothing.
    for (const KInput& in : out.inputs) {
      if (!in.gathers()) continue;
      const KNode& g = out.nodes[in.gatherNode];
      if (g.kind != KNode::Kind::Load || out.inputs[g.input].gathers() || out.inputs[g.input].dimMap[rank - 1] >= 0) {
        whyNot = "a gather at an index that varies along a row kernel's rows";
        return false;
      }
    }
  }
  return true;
}

bool addScatteredOutput(KernelProgram& prog, const TensorPtr& from, const TensorPtr& buffer, int64_t dim,
                        const TensorPtr& index, const TensorPtr& result, bool keepFrom, std::string& whyNot) {
  const Shape& iter = prog.iterShape;
  const int64_t R = static_cast<int64_t>(iter.size());
  const int64_t rank = static_cast<int64_t>(from->shape.size());
  auto it = std::find_if(prog.outputs.begin(), prog.outputs.end(), [&](const KOutput& o) { return o.tensor == from; });
  // Iteration dim d stores to dim map[d] of `from` (and of the buffer) with coefficient coef[d].
  std::vector<int> map;
  std::vector<int64_t> coef(R, 1);
  if (from->shape == iter) {
    for (int64_t d = 0; d < R; ++d) map.push_back(static_cast<int>(d));
  } else if (sameUpToUnitDims(from->shape, iter)) {
    map = unitDimMap(iter, from->shape);
  } else if (!mergeMap(iter, from->shape, map, coef)) {
    map.clear();
  }
  if (prog.rowKernel()) whyNot = "a row kernel";
  else if (it == prog.outputs.end() || it->reduced || it->column) whyNot = from->name + " is not a full-size output";
  else if (map.empty() && R > 0) whyNot = from->name + " is not stored in the iteration order";
  else if (dim < 0 || dim >= rank || static_cast<int64_t>(buffer->shape.size()) != rank || buffer->dtype != from->dtype)
    whyNot = "the buffer's rank or dtype differs";
  else if (index->shape.size() != 1 || index->shape[0] != from->shape[dim] || index->dtype != DType::Int64)
    // (int64 only: eager's index_copy_ raises for other index dtypes, and so does the ATen call)
    whyNot = "the index is not an int64 vector of the updated dim's length";
  if (!whyNot.empty()) return false;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim && buffer->shape[d] != from->shape[d]) {
      whyNot = "the buffer's shape differs outside the updated dim";
      return false;
    }
  // The updated dim is indexed by one iteration dim (or none, when of length 1).
  int reader = -1;
  for (int64_t d = 0; d < R; ++d)
    if (map[d] == dim) {
      if (reader >= 0 || coef[d] != 1) {
        whyNot = "the updated dim is merged with others";
        return false;
      }
      reader = static_cast<int>(d);
    }
  for (const KInput& in : prog.inputs)
    if (in.tensor == buffer) {
      whyNot = "the kernel reads the buffer it would store into";
      return false;
    }
  // The index, read along the updated dim.
  KInput k{index, std::vector<int>(R, -1), std::vector<int64_t>(R, 1), {0}, {}};
  if (reader >= 0 && iter[reader] != 1) k.dimMap[reader] = 0;
  const int indexNode = addLoad(prog, k);
  KOutput o;
  o.tensor = result;
  o.node = it->node;
  o.into = buffer;
  o.dimMap = map;
  o.coef = coef;
  o.scatterDim = static_cast<int>(dim);
  o.scatterNode = indexNode;
  if (!keepFrom) prog.outputs.erase(it);
  prog.outputs.push_back(o);
  return true;
}

bool permutableIteration(const KernelProgram& prog) {
  if (prog.iterShape.size() < 2 || prog.rowKernel() || prog.indexed()) return false;
  // Index ranges (a cat's pieces, a pad's source) test iteration dims, which permute with the rest
  // (THUNDER_FUSER_PERMUTE_RANGES=0: such programs keep their own order, for A/B runs).
  static const bool ranges = [] {
    const char* v = std::getenv("THUNDER_FUSER_PERMUTE_RANGES");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!ranges) {
    for (const KInput& in : prog.inputs)
      if (in.guarded()) return false;
    for (const KNode& n : prog.nodes)
      if (n.kind == KNode::Kind::InRange) return false;
  }
  for (const KInput& in : prog.inputs)
    if (in.dimMap.size() != prog.iterShape.size() || (!in.coef.empty() && in.coef.size() != prog.iterShape.size()) ||
        (in.guarded() && in.guard.size() != prog.iterShape.size()))
      return false;
  for (const KOutput& o : prog.outputs)
    if (o.reduced || o.column || o.rowMajor || o.tensor->shape != prog.iterShape) return false;
  return true;
}

KernelProgram permuteIteration(const KernelProgram& prog, const std::vector<int>& perm) {
  KernelProgram out = prog;
  for (size_t k = 0; k < perm.size(); ++k) out.iterShape[k] = prog.iterShape[perm[k]];
  for (size_t i = 0; i < prog.inputs.size(); ++i) {
    const KInput& in = prog.inputs[i];
    for (size_t k = 0; k < perm.size(); ++k) {
      out.inputs[i].dimMap[k] = in.dimMap[perm[k]];
      if (!in.coef.empty()) out.inputs[i].coef[k] = in.coef[perm[k]];
      if (in.guarded()) out.inputs[i].guard[k] = in.guard[perm[k]];
    }
  }
  std::vector<int> position(perm.size());  // prog's dim d is the permuted program's dim position[d]
  for (size_t k = 0; k < perm.size(); ++k) position[perm[k]] = static_cast<int>(k);
  for (KNode& n : out.nodes)
    if (n.kind == KNode::Kind::InRange) n.dim = position[n.dim];
  return out;
}

}  // namespace thunder::codegen
