"""What both cross-entropy executors (apex_ex, triton_ex) need of a cross_entropy call."""

from __future__ import annotations

from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import has_symbolic_size

LOGITS_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
LABEL_DTYPES = (dtypes.int64, dtypes.int32)


def decline_reason(a, target) -> str | None:
    """Why a fused cross-entropy kernel cannot take logits `a` and labels `target`, or None."""
    if not isinstance(a, TensorProxy) or not isinstance(target, TensorProxy):
        return "logits and labels must be tensors"
    if a.device.devicetype != DeviceType.CUDA or target.device.devicetype != DeviceType.CUDA:
        return f"its kernels run on CUDA, but the logits are on {a.device} and the labels on {target.device}"
    if a.dtype not in LOGITS_DTYPES:
        return f"logits of dtype {a.dtype} (float32, bfloat16 or float16 are supported)"
    if a.ndim != 2 or target.ndim != 1:
        return (f"expected logits [rows, classes] and labels [rows], got shapes {tuple(a.shape)} and "
                f"{tuple(target.shape)}")
    if a.shape[1] < 1:
        return "logits with no classes"
    if has_symbolic_size(a, target):
        return "its kernels take static sizes, and these vary with the trace's size symbols"
    if target.dtype not in LABEL_DTYPES:
        return f"labels of dtype {target.dtype} (class indices of int64 or int32 are supported)"
    return None
