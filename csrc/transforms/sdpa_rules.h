// The grad rule of ltorch.scaled_dot_product_attention through fused attention kernels.
#pragma once

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

/// Attention masks that are the causal pattern become `is_causal=True`: each
/// ltorch.scaled_dot_product_attention call whose `attn_mask` is a boolean tensor computed from
/// positions alone (iotas, additions of constants, broadcasts and one comparison: what
/// transformers' mask functions trace to when the program is compiled) and equal to
/// `key position <= query position` over a square [..., T, T] drops the mask and sets
/// is_causal. The values are the same; the fused kernels then skip the masked blocks instead of
/// reading a T x T bias. Calls whose masks depend on an input (padding) are left as they are.
/// Returns nothing when no call changes.
std::optional<Trace> sdpaCausalMasks(const Trace& trace);

}  // namespace thunder
