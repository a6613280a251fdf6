"""The Triton cross-entropy executor.

    from thunder.executors.triton_crossentropy import triton_ex
    thunder.jit(fn, executors=[triton_ex])

It claims `ltorch.cross_entropy` (F.cross_entropy) for 2-D float32 / bfloat16 / float16 logits on
CUDA with class-index labels, optional class weights, reductions "none" / "mean" / "sum" and any
ignore_index (no label smoothing: apex_ex has it), and prints

    t23 = triton_crossentropy(logits, labels, weight, None, 45279, None, 'sum', 0.0)

with F.cross_entropy's arguments. One Triton program per row computes the row's log-sum-exp with a
running maximum (one read of the row); the backward, `triton_crossentropy_backward`, reads the row
again for the log-sum-exp and once more to write the gradient. This module imports without Triton
(the executor then declines every call, saying so with THUNDER_DEBUG_CLAIMS=1).
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grad
from thunder.executors.crossentropy_checks import decline_reason
from thunder.extend import OperatorExecutor, declined, register_executor

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton is optional: the executor declines without it
    triton = None

__all__ = ["triton_ex", "triton_crossentropy", "triton_crossentropy_backward", "triton_available"]

triton_ex = OperatorExecutor("triton", version=None if triton is None else triton.__version__)
register_executor(triton_ex)

_SYMBOL = "ltorch.cross_entropy"


def triton_available() -> bool:
    """Whether Triton could be imported."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _row_lse(base, V, BLOCK: tl.constexpr):
        # Running maximum and rescaled sum of exponentials per lane, then across lanes.
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            empty = m_new == float("-inf")
            s = tl.where(empty, 0.0, s * tl.exp(m - m_new) + tl.exp(x - m_new))
            m = m_new
        mx = tl.max(m, axis=0)
        total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - mx)), axis=0)
        return mx + tl.log(total)

    @triton.jit
    def _xent_fwd(logits_ptr, labels_ptr, weight_ptr, loss_ptr, wrow_ptr, stride, V, ignore_index,
                  HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * stride
        lse = _row_lse(base, V, BLOCK)
        y = tl.load(labels_ptr + row).to(tl.int64)
        valid = y != ignore_index
        safe = tl.where(valid, y, 0)
        xy = tl.load(base + safe).to(tl.float32)
        w = 1.0
        if HAS_WEIGHT:
            w = tl.load(weight_ptr + safe).to(tl.float32)
        w = tl.where(valid, w, 0.0)
        tl.store(loss_ptr + row, w * (lse - xy))
        tl.store(wrow_ptr + row, w)

    @triton.jit
    def _xent_bwd(grow_ptr, logits_ptr, labels_ptr, out_ptr, stride, V, BLOCK: tl.constexpr):
        # grow: each row's cotangent times its weight (0 for ignored rows).
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * stride
        lse = _row_lse(base, V, BLOCK)
        y = tl.load(labels_ptr + row).to(tl.int64)
        g = tl.load(grow_ptr + row).to(tl.float32)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < V
            x = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
            d = g * (tl.exp(x - lse) - tl.where(cols == y, 1.0, 0.0))
            tl.store(out_ptr + row * V + cols, d.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_shape(classes: int) -> tuple[int, int]:
    block = min(max(triton.next_power_of_2(classes), 32), 4096)
    return block, (4 if block <= 1024 else 8 if block <= 2048 else 16)


def _row_losses(logits, labels, weight, ignore_index):
    logits, labels = logits.contiguous(), labels.contiguous()
    rows, classes = logits.shape
    loss = torch.empty(rows, device=logits.device, dtype=torch.float32)
    wrow = torch.empty(rows, device=logits.device, dtype=torch.float32)
    if rows:
        block, warps = _launch_shape(classes)
        w = weight.contiguous() if weight is not None else logits
        _xent_fwd[(rows,)](logits, labels, w, loss, wrow, classes, classes, ignore_index,
                           HAS_WEIGHT=weight is not None, BLOCK=block, num_warps=warps)
    return loss, wrow


def _fwd_impl(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
              label_smoothing=0.0):
    loss, wrow = _row_losses(a, target, weight, ignore_index)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / wrow.sum()
    return loss.to(a.dtype)


def _bwd_impl(grad, a, target, weight, ignore_index, reduction):
    logits, labels = a.contiguous(), target.contiguous()
    rows, classes = logits.shape
    out = torch.empty_like(logits)
    if rows == 0:
        return out
    valid = labels != ignore_index
    wrow = valid.to(torch.float32)
    if weight is not None:
        wrow = wrow * weight.to(torch.float32)[torch.where(valid, labels, 0)]
    g = grad.to(torch.float32)
    if reduction == "mean":
        g = g / wrow.sum()
    grow = (g.expand(rows) if reduction != "none" else g) * wrow
    block, warps = _launch_shape(classes)
    _xent_bwd[(rows,)](grow.contiguous(), logits, labels, out, classes, classes, BLOCK=block, num_warps=warps)
    return out


def _fwd_meta(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
              label_smoothing=0.0):
    return TensorProxy(like=a, shape=(a.shape[0],) if reduction == "none" else ())


def _bwd_meta(grad, a, target, weight, ignore_index, reduction):
    return TensorProxy(like=a)


triton_crossentropy = triton_ex.register_operator("triton_crossentropy", meta=_fwd_meta, fn=_fwd_impl)
triton_crossentropy_backward = triton_ex.register_operator(
    "triton_crossentropy_backward", meta=_bwd_meta, fn=_bwd_impl
)


def _checker(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
             label_smoothing=0.0) -> bool:
    def no(reason):
        return declined(triton_ex, _SYMBOL, reason)

    if triton is None:
        return no("Triton is not installed")
    reason = decline_reason(a, target)
    if reason is not None:
        return no(reason)
    if weight is not None and (not isinstance(weight, TensorProxy) or weight.ndim != 1
                               or weight.shape[0] != a.shape[1] or weight.device != a.device):
        return no(f"expected a weight of shape ({a.shape[1]},) on {a.device}")
    if weight is not None and weight.requires_grad:
        return no("the weight requires grad (only the logits' gradient is computed)")
    if size_average is not None or reduce is not None:
        return no("the deprecated size_average / reduce arguments are not supported")
    if reduction not in ("none", "mean", "sum"):
        return no(f"reduction {reduction!r}")
    if not isinstance(ignore_index, int):
        return no("ignore_index must be a number known when tracing")
    if label_smoothing != 0.0:
        return no("label smoothing is not supported (apex_ex supports it)")
    return True


def _execution_transform(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                         reduction="mean", label_smoothing=0.0):
    return triton_crossentropy(a, target, weight, None, ignore_index, None, reduction, label_smoothing)


def _grad_transform(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                    reduction="mean", label_smoothing=0.0):
    loss = triton_crossentropy(a, target, weight, None, ignore_index, None, reduction, label_smoothing)
    g = get_grad(loss)
    put_grad(a, triton_crossentropy_backward(g, a, target, weight, ignore_index, reduction))
    return loss


triton_ex.register_implementation(
    ltorch.cross_entropy,
    checker=_checker,
    execution_transform=_execution_transform,
    grad_transform=_grad_transform,
)
