// Bound symbols, traces, and the tracing context that records them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/symbol.h"
#include "ir/value.h"

namespace thunder {

/// One call of a symbol in a trace: its bound arguments (one per parameter), its output, and the
/// calls its decomposition made when it was traced.
struct BoundSymbol {
  const Symbol* sym = nullptr;
  /// Set where `sym` was made for one compiled program (a fusion region's kernel,
  /// runtime::makeOwnedExecSymbol): keeps the symbol, its kernel and the code it loaded alive
  /// while any call of it exists. They are released with the last trace that calls it.
  std::shared_ptr<const Symbol> owner;
  std::vector<Value> args;
  Value output;
  std::vector<BoundSymbol> subsymbols;
  /// Set where the call reads or makes symbolic sizes (ir/symbolic.h) and the symbolic rule of
  /// this symbol gave its outputs' expressions: the symbol whose rule it was (the traced one,
  /// kept when an executor claims the call). Such a call runs whole at every size its guards
  /// allow; its decomposition was traced at the hints only.
  const Symbol* symbolicRule = nullptr;
  /// Nonzero on calls the program made inside torch.utils.checkpoint, one number per checkpointed
  /// call: the backward may run them again instead of having their outputs saved, whatever their
  /// kind (a matmul included), from what enters the region (transforms/remat.h).
  int checkpointRegion = 0;

  /// Tensor proxies read by this call (its arguments, recursively).
  std::vector<TensorPtr> inputTensors() const;
  /// Tensor proxies made by this call.
  std::vector<TensorPtr> outputTensors() const;
};

/// Tensor proxies to replace, each by the proxy that stands for it.
using TensorRenames = std::unordered_map<const TensorProxy*, TensorPtr>;
/// v with every tensor in `to` replaced (through tuples, lists and dicts).
Value substitute(const Value& v, const TensorRenames& to);
/// Replaces the tensors b reads: its arguments and its decomposition's, recursively.
void substituteReads(BoundSymbol& b, const TensorRenames& to);

/// A straight-line program: named inputs, bound symbols, an output, and where it came from.
struct Trace {
  std::string fnName = "computation";
  /// The function's parameters, in order: tensor proxies.
  std::vector<TensorPtr> inputs;
  std::vector<BoundSymbol> bsyms;
  Value output;
  /// "Constructed by Delete Last Used (took 0 milliseconds)".
  std::string provenance;
  /// Execution traces print the no_grad / no_autocast decorators.
  bool isExecution = false;
  /// The size symbols: s<k> is symbols[k] (ir/symbolic.h). Empty: every size is static.
  std::vector<SizeSymbol> symbols;
  /// What the trace assumes of the symbols (the comparisons the program made, what the rules of
  /// its calls need): it serves the sizes that satisfy every guard.
  std::vector<SymGuard> guards;
  /// Set on the trace of the user's program while it is traced: a call without a symbolic rule
  /// that reads a symbolic size specializes it (a guard that it equals its hint). Later traces
  /// (passes) record no guards: their calls must keep to the rules or the trace is specialized
  /// whole (symbolicCheck).
  bool recordsGuards = false;
  /// Adds a guard unless it is there.
  void addGuard(const SymGuard& g);
  /// Every name in use, so new proxies get fresh ones.
  std::unordered_set<std::string> names;
  int nextId = 0;

  /// A fresh name "t<N>" (or prefix<N>).
  std::string newName(const std::string& prefix = "t");
  /// Reserves an exact name; throws an internal error if taken.
  void reserveName(const std::string& name);
  /// A copy with the same inputs, output and names but no bound symbols.
  Trace emptyCopy() const;
};

/// The active tracing context: where calls are recorded. Thread-local, entered with TracingScope.
class TraceContext {
 public:
  explicit TraceContext(Trace& trace);
  Trace& trace() { return trace_; }
  /// Makes a new named tensor proxy in the trace.
  TensorPtr newTensor(Shape shape, DType dtype, Device device, bool requiresGrad = false);
  /// Where the next call is recorded: the trace's body or the enclosing call's subsymbols.
  std::vector<BoundSymbol>& scope() { return *scopes_.back(); }
  void pushScope(std::vector<BoundSymbol>* s) { scopes_.push_back(s); }
  void popScope() { scopes_.pop_back(); }

 private:
  Trace& trace_;
  std::vector<std::vector<BoundSymbol>*> scopes_;
};

/// The current context, or nullptr outside tracing.
TraceContext* currentContext();
/// The current context; throws a user error outside tracing.
TraceContext& requireContext(const std::string& what);

/// Makes `trace` the recording target for its lifetime (scopes nest).
class TracingScope {
 public:
  explicit TracingScope(Trace& trace);
  ~TracingScope();
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;
  TraceContext& context() { return ctx_; }

 private:
  TraceContext ctx_;
  TraceContext* prev_;
};

/// Calls a symbol with bound arguments: runs its meta function (prims) or decomposition,
/// records a bound symbol in the current scope and returns the output.
Value call(const Symbol& sym, std::vector<Value> args);

/// Replaces the tensor `from` by `to` in a call's arguments, output and decomposition.
void replaceTensor(BoundSymbol& b, const TensorProxy* from, const TensorPtr& to);

/// How many calls of `trace` read each tensor, its output counting once per place it returns it.
std::unordered_map<const TensorProxy*, size_t> readCounts(const Trace& trace);

/// Traces `build` into a scratch copy of `out` (new names follow `out`'s, which `out` then
/// reserves) and returns what it returned, with the calls it recorded in `calls`; nothing is
/// appended to `out`.
Value traceScratch(Trace& out, const std::function<Value()>& build, std::vector<BoundSymbol>& calls);

/// Traces `build` into `out` as traceScratch does and appends the calls it records; returns what
/// `build` returned.
Value appendTraced(Trace& out, const std::function<Value()>& build);

/// For passes that replace a call: traces `build` into a scratch copy of `out` (new names follow
/// `out`'s) and appends the calls it records, with the tensor `build` returns renamed to `result`,
/// so the later calls that read `result` read the new value. The returned tensor must have
/// `result`'s shape and dtype; `pass` names the pass in the internal error otherwise.
void appendTraced(Trace& out, const std::function<Value()>& build, const TensorPtr& result,
                  const std::string& pass);

}  // namespace thunder
