#include "transforms/pad_sums.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "ops/ltorch.h"

namespace thunder {
namespace {

/// A zero pad along one dimension: the piece occupies [lo, lo + length) of `dim`.
struct ZeroPad {
  int64_t dim = -1, lo = 0, length = 0;
  TensorPtr piece;
};

std::optional<ZeroPad> zeroPad(const BoundSymbol& b) {
  if (b.sym->module != "prims" || b.sym->name != "pad" || b.args.size() != 3) return std::nullopt;
  if (!b.args[0].isTensor() || !b.output.isTensor() || !b.args[1].isNumber()) return std::nullopt;
  if (b.args[1].isComplex() || b.args[1].toDouble() != 0.0) return std::nullopt;
  const TensorPtr& a = b.args[0].toTensor();
  if (a->dtype != b.output.tensor().dtype) return std::nullopt;
  ZeroPad p;
  p.piece = a;
  const std::vector<Value>& cfg = b.args[2].items();
  if (static_cast<int64_t>(cfg.size()) != a->ndim()) return std::nullopt;
  for (int64_t d = 0; d < a->ndim(); ++d) {
    std::vector<int64_t> c = cfg[d].toInts();
    if (c.size() != 3 || c[2] != 0 || c[0] < 0 || c[1] < 0) return std::nullopt;
    if (c[0] == 0 && c[1] == 0) continue;
    if (p.dim >= 0) return std::nullopt;  // two padded dims
    p.dim = d;
    p.lo = c[0];
    p.length = a->shape[d];
  }
  if (p.dim < 0) return std::nullopt;
  return p;
}

/// An addition of two tensors of its output's shape and dtype, with alpha 1.
bool plainAdd(const BoundSymbol& b) {
  bool ltorchAdd = b.sym->module == "ltorch" && b.sym->name == "add";
  bool primAdd = b.sym->module == "prims" && b.sym->name == "add";
  if (!(ltorchAdd || primAdd) || b.args.size() < 2 || !b.output.isTensor()) return false;
  if (ltorchAdd && b.args.size() > 2 && !b.args[2].isNone() &&
      !(b.args[2].isNumber() && !b.args[2].isComplex() && b.args[2].toDouble() == 1.0))
    return false;
  const TensorProxy& o = b.output.tensor();
  for (int i = 0; i < 2; ++i) {
    if (!b.args[i].isTensor()) return false;
    const TensorProxy& x = b.args[i].tensor();
    if (x.shape != o.shape || x.dtype != o.dtype) return false;
  }
  return true;
}

/// One rewrite: the calls it removes, the other leaves, the pads' pieces by dimension, and the
/// call whose output the rewrite produces (the tree's root or the permutation reading it).
struct Rewrite {
  std::vector<size_t> removed;
  std::vector<TensorPtr> others;
  std::vector<ZeroPad> pads;
  size_t root = 0;
  std::vector<int64_t> perm;  // non-empty: the permutation folded into the pieces
  TensorPtr sum;              // the tree's value
  TensorPtr result;           // the proxy the rewrite's last call must produce
};

/// The rewrite's value: the pieces concatenated in order, zeros filling the gaps (permuted
/// first when a permutation is folded in), plus the tree's other leaves.
Value concatenation(const Rewrite& rw) {
  const int64_t dim = rw.pads.front().dim;
  const TensorProxy& tree = *rw.sum;
  const Shape& full = tree.shape;
  std::vector<Value> pieces;
  auto zeros = [&](int64_t len) {
    Shape s = full;
    s[dim] = len;
    return ltorch::op("full", {Value::ints(s), Value(0.0)}, {{"device", tree.device}, {"dtype", tree.dtype}});
  };
  int64_t pos = 0;
  for (const ZeroPad& zp : rw.pads) {
    if (zp.lo > pos) pieces.push_back(zeros(zp.lo - pos));
    pieces.push_back(Value(zp.piece));
    pos = zp.lo + zp.length;
  }
  if (pos < full[dim]) pieces.push_back(zeros(full[dim] - pos));
  int64_t catDim = dim;
  if (!rw.perm.empty()) {
    for (Value& p : pieces) p = ltorch::op("permute", {p, Value::ints(rw.perm)});
    catDim = std::find(rw.perm.begin(), rw.perm.end(), dim) - rw.perm.begin();
  }
  Value result = ltorch::op("cat", {Value::list(pieces), Value(catDim)});
  for (const TensorPtr& o : rw.others) result = ltorch::op("add", {result, Value(o)});
  return result;
}

}  // namespace

std::optional<Trace> padSumsToCat(const Trace& trace) {
  const size_t n = trace.bsyms.size();
  std::unordered_map<const TensorProxy*, size_t> producer;
  std::unordered_map<const TensorProxy*, std::vector<size_t>> readers;
  for (size_t i = 0; i < n; ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    for (const TensorPtr& t : b.inputTensors()) readers[t.get()].push_back(i);
    for (const TensorPtr& t : b.outputTensors()) producer[t.get()] = i;
  }
  std::unordered_set<const TensorProxy*> returned;
  {
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned.insert(t.get());
  }
  // The one call that reads a value not returned, or nothing.
  auto soleReader = [&](const TensorProxy* t) -> std::optional<size_t> {
    auto it = readers.find(t);
    if (returned.count(t) || it == readers.end() || it->second.size() != 1) return std::nullopt;
    return it->second[0];
  };
  // The dims of a permutation of a value of shape `in` whose every reader is a reshape (or a
  // view), so that a value laid out in the permuted order makes those reshapes views.
  auto permutationBeforeReshapes = [&](const BoundSymbol& pb, const Shape& in) -> std::optional<std::vector<int64_t>> {
    if (pb.sym->module != "ltorch" || pb.sym->name != "permute" || !pb.output.isTensor() || pb.args.size() < 2)
      return std::nullopt;
    const TensorProxy* po = pb.output.toTensor().get();
    auto pr = readers.find(po);
    if (returned.count(po) || pr == readers.end()) return std::nullopt;
    for (size_t r : pr->second) {
      const BoundSymbol& rb = trace.bsyms[r];
      if (rb.sym->module != "ltorch" || (rb.sym->name != "reshape" && rb.sym->name != "view")) return std::nullopt;
    }
    std::vector<int64_t> dims = pb.args[1].toInts();
    const int64_t rank = static_cast<int64_t>(in.size());
    if (static_cast<int64_t>(dims.size()) != rank) return std::nullopt;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] < 0) dims[k] += rank;
      if (dims[k] < 0 || dims[k] >= rank || pb.output.tensor().shape[k] != in[dims[k]]) return std::nullopt;
    }
    return dims;
  };

  std::unordered_map<size_t, Rewrite> rewrites;  // by the index of the call they replace
  std::unordered_set<size_t> removed;
  for (size_t i = n; i-- > 0;) {
    const BoundSymbol& b = trace.bsyms[i];
    if (removed.count(i) || !plainAdd(b)) continue;
    const TensorProxy* out = b.output.toTensor().get();
    // Only maximal trees: skip an addition that a larger tree absorbs.
    std::optional<size_t> next = soleReader(out);
    if (next && plainAdd(trace.bsyms[*next]) &&
        trace.bsyms[*next].output.tensor().shape == b.output.tensor().shape)
      continue;
    Rewrite rw;
    rw.root = i;
    std::vector<TensorPtr> leaves;
    std::vector<size_t> stack{i};
    while (!stack.empty()) {
      size_t k = stack.back();
      stack.pop_back();
      rw.removed.push_back(k);
      for (int a = 0; a < 2; ++a) {
        const TensorPtr& x = trace.bsyms[k].args[a].toTensor();
        auto p = producer.find(x.get());
        if (p != producer.end() && soleReader(x.get()) == k && plainAdd(trace.bsyms[p->second]) &&
            !removed.count(p->second))
          stack.push_back(p->second);
        else
          leaves.push_back(x);
      }
    }
    // Pads read only by this tree, grouped by dimension.
    std::unordered_map<int64_t, std::vector<std::pair<ZeroPad, size_t>>> byDim;
    for (const TensorPtr& x : leaves) {
      auto p = producer.find(x.get());
      std::optional<ZeroPad> zp;
      if (p != producer.end() && soleReader(x.get())) zp = zeroPad(trace.bsyms[p->second]);
      if (zp) byDim[zp->dim].push_back({*zp, p->second});
    }
    int64_t bestDim = -1;
    for (auto& [d, ps] : byDim) {
      if (ps.size() < 2) continue;
      std::sort(ps.begin(), ps.end(), [](const auto& x, const auto& y) { return x.first.lo < y.first.lo; });
      bool disjoint = true;
      for (size_t k = 1; k < ps.size(); ++k)
        disjoint &= ps[k - 1].first.lo + ps[k - 1].first.length <= ps[k].first.lo;
      if (disjoint && (bestDim < 0 || ps.size() > byDim[bestDim].size())) bestDim = d;
    }
    if (bestDim < 0) continue;
    std::unordered_set<const TensorProxy*> padded;
    for (auto& [zp, idx] : byDim[bestDim]) {
      rw.pads.push_back(zp);
      rw.removed.push_back(idx);
      padded.insert(trace.bsyms[idx].output.toTensor().get());
    }
    for (const TensorPtr& x : leaves)
      if (!padded.count(x.get())) rw.others.push_back(x);
    rw.sum = rw.result = b.output.toTensor();
    // A permutation read by reshapes, the tree's only reader: fold it into the pieces.
    if (rw.others.empty() && next) {
      if (auto dims = permutationBeforeReshapes(trace.bsyms[*next], b.output.tensor().shape)) {
        rw.perm = *dims;
        rw.removed.push_back(*next);
        rw.result = trace.bsyms[*next].output.toTensor();
        rw.root = *next;
      }
    }
    for (size_t k : rw.removed) removed.insert(k);
    rewrites[rw.root] = std::move(rw);
  }
  if (rewrites.empty()) return std::nullopt;

  Trace out = trace.emptyCopy();
  for (size_t i = 0; i < n; ++i) {
    auto it = rewrites.find(i);
    if (it == rewrites.end()) {
      if (!removed.count(i)) out.bsyms.push_back(trace.bsyms[i]);
      continue;
    }
    appendTraced(out, [&] { return concatenation(it->second); }, it->second.result, "pad sums");
  }
  return out;
}

}  // namespace thunder
