"""GPU check of the fused cross-entropy (apex_ex, triton_ex, and the default executors) against
F.cross_entropy: results and logits gradients for vocabularies 1, 7, 50257, 128256 and 262144,
reductions none / mean / sum, ignore_index, label smoothing (apex_ex), float32 / bfloat16 / float16
logits, and the upcast pattern `F.cross_entropy(x.float().view(-1, V), y)` with bf16 / f16 x, which
must run as apex_cross_entropy_upcast with a gradient written in x's dtype (no float32 logits or
gradient in the traces). Also checks that thunder.jit with no executors named picks the fused
cross-entropy for a gpt_train-style loss. Prints one line per case and a summary; exits 1 on any
failure.

    PYTHONPATH=python python tools/gpu_xent_check.py [--quick]
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback

import torch
import torch.nn.functional as F

import thunder
from thunder.executors import triton_crossentropy
from thunder.executors.apexex import apex_ex

VOCABS = [1, 7, 24, 50257, 128256, 262144]  # 24, 128256, 262144: 16-byte vector loads
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (rtol, atol) against a float64 reference rounded as PyTorch's result is.
TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}
ROWS = 37

failures: list[str] = []


def case(name):
    def wrap(fn):
        def run(*args):
            label = f"{name}{args}"
            try:
                fn(*args)
                print(f"ok    {label}")
            except Exception as e:  # report and continue
                failures.append(label)
                print(f"FAIL  {label}: {type(e).__name__}: {e}")
                traceback.print_exc(limit=3)
        return run
    return wrap


def make_inputs(vocab, dtype, ignore):
    x = (torch.randn(ROWS, vocab, device="cuda") * 3).to(dtype)
    y = torch.randint(0, vocab, (ROWS,), device="cuda")
    ignore_index = -100
    if ignore:
        ignore_index = int(y[3]) if vocab > 1 else -1
        y[::5] = ignore_index
    return x, y, ignore_index


def compare(got, want, grad_got, grad_want, dtype, loss_dtype):
    rtol, atol = TOL[dtype]
    assert got.dtype == loss_dtype, f"loss dtype {got.dtype}, expected {loss_dtype}"
    assert got.shape == want.shape, f"loss shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    assert grad_got.dtype == dtype, f"gradient dtype {grad_got.dtype}, expected {dtype}"
    torch.testing.assert_close(grad_got.double(), grad_want, rtol=rtol, atol=atol)


@case("direct")
def check_direct(ex_name, vocab, dtype, reduction, ignore, smoothing, weighted):
    ex = {"apex": apex_ex, "triton": triton_crossentropy.triton_ex}[ex_name]
    x, y, ignore_index = make_inputs(vocab, dtype, ignore)
    w = torch.rand(vocab, device="cuda", dtype=dtype) if weighted else None

    def f(a, b, c):
        return F.cross_entropy(a, b, c, reduction=reduction, ignore_index=ignore_index, label_smoothing=smoothing)

    jf = thunder.jit(f, executors=[ex])
    xg = x.clone().requires_grad_()
    got = jf(xg, y, w)
    expect = "apex_cross_entropy(" if ex_name == "apex" else "triton_crossentropy("
    assert expect in str(thunder.last_traces(jf)[-1]), "the fused kernel did not run"
    x64 = x.double().requires_grad_()
    want = f(x64, y, None if w is None else w.double())
    cot = torch.randn_like(want)
    (g_got,) = torch.autograd.grad(got, xg, cot.to(dtype))
    (g_want,) = torch.autograd.grad(want, x64, cot)
    compare(got, want, g_got, g_want, dtype, dtype)
    assert expect.replace("(", "_backward(") in str(thunder.last_backward_traces(jf)[-1])


@case("upcast")
def check_upcast(executors, vocab, dtype, reduction, ignore, smoothing, view3d):
    """F.cross_entropy(x.float().view(-1, V), y): the loss in float32, x's gradient in x's dtype."""
    x, y, ignore_index = make_inputs(vocab, dtype, ignore)
    if view3d:
        x = x.view(1, ROWS, vocab)

    def f(a, b):
        return F.cross_entropy(a.float().view(-1, vocab), b, reduction=reduction, ignore_index=ignore_index,
                               label_smoothing=smoothing)

    jf = thunder.jit(f) if executors == "default" else thunder.jit(f, executors=[apex_ex])
    xg = x.clone().requires_grad_()
    got = jf(xg, y)
    fwd = str(thunder.last_traces(jf)[-1])
    assert "apex_cross_entropy_upcast(" in fwd, fwd
    x64 = x.double().requires_grad_()
    # The reference in float64 (f itself would round it to float32 with .float()).
    want = F.cross_entropy(x64.view(-1, vocab), y, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=smoothing)
    cot = torch.randn_like(want)
    (g_got,) = torch.autograd.grad(got, xg, cot.float())
    (g_want,) = torch.autograd.grad(want, x64, cot)
    compare(got, want, g_got, g_want, dtype, torch.float32)
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert "apex_cross_entropy_backward(" in bwd, bwd
    # No float32 tensor of the logits' size in either trace.
    numel = ROWS * vocab
    for text in (fwd, bwd):
        for m in re.finditer(r'"cuda:0 f32\[([0-9, ]+)\]"', text):
            dims = [int(d) for d in m.group(1).split(",") if d.strip()]
            n = 1
            for d in dims:
                n *= d
            assert n != numel or vocab == 1, f"a float32 tensor of the logits' size: {m.group(0)}\n{text}"


@case("gpt_train-style default")
def check_default_pick():
    """thunder.jit with no executors: the loss of a bf16 model picks apex_cross_entropy_upcast."""
    V = 50257
    lin = torch.nn.Linear(64, V, bias=False, device="cuda", dtype=torch.bfloat16)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, h, targets):
            logits = self.lin(h)
            return F.cross_entropy(logits.reshape(-1, V).float(), targets)

    m = WithLoss()
    jm = thunder.jit(m)
    h = torch.randn(2, 16, 64, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, V, (32,), device="cuda")
    loss = jm(h, t)
    loss.backward()
    fwd, bwd = str(thunder.last_traces(jm)[-1]), str(thunder.last_backward_traces(jm)[-1])
    assert "apex_cross_entropy_upcast(" in fwd, fwd
    assert "apex_cross_entropy_backward(" in bwd, bwd
    g = lin.weight.grad.clone()
    lin.weight.grad = None
    want = m(h, t)
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g.float(), lin.weight.grad.float(), rtol=2e-2, atol=2e-2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="vocabularies 7 and 50257 only")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("gpu_xent_check: needs a CUDA GPU")
        return 1
    vocabs = [7, 50257] if args.quick else VOCABS
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"triton {'yes' if triton_crossentropy.triton_available() else 'no'}")
    for vocab in vocabs:
        for dtype in DTYPES:
            for reduction in ("none", "mean", "sum"):
                for ignore, smoothing in ((False, 0.0), (True, 0.0), (False, 0.1), (True, 0.25)):
                    check_direct("apex", vocab, dtype, reduction, ignore, smoothing, False)
                if triton_crossentropy.triton_available():
                    for ignore, weighted in ((False, False), (True, False), (False, True), (True, True)):
                        check_direct("triton", vocab, dtype, reduction, ignore, 0.0, weighted)
        for dtype in (torch.bfloat16, torch.float16):
            for reduction in ("none", "mean", "sum"):
                for ignore, smoothing in ((False, 0.0), (True, 0.1)):
                    check_upcast("apex", vocab, dtype, reduction, ignore, smoothing, False)
            check_upcast("default", vocab, dtype, "mean", True, 0.0, True)
    check_default_pick()
    print(f"{len(failures)} failures" + (":\n  " + "\n  ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
