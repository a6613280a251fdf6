"""torch.nn.functional's functions written in Python over other torch functions (no symbol of
their own) are traced through (proxies._TRACED_THROUGH): their parts are thunder symbols, not one
fallback call, and outputs and gradients match eager's. nn.MultiheadAttention has its own file."""

import pytest
import torch
import torch.nn.functional as F

import thunder


def _x(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _pos(*shape):
    # (a p-norm pool of a non-integer or odd p is nan at negative windows, in eager as here)
    return (torch.rand(*shape, dtype=torch.float64) + 0.1).requires_grad_()


# (name, function of the inputs, input makers, the traced-through function's name)
CASES = [
    ("local_response_norm 3-D", lambda x: F.local_response_norm(x, 3), [lambda: _x(2, 5, 7)], "local_response_norm"),
    ("local_response_norm 4-D", lambda x: F.local_response_norm(x, 2, alpha=1e-2, beta=0.5, k=2.0), [lambda: _x(2, 6, 4, 5)],
     "local_response_norm"),
    ("local_response_norm 5-D", lambda x: F.local_response_norm(x, 4), [lambda: _x(1, 5, 3, 4, 4)], "local_response_norm"),
    ("local_response_norm empty", lambda x: F.local_response_norm(x, 2), [lambda: _x(0, 4, 3)], "local_response_norm"),
    ("lp_pool1d p=2", lambda x: F.lp_pool1d(x, 2, 3, stride=2), [lambda: _x(2, 3, 9)], "lp_pool1d"),
    ("lp_pool2d p=3", lambda x: F.lp_pool2d(x, 3, (2, 3)), [lambda: _pos(2, 3, 6, 7)], "lp_pool2d"),
    ("lp_pool2d p=inf", lambda x: F.lp_pool2d(x, float("inf"), 2), [lambda: _x(1, 2, 4, 4)], "lp_pool2d"),
    ("lp_pool3d p=1.5", lambda x: F.lp_pool3d(x, 1.5, 2, ceil_mode=True), [lambda: _pos(1, 2, 5, 4, 5)], "lp_pool3d"),
    ("multilabel_soft_margin_loss", lambda x, t: F.multilabel_soft_margin_loss(x, t),
     [lambda: _x(4, 5), lambda: (torch.rand(4, 5) > 0.5).double()], "multilabel_soft_margin_loss"),
    ("multilabel_soft_margin_loss weight, none", lambda x, t, w: F.multilabel_soft_margin_loss(x, t, w, reduction="none"),
     [lambda: _x(4, 5), lambda: (torch.rand(4, 5) > 0.5).double(), lambda: _x(5)], "multilabel_soft_margin_loss"),
    ("softmin", lambda x: F.softmin(x, dim=1), [lambda: _x(3, 4, 2)], "softmin"),
    ("softmin dtype", lambda x: F.softmin(x.float(), dim=-1, dtype=torch.float64), [lambda: _x(3, 4)], "softmin"),
    ("triplet_margin_with_distance_loss", lambda a, p, n: F.triplet_margin_with_distance_loss(a, p, n, margin=0.5),
     [lambda: _x(4, 6), lambda: _x(4, 6), lambda: _x(4, 6)], "triplet_margin_with_distance_loss"),
    ("triplet_margin_with_distance_loss swap, cosine",
     lambda a, p, n: F.triplet_margin_with_distance_loss(
         a, p, n, distance_function=lambda u, v: 1.0 - F.cosine_similarity(u, v), swap=True, reduction="sum"),
     [lambda: _x(4, 6), lambda: _x(4, 6), lambda: _x(4, 6)], "triplet_margin_with_distance_loss"),
]


@pytest.mark.parametrize("name,fn,makers,traced", CASES, ids=[c[0] for c in CASES])
def test_traced_through_matches_eager(name, fn, makers, traced):
    torch.manual_seed(0)
    args = [m() for m in makers]
    jfn = thunder.jit(fn)
    got, want = jfn(*args), fn(*args)
    torch.testing.assert_close(got, want, equal_nan=True)
    leaves = [a for a in args if a.requires_grad]
    if want.numel():
        g = torch.randn_like(want)
        # NaN where eager's is: torch 2.11's lp_pool2d of p=inf computes x.pow(inf), whose
        # gradient is NaN (torch 2.13's takes a max pool).
        for a, b in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
            torch.testing.assert_close(a, b, equal_nan=True)
    assert f"torch.nn.functional.{traced}(" not in str(thunder.last_traces(jfn)[0])


def test_traced_through_errors_are_eagers():
    x = torch.randn(2, 3)
    with pytest.raises(ValueError, match="Expected 3D or higher dimensionality"):
        thunder.jit(lambda x: F.local_response_norm(x, 2))(x)
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        thunder.jit(lambda a: F.triplet_margin_with_distance_loss(a, a, a, margin=0.0))(x)
