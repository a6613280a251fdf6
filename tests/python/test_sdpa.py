"""Fused attention in training: scaled_dot_product_attention differentiated through ATen's flash
kernel (CPU) against torch.autograd.grad, the fallback to the decomposition where no fused kernel
applies (float64, a mask needing a gradient, head dims that differ), and what an attention layer
saves for its backward."""

import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.core.transforms import grad, saved_for_backward


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def _causal_bool(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()


# (name, fn, tensor args): every floating tensor argument is differentiated.
FUSED_CASES = [
    ("plain", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)]),
    ("causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [(2, 3, 9, 8), (2, 3, 9, 8), (2, 3, 9, 8)]),
    ("causal_rectangular", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [(1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8)]),
    ("scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.37), [(2, 2, 6, 4)] * 3),
    ("causal_scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.3),
     [(2, 2, 6, 4)] * 3),
    ("float_mask_2d", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=MASK_2D),
     [(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)]),
    ("float_mask_4d", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=MASK_4D),
     [(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)]),
    ("bool_mask", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=_causal_bool(6, 6)),
     [(2, 2, 6, 4)] * 3),
    ("gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [(2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)]),
    ("gqa_causal_scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2,
                                                                         enable_gqa=True),
     [(1, 4, 6, 8), (1, 1, 6, 8), (1, 1, 6, 8)]),
]

torch.manual_seed(0)
MASK_2D = rand(5, 7)
MASK_4D = rand(2, 1, 5, 7)


def _grads(fn, args, cotangent=None):
    args = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*args)
    if cotangent is None:
        cotangent = torch.randn_like(out)
    return out, torch.autograd.grad(out, args, cotangent), cotangent


def _check(fn, args, rtol, atol):
    tfn = thunder.jit(fn)
    expected, ge, ct = _grads(fn, args)
    actual, gt, _ = _grads(tfn, args, ct)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    for e, a in zip(ge, gt):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol)
    return tfn


def _backward_text(tfn):
    return str(thunder.last_backward_traces(tfn)[-1])


@pytest.mark.parametrize("name,fn,shapes", FUSED_CASES, ids=[c[0] for c in FUSED_CASES])
def test_fused_grad_matches_torch_autograd_float32(name, fn, shapes):
    torch.manual_seed(1)
    tfn = _check(fn, [rand(*s) for s in shapes], rtol=1e-5, atol=1e-5)
    fwd, bwd = str(thunder.last_traces(tfn)[-1]), _backward_text(tfn)
    assert "sdpaex.fused_attention_forward(" in fwd and "'flash_cpu'" in fwd
    assert "sdpaex.fused_attention_backward(" in bwd
    # The backward reads no probabilities: no softmax, no matmul.
    assert "softmax" not in fwd + bwd and "matmul" not in fwd + bwd


def test_fused_grad_bfloat16_matches_eager():
    # Eager runs the same flash kernel on CPU, so thunder agrees with it closely in bfloat16.
    torch.manual_seed(2)
    args = [rand(2, 4, 16, 16, dtype=torch.bfloat16) for _ in range(3)]
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tfn = _check(fn, args, rtol=2e-2, atol=2e-2)
    assert "sdpaex.fused_attention_backward(" in _backward_text(tfn)


FALLBACK_CASES = [
    ("float64", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [rand(2, 3, 5, 4, dtype=torch.float64) for _ in range(3)]),
    ("float64_mask_scale_gqa", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=MASK_2D.double(), scale=0.5, enable_gqa=True),
     [rand(2, 4, 5, 4, dtype=torch.float64), rand(2, 2, 7, 4, dtype=torch.float64),
      rand(2, 2, 7, 4, dtype=torch.float64)]),
    # On the CPU no fused backward gives the mask's gradient (on CUDA the memory-efficient one does).
    ("mask_needs_grad", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [rand(2, 2, 5, 4, dtype=torch.float64) for _ in range(3)] + [rand(5, 5, dtype=torch.float64)]),
    # The flash kernel needs one head dim for q, k and v.
    ("value_head_dim_differs", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
     [rand(2, 2, 5, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 3)]),
    # The flash kernel needs 4-D inputs.
    ("three_dims", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [rand(2, 5, 4), rand(2, 5, 4), rand(2, 5, 4)]),
]


@pytest.mark.parametrize("name,fn,args", FALLBACK_CASES, ids=[c[0] for c in FALLBACK_CASES])
def test_fallback_to_decomposition(name, fn, args):
    tol = 1e-9 if args[0].dtype == torch.float64 else 1e-5
    tfn = _check(fn, args, rtol=tol, atol=tol)
    assert "fused_attention" not in _backward_text(tfn)
    assert "fused_attention" not in str(thunder.last_traces(tfn)[-1])


def test_grad_transform_uses_the_fused_kernel():
    torch.manual_seed(3)
    q, k, v = (rand(1, 2, 6, 8) for _ in range(3))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    gq, gk, gv = grad(fn)(q, k, v)
    _, expected, _ = _grads(fn, [q, k, v], torch.ones(1, 2, 6, 8))
    for a, e in zip((gq, gk, gv), expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_inference_keeps_one_sdpa_call():
    q, k, v = (rand(1, 2, 6, 8) for _ in range(3))
    tfn = thunder.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(tfn(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    text = str(thunder.last_traces(tfn)[-1])
    assert "torch.nn.functional.scaled_dot_product_attention(" in text and "fused_attention" not in text


class Attention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (z.view(B, T, self.heads, C // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(a.transpose(1, 2).reshape(B, T, C))


def _saved_shapes(tfn):
    bwd = thunder.last_backward_traces(tfn)[-1]
    n = saved_for_backward(tfn)["count"]
    return [tuple(t._shape) for t in bwd.inputs[:n]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_layer_saves_no_T_by_T_tensor(dtype):
    torch.manual_seed(4)
    B, T = 2, 64
    model = Attention().to(dtype)
    ref = Attention().to(dtype)
    ref.load_state_dict(model.state_dict())
    tmodel = thunder.jit(model)
    x = torch.randn(B, T, 32, dtype=dtype)
    out = tmodel(x)
    out.sum().backward()
    ref(x).sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-9
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, r.grad, rtol=tol, atol=tol)
    saved = _saved_shapes(tmodel)
    has_probabilities = any(len(s) >= 2 and s[-2:] == (T, T) for s in saved)
    bwd = _backward_text(tmodel)
    if dtype == torch.float32:
        # Fused: the backward reads q, k, v, the output and the logsumexp, never T x T.
        assert "sdpaex.fused_attention_backward(" in bwd
        assert not has_probabilities, saved
        assert (B, 4, T) in saved  # the logsumexp
    else:
        # float64 goes through the decomposition, which keeps the probabilities.
        assert "fused_attention" not in bwd
        assert has_probabilities, saved


def test_attention_layer_saves_less_than_the_decomposition():
    # The same layer in float32 (fused) and float64 (decomposed): per element, the fused
    # backward keeps far less, as the probabilities are gone.
    torch.manual_seed(5)
    stats = {}
    for dtype in (torch.float32, torch.float64):
        tmodel = thunder.jit(Attention().to(dtype))
        tmodel(torch.randn(2, 128, 32, dtype=dtype)).sum().backward()
        s = saved_for_backward(tmodel)
        stats[dtype] = s["bytes"] / torch.tensor([], dtype=dtype).element_size()
    assert stats[torch.float32] < 0.5 * stats[torch.float64], stats


def test_printed_traces_run_as_python():
    # The printed forward and backward traces are valid Python (thunder.executors.sdpaex provides
    # the fused calls) and compute what the runtime computes.
    torch.manual_seed(6)
    q, k, v = (rand(2, 2, 6, 8) for _ in range(3))
    mask = rand(6, 6)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.4)
    tfn = thunder.jit(fn)
    expected, ge, ct = _grads(fn, [q, k, v])
    tfn(*(x.clone().requires_grad_() for x in (q, k, v)))
    fwd_src = str(thunder.last_traces(tfn)[-1])
    bwd_src = str(thunder.last_backward_traces(tfn)[-1])
    assert "sdpaex.fused_attention_forward(" in fwd_src
    fwd_ns, bwd_ns = {}, {}
    exec(fwd_src, fwd_ns)
    exec(bwd_src, bwd_ns)
    # The mask is a closure: the forward takes it as an input after q, k, v.
    fwd_inputs = [q, k, v] + [mask] * (len(thunder.last_traces(tfn)[-1].inputs) - 3)
    out, saved = fwd_ns["computation"](*fwd_inputs)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grads = bwd_ns["backward"](*saved, ct)
    for e, a in zip(ge, grads):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


CUDA_CASES = [
    # (name, dtype, shapes, kwargs, kernel)
    ("flash_bf16_causal", torch.bfloat16, [(2, 4, 128, 64)] * 3, dict(is_causal=True), "flash"),
    ("flash_f16_scale", torch.float16, [(2, 4, 96, 128), (2, 4, 80, 128), (2, 4, 80, 128)], dict(scale=0.3), "flash"),
    ("flash_bf16_gqa", torch.bfloat16, [(1, 8, 64, 64), (1, 2, 64, 64), (1, 2, 64, 64)],
     dict(is_causal=True, enable_gqa=True), "flash"),
    # float32 and causal rectangular attention go through the decomposition on CUDA for now
    ("decomposed_f32_causal", torch.float32, [(2, 4, 100, 64)] * 3, dict(is_causal=True), None),
    ("decomposed_bf16_causal_rectangular", torch.bfloat16, [(1, 2, 48, 64), (1, 2, 80, 64), (1, 2, 80, 64)],
     dict(is_causal=True), None),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,dtype,shapes,kwargs,kernel", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_fused_grad_on_cuda(name, dtype, shapes, kwargs, kernel):
    # Against a float64 reference: thunder's error at most about eager's (which uses the same
    # kernels).
    torch.manual_seed(7)
    args = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs)
    # The sdpa executor's kernel choice (cuDNN attention, a default executor, would claim first).
    from thunder.extend import get_default_executors

    tfn = thunder.jit(fn, executors=[e for e in get_default_executors() if e.name != "cudnn"])
    expected, ge, ct = _grads(fn, args)
    actual, gt, _ = _grads(tfn, args, ct)
    ref, gr, _ = _grads(fn, [a.double() for a in args], ct.double())
    fwd, bwd = str(thunder.last_traces(tfn)[-1]), _backward_text(tfn)
    if kernel is None:
        assert "sdpaex.fused_attention" not in fwd + bwd, fwd + bwd
    else:
        assert f"'{kernel}'" in fwd and "sdpaex.fused_attention_backward(" in bwd, fwd + bwd
    for e, a, r in zip((expected, *ge), (actual, *gt), (ref, *gr)):
        scale = max(1.0, r.abs().max().item())
        t_err, e_err = (a.double() - r).abs().max().item(), (e.double() - r).abs().max().item()
        assert t_err <= 2 * e_err + 1e-3 * scale, f"thunder error {t_err:.3g} vs eager {e_err:.3g}"


def _layers_sharing_a_mask(q, k, v, m, k2):
    # A decoder's layers: every attention call reads the same boolean mask.
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    b = F.scaled_dot_product_attention(a, k, v, attn_mask=m)
    c = F.scaled_dot_product_attention(b.double(), k2, k2, attn_mask=m)  # another dtype: its own bias
    return b, c


@pytest.mark.parametrize("grad_mode", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bool_mask_becomes_one_bias_per_dtype(dtype, grad_mode):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=dtype, requires_grad=grad_mode) for _ in range(3))
    k2 = torch.randn(2, 2, 5, 8, dtype=torch.float64)
    m = torch.rand(2, 1, 5, 5) > 0.4
    m[..., 0] = True  # every row attends somewhere
    jf = thunder.jit(_layers_sharing_a_mask)
    with torch.set_grad_enabled(grad_mode):
        got, expected = jf(q, k, v, m, k2), _layers_sharing_a_mask(q, k, v, m, k2)
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, **tol)
    if grad_mode:
        g = torch.autograd.grad(got[0].float().sum() + got[1].sum(), (q, k, v))
        ge = torch.autograd.grad(expected[0].float().sum() + expected[1].sum(), (q, k, v))
        for a, b in zip(g, ge):
            torch.testing.assert_close(a, b, **tol)
    traces = thunder.last_traces(jf)
    rewritten = next(t for t in traces if "Attention masks to bias" in t.provenance)
    names = rewritten.bound_symbol_names
    assert names.count("ltorch.scaled_dot_product_attention") == 3, names
    assert names.count("ltorch.where") == 2, names  # one bias per query dtype
    src = str(rewritten)
    masks = re.findall(r"ltorch\.scaled_dot_product_attention\(\w+, \w+, \w+, (\w+),", src)
    assert len(masks) == 3 and masks[0] == masks[1] != masks[2], src
    assert "t_3" not in masks, src  # the bool mask argument reaches no call


def test_float_masks_are_left_alone():
    q = k = v = torch.randn(1, 2, 4, 8)
    jf = thunder.jit(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    jf(q, k, v, torch.zeros(4, 4))
    assert not any("Attention masks to bias" in t.provenance for t in thunder.last_traces(jf))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cudnn_backward_gets_the_output_gradient_in_the_output_layout(dtype):
    # The gradient of a [B, H, T, D] attention output arrives as the transpose of a [B, T, H*D]
    # one: the cuDNN executor copies it into the output's layout in 8-byte words, bit for bit
    # (NaN included), falls back to an element copy where the words do not line up, and passes a
    # gradient already in that layout through.
    from thunder.executors.cudnnex import _grad_like_out

    out = torch.randn(2, 4, 6, 8, dtype=dtype)
    g = torch.randn(2, 6, 4, 8, dtype=dtype)
    g[0, 1, 2, 3] = float("nan")
    g = g.transpose(1, 2)
    r = _grad_like_out(g, out)
    assert r.stride() == out.stride() and torch.equal(r.view(torch.int16), g.contiguous().view(torch.int16))
    shifted = torch.randn(2, 6, 4, 9, dtype=dtype)[..., 1:].transpose(1, 2)
    r = _grad_like_out(shifted, out)
    assert r.stride() == out.stride() and torch.equal(r, shifted)
    same = torch.randn_like(out)
    assert _grad_like_out(same, out) is same


DROPOUT_CASES = [
    # (name, backend eager is pinned to, mask, causal): thunder's kernel must drop the same elements
    # as eager's given the same generator state, forward and backward. The cudnn rows go through the
    # cudnn executor, the others through thunder's own choice with it left out.
    ("flash", "FLASH_ATTENTION", False, False),
    ("flash_causal", "FLASH_ATTENTION", False, True),
    ("efficient_mask", "EFFICIENT_ATTENTION", True, False),
    ("cudnn", "CUDNN_ATTENTION", False, False),
    ("cudnn_causal", "CUDNN_ATTENTION", False, True),
    ("cudnn_mask", "CUDNN_ATTENTION", True, False),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,backend,masked,causal", DROPOUT_CASES, ids=[c[0] for c in DROPOUT_CASES])
def test_fused_dropout_drops_what_eager_drops(name, backend, masked, causal, monkeypatch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from thunder.extend import get_default_executors


    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.randn(2, 1, 64, 64, device="cuda", dtype=torch.bfloat16) if masked else None
    ct = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16)

    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3, is_causal=causal)

    cudnn = backend == "CUDNN_ATTENTION"
    tfn = thunder.jit(fn, executors=[e for e in get_default_executors() if cudnn or e.name != "cudnn"])

    def run(f):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(11)
        out = f(*ins, mask)
        return (out, *torch.autograd.grad(out, ins, ct))

    with sdpa_kernel(getattr(SDPBackend, backend)):
        expected = run(fn)
    actual = run(tfn)
    fwd, bwd = str(thunder.last_traces(tfn)[-1]), _backward_text(tfn)
    assert "0.3" in fwd, fwd
    assert ("cudnn_sdpa_bwd(" if cudnn else "sdpaex.fused_attention_backward(") in bwd, bwd
    # Elements were dropped (not the no-dropout result), and the same ones as eager's.
    undropped = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    assert (actual[0] - undropped).abs().max() > 0.1
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)


MASK_GRAD_CASES = [
    # (name, mask shape, dropout): a learned additive mask (T5's position bias) differentiated by the
    # memory-efficient kernel's backward, its gradient summed back over the dims the mask broadcasts.
    ("position_bias", (1, 4, 64, 64), 0.0),
    ("position_bias_dropout", (1, 4, 64, 64), 0.3),
    ("full", (2, 4, 64, 64), 0.0),
    ("per_batch_row", (2, 1, 1, 64), 0.0),
    ("two_dims", (64, 64), 0.2),
    # T5's: a table of (L, S, H) read as (1, H, L, S), and so not dense along S.
    ("permuted", "permuted", 0.1),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,mask_shape,dropout", MASK_GRAD_CASES, ids=[c[0] for c in MASK_GRAD_CASES])
def test_mask_gradient_through_the_efficient_kernel(name, mask_shape, dropout):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from thunder.extend import get_default_executors

    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    permuted = mask_shape == "permuted"
    mask = torch.randn(*((64, 64, 4) if permuted else mask_shape), device="cuda", dtype=torch.bfloat16)
    ct = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16)

    def fn(q, k, v, mask, dense=False):
        # (the permuted view reaches thunder's kernel as it is, where eager's refuses it: eager's
        # reference reads it made dense; a computed mask is written densely)
        m = mask.permute(2, 0, 1).unsqueeze(0) if permuted else mask * 2
        m = m.contiguous() if dense else m
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=dropout)

    # (the cudnn executor takes no mask that needs a gradient: thunder's own choice either way)
    tfn = thunder.jit(fn, executors=[e for e in get_default_executors() if e.name != "cudnn"])

    def run(f):
        ins = [t.clone().requires_grad_() for t in (q, k, v, mask)]
        torch.manual_seed(12)
        out = f(*ins)
        return (out, *torch.autograd.grad(out, ins, ct))

    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        expected = run(lambda *a: fn(*a, dense=True))
    actual = run(tfn)
    bwd = _backward_text(tfn)
    assert "fused_attention_backward(" in bwd, bwd
    assert "matmul" not in bwd and "softmax" not in bwd, bwd
    assert actual[4].shape == mask.shape
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)
    # The float64 decomposition's mask gradient: as close as eager's.
    ins64 = [t.double().requires_grad_() for t in (q, k, v, mask)]
    if dropout == 0.0:
        ref = torch.autograd.grad(fn(*ins64), ins64, ct.double())[3]
        err, eager_err = (actual[4].double() - ref).abs().max(), (expected[4].double() - ref).abs().max()
        assert err <= 2 * eager_err + 1e-3, (err, eager_err)


CUDNN_NATIVE_CASES = [
    # (name, mask shape or None, causal, dropout, query as a transposed view, gradient permuted)
    ("plain", None, False, 0.0, False, False),
    ("causal", None, True, 0.0, False, False),
    ("mask", (2, 1, 1, 64), False, 0.0, False, True),
    ("full_mask", (2, 4, 48, 64), False, 0.0, False, False),
    ("dropout_mask", (2, 1, 48, 64), False, 0.2, False, True),
    ("strided_query", None, False, 0.0, True, True),
    ("scale", None, False, 0.0, False, False),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,mask_shape,causal,dropout,strided,permuted_grad", CUDNN_NATIVE_CASES,
                         ids=[c[0] for c in CUDNN_NATIVE_CASES])
def test_cudnn_native_kernels_compute_what_the_python_functions_do(name, mask_shape, causal, dropout, strided,
                                                                   permuted_grad, monkeypatch):
    # The runtime runs cudnn_sdpa_fwd, cudnn_sdpa_bwd and cudnn_sdpa with C++ kernels; the Python
    # functions (what a printed trace runs) are the reference: the same ATen calls, so the same
    # bits forward (and the same dropped elements), backward within cuDNN's own run-to-run spread.
    from thunder.executors import cudnnex

    assert cudnnex._NATIVE == {"cudnn_sdpa_fwd", "cudnn_sdpa_bwd", "cudnn_sdpa"}
    torch.manual_seed(0)
    length = 64 if causal else 48
    q = torch.randn(2, 4, length, 64, device="cuda", dtype=torch.bfloat16)
    if strided:  # a [B, H, L, D] view whose head dim is not dense
        q = torch.randn(2, 4, 64, length, device="cuda", dtype=torch.bfloat16).transpose(-1, -2)
    k, v = (torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mask = None if mask_shape is None else torch.randn(*mask_shape, device="cuda", dtype=torch.bfloat16)
    scale = 0.3 if name == "scale" else None
    ct = torch.randn(2, length, 4, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    if not permuted_grad:
        ct = ct.contiguous()

    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal,
                                              scale=scale)

    tfn = thunder.jit(fn, executors=["cudnn"])
    # Inference: the forward without a logsumexp.
    with torch.no_grad():
        torch.manual_seed(5)
        out = tfn(q, k, v, mask)
        torch.manual_seed(5)
        ref = cudnnex._infer_impl(q, k, v, causal, scale, mask, dropout)
    assert "cudnn_sdpa(" in str(thunder.last_traces(tfn)[-1])
    assert torch.equal(out, ref)
    # Training: forward and backward.
    ins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(7)
    out = tfn(*ins, mask)
    grads = torch.autograd.grad(out, ins, ct)
    assert "cudnn_sdpa_bwd(" in _backward_text(tfn)
    torch.manual_seed(7)
    res = cudnnex._fwd_impl(q, k, v, causal, scale, mask, dropout)
    assert torch.equal(out, res[0])
    seed_offset = (res[2], res[3]) if dropout else (None, None)
    ref_grads = cudnnex._bwd_impl(ct, q, k, v, res[0], res[1], causal, scale, mask, dropout, *seed_offset)
    for a, e in zip(grads, ref_grads):
        torch.testing.assert_close(a, e, rtol=1e-2, atol=1e-2)


# Rows a mask hides whole attend to nothing: eager's math backend gives them weights of 0 (its
# _safe_softmax) where a plain softmax over -inf gives NaN, which then spread through every later
# position of a left-padded batch (transformers' decoders with an attention_mask). The
# decomposition, which runs where no fused kernel applies (float64; float32 with a mask on CUDA),
# follows eager, values and gradients.
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_fully_masked_rows_attend_to_nothing(kind, dtype):
    import os

    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 1, 6, 6, dtype=torch.bool, device=device)
    keep[0, :, :2, :] = False  # two query rows of the first sample see no key
    keep[1, :, :, 4:] = False
    mask = keep if kind == "bool" else torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    jf = thunder.jit(f)
    out, ref = jf(q, k, v), f(q, k, v)
    assert not out.isnan().any()
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    for a, e in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, e)
    with torch.no_grad():
        torch.testing.assert_close(thunder.jit(f)(q, k, v), ref)


class _CudnnPythonFunctions(torch.autograd.Function):
    """Attention through the cudnn executor's Python functions (what a printed trace runs)."""

    @staticmethod
    def forward(ctx, q, k, v):
        from thunder.executors import cudnnex

        out, lse = cudnnex._fwd_impl(q, k, v, False, None)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        from thunder.executors import cudnnex

        q, k, v, out, lse = ctx.saved_tensors
        return cudnnex._bwd_impl(g, q, k, v, out, lse, False, None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("path", ["jit", "python"])
@pytest.mark.parametrize("thunder_first", [False, True], ids=["eager_first", "thunder_first"])
def test_cudnn_training_beside_eager_has_float64s_gradients(path, thunder_first):
    # ATen caches cuDNN's backward graphs per thread keyed on q, k and v's layouts, not on the
    # output gradient's, which a graph also fixes. Here (as in SD3's joint attention) eager hands
    # cuDNN the gradient as the transposed view autograd made, thunder in the output's layout, with
    # q, k and v laid out alike: in one thread (autograd's) the second caller's gradients were 140%
    # off float64, thunder's after eager's and eager's after thunder's (H200, torch 2.11). thunder's
    # backward runs on a thread of its own; each length is used once, so that no earlier test's
    # graph is found.
    from thunder.executors.cudnnex import cudnn_available

    if not cudnn_available():
        pytest.skip("this PyTorch has no cuDNN")
    n = {("jit", False): 21, ("jit", True): 27, ("python", False): 29, ("python", True): 35}[path, thunder_first]
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 8, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    w = torch.randn(2, n, 16, device="cuda", dtype=torch.float64)

    def fn(q, k, v, attention=F.scaled_dot_product_attention):
        o = attention(q, k, v)
        return (o.transpose(1, 2).reshape(2, n, 16).double() * w).sum()

    def grads(f, dtype):
        ins = [t.detach().clone().to(dtype).requires_grad_() for t in (q, k, v)]
        f(*ins).backward()
        return [t.grad for t in ins]

    ref = grads(fn, torch.float64)
    tfn = thunder.jit(fn) if path == "jit" else lambda q, k, v: fn(q, k, v, _CudnnPythonFunctions.apply)
    got = {}
    for who in ("thunder", "eager") if thunder_first else ("eager", "thunder"):
        got[who] = grads(tfn if who == "thunder" else fn, torch.bfloat16)
    if path == "jit":
        assert "cudnn_sdpa_bwd(" in _backward_text(tfn)
    for a, e, r in zip(got["thunder"], got["eager"], ref):
        err = lambda x: ((x.double() - r).norm() / r.norm()).item()  # noqa: E731
        assert err(e) < 0.02 and err(a) <= 2 * err(e) + 0.01, (err(a), err(e))
