#include "executors/fusion_executor.h"

#include <cstdio>
#include <cstdlib>

namespace thunder {

bool worthFusing(const FusionRegion& region) {
  if (region.computeOps < 2) return false;
  const Device* dev = nullptr;
  for (const BoundSymbol& p : region.prims) {
    for (const TensorPtr& t : p.outputTensors()) {
      if (t->device.type == DeviceType::Meta) return false;
      if (dev && *dev != t->device) return false;
      dev = &t->device;
    }
  }
  for (const TensorPtr& t : region.inputs)
    if (dev && t->device != *dev && t->ndim() > 0) return false;
  return dev != nullptr;
}

Trace FusionExecutor::fusionPass(const Trace& trace) const {
  int counter = 0;
  auto fuse = [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
    if (!worthFusing(r)) return std::nullopt;
    Device dev = r.prims.front().outputTensors().front()->device;
    if (dev.type == DeviceType::CPU && !cpu_) return std::nullopt;
    std::string name = std::string(dev.type == DeviceType::CUDA ? "cudaFusion" : "cpuFusion") +
                       std::to_string(counter);
    codegen::KernelProgram prog;
    std::string whyNot;
    if (!codegen::lowerRegion(name, r.prims, r.inputs, r.outputs, prog, whyNot)) {
      static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
      if (debug) std::fprintf(stderr, "fuser: a region of %zu prims is not fused: %s\n", r.prims.size(), whyNot.c_str());
      return std::nullopt;
    }
    std::shared_ptr<const Symbol> sym = compiler_(prog, dev, r.inputs, Executor::name());
    if (!sym) return std::nullopt;
    ++counter;
    BoundSymbol b;
    b.sym = sym.get();
    b.owner = std::move(sym);
    for (const TensorPtr& t : r.inputs) b.args.push_back(Value(t));
    std::vector<Value> outs;
    for (const TensorPtr& t : r.outputs) outs.push_back(Value(t));
    b.output = Value::list(std::move(outs));
    b.subsymbols = r.prims;
    return b;
  };
  Trace out = fusionPartition(trace, codegen::isFusiblePrim, fuse, codegen::isColumnSum);
  return out;
}

}  // namespace thunder
