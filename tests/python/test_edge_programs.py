"""Valid programs at the edges of an op's domain (issue 33): x.T, x.mT, x.H and x.mH on tensors of
every rank, logsumexp over an empty dim, softmax of an empty integer tensor, and torch.where with one argument. Each row runs as eager
runs it (values, dtypes, gradients), or raises eager's exception type, or, for torch.where(cond),
a NotImplementedError that names it and says why."""

import warnings

import pytest
import torch

import thunder


def _x(*shape, dtype=torch.float64):
    return torch.randn(shape, dtype=dtype)


def _complex(*shape):
    return torch.randn(shape, dtype=torch.complex128)


CASES = [
    ("T_0d", lambda x: x.T * 2, _x()),
    ("T_1d", lambda x: x.T * 2, _x(3)),
    ("T_2d", lambda x: x.T * 2, _x(2, 3)),
    ("T_3d", lambda x: x.T * 2, _x(2, 3, 4)),
    ("T_1d_updated_in_place", lambda x: (x * 1).T.add_(1), _x(3)),
    ("mT_0d", lambda x: x.mT * 2, _x()),
    ("mT_3d", lambda x: x.mT * 2, _x(2, 3, 4)),
    ("H_0d", lambda x: x.H * 2, _x()),
    ("H_2d", lambda x: x.H * 2, _x(2, 3)),
    ("H_2d_complex", lambda x: x.H, _complex(2, 3)),
    ("mH_0d", lambda x: x.mH * 2, _x()),
    ("mH_3d", lambda x: x.mH * 2, _x(2, 3, 4)),
    ("logsumexp_empty_dim", lambda x: torch.logsumexp(x, 1), _x(2, 0, 3)),
    ("logsumexp_empty_dim_keepdim", lambda x: torch.logsumexp(x, 1, keepdim=True), _x(2, 0, 3)),
    ("logsumexp_all_dims_empty", lambda x: torch.logsumexp(x, (0, 1)), _x(0, 3)),
    ("logsumexp_other_dim_empty", lambda x: torch.logsumexp(x, 1), _x(0, 3)),
    ("logsumexp_empty_dim_float32", lambda x: torch.logsumexp(x, -1), _x(4, 0, dtype=torch.float32)),
    ("logsumexp_empty_dim_int", lambda x: torch.logsumexp(x, 0), torch.zeros(0, 2, dtype=torch.int64)),
    # eager runs no kernel on an empty tensor: an empty result of the input's dtype, ints and bools too
    ("softmax_empty_int", lambda x: torch.softmax(x, 1), torch.zeros(0, 3, dtype=torch.int64)),
    ("log_softmax_empty_int32", lambda x: torch.log_softmax(x, 0), torch.zeros(0, dtype=torch.int32)),
    ("softmax_empty_bool", lambda x: x.softmax(-1), torch.zeros(2, 0, dtype=torch.bool)),
    ("softmax_empty_int_to_float", lambda x: torch.softmax(x, 1, dtype=torch.float32), torch.zeros(0, 3, dtype=torch.int64)),
]


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_edge_programs_run_as_eager(name, fn, x, executors):
    grad = x.is_floating_point() or x.is_complex()
    xe, xt = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's deprecation warnings of x.T, x.mT, x.H on 0-D and 1-D
        want = fn(xe)
        got = thunder.jit(fn, executors=executors)(xt)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    if not want.requires_grad or want.numel() == 0 and x.numel() == 0:
        return
    cot = torch.randn_like(want)
    (ge,) = torch.autograd.grad(want, xe, cot)
    (gt,) = torch.autograd.grad(got, xt, cot)
    torch.testing.assert_close(gt, ge)


ERRORS = [
    ("H_1d", lambda x: x.H, _x(3), RuntimeError, "2-D"),
    ("H_3d", lambda x: x.H, _x(2, 3, 4), RuntimeError, "2-D"),
    ("mH_1d", lambda x: x.mH, _x(3), RuntimeError, "1-D"),
    ("mT_1d", lambda x: x.mT, _x(3), RuntimeError, "1-D"),
]


@pytest.mark.parametrize("name,fn,x,exc,match", ERRORS, ids=[c[0] for c in ERRORS])
def test_edge_programs_raise_as_eager(name, fn, x, exc, match):
    with pytest.raises(exc):
        fn(x)
    with pytest.raises(exc, match=match):
        thunder.jit(fn)(x)


@pytest.mark.parametrize("fn", [
    lambda x: torch.where(x > 0),
    lambda x: torch.where(condition=x > 0),
    lambda x: torch.where(x > 0)[0] * 2,
], ids=["positional", "keyword", "used"])
def test_where_of_a_condition_alone_is_refused_by_name(fn):
    x = torch.tensor([1.0, -1.0, 2.0])
    expected = fn(x)  # eager: torch.nonzero(x > 0, as_tuple=True)
    # (the message names thunderfx, which runs it: torchvision's detection heads select boxes so)
    with pytest.raises(NotImplementedError, match=r"torch\.where\(condition\).*data-dependent.*thunder\.dynamo\.thunderfx"):
        thunder.jit(fn)(x)
    from thunder.dynamo import thunderfx

    torch._dynamo.reset()
    torch.testing.assert_close(thunderfx(fn)(x), expected)


def test_shift_and_unary_plus_operators():
    # (the proxies had no __lshift__, __rshift__, their reflected forms, nor __pos__)
    a = torch.tensor([1, -8, 5], dtype=torch.int32)
    x = torch.tensor([1.5, -2.0])

    def f(a, x):
        return a << 2, a >> 1, a << a.abs(), 3 >> a.abs(), +x

    for got, want in zip(thunder.jit(f)(a, x), f(a, x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)

    def g(x):
        (+x).add_(1)  # +x is x itself
        return x * 1

    torch.testing.assert_close(thunder.jit(g)(x.clone()), g(x.clone()))


def test_default_dtype_decides_promotion_to_floats():
    # torch.set_default_dtype(torch.float64): integers promoted to floats and Python floats are
    # float64, as in eager (thunder had promoted them to float32)
    a = torch.tensor([1, 2, 3], dtype=torch.int32)

    def f(a):
        return a * 2.5, a / 2, a.sqrt(), (a > 1) * 1.5, torch.full((2,), 0.1), a * (1 + 2j)

    jf = thunder.jit(f)
    before = torch.get_default_dtype()
    try:
        for dtype in (torch.float64, torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            for got, want in zip(jf(a), f(a)):
                assert got.dtype == want.dtype, (dtype, got.dtype, want.dtype)
                torch.testing.assert_close(got, want)
    finally:
        torch.set_default_dtype(before)
    assert thunder.cache_misses(jf) == 2


_TABLE = torch.arange(6.0).view(2, 3)


def test_sizes_and_methods_of_tensors_the_program_holds():
    # size() of a tensor the program closes over or made from constants (torch.distributions'
    # `len(value.size())` of a torch.tensor([...]) target) crashed: it was read as a proxy's
    def f(x):
        c = torch.tensor([1.0, 2.0, 3.0])
        w = _TABLE
        return (x * w.size(0) + w.size(-1) + w.dim() + w.numel() + len(w) + c.size(0) + w.shape[1]
                + w.is_contiguous() + w.t().contiguous().sum() + w.to(torch.float64).sum() + w.detach().sum()
                + w.stride(0) + w.T.shape[0] + w.where(w > 2, 0.0).sum())

    x = torch.ones(3)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


@pytest.mark.parametrize("op", ["to", "clone", "half", "to_channels_last"])
def test_memory_format_arguments_lay_results_out_as_eager(op):
    # (they were dropped: a contiguous layout asked for stayed transposed, and a .view after failed)
    f = {
        "to": lambda x: x.to(torch.float64, memory_format=torch.contiguous_format),
        "clone": lambda x: x.clone(memory_format=torch.contiguous_format),
        "half": lambda x: x.half(memory_format=torch.contiguous_format),
        "to_channels_last": lambda x: x.to(memory_format=torch.channels_last) * 1,
    }[op]
    x = torch.randn(2, 3, 4, 5) if op == "to_channels_last" else torch.randn(4, 6).t()
    got, want = thunder.jit(f)(x), f(x)
    assert got.stride() == want.stride() and got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    if op != "to_channels_last":
        torch.testing.assert_close(thunder.jit(lambda x: f(x).view(-1))(x), want.view(-1))
