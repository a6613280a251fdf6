"""nn.MultiheadAttention and the layers built on it, traced through (proxies._TRACED_THROUGH):
multi_head_attention_forward's projections and attention become thunder symbols (no fallback
call), and outputs, attention weights and every gradient match eager's, in each of the function's
configurations."""

import pytest
import torch

import thunder

E, H, B, L, S = 16, 4, 2, 5, 7
# The GPU runs the same cases where one is present (sdpa's CUDA kernels, thunder's fusions there).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _mask(kind, batched=True):
    if kind is None:
        return None
    if kind == "bool":
        m = torch.rand(L, S) < 0.3
        m[:, 0] = False  # every query sees a key
        return m
    if kind == "float":
        return torch.randn(L, S)
    if kind == "per_head":
        return torch.randn(B * H, L, S)
    raise AssertionError(kind)


def _padding(kind):
    if kind is None:
        return None
    m = torch.zeros(B, S, dtype=torch.bool)
    m[0, -2:] = True
    return m if kind == "bool" else torch.zeros(B, S).masked_fill(m, float("-inf"))


# (name, module kwargs, call kwargs as a function of nothing, query/key/value lengths, batched)
CASES = [
    ("self, batch_first, no weights", dict(batch_first=True), dict(need_weights=False), "self", True),
    ("self, seq first, weights", dict(), dict(), "self", True),
    ("weights per head", dict(batch_first=True), dict(average_attn_weights=False), "self", True),
    ("cross, kdim and vdim", dict(batch_first=True, kdim=12, vdim=10), dict(), "cross", True),
    ("no bias", dict(batch_first=True, bias=False), dict(need_weights=False), "self", True),
    ("bias_k and bias_v", dict(batch_first=True, add_bias_kv=True), dict(), "cross", True),
    ("add_zero_attn", dict(batch_first=True, add_zero_attn=True), dict(need_weights=False), "cross", True),
    ("bool attn_mask", dict(batch_first=True), dict(attn_mask="bool", need_weights=False), "cross", True),
    ("float attn_mask, weights", dict(batch_first=True), dict(attn_mask="float"), "cross", True),
    ("per-head attn_mask", dict(batch_first=True), dict(attn_mask="per_head"), "cross", True),
    ("bool key_padding_mask", dict(batch_first=True), dict(key_padding_mask="bool"), "cross", True),
    ("float key_padding_mask", dict(batch_first=True), dict(key_padding_mask="float", need_weights=False), "cross", True),
    ("causal", dict(batch_first=True), dict(attn_mask="causal", is_causal=True, need_weights=False), "self", True),
    ("unbatched", dict(), dict(), "cross", False),
]


def _inputs(mod_kwargs, how, batched):
    kdim, vdim = mod_kwargs.get("kdim", E), mod_kwargs.get("vdim", E)
    seq_first = not mod_kwargs.get("batch_first", False)
    s = L if how == "self" else S

    def shape(n, d):
        if not batched:
            return (n, d)
        return (n, B, d) if seq_first else (B, n, d)

    q = torch.randn(shape(L, E), requires_grad=True)
    if how == "self":
        return q, q, q
    return q, torch.randn(shape(s, kdim), requires_grad=True), torch.randn(shape(s, vdim), requires_grad=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,mod_kwargs,call_kwargs,how,batched", CASES, ids=[c[0] for c in CASES])
def test_multihead_attention_matches_eager(name, mod_kwargs, call_kwargs, how, batched, device):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(E, H, **mod_kwargs)
    if m.in_proj_bias is not None:
        torch.nn.init.normal_(m.in_proj_bias)
    if getattr(m, "bias_k", None) is not None:
        torch.nn.init.normal_(m.bias_k), torch.nn.init.normal_(m.bias_v)
    q, k, v = _inputs(mod_kwargs, how, batched)
    kw = dict(call_kwargs)
    if kw.get("attn_mask") == "causal":
        kw["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(L)
    elif "attn_mask" in kw:
        kw["attn_mask"] = _mask(kw["attn_mask"])
    if "key_padding_mask" in kw:
        kw["key_padding_mask"] = _padding(kw["key_padding_mask"])
    m.to(device)
    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v)) if how != "self" else \
        (q.detach().to(device).requires_grad_(),) * 3
    kw = {n: t.to(device) if isinstance(t, torch.Tensor) else t for n, t in kw.items()}

    def f(q, k, v):
        return m(q, k, v, **kw)

    jf = thunder.jit(f)
    out, weights = jf(q, k, v)
    ref, ref_weights = f(q, k, v)
    torch.testing.assert_close(out, ref)
    if ref_weights is None:
        assert weights is None
    else:
        torch.testing.assert_close(weights, ref_weights)
    leaves = [t for t in {id(t): t for t in (q, k, v)}.values()] + list(m.parameters())
    grad_out = torch.randn_like(ref)
    got = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
    want = torch.autograd.grad(ref, leaves, grad_out, allow_unused=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # Traced through: the attention is thunder's symbols, not one fallback call.
    trace = str(thunder.last_traces(jf)[0])
    assert "multi_head_attention_forward" not in trace, trace


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_transformer_encoder_layer_matches_eager(norm_first, training, device):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=True,
                                             norm_first=norm_first, device=device).train(training)
    x = torch.randn(B, L, E, device=device, requires_grad=True)
    padding = _padding("bool")[:, :L].to(device)
    jl = thunder.jit(layer)
    with torch.set_grad_enabled(training):
        out = jl(x, src_key_padding_mask=padding)
        ref = layer(x, src_key_padding_mask=padding)
    torch.testing.assert_close(out, ref)
    if training:
        g = torch.randn_like(ref)
        leaves = [x, *layer.parameters()]
        for a, b in zip(torch.autograd.grad(out, leaves, g), torch.autograd.grad(ref, leaves, g)):
            torch.testing.assert_close(a, b)
    assert "multi_head_attention_forward" not in str(thunder.last_traces(jl)[0])


def test_multihead_attention_dropout_draws_in_training():
    # dropout > 0 in training: random as in eager (not compared by value); eval: none.
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(E, H, dropout=0.5, batch_first=True)
    x = torch.randn(B, L, E)
    jm = thunder.jit(lambda x: m(x, x, x, need_weights=False)[0])
    a, b = jm(x), jm(x)
    assert not torch.equal(a, b)
    m.eval()
    torch.testing.assert_close(jm(x), m(x, x, x, need_weights=False)[0])
