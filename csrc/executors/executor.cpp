#include "executors/executor.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <unordered_set>

#include "codegen/python_printer.h"
#include "ir/error.h"
#include "transforms/conv_layout.h"
#include "transforms/dce.h"

namespace thunder {

void Executor::addImplementation(const std::string& symbolId, Implementation impl) {
  auto& list = impls_[symbolId];
  list.insert(list.begin(), std::move(impl));
}

void Executor::removeImplementations(const std::string& symbolId) { impls_.erase(symbolId); }

const Implementation* Executor::find(const BoundSymbol& b) const {
  auto it = impls_.find(b.sym->id());
  if (it == impls_.end()) return nullptr;
  for (const Implementation& impl : it->second)
    if (!impl.checker || impl.checker(b)) return &impl;
  return nullptr;
}

ExecutorRegistry& ExecutorRegistry::get() {
  static ExecutorRegistry r;
  return r;
}

Executor* ExecutorRegistry::add(std::shared_ptr<Executor> ex) {
  THUNDER_CHECK_KIND(find(ex->name()) == nullptr, ErrorKind::Value, "an executor named '",
                     ex->name(), "' is already registered");
  executors_.push_back(std::move(ex));
  return executors_.back().get();
}

void ExecutorRegistry::remove(const std::string& name) {
  executors_.erase(std::remove_if(executors_.begin(), executors_.end(),
                                  [&](const auto& e) { return e->name() == name; }),
                   executors_.end());
}

Executor* ExecutorRegistry::find(const std::string& name) const {
  for (const auto& e : executors_)
    if (e->name() == name) return e.get();
  return nullptr;
}

std::vector<Executor*> ExecutorRegistry::resolve(const std::vector<std::string>& names) const {
  std::vector<Executor*> out;
  for (const std::string& n : names) {
    Executor* ex = find(n);
    THUNDER_CHECK_KIND(ex != nullptr, ErrorKind::Value, "unknown executor '", n, "'");
    out.push_back(ex);
  }
  return out;
}

std::vector<Executor*> ExecutorRegistry::all() const {
  std::vector<Executor*> out;
  for (const auto& e : executors_) out.push_back(e.get());
  return out;
}

namespace {

/// THUNDER_DEBUG_CLAIMS=1: say on stderr which executor declined which call.
bool debugClaims() {
  // Read at each claim (compile time only), so that a test can set it.
  const char* e = std::getenv("THUNDER_DEBUG_CLAIMS");
  return e != nullptr && std::string(e) == "1";
}

class Claimer {
 public:
  Claimer(Trace& out, const std::vector<Executor*>& executors) : out_(out), executors_(executors) {}

  void claim(const BoundSymbol& b, size_t firstExecutor) {
    if (b.sym->hasTag(kDel) || isActive(b.sym->executor)) {
      // Already an executor's call (a fusion, or an active executor's own operator).
      out_.bsyms.push_back(b);
      return;
    }
    for (size_t i = firstExecutor; i < executors_.size(); ++i) {
      const Executor* ex = executors_[i];
      if (ex->isFusion()) continue;
      const Implementation* impl = ex->find(b);
      if (!impl) {
        if (debugClaims() && ex->implements(b.sym->id()))
          std::fprintf(stderr,
                       "thunder: executor '%s' declined %s (`%s`): its checker returned False\n",
                       ex->name().c_str(), b.sym->id().c_str(), printCall(b).c_str());
        continue;
      }
      if (impl->executionTransform) {
        applyTransform(b, *impl, i);
      } else if (impl->execSymbol == b.sym) {
        // An executor's own operator (multimul claimed by its executor) stays as it was traced,
        // its decomposition kept as subsymbols.
        out_.bsyms.push_back(b);
      } else {
        BoundSymbol claimed;
        claimed.sym = impl->execSymbol;
        claimed.args = b.args;
        claimed.output = b.output;
        claimed.subsymbols = {b};
        claimed.symbolicRule = b.symbolicRule;
        out_.bsyms.push_back(std::move(claimed));
      }
      return;
    }
    THUNDER_CHECK_KIND(!b.subsymbols.empty(), ErrorKind::NotImplemented, "no executor can run ",
                       b.sym->id(), " (in `", printCall(b),
                       "`): none of the active executors implements it");
    if (b.symbolicRule && b.sym->hasTag(kElementwise) && b.subsymbols.size() == 1) {
      // An elementwise call at symbolic sizes no executor runs whole (`1.0 - t`: ATen takes no
      // number first) whose decomposition is one call of its own arguments to the same output:
      // that call computes the same function, so the call's sizes rule covers it.
      BoundSymbol sub = b.subsymbols[0];
      bool own = sub.output == b.output;
      auto same = [](const Value& x, const Value& y) {
        // (a number converted to the computation's type: `2 * t` decomposes to mul(2.0, t))
        if (x.isNumber() && y.isNumber() && !x.isComplex() && !y.isComplex()) return x.toDouble() == y.toDouble();
        return x == y;
      };
      for (Value& v : sub.args) {
        auto it = std::find_if(b.args.begin(), b.args.end(), [&](const Value& x) { return same(x, v); });
        own = own && it != b.args.end();
        // A size read as a number (`x.shape[1] - x`): the decomposition holds its value at the
        // hints (prims.sub(24.0, x)); the call takes the size itself, evaluated at each run.
        if (it != b.args.end() && it->hasSymbolic() && !v.hasSymbolic()) v = *it;
      }
      if (own) {
        sub.symbolicRule = b.symbolicRule;
        claim(sub, 0);
        return;
      }
    }
    for (const BoundSymbol& sub : b.subsymbols) claim(sub, 0);
  }

 private:
  // Traces the execution transform on the call's arguments; the calls it makes are claimed by
  // the executors after this one for symbols it implements (so `mul -> multimul` cannot recurse),
  // and by any executor otherwise.
  void applyTransform(const BoundSymbol& b, const Implementation& impl, size_t exIndex) {
    std::vector<BoundSymbol> calls;
    Value result = traceScratch(out_, [&] { return impl.executionTransform(b.args); }, calls);
    // The transform's outputs stand for b's outputs: rename them so later uses still match.
    std::vector<TensorPtr> produced, expected;
    result.collectTensors(produced);
    b.output.collectTensors(expected);
    const std::string what =
        "executor '" + executors_[exIndex]->name() + "': the execution transform for " + b.sym->id();
    THUNDER_CHECK(produced.size() == expected.size(), what, " returned ", produced.size(),
                  " tensors, but the call has ", expected.size(), " outputs");
    std::vector<TensorPtr> made;
    for (const BoundSymbol& sub : calls) sub.output.collectTensors(made);
    for (size_t i = 0; i < produced.size(); ++i) {
      // Renaming a tensor the transform did not make (an input passed through) would rename it
      // everywhere it is used.
      THUNDER_CHECK(std::find(made.begin(), made.end(), produced[i]) != made.end(), what,
                    " returned ", produced[i]->name, " for output ", expected[i]->name,
                    ", but did not compute it; return the result of a call instead");
      THUNDER_CHECK(produced[i]->shape == expected[i]->shape && produced[i]->dtype == expected[i]->dtype,
                    what, " returned ", produced[i]->typeString(), " for output ",
                    expected[i]->name, " of type ", expected[i]->typeString());
      produced[i]->name = expected[i]->name;
    }
    for (const BoundSymbol& sub : calls) {
      bool same = sub.sym == b.sym;
      claim(sub, same ? exIndex + 1 : 0);
    }
  }

  bool isActive(const std::string& executor) const {
    if (executor.empty()) return false;
    for (const Executor* ex : executors_)
      if (ex->name() == executor) return true;
    return false;
  }

  Trace& out_;
  const std::vector<Executor*>& executors_;
};

}  // namespace

Trace transformForExecution(const Trace& trace, const std::vector<Executor*>& executors) {
  Trace current = trace;
  // Fusion executors partition the calls first; operator executors then claim the rest.
  for (const Executor* ex : executors)
    if (ex->isFusion()) current = ex->fusionPass(current);
  // A kernel whose values later kernels all compute again for themselves (a rotary embedding's
  // negated half, recomputed where it is concatenated) is read by nothing: it goes.
  current = dce(current);
  Trace out = current.emptyCopy();
  out.isExecution = true;
  out.provenance = "Transform for execution";
  auto start = std::chrono::steady_clock::now();
  Claimer claimer(out, executors);
  for (const BoundSymbol& b : current.bsyms) claimer.claim(b, 0);
  if (convolutionLayout(trace) == ConvLayout::AsLaidOut) {
    // Convolutions in the layouts their tensors come in (the fusion executors' kernels were
    // planned from the same decision).
    for (BoundSymbol& b : out.bsyms)
      for (const Executor* ex : executors)
        if (const Symbol* v = ex->asLaidOutVariant(b.sym)) {
          b.sym = v;
          break;
        }
  }
  static const bool timing = std::getenv("THUNDER_DEBUG_TIMING") != nullptr;
  if (timing)
    std::fprintf(stderr, "timing: claiming %zu calls %.1f ms\n", current.bsyms.size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return out;
}

ReinplaceRules reinplaceRules(const std::vector<Executor*>& executors) {
  auto byName = [executors](const std::string& name) -> const Executor* {
    for (const Executor* ex : executors)
      if (ex->name() == name) return ex;
    return nullptr;
  };
  ReinplaceRules rules;
  rules.inplaceVariant = [byName](const BoundSymbol& b) -> const Symbol* {
    const Executor* ex = b.sym->executor.empty() ? nullptr : byName(b.sym->executor);
    return ex ? ex->inplaceVariant(b.sym) : nullptr;
  };
  rules.updatingVariant = [byName](const BoundSymbol& b) -> const UpdatingVariant* {
    const Executor* ex = b.sym->executor.empty() ? nullptr : byName(b.sym->executor);
    return ex ? ex->updatingVariant(b.sym) : nullptr;
  };
  rules.freshOutputs = [byName](const BoundSymbol& b) {
    const Executor* ex = b.sym->executor.empty() ? nullptr : byName(b.sym->executor);
    if (ex == nullptr) return false;
    if (ex->isFusion()) return true;
    if (ex->name() != "torch" || b.sym->hasTag(kShapeOp)) return false;
    // Calls ATen answers with their input when there is nothing to do.
    static const std::unordered_set<std::string> mayReturnInput = {
        "to", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool",
        "contiguous", "convert_element_type", "stride_order", "squeeze", "real", "imag",
        "dropout", "detach"};
    if (mayReturnInput.count(b.sym->name)) return false;
    if (b.sym->hasTag(kElementwise) || b.sym->hasTag(kReductionOp) || b.sym->hasTag(kMatmulOp) ||
        b.sym->hasTag(kCreation))
      return true;
    static const std::unordered_set<std::string> allocates = {
        "scaled_dot_product_attention", "index_select", "gather", "take", "cat", "stack",
        "embedding", "linear", "matmul", "softmax", "log_softmax", "layer_norm", "rms_norm",
        "clone", "scatter", "scatter_add", "index_copy", "index_add", "cumsum", "cumprod"};
    return allocates.count(b.sym->name) > 0;
  };
  return rules;
}

}  // namespace thunder
