#include "transforms/del_last_used.h"

#include <unordered_map>
#include <unordered_set>

#include "ops/prims.h"

namespace thunder {

Trace delLastUsed(const Trace& trace) {
  std::unordered_set<const TensorProxy*> returned;
  std::vector<TensorPtr> outs;
  trace.output.collectTensors(outs);
  for (const TensorPtr& t : outs) returned.insert(t.get());

  std::unordered_map<const TensorProxy*, size_t> lastUse;
  for (size_t i = 0; i < trace.bsyms.size(); ++i)
    for (const TensorPtr& t : trace.bsyms[i].inputTensors()) lastUse[t.get()] = i;

  Trace out = trace.emptyCopy();
  out.provenance = "Delete Last Used";
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    out.bsyms.push_back(b);
    if (b.sym->hasTag(kDel)) continue;
    std::vector<Value> dead;
    std::unordered_set<const TensorProxy*> seen;
    for (const TensorPtr& t : b.inputTensors()) {
      if (returned.count(t.get()) || lastUse[t.get()] != i || !seen.insert(t.get()).second) continue;
      dead.push_back(t);
    }
    if (dead.empty()) continue;
    BoundSymbol del;
    del.sym = &prims::delSymbol();
    del.args = std::move(dead);
    out.bsyms.push_back(std::move(del));
  }
  return out;
}

}  // namespace thunder
