"""OpInfo entries of the neural-network ops (convolution, normalization, pooling, resampling, pad
modes, dropout variants, activations, distances, losses), in the OpInfo format of opinfos.py.
test_ops.py runs them with the rest of the table."""

from __future__ import annotations

import pytest
import torch

from opinfos import DEVICE

from opinfos import (
    ALL, FLOATS, INTS, LOWP_COMPOSITE, ErrorInput, OpInfo, b8, bf16, c64, c128, f16, f32, f64,
    i8, i16, i32, i64, index, make, transposed, u8,
)

# Convolutions and pools run the same ATen kernels as eager; compositions of several ops (norms,
# losses) round differently in low precision.
NN_TOL = {bf16: dict(rtol=3e-2, atol=3e-2), f16: dict(rtol=5e-3, atol=5e-3), f32: dict(rtol=1e-5, atol=1e-5)}
CONV_TOL = {bf16: dict(rtol=2e-2, atol=2e-2), f16: dict(rtol=2e-3, atol=2e-3), f32: dict(rtol=1e-5, atol=1e-5)}
F_ = "torch.nn.functional."
NO_INTS = INTS + (b8,)



def tensor_(data, **kwargs):
    """torch.tensor on the table's device (index and target tensors live with the data)."""
    return torch.tensor(data, device=DEVICE, **kwargs)

def floats_only(gen):
    """Samples for floating dtypes; one sample in other dtypes (which the op must refuse)."""

    def wrapped(dtype):
        samples = list(gen(dtype))
        return samples if dtype.is_floating_point else samples[:1]

    return wrapped


def nc(shape, dtype):
    """A non-contiguous tensor of `shape`."""
    return make(shape, dtype, noncontig=True)


# ---- convolution ------------------------------------------------------------------------------


def _conv_samples(k):
    def gen(dtype):
        sp = (5, 4, 3)[:k]
        ks = (3, 2, 2)[:k]
        yield (make((2, 4, *sp), dtype), make((6, 4, *ks), dtype), make((6,), dtype)), {}
        yield (make((1, 4, *sp), dtype), make((4, 2, *ks), dtype)), dict(stride=2, padding=1, groups=2)
        yield (make((4, *sp), dtype), make((3, 4, *ks), dtype)), dict(dilation=1, padding="same")
        yield (nc((2, 4, *sp), dtype), make((3, 4, *ks), dtype)), dict(padding="valid", stride=(1,) * k)
        yield (make((0, 4, *sp), dtype), make((3, 4, *ks), dtype)), {}
        yield (make((1, 2, *sp), dtype), make((2, 2, *((1,) * k)), dtype), None, 1, 0, 2), {}
    return floats_only(gen)


def _conv_errors(k):
    def gen():
        sp = (5, 4, 3)[:k]
        ks = (3, 2, 2)[:k]
        name = f"conv{k}d"
        yield ErrorInput((make((2, 3, *sp)), make((6, 4, *ks))), {}, RuntimeError,
                         rf"convolution: weight of shape .* expects 4 input channels")
        yield ErrorInput((make((2, 4, *sp)), make((6, 4, *ks))), dict(padding="same", stride=2), RuntimeError,
                         rf"{name}: padding='same' is not supported for strided convolutions")
        yield ErrorInput((make((2, 4, *sp)), make((6, 4, *ks))), dict(padding="full"), RuntimeError,
                         rf"{name}: padding must be 'same', 'valid' or ints, but got 'full'")
        yield ErrorInput((make((2, 4, *((1,) * k))), make((6, 4, *ks))), {}, RuntimeError,
                         r"convolution: kernel of shape .* does not fit the padded input")
        yield ErrorInput((make((2, 4, *sp)), make((6, 4, *ks), f64)), {}, RuntimeError,
                         r"convolution: expected input and weight of the same dtype")
    return gen


def _conv_transpose_samples(k):
    def gen(dtype):
        sp = (4, 3, 2)[:k]
        ks = (3, 2, 2)[:k]
        yield (make((2, 4, *sp), dtype), make((4, 3, *ks), dtype), make((3,), dtype)), {}
        yield (make((1, 4, *sp), dtype), make((4, 2, *ks), dtype)), dict(stride=2, padding=1, output_padding=1,
            groups=2)
        yield (make((4, *sp), dtype), make((4, 3, *ks), dtype)), dict(dilation=2)
        yield (nc((2, 4, *sp), dtype), make((4, 3, *ks), dtype)), {}
    return floats_only(gen)


def _conv_transpose_errors(k):
    def gen():
        sp = (4, 3, 2)[:k]
        ks = (3, 2, 2)[:k]
        yield ErrorInput((make((2, 4, *sp)), make((4, 3, *ks))), dict(stride=2, output_padding=2), RuntimeError,
                         r"convolution: output_padding must be smaller than either stride or dilation")
        yield ErrorInput((make((2, 5, *sp)), make((4, 3, *ks))), {}, RuntimeError,
                         r"convolution: weight of shape .* expects 4 input channels")
    return gen


# ---- normalization ----------------------------------------------------------------------------


def _batch_norm_samples(dtype):
    c = 3

    def stats():
        return dict(running_mean=make((c,), dtype), running_var=make((c,), dtype, low=0.5, high=2))

    yield (make((4, c, 5, 2), dtype),), dict(**stats(), bias=make((c,), dtype))
    yield (make((4, c), dtype),), dict(**stats(), training=True, momentum=0.2)
    yield (nc((2, c, 5), dtype), None, None, make((c,), dtype)), dict(training=True, eps=1e-3)
    yield (make((2, c, 2, 2, 2), dtype),), dict(**stats(), bias=make((c,), dtype), training=True)


def _batch_norm_errors():
    yield ErrorInput((make((1, 3)), make((3,)), make((3,))), dict(training=True), ValueError,
                     r"batch_norm: expected more than 1 value per channel when training")
    yield ErrorInput((make((2, 3, 4)), make((4,)), make((3,))), {}, RuntimeError,
                     r"batch_norm: expected running_mean of shape \(3,\)")
    yield ErrorInput((make((2, 3, 4)), None, None), {}, RuntimeError,
                     r"batch_norm: running_mean and running_var must be given when training=False")


def _group_norm_samples(dtype):
    yield (make((2, 4, 3, 3), dtype), 2, make((4,), dtype), make((4,), dtype)), {}
    yield (make((3, 6), dtype), 3), {}
    yield (nc((2, 4, 5), dtype), 4, make((4,), dtype)), dict(eps=1e-3)
    yield (make((2, 4, 2, 2, 2), dtype), 1), {}


def _group_norm_reference(a, num_groups, weight=None, bias=None, eps=1e-5):
    """F.group_norm, but in float32 rounded once for a float16 / bfloat16 CUDA input with one value
    per channel: there PyTorch's CUDA kernel (GroupNorm1dForward, PyTorch 2.11) reads the mean and
    rstd rounded to the input's dtype, which for a group of two values is off by up to a few
    percent against float64; its CPU kernel, and its later CUDA kernels (mean_acc, rstd_acc),
    compute them in float32, as thunder does."""
    if a.is_cuda and a.dtype in (torch.float16, torch.bfloat16) and a[0, 0].numel() == 1:
        up = lambda t: None if t is None else t.float()  # noqa: E731
        return torch.nn.functional.group_norm(a.float(), num_groups, up(weight), up(bias), eps).to(a.dtype)
    return torch.nn.functional.group_norm(a, num_groups, weight, bias, eps)


def _group_norm_errors():
    yield ErrorInput((make((2, 3, 4)), 2), {}, RuntimeError,
                     r"group_norm: expected the number of channels to be divisible by num_groups")


def _instance_norm_samples(dtype):
    def stats():
        return dict(running_mean=make((3,), dtype), running_var=make((3,), dtype, low=0.5, high=2))

    yield (make((2, 3, 5), dtype),), {}
    yield (make((2, 3, 4, 4), dtype),), dict(bias=make((3,), dtype))
    yield (nc((2, 3, 5), dtype),), dict(**stats(), use_input_stats=False)
    yield (make((2, 3, 5), dtype),), dict(**stats(), momentum=0.3)


def _instance_norm_errors():
    yield ErrorInput((make((2, 3, 1)),), {}, ValueError, r"instance_norm: expected more than 1 spatial element")


# ---- pooling ----------------------------------------------------------------------------------


def _max_pool_samples(k, indices=False):
    def gen(dtype):
        sp = (7, 6, 5)[:k]
        yield (make((2, 3, *sp), dtype), 2), {}
        yield (make((3, *sp), dtype), 3, 2, 1), dict(ceil_mode=True)
        yield (nc((2, 2, *sp), dtype), 2), dict(stride=1, dilation=2)
        yield (make((1, 2, *sp), dtype), (2,) * k), dict(padding=1, stride=(2,) * k)
    return floats_only(gen)


def _max_pool_errors(k):
    def gen():
        sp = (7, 6, 5)[:k]
        yield ErrorInput((make((2, 3, *sp)), 2), dict(padding=2), RuntimeError,
                         r"max_pool: padding should be at most half of the effective kernel size")
        yield ErrorInput((make(sp), 2) if k > 1 else (make((7,)), 2), {}, RuntimeError,
                         rf"max_pool{k}d: expected a {k + 1}- or {k + 2}-dimensional input")
        yield ErrorInput((make((2, 3, *((1,) * k))), 2), {}, RuntimeError, r"max_pool: the output of input shape")
    return gen


def _avg_pool_samples(k):
    def gen(dtype):
        sp = (7, 6, 5)[:k]
        yield (make((2, 3, *sp), dtype), 2), {}
        yield (make((3, *sp), dtype), 3, 2, 1), dict(ceil_mode=True, count_include_pad=False)
        yield (nc((2, 2, *sp), dtype), 3), dict(stride=1, padding=1)
        if k > 1:
            yield (make((1, 2, *sp), dtype), 2), dict(divisor_override=3)
    return floats_only(gen)


def _avg_pool_errors(k):
    def gen():
        sp = (7, 6, 5)[:k]
        yield ErrorInput((make((2, 3, *sp)), 2), dict(padding=2), RuntimeError,
                         r"avg_pool: padding should be at most half of the effective kernel size")
    return gen


def _adaptive_samples(k, with_indices_kw=False):
    def gen(dtype):
        sp = (7, 6, 5)[:k]
        yield (make((2, 3, *sp), dtype), 3), {}
        yield (make((3, *sp), dtype), (2, 4, 1)[:k]), {}
        yield (nc((2, 2, *sp), dtype), 1), {}
        if k > 1:
            yield (make((1, 2, *sp), dtype), (None,) + (2,) * (k - 1)), {}
    return floats_only(gen)


# ---- interpolate ------------------------------------------------------------------------------


def _interpolate_samples(dtype):
    yield (make((2, 3, 4), dtype),), dict(scale_factor=2)
    yield (make((1, 2, 3, 4), dtype),), dict(size=(5, 7))
    yield (make((1, 2, 3, 4), dtype),), dict(scale_factor=1.7, mode="nearest")
    yield (make((1, 2, 3, 4), dtype),), dict(size=(6, 5), mode="nearest-exact")
    yield (make((1, 2, 3, 4), dtype),), dict(size=(5, 7), mode="bilinear")
    yield (nc((2, 1, 4, 4), dtype),), dict(scale_factor=1.5, mode="bilinear", align_corners=True)
    yield (make((1, 2, 4), dtype),), dict(size=9, mode="linear")
    yield (make((1, 1, 3, 3), dtype),), dict(size=(6, 5), mode="bicubic", align_corners=False)
    yield (make((1, 1, 2, 3, 2), dtype),), dict(scale_factor=2, mode="trilinear")
    yield (make((1, 2, 5, 6), dtype),), dict(size=(2, 3), mode="area")
    yield (make((1, 2, 3, 4), dtype),), dict(scale_factor=(1.5, 2.5), recompute_scale_factor=True)


def _interpolate_errors():
    yield ErrorInput((make((1, 2, 3, 4)),), dict(size=4, scale_factor=2), ValueError,
                     r"interpolate: exactly one of size or scale_factor must be given")
    yield ErrorInput((make((1, 2, 3, 4)),), dict(size=4, align_corners=True), ValueError,
                     r"interpolate: align_corners can only be set with the interpolating modes")
    yield ErrorInput((make((1, 2, 3, 4)),), dict(size=4, mode="cubic"), NotImplementedError,
                     r"upsample: mode must be 'nearest'")


# ---- pad --------------------------------------------------------------------------------------


def _pad_mode_samples(mode):
    def gen(dtype):
        yield (make((2, 3, 4), dtype), (2, 1)), dict(mode=mode)
        yield (make((2, 3, 4, 5), dtype), (1, 2, 3, 0)), dict(mode=mode)
        yield (nc((1, 2, 3, 3, 4), dtype), (1, 2, 2, 0, 1, 1)), dict(mode=mode)
        yield (make((3, 4), dtype), (0, 3)), dict(mode=mode)
    return gen


def _pad_mode_errors():
    yield ErrorInput((make((2, 3, 4)), (4, 1)), dict(mode="reflect"), RuntimeError,
                     r"pad: padding \(4, 1\) should be less than the size 4 of dimension 2")
    yield ErrorInput((make((2, 3, 4)), (5, 1)), dict(mode="circular"), RuntimeError,
                     r"pad: padding \(5, 1\) should be at most the size 4")
    yield ErrorInput((make((4,)), (1, 1)), dict(mode="replicate"), RuntimeError,
                     r"pad: padding of length 2 in mode 'replicate' needs a 2- or 3-dimensional input")


# ---- dropout ----------------------------------------------------------------------------------


def _feature_dropout_samples(k):
    def gen(dtype):
        sp = (4, 3, 2)[:k]
        yield (make((2, 3, *sp), dtype),), dict(p=0.0)
        yield (make((2, 3, *sp), dtype),), dict(p=0.4, training=False)
        if dtype.is_floating_point:
            yield (make((2, 3, *sp), dtype),), dict(p=1.0)
            yield (make((3, *sp), dtype), 1.0), {}
    return gen


def _alpha_dropout_samples(dtype):
    yield (make((2, 3), dtype),), dict(p=0.0, training=True)
    yield (make((2, 3), dtype),), dict(p=0.5)
    yield (make((2, 3), dtype), 0.3, False), {}


def _dropout_errors(name):
    def gen():
        yield ErrorInput((make((2, 3, 4, 4)),), dict(p=1.5), ValueError,
                         rf"{name}: dropout probability has to be between 0 and 1, but got 1.5")
    return gen


def _dropout2d_random_samples(dtype):
    yield (make((8, 40, 3, 3), dtype, low=1, high=2),), dict(p=0.3)


def _dropout2d_check(result, args, kwargs):
    x, p = args[0], kwargs["p"]
    kept = (result != 0).flatten(2)
    # Whole channels are kept or dropped.
    assert torch.equal(kept.all(-1), kept.any(-1)), "a channel was partly dropped"
    frac = kept.any(-1).double().mean().item()
    assert abs(frac - (1 - p)) < 0.1, f"kept fraction {frac} far from {1 - p}"
    mask = result != 0
    tol = {"rtol": 2e-2, "atol": 2e-2} if x.dtype in (bf16, f16) else {}
    torch.testing.assert_close(result[mask], (x / (1 - p))[mask], **tol)


def _alpha_dropout_random_samples(dtype):
    yield (make((200, 100), dtype),), dict(p=0.2, training=True)


def _alpha_dropout_check(result, args, kwargs):
    # SELU's fixed point: standard normal inputs keep mean 0 and variance 1.
    x = torch.randn(200, 100, dtype=torch.float64)
    r = torch.nn.functional.alpha_dropout(x, 0.2, True)
    assert abs(result.double().mean().item() - r.mean().item()) < 0.1


# ---- activations ------------------------------------------------------------------------------


def _act_samples(*extra, low=-3.0, high=3.0):
    def gen(dtype):
        yield (make((), dtype, low=low, high=high), *extra), {}
        yield (make((3, 4), dtype, low=low, high=high), *extra), {}
        yield (nc((2, 3), dtype), *extra), {}
        yield (make((0, 3), dtype), *extra), {}
    return gen


def _hardtanh_samples(dtype):
    yield from _act_samples()(dtype)
    yield (make((3, 4), dtype, low=-3, high=3), -0.5, 2.0), {}


def _prelu_samples(dtype):
    yield (make((2, 3, 4), dtype), make((3,), dtype)), {}
    yield (make((2, 3), dtype), make((1,), dtype)), {}
    yield (nc((2, 3, 2), dtype), make((1,), dtype)), {}
    yield (make((4,), dtype), make((1,), dtype)), {}


def _prelu_errors():
    yield ErrorInput((make((2, 3, 4)), make((2,))), {}, RuntimeError, r"prelu: weight of shape .* must have 1 or 3")


def _glu_samples(dtype):
    yield (make((2, 6), dtype),), {}
    yield (make((4, 3, 2), dtype), 0), {}
    yield (nc((2, 4), dtype), -1), {}


def _glu_errors():
    yield ErrorInput((make((2, 5)),), {}, RuntimeError,
        r"glu: halving dimension must be even, but dimension 1 is size 5")


def _threshold_samples(dtype):
    yield (make((3, 4), dtype), 0.5, -2), {}
    yield (make((), dtype), 0.0, 1.5), {}
    yield (nc((2, 3), dtype), -0.5, 0), {}


def _rrelu_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (make((3, 4), dtype), 0.1, 0.3), {}
    if dtype != f16:  # PyTorch has no float16 kernel for training
        yield (make((3, 4), dtype), 0.2, 0.2, True), {}


# ---- distances --------------------------------------------------------------------------------


def _normalize_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (make((3, 4), dtype),), dict(p=1.0, dim=0)
    yield (nc((2, 3, 4), dtype),), dict(p=float("inf"), dim=-1)
    if dtype != f16:  # eps=1e-12 underflows in float16: eager divides 0 by 0
        yield (torch.zeros(2, 3, dtype=dtype, device=DEVICE),), {}


def _normalize_grad_samples(dtype):
    # At a zero vector PyTorch's norm backward gives 0 where the decomposition's sqrt gives nan.
    return list(_normalize_samples(dtype))[:3]


def _cosine_samples(dtype):
    yield (make((3, 4), dtype), make((3, 4), dtype)), {}
    yield (make((3, 4), dtype), make((1, 4), dtype)), dict(dim=-1)
    yield (nc((2, 3), dtype), make((2, 3), dtype), 0), {}


def _pairwise_samples(dtype):
    yield (make((3, 4), dtype), make((3, 4), dtype)), {}
    yield (make((3, 4), dtype), make((4,), dtype)), dict(p=1.0, keepdim=True)
    yield (nc((2, 3), dtype), make((2, 3), dtype)), dict(p=3.0)


def _pixel_shuffle_samples(dtype):
    yield (make((2, 8, 3, 2), dtype), 2), {}
    yield (make((9, 2, 2), dtype), 3), {}
    yield (make((2, 1, 4, 1, 1), dtype), 2), {}


def _pixel_unshuffle_samples(dtype):
    yield (make((2, 2, 4, 6), dtype), 2), {}
    yield (make((1, 6, 3), dtype), 3), {}


def _pixel_shuffle_errors():
    yield ErrorInput((make((2, 7, 3, 2)), 2), {}, RuntimeError,
                     r"pixel_shuffle: channels 7 are not divisible by upscale_factor squared \(4\)")


def _one_hot_samples(dtype):
    if dtype != i64:
        return
    yield (index((2, 3), 5), 5), {}
    yield (index((4,), 3), 7), {}
    yield (index((), 3), 3), {}


def _one_hot_errors():
    yield ErrorInput((index((2,), 3, i32), 3), {}, RuntimeError, r"one_hot: expected an int64 index tensor", True)


# ---- losses -----------------------------------------------------------------------------------


def _bce_samples(dtype):
    p = lambda s: make(s, dtype, low=0.02, high=0.98)  # noqa: E731
    yield (p((3, 4)), p((3, 4))), {}
    yield (p((3, 4)), p((3, 4))), dict(weight=make((3, 4), dtype, low=0, high=1), reduction="sum")
    yield (p((5,)), p((5,))), dict(reduction="none")


def _bce_logits_samples(dtype):
    t = lambda s: make(s, dtype, low=0, high=1)  # noqa: E731
    yield (make((3, 4), dtype), t((3, 4))), {}
    yield (make((3, 4), dtype), t((3, 4))), dict(weight=make((4,), dtype, low=0, high=1), reduction="sum")
    yield (make((3, 4), dtype), t((3, 4))), dict(pos_weight=make((4,), dtype, low=0.5, high=2), reduction="none")


def _loss_errors(name):
    def gen():
        yield ErrorInput((make((3,), low=0.1, high=0.9), make((3,), low=0.1, high=0.9)), dict(reduction="avg"),
            ValueError,
                         rf"{name}: reduction must be 'none', 'mean' or 'sum', but got 'avg'")
    return gen


def _regression_samples(*extra):
    def gen(dtype):
        yield (make((3, 4), dtype), make((3, 4), dtype)), dict(extra[0]) if extra else {}
        yield (make((5,), dtype), make((5,), dtype)), dict(reduction="sum", **(extra[1] if len(extra) > 1 else {}))
        yield (nc((2, 3), dtype), make((2, 3), dtype)), dict(reduction="none")
    return gen


def _kl_samples(dtype):
    yield (make((3, 4), dtype), make((3, 4), dtype, low=0.1, high=1)), dict(reduction="batchmean")
    yield (make((3, 4), dtype), make((3, 4), dtype)), dict(log_target=True, reduction="sum")
    yield (make((5,), dtype), make((5,), dtype, low=0.1, high=1)), dict(reduction="none")


def _cross_entropy_nn_samples(dtype):
    yield (make((6, 4), dtype), index((6,), 4)), dict(label_smoothing=0.2)
    yield (make((6, 4), dtype), tensor_([0, 2, 1, 3, 2, 1])), dict(
        weight=make((4,), dtype, low=0.5, high=2), ignore_index=2, label_smoothing=0.1)
    yield (make((3, 4, 2), dtype), torch.softmax(make((3, 4, 2), f32), 1).to(dtype)), {}
    yield (make((3, 4), dtype), torch.softmax(make((3, 4), f32), 1).to(dtype)), dict(
        weight=make((4,), dtype, low=0.5, high=2), label_smoothing=0.3, reduction="sum")
    yield (make((5,), dtype), index((), 5)), dict(label_smoothing=0.5, reduction="none")


def _cross_entropy_nn_errors():
    yield ErrorInput((make((3, 4)), index((3,), 4)), dict(label_smoothing=1.5), ValueError,
                     r"cross_entropy: label_smoothing must be between 0.0 and 1.0, but got 1.5", False)


# PyTorch's float64 backward of hardsigmoid (1/6) and celu (1/alpha) uses float32 constants: it is
# a few 1e-9 off the exact gradient thunder computes.
EAGER_FLOAT_CONSTANT = {f64: dict(rtol=1e-7, atol=1e-7)}

# Integer and complex inputs PyTorch takes (through generic kernels) and thunder refuses with a
# clear error: documented gaps.
INT_COMPLEX = (b8, u8, i8, i16, i32, i64, c64, c128)


def op(name, variants, samples, dtypes=FLOATS, **kw):
    kw.setdefault("tol", NN_TOL)
    # Differentiable unless said otherwise: the framework checks the vjp against torch.autograd.
    kw.setdefault("supports_grad", not kw.get("random", False))
    kw.setdefault("no_grad_kwargs", ("weight", "pos_weight", "running_mean", "running_var"))
    return OpInfo(name, variants, samples, dtypes, **kw)


opinfos = []
for _k in (1, 2, 3):
    _d = f"{_k}d"
    opinfos += [
        op(f"conv{_d}", (F_ + f"conv{_d}", f"torch.conv{_d}"), _conv_samples(_k), tol=CONV_TOL,
            thunder_unsupported=INT_COMPLEX,
           error_inputs=_conv_errors(_k)),
        op(f"conv_transpose{_d}", (F_ + f"conv_transpose{_d}", f"torch.conv_transpose{_d}"),
           _conv_transpose_samples(_k), tol=CONV_TOL, thunder_unsupported=INT_COMPLEX,
           error_inputs=_conv_transpose_errors(_k)),
        op(f"max_pool{_d}", (F_ + f"max_pool{_d}", f"torch.max_pool{_d}"), _max_pool_samples(_k),
            thunder_unsupported=INTS,
           error_inputs=_max_pool_errors(_k)),
        op(f"max_pool{_d}_with_indices", (F_ + f"max_pool{_d}_with_indices",), _max_pool_samples(_k, True),
            thunder_unsupported=INTS),
        op(f"avg_pool{_d}", (F_ + f"avg_pool{_d}",) + (("torch.avg_pool1d",) if _k == 1 else ()),
           _avg_pool_samples(_k), FLOATS if _k < 3 else (f32, f64), thunder_unsupported=(i64,),
           error_inputs=_avg_pool_errors(_k)),
        op(f"adaptive_avg_pool{_d}", (F_ + f"adaptive_avg_pool{_d}",), _adaptive_samples(_k)),
        op(f"adaptive_max_pool{_d}", (F_ + f"adaptive_max_pool{_d}",), _adaptive_samples(_k, True)),
        op(f"adaptive_max_pool{_d}_with_indices", (F_ + f"adaptive_max_pool{_d}_with_indices",),
           _adaptive_samples(_k)),
        op(f"dropout{_d}", (F_ + f"dropout{_d}",), _feature_dropout_samples(_k), ALL, supports_grad=False,
           error_inputs=_dropout_errors(f"dropout{_d}")),
    ]

opinfos += [
    op("batch_norm", (F_ + "batch_norm",), floats_only(_batch_norm_samples), error_inputs=_batch_norm_errors),
    op("group_norm", (F_ + "group_norm",), floats_only(_group_norm_samples), error_inputs=_group_norm_errors,
       torch_reference=_group_norm_reference),
    op("instance_norm", (F_ + "instance_norm",), floats_only(_instance_norm_samples),
       error_inputs=_instance_norm_errors),
    op("interpolate", (F_ + "interpolate",), floats_only(_interpolate_samples), tol=CONV_TOL, thunder_unsupported=(u8,),
       error_inputs=_interpolate_errors),
    op("pad_reflect", ((F_ + "pad", torch.nn.functional.pad),), _pad_mode_samples("reflect"), (u8, i8, i16, i32,
        i64) + FLOATS + (c64, c128),
       error_inputs=_pad_mode_errors),
    op("pad_replicate", ((F_ + "pad", torch.nn.functional.pad),), _pad_mode_samples("replicate"), (u8, i8, i16,
        i32, i64) + FLOATS + (c64, c128)),
    op("pad_circular", ((F_ + "pad", torch.nn.functional.pad),), _pad_mode_samples("circular"), ALL),
    op("alpha_dropout", (F_ + "alpha_dropout", "torch.alpha_dropout"), floats_only(_alpha_dropout_samples), ALL,
       supports_grad=False,
       error_inputs=_dropout_errors("alpha_dropout")),
    op("feature_alpha_dropout", (F_ + "feature_alpha_dropout", "torch.feature_alpha_dropout"),
       floats_only(_alpha_dropout_samples), ALL, supports_grad=False),
    op("dropout2d_random", ((F_ + "dropout2d", torch.nn.functional.dropout2d),), _dropout2d_random_samples,
       random=True, check=_dropout2d_check),
    op("alpha_dropout_random", ((F_ + "alpha_dropout", torch.nn.functional.alpha_dropout),),
       _alpha_dropout_random_samples, random=True, check=_alpha_dropout_check),
    op("hardtanh", (F_ + "hardtanh",), _hardtanh_samples, (i8, i16, i32, i64) + FLOATS, tol=LOWP_COMPOSITE),
    op("hardsigmoid", (F_ + "hardsigmoid",), _act_samples(low=-5, high=5), tol=LOWP_COMPOSITE,
       grad_tol=EAGER_FLOAT_CONSTANT),
    op("hardshrink", (F_ + "hardshrink", "torch.hardshrink", "torch.Tensor.hardshrink"), _act_samples(0.7)),
    op("softshrink", (F_ + "softshrink",), _act_samples(0.7), tol=LOWP_COMPOSITE),
    op("tanhshrink", (F_ + "tanhshrink",), _act_samples(), ALL[1:], tol=LOWP_COMPOSITE),
    op("logsigmoid", (F_ + "logsigmoid",), _act_samples(low=-30, high=30), tol=LOWP_COMPOSITE),
    op("softsign", (F_ + "softsign",), _act_samples(), ALL[1:], tol=LOWP_COMPOSITE),
    op("selu", (F_ + "selu", "torch.selu"), _act_samples(), tol=LOWP_COMPOSITE),
    op("celu", (F_ + "celu", "torch.celu"), _act_samples(0.7), tol=LOWP_COMPOSITE, grad_tol=EAGER_FLOAT_CONSTANT),
    op("prelu", (F_ + "prelu", "torch.prelu"), _prelu_samples, error_inputs=_prelu_errors),
    op("rrelu", (F_ + "rrelu", "torch.rrelu"), _rrelu_samples, tol=LOWP_COMPOSITE),
    op("glu", (F_ + "glu",), _glu_samples, tol=LOWP_COMPOSITE, error_inputs=_glu_errors),
    op("threshold", (F_ + "threshold", F_ + "_threshold", "torch.threshold"), _threshold_samples,
       (i8, i16, i32, i64) + FLOATS, thunder_unsupported=(u8,)),
    op("normalize", (F_ + "normalize",), _normalize_samples, tol={**NN_TOL, f16: dict(rtol=1e-2, atol=1e-2)},
        grad_sample_inputs=_normalize_grad_samples,
       thunder_unsupported=(c64, c128)),
    op("cosine_similarity", (F_ + "cosine_similarity", "torch.cosine_similarity"), _cosine_samples),
    op("pairwise_distance", (F_ + "pairwise_distance", "torch.pairwise_distance"), _pairwise_samples,
       thunder_unsupported=INT_COMPLEX),
    op("pixel_shuffle", (F_ + "pixel_shuffle", "torch.pixel_shuffle"), _pixel_shuffle_samples, ALL,
       error_inputs=_pixel_shuffle_errors),
    op("pixel_unshuffle", (F_ + "pixel_unshuffle", "torch.pixel_unshuffle"), _pixel_unshuffle_samples,
       ALL),
    op("one_hot", (F_ + "one_hot",), _one_hot_samples, (i64,), supports_grad=False, error_inputs=_one_hot_errors),
    op("binary_cross_entropy", (F_ + "binary_cross_entropy",), _bce_samples,
       error_inputs=_loss_errors("binary_cross_entropy")),
    op("binary_cross_entropy_with_logits", (F_ + "binary_cross_entropy_with_logits",), _bce_logits_samples),
    op("l1_loss", (F_ + "l1_loss",), _regression_samples(), FLOATS + (c64, c128), error_inputs=_loss_errors("l1_loss")),
    op("smooth_l1_loss", (F_ + "smooth_l1_loss",), _regression_samples(dict(beta=0.5), dict(beta=0.0))),
    op("huber_loss", (F_ + "huber_loss",), _regression_samples(dict(delta=0.7))),
    op("kl_div", (F_ + "kl_div",), _kl_samples),
    op("cross_entropy_smoothing", ((F_ + "cross_entropy", torch.nn.functional.cross_entropy),),
       _cross_entropy_nn_samples, error_inputs=_cross_entropy_nn_errors),
]
