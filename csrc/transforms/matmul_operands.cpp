#include "transforms/matmul_operands.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "ops/ltorch.h"

namespace thunder {
namespace {

/// Whether the environment variable `name` is "0" (a pass turned off, for A/B runs).
bool turnedOff(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

/// Whether eager's matmul copies `x` (an operand of rank >= 3 whose batch dims are those of the
/// result) to fold its batch dims: they do not merge into one (torch's view rule), or the matrix
/// has no unit stride (bmm copies it then).
bool foldCopies(const TensorProxy& x) {
  if (x.ndim() < 3 || x.numel() == 0 || x.symbolic()) return false;
  std::vector<int64_t> st = x.stridesOrContiguous();
  const size_t n = x.shape.size();
  Shape folded{1, x.shape[n - 2], x.shape[n - 1]};
  for (size_t d = 0; d + 2 < n; ++d) folded[0] *= x.shape[d];
  std::vector<int64_t> out;
  if (!viewStrides(x.shape, st, folded, out)) return true;
  return st[n - 1] != 1 && st[n - 2] != 1 && x.shape[n - 1] != 1 && x.shape[n - 2] != 1;
}

/// The permutation a `prims.transpose`, `ltorch.transpose` or `ltorch.permute` call applies (dim d
/// of its output is dim perm[d] of its input); empty for any other call.
std::vector<int64_t> permutationOf(const BoundSymbol& b) {
  const std::string& id = b.sym->id();
  if (!b.output.isTensor() || b.args.empty() || !b.args[0].isTensor()) return {};
  const int64_t n = b.output.tensor().ndim();
  std::vector<int64_t> perm(n);
  for (int64_t d = 0; d < n; ++d) perm[d] = d;
  if (id == "prims.transpose" || id == "ltorch.permute") {
    if (b.args.size() < 2 || !b.args[1].isSequence()) return {};
    perm = b.args[1].toInts();
    if (static_cast<int64_t>(perm.size()) != n) return {};
    for (int64_t& d : perm)
      if (d < 0) d += n;
  } else if (id == "ltorch.transpose") {
    if (b.args.size() < 3 || !b.args[1].isInt() || !b.args[2].isInt()) return {};
    int64_t a = b.args[1].toInt(), c = b.args[2].toInt();
    if (a < 0) a += n;
    if (c < 0) c += n;
    if (a < 0 || c < 0 || a >= n || c >= n) return {};
    std::swap(perm[a], perm[c]);
  } else {
    return {};
  }
  return perm;
}

/// Whether `b` (a transpose, not a permute) transposes the last two dims of its input and nothing
/// else.
bool lastTwoTranspose(const BoundSymbol& b) {
  if (b.sym->id() == "ltorch.permute") return false;
  std::vector<int64_t> perm = permutationOf(b);
  const int64_t n = static_cast<int64_t>(perm.size());
  if (n < 2) return false;
  for (int64_t d = 0; d + 2 < n; ++d)
    if (perm[d] != d) return false;
  return perm[n - 2] == n - 1 && perm[n - 1] == n - 2;
}

}  // namespace

std::optional<Trace> contiguousMatmulOperands(const Trace& trace) {
  if (turnedOff("THUNDER_MATMUL_OPERANDS")) return std::nullopt;
  static const Symbol* matmul = SymbolRegistry::get().find("ltorch.matmul");
  if (matmul == nullptr) return std::nullopt;
  // A backward's inputs saved by a forward this pass made contiguous: their views as they are now.
  {
    std::unordered_set<const TensorProxy*> inputs;
    for (const TensorPtr& t : trace.inputs) inputs.insert(t.get());
    refreshViewStrides(trace, inputs);
  }
  // The call that made each tensor.
  std::unordered_map<const TensorProxy*, const BoundSymbol*> producer;
  for (const BoundSymbol& b : trace.bsyms)
    for (const TensorPtr& t : b.outputTensors()) producer[t.get()] = &b;
  auto copied = [&](const BoundSymbol& b, size_t i) {
    if (b.sym != matmul || b.args.size() < 2 || !b.args[0].isTensor() || !b.args[1].isTensor() || !b.output.isTensor())
      return false;
    const TensorProxy& x = b.args[i].tensor();
    // Batch dims broadcast against the other operand's are expanded, then copied, by eager
    // too; those are left as they are.
    const TensorProxy& y = b.output.tensor();
    if (x.ndim() != y.ndim()) return false;
    for (int64_t d = 0; d + 2 < x.ndim(); ++d)
      if (x.shape[d] != y.shape[d]) return false;
    return foldCopies(x);
  };
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || copied(b, 0) || copied(b, 1);
  if (!any) return std::nullopt;

  // What each copied operand reads: a tensor made contiguous, transposed back where the operand
  // is a transpose of its last two dims (the matmul reads a transposed matrix without a copy).
  struct Plan {
    const TensorProxy* source;
    bool transposed;
  };
  std::unordered_map<const TensorProxy*, Plan> plans;
  std::unordered_set<const TensorProxy*> sources;
  for (const BoundSymbol& b : trace.bsyms)
    for (size_t i = 0; i < 2; ++i) {
      if (!copied(b, i)) continue;
      const TensorProxy* x = &b.args[i].tensor();
      auto p = producer.find(x);
      Plan plan{x, false};
      if (p != producer.end() && lastTwoTranspose(*p->second)) plan = {&p->second->args[0].tensor(), true};
      plans.emplace(x, plan);
      sources.insert(plan.source);
    }
  // A source a call makes is renamed: the call makes a raw tensor, and `contiguous` of it takes
  // the source's name, so every reader (the matmuls, a transpose of it, the values saved for the
  // backward) reads the copy, made right after the call: the copies of one producer's views (q, k
  // and v of one projection) sit together, where one kernel takes them all. A source the trace
  // takes as an input is copied first, and only its matmuls read the copy.
  Trace out = trace.emptyCopy();
  std::unordered_map<const TensorProxy*, Value> inputCopies;
  for (const TensorPtr& t : trace.inputs)
    if (sources.count(t.get()))
      inputCopies.emplace(t.get(), appendTraced(out, [&] { return ltorch::op("contiguous", {Value(t)}); }));
  std::unordered_set<const TensorProxy*> renamed;
  for (const BoundSymbol& b : trace.bsyms) {
    BoundSymbol nb = b;
    if (!inputCopies.empty() && (copied(b, 0) || copied(b, 1))) {
      for (size_t i = 0; i < 2; ++i) {
        if (!copied(b, i)) continue;
        const Plan& plan = plans.at(&b.args[i].tensor());
        auto it = inputCopies.find(plan.source);
        if (it == inputCopies.end()) continue;
        Value v = it->second;
        if (plan.transposed) {
          const int64_t n = b.args[i].tensor().ndim();
          v = appendTraced(out, [&] { return ltorch::op("transpose", {v, Value(n - 2), Value(n - 1)}); });
        }
        nb.args[i] = v;
      }
      appendTraced(out, [&] { return call(*b.sym, nb.args); }, b.output.toTensor(), "contiguous matmul operands");
      continue;
    }
    std::vector<std::pair<TensorPtr, TensorPtr>> made;  // (source, the raw tensor the call makes)
    for (const TensorPtr& t : b.outputTensors())
      if (sources.count(t.get()) && !inputCopies.count(t.get())) {
        auto raw = std::make_shared<TensorProxy>(*t);
        raw->name = out.newName();
        replaceTensor(nb, t.get(), raw);
        made.emplace_back(t, raw);
      }
    out.bsyms.push_back(std::move(nb));
    for (const auto& [t, raw] : made) {
      renamed.insert(t.get());
      appendTraced(out, [&] { return ltorch::op("contiguous", {Value(raw)}); }, t, "contiguous matmul operands");
      t->setStrides({});
    }
  }
  refreshViewStrides(out, renamed);
  return out;
}

namespace {

/// The permutation of the leading dims `b` applies, where `b` is a transpose or permute call of
/// rank >= 3 that keeps the last dim last and moves some other dim; empty otherwise.
std::vector<int64_t> leadingPermutation(const BoundSymbol& b) {
  std::vector<int64_t> perm = permutationOf(b);
  const int64_t n = static_cast<int64_t>(perm.size());
  if (n < 3 || perm[n - 1] != n - 1) return {};
  for (int64_t d = 0; d < n; ++d)
    if (perm[d] != d) return perm;
  return {};
}

}  // namespace

std::optional<Trace> linearsBeforePermutes(const Trace& trace) {
  if (turnedOff("THUNDER_LINEAR_PERMUTES")) return std::nullopt;
  static const Symbol* linear = SymbolRegistry::get().find("ltorch.linear");
  if (linear == nullptr) return std::nullopt;
  std::unordered_map<const TensorProxy*, const BoundSymbol*> producer;
  for (const BoundSymbol& b : trace.bsyms)
    for (const TensorPtr& t : b.outputTensors()) producer[t.get()] = &b;
  std::unordered_set<const TensorProxy*> returned;
  {
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned.insert(t.get());
  }
  // The permutation to undo for each linear to rewrite, and the contiguous tensor it reads.
  struct Plan {
    std::vector<int64_t> perm;
    Value source;
  };
  std::unordered_map<const BoundSymbol*, Plan> plans;
  for (const BoundSymbol& b : trace.bsyms) {
    if (b.sym != linear || b.args.size() < 2 || !b.args[0].isTensor() || !b.output.isTensor()) continue;
    const TensorProxy& x = b.args[0].tensor();
    const TensorProxy& y = b.output.tensor();
    if (returned.count(&y) || x.symbolic() || y.symbolic() || x.numel() == 0) continue;
    if (isContiguousLayout(x.shape, x.stridesOrContiguous())) continue;
    auto p = producer.find(&x);
    if (p == producer.end()) continue;
    std::vector<int64_t> perm = leadingPermutation(*p->second);
    if (perm.empty()) continue;
    const TensorProxy& src = p->second->args[0].tensor();
    if (!isContiguousLayout(src.shape, src.stridesOrContiguous())) continue;
    plans.emplace(&b, Plan{perm, p->second->args[0]});
  }
  if (plans.empty()) return std::nullopt;
  Trace out = trace.emptyCopy();
  std::unordered_set<const TensorProxy*> changed;
  for (const BoundSymbol& b : trace.bsyms) {
    auto it = plans.find(&b);
    if (it == plans.end()) {
      out.bsyms.push_back(b);
      continue;
    }
    std::vector<Value> args = b.args;
    args[0] = it->second.source;
    Value raw = appendTraced(out, [&] { return call(*linear, args); });
    std::vector<int64_t> strides;
    const TensorPtr& y = b.output.toTensor();
    appendTraced(out, [&] {
      Value v = ltorch::op("permute", {raw, Value::ints(it->second.perm)});
      strides = v.tensor().strides;
      return v;
    }, y, "linear before permute");
    y->strides = strides;
    changed.insert(y.get());
  }
  refreshViewStrides(out, changed);
  return out;
}

namespace {

/// The leaf prims of a call, or false where one is not a view prim.
bool viewPrims(const BoundSymbol& b, std::vector<const BoundSymbol*>& out) {
  if (b.sym->isPrim()) {
    const std::string& n = b.sym->name;
    if (n != "transpose" && n != "reshape" && n != "squeeze" && n != "slice" && n != "broadcast_in_dim") return false;
    out.push_back(&b);
    return true;
  }
  if (b.subsymbols.empty()) return false;
  for (const BoundSymbol& s : b.subsymbols)
    if (!viewPrims(s, out)) return false;
  return true;
}

}  // namespace

void refreshViewStrides(const Trace& trace, std::unordered_set<const TensorProxy*> changed) {
  if (changed.empty()) return;
  for (const BoundSymbol& b : trace.bsyms) {
    bool reads = false;
    for (const TensorPtr& t : b.inputTensors()) reads |= changed.count(t.get()) > 0;
    std::vector<const BoundSymbol*> prims;
    if (!reads || !viewPrims(b, prims)) continue;
    // Each prim's meta function gives its output the strides eager's view of the input has.
    Trace scratch;
    TracingScope scope(scratch);
    for (const BoundSymbol* p : prims) {
      if (!p->output.isTensor()) continue;
      p->output.toTensor()->strides = p->sym->meta(p->args).tensor().strides;
      changed.insert(p->output.toTensor().get());
    }
    for (const TensorPtr& t : b.outputTensors()) changed.insert(t.get());
  }
}

}  // namespace thunder
