"""Fused scaled dot product attention, as printed traces call it.

Training traces differentiate torch.nn.functional.scaled_dot_product_attention with fused
kernels when one applies: the forward keeps the output and the logsumexp, and the backward
recomputes the attention from q, k, v instead of reading the T x T probabilities. `backend` names
the ATen kernel: "flash_cpu" (_scaled_dot_product_flash_attention_for_cpu), "flash"
(_scaled_dot_product_flash_attention, CUDA) or "efficient" (_scaled_dot_product_efficient_attention,
CUDA). The C++ runtime makes the same calls. With dropout_p > 0 (CUDA kernels) the forward also
returns the kernel's random state, which the backward takes to drop the same elements.
"""

import torch

__all__ = ["fused_attention_forward", "fused_attention_backward"]

_aten = torch.ops.aten


def _unused_rng_state():
    return torch.empty((), dtype=torch.long)


def dense_last_dim_keeping_broadcast(t):
    """`t` dense along its last dim, its broadcast dims (stride 0) kept broadcast: only the distinct
    elements are copied (a bias written in a permuted order, T5's position bias, expanded over the
    batch)."""
    if t.dim() == 0 or t.stride(-1) == 1:
        return t
    base = t
    for d in range(t.dim()):
        if t.stride(d) == 0 and t.shape[d] > 1:
            base = base.narrow(d, 0, 1)
    return base.contiguous().expand(t.shape)


def _bias(attn_mask, query, key):
    # The memory-efficient kernels read the bias as (B, H, L, S) with strides in multiples of 16.
    if attn_mask is None:
        return None
    s = attn_mask.shape[-1]
    attn_mask = dense_last_dim_keeping_broadcast(attn_mask)
    if any(st % 16 for st in attn_mask.stride()[:-1]):
        attn_mask = torch.nn.functional.pad(attn_mask, (0, (16 - s % 16) % 16))[..., :s]
    return attn_mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])


def fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend, dropout_p=0.0):
    """(output, logsumexp) of attention over (B, H, L, E) query and (B, H, S, E) key and value,
    and with dropout the kernel's random state (seed, offset)."""
    if backend == "flash_cpu":
        out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
        return out, lse
    if backend == "flash":
        r = _aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)
        return (r[0], r[1]) if dropout_p == 0.0 else (r[0], r[1], r[6], r[7])
    if backend == "efficient":
        r = _aten._scaled_dot_product_efficient_attention(query, key, value, _bias(attn_mask, query, key), True,
                                                          dropout_p, is_causal, scale=scale)
        return (r[0], r[1]) if dropout_p == 0.0 else tuple(r)
    raise ValueError(f"sdpaex.fused_attention_forward: no fused kernel named {backend!r}")


def fused_attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask, is_causal, scale, backend,
                             dropout_p=0.0, rng_seed=None, rng_offset=None, mask_grad=False):
    """(grad_query, grad_key, grad_value) from the forward's output and logsumexp; with mask_grad
    ("efficient") also the mask's gradient at the attention's shape (B, H, L, S)."""
    seed = _unused_rng_state() if rng_seed is None else rng_seed
    offset = _unused_rng_state() if rng_offset is None else rng_offset
    if backend == "flash_cpu":
        return tuple(_aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key, value, out, logsumexp, 0.0, is_causal, attn_mask=attn_mask, scale=scale))
    if backend == "flash":
        return tuple(_aten._scaled_dot_product_flash_attention_backward(
            grad_out, query, key, value, out, logsumexp, None, None, query.shape[2], key.shape[2], dropout_p,
            is_causal, seed, offset, scale=scale))
    if backend == "efficient":
        r = _aten._scaled_dot_product_efficient_attention_backward(
            grad_out, query, key, value, _bias(attn_mask, query, key), out, logsumexp, seed, offset, dropout_p,
            [True, True, True, mask_grad], is_causal, scale=scale)
        return tuple(r) if mask_grad else (r[0], r[1], r[2])
    raise ValueError(f"sdpaex.fused_attention_backward: no fused kernel named {backend!r}")
