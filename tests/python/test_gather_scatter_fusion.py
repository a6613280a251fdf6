"""Loads and stores at indices a CUDA kernel reads: gathers (index_select, embedding) of a region's
inputs inside fused kernels, and KV-cache updates (`buf.index_copy_(dim, pos, x)`, run in place)
stored by the kernel that computes x (csrc/codegen/kernel_ir.h: KInput::gatherDim,
KOutput::scatterDim; csrc/executors/fusion_executor.cpp: fuseInplaceUpdates).

The generated sources are checked everywhere (NVRTC compiles them where libnvrtc is installed);
THUNDER_TEST_DEVICE=cuda runs the programs on the GPU against eager. On the CPU gathers stay ATen
calls: a C++ kernel could not raise eager's IndexError for an index out of range."""

import os
import re

import pytest
import torch

import thunder
from thunder import _C

from models import llama

DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
on_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="gathers and scatters fuse on CUDA (THUNDER_TEST_DEVICE=cuda)")


def rope_at(x, cos, sin, pos):  # a rotary table's rows at the positions, then RoPE's arithmetic
    c, s = torch.index_select(cos, 0, pos), torch.index_select(sin, 0, pos)
    h = x.shape[-1] // 2
    return x * c + torch.cat((-x[..., h:], x[..., :h]), -1) * s


def embed_norm(idx, w, g):  # the first RMSNorm of a decoder reads the embedding's rows
    x = torch.nn.functional.embedding(idx, w).float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g).to(w.dtype)


def embed_scale(idx, w):  # a 2-D index: a batch of token rows, scaled
    return torch.nn.functional.embedding(idx, w) * 2 + 1


def mask_rows(mask, pos, s):  # a boolean mask's rows at the positions, as an additive bias
    m = torch.index_select(mask, 2, pos)
    return s.masked_fill(~m, float("-inf"))


def table_cols(t, pos, x):  # columns gathered: the gathered dim is the last
    return torch.index_select(t, 1, pos) * x


def _programs(dtype, index_dtype):
    def idx(*a, n):
        return torch.randint(0, n, a, dtype=index_dtype)
    return {
        "rope_at": (rope_at, (torch.randn(1, 4, 3, 8, dtype=dtype), torch.randn(16, 8, dtype=dtype),
                              torch.randn(16, 8, dtype=dtype), idx(3, n=16))),
        "embed_norm": (embed_norm, (idx(2, 5, n=50), torch.randn(50, 64, dtype=dtype), torch.randn(64))),
        "embed_scale": (embed_scale, (idx(3, 4, n=11), torch.randn(11, 24, dtype=dtype))),
        "mask_rows": (mask_rows, (torch.rand(1, 1, 9, 9) > 0.3, idx(2, n=9), torch.randn(1, 3, 2, 9, dtype=dtype))),
        "table_cols": (table_cols, (torch.randn(6, 10, dtype=dtype), idx(7, n=10), torch.randn(6, 7, dtype=dtype))),
    }


NAMES = sorted(_programs(torch.float32, torch.int64))
GATHER_CALLS = ("torch.index_select", "torch.nn.functional.embedding", "torch.take")


def _calls(trace):
    return [ln.split("=", 1)[-1].strip() for ln in str(trace).splitlines() if ln.strip() and not ln.strip().startswith("#")]


@pytest.mark.parametrize("name", NAMES)
def test_cuda_sources_check_every_index(name):
    fn, args = _programs(torch.float32, torch.int64)[name]
    jf = thunder.jit(fn, executors=[])
    jf(*args)
    sources = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda", variants=True)
    assert sources, name
    # The gathered dims' lengths, each index checked against its own.
    lengths = {"rope_at": {16}, "embed_norm": {50}, "embed_scale": {11}, "mask_rows": {9}, "table_cols": {10}}[name]
    for entry, source in sources:
        found = {int(n) for n in re.findall(r"thunder_index\(\(int64_t\)[^,]+, (\d+)\)", source)}
        assert found == lengths, (entry, found)
        if _C.nvrtc_available():
            assert _C.nvrtc_compile(source, "sm_90") > 0, entry


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU's behaviour")
def test_cpu_gathers_stay_aten_calls_and_raise():
    fn, args = _programs(torch.float32, torch.int64)["rope_at"]
    jf = thunder.jit(fn, executors=["fuser"])
    torch.testing.assert_close(jf(*args), fn(*args))
    assert any(c.startswith("torch.index_select") for c in _calls(thunder.last_traces(jf)[-1]))
    bad = args[:3] + (torch.tensor([3, 16, 0]),)
    with pytest.raises(IndexError, match="index out of range"):
        jf(*bad)


@on_cuda
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_gathers_fused_match_eager(name, dtype, index_dtype):
    torch.manual_seed(0)
    fn, args = _programs(dtype, index_dtype)[name]
    args = tuple(a.to(DEVICE) for a in args)
    args = tuple(a.detach().requires_grad_(a.is_floating_point()) for a in args)
    ref_args = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
    jf = thunder.jit(fn, executors=["fuser"])
    out, ref = jf(*args), fn(*ref_args)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, ref, **tol)
    cot = torch.randn_like(ref)
    torch.autograd.backward(out, cot)
    torch.autograd.backward(ref, cot)
    for a, r in zip(args, ref_args):
        if a.requires_grad:
            torch.testing.assert_close(a.grad, r.grad, **tol)
    # The kernels read the rows themselves (a training forward may also take the rows its
    # backward reads with ATen: they are saved); inference leaves no gather call.
    fwd = str(thunder.last_traces(jf)[-1])
    assert re.search(r"# t\d+ = prims\.(take|embedding)\(", fwd), fwd
    with torch.no_grad():
        torch.testing.assert_close(jf(*args), ref, **tol)
    infer = thunder.last_traces(jf)[-1]
    assert not [c for c in _calls(infer) if c.startswith(GATHER_CALLS)], str(infer)


def _update(buf, pos, x):
    y = torch.sin(x) * 2 + 1
    buf.index_copy_(1, pos, y)
    return buf.sum(1)


def _update_read_between(buf, pos, x):
    y = torch.sin(x) * 2 + 1
    before = buf.sum(1)  # reads the buffer between the kernel and the update
    buf.index_copy_(1, pos, y)
    return before, buf.sum(1)


@on_cuda
@pytest.mark.parametrize("graphs", [False, True], ids=["direct", "cudagraphs"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_update_is_stored_by_the_kernel(dtype, graphs):
    buf, ref = (torch.randn(2, 10, 8, device=DEVICE, dtype=dtype) for _ in range(2))
    ref.copy_(buf)
    pos, x = torch.tensor([7, 2, 4], device=DEVICE), torch.randn(2, 3, 8, device=DEVICE, dtype=dtype)
    jf = thunder.jit(_update, executors=["fuser"], plugins="reduce-overhead" if graphs else None)
    out = jf(buf, pos, x)
    expected = _update(ref, pos, x)
    torch.testing.assert_close(buf, ref)  # written in place, the same elements
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)
    final = thunder.last_traces(jf)[-1]
    assert not [c for c in _calls(final) if "index_copy" in c], str(final)
    # Called again at other positions (the kernel reads them on the device).
    pos2 = torch.tensor([0, 9, 5], device=DEVICE)
    jf(buf, pos2, x + 1)
    _update(ref, pos2, x + 1)
    torch.testing.assert_close(buf, ref)


def _matches_eager(fn, buf, ref, pos, x):
    """fn jitted on buf and eager on ref (a copy) give the same outputs and leave the same buffer;
    returns the calls of the final trace."""
    jf = thunder.jit(fn, executors=["fuser"])
    for o, e in zip(jf(buf, pos, x), fn(ref, pos, x)):
        torch.testing.assert_close(o, e)
    torch.testing.assert_close(buf, ref)
    return _calls(thunder.last_traces(jf)[-1])


@on_cuda
def test_update_stays_a_call_when_the_buffer_is_read_between():
    buf = torch.randn(2, 10, 8, device=DEVICE)
    ref = buf.clone()
    pos, x = torch.tensor([7, 2, 4], device=DEVICE), torch.randn(2, 3, 8, device=DEVICE)
    assert [c for c in _matches_eager(_update_read_between, buf, ref, pos, x) if "index_copy_" in c]


@on_cuda
@pytest.mark.parametrize("graphs", [False, True], ids=["direct", "cudagraphs"])
def test_llama_decode_stores_its_kv_cache_in_the_rope_kernel(graphs):
    cfg = llama.Config()
    torch.manual_seed(0)
    model = llama.GPT(cfg).to(DEVICE)
    ref = llama.GPT(cfg).to(DEVICE)
    ref.load_state_dict(model.state_dict())
    for m in (model, ref):
        m.eval()
        m.set_kv_cache(1, device=DEVICE, dtype=torch.float32)
    tm = thunder.jit(model, plugins="reduce-overhead") if graphs else thunder.jit(model)
    prompt = torch.randint(0, cfg.vocab_size, (5,), device=DEVICE)
    out = llama.generate(model, tm, prompt, 14)
    expected = llama.generate(ref, ref, prompt, 14)
    assert torch.equal(out, expected), (out, expected)
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        if name.endswith((".k", ".v")):
            torch.testing.assert_close(b, c)
    decode = thunder.last_traces(tm)[-1]
    calls = _calls(decode)
    assert not [c for c in calls if "index_copy" in c or c.startswith(GATHER_CALLS)], str(decode)


def _update_and_return(buf, pos, x):  # the stored value is also returned: the kernel stores it twice
    y = torch.sin(x) * 2 + 1
    buf.index_copy_(1, pos, y)
    return y, buf.sum(1)


@on_cuda
def test_update_of_a_strided_buffer_whose_value_is_also_returned():
    base = torch.randn(10, 2, 8, device=DEVICE)
    buf, ref = base.transpose(0, 1), base.clone().transpose(0, 1)  # [2, 10, 8], not contiguous
    pos, x = torch.tensor([3, 9], device=DEVICE), torch.randn(2, 2, 8, device=DEVICE)
    assert not [c for c in _matches_eager(_update_and_return, buf, ref, pos, x) if "index_copy" in c]


@on_cuda
@pytest.mark.parametrize("what", ["gather", "update"])
def test_an_index_out_of_range_stops_the_kernel(what):
    # As eager's device-side assert: the launch fails (the CUDA context is lost, so in a process of
    # its own), never a read or a write outside the tensor.
    import subprocess
    import sys
    script = f"""
import torch, thunder
def gather(t, pos, x):
    return torch.index_select(t, 0, pos) * x
def update(buf, pos, x):
    buf.index_copy_(0, pos, x.sin() * 2)
    return buf.sum()
t = torch.randn(16, 8, device="cuda")
pos = torch.tensor([3, 16], device="cuda")
x = torch.randn(2, 8, device="cuda")
jf = thunder.jit({what}, executors=["fuser"])
try:
    jf(t, pos, x)
    torch.cuda.synchronize()
except RuntimeError as e:
    print("raised:", str(e).splitlines()[0])
else:
    print("no error")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", "")] if p))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert "raised:" in r.stdout, (r.stdout, r.stderr[-2000:])


def _gpt_fast_update(k_cache, v_cache, pos, k, v):  # gpt-fast's KVCache.update, after RoPE-like math
    k_cache[:, :, pos] = (k.float() * 2).to(k_cache.dtype)
    v_cache[:, :, pos] = v.sin()
    return k_cache.sum(2), v_cache.sum(2)


@on_cuda
def test_cache_written_at_positions_by_setitem_is_stored_by_the_kernels():
    caches = [torch.randn(1, 4, 16, 8, device=DEVICE, dtype=torch.bfloat16) for _ in range(2)]
    refs = [c.clone() for c in caches]
    pos = torch.tensor([3, -2], device=DEVICE)  # negative positions count from the end, as in eager
    k, v = (torch.randn(1, 4, 2, 8, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    jf = thunder.jit(_gpt_fast_update)
    out = jf(*caches, pos, k, v)
    expected = _gpt_fast_update(*refs, pos, k, v)
    for o, e in zip(out, expected):
        torch.testing.assert_close(o, e)
    for c, r in zip(caches, refs):
        torch.testing.assert_close(c, r)
    final = thunder.last_traces(jf)[-1]
    assert not [c for c in _calls(final) if "index_copy" in c], str(final)
