"""Concatenations of flattened pieces (transforms/cat_reshapes.cpp): `cat([x_i.reshape(..., H_i * D)],
-1)` runs as `cat(x_i, head dim).reshape(...)`, so a fused q/k/v projection's gradient is gathered
from its head-major pieces by one kernel. Values and gradients against eager, every floating
dtype, and the traces' shape."""

import re

import pytest
import torch

import thunder


def _qkv_attention(x, w):
    # A fused q/k/v projection split into heads (GPT-2's c_attn): the backward gathers the three
    # head-major gradients into the projection's gradient.
    B, T, _ = x.shape
    H, D = 2, 4
    q, k, v = (x @ w).split(H * D, dim=2)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
    a = torch.softmax(q @ k.transpose(-2, -1) / D**0.5, dim=-1)
    return (a @ v).transpose(1, 2).reshape(B, T, H * D)


def _grouped(x, w):
    # Grouped heads: the pieces have 2, 1 and 1 heads of the same head dim.
    B, T, _ = x.shape
    q, k, v = (x @ w).split((8, 4, 4), dim=2)
    q = q.view(B, T, 2, 4).transpose(1, 2)
    k, v = (t.view(B, T, 1, 4).transpose(1, 2).expand(B, 2, T, 4) for t in (k, v))
    return (torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v).transpose(1, 2).reshape(B, T, 8).tanh()


def _forward_cat(x, w):
    # The pattern in a forward: permuted pieces flattened and concatenated.
    B, T, _ = x.shape
    a = (x @ w).view(B, T, 3, 4).permute(0, 1, 3, 2).exp()  # [B, T, 4, 3]
    b = (x @ w).view(B, T, 6, 2).sin()
    c = (x @ w).view(B, T, 2, 6)[..., :3].cos()  # [B, T, 2, 3]
    return torch.cat([a.reshape(B, T, 12), c.reshape(B, T, 6), a.reshape(B, T, -1)], dim=-1) * 2 + b.sum()


def _different_head_dims(x, w):
    # Pieces of different trailing dims (4 x 3 and 2 x 6) flatten alike: not rewritten.
    B, T, _ = x.shape
    a = (x @ w).view(B, T, 4, 3).tanh()
    b = (x @ w).view(B, T, 2, 6).sigmoid()
    return torch.cat([a.reshape(B, T, 12), b.reshape(B, T, 12)], dim=2)


def _cat_leading_dim(x, w):
    # Along another dim than the last: not rewritten.
    B, T, _ = x.shape
    a = (x @ w).view(B, T, 3, 4).exp()
    return torch.cat([a.reshape(B, T, 12), a.reshape(B, T, 12) * 2], dim=1)


CASES = {
    # name: (fn, x shape, w shape, the backward's concatenation is rewritten)
    "qkv_attention": (_qkv_attention, (2, 5, 6), (6, 24), True),
    "grouped_heads": (_grouped, (2, 3, 6), (6, 16), True),
    "forward_cat": (_forward_cat, (2, 3, 5), (5, 12), False),
    "different_head_dims": (_different_head_dims, (2, 3, 5), (5, 12), False),
    "cat_leading_dim": (_cat_leading_dim, (2, 3, 5), (5, 12), False),
    "empty_batch": (_qkv_attention, (0, 5, 6), (6, 24), False),
}
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_cat_of_flattened_pieces(name, dtype, executors):
    fn, xs, ws, fused = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(xs, dtype=dtype, requires_grad=True)
    w = (torch.randn(ws, dtype=dtype) / ws[0] ** 0.5).requires_grad_()
    xr, wr = (t.detach().clone().requires_grad_() for t in (x, w))
    jf = thunder.jit(fn, **({"executors": executors} if executors else {}))
    out, want = jf(x, w), fn(xr, wr)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out, want, rtol=rtol, atol=atol)
    g = torch.randn_like(want)
    got = torch.autograd.grad(out, (x, w), g)
    exp = torch.autograd.grad(want, (xr, wr), g)
    for a, e in zip(got, exp):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol * max(1.0, e.abs().max().item() if e.numel() else 1.0))
    names = [str(t).splitlines()[0] for t in thunder.last_backward_traces(jf)]
    assert any("Concatenation of flattened pieces" in n for n in names) == fused, names


def _cats(trace):
    return [l.strip() for l in str(trace).splitlines() if re.match(r"\s+\w+ = ltorch\.cat\(", l)]


def test_rewrite_concatenates_the_unflattened_pieces():
    jf = thunder.jit(_qkv_attention, executors=["torch"])
    x, w = torch.randn(2, 5, 6, requires_grad=True), torch.randn(6, 24, requires_grad=True)
    jf(x, w).sum().backward()
    traces = thunder.last_backward_traces(jf)
    names = [str(t).splitlines()[0] for t in traces]
    i = next(k for k, n in enumerate(names) if "Concatenation of flattened pieces" in n)
    before, after = _cats(traces[i - 1]), _cats(traces[i])
    # Before: three [2, 5, 8] pieces along dim 2; after: three [2, 5, 2, 4] pieces along the head dim.
    assert len(before) == 1 and before[0].endswith('"cpu f32[2, 5, 24]"') and ", 2)" in before[0], before
    assert len(after) == 1 and after[0].endswith('"cpu f32[2, 5, 6, 4]"') and ", 2)" in after[0], after


def test_not_rewritten_where_pieces_differ():
    for fn in (_different_head_dims, _cat_leading_dim):
        jf = thunder.jit(fn, executors=["torch"])
        jf(torch.randn(2, 3, 5), torch.randn(5, 12))
        assert not any("Concatenation of flattened pieces" in str(t).splitlines()[0] for t in thunder.last_traces(jf))
