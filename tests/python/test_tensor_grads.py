"""Gradients of the tensor ops (csrc/ops/ltorch_tensor.cpp) through thunder.jit against
torch.autograd, in float64 on CPU: one row per op and call form."""

import math

import pytest
import torch

import thunder

torch.manual_seed(0)
D = torch.float64


def t(*shape, low=-2.0, high=2.0):
    return torch.empty(shape, dtype=D).uniform_(low, high)


def pos(*shape):
    return t(*shape, low=0.5, high=2.0)


def distinct(*shape):
    """Values with no ties (sort, topk and their indices are then unique)."""
    n = math.prod(shape)
    return (torch.randperm(n).to(D) / n + 0.1 * torch.rand(n, dtype=D) / n).reshape(shape)


# Positions of nan and infinities for nan_to_num, nansum and nanmean (through where, so the input's
# gradient stays finite).
SPECIAL_MASK = torch.tensor([False, True, True, True])
SPECIAL = torch.tensor([0.0, math.nan, math.inf, -math.inf], dtype=D)

# (name, fn, args): every floating tensor argument is differentiated; integer tensors are indices.
CASES = [
    # scans and sorting
    ("cumsum", lambda a: torch.cumsum(a, 1), [t(3, 4)]),
    ("cumsum_dim0", lambda a: a.cumsum(0), [t(3, 4, 2)]),
    ("cumsum_0dim", lambda a: a.cumsum(0), [t()]),
    ("cumprod", lambda a: torch.cumprod(a, 1), [t(3, 4)]),
    ("cumprod_zeros", lambda a: torch.cumprod(a, 1),
     [torch.tensor([[1.5, 0.0, 2.0, 3.0], [0.0, 0.0, 1.0, 2.0], [2.0, 1.0, 0.5, 0.0]], dtype=D)]),
    ("sort", lambda a: torch.sort(a, 1).values, [distinct(3, 4)]),
    ("sort_descending_dim0", lambda a: a.sort(0, descending=True)[0] * 2, [distinct(3, 4)]),
    ("topk", lambda a: torch.topk(a, 2).values, [distinct(3, 5)]),
    ("topk_smallest", lambda a: a.topk(3, dim=0, largest=False)[0], [distinct(4, 2)]),
    ("max_dim", lambda a: torch.max(a, 1).values, [distinct(3, 4)]),
    ("aminmax", lambda a: torch.aminmax(a, dim=0), [distinct(3, 4)]),
    # scatter, index updates
    ("scatter_src", lambda a, s: torch.scatter(a, 1, torch.tensor([[0, 2], [1, 3], [3, 0]]), s), [t(3, 4), t(3, 2)]),
    ("scatter_value", lambda a: a.scatter(0, torch.tensor([[2, 0, 1, 1]]), 1.5), [t(3, 4)]),
    ("scatter_reduce_sum", lambda a, s: torch.scatter_reduce(a, 1, torch.tensor([[0, 0, 1], [3, 3, 3]]), s, "sum"),
     [t(2, 4), t(2, 3)]),
    ("scatter_reduce_mean", lambda a, s: torch.scatter_reduce(a, 1, torch.tensor([[0, 0, 1], [3, 3, 3]]), s, "mean",
                                                              include_self=False), [t(2, 4), t(2, 3)]),
    ("index_add", lambda a, s: torch.index_add(a, 0, torch.tensor([0, 2, 0]), s, alpha=2.0), [t(4, 3), t(3, 3)]),
    ("index_copy", lambda a, s: a.index_copy(1, torch.tensor([2, 0]), s), [t(4, 3), t(4, 2)]),
    ("index_fill", lambda a: a.index_fill(1, torch.tensor([0, 2]), -1.0), [t(4, 3)]),
    ("index_put", lambda a, v: a.index_put((torch.tensor([0, 3]), torch.tensor([1, 2])), v), [t(4, 3), t(2)]),
    ("index_put_accumulate", lambda a, v: a.index_put((torch.tensor([0, 2, 0]),), v, accumulate=True),
     [t(4, 3), t(3, 3)]),
    ("take", lambda a: torch.take(a, torch.tensor([[0, 5], [-1, 5]])), [t(3, 4)]),
    ("select", lambda a: a.select(1, -1), [t(3, 4)]),
    # einsum and the matmul family
    ("einsum_mm", lambda a, b: torch.einsum("ij,jk->ik", a, b), [t(2, 3), t(3, 4)]),
    ("einsum_batch", lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b), [t(1, 2, 3, 4), t(1, 2, 5, 4)]),
    ("einsum_three", lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), [t(2, 3), t(3, 4), t(4, 2)]),
    ("einsum_sum_broadcast", lambda a, b: torch.einsum("ij,ik->jk", a, b), [t(2, 3), t(1, 4)]),
    ("einsum_trace_out", lambda a: torch.einsum("ij->", a), [t(2, 3)]),
    ("addmm", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), [t(4), t(2, 3), t(3, 4)]),
    ("addmv", lambda i, a, v: torch.addmv(i, a, v), [t(2), t(2, 3), t(3)]),
    ("baddbmm", lambda i, a, b: torch.baddbmm(i, a, b, alpha=0.5), [t(2, 3, 4), t(2, 3, 5), t(2, 5, 4)]),
    ("addbmm", lambda i, a, b: torch.addbmm(i, a, b), [t(3, 4), t(2, 3, 5), t(2, 5, 4)]),
    ("addr", lambda i, a, b: torch.addr(i, a, b, beta=2.0), [t(3, 4), t(3), t(4)]),
    ("addcmul", lambda i, a, b: torch.addcmul(i, a, b, value=0.5), [t(2, 3), t(3), t(2, 1)]),
    ("addcdiv", lambda i, a, b: torch.addcdiv(i, a, b, value=0.5), [t(2, 3), t(3), pos(2, 1)]),
    ("outer", torch.outer, [t(3), t(4)]),
    ("dot", torch.dot, [t(3), t(3)]),
    ("mv", torch.mv, [t(2, 3), t(3)]),
    # shape utilities
    ("repeat_interleave", lambda a: a.repeat_interleave(2, dim=1), [t(2, 3)]),
    ("repeat_interleave_flat", lambda a: torch.repeat_interleave(a, 3), [t(2, 2)]),
    ("tile", lambda a: a.tile((2, 1, 2)), [t(2, 3)]),
    ("roll", lambda a: torch.roll(a, (1, -5), (0, 1)), [t(3, 4)]),
    ("roll_flat", lambda a: torch.roll(a, 5), [t(3, 4)]),
    ("rot90", lambda a: torch.rot90(a, 1, (0, 1)), [t(2, 3)]),
    ("rot90_3", lambda a: torch.rot90(a, 3, (1, 0)), [t(2, 3)]),
    ("fliplr", torch.fliplr, [t(2, 3)]),
    ("flipud", torch.flipud, [t(2, 3)]),
    ("diff", lambda a: torch.diff(a, n=2, dim=1), [t(3, 5)]),
    ("diff_prepend", lambda a, p: torch.diff(a, prepend=p), [t(3, 4), t(3, 1)]),
    ("unflatten", lambda a: a.unflatten(1, (2, -1)), [t(2, 6)]),
    ("tensor_split", lambda a: torch.tensor_split(a, (1, 3), dim=1), [t(2, 5)]),
    ("hsplit", lambda a: torch.hsplit(a, 2), [t(2, 4)]),
    ("vsplit", lambda a: torch.vsplit(a, [1]), [t(3, 2)]),
    ("ravel", lambda a: torch.ravel(a.t()), [t(2, 3)]),
    ("swapdims", lambda a: a.swapdims(0, 2), [t(2, 3, 4)]),
    ("atleast_3d", torch.atleast_3d, [t(3)]),
    ("hstack", lambda a, b: torch.hstack([a, b]), [t(2, 3), t(2, 1)]),
    ("vstack", lambda a, b: torch.vstack([a, b]), [t(3), t(2, 3)]),
    ("clone", lambda a: a.clone() * 2, [t(2, 3)]),
    ("meshgrid", lambda a, b: torch.meshgrid(a, b, indexing="xy"), [t(3), t(2)]),
    ("diagonal", lambda a: torch.diagonal(a, 1), [t(3, 4)]),
    ("diagonal_dims", lambda a: a.diagonal(-1, 2, 0), [t(3, 2, 4)]),
    ("diag_embed", lambda a: torch.diag_embed(a, 1), [t(2, 3)]),
    ("diag_embed_negative", lambda a: torch.diag_embed(a, -1, 0, 2), [t(2, 3)]),
    ("diag_vector", lambda a: torch.diag(a), [t(3)]),
    ("diag_matrix", lambda a: torch.diag(a, -1), [t(3, 4)]),
    ("trace", torch.trace, [t(3, 4)]),
    # elementwise
    ("arccos", torch.arccos, [t(3, 4, low=-0.9, high=0.9)]),
    ("arcsinh", torch.arcsinh, [t(3, 4)]),
    ("absolute", torch.absolute, [t(3, 4)]),
    ("nan_to_num", lambda a: torch.nan_to_num(torch.where(SPECIAL_MASK, SPECIAL, a)), [t(3, 4)]),
    ("nan_to_num_values", lambda a: torch.nan_to_num(torch.where(SPECIAL_MASK, SPECIAL, a), 1.0, 2.0, -2.0), [t(3, 4)]),
    ("clamp_min", lambda a: torch.clamp_min(a, 0.5), [t(3, 4)]),
    ("clamp_max_tensor", lambda a, b: a.clamp_max(b), [t(3, 4), t(4)]),
    ("frac", torch.frac, [t(3, 4, low=-5, high=5)]),
    ("hypot", torch.hypot, [t(3, 4), t(4)]),
    ("logaddexp", torch.logaddexp, [t(3, 4), t(3, 4)]),
    ("logaddexp2", torch.logaddexp2, [t(3, 4), t(4)]),
    ("xlogy", torch.xlogy, [t(3, 4), pos(3, 4)]),
    ("xlogy_zero", torch.xlogy, [torch.tensor([0.0, 1.0, 0.0], dtype=D), pos(3)]),
    ("logit", torch.logit, [t(3, 4, low=0.1, high=0.9)]),
    ("logit_eps", lambda a: torch.logit(a, eps=0.2), [t(3, 4, low=0.05, high=0.95)]),
    ("sinc", torch.sinc, [t(3, 4)]),
    ("sinc_at_zero", torch.sinc, [torch.tensor([0.0, 0.5, -1.5], dtype=D)]),
    ("deg2rad", torch.deg2rad, [t(3, 4)]),
    ("rad2deg", torch.rad2deg, [t(3, 4)]),
    ("float_power", torch.float_power, [pos(3, 4), t(3, 4)]),
    # reductions and norms
    ("vector_norm", lambda a: torch.linalg.vector_norm(a), [t(3, 4)]),
    ("vector_norm_1", lambda a: torch.linalg.vector_norm(a, 1, dim=1), [t(3, 4)]),
    ("vector_norm_inf", lambda a: torch.linalg.vector_norm(a, math.inf, dim=0, keepdim=True), [distinct(3, 4) - 0.5]),
    ("vector_norm_p", lambda a: torch.linalg.vector_norm(a, 3.5, dim=(0, 1)), [t(3, 4)]),
    ("norm_fro", lambda a: torch.norm(a), [t(3, 4)]),
    ("norm_dim", lambda a: a.norm(2, dim=1, keepdim=True), [t(3, 4)]),
    ("dist", torch.dist, [t(3, 4), t(4)]),
    ("std_mean", lambda a: torch.std_mean(a, 1), [t(3, 4)]),
    ("var_mean", lambda a: torch.var_mean(a, (0, 1), correction=0), [t(3, 4)]),
    ("nansum", lambda a: torch.nansum(torch.where(SPECIAL_MASK, math.nan, a), 1), [t(3, 4)]),
    ("nanmean", lambda a: torch.nanmean(torch.where(SPECIAL_MASK, math.nan, a)), [t(3, 4)]),
    # more tensor ops
    ("unfold", lambda a: a.unfold(1, 2, 1), [t(3, 5)]),
    ("unfold_step", lambda a: a.unfold(0, 2, 2) * 2, [t(5, 2)]),
    ("narrow_copy", lambda a: torch.narrow_copy(a, 1, 1, 2), [t(3, 4)]),
    ("msort", torch.msort, [distinct(4, 3)]),
    ("logcumsumexp", lambda a: torch.logcumsumexp(a, 1), [t(3, 4)]),
    ("cross", lambda a, b: torch.cross(a, b, dim=1), [t(4, 3), t(4, 3)]),
    ("linalg_cross", torch.linalg.cross, [t(4, 3), t(1, 3)]),
    ("tensordot", lambda a, b: torch.tensordot(a, b, dims=([1, 2], [2, 0])), [t(2, 3, 4), t(4, 2, 3)]),
    ("inner", torch.inner, [t(2, 3), t(4, 3)]),
    ("vdot", torch.vdot, [t(3), t(3)]),
    ("fmax", torch.fmax, [t(3, 4), torch.where(SPECIAL_MASK, math.nan, t(3, 4))]),
    ("fmin", torch.fmin, [t(3, 4), t(4)]),
    ("sgn", torch.sgn, [t(3, 4)]),
    ("xlog1py", torch.special.xlog1py, [t(3, 4), pos(3, 4)]),
    ("entr", torch.special.entr, [pos(3, 4)]),
    ("ndtr", torch.special.ndtr, [t(3, 4)]),
    ("cartesian_prod", torch.cartesian_prod, [t(3), t(2)]),
    ("column_stack", lambda a, b: torch.column_stack([a, b]), [t(3), t(3, 2)]),
    ("dstack", lambda a, b: torch.dstack([a, b]), [t(2, 3), t(2, 3)]),
    ("sum_to_size", lambda a: a.sum_to_size(3, 1), [t(2, 3, 4)]),
    ("cdist", torch.cdist, [t(3, 4), t(2, 4)]),
    ("cdist_p1", lambda a, b: torch.cdist(a, b, p=1.0), [t(2, 3, 4), t(2, 5, 4)]),
    # the matmul form (more than 25 rows), with zero distances: no gradient passes them, as in eager
    ("cdist_mm_zero_distance", lambda a, b: torch.cdist(a, torch.cat([b, a[:3].detach()])), [t(30, 4), t(2, 4)]),
    ("median", torch.median, [distinct(3, 4)]),
    # existing ops in the forms real models use them
    ("masked_fill_broadcast", lambda a: a.masked_fill(torch.tensor([True, False, True, False]), -1e9), [t(3, 4)]),
    ("repeat", lambda a: a.repeat(2, 1, 3), [t(2, 3)]),
    ("tril_diagonal", lambda a: torch.tril(a, -1) + torch.triu(a, 2), [t(3, 4)]),
    ("lerp", torch.lerp, [t(3, 4), t(4), t(3, 1)]),
]


def _requires_grad(args):
    return [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args]


def _float_outputs(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_grad_matches_torch_autograd(name, fn, args):
    eager_args, thunder_args = _requires_grad(args), _requires_grad(args)
    expected = fn(*eager_args)
    actual = thunder.jit(fn)(*thunder_args)
    eager_outs, thunder_outs = _float_outputs(expected), _float_outputs(actual)
    assert len(eager_outs) == len(thunder_outs)
    for e, a in zip(eager_outs, thunder_outs):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10, equal_nan=True)
    eager_outs = [o for o in eager_outs if o.requires_grad]
    thunder_outs = [o for o in thunder_outs if o.requires_grad]
    assert eager_outs and len(eager_outs) == len(thunder_outs), f"{name}: outputs that need a gradient differ"
    cotangents = [torch.randn_like(o) for o in eager_outs]
    wrt_e = [a for a in eager_args if isinstance(a, torch.Tensor) and a.requires_grad]
    wrt_t = [a for a in thunder_args if isinstance(a, torch.Tensor) and a.requires_grad]
    ge = torch.autograd.grad(eager_outs, wrt_e, cotangents, allow_unused=True)
    gt = torch.autograd.grad(thunder_outs, wrt_t, cotangents, allow_unused=True)
    for e, a in zip(ge, gt):
        if e is None:
            assert a is None or torch.count_nonzero(a) == 0
            continue
        assert a is not None, f"{name}: thunder gave no gradient where eager gives one"
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9)


def test_ops_run_natively():
    """The ops above have thunder symbols: thunder.examine finds no call that falls back to PyTorch
    (torch.tensor of constant indices aside) and none that fails."""
    for name, fn, args in CASES:
        report = thunder.examine(fn, *args)
        fallback = {k: v for k, v in report.fallback.items() if k != "torch.tensor"}
        assert not fallback and not report.failing, f"{name}: {report}"
