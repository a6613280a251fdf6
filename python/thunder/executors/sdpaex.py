"""Fused scaled dot product attention, as printed traces call it.

Training traces differentiate torch.nn.functional.scaled_dot_product_attention with fused
kernels when one applies: the forward keeps the output and the logsumexp, and the backward
recomputes the attention from q, k, v instead of reading the T x T probabilities. `backend` names
the ATen kernel: "flash_cpu" (_scaled_dot_product_flash_attention_for_cpu), "flash"
(_scaled_dot_product_flash_attention, CUDA) or "efficient" (_scaled_dot_product_efficient_attention,
CUDA). The C++ runtime makes the same calls; dropout is never used.
"""

import torch

__all__ = ["fused_attention_forward", "fused_attention_backward"]

_aten = torch.ops.aten


def _unused_rng_state():
    return torch.empty((), dtype=torch.long)


def fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend):
    """(output, logsumexp) of attention over (B, H, L, E) query and (B, H, S, E) key and value."""
    if backend == "flash_cpu":
        out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
        return out, lse
    if backend == "flash":
        r = _aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, False, scale=scale)
        return r[0], r[1]
    if backend == "efficient":
        r = _aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, True, 0.0, is_causal,
                                                          scale=scale)
        return r[0], r[1]
    raise ValueError(f"sdpaex.fused_attention_forward: no fused kernel named {backend!r}")


def fused_attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask, is_causal, scale, backend):
    """(grad_query, grad_key, grad_value) from the forward's output and logsumexp."""
    if backend == "flash_cpu":
        return tuple(_aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key, value, out, logsumexp, 0.0, is_causal, attn_mask=attn_mask, scale=scale))
    if backend == "flash":
        return tuple(_aten._scaled_dot_product_flash_attention_backward(
            grad_out, query, key, value, out, logsumexp, None, None, query.shape[2], key.shape[2], 0.0,
            is_causal, _unused_rng_state(), _unused_rng_state(), scale=scale))
    if backend == "efficient":
        r = _aten._scaled_dot_product_efficient_attention_backward(
            grad_out, query, key, value, attn_mask, out, logsumexp, _unused_rng_state(), _unused_rng_state(), 0.0,
            [True, True, True, False], is_causal, scale=scale)
        return r[0], r[1], r[2]
    raise ValueError(f"sdpaex.fused_attention_backward: no fused kernel named {backend!r}")
