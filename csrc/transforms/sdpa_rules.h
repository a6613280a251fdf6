// The grad rule of ltorch.scaled_dot_product_attention through fused attention kernels.
#pragma once

namespace thunder {

/// Registers the rule: when a fused kernel applies (sdpa::chooseBackend), the forward is one
/// sdpaex.fused_attention_forward call and the backward one sdpaex.fused_attention_backward call,
/// which reads only q, k, v, the output and the logsumexp; other calls are differentiated through
/// the decomposition. Called by registerGradRules.
void registerSdpaGradRule();

}  // namespace thunder
