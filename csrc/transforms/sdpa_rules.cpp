#include "transforms/sdpa_rules.h"

#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "ops/ltorch.h"
#include "ops/sdpa.h"
#include "ops/symbolic_rules.h"
#include "transforms/autodiff.h"
#include "transforms/dce.h"

namespace thunder {
namespace {

using Args = std::vector<Value>;

/// (B, Hk, S, E) -> (B, Hk * rep, S, E), each key head repeated `rep` times in a row, as
/// torch.repeat_interleave(x, rep, dim=1) (what enable_gqa means).
/// (Shapes with their expressions over the size symbols: the heads are static, staticSize.)
Value repeatHeads(const Value& x, int64_t rep) {
  std::vector<SymInt> s = x.tensor().symShape();
  SymInt heads{staticSize(x.tensor(), 1), nullptr};
  Value e = ltorch::op("expand", {ltorch::op("unsqueeze", {x, 2}), Value::sizes({s[0], heads, {rep, nullptr}, s[2], s[3]})});
  return ltorch::op("reshape", {e, Value::sizes({s[0], {heads.hint * rep, nullptr}, s[2], s[3]})});
}

/// The gradient of repeatHeads: the repeated heads summed.
Value sumRepeatedHeads(const Value& g, int64_t rep) {
  std::vector<SymInt> s = g.tensor().symShape();
  int64_t heads = staticSize(g.tensor(), 1);
  Value r = ltorch::op("reshape", {g, Value::sizes({s[0], {heads / rep, nullptr}, {rep, nullptr}, s[2], s[3]})});
  return ltorch::op("sum", {r, Value::ints({2})});
}

Value fusedRule(const Args& a) {
  bool maskGrad = a[3].isTensor() && needsGrad(a[3]);
  sdpa::Backend backend = sdpa::chooseBackend(a, maskGrad);
  THUNDER_INTERNAL(backend != sdpa::Backend::None,
                   "the fused grad rule of scaled_dot_product_attention got a call no fused "
                   "kernel applies to");
  const TensorProxy &q = a[0].tensor(), &k = a[1].tensor();
  int64_t rep = staticSize(q, 1) / staticSize(k, 1);
  Value key = a[1], value = a[2];
  if (rep != 1) {
    key = repeatHeads(key, rep);
    value = repeatHeads(value, rep);
  }
  Value mask = a[3];
  if (mask.isTensor() && mask.tensor().dtype == DType::Bool) {
    // A boolean mask (true: attend) becomes an additive one of the query's dtype, as in eager.
    const TensorProxy& m = mask.tensor();
    Value zeros = ltorch::op("full", {Value::sizes(m.symShape()), 0.0},
                             {{"device", m.device}, {"dtype", q.dtype}});
    mask = ltorch::op("masked_fill", {zeros, ltorch::op("logical_not", {mask}), -INFINITY});
  }
  double scale = a[6].isNone() ? 1.0 / std::sqrt(static_cast<double>(staticSize(q, 3))) : a[6].toDouble();
  Value causal = a[5].toBool();
  Value name = sdpa::backendName(backend);
  double dropout = a[4].toDouble();
  Value res = call(sdpa::forwardSymbol(), {a[0], key, value, mask, causal, scale, name, dropout});
  Value out = res.items()[0], lse = res.items()[1];
  Value seed, offset;
  if (dropout > 0.0) {
    seed = res.items()[2];
    offset = res.items()[3];
  }

  Value g = getGrad(out);
  Value grads = call(sdpa::backwardSymbol(), {g, a[0], key, value, out, lse, mask, causal, scale,
                                              name, dropout, seed, offset, maskGrad});
  // (T5's position bias, a learned additive mask: summed back to the mask's shape by putGrad)
  if (maskGrad) putGrad(a[3], grads.items()[3]);
  Value dk = grads.items()[1], dv = grads.items()[2];
  if (rep != 1) {
    dk = sumRepeatedHeads(dk, rep);
    dv = sumRepeatedHeads(dv, rep);
  }
  putGrad(a[0], grads.items()[0]);
  putGrad(a[1], dk);
  putGrad(a[2], dv);
  return out;
}

}  // namespace

void registerSdpaGradRule() {
  sdpa::registerSdpaSymbols();
  // Sizes read as numbers through staticSize, shapes with their expressions.
  markSymbolicGrad(ltorch::symbol("scaled_dot_product_attention").id());
  registerGradRule(
      ltorch::symbol("scaled_dot_product_attention").id(), fusedRule,
      [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>& differentiable) {
        bool maskNeedsGrad = b.args.size() > 3 && b.args[3].isTensor() &&
                             differentiable(b.args[3].tensor());
        return sdpa::chooseBackend(b.args, maskNeedsGrad) != sdpa::Backend::None;
      });
}

std::optional<Trace> sdpaMasksToBias(const Trace& trace) {
  const Symbol* sdpa = SymbolRegistry::get().find("ltorch.scaled_dot_product_attention");
  if (sdpa == nullptr) return std::nullopt;
  auto boolMask = [&](const BoundSymbol& b) {
    return b.sym == sdpa && b.args.size() > 3 && b.args[3].isTensor() && b.args[3].tensor().dtype == DType::Bool &&
           b.args[0].isTensor() && b.output.isTensor();
  };
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || boolMask(b);
  if (!any) return std::nullopt;
  Trace out = trace.emptyCopy();
  std::map<std::pair<const TensorProxy*, DType>, TensorPtr> biases;
  for (const BoundSymbol& b : trace.bsyms) {
    if (!boolMask(b)) {
      out.bsyms.push_back(b);
      continue;
    }
    appendTraced(out, [&] {
      const TensorPtr& mask = b.args[3].toTensor();
      DType dt = b.args[0].tensor().dtype;
      TensorPtr& bias = biases[{mask.get(), dt}];
      if (!bias) {
        Value additive = ltorch::op("where", {b.args[3], Value(0.0), Value(-INFINITY)});
        bias = ltorch::op("to", {additive, Value(), Value(dt)}).toTensor();
      }
      std::vector<Value> args = b.args;
      args[3] = Value(bias);
      return call(*sdpa, std::move(args));
    }, b.output.toTensor(), "sdpa masks to bias");
  }
  return out;
}

}  // namespace thunder

namespace thunder {
namespace {

/// An integer tensor whose element at index i is c + sum_d coef[d] * i[d].
struct Affine {
  Shape shape;
  std::vector<int64_t> coef;
  int64_t c = 0;
};

enum class Cmp { LE, LT, GE, GT };

/// A boolean tensor whose element at index i is `d(i) cmp 0`.
struct Predicate {
  Affine d;
  Cmp cmp;
};

/// `a` broadcast to `out`, its dims at `dims` (prims.broadcast_in_dim): a dim of length 1 that
/// broadcasts reads its one element at every index.
Affine broadcast(const Affine& a, const Shape& out, const std::vector<int64_t>& dims) {
  Affine r{out, std::vector<int64_t>(out.size(), 0), a.c};
  for (size_t k = 0; k < dims.size(); ++k)
    if (a.shape[k] == out[dims[k]]) r.coef[dims[k]] = a.coef[k];
  return r;
}

/// Reads tensors computed from positions alone as Affine / Predicate forms, from the leaf prims
/// of a trace. Anything else (an input, a data-dependent op) reads as nothing.
class PositionReader {
 public:
  explicit PositionReader(const Trace& t) {
    for (const BoundSymbol& b : t.bsyms) index(b);
  }

  std::optional<Affine> affine(const Value& v, const Shape& like) {
    if (v.isInt()) return Affine{like, std::vector<int64_t>(like.size(), 0), v.toInt()};
    if (!v.isTensor() || !isIntegral(v.tensor().dtype)) return std::nullopt;
    auto it = producer_.find(v.toTensor().get());
    if (it == producer_.end()) return std::nullopt;
    const BoundSymbol& p = *it->second;
    const std::string& n = p.sym->name;
    const Shape& out = v.tensor().shape;
    if (n == "iota") return Affine{out, {p.args[2].toInt()}, p.args[1].toInt()};
    if (n == "convert_element_type") return affine(p.args[0], out);
    if (n == "broadcast_in_dim") {
      std::optional<Affine> a = affine(p.args[0], out);
      if (!a) return std::nullopt;
      return broadcast(*a, out, p.args[2].toInts());
    }
    if (n == "add" || n == "sub") {
      std::optional<Affine> a = affine(p.args[0], out), b = affine(p.args[1], out);
      if (!a || !b || a->shape != out || b->shape != out) return std::nullopt;
      int64_t s = n == "add" ? 1 : -1;
      for (size_t d = 0; d < out.size(); ++d) a->coef[d] += s * b->coef[d];
      a->c += s * b->c;
      return a;
    }
    return std::nullopt;
  }

  std::optional<Predicate> predicate(const Value& v) {
    if (!v.isTensor() || v.tensor().dtype != DType::Bool) return std::nullopt;
    auto it = producer_.find(v.toTensor().get());
    if (it == producer_.end()) return std::nullopt;
    const BoundSymbol& p = *it->second;
    const std::string& n = p.sym->name;
    const Shape& out = v.tensor().shape;
    if (n == "broadcast_in_dim") {
      std::optional<Predicate> a = predicate(p.args[0]);
      if (!a) return std::nullopt;
      return Predicate{broadcast(a->d, out, p.args[2].toInts()), a->cmp};
    }
    static const std::map<std::string, Cmp> cmps = {{"le", Cmp::LE}, {"lt", Cmp::LT}, {"ge", Cmp::GE}, {"gt", Cmp::GT}};
    auto c = cmps.find(n);
    if (c == cmps.end()) return std::nullopt;
    std::optional<Affine> a = affine(p.args[0], out), b = affine(p.args[1], out);
    if (!a || !b || a->shape != out || b->shape != out) return std::nullopt;
    for (size_t d = 0; d < out.size(); ++d) a->coef[d] -= b->coef[d];
    a->c -= b->c;
    return Predicate{*a, c->second};
  }

 private:
  void index(const BoundSymbol& b) {
    if (b.sym->isPrim() || b.subsymbols.empty()) {
      for (const TensorPtr& o : b.outputTensors()) producer_[o.get()] = &b;
      return;
    }
    for (const BoundSymbol& s : b.subsymbols) index(s);
  }
  std::unordered_map<const TensorProxy*, const BoundSymbol*> producer_;
};

/// Whether `m` over [..., T, T] is true exactly where the key position is at most the query's.
bool isCausal(const Predicate& m) {
  size_t n = m.d.shape.size();
  if (n < 2 || m.d.shape[n - 1] != m.d.shape[n - 2]) return false;
  for (size_t d = 0; d + 2 < n; ++d)
    if (m.d.coef[d] != 0) return false;
  int64_t t = m.d.shape[n - 1], pi = m.d.coef[n - 2], pj = m.d.coef[n - 1];
  auto holds = [&](int64_t i, int64_t j) {
    int64_t x = m.d.c + pi * i + pj * j;
    switch (m.cmp) {
      case Cmp::LE: return x <= 0;
      case Cmp::LT: return x < 0;
      case Cmp::GE: return x >= 0;
      case Cmp::GT: return x > 0;
    }
    return false;
  };
  // Linear in j, the row's true set is a half-line: with 0 and i in it and i + 1 not, it is
  // exactly [0, i].
  for (int64_t i = 0; i < t; ++i)
    if (!holds(i, 0) || !holds(i, i) || (i + 1 < t && holds(i, i + 1))) return false;
  return true;
}

/// A call whose value depends on nothing but its arguments, which may be evaluated at compile
/// time: a torch-language or prim call (not random, not kept for a side effect, not `empty`,
/// whose values are undefined), or the fallback's `tensor[key]`.
bool pureCall(const BoundSymbol& b) {
  const Symbol& s = *b.sym;
  if (s.hasTag(kRandomOp) || s.hasTag(kDontDce)) return false;
  if (s.executor.empty()) return s.name.rfind("empty", 0) != 0;
  return s.printAs == "torch.Tensor.__getitem__";
}

/// The top-level calls of a trace that read none of its inputs, transitively: what can be
/// computed once at compile time.
class ConstantCalls {
 public:
  explicit ConstantCalls(const Trace& t) : trace_(t) {
    for (size_t i = 0; i < t.bsyms.size(); ++i) {
      const BoundSymbol& b = t.bsyms[i];
      if (!pureCall(b)) continue;
      bool ok = true;
      for (const Value& a : b.args) ok = ok && !a.hasSymbolic();
      for (const TensorPtr& in : b.inputTensors()) ok = ok && producer_.count(in.get()) != 0;
      std::vector<TensorPtr> outs = b.outputTensors();
      if (!ok || outs.empty()) continue;
      for (const TensorPtr& o : outs) producer_[o.get()] = i;
    }
  }

  bool constant(const TensorProxy* t) const { return producer_.count(t) != 0; }

  /// A trace with no inputs holding the calls `t` needs, in order, and no output yet.
  Trace slice(const TensorProxy* t) const {
    std::vector<bool> need(trace_.bsyms.size(), false);
    std::vector<const TensorProxy*> work{t};
    while (!work.empty()) {
      auto it = producer_.find(work.back());
      work.pop_back();
      if (it == producer_.end() || need[it->second]) continue;
      need[it->second] = true;
      for (const TensorPtr& in : trace_.bsyms[it->second].inputTensors()) work.push_back(in.get());
    }
    Trace sub = trace_.emptyCopy();
    sub.inputs.clear();
    sub.output = Value();
    for (size_t i = 0; i < need.size(); ++i)
      if (need[i]) sub.bsyms.push_back(trace_.bsyms[i]);
    return sub;
  }

 private:
  const Trace& trace_;
  std::unordered_map<const TensorProxy*, size_t> producer_;  // a constant tensor -> its call
};

/// Whether `mask`, read by no input of the trace, is the causal pattern over [..., t, t]: the
/// comparison traced after the mask's calls and run by `evaluate`.
bool evaluatesCausal(const ConstantCalls& calls, const Value& mask, int64_t t, const ConstantEvaluator& evaluate) {
  const TensorProxy& m = mask.tensor();
  if (m.ndim() < 2 || m.symbolic()) return false;
  Trace sub = calls.slice(&m);
  Value ok;
  try {
    ok = appendTraced(sub, [&] {
      Value lower = ltorch::op("tril", {ltorch::op("full", {Value::ints({t, t}), true},
                                                   {{"device", m.device}, {"dtype", DType::Bool}})});
      Value same = m.dtype == DType::Bool
                       ? ltorch::op("eq", {mask, lower})
                       : ltorch::op("where", {lower, ltorch::op("eq", {mask, 0.0}),
                                              ltorch::op("eq", {mask, Value(-INFINITY)})});
      return ltorch::op("all", {same});
    });
  } catch (const std::exception&) {
    return false;  // (a mask that does not broadcast to [..., t, t]: the call's own check says so)
  }
  sub.output = ok;
  std::optional<double> v = evaluate(sub);
  return v && *v != 0.0;
}

/// Whether the constant `mask` masks nothing: true everywhere (boolean) or 0 everywhere (additive).
bool evaluatesUnmasked(const ConstantCalls& calls, const Value& mask, const ConstantEvaluator& evaluate) {
  const TensorProxy& m = mask.tensor();
  if (m.symbolic() || m.numel() == 0) return false;
  Trace sub = calls.slice(&m);
  Value ok;
  try {
    ok = appendTraced(sub, [&] {
      Value open = m.dtype == DType::Bool ? mask : ltorch::op("eq", {mask, 0.0});
      return ltorch::op("all", {open});
    });
  } catch (const std::exception&) {
    return false;
  }
  sub.output = ok;
  std::optional<double> v = evaluate(sub);
  return v && *v != 0.0;
}

}  // namespace

std::optional<Trace> sdpaCausalMasks(const Trace& trace, const ConstantEvaluator& evaluate) {
  const Symbol* sdpa = SymbolRegistry::get().find("ltorch.scaled_dot_product_attention");
  if (sdpa == nullptr) return std::nullopt;
  PositionReader reader(trace);
  std::optional<ConstantCalls> constants;
  // An attention call with a mask and is_causal=False.
  auto masked = [&](const BoundSymbol& b) {
    return b.sym == sdpa && b.args.size() >= 6 && b.args[3].isTensor() && !b.args[5].toBool() && b.output.isTensor();
  };
  // A mask that reads no input of the trace and passes `test` when computed (once per mask).
  auto computedMask = [&](const BoundSymbol& b, std::unordered_map<const TensorProxy*, bool>& seen,
                          const std::function<bool()>& test) {
    if (!evaluate || !trace.symbols.empty()) return false;
    const TensorProxy* mask = b.args[3].toTensor().get();
    auto it = seen.find(mask);
    if (it != seen.end()) return it->second;
    if (!constants) constants.emplace(trace);
    return seen[mask] = constants->constant(mask) && test();
  };
  std::unordered_map<const TensorProxy*, bool> causalMasks, openMasks;
  auto causal = [&](const BoundSymbol& b) {
    if (!masked(b)) return false;
    const TensorProxy &q = b.args[0].tensor(), &k = b.args[1].tensor();
    if (q.ndim() < 2 || k.ndim() < 2 || q.shape[q.ndim() - 2] != k.shape[k.ndim() - 2]) return false;
    std::optional<Predicate> m = reader.predicate(b.args[3]);
    if (m) return m->d.shape.back() == k.shape[k.ndim() - 2] && isCausal(*m);
    return computedMask(b, causalMasks,
                        [&] { return evaluatesCausal(*constants, b.args[3], k.shape[k.ndim() - 2], evaluate); });
  };
  // A mask that masks nothing (transformers' bidirectional mask for a batch without padding:
  // `arange(T) >= 0`, broadcast to [B, 1, T, T]) is dropped: read as a bias it made cuDNN's
  // attention three times slower (wav2vec2).
  auto unmasked = [&](const BoundSymbol& b) {
    return masked(b) && computedMask(b, openMasks, [&] { return evaluatesUnmasked(*constants, b.args[3], evaluate); });
  };
  enum class Rewrite { None, Causal, Unmasked };
  std::vector<Rewrite> rewrite;
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) {
    rewrite.push_back(causal(b) ? Rewrite::Causal : unmasked(b) ? Rewrite::Unmasked : Rewrite::None);
    any = any || rewrite.back() != Rewrite::None;
  }
  if (!any) return std::nullopt;
  Trace out = trace.emptyCopy();
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (rewrite[i] == Rewrite::None) {
      out.bsyms.push_back(b);
      continue;
    }
    appendTraced(out, [&] {
      std::vector<Value> args = b.args;
      args[3] = Value();
      args[5] = Value(rewrite[i] == Rewrite::Causal);
      return call(*sdpa, std::move(args));
    }, b.output.toTensor(), "sdpa causal masks");
  }
  return dce(out);
}

std::optional<Trace> foldConstantConditions(const Trace& trace, const ConstantEvaluator& evaluate) {
  const Symbol* where = SymbolRegistry::get().find("ltorch.where");
  const Symbol* fill = SymbolRegistry::get().find("ltorch.masked_fill");
  if (!evaluate || !trace.symbols.empty() || where == nullptr || fill == nullptr) return std::nullopt;
  std::vector<TensorPtr> outs;
  trace.output.collectTensors(outs);
  std::unordered_set<const TensorProxy*> returned;
  for (const TensorPtr& t : outs) returned.insert(t.get());
  std::optional<ConstantCalls> constants;
  std::unordered_map<const TensorProxy*, int> known;  // condition -> 1 all true, 0 all false, -1 neither or unknown
  auto state = [&](const Value& c) {
    if (!c.isTensor() || c.tensor().dtype != DType::Bool || c.tensor().symbolic() || c.tensor().numel() == 0) return -1;
    const TensorProxy* t = c.toTensor().get();
    auto it = known.find(t);
    if (it != known.end()) return it->second;
    if (!constants) constants.emplace(trace);
    int r = -1;
    if (constants->constant(t)) {
      Trace sub = constants->slice(t);
      try {
        sub.output = appendTraced(sub, [&] { return ltorch::op("sum", {ltorch::op("to", {c, Value(), DType::Int64})}); });
        std::optional<double> n = evaluate(sub);
        if (n && *n == static_cast<double>(c.tensor().numel())) r = 1;
        else if (n && *n == 0.0) r = 0;
      } catch (const std::exception&) {
        r = -1;
      }
    }
    known[t] = r;
    return r;
  };
  // A branch the call never takes may be dropped where it is a number or a constant: a tensor
  // made from an input keeps its place in the gradient's graph (eager gives it a zero gradient).
  auto droppable = [&](const Value& v) {
    return !v.isTensor() || (constants && constants->constant(v.toTensor().get()));
  };
  // The value a call takes whole: (the branch, or nothing).
  auto chosen = [&](const BoundSymbol& b) -> std::optional<Value> {
    if (!b.output.isTensor() || returned.count(b.output.toTensor().get())) return std::nullopt;
    if (b.sym == where && b.args.size() == 3) {
      int s = state(b.args[0]);
      if (s < 0 || !droppable(b.args[s == 1 ? 2 : 1])) return std::nullopt;
      return b.args[s == 1 ? 1 : 2];
    }
    if (b.sym == fill && b.args.size() == 3) {
      int s = state(b.args[1]);
      if (s < 0 || !droppable(b.args[s == 1 ? 0 : 2])) return std::nullopt;
      return b.args[s == 1 ? 2 : 0];
    }
    return std::nullopt;
  };
  Trace out = trace.emptyCopy();
  TensorRenames renamed;
  bool any = false;
  for (const BoundSymbol& b0 : trace.bsyms) {
    BoundSymbol b = b0;
    substituteReads(b, renamed);
    std::optional<Value> x = chosen(b);
    if (!x) {
      out.bsyms.push_back(std::move(b));
      continue;
    }
    any = true;
    const TensorPtr& result = b.output.toTensor();
    if (x->isTensor() && x->tensor().dtype == result->dtype && x->tensor().shape == result->shape) {
      renamed[result.get()] = x->toTensor();  // the branch itself: later calls read it
      continue;
    }
    appendTraced(out, [&] {
      if (!x->isTensor())
        return ltorch::op("full", {Value::ints(result->shape), *x}, {{"device", result->device}, {"dtype", result->dtype}});
      Value v = *x;
      if (v.tensor().dtype != result->dtype) v = ltorch::op("to", {v, Value(), result->dtype});
      if (v.tensor().shape != result->shape) v = ltorch::op("expand", {v, Value::ints(result->shape)});
      return v;
    }, result, "constant conditions");
  }
  if (!any) return std::nullopt;
  out.output = substitute(trace.output, renamed);
  return dce(out);
}

}  // namespace thunder
