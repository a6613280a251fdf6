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

/// Rewrites `ltorch.sum(w, dims, keepdim)` where `w` is a widening of a 16-bit float tensor `x` to
/// float32 (one conversion call) as `ltorch.sum(x, dims, keepdim, dtype=float32)`: the same prims
/// (the conversion, then the sum), but what is stored between kernels is `x`. The autodiff widens
/// a bfloat16 gradient for a bias that was added in float32 (Swin's relative position bias, the
/// softmax's gradient of [B * windows, heads, 49, 49]); a kernel then stored the float32 copy
/// beside the bfloat16 one for the sum alone, which ATen runs (it keeps dims no kernel form takes).
/// Only where sums are all that read the widening (else a kernel reads it, and takes the sum as a
/// column output). Returns nothing when no sum matches.
std::optional<Trace> sumsOfWidenedValues(const Trace& trace);

}  // namespace thunder
