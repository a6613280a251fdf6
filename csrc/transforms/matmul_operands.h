// Batched matmul operands that eager's matmul would copy, made contiguous once, where a fusion can
// write them. ATen's matmul folds a [..., M, K] operand's batch dims into one (a reshape) before its
// bmm or mm: a view whose batch dims do not merge (attention's q, k and v cut from one qkv
// projection, [B, N, 3, H, D] permuted to [B, H, N, D]; their gradients read back the same way) is
// copied inside each matmul that reads it. Swin-T's training step made 119 such copies, 2.7 ms of
// 23 ms of kernels, and copied some tensors twice (a gradient that two matmuls read).
#pragma once

#include <optional>
#include <unordered_set>

#include "ir/trace.h"

namespace thunder {

/// Rewrites each `ltorch.matmul` whose operand (rank >= 3, no batch broadcast) would be copied by
/// eager's fold of its batch dims (per the operand's traced strides) to read `contiguous(x)`
/// instead, made once per tensor and placed before the first matmul that reads it; an operand
/// that is a transpose of its last two dims is made contiguous before the transpose (the matmul
/// reads the transposed view, as cuBLAS does without a copy). The fuser then takes the copy into
/// the kernel that computes or reads x (q's scaling writes q, k and v in one pass); where none
/// does, it is one ATen copy instead of one per matmul. A copied tensor the trace makes takes the
/// copy's place for every reader, and its proxy becomes contiguous; so does a forward's saved value
/// in the backward, which shares the proxy: the pass first refreshes the strides of views of the
/// trace's inputs (refreshViewStrides). THUNDER_MATMUL_OPERANDS=0 turns it off.
std::optional<Trace> contiguousMatmulOperands(const Trace& trace);

/// Rewrites `linear(permute(s), w, b)`, where the permute keeps the last dim last and `s` is
/// contiguous, to `permute(linear(s, w, b))`: a linear is the same map of every row, so it runs on
/// the rows as they lie. ATen's linear copies a non-contiguous input of rank >= 3 and then adds the
/// bias in a kernel of its own (a strided one): nn.MultiheadAttention with batch_first=True projects
/// `query.transpose(0, 1)`, which cost torchvision's ViT-B/16 a copy and an 85 us bias add per
/// layer at B 64. The linear's output becomes the permuted view (its proxy's strides say so, and
/// its views' are refreshed); outputs of the trace are left as they are, as eager returns them
/// contiguous. THUNDER_LINEAR_PERMUTES=0 turns it off.
std::optional<Trace> linearsBeforePermutes(const Trace& trace);

/// Recomputes the strides of views (calls made of transposes, reshapes, squeezes, slices and
/// broadcasts alone) of the tensors in `changed`, whose strides a pass changed, and of views of
/// those, in program order, as the prims' meta functions compute them.
void refreshViewStrides(const Trace& trace, std::unordered_set<const TensorProxy*> changed);

}  // namespace thunder
