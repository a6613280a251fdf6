"""Seed 000 (additional executors): the Triton and apex cross-entropy executors.

The seed's two examples and seed 001's apex cells run as written on CUDA (skipped without a GPU,
or without Triton for the Triton example); CPU tests cover imports, clean fallbacks, the
THUNDER_DEBUG_CLAIMS messages, label smoothing in the decomposition and the NVRTC compile of the
apex kernels; the CUDA tables compare results and gradients with F.cross_entropy.
"""

import contextlib
import importlib
import io
import os
import re

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder import _C
from thunder.executors import triton_crossentropy
from thunder.executors import apexex  # noqa: F401  (registers the "apex" executor the tests look up by name)

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
needs_triton = pytest.mark.skipif(
    not triton_crossentropy.triton_available(), reason="needs Triton (not installed)"
)
needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")


def run_printing(code: str) -> str:
    """Runs seed code as written, in a fresh namespace; returns what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<seed>", "exec"), {"__name__": "__seed__"})
    return out.getvalue()


# ---- the seeds, verbatim ----------------------------------------------------------------------

SEED_TRITON = '''
import torch
import thunder
from thunder.executors.triton_crossentropy import triton_ex as triton_cross_entropy_ex
def xentropy(logits, labels, weight, reduction, ignore_index):
    return thunder.torch.cross_entropy(
        logits, labels, weight=weight, reduction=reduction, ignore_index=ignore_index
    )
jitted_xentropy = thunder.jit(
    xentropy,
    executors=[triton_cross_entropy_ex,]
)
device = 'cuda'
dtype = torch.float32
logits = torch.randn([2048, 50257], device=device, dtype=dtype)
labels = torch.randint(0, 50257, [2048], device=device)
weight = torch.rand(50257, device=device, dtype=dtype, requires_grad=False)
reduction = "sum"
ignore_index = labels[5].item()
jitted_xentropy(logits, labels, weight, reduction, ignore_index)
traces = thunder.last_traces(jitted_xentropy)
print(traces[-1])
print("IGNORE_INDEX", ignore_index)
'''

SEED_APEX = '''
import torch
import thunder
from thunder.executors.apexex import apex_ex
def xentropy(logits, labels):
    return thunder.torch.cross_entropy(
        logits, labels, reduction='mean', ignore_index=-1
    )
jitted_xentropy = thunder.jit(xentropy, executors=[apex_ex,])
device = 'cuda'
dtype = torch.float32
logits = torch.randn([2048, 50257], device=device, dtype=dtype)
labels = torch.randint(0, 50257, [2048], device=device)
jitted_xentropy(logits, labels)
traces = thunder.last_traces(jitted_xentropy)
print(traces[-1])
'''

SEED_001_APEX = '''
import thunder
import thunder.torch as ltorch
from thunder.core.transforms import grad, put_grads, get_grad
import torch
dtype = torch.float32
device = 'cuda'
logits = torch.randn([2048, 50257], device=device, dtype=ltorch.to_torch_dtype(dtype), requires_grad=False)
labels = torch.randint(0, 50257, [2048], device=device)

from thunder.executors.apex_entropyex import apex_ex

def foo(logits, labels):
    return torch.nn.functional.cross_entropy(logits, labels, reduction="mean", ignore_index=-1)
cfoo = thunder.jit(foo, executors=[apex_ex])
# Shows the forward operation
cfoo(logits, labels)
print(thunder.last_traces(cfoo)[-1])
print("-----")
cfoo_grad = grad(cfoo)

cfoo_grad(logits, labels)
print(thunder.last_traces(cfoo_grad)[-1])
'''


@needs_cuda
@needs_triton
def test_seed000_triton_example():
    out = run_printing(SEED_TRITON)
    ii = int(re.search(r"IGNORE_INDEX (\d+)", out).group(1))
    # The seed names the inputs after the function's parameters; thunder names them t_0, t_1, ...
    # as seed 001 prints them.
    m = re.search(r"def computation\((\w+), (\w+), (\w+)\):", out)
    assert m, out
    logits, labels, weight = m.groups()
    assert re.search(
        rf"t\d+ = triton_crossentropy\({logits}, {labels}, {weight}, None, {ii}, None, 'sum', 0\.0\)"
        r'  # t\d+: "cuda:0 f32\[\]"', out), out
    assert f"del {logits}, {labels}, {weight}" in out


@needs_cuda
def test_seed000_apex_example():
    out = run_printing(SEED_APEX)
    assert re.search(r"\(t\d+, _\) = apex_cross_entropy\((logits|t_0), (labels|t_1), 'mean', 0\.0\)"
                     r'  # t\d+: "cuda:0 f32\[\]"\n', out), out
    assert "log_softmax" not in out


@needs_cuda
def test_seed001_apex_cells():
    out = run_printing(SEED_001_APEX)
    fwd, bwd = out.split("-----")
    # The seed prints no type comment; thunder comments the outputs the statement names.
    assert re.search(r"\(t\d+, _\) = apex_cross_entropy\(t_0, t_1, 'mean', 0\.0\)"
                     r'  # t\d+: "cuda:0 f32\[\]"\n', fwd), fwd
    assert re.search(r"\(_, t\d+\) = apex_cross_entropy\(t_0, t_1, 'mean', 0\.0\)"
                     r'  # t\d+: "cuda:0 f32\[2048\]"\n', bwd), bwd
    assert re.search(r"t\d+ = apex_cross_entropy_backward\(t\d+, t\d+, target=t_1, max_log_sum_exp=t\d+, "
                     r"label_smoothing=0\.0\)", bwd), bwd
    assert "log_softmax" not in bwd


# ---- CPU: imports, fallbacks, claims -----------------------------------------------------------

def test_every_executor_module_imports():
    for name in ("apexex", "apex_entropyex", "triton_crossentropy", "cudnnex", "torchex", "sdpaex", "torch_compile"):
        importlib.import_module(f"thunder.executors.{name}")
    from thunder.executors.apex_entropyex import apex_ex as a1
    from thunder.executors.apexex import apex_ex as a2

    assert a1 is a2 and a1.name == "apex"
    assert triton_crossentropy.triton_ex.name == "triton"
    names = {e.name for e in thunder.extend.get_all_executors()}
    assert {"apex", "triton", "cudnn"} <= names


def xent(logits, labels, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    return F.cross_entropy(logits, labels, weight, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=label_smoothing)


@pytest.mark.parametrize("executor", ["apex", "triton"])
def test_cpu_tensors_fall_back_without_error(executor):
    ex = thunder.extend.get_executor(executor)
    weight = torch.rand(11) if executor == "triton" else None
    smoothing = 0.2 if executor == "apex" else 0.0
    x = torch.randn(6, 11, requires_grad=True)
    y = torch.randint(0, 11, (6,))
    jf = thunder.jit(lambda a, b: xent(a, b, weight, "mean", 3, smoothing), executors=[ex])
    got = jf(x, y)
    want = xent(x, y, weight, "mean", 3, smoothing)
    torch.testing.assert_close(got, want)
    (g1,) = torch.autograd.grad(got, x)
    (g2,) = torch.autograd.grad(want, x)
    torch.testing.assert_close(g1, g2)
    text = str(thunder.last_traces(jf)[-1])
    assert "apex_cross_entropy" not in text and "triton_crossentropy" not in text


def test_debug_claims_says_why(monkeypatch, capfd):
    from thunder.executors.apexex import apex_ex

    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    jf = thunder.jit(lambda a, b: xent(a, b), executors=[apex_ex, triton_crossentropy.triton_ex])
    jf(torch.randn(4, 5), torch.randint(0, 5, (4,)))
    err = capfd.readouterr().err
    assert "executor 'apex' declined ltorch.cross_entropy: its kernels run on CUDA, but the logits are on cpu" in err
    assert "executor 'apex' declined ltorch.cross_entropy (`ltorch.cross_entropy(" in err
    if not triton_crossentropy.triton_available():
        assert "executor 'triton' declined ltorch.cross_entropy: Triton is not installed" in err
    monkeypatch.delenv("THUNDER_DEBUG_CLAIMS")
    jf = thunder.jit(lambda a, b: xent(a, b), executors=[apex_ex])
    jf(torch.randn(4, 5), torch.randint(0, 5, (4,)))
    assert "declined" not in capfd.readouterr().err


def test_declined_helper_returns_false(monkeypatch, capsys):
    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    assert thunder.extend.declined("myex", "ltorch.mul", "a reason") is False
    assert "thunder: executor 'myex' declined ltorch.mul: a reason" in capsys.readouterr().err


# Label smoothing in ltorch.cross_entropy's decomposition (what runs when apex_ex declines).
SMOOTHING_CASES = [
    ((5, 7), None, -100), ((5, 7), "w", 2), ((3, 4, 2), None, 1), ((3, 4, 2), "w", -100), ((6,), None, -100),
    ((0, 4), None, -100),
]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape,weight,ignore_index", SMOOTHING_CASES)
def test_label_smoothing_decomposition_matches_pytorch(shape, weight, ignore_index, reduction):
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    y = torch.randint(0, classes, target_shape)
    w = torch.rand(classes, dtype=torch.float64) if weight else None
    f = lambda a, b, c: xent(a, b, c, reduction, ignore_index, 0.3)  # noqa: E731
    want, got = f(x, y, w), thunder.jit(f)(x, y, w)
    torch.testing.assert_close(got, want, equal_nan=True)
    if x.numel():
        torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])


def test_label_smoothing_out_of_range_is_an_error():
    with pytest.raises(ValueError, match=r"ltorch.cross_entropy: label_smoothing must be between 0.0 and 1.0, but got 1.5"):
        thunder.jit(lambda a, b: xent(a, b, label_smoothing=1.5))(torch.randn(3, 4), torch.randint(0, 4, (3,)))


# ---- NVRTC: the apex kernels compile without a GPU ------------------------------------------------

@needs_nvrtc
@pytest.mark.parametrize("logits_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("labels_dtype", ["int64", "int32"])
def test_apex_kernels_compile_with_nvrtc(logits_dtype, labels_dtype):
    blocks = sorted({_C.cross_entropy_block_size(v) for v in (1, 7, 300, 5000, 20000, 50257, 262144)})
    assert blocks == [32, 128, 256, 512, 1024]
    vec = 4 if logits_dtype == "float32" else 8
    for block in blocks:
        for v in (1, vec):  # scalar and 16-byte vector loads
            src = _C.cross_entropy_cuda_source(logits_dtype, labels_dtype, block, v)
            assert "thunder_xent_fwd" in src and "thunder_xent_bwd" in src
            assert f"#define VEC {v}" in src
            for arch in ("sm_80", "sm_90"):
                assert _C.nvrtc_compile(src, arch) > 0, (logits_dtype, labels_dtype, block, v, arch)


@pytest.mark.parametrize("args,match", [
    (("float64", "int64", 128), "apex_cross_entropy: logits of dtype float64 are not supported"),
    (("float32", "int16", 128), "apex_cross_entropy: labels of dtype int16 are not supported"),
    (("float32", "int64", 96), "apex_cross_entropy: block size 96 is not a power of two"),
    (("float32", "int64", 2048), "apex_cross_entropy: block size 2048 is not a power of two"),
    (("floaty", "int64", 128), "unknown dtype 'floaty'"),
    (("bfloat16", "int64", 128, 4), "apex_cross_entropy: vector width 4 for bfloat16 logits \\(1 or 8\\)"),
])
def test_apex_kernel_source_errors(args, match):
    with pytest.raises((RuntimeError, ValueError), match=match):
        _C.cross_entropy_cuda_source(*args)


def test_apex_runtime_rejects_cpu_tensors():
    with pytest.raises(RuntimeError, match="apex_cross_entropy: expected logits and labels on one CUDA device"):
        _C.apex_cross_entropy_forward(torch.randn(2, 3), torch.zeros(2, dtype=torch.long), "mean", 0.0, -1)


# ---- CUDA: results and gradients vs F.cross_entropy ------------------------------------------------

VOCABS = [1, 7, 50257, 128256, 262144]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}


def check_against_pytorch(ex, vocab, dtype, reduction, ignore, weighted, smoothing, expect):
    rows = 37
    x = (torch.randn(rows, vocab, device="cuda") * 3).to(dtype).requires_grad_()
    y = torch.randint(0, vocab, (rows,), device="cuda")
    ignore_index = -100
    if ignore:
        # Several ignored rows: a class index, or -1 where every label is class 0.
        ignore_index = int(y[3]) if vocab > 1 else -1
        y[::5] = ignore_index
    w = torch.rand(vocab, device="cuda", dtype=dtype) if weighted else None
    f = lambda a, b, c: xent(a, b, c, reduction, ignore_index, smoothing)  # noqa: E731
    jf = thunder.jit(f, executors=[ex])
    got = jf(x, y, w)
    text = str(thunder.last_traces(jf)[-1])
    assert expect in text, text
    # Reference in float64, rounded to the dtype as PyTorch's result is.
    x64 = x.detach().double().requires_grad_()
    want = f(x64, y, None if w is None else w.double())
    assert got.dtype == dtype and got.shape == want.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    cot = torch.randn_like(want)
    (g_got,) = torch.autograd.grad(got, x, cot.to(dtype))
    (g_want,) = torch.autograd.grad(want, x64, cot)
    assert g_got.dtype == dtype
    torch.testing.assert_close(g_got.double(), g_want, rtol=rtol, atol=atol)
    assert expect.replace("(", "_backward(") in str(thunder.last_backward_traces(jf)[-1])


@needs_cuda
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("ignore,smoothing", [(False, 0.0), (True, 0.0), (False, 0.1), (True, 0.25)])
def test_apex_matches_cross_entropy(vocab, dtype, reduction, ignore, smoothing):
    from thunder.executors.apexex import apex_ex

    check_against_pytorch(apex_ex, vocab, dtype, reduction, ignore, False, smoothing, "apex_cross_entropy(")


@needs_cuda
@needs_triton
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("ignore,weighted", [(False, False), (True, False), (False, True), (True, True)])
def test_triton_matches_cross_entropy(vocab, dtype, reduction, ignore, weighted):
    check_against_pytorch(triton_crossentropy.triton_ex, vocab, dtype, reduction, ignore, weighted, 0.0,
                          "triton_crossentropy(")


@needs_cuda
def test_apex_declines_unsupported_cuda_calls(monkeypatch, capfd):
    from thunder.executors.apexex import apex_ex

    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    x = torch.randn(4, 5, 3, device="cuda")
    y = torch.randint(0, 5, (4, 3), device="cuda")
    w = torch.rand(5, device="cuda")
    for f, why in [(lambda a, b: xent(a, b), "expected logits [rows, classes]"),
                   (lambda a, b: xent(a[..., 0], b[..., 0], w), "class weights are not supported"),
                   (lambda a, b: xent(a[..., 0].double(), b[..., 0]), "float64 (float32, bfloat16 or float16")]:
        jf = thunder.jit(f, executors=[apex_ex])
        torch.testing.assert_close(jf(x, y), f(x, y))
        assert "apex_cross_entropy" not in str(thunder.last_traces(jf)[-1])
        assert why in capfd.readouterr().err


@needs_cuda
def test_apex_out_of_range_label_gives_nan_not_a_value():
    from thunder.executors.apexex import apex_ex

    x = torch.randn(3, 5, device="cuda")
    y = torch.tensor([0, 7, 2], device="cuda")
    out = thunder.jit(lambda a, b: xent(a, b, reduction="none"), executors=[apex_ex])(x, y)
    assert torch.isnan(out[1]) and not torch.isnan(out[0]) and not torch.isnan(out[2])


# ---- the cudnn attention executor ------------------------------------------------------------------

def sdpa(q, k, v, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def test_cudnn_sdpa_with_cpu_tensors_falls_back(monkeypatch, capfd):
    from thunder.executors.cudnnex import cudnn_ex

    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    q, k, v = (torch.randn(1, 2, 8, 16, requires_grad=True) for _ in range(3))
    jf = thunder.jit(lambda a, b, c: sdpa(a, b, c, True), executors=["cudnn"])
    got, want = jf(q, k, v), sdpa(q, k, v, True)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
    assert "cudnn_sdpa" not in str(thunder.last_traces(jf)[-1])
    assert f"executor '{cudnn_ex.name}' declined ltorch.scaled_dot_product_attention" in capfd.readouterr().err


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 128, 64), (1, 8, 300, 128), (2, 2, 64, 32)])
def test_cudnn_sdpa_matches_float64(dtype, causal, shape, monkeypatch):
    from thunder.executors.cudnnex import cudnn_available, cudnn_ex

    if not cudnn_available():
        pytest.skip("this PyTorch has no cuDNN")
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    jf = thunder.jit(lambda a, b, c: sdpa(a, b, c, causal), executors=[cudnn_ex])
    got = jf(q, k, v)
    assert "cudnn_sdpa_fwd(" in str(thunder.last_traces(jf)[-1])
    assert "cudnn_sdpa_bwd(" in str(thunder.last_backward_traces(jf)[-1])
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = sdpa(*ref, causal)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    g = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), g.to(dtype)), torch.autograd.grad(want, ref, g)):
        torch.testing.assert_close(a.double(), b, rtol=5e-2, atol=5e-2)


@needs_cuda
def test_cudnn_sdpa_is_a_default_executor_on_cuda():
    from thunder.executors.cudnnex import cudnn_available, cudnn_ex

    if not cudnn_available():
        pytest.skip("this PyTorch has no cuDNN")
    assert thunder.extend.get_default_executors()[0] is cudnn_ex
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    with torch.no_grad():
        jf = thunder.jit(lambda a, b, c: sdpa(a, b, c, True))
        jf(q, k, v)
    assert "cudnn_sdpa(" in str(thunder.last_traces(jf)[-1])
    jf = thunder.jit(lambda a, b, c: sdpa(a, b, c, True))
    jf(q, k, v).sum().backward()
    assert "cudnn_sdpa_fwd(" in str(thunder.last_traces(jf)[-1])
    assert "cudnn_sdpa_bwd(" in str(thunder.last_backward_traces(jf)[-1])


@needs_cuda
def test_cudnn_training_can_be_left_to_the_other_kernels(monkeypatch):
    from thunder.executors.cudnnex import cudnn_available

    if not cudnn_available():
        pytest.skip("this PyTorch has no cuDNN")
    monkeypatch.setenv("THUNDER_CUDNN_TRAINING", "0")
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    jf = thunder.jit(lambda a, b, c: sdpa(a, b, c, True))
    jf(q, k, v).sum().backward()
    assert "cudnn_sdpa" not in str(thunder.last_traces(jf)[-1])
    assert "sdpaex.fused_attention_backward(" in str(thunder.last_backward_traces(jf)[-1])


def test_default_executors_without_cuda_are_the_fuser_alone():
    names = [e.name for e in thunder.extend.get_default_executors()]
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine adds cuDNN attention")
    assert "cudnn" not in names
    assert names == ["cudafuser" if os.environ.get("THUNDER_CPU_FUSER") == "0" else "fuser"]


def _run_default_jit(tmp_path, **env):
    """Runs a jitted CPU function with the default executors in a fresh process; returns the names
    of the calls in its final trace."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, thunder\n"
        "jf = thunder.jit(lambda x: torch.erf(x.exp() * 2 - 1))\n"
        "x = torch.randn(64)\n"
        "torch.testing.assert_close(jf(x), torch.erf(x.exp() * 2 - 1))\n"
        "print(' '.join(thunder.last_traces(jf)[-1].bound_symbol_names))\n"
    )
    full = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path / "cache"), **{"THUNDER_CPU_FUSER": "1", **env})
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_cpu_regions_are_fused_by_default(tmp_path):
    if not thunder._C.cpu_compiler_available():
        pytest.skip("no C++ compiler on this machine")
    assert any(n.startswith("cpuFusion") for n in _run_default_jit(tmp_path))


def test_cpu_fuser_off_by_environment(tmp_path):
    names = _run_default_jit(tmp_path, THUNDER_CPU_FUSER="0")
    assert not any(n.startswith("cpuFusion") for n in names)
    assert "erf" in " ".join(names)


def test_cpu_fuser_falls_back_silently_without_a_compiler(tmp_path):
    names = _run_default_jit(tmp_path, CXX=str(tmp_path / "no-such-compiler"))
    assert not any(n.startswith("cpuFusion") for n in names)
