// The fusion executor: partitions a trace into regions of fusible prims and replaces each by one
// generated kernel (CUDA via NVRTC, C++ via the system compiler). This is the compile-time half;
// the runtime (csrc/runtime/fusion_runtime.cpp) compiles and launches the kernels.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "codegen/kernel_ir.h"
#include "executors/executor.h"
#include "transforms/fusion_partition.h"

namespace thunder {

/// Makes the executable symbol of a lowered region ("cudaFusion0"), with its kernel attached, or
/// nullptr. `inputs` are the fused call's arguments, in order; `executor` names the fusing
/// executor, which the symbol records so that claiming keeps the call. The calls of the symbol
/// own it (BoundSymbol::owner): the region's compiled code goes with the last trace calling it.
using FusionCompiler = std::function<std::shared_ptr<const Symbol>(const codegen::KernelProgram&, Device,
                                                   const std::vector<TensorPtr>& inputs,
                                                   const std::string& executor)>;

/// The fuser.
class FusionExecutor : public Executor {
 public:
  /// `cpu`: also fuse CPU regions (C++ kernels built by the system compiler take about a second
  /// each on a cold cache), not only CUDA ones.
  FusionExecutor(std::string name, FusionCompiler compiler, bool cpu)
      : Executor(std::move(name)), compiler_(std::move(compiler)), cpu_(cpu) {}
  bool isFusion() const override { return true; }
  /// Replaces each region worth a kernel by one bound symbol printed as
  /// `[t2, t5] = cudaFusion0(t0, t1)`, its prims kept as nested comments.
  Trace fusionPass(const Trace& trace) const override;
  /// `buf.index_copy_(dim, index, x)` (run in place by the reinplace pass) where x comes from a
  /// CUDA kernel of this executor: the kernel stores x into buf itself, at the positions index
  /// holds (a KV cache written by the RoPE kernel that computes the keys), and returns buf. Where
  /// nothing between the kernel and the update reads or writes buf, the kernel is pointwise, and
  /// index is known at the kernel (a call computing it from what is, the wrap of negative
  /// positions, moves up before the kernel).
  std::optional<Trace> fuseInplaceUpdates(const Trace& trace,
                                          const std::function<bool(const BoundSymbol&)>& inplace) const override;

 private:
  FusionCompiler compiler_;
  bool cpu_;
};

/// Whether a region is worth a kernel: it computes at least two ops (a lone shape op or a lone
/// elementwise op runs as well through the torch executor, seed 002), on one CUDA or CPU device.
bool worthFusing(const FusionRegion& region);

}  // namespace thunder
