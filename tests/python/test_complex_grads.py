"""Gradients through complex tensors follow PyTorch's convention (for a real loss L and complex z,
dL/d(re z) + i dL/d(im z)): checked against torch.autograd in complex128. Rules written for real
values only are refused with an error naming the op."""

import pytest
import torch

import thunder

C = torch.complex128


def _check(fn, *inputs):
    out = thunder.jit(fn)(*inputs)
    expected = fn(*inputs)
    torch.testing.assert_close(out, expected)
    diff = [x for x in inputs if x.requires_grad]
    got = torch.autograd.grad(out, diff)
    want = torch.autograd.grad(expected, diff)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def _c(*shape):
    return torch.randn(*shape, dtype=C, requires_grad=True)


def _r(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = [
    ("mul", lambda a, b: (a * b).real.sum(), (_c, (3, 4)), (_c, (3, 4))),
    ("div", lambda a, b: (a / (b + 3)).imag.sum(), (_c, (3, 4)), (_c, (4,))),
    ("add_sub_neg", lambda a, b: (-(a + b) - a * 2).real.sum(), (_c, (5,)), (_c, (5,))),
    ("complex_by_real", lambda a, x: (a * x).imag.sum() + (a / x).real.sum(), (_c, (3,)), (_r, (3,))),
    ("real_made_complex", lambda x: (x.to(C) * (1 + 2j)).imag.sum(), (_r, (4,))),
    ("shapes", lambda a: (a.reshape(2, 3).t()[1:, ::2] * 1j).real.sum() + a.sum().imag, (_c, (6,))),
    ("view_as_complex", lambda x: (torch.view_as_complex(x) * (0.5 - 1j)).real.sum(), (_r, (3, 2))),
    ("view_as_real", lambda a: torch.view_as_real(a * a).sum(), (_c, (3,))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_complex_gradients_match_pytorch(case):
    _, fn, *specs = case
    torch.manual_seed(0)
    inputs = [make(*shape) for make, shape in specs]
    _check(fn, *inputs)


def test_rule_for_real_values_only_is_refused_for_complex():
    a = _c(3)
    with pytest.raises(NotImplementedError, match=r"cannot differentiate prims\.exp for the complex tensor"):
        thunder.jit(lambda a: a.exp().real.sum())(a)
