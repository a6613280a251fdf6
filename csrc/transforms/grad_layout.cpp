#include "transforms/grad_layout.h"

#include <unordered_map>
#include <unordered_set>

#include "ops/ltorch.h"
#include "transforms/dce.h"
#include "transforms/rewrites.h"

namespace thunder {
namespace {

/// The source of a 2-D transpose (ltorch.transpose, ltorch.permute, ltorch.t, prims.transpose),
/// or null.
TensorPtr transposed(const BoundSymbol& b) {
  if (b.args.empty() || !b.args[0].isTensor() || !b.output.isTensor() || b.args[0].tensor().ndim() != 2 ||
      b.output.tensor().ndim() != 2)
    return nullptr;
  const std::string& m = b.sym->module;
  const std::string& n = b.sym->name;
  bool swaps = false;
  if ((m == "ltorch" && n == "permute") || (m == "prims" && n == "transpose"))
    swaps = b.args.size() >= 2 && (b.args[1].isSequence() || b.args[1].isInt()) &&
            b.args[1].toInts() == std::vector<int64_t>{1, 0};
  else if (m == "ltorch" && n == "transpose" && b.args.size() >= 3 && b.args[1].isInt() && b.args[2].isInt())
    swaps = ((b.args[1].toInt() + 2) % 2) != ((b.args[2].toInt() + 2) % 2);
  else if (m == "ltorch" && n == "t")
    swaps = true;
  return swaps ? b.args[0].toTensor() : nullptr;
}

bool matmul2d(const BoundSymbol& b) {
  return b.sym->module == "ltorch" && b.sym->name == "matmul" && b.args.size() == 2 && b.args[0].isTensor() &&
         b.args[1].isTensor() && b.args[0].tensor().ndim() == 2 && b.args[1].tensor().ndim() == 2 && b.output.isTensor();
}

}  // namespace

std::optional<Trace> gradientsInTheirLayout(const Trace& trace) {
  std::vector<TensorPtr> outs;
  trace.output.collectTensors(outs);
  std::unordered_map<const TensorProxy*, size_t> producer, reads;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    for (const TensorPtr& t : trace.bsyms[i].inputTensors()) ++reads[t.get()];
    for (const TensorPtr& t : trace.bsyms[i].outputTensors()) producer[t.get()] = i;
  }
  std::unordered_set<const TensorProxy*> returned;
  for (const TensorPtr& t : outs) returned.insert(t.get());
  // An operand's transpose: the source of a transpose that made it, or a new transpose.
  auto flipped = [&](const Value& v) -> Value {
    auto p = producer.find(v.toTensor().get());
    if (p != producer.end())
      if (TensorPtr src = transposed(trace.bsyms[p->second])) return Value(src);
    return ltorch::op("transpose", {v, Value(int64_t{0}), Value(int64_t{1})});
  };
  // Each returned transpose of a product only it reads, by position: the product of the flips.
  std::unordered_map<size_t, std::function<Value()>> replace;
  for (const TensorPtr& t : outs) {
    auto p = producer.find(t.get());
    if (p == producer.end() || replace.count(p->second)) continue;
    TensorPtr m = transposed(trace.bsyms[p->second]);
    if (!m) continue;
    auto q = producer.find(m.get());
    if (q == producer.end() || !matmul2d(trace.bsyms[q->second]) || reads[m.get()] != 1 || returned.count(m.get()))
      continue;
    const BoundSymbol& mm = trace.bsyms[q->second];
    replace[p->second] = [&mm, &flipped] { return ltorch::op("matmul", {flipped(mm.args[1]), flipped(mm.args[0])}); };
  }
  if (replace.empty()) return std::nullopt;
  return dce(replaceCalls(trace, replace, "gradients in their layout"));
}

}  // namespace thunder
