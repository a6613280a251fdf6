#include "transforms/dce.h"

#include <algorithm>
#include <unordered_set>

namespace thunder {
namespace {

Value pruneOutputs(const Value& out, const std::unordered_set<const TensorProxy*>& live) {
  if (!out.isSequence()) return out;
  std::vector<Value> items;
  for (const Value& v : out.items()) {
    if (v.isTensor()) items.push_back(live.count(v.toTensor().get()) ? v : Value());
    else items.push_back(pruneOutputs(v, live));
  }
  return out.isTuple() ? Value::tuple(items) : Value::list(items);
}

}  // namespace

Trace dce(const Trace& trace) {
  std::unordered_set<const TensorProxy*> live;
  std::vector<TensorPtr> outs;
  trace.output.collectTensors(outs);
  for (const TensorPtr& t : outs) live.insert(t.get());

  std::vector<BoundSymbol> kept;
  for (auto it = trace.bsyms.rbegin(); it != trace.bsyms.rend(); ++it) {
    const BoundSymbol& b = *it;
    std::vector<TensorPtr> produced = b.outputTensors();
    bool needed = b.sym->hasTag(kDontDce) ||
                  std::any_of(produced.begin(), produced.end(),
                              [&](const TensorPtr& t) { return live.count(t.get()) > 0; });
    if (!needed) continue;
    BoundSymbol copy = b;
    if (produced.size() > 1) copy.output = pruneOutputs(b.output, live);
    for (const TensorPtr& t : b.inputTensors()) live.insert(t.get());
    kept.push_back(std::move(copy));
  }
  Trace out = trace.emptyCopy();
  out.bsyms.assign(kept.rbegin(), kept.rend());
  out.provenance = "Dead Code Elimination";
  return out;
}

}  // namespace thunder
