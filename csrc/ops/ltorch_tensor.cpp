// Tensor ops of the torch language: scans, sorting, scatter and index updates, einsum, the
// add*-matmul family, shape utilities, factories, elementwise helpers and norms. Each decomposes
// into clang, prims and other ltorch symbols; gradients come from the decompositions or, for the
// prims they add (cumsum, cumprod, sort, topk, scatter), from grad_rules.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
#include <limits>
#include <map>
#include <numeric>

#include "ops/clang.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "ops/utils.h"

namespace thunder::ltorch {
namespace {

using Args = std::vector<Value>;
using PK = PromotionKind;

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

int64_t dimOf(const TensorProxy& t, const Value& v, const std::string& name) {
  return canonicalizeDim(t.ndim(), v.toInt(), opn(name));
}

/// The length of dim d (a 0-dim tensor has one element along its only "dim").
int64_t lengthOf(const TensorProxy& t, int64_t d) { return t.ndim() == 0 ? 1 : t.shape[d]; }

Value zerosOf(const Shape& shape, DType dt, Device dev) {
  return prims::full(shape, clang::maybeConvert(Value(0), dt), dev, dt);
}

/// Integer index tensors may be negative (Python style): wrapped by the length `n`.
Value wrapIndex(const Value& idx, int64_t n) {
  return op("where", {op("lt", {idx, 0}), op("add", {idx, n}), idx});
}

const TensorProxy& indexArg(const Value& v, const std::string& name, const char* arg) {
  const TensorProxy& t = T(v, name, arg);
  THUNDER_CHECK(isIntegral(t.dtype), opn(name), ": expected '", arg,
                     "' to be an integer tensor, but got dtype ", dtypeName(t.dtype));
  return t;
}

/// The largest finite value of a floating dtype.
double finfoMax(DType dt) {
  switch (dt) {
    case DType::Float16:
      return 65504.0;
    case DType::BFloat16:
      return 3.3895313892515355e38;
    case DType::Float32:
      return static_cast<double>(std::numeric_limits<float>::max());
    default:
      return std::numeric_limits<double>::max();
  }
}

// ---- scans and sorting ----------------------------------------------------------------------

/// cumsum/cumprod: integers and bools accumulate in int64 unless a dtype is given, as PyTorch.
Value scan(const Args& a, bool product, const std::string& name) {
  const TensorProxy& t = T(a[0], name);
  int64_t d = dimOf(t, a[1], name);
  DType dt = optDType(a[2]).value_or(isIntegral(t.dtype) || t.dtype == DType::Bool ? DType::Int64
                                                                                   : t.dtype);
  Value x = clang::maybeConvert(a[0], dt);
  return product ? prims::cumprod(x, d) : prims::cumsum(x, d);
}

void checkSortable(const TensorProxy& t, const std::string& name) {
  THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type, opn(name),
                     ": complex tensors are not supported, got ", dtypeName(t.dtype));
}

Value sortImpl(const Value& a, const Value& dim, bool descending, bool stable,
               const std::string& name) {
  const TensorProxy& t = T(a, name);
  checkSortable(t, name);
  int64_t d = dimOf(t, dim, name);
  // Bools sort as uint8 (false < true).
  if (t.dtype == DType::Bool) {
    Value r = prims::sort(clang::maybeConvert(a, DType::UInt8), d, descending, stable);
    return Value::tuple({clang::maybeConvert(r.items()[0], DType::Bool), r.items()[1]});
  }
  return prims::sort(a, d, descending, stable);
}

void registerScans() {
  define("cumsum", "a, dim, *, dtype=None", {"torch.cumsum", "torch.Tensor.cumsum"},
         [](const Args& a) { return scan(a, false, "cumsum"); });
  define("cumprod", "a, dim, *, dtype=None", {"torch.cumprod", "torch.Tensor.cumprod"},
         [](const Args& a) { return scan(a, true, "cumprod"); });
  define("sort", "a, dim=-1, descending=False, stable=False", {"torch.sort", "torch.Tensor.sort"},
         [](const Args& a) { return sortImpl(a[0], a[1], a[2].toBool(), a[3].toBool(), "sort"); });
  define("argsort", "a, dim=-1, descending=False, stable=False",
         {"torch.argsort", "torch.Tensor.argsort"}, [](const Args& a) {
           return sortImpl(a[0], a[1], a[2].toBool(), a[3].toBool(), "argsort").items()[1];
         });
  define("topk", "a, k, dim=-1, largest=True, sorted=True", {"torch.topk", "torch.Tensor.topk"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "topk");
           checkSortable(t, "topk");
           THUNDER_CHECK_KIND(t.dtype != DType::Bool, ErrorKind::Type,
                              "ltorch.topk: bool tensors are not supported");
           int64_t d = dimOf(t, a[2], "topk");
           int64_t k = a[1].toInt();
           THUNDER_CHECK(k >= 0 && k <= lengthOf(t, d), "ltorch.topk: k (",
                              k, ") is out of range for dimension ", d, " of shape ",
                              shapeStr(t.shape));
           if (t.dtype == DType::Bool) {
             Value r = prims::topk(clang::maybeConvert(a[0], DType::UInt8), k, d, a[3].toBool());
             return Value::tuple({clang::maybeConvert(r.items()[0], DType::Bool), r.items()[1]});
           }
           return prims::topk(a[0], k, d, a[3].toBool());
         });
  define("aminmax", "a, *, dim=None, keepdim=False", {"torch.aminmax", "torch.Tensor.aminmax"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "aminmax");
           THUNDER_CHECK(t.numel() > 0, "ltorch.aminmax: cannot reduce an empty tensor of shape ",
                         shapeStr(t.shape));
           Value dims = a[1].isNone() ? Value::tuple({}) : a[1];
           // keepdim with dim=None keeps every dim, as PyTorch.
           if (a[1].isNone() && a[2].toBool()) {
             std::vector<int64_t> all(t.ndim());
             std::iota(all.begin(), all.end(), 0);
             dims = Value::ints(all);
           }
           return Value::tuple({op("amin", {a[0], dims, a[2]}), op("amax", {a[0], dims, a[2]})});
         });
}

// ---- scatter, index updates -----------------------------------------------------------------

/// A 1-D index along `dim` of `a`, spread to `shape` (the source's) so scatter writes whole
/// slices: index_add/index_copy in terms of scatter_add/scatter.
Value spreadIndex(const Value& index, const Shape& shape, int64_t dim, int64_t n,
                  const std::string& name) {
  const TensorProxy& idx = indexArg(index, name, "index");
  THUNDER_CHECK(idx.ndim() <= 1, opn(name),
                ": expected a 0- or 1-dimensional index, but got shape ", shapeStr(idx.shape));
  Value i = idx.ndim() == 0 ? clang::reshape(index, {1}, opn(name)) : index;
  i = wrapIndex(clang::maybeConvert(i, DType::Int64), n);
  return prims::broadcast_in_dim(i, shape, {dim});
}

/// index_add and index_copy: checks, then source (or alpha * source) scattered along dim.
Value indexUpdate(const Args& a, bool add, const std::string& name) {
  const TensorProxy& t = T(a[0], name);
  const TensorProxy& src = T(a[3], name, "source");
  int64_t d = dimOf(t, a[1], name);
  const TensorProxy& idx = indexArg(a[2], name, "index");
  THUNDER_CHECK_KIND(src.dtype == t.dtype, ErrorKind::Type, opn(name), ": source has dtype ",
                     dtypeName(src.dtype), " but self has dtype ", dtypeName(t.dtype));
  Value self = t.ndim() == 0 ? clang::reshape(a[0], {1}, opn(name)) : a[0];
  Value source = src.ndim() == 0 ? clang::reshape(a[3], {1}, opn(name)) : a[3];
  const TensorProxy& s = source.tensor();
  const TensorProxy& x = self.tensor();
  THUNDER_CHECK(s.ndim() == x.ndim(), opn(name), ": source of shape ", shapeStr(src.shape),
                " must have as many dimensions as self of shape ", shapeStr(t.shape));
  for (int64_t i = 0; i < x.ndim(); ++i)
    THUNDER_CHECK(i == d || s.shape[i] == x.shape[i], opn(name), ": source of shape ",
                  shapeStr(src.shape), " does not match self of shape ", shapeStr(t.shape),
                  " outside dimension ", d);
  // eager's index_copy raises an IndexError here, its index_add a RuntimeError
  THUNDER_CHECK_KIND(s.shape[d] == std::max<int64_t>(idx.numel(), 0),
                     name == "index_copy" ? ErrorKind::Index : ErrorKind::Runtime, opn(name), ": index has ",
                     idx.numel(), " elements but source has ", s.shape[d], " along dimension ", d);
  Value spread = spreadIndex(a[2], s.shape, d, x.shape[d], name);
  Value r;
  if (add) {
    Value scaled = source;
    const Value& alpha = a[4];
    bool unit = alpha.isNumber() && alpha.toDouble() == 1.0;
    if (!unit) scaled = clang::maybeConvert(op("mul", {source, alpha}), t.dtype);
    r = prims::scatter_add(self, spread, scaled, d);
  } else {
    r = prims::scatter(self, spread, source, d);
  }
  return t.ndim() == 0 ? clang::reshape(r, {}, opn(name)) : r;
}

/// The scatter value as a tensor of the index's shape and a's dtype.
Value scatterSource(const Value& v, const TensorProxy& t, const TensorProxy& idx,
                    const std::string& name) {
  if (v.isTensor()) {
    THUNDER_CHECK(v.tensor().dtype == t.dtype, opn(name),
                       ": expected src of dtype ", dtypeName(t.dtype), ", but got ",
                       dtypeName(v.tensor().dtype));
    return v;
  }
  THUNDER_CHECK_KIND(v.isNumber(), ErrorKind::Type, opn(name),
                     ": expected src to be a tensor or a number, but got ", describe(v));
  return prims::full(idx.shape, clang::maybeConvert(v, t.dtype), t.device, t.dtype);
}

/// Wraps negative scatter/gather indices of dim `d`.
Value scatterIndex(const Value& index, const TensorProxy& t, int64_t d, const std::string& name) {
  indexArg(index, name, "index");
  return wrapIndex(index, lengthOf(t, d));
}

void registerScatter() {
  define(
      "scatter", "a, dim, index, src=None, *, value=None, reduce=None",
      {"torch.scatter", "torch.Tensor.scatter"}, [](const Args& a) -> Value {
        const TensorProxy& t = T(a[0], "scatter");
        int64_t d = dimOf(t, a[1], "scatter");
        const TensorProxy& idx = indexArg(a[2], "scatter", "index");
        const Value& v = a[3].isNone() ? a[4] : a[3];
        THUNDER_CHECK_KIND(!v.isNone(), ErrorKind::Type, "ltorch.scatter: expected src or value");
        Value src = scatterSource(v, t, idx, "scatter");
        Value index = scatterIndex(a[2], t, d, "scatter");
        if (a[5].isNone()) return prims::scatter(a[0], index, src, d);
        const std::string& r = a[5].toString();
        if (r == "add") return prims::scatter_add(a[0], index, src, d);
        THUNDER_CHECK_KIND(r != "multiply", ErrorKind::NotImplemented,
                           "ltorch.scatter: reduce='multiply' is not supported");
        throw Error(ErrorKind::Value,
                    str("ltorch.scatter: reduce must be 'add' or 'multiply', but got '", r, "'"));
      });
  define(
      "scatter_reduce", "a, dim, index, src, reduce, *, include_self=True",
      {"torch.scatter_reduce", "torch.Tensor.scatter_reduce"}, [](const Args& a) -> Value {
        const TensorProxy& t = T(a[0], "scatter_reduce");
        int64_t d = dimOf(t, a[1], "scatter_reduce");
        const TensorProxy& idx = indexArg(a[2], "scatter_reduce", "index");
        Value src = scatterSource(a[3], t, idx, "scatter_reduce");
        Value index = scatterIndex(a[2], t, d, "scatter_reduce");
        const std::string& r = a[4].toString();
        bool self = a[5].toBool();
        THUNDER_CHECK(r == "sum" || r == "mean" || r == "prod" || r == "amax" || r == "amin" ||
                               r == "max" || r == "min",
                           "ltorch.scatter_reduce: reduce must be one of 'sum', "
                           "'prod', 'mean', 'amax', 'amin', but got '",
                           r, "'");
        THUNDER_CHECK_KIND(r == "sum" || r == "mean", ErrorKind::NotImplemented,
                           "ltorch.scatter_reduce: reduce='", r, "' is not supported");
        // Positions written at least once; the rest keep a whatever include_self says.
        Value ones = prims::full(idx.shape, 1, t.device, DType::Int64);
        Value count = prims::scatter_add(zerosOf(t.shape, DType::Int64, t.device), index, ones, d);
        Value hit = op("gt", {count, 0});
        Value base = self ? a[0] : op("where", {hit, clang::maybeConvert(Value(0), t.dtype), a[0]});
        Value total = prims::scatter_add(base, index, src, d);
        if (r == "sum") return total;
        THUNDER_CHECK_KIND(t.dtype != DType::Bool, ErrorKind::Type,
                           "ltorch.scatter_reduce: reduce='mean' does not support bool tensors");
        Value n = self ? op("add", {count, 1}) : op("where", {hit, count, 1});
        Value mean = isIntegral(t.dtype) ? op("div", {total, n}, {{"rounding_mode", "floor"}})
                                         : op("div", {total, clang::maybeConvert(n, t.dtype)});
        return clang::maybeConvert(mean, t.dtype);
      });
  define("index_add", "a, dim, index, source, *, alpha=1",
         {"torch.index_add", "torch.Tensor.index_add"},
         [](const Args& a) { return indexUpdate(a, true, "index_add"); });
  define(
      "index_copy", "a, dim, index, source", {"torch.index_copy", "torch.Tensor.index_copy"},
      [](const Args& a) { return indexUpdate({a[0], a[1], a[2], a[3], 1}, false, "index_copy"); });
  define("index_fill", "a, dim, index, value", {"torch.index_fill", "torch.Tensor.index_fill"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "index_fill");
           int64_t d = dimOf(t, a[1], "index_fill");
           const TensorProxy& idx = indexArg(a[2], "index_fill", "index");
           THUNDER_CHECK(idx.ndim() <= 1,
                         "ltorch.index_fill: expected a 0- or 1-dimensional index, "
                         "but got shape ",
                         shapeStr(idx.shape));
           if (a[3].isTensor())
             THUNDER_CHECK(a[3].tensor().ndim() == 0,
                           "ltorch.index_fill: expected a 0-dimensional "
                           "value tensor, but got shape ",
                           shapeStr(a[3].tensor().shape));
           int64_t n = lengthOf(t, d);
           Value i = idx.ndim() == 0 ? clang::reshape(a[2], {1}, "ltorch.index_fill") : a[2];
           i = wrapIndex(clang::maybeConvert(i, DType::Int64), n);
           int64_t k = i.tensor().shape[0];
           // A mask along dim: true at the indexed positions.
           Value mask = prims::scatter(zerosOf({n}, DType::Bool, t.device), i,
                                       prims::full({k}, true, t.device, DType::Bool), 0);
           if (t.ndim() > 0)
             mask = prims::broadcast_in_dim(mask, t.shape, {d});
           else
             mask = clang::reshape(mask, {}, "ltorch.index_fill");
           Value v = a[3].isTensor() ? clang::maybeConvert(a[3], t.dtype) : a[3];
           return clang::maybeConvert(clang::where(mask, v, a[0], "ltorch.index_fill"), t.dtype);
         });
  define("index_put", "a, indices, values, accumulate=False",
         {"torch.index_put", "torch.Tensor.index_put"}, [](const Args& a) {
           // a[i0, i1, ...] = values: the leading dims addressed by the broadcast indices become
           // one linear index into a reshaped to (prod(leading), *rest).
           const TensorProxy& t = T(a[0], "index_put");
           const std::vector<Value>& idxs = a[1].items();
           // As eager (a value of another dtype in x[idx] = v is converted first, by __setitem__)
           THUNDER_CHECK(!a[2].isTensor() || a[2].tensor().dtype == t.dtype,
                         "ltorch.index_put: the source and destination dtypes must match, but got ",
                         dtypeName(t.dtype), " for the destination (shape ", shapeStr(t.shape),
                         ") and ", a[2].isTensor() ? dtypeName(a[2].tensor().dtype) : "", " for values");
           THUNDER_CHECK_KIND(!idxs.empty() && static_cast<int64_t>(idxs.size()) <= t.ndim(),
                              ErrorKind::Index, "ltorch.index_put: expected 1 to ", t.ndim(),
                              " index tensors for shape ", shapeStr(t.shape), ", but got ",
                              idxs.size());
           std::vector<Shape> shapes;
           for (const Value& i : idxs) {
             THUNDER_CHECK_KIND(i.isTensor(), ErrorKind::NotImplemented,
                                "ltorch.index_put: only tensor indices are supported, got ",
                                describe(i));
             THUNDER_CHECK_KIND(i.tensor().dtype != DType::Bool, ErrorKind::NotImplemented,
                                "ltorch.index_put: boolean mask indices are not supported");
             // An IndexError, as eager's "tensors used as indices must be long, int, byte or bool"
             THUNDER_CHECK_KIND(isIntegral(i.tensor().dtype), ErrorKind::Index,
                                "ltorch.index_put: expected integer index tensors, but got dtype ",
                                dtypeName(i.tensor().dtype));
             shapes.push_back(i.tensor().shape);
           }
           Shape b;
           try {
             b = clang::broadcastShapes(shapes, "ltorch.index_put");
           } catch (const Error& e) {
             throw Error(ErrorKind::Index, e.what());  // eager's "shape mismatch" is an IndexError
           }
           int64_t k = static_cast<int64_t>(idxs.size());
           Value linear;
           int64_t lead = 1;
           for (int64_t j = 0; j < k; ++j) {
             Value i =
                 clang::expandTo(clang::maybeConvert(clang::indexOnDeviceOf(idxs[j], t), DType::Int64), b,
                                "ltorch.index_put");
             i = wrapIndex(i, t.shape[j]);
             linear = j == 0 ? i : op("add", {op("mul", {linear, t.shape[j]}), i});
             lead *= t.shape[j];
           }
           Shape rest(t.shape.begin() + k, t.shape.end());
           int64_t m = numelOf(b);
           Shape flatShape{lead};
           flatShape.insert(flatShape.end(), rest.begin(), rest.end());
           Shape valShape{m};
           valShape.insert(valShape.end(), rest.begin(), rest.end());
           Shape target = b;
           target.insert(target.end(), rest.begin(), rest.end());
           Value v = a[2].isTensor()
                         ? clang::maybeConvert(a[2], t.dtype)
                         : prims::full({}, clang::maybeConvert(a[2], t.dtype), t.device, t.dtype);
           v = clang::reshape(clang::expandTo(v, target, "ltorch.index_put"), valShape,
                              "ltorch.index_put");
           Value flat = clang::reshape(a[0], flatShape, "ltorch.index_put");
           Value spread = prims::broadcast_in_dim(clang::reshape(linear, {m}, "ltorch.index_put"),
                                                  valShape, {0});
           Value r = a[3].toBool() ? prims::scatter_add(flat, spread, v, 0)
                                   : prims::scatter(flat, spread, v, 0);
           return clang::reshape(r, t.shape, "ltorch.index_put");
         });
  define("take", "a, index", {"torch.take", "torch.Tensor.take"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "take");
    const TensorProxy& idx = indexArg(a[1], "take", "index");
    Value flat = clang::reshape(a[0], {t.numel()}, "ltorch.take");
    Value i = clang::reshape(clang::maybeConvert(a[1], DType::Int64), {idx.numel()}, "ltorch.take");
    Value r = prims::take(flat, wrapIndex(i, t.numel()), 0);
    return clang::reshape(r, idx.shape, "ltorch.take");
  });
  define(
      "select", "a, dim, index", {"torch.select", "torch.Tensor.select"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "select");
        THUNDER_CHECK_KIND(t.ndim() > 0, ErrorKind::Index,
                           "ltorch.select: cannot select from a 0-dim tensor");
        int64_t d = dimOf(t, a[1], "select");
        int64_t n = t.shape[d], i = a[2].toInt();
        THUNDER_CHECK_KIND(i >= -n && i < n, ErrorKind::Index, "ltorch.select: index ", i,
                           " is out of range for dimension ", d, " of length ", n);
        if (i < 0) i += n;
        return prims::squeeze(clang::sliceInDim(a[0], d, i, i + 1, 1, "ltorch.select"), {d});
      },
      kShapeOp);
}

// ---- einsum ---------------------------------------------------------------------------------

/// One operand of einsum: its tensor and a label per dim.
struct Term {
  Value x;
  std::string labels;
};

/// Sums out the labels of `t` that are not in `keep`.
Term sumOut(Term t, const std::string& keep) {
  std::vector<int64_t> dims;
  std::string rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.find(t.labels[i]) == std::string::npos)
      dims.push_back(static_cast<int64_t>(i));
    else
      rest.push_back(t.labels[i]);
  }
  if (dims.empty()) return t;
  return {op("sum", {t.x, Value::ints(dims)}), rest};
}

/// Permutes `t` to the label order `order` (a permutation of its labels).
Value permuteTo(const Term& t, const std::string& order) {
  std::vector<int64_t> perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(t.labels.find(c)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  return identity ? t.x : clang::permute(t.x, perm, "ltorch.einsum");
}

/// Contracts two terms over their shared labels not in `keep`, with one batched matmul.
Term contract(const Term& l, const Term& r, const std::string& keep) {
  std::string batch, left, right, summed;
  for (char c : l.labels) {
    bool inR = r.labels.find(c) != std::string::npos, kept = keep.find(c) != std::string::npos;
    if (inR && kept)
      batch.push_back(c);
    else if (inR)
      summed.push_back(c);
    else
      left.push_back(c);
  }
  for (char c : r.labels)
    if (l.labels.find(c) == std::string::npos) right.push_back(c);
  auto size = [](const Term& t, const std::string& ls) {
    int64_t n = 1;
    for (char c : ls) n *= t.x.tensor().shape[t.labels.find(c)];
    return n;
  };
  auto sizes = [](const Term& t, const std::string& ls) {
    Shape s;
    for (char c : ls) s.push_back(t.x.tensor().shape[t.labels.find(c)]);
    return s;
  };
  // Shared dims (batch and summed), broadcast where one operand has length 1.
  auto common = [&](const std::string& ls) {
    Shape a = sizes(l, ls), b = sizes(r, ls), out;
    for (size_t i = 0; i < a.size(); ++i) out.push_back(a[i] == 1 ? b[i] : a[i]);
    return out;
  };
  Shape bshape = common(batch), kshape = common(summed);
  int64_t nb = numelOf(bshape);
  Value lx = permuteTo(l, batch + left + summed);
  Value rx = permuteTo(r, batch + summed + right);
  DType dt = promoteTypes(lx.tensor().dtype, rx.tensor().dtype);
  lx = clang::maybeConvert(lx, dt);
  rx = clang::maybeConvert(rx, dt);
  Shape lfull = bshape, rfull = bshape;
  Shape ls = sizes(l, left), rs = sizes(r, right);
  lfull.insert(lfull.end(), ls.begin(), ls.end());
  lfull.insert(lfull.end(), kshape.begin(), kshape.end());
  rfull.insert(rfull.end(), kshape.begin(), kshape.end());
  rfull.insert(rfull.end(), rs.begin(), rs.end());
  lx = clang::expandTo(lx, lfull, "ltorch.einsum");
  rx = clang::expandTo(rx, rfull, "ltorch.einsum");
  int64_t m = size(l, left), k = numelOf(kshape), n = size(r, right);
  lx = clang::reshape(lx, {nb, m, k}, "ltorch.einsum");
  rx = clang::reshape(rx, {nb, k, n}, "ltorch.einsum");
  Value y = prims::matmul(lx, rx);
  Shape out = bshape;
  Shape lo = sizes(l, left), ro = sizes(r, right);
  out.insert(out.end(), lo.begin(), lo.end());
  out.insert(out.end(), ro.begin(), ro.end());
  return {clang::reshape(y, out, "ltorch.einsum"), batch + left + right};
}

Value einsum(const std::string& eqIn, const std::vector<Value>& ops) {
  const std::string name = "ltorch.einsum";
  std::string eq;
  for (char c : eqIn)
    if (c != ' ') eq.push_back(c);
  THUNDER_CHECK_KIND(eq.find('.') == std::string::npos, ErrorKind::NotImplemented, name,
                     ": ellipsis ('...') in the equation is not supported");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> inputs;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    inputs.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  THUNDER_CHECK(inputs.size() == ops.size(), name, ": the equation '", eqIn, "' has ",
                inputs.size(), " operands, but ", ops.size(), " tensors were given");
  std::map<char, int64_t> sizes, counts;
  std::vector<Term> terms;
  for (size_t i = 0; i < ops.size(); ++i) {
    const TensorProxy& t = expectTensor(ops[i], name, "operands[" + std::to_string(i) + "]");
    const std::string& ls = inputs[i];
    THUNDER_CHECK(static_cast<int64_t>(ls.size()) == t.ndim(), name, ": operand ", i, " has shape ",
                  shapeStr(t.shape), " but subscripts '", ls, "'");
    for (size_t j = 0; j < ls.size(); ++j) {
      char c = ls[j];
      THUNDER_CHECK(std::isalpha(static_cast<unsigned char>(c)), name, ": invalid subscript '", c,
                    "' in '", eqIn, "'");
      THUNDER_CHECK_KIND(ls.find(c) == j, ErrorKind::NotImplemented, name,
                         ": a subscript repeated within one operand ('", ls, "') is not supported");
      auto it = sizes.find(c);
      int64_t n = t.shape[j];
      if (it != sizes.end() && it->second != n && it->second != 1 && n != 1)
        throw Error(ErrorKind::Runtime, str(name, ": subscript '", c, "' has size ", n,
                                            " in operand ", i, " but ", it->second, " elsewhere"));
      if (it == sizes.end() || it->second == 1) sizes[c] = n;
      ++counts[c];
    }
    terms.push_back({ops[i], ls});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    for (char c : out)
      THUNDER_CHECK(sizes.count(c), name, ": output subscript '", c, "' appears in no operand");
  } else {
    for (auto& [c, n] : counts)
      if (n == 1) out.push_back(c);
  }
  THUNDER_CHECK(!terms.empty(), name, ": expected at least one operand");
  // Left to right: each step keeps the labels of the output and of the operands still to come.
  auto later = [&](size_t from) {
    std::string s = out;
    for (size_t i = from; i < terms.size(); ++i) s += terms[i].labels;
    return s;
  };
  DType dt = terms[0].x.tensor().dtype;
  for (const Term& t : terms)
    THUNDER_CHECK_KIND(t.x.tensor().dtype == dt, ErrorKind::Type, name,
                       ": expected operands of one dtype, but got ", dtypeName(dt), " and ",
                       dtypeName(t.x.tensor().dtype));
  Term acc = sumOut(terms[0], later(1));
  for (size_t i = 1; i < terms.size(); ++i) {
    std::string keep = later(i + 1);
    Term next = sumOut(terms[i], keep + acc.labels);
    // A shared label of length 1 on one side only (broadcast) is summed out of that side first,
    // then out of the other, as PyTorch's einsum does (integer sums become int64 there too).
    std::string dropL, dropR;
    for (char c : acc.labels) {
      size_t j = next.labels.find(c);
      if (j == std::string::npos || keep.find(c) != std::string::npos) continue;
      int64_t nl = acc.x.tensor().shape[acc.labels.find(c)], nr = next.x.tensor().shape[j];
      if (nl == 1 && nr != 1) dropL.push_back(c);
      if (nr == 1 && nl != 1) dropR.push_back(c);
    }
    if (!dropL.empty() || !dropR.empty()) {
      auto without = [](const std::string& ls, const std::string& drop) {
        std::string r;
        for (char c : ls)
          if (drop.find(c) == std::string::npos) r.push_back(c);
        return r;
      };
      acc = sumOut(sumOut(acc, without(acc.labels, dropL)),
                   keep + without(next.labels, dropL + dropR));
      next = sumOut(sumOut(next, without(next.labels, dropR)), keep + acc.labels);
    }
    acc = contract(acc, next, keep);
    acc = sumOut(acc, keep);
  }
  acc = sumOut(acc, out);
  // Broadcast labels of length 1 in the result to their full size.
  Value r = permuteTo(acc, out);
  Shape full;
  for (char c : out) full.push_back(sizes[c]);
  return clang::expandTo(r, full, name);
}

// ---- matmul family --------------------------------------------------------------------------

/// beta * input + alpha * product, where beta == 0 ignores input (nan and inf included), in the
/// tensors' promoted dtype (the scalars do not promote it, as in PyTorch).
Value addScaled(const Value& input, const Value& product, const Value& beta, const Value& alpha) {
  DType dt = promoteTypes(input.tensor().dtype, product.tensor().dtype);
  auto scaled = [dt](const Value& x, const Value& s) {
    if (dt == DType::Bool)
      return (s.isBool() ? s.toBool() : s.toDouble() != 0) ? x : op("logical_and", {x, false});
    return s.isNumber() && s.toDouble() == 1.0 ? x : op("mul", {x, s});
  };
  Value p = scaled(product, alpha);
  Value r;
  if (beta.isNumber() && beta.toDouble() == 0.0 && dt != DType::Bool)
    r = op("add", {op("mul", {input, 0}), p});
  else
    r = op("add", {scaled(input, beta), p});
  return clang::maybeConvert(r, dt);
}

void checkDims(const TensorProxy& t, int64_t n, const std::string& name, const char* arg) {
  THUNDER_CHECK(t.ndim() == n, opn(name), ": expected '", arg, "' to be ", n,
                "-dimensional, but got shape ", shapeStr(t.shape));
}

void registerMatmulFamily() {
  define(
      "addmm", "a, mat1, mat2, *, beta=1, alpha=1", {"torch.addmm", "torch.Tensor.addmm"},
      [](const Args& a) {
        checkDims(T(a[1], "addmm", "mat1"), 2, "addmm", "mat1");
        checkDims(T(a[2], "addmm", "mat2"), 2, "addmm", "mat2");
        const TensorProxy& in = T(a[0], "addmm");
        const TensorProxy &m1 = a[1].tensor(), &m2 = a[2].tensor();
        // bias + x @ w with a row of biases is a linear layer (GPT-2's Conv1D): one matmul whose
        // epilogue adds the bias, as eager's addmm runs it, not a matmul and an add.
        auto one = [](const Value& s) { return s.isNumber() && !s.isBool() && s.toDouble() == 1.0; };
        if (one(a[3]) && one(a[4]) && in.ndim() == 1 && isFloating(in.dtype) && in.dtype == m1.dtype &&
            in.dtype == m2.dtype && m1.shape[1] == m2.shape[0] && in.shape[0] == m2.shape[1])
          return op("linear", {a[1], clang::transpose(a[2], 0, 1, "ltorch.addmm"), a[0]});
        Value p = op("mm", {a[1], a[2]});
        Value r = addScaled(a[0], p, a[3], a[4]);
        return clang::expandTo(r, p.tensor().shape, "ltorch.addmm");
      },
      kMatmulOp);
  define(
      "addmv", "a, mat, vec, *, beta=1, alpha=1", {"torch.addmv", "torch.Tensor.addmv"},
      [](const Args& a) {
        checkDims(T(a[1], "addmv", "mat"), 2, "addmv", "mat");
        checkDims(T(a[2], "addmv", "vec"), 1, "addmv", "vec");
        DType dt = T(a[0], "addmv").dtype;
        THUNDER_CHECK(a[1].tensor().dtype == dt && a[2].tensor().dtype == dt,
                      "ltorch.addmv: input tensors must have the same dtype, but got input ",
                      dtypeName(dt), ", mat ", dtypeName(a[1].tensor().dtype), " and vec ",
                      dtypeName(a[2].tensor().dtype));
        Value p = op("matmul", {a[1], a[2]});
        return clang::expandTo(addScaled(a[0], p, a[3], a[4]), p.tensor().shape, "ltorch.addmv");
      },
      kMatmulOp);
  define(
      "baddbmm", "a, batch1, batch2, *, beta=1, alpha=1", {"torch.baddbmm", "torch.Tensor.baddbmm"},
      [](const Args& a) {
        T(a[0], "baddbmm");
        Value p = op("bmm", {a[1], a[2]});
        return clang::expandTo(addScaled(a[0], p, a[3], a[4]), p.tensor().shape, "ltorch.baddbmm");
      },
      kMatmulOp);
  define(
      "addbmm", "a, batch1, batch2, *, beta=1, alpha=1", {"torch.addbmm", "torch.Tensor.addbmm"},
      [](const Args& a) {
        T(a[0], "addbmm");
        const TensorProxy &b1 = T(a[1], "addbmm", "batch1"), &b2 = T(a[2], "addbmm", "batch2");
        checkDims(b1, 3, "addbmm", "batch1");
        checkDims(b2, 3, "addbmm", "batch2");
        THUNDER_CHECK(b1.shape[0] == b2.shape[0] && b1.shape[2] == b2.shape[1],
                      "ltorch.addbmm: batch1 of shape ", shapeStr(b1.shape),
                      " and batch2 of shape ", shapeStr(b2.shape), " cannot be multiplied");
        // The sum over the batch of b1[i] @ b2[i] is one matmul of (n, b*k) by (b*k, m).
        int64_t b = b1.shape[0], n = b1.shape[1], k = b1.shape[2], m = b2.shape[2];
        Value l = clang::reshape(clang::permute(a[1], {1, 0, 2}, "ltorch.addbmm"), {n, b * k},
                                 "ltorch.addbmm");
        Value r = clang::reshape(a[2], {b * k, m}, "ltorch.addbmm");
        Value p = op("mm", {l, r});
        return clang::expandTo(addScaled(a[0], p, a[3], a[4]), p.tensor().shape, "ltorch.addbmm");
      },
      kMatmulOp);
  define("addr", "a, vec1, vec2, *, beta=1, alpha=1", {"torch.addr", "torch.Tensor.addr"},
         [](const Args& a) {
           T(a[0], "addr");
           Value p = op("outer", {a[1], a[2]});
           return clang::expandTo(addScaled(a[0], p, a[3], a[4]), p.tensor().shape, "ltorch.addr");
         });
  define(
      "addcmul", "a, tensor1, tensor2, *, value=1", {"torch.addcmul", "torch.Tensor.addcmul"},
      [](const Args& a) {
        for (size_t i = 0; i < 3; ++i)
          THUNDER_CHECK_KIND(T(a[i], "addcmul").dtype != DType::Bool, ErrorKind::Type,
                             "ltorch.addcmul: bool tensors are not supported");
        Value p = op("mul", {a[1], a[2]});
        if (!(a[3].isNumber() && a[3].toDouble() == 1.0)) p = op("mul", {p, a[3]});
        return op("add", {a[0], p});
      },
      kElementwise);
  define(
      "addcdiv", "a, tensor1, tensor2, *, value=1", {"torch.addcdiv", "torch.Tensor.addcdiv"},
      [](const Args& a) {
        const TensorProxy &x = T(a[1], "addcdiv", "tensor1"), &y = T(a[2], "addcdiv", "tensor2");
        THUNDER_CHECK_KIND(!(isIntegral(x.dtype) || x.dtype == DType::Bool) ||
                               !(isIntegral(y.dtype) || y.dtype == DType::Bool),
                           ErrorKind::Runtime,
                           "ltorch.addcdiv: integer division with addcdiv is "
                           "not supported (tensor1 and tensor2 are ",
                           dtypeName(x.dtype), " and ", dtypeName(y.dtype), ")");
        Value p = op("div", {a[1], a[2]});
        if (!(a[3].isNumber() && a[3].toDouble() == 1.0)) p = op("mul", {p, a[3]});
        return op("add", {a[0], p});
      },
      kElementwise);
  for (const char* n : {"outer", "ger"}) {
    std::string name = n;
    define(name, "a, vec2", {"torch." + name, "torch.Tensor." + name}, [name](const Args& a) {
      const TensorProxy &x = T(a[0], name), &y = T(a[1], name, "vec2");
      checkDims(x, 1, name, "a");
      checkDims(y, 1, name, "vec2");
      return op("mul",
                {clang::unsqueeze(a[0], 1, opn(name)), clang::unsqueeze(a[1], 0, opn(name))});
    });
  }
  define(
      "dot", "a, tensor", {"torch.dot", "torch.Tensor.dot"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "dot"), &y = T(a[1], "dot", "tensor");
        checkDims(x, 1, "dot", "a");
        checkDims(y, 1, "dot", "tensor");
        THUNDER_CHECK(x.shape == y.shape, "ltorch.dot: inconsistent tensor size, expected shapes ",
                      shapeStr(x.shape), " and ", shapeStr(y.shape), " to match");
        THUNDER_CHECK_KIND(x.dtype == y.dtype, ErrorKind::Type,
                           "ltorch.dot: expected both vectors to "
                           "have the same dtype, but got ",
                           dtypeName(x.dtype), " and ", dtypeName(y.dtype));
        return prims::matmul(a[0], a[1]);
      },
      kMatmulOp);
  define(
      "mv", "a, vec", {"torch.mv", "torch.Tensor.mv"},
      [](const Args& a) {
        checkDims(T(a[0], "mv"), 2, "mv", "a");
        checkDims(T(a[1], "mv", "vec"), 1, "mv", "vec");
        return op("matmul", {a[0], a[1]});
      },
      kMatmulOp);
  define(
      "einsum", "equation, *operands", {"torch.einsum"},
      [](const Args& a) {
        std::vector<Value> ops = a[1].items();
        // einsum(eq, [a, b]) passes the operands as one list.
        if (ops.size() == 1 && ops[0].isSequence()) ops = ops[0].items();
        THUNDER_CHECK_KIND(a[0].isString(), ErrorKind::Type,
                           "ltorch.einsum: expected an equation string, got ", describe(a[0]));
        return einsum(a[0].toString(), ops);
      },
      kMatmulOp);
}

// ---- shape utilities ------------------------------------------------------------------------

std::vector<int64_t> intsOrVarargs(const Value& v) {
  // f(x, 2, 3) and f(x, (2, 3)) both reach a *varargs parameter.
  if (v.isSequence() && v.items().size() == 1 && v.items()[0].isSequence())
    return v.items()[0].toInts();
  return v.toInts();
}

Value rollImpl(const Value& x, int64_t shift, int64_t d) {
  const TensorProxy& t = x.tensor();
  int64_t n = t.shape[d];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  Value tail = clang::sliceInDim(x, d, n - s, n, 1, "ltorch.roll");
  Value head = clang::sliceInDim(x, d, 0, n - s, 1, "ltorch.roll");
  return prims::cat({tail, head}, d);
}

void registerShapeUtilities() {
  define("repeat_interleave", "a, repeats, dim=None, *, output_size=None",
         {"torch.repeat_interleave", "torch.Tensor.repeat_interleave"}, [](const Args& a) {
           const TensorProxy& t0 = T(a[0], "repeat_interleave");
           THUNDER_CHECK_KIND(a[1].isInt(), ErrorKind::NotImplemented,
                              "ltorch.repeat_interleave: only integer repeats are supported");
           int64_t r = a[1].toInt();
           THUNDER_CHECK(r >= 0, "ltorch.repeat_interleave: repeats must be non-negative, but got ",
                         r);
           Value x = a[0];
           int64_t d = 0;
           if (a[2].isNone())
             x = clang::reshape(a[0], {t0.numel()}, "ltorch.repeat_interleave");
           else
             d = dimOf(t0, a[2], "repeat_interleave");
           if (x.tensor().ndim() == 0) x = clang::reshape(x, {1}, "ltorch.repeat_interleave");
           const TensorProxy& t = x.tensor();
           Shape expanded = t.shape, out = t.shape;
           expanded.insert(expanded.begin() + d + 1, r);
           out[d] *= r;
           Value u = clang::unsqueeze(x, d + 1, "ltorch.repeat_interleave");
           Value e = clang::expandTo(u, expanded, "ltorch.repeat_interleave");
           return clang::reshape(e, out, "ltorch.repeat_interleave");
         });
  define("tile", "a, dims", {"torch.tile", "torch.Tensor.tile"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "tile");
    std::vector<int64_t> reps = a[1].toInts();
    while (static_cast<int64_t>(reps.size()) < t.ndim()) reps.insert(reps.begin(), 1);
    return op("repeat", {a[0], Value::ints(reps)});
  });
  define("roll", "a, shifts, dims=None", {"torch.roll", "torch.Tensor.roll"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "roll");
    std::vector<int64_t> shifts = a[1].toInts();
    if (a[2].isNone()) {
      THUNDER_CHECK(shifts.size() == 1, "ltorch.roll: with dims=None, shifts must be one number");
      Value flat = clang::reshape(a[0], {t.numel()}, "ltorch.roll");
      return clang::reshape(rollImpl(flat, shifts[0], 0), t.shape, "ltorch.roll");
    }
    std::vector<int64_t> dims = a[2].toInts();
    THUNDER_CHECK(shifts.size() == dims.size(),
                  "ltorch.roll: shifts and dims must have the same "
                  "length, got ",
                  shifts.size(), " and ", dims.size());
    Value x = a[0];
    if (t.ndim() == 0) return x;
    for (size_t i = 0; i < dims.size(); ++i)
      x = rollImpl(x, shifts[i], canonicalizeDim(t.ndim(), dims[i], "ltorch.roll"));
    return x;
  });
  define("rot90", "a, k=1, dims=None", {"torch.rot90", "torch.Tensor.rot90"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "rot90");
    std::vector<int64_t> dims = a[2].isNone() ? std::vector<int64_t>{0, 1} : a[2].toInts();
    THUNDER_CHECK(dims.size() == 2, "ltorch.rot90: expected 2 dims, but got ", dims.size());
    THUNDER_CHECK(t.ndim() >= 2, "ltorch.rot90: expected at least 2 dimensions, but got shape ",
                  shapeStr(t.shape));
    int64_t d0 = canonicalizeDim(t.ndim(), dims[0], "ltorch.rot90");
    int64_t d1 = canonicalizeDim(t.ndim(), dims[1], "ltorch.rot90");
    THUNDER_CHECK(d0 != d1, "ltorch.rot90: the rotation dims must differ, but got ",
                  shapeStr(dims));
    int64_t k = ((a[1].toInt() % 4) + 4) % 4;
    if (k == 0) return a[0];
    if (k == 2) return prims::flip(a[0], {d0, d1});
    if (k == 1) return clang::transpose(prims::flip(a[0], {d1}), d0, d1, "ltorch.rot90");
    return prims::flip(clang::transpose(a[0], d0, d1, "ltorch.rot90"), {d1});
  });
  define("fliplr", "a", {"torch.fliplr", "torch.Tensor.fliplr"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "fliplr");
    THUNDER_CHECK(t.ndim() >= 2, "ltorch.fliplr: expected at least 2 dimensions, but got shape ",
                  shapeStr(t.shape));
    return prims::flip(a[0], {1});
  });
  define("flipud", "a", {"torch.flipud", "torch.Tensor.flipud"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "flipud");
    THUNDER_CHECK(t.ndim() >= 1, "ltorch.flipud: expected at least 1 dimension, but got shape ",
                  shapeStr(t.shape));
    return prims::flip(a[0], {0});
  });
  define("diff", "a, n=1, dim=-1, prepend=None, append=None", {"torch.diff", "torch.Tensor.diff"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "diff");
           THUNDER_CHECK(t.ndim() >= 1,
                         "ltorch.diff: expected at least 1 dimension, but got a 0-dim tensor");
           int64_t d = dimOf(t, a[2], "diff");
           int64_t n = a[1].toInt();
           THUNDER_CHECK(n >= 0, "ltorch.diff: order must be non-negative, but got ", n);
           std::vector<Value> parts;
           auto side = [&](const Value& v, const char* arg) {
             if (v.isNone()) return;
             if (v.isTensor()) {
               parts.push_back(v.tensor().ndim() == 0 ? [&] {
                 Shape s = t.shape;
                 s[d] = 1;
                 return clang::expandTo(v, s, "ltorch.diff");
               }()
                                                      : v);
             } else {
               Shape s = t.shape;
               s[d] = 1;
               parts.push_back(prims::full(s, clang::maybeConvert(v, t.dtype), t.device, t.dtype));
             }
             (void)arg;
           };
           side(a[3], "prepend");
           parts.push_back(a[0]);
           side(a[4], "append");
           Value x = parts.size() == 1 ? a[0] : op("cat", {Value::list(parts), d});
           bool boolean = x.tensor().dtype == DType::Bool;
           for (int64_t i = 0; i < n && x.tensor().shape[d] > 0; ++i) {
             int64_t len = x.tensor().shape[d];
             Value hi = clang::sliceInDim(x, d, 1, len, 1, "ltorch.diff");
             Value lo = clang::sliceInDim(x, d, 0, len - 1, 1, "ltorch.diff");
             x = boolean ? op("ne", {hi, lo}) : op("sub", {hi, lo});
           }
           return x;
         });
  define(
      "unflatten", "a, dim, sizes", {"torch.unflatten", "torch.Tensor.unflatten"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "unflatten");
        THUNDER_CHECK(t.ndim() >= 1, "ltorch.unflatten: cannot unflatten a 0-dim tensor");
        int64_t d = dimOf(t, a[1], "unflatten");
        std::vector<int64_t> sizes = a[2].toInts();
        THUNDER_CHECK(!sizes.empty(), "ltorch.unflatten: sizes must be non-empty");
        int64_t known = 1, infer = -1;
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (sizes[i] == -1) {
            THUNDER_CHECK(infer < 0, "ltorch.unflatten: only one dimension can be inferred");
            infer = static_cast<int64_t>(i);
          } else {
            known *= sizes[i];
          }
        }
        if (infer >= 0) sizes[infer] = known == 0 ? 0 : t.shape[d] / known;
        THUNDER_CHECK(numelOf(sizes) == t.shape[d], "ltorch.unflatten: sizes ",
                      shapeStr(a[2].toInts()), " do not multiply to the length ", t.shape[d],
                      " of dimension ", d);
        Shape out(t.shape.begin(), t.shape.begin() + d);
        out.insert(out.end(), sizes.begin(), sizes.end());
        out.insert(out.end(), t.shape.begin() + d + 1, t.shape.end());
        return clang::reshape(a[0], out, "ltorch.unflatten");
      },
      kShapeOp);
  // PyTorch's overloads name the second argument `sections` (an int) or `indices` (a list) when
  // it is passed by keyword (torchvision's MViT: tensor_split(x, indices=(1,), dim=2)).
  define("tensor_split", "a, indices_or_sections=None, dim=0, *, indices=None, sections=None",
         {"torch.tensor_split", "torch.Tensor.tensor_split"}, [](const Args& a) {
           const TensorProxy& t = T(a[0], "tensor_split");
           THUNDER_CHECK(
               t.ndim() >= 1,
               "ltorch.tensor_split: expected at least 1 dimension, but got a 0-dim tensor");
           int given = !a[1].isNone() + !a[3].isNone() + !a[4].isNone();
           THUNDER_CHECK(given == 1, "ltorch.tensor_split: expected exactly one of indices_or_sections, indices and "
                                     "sections, but got ", given);
           const Value& what = !a[1].isNone() ? a[1] : !a[3].isNone() ? a[3] : a[4];
           THUNDER_CHECK(a[3].isNone() || !what.isInt(), "ltorch.tensor_split: indices must be a sequence of ints");
           THUNDER_CHECK(a[4].isNone() || what.isInt(), "ltorch.tensor_split: sections must be an int");
           int64_t d = dimOf(t, a[2], "tensor_split");
           int64_t n = t.shape[d];
           std::vector<int64_t> bounds;
           if (what.isInt()) {
             int64_t s = what.toInt();
             THUNDER_CHECK(s > 0,
                           "ltorch.tensor_split: number of sections must be positive, but got ", s);
             int64_t q = n / s, r = n % s, at = 0;
             for (int64_t i = 0; i < s - 1; ++i) bounds.push_back(at += q + (i < r ? 1 : 0));
           } else {
             THUNDER_CHECK_KIND(!what.isTensor(), ErrorKind::NotImplemented,
                                "ltorch.tensor_split: a tensor of indices is not supported");
             bounds = what.toInts();
           }
           std::vector<Value> out;
           int64_t prev = 0;
           bounds.push_back(n);
           for (int64_t b : bounds) {
             int64_t lo = std::clamp<int64_t>(prev < 0 ? prev + n : prev, 0, n);
             int64_t hi = std::clamp<int64_t>(b < 0 ? b + n : b, 0, n);
             hi = std::max(hi, lo);
             out.push_back(clang::sliceInDim(a[0], d, lo, hi, 1, "ltorch.tensor_split"));
             prev = b;
           }
           return Value::tuple(out);
         });
  for (const char* n : {"hsplit", "vsplit"}) {
    std::string name = n;
    define(name, "a, indices_or_sections", {"torch." + name, "torch.Tensor." + name},
           [name](const Args& a) {
             const TensorProxy& t = T(a[0], name);
             bool h = name == "hsplit";
             THUNDER_CHECK(t.ndim() >= (h ? 1 : 2), opn(name), ": expected at least ", h ? 1 : 2,
                           " dimensions, but got shape ", shapeStr(t.shape));
             int64_t d = h ? (t.ndim() == 1 ? 0 : 1) : 0;
             if (a[1].isInt()) {
               int64_t s = a[1].toInt();
               THUNDER_CHECK(s > 0 && t.shape[d] % s == 0, opn(name), ": dimension ", d,
                             " of length ", t.shape[d], " is not divisible into ", s, " sections");
             }
             return op("tensor_split", {a[0], a[1], d});
           });
  }
  define(
      "ravel", "a", {"torch.ravel", "torch.Tensor.ravel"},
      [](const Args& a) {
        return clang::reshape(a[0], {T(a[0], "ravel").numel()}, "ltorch.ravel");
      },
      kShapeOp);
  define(
      "swapdims", "a, dim0, dim1", {"torch.swapdims", "torch.Tensor.swapdims"},
      [](const Args& a) { return op("transpose", {a[0], a[1], a[2]}); }, kShapeOp);
  for (int k = 1; k <= 3; ++k) {
    std::string name = "atleast_" + std::to_string(k) + "d";
    define(
        name, "a", {"torch." + name},
        [k, name](const Args& a) {
          const TensorProxy& t = T(a[0], name);
          if (t.ndim() >= k) return a[0];
          Shape s = t.shape;
          if (k == 1)
            s = {t.numel()};
          else if (k == 2)
            s = t.ndim() == 0 ? Shape{1, 1} : Shape{1, t.shape[0]};
          else
            s = t.ndim() == 0   ? Shape{1, 1, 1}
                : t.ndim() == 1 ? Shape{1, t.shape[0], 1}
                                : Shape{t.shape[0], t.shape[1], 1};
          return clang::reshape(a[0], s, opn(name));
        },
        kShapeOp);
  }
  define("hstack", "tensors", {"torch.hstack"}, [](const Args& a) {
    std::vector<Value> ts;
    for (const Value& v : a[0].items()) ts.push_back(op("atleast_1d", {v}));
    THUNDER_CHECK(!ts.empty(), "ltorch.hstack: expected a non-empty list of tensors");
    return op("cat", {Value::list(ts), ts[0].tensor().ndim() == 1 ? 0 : 1});
  });
  define("vstack", "tensors", {"torch.vstack", "torch.row_stack"}, [](const Args& a) {
    std::vector<Value> ts;
    for (const Value& v : a[0].items()) ts.push_back(op("atleast_2d", {v}));
    THUNDER_CHECK(!ts.empty(), "ltorch.vstack: expected a non-empty list of tensors");
    return op("cat", {Value::list(ts), 0});
  });
  define("clone", "a, *, memory_format=None", {"torch.clone", "torch.Tensor.clone"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "clone");
           return prims::convert_element_type(a[0], t.dtype);
         });
  // An alias through which no gradient flows (autodiff never differentiates through it); tracing
  // maps Tensor.detach to it.
  define("detach", "a", {}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "detach");
    return prims::convert_element_type(a[0], t.dtype);
  });
  define("meshgrid", "*tensors, indexing=None", {"torch.meshgrid"}, [](const Args& a) {
    std::vector<Value> ts = a[0].items();
    if (ts.size() == 1 && ts[0].isSequence()) ts = ts[0].items();
    THUNDER_CHECK(!ts.empty(), "ltorch.meshgrid: expected at least one tensor");
    std::string indexing = a[1].isNone() ? "ij" : a[1].toString();
    THUNDER_CHECK_KIND(indexing == "ij" || indexing == "xy", ErrorKind::Value,
                       "ltorch.meshgrid: indexing must be 'ij' or 'xy', but got '", indexing, "'");
    Shape shape;
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorProxy& t =
          expectTensor(ts[i], "ltorch.meshgrid", "tensors[" + std::to_string(i) + "]");
      THUNDER_CHECK(t.ndim() <= 1,
                    "ltorch.meshgrid: expected 0- or 1-dimensional tensors, but tensor ", i,
                    " has shape ", shapeStr(t.shape));
      const DType first = ts[0].isTensor() ? ts[0].tensor().dtype : t.dtype;
      THUNDER_CHECK(t.dtype == first,
                    "ltorch.meshgrid: expected all tensors to have the same dtype, but tensor 0 is ",
                    dtypeName(first), " and tensor ", i, " is ", dtypeName(t.dtype));
      shape.push_back(t.numel());
    }
    bool xy = indexing == "xy" && ts.size() >= 2;
    if (xy) std::swap(shape[0], shape[1]);
    std::vector<Value> out;
    for (size_t i = 0; i < ts.size(); ++i) {
      int64_t d = static_cast<int64_t>(i);
      if (xy && i < 2) d = 1 - d;
      Value v = clang::reshape(ts[i], {ts[i].tensor().numel()}, "ltorch.meshgrid");
      out.push_back(prims::broadcast_in_dim(v, shape, {d}));
    }
    return Value::tuple(out);
  });
  define(
      "diagonal", "a, offset=0, dim1=0, dim2=1", {"torch.diagonal", "torch.Tensor.diagonal"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "diagonal");
        THUNDER_CHECK(t.ndim() >= 2,
                      "ltorch.diagonal: expected at least 2 dimensions, but got shape ",
                      shapeStr(t.shape));
        int64_t d1 = dimOf(t, a[2], "diagonal"), d2 = dimOf(t, a[3], "diagonal");
        THUNDER_CHECK(d1 != d2, "ltorch.diagonal: dim1 and dim2 cannot be the same dimension (", d1,
                      ")");
        int64_t off = a[1].toInt();
        // The two dims last, flattened: the diagonal is a strided slice of length L.
        std::vector<int64_t> perm;
        for (int64_t i = 0; i < t.ndim(); ++i)
          if (i != d1 && i != d2) perm.push_back(i);
        perm.push_back(d1);
        perm.push_back(d2);
        Value x = clang::permute(a[0], perm, "ltorch.diagonal");
        int64_t n = t.shape[d1], m = t.shape[d2];
        int64_t len = off >= 0 ? std::min(n, m - off) : std::min(n + off, m);
        len = std::max<int64_t>(len, 0);
        Shape batch(x.tensor().shape.begin(), x.tensor().shape.end() - 2);
        Shape flat = batch;
        flat.push_back(n * m);
        x = clang::reshape(x, flat, "ltorch.diagonal");
        int64_t startIdx = off >= 0 ? off : -off * m;
        int64_t last = static_cast<int64_t>(batch.size());
        if (len == 0) return clang::sliceInDim(x, last, 0, 0, 1, "ltorch.diagonal");
        return clang::sliceInDim(x, last, startIdx, startIdx + (len - 1) * (m + 1) + 1, m + 1,
                                 "ltorch.diagonal");
      },
      kShapeOp);
  define("diag_embed", "a, offset=0, dim1=-2, dim2=-1",
         {"torch.diag_embed", "torch.Tensor.diag_embed"}, [](const Args& a) {
           const TensorProxy& t = T(a[0], "diag_embed");
           THUNDER_CHECK(t.ndim() >= 1, "ltorch.diag_embed: expected at least 1 dimension");
           int64_t off = a[1].toInt();
           int64_t n = t.shape.back(), size = n + std::abs(off);
           int64_t outNdim = t.ndim() + 1;
           int64_t d1 = canonicalizeDim(outNdim, a[2].toInt(), "ltorch.diag_embed");
           int64_t d2 = canonicalizeDim(outNdim, a[3].toInt(), "ltorch.diag_embed");
           THUNDER_CHECK(d1 != d2,
                         "ltorch.diag_embed: dim1 and dim2 cannot be the same dimension (", d1,
                         ")");
           // out[..., i, j] = a[..., min(i, j)] where j - i == offset, else 0.
           Value rows = clang::unsqueeze(prims::iota(size, 0, 1, t.device, DType::Int64), 1,
                                         "ltorch.diag_embed");
           Value cols = clang::unsqueeze(prims::iota(size, 0, 1, t.device, DType::Int64), 0,
                                         "ltorch.diag_embed");
           Value mask = op("eq", {op("sub", {cols, rows}), off});
           Value which = op("clamp", {off >= 0 ? op("add", {op("mul", {cols, 0}), rows})
                                               : op("add", {op("mul", {rows, 0}), cols}),
                                      0, std::max<int64_t>(n - 1, 0)});
           Shape batch(t.shape.begin(), t.shape.end() - 1);
           Shape full = batch;
           full.push_back(size);
           full.push_back(size);
           Value vals;
           if (n == 0 && !isFloating(t.dtype) && !isComplex(t.dtype)) {
             vals = prims::full(full, clang::maybeConvert(Value(0), t.dtype), t.device, t.dtype);
           } else if (n == 0) {
             // Zeros that still depend on a (the sum of its empty last dim), as eager's do.
             Value z = op("sum", {a[0], -1, true}, {{"dtype", t.dtype}});
             vals = clang::expandTo(clang::unsqueeze(z, t.ndim(), "ltorch.diag_embed"), full,
                                    "ltorch.diag_embed");
           } else {
             Value taken = prims::take(
                 a[0], clang::reshape(which, {size * size}, "ltorch.diag_embed"), t.ndim() - 1);
             vals = clang::reshape(taken, full, "ltorch.diag_embed");
           }
           Value r = clang::where(clang::expandTo(mask, full, "ltorch.diag_embed"), vals,
                                  clang::maybeConvert(Value(0), t.dtype), "ltorch.diag_embed");
           r = clang::maybeConvert(r, t.dtype);
           // Move the two new trailing dims to dim1 and dim2.
           std::vector<int64_t> perm(outNdim, -1);
           perm[d1] = outNdim - 1 - 1;
           perm[d2] = outNdim - 1;
           int64_t next = 0;
           for (auto& p : perm)
             if (p < 0) p = next++;
           return clang::permute(r, perm, "ltorch.diag_embed");
         });
  define("diag", "a, diagonal=0", {"torch.diag", "torch.Tensor.diag"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "diag");
    THUNDER_CHECK(t.ndim() == 1 || t.ndim() == 2,
                  "ltorch.diag: expected a 1- or 2-dimensional tensor, "
                  "but got shape ",
                  shapeStr(t.shape));
    if (t.ndim() == 1) return op("diag_embed", {a[0], a[1]});
    return op("diagonal", {a[0], a[1]});
  });
  define("trace", "a", {"torch.trace", "torch.Tensor.trace"}, [](const Args& a) {
    checkDims(T(a[0], "trace"), 2, "trace", "a");
    THUNDER_CHECK_KIND(a[0].tensor().dtype != DType::Bool, ErrorKind::Type,
                       "ltorch.trace: bool tensors are not supported");
    return op("sum", {op("diagonal", {a[0]})});
  });
}

// ---- factories ------------------------------------------------------------------------------

void registerFactories() {
  define(
      "eye", "n, m=None, *, dtype=None, device=None, requires_grad=False", {"torch.eye"},
      [](const Args& a) {
        int64_t n = a[0].toInt(), m = a[1].isNone() ? n : a[1].toInt();
        THUNDER_CHECK(n >= 0 && m >= 0, "ltorch.eye: n and m must be non-negative, but got ", n,
                      " and ", m);
        DType dt = optDType(a[2]).value_or(DType::Float32);
        Device dev = deviceOr(a[3]);
        Value rows = clang::unsqueeze(prims::iota(n, 0, 1, dev, DType::Int64), 1, "ltorch.eye");
        Value cols = clang::unsqueeze(prims::iota(m, 0, 1, dev, DType::Int64), 0, "ltorch.eye");
        Value eq = clang::expandTo(op("eq", {rows, cols}), {n, m}, "ltorch.eye");
        return clang::maybeConvert(eq, dt);
      },
      kCreation);
  define(
      "linspace", "start, end, steps, *, dtype=None, device=None, requires_grad=False",
      {"torch.linspace"},
      [](const Args& a) {
        THUNDER_CHECK_KIND(!a[0].isTensor() && !a[1].isTensor(), ErrorKind::NotImplemented,
                           "ltorch.linspace: tensor start or end is not supported");
        int64_t steps = a[2].toInt();
        THUNDER_CHECK(steps >= 0, "ltorch.linspace: number of steps must be non-negative, but got ",
                      steps);
        DType dt = optDType(a[3]).value_or(DType::Float32);
        THUNDER_CHECK_KIND(isFloating(dt), ErrorKind::NotImplemented, "ltorch.linspace: dtype ",
                           dtypeName(dt), " is not supported (floating dtypes only)");
        Device dev = deviceOr(a[4]);
        double s = a[0].toDouble(), e = a[1].toDouble();
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        if (steps <= 1) return prims::full({steps}, s, dev, dt);
        // PyTorch's kernel: the first half steps up from start, the second half down from end.
        double step = (e - s) / static_cast<double>(steps - 1);
        int64_t half = steps / 2;
        Value idx = clang::maybeConvert(prims::iota(steps, 0, 1, dev, DType::Int64), comp);
        Value up = op("add", {op("mul", {idx, step}), s});
        Value down =
            op("sub", {e, op("mul", {op("sub", {static_cast<double>(steps - 1), idx}), step})});
        Value r = op("where", {op("lt", {idx, static_cast<double>(half)}), up, down});
        return clang::maybeConvert(r, dt);
      },
      kCreation);
  define(
      "logspace", "start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False",
      {"torch.logspace"},
      [](const Args& a) {
        DType dt = optDType(a[4]).value_or(DType::Float32);
        THUNDER_CHECK_KIND(isFloating(dt), ErrorKind::NotImplemented, "ltorch.logspace: dtype ",
                           dtypeName(dt), " is not supported (floating dtypes only)");
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        Value exps = op("linspace", {a[0], a[1], a[2]}, {{"dtype", comp}, {"device", a[5]}});
        return clang::maybeConvert(op("pow", {a[3].toDouble(), exps}), dt);
      },
      kCreation);
  // Tensor.new_*: the tensor's dtype and device unless given.
  auto newFull = [](const Value& self, const Shape& shape, const Value& fill, const Value& dtype,
                    const Value& device, const std::string& name) {
    const TensorProxy& t = T(self, name);
    DType dt = optDType(dtype).value_or(t.dtype);
    return prims::full(shape, clang::maybeConvert(fill, dt), deviceOr(device, t.device), dt);
  };
  for (const char* which : {"new_zeros", "new_ones", "new_empty"}) {
    std::string name = which;
    int fill = name == "new_ones" ? 1 : 0;
    define(
        name, "a, *size, dtype=None, device=None, requires_grad=False", {"torch.Tensor." + name},
        [=](const Args& a) { return newFull(a[0], intsOrVarargs(a[1]), fill, a[2], a[3], name); },
        kCreation);
  }
  define(
      "new_full", "a, size, fill_value, *, dtype=None, device=None, requires_grad=False",
      {"torch.Tensor.new_full"},
      [=](const Args& a) {
        THUNDER_CHECK_KIND(a[2].isNumber(), ErrorKind::Type,
                           "ltorch.new_full: fill_value must be a number, got ", describe(a[2]));
        return newFull(a[0], a[1].toInts(), a[2], a[3], a[4], "new_full");
      },
      kCreation);
}

// ---- elementwise ----------------------------------------------------------------------------

void defAlias(const std::string& name, const std::string& target, bool method = true) {
  std::vector<std::string> torch = {"torch." + name};
  if (method) torch.push_back("torch.Tensor." + name);
  define(name, "a", torch, [target](const Args& a) { return op(target, {a[0]}); }, kElementwise);
}

/// A function computed in float for integer inputs (as PyTorch's IntToFloat ops).
Value floatOf(const Value& a) {
  DType dt = a.tensor().dtype;
  return (isIntegral(dt) || dt == DType::Bool) ? clang::maybeConvert(a, DType::Float32) : a;
}

Value isInf(const Value& a, int sign) {
  const TensorProxy& t = a.tensor();
  if (!isFloating(t.dtype) && !isComplex(t.dtype)) return op("ne", {a, a});  // all false
  if (isComplex(t.dtype)) {
    THUNDER_CHECK(sign == 0, "isposinf/isneginf: complex inputs are not supported");
    return op("logical_or", {isInf(prims::real(a), 0), isInf(prims::imag(a), 0)});
  }
  if (sign > 0) return op("eq", {a, INFINITY});
  if (sign < 0) return op("eq", {a, -INFINITY});
  return op("eq", {op("abs", {a}), INFINITY});
}

/// xlogy(x, y) = x * log(y) and xlog1py(x, y) = x * log1p(y) (`onePlus`), as ATen's kernels: NaN
/// where y is NaN, else 0 where x == 0 (whatever log(y) is: -inf at y = 0, NaN below), else the
/// product. Either operand may be a number. Their gradients are eager's formulas (grad_rules.cpp).
Value xlogy(const Args& a, const std::string& name, bool onePlus) {
  THUNDER_CHECK_KIND(a[0].isTensor() || a[1].isTensor(), ErrorKind::Type, opn(name),
                     ": expected at least one tensor argument");
  auto [comp, result] = elementwiseTypePromotion({a[0], a[1]}, PK::IntToFloat);
  THUNDER_CHECK_KIND(!isComplex(result), ErrorKind::Type, opn(name),
                     ": complex inputs are not supported, got ", dtypeName(result));
  Value x = clang::maybeConvert(a[0], comp), y = clang::maybeConvert(a[1], comp);
  Value logY = y.isTensor() ? op(onePlus ? "log1p" : "log", {y})
                            : Value(onePlus ? std::log1p(y.toDouble()) : std::log(y.toDouble()));
  // a NaN number y, or a nonzero number x: the product everywhere
  if ((!y.isTensor() && std::isnan(y.toDouble())) || (!x.isTensor() && x.toDouble() != 0))
    return clang::maybeConvert(op("mul", {x, logY}), result);
  Value zero = clang::maybeConvert(Value(0), comp);
  Value r = x.isTensor() ? op("where", {op("eq", {x, 0}), zero, op("mul", {x, logY})}) : zero;
  if (y.isTensor()) r = op("where", {op("isnan", {y}), y, r});
  return clang::maybeConvert(r, result);
}

void registerElementwiseTensorOps() {
  for (auto [alias, target] : std::vector<std::pair<const char*, const char*>>{{"arccos", "acos"},
                                                                               {"arcsin", "asin"},
                                                                               {"arctan", "atan"},
                                                                               {"arccosh", "acosh"},
                                                                               {"arcsinh", "asinh"},
                                                                               {"arctanh", "atanh"},
                                                                               {"absolute", "abs"}})
    defAlias(alias, target);
  define(
      "isnan", "a", {"torch.isnan", "torch.Tensor.isnan"},
      [](const Args& a) {
        T(a[0], "isnan");
        return op("ne", {a[0], a[0]});
      },
      kElementwise);
  define(
      "isinf", "a", {"torch.isinf", "torch.Tensor.isinf"},
      [](const Args& a) {
        T(a[0], "isinf");
        return isInf(a[0], 0);
      },
      kElementwise);
  define(
      "isposinf", "a", {"torch.isposinf", "torch.Tensor.isposinf"},
      [](const Args& a) {
        THUNDER_CHECK_KIND(!isComplex(T(a[0], "isposinf").dtype), ErrorKind::Type,
                           "ltorch.isposinf: complex tensors are not supported");
        return isInf(a[0], 1);
      },
      kElementwise);
  define(
      "isneginf", "a", {"torch.isneginf", "torch.Tensor.isneginf"},
      [](const Args& a) {
        THUNDER_CHECK_KIND(!isComplex(T(a[0], "isneginf").dtype), ErrorKind::Type,
                           "ltorch.isneginf: complex tensors are not supported");
        return isInf(a[0], -1);
      },
      kElementwise);
  define(
      "nan_to_num", "a, nan=0.0, posinf=None, neginf=None",
      {"torch.nan_to_num", "torch.Tensor.nan_to_num"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "nan_to_num");
        if (isComplex(t.dtype)) {
          // The real and imaginary parts, each on its own.
          auto part = [&](const Value& x) { return op("nan_to_num", {x, a[1], a[2], a[3]}); };
          return op("complex", {part(prims::real(a[0])), part(prims::imag(a[0]))});
        }
        if (!isFloating(t.dtype)) return a[0];
        double big = finfoMax(t.dtype);
        Value pos = a[2].isNone() ? Value(big) : a[2];
        Value neg = a[3].isNone() ? Value(-big) : a[3];
        Value nan = a[1].isNone() ? Value(0.0) : a[1];
        Value r = op("where", {op("isnan", {a[0]}), clang::maybeConvert(nan, t.dtype), a[0]});
        r = op("where", {op("isposinf", {a[0]}), pos, r});
        r = op("where", {op("isneginf", {a[0]}), neg, r});
        return clang::maybeConvert(r, t.dtype);
      },
      kElementwise);
  define(
      "clamp_min", "a, min", {"torch.clamp_min", "torch.Tensor.clamp_min"},
      [](const Args& a) { return op("clamp", {a[0], a[1], Value()}); }, kElementwise);
  define(
      "clamp_max", "a, max", {"torch.clamp_max", "torch.Tensor.clamp_max"},
      [](const Args& a) { return op("clamp", {a[0], Value(), a[1]}); }, kElementwise);
  define(
      "frac", "a", {"torch.frac", "torch.Tensor.frac"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "frac");
        // NotImplementedError, as eager's kernel ("frac_cpu" not implemented for 'Long': seed 16322)
        THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::NotImplemented,
                           "ltorch.frac: expected a floating point "
                           "tensor, but got ",
                           dtypeName(t.dtype));
        return op("sub", {a[0], op("trunc", {a[0]})});
      },
      kElementwise);
  define(
      "hypot", "a, other", {"torch.hypot", "torch.Tensor.hypot"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "hypot"), &y = T(a[1], "hypot", "other");
        // NotImplementedError, as eager's kernel ("hypot_cpu" not implemented for 'Long')
        THUNDER_CHECK_KIND(isFloating(x.dtype) && isFloating(y.dtype), ErrorKind::NotImplemented,
                           "ltorch.hypot: expected floating point tensors, but got ",
                           dtypeName(x.dtype), " and ", dtypeName(y.dtype));
        // eager's promotion: a 0-dim operand does not widen a dimensioned one (fuzzer seed 14128)
        DType dt = elementwiseTypePromotion({a[0], a[1]}, PK::Default).second;
        // In float64: sqrt(p * p + q * q) in float32 was off by an ulp from eager's hypot (fuzzer
        // seed 15465) and overflowed past 1.8e19
        DType comp = DType::Float64;
        Value p = clang::maybeConvert(a[0], comp), q = clang::maybeConvert(a[1], comp);
        Value r = op("sqrt", {op("add", {op("mul", {p, p}), op("mul", {q, q})})});
        // An infinite operand gives inf even with a NaN beside it, as C's hypot (fuzzer seed
        // 43267: hypot(NaN, -inf) was NaN)
        r = op("where", {op("logical_or", {op("isinf", {p}), op("isinf", {q})}), INFINITY, r});
        return clang::maybeConvert(r, dt);
      },
      kElementwise);
  for (bool two : {false, true}) {
    std::string name = two ? "logaddexp2" : "logaddexp";
    define(
        name, "a, other", {"torch." + name, "torch.Tensor." + name},
        [two, name](const Args& a) {
          const TensorProxy &x = T(a[0], name), &y = T(a[1], name, "other");
          THUNDER_CHECK_KIND(isFloating(x.dtype) && isFloating(y.dtype), ErrorKind::Type, opn(name),
                             ": expected floating point tensors, but got ", dtypeName(x.dtype),
                             " and ", dtypeName(y.dtype));
          DType dt = promoteTypes(x.dtype, y.dtype);
          DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
          Value p = clang::maybeConvert(a[0], comp), q = clang::maybeConvert(a[1], comp);
          // max + log(1 + exp(-|a - b|)); equal infinities give themselves.
          Value m = op("maximum", {p, q});
          Value d = op("neg", {op("abs", {op("sub", {p, q})})});
          Value r = two ? op("add", {m, op("div", {op("log1p", {op("exp2", {d})}), M_LN2})})
                        : op("add", {m, op("log1p", {op("exp", {d})})});
          r = op("where", {op("logical_and", {op("isinf", {p}), op("eq", {p, q})}), p, r});
          return clang::maybeConvert(r, dt);
        },
        kElementwise);
  }
  define("xlogy", "a, other", {"torch.xlogy", "torch.Tensor.xlogy", "torch.special.xlogy"},
         [](const Args& a) { return xlogy(a, "xlogy", false); }, kElementwise);
  define(
      "logit", "a, eps=None", {"torch.logit", "torch.Tensor.logit", "torch.special.logit"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "logit");
        THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type,
                           "ltorch.logit: complex tensors are not supported");
        DType dt = isFloating(t.dtype) ? t.dtype : DType::Float32;
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        Value x = clang::maybeConvert(a[0], comp);
        if (!a[1].isNone()) x = op("clamp", {x, a[1].toDouble(), 1.0 - a[1].toDouble()});
        return clang::maybeConvert(op("log", {op("div", {x, op("sub", {1.0, x})})}), dt);
      },
      kElementwise);
  define(
      "sinc", "a", {"torch.sinc", "torch.Tensor.sinc", "torch.special.sinc"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "sinc");
        DType dt = isFloating(t.dtype) || isComplex(t.dtype) ? t.dtype : DType::Float32;
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        Value x = clang::maybeConvert(a[0], comp);
        Value zero = op("eq", {x, 0});
        // A safe argument where x == 0 keeps the unused branch (and its gradient) finite.
        Value px = op("mul", {op("where", {zero, 1, x}), M_PI});
        Value r = op("where", {zero, 1.0, op("div", {op("sin", {px}), px})});
        return clang::maybeConvert(r, dt);
      },
      kElementwise);
  for (bool toRad : {true, false}) {
    std::string name = toRad ? "deg2rad" : "rad2deg";
    define(
        name, "a", {"torch." + name, "torch.Tensor." + name},
        [toRad, name](const Args& a) {
          const TensorProxy& t = T(a[0], name);
          THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type, opn(name),
                             ": complex tensors are not supported");
          return op("mul", {floatOf(a[0]), toRad ? M_PI / 180.0 : 180.0 / M_PI});
        },
        kElementwise);
  }
  define(
      "logical_xor", "a, other", {"torch.logical_xor", "torch.Tensor.logical_xor"},
      [](const Args& a) { return op("ne", {op("ne", {a[0], 0}), op("ne", {a[1], 0})}); },
      kElementwise);
  define(
      "float_power", "a, exponent", {"torch.float_power", "torch.Tensor.float_power"},
      [](const Args& a) {
        auto up = [](const Value& v) {
          if (!v.isTensor()) return v;
          return clang::maybeConvert(
              v, isComplex(v.tensor().dtype) ? DType::Complex128 : DType::Float64);
        };
        return op("pow", {up(a[0]), up(a[1])});
      },
      kElementwise);
  // Complex numbers.
  define("complex", "real, imag", {"torch.complex"}, [](const Args& a) {
    const TensorProxy &r = T(a[0], "complex", "real"), &i = T(a[1], "complex", "imag");
    THUNDER_CHECK(
        r.dtype == i.dtype && (r.dtype == DType::Float32 || r.dtype == DType::Float64),
        "ltorch.complex: expected real and imag of one dtype, float32 "
        "or float64, but got ",
        dtypeName(r.dtype), " and ", dtypeName(i.dtype));
    return op("add", {a[0], op("mul", {a[1], std::complex<double>(0.0, 1.0)})});
  });
  define("polar", "abs, angle", {"torch.polar"}, [](const Args& a) {
    const TensorProxy &r = T(a[0], "polar", "abs"), &th = T(a[1], "polar", "angle");
    THUNDER_CHECK(
        r.dtype == th.dtype && (r.dtype == DType::Float32 || r.dtype == DType::Float64),
        "ltorch.polar: expected abs and angle of one dtype, float32 "
        "or float64, but got ",
        dtypeName(r.dtype), " and ", dtypeName(th.dtype));
    return op("complex",
              {op("mul", {a[0], op("cos", {a[1]})}), op("mul", {a[0], op("sin", {a[1]})})});
  });
  define("view_as_real", "a", {"torch.view_as_real"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "view_as_real");
    THUNDER_CHECK_KIND(isComplex(t.dtype), ErrorKind::Type,
                       "ltorch.view_as_real: expected a complex tensor, but got ",
                       dtypeName(t.dtype));
    return op("stack", {Value::list({prims::real(a[0]), prims::imag(a[0])}), -1});
  });
  define("view_as_complex", "a", {"torch.view_as_complex"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "view_as_complex");
    THUNDER_CHECK_KIND(t.dtype == DType::Float32 || t.dtype == DType::Float64, ErrorKind::Type,
                       "ltorch.view_as_complex: expected a float32 or float64 tensor, but got ",
                       dtypeName(t.dtype));
    THUNDER_CHECK(t.ndim() >= 1 && t.shape.back() == 2,
                  "ltorch.view_as_complex: expected the last "
                  "dimension to have length 2, but got shape ",
                  shapeStr(t.shape));
    int64_t d = t.ndim() - 1;
    auto part = [&](int64_t i) {
      return prims::squeeze(clang::sliceInDim(a[0], d, i, i + 1, 1, "ltorch.view_as_complex"), {d});
    };
    return op("complex", {part(0), part(1)});
  });
}

// ---- reductions and norms -------------------------------------------------------------------

Value vectorNorm(const Value& x, double ord, const Value& dim, bool keepdim,
                 std::optional<DType> dtype, const std::string& name) {
  const TensorProxy& t = T(x, name);
  THUNDER_CHECK(isFloating(t.dtype) || isComplex(t.dtype), opn(name),
                     ": expected a floating point or complex input, but got ", dtypeName(t.dtype));
  DType result = complexToReal(dtype.value_or(t.dtype));
  DType comp = isLowPrecision(result) ? DType::Float32 : result;
  Value v = op("abs", {dtype ? clang::maybeConvert(x, *dtype) : x});
  v = clang::maybeConvert(v, comp);
  Value dims = dim.isNone() ? Value() : dim;
  Value r;
  if (std::isinf(ord)) {
    THUNDER_CHECK(t.numel() > 0 || !dim.isNone(), opn(name), ": the norm of order ", ord,
                  " of an empty tensor is not defined");
    r = op(ord > 0 ? "amax" : "amin", {v, dim.isNone() ? Value::tuple({}) : dims, keepdim});
  } else if (ord == 0) {
    // The count of nonzeros, through v where it is 0 so that the result has a (zero) gradient.
    r = op("sum", {op("where", {op("ne", {v, 0}), 1.0, v}), dims, keepdim});
  } else if (ord == 1) {
    r = op("sum", {v, dims, keepdim});
  } else {
    // The root of a zero sum gets a zero gradient, as eager's norm backward (masked where the
    // norm is 0); through sqrt or pow it would be inf * 0 = NaN (fuzzer seed 10938). The mask
    // multiplies, as eager's does (grad * (x / norm).masked_fill(norm == 0, 0)): an infinite
    // incoming gradient there gives NaN, not 0 (fuzzer seed 88584, sqrt of a zero norm).
    auto root = [&](const Value& s) {
      if (ord < 0) return op("pow", {s, 1.0 / ord});
      // s + (s == 0): 1 where s is 0, s exactly elsewhere, and a gradient that passes through
      // (a where would drop the NaN again).
      Value safe = op("add", {s, op("eq", {s, 0})});
      return op("mul", {ord == 2 ? op("sqrt", {safe}) : op("pow", {safe, 1.0 / ord}), op("ne", {s, 0})});
    };
    r = root(ord == 2 ? op("sum", {op("mul", {v, v}), dims, keepdim})
                      : op("sum", {op("pow", {v, ord}), dims, keepdim}));
  }
  return clang::maybeConvert(r, result);
}

double ordOf(const Value& v) {
  if (v.isString()) {
    THUNDER_CHECK_KIND(v.toString() == "fro", ErrorKind::NotImplemented, "ltorch.norm: p='",
                       v.toString(), "' is not supported");
    return 2.0;
  }
  return v.isNone() ? 2.0 : v.toDouble();
}

void registerNorms() {
  define(
      "vector_norm", "x, ord=2, dim=None, keepdim=False, *, dtype=None",
      {"torch.linalg.vector_norm"},
      [](const Args& a) {
        return vectorNorm(a[0], a[1].toDouble(), a[2], a[3].toBool(), optDType(a[4]),
                          "vector_norm");
      },
      kReductionOp);
  define(
      "norm", "a, p='fro', dim=None, keepdim=False, out=None, dtype=None",
      {"torch.norm", "torch.Tensor.norm"},
      [](const Args& a) {
        THUNDER_CHECK_KIND(a[4].isNone(), ErrorKind::NotImplemented,
                           "ltorch.norm: out= is not supported");
        return vectorNorm(a[0], ordOf(a[1]), a[2], a[3].toBool(), optDType(a[5]), "norm");
      },
      kReductionOp);
  define(
      "dist", "a, other, p=2", {"torch.dist", "torch.Tensor.dist"},
      [](const Args& a) {
        return vectorNorm(op("sub", {a[0], a[1]}), a[2].toDouble(), Value(), false, std::nullopt,
                          "dist");
      },
      kReductionOp);
  define(
      "std_mean", "a, dim=None, *, correction=None, keepdim=False", {"torch.std_mean"},
      [](const Args& a) {
        // std and mean (not sqrt of var_mean's var): std rounds once, as eager's, and has
        // eager's gradient (std's rule)
        Value s = op("std", {a[0], a[1]}, {{"correction", a[2]}, {"keepdim", a[3]}});
        return Value::tuple({s, op("mean", {a[0], a[1], a[3]})});
      },
      kReductionOp);
  define(
      "nansum", "a, dim=None, keepdim=False, *, dtype=None",
      {"torch.nansum", "torch.Tensor.nansum"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "nansum");
        THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type,
                           "ltorch.nansum: complex tensors are not supported");
        Value x = isFloating(t.dtype) ? op("where", {op("isnan", {a[0]}), 0, a[0]}) : a[0];
        return op("sum", {x, a[1], a[2]}, {{"dtype", a[3]}});
      },
      kReductionOp);
  define(
      "nanmean", "a, dim=None, keepdim=False, *, dtype=None",
      {"torch.nanmean", "torch.Tensor.nanmean"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "nanmean");
        THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::Type,
                           "ltorch.nanmean: expected a floating point tensor, but got ",
                           dtypeName(t.dtype));
        Value keep = op("logical_not", {op("isnan", {a[0]})});
        Value s = op("nansum", {a[0], a[1], a[2]}, {{"dtype", a[3]}});
        Value n = op("sum", {keep, a[1], a[2]});
        return clang::maybeConvert(op("div", {s, n}), s.tensor().dtype);
      },
      kReductionOp);
  define(
      "count_nonzero", "a, dim=None", {"torch.count_nonzero", "torch.Tensor.count_nonzero"},
      [](const Args& a) {
        T(a[0], "count_nonzero");
        return op("sum", {op("ne", {a[0], 0}), a[1]});
      },
      kReductionOp);
}

// ---- more tensor ops ------------------------------------------------------------------------

/// a with the dims `dims` moved to the end, in that order.
Value dimsToEnd(const Value& a, const std::vector<int64_t>& dims, const std::string& name) {
  const TensorProxy& t = a.tensor();
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < t.ndim(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  perm.insert(perm.end(), dims.begin(), dims.end());
  return clang::permute(a, perm, opn(name));
}

/// Boundaries strictly below (or, with right, not above) each value: the bucket index.
Value countBelow(const Value& boundaries, const Value& values, bool right, DType out,
                 const std::string& name) {
  for (const Value* v : {&boundaries, &values}) {
    DType dt = v->tensor().dtype;
    THUNDER_CHECK_KIND(dt != DType::Bool && !isComplex(dt), ErrorKind::Type, opn(name), ": ",
                       dtypeName(dt), " tensors are not supported");
  }
  Value v = clang::unsqueeze(values, values.tensor().ndim(), opn(name));
  Value b = boundaries;
  if (boundaries.tensor().ndim() > 1)
    b = clang::unsqueeze(boundaries, boundaries.tensor().ndim() - 1, opn(name));
  Value below = op(right ? "le" : "lt", {b, v});
  return op("sum", {below, -1}, {{"dtype", out}});
}

/// The cross product of 3-vectors along dim (None: the first dimension of length 3).
Value crossImpl(const Value& a, const Value& b, const Value& dim) {
  const TensorProxy &x = T(a, "cross"), &y = T(b, "cross", "other");
  THUNDER_CHECK(x.dtype == y.dtype, "ltorch.cross: expected input and other to have the same dtype, but got ",
                dtypeName(x.dtype), " ", shapeStr(x.shape), " and ", dtypeName(y.dtype), " ",
                shapeStr(y.shape));
  THUNDER_CHECK(x.ndim() == y.ndim(),
                "ltorch.cross: inputs must have the same number of dimensions, but got shapes ",
                shapeStr(x.shape), " and ", shapeStr(y.shape));
  Shape shape = clang::broadcastShapes({x.shape, y.shape}, "ltorch.cross");
  int64_t nd = static_cast<int64_t>(shape.size());
  int64_t d = -1;
  if (dim.isNone()) {
    for (int64_t i = 0; i < nd && d < 0; ++i)
      if (shape[i] == 3) d = i;
  } else {
    d = canonicalizeDim(nd, dim.toInt(), "ltorch.cross");
  }
  THUNDER_CHECK(d >= 0 && shape[d] == 3,
                "ltorch.cross: expected a dimension of length 3, but got shapes ",
                shapeStr(x.shape), " and ", shapeStr(y.shape));
  Value p = clang::expandTo(a, shape, "ltorch.cross"),
        q = clang::expandTo(b, shape, "ltorch.cross");
  auto at = [&](const Value& v, int64_t i) {
    return clang::sliceInDim(v, d, i, i + 1, 1, "ltorch.cross");
  };
  std::vector<Value> parts;
  for (int64_t i = 0; i < 3; ++i) {
    int64_t j = (i + 1) % 3, k = (i + 2) % 3;
    parts.push_back(op("sub", {op("mul", {at(p, j), at(q, k)}), op("mul", {at(p, k), at(q, j)})}));
  }
  return op("cat", {Value::list(parts), d});
}

void registerMoreTensorOps() {
  define("unfold", "a, dimension, size, step", {"torch.Tensor.unfold"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "unfold");
    int64_t d = dimOf(t, a[1], "unfold");
    int64_t size = a[2].toInt(), step = a[3].toInt(), n = lengthOf(t, d);
    THUNDER_CHECK(size >= 0 && size <= n, "ltorch.unfold: size ", size, " exceeds dimension ", d,
                  " of length ", n);
    THUNDER_CHECK(step > 0, "ltorch.unfold: step must be positive, but got ", step);
    int64_t windows = (n - size) / step + 1;
    Value x = t.ndim() == 0 ? clang::reshape(a[0], {1}, "ltorch.unfold") : a[0];
    // Window w holds elements w * step + i, i < size: one take along d, then the window's
    // elements moved to a new last dim.
    Value starts =
        clang::unsqueeze(prims::iota(windows, 0, step, t.device, DType::Int64), 1, "ltorch.unfold");
    Value offs =
        clang::unsqueeze(prims::iota(size, 0, 1, t.device, DType::Int64), 0, "ltorch.unfold");
    Value idx = clang::reshape(op("add", {starts, offs}), {windows * size}, "ltorch.unfold");
    Value taken = prims::take(x, idx, t.ndim() == 0 ? 0 : d);
    Shape s = x.tensor().shape;
    s[t.ndim() == 0 ? 0 : d] = windows;
    s.insert(s.begin() + (t.ndim() == 0 ? 0 : d) + 1, size);
    Value r = clang::reshape(taken, s, "ltorch.unfold");
    r = op("movedim", {r, (t.ndim() == 0 ? 0 : d) + 1, -1});
    return t.ndim() == 0 ? clang::reshape(r, {size}, "ltorch.unfold") : r;
  });
  define("narrow_copy", "a, dim, start, length", {"torch.narrow_copy", "torch.Tensor.narrow_copy"},
         [](const Args& a) { return op("narrow", {a[0], a[1], a[2], a[3]}); });
  define("msort", "a", {"torch.msort", "torch.Tensor.msort"},
         [](const Args& a) { return op("sort", {a[0], 0}).items()[0]; });
  define("logcumsumexp", "a, dim", {"torch.logcumsumexp", "torch.Tensor.logcumsumexp"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "logcumsumexp");
           THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::Type,
                              "ltorch.logcumsumexp: expected a floating point tensor, but got ",
                              dtypeName(t.dtype));
           int64_t d = dimOf(t, a[1], "logcumsumexp");
           DType comp = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
           Value x = clang::maybeConvert(a[0], comp);
           if (t.numel() == 0) return a[0];
           // Shifted by the dim's finite max: log(cumsum(exp(x - m))) + m.
           Value m = op("amax", {x, d, true});
           m = op("where", {op("isfinite", {m}), m, 0.0});
           Value r = op("add", {op("log", {prims::cumsum(op("exp", {op("sub", {x, m})}), d)}), m});
           return clang::maybeConvert(r, t.dtype);
         });
  define("cross", "a, other, dim=None", {"torch.cross", "torch.Tensor.cross"},
         [](const Args& a) { return crossImpl(a[0], a[1], a[2]); });
  define("linalg_cross", "a, other, *, dim=-1", {"torch.linalg.cross"},
         [](const Args& a) { return crossImpl(a[0], a[1], a[2]); });
  define(
      "tensordot", "a, b, dims=2, out=None", {"torch.tensordot"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "tensordot"), &y = T(a[1], "tensordot", "b");
        THUNDER_CHECK_KIND(a[3].isNone(), ErrorKind::NotImplemented,
                           "ltorch.tensordot: out= is not supported");
        std::vector<int64_t> dx, dy;
        if (a[2].isInt()) {
          int64_t n = a[2].toInt();
          THUNDER_CHECK(n >= 0 && n <= x.ndim() && n <= y.ndim(), "ltorch.tensordot: dims ", n,
                        " exceeds the dimensions of shapes ", shapeStr(x.shape), " and ",
                        shapeStr(y.shape));
          for (int64_t i = 0; i < n; ++i) {
            dx.push_back(x.ndim() - n + i);
            dy.push_back(i);
          }
        } else {
          const std::vector<Value>& pair = a[2].items();
          THUNDER_CHECK(pair.size() == 2,
                        "ltorch.tensordot: dims must be an int or two lists of dims");
          dx = canonicalizeDims(x.ndim(), pair[0].toInts(), "ltorch.tensordot");
          dy = canonicalizeDims(y.ndim(), pair[1].toInts(), "ltorch.tensordot");
        }
        THUNDER_CHECK(dx.size() == dy.size(),
                      "ltorch.tensordot: both dim lists must have one length");
        int64_t k = 1;
        for (size_t i = 0; i < dx.size(); ++i) {
          THUNDER_CHECK(x.shape[dx[i]] == y.shape[dy[i]],
                        "ltorch.tensordot: contracted dimensions of shapes ", shapeStr(x.shape),
                        " and ", shapeStr(y.shape), " differ (", x.shape[dx[i]],
                        " != ", y.shape[dy[i]], ")");
          k *= x.shape[dx[i]];
        }
        Shape out;
        int64_t m = 1, n = 1;
        for (int64_t i = 0; i < x.ndim(); ++i)
          if (std::find(dx.begin(), dx.end(), i) == dx.end()) {
            out.push_back(x.shape[i]);
            m *= x.shape[i];
          }
        std::vector<int64_t> restY;
        for (int64_t i = 0; i < y.ndim(); ++i)
          if (std::find(dy.begin(), dy.end(), i) == dy.end()) {
            out.push_back(y.shape[i]);
            n *= y.shape[i];
            restY.push_back(i);
          }
        Value xm = clang::reshape(dimsToEnd(a[0], dx, "tensordot"), {m, k}, "ltorch.tensordot");
        std::vector<int64_t> permY = dy;
        permY.insert(permY.end(), restY.begin(), restY.end());
        Value ym = clang::reshape(clang::permute(a[1], permY, "ltorch.tensordot"), {k, n},
                                  "ltorch.tensordot");
        return clang::reshape(op("mm", {xm, ym}), out, "ltorch.tensordot");
      },
      kMatmulOp);
  define(
      "inner", "a, other", {"torch.inner", "torch.Tensor.inner"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "inner"), &y = T(a[1], "inner", "other");
        if (x.ndim() == 0 || y.ndim() == 0) return op("mul", {a[0], a[1]});
        return op("tensordot", {a[0], a[1], Value::tuple({Value::ints({-1}), Value::ints({-1})})});
      },
      kMatmulOp);
  define(
      "conj_physical", "a", {"torch.conj_physical", "torch.Tensor.conj_physical"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "conj_physical");
        if (!isComplex(t.dtype)) return a[0];
        return op("complex", {prims::real(a[0]), op("neg", {prims::imag(a[0])})});
      },
      kElementwise);
  define(
      "vdot", "a, other", {"torch.vdot", "torch.Tensor.vdot"},
      [](const Args& a) { return op("dot", {op("conj_physical", {a[0]}), a[1]}); }, kMatmulOp);
  define("bucketize", "a, boundaries, *, out_int32=False, right=False", {"torch.bucketize"},
         [](const Args& a) {
           const TensorProxy& b = T(a[1], "bucketize", "boundaries");
           THUNDER_CHECK(b.ndim() == 1,
                         "ltorch.bucketize: boundaries must be 1-dimensional, but got shape ",
                         shapeStr(b.shape));
           Value v = a[0].isTensor()
                         ? a[0]
                         : prims::full({}, a[0], b.device,
                                       a[0].numberDType() == DType::Float64 ? DType::Float64
                                                                            : DType::Int64);
           return countBelow(a[1], v, a[3].toBool(), a[2].toBool() ? DType::Int32 : DType::Int64,
                             "bucketize");
         });
  define("searchsorted",
         "sorted_sequence, a, *, out_int32=False, right=False, side=None, sorter=None",
         {"torch.searchsorted"}, [](const Args& a) {
           const TensorProxy& s = T(a[0], "searchsorted", "sorted_sequence");
           THUNDER_CHECK_KIND(a[5].isNone(), ErrorKind::NotImplemented,
                              "ltorch.searchsorted: sorter is not supported");
           bool right = a[3].toBool() || (!a[4].isNone() && a[4].toString() == "right");
           Value v = a[1].isTensor() ? a[1] : prims::full({}, a[1], s.device, s.dtype);
           const TensorProxy& vt = v.tensor();
           if (s.ndim() > 1)
             THUNDER_CHECK(vt.ndim() == s.ndim() && Shape(vt.shape.begin(), vt.shape.end() - 1) ==
                                                        Shape(s.shape.begin(), s.shape.end() - 1),
                           "ltorch.searchsorted: the leading dimensions of sorted_sequence ",
                           shapeStr(s.shape), " and values ", shapeStr(vt.shape), " must match");
           return countBelow(a[0], v, right, a[2].toBool() ? DType::Int32 : DType::Int64,
                             "searchsorted");
         });
  define(
      "heaviside", "a, values", {"torch.heaviside", "torch.Tensor.heaviside"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "heaviside"), &v = T(a[1], "heaviside", "values");
        THUNDER_CHECK_KIND(x.dtype == v.dtype, ErrorKind::Type,
                           "ltorch.heaviside: expected input and values of one dtype, "
                           "but got ",
                           dtypeName(x.dtype), " and ", dtypeName(v.dtype));
        THUNDER_CHECK_KIND(!isComplex(x.dtype), ErrorKind::Type,
                           "ltorch.heaviside: complex tensors are not supported");
        Value pos = clang::maybeConvert(op("gt", {a[0], 0}), x.dtype);
        return op("where", {op("eq", {a[0], 0}), a[1], pos});
      },
      kElementwise);
  define(
      "isclose", "a, other, rtol=1e-05, atol=1e-08, equal_nan=False",
      {"torch.isclose", "torch.Tensor.isclose"},
      [](const Args& a) {
        const TensorProxy &x = T(a[0], "isclose"), &y = T(a[1], "isclose", "other");
        THUNDER_CHECK_KIND(x.dtype == y.dtype, ErrorKind::Type,
                           "ltorch.isclose: expected tensors of one dtype, "
                           "but got ",
                           dtypeName(x.dtype), " and ", dtypeName(y.dtype));
        Value eq = op("eq", {a[0], a[1]});
        DType comp = isFloating(x.dtype) || isComplex(x.dtype)
                         ? (isLowPrecision(x.dtype) ? DType::Float32 : x.dtype)
                         : DType::Float64;
        Value p = clang::maybeConvert(a[0], comp), q = clang::maybeConvert(a[1], comp);
        Value diff = op("abs", {op("sub", {p, q})});
        Value tol = op("add", {op("mul", {op("abs", {q}), a[2].toDouble()}), a[3].toDouble()});
        Value close = op("logical_and", {op("isfinite", {diff}), op("le", {diff, tol})});
        Value r = op("logical_or", {eq, close});
        if (a[4].toBool() && (isFloating(x.dtype) || isComplex(x.dtype)))
          r = op("logical_or", {r, op("logical_and", {op("isnan", {a[0]}), op("isnan", {a[1]})})});
        return r;
      },
      kElementwise);
  define(
      "isreal", "a", {"torch.isreal", "torch.Tensor.isreal"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "isreal");
        if (!isComplex(t.dtype)) return prims::full(t.shape, true, t.device, DType::Bool);
        return op("eq", {prims::imag(a[0]), 0});
      },
      kElementwise);
  for (bool isMax : {true, false}) {
    std::string name = isMax ? "fmax" : "fmin";
    define(
        name, "a, other", {"torch." + name, "torch.Tensor." + name},
        [isMax, name](const Args& a) {
          T(a[0], name);
          T(a[1], name, "other");
          DType dt = elementwiseTypePromotion({a[0], a[1]}, PK::Default).second;  // minimum's
          if (!isFloating(dt)) return op(isMax ? "maximum" : "minimum", {a[0], a[1]});
          // A nan loses to a number; a tie (signed zeros included) keeps `a`, which gets the
          // whole gradient, as in eager (minimum splits a tie's gradient between the two).
          Value keepA = op("logical_or", {op("isnan", {a[1]}), op(isMax ? "ge" : "le", {a[0], a[1]})});
          return op("where", {keepA, clang::maybeConvert(a[0], dt), clang::maybeConvert(a[1], dt)});
        },
        kElementwise);
  }
  define(
      "sgn", "a", {"torch.sgn", "torch.Tensor.sgn"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "sgn");
        if (!isComplex(t.dtype)) return op("sign", {a[0]});
        Value r = op("abs", {a[0]});
        Value safe = op("where", {op("eq", {r, 0}), 1.0, r});
        return op("where", {op("eq", {r, 0}), clang::maybeConvert(Value(0), t.dtype),
                            op("div", {a[0], safe})});
      },
      kElementwise);
  define("xlog1py", "a, other", {"torch.special.xlog1py"},
         [](const Args& a) { return xlogy(a, "xlog1py", true); }, kElementwise);
  define(
      "entr", "a", {"torch.special.entr"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "entr");
        THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type,
                           "ltorch.entr: complex tensors are not supported");
        DType dt = isFloating(t.dtype) ? t.dtype : DType::Float32;
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        Value x = clang::maybeConvert(a[0], comp);
        // -x log x for x > 0, 0 at 0, -inf below, nan for nan.
        Value safe = op("where", {op("gt", {x, 0}), x, 1.0});
        Value r = op("where", {op("gt", {x, 0}), op("neg", {op("mul", {x, op("log", {safe})})}),
                               op("where", {op("eq", {x, 0}), 0.0, -INFINITY})});
        r = op("where", {op("isnan", {x}), x, r});
        return clang::maybeConvert(r, dt);
      },
      kElementwise);
  define(
      "ndtr", "a", {"torch.special.ndtr"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "ndtr");
        THUNDER_CHECK_KIND(!isComplex(t.dtype), ErrorKind::Type,
                           "ltorch.ndtr: complex tensors are not supported");
        DType dt = isFloating(t.dtype) ? t.dtype : DType::Float32;
        DType comp = isLowPrecision(dt) ? DType::Float32 : dt;
        Value x = clang::maybeConvert(a[0], comp);
        // 0.5 * erfc(-x / sqrt(2)), accurate in both tails.
        return clang::maybeConvert(op("mul", {op("erfc", {op("mul", {x, -M_SQRT1_2})}), 0.5}), dt);
      },
      kElementwise);
  define("cartesian_prod", "*tensors", {"torch.cartesian_prod"}, [](const Args& a) {
    std::vector<Value> ts = a[0].items();
    THUNDER_CHECK(!ts.empty(), "ltorch.cartesian_prod: expected at least one tensor");
    for (size_t i = 0; i < ts.size(); ++i)
      THUNDER_CHECK(expectTensor(ts[i], "ltorch.cartesian_prod", "tensors").ndim() == 1,
                    "ltorch.cartesian_prod: expected 1-dimensional tensors, but tensor ", i,
                    " has shape ", shapeStr(ts[i].tensor().shape));
    if (ts.size() == 1) return ts[0];
    Value grids = op("meshgrid", {Value::list(ts)}, {{"indexing", "ij"}});
    std::vector<Value> cols;
    for (const Value& g : grids.items()) cols.push_back(op("ravel", {g}));
    return op("stack", {Value::list(cols), 1});
  });
  define("column_stack", "tensors", {"torch.column_stack"}, [](const Args& a) {
    std::vector<Value> ts;
    for (const Value& v : a[0].items()) {
      const TensorProxy& t = expectTensor(v, "ltorch.column_stack", "tensors");
      ts.push_back(t.ndim() <= 1 ? clang::reshape(v, {t.numel(), 1}, "ltorch.column_stack") : v);
    }
    THUNDER_CHECK(!ts.empty(), "ltorch.column_stack: expected a non-empty list of tensors");
    return op("cat", {Value::list(ts), 1});
  });
  define("dstack", "tensors", {"torch.dstack"}, [](const Args& a) {
    std::vector<Value> ts;
    for (const Value& v : a[0].items()) ts.push_back(op("atleast_3d", {v}));
    THUNDER_CHECK(!ts.empty(), "ltorch.dstack: expected a non-empty list of tensors");
    return op("cat", {Value::list(ts), 2});
  });
  define("sum_to_size", "a, *size", {"torch.Tensor.sum_to_size"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "sum_to_size");
    Shape size = intsOrVarargs(a[1]);
    THUNDER_CHECK(static_cast<int64_t>(size.size()) <= t.ndim(), "ltorch.sum_to_size: size ",
                  shapeStr(size), " is not expandable to shape ", shapeStr(t.shape));
    size_t off = t.ndim() - size.size();
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < t.ndim(); ++i) {
      if (static_cast<size_t>(i) < off) {
        dims.push_back(i);
        continue;
      }
      int64_t want = size[i - off];
      THUNDER_CHECK(want == t.shape[i] || want == 1, "ltorch.sum_to_size: size ", shapeStr(size),
                    " is not expandable to shape ", shapeStr(t.shape));
      if (want == 1 && t.shape[i] != 1) dims.push_back(i);
    }
    Value r = dims.empty() ? a[0] : op("sum", {a[0], Value::ints(dims), true});
    return clang::reshape(r, size, "ltorch.sum_to_size");
  });
  define("cdist", "x1, x2, p=2.0, compute_mode='use_mm_for_euclid_dist_if_necessary'",
         {"torch.cdist"}, [](const Args& a) {
           const TensorProxy &x = T(a[0], "cdist", "x1"), &y = T(a[1], "cdist", "x2");
           THUNDER_CHECK(
               x.ndim() >= 2 && y.ndim() >= 2 && x.shape.back() == y.shape.back(),
               "ltorch.cdist: expected x1 and x2 with at least 2 dimensions and the same last "
               "dimension, but got shapes ",
               shapeStr(x.shape), " and ", shapeStr(y.shape));
           double p = a[2].toDouble();
           THUNDER_CHECK(p >= 0, "ltorch.cdist: p must be non-negative, but got ", p);
           // Eager's choice: p=2 over more than 25 rows (or compute_mode="use_mm_for_euclid_dist")
           // is |x1|^2 + |x2|^2 - 2 x1 x2^T by one matmul, the only form that takes half types
           // and the one that never holds [rows1, rows2, dim] (VQ-VAE codebooks).
           std::string mode = a[3].isNone() ? "use_mm_for_euclid_dist_if_necessary" : a[3].toString();
           int64_t r1 = x.shape[x.ndim() - 2], r2 = y.shape[y.ndim() - 2];
           bool mm = p == 2.0 && (mode == "use_mm_for_euclid_dist" ||
                                  (mode == "use_mm_for_euclid_dist_if_necessary" && (r1 > 25 || r2 > 25)));
           THUNDER_CHECK_KIND(
               x.dtype == y.dtype && (x.dtype == DType::Float32 || x.dtype == DType::Float64 ||
                                      (mm && isLowPrecision(x.dtype))),
               ErrorKind::Runtime,  // as eager's "not implemented for 'BFloat16'"
               "ltorch.cdist: expected float32 or float64 inputs of one dtype (bfloat16 or float16 "
               "only where p=2 takes the matmul form: more than 25 rows), but got ",
               dtypeName(x.dtype), " and ", dtypeName(y.dtype), " with shapes ", shapeStr(x.shape),
               " and ", shapeStr(y.shape));
           if (mm) {
             const std::string o = "ltorch.cdist";
             auto norms = [&](const Value& v) { return op("sum", {op("mul", {v, v}), Value::ints({-1}), true}); };
             Value n1 = norms(a[0]), n2 = norms(a[1]);
             Value one1 = prims::full(n1.tensor().shape, Value(1.0), x.device, x.dtype);
             Value one2 = prims::full(n2.tensor().shape, Value(1.0), y.device, y.dtype);
             Value lhs = op("cat", {Value::list({op("mul", {a[0], -2.0}), n1, one1}), -1});
             Value rhs = op("cat", {Value::list({a[1], one2, n2}), -1});
             Value sq = op("clamp_min", {op("matmul", {lhs, op("transpose", {rhs, -1, -2})}), 0.0});
             // sqrt at 0 taken at 1 and zeroed: a zero distance passes no gradient (eager's
             // backward masks it), where sqrt's own would make inf * 0.
             Value zero = op("eq", {sq, 0.0});
             return op("where", {zero, 0.0, op("sqrt", {op("where", {zero, 1.0, sq})})});
           }
           // |x1[..., i, None, :] - x2[..., None, j, :]|_p over the last dim.
           Value d = op("sub", {clang::unsqueeze(a[0], x.ndim() - 1, "ltorch.cdist"),
                                clang::unsqueeze(a[1], y.ndim() - 2, "ltorch.cdist")});
           return vectorNorm(d, p, -1, false, std::nullopt, "cdist");
         });
  define(
      "median", "a, dim=None, keepdim=False", {"torch.median", "torch.Tensor.median"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "median");
        THUNDER_CHECK_KIND(
            a[1].isNone(), ErrorKind::NotImplemented,
            "ltorch.median: the form with dim (values and indices) is not supported");
        checkSortable(t, "median");
        THUNDER_CHECK_KIND(t.dtype != DType::Bool, ErrorKind::Type,
                           "ltorch.median: bool tensors are not supported");
        // As PyTorch: the median of no floating values is nan.
        if (t.numel() == 0 && isFloating(t.dtype))
          return op("add", {op("sum", {a[0]}), NAN});  // nan, still depending on a
        THUNDER_CHECK(t.numel() > 0, "ltorch.median: cannot compute the median of an empty ",
                      dtypeName(t.dtype), " tensor");
        // The lower median; a nan anywhere makes the median nan (sort puts nans last).
        Value flat = clang::reshape(a[0], {t.numel()}, "ltorch.median");
        Value sorted = sortImpl(flat, 0, false, false, "median").items()[0];
        Value r = op("select", {sorted, 0, (t.numel() - 1) / 2});
        if (!isFloating(t.dtype)) return r;
        // With a nan, the median is the last sorted value (a nan), as eager's.
        r = op("where", {op("any", {op("isnan", {flat})}), op("select", {sorted, 0, -1}), r});
        // Its gradient as eager's (evenly_distribute_backward): shared evenly among the elements
        // equal to it (the nans, for a nan), not all given to the one sort put there. The value
        // is the median's exactly: it adds the elements' differences from themselves (zeros).
        Value m = op("detach", {r});
        Value equal = op("where", {op("isnan", {m}), op("isnan", {flat}), op("eq", {flat, m})});
        Value zeros = op("sub", {flat, op("detach", {flat})});
        Value shared = op("div", {op("sum", {op("where", {equal, zeros, 0.0})}), op("sum", {equal})});
        return op("add", {m, op("to", {shared, Value(), t.dtype})});
      },
      kReductionOp);
}

}  // namespace

void registerTensorOps() {
  registerScans();
  registerScatter();
  registerMatmulFamily();
  registerShapeUtilities();
  registerFactories();
  registerElementwiseTensorOps();
  registerNorms();
  registerMoreTensorOps();
}

}  // namespace thunder::ltorch
