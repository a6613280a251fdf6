// The grad rule of ltorch.scaled_dot_product_attention through fused attention kernels.
#pragma once

#include <functional>
#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Registers the rule: when a fused kernel applies (sdpa::chooseBackend), the forward is one
/// sdpaex.fused_attention_forward call and the backward one sdpaex.fused_attention_backward call,
/// which reads only q, k, v, the output and the logsumexp; other calls are differentiated through
/// the decomposition. Called by registerGradRules.
void registerSdpaGradRule();

/// Boolean attention masks become additive ones, once per mask: each
/// ltorch.scaled_dot_product_attention call with a bool `attn_mask` reads `where(mask, 0, -inf)`
/// in the query's dtype instead, made before the first call that reads that mask and shared by
/// the later ones (ATen converts a bool mask the same way inside every call: a decoder's layers
/// each paid three kernels for it). The values the calls compute are unchanged. Returns nothing
/// when no call has a bool mask.
std::optional<Trace> sdpaMasksToBias(const Trace& trace);

/// Runs a trace that has no inputs and returns one 0-dim tensor, at compile time; gives its value,
/// or nothing when it cannot run it (pipeline.h's setConstantEvaluator supplies one).
using ConstantEvaluator = std::function<std::optional<double>(const Trace&)>;

/// Attention masks that are the causal pattern become `is_causal=True`: each
/// ltorch.scaled_dot_product_attention call over a square [..., T, T] whose `attn_mask` is
/// `key position <= query position` drops the mask and sets is_causal. The values are the same;
/// the fused kernels then skip the masked blocks instead of reading a T x T bias. A mask is known
/// causal in one of two ways:
/// - read from its calls: a boolean tensor computed from positions alone (iotas, additions of
///   constants, broadcasts and one comparison);
/// - computed, with `evaluate`: a mask (boolean, or additive 0 / -inf) that reads no input of the
///   trace (its calls are creations such as iota and full, pure torch-language calls and
///   `tensor[index tensors]`; nothing random, nothing symbolic) is compared with the causal
///   pattern once, at compile time. transformers' masks are this kind: they AND the causal
///   pattern with a packed-sequence test over position ids made by iota and cumsum, true
///   everywhere when the positions are the trace's own. The trace is specialized on its sizes, so
///   what the comparison found holds at every call the trace serves.
/// A computed mask that masks nothing (true everywhere, or 0 everywhere: transformers' mask of a
/// batch without padding) is dropped, whatever the call's shapes. Calls whose masks depend on an
/// input (padding) are left as they are. Returns nothing when no call changes.
std::optional<Trace> sdpaCausalMasks(const Trace& trace, const ConstantEvaluator& evaluate = {});

/// `torch.where(cond, a, b)` and `a.masked_fill(cond, v)` whose condition reads no input of the
/// trace (what ConstantCalls of sdpaCausalMasks computes) and is true everywhere or nowhere: the
/// call becomes the branch it always takes (converted and broadcast to the call's result). The
/// condition is counted once at compile time with `evaluate`; the trace is specialized on its
/// sizes, so the count holds at every call it serves. T5's encoder builds its attention bias as
/// `where(positions >= 0, position_bias, min)`: a [B, H, T, T] bias written, read, and its
/// gradient masked again in the backward, where the position bias itself is the value. Calls
/// whose result the trace returns are left as they are (the branch would alias it).
std::optional<Trace> foldConstantConditions(const Trace& trace, const ConstantEvaluator& evaluate);

}  // namespace thunder
