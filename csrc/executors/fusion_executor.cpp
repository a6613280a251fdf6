#include "executors/fusion_executor.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

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
  // Regions are lowered while the partition is chosen (a region that cannot be lowered is not
  // fused) and compiled once it is final: the partition tries merges and recomputations whose
  // regions it may drop. A placeholder symbol stands for each lowered region until then.
  struct Lowered {
    codegen::KernelProgram prog;
    Device dev;
  };
  std::unordered_map<const Symbol*, Lowered> lowered;
  std::unordered_set<int> noCompiler;  // device types whose compiler is missing (NVRTC, a C++ compiler)
  auto fuse = [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
    if (!worthFusing(r)) return std::nullopt;
    Device dev = r.prims.front().outputTensors().front()->device;
    if (dev.type == DeviceType::CPU && !cpu_) return std::nullopt;
    if (noCompiler.count(static_cast<int>(dev.type))) return std::nullopt;
    codegen::KernelProgram prog;
    std::string whyNot;
    auto t0 = Clock::now();
    bool ok = codegen::lowerRegion("fusion", r.prims, r.inputs, r.outputs, prog, whyNot);
    lowering += since(t0);
    if (!ok) {
      static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
      if (debug) std::fprintf(stderr, "fuser: a region of %zu prims is not fused: %s\n", r.prims.size(), whyNot.c_str());
      return std::nullopt;
    }
    auto placeholder = std::make_shared<Symbol>();
    placeholder->name = "fusion";
    placeholder->executor = Executor::name();
    // (a dropped placeholder's address may come back: the newest program wins)
    lowered.insert_or_assign(placeholder.get(), Lowered{std::move(prog), dev});
    BoundSymbol b;
    b.sym = placeholder.get();
    b.owner = std::move(placeholder);
    for (const TensorPtr& t : r.inputs) b.args.push_back(Value(t));
    std::vector<Value> outs;
    for (const TensorPtr& t : r.outputs) outs.push_back(Value(t));
    b.output = Value::list(std::move(outs));
    b.subsymbols = r.prims;
    return b;
  };
  // Compiles the final regions, numbered in program order; false if a device has no compiler.
  int counter = 0;
  auto compileAll = [&](Trace& out) {
    counter = 0;
    std::vector<BoundSymbol> bsyms;
    bsyms.reserve(out.bsyms.size());
    for (BoundSymbol& b : out.bsyms) {
      auto it = lowered.find(b.sym);
      if (it == lowered.end()) {
        bsyms.push_back(std::move(b));
        continue;
      }
      Lowered& l = it->second;
      l.prog.name = std::string(l.dev.type == DeviceType::CUDA ? "cudaFusion" : "cpuFusion") + std::to_string(counter);
      std::vector<TensorPtr> inputs;
      for (const Value& v : b.args) inputs.push_back(v.toTensor());
      auto t0 = Clock::now();
      std::shared_ptr<const Symbol> sym = compiler_(l.prog, l.dev, inputs, Executor::name());
      compiling += since(t0);
      if (!sym) {
        noCompiler.insert(static_cast<int>(l.dev.type));
        return false;
      }
      ++counter;
      b.sym = sym.get();
      b.owner = std::move(sym);
      bsyms.push_back(std::move(b));
    }
    out.bsyms = std::move(bsyms);
    return true;
  };
  Trace out = fusionPartition(trace, codegen::isFusiblePrim, fuse, codegen::isColumnSum, codegen::isUnrolledSum);
  // A device without a compiler: partition again, leaving its regions to the other executors.
  while (!compileAll(out))
    out = fusionPartition(trace, codegen::isFusiblePrim, fuse, codegen::isColumnSum, codegen::isUnrolledSum);
  static const bool timing = std::getenv("THUNDER_DEBUG_TIMING") != nullptr;
  if (timing)
    std::fprintf(stderr, "timing: %s fusion pass %.1f ms: %d kernels, lowering %.1f ms, compile requests %.1f ms\n",
                 Executor::name().c_str(), since(start), counter, lowering, compiling);
  return out;
}

}  // namespace thunder
