"""The cross-entropy upcast fold (csrc/transforms/xent_upcast.h): `F.cross_entropy(x.float()...)`
with bf16 / f16 logits becomes ltorch.cross_entropy_upcast of x when a cross-entropy executor
(apex_ex) is active. On the CPU apex_ex declines it and its decomposition (the conversion and the
cross-entropy) runs: results and gradients must equal eager's."""

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.executors.apexex import apex_ex

V = 11

PATTERNS = {
    "float_view": lambda x, y, **kw: F.cross_entropy(x.float().view(-1, V), y, **kw),
    "reshape_float": lambda x, y, **kw: F.cross_entropy(x.reshape(-1, V).float(), y, **kw),
    "to_float32_flatten": lambda x, y, **kw: F.cross_entropy(x.to(torch.float32).flatten(0, 1), y, **kw),
    "view_float_view": lambda x, y, **kw: F.cross_entropy(x.view(2, -1).float().view(-1, V), y, **kw),
}

CASES = [
    ("float_view", torch.bfloat16, dict()),
    ("reshape_float", torch.bfloat16, dict(reduction="sum", ignore_index=3)),
    ("to_float32_flatten", torch.float16, dict(reduction="none")),
    ("view_float_view", torch.bfloat16, dict(label_smoothing=0.2, ignore_index=-1)),
    ("float_view", torch.float16, dict(reduction="mean", ignore_index=0, label_smoothing=0.1)),
]


def traces_text(jf):
    return [str(t) for t in thunder.last_traces(jf)]


@pytest.mark.parametrize("pattern,dtype,kwargs", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_fold_matches_eager(pattern, dtype, kwargs):
    torch.manual_seed(0)
    f = PATTERNS[pattern]
    x = torch.randn(2, 3, V).to(dtype)
    y = torch.randint(0, V, (6,))
    y[1] = kwargs.get("ignore_index", 5) if kwargs.get("ignore_index", -100) >= 0 else y[1]
    jf = thunder.jit(lambda a, b: f(a, b, **kwargs), executors=[apex_ex])
    xg, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = jf(xg, y), f(xe, y, **kwargs)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)
    texts = traces_text(jf)
    folded = [t for t in texts if "Cross-entropy upcast fold" in t]
    assert len(folded) == 1, texts
    assert "ltorch.cross_entropy_upcast(" in folded[0]
    cot = torch.rand_like(want)
    (g_got,) = torch.autograd.grad(got, xg, cot)
    (g_want,) = torch.autograd.grad(want, xe, cot)
    assert g_got.dtype == dtype
    torch.testing.assert_close(g_got, g_want)


def test_fold_keeps_what_else_reads_the_float32_logits():
    # The float32 logits are returned too: nothing to save, no fold.
    def f(x, y):
        z = x.float()
        return F.cross_entropy(z, y), z

    x, y = torch.randn(4, V).bfloat16(), torch.randint(0, V, (4,))
    jf = thunder.jit(f, executors=[apex_ex])
    (loss, z), (wl, wz) = jf(x, y), f(x, y)
    torch.testing.assert_close(loss, wl)
    torch.testing.assert_close(z, wz)
    assert not any("upcast" in t for t in traces_text(jf))


@pytest.mark.parametrize("f", [
    lambda x, y: F.cross_entropy(x.double().float(), y),
    lambda x, y: F.cross_entropy(x.float() * 1.5, y),
    lambda x, y: F.cross_entropy(x.float().T.T, y),
], ids=["double_then_float", "scaled", "transposed"])
def test_no_fold_when_the_logits_are_not_just_converted(f):
    x, y = torch.randn(4, V).bfloat16(), torch.randint(0, V, (4,))
    jf = thunder.jit(f, executors=[apex_ex])
    torch.testing.assert_close(jf(x, y), f(x, y))
    assert not any("ltorch.cross_entropy_upcast(" in t for t in traces_text(jf))


def test_no_fold_without_a_cross_entropy_executor():
    f = PATTERNS["float_view"]
    x, y = torch.randn(2, 3, V).bfloat16(), torch.randint(0, V, (6,))
    jf = thunder.jit(f, executors=[])
    torch.testing.assert_close(jf(x, y), f(x, y))
    assert not any("upcast" in t for t in traces_text(jf))


def test_float32_logits_are_left_alone():
    f = lambda x, y: F.cross_entropy(x.float(), y)  # noqa: E731
    x, y = torch.randn(4, V), torch.randint(0, V, (4,))
    jf = thunder.jit(f, executors=[apex_ex])
    torch.testing.assert_close(jf(x, y), f(x, y))
    assert not any("upcast" in t for t in traces_text(jf))


def test_cross_entropy_upcast_symbol_is_cross_entropy_of_the_float32_logits():
    import thunder.torch as ltorch

    x, y = torch.randn(5, V).half(), torch.randint(0, V, (5,))
    jf = thunder.jit(lambda a, b: ltorch.cross_entropy_upcast(a, b, reduction="sum", label_smoothing=0.1))
    torch.testing.assert_close(jf(x, y), F.cross_entropy(x.float(), y, reduction="sum", label_smoothing=0.1))
    with pytest.raises(TypeError, match="ltorch.cross_entropy_upcast: expected floating-point logits, but got int64"):
        thunder.jit(lambda a, b: ltorch.cross_entropy_upcast(a, b))(y.view(5, 1), y)


def test_debug_claims_names_the_upcast_symbol(monkeypatch, capfd):
    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    f = PATTERNS["float_view"]
    jf = thunder.jit(f, executors=[apex_ex])
    jf(torch.randn(2, 3, V).bfloat16(), torch.randint(0, V, (6,)))
    assert "executor 'apex' declined ltorch.cross_entropy_upcast: its kernels run on CUDA" in capfd.readouterr().err


def test_grad_transform_through_the_fold():
    from thunder.core.transforms import grad

    f = PATTERNS["float_view"]
    x, y = torch.randn(2, 3, V).bfloat16(), torch.randint(0, V, (6,))
    gf = grad(thunder.jit(f, executors=[apex_ex]))
    (g,) = gf(x, y)
    xe = x.clone().requires_grad_()
    f(xe, y).backward()
    assert g.dtype == torch.bfloat16
    torch.testing.assert_close(g, xe.grad)
    assert any("Cross-entropy upcast fold" in str(t) for t in thunder.last_traces(gf))


def test_apex_is_a_default_executor_on_cuda_machines_with_nvrtc(monkeypatch):
    # A CUDA machine simulated: the defaults are settled again with CUDA and NVRTC present.
    from thunder import _C, extend
    from thunder.executors import cudnnex

    monkeypatch.setattr(extend, "_defaults_settled", False)
    monkeypatch.setattr(extend, "_default_executors", list(extend._default_executors))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cudnnex, "cudnn_available", lambda: False)
    monkeypatch.setattr(_C, "nvrtc_available", lambda: True)
    assert apex_ex in extend.get_default_executors()
    monkeypatch.setattr(extend, "_defaults_settled", False)
    monkeypatch.setattr(extend, "_default_executors", [e for e in extend._default_executors if e is not apex_ex])
    monkeypatch.setattr(_C, "nvrtc_available", lambda: False)
    assert apex_ex not in extend.get_default_executors()
