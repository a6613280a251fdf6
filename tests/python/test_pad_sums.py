"""Gradients that arrive as sums of zero pads (split, slices, rotate-half) run as one `cat`
(transforms/pad_sums.cpp), and the runtime's in-place use of dead scatter inputs (donation,
runtime/program.cpp): results and gradients against eager, and the traces' shape."""

import pytest
import torch
import torch.nn.functional as F

import thunder


def _rope(x, cos, sin):
    h = x.size(-1) // 2
    rotated = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rotated * sin


def _split_permute(x, w):
    # The grouped q/k/v split of a fused projection, as Llama-style attention writes it.
    B, T, _ = x.shape
    qkv = (x @ w).view(B, T, 2, 6, 4).permute(0, 2, 3, 1, 4)
    q, k, v = qkv.split((4, 1, 1), dim=2)
    return (q * 2).sum() + (k.expand(B, 2, 4, T, 4) * 3).sum() + (v * v).sum()


def _slices_gap(x):
    # Two slices with a gap between them: the gradient is zero in the gap.
    return (x[:, :2].exp()).sum() + (x[:, 5:].sin()).sum()


def _overlap(x):
    # Overlapping slices: their pads are not disjoint, so no concatenation.
    return (x[:, :4] * 2).sum() + (x[:, 2:] * 3).sum()


def _chunks(x):
    a, b, c = x.chunk(3, dim=0)
    return (a * b).sum() + c.tanh().sum()


CASES = [
    ("rope", _rope, lambda dt: (torch.randn(2, 3, 5, 8, dtype=dt), torch.randn(5, 8, dtype=dt), torch.randn(5, 8, dtype=dt)), True),
    ("split_permute", _split_permute, lambda dt: (torch.randn(2, 3, 8, dtype=dt), torch.randn(8, 48, dtype=dt)), True),
    ("slices_gap", _slices_gap, lambda dt: (torch.randn(3, 7, dtype=dt),), True),
    ("overlap", _overlap, lambda dt: (torch.randn(3, 6, dtype=dt),), False),
    ("chunks", _chunks, lambda dt: (torch.randn(6, 4, dtype=dt),), True),
]


def _backward_source(jfn):
    return str(thunder.last_backward_traces(jfn)[-1])


@pytest.mark.parametrize("name,fn,make,rewritten", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pad_sums_grad(name, fn, make, rewritten, dtype):
    args = make(dtype)
    ref_args = [a.clone().requires_grad_(True) for a in args]
    th_args = [a.clone().requires_grad_(True) for a in args]
    out = fn(*ref_args)
    out.sum().backward() if out.dim() else out.backward()
    jfn = thunder.jit(fn)
    tout = jfn(*th_args)
    tout.sum().backward() if tout.dim() else tout.backward()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tout, out, **tol)
    for a, b in zip(th_args, ref_args):
        torch.testing.assert_close(a.grad, b.grad, **tol)
    src = _backward_source(jfn)
    if rewritten:
        assert "pad(" not in src, src
        assert "cat(" in src, src
    else:
        assert "pad(" in src, src


def test_split_permute_reshape_is_a_view():
    # The concatenation of the split's gradient is laid out as the reshape after the permutation
    # needs: its pieces are permuted, the concatenation runs along the permuted dim.
    x, w = torch.randn(2, 3, 8, requires_grad=True), torch.randn(8, 48, requires_grad=True)
    jfn = thunder.jit(_split_permute)
    jfn(x, w).backward()
    trace = thunder.last_backward_traces(jfn)[-1]
    lines = [l for l in str(trace).splitlines() if " = torch.cat(" in l]
    assert len(lines) == 1 and ", 3)" in lines[0], lines


def _embedding_grad(ids, w):
    return F.embedding(ids, w).square().sum()


def test_embedding_grad_with_donation():
    ids = torch.tensor([[0, 3, 3], [5, 0, 1]])
    w = torch.randn(6, 4, requires_grad=True)
    w2 = w.detach().clone().requires_grad_(True)
    _embedding_grad(ids, w).backward()
    thunder.jit(_embedding_grad)(ids, w2).backward()
    torch.testing.assert_close(w2.grad, w.grad)


def test_donation_never_writes_a_callers_tensor():
    def f(x, idx, src):
        return torch.scatter_add(x, 0, idx, src) * 2

    x = torch.zeros(4, 3)
    idx = torch.tensor([[0, 1, 2], [3, 3, 0]])
    src = torch.ones(2, 3)
    out = thunder.jit(f)(x, idx, src)
    assert torch.count_nonzero(x) == 0
    torch.testing.assert_close(out, f(torch.zeros(4, 3), idx, src))


def test_donation_keeps_a_value_read_later():
    def f(idx, src):
        z = torch.zeros(4, 3)
        y = torch.scatter_add(z, 0, idx, src)
        return y, z + 1  # z is read after the scatter: it must stay zero

    idx = torch.tensor([[0, 1, 2], [3, 3, 0]])
    src = torch.ones(2, 3)
    y, z1 = thunder.jit(f)(idx, src)
    ry, rz1 = f(idx, src)
    torch.testing.assert_close(y, ry)
    torch.testing.assert_close(z1, rz1)


def test_donated_scatter_runs_in_place():
    # A zeros tensor made inside the function and dead after the scatter is updated in place:
    # the result shares its storage with no copy (observable through the profiler's op list).
    def f(idx, src):
        return torch.scatter_add(torch.zeros(4, 3), 0, idx, src)

    idx = torch.tensor([[0, 1, 2], [3, 3, 0]])
    src = torch.ones(2, 3)
    jf = thunder.jit(f)
    jf(idx, src)
    with torch.profiler.profile() as prof:
        out = jf(idx, src)
    names = [e.name for e in prof.events()]
    assert "aten::scatter_add_" in names and "aten::scatter_add" not in names, sorted(set(names))
    torch.testing.assert_close(out, f(idx, src))
