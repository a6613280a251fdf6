"""OpInfos of the tensor ops (csrc/ops/ltorch_tensor.cpp): scans, sorting, scatter and index
updates, einsum, the add*-matmul family, shape utilities, factories, elementwise helpers, complex
views and norms. Same OpInfo fields as tests/python/opinfos.py; `opinfos` is the list."""

from __future__ import annotations

import math

import torch

import pytest

from opinfo_framework import DecorateInfo
from opinfos import DEVICE

from opinfos import (
    ALL, COMPLEX, FLOAT_COMPLEX, FLOATS, INTS, LOWP, LOWP_COMPOSITE, NUMERIC, REALS, ErrorInput, OpInfo, b8,
    bf16, c64, c128, expanded, f16, f32, f64, i32, i64, index, make, names, number, shp, transposed, u8,
)

# Matmuls in low precision: thunder rounds the product before adding, eager's fused kernels do not.
MM_TOL = {bf16: dict(rtol=3e-2, atol=3e-2), f16: dict(rtol=4e-3, atol=4e-3), f32: dict(rtol=1e-5, atol=1e-5)}
# Sums of several terms in another order than eager's kernels.
SUM_TOL = {bf16: dict(rtol=3e-2, atol=3e-2), f16: dict(rtol=4e-3, atol=4e-3), f32: dict(rtol=1e-5, atol=1e-5),
           c64: dict(rtol=1e-5, atol=1e-5)}
REALS_NO_BOOL = REALS
SORTABLE = (b8,) + REALS

opinfos: list[OpInfo] = []


# ---- scans and sorting ----------------------------------------------------------------------



def tensor_(data, **kwargs):
    """torch.tensor on the table's device (index and target tensors live with the data)."""
    return torch.tensor(data, device=DEVICE, **kwargs)

def _scan_samples(dtype):
    yield (make((2, 3, 4), dtype), 1), {}
    yield (make((2, 3, 4), dtype), -1), {}
    yield (make((), dtype), 0), {}
    yield (make((0, 3), dtype), 0), {}
    yield (transposed((3, 4), dtype), 0), {}
    yield (make((5,), dtype, noncontig=True), 0), {}
    if dtype != b8:
        yield (make((2, 3), dtype), 1), dict(dtype=f64 if not dtype.is_complex else c128)
    else:
        yield (make((2, 3), dtype), 1), dict(dtype=i32)


def _cumprod_samples(dtype):
    for args, kw in _scan_samples(dtype):
        x = args[0]
        if x.numel() and (x.dtype.is_floating_point or x.dtype.is_complex):
            x = make(x.shape, dtype, low=0.5, high=1.5)
        yield (x, *args[1:]), kw
    z = make((2, 4), dtype, low=1, high=3)
    z[0, 1] = 0
    yield (z, 1), {}


def _scan_errors(name):
    def gen():
        yield ErrorInput((make((2, 3)), 2), {}, IndexError, rf"{name}: dimension out of range")

    return gen


def _sort_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), 1), {}
    yield (make((2, 3, 4), dtype),), dict(dim=0, descending=True)
    yield (make((), dtype),), {}
    yield (make((0, 3), dtype), 0), {}
    yield (transposed((3, 4), dtype),), dict(stable=True)
    yield (make((6,), dtype, noncontig=True),), dict(descending=True, stable=True)


def _topk_samples(dtype):
    yield (make((2, 3, 4), dtype), 2), {}
    yield (make((2, 3, 4), dtype), 3, 1), {}
    yield (make((2, 3, 4), dtype), 1), dict(dim=0, largest=False)
    yield (make((), dtype), 1), {}
    yield (make((0, 3), dtype), 0, 0), {}
    yield (transposed((3, 4), dtype), 2), dict(largest=False)
    yield (make((6,), dtype, noncontig=True), 0), {}


def _topk_errors():
    yield ErrorInput((make((2, 3)), 4), {}, RuntimeError, r"topk: k \(4\) is out of range for dimension 1")


def _aminmax_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype),), dict(dim=1)
    yield (make((2, 3, 4), dtype),), dict(dim=-1, keepdim=True)
    yield (make((2, 3), dtype),), dict(keepdim=True)
    yield (make((), dtype),), {}
    yield (transposed((3, 4), dtype),), dict(dim=0)


def _keepdim_shape(a, dim, keepdim, out):
    """aminmax(x, keepdim=True) without a dim keeps every dimension as size 1, as PyTorch documents
    it and its CPU and meta kernels give; its CUDA kernel (PyTorch 2.11) returns a 0-dim tensor."""
    if keepdim and dim is None and out.ndim != a.ndim:
        return out.reshape([1] * a.ndim)
    return out


def _aminmax_reference(a, *, dim=None, keepdim=False):
    lo, hi = torch.aminmax(a, dim=dim, keepdim=keepdim)
    return torch.return_types.aminmax((_keepdim_shape(a, dim, keepdim, lo), _keepdim_shape(a, dim, keepdim, hi)))


def _aminmax_composed(a, *, dim=None, keepdim=False):
    """aminmax as amin and amax: eager has no derivative for aminmax before PyTorch 2.13."""
    dims = () if dim is None else dim
    return torch.return_types.aminmax((torch.amin(a, dims, keepdim), torch.amax(a, dims, keepdim)))


def _aminmax_errors():
    yield ErrorInput((make((0, 3)),), {}, RuntimeError, r"aminmax: cannot reduce an empty tensor")


opinfos += [
    OpInfo("cumsum", names("cumsum"), _scan_samples, ALL, tol=SUM_TOL, error_inputs=_scan_errors("cumsum")),
    OpInfo("cumprod", names("cumprod"), _cumprod_samples, ALL, tol=SUM_TOL, error_inputs=_scan_errors("cumprod")),
    OpInfo("sort", names("sort"), _sort_samples, SORTABLE),
    OpInfo("argsort", names("argsort"), _sort_samples, SORTABLE),
    OpInfo("topk", names("topk"), _topk_samples, REALS, error_inputs=_topk_errors),
    OpInfo("aminmax", names("aminmax"), _aminmax_samples, SORTABLE, error_inputs=_aminmax_errors,
           torch_reference=_aminmax_reference, grad_reference=_aminmax_composed,
           # The variant test calls torch.aminmax itself, whose CUDA keepdim shape is off.
           test_directives=(DecorateInfo(pytest.mark.xfail(strict=True, reason="eager CUDA's aminmax(x, keepdim=True) "
                                                           "without a dim has shape (), its CPU and meta kernels (1, 1)"),
                                         "test_variant", devicetypes=("cuda",)),)),
]


# ---- scatter, index updates -----------------------------------------------------------------


def _scatter_samples(dtype):
    yield (make((3, 5), dtype), 1, index((3, 2), 5), make((3, 2), dtype)), {}
    yield (make((3, 5), dtype), 0, index((2, 5), 3), make((2, 5), dtype)), {}
    yield (make((3, 5), dtype), -1, index((2, 2), 5), make((3, 4), dtype)), {}
    yield (make((3, 5), dtype), 1, index((3, 2), 5), number(dtype)), {}
    yield (make((3, 5), dtype), 1, index((3, 2), 5)), dict(value=number(dtype))
    yield (transposed((3, 5), dtype), 0, index((2, 5), 3), make((2, 5), dtype, noncontig=True)), {}
    yield (make((), dtype), 0, index((), 1), make((), dtype)), {}
    yield (make((3, 5), dtype), 1, index((0, 2), 5), make((0, 2), dtype)), {}
    if dtype not in (b8,):
        yield (make((3, 5), dtype), 1, index((3, 4), 5), make((3, 4), dtype)), dict(reduce="add")


def _scatter_errors():
    yield ErrorInput((make((3, 5)), 1, index((3, 2), 5, dtype=f32), make((3, 2))), {}, (TypeError, RuntimeError),
                     r"scatter: expected 'index' to be an integer tensor")
    yield ErrorInput((make((3, 5)), 1, index((3, 2), 5), make((3, 2), f64)), {}, RuntimeError,
                     r"scatter: expected src of dtype float32, but got float64")
    yield ErrorInput((make((3, 5)), 1, index((4, 2), 5), make((4, 2))), {}, RuntimeError,
                     rf"scatter: indices of shape {shp(4, 2)} exceed the input's shape {shp(3, 5)}")


def _scatter_reduce_samples(dtype):
    for reduce in ("sum", "mean") if dtype != b8 else ("sum",):
        for include_self in (True, False):
            yield (make((3, 5), dtype), 1, index((3, 4), 5), make((3, 4), dtype), reduce), dict(include_self=include_self)
    yield (make((4, 3), dtype), 0, index((6, 3), 4), make((6, 3), dtype), "sum"), {}
    yield (transposed((3, 5), dtype), -1, index((3, 6), 5), make((3, 6), dtype, noncontig=True), "sum"), {}
    yield (make((), dtype), 0, index((), 1), make((), dtype), "sum"), {}


def _scatter_reduce_errors():
    yield ErrorInput((make((3, 5)), 1, index((3, 2), 5), make((3, 2)), "maximum"), {}, RuntimeError,
                     r"scatter_reduce: reduce must be one of 'sum', 'prod', 'mean', 'amax', 'amin', but got 'maximum'")


def _index_add_samples(dtype):
    alpha = 2 if dtype not in (b8,) + FLOATS + COMPLEX else (True if dtype == b8 else 0.5)
    yield (make((4, 3), dtype), 0, tensor_([0, 2, 0]), make((3, 3), dtype)), {}
    yield (make((4, 3), dtype), 1, tensor_([2, 0]), make((4, 2), dtype)), dict(alpha=alpha)
    yield (make((), dtype), 0, tensor_([0]), make((), dtype)), {}
    yield (transposed((4, 3), dtype), -1, tensor_(1), make((4, 1), dtype, noncontig=True)), {}
    yield (make((0, 3), dtype), 1, tensor_([1, 1], dtype=i32), make((0, 2), dtype)), {}


def _index_copy_samples(dtype):
    yield (make((4, 3), dtype), 0, tensor_([3, 1]), make((2, 3), dtype)), {}
    yield (make((4, 3), dtype), 1, tensor_([2, 0, 1]), make((4, 3), dtype)), {}
    yield (make((), dtype), 0, tensor_([0]), make((), dtype)), {}
    yield (transposed((4, 3), dtype), -1, tensor_([1]), make((4, 1), dtype, noncontig=True)), {}
    yield (make((4, 3), dtype), 0, tensor_([], dtype=i64), make((0, 3), dtype)), {}


def _index_update_errors(name):
    def gen():
        yield ErrorInput((make((4, 3)), 0, tensor_([0, 1]), make((3, 3))), {},
                         IndexError if name == "index_copy" else RuntimeError,
                         rf"{name}: index has 2 elements but source has 3 along dimension 0")
        yield ErrorInput((make((4, 3)), 0, tensor_([0.0]), make((1, 3))), {}, (TypeError, RuntimeError),
                         rf"{name}: expected 'index' to be an integer tensor")

    return gen


def _index_fill_samples(dtype):
    yield (make((4, 3), dtype), 0, tensor_([0, 2]), number(dtype)), {}
    yield (make((4, 3), dtype), 1, tensor_([-1]), make((), dtype)), {}
    yield (make((), dtype), 0, tensor_(0), number(dtype)), {}
    yield (transposed((4, 3), dtype), -1, tensor_([1, 1]), number(dtype)), {}
    yield (make((0, 3), dtype), 1, tensor_([2]), number(dtype)), {}


def _index_fill_errors():
    yield ErrorInput((make((4, 3)), 0, tensor_([[0]]), 1.0), {}, RuntimeError,
                     rf"index_fill: expected a 0- or 1-dimensional index, but got shape {shp(1, 1)}")


def _index_put_samples(dtype):
    yield (make((4, 3), dtype), (tensor_([0, 2]),), make((2, 3), dtype)), {}
    yield (make((4, 3), dtype), (tensor_([0, 2, 0]),), make((3,), dtype)), dict(accumulate=True)
    yield (make((4, 3), dtype), (tensor_([0, -1]), tensor_([1, 2]))), dict(values=make((), dtype))
    yield (make((4, 3, 2), dtype), (tensor_([[0], [3]]), tensor_([1, 2, 0])), make((2, 3, 2), dtype)), {}
    yield (make((4, 3), dtype), (tensor_([1, 1, 1]), tensor_([2, 2, 0])), make((3,), dtype)), dict(accumulate=True)
    yield (transposed((4, 3), dtype), (tensor_([3]),), make((1, 3), dtype, noncontig=True)), {}
    yield (make((4, 3), dtype), (tensor_([], dtype=i64),), make((0, 3), dtype)), {}


def _index_put_errors():
    yield ErrorInput((make((4, 3)), (tensor_([0]), tensor_([0]), tensor_([0])), make(())), {},
                     IndexError, r"index_put: expected 1 to 2 index tensors")
    yield ErrorInput((make((4, 3)), (tensor_([0, 1]), tensor_([0, 1, 2])), make(())), {}, IndexError,
                     r"index_put.*shapes|index_put.*broadcast")


def _take_samples(dtype):
    yield (make((3, 4), dtype), tensor_([0, 5, -1])), {}
    yield (make((3, 4), dtype), index((2, 2), 12)), {}
    yield (make((), dtype), tensor_(0)), {}
    yield (transposed((3, 4), dtype), index((5,), 12)), {}
    yield (make((3, 4), dtype), tensor_([], dtype=i64)), {}


def _select_samples(dtype):
    yield (make((3, 4), dtype), 0, 1), {}
    yield (make((3, 4), dtype), 1, -1), {}
    yield (make((2, 3, 4), dtype), -2, 2), {}
    yield (transposed((3, 4), dtype), 0, 2), {}
    yield (make((3, 0), dtype), 0, 0), {}


def _select_errors():
    yield ErrorInput((make((3, 4)), 1, 4), {}, IndexError, r"select: index 4 is out of range for dimension 1 of length 4")
    yield ErrorInput((make(()), 0, 0), {}, IndexError, r"select: cannot select from a 0-dim tensor")


opinfos += [
    OpInfo("scatter", names("scatter"), _scatter_samples, ALL, error_inputs=_scatter_errors),
    OpInfo("scatter_reduce", names("scatter_reduce"), _scatter_reduce_samples, ALL, tol=SUM_TOL,
           error_inputs=_scatter_reduce_errors),
    OpInfo("index_add", names("index_add"), _index_add_samples, ALL, tol=SUM_TOL,
           error_inputs=_index_update_errors("index_add")),
    OpInfo("index_copy", names("index_copy"), _index_copy_samples, ALL, error_inputs=_index_update_errors("index_copy")),
    OpInfo("index_fill", names("index_fill"), _index_fill_samples, ALL, error_inputs=_index_fill_errors),
    OpInfo("index_put", names("index_put"), _index_put_samples, ALL, tol=SUM_TOL, error_inputs=_index_put_errors),
    OpInfo("take", names("take"), _take_samples, ALL),
    OpInfo("select", names("select"), _select_samples, ALL, error_inputs=_select_errors),
]


# ---- einsum and the matmul family ---------------------------------------------------------


def _einsum_samples(dtype):
    yield ("ij,jk->ik", make((2, 3), dtype), make((3, 4), dtype)), {}
    yield ("bij,bjk->bik", make((2, 2, 3), dtype), make((2, 3, 4), dtype)), {}
    yield ("ij->ji", make((2, 3), dtype)), {}
    yield ("ij->", make((2, 3), dtype)), {}
    yield ("i,j->ij", make((3,), dtype), make((4,), dtype)), {}
    yield ("i,i->", make((3,), dtype), make((3,), dtype)), {}
    yield ("ij,kj", transposed((2, 3), dtype), make((4, 3), dtype, noncontig=True)), {}
    yield ("bhqd,bhkd->bhqk", make((1, 2, 3, 4), dtype), make((1, 2, 5, 4), dtype)), {}
    yield ("ij,jk,kl->il", make((2, 3), dtype), make((3, 4), dtype), make((4, 2), dtype)), {}
    yield ("ij,j->i", make((2, 0), dtype), make((0,), dtype)), {}
    yield ("ij,ik->jk", make((2, 3), dtype), make((1, 4), dtype)), {}
    yield ("ij,jk->ik", [make((2, 3), dtype), make((3, 4), dtype)]), {}


def _einsum_errors():
    yield ErrorInput(("ij,jk->ik", make((2, 3))), {}, RuntimeError, r"einsum: the equation 'ij,jk->ik' has 2 operands, but 1")
    yield ErrorInput(("ij,jk->ik", make((2, 3)), make((4, 4))), {}, RuntimeError, r"einsum: subscript 'j' has size 4")


def _scales(dtype, beta, alpha):
    """beta and alpha of dtype's kind (PyTorch takes no float scales for integer tensors)."""
    if dtype == b8:
        return dict(beta=True, alpha=True)
    if not (dtype.is_floating_point or dtype.is_complex):
        return dict(beta=int(math.ceil(beta)), alpha=int(math.ceil(alpha)))
    return dict(beta=beta, alpha=alpha)


def _addmm_samples(dtype):
    yield (make((2, 4), dtype), make((2, 3), dtype), make((3, 4), dtype)), {}
    yield (make((4,), dtype), make((2, 3), dtype), make((3, 4), dtype)), _scales(dtype, 0.5, 2)
    yield (make((2, 1), dtype), transposed((2, 3), dtype), make((3, 4), dtype, noncontig=True)), dict(beta=0)
    yield (make((), dtype), make((0, 3), dtype), make((3, 4), dtype)), {}


def _mm_errors(name, *args):
    def gen():
        yield ErrorInput(args, {}, RuntimeError, rf"{name}:")

    return gen


def _addmv_samples(dtype):
    yield (make((2,), dtype), make((2, 3), dtype), make((3,), dtype)), {}
    yield (make((), dtype), make((2, 3), dtype), make((3,), dtype)), _scales(dtype, 2, 0.5)
    yield (make((2,), dtype), transposed((2, 3), dtype), make((3,), dtype, noncontig=True)), {}


def _baddbmm_samples(dtype):
    yield (make((2, 3, 4), dtype), make((2, 3, 5), dtype), make((2, 5, 4), dtype)), {}
    yield (make((3, 4), dtype), make((2, 3, 5), dtype), make((2, 5, 4), dtype)), _scales(dtype, 0.5, 2)
    yield (make((1, 1, 4), dtype), make((2, 3, 0), dtype), make((2, 0, 4), dtype)), dict(beta=0)


def _addbmm_samples(dtype):
    yield (make((3, 4), dtype), make((2, 3, 5), dtype), make((2, 5, 4), dtype)), {}
    yield (make((4,), dtype), make((2, 3, 5), dtype), make((2, 5, 4), dtype)), _scales(dtype, 0.5, 2)


def _addr_samples(dtype):
    yield (make((3, 4), dtype), make((3,), dtype), make((4,), dtype)), {}
    yield (make((4,), dtype), make((3,), dtype), make((4,), dtype, noncontig=True)), _scales(dtype, 2, 3)


def _addc_samples(divide):
    def gen(dtype):
        nz = dict(exclude_zero=True) if divide else {}
        v = 0.5 if dtype in FLOATS + COMPLEX else 2
        yield (make((2, 3), dtype), make((2, 3), dtype), make((2, 3), dtype, **nz)), {}
        yield (make((2, 3), dtype), make((3,), dtype), make((2, 1), dtype, **nz)), dict(value=v)
        yield (make((), dtype), make((), dtype), make((), dtype, **nz)), {}
        yield (transposed((2, 3), dtype), make((2, 3), dtype, noncontig=True), expanded((2, 3), dtype, **nz)), {}
        yield (make((0, 3), dtype), make((3,), dtype), make((3,), dtype, **nz)), {}

    return gen


def _outer_samples(dtype):
    yield (make((3,), dtype), make((4,), dtype)), {}
    yield (make((0,), dtype), make((2,), dtype, noncontig=True)), {}


def _dot_samples(dtype):
    yield (make((3,), dtype), make((3,), dtype)), {}
    yield (make((0,), dtype), make((0,), dtype)), {}
    yield (make((4,), dtype, noncontig=True), make((4,), dtype)), {}


def _dot_errors():
    yield ErrorInput((make((3,)), make((4,))), {}, RuntimeError, r"dot: inconsistent tensor size")
    yield ErrorInput((make((3, 1)), make((3,))), {}, RuntimeError, r"dot: expected 'a' to be 1-dimensional")


def _mv_samples(dtype):
    yield (make((2, 3), dtype), make((3,), dtype)), {}
    yield (transposed((2, 3), dtype), make((3,), dtype, noncontig=True)), {}


MM_DTYPES = FLOATS + COMPLEX + INTS
# Eager's addbmm adds one batch's product at a time into a low precision result; thunder sums the
# batch inside one matmul (float accumulation), so eager is the less accurate one here.
ADDBMM_TOL = {**MM_TOL, bf16: dict(rtol=0.1, atol=0.2), f16: dict(rtol=1e-2, atol=2e-2)}
opinfos += [
    OpInfo("einsum", ("torch.einsum",), _einsum_samples, MM_DTYPES, tol=MM_TOL, error_inputs=_einsum_errors),
    OpInfo("addmm", names("addmm"), _addmm_samples, MM_DTYPES, tol=MM_TOL,
           error_inputs=_mm_errors("addmm", make((2, 4)), make((2, 3, 1)), make((3, 4)))),
    OpInfo("addmv", names("addmv"), _addmv_samples, MM_DTYPES, tol=MM_TOL,
           error_inputs=_mm_errors("addmv", make((2,)), make((2, 3)), make((3, 1)))),
    OpInfo("baddbmm", names("baddbmm"), _baddbmm_samples, MM_DTYPES, tol=MM_TOL,
           error_inputs=_mm_errors("bmm", make((2, 3, 4)), make((2, 3, 5)), make((3, 5, 4)))),
    OpInfo("addbmm", names("addbmm"), _addbmm_samples, MM_DTYPES, tol=ADDBMM_TOL),
    OpInfo("addr", names("addr"), _addr_samples, ALL, tol=MM_TOL),
    OpInfo("addcmul", names("addcmul"), _addc_samples(False), NUMERIC, tol=LOWP_COMPOSITE),
    OpInfo("addcdiv", names("addcdiv"), _addc_samples(True), FLOATS + COMPLEX, tol=LOWP_COMPOSITE),
    OpInfo("outer", names("outer"), _outer_samples, ALL),
    OpInfo("ger", names("ger"), _outer_samples, ALL),
    OpInfo("dot", names("dot"), _dot_samples, FLOATS + COMPLEX + INTS, tol=MM_TOL, error_inputs=_dot_errors),
    OpInfo("mv", names("mv"), _mv_samples, FLOATS + COMPLEX + INTS, tol=MM_TOL),
]


# ---- shape utilities ------------------------------------------------------------------------


def _repeat_interleave_samples(dtype):
    yield (make((2, 3), dtype), 2), {}
    yield (make((2, 3), dtype), 3), dict(dim=1)
    yield (make((2, 3), dtype), 2), dict(dim=-2)
    yield (make((), dtype), 3), {}
    yield (make((0, 3), dtype), 2), dict(dim=0)
    yield (transposed((2, 3), dtype), 0), dict(dim=1)


def _tile_samples(dtype):
    yield (make((2, 3), dtype), (2, 1)), {}
    yield (make((2, 3), dtype), (2,)), {}
    yield (make((3,), dtype), (2, 2)), {}
    yield (make((), dtype), (3,)), {}
    yield (transposed((2, 3), dtype), (1, 0)), {}


def _roll_samples(dtype):
    yield (make((3, 4), dtype), 1), {}
    yield (make((3, 4), dtype), -5, 1), {}
    yield (make((3, 4), dtype), (1, 2), (0, -1)), {}
    yield (make((), dtype), 1), {}
    yield (make((0, 3), dtype), 2, 1), {}
    yield (transposed((3, 4), dtype), 7), dict(dims=0)


def _roll_errors():
    yield ErrorInput((make((3, 4)), (1, 2), 0), {}, RuntimeError, r"roll: shifts and dims must have the same length")


def _rot90_samples(dtype):
    for k in (0, 1, 2, 3, -1, 5):
        yield (make((2, 3), dtype), k), {}
    yield (make((2, 3, 4), dtype), 1, (2, 0)), {}
    yield (transposed((2, 3), dtype),), {}


def _rot90_errors():
    yield ErrorInput((make((2, 3)), 1, (0, 0)), {}, RuntimeError, r"rot90: the rotation dims must differ")


def _flip2_samples(dtype):
    yield (make((2, 3), dtype),), {}
    yield (make((2, 3, 4), dtype),), {}
    yield (transposed((2, 3), dtype),), {}
    yield (make((0, 3), dtype),), {}


def _flipud_samples(dtype):
    yield from _flip2_samples(dtype)
    yield (make((4,), dtype),), {}


def _diff_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (make((3, 4), dtype), 2, 0), {}
    yield (make((5,), dtype),), dict(n=3)
    yield (make((3, 4), dtype),), dict(prepend=make((3, 1), dtype), append=make((3, 2), dtype))
    yield (transposed((3, 4), dtype), 1, -1), {}
    yield (make((0, 3), dtype), 1, 0), {}
    yield (make((2,), dtype), 5), {}


def _diff_errors():
    yield ErrorInput((make(()),), {}, RuntimeError, r"diff: expected at least 1 dimension")


def _unflatten_samples(dtype):
    yield (make((2, 6), dtype), 1, (2, 3)), {}
    yield (make((2, 6), dtype), -1, (3, -1)), {}
    yield (make((6,), dtype), 0, (1, 6, 1)), {}
    yield (make((0, 4), dtype), 1, (2, 2)), {}
    yield (transposed((2, 6), dtype), 0, (-1, 1)), {}


def _unflatten_errors():
    yield ErrorInput((make((2, 6)), 1, (4, 2)), {}, RuntimeError, rf"unflatten: sizes {shp(4, 2)} do not multiply")


def _tensor_split_samples(dtype):
    yield (make((7, 3), dtype), 3), {}
    yield (make((7, 3), dtype), (1, 4)), {}
    yield (make((7, 3), dtype), [2, -1, 9], 0), {}
    yield (make((2, 5), dtype), 2), dict(dim=1)
    yield (transposed((4, 3), dtype), (5,)), {}
    yield (make((0, 3), dtype), 2), {}
    # By keyword, as PyTorch's overloads name them (torchvision's MViT: indices=(1,), dim=2).
    yield (make((2, 3, 7), dtype),), dict(indices=(1,), dim=2)
    yield (make((2, 7), dtype),), dict(sections=3, dim=-1)


def _hsplit_samples(dtype):
    yield (make((2, 6), dtype), 3), {}
    yield (make((6,), dtype), 2), {}
    yield (make((2, 6), dtype), (1, 4)), {}


def _vsplit_samples(dtype):
    yield (make((6, 2), dtype), 3), {}
    yield (make((6, 2), dtype), [2]), {}


def _split_errors(name, shape):
    def gen():
        yield ErrorInput((make(shape), 4), {}, RuntimeError, rf"{name}: dimension \d of length 6 is not divisible into 4 sections")

    return gen


def _unary_shape_samples(dtype):
    yield (make((2, 3), dtype),), {}
    yield (make((), dtype),), {}
    yield (make((4,), dtype),), {}
    yield (make((2, 3, 4), dtype),), {}
    yield (transposed((2, 3), dtype),), {}
    yield (make((0, 3), dtype),), {}


def _clone_samples(dtype):
    yield from _unary_shape_samples(dtype)
    yield (transposed((2, 3), dtype),), dict(memory_format=torch.contiguous_format)
    yield (make((2, 3), dtype),), dict(memory_format=torch.preserve_format)


def _swapdims_samples(dtype):
    yield (make((2, 3, 4), dtype), 0, 2), {}
    yield (transposed((2, 3), dtype), -1, 0), {}


def _stack_samples(dtype):
    yield ([make((2, 3), dtype), make((2, 1), dtype)],), {}
    yield ([make((3,), dtype), make((2,), dtype)],), {}
    yield ([make((), dtype), make((), dtype)],), {}


def _vstack_samples(dtype):
    yield ([make((2, 3), dtype), make((1, 3), dtype)],), {}
    yield ([make((3,), dtype), make((3,), dtype)],), {}
    yield ([make((), dtype), make((1,), dtype)],), {}


def _meshgrid_samples(dtype):
    yield (make((3,), dtype), make((2,), dtype)), dict(indexing="ij")
    yield (make((3,), dtype), make((2,), dtype), make((4,), dtype)), dict(indexing="xy")
    yield (make((), dtype), make((2,), dtype, noncontig=True)), dict(indexing="xy")
    yield ([make((3,), dtype), make((0,), dtype)],), dict(indexing="ij")


def _meshgrid_errors():
    yield ErrorInput((make((3,)), make((2, 2))), dict(indexing="ij"), RuntimeError,
                     r"meshgrid: expected 0- or 1-dimensional tensors, but tensor 1 has shape")


def _diagonal_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (make((3, 4), dtype), 1), {}
    yield (make((3, 4), dtype), -2), {}
    yield (make((3, 4), dtype), 5), {}
    yield (make((2, 3, 4), dtype), 0, 2, 0), {}
    yield (make((2, 3, 4), dtype),), dict(offset=-1, dim1=-1, dim2=1)
    yield (transposed((3, 4), dtype), 1), {}
    yield (make((0, 3), dtype),), {}


def _diagonal_errors():
    yield ErrorInput((make((3, 4)), 0, 1, 1), {}, RuntimeError, r"diagonal: dim1 and dim2 cannot be the same dimension")


def _diag_embed_samples(dtype):
    yield (make((3,), dtype),), {}
    yield (make((2, 3), dtype), 1), {}
    yield (make((2, 3), dtype), -2, 0, 2), {}
    yield (make((2, 3), dtype),), dict(offset=1, dim1=-1, dim2=0)
    yield (transposed((2, 3), dtype),), {}
    yield (make((0,), dtype),), {}


def _diag_samples(dtype):
    yield (make((3,), dtype),), {}
    yield (make((3,), dtype), -1), {}
    yield (make((3, 4), dtype), 1), {}
    yield (transposed((3, 4), dtype),), {}


def _diag_errors():
    yield ErrorInput((make((2, 3, 4)),), {}, RuntimeError, r"diag: expected a 1- or 2-dimensional tensor")


def _trace_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (transposed((3, 3), dtype),), {}
    yield (make((0, 2), dtype),), {}


opinfos += [
    OpInfo("repeat_interleave", names("repeat_interleave"), _repeat_interleave_samples, ALL),
    OpInfo("tile", names("tile"), _tile_samples, ALL),
    OpInfo("roll", names("roll"), _roll_samples, ALL, error_inputs=_roll_errors),
    OpInfo("rot90", names("rot90"), _rot90_samples, ALL, error_inputs=_rot90_errors),
    OpInfo("fliplr", names("fliplr"), _flip2_samples, ALL),
    OpInfo("flipud", names("flipud"), _flipud_samples, ALL),
    OpInfo("diff", names("diff"), _diff_samples, ALL, error_inputs=_diff_errors),
    OpInfo("unflatten", names("unflatten"), _unflatten_samples, ALL, error_inputs=_unflatten_errors),
    OpInfo("tensor_split", names("tensor_split"), _tensor_split_samples, ALL),
    OpInfo("hsplit", names("hsplit"), _hsplit_samples, ALL, error_inputs=_split_errors("hsplit", (2, 6))),
    OpInfo("vsplit", names("vsplit"), _vsplit_samples, ALL, error_inputs=_split_errors("vsplit", (6, 2))),
    OpInfo("ravel", names("ravel"), _unary_shape_samples, ALL),
    OpInfo("swapdims", names("swapdims"), _swapdims_samples, ALL),
    OpInfo("atleast_1d", ("torch.atleast_1d",), _unary_shape_samples, ALL),
    OpInfo("atleast_2d", ("torch.atleast_2d",), _unary_shape_samples, ALL),
    OpInfo("atleast_3d", ("torch.atleast_3d",), _unary_shape_samples, ALL),
    OpInfo("hstack", ("torch.hstack",), _stack_samples, ALL),
    OpInfo("vstack", ("torch.vstack", "torch.row_stack"), _vstack_samples, ALL),
    OpInfo("clone", names("clone"), _clone_samples, ALL),
    OpInfo("meshgrid", ("torch.meshgrid",), _meshgrid_samples, ALL, error_inputs=_meshgrid_errors),
    OpInfo("diagonal", names("diagonal"), _diagonal_samples, ALL, error_inputs=_diagonal_errors),
    OpInfo("diag_embed", names("diag_embed"), _diag_embed_samples, ALL),
    OpInfo("diag", names("diag"), _diag_samples, ALL, error_inputs=_diag_errors),
    OpInfo("trace", names("trace"), _trace_samples, NUMERIC, tol=SUM_TOL),
]


# ---- factories ------------------------------------------------------------------------------


def _eye_samples(dtype):
    yield (3,), dict(dtype=dtype)
    yield (2, 4), dict(dtype=dtype)
    yield (0, 3), dict(dtype=dtype)
    if dtype == f32:
        yield (3,), {}


def _eye_errors():
    yield ErrorInput((-1,), {}, RuntimeError, r"eye: n and m must be non-negative")


def _linspace_samples(dtype):
    if dtype not in FLOATS:
        return
    yield (0, 1, 5), dict(dtype=dtype)
    yield (-2.5, 3, 8), dict(dtype=dtype)
    yield (3, -1, 1), dict(dtype=dtype)
    yield (0, 1, 0), dict(dtype=dtype)
    if dtype == f32:
        yield (1, 10, 10), {}


def _logspace_samples(dtype):
    if dtype not in FLOATS:
        return
    yield (0, 2, 5), dict(dtype=dtype)
    yield (-1, 1, 4, 2.0), dict(dtype=dtype)


def _new_samples(dtype):
    yield (make((2, 3), dtype), (3, 4)), {}
    yield (make((2, 3), dtype), 2, 5), {}
    yield (make((), dtype), ()), {}
    yield (make((2, 3), f32), (2,)), dict(dtype=dtype)


def _new_full_samples(dtype):
    yield (make((2, 3), dtype), (3, 4), number(dtype)), {}
    yield (make((2, 3), f32), (2,), number(dtype)), dict(dtype=dtype)


opinfos += [
    OpInfo("eye", ("torch.eye",), _eye_samples, ALL, error_inputs=_eye_errors),
    OpInfo("linspace", ("torch.linspace",), _linspace_samples, FLOATS, tol=LOWP),
    OpInfo("logspace", ("torch.logspace",), _logspace_samples, FLOATS, tol=LOWP_COMPOSITE),
    OpInfo("new_zeros", ("torch.Tensor.new_zeros",), _new_samples, ALL),
    OpInfo("new_ones", ("torch.Tensor.new_ones",), _new_samples, ALL),
    OpInfo("new_empty", ("torch.Tensor.new_empty",), _new_samples, ALL, random=True),
    OpInfo("new_full", ("torch.Tensor.new_full",), _new_full_samples, ALL),
]


# ---- elementwise ----------------------------------------------------------------------------


def _unary(low=None, high=None, exclude_zero=False):
    def gen(dtype):
        kw = dict(low=low, high=high, exclude_zero=exclude_zero)
        yield (make((), dtype, **kw),), {}
        yield (make((5,), dtype, **kw),), {}
        yield (make((2, 3), dtype, **kw),), {}
        yield (make((2, 0, 3), dtype, **kw),), {}
        yield (make((2, 3), dtype, noncontig=True, **kw),), {}
        yield (transposed((3, 4), dtype, **kw),), {}

    return gen


def _special_values(dtype):
    yield from _unary()(dtype)
    if dtype.is_floating_point:
        yield (tensor_([0.0, -0.0, 1.5, math.inf, -math.inf, math.nan], dtype=dtype),), {}


def _binary_float(low=None, high=None):
    def gen(dtype):
        kw = dict(low=low, high=high)
        yield (make((2, 3), dtype, **kw), make((2, 3), dtype, **kw)), {}
        yield (make((2, 3), dtype, **kw), make((3,), dtype, **kw)), {}
        yield (make((), dtype, **kw), make((), dtype, **kw)), {}
        yield (make((0, 3), dtype, **kw), make((3,), dtype, **kw)), {}
        yield (make((2, 3), dtype, noncontig=True, **kw), transposed((2, 3), dtype, **kw)), {}

    return gen


def _logaddexp_samples(dtype):
    yield from _binary_float()(dtype)
    if not dtype.is_floating_point:
        return
    inf = tensor_([math.inf, -math.inf, math.inf, 1.0], dtype=dtype)
    yield (inf, tensor_([math.inf, -math.inf, 1.0, -math.inf], dtype=dtype)), {}


def _xlogy_samples(dtype):
    yield (make((2, 3), dtype), make((2, 3), dtype, low=0.1, high=3)), {}
    yield (make((2, 3), dtype), make((3,), dtype, low=0.1, high=3)), {}
    if dtype.is_floating_point:
        yield (tensor_([0.0, 0.0, 1.0, 2.0], dtype=dtype), tensor_([0.0, math.nan, 0.0, 3.0], dtype=dtype)), {}
        # x == 0 against the poles and edges of log and log1p (y = 0, -1, below them, nan, inf):
        # eager's value is 0 there unless y is nan, and its gradients are its own formulas
        # (d/dx masked to 0 where x == 0 and y <= 0 (<= -1), d/dy = x / y (x / (1 + y))).
        x = tensor_([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.5, -2.0, 1.5, -0.5], dtype=dtype)
        y = tensor_([0.0, -1.0, -2.0, math.nan, math.inf, 2.0, 0.0, -1.0, math.nan, math.inf], dtype=dtype)
        yield (x, y), {}
        for number in (0.0, -1.0, -2.0, 0.5, math.nan, math.inf):
            yield (x, number), {}
    yield (make((), dtype), make((), dtype, low=0.1, high=3)), {}
    yield (make((2, 3), dtype), 2.5), {}
    yield (make((0, 3), dtype), make((3,), dtype, low=0.1, high=3)), {}


def _clamp1_samples(dtype):
    bound = 0.5 if dtype in FLOATS else 2
    yield (make((2, 3), dtype), bound), {}
    yield (make((), dtype), bound), {}
    yield (make((2, 3), dtype), make((3,), dtype)), {}
    yield (transposed((2, 3), dtype), bound), {}
    yield (make((0, 3), dtype), bound), {}


def _nan_to_num_samples(dtype):
    yield from _special_values(dtype)
    if dtype.is_floating_point:
        x = tensor_([math.nan, math.inf, -math.inf, 2.0], dtype=dtype)
        yield (x,), dict(nan=1.0, posinf=5.0, neginf=-5.0)
        yield (x, 3.0), {}


def _logit_samples(dtype):
    yield from _unary(low=0.05, high=0.95)(dtype)
    yield (make((2, 3), dtype, low=0, high=1),), dict(eps=0.1)


def _float_power_samples(dtype):
    yield (make((2, 3), dtype, low=0.5, high=2), make((2, 3), dtype, low=-2, high=2)), {}
    yield (make((2, 3), dtype, low=0.5, high=2), 2), {}
    yield (make((), dtype, low=0.5, high=2), make((3,), dtype, low=0, high=2)), {}


def _complex_samples(dtype):
    yield (make((2, 3), dtype), make((2, 3), dtype)), {}
    yield (make((2, 3), dtype), make((3,), dtype)), {}
    yield (make((), dtype), make((), dtype)), {}
    yield (transposed((2, 3), dtype), make((2, 3), dtype, noncontig=True)), {}


def _complex_errors(name):
    def gen():
        yield ErrorInput((make((2,), f32), make((2,), f64)), {}, RuntimeError,
                         rf"{name}: expected .* of one dtype, float32 or float64, but got float32 and float64")

    return gen


def _view_as_real_samples(dtype):
    yield (make((2, 3), dtype),), {}
    yield (make((), dtype),), {}
    yield (transposed((2, 3), dtype),), {}


def _view_as_complex_samples(dtype):
    yield (make((3, 2), dtype),), {}
    yield (make((2, 4, 2), dtype),), {}
    yield (make((2,), dtype),), {}


def _view_as_complex_errors():
    yield ErrorInput((make((2, 3)),), {}, RuntimeError, r"view_as_complex: expected the last dimension to have length 2")


opinfos += [
    OpInfo(alias, names(alias), _unary(low=lo, high=hi), ALL, tol=LOWP)
    for alias, lo, hi in (("arccos", -0.9, 0.9), ("arcsin", -0.9, 0.9), ("arctan", None, None),
                          ("arccosh", 1.1, 3), ("arcsinh", None, None), ("arctanh", -0.9, 0.9))
]
opinfos += [
    OpInfo("absolute", names("absolute"), _unary(), NUMERIC, tol=LOWP),
    OpInfo("isnan", names("isnan"), _special_values, ALL),
    OpInfo("isinf", names("isinf"), _special_values, ALL),
    OpInfo("isposinf", names("isposinf"), _special_values, (b8,) + REALS),
    OpInfo("isneginf", names("isneginf"), _special_values, (b8,) + REALS),
    OpInfo("nan_to_num", names("nan_to_num"), _nan_to_num_samples, ALL),
    OpInfo("clamp_min", names("clamp_min"), _clamp1_samples, (b8,) + REALS),
    OpInfo("clamp_max", names("clamp_max"), _clamp1_samples, (b8,) + REALS),
    OpInfo("frac", names("frac"), _unary(low=-5, high=5), FLOATS, tol=LOWP),
    OpInfo("hypot", names("hypot"), _binary_float(), FLOATS, tol=LOWP),
    OpInfo("logaddexp", names("logaddexp"), _logaddexp_samples, FLOATS, tol=LOWP_COMPOSITE, thunder_unsupported=COMPLEX),
    OpInfo("logaddexp2", names("logaddexp2"), _logaddexp_samples, FLOATS, tol=LOWP_COMPOSITE),
    OpInfo("xlogy", names("xlogy", "torch.special.xlogy"), _xlogy_samples, (b8,) + REALS, tol=LOWP_COMPOSITE),
    OpInfo("logit", names("logit", "torch.special.logit"), _logit_samples, (b8,) + REALS, tol=LOWP_COMPOSITE),
    OpInfo("sinc", names("sinc", "torch.special.sinc"), _unary(low=-3, high=3), ALL, tol=LOWP_COMPOSITE),
    OpInfo("deg2rad", names("deg2rad"), _unary(low=-360, high=360), (b8,) + REALS, tol=LOWP),
    OpInfo("rad2deg", names("rad2deg"), _unary(low=-7, high=7), (b8,) + REALS, tol=LOWP),
    OpInfo("logical_xor", names("logical_xor"), _binary_float(), ALL),
    OpInfo("float_power", names("float_power"), _float_power_samples, ALL),
    OpInfo("complex", ("torch.complex",), _complex_samples, (f32, f64), error_inputs=_complex_errors("complex"),
           thunder_unsupported=(f16,)),
    OpInfo("polar", ("torch.polar",), _complex_samples, (f32, f64), error_inputs=_complex_errors("polar")),
    OpInfo("view_as_real", ("torch.view_as_real",), _view_as_real_samples, COMPLEX),
    OpInfo("view_as_complex", ("torch.view_as_complex",), _view_as_complex_samples, (f32, f64),
           error_inputs=_view_as_complex_errors, thunder_unsupported=(f16,)),
]


# ---- reductions and norms -------------------------------------------------------------------


def _norm_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), 1), dict(dim=1)
    yield (make((2, 3, 4), dtype), math.inf), dict(dim=(0, 2), keepdim=True)
    yield (make((2, 3, 4), dtype), -math.inf), dict(dim=-1)
    yield (make((2, 3, 4), dtype), 0), dict(dim=1)
    yield (make((2, 3, 4), dtype), 3.5), {}
    yield (make((), dtype),), {}
    yield (transposed((3, 4), dtype), 2, 0), {}
    yield (make((0, 3), dtype),), dict(dim=1)


def _torch_norm_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), "fro"), dict(dim=(0, 1))
    yield (make((2, 3, 4), dtype), 1, 1), {}
    yield (make((2, 3, 4), dtype), math.inf), dict(dim=-1, keepdim=True)
    yield (transposed((3, 4), dtype), 3), {}
    yield (make((), dtype),), {}


def _norm_errors():
    yield ErrorInput((make((2, 3), i64),), {}, RuntimeError, r"vector_norm: expected a floating point or complex input")


def _dist_samples(dtype):
    yield (make((2, 3), dtype), make((2, 3), dtype)), {}
    yield (make((2, 3), dtype), make((3,), dtype), 1), {}
    yield (make((2, 3), dtype), make((3,), dtype), math.inf), {}
    yield (make((), dtype), make((), dtype), 3), {}


def _std_mean_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), 1), {}
    yield (make((2, 3, 4), dtype), (0, 2)), dict(correction=0, keepdim=True)
    yield (transposed((3, 4), dtype),), dict(dim=0)


def _nansum_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), 1), {}
    yield (make((2, 3, 4), dtype), (0, 2), True), {}
    yield (make((), dtype),), {}
    yield (transposed((3, 4), dtype), 0), {}
    yield (make((0, 3), dtype), 1), {}
    if dtype.is_floating_point:
        x = make((3, 4), dtype)
        x[0, 1] = math.nan
        x[2, 2] = math.nan
        yield (x,), {}
        yield (x, 1), {}


def _nanmean_samples(dtype):
    for args, kw in _nansum_samples(dtype):
        if args[0].numel():
            yield args, kw


def _count_nonzero_samples(dtype):
    yield (make((2, 3, 4), dtype),), {}
    yield (make((2, 3, 4), dtype), 1), {}
    yield (make((2, 3, 4), dtype), (0, 2)), {}
    yield (make((), dtype),), {}
    yield (transposed((3, 4), dtype),), dict(dim=0)
    yield (tensor_([[0, 1, 0], [2, 0, 3]]).to(dtype),), dict(dim=1)


REDUCE_TOL = {bf16: dict(rtol=2e-2, atol=2e-2), f16: dict(rtol=4e-3, atol=4e-3), f32: dict(rtol=1e-5, atol=1e-5)}
opinfos += [
    OpInfo("vector_norm", ("torch.linalg.vector_norm",), _norm_samples, FLOAT_COMPLEX, tol=REDUCE_TOL,
           error_inputs=_norm_errors),
    OpInfo("norm", names("norm"), _torch_norm_samples, FLOAT_COMPLEX, tol=REDUCE_TOL),
    OpInfo("dist", names("dist"), _dist_samples, FLOAT_COMPLEX, tol=REDUCE_TOL),
    OpInfo("std_mean", ("torch.std_mean",), _std_mean_samples, FLOAT_COMPLEX, tol=REDUCE_TOL),
    OpInfo("nansum", names("nansum"), _nansum_samples, (b8,) + REALS, tol=REDUCE_TOL),
    OpInfo("nanmean", names("nanmean"), _nanmean_samples, FLOATS, tol=REDUCE_TOL),
    OpInfo("count_nonzero", names("count_nonzero"), _count_nonzero_samples, ALL),
]


# ---- more tensor ops ------------------------------------------------------------------------


def _unfold_samples(dtype):
    yield (make((3, 5), dtype), 1, 2, 1), {}
    yield (make((3, 5), dtype), 0, 2, 2), {}
    yield (make((2, 3, 4), dtype), -1, 4, 3), {}
    yield (make((), dtype), 0, 1, 1), {}
    yield (transposed((3, 5), dtype), 1, 0, 2), {}


def _unfold_errors():
    yield ErrorInput((make((3, 5)), 1, 6, 1), {}, RuntimeError, r"unfold: size 6 exceeds dimension 1 of length 5")


def _narrow_copy_samples(dtype):
    yield (make((3, 5), dtype), 1, 1, 3), {}
    yield (transposed((3, 5), dtype), 0, 2, 1), {}


def _msort_samples(dtype):
    yield (make((4, 3), dtype),), {}
    yield (make((5,), dtype, noncontig=True),), {}
    yield (make((0, 2), dtype),), {}


def _logcumsumexp_samples(dtype):
    yield (make((3, 4), dtype), 1), {}
    yield (make((3, 4), dtype), 0), {}
    yield (make((), dtype), 0), {}
    yield (transposed((3, 4), dtype), -1), {}
    if dtype.is_floating_point:
        yield (tensor_([-math.inf, 1.0, math.inf, 2.0], dtype=dtype), 0), {}


def _cross_samples(dtype):
    yield (make((4, 3), dtype), make((4, 3), dtype)), {}
    yield (make((3, 4), dtype), make((3, 4), dtype)), dict(dim=0)
    yield (make((2, 3), dtype), make((1, 3), dtype)), dict(dim=1)
    yield (transposed((3, 3), dtype), make((3, 3), dtype, noncontig=True)), dict(dim=-1)


def _linalg_cross_samples(dtype):
    yield (make((4, 3), dtype), make((4, 3), dtype)), {}
    yield (make((3, 3), dtype), make((1, 3), dtype)), {}
    yield (make((3, 4), dtype), make((3, 4), dtype)), dict(dim=0)


def _cross_errors():
    yield ErrorInput((make((4, 2)), make((4, 2))), {}, RuntimeError, r"cross: expected a dimension of length 3")


def _tensordot_samples(dtype):
    yield (make((2, 3, 4), dtype), make((3, 4, 5), dtype)), {}
    yield (make((2, 3), dtype), make((3, 2), dtype), 1), {}
    yield (make((2, 3, 4), dtype), make((4, 2, 3), dtype)), dict(dims=([1, 2], [2, 0]))
    yield (make((2, 3), dtype), make((4,), dtype), 0), {}
    yield (transposed((3, 4), dtype), make((4, 2), dtype, noncontig=True), ([1], [0])), {}


def _tensordot_errors():
    yield ErrorInput((make((2, 3)), make((4, 2)), 1), {}, RuntimeError, r"tensordot: contracted dimensions")


def _inner_samples(dtype):
    yield (make((2, 3), dtype), make((4, 3), dtype)), {}
    yield (make((3,), dtype), make((3,), dtype)), {}
    yield (make((), dtype), make((2, 3), dtype)), {}
    yield (make((2, 2, 3), dtype), make((3,), dtype, noncontig=True)), {}


def _vdot_samples(dtype):
    yield (make((3,), dtype), make((3,), dtype)), {}
    yield (make((4,), dtype, noncontig=True), make((4,), dtype)), {}


def _conj_samples(dtype):
    yield from _unary()(dtype)


def _bucketize_samples(dtype):
    bounds = tensor_([0, 1, 3, 5], dtype=dtype)
    yield (make((3, 4), dtype), bounds), {}
    yield (make((3, 4), dtype), bounds), dict(right=True, out_int32=True)
    yield (make((), dtype), bounds), {}
    yield (transposed((3, 4), dtype), bounds), {}
    yield (tensor_([0, 1, 2, 3, 6], dtype=dtype), bounds), dict(right=True)


def _searchsorted_samples(dtype):
    bounds = tensor_([0, 1, 3, 5], dtype=dtype)
    yield (bounds, make((3, 4), dtype)), {}
    yield (bounds, tensor_([0, 1, 2, 3, 6], dtype=dtype)), dict(right=True)
    yield (bounds, tensor_([0, 1, 2, 3, 6], dtype=dtype)), dict(side="right", out_int32=True)
    if not dtype.is_complex:
        yield (torch.sort(make((2, 5), dtype), 1).values, make((2, 3), dtype)), {}


def _heaviside_samples(dtype):
    yield (tensor_([-1, 0, 2, 0], dtype=dtype), make((4,), dtype)), {}
    yield (make((2, 3), dtype), make((3,), dtype)), {}
    yield (make((), dtype), make((), dtype)), {}


def _isclose_samples(dtype):
    a = make((2, 3), dtype)
    yield (a, a.clone()), {}
    yield (make((2, 3), dtype), make((2, 3), dtype)), {}
    yield (make((2, 3), dtype), make((3,), dtype)), dict(rtol=0.5, atol=0.5)
    if dtype.is_floating_point:
        x = tensor_([1.0, math.nan, math.inf, -math.inf, 1.0], dtype=dtype)
        y = tensor_([1.0 + 1e-6, math.nan, math.inf, math.inf, 2.0], dtype=dtype)
        yield (x, y), {}
        yield (x, y), dict(equal_nan=True)


def _fminmax_samples(dtype):
    yield from _binary_float()(dtype)
    if dtype.is_floating_point:
        yield (tensor_([math.nan, 1.0, math.nan], dtype=dtype), tensor_([2.0, math.nan, math.nan], dtype=dtype)), {}


def _median_samples(dtype):
    yield (make((3, 4), dtype),), {}
    yield (make((5,), dtype, noncontig=True),), {}
    yield (make((), dtype),), {}
    if dtype.is_floating_point:
        yield (tensor_([1.0, math.nan, 0.5], dtype=dtype),), {}
        yield (make((0, 2), dtype),), {}


def _median_errors():
    yield ErrorInput((make((0,), i64),), {}, RuntimeError, r"median: cannot compute the median of an empty int64 tensor",
                     False)


def _cartesian_samples(dtype):
    yield (make((3,), dtype), make((2,), dtype)), {}
    yield (make((3,), dtype), make((2,), dtype), make((2,), dtype)), {}
    yield (make((3,), dtype),), {}


def _column_stack_samples(dtype):
    yield ([make((3,), dtype), make((3,), dtype)],), {}
    yield ([make((2, 3), dtype), make((2,), dtype)],), {}
    yield ([make((), dtype), make((1,), dtype)],), {}


def _dstack_samples(dtype):
    yield ([make((2, 3), dtype), make((2, 3), dtype)],), {}
    yield ([make((3,), dtype), make((3,), dtype)],), {}
    yield ([make((2, 3, 1), dtype), make((2, 3, 2), dtype)],), {}


def _sum_to_size_samples(dtype):
    yield (make((2, 3, 4), dtype), (3, 1)), {}
    yield (make((2, 3, 4), dtype), 1, 3, 4), {}
    yield (make((2, 3), dtype), (2, 3)), {}
    yield (transposed((3, 4), dtype), (1, 4)), {}


def _sum_to_size_errors():
    yield ErrorInput((make((2, 3)), (3, 3)), {}, RuntimeError, rf"sum_to_size: size {shp(3, 3)} is not expandable")


def _cdist_samples(dtype):
    # p=2 over more than 25 rows (or compute_mode="use_mm_for_euclid_dist") is eager's matmul form,
    # the only one that takes half types (a VQ-VAE's codebook lookup)
    yield (make((40, 8), dtype), make((7, 8), dtype)), {}
    yield (make((2, 3, 4), dtype), make((2, 5, 4), dtype)), dict(compute_mode="use_mm_for_euclid_dist")
    yield (make((2, 30, 4), dtype), make((1, 6, 4), dtype)), {}  # batch dims broadcast
    if dtype in (bf16, f16):
        return
    yield (make((3, 4), dtype), make((2, 4), dtype)), {}
    yield (make((40, 8), dtype), make((7, 8), dtype)), dict(compute_mode="donot_use_mm_for_euclid_dist")
    yield (make((2, 3, 4), dtype), make((2, 5, 4), dtype), 1.0), {}
    yield (make((3, 2), dtype), make((2, 2), dtype)), dict(p=math.inf)
    yield (make((3, 2), dtype), make((2, 2), dtype)), dict(p=3.0)


def _cdist_errors():
    from opinfo_framework import ErrorInput

    yield ErrorInput((make((3, 4), bf16), make((2, 4), bf16)), {}, RuntimeError, "cdist.*bfloat16 or float16 only where p=2")
    yield ErrorInput((make((3, 4), f32), make((2, 5), f32)), {}, RuntimeError, "cdist.*same last dimension")


opinfos += [
    OpInfo("unfold", ("torch.Tensor.unfold",), _unfold_samples, ALL, error_inputs=_unfold_errors),
    # Eager has no derivative for narrow_copy before PyTorch 2.13: the gradient tests differentiate
    # the copy of the narrowed view.
    OpInfo("narrow_copy", names("narrow_copy"), _narrow_copy_samples, ALL,
           grad_reference=lambda a, dim, start, length: torch.narrow(a, dim, start, length).clone()),
    OpInfo("msort", names("msort"), _msort_samples, SORTABLE),
    OpInfo("logcumsumexp", names("logcumsumexp"), _logcumsumexp_samples, FLOATS, tol=LOWP_COMPOSITE,
           thunder_unsupported=COMPLEX),
    OpInfo("cross", names("cross"), _cross_samples, NUMERIC, tol=SUM_TOL, error_inputs=_cross_errors),
    OpInfo("linalg_cross", ("torch.linalg.cross",), _linalg_cross_samples, NUMERIC, tol=SUM_TOL),
    OpInfo("tensordot", ("torch.tensordot",), _tensordot_samples, MM_DTYPES, tol=MM_TOL, error_inputs=_tensordot_errors),
    OpInfo("inner", names("inner"), _inner_samples, MM_DTYPES, tol=MM_TOL),
    OpInfo("vdot", names("vdot"), _vdot_samples, MM_DTYPES, tol=MM_TOL),
    OpInfo("conj_physical", names("conj_physical"), _conj_samples, ALL),
    OpInfo("bucketize", ("torch.bucketize",), _bucketize_samples, REALS),
    OpInfo("searchsorted", ("torch.searchsorted",), _searchsorted_samples, REALS),
    OpInfo("heaviside", names("heaviside"), _heaviside_samples, (b8,) + REALS),
    OpInfo("isclose", names("isclose"), _isclose_samples, ALL),
    OpInfo("isreal", names("isreal"), _unary(), ALL),
    OpInfo("fmax", names("fmax"), _fminmax_samples, (b8,) + REALS),
    OpInfo("fmin", names("fmin"), _fminmax_samples, (b8,) + REALS),
    OpInfo("sgn", names("sgn"), _unary(), ALL, tol=LOWP),
    OpInfo("xlog1py", ("torch.special.xlog1py",), _xlogy_samples, (b8,) + REALS, tol=LOWP_COMPOSITE),
    OpInfo("entr", ("torch.special.entr",), _special_values, (b8,) + REALS, tol=LOWP_COMPOSITE),
    OpInfo("ndtr", ("torch.special.ndtr",), _special_values, (b8,) + REALS, tol=LOWP_COMPOSITE),
    OpInfo("cartesian_prod", ("torch.cartesian_prod",), _cartesian_samples, ALL),
    OpInfo("column_stack", ("torch.column_stack",), _column_stack_samples, ALL),
    OpInfo("dstack", ("torch.dstack",), _dstack_samples, ALL),
    OpInfo("sum_to_size", ("torch.Tensor.sum_to_size",), _sum_to_size_samples, ALL, tol=SUM_TOL,
           error_inputs=_sum_to_size_errors),
    OpInfo("cdist", ("torch.cdist",), _cdist_samples, FLOATS, tol=REDUCE_TOL, error_inputs=_cdist_errors),
    OpInfo("median", names("median"), _median_samples, REALS, error_inputs=_median_errors),
]


# ---- gradients ------------------------------------------------------------------------------

# Differentiable ops: the framework checks their vjp against torch.autograd (float64 and float32);
# tests/python/test_tensor_grads.py adds call forms of its own.
DIFFERENTIABLE = frozenset("""
    cumsum cumprod sort topk aminmax scatter scatter_reduce index_add index_copy index_fill index_put take
    select einsum addmm addmv baddbmm addbmm addr addcmul addcdiv outer ger dot mv repeat_interleave tile roll
    rot90 fliplr flipud diff unflatten tensor_split hsplit vsplit ravel swapdims atleast_1d atleast_2d
    atleast_3d hstack vstack clone meshgrid diagonal diag_embed diag trace arccos arcsin arctan arccosh arcsinh
    arctanh absolute nan_to_num clamp_min clamp_max frac hypot logaddexp logaddexp2 xlogy logit sinc deg2rad
    rad2deg float_power vector_norm norm dist std_mean nansum nanmean unfold narrow_copy msort logcumsumexp
    cross linalg_cross tensordot inner vdot fmax fmin sgn xlog1py entr ndtr cartesian_prod column_stack dstack
    sum_to_size cdist median
""".split())
for _op in opinfos:
    if _op.name in DIFFERENTIABLE:
        _op.supports_grad = True


def _without(gen, *, special=False, negative_index=False, larger_src=False, singular=False):
    """gen's samples for the gradient tests, less those where eager's backward fails or is taken
    at a point where the derivative does not exist (values 0, nan, inf)."""

    def finite(x):
        return not isinstance(x, torch.Tensor) or not x.is_floating_point() or bool(torch.isfinite(x).all())

    def g(dtype):
        for args, kwargs in gen(dtype):
            leaves = list(args) + list(kwargs.values())
            if special and not all(finite(x) for x in leaves):
                continue
            if negative_index and any(isinstance(x, torch.Tensor) and not x.is_floating_point() and x.dtype != b8
                                      and bool((x < 0).any()) for x in leaves):
                continue
            if larger_src and len(args) > 3 and isinstance(args[3], torch.Tensor) and args[3].shape != args[2].shape:
                continue
            if singular and any(isinstance(x, torch.Tensor) and x.is_floating_point() and bool((x == 0).any())
                                for x in leaves):
                continue
            yield args, kwargs

    return g


def _nan_to_num_grad_samples(dtype):
    # Special values only in float64: the float32 test compares with a float64 reference, whose
    # largest finite value differs.
    for args, kwargs in _nan_to_num_samples(dtype):
        if dtype == f64 or all(bool(torch.isfinite(x).all()) for x in args if isinstance(x, torch.Tensor)):
            yield args, kwargs


for _op in opinfos:
    if _op.name == "scatter":
        # Eager has no derivative for reduce='add'.
        _op.grad_sample_inputs = lambda dtype: ((a, k) for a, k in _without(_scatter_samples, larger_src=True)(dtype)
                                                if "reduce" not in k)
    elif _op.name == "index_fill":
        _op.grad_sample_inputs = _without(_index_fill_samples, negative_index=True)
    elif _op.name == "entr":
        _op.grad_sample_inputs = _unary(low=0.1, high=3)  # its domain: x > 0
    elif _op.name == "median":
        _op.grad_sample_inputs = _without(_median_samples, special=True)
    elif _op.name == "nan_to_num":
        _op.grad_sample_inputs = _nan_to_num_grad_samples
