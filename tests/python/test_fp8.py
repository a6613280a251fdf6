"""The fp8 executor (thunder/executors/fp8ex.py): which linears it runs in FP8 and why the others
stay in the usual precision (as the trace prints it), its recipes, the weight cast once per
version, the scaling state saved and restored with the module, and the numbers.

On CPU the FP8 matmuls run only with THUNDER_FP8_CPU=1 (torch's reference _scaled_mm): the tests
that do compare thunder against an emulation of the same recipe in float32 (each tensor scaled,
rounded to fp8 and scaled back, then a float32 matmul), which must agree to float32 rounding: the
casts and scales are the same and the products of fp8 values are exact in float32. The GPU tests
(CUDA, compute capability >= 8.9) compare against the emulation and against float32 within FP8's
error (see _REL_FWD / _REL_BWD)."""

import copy
import re

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.executors import fp8ex
from thunder.executors.fp8ex import CurrentScaling, DelayedScaling

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2

requires_fp8_gpu = pytest.mark.skipif(not fp8ex.fp8_available(), reason="needs a CUDA GPU of compute capability >= 8.9")


@pytest.fixture
def cpu_fp8(monkeypatch):
    """FP8 matmuls on CPU (torch's reference kernels), eager casts."""
    monkeypatch.setenv("THUNDER_FP8_CPU", "1")
    monkeypatch.setenv("THUNDER_FP8_COMPILED_CASTS", "0")


def jit_fp8(model, **kw):
    return thunder.jit(model, executors=["fp8", *thunder.get_default_executors()], **kw)


def linear_calls(jfn) -> list[str]:
    """The fp8_linear / fp8_linear_cast / linear_not_fp8 / linear calls of the last forward trace (right-hand sides,
    intermediate names as t?)."""
    text = str(thunder.last_traces(jfn)[-1])
    return [re.sub(r"\bt\d+\b", "t?", ln.strip().split("  #")[0].split(" = ", 1)[1]) for ln in text.splitlines()
            if re.search(r"= (fp8_linear|fp8_linear_cast|linear_not_fp8|torch\.nn\.functional\.linear)\(", ln)]


class Mixed(nn.Module):
    """One linear of each kind: FP8, and each reason to stay in the usual precision."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)            # FP8
        self.odd_out = nn.Linear(128, 24)       # 24 is not a multiple of 16
        self.odd_in = nn.Linear(24, 64)         # 24 is not a multiple of 16
        self.small = nn.Linear(64, 32)          # 32 < min_features 64
        self.head = nn.Linear(32, 64, bias=False)  # 32 < min_features

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return self.head(self.small(self.odd_in(self.odd_out(h))))


# ---- claiming and the checker ------------------------------------------------------------------


def test_found_by_name_and_exported():
    jit_fp8(nn.Linear(64, 64))
    assert thunder.extend.get_executor("fp8") is fp8ex.fp8_ex
    assert thunder.get_default_executors() == thunder.extend.get_default_executors()


def test_cpu_linears_stay_in_usual_precision_and_say_why():
    m = Mixed()
    jm = jit_fp8(m)
    x = torch.randn(2, 8, 64)
    torch.testing.assert_close(jm(x), m(x))
    calls = linear_calls(jm)
    assert len(calls) == 5
    assert all("linear_not_fp8(" in c and "'device cpu is not CUDA'" in c for c in calls), calls


def test_checker_reasons(cpu_fp8):
    m = Mixed()
    jm = jit_fp8(m, fp8_recipe=DelayedScaling(skip=("head",)))
    x = torch.randn(2, 8, 64)
    jm(x)
    assert linear_calls(jm) == [
        "fp8_linear(t_0, t_fc_weight, t_fc_bias, 't_fc_weight', 'delayed:16:max:0', True)",
        "linear_not_fp8(t?, t_odd_out_weight, t_odd_out_bias, 'out_features 24 is not a multiple of 16')",
        "linear_not_fp8(t?, t_odd_in_weight, t_odd_in_bias, 'in_features 24 is not a multiple of 16')",
        "linear_not_fp8(t?, t_small_weight, t_small_bias, "
        "'out_features 32 is below the recipe min_features=64')",
        "linear_not_fp8(t?, t_head_weight, None, 'in_features 32 is below the recipe min_features=64')",
    ]
    # min_features and skip are the recipe's
    jm2 = jit_fp8(Mixed(), fp8_recipe=CurrentScaling(min_features=16, skip=("fc",)))
    jm2(x)
    calls = linear_calls(jm2)
    assert "'the recipe skips weights named *fc*'" in calls[0]
    assert [c.split("(")[0] for c in calls[3:]] == ["fp8_linear", "fp8_linear"]


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda: (nn.Linear(64, 64).double(), torch.randn(16, 64, dtype=torch.float64)),
         "dtypes float64, float64, float64 (one of bfloat16, float16, float32 for all)"),
        (lambda: (nn.Linear(64, 64), torch.randn(64)), "input of 1 dims and weight of 2 (at least 2 and 2)"),
        (lambda: (nn.Linear(64, 64), torch.randn(0, 64)), "an empty input"),
    ],
    ids=["float64", "1-D input", "empty"],
)
def test_checker_refusals(cpu_fp8, make, why):
    m, x = make()
    jm = jit_fp8(m)
    torch.testing.assert_close(jm(x), m(x))
    (call,) = linear_calls(jm)
    assert "linear_not_fp8(" in call and repr(why) in call


def test_training_trace_names_both_halves(cpu_fp8):
    m = Mixed()
    jm = jit_fp8(m)
    jm(torch.randn(4, 16, 64, requires_grad=True)).sum().backward()
    fwd = str(thunder.last_traces(jm)[-1])
    bwd = str(thunder.last_backward_traces(jm)[-1])
    assert fwd.count("fp8_linear(") == 1 and fwd.count("linear_not_fp8(") == 4
    # The backward reads the forward's e4m3 input, transposed, not the input itself.
    assert re.search(r"fp8_linear_backward\(t\d+, t\d+, t\d+, t_fc_weight, 't_fc_weight', 'delayed:16:max:0', True\)",
                     bwd), bwd
    assert re.search(r'# t\d+: "cpu f8e4m3fn\[64, 64\]"', bwd), bwd


def test_declined_linears_train_like_eager():
    m = Mixed()
    ref = copy.deepcopy(m)
    jm = jit_fp8(m)
    x = torch.randn(3, 5, 64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    jm(x).square().sum().backward()
    ref(xr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    for (name, p), pr in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, pr.grad, msg=name)


# ---- float8 tensors in traces -----------------------------------------------------------------


@pytest.mark.parametrize("fp8, short", [(E4M3, "f8e4m3fn"), (E5M2, "f8e5m2")], ids=["e4m3", "e5m2"])
def test_float8_tensors_trace_and_run_as_eager(fp8, short):
    # Traced and printed as thunder dtypes, computed by ATen as eager computes them (the fuser
    # leaves float8 tensors alone), values beyond the format's range and nan included.
    x = torch.tensor([1.0, 300.0, -1000.0, 232.0, 1e-3, 1e-9, float("nan"), float("inf"), 7e4])

    def cast(x):
        return (x * 2).to(fp8)

    jcast = thunder.jit(cast)
    got, want = jcast(x), cast(x)
    assert got.dtype == fp8 and torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    assert f'"cpu {short}[9]"' in str(thunder.last_traces(jcast)[-1])
    jback = thunder.jit(lambda y: y.float() * 2)
    torch.testing.assert_close(jback(want), want.float() * 2, equal_nan=True)
    # Promotion with another dtype raises, as in eager.
    with pytest.raises(RuntimeError, match="Promotion for Float8 Types is not supported"):
        want + x
    with pytest.raises(RuntimeError, match=f"promotion of float8 dtypes is not supported: {fp8}".replace("torch.", "")):
        thunder.jit(lambda a, b: a + b)(want, x)


# ---- recipes and options -----------------------------------------------------------------------


def test_recipe_objects():
    d = DelayedScaling(amax_history_len=16, amax_compute_algo="max", margin=0)
    assert d == DelayedScaling() and d.key == "delayed:16:max:0"
    most_recent = DelayedScaling(amax_history_len=4, amax_compute_algo="most_recent", margin=1)
    assert most_recent.key == "delayed:4:most_recent:1"
    assert CurrentScaling().key == "current:0" and CurrentScaling(margin=2).key == "current:2"
    with pytest.raises(ValueError, match="amax_history_len"):
        DelayedScaling(amax_history_len=0)
    with pytest.raises(ValueError, match="amax_compute_algo"):
        DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(ValueError, match="margin"):
        CurrentScaling(margin=-1)
    with pytest.raises(TypeError, match="skip"):
        DelayedScaling(skip="lm_head")
    with pytest.raises(TypeError):
        DelayedScaling(16)  # keyword-only, as the fields are easy to confuse


def test_jit_options():
    with pytest.raises(TypeError, match="fp8_recipe must be"):
        jit_fp8(nn.Linear(64, 64), fp8_recipe="delayed")
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['fp8_recipe'\]"):
        thunder.jit(nn.Linear(64, 64), fp8_recipe=CurrentScaling())
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['nonsense'\]"):
        jit_fp8(nn.Linear(64, 64), nonsense=1)


def test_state_buffers_per_recipe():
    m = Mixed()
    jit_fp8(m, fp8_recipe=DelayedScaling(amax_history_len=4))
    assert m.fc.fp8_amax_history.shape == (4, 3) and m.fc.fp8_scale.tolist() == [1.0, 1.0, 1.0]
    assert not hasattr(m.odd_out, "fp8_amax_history")  # never FP8: no state
    m2 = Mixed()
    jit_fp8(m2, fp8_recipe=CurrentScaling())
    assert not hasattr(m2.fc, "fp8_amax_history")


# ---- numbers (CPU reference kernels) ----------------------------------------------------------


def _fq(t, fp8, scale):
    """t scaled, saturated, rounded to fp8 and scaled back, in float32."""
    fp8_max = torch.finfo(fp8).max
    return (t.float() * scale).clamp(-fp8_max, fp8_max).to(fp8).float() / scale


def _jit_scale(t, fp8, margin=0):
    amax = t.detach().abs().max().float()
    return torch.finfo(fp8).max / 2.0 ** margin / amax


class _Emulated(torch.autograd.Function):
    """A linear with current scaling emulated in float32 (the FP8 path's math, exactly)."""

    @staticmethod
    def forward(ctx, x, w, b):
        xq = _fq(x, E4M3, _jit_scale(x, E4M3))
        wq = _fq(w, E4M3, _jit_scale(w, E4M3))
        ctx.save_for_backward(xq, wq)
        ctx.has_bias = b is not None
        out = xq @ wq.t()
        return (out + b if b is not None else out).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        xq, wq = ctx.saved_tensors
        gq = _fq(g, E5M2, _jit_scale(g, E5M2))
        g2 = gq.reshape(-1, gq.shape[-1])
        gx = (gq @ wq).to(g.dtype)
        gw = (g2.t() @ xq.reshape(-1, xq.shape[-1])).to(g.dtype)
        gb = g.reshape(-1, g.shape[-1]).float().sum(0).to(g.dtype) if ctx.has_bias else None
        return gx, gw, gb


def emulated_linear(x, w, b=None):
    return _Emulated.apply(x, w, b)


class MLP(nn.Module):
    def __init__(self, d=64, h=128, bias=True):
        super().__init__()
        self.up = nn.Linear(d, h, bias=bias)
        self.down = nn.Linear(h, d, bias=bias)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))

    def emulated(self, x):
        h = torch.nn.functional.gelu(emulated_linear(x, self.up.weight, self.up.bias))
        return emulated_linear(h, self.down.weight, self.down.bias)


def _grads(model, x, out, seed):
    # Drawn on the CPU (a CPU generator cannot fill a CUDA tensor), the same values on any device.
    # In float32 for every dtype (randn draws other values in bfloat16), rounded to out's dtype.
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.device, out.dtype)
    out.backward(g)
    return [x.grad] + [p.grad for p in model.parameters()]


# (name, leading shape of the input): 3-D inputs, token counts padded to a multiple of 16.
SHAPES = [("2d", (32,)), ("3d", (2, 16)), ("padded_tokens", (3, 7))]


@pytest.mark.parametrize("name, lead", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_matches_emulation(cpu_fp8, name, lead, bias, dtype):
    torch.manual_seed(0)
    m = MLP(bias=bias).to(dtype)
    ref = copy.deepcopy(m)
    jm = jit_fp8(m, fp8_recipe=CurrentScaling())
    x = torch.randn(*lead, 64, dtype=dtype, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    out, out_ref = jm(x), ref.emulated(xr)
    # Float32 sums in another order can move a value across an fp8 rounding boundary in the next
    # layer's cast: 1e-3 (FP8's own error is near 5%); bfloat16 results: one bfloat16 rounding.
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out, out_ref, **tol)
    for got, want in zip(_grads(m, x, out, 1), _grads(ref, xr, out_ref, 1)):
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, **tol)
    assert len([c for c in linear_calls(jm) if "fp8_linear(" in c]) == 2


@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_compiled_cast_and_record_are_the_eager_ones(fp8):
    # The cast and the state update torch.compile makes (CUDA without the Triton cast kernel, or
    # THUNDER_FP8_COMPILED_CASTS=1) round, saturate and update the history and scale as eager ops.
    torch.manual_seed(0)
    x = torch.randn(40, 64, dtype=torch.bfloat16) * 10
    fp8_max = torch.finfo(fp8).max
    results = []
    for compiled in (False, True):
        hist = torch.tensor([[0.0, 3.0, 0.0], [0.0, 2.0, 0.0], [0.0, 1.0, 0.0]])
        scales = torch.tensor([1.0, fp8_max / 20.0, 1.0])  # some values saturate
        wrap = (lambda f: torch.compile(f, dynamic=True, fullgraph=True)) if compiled else (lambda f: f)
        x8 = wrap(fp8ex._saturated)(x, scales[1:2], fp8)
        amaxes = torch.stack([x[:20].abs().max(), x[20:].abs().max()]).float()
        wrap(fp8ex._record)(amaxes, hist[:, 1], scales[1:2], fp8_max, False, 0)
        results.append((x8.view(torch.uint8), hist, scales))
    (e8, ehist, escales), (c8, chist, cscales) = results
    assert torch.equal(c8, e8)
    assert torch.equal(chist, ehist) and torch.equal(cscales, escales)
    amax = x.abs().max().float()
    assert ehist[:, 1].tolist() == [amax.item(), 3.0, 2.0]
    one = torch.tensor(1.0)
    torch.testing.assert_close(escales, torch.stack([one, fp8_max / amax, one]))
    assert e8.view(fp8).float().abs().max() == fp8_max  # saturated, not inf or nan


# Run in a process of its own: TRITON_INTERPRET counts when Triton is first imported. The kernel in
# Triton's interpreter with float32 output (the interpreter's own float8 rounding is not the
# hardware's; test_gpu_triton_cast_is_torchs checks the FP8 bits): the row-major copy, the
# transposed one, the zero rows and the partial amaxes, for tiles cut at both edges, several
# programs along K, padded token counts, strided inputs, another tiling and float32 inputs.
_INTERPRETED_CAST = r"""
import importlib.util, sys
import torch
spec = importlib.util.spec_from_file_location("fp8_triton", sys.argv[1])
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)
torch.manual_seed(0)
cases = [(40, 70, 48, False), (130, 600, 144, True), (64, 64, 64, False), (3, 1100, 16, True)]
runs = [(c, ft.CONFIG, torch.bfloat16) for c in cases] + [(cases[1], (32, 64, 3, 4), torch.bfloat16)]
runs += [(c, ft.CONFIG, torch.float32) for c in cases]  # float32 inputs load the transposed tile again
for (m, k, m_pad, strided), config, dtype in runs:
    cast = lambda *args: ft.cast(*args, config=config)
    x = torch.randn((k, m) if strided else (m, k), dtype=dtype) * 100
    x = x.t() if strided else x
    scale = torch.tensor([2.5])
    want = torch.nn.functional.pad((x.float() * scale).clamp(-448.0, 448.0), (0, 0, 0, m_pad - m))
    y, yt, parts = cast(x, scale, torch.float32, 448.0, m_pad, True, True, True)
    assert torch.equal(y, want) and torch.equal(yt, want.t()) and yt.is_contiguous(), (m, k)
    assert parts.max() == x.float().abs().max(), (m, k)
    y, yt, parts = cast(x, scale, torch.float32, 448.0, m_pad, False, True, False)
    assert y is None and parts is None and torch.equal(yt, want.t()), (m, k)
    # nan stays nan and counts as inf in the amax (the next scale is then not taken from it)
    x = x.clone()
    x[m // 2, k // 3] = float("nan")
    y, _, parts = cast(x, scale, torch.float32, 448.0, m_pad, True, False, True)
    assert y.isnan().sum() == 1 and y[m // 2, k // 3].isnan() and parts.max() == float("inf"), (m, k)
print("cast ok")
"""


def test_triton_cast_layouts_padding_and_amax():
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", _INTERPRETED_CAST, fp8ex.fp8_triton.__file__], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "cast ok" in r.stdout, r.stdout + r.stderr


def test_delayed_first_step_is_current_then_follows_history(cpu_fp8):
    torch.manual_seed(0)
    m = MLP()
    cur = copy.deepcopy(m)
    jd = jit_fp8(m, fp8_recipe=DelayedScaling(amax_history_len=4))
    jc = jit_fp8(cur, fp8_recipe=CurrentScaling())
    x = torch.randn(32, 64)
    torch.testing.assert_close(jd(x), jc(x), rtol=0, atol=0)
    # The input's amax went into the history, and the next scale is fp8_max over it.
    amax = x.abs().max()
    assert m.up.fp8_amax_history[0, 0] == amax and m.up.fp8_amax_history[1:, 0].eq(0).all()
    torch.testing.assert_close(m.up.fp8_scale[0], 448.0 / amax)
    # A second input twice as large: delayed scaling casts it with the old scale (saturating at
    # 448), current scaling with its own.
    x2 = 2 * x
    out_d, out_c = jd(x2), jc(x2)
    xq = _fq(x2, E4M3, m.up.fp8_scale.new_tensor(448.0) / amax)
    wq = _fq(m.up.weight, E4M3, _jit_scale(m.up.weight, E4M3))
    torch.testing.assert_close(m.up.fp8_amax_history[:2, 0], torch.stack([2 * amax, amax]))
    assert not torch.equal(out_d, out_c)
    h = torch.nn.functional.gelu(xq @ wq.t() + m.up.bias)
    hq = _fq(h, E4M3, m.down.fp8_scale.new_tensor(1.0) * 0 + 448.0 / m.down.fp8_amax_history[1, 0])
    want = hq @ _fq(m.down.weight, E4M3, _jit_scale(m.down.weight, E4M3)).t() + m.down.bias
    torch.testing.assert_close(out_d, want, rtol=1e-5, atol=1e-5)


def test_most_recent_and_margin(cpu_fp8):
    torch.manual_seed(0)
    m = MLP()
    jm = jit_fp8(m, fp8_recipe=DelayedScaling(amax_history_len=3, amax_compute_algo="most_recent", margin=1))
    x = torch.randn(32, 64)
    for k in (1.0, 4.0, 2.0):
        jm(k * x)
    amax = x.abs().max()
    torch.testing.assert_close(m.up.fp8_amax_history[:, 0], torch.stack([2 * amax, 4 * amax, amax]))
    torch.testing.assert_close(m.up.fp8_scale[0], 448.0 / 2 / (2 * amax))


def test_weight_cast_once_per_version(cpu_fp8, monkeypatch):
    casts = []
    quantize = fp8ex._quantize

    def counting(x, role, *args, **kwargs):
        casts.append(role)
        return quantize(x, role, *args, **kwargs)

    monkeypatch.setattr(fp8ex, "_quantize", counting)
    torch.manual_seed(0)
    m = MLP()
    jm = jit_fp8(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(2):
        for micro in range(3):
            jm(torch.randn(2, 16, 64)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    # Per step and layer: one weight cast, three input and three gradient casts.
    assert casts.count(fp8ex.WEIGHT) == 2 * 2
    assert casts.count(fp8ex.INPUT) == casts.count(fp8ex.GRAD) == 2 * 2 * 3
    assert m.up.fp8_amax_history[:, fp8ex.WEIGHT].ne(0).sum() == 2
    assert thunder.cache_misses(jm) == 1


def test_inference_then_training_with_one_weight_version(cpu_fp8):
    # Without grad fp8_linear returns the output alone and casts the weight row-major only; a
    # training call with the same weights then casts it in both layouts (dgrad reads the transpose).
    torch.manual_seed(0)
    m = MLP()
    ref = copy.deepcopy(m)
    jm = jit_fp8(m, fp8_recipe=CurrentScaling())
    x = torch.randn(32, 64)
    with torch.no_grad():
        out = jm(x)
    calls = linear_calls(jm)
    assert len(calls) == 2 and all(c.startswith("fp8_linear(") and c.endswith(", False)") for c in calls), calls
    assert fp8ex._info(m.up.weight).w8_t is None
    xg = x.clone().requires_grad_()
    xr = x.clone().requires_grad_()
    out2, out_ref = jm(xg), ref.emulated(xr)
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    torch.testing.assert_close(out2, out_ref, rtol=1e-3, atol=1e-3)
    for got, want in zip(_grads(m, xg, out2, 0), _grads(ref, xr, out_ref, 0)):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert fp8ex._info(m.up.weight).w8_t.shape == (64, 128)


def test_failing_triton_cast_falls_back_to_torch_ops(cpu_fp8, monkeypatch):
    # A Triton that cannot compile the cast kernel: a warning, then torch's casts (the same numbers).
    monkeypatch.setattr(fp8ex, "_triton_ok", True)
    monkeypatch.setattr(fp8ex, "_use_triton", lambda x: fp8ex._triton_ok)

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(fp8ex.fp8_triton, "cast", broken)
    torch.manual_seed(0)
    m = MLP()
    ref = copy.deepcopy(m)
    jm = jit_fp8(m, fp8_recipe=CurrentScaling())
    x = torch.randn(32, 64)
    with pytest.warns(UserWarning, match="the Triton FP8 cast failed"):
        out = jm(x)
    torch.testing.assert_close(out, ref.emulated(x), rtol=1e-3, atol=1e-3)
    assert not fp8ex._triton_ok


def _train(jm, model, opt, xs):
    losses = []
    for x in xs:
        loss = jm(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses


def test_scaling_state_saved_and_restored(cpu_fp8):
    torch.manual_seed(0)
    xs = [torch.randn(2, 16, 64) * (1 + i) for i in range(6)]
    recipe = DelayedScaling(amax_history_len=4)
    m = MLP()
    m_init = copy.deepcopy(m)
    jm = jit_fp8(m, fp8_recipe=recipe)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    _train(jm, m, opt, xs[:3])
    state = copy.deepcopy(jm.state_dict())
    opt_state = copy.deepcopy(opt.state_dict())
    assert {"up.fp8_amax_history", "up.fp8_scale", "down.fp8_amax_history",
            "down.fp8_scale"} <= set(state)
    assert state["up.fp8_amax_history"][:, fp8ex.INPUT].ne(0).sum() == 3
    want = _train(jm, m, opt, xs[3:])

    # A fresh model, jitted, then loaded: its next steps are the same, to the bit.
    m2 = copy.deepcopy(m_init)
    jm2 = jit_fp8(m2, fp8_recipe=recipe)
    jm2.load_state_dict(state)
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    opt2.load_state_dict(opt_state)
    got = _train(jm2, m2, opt2, xs[3:])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)

    # Without the scaling state the first step differs (its scales come from the step's own amaxes).
    m3 = copy.deepcopy(m_init)
    jm3 = jit_fp8(m3, fp8_recipe=recipe)
    jm3.load_state_dict({k: v for k, v in state.items() if "fp8" not in k}, strict=False)
    opt3 = torch.optim.AdamW(m3.parameters(), lr=1e-2)
    opt3.load_state_dict(opt_state)
    assert not torch.equal(_train(jm3, m3, opt3, xs[3:4])[0], want[0])


def _fused_and_not(monkeypatch, make_xs, steps=4):
    """Trains MLP copies with the casts in the trace (THUNDER_FP8_FUSED_CASTS=1) and without (the
    default): (losses, model, jitted) of each."""
    runs = []
    for flag in ("1", "0"):
        monkeypatch.setenv("THUNDER_FP8_FUSED_CASTS", flag)
        torch.manual_seed(0)
        m = MLP()
        jm = jit_fp8(m)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        runs.append((_train(jm, m, opt, make_xs()), m, jm))
    return runs


def test_casts_in_the_trace_once_every_role_had_its_first_cast(cpu_fp8, monkeypatch):
    # With THUNDER_FP8_FUSED_CASTS=1, after the first step the input and gradient casts are torch
    # ops of the trace (the fuser fuses them into the kernels producing those tensors): the same
    # casts, scales and amax records as the executor's own, bit for bit (biases included), and one
    # more trace.
    (got, m1, jm1), (want, m0, jm0) = _fused_and_not(
        monkeypatch, lambda: [torch.randn(2, 16, 64) * (1 + i) for i in range(4)])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    for (name, p), q in zip(m1.named_parameters(), m0.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    for layer in ("up", "down"):
        torch.testing.assert_close(getattr(m1, layer).fp8_amax_history, getattr(m0, layer).fp8_amax_history,
                                   rtol=0, atol=0)
    fwd, bwd = str(thunder.last_traces(jm1)[-1]), str(thunder.last_backward_traces(jm1)[-1])
    assert fwd.count("= fp8_linear_cast(") == 2 and "= fp8_linear(" not in fwd, fwd
    assert fwd.count("= fp8_scale(") == 2 and "f8e4m3fn[2, 16, 64]" in fwd
    assert bwd.count("= fp8_linear_cast_backward(") == 2 and "f8e5m2[2, 16, 64]" in bwd, bwd
    assert thunder.cache_misses(jm1) == 2
    assert "= fp8_linear_cast(" not in str(thunder.last_traces(jm0)[-1])


def test_casts_in_the_trace_follow_the_state(cpu_fp8, monkeypatch):
    monkeypatch.setenv("THUNDER_FP8_FUSED_CASTS", "1")
    torch.manual_seed(0)
    m = MLP()
    jm = jit_fp8(m)
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    _train(jm, m, opt, [torch.randn(32, 64) for _ in range(2)])
    assert "= fp8_linear_cast(" in str(thunder.last_traces(jm)[-1])
    # Inference: the forward's casts in the trace too.
    with torch.no_grad():
        jm(torch.randn(32, 64))
    assert "= fp8_linear_cast(" in str(thunder.last_traces(jm)[-1])
    # A token count that is not a multiple of 16 keeps the executor's cast (it pads the rows).
    x = torch.randn(7, 64)
    padded = jm(torch.cat([x, torch.zeros(9, 64)]))[:7]
    torch.testing.assert_close(jm(x), padded, rtol=0, atol=0)
    assert "= fp8_linear_cast(" not in str(thunder.last_traces(jm)[-1])
    # An empty scaling state loaded: the first casts take their own amaxes again, then the trace's.
    state = {k: torch.zeros_like(v) if "amax_history" in k else v for k, v in jm.state_dict().items()}
    jm.load_state_dict(state)
    _train(jm, m, opt, [torch.randn(32, 64)])
    assert "= fp8_linear(" in str(thunder.last_traces(jm)[-1])
    assert m.up.fp8_amax_history[:, fp8ex.INPUT].ne(0).sum() == 1
    _train(jm, m, opt, [torch.randn(32, 64)])
    assert "= fp8_linear_cast(" in str(thunder.last_traces(jm)[-1])


def test_deepcopy_keeps_recipe_and_state(cpu_fp8):
    torch.manual_seed(0)
    m = MLP()
    jm = jit_fp8(m, fp8_recipe=DelayedScaling(amax_history_len=4))
    x = torch.randn(32, 64)
    jm(x)
    jc = copy.deepcopy(jm)
    assert jc._model.up.fp8_amax_history is not m.up.fp8_amax_history
    torch.testing.assert_close(jc(2 * x), jm(2 * x), rtol=0, atol=0)
    assert "'delayed:4:max:0'" in linear_calls(jc)[0]
    # (the copy casts its weights again: one more weight amax in its history)
    for r in (fp8ex.INPUT, fp8ex.GRAD):
        torch.testing.assert_close(jc._model.up.fp8_amax_history[:, r], m.up.fp8_amax_history[:, r])
    assert jc._model.up.fp8_amax_history[1, 0] == x.abs().max()


def test_function_of_parameters_keeps_state_by_weight(cpu_fp8):
    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)
    jf = thunder.jit(lambda x, w: torch.nn.functional.linear(x, w), executors=["fp8"])
    x = torch.randn(16, 64)
    jf(x, w)
    jf(2 * x, w)
    hist, _ = fp8ex._state(w, DelayedScaling())
    torch.testing.assert_close(hist[:2, fp8ex.INPUT], torch.stack([2 * x.abs().max(), x.abs().max()]))


# ---- GPU ---------------------------------------------------------------------------------------

# FP8's error: e4m3 keeps 3 mantissa bits (unit roundoff u = 2**-4), e5m2 2 (u = 2**-3). Rounding
# errors are about uniform in [-u, u] relative to each element, RMS u / sqrt(3): 3.6% for e4m3, 7.2%
# for e5m2. A product of two rounded factors errs by the root sum of squares of both (5.1% forward,
# 8.1% for the gradients, e5m2 x e4m3), and a sum of such products with independent errors keeps
# that relative RMS. Per-tensor scaling puts the amax at the top of the range, so values within 2**14
# (e4m3) of it stay normal. The bounds are twice those RMS errors, on the relative Frobenius norm
# (torch's CPU reference kernels measure 5.3% and 8.6% for this test's MLP).
_REL_FWD = 0.10
_REL_BWD = 0.16


def _rel(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


@requires_fp8_gpu
@pytest.mark.parametrize("recipe", [DelayedScaling(), CurrentScaling()], ids=["delayed", "current"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_gpu_linear_and_mlp_vs_float32(recipe, dtype):
    torch.manual_seed(0)
    for make in (lambda: nn.Linear(256, 512).cuda(), lambda: MLP(256, 1024).cuda()):
        base = make()
        m = copy.deepcopy(base).to(dtype)
        ref = copy.deepcopy(base)  # float32
        jm = jit_fp8(m, fp8_recipe=recipe)
        for step in range(3):  # delayed scaling: the first step is current, the next ones delayed
            x = torch.randn(4, 128, 256, device="cuda")
            xd = x.to(dtype, copy=True).requires_grad_()
            xr = x.clone().requires_grad_()
            out, out_ref = jm(xd), ref(xr)
            assert out.dtype == dtype
            assert _rel(out, out_ref) < _REL_FWD
            got, want = _grads(m, xd, out, step), _grads(ref, xr, out_ref, step)
            for g, w in zip(got, want):
                assert g.dtype == dtype and _rel(g, w) < _REL_BWD
            for p in (*m.parameters(), *ref.parameters()):
                p.grad = None
        assert all(re.match(r"fp8_linear(_cast)?\(", c) for c in linear_calls(jm)), linear_calls(jm)


@requires_fp8_gpu
def test_gpu_matches_emulation():
    # cuBLASLt's products of fp8 values are exact; its accumulation order and the bfloat16 output
    # differ from the emulation's float32 ones.
    torch.manual_seed(0)
    m = MLP(256, 1024).cuda()
    ref = copy.deepcopy(m)
    jm = jit_fp8(m, fp8_recipe=CurrentScaling())
    x = torch.randn(4, 100, 256, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    out, out_ref = jm(x), ref.emulated(xr)
    assert _rel(out, out_ref) < 1e-2
    for g, w in zip(_grads(m, x, out, 0), _grads(ref, xr, out_ref, 0)):
        assert _rel(g, w) < 1e-2


@requires_fp8_gpu
def test_gpu_delayed_vs_current_training():
    # Both recipes train a small MLP to about the same loss.
    torch.manual_seed(0)
    base = MLP(256, 1024).cuda().to(torch.bfloat16)
    target = MLP(256, 1024).cuda().to(torch.bfloat16)
    data = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    final = {}
    for recipe in (DelayedScaling(), CurrentScaling()):
        m = copy.deepcopy(base)
        jm = jit_fp8(m, fp8_recipe=recipe)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        for step in range(60):
            x = data[step % 4]
            loss = (jm(x) - target(x).detach()).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        final[recipe.key] = loss.item()
    d, c = final.values()
    assert abs(d - c) / c < 0.1, final


requires_fp8_triton = pytest.mark.skipif(not (fp8ex.fp8_available() and fp8ex.fp8_triton.available()),
                                         reason="needs Triton and a CUDA GPU of compute capability >= 8.9")


@requires_fp8_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("m, k, m_pad, strided",
                         [(40, 70, 48, False), (100, 256, 112, False), (512, 256, 512, False),
                          (1000, 3000, 1008, True), (4096, 2048, 4096, False)])
def test_gpu_triton_cast_is_torchs(fp8, m, k, m_pad, strided, dtype):
    # The Triton kernel's FP8 bits are torch's (round to nearest even after the clamp), in both
    # layouts, with the zero rows, and its amax is the tensor's. From float32 inputs the transposed
    # copy was wrong (Triton 3.6, H200) while the bfloat16 cases passed.
    torch.manual_seed(0)
    shape = (k, m) if strided else (m, k)
    x = torch.randn(shape, device="cuda", dtype=dtype) * 30
    x = x.t() if strided else x
    fp8_max = torch.finfo(fp8).max
    scale = torch.tensor([fp8_max / 60.0], device="cuda")  # values beyond 60 saturate
    y, yt, parts = fp8ex.fp8_triton.cast(x, scale, fp8, fp8_max, m_pad, True, True, True)
    want = fp8ex._saturated(torch.nn.functional.pad(x, (0, 0, 0, m_pad - m)), scale, fp8)
    assert y.dtype == yt.dtype == fp8 and yt.shape == (k, m_pad)
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(yt.view(torch.uint8), want.t().contiguous().view(torch.uint8))
    assert parts.max() == x.float().abs().max()


@requires_fp8_triton
def test_gpu_triton_cast_of_more_than_2_31_elements():
    # 64-bit offsets: a [16384, 128256] logits gradient has 2.1e9 elements.
    m, k = 16400, 131072
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    x[-1, -1] = 1000.0
    scale = torch.tensor([0.5], device="cuda")
    y, yt, parts = fp8ex.fp8_triton.cast(x, scale, E4M3, 448.0, m, True, True, True)
    tail = fp8ex._saturated(x[-16:], scale, E4M3).view(torch.uint8)
    assert torch.equal(y[-16:].view(torch.uint8), tail)
    assert torch.equal(yt[:, -16:].view(torch.uint8), tail.t())
    assert parts.max() == 1000.0 and y[-1, -1].float() == 448.0


@requires_fp8_triton
@pytest.mark.parametrize("recipe", [DelayedScaling(), CurrentScaling()], ids=["delayed", "current"])
def test_gpu_triton_casts_train_as_torch_casts(monkeypatch, recipe):
    # Three training steps with the Triton casts and with torch's casts (THUNDER_FP8_TRITON=0):
    # the same FP8 operands, so the same outputs, gradients and scaling state, to the bit.
    torch.manual_seed(0)
    base = MLP(256, 1024).cuda().to(torch.bfloat16)
    xs = [torch.randn(3, 100, 256, device="cuda", dtype=torch.bfloat16) * (1 + i) for i in range(3)]
    runs = []
    for triton_casts in ("1", "0"):
        monkeypatch.setenv("THUNDER_FP8_TRITON", triton_casts)
        m = copy.deepcopy(base)
        jm = jit_fp8(m, fp8_recipe=recipe)
        got = []
        for x in xs:
            x = x.clone().requires_grad_()
            out = jm(x)
            got += [out, *_grads(m, x, out, 0)]
            for p in m.parameters():
                p.grad = None
            with torch.no_grad():
                for p in m.parameters():
                    p.mul_(0.99)  # a new version of each weight: cast again
        if isinstance(recipe, DelayedScaling):
            got += [m.up.fp8_amax_history, m.up.fp8_scale, m.down.fp8_amax_history, m.down.fp8_scale]
        runs.append(got)
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@requires_fp8_triton
def test_gpu_training_step_copies_no_fp8_tensor():
    # Every FP8 operand is cast in the layout its matmul reads: no float8 copy kernel (ATen's
    # strided transposed copies took 32 ms of a 102 ms Llama step), and one cast kernel per
    # tensor: per linear the input, the weight and the output gradient.
    torch.manual_seed(0)
    m = MLP(256, 1024).cuda().to(torch.bfloat16)
    jm = jit_fp8(m)
    x = torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(2):  # the first step's casts compute their scales from their own amaxes
        jm(x).sum().backward()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.99)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        jm(x).sum().backward()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert not [n for n in names if "float8_copy" in n], names
    assert sum("_cast_kernel" in n for n in names) == 2 * 3, names


@requires_fp8_triton
@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_gpu_triton_transpose_of_fp8(fp8):
    # The transposed copy the weight gradient reads of an FP8 tensor the fused kernels made.
    x8 = (torch.randn(272, 96, device="cuda") * 20).to(fp8)
    torch.testing.assert_close(fp8ex._transposed(x8).view(torch.uint8), x8.t().contiguous().view(torch.uint8),
                               rtol=0, atol=0)


@requires_fp8_triton
def test_gpu_casts_in_the_trace_train_as_the_executors(monkeypatch):
    # bfloat16 on CUDA: the casts fused into the producing kernels read the producer's float32
    # value (README, FP8 in fused kernels), so a value may land on the neighbouring FP8 value; the
    # training follows the executor's own casts closely, and the traces hold the casts.
    torch.manual_seed(0)
    base = MLP(256, 1024).cuda().to(torch.bfloat16)
    data = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    losses = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("THUNDER_FP8_FUSED_CASTS", flag)
        m = copy.deepcopy(base)
        jm = jit_fp8(m)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        out = []
        for step in range(20):
            loss = (jm(data[step % 4]) - 1).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        losses[flag] = out
        fused = "= fp8_linear_cast(" in str(thunder.last_traces(jm)[-1])
        assert fused == (flag == "1")
    for a, b in zip(losses["1"], losses["0"]):
        assert abs(a - b) <= 0.02 * abs(b), losses
