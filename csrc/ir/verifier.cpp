#include "ir/verifier.h"

#include <unordered_map>

#include "ir/error.h"

namespace thunder {

void verify(const Trace& trace) {
  std::unordered_map<std::string, const TensorProxy*> defined;
  std::unordered_map<std::string, bool> deleted;
  auto define = [&](const TensorPtr& t, const std::string& where) {
    THUNDER_INTERNAL(!defined.count(t->name), "verifier: ", t->name, " is defined twice (", where,
                     ") in trace '", trace.provenance, "'");
    defined[t->name] = t.get();
  };
  auto use = [&](const TensorPtr& t, const std::string& where) {
    auto it = defined.find(t->name);
    THUNDER_INTERNAL(it != defined.end(), "verifier: ", t->name, " is used before it is defined (",
                     where, ") in trace '", trace.provenance, "'");
    THUNDER_INTERNAL(it->second == t.get() || it->second->shape == t->shape,
                     "verifier: two different proxies are named ", t->name);
    THUNDER_INTERNAL(!deleted[t->name], "verifier: ", t->name, " is used after del (", where, ")");
  };
  for (const TensorPtr& t : trace.inputs) define(t, "input");
  for (const BoundSymbol& b : trace.bsyms) {
    const std::string where = b.sym->id();
    for (const TensorPtr& t : b.inputTensors()) use(t, where);
    if (b.sym->hasTag(kDel)) {
      for (const TensorPtr& t : b.inputTensors()) deleted[t->name] = true;
      continue;
    }
    for (const TensorPtr& t : b.outputTensors()) {
      // An output that is also an input passes its argument through (a no-op call).
      bool passthrough = false;
      for (const TensorPtr& in : b.inputTensors()) passthrough |= in == t;
      if (!passthrough) define(t, where);
    }
  }
  std::vector<TensorPtr> outs;
  trace.output.collectTensors(outs);
  for (const TensorPtr& t : outs) use(t, "return");
}

}  // namespace thunder
