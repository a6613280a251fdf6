#include "ops/symbolic_rules.h"

#include "ops/sdpa.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "ir/error.h"
#include "ops/sdpa.h"

namespace thunder {

namespace {

using Dims = std::vector<SymInt>;

/// What a rule sees: the call's arguments by parameter name, and where it records guards.
struct RuleCtx {
  const Symbol& sym;
  const BoundSymbol& b;
  std::vector<SymGuard>& needs;

  const Value& arg(const char* name) const {
    for (size_t i = 0; i < sym.params.size() && i < b.args.size(); ++i)
      if (sym.params[i].name == name) return b.args[i];
    static const Value none;
    return none;
  }
  const Value& at(size_t i) const {
    static const Value none;
    return i < b.args.size() ? b.args[i] : none;
  }
  /// a == b assumed (recorded where it is not an identity).
  bool equal(const SymInt& x, const SymInt& y) {
    if (sameSym(x, y)) return true;
    if (x.hint != y.hint) return false;
    needs.push_back(guardEqual(x, y));
    return true;
  }
  /// Records that x <= y is what it is at the hints; returns it.
  bool lessEqual(const SymInt& x, const SymInt& y) {
    SymGuard g = guardLessEqual(x, y);
    if (!g.e.isConstant()) needs.push_back(g);
    return x.hint <= y.hint;
  }
};

SymInt constant(int64_t v) { return {v, nullptr}; }

int64_t wrapDim(int64_t d, size_t n) { return d < 0 ? d + static_cast<int64_t>(n) : d; }

/// The broadcast of shapes, as TensorIterator's: right-aligned, a static 1 stretches. A
/// symbolic size that is 1 at its hint is assumed 1 (a guard); two sizes at one position must
/// be the same.
bool broadcast(RuleCtx& c, const std::vector<Dims>& shapes, Dims& out) {
  size_t n = 0;
  for (const Dims& s : shapes) n = std::max(n, s.size());
  out.assign(n, constant(1));
  for (size_t k = 0; k < n; ++k) {
    const SymInt* chosen = nullptr;
    for (const Dims& s : shapes) {
      if (k + s.size() < n) continue;
      const SymInt& d = s[k + s.size() - n];
      if (d.hint == 1) {
        if (d.symbolic()) c.needs.push_back(guardEqual(d, constant(1)));
        continue;
      }
      if (!chosen) chosen = &d;
      else if (!c.equal(*chosen, d)) return false;
    }
    if (chosen) out[k] = *chosen;
  }
  return true;
}

Dims shapeOf(const Value& v) { return v.isTensor() ? v.tensor().symShape() : Dims{}; }

/// The ints of a shape argument (a tuple, or a single int), with their expressions.
bool symInts(const Value& v, Dims& out) {
  out.clear();
  if (v.isInt()) {
    out.push_back(v.toSymInt());
    return true;
  }
  if (!v.isSequence()) return false;
  for (const Value& x : v.items()) {
    if (!x.isInt()) return false;
    out.push_back(x.toSymInt());
  }
  return true;
}

/// Whether the int index `i` is inside a dimension of `size` (a negative one counting from the end),
/// recorded as guards: true where it is and the rule covers it.
bool indexInside(RuleCtx& c, const SymInt& i, const SymInt& size) {
  if (i.hint < 0) return !i.symbolic() && c.lessEqual(-i, size);
  // (a symbolic index counts from the start at every size the trace serves, as at its hint:
  // `x[:, T - 3]` at T = 2 is x[:, -1])
  if (i.symbolic() && !c.lessEqual(constant(0), i)) return false;
  return c.lessEqual(i + constant(1), size);
}

bool product(const Dims& dims, SymInt& out) {
  out = constant(1);
  for (const SymInt& d : dims) {
    bool ok = true;
    out = mulSym(out, d, ok);
    if (!ok) return false;
  }
  return true;
}

/// n / d exactly, as an expression: false where it is not one.
bool divide(const SymInt& n, const SymInt& d, SymInt& out) {
  if (d.hint == 0) return false;
  if (!d.symbolic()) {
    SymExpr e = n.expr();
    if (e.constant % d.hint != 0) return false;
    for (const auto& t : e.terms)
      if (t.second % d.hint != 0) return false;
    e.constant /= d.hint;
    for (auto& t : e.terms) t.second /= d.hint;
    out = {n.hint / d.hint, normalized(std::move(e))};
    return true;
  }
  // A symbolic divisor: only a constant multiple of it.
  if (n.hint % d.hint != 0) return false;
  int64_t k = n.hint / d.hint;
  bool ok = true;
  SymInt back = mulSym(d, constant(k), ok);
  if (!ok || !sameSym(back, n)) return false;
  out = constant(k);
  return true;
}

// ---- the rules ---------------------------------------------------------------------------------

using Rule = std::function<bool(RuleCtx&, std::vector<Dims>&)>;

bool sameAsFirst(RuleCtx& c, std::vector<Dims>& outs) {
  for (const Value& a : c.b.args)
    if (a.isTensor()) {
      outs.push_back(shapeOf(a));
      return true;
    }
  return false;
}

bool broadcastAll(RuleCtx& c, std::vector<Dims>& outs) {
  std::vector<Dims> shapes;
  for (const Value& a : c.b.args)
    if (a.isTensor()) shapes.push_back(shapeOf(a));
  Dims out;
  if (!broadcast(c, shapes, out)) return false;
  outs.push_back(out);
  return true;
}

bool reduction(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  const Value& dim = c.arg("dim");
  const Value& keep = c.arg("keepdim");
  bool keepdim = keep.isBool() && keep.toBool();
  std::vector<bool> reduced(in.size(), dim.isNone());
  if (!dim.isNone()) {
    std::vector<int64_t> ds = dim.toInts();
    if (ds.empty() && !dim.isInt()) reduced.assign(in.size(), true);  // sum(dim=()) reduces all
    for (int64_t d : ds) {
      int64_t w = wrapDim(d, in.size());
      if (w < 0 || w >= static_cast<int64_t>(in.size())) return in.empty() && (w == 0 || w == -1);
      reduced[w] = true;
    }
  }
  Dims out;
  for (size_t k = 0; k < in.size(); ++k) {
    if (!reduced[k]) out.push_back(in[k]);
    else if (keepdim) out.push_back(constant(1));
  }
  for (size_t k = 0; k < c.b.outputTensors().size(); ++k) outs.push_back(out);
  return true;
}

bool diff(RuleCtx& c, std::vector<Dims>& outs) {
  // torch.diff: along `dim`, the length with prepend and append, less n (at least 0: a guard).
  Dims in = shapeOf(c.arg("a"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (d < 0 || d >= (int64_t)in.size() || c.arg("n").symExpr()) return false;
  SymInt len = in[d];
  for (const char* side : {"prepend", "append"}) {
    const Value& v = c.arg(side);
    if (v.isNone()) continue;
    if (!v.isTensor() || v.tensor().ndim() != (int64_t)in.size()) return false;
    len = len + v.tensor().dim(d);
  }
  SymInt n = constant(c.arg("n").toInt());
  if (!c.lessEqual(n, len)) return false;
  in[d] = len - n;
  outs.push_back(in);
  return true;
}

bool addmm(RuleCtx& c, std::vector<Dims>& outs) {
  // beta * a + alpha * (mat1 @ mat2): [mat1's rows, mat2's columns], a broadcast to it.
  Dims m1 = shapeOf(c.arg("mat1")), m2 = shapeOf(c.arg("mat2"));
  if (m1.size() != 2 || m2.size() != 2 || !c.equal(m1[1], m2[0])) return false;
  Dims out{m1[0], m2[1]}, b;
  if (!broadcast(c, {shapeOf(c.arg("a")), out}, b) || b.size() != 2) return false;
  for (size_t k = 0; k < 2; ++k)
    if (!c.equal(b[k], out[k])) return false;
  outs.push_back(out);
  return true;
}

/// split / chunk / unbind along a static dimension: each piece the input with that dimension
/// its own static length (the pieces' sizes are the meta function's).
bool pieces(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (d < 0 || d >= (int64_t)in.size() || in[d].symbolic()) return false;
  for (const Value& x : c.b.args)
    if (x.hasSymbolic() && !x.isTensor()) return false;
  for (const TensorPtr& t : c.b.outputTensors()) {
    Dims p = in;
    if (c.sym.name == "unbind") {
      p.erase(p.begin() + d);
    } else {
      p[d] = constant(t->shape[d]);
    }
    outs.push_back(p);
  }
  return true;
}

bool minMax(RuleCtx& c, std::vector<Dims>& outs) {
  // torch.max(a, b) of two tensors is elementwise; torch.max(a) and torch.max(a, dim) reduce.
  return c.arg("dim").isTensor() ? broadcastAll(c, outs) : reduction(c, outs);
}

bool reshape(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), to;
  if (!symInts(c.arg("shape"), to)) return false;
  SymInt numel;
  if (!product(in, numel)) return false;
  int infer = -1;
  Dims known;
  for (size_t k = 0; k < to.size(); ++k) {
    if (!to[k].symbolic() && to[k].hint == -1) {
      if (infer >= 0) return false;
      infer = static_cast<int>(k);
    } else {
      known.push_back(to[k]);
    }
  }
  SymInt knownNumel;
  if (!product(known, knownNumel)) return false;
  if (infer >= 0) {
    SymInt rest;
    if (!divide(numel, knownNumel, rest)) return false;
    to[infer] = rest;
  } else if (!c.equal(numel, knownNumel)) {
    return false;
  }
  outs.push_back(to);
  return true;
}

/// `in` expanded to `to` as Tensor.expand does: -1 keeps a dimension, a static 1 stretches, new
/// dimensions lead (none of them -1), the others must be the same size.
bool expandTo(RuleCtx& c, const Dims& in, Dims to, std::vector<Dims>& outs) {
  if (to.size() < in.size()) return false;
  size_t lead = to.size() - in.size();
  for (size_t k = 0; k < to.size(); ++k) {
    bool keep = !to[k].symbolic() && to[k].hint == -1;
    if (k < lead) {
      if (keep) return false;
      continue;
    }
    const SymInt& d = in[k - lead];
    if (keep) to[k] = d;
    else if (!(!d.symbolic() && d.hint == 1) && !c.equal(d, to[k])) return false;
  }
  outs.push_back(to);
  return true;
}

bool expand(RuleCtx& c, std::vector<Dims>& outs) {
  // expand(shape) and broadcast_to(shape)
  Dims to;
  return symInts(c.arg("shape"), to) && expandTo(c, shapeOf(c.arg("a")), to, outs);
}

bool permuteBy(const Dims& in, const std::vector<int64_t>& perm, Dims& out) {
  out.clear();
  for (int64_t p : perm) {
    int64_t w = wrapDim(p, in.size());
    if (w < 0 || w >= static_cast<int64_t>(in.size())) return false;
    out.push_back(in[w]);
  }
  return true;
}

bool transpose(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  if (in.empty()) return outs.push_back(in), true;
  int64_t a = wrapDim(c.arg("dim0").toInt(), in.size()), b = wrapDim(c.arg("dim1").toInt(), in.size());
  if (a < 0 || b < 0 || a >= (int64_t)in.size() || b >= (int64_t)in.size()) return false;
  std::swap(in[a], in[b]);
  outs.push_back(in);
  return true;
}

bool tRule(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  if (in.size() == 2) std::swap(in[0], in[1]);
  outs.push_back(in);
  return true;
}

bool permute(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), out;
  if (!permuteBy(in, c.arg("dims").toInts(), out)) return false;
  outs.push_back(out);
  return true;
}

bool unsqueeze(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size() + 1);
  if (d < 0 || d > (int64_t)in.size()) return false;
  in.insert(in.begin() + d, constant(1));
  outs.push_back(in);
  return true;
}

bool squeeze(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  const Value& dim = c.arg("dim");
  // The dimensions squeeze may drop: those asked for, or all.
  std::vector<bool> asked(in.size(), dim.isNone());
  if (!dim.isNone() && !in.empty()) {
    for (int64_t d : dim.toInts()) {
      int64_t w = wrapDim(d, in.size());
      if (w < 0 || w >= (int64_t)in.size()) return false;
      asked[w] = true;
    }
  }
  Dims out;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].symbolic()) {
      // A symbolic size is kept: it must not be 1 where squeeze would drop it.
      if (in[k].hint == 1) return false;
      if (asked[k]) c.needs.push_back(guardEqual(in[k], constant(1)));
      out.push_back(in[k]);
    } else if (!(asked[k] && in[k].hint == 1)) {
      out.push_back(in[k]);
    }
  }
  outs.push_back(out);
  return true;
}

bool flatten(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  if (in.empty()) return outs.push_back(Dims{constant(1)}), true;
  int64_t s = wrapDim(c.arg("start_dim").toInt(), in.size()), e = wrapDim(c.arg("end_dim").toInt(), in.size());
  if (s < 0 || e >= (int64_t)in.size() || s > e) return false;
  SymInt p;
  if (!product(Dims(in.begin() + s, in.begin() + e + 1), p)) return false;
  Dims out(in.begin(), in.begin() + s);
  out.push_back(p);
  out.insert(out.end(), in.begin() + e + 1, in.end());
  outs.push_back(out);
  return true;
}

bool cat(RuleCtx& c, std::vector<Dims>& outs) {
  const Value& ts = c.arg("tensors");
  if (!ts.isSequence()) return false;
  std::vector<Dims> shapes;
  for (const Value& t : ts.items()) {
    if (!t.isTensor()) return false;
    Dims s = shapeOf(t);
    // PyTorch skips 1-D empty tensors in a cat.
    if (s.size() == 1 && s[0].hint == 0) {
      if (s[0].symbolic()) return false;
      continue;
    }
    if (s.size() == 1 && s[0].symbolic()) c.needs.push_back(guardEqual(s[0], constant(0)));
    shapes.push_back(s);
  }
  if (shapes.empty()) return sameAsFirst(c, outs);
  Dims out = shapes[0];
  int64_t d = wrapDim(c.arg("dim").toInt(), out.size());
  if (d < 0 || d >= (int64_t)out.size()) return false;
  for (size_t i = 1; i < shapes.size(); ++i) {
    if (shapes[i].size() != out.size()) return false;
    for (size_t k = 0; k < out.size(); ++k) {
      if ((int64_t)k == d) out[k] = out[k] + shapes[i][k];
      else if (!c.equal(out[k], shapes[i][k])) return false;
    }
  }
  outs.push_back(out);
  return true;
}

bool stack(RuleCtx& c, std::vector<Dims>& outs) {
  const Value& ts = c.arg("tensors");
  if (!ts.isSequence() || ts.items().empty()) return false;
  Dims out = shapeOf(ts.items()[0]);
  for (const Value& t : ts.items()) {
    Dims s = shapeOf(t);
    if (s.size() != out.size()) return false;
    for (size_t k = 0; k < s.size(); ++k)
      if (!c.equal(out[k], s[k])) return false;
  }
  int64_t d = wrapDim(c.arg("dim").toInt(), out.size() + 1);
  if (d < 0 || d > (int64_t)out.size()) return false;
  out.insert(out.begin() + d, constant(static_cast<int64_t>(ts.items().size())));
  outs.push_back(out);
  return true;
}

bool narrow(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (d < 0 || d >= (int64_t)in.size()) return false;
  SymInt start = c.arg("start").toSymInt(), length = c.arg("length").toSymInt();
  if (start.hint < 0) {
    if (start.symbolic()) return false;
    start = in[d] + start;
  } else if (start.symbolic() && !c.lessEqual(constant(0), start)) {
    return false;
  }
  if (!c.lessEqual(constant(0), length) || !c.lessEqual(start + length, in[d])) return false;
  in[d] = length;
  outs.push_back(in);
  return true;
}

bool indexSelect(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), idx = shapeOf(c.arg("index"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (in.empty() || d < 0 || d >= (int64_t)in.size() || idx.size() > 1) return false;
  in[d] = idx.empty() ? constant(1) : idx[0];
  outs.push_back(in);
  return true;
}

bool arange(RuleCtx& c, std::vector<Dims>& outs) {
  const Value &a = c.arg("start"), &e = c.arg("end"), &s = c.arg("step");
  SymInt start = constant(0), end;
  if (e.isNone()) {
    if (!a.isInt()) return false;
    end = a.toSymInt();
  } else {
    if (!a.isInt() || !e.isInt()) return false;
    start = a.toSymInt(), end = e.toSymInt();
  }
  if (!s.isNone() && !(s.isInt() && !s.symExpr() && s.toInt() == 1)) return false;
  // torch.arange(start, end) with end < start raises: the length is end - start.
  if (!c.lessEqual(start, end)) return false;
  outs.push_back(Dims{end - start});
  return true;
}

bool sized(RuleCtx& c, const char* param, std::vector<Dims>& outs) {
  Dims to;
  if (!symInts(c.arg(param), to)) return false;
  for (const SymInt& d : to)
    if (d.hint < 0) return false;
  outs.push_back(to);
  return true;
}

bool matmul(RuleCtx& c, std::vector<Dims>& outs) {
  Dims a = shapeOf(c.at(0)), b = shapeOf(c.at(1));
  if (a.empty() || b.empty()) return false;
  if (a.size() == 1 && b.size() == 1) {
    if (!c.equal(a[0], b[0])) return false;
    return outs.push_back(Dims{}), true;
  }
  if (b.size() == 1) {
    if (!c.equal(a.back(), b[0])) return false;
    a.pop_back();
    return outs.push_back(a), true;
  }
  if (a.size() == 1) {
    if (!c.equal(a[0], b[b.size() - 2])) return false;
    Dims out(b.begin(), b.end() - 2);
    out.push_back(b.back());
    return outs.push_back(out), true;
  }
  if (!c.equal(a.back(), b[b.size() - 2])) return false;
  Dims batch;
  if (!broadcast(c, {Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2)}, batch)) return false;
  if (c.sym.name == "bmm" && (a.size() != 3 || b.size() != 3)) return false;
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  outs.push_back(batch);
  return true;
}

bool linear(RuleCtx& c, std::vector<Dims>& outs) {
  Dims x = shapeOf(c.arg("a")), w = shapeOf(c.arg("weight"));
  if (x.empty() || w.empty() || w.size() > 2) return false;
  if (!c.equal(x.back(), w.back())) return false;
  x.pop_back();
  if (w.size() == 2) x.push_back(w[0]);
  const Value& bias = c.arg("bias");
  if (bias.isTensor()) {
    Dims out;
    if (!broadcast(c, {x, shapeOf(bias)}, out)) return false;
    x = out;
  }
  outs.push_back(x);
  return true;
}

bool sdpa(RuleCtx& c, std::vector<Dims>& outs) {
  Dims q = shapeOf(c.at(0)), k = shapeOf(c.at(1)), v = shapeOf(c.at(2));
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return false;
  const Value& gqa = c.arg("enable_gqa");
  bool grouped = gqa.isBool() && gqa.toBool();
  size_t n = q.size();
  if (!c.equal(q[n - 1], k[n - 1]) || !c.equal(k[n - 2], v[n - 2])) return false;
  for (size_t d = 0; d + 2 < n; ++d) {
    if (grouped && d + 3 == n) {
      if (k[d].symbolic() || v[d].symbolic() || q[d].symbolic() || !c.equal(k[d], v[d])) return false;
      continue;
    }
    if (!c.equal(q[d], k[d]) || !c.equal(k[d], v[d])) return false;
  }
  const Value& mask = c.at(3);
  if (mask.isTensor()) {
    Dims target(q.begin(), q.end() - 1), out;
    target.push_back(k[n - 2]);
    if (!broadcast(c, {shapeOf(mask), target}, out) || out.size() != target.size()) return false;
    for (size_t d = 0; d < out.size(); ++d)
      if (!c.equal(out[d], target[d])) return false;
  }
  Dims out(q.begin(), q.end() - 1);
  out.push_back(v[n - 1]);
  outs.push_back(out);
  return true;
}

bool embedding(RuleCtx& c, std::vector<Dims>& outs) {
  Dims idx = shapeOf(c.arg("a")), w = shapeOf(c.arg("weight"));
  if (w.size() != 2) return false;
  idx.push_back(w[1]);
  outs.push_back(idx);
  return true;
}

/// F.pad: the last dims grown by their (low, high) pads; the pads (ints, maybe symbolic) may
/// not shrink a dimension below 0 (a guard).
bool pad(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), p;
  if (!symInts(c.arg("pad"), p) || p.size() % 2 != 0 || p.size() / 2 > in.size()) return false;
  for (size_t k = 0; k < p.size() / 2; ++k) {
    SymInt& d = in[in.size() - 1 - k];
    d = d + p[2 * k] + p[2 * k + 1];
    if (!c.lessEqual(constant(0), d)) return false;
  }
  outs.push_back(in);
  return true;
}

/// F.cross_entropy with class indices: (N, C, d...) logits and (N, d...) targets give the
/// targets' shape (reduction 'none') or a number.
bool crossEntropy(RuleCtx& c, std::vector<Dims>& outs) {
  Dims x = shapeOf(c.arg("a")), t = shapeOf(c.arg("target"));
  const Value& target = c.arg("target");
  if (!target.isTensor() || !isIntegral(target.tensor().dtype) || x.size() < 2 || t.size() != x.size() - 1)
    return false;
  if (!c.equal(x[0], t[0])) return false;
  for (size_t k = 2; k < x.size(); ++k)
    if (!c.equal(x[k], t[k - 1])) return false;
  const Value& r = c.arg("reduction");
  if (!r.isString()) return false;
  outs.push_back(r.toString() == "none" ? t : Dims{});
  return true;
}

/// The fused attention kernels (ops/sdpa.h): the output of the query's shape with the value's
/// last size and the log-sum-exp per query row, which the memory-efficient kernel pads to a
/// multiple of 32 (an expression only where the length is static); the backward gives the
/// query's, key's and value's shapes, and with mask_grad the attention's (B, H, L, S).
bool fusedAttention(RuleCtx& c, std::vector<Dims>& outs) {
  Dims q = shapeOf(c.arg("query")), k = shapeOf(c.arg("key")), v = shapeOf(c.arg("value"));
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return false;
  for (size_t d = 0; d < 2; ++d)
    if (!c.equal(k[d], v[d])) return false;
  if (!c.equal(q[0], k[0]) || !c.equal(q[3], k[3]) || !c.equal(k[2], v[2])) return false;
  if (c.b.sym->name == "fused_attention_backward") {
    outs = {q, k, v};
    const Value& maskGrad = c.arg("mask_grad");
    if (maskGrad.isBool() && maskGrad.toBool()) outs.push_back({q[0], q[1], q[2], k[2]});
    return true;
  }
  const Value& backend = c.arg("backend");
  if (!backend.isString()) return false;
  // The CUDA flash kernel is chosen for causal attention only where the query and the key have
  // one length (its causal mask is aligned otherwise than eager's when they differ).
  const Value& causal = c.arg("is_causal");
  if (causal.isBool() && causal.toBool() && backend.toString() == sdpa::backendName(sdpa::Backend::Flash) &&
      !c.equal(q[2], k[2]))
    return false;
  Dims out = q;
  out[3] = v[3];
  SymInt rows = q[2];
  if (backend.toString() == sdpa::backendName(sdpa::Backend::Efficient)) {
    if (rows.symbolic()) return false;
    rows = constant(sdpa::logsumexpLength(sdpa::Backend::Efficient, rows.hint));
  }
  outs.push_back(out);
  outs.push_back({q[0], q[1], rows});
  // (the dropout's seed and offset, where it returns them: numbers)
  for (size_t i = 2; i < c.b.outputTensors().size(); ++i) outs.push_back({});
  return true;
}

/// The weight's gradient of embedding: rows of a (num_weights, dim) table, from a gradient of
/// one row per index.
bool embeddingBackward(RuleCtx& c, std::vector<Dims>& outs) {
  Dims g = shapeOf(c.arg("grad")), idx = shapeOf(c.arg("indices"));
  const Value& n = c.arg("num_weights");
  if (g.size() != idx.size() + 1 || !n.isInt() || n.symExpr()) return false;
  for (size_t k = 0; k < idx.size(); ++k)
    if (!c.equal(g[k], idx[k])) return false;
  outs.push_back({constant(n.toInt()), g.back()});
  return true;
}

bool norm(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), ns;
  if (!symInts(c.arg("normalized_shape"), ns) || ns.size() > in.size()) return false;
  for (size_t k = 0; k < ns.size(); ++k)
    if (!c.equal(in[in.size() - ns.size() + k], ns[k])) return false;
  outs.push_back(in);
  return true;
}

/// Basic indexing: ints, slices with a step of 1 (or static sizes), None and an ellipsis.
bool getitem(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  const Value& key = c.arg("key");
  std::vector<Value> items = key.isTuple() ? key.items() : std::vector<Value>{key};
  size_t consumed = 0;
  for (const Value& x : items) {
    if (x.isTensor() || x.isBool() || x.isSequence()) return false;
    if (x.isInt() || x.isSlice()) ++consumed;
  }
  if (consumed > in.size()) return false;
  Dims out;
  size_t d = 0;
  bool ellipsisSeen = false;
  for (const Value& x : items) {
    if (x.isEllipsis()) {
      if (ellipsisSeen) return false;
      ellipsisSeen = true;
      size_t skip = in.size() - consumed;
      for (size_t k = 0; k < skip; ++k) out.push_back(in[d++]);
    } else if (x.isNone()) {
      out.push_back(constant(1));
    } else if (x.isInt()) {
      if (!indexInside(c, x.toSymInt(), in[d++])) return false;
    } else {  // slice
      const SymInt& size = in[d++];
      const Value &a = x.items()[0], &e = x.items()[1], &s = x.items()[2];
      if ((!a.isNone() && !a.isInt()) || (!e.isNone() && !e.isInt()) || (!s.isNone() && !s.isInt()))
        return false;
      int64_t step = s.isNone() ? 1 : s.toInt();
      if (s.symExpr() || step <= 0) return false;
      // Python's bounds: a negative one counts from the end; both clamp into [0, size].
      auto bound = [&](const Value& v, const SymInt& dflt, SymInt& out) {
        if (v.isNone()) return out = dflt, true;
        SymInt b = v.toSymInt();
        if (b.hint < 0) {
          if (b.symbolic()) return false;
          b = size + b;
          if (!c.lessEqual(constant(0), b)) return (out = constant(0)), true;
        } else if (b.symbolic() && !c.lessEqual(constant(0), b)) {
          // (a symbolic bound counts from the start at every size the trace serves, as at its
          // hint: `x[:, T - 3:]` at T = 2 is x[:, -1:], one column, not T - (T - 3))
          return false;
        }
        if (!c.lessEqual(b, size)) return (out = size), true;
        return (out = b), true;
      };
      SymInt start, stop;
      if (!bound(a, constant(0), start) || !bound(e, size, stop)) return false;
      SymInt len = constant(0);
      if (c.lessEqual(start, stop)) len = stop - start;
      if (step != 1) {
        if (len.symbolic()) return false;
        len = constant((len.hint + step - 1) / step);
      }
      out.push_back(len);
    }
  }
  while (d < in.size()) out.push_back(in[d++]);
  outs.push_back(out);
  return true;
}

/// An advanced index by tensors only, of the leading dimensions (`mask[idx0, idx1]`, run by the
/// fallback): the broadcast of the indices' shapes, then the dimensions not indexed.
bool tensorIndex(RuleCtx& c, std::vector<Dims>& outs) {
  if (c.b.args.size() < 2) return false;
  Dims in = shapeOf(c.b.args[0]);
  const Value& key = c.b.args[1];
  std::vector<Value> items = key.isTuple() ? key.items() : std::vector<Value>{key};
  std::vector<Dims> shapes;
  for (const Value& x : items) {
    if (!x.isTensor()) return false;
    DType t = x.tensor().dtype;
    if (t == DType::Bool || t == DType::UInt8) return false;  // a mask: data-dependent
    shapes.push_back(shapeOf(x));
  }
  if (shapes.empty() || shapes.size() > in.size()) return false;
  Dims out;
  if (!broadcast(c, shapes, out)) return false;
  out.insert(out.end(), in.begin() + shapes.size(), in.end());
  outs.push_back(out);
  return true;
}

bool gather(RuleCtx& c, std::vector<Dims>& outs) {
  // ATen's gather: the index's shape.
  outs.push_back(shapeOf(c.arg("index")));
  return true;
}

bool asOther(RuleCtx& c, std::vector<Dims>& outs) {
  // view_as / reshape_as: the other's shape, the same number of elements.
  Dims in = shapeOf(c.arg("a")), to = shapeOf(c.arg("other"));
  SymInt a, b;
  if (!product(in, a) || !product(to, b) || !c.equal(a, b)) return false;
  outs.push_back(to);
  return true;
}

bool expandAs(RuleCtx& c, std::vector<Dims>& outs) {
  return expandTo(c, shapeOf(c.arg("a")), shapeOf(c.arg("other")), outs);
}

bool select(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (d < 0 || d >= (int64_t)in.size()) return false;
  if (!indexInside(c, c.arg("index").toSymInt(), in[d])) return false;
  in.erase(in.begin() + d);
  outs.push_back(in);
  return true;
}

bool movedim(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a"));
  const Value &src = c.arg("source"), &dst = c.arg("destination");
  std::vector<int64_t> s = src.toInts();
  std::vector<int64_t> t = dst.toInts();
  if (s.size() != t.size()) return false;
  size_t n = in.size();
  std::vector<int64_t> perm(n, -1);
  std::vector<bool> used(n, false);
  for (size_t k = 0; k < s.size(); ++k) {
    int64_t a = wrapDim(s[k], n), b = wrapDim(t[k], n);
    if (a < 0 || b < 0 || a >= (int64_t)n || b >= (int64_t)n) return false;
    perm[b] = a;
    used[a] = true;
  }
  size_t next = 0;
  for (size_t k = 0; k < n; ++k) {
    if (perm[k] >= 0) continue;
    while (next < n && used[next]) ++next;
    if (next >= n) return false;
    perm[k] = static_cast<int64_t>(next++);
  }
  Dims out;
  if (!permuteBy(in, perm, out)) return false;
  outs.push_back(out);
  return true;
}

bool unflatten(RuleCtx& c, std::vector<Dims>& outs) {
  Dims in = shapeOf(c.arg("a")), sizes;
  if (!symInts(c.arg("sizes"), sizes)) return false;
  int64_t d = wrapDim(c.arg("dim").toInt(), in.size());
  if (d < 0 || d >= (int64_t)in.size()) return false;
  int infer = -1;
  Dims known;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (!sizes[k].symbolic() && sizes[k].hint == -1) infer = static_cast<int>(k);
    else known.push_back(sizes[k]);
  }
  SymInt p;
  if (!product(known, p)) return false;
  if (infer >= 0) {
    SymInt rest;
    if (!divide(in[d], p, rest)) return false;
    sizes[infer] = rest;
  } else if (!c.equal(in[d], p)) {
    return false;
  }
  Dims out(in.begin(), in.begin() + d);
  out.insert(out.end(), sizes.begin(), sizes.end());
  out.insert(out.end(), in.begin() + d + 1, in.end());
  outs.push_back(out);
  return true;
}

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    for (const char* n :
         {"neg", "abs", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh", "sinh",
          "cosh", "asin", "acos", "atan", "sigmoid", "rsqrt", "sqrt", "square", "reciprocal", "erf", "erfc", "relu",
          "relu6", "gelu", "silu", "softplus", "leaky_relu", "elu", "hardswish", "mish", "sign", "floor", "ceil",
          "round", "trunc", "bitwise_not", "logical_not", "isfinite", "to", "type_as", "float", "double", "half",
          "bfloat16", "int", "long", "bool", "contiguous", "clone", "softmax", "log_softmax", "cumsum", "tril",
          "triu", "dropout", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
          "detach", "tanh_backward", "sigmoid_backward", "silu_backward", "gelu_backward"})
      t[std::string("ltorch.") + n] = sameAsFirst;
    for (const char* n : {"add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
                          "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
                          "bitwise_xor", "logical_and", "logical_or", "maximum", "minimum", "atan2", "clamp", "lerp",
                          "copysign"})
      t[std::string("ltorch.") + n] = broadcastAll;
    for (const char* n : {"sum", "mean", "amax", "amin", "prod", "var", "std", "argmax", "argmin", "logsumexp",
                          "all", "any"})
      t[std::string("ltorch.") + n] = reduction;
    t["ltorch.diff"] = diff;
    t["ltorch.addmm"] = addmm;
    t["ltorch.split"] = pieces;
    t["ltorch.chunk"] = pieces;
    t["ltorch.unbind"] = pieces;
    t["ltorch.max"] = minMax;
    t["ltorch.min"] = minMax;
    t["ltorch.reshape"] = reshape;
    t["ltorch.view"] = reshape;
    t["ltorch.expand"] = expand;
    t["ltorch.transpose"] = transpose;
    t["ltorch.t"] = tRule;
    t["ltorch.permute"] = permute;
    t["ltorch.unsqueeze"] = unsqueeze;
    t["ltorch.squeeze"] = squeeze;
    t["ltorch.flatten"] = flatten;
    t["ltorch.cat"] = cat;
    t["ltorch.stack"] = stack;
    t["ltorch.narrow"] = narrow;
    t["ltorch.index_select"] = indexSelect;
    t["ltorch.arange"] = arange;
    for (const char* n : {"full", "zeros", "ones", "empty", "rand", "randn"})
      t[std::string("ltorch.") + n] = [](RuleCtx& c, std::vector<Dims>& o) { return sized(c, "shape", o); };
    for (const char* n : {"new_zeros", "new_ones", "new_empty", "new_full"})
      t[std::string("ltorch.") + n] = [](RuleCtx& c, std::vector<Dims>& o) { return sized(c, "size", o); };
    t["ltorch.matmul"] = matmul;
    t["ltorch.bmm"] = matmul;
    t["ltorch.linear"] = linear;
    t["ltorch.scaled_dot_product_attention"] = sdpa;
    t["ltorch.embedding"] = embedding;
    t["prims.embedding_backward"] = embeddingBackward;
    t["ltorch.pad"] = pad;
    t["ltorch.cross_entropy"] = crossEntropy;
    t["sdpaex.fused_attention_forward"] = fusedAttention;
    t["sdpaex.fused_attention_backward"] = fusedAttention;
    t["ltorch.layer_norm"] = norm;
    t["ltorch.rms_norm"] = norm;
    t["ltorch.getitem"] = getitem;
    t["ltorch.gather"] = gather;
    t["ltorch.view_as"] = asOther;
    t["ltorch.reshape_as"] = asOther;
    t["ltorch.expand_as"] = expandAs;
    t["ltorch.broadcast_to"] = expand;
    t["ltorch.select"] = select;
    t["ltorch.movedim"] = movedim;
    t["ltorch.unflatten"] = unflatten;
    t["ltorch.flip"] = sameAsFirst;
    t["ltorch.roll"] = sameAsFirst;
    t["torch.Tensor.__getitem__"] = tensorIndex;
    return t;
  }();
  return table;
}

const Rule* ruleFor(const Symbol& s) {
  const auto& t = rules();
  auto it = t.find(s.id());
  if (it == t.end() && !s.printAs.empty()) it = t.find(s.printAs);
  return it == t.end() ? nullptr : &it->second;
}

void collectSymbols(const SymPtr& e, std::set<int>& out) {
  if (!e) return;
  for (const auto& t : e->terms) out.insert(t.first);
}

void collectSymbols(const Value& v, std::set<int>& out) {
  if (v.isTensor()) {
    for (const SymPtr& e : v.tensor().sym) collectSymbols(e, out);
    return;
  }
  collectSymbols(v.symExpr(), out);
  if (v.isSequence() || v.isDict() || v.isSlice())
    for (const Value& x : v.items()) collectSymbols(x, out);
}

}  // namespace

bool readsSymbolic(const std::vector<Value>& args) {
  std::function<bool(const Value&)> reads = [&](const Value& v) {
    if (v.isTensor()) return v.tensor().symbolic();
    if (v.symExpr()) return true;
    if (v.isSequence() || v.isDict() || v.isSlice())
      for (const Value& x : v.items())
        if (reads(x)) return true;
    return false;
  };
  for (const Value& a : args)
    if (reads(a)) return true;
  return false;
}

std::vector<int> symbolsOf(const BoundSymbol& b) {
  std::set<int> s;
  for (const Value& a : b.args) collectSymbols(a, s);
  collectSymbols(b.output, s);
  return {s.begin(), s.end()};
}

bool symbolicRule(const Symbol& rule, const BoundSymbol& b, std::vector<std::vector<SymInt>>& outs,
                  std::vector<SymGuard>& needs) {
  const Rule* r = ruleFor(rule);
  if (!r) return false;
  outs.clear();
  needs.clear();
  RuleCtx c{rule, b, needs};
  bool ok = false;
  try {
    ok = (*r)(c, outs);
  } catch (const std::exception&) {
    ok = false;  // an argument of a form the rule does not read
  }
  if (!ok) return false;
  // The rule must give the sizes the meta function gave, at the hints.
  std::vector<TensorPtr> made = b.outputTensors();
  if (outs.size() != made.size()) return false;
  for (size_t i = 0; i < made.size(); ++i) {
    if (outs[i].size() != made[i]->shape.size()) return false;
    for (size_t d = 0; d < outs[i].size(); ++d)
      if (outs[i][d].hint != made[i]->shape[d]) return false;
  }
  return true;
}

void recordSymbolic(Trace& trace, BoundSymbol& b) {
  std::vector<std::vector<SymInt>> outs;
  std::vector<SymGuard> needs;
  bool ok = symbolicRule(*b.sym, b, outs, needs);
  if (ok && !trace.recordsGuards) {
    for (const SymGuard& g : needs)
      ok = ok && std::find(trace.guards.begin(), trace.guards.end(), g) != trace.guards.end();
  }
  std::vector<TensorPtr> ins = b.inputTensors(), made = b.outputTensors();
  static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
  if (ok) {
    for (const SymGuard& g : needs) {
      if (debug && trace.recordsGuards && std::find(trace.guards.begin(), trace.guards.end(), g) == trace.guards.end())
        std::fprintf(stderr, "thunder: %s assumes %s\n", b.sym->id().c_str(), g.str().c_str());
      trace.addGuard(g);
    }
    for (size_t i = 0; i < made.size(); ++i)
      if (std::find(ins.begin(), ins.end(), made[i]) == ins.end()) made[i]->setSymShape(outs[i]);
    b.symbolicRule = b.sym;
    return;
  }
  if (!trace.recordsGuards) return;
  if (debug) std::fprintf(stderr, "thunder: %s has no symbolic rule for its arguments: it pins its sizes\n", b.sym->id().c_str());
  // No rule: the call is right at the hints only. Each symbol it reads is pinned to its hint.
  std::set<int> read;
  for (const Value& a : b.args) collectSymbols(a, read);
  for (int k : read) pinSymbol(trace, k);
}

void recordPassthrough(Trace& trace, const BoundSymbol& b) {
  // Ops whose ints are sizes and dimensions only: whether such a call leaves its input as it is
  // follows from the sizes, which the rule's expressions give (x.view(B, T, C) of a (B, T, C)
  // tensor is one at every size). Another op's ints may decide it by their value: x.roll(T - 3)
  // traced at T = 3 returned x, which at T = 5 is wrong.
  static const std::set<std::string> shapesOnly = {
      "ltorch.reshape", "ltorch.view", "ltorch.view_as", "ltorch.reshape_as", "ltorch.flatten",
      "ltorch.unflatten", "ltorch.squeeze", "ltorch.unsqueeze", "ltorch.permute", "ltorch.transpose",
      "ltorch.movedim", "ltorch.contiguous", "ltorch.to", "ltorch.type_as", "ltorch.getitem", "ltorch.expand",
      "ltorch.expand_as", "ltorch.broadcast_to"};
  std::set<int> read;
  if (!shapesOnly.count(b.sym->id())) {
    // (the ints it read decided it: x.float() of a float tensor reads none)
    std::function<void(const Value&)> ints = [&](const Value& v) {
      if (v.isTensor()) return;  // (a tensor's sizes: its own calls follow them)
      collectSymbols(v.symExpr(), read);
      if (v.isSequence() || v.isDict() || v.isSlice())
        for (const Value& x : v.items()) ints(x);
    };
    for (const Value& a : b.args) ints(a);
    static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
    if (debug && !read.empty())
      std::fprintf(stderr, "thunder: %s left its input as it is at the ints it read: it pins them\n", b.sym->id().c_str());
    for (int k : read) pinSymbol(trace, k);
    return;
  }
  std::vector<std::vector<SymInt>> outs;
  std::vector<SymGuard> needs;
  bool ok = symbolicRule(*b.sym, b, outs, needs);
  if (ok) {
    // ... and only where the rule gives the output the input's sizes (narrow(x, 1, T - 3, 3) at
    // T = 3 is x, but has 3 columns at every size)
    // A reshape or an expand to a static size where the input's varies (a grad rule's reshape
    // to the input's shape, given as numbers) stays as it was: at another size it is not a view
    // of the input's elements (eager refuses it), where a slice's static length is a result
    // (x[:, :8] of a T-long x).
    static const std::set<std::string> sameElements = {
        "ltorch.reshape", "ltorch.view", "ltorch.view_as", "ltorch.reshape_as", "ltorch.flatten",
        "ltorch.unflatten", "ltorch.expand", "ltorch.expand_as", "ltorch.broadcast_to"};
    bool staticOk = sameElements.count(b.sym->id()) > 0;
    std::vector<TensorPtr> made = b.outputTensors();
    for (size_t i = 0; ok && i < made.size(); ++i) {
      std::vector<SymInt> have = made[i]->symShape();
      ok = i < outs.size() && outs[i].size() == have.size();
      for (size_t d = 0; ok && d < have.size(); ++d)
        ok = sameSym(have[d], outs[i][d]) || (staticOk && !outs[i][d].symbolic() && outs[i][d].hint == have[d].hint);
    }
  }
  if (ok) return;
  static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
  if (debug) {
    std::string why;
    std::vector<TensorPtr> made = b.outputTensors();
    for (size_t i = 0; i < made.size(); ++i) {
      why += " output " + made[i]->typeString() + " rule:";
      if (i < outs.size())
        for (const SymInt& d : outs[i]) why += " " + (d.e ? d.e->str() : std::to_string(d.hint));
    }
    std::fprintf(stderr, "thunder: %s left its input as it is at the traced sizes: it pins its sizes;%s\n",
                 b.sym->id().c_str(), why.c_str());
  }
  for (const Value& a : b.args) collectSymbols(a, read);
  for (int k : read) pinSymbol(trace, k);
}

void pinSymbol(Trace& trace, int k) {
  SymGuard g;
  g.rel = SymGuard::Rel::Eq;
  g.e.terms.emplace_back(k, 1);
  g.e.constant = -trace.symbols.at(k).hint;
  trace.addGuard(g);
}

int64_t staticSize(const TensorProxy& t, int64_t d) {
  SymInt s = t.dim(static_cast<size_t>(d));
  if (s.symbolic()) {
    TraceContext* ctx = currentContext();
    THUNDER_INTERNAL(ctx != nullptr, "staticSize outside tracing");
    for (const auto& [k, c] : s.e->terms) pinSymbol(ctx->trace(), k);
  }
  return s.hint;
}

std::vector<std::pair<int, int64_t>> pinnedSymbols(const std::vector<SymGuard>& guards) {
  std::vector<std::pair<int, int64_t>> out;
  for (const SymGuard& g : guards)
    if (g.rel == SymGuard::Rel::Eq && g.outcome && g.e.terms.size() == 1 &&
        (g.e.terms[0].second == 1 || g.e.terms[0].second == -1))
      out.emplace_back(g.e.terms[0].first, -g.e.constant * g.e.terms[0].second);
  return out;
}

void mergeGuards(std::vector<SymGuard>& into, const std::vector<SymGuard>& more) {
  for (const SymGuard& g : more)
    if (std::find(into.begin(), into.end(), g) == into.end()) into.push_back(g);
}

namespace {

/// The symbols the guards hold equal (s_i - s_j == 0), each mapped to one of its class, so that a
/// guard or size implied by those equalities (s1 == s2 from s0 == s1 and s0 == s2: a pass that
/// merged two values of equal sizes) reads as the one the trace holds.
class EqualSymbols {
 public:
  explicit EqualSymbols(const std::vector<SymGuard>& guards) {
    for (const SymGuard& g : guards) {
      const auto& t = g.e.terms;
      if (g.rel == SymGuard::Rel::Eq && g.outcome && g.e.constant == 0 && t.size() == 2 &&
          t[0].second == -t[1].second && (t[0].second == 1 || t[0].second == -1))
        parent_[find(t[0].first)] = find(t[1].first);
    }
  }
  SymExpr canonical(const SymExpr& e) {
    std::map<int, int64_t> terms;
    for (const auto& [k, c] : e.terms) terms[find(k)] += c;
    SymExpr out;
    out.constant = e.constant;
    for (const auto& [k, c] : terms)
      if (c != 0) out.terms.emplace_back(k, c);
    return out;
  }
  SymGuard canonical(SymGuard g) {
    g.e = canonical(g.e);
    return g;
  }
  bool same(const SymInt& a, const SymInt& b) {
    return a.hint == b.hint && canonical(a.expr()) == canonical(b.expr());
  }
  /// Whether `g` is in `guards` up to the equalities, or true for every value of the symbols.
  bool holds(const SymGuard& g, const std::vector<SymGuard>& guards) {
    SymGuard c = canonical(g);
    if (c.e.isConstant()) return c.holds({});
    for (const SymGuard& h : guards)
      if (canonical(h) == c) return true;
    return false;
  }

 private:
  int find(int k) {
    auto it = parent_.find(k);
    if (it == parent_.end() || it->second == k) return k;
    return it->second = find(it->second);
  }
  std::map<int, int> parent_;
};

}  // namespace

std::string symbolicCheck(const std::vector<SymGuard>& guards, const Trace& execution) {
  EqualSymbols equal(guards);
  std::set<int> pinned;
  for (const auto& [k, v] : pinnedSymbols(guards)) pinned.insert(k);
  auto free = [&](const std::vector<int>& syms) {
    for (int k : syms)
      if (!pinned.count(k)) return true;
    return false;
  };
  for (const BoundSymbol& b : execution.bsyms) {
    if (b.sym->hasTag(kDel)) continue;
    if (!free(symbolsOf(b))) continue;
    auto where = [&](const std::string& why) { return b.sym->printName() + ": " + why; };
    if (!b.symbolicRule) return where("no symbolic rule covers the call as it runs");
    // The torch executor's calls take their ints at each run. So does PyTorch's indexing by
    // tensors, run by the fallback executor where its key holds tensors only.
    bool fallbackIndex = b.sym->executor == "fallback" && b.symbolicRule->printAs == "torch.Tensor.__getitem__" &&
                         b.args.size() == 2 && !b.args[1].hasSymbolic();
    if (b.sym->executor != "torch" && !fallbackIndex)
      return where("run by executor '" + b.sym->executor + "', not by the torch executor's ATen call");
    std::vector<std::vector<SymInt>> outs;
    std::vector<SymGuard> needs;
    if (!symbolicRule(*b.symbolicRule, b, outs, needs)) return where("its rule does not apply to its arguments");
    for (const SymGuard& g : needs)
      if (!equal.holds(g, guards)) return where("its rule needs " + g.str() + ", which the trace does not guard");
    std::vector<TensorPtr> made = b.outputTensors();
    for (size_t i = 0; i < made.size(); ++i) {
      std::vector<SymInt> have = made[i]->symShape();
      for (size_t d = 0; d < have.size(); ++d)
        if (!equal.same(have[d], outs[i][d]))
          return where("output " + made[i]->name + " has size " + made[i]->typeString() +
                       " where its rule gives another expression");
    }
  }
  return "";
}

}  // namespace thunder
