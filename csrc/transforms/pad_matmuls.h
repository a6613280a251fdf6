// Linear layers whose output rows are not 16-byte aligned get a padded weight. cuBLAS picks its
// fast kernels only when every matrix's leading dimension is a multiple of 16 bytes; a vocabulary
// projection of 50257 (GPT-2) or 30522 (BERT) columns in bfloat16 runs an unaligned kernel 4-5x
// slower, forward and in both backward matmuls. With the weight's rows padded with zeros to the
// next multiple of 8, the matmul writes rows of aligned length and the result is a slice of them;
// its gradient arrives padded the same way, so the backward's matmuls are aligned too.
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Rewrites each `ltorch.linear(x, w, bias)` on CUDA in bfloat16 or float16 whose weight has a
/// row count N not a multiple of 8 (and a column count K that is), whose input's rows are
/// contiguous, and whose matmul is large (M * N * K >= 2^30, so that the padding's copy of the
/// weight is small beside it), into
///   wp = pad(w, rows to N'), bp = pad(bias, to N'), yp = linear(x, wp, bp), y = yp[..., :N]
/// with N' the next multiple of 8. The values are the same: the padded rows are zeros and are cut
/// off. y keeps yp's strides (rows N' apart), returned too (torch.compile's kernels show no copy
/// either): on an H200 GPT-2's [8192, 768] x [768, 50257] projection takes 6.6 ms unaligned,
/// 0.91 ms padded and 1.8 ms padded and copied to eager's contiguous layout.
/// Where only a cross-entropy reads y (class-index targets, no class weights, no label smoothing;
/// through reshapes that keep the last dim, such as `view(-1, V)`), the bias is padded with -inf
/// instead and the cross-entropy reads yp's rows: a class of logit -inf adds exp(-inf) = 0 to a
/// row's sum and gets a gradient of exactly 0, so the loss and the gradient are the same, and
/// neither a copy of the logits nor a padded copy of their gradient is made (each a pass over
/// GPT-2's 0.8 GB logits).
/// THUNDER_PAD_MATMULS=0 turns the rewrite off; =all applies it on every device and floating
/// dtype at any size (for tests). Returns nothing when no call matches.
std::optional<Trace> padMatmuls(const Trace& trace);

}  // namespace thunder
