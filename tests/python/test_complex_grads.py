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
    # |z| (its gradient sgn(z), 0 at 0: the first element is made 0 below) and exp(z)
    ("abs", lambda a: (a.abs() * torch.arange(6.0, dtype=torch.float64)).sum(), (_c, (6,))),
    ("exp", lambda a: (torch.exp(a * 0.5j) * (1 - 2j)).real.sum(), (_c, (4,))),
    ("exp_of_real", lambda x: torch.exp(x.to(C) * 1j).imag.sum(), (_r, (4,))),
    # a spectrogram's magnitude, and Llama's reference rotary embedding (polar, complex products)
    ("rfft_magnitude", lambda x: torch.fft.rfft(x).abs().pow(2).sum(), (_r, (16,))),
    ("stft_magnitude", lambda x: torch.stft(x, 8, window=torch.hann_window(8, dtype=x.dtype),
                                            return_complex=True).abs().sum(), (_r, (40,))),
    ("polar_rotary", lambda x: (torch.view_as_real(torch.view_as_complex(x.view(8, 2)) * torch.polar(
        torch.ones(8, dtype=x.dtype), torch.arange(8, dtype=x.dtype))).flatten() * torch.arange(16.0, dtype=x.dtype)).sum(),
     (_r, (16,))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_complex_gradients_match_pytorch(case):
    _, fn, *specs = case
    torch.manual_seed(0)
    inputs = [make(*shape) for make, shape in specs]
    if case[0] == "abs":
        with torch.no_grad():
            inputs[0][0] = 0
    _check(fn, *inputs)


def test_rule_for_real_values_only_is_refused_for_complex():
    a = _c(3)
    with pytest.raises(NotImplementedError, match=r"cannot differentiate prims\.sin for the complex tensor"):
        thunder.jit(lambda a: a.sin().real.sum())(a)
