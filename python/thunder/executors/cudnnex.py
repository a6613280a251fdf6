"""The cudnn executor: scaled dot product attention through cuDNN's fused kernels, forward and
backward (ATen's _scaled_dot_product_cudnn_attention and its backward).

    from thunder.executors.cudnnex import cudnn_ex
    thunder.jit(fn, executors=[cudnn_ex])     # or executors=["cudnn"]

It claims `ltorch.scaled_dot_product_attention` for 4-D bfloat16 / float16 q, k, v on CUDA with one
head count and one head dim (a multiple of 8, at most 128), an additive mask of q's dtype needing no
gradient (key length a multiple of 8) or none, any dropout and, when causal, square attention;
otherwise it declines (THUNDER_DEBUG_CLAIMS=1 says why) and thunder's own choice (ATen's flash or
memory-efficient kernels, or the decomposition) runs. Traces print

    (t0, t1) = cudnn_sdpa_fwd(q, k, v, True, None)
    (t2, t3, t4) = cudnn_sdpa_bwd(g, q, k, v, t0, t1, True, None)

and `t0 = cudnn_sdpa(q, k, v, True, None)` where no gradient is taken. t1 is the float32
logsumexp (B, H, L, 1) that the backward reads instead of the probabilities; with a mask or
dropout both take them as trailing arguments, and with dropout the forward also returns the
kernel's random state (seed, offset), which the backward reads to drop the same elements.
THUNDER_CUDNN_TRAINING=0 leaves training (attention whose gradient is taken) to the other kernels.

The backward runs on a thread of its own (`_on_own_thread`; the C++ kernel likewise): ATen caches
cuDNN's backward graphs per thread keyed on q, k and v's layouts but not on the output gradient's,
which a graph also fixes, and eager's backward hands cuDNN the gradient in other layouts than
thunder's in the same thread (autograd's). Sharing the cache, each poisoned the other's graphs:
gradients 100% off inside Whisper, SD3, Flux and DeepSeek-V3 after an eager step (H200, torch
2.11), and eager's after thunder's in a plain-PyTorch reproduction.

Eager picks this kernel for BERT's and GPT-2's masked attention with dropout on an H200; ATen's
memory-efficient kernel took 17.4 ms of a GPT-2 step where this one takes about 3.
On an H100, eager PyTorch picks this kernel for causal bf16 attention; it ran the [4, 32, 2048, 128]
forward+backward in 1.15 ms against 2.12 ms for ATen's flash kernel.
"""

from __future__ import annotations

import os

import torch

import thunder.torch as ltorch
from thunder import _C
from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import has_symbolic_size
from thunder.core.transforms import get_grad, put_grads
from thunder.extend import OperatorExecutor, declined, register_executor

__all__ = ["cudnn_ex", "cudnn_sdpa_fwd", "cudnn_sdpa_bwd", "cudnn_sdpa", "cudnn_available"]


def cudnn_available() -> bool:
    """Whether this PyTorch has cuDNN and a GPU to run it."""
    return torch.cuda.is_available() and torch.backends.cudnn.is_available()


cudnn_ex = OperatorExecutor("cudnn", version=torch.backends.cudnn.version() if cudnn_available() else None)
register_executor(cudnn_ex)

_SYMBOL = "ltorch.scaled_dot_product_attention"
_aten = torch.ops.aten


def _fwd_meta(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0):
    b, h, length, _ = query.shape
    out = TensorProxy(like=query, shape=(b, h, length, value.shape[-1]))
    logsumexp = TensorProxy(like=query, shape=(b, h, length, 1), dtype=dtypes.float32)
    if dropout_p == 0.0:
        return out, logsumexp
    # With dropout the kernel's random state (philox seed and offset), read by the backward.
    seed = TensorProxy(like=query, shape=(), dtype=dtypes.int64)
    offset = TensorProxy(like=query, shape=(), dtype=dtypes.int64)
    return out, logsumexp, seed, offset


def _dense(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _bias(attn_mask, query, key):
    # An additive mask broadcast to (B, H, L, S) (stride 0 along broadcast dims).
    if attn_mask is None:
        return None
    # Dense along the key dim, as q, k and v are passed (a bias a kernel wrote in a permuted order,
    # like T5's position bias gathered as [L, S, H] and permuted, has another stride there), its
    # broadcast dims kept broadcast.
    from thunder.executors.sdpaex import dense_last_dim_keeping_broadcast

    return dense_last_dim_keeping_broadcast(attn_mask).expand(query.shape[0], query.shape[1], query.shape[2],
                                                              key.shape[2])


def _fwd_impl(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0):
    r = _aten._scaled_dot_product_cudnn_attention(
        _dense(query), _dense(key), _dense(value), _bias(attn_mask, query, key), True, dropout_p, is_causal, False,
        scale=scale
    )
    if dropout_p == 0.0:
        return r[0], r[1]
    return r[0], r[1], r[6], r[7]


def _bwd_meta(grad, query, key, value, out, logsumexp, is_causal, scale, attn_mask=None, dropout_p=0.0,
              rng_seed=None, rng_offset=None):
    return TensorProxy(like=query), TensorProxy(like=key), TensorProxy(like=value)


_NO_DROPOUT_STATE: dict = {}


def _no_dropout_state(device):
    # No dropout: the kernel reads no random state, but the signature takes a seed and an offset
    # (made once per device: two fills and two allocations per call otherwise).
    state = _NO_DROPOUT_STATE.get(device)
    if state is None:
        state = _NO_DROPOUT_STATE[device] = (torch.zeros((), dtype=torch.int64, device=device),
                                             torch.zeros((), dtype=torch.int64, device=device))
    return state


def _same_layout(a, b) -> bool:
    return all(sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()) if n > 1)


def _grad_like_out(grad, out):
    """The output gradient in the output's memory layout, the one every backward graph on thunder's
    thread was built for (`_on_own_thread`). The gradient usually arrives as the transpose of the output projection's
    [B, T, H*D] gradient while the output is [B, H, T, D]: the copy moves the head dim's 16-bit
    values four at a time (as 8-byte words; ATen's copy of a permuted bfloat16 tensor moves one
    element per load)."""
    if _same_layout(grad, out):
        return grad
    dst = torch.empty_like(out)
    if grad.element_size() == 2 and grad.stride(-1) == 1 and grad.shape[-1] % 4 == 0 and out.stride(-1) == 1:
        try:
            dst.view(torch.float64).copy_(grad.view(torch.float64))
            return dst
        except RuntimeError:  # strides or offset not in whole words
            pass
    return dst.copy_(grad)


_OWN_THREAD: list = []  # [(pid, executor)]: a child process after fork starts its own


def _on_own_thread(fn, device):
    """fn() run on thunder's thread for cuDNN's attention backward, on the caller's CUDA stream.
    ATen's cache of cuDNN backward graphs is per thread and keyed on q, k and v's layouts only; a
    graph also fixes the output gradient's layout, which thunder always passes as the output's (and
    ATen allocates the output after q), so that on this thread every cached graph fits every call
    that finds it, whatever eager's backward cached in autograd's thread (the C++ kernel's
    `OwnThread` says more). Under a dispatch mode fn runs here (the mode is this thread's)."""
    if torch._C._len_torch_dispatch_stack() > 0:
        return fn()
    import concurrent.futures

    if not _OWN_THREAD or _OWN_THREAD[0][0] != os.getpid():
        _OWN_THREAD[:] = [(os.getpid(), concurrent.futures.ThreadPoolExecutor(1, "thunder-cudnn-backward"))]
    stream = torch.cuda.current_stream(device)

    def task():
        with torch.cuda.device(device), torch.cuda.stream(stream), torch.no_grad():
            return fn()

    return _OWN_THREAD[0][1].submit(task).result()


def _bwd_impl(grad, query, key, value, out, logsumexp, is_causal, scale, attn_mask=None, dropout_p=0.0,
              rng_seed=None, rng_offset=None):
    seed, offset = (rng_seed, rng_offset) if dropout_p != 0.0 else _no_dropout_state(query.device)
    args = (_grad_like_out(grad, out), _dense(query), _dense(key), _dense(value), out, logsumexp, seed, offset,
            _bias(attn_mask, query, key), None, None, query.shape[2], key.shape[2], dropout_p, is_causal)
    dq, dk, dv = _on_own_thread(
        lambda: _aten._scaled_dot_product_cudnn_attention_backward(*args, scale=scale), query.device)
    return dq, dk, dv


def _infer_meta(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0):
    b, h, length, _ = query.shape
    return TensorProxy(like=query, shape=(b, h, length, value.shape[-1]))


def _infer_impl(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0):
    # No gradient will be taken: cuDNN computes no logsumexp.
    return _aten._scaled_dot_product_cudnn_attention(
        _dense(query), _dense(key), _dense(value), _bias(attn_mask, query, key), False, dropout_p, is_causal, False,
        scale=scale
    )[0]


cudnn_sdpa_fwd = cudnn_ex.register_operator("cudnn_sdpa_fwd", meta=_fwd_meta, fn=_fwd_impl)
cudnn_sdpa_bwd = cudnn_ex.register_operator("cudnn_sdpa_bwd", meta=_bwd_meta, fn=_bwd_impl)
cudnn_sdpa = cudnn_ex.register_operator("cudnn_sdpa", meta=_infer_meta, fn=_infer_impl)

# The runtime runs the three with C++ kernels doing what the functions above do (the functions run
# where a printed trace is run as Python): through Python a call cost 30-80 us of host time, which
# BERT's and GPT-2's inference (5 ms steps) felt. THUNDER_CUDNN_NATIVE=0 keeps the functions.
# _NATIVE names the operators that run so.
_NATIVE = frozenset(
    op.name for op in (cudnn_sdpa_fwd, cudnn_sdpa_bwd, cudnn_sdpa)
    if os.environ.get("THUNDER_CUDNN_NATIVE", "1") != "0" and _C.extend_use_native_kernel(op, op.name)
)


def _checker(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> bool:
    def no(reason):
        return declined(cudnn_ex, _SYMBOL, reason)

    if not cudnn_available():
        return no("cuDNN or a CUDA GPU is not available")
    qkv = (query, key, value)
    if not all(isinstance(t, TensorProxy) for t in qkv):
        return no("query, key and value must be tensors")
    if any(t.device.devicetype != DeviceType.CUDA for t in qkv):
        return no(f"its kernels run on CUDA, but the query is on {query.device}")
    if any(t.dtype not in (dtypes.bfloat16, dtypes.float16) or t.dtype != query.dtype for t in qkv):
        return no(f"q, k, v of dtypes {query.dtype}, {key.dtype}, {value.dtype} (one of bfloat16, float16)")
    if has_symbolic_size(*qkv):
        return no("its graphs take static sizes, and these vary with the trace's size symbols")
    if any(t.ndim != 4 for t in qkv):
        return no("expected 4-D (batch, heads, length, head dim) query, key and value")
    (b, h, length, e), (bk, hk, s, ek), (bv, hv, sv, ev) = query.shape, key.shape, value.shape
    if not (b == bk == bv and h == hk == hv and s == sv and e == ek == ev):
        return no(f"shapes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)} (one batch, head count "
                  "and head dim; grouped-query attention is left to the other kernels)")
    if e % 8 != 0 or e > 128:
        return no(f"head dim {e} (a multiple of 8, at most 128)")
    if length == 0 or s == 0:
        return no("empty sequences")
    if any(t.requires_grad for t in qkv) and os.environ.get("THUNDER_CUDNN_TRAINING", "1") == "0":
        return no("gradients are taken, and THUNDER_CUDNN_TRAINING=0")
    if length == 1 and s == 1:  # (cuDNN's backward: "s_q = s_kv = 1 is not supported"; MobileViT)
        return no("query and key lengths of 1")
    if attn_mask is not None:
        if not isinstance(attn_mask, TensorProxy) or attn_mask.dtype != query.dtype:
            return no("an attention mask that is not an additive one of the query's dtype")
        if attn_mask.requires_grad:
            return no("an attention mask that needs a gradient")
        if attn_mask.ndim < 2 or attn_mask.ndim > 4 or s % 8 != 0:
            return no(f"a mask of shape {tuple(attn_mask.shape)} with key length {s} (2-D to 4-D, S a multiple of 8)")
        full = (b, h, length, s)
        if any(m not in (1, f) for m, f in zip(reversed(attn_mask.shape), reversed(full))):
            return no(f"a mask of shape {tuple(attn_mask.shape)} not broadcastable to {full}")
        if is_causal:
            return no("a mask together with is_causal")
    if not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        return no(f"dropout_p {dropout_p}")
    if is_causal and length != s:
        return no(f"causal attention with query length {length} != key length {s}")
    if enable_gqa:
        return no("enable_gqa")
    if scale is not None and not isinstance(scale, (int, float)):
        return no("a scale that is not a number known when tracing")
    return True


def _execution_transform(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                         enable_gqa=False):
    if attn_mask is None and dropout_p == 0.0:
        return cudnn_sdpa(query, key, value, is_causal, scale)
    return cudnn_sdpa(query, key, value, is_causal, scale, attn_mask, dropout_p)


def _grad_transform(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    if attn_mask is None and dropout_p == 0.0:
        out, logsumexp = cudnn_sdpa_fwd(query, key, value, is_causal, scale)
        g = get_grad(out)
        dq, dk, dv = cudnn_sdpa_bwd(g, query, key, value, out, logsumexp, is_causal, scale)
    else:
        # A mask (an additive bias), dropout or both; the backward drops what the forward dropped.
        res = cudnn_sdpa_fwd(query, key, value, is_causal, scale, attn_mask, dropout_p)
        out, logsumexp = res[0], res[1]
        seed, offset = (res[2], res[3]) if dropout_p != 0.0 else (None, None)
        g = get_grad(out)
        dq, dk, dv = cudnn_sdpa_bwd(g, query, key, value, out, logsumexp, is_causal, scale, attn_mask, dropout_p,
                                    seed, offset)
    put_grads((query, key, value), (dq, dk, dv))
    return out


cudnn_ex.register_implementation(
    ltorch.scaled_dot_product_attention,
    checker=_checker,
    execution_transform=_execution_transform,
    grad_transform=_grad_transform,
)
