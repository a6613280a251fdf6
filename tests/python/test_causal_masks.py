"""Causal attention masks computed from positions become is_causal=True
(csrc/transforms/sdpa_rules.h, sdpaCausalMasks). transformers builds its decoders' masks from
aranges when the program is compiled (torch.compiler.is_compiling() is True under thunder.jit, as
under torch.compile), and a mask makes the fused kernels read a T x T bias instead of skipping the
masked blocks. A mask that reads no input but is not read as positions (transformers' packed-sequence
test: a cumsum over position ids, indexed with tensors) is computed once at compile time and
compared with the causal pattern. Each case compares with eager and checks whether the final trace
still reads a mask."""

import os
import re

import pytest
import torch
import torch.nn.functional as F

import thunder

# THUNDER_TEST_DEVICE=cuda: the masks evaluated at compile time are made and compared on the GPU.
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")


def _sdpa_calls(jf) -> list[str]:
    """The fused attention calls of the final trace, each reduced to ", None, True," where it reads
    no mask and is causal (sdpaex's `fused_attention_forward(q, k, v, mask, causal, ...)`; on CUDA
    the cudnn executor's `cudnn_sdpa[_fwd](q, k, v, causal, scale[, mask, dropout])`)."""
    text = str(thunder.last_traces(jf)[-1])
    calls = []
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith("#"):
            continue
        if "fused_attention_forward(" in ln:
            calls.append(ln)
        elif m := re.search(r"cudnn_sdpa(?:_fwd)?\(([^)]*)\)", ln):
            args = m[1].split(", ")  # (q, k, v, causal, scale[, mask, dropout])
            mask = args[5] if len(args) > 5 else "None"
            calls.append(f"{m[0]} -> , {mask}, {args[3]},")
    return calls


def _rewritten(jf) -> bool:
    """Whether the causal-mask pass changed the program (its trace is among the passes')."""
    return any("Causal attention masks" in str(t).splitlines()[0] for t in thunder.last_traces(jf))


def _check_calls(jf, rewritten):
    # Where a fused kernel runs (not float32 on CUDA, which decomposes the attention), its mask
    # argument is None exactly when rewritten.
    assert _rewritten(jf) == rewritten
    calls = _sdpa_calls(jf)
    assert all((", None, True," in c) == rewritten for c in calls), calls


def _attend(mask_fn):
    def f(q, k, v):
        t = q.shape[-2]
        mask = mask_fn(torch.arange(t, device=q.device), torch.arange(k.shape[-2], device=q.device))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return f


CASES = [
    # (name, mask from (query positions i, key positions j), rewritten)
    ("le", lambda i, j: j[None, :] <= i[:, None], True),
    ("ge", lambda i, j: i[:, None] >= j[None, :], True),
    ("lt_next", lambda i, j: j[None, :] < i[:, None] + 1, True),
    ("offset_arange", lambda i, j: (j + 3)[None, None, None, :] <= (i + 3)[None, None, :, None], True),
    ("sub_form", lambda i, j: (j[None, :] - i[:, None]) <= 0, True),
    ("one_ahead", lambda i, j: j[None, :] <= i[:, None] + 1, False),
    ("anti_causal", lambda i, j: j[None, :] >= i[:, None], False),
    ("window", lambda i, j: (j[None, :] <= i[:, None]) & (j[None, :] > i[:, None] - 4), False),
]


def _trains_as_eager(mask_fn, device="cpu", keys=16):
    """The attention with `mask_fn`'s mask (16 queries, `keys` keys), jitted: its values and
    gradients against eager's. Returns the function, the jitted one and the inputs."""
    torch.manual_seed(0)
    q = torch.randn(2, 3, 16, 8, device=device, requires_grad=True)
    k, v = (torch.randn(2, 3, keys, 8, device=device, requires_grad=True) for _ in range(2))
    f = _attend(mask_fn)
    jf = thunder.jit(f)
    out, ref = jf(q, k, v), f(q, k, v)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    for a, e in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, e)
    return f, jf, (q, k, v)


@pytest.mark.parametrize("name,mask_fn,rewritten", CASES, ids=[c[0] for c in CASES])
def test_position_masks(name, mask_fn, rewritten):
    _, jf, _ = _trains_as_eager(mask_fn)
    _check_calls(jf, rewritten)


def _packed(i, j):
    # transformers' shape of it: positions -> sequence index by cumsum of "not the next position",
    # then mask[b, q] == mask[b, kv] by index tensors, ANDed with the causal pattern.
    pos = i[None, :].expand(2, -1)
    first = torch.cat([pos[:, :1] - 1, pos], dim=1)
    seq = ((first[:, 1:] - first[:, :-1]) != 1).long().cumsum(1)
    b = torch.arange(2, device=i.device)[:, None, None, None]
    q, kv = i[None, None, :, None], j[None, None, None, :]
    return (kv <= q) & (seq[b, q] == seq[b, kv])


EVALUATED = [
    # (name, mask from (query positions i, key positions j), rewritten)
    ("packed_sequences", _packed, True),
    ("additive", lambda i, j: torch.where(j[None, :] <= i[:, None], 0.0, float("-inf")), True),
    ("masked_fill", lambda i, j: torch.zeros(16, 16, device=i.device).masked_fill(j[None, :] > i[:, None],
                                                                                  float("-inf")), True),
    ("tril_ones", lambda i, j: torch.ones(16, 16, dtype=torch.bool, device=i.device).tril(), True),
    ("and_true", lambda i, j: (j[None, :] <= i[:, None]) & (i[:, None] < 100), True),
    ("additive_minus_large", lambda i, j: torch.where(j[None, :] <= i[:, None], 0.0, -1e9), False),
    ("window_by_value", lambda i, j: (j[None, :] <= i[:, None]) & ((i[:, None] - j[None, :]).abs() < 4), False),
    ("packed_two_sequences", lambda i, j: _packed(torch.cat([i[:8], i[:8]]), j), False),
    ("triu", lambda i, j: torch.ones(16, 16, dtype=torch.bool, device=i.device).triu(), False),
    ("random", lambda i, j: (j[None, :] <= i[:, None]) & (torch.rand(16, 16, device=i.device) < 2), False),
]


@pytest.mark.parametrize("name,mask_fn,rewritten", EVALUATED, ids=[c[0] for c in EVALUATED])
def test_constant_masks_are_evaluated(name, mask_fn, rewritten):
    f, jf, (q, k, v) = _trains_as_eager(mask_fn, DEVICE)
    _check_calls(jf, rewritten)
    if rewritten:  # the mask's calls are gone from the program
        assert "cumsum" not in str(thunder.last_traces(jf)[-1])
    with torch.no_grad():  # inference: the same rewrite, the same values
        jf2 = thunder.jit(f)
        torch.testing.assert_close(jf2(q, k, v), f(q, k, v))
        assert _rewritten(jf2) == rewritten


def test_mask_from_an_input_is_kept():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    keep = torch.ones(16, dtype=torch.bool)

    def f(q, k, v, keep):
        t = torch.arange(16)
        mask = (t[None, :] <= t[:, None]) & keep[None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    jf = thunder.jit(f)
    torch.testing.assert_close(jf(q, k, v, keep), f(q, k, v, keep))
    keep[3] = False  # a padded key: the mask read from the input must follow it
    torch.testing.assert_close(jf(q, k, v, keep), f(q, k, v, keep))
    assert not _rewritten(jf) and all(", None, True," not in c for c in _sdpa_calls(jf))


def test_non_square_is_kept():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    f = _attend(lambda i, j: j[None, :] <= i[:, None])
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(q, k, v), f(q, k, v))
    assert not _rewritten(jf) and all(", None, True," not in c for c in _sdpa_calls(jf))


def _hf(name):
    transformers = pytest.importorskip("transformers")
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                                      attn_implementation="sdpa")
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000, attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("use_cache", [None, False])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformers_decoders_attend_causally(name, use_cache):
    # use_cache=False: no cache positions; the mask then ANDs the causal pattern with a packed-
    # sequence test over the position ids, which only the evaluation finds true everywhere.
    torch.manual_seed(0)
    m = _hf(name).eval().to(DEVICE)
    x = torch.randint(0, 1000, (2, 24), device=DEVICE)
    jm = thunder.jit(m)
    kw = {} if use_cache is None else {"use_cache": use_cache}
    torch.testing.assert_close(jm(input_ids=x, **kw).logits, m(input_ids=x, **kw).logits)
    _check_calls(jm, True)
    # With a padding mask the mask reads the input and stays.
    am = torch.ones(2, 24, dtype=torch.long, device=DEVICE)
    am[0, :5] = 0
    torch.testing.assert_close(jm(input_ids=x, attention_mask=am, **kw).logits,
                               m(input_ids=x, attention_mask=am, **kw).logits)


# ---- conditions computed from no input (foldConstantConditions) --------------------------------
# A `where` / `masked_fill` whose condition reads no input and is true everywhere (or nowhere) is
# the branch it always takes. T5's encoder builds its attention bias as where(positions >= 0,
# position_bias, min): a [B, H, T, T] tensor written and read, and masked again in the backward.

def _t5_bias(x, table):
    t = x.shape[-2]
    pos = torch.arange(t, device=x.device)
    keep = (pos[None, None, :, None] >= 0).expand(x.shape[0], 1, t, t)
    bias = table.permute(2, 0, 1).unsqueeze(0)
    return torch.where(keep, bias, torch.finfo(x.dtype).min) + x


def _never_filled(x, table):
    pos = torch.arange(x.shape[-1], device=x.device)
    return x.masked_fill(pos > 10_000, 0.0) * table.sum()


def _always_filled(x, table):
    pos = torch.arange(x.shape[-1], device=x.device)
    return x.masked_fill(pos >= 0, 2.0) * table.sum()


def _some_filled(x, table):
    pos = torch.arange(x.shape[-1], device=x.device)
    return x.masked_fill(pos > 3, 0.0) * table.sum()


def _constant_filled(x, table):
    pos = torch.arange(x.shape[-1], device=x.device)
    return torch.zeros(x.shape[-1], device=x.device).masked_fill(pos >= 0, 2.0) * x * table.sum()


def _input_condition(x, table):
    return torch.where(x > -100.0, x, 0.0) * table.sum()


CONDITION_CASES = [
    ("t5_bias", _t5_bias, True),
    ("never_filled", _never_filled, True),
    # (x would leave the gradient's graph, where eager gives it zeros: left as it is)
    ("always_filled", _always_filled, False),
    ("constant_filled", _constant_filled, True),
    ("some_filled", _some_filled, False),
    ("input_condition", _input_condition, False),
]


@pytest.mark.parametrize("name,fn,folded", CONDITION_CASES, ids=[c[0] for c in CONDITION_CASES])
def test_constant_conditions_take_their_branch(name, fn, folded):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8, device=DEVICE, requires_grad=True)
    table = torch.randn(8, 8, 4, device=DEVICE, requires_grad=True)
    jf = thunder.jit(fn)
    out, expected = jf(x, table), fn(x, table)
    torch.testing.assert_close(out, expected)
    ct = torch.randn_like(out)
    for g, e in zip(torch.autograd.grad(out, (x, table), ct), torch.autograd.grad(expected, (x, table), ct)):
        torch.testing.assert_close(g, e)
    passes = [str(t).splitlines()[0] for t in thunder.last_traces(jf)]
    assert any("Constant conditions" in p for p in passes) == folded, passes
    text = str(thunder.last_traces(jf)[-1]) + str(thunder.last_backward_traces(jf)[-1])
    assert (re.search(r"\b(where|masked_fill)\(", text) is None) == folded, text


def test_a_returned_constant_condition_stays_a_new_tensor():
    # Folded, the result would be its branch itself: the caller's tensor, aliased.
    def f(x):
        keep = torch.arange(x.shape[0], device=x.device) >= 0
        return torch.where(keep, x, 0.0)

    x = torch.randn(5, device=DEVICE)
    out = thunder.jit(f)(x)
    torch.testing.assert_close(out, x)
    assert out.data_ptr() != x.data_ptr()


UNMASKED = [
    # (name, mask from (query positions i, key positions j), dropped): a mask that masks nothing
    # (transformers' bidirectional mask of a batch without padding) is dropped, whatever the shapes.
    ("all_true", lambda i, j: (j >= 0)[None, None, None, :].expand(2, 1, i.shape[0], -1), True),
    ("additive_zeros", lambda i, j: torch.zeros(i.shape[0], j.shape[0], device=i.device), True),
    ("where_zero", lambda i, j: torch.where(j[None, :] >= 0, 0.0, float("-inf")).expand(i.shape[0], -1), True),
    ("one_key_masked", lambda i, j: (j < j.shape[0] - 1)[None, :].expand(i.shape[0], -1), False),
    ("additive_one_minus_inf", lambda i, j: torch.where(j[None, :] == 2, float("-inf"), 0.0).expand(i.shape[0], -1),
     False),
]


@pytest.mark.parametrize("name,mask_fn,dropped", UNMASKED, ids=[c[0] for c in UNMASKED])
@pytest.mark.parametrize("keys", [16, 12], ids=["square", "non_square"])
def test_masks_that_mask_nothing_are_dropped(name, mask_fn, dropped, keys):
    _, jf, _ = _trains_as_eager(mask_fn, DEVICE, keys)
    assert _rewritten(jf) == dropped
    # Where a fused kernel runs (not float32 on CUDA, which decomposes the attention), it reads a
    # mask exactly when the mask was kept.
    text = str(thunder.last_traces(jf)[-1])
    pattern = r"(scaled_dot_product_attention|fused_attention_forward|cudnn_sdpa\w*)\(([^)]*)\)"
    for ln in text.splitlines():
        m = re.search(pattern, ln)
        if m is None or ln.strip().startswith("#"):
            continue
        args = m[2].split(", ")  # (q, k, v, mask, ...), or cuDNN's (q, k, v, causal, scale[, mask, dropout])
        mask = (args[5] if len(args) > 5 else "None") if m[1].startswith("cudnn_sdpa") else args[3]
        assert (mask == "None") == dropped, text
