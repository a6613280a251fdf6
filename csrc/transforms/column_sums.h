// A bias gradient summed through a reshape, summed over the reshape's source instead.
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Rewrites `ltorch.sum(r, dims)` where `r` is a reshape (ltorch.reshape or view, prims.reshape)
/// of `x`, the sum runs over every dim of `r` but the last, and `x` ends with that same last dim,
/// as `ltorch.sum(x, dims)` over every dim of `x` but the last: the same elements summed into the
/// same columns. A linear layer's backward flattens its output gradient to [N, C] for the weight
/// gradient and sums that flattened view for the bias (GPT-2's Conv1D, every `addmm`); the fuser
/// makes a column sum an output of the kernel that produces the summed value, which iterates
/// over `x`'s shape, not the flattened one, so those sums ran as ATen reductions of their own
/// (37 per GPT-2 training step). The reshape stays where something else reads it. Returns
/// nothing when no sum matches.
std::optional<Trace> columnSumsThroughReshapes(const Trace& trace);

}  // namespace thunder
