#include "executors/fusion_executor.h"

#include <chrono>
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
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  auto start = Clock::now();
  double lowering = 0, compiling = 0;
  int counter = 0;
  auto fuse = [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
    if (!worthFusing(r)) return std::nullopt;
    Device dev = r.prims.front().outputTensors().front()->device;
    if (dev.type == DeviceType::CPU && !cpu_) return std::nullopt;
    std::string name = std::string(dev.type == DeviceType::CUDA ? "cudaFusion" : "cpuFusion") +
                       std::to_string(counter);
    codegen::KernelProgram prog;
    std::string whyNot;
    auto t0 = Clock::now();
    bool lowered = codegen::lowerRegion(name, r.prims, r.inputs, r.outputs, prog, whyNot);
    lowering += since(t0);
    if (!lowered) {
      static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
      if (debug) std::fprintf(stderr, "fuser: a region of %zu prims is not fused: %s\n", r.prims.size(), whyNot.c_str());
      return std::nullopt;
    }
    t0 = Clock::now();
    std::shared_ptr<const Symbol> sym = compiler_(prog, dev, r.inputs, Executor::name());
    compiling += since(t0);
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
  Trace out = fusionPartition(trace, codegen::isFusiblePrim, fuse, codegen::isColumnSum, codegen::isUnrolledSum);
  static const bool timing = std::getenv("THUNDER_DEBUG_TIMING") != nullptr;
  if (timing)
    std::fprintf(stderr, "timing: %s fusion pass %.1f ms: %d kernels, lowering %.1f ms, compile requests %.1f ms\n",
                 Executor::name().c_str(), since(start), counter, lowering, compiling);
  return out;
}

}  // namespace thunder
