"""The apex executor: fused cross-entropy on CUDA, forward and backward.

    from thunder.executors.apexex import apex_ex
    thunder.jit(fn, executors=[apex_ex])

Named after NVIDIA Apex's xentropy kernels, whose operators it mirrors; the kernels are thunder's
own (csrc/executors/cross_entropy.cpp: CUDA compiled at run time with NVRTC and cached like the
fuser's), no apex package is needed. It claims `ltorch.cross_entropy` (F.cross_entropy) for 2-D
float32 / bfloat16 / float16 logits on CUDA with class-index labels, no class weights, reductions
"none" / "mean" / "sum", any ignore_index and label smoothing; otherwise it declines (say why with
THUNDER_DEBUG_CLAIMS=1) and the decomposition runs. Traces print

    (t18, _) = apex_cross_entropy(logits, labels, 'mean', 0.0)
    t7 = apex_cross_entropy_backward(t5, t6, target=labels, max_log_sum_exp=t1, label_smoothing=0.0)

apex_cross_entropy returns (loss, max_log_sum_exp), the second the float32 log-sum-exp of each row
that the backward reads instead of the softmax.

It also claims `ltorch.cross_entropy_upcast`, which thunder makes of `F.cross_entropy(logits.float()
.view(-1, V), targets)` with bfloat16 / float16 logits (transforms/xent_upcast.h): the kernels read
the low-precision logits (their math is float32 anyway) and return the float32 loss, and the
backward writes the gradient in the logits' dtype, which is what the conversion's gradient (the
conversion back) would make of a float32 one; neither the float32 logits nor a float32 gradient is
made. Traces print

    (t18, _) = apex_cross_entropy_upcast(t5, targets, 'mean', 0.0)
    t7 = apex_cross_entropy_backward(t5, t6, target=targets, max_log_sum_exp=t1, label_smoothing=0.0)

On CUDA machines with NVRTC, apex_ex is one of thunder.jit's default executors.

The kernels ignore the rows whose label is negative (PyTorch accepts no negative label but
ignore_index), so a negative ignore_index needs nothing more;
for an ignore_index that is a class (>= 0), the trace first maps that label to -1
(`torch.where(labels == ignore_index, -1, labels)`).
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder import _C
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grad
from thunder.executors.crossentropy_checks import decline_reason
from thunder.extend import OperatorExecutor, declined, register_executor

__all__ = ["apex_ex", "apex_cross_entropy", "apex_cross_entropy_upcast", "apex_cross_entropy_backward"]

apex_ex = OperatorExecutor("apex", version="thunder-nvrtc-1")
register_executor(apex_ex)

_SYMBOL = "ltorch.cross_entropy"
_UPCAST_SYMBOL = "ltorch.cross_entropy_upcast"
_REDUCTIONS = ("none", "mean", "sum")


def _fwd_meta(logits, labels, reduction, label_smoothing):
    rows = logits.shape[0]
    loss = TensorProxy(like=logits, shape=(rows,) if reduction == "none" else ())
    max_log_sum_exp = TensorProxy(like=logits, shape=(rows,), dtype=dtypes.float32)
    return loss, max_log_sum_exp


def _fwd_impl(logits, labels, reduction, label_smoothing):
    loss, max_log_sum_exp = _C.apex_cross_entropy_forward(logits, labels, reduction, float(label_smoothing), -1)
    return loss.to(logits.dtype), max_log_sum_exp


def _upcast_fwd_meta(logits, labels, reduction, label_smoothing):
    rows = logits.shape[0]
    loss = TensorProxy(like=logits, shape=(rows,) if reduction == "none" else (), dtype=dtypes.float32)
    max_log_sum_exp = TensorProxy(like=logits, shape=(rows,), dtype=dtypes.float32)
    return loss, max_log_sum_exp


def _upcast_fwd_impl(logits, labels, reduction, label_smoothing):
    return _C.apex_cross_entropy_forward(logits, labels, reduction, float(label_smoothing), -1)


def _bwd_meta(grad, logits, *, target, max_log_sum_exp, label_smoothing):
    return TensorProxy(like=logits)


def _bwd_impl(grad, logits, *, target, max_log_sum_exp, label_smoothing):
    return _C.apex_cross_entropy_backward(grad, logits, target, max_log_sum_exp, float(label_smoothing))


apex_cross_entropy = apex_ex.register_operator("apex_cross_entropy", meta=_fwd_meta, fn=_fwd_impl)
apex_cross_entropy_upcast = apex_ex.register_operator(
    "apex_cross_entropy_upcast", meta=_upcast_fwd_meta, fn=_upcast_fwd_impl
)
apex_cross_entropy_backward = apex_ex.register_operator(
    "apex_cross_entropy_backward", meta=_bwd_meta, fn=_bwd_impl
)
# The Python functions above stay as the operators' printed implementations (a printed trace
# runs them); the runtime calls C++ kernels of the same computation.
_C.apex_native_kernels(apex_cross_entropy, apex_cross_entropy_upcast, apex_cross_entropy_backward)


def _check(symbol, a, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing) -> bool:
    def no(reason):
        return declined(apex_ex, symbol, reason)

    reason = decline_reason(a, target)
    if reason is not None:
        return no(reason)
    if weight is not None:
        return no("class weights are not supported (triton_ex supports them)")
    if size_average is not None or reduce is not None:
        return no("the deprecated size_average / reduce arguments are not supported")
    if reduction not in _REDUCTIONS:
        return no(f"reduction {reduction!r}")
    if not isinstance(ignore_index, int) or not isinstance(label_smoothing, (int, float)):
        return no("ignore_index and label_smoothing must be numbers known when tracing")
    if not 0.0 <= label_smoothing <= 1.0:
        return no(f"label_smoothing {label_smoothing} is not in [0, 1]")
    return True


def _checker(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
             label_smoothing=0.0) -> bool:
    return _check(_SYMBOL, a, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)


def _upcast_checker(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                    label_smoothing=0.0) -> bool:
    return _check(_UPCAST_SYMBOL, a, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)


def _labels(target, ignore_index):
    """The labels the kernels read: ignored rows have a negative label."""
    if ignore_index < 0:
        return target
    return ltorch.where(ltorch.eq(target, ignore_index), -1, target)


def _transforms(forward):
    """The execution and grad transforms of a cross-entropy computed by `forward` (apex_cross_entropy,
    or apex_cross_entropy_upcast for ltorch.cross_entropy_upcast)."""

    def execution_transform(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                            reduction="mean", label_smoothing=0.0):
        loss, _ = forward(a, _labels(target, ignore_index), reduction, float(label_smoothing))
        return loss

    def grad_transform(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                       reduction="mean", label_smoothing=0.0):
        labels = _labels(target, ignore_index)
        loss, max_log_sum_exp = forward(a, labels, reduction, float(label_smoothing))
        g = get_grad(loss)
        # Each row's cotangent: the loss's for "none", shared by the rows for "sum", divided by the
        # number of rows not ignored for "mean". The kernel gives ignored rows a zero gradient.
        if reduction == "none":
            row_grad = g
        else:
            row_grad = ltorch.expand(ltorch.unsqueeze(g, 0), (a.shape[0],))
        if reduction == "mean":
            counted = ltorch.sum(ltorch.ge(labels, 0).to(torch.float32))
            row_grad = ltorch.div(row_grad, counted)
        # In the logits' dtype: for the upcast, the float32 gradient converted back, made at once.
        grad_logits = apex_cross_entropy_backward(
            row_grad, a.contiguous(), target=labels, max_log_sum_exp=max_log_sum_exp,
            label_smoothing=float(label_smoothing)
        )
        put_grad(a, grad_logits)
        return loss

    return execution_transform, grad_transform


for _symbol, _checker_fn, _forward in ((ltorch.cross_entropy, _checker, apex_cross_entropy),
                                       (ltorch.cross_entropy_upcast, _upcast_checker, apex_cross_entropy_upcast)):
    _execution, _grad = _transforms(_forward)
    apex_ex.register_implementation(_symbol, checker=_checker_fn, execution_transform=_execution, grad_transform=_grad)
del _symbol, _checker_fn, _forward, _execution, _grad
