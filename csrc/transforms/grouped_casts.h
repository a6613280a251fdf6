// Grouped casts: runs of dtype conversions the torch executor would run one by one, as one call.
#pragma once

#include <optional>
#include <vector>

#include "executors/executor.h"
#include "ir/trace.h"

namespace thunder {

/// Under autocast a training step converts every parameter a matmul reads to the half type (in the
/// forward, and again in the backward where remat recomputes them) and every such parameter's
/// gradient back to float32: one small ATen launch each, 400 in BERT-base's step, whose host time
/// (not the GPU's) bounds the step. This pass, run on a claimed trace, replaces runs of the torch
/// executor's lone conversions (`convert_element_type`, `Tensor.to(dtype)`) of one source and one
/// target floating dtype on one device by one `prims.convert_element_types` call, which the torch
/// executor runs as a multi-tensor copy:
/// - conversions of values that exist before the run's first conversion (parameters) move up to
///   it ("hoisted");
/// - conversions whose result only the trace returns (gradients) move down to the run's last one
///   ("sunk");
/// each run holding at most 64 MiB (THUNDER_GROUP_CASTS_BYTES) of the values whose lifetimes it
/// lengthens (the hoisted results, the sunk inputs). No conversion moves across a call that may write a tensor (a
/// `copy_` write-back, an in-place form, a call tagged kDontDce). Applies to CUDA tensors; the
/// environment variable THUNDER_GROUP_CASTS=0 turns it off, =1 applies it on every device (tests).
/// Returns nothing where no run of two or more conversions exists.
std::optional<Trace> groupCasts(const Trace& trace, const std::vector<Executor*>& executors);

}  // namespace thunder
