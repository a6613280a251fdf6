"""Grouped casts (csrc/transforms/grouped_casts.h): runs of the torch executor's lone dtype
conversions (autocast's parameter casts, their gradients' casts back) become one
`convert_element_types` call. The pass applies to CUDA tensors; THUNDER_GROUP_CASTS=1 applies it on
the CPU here, =0 turns it off. Every result must be bitwise the ungrouped program's: the same
conversions run, only fewer launches."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.executors import torchex

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.norm(x)
        a = F.scaled_dot_product_attention(self.q(h), self.k(h), self.v(h), is_causal=True)
        x = x + self.o(a)
        return x + self.down(F.gelu(self.up(x)))


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(Block(), Block(), nn.Linear(32, 10))


def _step(model, x, y, device, group, monkeypatch):
    monkeypatch.setenv("THUNDER_GROUP_CASTS", group)
    jitted = thunder.jit(model)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = jitted(x)
        loss = F.cross_entropy(out.float().flatten(0, 1), y.flatten())
    loss.backward()
    return jitted, out, [p.grad for p in model.parameters()]


def _calls(trace, name):
    return str(trace).count(f"torchex.{name}(")


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_training_step_is_bitwise_the_ungrouped_one(device, monkeypatch):
    x = torch.randn(2, 8, 32, device=device)
    y = torch.randint(0, 10, (2, 8), device=device)
    base = _net().to(device)
    m1, m0 = copy.deepcopy(base), copy.deepcopy(base)
    j1, out1, g1 = _step(m1, x, y, device, "1", monkeypatch)
    j0, out0, g0 = _step(m0, x, y, device, "0", monkeypatch)
    assert out1.dtype == out0.dtype == torch.bfloat16
    torch.testing.assert_close(out1, out0, rtol=0, atol=0)
    for a, b in zip(g1, g0):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    f1, b1 = thunder.last_traces(j1)[-1], thunder.last_backward_traces(j1)[-1]
    f0, b0 = thunder.last_traces(j0)[-1], thunder.last_backward_traces(j0)[-1]
    # Grouped: the forward's parameter casts (14 linear weights and biases) and the backward's
    # gradients' casts back to float32.
    assert _calls(f1, "convert_element_types") >= 1 and _calls(b1, "convert_element_types") >= 1
    assert _calls(f0, "convert_element_types") == 0 and _calls(b0, "convert_element_types") == 0
    lone = lambda t: _calls(t, "convert_element_type") + str(t).count("Tensor.to(")  # noqa: E731
    assert lone(f1) + lone(b1) + 20 <= lone(f0) + lone(b0)


def test_inference_under_autocast_groups_the_parameter_casts(monkeypatch):
    model = _net().eval()
    x = torch.randn(2, 8, 32)
    monkeypatch.setenv("THUNDER_GROUP_CASTS", "1")
    jitted = thunder.jit(model)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = jitted(x)
        expected = model(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    trace = thunder.last_traces(jitted)[-1]
    assert _calls(trace, "convert_element_types") == 1, str(trace)


def test_runs_are_bounded_by_the_bytes_they_hold(monkeypatch):
    model = _net().eval()
    x = torch.randn(2, 8, 32)
    counts = {}
    for limit in ("0", "4096", str(1 << 30)):
        monkeypatch.setenv("THUNDER_GROUP_CASTS", "1")
        monkeypatch.setenv("THUNDER_GROUP_CASTS_BYTES", limit)
        jitted = thunder.jit(model)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = jitted(x)
            torch.testing.assert_close(out, model(x), atol=2e-2, rtol=2e-2)
        counts[limit] = _calls(thunder.last_traces(jitted)[-1], "convert_element_types")
    # 32x32 bf16 weights are 2 KiB, the 32x128 ones 8 KiB: nothing fits in 0 bytes, a few per run
    # in 4 KiB (the 8 KiB ones alone), every one in 1 GiB.
    assert counts["0"] == 0
    assert counts["4096"] > 1
    assert counts[str(1 << 30)] == 1


def test_conversions_do_not_move_across_writes(monkeypatch):
    # w is cast, updated in place (a write-back to the caller's tensor), and cast again: the second
    # cast must read the updated values, the first the old ones.
    def f(x, w, v):
        a = x @ w.to(torch.bfloat16)
        b = x @ v.to(torch.bfloat16)
        w.mul_(2.0)
        c = x @ w.to(torch.bfloat16)
        return a, b, c

    monkeypatch.setenv("THUNDER_GROUP_CASTS", "1")
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w, v = torch.randn(8, 8), torch.randn(8, 8)
    w_ref = w.clone()
    expected = f(x, w_ref, v.clone())
    jitted = thunder.jit(f)
    got = jitted(x, w, v)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    torch.testing.assert_close(w, w_ref, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_the_kernel_keeps_each_layout(device):
    base = torch.randn(6, 10, device=device)
    tensors = [base, base.t(), base[:, ::2], torch.randn(0, 3, device=device), torch.randn((), device=device),
               torch.randn(2, 3, 4, device=device).permute(2, 0, 1)]
    got = torchex.convert_element_types(tensors, thunder.dtypes.bfloat16)
    assert len(got) == len(tensors)
    for g, t in zip(got, tensors):
        e = t.to(torch.bfloat16)
        assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_grouped_calls_run_from_the_printed_program(monkeypatch):
    # The trace prints as Python that runs: torchex.convert_element_types is a function there.
    from thunder import extend

    def f(x, w1, w2, w3):
        return (x @ w1.to(torch.bfloat16)) @ w2.to(torch.bfloat16) + w3.to(torch.bfloat16)

    monkeypatch.setenv("THUNDER_GROUP_CASTS", "1")
    args = (torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, 8), torch.randn(8, 8), torch.randn(8))
    jitted = thunder.jit(f)
    want = jitted(*args)
    torch.testing.assert_close(want, f(*args), rtol=0, atol=0)
    trace = thunder.last_traces(jitted)[-1]
    assert _calls(trace, "convert_element_types") == 1, str(trace)
    scope = extend.execution_scope(trace)
    exec(compile(str(trace), "<trace>", "exec"), scope)
    got = scope["computation"](*args)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
