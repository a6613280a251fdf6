// The pass pipelines' shared parts: a log of the traces the passes make (each with its provenance
// and time, verified on request), and the rewrites every pipeline runs before autodiff.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executors/executor.h"
#include "ir/trace.h"

namespace thunder {

/// The traces of a pipeline, in order, each made by one pass from the one before it.
class PassLog {
 public:
  PassLog(std::vector<std::shared_ptr<Trace>>& traces, bool verifyEach)
      : traces_(traces), verify_(verifyEach) {}

  const Trace& last() const { return *traces_.back(); }

  /// Appends pass(last()), named in its provenance with the time it took.
  template <typename F>
  void run(const char* name, F&& pass) {
    auto t0 = std::chrono::steady_clock::now();
    Trace next = pass(last());
    append(std::move(next), name, t0);
  }

  /// Appends what rewrite(last()) returns: a rewrite that changes nothing returns nothing.
  template <typename F>
  void runIfChanged(const char* name, F&& rewrite) {
    auto t0 = std::chrono::steady_clock::now();
    if (std::optional<Trace> next = rewrite(last())) append(std::move(*next), name, t0);
  }

 private:
  void append(Trace next, const char* name, std::chrono::steady_clock::time_point t0);

  std::vector<std::shared_ptr<Trace>>& traces_;
  bool verify_;
};

/// The cross-entropy upcast fold (transforms/xent_upcast.h) where an active executor implements
/// ltorch.cross_entropy_upcast and a call matches; else nothing.
std::optional<Trace> foldUpcasts(const Trace& trace, const std::vector<Executor*>& executors);

/// Runs, at compile time, a trace with no inputs whose output is one 0-dim tensor, with the
/// non-fusion executors among `executors`; returns its value, or nothing when it cannot. The
/// bindings set one (it needs the runtime, which this layer does not see); without one, the
/// rewrites that would evaluate such a trace (sdpaCausalMasks) read the calls only.
using TraceEvaluator = std::function<std::optional<double>(const Trace&, const std::vector<Executor*>& executors)>;
void setConstantEvaluator(TraceEvaluator evaluator);

/// What every pipeline (inference, grad, training) does to an acquired trace before autodiff:
/// dead code elimination, the cross-entropy upcast fold, causal masks to is_causal (masks computed
/// from no input compared with the causal pattern through the constant evaluator), boolean masks
/// to additive ones (transforms/sdpa_rules.h) and the padding of unaligned linear layers
/// (transforms/pad_matmuls.h), each appended where it changes something.
void beforeAutodiff(PassLog& log, const std::vector<Executor*>& executors);

}  // namespace thunder
