"""Padding of unaligned linear layers (csrc/transforms/pad_matmuls.h): a weight whose row count is
not a multiple of 8 (a vocabulary projection of 50257 or 30522 rows) is padded with zero rows so
that cuBLAS runs its aligned kernels, and the result is a slice of the padded one. The rewrite
applies by default to large bfloat16 / float16 matmuls on CUDA; THUNDER_PAD_MATMULS=all applies it
everywhere, which is how these CPU tests check its values, gradients and layouts against eager."""

import pytest
import torch
import torch.nn.functional as F

import thunder

CUDA = torch.cuda.is_available()


def _final(jf) -> str:
    return str(thunder.last_traces(jf)[-1])


def returned(x, w, b):
    return F.linear(x, w, b)


def viewed_and_returned(x, w, b):
    y = F.linear(x, w, b)
    return y.view(-1, y.shape[-1])


def consumed(x, w, b):
    y = F.linear(x, w, b)
    return F.cross_entropy(y.reshape(-1, y.shape[-1]).float(), torch.zeros(y.numel() // y.shape[-1], dtype=torch.long,
                                                                           device=y.device))


def _targets(y, ignored=False):
    t = torch.arange(y.numel() // y.shape[-1], device=y.device) * 7 % y.shape[-1]
    if ignored:
        t[::3] = -100
    return t


def consumed_bf16_upcast_sum(x, w, b):
    # HF's loss: the logits upcast and flattened; some targets ignored.
    y = F.linear(x, w, b)
    return F.cross_entropy(y.float().view(-1, y.shape[-1]), _targets(y, True), reduction="sum")


def consumed_per_row(x, w, b):
    y = F.linear(x, w, b)
    return F.cross_entropy(y.flatten(0, 1), _targets(y), reduction="none")


def consumed_smoothed(x, w, b):
    # Label smoothing averages the log-probabilities over the classes: the slice stays.
    y = F.linear(x, w, b)
    return F.cross_entropy(y.reshape(-1, y.shape[-1]), _targets(y), label_smoothing=0.1)


def consumed_and_returned(x, w, b):
    y = F.linear(x, w, b)
    return y, F.cross_entropy(y.reshape(-1, y.shape[-1]), _targets(y))


def both(x, w, b):
    y = F.linear(x, w, b)
    return y, torch.log_softmax(y, -1).sum(0), y[..., :5] * 2


def tied(x, w, b):
    # GPT-2's tied embedding: the weight is read by the embedding and by the projection.
    e = F.embedding(torch.tensor([[1, 2, 3]], device=x.device), w)
    return F.linear(e + x[:1, :3], w, b)


CASES = [
    # (name, fn, x shape, (N, K), bias, whether the cross-entropy reads the padded rows)
    ("returned_2d", returned, (6, 64), (1001, 64), True, False),
    ("returned_3d_nobias", returned, (2, 3, 64), (1001, 64), False, False),
    ("viewed_and_returned", viewed_and_returned, (2, 3, 64), (1001, 64), True, False),
    # (.float() of float64 logits converts them: a computation between the matmul and the loss;
    # so does .float() of bfloat16 ones where no executor reads them as they are)
    ("consumed", consumed, (2, 3, 64), (1001, 64), False, "f32"),
    ("consumed_upcast_sum", consumed_bf16_upcast_sum, (2, 3, 64), (1001, 64), True, "f32"),
    ("consumed_per_row", consumed_per_row, (2, 5, 16), (77, 16), False, True),
    ("consumed_smoothed", consumed_smoothed, (2, 3, 64), (1001, 64), False, False),
    ("consumed_and_returned", consumed_and_returned, (2, 3, 64), (1001, 64), True, False),
    ("both", both, (4, 32), (77, 32), True, False),
    ("tied", tied, (2, 3, 16), (13, 16), False, False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn,xs,ws,bias,reads_padded", CASES, ids=[c[0] for c in CASES])
def test_padded_linear_matches_eager(monkeypatch, name, fn, xs, ws, bias, reads_padded, dtype):
    monkeypatch.setenv("THUNDER_PAD_MATMULS", "all")
    torch.manual_seed(0)
    x = torch.randn(*xs, dtype=dtype, requires_grad=True)
    w = torch.randn(*ws, dtype=dtype, requires_grad=True)
    b = torch.randn(ws[0], dtype=dtype, requires_grad=True) if bias else None
    args = [x, w, b]
    jf = thunder.jit(fn)
    out, ref = jf(*args), fn(*args)
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    upcast = reads_padded == "f32"
    if upcast:
        # bfloat16 logits are read as they are where an executor takes the upcast form (apex_ex,
        # registered where CUDA is): the trace folds the conversion into the cross-entropy.
        folded = any("cross_entropy_upcast" in str(t) for t in thunder.last_traces(jf))
        reads_padded = dtype == torch.float32 or (dtype == torch.bfloat16 and folded)
    # Gradients sum 1001 products in another order than eager's, in float32 where .float() is used.
    tol = {torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float32: dict(rtol=1e-4, atol=1e-5),
           torch.float64: dict(rtol=1e-5, atol=1e-5) if upcast else {}}[dtype]
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r, **tol)
        # A returned result is eager's where it is computed after the projection, and the
        # projection's padded rows where it is the projection or a view of it (as torch.compile
        # returns them): rows a multiple of 8 elements apart, which the caller's views take.
        if o.stride() != r.stride():
            n = ws[0]
            assert o.dim() >= 2 and o.stride()[-1] == 1 and o.stride()[-2] == (n + 7) // 8 * 8, (o.stride(), r.stride())
            torch.testing.assert_close(o.view(-1, o.shape[-1]), r.view(-1, r.shape[-1]), **tol)
    final = _final(jf)
    assert "pad" in final
    # A cross-entropy that alone reads the result takes the padded rows, their pad columns -inf
    # (the bias's padding): no slice of the logits, no padded copy of their gradient.
    assert ("-float('inf')" in final) == reads_padded, final
    if reads_padded:
        assert "torchex.slice(" not in final.split("linear(")[-1]
    else:
        assert "slice" in final
    leaves = [a for a in args if a is not None]
    seeds = [torch.randn_like(r) for r in refs]
    g = torch.autograd.grad(outs, leaves, seeds)
    gr = torch.autograd.grad(refs, leaves, seeds)
    for a, e in zip(g, gr):
        torch.testing.assert_close(a, e, **tol)


@pytest.mark.parametrize("xs,bias", [((6, 64), True), ((2, 5, 64), False)], ids=["2d", "3d_nobias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_returned_projection_keeps_its_padded_rows(monkeypatch, xs, bias, dtype):
    # A returned projection is the padded matmul's slice, not a contiguous copy of it (a pass over
    # GPT-2's 0.8 GB logits): rows 1008 elements apart, values eager's, and the caller's views of
    # it (the leading dims merged, a row selected) work.
    monkeypatch.setenv("THUNDER_PAD_MATMULS", "all")
    torch.manual_seed(0)
    x = torch.randn(*xs, dtype=dtype)
    w = torch.randn(1001, 64, dtype=dtype)
    b = torch.randn(1001, dtype=dtype) if bias else None
    jf = thunder.jit(returned)
    with torch.no_grad():
        out = jf(x, w, b)
    ref = returned(x, w, b)
    final = _final(jf)
    assert "torchex.pad(" in final and "contiguous" not in final, final
    assert out.shape == ref.shape and out.stride()[-2:] == (1008, 1), out.stride()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(out.view(-1, 1001), ref.view(-1, 1001), **tol)
    torch.testing.assert_close(out[..., -1, :], ref[..., -1, :], **tol)


@pytest.mark.parametrize(
    "ws,why",
    [((1000, 64), "rows aligned"), ((1001, 63), "columns unaligned"), ((1001, 64), "off")],
    ids=["aligned", "k_unaligned", "turned_off"],
)
def test_not_padded(monkeypatch, ws, why):
    monkeypatch.setenv("THUNDER_PAD_MATMULS", "0" if why == "off" else "all")
    x, w = torch.randn(6, ws[1]), torch.randn(*ws)
    jf = thunder.jit(returned)
    torch.testing.assert_close(jf(x, w, None), returned(x, w, None))
    assert "torchex.pad(" not in _final(jf) and "torchex.slice(" not in _final(jf), why


def test_default_leaves_cpu_alone(monkeypatch):
    # By default the rewrite is for CUDA's half-precision kernels only.
    monkeypatch.delenv("THUNDER_PAD_MATMULS", raising=False)
    x, w = torch.randn(512, 768, dtype=torch.bfloat16), torch.randn(50257, 768, dtype=torch.bfloat16)
    jf = thunder.jit(returned)
    jf(x[:8], w[:1001], None)
    assert "torchex.pad(" not in _final(jf)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_vocabulary_projection_on_cuda(monkeypatch):
    # GPT-2's head, as a user runs it: bfloat16, 50257 rows, large enough for the default rule.
    monkeypatch.delenv("THUNDER_PAD_MATMULS", raising=False)
    torch.manual_seed(0)
    x = torch.randn(4, 512, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(50257, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True) * 0.02
    w = w.detach().requires_grad_()
    tgt = torch.randint(0, 50257, (4 * 512,), device="cuda")

    def head(x, w):
        logits = F.linear(x, w)
        return logits, F.cross_entropy(logits.view(-1, 50257).float(), tgt)

    jf = thunder.jit(head)
    (lo, loss), (lr, lossr) = jf(x, w), head(x, w)
    assert "pad" in _final(jf) and lo.stride() == (512 * 50264, 50264, 1), lo.stride()
    torch.testing.assert_close(lo, lr)
    torch.testing.assert_close(loss, lossr, rtol=1e-3, atol=1e-3)
    g = torch.autograd.grad(loss, (x, w))
    gr = torch.autograd.grad(lossr, (x, w))
    for a, e in zip(g, gr):
        torch.testing.assert_close(a, e, rtol=2e-2, atol=1e-4)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("vocab,bias", [(50257, False), (30522, True)], ids=["gpt2", "bert"])
def test_vocabulary_loss_on_cuda_reads_padded_rows(monkeypatch, vocab, bias):
    # A training step's head, where only the loss leaves the step: the fused cross-entropy reads
    # the padded logits (pad columns -inf) and its gradient goes to the matmuls as it is.
    monkeypatch.delenv("THUNDER_PAD_MATMULS", raising=False)
    torch.manual_seed(0)
    x = torch.randn(4, 512, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(vocab, 768, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
    b = (torch.randn(vocab, device="cuda", dtype=torch.bfloat16) * 0.1).requires_grad_() if bias else None
    tgt = torch.randint(0, vocab, (4 * 512,), device="cuda")
    tgt[::5] = -100

    def head(x, w, b):
        logits = F.linear(x, w, b)
        return F.cross_entropy(logits.view(-1, vocab).float(), tgt)

    jf = thunder.jit(head)
    loss, ref = jf(x, w, b), head(x, w, b)
    final = _final(jf)
    assert "-float('inf')" in final and "apex_cross_entropy" in final, final
    torch.testing.assert_close(loss, ref, rtol=1e-3, atol=1e-3)
    leaves = [t for t in (x, w, b) if t is not None]
    g = torch.autograd.grad(loss, leaves)
    gr = torch.autograd.grad(ref, leaves)
    for a, e in zip(g, gr):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, e, rtol=2e-2, atol=1e-4)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("classes", [1001, 1008, 30522])
def test_cross_entropy_reads_padded_rows_in_place(classes):
    # The cross-entropy kernels read logits whose rows are wider than their classes (a padded
    # matmul's slice) where they are, forward and backward, with no contiguous copy.
    torch.manual_seed(0)
    wide = torch.randn(64, classes + 8, device="cuda", dtype=torch.bfloat16)
    tgt = torch.randint(0, classes, (64,), device="cuda")

    def f(w):
        return F.cross_entropy(w[:, :classes].float(), tgt)

    w1 = wide.clone().requires_grad_()
    w2 = wide.clone().requires_grad_()
    jf = thunder.jit(f)
    loss, ref = jf(w1), f(w2)
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-4)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-2, atol=1e-5)
