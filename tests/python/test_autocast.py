"""torch.autocast while tracing: the trace holds the casts PyTorch's autocast policy makes (per op
and device type), runs with autocast off, and a call under autocast computes what eager under
autocast computes.

Rule for values: eager under autocast differs from eager in float32 by the rounding autocast
introduces; thunder under autocast may round in other places (its fused kernels keep pointwise
intermediates in registers), so its difference from eager under autocast must stay within
NOISE times that autocast-vs-float32 difference (the largest over the tensor), plus a float32
rounding floor for the ops autocast leaves alone. Dtypes must be equal exactly.
"""

import copy
import itertools
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from models import llama

NOISE = 2.0

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
# (device, autocast dtype): CPU bfloat16 runs in CI; the CUDA rows run on the GPU machine.
MODES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cpu", torch.float16, id="cpu-f16"),
    pytest.param("cuda", torch.float16, id="cuda-f16", marks=cuda),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=cuda),
]


def assert_within_noise(actual, autocast_ref, fp32_ref, what="", also=None):
    """thunder under autocast is as close to float32 as eager under autocast is: its error against
    the float32 result at most NOISE times eager autocast's, plus one rounding step of a half type
    at the values' magnitude (the two may round one product or sum differently: cuBLAS's bias
    epilogue against a separate add, another reduction order); dtypes equal to eager's. `also`:
    eager autocast's result in another layout thunder may use (channels-last convolutions), whose
    error is eager's too."""
    assert actual.dtype == autocast_ref.dtype, f"{what}: dtype {actual.dtype}, eager's {autocast_ref.dtype}"
    a, r, f = actual.double(), autocast_ref.double(), fp32_ref.double()
    if not a.numel():
        return
    noise = (r - f).abs().max().item()
    if also is not None:
        noise = max(noise, (also.double() - f).abs().max().item())
    scale = f.abs().max().item()
    low = actual.dtype if actual.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    step = torch.finfo(low).eps * scale
    floor = 1e-5 * (1 + scale)
    err = (a - f).abs().max().item()
    assert err <= NOISE * noise + step + floor, (
        f"{what}: differs from float32 by {err}; eager autocast by {noise} (step {step:.3g})")


# ---- the policy, op by op -------------------------------------------------------------------
# (name, function of (inputs..., low) where low is the autocast dtype, its inputs: shapes of float32
# tensors or makers of other tensors). Functions cast some inputs to `low` themselves to see what
# the policy does to lower-precision arguments.


def _idx(n, high):
    return lambda device: torch.randint(0, high, (n,), device=device)


OPS = [
    # lower precision on both device types
    ("linear", lambda x, w, b, low: F.linear(x, w, b), [(4, 8), (6, 8), (6,)]),
    ("matmul", lambda a, b, low: a @ b, [(3, 4, 8), (8, 5)]),
    ("mm", lambda a, b, low: torch.mm(a, b), [(4, 8), (8, 5)]),
    ("bmm", lambda a, b, low: torch.bmm(a, b), [(2, 4, 8), (2, 8, 5)]),
    ("addmm", lambda c, a, b, low: torch.addmm(c, a, b), [(4, 5), (4, 8), (8, 5)]),
    ("baddbmm", lambda c, a, b, low: torch.baddbmm(c, a, b), [(2, 4, 5), (2, 4, 8), (2, 8, 5)]),
    ("conv1d", lambda x, w, low: F.conv1d(x, w, padding=1), [(2, 3, 9), (4, 3, 3)]),
    ("conv2d", lambda x, w, b, low: F.conv2d(x, w, b, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    ("conv_transpose2d", lambda x, w, low: F.conv_transpose2d(x, w), [(2, 3, 5, 5), (3, 4, 3, 3)]),
    ("sdpa", lambda q, k, v, low: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(1, 2, 6, 8)] * 3),
    ("einsum", lambda a, b, low: torch.einsum("bij,bjk->bik", a, b), [(2, 4, 8), (2, 8, 5)]),
    ("linear_of_low_input", lambda x, w, low: F.linear(x.to(low), w), [(4, 8), (6, 8)]),
    # float32 (CUDA's list; on CPU these keep the input's dtype)
    ("softmax", lambda x, w, low: F.softmax(F.linear(x, w), -1), [(4, 8), (6, 8)]),
    ("log_softmax", lambda x, w, low: F.log_softmax(F.linear(x, w), -1), [(4, 8), (6, 8)]),
    ("softmax_dtype_named", lambda x, low: F.softmax(x.to(low), -1, dtype=low), [(4, 8)]),
    ("layer_norm", lambda x, w, g, b, low: F.layer_norm(F.linear(x, w), (6,), g, b), [(4, 8), (6, 8), (6,), (6,)]),
    ("group_norm", lambda x, g, b, low: F.group_norm(x.to(low), 2, g, b), [(2, 4, 5), (4,), (4,)]),
    ("exp_log_pow", lambda x, low: (x.to(low).exp() + x.to(low).abs().log() + x.to(low).pow(2)), [(4, 8)]),
    ("rsqrt", lambda x, low: torch.rsqrt(x.to(low).abs() + 1), [(4, 8)]),
    ("sum", lambda x, low: x.to(low).sum(-1), [(4, 8)]),
    ("cumsum", lambda x, low: torch.cumsum(x.to(low), 1), [(4, 8)]),
    ("prod", lambda x, low: torch.prod(x.to(low), 1), [(4, 3)]),
    ("logsumexp", lambda x, low: torch.logsumexp(x.to(low), 1), [(4, 8)]),
    ("mse_loss", lambda x, y, low: F.mse_loss(x.to(low), y), [(4, 8), (4, 8)]),
    ("l1_loss", lambda x, y, low: F.l1_loss(x.to(low), y.to(low)), [(4, 8), (4, 8)]),
    ("cross_entropy", lambda x, w, t, low: F.cross_entropy(F.linear(x, w), t), [(4, 8), (6, 8), _idx(4, 6)]),
    ("nll_loss", lambda x, t, low: F.nll_loss(x.to(low), t), [(4, 6), _idx(4, 6)]),
    ("bce_with_logits", lambda x, y, low: F.binary_cross_entropy_with_logits(x.to(low), y.sigmoid()), [(4, 8), (4, 8)]),
    ("kl_div", lambda x, y, low: F.kl_div(x.to(low).log_softmax(-1), y.log_softmax(-1), reduction="batchmean",
                                          log_target=True), [(4, 8), (4, 8)]),
    # widest type among the floating arguments
    ("cat", lambda x, y, low: torch.cat([x.to(low), y]), [(2, 3), (2, 3)]),
    ("stack", lambda x, y, low: torch.stack([x.to(low), y.to(low)]), [(2, 3), (2, 3)]),
    ("index_copy", lambda x, s, i, low: x.to(low).index_copy(0, i, s),
     [(5, 3), (2, 3), lambda d: torch.tensor([0, 3], device=d)]),
    ("addcmul", lambda a, b, c, low: torch.addcmul(a.to(low), b, c), [(4, 3), (4, 3), (4, 3)]),
    # classes that depend on the mode
    ("pad_reflect", lambda x, low: F.pad(x.to(low), (1, 2), mode="reflect"), [(2, 3, 6)]),
    ("pad_replicate", lambda x, low: F.pad(x.to(low), (1, 1, 2, 0), "replicate"), [(2, 3, 6, 5)]),
    ("pad_constant", lambda x, low: F.pad(x.to(low), (1, 1), value=0.5), [(2, 3, 6)]),
    ("interpolate_nearest", lambda x, low: F.interpolate(x.to(low), scale_factor=2), [(2, 3, 5)]),
    ("interpolate_area", lambda x, low: F.interpolate(x.to(low), size=3, mode="area"), [(2, 3, 6)]),
    # left alone: they run in their arguments' dtypes
    ("gelu_add", lambda x, w, y, low: F.gelu(F.linear(x, w)) + y, [(4, 8), (6, 8), (4, 6)]),
    ("batch_norm", lambda x, w, rm, rv, g, b, low: F.batch_norm(F.linear(x, w), rm, rv, g, b, training=True),
     [(4, 8), (6, 8), (6,), (6,), (6,), (6,)]),
]


def _inputs(specs, device):
    out = []
    for s in specs:
        if callable(s):
            out.append(s(device))
        else:
            out.append(torch.randn(s, device=device))
    return out


@pytest.mark.parametrize("device,low", MODES)
@pytest.mark.parametrize("name,fn,specs", OPS, ids=[o[0] for o in OPS])
def test_op_follows_eager_autocast(name, fn, specs, device, low):
    if device == "cuda" and name == "index_copy":
        pytest.skip("CUDA's autocast does not promote index_copy, which takes no mixed dtypes")
    torch.manual_seed(0)
    xs = _inputs(specs, device)
    if name == "batch_norm":
        xs[3] = xs[3].abs() + 0.5  # a running variance
    grads = [i for i, x in enumerate(xs) if x.is_floating_point() and (name != "batch_norm" or i in (0, 1))]

    def run(call, autocast):
        ins = [x.clone().requires_grad_(i in grads) for i, x in enumerate(xs)]
        with torch.autocast(device, dtype=low, enabled=autocast):
            out = call(*ins, low if autocast else torch.float32)  # the reference: all in float32
        out.float().sum().backward()
        return out, [ins[i].grad for i in grads]

    jfn = thunder.jit(fn)
    out, gs = run(jfn, True)
    ref, ref_gs = run(fn, True)
    f32, f32_gs = run(fn, False)
    assert_within_noise(out, ref, f32, f"{name} output")
    for i, g, rg, fg in zip(grads, gs, ref_gs, f32_gs):
        assert_within_noise(g, rg, fg, f"{name} gradient of input {i}")
    # The trace holds the casts; the program runs with autocast off.
    assert "@no_autocast" in str(thunder.last_traces(jfn)[-1])


@pytest.mark.parametrize("device,low", MODES)
def test_binary_cross_entropy_is_refused_on_cuda_and_fp32_on_cpu(device, low):
    x, y = torch.rand(4, 3, device=device), torch.rand(4, 3, device=device)
    fn = lambda x, y: F.binary_cross_entropy(F.linear(x, torch.eye(3, device=device)).sigmoid(), y)  # noqa: E731
    with torch.autocast(device, dtype=low):
        if device == "cuda":
            with pytest.raises(RuntimeError, match="unsafe to autocast"):
                fn(x, y)
            with pytest.raises(RuntimeError, match="unsafe to autocast"):
                thunder.jit(fn)(x, y)
        else:
            ref = fn(x, y)
            out = thunder.jit(fn)(x, y)
            assert out.dtype == ref.dtype
            torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


def test_promoting_float16_with_bfloat16_is_refused_as_in_eager():
    a, b = torch.randn(2, 3, dtype=torch.bfloat16), torch.randn(2, 3, dtype=torch.float16)
    for op in (torch.cat, torch.stack):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with pytest.raises(RuntimeError, match="ScalarType"):
                op([a, b])
            with pytest.raises(RuntimeError, match=r"(cat|stack): autocast \(cpu, torch.bfloat16\) cannot promote"):
                thunder.jit(lambda a, b: op([a, b]))(a, b)


# ---- the trace, the cache, nested regions ---------------------------------------------------


def test_the_trace_holds_the_casts_and_the_cache_key_holds_the_autocast_state():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    tm = thunder.jit(lin)
    x = torch.randn(4, 8)
    calls = [(False, torch.bfloat16), (True, torch.bfloat16), (True, torch.float16), (False, torch.bfloat16),
             (True, torch.bfloat16), (True, torch.float16)]
    for enabled, dtype in calls:
        with torch.autocast("cpu", dtype=dtype, enabled=enabled):
            out, ref = tm(x), lin(x)
        assert out.dtype == ref.dtype == (dtype if enabled else torch.float32)
        torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    assert thunder.cache_misses(tm) == 3 and thunder.cache_hits(tm) == 3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tm(x)
    program = str(thunder.last_traces(tm)[-1])
    assert "convert_element_type" in program and "@no_autocast" in program


def _nested(x, w):
    h = F.linear(x, w)  # the caller's autocast
    with torch.autocast("cpu", enabled=False):
        g = F.linear(h.float(), w)  # float32 inside the caller's autocast
    with torch.autocast("cpu", dtype=torch.float16):
        k = F.linear(g, w)  # another dtype
    return h, g, k


def _entered_inside(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = F.linear(x, w)
    return h, F.linear(h.float(), w)


@pytest.mark.parametrize("outer", [True, False], ids=["under-autocast", "plain"])
@pytest.mark.parametrize("fn", [_nested, _entered_inside], ids=["nested", "entered-inside"])
def test_autocast_regions_inside_the_function_apply_to_their_ops(fn, outer):
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    jfn = thunder.jit(fn)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=outer):
        outs, refs = jfn(x, w), fn(x, w)
    for out, ref in zip(outs, refs):
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_program_and_its_backward_run_with_autocast_off():
    # The trace's linear runs in float32 (autocast disabled around it while tracing): run under the
    # caller's autocast, ATen must not make it bfloat16 again, forward or backward.
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)

    def fn(x):
        with torch.autocast("cpu", enabled=False):
            return F.linear(x, w).tanh()

    x = torch.randn(4, 8, requires_grad=True)
    jfn = thunder.jit(fn)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = jfn(x)
        out.sum().backward()  # a backward inside the autocast region
        ref = fn(x.detach().requires_grad_())
    assert out.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(out, ref)
    ref_x = x.detach().clone().requires_grad_()
    ref_w = w.detach().clone().requires_grad_()
    torch.nn.functional.linear(ref_x, ref_w).tanh().sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(w.grad, ref_w.grad)


@torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
def _float32_matmul(ctx, a, b):
    ctx.shapes = (a.shape, b.shape)
    return a @ b  # autocast is off inside: float32, whatever the caller's region


def test_custom_fwd_casts_its_inputs_and_runs_without_autocast():
    # The forward of an autograd.Function decorated as AMP recipes do, called with its context
    # object: its tensor arguments (bfloat16 here) are cast to float32 and it runs with autocast off.
    # (A call of the Function's apply is a fallback call: test_fallback.py.)
    torch.manual_seed(0)
    a, b = torch.randn(4, 8), torch.randn(8, 3)

    def fn(a, b):
        h = F.linear(a, torch.eye(8))
        return h, _float32_matmul(types.SimpleNamespace(), h, b)

    for enabled in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            outs, refs = thunder.jit(fn)(a, b), fn(a, b)
        for out, ref in zip(outs, refs):
            assert out.dtype == ref.dtype
            torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
        assert outs[0].dtype == (torch.bfloat16 if enabled else torch.float32) and outs[1].dtype == torch.float32


# ---- training: small models, 10 SGD steps ---------------------------------------------------


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x, y):
        return F.cross_entropy(self.fc2(F.gelu(self.norm(self.fc1(x)))), y)


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        # No conv bias, as conv-BN blocks are written: before a BatchNorm its gradient is zero in exact
        # arithmetic and only rounding noise, which no relative rule bounds.
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x, y):
        h = F.relu(self.bn(self.conv(x)))
        return F.cross_entropy(self.head(h.mean((2, 3))), y)


class _Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt = llama.GPT(llama.Config())

    def forward(self, idx, y):
        logits = self.gpt(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


class _HFLlama(nn.Module):
    """transformers' Llama (GQA, RoPE, RMSNorm, SwiGLU) and its own shifted loss."""

    def __init__(self):
        super().__init__()
        transformers = pytest.importorskip("transformers")
        cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        self.m = transformers.LlamaForCausalLM(cfg)

    def forward(self, idx, y):
        return self.m(input_ids=idx, labels=y).loss


class _Timm(nn.Module):
    """A timm image model (its own layers: convolutions with BatchNorm, or a ViT) and a cross-entropy."""

    def __init__(self, arch, **kw):
        super().__init__()
        timm = pytest.importorskip("timm")
        self.m = timm.create_model(arch, pretrained=False, num_classes=5, **kw)

    def forward(self, x, y):
        return F.cross_entropy(self.m(x), y)


def _batch(name, device, g):
    if name == "timm_resnet":
        # A batch for which BatchNorm's statistics are not a handful of values (at 2 x 32^2 its last
        # stage normalizes 2 values a channel, and half-precision gradients through it are noise).
        return torch.randn(8, 3, 48, 48, generator=g).to(device), torch.randint(0, 5, (8,), generator=g).to(device)
    if name == "timm_vit":
        return torch.randn(2, 3, 32, 32, generator=g).to(device), torch.randint(0, 5, (2,), generator=g).to(device)
    if name == "mlp":
        return torch.randn(8, 16, generator=g).to(device), torch.randint(0, 4, (8,), generator=g).to(device)
    if name == "cnn":
        return torch.randn(4, 3, 8, 8, generator=g).to(device), torch.randint(0, 5, (4,), generator=g).to(device)
    idx = torch.randint(0, 96, (2, 16), generator=g).to(device)
    return idx, torch.randint(0, 96, (2, 16), generator=g).to(device)


MODELS = {
    "mlp": _MLP, "cnn": _CNN, "llama": _Llama, "hf_llama": _HFLlama,
    "timm_resnet": lambda: _Timm("resnet18"),
    "timm_vit": lambda: _Timm("vit_tiny_patch16_224", img_size=32, patch_size=8),
}


@pytest.mark.parametrize("device,low", MODES)
@pytest.mark.parametrize("name", list(MODELS))
def test_training_under_autocast_follows_eager(name, device, low):
    torch.manual_seed(0)
    model = MODELS[name]().to(device)
    ref, f32 = copy.deepcopy(model), copy.deepcopy(model)
    # thunder runs 2-D convolutions of half types on CUDA in channels-last (cuDNN's fast layout),
    # as eager does for a channels-last model. Eager's error in that layout is eager's too: through
    # an ill-conditioned gradient (BatchNorm biases under float16: sums that nearly cancel) the two
    # layouts' errors differ by 3x, and thunder's equals eager's channels-last one (H200).
    layout = copy.deepcopy(model).to(memory_format=torch.channels_last) if device == "cuda" and name in (
        "cnn", "timm_resnet") else None
    tm = thunder.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for step in range(10):
        # Eager autocast and float32 compute at thunder's point of its trajectory. Three
        # trajectories of their own drift apart by rounding, and a gradient as ill-conditioned as
        # that of a convolution before a BatchNorm (10% off float32 under autocast, eager's and
        # thunder's alike) then differed from float32 by amounts of chance at a later step.
        for m in (ref, f32) + ((layout,) if layout is not None else ()):
            m.load_state_dict(model.state_dict())
        batch = _batch(name, device, g)
        losses = []
        runs = ((tm, True, batch), (ref, True, batch), (f32, False, batch))
        if layout is not None:
            runs += ((layout, True, (batch[0].contiguous(memory_format=torch.channels_last), batch[1])),)
        for m, autocast, args in runs:
            with torch.autocast(device, dtype=low, enabled=autocast):
                loss = m(*args)
            loss.backward()
            losses.append(loss)
        assert_within_noise(*losses[:3], f"{name} step {step} loss", also=losses[3] if layout is not None else None)
        others = layout.parameters() if layout is not None else itertools.repeat(None)
        for (pname, p), rp, fp, lp in zip(model.named_parameters(), ref.parameters(), f32.parameters(), others):
            assert p.grad.dtype == p.dtype == torch.float32
            assert_within_noise(p.grad, rp.grad, fp.grad, f"{name} step {step} gradient of {pname}",
                                also=lp.grad if lp is not None else None)
        opt.step()
        for m in (model, ref, f32) + ((layout,) if layout is not None else ()):
            m.zero_grad()
    assert thunder.cache_misses(tm) == 1


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=cuda)])
def test_grad_scaler_with_float16_steps_as_eager(device):
    torch.manual_seed(0)
    model = _MLP().to(device)
    ref = copy.deepcopy(model)
    tm = thunder.jit(model)
    runs = []
    for m, params in ((tm, model.parameters()), (ref, ref.parameters())):
        opt = torch.optim.SGD(params, lr=0.05)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(5):
            x, y = _batch("mlp", device, g)
            with torch.autocast(device, dtype=torch.float16):
                loss = m(x, y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            losses.append(loss.detach())
        runs.append((losses, scaler.get_scale()))
    (losses, scale), (ref_losses, ref_scale) = runs
    assert scale == ref_scale
    for a, b in zip(losses, ref_losses):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    for p, rp in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, rp, atol=2e-2, rtol=2e-2)
