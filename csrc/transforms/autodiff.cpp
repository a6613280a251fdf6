#include "transforms/autodiff.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "ops/symbolic_rules.h"
#include "transforms/dce.h"
#include "transforms/remat.h"

namespace thunder {

namespace {

/// Pairs the tensors a grad rule returned with the call's outputs, item by item: an output
/// that dead code elimination pruned (None in the call) drops the rule's tensor there.
void pairOutputs(const Value& result, const Value& output, std::vector<TensorPtr>& produced,
                 std::vector<TensorPtr>& expected) {
  if (result.isSequence() && output.isSequence() && result.items().size() == output.items().size()) {
    for (size_t i = 0; i < result.items().size(); ++i)
      pairOutputs(result.items()[i], output.items()[i], produced, expected);
    return;
  }
  if (output.isNone() && result.isTensor()) return;
  result.collectTensors(produced);
  output.collectTensors(expected);
}


using RuleTable = std::unordered_map<std::string, GradRule>;

RuleTable& table() {
  static RuleTable* t = new RuleTable();  // leaked: rules may hold Python objects
  return *t;
}

std::unordered_map<std::string, GradRuleCondition>& conditions() {
  static auto* c = new std::unordered_map<std::string, GradRuleCondition>();
  return *c;
}

/// An executor's rule for a symbol and, where it was registered with one, the calls it applies to.
struct ExecutorRule {
  GradRule rule;
  GradRuleCondition applies;
};

/// Executors' rules, by executor name and symbol id.
std::unordered_map<std::string, std::unordered_map<std::string, ExecutorRule>>& executorTable() {
  static auto* t = new std::unordered_map<std::string, std::unordered_map<std::string, ExecutorRule>>();
  return *t;
}

/// The backward half of one rule application, traced against placeholder cotangents.
struct Block {
  int key = 0;  // position of the forward call, for ordering
  std::vector<BoundSymbol> bsyms;
  std::vector<std::pair<TensorPtr, TensorPtr>> cotangents;  // (placeholder, forward output)
  std::vector<std::pair<Value, Value>> grads;                // (forward input, gradient)
  const Symbol* noRule = nullptr;  // a call on the gradient path that has no rule
};

/// The rule being traced.
struct Recording {
  TraceContext* ctx = nullptr;
  Block* block = nullptr;
  bool inBackward = false;
  const std::unordered_set<const TensorProxy*>* differentiable = nullptr;  // the gradient path
};
thread_local Recording* tlsRecording = nullptr;

using Subst = std::unordered_map<const TensorProxy*, Value>;

/// `v` with the tensors in `m` replaced; sets `changed` when any was.
Value subst(const Value& v, const Subst& m, bool& changed) {
  if (v.isTensor()) {
    auto it = m.find(v.toTensor().get());
    if (it == m.end()) return v;
    changed = true;
    return it->second;
  }
  if (!(v.isSequence() || v.isDict() || v.isSlice())) return v;
  bool any = false;
  std::vector<Value> items;
  items.reserve(v.items().size());
  for (const Value& x : v.items()) items.push_back(subst(x, m, any));
  if (!any) return v;
  changed = true;
  switch (v.kind()) {
    case Value::Kind::Tuple: return Value::tuple(std::move(items));
    case Value::Kind::List: return Value::list(std::move(items));
    case Value::Kind::Dict: return Value::dict(v.keys(), std::move(items));
    default: return Value::slice(items[0], items[1], items[2]);
  }
}

Value subst(const Value& v, const Subst& m) {
  bool changed = false;
  return subst(v, m, changed);
}

void substInPlace(BoundSymbol& b, const Subst& m) {
  for (Value& a : b.args) a = subst(a, m);
  b.output = subst(b.output, m);
  for (BoundSymbol& s : b.subsymbols) substInPlace(s, m);
}

/// Tensors a gradient can flow through: floating point and complex.
bool isFloatTensor(const TensorPtr& t) { return isFloating(t->dtype) || isComplex(t->dtype); }

std::unordered_set<std::string>& complexSafe() {
  static std::unordered_set<std::string> s;
  return s;
}

/// Sums a gradient to `shape` (undoes broadcasting): leading dims and dims broadcast from 1.
Value sumToShape(const Value& g, const TensorProxy& target) {
  const Shape& gs = g.tensor().shape;
  const Shape& shape = target.shape;
  THUNDER_INTERNAL(gs.size() >= shape.size(), "autodiff: gradient of shape ", describe(g),
                   " cannot be summed to ", shape.size(), " dimensions");
  size_t lead = gs.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < gs.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  Value r = g;
  if (!dims.empty()) r = ltorch::op("sum", {g, Value::ints(dims)});
  if (r.tensor().shape != shape) r = ltorch::op("reshape", {r, Value::sizes(target.symShape())});
  return r;
}

Value zerosLike(const TensorProxy& t) {
  return ltorch::op("full", {Value::sizes(t.symShape()), 0.0}, {{"device", t.device}, {"dtype", t.dtype}});
}

/// A new proxy of `t`'s metadata, its symbolic sizes included (a cotangent's placeholder).
TensorPtr newLike(TraceContext& ctx, const TensorProxy& t) {
  TensorPtr p = ctx.newTensor(t.shape, t.dtype, t.device);
  p->sym = t.sym;
  return p;
}

/// registerSymbolicGradRule's table.
std::unordered_map<std::string, std::pair<GradRule, GradRuleCondition>>& symbolicTable() {
  static auto* t = new std::unordered_map<std::string, std::pair<GradRule, GradRuleCondition>>();
  return *t;
}

std::unordered_set<std::string>& symbolicGrads() {
  static auto* s = new std::unordered_set<std::string>();
  return *s;
}

/// The symbols of the call that no guard of the trace pins to one value.
std::vector<int> freeSymbols(const Trace& trace, const BoundSymbol& b) {
  if (trace.symbols.empty()) return {};
  std::vector<int> syms = symbolsOf(b), out;
  if (syms.empty()) return out;
  std::vector<std::pair<int, int64_t>> pinned = pinnedSymbols(trace.guards);
  for (int k : syms) {
    bool p = false;
    for (const auto& [j, v] : pinned) p |= j == k;
    if (!p) out.push_back(k);
  }
  return out;
}

/// Zero propagation through backward calls, for cotangents that are not given or never reached:
/// eager runs no backward formula that only such cotangents reach, so a NaN or infinite local
/// derivative there never meets them; with zeros in their place it did (0 * NaN). The values that
/// only zero cotangents flow into are zero and are left out: a product or quotient of one and a
/// value is zero, a sum with one is the other term, shape ops and reductions of one are zero, and
/// so are all outputs of a call linear in its cotangents (a fallback's `vjp_*`, fused attention's
/// backward, the nn ops' backward prims) whose cotangent-derived arguments are all zero. Any other
/// use reads zeros, made by `makeZeros` where that use is.
class ZeroCotangents {
 public:
  explicit ZeroCotangents(std::function<Value(const TensorPtr&)> makeZeros)
      : makeZeros_(std::move(makeZeros)) {}

  /// A cotangent: computed from cotangents, and zero when `isZero`.
  void mark(const TensorPtr& t, bool isZero) {
    dep_.insert(t.get());
    if (isZero) zero_.insert(t.get());
  }

  bool isZero(const Value& v) const { return v.isTensor() && zero_.count(v.toTensor().get()) > 0; }

  /// `v` with the tensors the calls so far replaced (aliases, zeros made for a use).
  Value subst(const Value& v) const { return thunder::subst(v, ren_); }

  /// Zeros in place of the zero tensor `t` from here on.
  Value materialize(const TensorPtr& t) {
    Value made = makeZeros_(t);
    ren_[t.get()] = made;
    zero_.erase(t.get());
    return made;
  }

  /// The call as it runs, or nothing when its outputs are zero or alias a term.
  std::optional<BoundSymbol> step(const BoundSymbol& orig) {
    BoundSymbol b = orig;
    substInPlace(b, ren_);
    std::vector<TensorPtr> ins = b.inputTensors();
    bool anyZero = false, anyDep = false;
    for (const TensorPtr& t : ins) {
      anyZero |= zero_.count(t.get()) > 0;
      anyDep |= dep_.count(t.get()) > 0;
    }
    std::vector<TensorPtr> outs = b.outputTensors();
    if (!anyZero && !anyDep && outs.size() == 1 && zeroFill(b)) filledZero_.insert(outs[0].get());
    if (anyZero && linearInCotangents(b, ins)) {
      for (const TensorPtr& t : outs) mark(t, true);
      return std::nullopt;
    }
    if (anyZero && outs.size() == 1) {
      Value alias;
      if (zeroResult(b, alias)) {
        mark(outs[0], true);
        return std::nullopt;
      }
      if (!alias.isNone()) {
        ren_[outs[0].get()] = alias;
        return std::nullopt;
      }
    }
    if (anyZero) {
      for (const TensorPtr& t : ins)
        if (zero_.count(t.get())) materialize(t);
      substInPlace(b, ren_);
    }
    if (anyDep)
      for (const TensorPtr& t : outs) dep_.insert(t.get());
    return b;
  }

 private:
  bool isDep(const Value& v) const { return v.isTensor() && dep_.count(v.toTensor().get()) > 0; }

  static bool isNumber(const Value& v, double x) {
    return (v.isInt() || v.isFloat()) && v.toDouble() == x;
  }

  /// A tensor of zeros made in the backward (the base an index's gradient is scattered into).
  static bool zeroFill(const BoundSymbol& b) {
    const std::string id = b.sym->id();
    if (id == "ltorch.full" || id == "prims.full") return b.args.size() >= 2 && isNumber(b.args[1], 0.0);
    return id == "ltorch.zeros" || id == "ltorch.zeros_like" || id == "ltorch.new_zeros";
  }

  /// Linear in the cotangents it reads (a fallback call's VJP, `vjp_<name>(inputs...,
  /// cotangents...)`, fused attention's backward, the nn ops' backward prims), each of them zero.
  /// The prims take the output's gradient first; all their outputs (a batch norm's or a
  /// convolution's input, weight and bias gradients) are zero with it. (A BatchNorm in an
  /// auxiliary head whose logits the loss does not read gave its parameters zero gradients where
  /// eager leaves them None: GoogLeNet, Inception-v3.)
  bool linearInCotangents(const BoundSymbol& b, const std::vector<TensorPtr>& ins) const {
    static const std::unordered_set<std::string> linear = {
        "sdpaex.fused_attention_backward", "prims.batch_norm_backward", "prims.convolution_backward",
        "prims.embedding_backward", "prims.max_pool_backward", "prims.avg_pool_backward",
        "prims.adaptive_avg_pool_backward", "prims.adaptive_max_pool_backward", "prims.upsample_backward"};
    if (b.sym->name.rfind("vjp_", 0) != 0 && !linear.count(b.sym->id())) return false;
    for (const TensorPtr& t : ins)
      if (dep_.count(t.get()) && !zero_.count(t.get())) return false;
    return true;
  }

  /// Whether the single output of a call reading a zero tensor is zero; else sets `alias` where
  /// it equals one term (a sum with a zero).
  bool zeroResult(const BoundSymbol& b, Value& alias) const {
    const std::string id = b.sym->id();
    const std::vector<Value>& a = b.args;
    const TensorPtr o = b.outputTensors()[0];
    // Other tensor arguments than the first read from cotangents.
    bool restDep = false;
    for (size_t i = 1; i < a.size(); ++i) restDep |= isDep(a[i]);
    static const std::unordered_set<std::string> linearInFirst = {
        "ltorch.neg", "ltorch.sum", "ltorch.reshape", "ltorch.expand", "ltorch.permute",
        "ltorch.transpose", "ltorch.to", "ltorch.squeeze", "ltorch.unsqueeze", "ltorch.flip",
        "ltorch.view", "ltorch.contiguous", "ltorch.clone", "ltorch.real", "ltorch.conj",
        "prims.neg", "prims.sum", "prims.reshape", "prims.broadcast_in_dim", "prims.transpose",
        "prims.squeeze", "prims.convert_element_type", "prims.device_put", "prims.flip", "prims.real",
        "prims.slice", "ltorch.getitem", "ltorch.narrow", "ltorch.select", "ltorch.movedim"};
    // Linear in each operand: zero when one is zero and the other no gradient.
    static const std::unordered_set<std::string> bilinear = {
        "ltorch.mul", "prims.mul", "ltorch.matmul", "prims.matmul", "ltorch.mm", "ltorch.bmm"};
    bool isAdd = id == "ltorch.add" || id == "prims.add", isSub = id == "ltorch.sub" || id == "prims.sub";
    bool unitAlpha = a.size() < 3 || a[2].isNone() || isNumber(a[2], 1.0);
    if (linearInFirst.count(id) && isZero(a[0]) && !restDep) return true;
    if ((id == "prims.pad" && a.size() == 3 && isZero(a[0]) && isNumber(a[1], 0.0)) ||
        (id == "ltorch.pad" && a.size() == 4 && isZero(a[0]) && a[2].isString() &&
         a[2].toString() == "constant" && (a[3].isNone() || isNumber(a[3], 0.0))))
      return true;
    if ((id == "ltorch.cat" || id == "prims.cat") && !a.empty() && a[0].isSequence() &&
        std::all_of(a[0].items().begin(), a[0].items().end(), [&](const Value& v) { return isZero(v); }))
      return true;
    if (bilinear.count(id) && a.size() >= 2 &&
        ((isZero(a[0]) && !isDep(a[1])) || (isZero(a[1]) && !isDep(a[0])) || (isZero(a[0]) && isZero(a[1]))))
      return true;
    if ((id == "ltorch.div" || id == "prims.div") && a.size() >= 2 && isZero(a[0]) && !isDep(a[1]) &&
        (a.size() < 3 || a[2].isNone()))
      return true;
    if ((id == "ltorch.where" || id == "prims.where") && a.size() == 3 && !isDep(a[0]) &&
        (isZero(a[1]) || isNumber(a[1], 0.0)) && (isZero(a[2]) || isNumber(a[2], 0.0)))
      return true;
    // Zeros scattered (or indexed, put) into zeros: an index's or gather's gradient from a zero
    // cotangent (`full(0)` then `scatter_add`). (A detector's RPN objectness loss, left out of the
    // loss, gave its head zero gradients where eager leaves them None.)
    static const std::unordered_set<std::string> writesInto = {
        "ltorch.scatter_add", "prims.scatter_add", "ltorch.scatter", "prims.scatter",
        "ltorch.index_add", "prims.index_add", "ltorch.index_put", "prims.index_put",
        "ltorch.index_copy", "prims.index_copy"};
    if (writesInto.count(id)) {
      bool zeros = true;
      for (const TensorPtr& t : b.inputTensors())
        zeros &= isFloatTensor(t) ? (zero_.count(t.get()) > 0 || filledZero_.count(t.get()) > 0)
                                  : dep_.count(t.get()) == 0;
      if (zeros) return true;
    }
    if ((isAdd || isSub) && a.size() >= 2 && unitAlpha) {
      if (isZero(a[0]) && isZero(a[1])) return true;
      // One term zero, the other a gradient of the output's type: the sum is that term.
      const Value& other = isZero(a[0]) ? a[1] : a[0];
      bool keepsType = other.isTensor() && other.tensor().shape == o->shape &&
                       other.tensor().dtype == o->dtype && isDep(other);
      if (keepsType && (isAdd || isZero(a[1]))) alias = other;
    }
    return false;
  }

  std::function<Value(const TensorPtr&)> makeZeros_;
  std::unordered_set<const TensorProxy*> dep_, zero_;  // computed from cotangents; from zero ones only
  std::unordered_set<const TensorProxy*> filledZero_;  // zeros made in the backward, from no cotangent
  Subst ren_;
};

/// Replaces composite calls whose internal (non-output) tensors are read elsewhere by their
/// subsymbols: an executor running the composite as one call would not make them.
void flattenReferenced(const std::vector<BoundSymbol>& in,
                       const std::unordered_set<const TensorProxy*>& referenced,
                       std::vector<BoundSymbol>& out) {
  for (const BoundSymbol& b : in) {
    bool flatten = false;
    if (!b.subsymbols.empty()) {
      std::vector<TensorPtr> outs = b.outputTensors();
      std::unordered_set<const TensorProxy*> own;
      for (const TensorPtr& t : outs) own.insert(t.get());
      std::vector<const BoundSymbol*> stack;
      for (const BoundSymbol& s : b.subsymbols) stack.push_back(&s);
      while (!stack.empty() && !flatten) {
        const BoundSymbol* s = stack.back();
        stack.pop_back();
        for (const TensorPtr& t : s->outputTensors())
          flatten |= !own.count(t.get()) && referenced.count(t.get());
        for (const BoundSymbol& x : s->subsymbols) stack.push_back(&x);
      }
    }
    if (flatten) flattenReferenced(b.subsymbols, referenced, out);
    else out.push_back(b);
  }
}

/// Tensors read by top-level calls of `bsyms` (and by `output`).
std::unordered_set<const TensorProxy*> readTensors(const std::vector<BoundSymbol>& bsyms,
                                                   const Value& output) {
  std::unordered_set<const TensorProxy*> r;
  for (const BoundSymbol& b : bsyms)
    for (const TensorPtr& t : b.inputTensors()) r.insert(t.get());
  std::vector<TensorPtr> outs;
  output.collectTensors(outs);
  for (const TensorPtr& t : outs) r.insert(t.get());
  return r;
}

/// Walks a computation trace, tracing the rules of the calls on the gradient path into a forward
/// list (joint_.bsyms) and backward blocks; then emits the backward in reverse order.
class Differentiator {
 public:
  Differentiator(const Trace& computation, const std::vector<TensorPtr>& wrt,
                 const std::vector<Executor*>& executors)
      : comp_(computation), joint_(computation.emptyCopy()), executors_(executors) {
    registerGradRules();
    for (const TensorPtr& t : wrt) diff_.insert(t.get());
    // The forward parts of rules and the backward are traced with the program's symbols: what
    // their calls assume of the sizes is recorded as guards of the trace, and a call no rule
    // covers specializes the sizes it reads.
    joint_.recordsGuards = !joint_.symbols.empty();
    scope_ = std::make_unique<TracingScope>(joint_);
  }

  Trace& joint() { return joint_; }
  TraceContext& ctx() { return scope_->context(); }

  void forward() {
    for (const BoundSymbol& b : comp_.bsyms) {
      size_t first = joint_.bsyms.size();
      walk(b);
      if (b.checkpointRegion)  // the forward parts of a checkpointed call's rule are checkpointed too
        for (size_t i = first; i < joint_.bsyms.size(); ++i) joint_.bsyms[i].checkpointRegion = b.checkpointRegion;
    }
    userOutput_ = env_.empty() ? comp_.output : subst(comp_.output, env_);
  }

  const Value& userOutput() const { return userOutput_; }
  bool differentiable(const TensorPtr& t) const { return diff_.count(t.get()) > 0; }
  int producerKey(const TensorPtr& t) const {
    auto it = producerKey_.find(t.get());
    return it == producerKey_.end() ? -1 : it->second;
  }

  /// Emits the backward into bwd_ given the cotangents of forward tensors.
  void backward(const std::vector<std::pair<TensorPtr, Value>>& seeds) {
    ctx().pushScope(&bwd_);
    try {
      for (const auto& [out, ct] : seeds) accumulate(out, ct, producerKey(out));
      for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) emitBlock(*it);
    } catch (...) {
      ctx().popScope();
      throw;
    }
    ctx().popScope();
  }

  /// Emits calls into the backward with a given ordering key.
  template <typename F>
  Value emit(int key, F&& f) {
    ctx().pushScope(&bwd_);
    Value v;
    try {
      v = f();
    } catch (...) {
      ctx().popScope();
      throw;
    }
    ctx().popScope();
    keys_.resize(bwd_.size(), key);
    return v;
  }

  Value cotangent(const TensorPtr& t) const {
    auto it = cot_.find(t.get());
    return it == cot_.end() ? Value() : it->second;
  }

  std::vector<BoundSymbol>& bwd() { return bwd_; }
  const std::vector<int>& keys() const { return keys_; }

 private:
  /// While an executor's checker looks at a call on the gradient path, each tensor argument's
  /// `requires_grad` says whether it is on that path. Otherwise it is the flag tracing left: true
  /// for inputs that require grad, false for every intermediate, so an intermediate computed from
  /// a parameter (T5's learned position bias as an attention mask) looked constant and a checker
  /// took a call whose kernel gives it no gradient.
  class GradPathFlags {
   public:
    GradPathFlags(const BoundSymbol& b, const std::unordered_set<const TensorProxy*>& diff) {
      for (const TensorPtr& t : b.inputTensors()) {
        saved_.emplace_back(t.get(), t->requiresGrad);
        t->requiresGrad = diff.count(t.get()) > 0;
      }
    }
    ~GradPathFlags() {
      for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) it->first->requiresGrad = it->second;
    }
    GradPathFlags(const GradPathFlags&) = delete;
    GradPathFlags& operator=(const GradPathFlags&) = delete;

   private:
    std::vector<std::pair<TensorProxy*, bool>> saved_;
  };

  const GradRule* ruleFor(const BoundSymbol& b, bool* fromExecutor = nullptr) const {
    const std::string id = b.sym->id();
    std::optional<GradPathFlags> flags;  // set before the first executor's checker runs
    for (const Executor* ex : executors_) {
      auto et = executorTable().find(ex->name());
      if (et == executorTable().end()) continue;
      auto r = et->second.find(id);
      if (r == et->second.end()) continue;
      if (!flags) flags.emplace(b, diff_);
      const ExecutorRule& er = r->second;
      if (er.applies ? er.applies(b, [this](const TensorProxy& t) { return diff_.count(&t) > 0; })
                     : !ex->implements(id) || ex->find(b) != nullptr) {
        if (fromExecutor) *fromExecutor = true;
        return &er.rule;
      }
    }
    const GradRule* r = findGradRule(id);
    auto c = conditions().find(id);
    if (r && c != conditions().end() &&
        !c->second(b, [this](const TensorProxy& t) { return diff_.count(&t) > 0; }))
      return nullptr;
    return r;
  }

  bool onGradPath(const BoundSymbol& b) const {
    for (const TensorPtr& t : b.inputTensors())
      if (diff_.count(t.get())) return true;
    return false;
  }

  /// Specializes symbol k to its traced value.
  void pin(int k, const char* why) {
    static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
    if (debug) std::fprintf(stderr, "thunder: autodiff pins s%d: %s\n", k, why);
    pinSymbol(joint_, k);
  }

  void walk(const BoundSymbol& orig) {
    BoundSymbol b = orig;
    if (!env_.empty()) substInPlace(b, env_);
    if (b.sym->hasTag(kDel) || !onGradPath(b)) {
      ctx().scope().push_back(std::move(b));
      return;
    }
    bool executorRule = false;
    const GradRule* rule = ruleFor(b, &executorRule);
    std::vector<int> free = freeSymbols(joint_, b);
    if (!free.empty()) {
      bool floatOut = false;
      for (const TensorPtr& t : b.outputTensors()) floatOut |= isFloatTensor(t);
      if (!floatOut) {
        // (a comparison: no gradient flows through it, so nothing of it reaches the backward)
        ctx().scope().push_back(std::move(b));
        return;
      }
      // An executor's rule that takes the call (registered from Python: its executor's kernels,
      // what the user asked for) comes first, and pins the sizes (executors whose kernels take
      // static sizes decline calls at symbolic sizes instead).
      auto st = symbolicTable().find(b.sym->id());
      if (!executorRule && st != symbolicTable().end() &&
          (!st->second.second || st->second.second(b, [this](const TensorProxy& t) { return diff_.count(&t) > 0; }))) {
        applyRule(b, st->second.first);
        return;
      }
      bool marked = !executorRule && isSymbolicGrad(b.sym->id());
      if (!rule && marked && b.sym->impl && !b.sym->meta) {
        // Its decomposition was traced at the traced sizes (the call ran whole): traced again
        // here with the symbols, the backward follows the sizes.
        if (std::optional<BoundSymbol> r = retraced(b)) {
          walkDecomposition(b, *r);
          return;
        }
        marked = false;
      }
      if (!marked) {
        static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
        if (debug)
          std::fprintf(stderr, "thunder: %s has no grad rule audited for symbolic sizes\n", b.sym->id().c_str());
        for (int k : free) pin(k, b.sym->id().c_str());
      }
    }
    if ((rule && !executorRule && !isComplexSafe(b.sym->id())) || (!rule && orig.subsymbols.empty())) {
      // A rule written for real values would give wrong gradients through complex ones.
      std::vector<TensorPtr> ts = b.outputTensors();
      for (const TensorPtr& t : b.inputTensors())
        if (diff_.count(t.get())) ts.push_back(t);
      for (const TensorPtr& t : ts)
        THUNDER_CHECK_KIND(!isComplex(t->dtype), ErrorKind::NotImplemented, "thunder cannot differentiate ",
                           b.sym->printName(), " for the complex tensor ", t->name,
                           ": its gradient is defined for real values only");
    }
    if (rule) {
      applyRule(b, *rule);
      return;
    }
    if (!orig.subsymbols.empty()) {
      walkDecomposition(b, orig);
      return;
    }
    // A prim without a rule: its floating outputs carry an error to any cotangent reaching them.
    Block block;
    block.key = nextKey_++;
    block.noRule = b.sym;
    for (const TensorPtr& t : b.outputTensors()) {
      if (!isFloatTensor(t)) continue;
      block.cotangents.push_back({nullptr, t});
      diff_.insert(t.get());
    }
    ctx().scope().push_back(std::move(b));
    if (!block.cotangents.empty()) blocks_.push_back(std::move(block));
  }

  /// No rule: differentiates the decomposition of `orig` (`b` after substitution), keeping the
  /// call around its new subsymbols.
  void walkDecomposition(const BoundSymbol& b, const BoundSymbol& orig) {
    BoundSymbol k;
    k.sym = b.sym;
    k.args = b.args;
    k.symbolicRule = b.symbolicRule;
    ctx().pushScope(&k.subsymbols);
    try {
      for (const BoundSymbol& s : orig.subsymbols) walk(s);
    } catch (...) {
      ctx().popScope();
      throw;
    }
    ctx().popScope();
    k.output = env_.empty() ? orig.output : subst(orig.output, env_);
    ctx().scope().push_back(std::move(k));
  }

  /// `b` with its decomposition traced again at the symbolic sizes, its fresh outputs named as
  /// b's (isSymbolicGrad: the decomposition reads sizes only where rules check them).
  std::optional<BoundSymbol> retraced(const BoundSymbol& b) {
    BoundSymbol r = b;
    r.subsymbols.clear();
    ctx().pushScope(&r.subsymbols);
    Value made;
    try {
      made = b.sym->impl(b.args);
    } catch (...) {
      ctx().popScope();
      throw;
    }
    ctx().popScope();
    std::vector<TensorPtr> produced, expected;
    pairOutputs(made, b.output, produced, expected);
    if (produced.size() != expected.size()) return std::nullopt;
    std::unordered_set<const TensorProxy*> fresh;
    for (const BoundSymbol& s : r.subsymbols)
      for (const TensorPtr& t : s.outputTensors()) fresh.insert(t.get());
    Subst ren;
    for (size_t i = 0; i < produced.size(); ++i) {
      if (produced[i] == expected[i]) continue;
      // (A decomposition that returns an input at these sizes but made a value at the traced
      // ones: the traced decomposition, at the traced sizes.)
      if (!fresh.count(produced[i].get())) return std::nullopt;
      ren[produced[i].get()] = Value(expected[i]);
    }
    for (BoundSymbol& s : r.subsymbols) substInPlace(s, ren);
    return r;
  }

  void applyRule(const BoundSymbol& b, const GradRule& rule) {
    Block block;
    block.key = nextKey_++;
    Recording rec{&ctx(), &block, false, &diff_};
    Recording* prev = tlsRecording;
    tlsRecording = &rec;
    std::vector<BoundSymbol>& fwdScope = ctx().scope();
    size_t start = fwdScope.size();
    Value result;
    try {
      result = rule(b.args);
    } catch (...) {
      if (rec.inBackward) ctx().popScope();
      tlsRecording = prev;
      throw;
    }
    if (rec.inBackward) ctx().popScope();
    tlsRecording = prev;

    std::vector<TensorPtr> produced, expected;
    pairOutputs(result, b.output, produced, expected);
    THUNDER_CHECK(produced.size() == expected.size(), "the grad rule of ", b.sym->id(),
                  " returned ", produced.size(), " tensors, but the call has ", expected.size(),
                  " tensor outputs");
    // The rule's outputs stand for the call's: rename fresh ones to the originals so later calls
    // keep reading the originals; map the others.
    std::unordered_set<const TensorProxy*> fresh;
    for (size_t i = start; i < fwdScope.size(); ++i)
      for (const TensorPtr& t : fwdScope[i].outputTensors()) fresh.insert(t.get());
    Subst ren;
    for (size_t i = 0; i < produced.size(); ++i) {
      if (produced[i] == expected[i]) continue;
      THUNDER_CHECK(produced[i]->shape == expected[i]->shape &&
                        produced[i]->dtype == expected[i]->dtype,
                    "the grad rule of ", b.sym->id(), " returned ", produced[i]->typeString(),
                    " for output ", expected[i]->name, " of type ", expected[i]->typeString());
      if (fresh.count(produced[i].get())) ren[produced[i].get()] = Value(expected[i]);
      else env_[expected[i].get()] = Value(produced[i]);
    }
    if (!ren.empty()) {
      for (size_t i = start; i < fwdScope.size(); ++i) substInPlace(fwdScope[i], ren);
      for (BoundSymbol& s : block.bsyms) substInPlace(s, ren);
      for (auto& [ph, out] : block.cotangents) {
        auto it = ren.find(out.get());
        if (it != ren.end()) out = it->second.toTensor();
      }
      for (auto& [in, g] : block.grads) {
        in = subst(in, ren);
        g = subst(g, ren);
      }
    }
    for (const auto& [ph, out] : block.cotangents) {
      if (!isFloatTensor(out)) continue;
      diff_.insert(out.get());
      producerKey_.emplace(out.get(), block.key);
    }
    if (!block.cotangents.empty() || !block.bsyms.empty() || !block.grads.empty())
      blocks_.push_back(std::move(block));
  }

  void accumulate(const TensorPtr& in, const Value& g, int key) {
    if (!diff_.count(in.get()) || g.isNone()) return;
    THUNDER_CHECK_KIND(g.isTensor(), ErrorKind::Type, "put_grad: the gradient of ", in->name,
                       " must be a tensor, but got ", describe(g));
    Value gv = g;
    emit(key, [&] {
      if (gv.tensor().shape != in->shape) gv = sumToShape(gv, *in);
      // A gradient whose size has another expression than its input's (equal at the traced
      // sizes: a rule that gave a traced size where the input's varies, or the size of another
      // input the program compared equal): the trace serves the sizes where they are equal.
      if (!joint_.symbols.empty()) {
        const TensorProxy& gt = gv.tensor();
        for (size_t i = 0; i < gt.shape.size() && i < in->shape.size(); ++i)
          if (!sameSym(gt.dim(i), in->dim(i))) joint_.addGuard(guardEqual(gt.dim(i), in->dim(i)));
      }
      if (gv.tensor().dtype != in->dtype) gv = ltorch::op("to", {gv, Value(), in->dtype});
      auto it = cot_.find(in.get());
      if (it != cot_.end()) gv = ltorch::op("add", {it->second, gv});
      return gv;
    });
    cot_[in.get()] = gv;
  }

  void emitBlock(const Block& block) {
    bool any = false;
    for (const auto& [ph, out] : block.cotangents) any |= cot_.count(out.get()) > 0;
    if (!any) return;
    THUNDER_CHECK_KIND(!block.noRule, ErrorKind::NotImplemented, "thunder cannot differentiate ",
                       block.noRule->id(), ": it has no grad rule (a gradient reaches its output)");
    // An output no gradient reaches (the variance of var_mean when only its mean is used) gives
    // none: its cotangent is zero and left out of the rule's backward (ZeroCotangents), as eager
    // runs no formula for it.
    Subst m;
    ZeroCotangents z([&](const TensorPtr& t) { return emit(block.key, [&] { return zerosLike(*t); }); });
    for (const auto& [ph, out] : block.cotangents) {
      auto it = cot_.find(out.get());
      if (it == cot_.end()) {
        z.mark(ph, true);
      } else {
        m[ph.get()] = it->second;
        if (it->second.isTensor()) z.mark(it->second.toTensor(), false);
      }
    }
    for (const BoundSymbol& b : block.bsyms) {
      BoundSymbol c = b;
      substInPlace(c, m);
      std::optional<BoundSymbol> kept = z.step(c);
      if (!kept) continue;
      bwd_.push_back(std::move(*kept));
      keys_.resize(bwd_.size(), block.key);
    }
    for (const auto& [in, g] : block.grads) {
      Value gv = z.subst(subst(g, m));
      if (in.isTensor() && !z.isZero(gv)) accumulate(in.toTensor(), gv, block.key);
    }
  }

  const Trace& comp_;
  Trace joint_;
  const std::vector<Executor*>& executors_;
  std::unique_ptr<TracingScope> scope_;
  std::unordered_set<const TensorProxy*> diff_;
  std::unordered_map<const TensorProxy*, int> producerKey_;
  Subst env_;
  std::vector<Block> blocks_;
  int nextKey_ = 0;
  Value userOutput_;
  std::vector<BoundSymbol> bwd_;
  std::vector<int> keys_;
  std::unordered_map<const TensorProxy*, Value> cot_;
};

/// Orders calls by dependencies, preferring the smallest key, then the earlier position.
std::vector<BoundSymbol> sortByKey(std::vector<BoundSymbol> bsyms, const std::vector<int>& keys) {
  size_t n = bsyms.size();
  std::unordered_map<const TensorProxy*, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const TensorPtr& t : bsyms[i].outputTensors()) producer.emplace(t.get(), i);
  std::vector<std::vector<size_t>> users(n);
  std::vector<size_t> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<size_t> deps;
    for (const TensorPtr& t : bsyms[i].inputTensors()) {
      auto it = producer.find(t.get());
      if (it != producer.end() && it->second != i) deps.insert(it->second);
    }
    pending[i] = deps.size();
    for (size_t d : deps) users[d].push_back(i);
  }
  using Item = std::pair<int, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!pending[i]) ready.push({keys[i], i});
  std::vector<BoundSymbol> out;
  out.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.top().second;
    ready.pop();
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push({keys[u], u});
    out.push_back(std::move(bsyms[i]));
  }
  THUNDER_INTERNAL(out.size() == n, "autodiff: the joint trace has a cycle");
  return out;
}

std::string inputList(const Trace& t) {
  std::string s;
  for (const TensorPtr& p : t.inputs) s += (s.empty() ? "" : ", ") + p->name + ": " + p->typeString();
  return s.empty() ? "none" : s;
}

}  // namespace

void registerGradRule(const std::string& symbolId, GradRule rule) {
  table()[symbolId] = std::move(rule);
  conditions().erase(symbolId);
}

void registerGradRule(const std::string& symbolId, GradRule rule, GradRuleCondition applies) {
  table()[symbolId] = std::move(rule);
  conditions()[symbolId] = std::move(applies);
}

void registerExecutorGradRule(const std::string& executor, const std::string& symbolId,
                              GradRule rule, GradRuleCondition applies) {
  executorTable()[executor][symbolId] = ExecutorRule{std::move(rule), std::move(applies)};
}

const GradRule* findGradRule(const std::string& symbolId) {
  registerGradRules();
  auto it = table().find(symbolId);
  return it == table().end() ? nullptr : &it->second;
}

Value getGrad(const Value& out) {
  THUNDER_CHECK(tlsRecording != nullptr,
                "get_grad can only be called inside a grad rule (a grad transform being traced)");
  THUNDER_CHECK_KIND(out.isTensor(), ErrorKind::Type, "get_grad: expected a tensor, but got ",
                     describe(out));
  Recording& r = *tlsRecording;
  const TensorPtr& t = out.toTensor();
  for (const auto& [ph, o] : r.block->cotangents)
    if (o == t) return Value(ph);
  if (!r.inBackward) {
    r.ctx->pushScope(&r.block->bsyms);
    r.inBackward = true;
  }
  TensorPtr ph = newLike(*r.ctx, *t);
  r.block->cotangents.push_back({ph, t});
  return Value(ph);
}

void putGrad(const Value& in, const Value& g) {
  THUNDER_CHECK(tlsRecording != nullptr,
                "put_grad can only be called inside a grad rule (a grad transform being traced)");
  if (!in.isTensor() || g.isNone()) return;
  THUNDER_CHECK_KIND(g.isTensor(), ErrorKind::Type, "put_grad: the gradient of ",
                     in.tensor().name, " must be a tensor, but got ", describe(g));
  tlsRecording->block->grads.push_back({in, g});
}

bool needsGrad(const Value& in) {
  THUNDER_CHECK(tlsRecording != nullptr,
                "needs_grad can only be called inside a grad rule (a grad transform being traced)");
  const Recording& r = *tlsRecording;
  return in.isTensor() && (r.differentiable == nullptr || r.differentiable->count(in.toTensor().get()) > 0);
}

Trace gradTransform(const Trace& computation, size_t numArgs,
                    const std::vector<Executor*>& executors) {
  std::vector<TensorPtr> wrt;
  for (size_t i = 0; i < computation.inputs.size() && i < numArgs; ++i)
    if (isFloatTensor(computation.inputs[i])) wrt.push_back(computation.inputs[i]);
  THUNDER_CHECK_KIND(!wrt.empty(), ErrorKind::Value,
                     "grad: the function has no differentiable input (a floating point tensor "
                     "argument); its tensor inputs are ",
                     inputList(computation));
  Differentiator d(computation, wrt, executors);
  d.forward();
  std::vector<TensorPtr> outs;
  d.userOutput().collectTensors(outs);
  std::vector<std::pair<TensorPtr, Value>> seeds;
  for (const TensorPtr& o : outs) {
    if (!d.differentiable(o)) continue;
    Value ones = d.emit(d.producerKey(o), [&] {
      return ltorch::op("full", {Value::ints(o->shape), 1.0},
                        {{"device", o->device}, {"dtype", o->dtype}});
    });
    seeds.push_back({o, ones});
  }
  THUNDER_CHECK_KIND(!seeds.empty(), ErrorKind::Value,
                     "grad: no output of the function depends on a differentiable input");
  d.backward(seeds);
  std::vector<Value> grads;
  for (const TensorPtr& t : wrt) {
    Value g = d.cotangent(t);
    if (g.isNone()) g = d.emit(1 << 30, [&] { return zerosLike(*t); });
    grads.push_back(g);
  }
  Trace& joint = d.joint();
  Value output = Value::list(grads);
  std::vector<BoundSymbol> fwd;
  flattenReferenced(joint.bsyms, readTensors(d.bwd(), output), fwd);
  std::vector<int> keys(fwd.size(), -1);
  keys.insert(keys.end(), d.keys().begin(), d.keys().end());
  for (BoundSymbol& b : d.bwd()) fwd.push_back(std::move(b));
  Trace out = joint.emptyCopy();
  out.bsyms = sortByKey(std::move(fwd), keys);
  out.output = output;
  out.provenance = "Grad";
  Trace pruned = dce(out);
  pruned.provenance = "Grad";
  return pruned;
}

Trace withUndefinedCotangents(const Trace& backward, const std::vector<bool>& undefined,
                              std::vector<bool>* zeroOutputs) {
  THUNDER_INTERNAL(undefined.size() <= backward.inputs.size(), "withUndefinedCotangents: ",
                   undefined.size(), " cotangents of ", backward.inputs.size(), " inputs");
  Trace out = backward.emptyCopy();
  ZeroCotangents z([&](const TensorPtr& t) {
    TracingScope scope(out);
    return zerosLike(*t);
  });
  size_t first = backward.inputs.size() - undefined.size();
  for (size_t i = 0; i < undefined.size(); ++i) z.mark(backward.inputs[first + i], undefined[i]);
  for (const BoundSymbol& b : backward.bsyms) {
    std::optional<BoundSymbol> kept = z.step(b);
    if (kept) out.bsyms.push_back(std::move(*kept));
  }
  out.output = z.subst(backward.output);
  std::vector<TensorPtr> finals;
  out.output.collectTensors(finals);
  std::unordered_set<const TensorProxy*> zeroFinals;
  for (const TensorPtr& t : finals)
    if (z.isZero(Value(t))) zeroFinals.insert(z.materialize(t).toTensor().get());
  out.output = z.subst(out.output);
  if (zeroOutputs != nullptr) {
    std::vector<TensorPtr> returned;
    out.output.collectTensors(returned);
    zeroOutputs->clear();
    for (const TensorPtr& t : returned) zeroOutputs->push_back(zeroFinals.count(t.get()) > 0);
  }
  out.provenance = "Constructed by Undefined cotangents";
  return dce(out);
}

ForwardBackward forwardBackward(const Trace& computation, const std::vector<Executor*>& executors,
                                const std::vector<std::string>& overwritten) {
  std::vector<TensorPtr> wrt;
  for (const TensorPtr& t : computation.inputs)
    if (t->requiresGrad && isFloatTensor(t)) wrt.push_back(t);
  THUNDER_CHECK_KIND(!wrt.empty(), ErrorKind::Value,
                     "thunder: no input requires grad, so there is nothing to differentiate");
  Differentiator d(computation, wrt, executors);
  d.forward();
  ForwardBackward fb;
  fb.userOutput = d.userOutput();
  std::vector<TensorPtr> outs;
  fb.userOutput.collectTensors(outs);
  std::vector<std::pair<TensorPtr, Value>> seeds;
  std::vector<TensorPtr> cotangents;
  for (const TensorPtr& o : outs) {
    bool diff = d.differentiable(o);
    fb.differentiableOutputs.push_back(diff);
    if (!diff) continue;
    TensorPtr ct = newLike(d.ctx(), *o);
    cotangents.push_back(ct);
    seeds.push_back({o, Value(ct)});
  }
  d.backward(seeds);

  Trace& joint = d.joint();
  Trace bw = joint.emptyCopy();
  bw.fnName = "backward";
  bw.bsyms = std::move(d.bwd());
  std::vector<Value> grads;
  int next = 0;
  for (const TensorPtr& t : computation.inputs) {
    Value g = d.differentiable(t) ? d.cotangent(t) : Value();
    fb.gradIndex.push_back(g.isTensor() ? next++ : -1);
    grads.push_back(g);
  }
  bw.output = Value::tuple(grads);
  bw = dce(bw);

  // What the backward reads from the forward.
  std::unordered_set<const TensorProxy*> produced, cts;
  for (const BoundSymbol& b : bw.bsyms)
    for (const TensorPtr& t : b.outputTensors()) produced.insert(t.get());
  for (const TensorPtr& t : cotangents) cts.insert(t.get());
  std::vector<TensorPtr> needed;
  std::unordered_set<const TensorProxy*> seen;
  auto need = [&](const TensorPtr& t) {
    if (!produced.count(t.get()) && !cts.count(t.get()) && seen.insert(t.get()).second)
      needed.push_back(t);
  };
  for (const BoundSymbol& b : bw.bsyms)
    for (const TensorPtr& t : b.inputTensors()) need(t);
  std::vector<TensorPtr> gradTensors;
  bw.output.collectTensors(gradTensors);
  for (const TensorPtr& t : gradTensors) need(t);

  std::vector<BoundSymbol> fwd;
  flattenReferenced(joint.bsyms, seen, fwd);
  fb.numSavedWithoutRemat = needed.size();
  for (const TensorPtr& t : needed) fb.savedBytesWithoutRemat += tensorBytes(*t);
  RematPlan plan = rematerialize(fwd, computation.inputs, needed, overwritten);
  fb.saved = plan.saved;
  for (const TensorPtr& t : fb.saved) fb.savedBytes += tensorBytes(*t);

  // Each recomputed call goes just before the first backward call that needs it (not all at the
  // start), so the fuser puts it in the same kernel as its consumer: the recomputed values stay
  // in registers instead of being written out in float32 by a separate kernel, and live briefly.
  {
    std::unordered_map<const TensorProxy*, size_t> producerOf;
    for (size_t i = 0; i < plan.recompute.size(); ++i)
      for (const TensorPtr& t : plan.recompute[i].outputTensors()) producerOf[t.get()] = i;
    std::vector<bool> placed(plan.recompute.size(), false);
    std::vector<BoundSymbol> bsyms;
    std::function<void(const TensorProxy*)> place = [&](const TensorProxy* t) {
      auto it = producerOf.find(t);
      if (it == producerOf.end() || placed[it->second]) return;
      placed[it->second] = true;
      for (const TensorPtr& in : plan.recompute[it->second].inputTensors()) place(in.get());
      bsyms.push_back(plan.recompute[it->second]);
    };
    for (BoundSymbol& b : bw.bsyms) {
      for (const TensorPtr& in : b.inputTensors()) place(in.get());
      bsyms.push_back(std::move(b));
    }
    std::vector<TensorPtr> outs;
    bw.output.collectTensors(outs);
    for (const TensorPtr& t : outs) place(t.get());
    bw.bsyms = std::move(bsyms);
  }
  bw.inputs = fb.saved;
  bw.inputs.insert(bw.inputs.end(), cotangents.begin(), cotangents.end());
  // The size symbols as the backward's own inputs hold them, where one does (its printed program
  // reads them there); the program takes their values from the forward's call either way.
  for (SizeSymbol& s : bw.symbols) {
    s.input = -1;
    for (size_t i = 0; i < bw.inputs.size() && s.input < 0; ++i)
      for (size_t d = 0; d < bw.inputs[i]->sym.size(); ++d) {
        const SymPtr& e = bw.inputs[i]->sym[d];
        if (e && e->constant == 0 && e->terms.size() == 1 && e->terms[0].first == (&s - bw.symbols.data()) &&
            e->terms[0].second == 1) {
          s.input = static_cast<int>(i);
          s.dim = static_cast<int>(d);
          break;
        }
      }
  }
  bw.provenance = "Backward";
  fb.backward = std::move(bw);

  Trace fw = joint.emptyCopy();
  fw.bsyms = std::move(fwd);
  std::vector<Value> saved(fb.saved.begin(), fb.saved.end());
  fw.output = Value::tuple({fb.userOutput, Value::tuple(saved)});
  fb.forward = dce(fw);
  fb.forward.provenance = "Forward";
  return fb;
}

void markSymbolicGrad(const std::string& symbolId) { symbolicGrads().insert(symbolId); }

void registerSymbolicGradRule(const std::string& symbolId, GradRule rule, GradRuleCondition applies) {
  symbolicTable()[symbolId] = {std::move(rule), std::move(applies)};
}

bool isSymbolicGrad(const std::string& symbolId) {
  registerGradRules();
  return symbolicGrads().count(symbolId) > 0;
}

void markComplexSafe(const std::string& symbolId) { complexSafe().insert(symbolId); }

bool isComplexSafe(const std::string& symbolId) {
  registerGradRules();
  return complexSafe().count(symbolId) > 0;
}

}  // namespace thunder
