#include "transforms/pipeline.h"

#include "ir/verifier.h"
#include "transforms/dce.h"
#include "transforms/pad_matmuls.h"
#include "transforms/sdpa_rules.h"
#include "transforms/xent_upcast.h"

namespace thunder {

void PassLog::append(Trace next, const char* name, std::chrono::steady_clock::time_point t0) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  next.provenance = std::string("Constructed by ") + name + " (took " + std::to_string(ms) + " milliseconds)";
  if (verify_) verify(next);
  traces_.push_back(std::make_shared<Trace>(std::move(next)));
}

std::optional<Trace> foldUpcasts(const Trace& trace, const std::vector<Executor*>& executors) {
  for (const Executor* ex : executors)
    if (ex->implements("ltorch.cross_entropy_upcast")) return foldCrossEntropyUpcast(trace);
  return std::nullopt;
}

namespace {
TraceEvaluator& constantEvaluator() {
  static TraceEvaluator e;
  return e;
}
}  // namespace

void setConstantEvaluator(TraceEvaluator evaluator) { constantEvaluator() = std::move(evaluator); }

void beforeAutodiff(PassLog& log, const std::vector<Executor*>& executors) {
  log.run("Dead Code Elimination", [](const Trace& t) { return dce(t); });
  log.runIfChanged("Cross-entropy upcast fold", [&](const Trace& t) { return foldUpcasts(t, executors); });
  ConstantEvaluator evaluate;
  if (constantEvaluator())
    evaluate = [&executors](const Trace& t) { return constantEvaluator()(t, executors); };
  log.runIfChanged("Causal attention masks", [&](const Trace& t) { return sdpaCausalMasks(t, evaluate); });
  log.runIfChanged("Constant conditions", [&](const Trace& t) { return foldConstantConditions(t, evaluate); });
  log.runIfChanged("Attention masks to bias", [](const Trace& t) { return sdpaMasksToBias(t); });
  log.runIfChanged("Pad matmuls", [](const Trace& t) { return padMatmuls(t); });
}

}  // namespace thunder
