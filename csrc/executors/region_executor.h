// Region executors: fusion executors that hand each region of the fusion partition to a compiler
// of their own (torch.compile for the torchcompile executor) as a program of torch-executor
// calls, instead of generating a kernel as the fuser does. The partition is the fuser's
// (transforms/fusion_partition.h), with the executor's own predicate for what it can take.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "executors/executor.h"

namespace thunder {

/// Compiles one region's program (a trace named e.g. "TorchCompile0" whose calls the torch
/// executor has claimed; inputs the region's inputs, output a tuple of its outputs), which runs
/// on `device`, into an executor symbol with a kernel; nullptr declines the region (its calls stay
/// as they were). The calls of the symbol own it (BoundSymbol::owner).
using RegionCompiler = std::function<std::shared_ptr<const Symbol>(const Trace& program, const Device& device)>;

/// A fusion executor over the regions of prims (composite calls flattened) that the torch
/// executor can run, except random and effectful ones. Each region worth fusing (worthFusing)
/// becomes one call printed as `[t2, t5] = TorchCompile0(t0, t1)` (prefix "TorchCompile"), its
/// prims kept as nested comments.
class RegionExecutor : public Executor {
 public:
  RegionExecutor(std::string name, std::string version, std::string prefix, RegionCompiler compiler)
      : Executor(std::move(name), std::move(version)),
        prefix_(std::move(prefix)),
        compiler_(std::move(compiler)) {}
  bool isFusion() const override { return true; }
  Trace fusionPass(const Trace& trace) const override;

 private:
  std::string prefix_;
  RegionCompiler compiler_;
};

}  // namespace thunder
