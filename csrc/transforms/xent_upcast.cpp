#include "transforms/xent_upcast.h"

#include <unordered_map>
#include <unordered_set>

#include "ir/error.h"
#include "ops/ltorch.h"

namespace thunder {
namespace {

/// The leaf prims of a call's decomposition (the call itself for a prim).
void leafPrims(const BoundSymbol& b, std::vector<const BoundSymbol*>& out) {
  if (b.sym->isPrim() || b.subsymbols.empty()) {
    out.push_back(&b);
    return;
  }
  for (const BoundSymbol& s : b.subsymbols) leafPrims(s, out);
}

enum class Step { Other, Reshape, Upcast };

/// What a call with one tensor input and one tensor output does to it: only reshapes it (its
/// prims are reshapes and squeezes, which keep the elements in order), only converts it from
/// bfloat16 / float16 to float32 (one conversion), or something else.
Step classify(const BoundSymbol& b) {
  std::vector<TensorPtr> ins = b.inputTensors(), outs = b.outputTensors();
  if (ins.size() != 1 || outs.size() != 1 || !b.output.isTensor()) return Step::Other;
  std::vector<const BoundSymbol*> prims;
  leafPrims(b, prims);
  if (prims.empty()) return Step::Other;
  bool reshapes = true;
  for (const BoundSymbol* p : prims) {
    const std::string& n = p->sym->name;
    reshapes &= p->sym->module == "prims" && (n == "reshape" || n == "squeeze");
  }
  if (reshapes) return Step::Reshape;
  if (prims.size() != 1 || prims[0]->sym->module != "prims" ||
      prims[0]->sym->name != "convert_element_type")
    return Step::Other;
  DType from = ins[0]->dtype, to = outs[0]->dtype;
  if ((from == DType::BFloat16 || from == DType::Float16) && to == DType::Float32)
    return Step::Upcast;
  return Step::Other;
}

}  // namespace

bool onlyReshapes(const BoundSymbol& b) { return classify(b) == Step::Reshape; }

std::optional<Trace> foldCrossEntropyUpcast(const Trace& trace) {
  const Symbol* xent = SymbolRegistry::get().find("ltorch.cross_entropy");
  if (xent == nullptr) return std::nullopt;
  // Producer (index) and number of reads of each tensor, by name; returned tensors count as read.
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, int> reads;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    for (const TensorPtr& t : b.inputTensors()) ++reads[t->name];
    for (const TensorPtr& t : b.outputTensors()) producer[t->name] = i;
  }
  std::vector<TensorPtr> returned;
  trace.output.collectTensors(returned);
  for (const TensorPtr& t : returned) ++reads[t->name];

  // Per cross-entropy call to rewrite: the low-precision logits, and the calls it makes dead.
  std::unordered_map<size_t, TensorPtr> sources;
  std::unordered_set<size_t> dead;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (b.sym != xent || b.args.empty() || !b.args[0].isTensor()) continue;
    const TensorPtr& logits = b.args[0].toTensor();
    if (logits->dtype != DType::Float32) continue;
    std::vector<size_t> chain;
    TensorPtr cur = logits, source;
    // Walk back over reshapes to the one conversion; every value on the way is read once.
    while (!source) {
      auto it = producer.find(cur->name);
      if (it == producer.end() || reads[cur->name] != 1) break;
      const BoundSymbol& p = trace.bsyms[it->second];
      Step s = classify(p);
      if (s == Step::Other) break;
      chain.push_back(it->second);
      cur = p.inputTensors().front();
      if (s == Step::Upcast) source = cur;
    }
    if (!source) continue;
    sources[i] = source;
    dead.insert(chain.begin(), chain.end());
  }
  if (sources.empty()) return std::nullopt;

  Trace out = trace.emptyCopy();
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    if (dead.count(i)) continue;
    auto it = sources.find(i);
    if (it == sources.end()) {
      out.bsyms.push_back(trace.bsyms[i]);
      continue;
    }
    const BoundSymbol& b = trace.bsyms[i];
    THUNDER_INTERNAL(b.output.isTensor(), "cross-entropy upcast: the call's output is not a tensor");
    // The new call's output is the old call's proxy, so later reads still match.
    appendTraced(out, [&] {
      const TensorProxy& logits = b.args[0].tensor();
      Value x(it->second);
      if (it->second->shape != logits.shape)
        x = ltorch::op("reshape", {x, Value::sizes(logits.symShape())});
      std::vector<Value> args = b.args;
      args[0] = x;
      return ltorch::op("cross_entropy_upcast", args);
    }, b.output.toTensor(), "cross-entropy upcast");
  }
  return out;
}

}  // namespace thunder
