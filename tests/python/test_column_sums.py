"""Bias gradients summed through a flattening reshape (transforms/column_sums.cpp): the sum runs
over the reshape's source, where the fuser makes it a column output of the kernel producing the
gradient. Results and gradients against eager, in every floating dtype, and the traces' shape."""

import re

import pytest
import torch
import torch.nn.functional as F

import thunder


def _conv1d_gelu(x, w, b):
    # GPT-2's Conv1D: addmm over the flattened rows, viewed back; its bias gradient is the sum of
    # the flattened output gradient over rows.
    B, T, _ = x.shape
    y = torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(B, T, w.shape[1])
    return F.gelu(y, approximate="tanh") * 2


def _conv1d_norm(x, w, b):
    B, T, _ = x.shape
    y = torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(B, T, -1)
    return F.layer_norm(y + x[..., : y.shape[-1]], y.shape[-1:])


def _flat_sum(x, w, b):
    # A column sum of a 4-D value flattened to 2-D (rows of 2 * 3 * 4), besides a matmul of it.
    y = (x @ w + b).tanh()
    flat = y.reshape(-1, y.shape[-1])
    return flat.sum(0) * 3 + (flat @ w.t()).sum(0)


def _not_a_column_sum(x, w, b):
    # The reshape changes the last dim: the sum is not the source's column sum, no rewrite.
    y = (x @ w + b).exp()
    return y.reshape(-1, 2 * y.shape[-1]).sum(0)


def _keepdim(x, w, b):
    y = (x @ w + b).sin()
    return y.reshape(-1, y.shape[-1]).sum(0, keepdim=True)


def _window_reverse(x, w, b):
    # Swin's attention output: a linear layer over windows of 2 x 2 tokens, the windows put back in
    # place (view, permute, view), a residual add and a LayerNorm. The bias gradient sums the
    # LayerNorm's input gradient moved back into windows: whole rows moved, the same column sums.
    y = F.linear(x, w, b)
    B, C = y.shape[0] // 4, y.shape[-1]
    y = y.view(B, 2, 2, 2, 2, C).permute(0, 1, 3, 2, 4, 5).contiguous().view(B, 4, 4, C)
    return F.layer_norm(y + 1, (C,))


def _last_dim_moved(x, w, b):
    # A square transpose keeps the last dim's length but not its elements: no rewrite.
    y = (x @ w + b).transpose(-1, -2)
    return (y * torch.arange(y.shape[-1], dtype=y.dtype)).tanh()


CASES = {
    # name: (fn, x shape, w shape, b shape, the backward has no ATen sum left)
    "conv1d_gelu": (_conv1d_gelu, (2, 5, 8), (8, 12), (12,), True),
    "conv1d_norm": (_conv1d_norm, (3, 4, 16), (16, 8), (8,), True),
    "flat_sum_4d": (_flat_sum, (2, 3, 4, 6), (6, 6), (6,), False),
    "not_a_column_sum": (_not_a_column_sum, (2, 4, 6), (6, 6), (6,), False),
    "keepdim": (_keepdim, (2, 4, 6), (6, 6), (6,), False),
    "empty_rows": (_conv1d_gelu, (0, 5, 8), (8, 12), (12,), False),
    "window_reverse": (_window_reverse, (8, 4, 6), (6, 6), (6,), True),
    "last_dim_moved": (_last_dim_moved, (2, 6, 6), (6, 6), (6,), False),
}

TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_column_sums_through_reshapes(name, dtype):
    fn, xs, ws, bs, fused = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(xs, dtype=dtype)
    w = torch.randn(ws, dtype=dtype) / ws[0] ** 0.5
    b = torch.randn(bs, dtype=dtype)
    if name == "flat_sum_4d":  # non-contiguous input
        x = torch.randn(xs[0], xs[2], xs[1], xs[3], dtype=dtype).transpose(1, 2)
        assert not x.is_contiguous()
    args = [t.requires_grad_() for t in (x, w, b)]
    ref = [t.detach().clone().requires_grad_() for t in args]
    jf = thunder.jit(fn, executors=["fuser"])  # (the CPU fuser is opt-in under the tests' conftest)
    out, want = jf(*args), fn(*ref)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out, want, rtol=rtol, atol=atol)
    g = torch.randn_like(want)
    got = torch.autograd.grad(out, args, g)
    exp = torch.autograd.grad(want, ref, g)
    for a, e in zip(got, exp):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol * max(1.0, e.abs().max().item() if e.numel() else 1.0))
    if fused and dtype != torch.bfloat16:
        bw = str(thunder.last_backward_traces(jf)[-1])
        unfused = [l for l in bw.splitlines() if re.match(r"\s+\w+ = torch\.sum\(", l)]
        assert not unfused, bw


def test_rewrite_sums_the_reshapes_source():
    # The pass's trace: the bias gradient's sum reads the [B, T, N] gradient, not its [B*T, N] view.
    jf = thunder.jit(_conv1d_gelu, executors=["torch"])
    x, w, b = torch.randn(2, 5, 8, requires_grad=True), torch.randn(8, 12), torch.randn(12, requires_grad=True)
    jf(x, w, b).sum().backward()
    traces = thunder.last_backward_traces(jf)
    after = [t for t in traces if "Column sums through reshapes" in str(t).splitlines()[0]]
    assert after, [str(t).splitlines()[0] for t in traces]
    sums = [l for l in str(after[0]).splitlines() if re.match(r"\s+\w+ = ltorch\.sum\(", l)]
    assert len(sums) == 1 and "(0, 1)" in sums[0], sums
    before = [l for l in str(traces[0]).splitlines() if re.match(r"\s+\w+ = ltorch\.sum\(", l)]
    assert len(before) == 1 and "(0,)" in before[0], before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_sum_of_a_widened_gradient_reads_the_16_bit_value(dtype):
    # Swin's attention: a position bias broadcast over the windows is added to the 16-bit scores
    # before a softmax. The bias's gradient sums the softmax's gradient over the windows; the
    # autodiff widens that gradient to float32 for it (the add ran in float32). The sum now reads
    # the 16-bit gradient (sum(..., dtype=float32)), and no kernel stores a float32 copy of it.
    torch.manual_seed(0)
    scores = torch.randn(8, 3, 7, 7, dtype=dtype, requires_grad=True)
    bias = torch.randn(3, 7, 7, dtype=dtype, requires_grad=True)
    v = torch.randn(8, 3, 7, 5, dtype=dtype)

    def f(s, b, v):
        return ((s + b.unsqueeze(0)).softmax(-1) @ v).float().square().sum()

    jf = thunder.jit(f, executors=["fuser"])
    jf(scores, bias, v).backward()
    got = scores.grad, bias.grad
    s64, b64 = (t.detach().double().requires_grad_() for t in (scores, bias))
    f(s64, b64, v.double()).backward()
    scores.grad = bias.grad = None
    f(scores, bias, v).backward()
    for g, want, eager in zip(got, (s64.grad, b64.grad), (scores.grad, bias.grad)):
        assert g.dtype == dtype
        # as close to float64 as eager is (twice its error, and a 16-bit step)
        err, eager_err = (g.double() - want).abs().max(), (eager.double() - want).abs().max()
        assert err <= 2 * eager_err + 1e-2 * want.abs().max(), (err, eager_err)
    bwd = str(thunder.last_backward_traces(jf)[-1])
    # No kernel stores a float32 copy of the [8, 3, 7, 7] gradient; a sum ATen runs reads 16 bits.
    outs = [o.strip() for m in re.findall(r"^  \[([\w, ]+)\] = cpuFusion", bwd, re.M) for o in m.split(",")]
    assert outs, bwd
    for o in outs:
        assert f'# {o}: "cpu f32[8, 3, 7, 7]"' not in bwd, bwd
    for dt in re.findall(r"^  \w+ = torch\.sum\(\w+, .*dtype=(\S+)\)  #", bwd, re.M):
        assert dt == "torch.float32", bwd


def test_a_widening_other_kernels_read_is_summed_where_it_is():
    # A LayerNorm's bias gradient sums the widened output gradient, which the norm's backward
    # kernel reads as well: the sum stays on the widening (a column output of that kernel on
    # CUDA). Summing the 16-bit value instead left the widening alone, an ATen conversion.
    x = torch.randn(7, 768, dtype=torch.bfloat16, requires_grad=True)
    w, b = (torch.randn(768, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))

    def f(x, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b) * 2.0

    jf = thunder.jit(f, executors=["fuser"])
    g = torch.randn(7, 768, dtype=torch.bfloat16)
    got = torch.autograd.grad(jf(x, w, b), (x, w, b), g)
    want = torch.autograd.grad(f(x, w, b), (x, w, b), g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2 * e.abs().max().item())
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert not re.search(r"^  \w+ = (Tensor\.to|torchex\.convert_element_type)\(", bwd, re.M), bwd
