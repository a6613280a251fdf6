"""Gradients of matrices in their parameters' layout (transforms/grad_layout.cpp): a weight used
as `x @ w` gets `x^T @ g`, not the transposed view of `g^T @ x`, which autograd's AccumulateGrad
copied into the parameter's layout. Values against eager, strides against the parameter's."""

import pytest
import torch

import thunder


def _conv1d(x, w, b):
    # GPT-2's Conv1D: addmm over the flattened rows.
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[1]).tanh()


def _mm(x, w, b):
    return (x @ w + b).sigmoid()


def _mm_transposed_weight(x, w, b):
    # w stored [N, K] and read transposed: its gradient is g^T @ x, already in its layout.
    return (x @ w.t() + b[: w.shape[0]]).relu()


def _mm_both(x, w, b):
    # The weight's product also read by the loss: its transpose is not all that reads it.
    h = x @ w
    return h.exp().sum() + (h @ w.t()).sum() + b.sum()


CASES = {
    # name: (fn, x shape, w shape, b shape)
    "conv1d_addmm": (_conv1d, (3, 4, 6), (6, 10), (10,)),
    "mm_2d": (_mm, (7, 5), (5, 3), (3,)),
    "mm_transposed_weight": (_mm_transposed_weight, (7, 5), (3, 5), (5,)),
    "mm_product_read_twice": (_mm_both, (4, 6), (6, 6), (2,)),
    "empty_rows": (_conv1d, (0, 4, 6), (6, 10), (10,)),
}
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (2e-2, 2e-2)}


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_matrix_gradients_in_their_parameters_layout(name, dtype, executors):
    fn, xs, ws, bs = CASES[name]
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, dtype=dtype)) for s in (ws, bs)]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    x = torch.randn(xs, dtype=dtype, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    jf = thunder.jit(fn, **({"executors": executors} if executors else {}))
    out, want = jf(x, *params), fn(xr, *ref)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out, want, rtol=rtol, atol=atol)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    for p, r in zip([x, *params], [xr, *ref]):
        torch.testing.assert_close(p.grad, r.grad, rtol=rtol, atol=atol * max(1.0, r.grad.abs().max().item() if r.grad.numel() else 1.0))
        # What eager's autograd returns: the parameter's own strides (no AccumulateGrad copy).
        assert p.grad.stride() == p.stride() or p.numel() == 0, (p.grad.stride(), p.stride())


def test_rewrite_multiplies_the_transposed_operands():
    jf = thunder.jit(_conv1d, executors=["torch"])
    x, w, b = torch.randn(3, 4, 6, requires_grad=True), torch.nn.Parameter(torch.randn(6, 10)), torch.randn(10)
    jf(x, w, b).sum().backward()
    traces = thunder.last_backward_traces(jf)
    names = [str(t).splitlines()[0] for t in traces]
    i = next(k for k, n in enumerate(names) if "Gradients in their layout" in n)
    last = lambda t: [l for l in str(t).splitlines() if "return" in l][-1]  # noqa: E731
    # Before: the weight's gradient is a permute's output; after: a matmul's.
    grad_of_w = last(traces[i]).split("(")[1].split(",")[1].strip()
    assert any(l.strip().startswith(f"{grad_of_w} = ltorch.matmul(") for l in str(traces[i]).splitlines())
    assert any(l.strip().startswith(f"{grad_of_w} = ltorch.permute(") for l in str(traces[i - 1]).splitlines())
