"""Batched matmul operands made contiguous once, inside kernels (csrc/transforms/matmul_operands.h).

Eager's matmul folds an operand's batch dims into one before its bmm; a view whose batch dims do
not merge (q, k and v cut from one qkv projection and permuted to [B, H, N, D]; their gradients
read back the same way) is copied inside every matmul that reads it. thunder copies such an
operand once, right after it is made, where the fuser takes the copy into a kernel (q's scaling
writes q, k and v in one pass). These tests check values and gradients against a float64 eager
run, and where the copies went. THUNDER_TEST_DEVICE=cuda runs them on the GPU."""

import os

import pytest
import torch

import thunder

DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")


def window_attention(x, w, b, heads):
    # timm's WindowAttention without fused attention (Swin): q, k, v of one projection.
    B, N, C = x.shape
    qkv = torch.nn.functional.linear(x, w, b).reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q = q * (C // heads) ** -0.5
    a = (q @ k.transpose(-2, -1)).softmax(-1)
    return (a @ v).transpose(1, 2).reshape(B, N, C)


def permuted_input(x, y):
    # A trace input whose batch dims do not merge: copied once, read by both matmuls.
    xp = x.permute(1, 0, 2, 3)
    return xp @ y, (xp.transpose(-2, -1) @ xp).sum(-1)


def broadcast_batch(x, y):
    # [H, N, D] against [B, H, D, N]: eager expands and copies the batch; left as it is.
    return x.transpose(0, 1) @ y


def seq_first_projection(x, w, b):
    # nn.MultiheadAttention with batch_first=True: the projection reads query.transpose(0, 1).
    y = torch.nn.functional.linear(x.transpose(0, 1), w, b)
    return (y * 2 + 1).transpose(0, 1)


def saved_projection(x, w, b):
    # The projection saved for the backward (sin's gradient reads it): left as eager lays it out.
    return torch.nn.functional.linear(x.transpose(0, 1), w, b).sin()


def permuted_projection(x, w):
    # A 4-D permute of the leading dims, no bias; its output read through a view.
    y = torch.nn.functional.linear(x.permute(2, 0, 1, 3), w)
    return y.reshape(-1, y.shape[-1]).exp()


def returned_projection(x, w, b):
    # Returned as it is: eager returns a contiguous tensor, and so does thunder.
    return torch.nn.functional.linear(x.transpose(0, 1), w, b)


CASES = {
    # name: (fn, input shapes (or a builder), extra args)
    "window_attention": (window_attention, [(6, 7, 16), (48, 16), (48,)], (2,)),
    "window_attention_odd": (window_attention, [(3, 49, 24), (72, 24), (72,)], (3,)),
    "permuted_input": (permuted_input, [(5, 3, 4, 6), (3, 5, 6, 2)], ()),
    "broadcast_batch": (broadcast_batch, [(4, 3, 5), (2, 3, 5, 6)], ()),
    "seq_first_projection": (seq_first_projection, [(4, 5, 8), (12, 8), (12,)], ()),
    "permuted_projection": (permuted_projection, [(2, 3, 4, 8), (6, 8)], ()),
    "returned_projection": (returned_projection, [(4, 5, 8), (12, 8), (12,)], ()),
    "saved_projection": (saved_projection, [(4, 5, 8), (12, 8), (12,)], ()),
}


def _inputs(shapes, dtype):
    torch.manual_seed(0)
    return [torch.randn(s, device=DEVICE, dtype=dtype, requires_grad=True) for s in shapes]


def _loss(out):
    outs = out if isinstance(out, tuple) else (out,)
    return sum((o * torch.linspace(-1, 1, o.numel(), device=o.device, dtype=o.dtype).view(o.shape)).sum() for o in outs)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32] + ([torch.bfloat16] if DEVICE == "cuda" else []))
def test_values_and_gradients(name, dtype):
    fn, shapes, extra = CASES[name]
    args = _inputs(shapes, dtype)
    jf = thunder.jit(fn, executors=["fuser"])
    out = jf(*args, *extra)
    grads = torch.autograd.grad(_loss(out), args)
    # The float64 reference, and eager's own distance from it: thunder may be as far, not farther.
    ref_args = [a.detach().double().requires_grad_() for a in args]
    ref = fn(*ref_args, *extra)
    ref_grads = torch.autograd.grad(_loss(ref), ref_args)
    eager_args = [a.detach().clone().requires_grad_() for a in args]
    eager = fn(*eager_args, *extra)
    eager_grads = torch.autograd.grad(_loss(eager), eager_args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    eagers = eager if isinstance(eager, tuple) else (eager,)
    for got, want, e in list(zip(outs, refs, eagers)) + list(zip(grads, ref_grads, eager_grads)):
        assert got.shape == want.shape
        err = (got.double() - want).abs().max().item()
        eager_err = (e.double() - want).abs().max().item()
        scale = want.abs().max().item() + 1e-30
        assert err <= 2 * eager_err + scale * (1e-6 if dtype == torch.float32 else 1e-3), (name, err, eager_err)


def _body(trace) -> str:
    return "\n".join(line for line in str(trace).splitlines() if not line.lstrip().startswith("#"))


def test_qkv_copies_are_one_kernel():
    x, w, b = _inputs([(6, 7, 16), (48, 16), (48,)], torch.float32)
    jf = thunder.jit(window_attention, executors=["fuser"])
    jf(x, w, b, 2).sum().backward()
    fwd, bwd = _body(thunder.last_traces(jf)[-1]), _body(thunder.last_backward_traces(jf)[-1])
    # No copy outside a kernel, in either trace: q, k and v are stored by the kernel after the
    # projection, and the backward reads them (saved) without copying them again.
    assert "Tensor.contiguous" not in fwd and "Tensor.contiguous" not in bwd
    kernel = next(line for line in fwd.splitlines() if "Fusion" in line)
    assert kernel.split("=")[0].count(",") == 2, kernel  # q, k and v from one kernel
    # Turned off, the matmuls read the views (and eager's matmul copies them).
    os.environ["THUNDER_MATMUL_OPERANDS"] = "0"
    try:
        jf = thunder.jit(window_attention, executors=["fuser"])
        jf(x, w, b, 2)
        body = _body(thunder.last_traces(jf)[-1])
        assert "Fusion" not in body.split("torch.matmul")[0]
    finally:
        del os.environ["THUNDER_MATMUL_OPERANDS"]


def test_input_operand_copied_once():
    x, y = _inputs([(5, 3, 4, 6), (3, 5, 6, 2)], torch.float32)
    jf = thunder.jit(permuted_input, executors=[])
    jf(x, y)
    body = _body(thunder.last_traces(jf)[-1])
    assert body.count("Tensor.contiguous") == 1, body


def test_broadcast_batch_left_alone():
    x, y = _inputs([(4, 3, 5), (2, 3, 5, 6)], torch.float32)
    jf = thunder.jit(broadcast_batch, executors=[])
    jf(x, y)
    assert "contiguous" not in _body(thunder.last_traces(jf)[-1])


@pytest.mark.parametrize("training", [False, True])
def test_linear_reads_the_rows_as_they_lie(training):
    # linear(x.transpose(0, 1)) runs on x (ATen's linear would copy the transposed input and add
    # the bias in a kernel of its own); the output is the transposed view of the result.
    x, w, b = _inputs([(4, 5, 8), (12, 8), (12,)], torch.float32)
    if not training:
        x, w, b = (t.detach() for t in (x, w, b))
    jf = thunder.jit(seq_first_projection, executors=[])
    out = jf(x, w, b)
    torch.testing.assert_close(out, seq_first_projection(x, w, b))
    body = _body(thunder.last_traces(jf)[-1])
    line = next(ln for ln in body.splitlines() if "linear(" in ln)
    assert "linear(t_0," in line, body
    os.environ["THUNDER_LINEAR_PERMUTES"] = "0"
    try:
        jf = thunder.jit(seq_first_projection, executors=[])
        jf(x, w, b)
        line = next(ln for ln in _body(thunder.last_traces(jf)[-1]).splitlines() if "linear(" in ln)
        assert "linear(t_0," not in line
    finally:
        del os.environ["THUNDER_LINEAR_PERMUTES"]


def test_returned_linear_stays_contiguous():
    x, w, b = (t.detach() for t in _inputs([(4, 5, 8), (12, 8), (12,)], torch.float32))
    out = thunder.jit(returned_projection, executors=[])(x, w, b)
    ref = returned_projection(x, w, b)
    assert out.is_contiguous() and out.stride() == ref.stride()
    torch.testing.assert_close(out, ref)
