"""The torch executor, as printed traces see it.

Execution traces call PyTorch directly (torch.*, Tensor.*, torch.nn.functional.*) for the torch
language, and the functions below for prims that PyTorch has no single call for. Each has the
prim's semantics exactly; the C++ runtime runs the same operations through ATen.
"""

import functools
from numbers import Number

import torch

from thunder.core.dtypes import to_torch_dtype
from thunder.core.devices import to_torch_device


def no_autocast(fn):
    """Runs fn with autocast disabled (execution traces carry their own dtypes)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.autocast("cpu", enabled=False):
            if torch.cuda.is_available():
                with torch.autocast("cuda", enabled=False):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

    return wrapper


def _t(x, like):
    """A number as a 0-dim tensor promoting like a Python number does against `like`: of the
    dtype torch.result_type gives the pair (a plain 0-dim tensor of the number's default dtype
    would promote a 0-dim `like`, e.g. uint8 with 0 -> int64)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(like, torch.Tensor):
        return torch.tensor(x, dtype=torch.result_type(like, x), device=like.device)
    return torch.tensor(x, device="cpu")


def _unary(f):
    return lambda a: f(a)


for _name in (
    "abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh digamma erf erfc erfinv exp exp2 "
    "expm1 floor isfinite lgamma log log10 log1p log2 neg reciprocal round rsqrt sign signbit sin sinh "
    "sqrt tan tanh trunc sigmoid real imag"
).split():
    globals()[_name] = _unary(getattr(torch, _name))


def _binary(f):
    def op(a, b):
        like = a if isinstance(a, torch.Tensor) else b
        return f(_t(a, like), _t(b, like))

    return op


for _name in (
    "add atan2 bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift copysign eq fmod ge "
    "gt le lt maximum minimum mul ne pow remainder sub logical_and logical_or"
).split():
    globals()[_name] = _binary(getattr(torch, _name))


def polygamma(n, a):
    return torch.polygamma(n, a)


def div(a, b):
    x, y = _t(a, b), _t(b, a)
    if not (x.is_floating_point() or x.is_complex() or y.is_floating_point() or y.is_complex()):
        return torch.div(x, y, rounding_mode="trunc")
    return torch.div(x, y)


def where(pred, a, b):
    like = a if isinstance(a, torch.Tensor) else b
    pred = pred if isinstance(pred, torch.Tensor) else torch.tensor(bool(pred))
    out = torch.where(pred, _t(a, like), _t(b, like))
    if isinstance(a, torch.Tensor):
        return out.to(a.dtype)
    return out.to(b.dtype) if isinstance(b, torch.Tensor) else out


def convert_element_type(a, dtype):
    return a.to(to_torch_dtype(dtype))


def convert_element_types(tensors, dtype):
    """Each tensor converted to dtype, as one multi-tensor copy (transforms/grouped_casts.h)."""
    dtype = to_torch_dtype(dtype)
    out = [torch.empty_like(t, dtype=dtype) for t in tensors]
    if out:
        torch._foreach_copy_(out, list(tensors))
    return tuple(out)


def full(shape, fill_value, *, device, dtype):
    return torch.full(tuple(shape), fill_value, device=to_torch_device(device), dtype=to_torch_dtype(dtype))


def iota(length, *, start, step, device, dtype):
    return torch.arange(start, start + length * step, step, device=to_torch_device(device), dtype=to_torch_dtype(dtype))


def uniform(shape, minval, maxval, *, device, dtype):
    t = torch.empty(tuple(shape), device=to_torch_device(device), dtype=to_torch_dtype(dtype))
    return t.uniform_(minval, maxval)


def broadcast_in_dim(a, shape, broadcast_dimensions):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        view[d] = a.shape[i]
    return a.reshape(view).expand(tuple(shape))


def reshape(a, shape):
    return a.reshape(tuple(shape))


def slice(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    for d, (s, e, st) in enumerate(zip(start_indices, end_indices, strides)):
        a = a.narrow(d, s, e - s)[(builtins_slice(None),) * d + (builtins_slice(None, None, st),)]
    return a


import builtins as _builtins  # noqa: E402

builtins_slice = _builtins.slice


def squeeze(a, dims):
    return torch.squeeze(a, tuple(dims)) if dims else a


def transpose(a, permutation):
    return a.permute(tuple(permutation))


def flip(a, dims):
    return torch.flip(a, tuple(dims))


def stride_order(a, order):
    n = a.ndim
    by_rank = [0] * n
    for i, r in enumerate(order):
        by_rank[r] = i
    strides, s = [0] * n, 1
    for r in range(n):
        strides[by_rank[r]] = s
        s *= max(a.shape[by_rank[r]], 1)
    if list(a.stride()) == strides:
        return a
    out = torch.empty_strided(a.shape, strides, dtype=a.dtype, device=a.device)
    return out.copy_(a)


def cat(tensors, dim):
    return torch.cat(tensors, dim)


def pad(a, padding_value, padding_config):
    if any(c[2] > 0 for c in padding_config):
        shape = [0 if n == 0 else n + (n - 1) * c[2] for n, c in zip(a.shape, padding_config)]
        big = torch.full(shape, padding_value, dtype=a.dtype, device=a.device)
        big[tuple(builtins_slice(None, None, c[2] + 1) for c in padding_config)] = a
        a = big
    pads = []
    for lo, hi, _ in reversed(padding_config):
        pads += [lo, hi]
    return torch.constant_pad_nd(a, pads, padding_value)


def take(a, indices, dim):
    if a.ndim == 0:
        return a.clone()
    return torch.index_select(a, dim, indices.reshape(1) if indices.ndim == 0 else indices)


def gather(a, indices, dim):
    return torch.gather(a, dim, indices)


def scatter_add(a, indices, value, dim):
    return torch.scatter_add(a, dim, indices, value)


def scatter_add_(a, indices, value, dim):
    """scatter_add written into a (the reinplace pass's form of a functionalized update)."""
    return a.scatter_add_(dim, indices, value)


def sum(a, dims):
    return torch.sum(a, tuple(dims), dtype=a.dtype) if dims else a.clone()


def prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)
    return a if dims else a.clone()


def amax(a, dims):
    return torch.amax(a, tuple(dims)) if dims else a.clone()


def amin(a, dims):
    return torch.amin(a, tuple(dims)) if dims else a.clone()


def var(a, dims, *, correction):
    if not dims:
        return torch.zeros_like(a.real if a.is_complex() else a).div(1.0 - correction)
    return torch.var(a, tuple(dims), correction=correction)


def argmax(a, dim):
    return torch.argmax(a, dim)


def argmin(a, dim):
    return torch.argmin(a, dim)


def matmul(a, b):
    return torch.matmul(a, b)


def linear(a, w, bias):
    return torch.nn.functional.linear(a, w, bias)


def embedding(a, weight, *, padding_idx=None):
    return torch.nn.functional.embedding(a, weight)


def embedding_backward(grad, indices, num_weights, padding_idx=None):
    pad = -1 if padding_idx is None else padding_idx
    return _aten.embedding_dense_backward(grad, indices, num_weights, pad, False)


# ---- nn ops ----

_aten = torch.ops.aten


def convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return _aten.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def convolution_backward(grad, a, weight, stride, padding, dilation, transposed, output_padding, groups):
    gi, gw, _ = _aten.convolution_backward(
        grad, a, weight, None, stride, padding, dilation, transposed, output_padding, groups, [True, True, False]
    )
    return gi, gw


def convolution_backward_weight(grad, a, weight, stride, padding, dilation, transposed, output_padding, groups):
    """convolution_backward where nothing reads the input's gradient: the weight's alone."""
    _, gw, _ = _aten.convolution_backward(
        grad, a, weight, None, stride, padding, dilation, transposed, output_padding, groups, [False, True, False]
    )
    return None, gw


# The forms a trace calls where its convolutions keep their tensors' layouts (the C++ runtime's
# default forms convert CUDA half-type convolutions to channels-last; these calls never do).
convolution_as_laid_out = convolution
convolution_backward_as_laid_out = convolution_backward
convolution_backward_weight_as_laid_out = convolution_backward_weight


def _bn_float_params(a, params):
    # As the C++ runtime: half-type inputs take float32 parameters on the CPU, and on CUDA where
    # the parameters' dtypes differ.
    if a.dtype not in (torch.bfloat16, torch.float16):
        return False
    return not a.is_cuda or len({p.dtype for p in params if p is not None}) > 1


def batch_norm(a, weight, bias, running_mean, running_var, momentum, eps):
    up = _bn_float_params(a, (weight, bias, running_mean, running_var))
    w, b, rm, rv = (t.float() if (up and t is not None) else t for t in (weight, bias, running_mean, running_var))
    stat = (lambda t: t.float()) if a.dtype in (torch.bfloat16, torch.float16) else (lambda t: t)
    if running_mean is None:
        out, mean, invstd = _aten._native_batch_norm_legit.no_stats(a, w, b, True, momentum, eps)
        return out, stat(mean), stat(invstd)
    out, mean, invstd, nrm, nrv = _aten._native_batch_norm_legit_functional(a, w, b, rm, rv, True, momentum, eps)
    return out, stat(mean), stat(invstd), nrm.to(running_mean.dtype), nrv.to(running_var.dtype)


def batch_norm_(a, weight, bias, running_mean, running_var, momentum, eps):
    """batch_norm updating running_mean and running_var in place (the reinplace pass's form)."""
    up = _bn_float_params(a, (weight, bias, running_mean, running_var))
    w, b, rm, rv = (t.float() if (up and t is not None) else t for t in (weight, bias, running_mean, running_var))
    out, mean, invstd = _aten._native_batch_norm_legit(a, w, b, rm, rv, True, momentum, eps)
    if rm is not running_mean:
        running_mean.copy_(rm)
        running_var.copy_(rv)
    stat = (lambda t: t.float()) if a.dtype in (torch.bfloat16, torch.float16) else (lambda t: t)
    return out, stat(mean), stat(invstd), running_mean, running_var


def batch_norm_backward(grad, a, weight, mean, invstd, eps):
    w = weight.float() if (weight is not None and _bn_float_params(a, (weight,))) else weight
    affine = weight is not None
    gx, gw, gb = _aten.native_batch_norm_backward(grad, a, w, None, None, mean, invstd, True, eps,
                                                  [True, affine, affine])
    if not affine:
        z = torch.zeros(a.shape[1], dtype=mean.dtype, device=a.device)
        return gx, z, z
    return gx, gw.to(weight.dtype), gb.to(weight.dtype)


def max_pool(a, kernel_size, stride, padding, dilation, ceil_mode):
    f = _aten.max_pool2d_with_indices if len(kernel_size) == 2 else _aten.max_pool3d_with_indices
    return tuple(f(a, kernel_size, stride, padding, dilation, ceil_mode))


def max_pool_backward(grad, a, indices, kernel_size, stride, padding, dilation, ceil_mode):
    f = _aten.max_pool2d_with_indices_backward if len(kernel_size) == 2 else _aten.max_pool3d_with_indices_backward
    return f(grad, a, kernel_size, stride, padding, dilation, ceil_mode, indices)


def avg_pool(a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    f = _aten.avg_pool2d if len(kernel_size) == 2 else _aten.avg_pool3d
    return f(a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool_backward(grad, a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    f = _aten.avg_pool2d_backward if len(kernel_size) == 2 else _aten.avg_pool3d_backward
    return f(grad, a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool(a, output_size):
    f = _aten._adaptive_avg_pool2d if len(output_size) == 2 else _aten._adaptive_avg_pool3d
    return f(a, output_size)


def adaptive_avg_pool_backward(grad, a):
    f = _aten._adaptive_avg_pool2d_backward if a.dim() == 4 else _aten._adaptive_avg_pool3d_backward
    return f(grad, a)


def adaptive_max_pool(a, output_size):
    f = _aten.adaptive_max_pool2d if len(output_size) == 2 else _aten.adaptive_max_pool3d
    return tuple(f(a, output_size))


def adaptive_max_pool_backward(grad, a, indices):
    f = _aten.adaptive_max_pool2d_backward if a.dim() == 4 else _aten.adaptive_max_pool3d_backward
    return f(grad, a, indices)


_UPSAMPLE = {
    ("nearest", 1): "upsample_nearest1d", ("nearest", 2): "upsample_nearest2d", ("nearest", 3): "upsample_nearest3d",
    ("nearest-exact", 1): "_upsample_nearest_exact1d", ("nearest-exact", 2): "_upsample_nearest_exact2d",
    ("nearest-exact", 3): "_upsample_nearest_exact3d", ("linear", 1): "upsample_linear1d",
    ("bilinear", 2): "upsample_bilinear2d", ("bicubic", 2): "upsample_bicubic2d",
    ("trilinear", 3): "upsample_trilinear3d",
}


def _scales(scales, k):
    return list(scales) if scales is not None else [None] * k


def upsample(a, output_size, mode, align_corners, scales):
    f = getattr(_aten, _UPSAMPLE[(mode, len(output_size))]).default
    if mode.startswith("nearest"):
        return f(a, output_size, *_scales(scales, len(output_size)))
    return f(a, output_size, align_corners, *_scales(scales, len(output_size)))


def upsample_backward(grad, input_size, output_size, mode, align_corners, scales):
    f = getattr(_aten, _UPSAMPLE[(mode, len(output_size))] + "_backward").default
    if mode.startswith("nearest"):
        return f(grad, output_size, input_size, *_scales(scales, len(output_size)))
    return f(grad, output_size, input_size, align_corners, *_scales(scales, len(output_size)))


# ---- end nn ops ----


def copy_(src, dst):
    return dst.copy_(src)


# ---- tensor ops ----


def cumsum(a, dim):
    return torch.cumsum(a, dim, dtype=a.dtype)


def cumprod(a, dim):
    return torch.cumprod(a, dim, dtype=a.dtype)


def sort(a, dim, descending, stable):
    values, indices = torch.sort(a, dim=dim, descending=descending, stable=stable)
    return values, indices


def topk(a, k, dim, largest):
    values, indices = torch.topk(a, k, dim, largest, True)
    return values, indices


def scatter(a, indices, value, dim):
    return torch.scatter(a, dim, indices, value)


def scatter_(a, indices, value, dim):
    """scatter written into a (the reinplace pass's form of a functionalized update)."""
    return a.scatter_(dim, indices, value)


del _name
