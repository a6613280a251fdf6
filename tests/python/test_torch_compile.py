"""The torchcompile executor (thunder.executors.torch_compile): regions of the trace run through
torch.compile. torch.compile is slow to compile on the CPU, so the programs are tiny and few; the
fallback tests replace torch.compile and compile nothing."""

import re

import pytest
import torch

import thunder
from thunder.executors import torch_compile
from thunder.executors.torch_compile import torch_compile_ex

needs_compile = pytest.mark.skipif(not torch_compile.torch_compile_available("cpu"),
                                   reason="torch.compile cannot compile CPU code here")


def mlp(x, w, b):
    return torch.tanh(x @ w + b) * 2.0 - 0.5


def grads(fn, args):
    args = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*args)
    return out, torch.autograd.grad(out.sum(), args)


def test_executor_is_registered():
    assert torch_compile_ex.name == "torchcompile"
    assert thunder.extend.get_executor("torchcompile") is torch_compile_ex
    assert isinstance(torch_compile_ex, thunder.extend.FusionExecutor)


@needs_compile
def test_forward_and_backward_match_eager():
    torch.manual_seed(0)
    args = [torch.randn(4, 8), torch.randn(8, 6), torch.randn(6)]
    want, want_grads = grads(mlp, args)
    jf = thunder.jit(mlp, executors=[torch_compile_ex])
    got, got_grads = grads(jf, args)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    # One call per region, its prims as nested comments.
    assert re.search(r"\[t\d+(, t\d+)*\] = TorchCompile0\(", fwd), fwd
    assert "# t" in fwd.split("TorchCompile0(")[1] and "torch.tanh" not in fwd.split("\n")[-2]
    assert "TorchCompile0(" in bwd, bwd
    source = torch_compile.region_source("TorchCompile0")
    assert "def TorchCompile0(" in source
    # A second call reuses the compiled regions.
    got2, _ = grads(jf, args)
    torch.testing.assert_close(got2, want)
    assert thunder.cache_hits(jf) == 1


def test_by_name(monkeypatch):
    # Region forming only: a stand-in for torch.compile, so nothing is compiled.
    monkeypatch.setattr(torch_compile, "_unavailable_reason", lambda device: None)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    f = lambda a: torch.sin(a) * 2.0 + torch.cos(a)  # noqa: E731
    x = torch.randn(5, 3)
    jf = thunder.jit(f, executors=["torchcompile"])
    torch.testing.assert_close(jf(x), f(x))
    assert "TorchCompile0(" in str(thunder.last_traces(jf)[-1])


def test_unavailable_torch_compile_falls_back(monkeypatch, capfd):
    monkeypatch.setattr(torch_compile, "_unavailable_reason", lambda device: "no torch.compile in this test")
    monkeypatch.setenv("THUNDER_DEBUG_CLAIMS", "1")
    torch.manual_seed(0)
    args = [torch.randn(4, 8), torch.randn(8, 6), torch.randn(6)]
    want, want_grads = grads(mlp, args)
    jf = thunder.jit(mlp, executors=[torch_compile_ex])
    got, got_grads = grads(jf, args)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    assert "TorchCompile" not in str(thunder.last_traces(jf)[-1])
    assert "TorchCompile" not in str(thunder.last_backward_traces(jf)[-1])
    assert "executor 'torchcompile' declined TorchCompile0: no torch.compile in this test" in capfd.readouterr().err


def test_failing_compile_runs_the_region_uncompiled(monkeypatch):
    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("inductor exploded")

        return run

    monkeypatch.setattr(torch_compile, "_unavailable_reason", lambda device: None)
    monkeypatch.setattr(torch, "compile", broken_compile)
    x = torch.randn(3, 4)
    f = lambda a: torch.exp(a) * a + 1.0  # noqa: E731
    jf = thunder.jit(f, executors=[torch_compile_ex])
    with pytest.warns(RuntimeWarning, match="torch.compile failed on TorchCompile0.*inductor exploded"):
        got = jf(x)
    torch.testing.assert_close(got, f(x))
    assert "TorchCompile0(" in str(thunder.last_traces(jf)[-1])
    torch.testing.assert_close(jf(x), f(x))  # no second warning needed: the region stays uncompiled


def test_a_lone_op_is_not_a_region(monkeypatch):
    monkeypatch.setattr(torch_compile, "_unavailable_reason", lambda device: None)
    jf = thunder.jit(lambda a: torch.exp(a), executors=[torch_compile_ex])
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), torch.exp(x))
    assert "TorchCompile" not in str(thunder.last_traces(jf)[-1])


@pytest.mark.skipif(not torch.cuda.is_available() or not torch_compile.torch_compile_available("cuda"),
                    reason="needs CUDA and torch.compile with Triton")
def test_cuda_regions_next_to_the_fuser():
    # The first fusion executor named takes the regions it can; the other what is left.
    torch.manual_seed(0)
    args = [torch.randn(16, 32, device="cuda"), torch.randn(32, 8, device="cuda"), torch.randn(8, device="cuda")]
    want, want_grads = grads(mlp, args)
    for executors in ([torch_compile_ex, "cudafuser"], ["cudafuser", torch_compile_ex]):
        jf = thunder.jit(mlp, executors=executors)
        got, got_grads = grads(jf, args)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        text = str(thunder.last_traces(jf)[-1]) + str(thunder.last_backward_traces(jf)[-1])
        if executors[0] is torch_compile_ex:
            assert "TorchCompile0(" in text and "cudaFusion" not in text, text
