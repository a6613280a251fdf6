// Fused scaled dot product attention: the symbols of the flash / memory-efficient attention
// kernels (forward and backward) and the rules deciding when such a kernel can run a call of
// ltorch.scaled_dot_product_attention. Training uses them (transforms/sdpa_rules.cpp) so that
// the backward keeps q, k, v, the output and the logsumexp instead of the T x T probabilities;
// the torch executor runs them through ATen (runtime/sdpa_ops.cpp).
#pragma once

#include <string>
#include <vector>

#include "ir/symbol.h"

namespace thunder::sdpa {

/// A fused attention kernel, as ATen has them.
enum class Backend {
  None,          // no fused kernel applies: the call is differentiated through its decomposition
  FlashCpu,      // at::_scaled_dot_product_flash_attention_for_cpu
  Flash,         // at::_scaled_dot_product_flash_attention (CUDA, f16/bf16)
  Efficient,     // at::_scaled_dot_product_efficient_attention (CUDA)
};

/// The name printed in traces: "flash_cpu", "flash", "efficient" ("none" for None).
std::string backendName(Backend b);
/// The backend of a name printed by backendName; a ValueError naming `op` otherwise.
Backend parseBackend(const std::string& name, const std::string& op);

/// The fused kernel that can compute (and differentiate) a call with the arguments of
/// ltorch.scaled_dot_product_attention (query, key, value, attn_mask, dropout_p, is_causal,
/// scale, enable_gqa), mirroring at::_fused_sdp_choice: 4-D floating q, k, v of one dtype
/// (float32, bfloat16, float16; float64 is left to the decomposition) on one device, one head
/// dim for q, k and v, no dropout, non-empty sequences, key heads dividing query heads
/// (enable_gqa). On CPU: the flash kernel, which also takes a mask (bool, or of q's dtype) but
/// not together with is_causal. On CUDA: flash for f16/bf16 with head dim <= 256 and a multiple
/// of 8, no mask and (when causal) square attention; else memory-efficient attention for head
/// dims that are multiples of 8 up to 256 and no mask; with a mask (f16/bf16, head dim up to 128),
/// memory-efficient attention. `maskIsDifferentiable` says whether the mask needs a gradient,
/// which only the memory-efficient backward gives (CUDA).
Backend chooseBackend(const std::vector<Value>& sdpaArgs, bool maskIsDifferentiable);

/// The rows of the logsumexp a backend keeps per (batch, head): L, or L rounded up to a multiple
/// of 32 for memory-efficient attention.
int64_t logsumexpLength(Backend b, int64_t queryLength);

/// sdpaex.fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend,
/// dropout_p=0.0) -> (output, logsumexp): q (B, H, L, E), k and v (B, H, S, E), attn_mask None or
/// broadcastable to (B, H, L, S) of q's dtype, scale a float. Output (B, H, L, E) of q's dtype,
/// logsumexp (B, H, logsumexpLength) float32. With dropout_p > 0 (CUDA kernels only) two more
/// outputs: the kernel's random state (rng_seed, rng_offset), which the backward takes.
const Symbol& forwardSymbol();
/// sdpaex.fused_attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask,
/// is_causal, scale, backend, dropout_p=0.0, rng_seed=None, rng_offset=None, mask_grad=False) ->
/// (grad_query, grad_key, grad_value) of q's, k's, v's metadata; with mask_grad (the 'efficient'
/// kernel) a fourth, the mask's gradient at the attention's shape (B, H, L, S).
const Symbol& backwardSymbol();

/// Registers the two symbols (idempotent).
void registerSdpaSymbols();

}  // namespace thunder::sdpa
