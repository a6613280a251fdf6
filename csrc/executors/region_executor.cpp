#include "executors/region_executor.h"

#include "executors/fusion_executor.h"
#include "transforms/fusion_partition.h"

namespace thunder {
namespace {

/// Whether v is a tensor or a (nested) sequence of tensors, at least one.
bool onlyTensors(const Value& v) {
  if (v.isTensor()) return true;
  if (!v.isSequence() || v.items().empty()) return false;
  for (const Value& x : v.items())
    if (!onlyTensors(x)) return false;
  return true;
}

}  // namespace

Trace RegionExecutor::fusionPass(const Trace& trace) const {
  Executor* torch = ExecutorRegistry::get().find("torch");
  if (torch == nullptr) return trace;
  std::vector<Executor*> torchOnly{torch};
  auto fusible = [&](const BoundSymbol& p) {
    // Random and effectful prims keep their place and their stream of random numbers; the
    // region's program must be claimable by the torch executor.
    if (p.sym->hasTag(kRandomOp) || p.sym->hasTag(kDontDce)) return false;
    if (!onlyTensors(p.output)) return false;  // a number is not a region's output
    return torch->find(p) != nullptr;
  };
  int counter = 0;
  auto fuse = [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
    if (!worthFusing(r)) return std::nullopt;
    Trace program = trace.emptyCopy();
    program.fnName = prefix_ + std::to_string(counter);
    program.provenance = "Region " + program.fnName + " of executor '" + name() + "'";
    program.inputs = r.inputs;
    program.bsyms = r.prims;
    std::vector<Value> outs;
    for (const TensorPtr& t : r.outputs) outs.push_back(Value(t));
    program.output = Value::tuple(outs);
    Trace lowered = transformForExecution(program, torchOnly);
    lowered.fnName = program.fnName;
    lowered.provenance = program.provenance;
    std::shared_ptr<const Symbol> sym = compiler_(lowered, r.prims.front().outputTensors().front()->device);
    if (sym == nullptr) return std::nullopt;
    ++counter;
    BoundSymbol b;
    b.sym = sym.get();
    b.owner = std::move(sym);
    for (const TensorPtr& t : r.inputs) b.args.push_back(Value(t));
    b.output = Value::list(std::move(outs));
    b.subsymbols = r.prims;
    return b;
  };
  return fusionPartition(trace, fusible, fuse);
}

}  // namespace thunder
