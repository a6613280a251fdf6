"""The fusion executor: regions, generated code (golden files, NVRTC), CPU kernels vs eager."""

import math
import copy
import os
import pathlib
import platform
import re
import subprocess
import sys

import pytest
import torch

import thunder
from precision import assert_as_accurate_as_eager, assert_as_close_as_eager
from thunder import _C

GOLDEN = pathlib.Path(__file__).parent / "golden"


def gelu_chain(x, w, b):
    return torch.nn.functional.gelu(x * w + b) * 0.5 - x


def softmax(x):
    return torch.softmax(x, dim=-1)


def rms_norm_bf16(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def _programs():
    torch.manual_seed(0)
    return {
        "gelu_chain": (gelu_chain, (torch.randn(8, 64), torch.randn(64), torch.randn(64))),
        "softmax": (softmax, (torch.randn(8, 64),)),
        "rms_norm_bf16": (rms_norm_bf16, (torch.randn(8, 64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16))),
    }


def _sources(fn, args, target):
    jf = thunder.jit(fn, executors=[])
    jf(*args)
    computation = thunder.last_traces(jf)[1]  # after dead code elimination
    return _C.generate_fusion_sources(computation, target)


@pytest.mark.parametrize("target,ext", [("cuda", "cu"), ("cpp", "cpp")])
@pytest.mark.parametrize("name", sorted(_programs()))
def test_golden_sources(name, target, ext):
    fn, args = _programs()[name]
    sources = _sources(fn, args, target)
    assert len(sources) == 1, f"{name} should be one fusion"
    text = sources[0][1]
    path = GOLDEN / f"{name}.{ext}"
    if os.environ.get("THUNDER_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with THUNDER_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"generated {target} code for {name} changed; review and update {path}"


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
@pytest.mark.parametrize("name", sorted(_programs()))
def test_cuda_sources_compile_with_nvrtc(name):
    fn, args = _programs()[name]
    for kernel, source in _sources(fn, args, "cuda"):
        for arch in ("sm_80", "sm_90"):
            assert _C.nvrtc_compile(source, arch) > 0, (kernel, arch)


def _variant_programs():
    torch.manual_seed(0)
    progs = dict(_programs())
    progs["rank3_broadcasts"] = (
        lambda x, r, c: (x * r + c).tanh() - x.to(torch.bfloat16).float(),
        (torch.randn(4, 8, 64), torch.randn(4, 1, 1), torch.randn(64)),
    )

    progs["rms_norm_backward"] = (
        lambda x, w: torch.nn.functional.rms_norm(x, (64,), w, 1e-6),
        (torch.randn(24, 64, requires_grad=True), torch.randn(64, requires_grad=True)),
    )
    return progs


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
@pytest.mark.parametrize("name", sorted(_variant_programs()))
def test_cuda_launch_variants_compile_with_nvrtc(name):
    # Every kind of launch variant (strided, expanded, scalar, warp, block and re-reading rows)
    # compiles, not only the one the traced shapes predict.
    fn, args = _variant_programs()[name]
    jf = thunder.jit(fn, executors=[])
    out = jf(*args)
    trace = thunder.last_traces(jf)[1]
    if out.requires_grad:  # the backward trace: the input gradient and the column sum of the weight's
        out.backward(torch.randn_like(out))
        trace = thunder.last_backward_traces(jf)[0]
    sources = _C.generate_fusion_sources(trace, "cuda", variants=True)
    assert len(sources) >= 3
    for entry, source in sources:
        assert f" {entry}(" in source
        assert _C.nvrtc_compile(source, "sm_90") > 0, entry


def _rope_gqa(qkv, cos, sin, B=2, T=16, G=2, QPK=4, hs=64):
    # litgpt's grouped-query attention input: split the fused qkv, repeat k and v per query head,
    # rotate q and k. Its backward is one kernel reading 22 inputs.
    qkv = qkv.view(B, T, G, QPK + 2, hs).permute(0, 2, 3, 1, 4)
    q, k, v = qkv.split((QPK, 1, 1), dim=2)
    k, v = k.expand(B, G, QPK, T, hs), v.expand(B, G, QPK, T, hs)
    q, k, v = (t.reshape(B, -1, T, hs) for t in (q, k, v))

    def rope(x):
        rotated = torch.cat((-x[..., hs // 2:], x[..., : hs // 2]), dim=-1)
        return (x * cos + rotated * sin).to(x.dtype)

    return rope(q), rope(k), v


def test_cuda_unroll_fits_registers():
    # A vectorized pointwise kernel stages VEC elements of each input for ROWS rows in registers:
    # RoPE's backward (25 bf16 inputs) takes one row per thread (at four rows of eight it
    # spilled), its forward (9 inputs) one row of eight, and a kernel of
    # two inputs keeps two rows of eight (the default: four were no faster, and 2-8% slower on
    # SwiGLU's kernels on an H100). Each compiles.
    torch.manual_seed(0)
    qkv = torch.randn(2, 16, 2 * 6 * 64, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = torch.randn(16, 64, dtype=torch.bfloat16), torch.randn(16, 64, dtype=torch.bfloat16)
    jf = thunder.jit(_rope_gqa, executors=[])
    outs = jf(qkv, cos, sin)
    torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
    entries = {}
    for kind, trace in (("forward", thunder.last_traces(jf)[1]), ("backward", thunder.last_backward_traces(jf)[0])):
        sources = _C.generate_fusion_sources(trace, "cuda")
        assert len(sources) == 1, (kind, [n for n, _ in sources])
        entries[kind] = re.search(r"__global__ void __launch_bounds__\(256\) (\w+)\(", sources[0][1]).group(1)
        # The backward's rows are the query, key and value gradients' blocks of the qkv layout.
        assert len(re.findall(r"// rows of block", sources[0][1])) == (3 if kind == "backward" else 0), kind
        if _C.nvrtc_available():
            assert _C.nvrtc_compile(sources[0][1], "sm_90") > 0, kind
    # The backward is specialized per block of rows (query, key, value gradients): the widest
    # block stages 15 inputs, so eight elements per access fit.
    assert re.search(r"_t1_v8_1{22,}_32$", entries["backward"]), entries
    assert re.search(r"_t1_v8_1{9}_32$", entries["forward"]), entries
    a, b = torch.randn(64, 256, dtype=torch.bfloat16), torch.randn(64, 256, dtype=torch.bfloat16)
    jf = thunder.jit(lambda a, b: torch.nn.functional.silu(a) * b, executors=[])
    jf(a, b)
    (_, source), = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda")
    assert re.search(r"_t2_v8_11_32\(", source)


def _check(fn, *args, atol=None, rtol=None, fusions=1):
    jf = thunder.jit(fn, executors=["fuser"])
    out = jf(*args)
    torch.testing.assert_close(out, fn(*args), atol=atol, rtol=rtol, equal_nan=True)
    final = thunder.last_traces(jf)[-1]
    names = [n for n in final.bound_symbol_names if n.startswith("cpuFusion")]
    assert len(names) == fusions, str(final)
    return jf


CASES = [
    ("chain", lambda a, b: ((a * 2 + 1).relu() * b - a).abs() / 3 + b, [(16, 33), (16, 33)]),
    ("broadcast", lambda a, b: torch.exp(a - b) * torch.sigmoid(b), [(4, 5, 6), (6,)]),
    ("broadcast_middle", lambda a, b: (a + b).tanh() * 2, [(4, 5, 6), (5, 1)]),
    ("where", lambda a, b: torch.where(a > b, a * b, a - b).sin() + 1, [(7, 9), (7, 9)]),
    ("scalar_input", lambda a, b: (a * b + b).sqrt().log1p(), [(), (3,)]),
    ("softmax", lambda a: torch.softmax(a, -1), [(5, 100)]),
    ("log_softmax", lambda a: torch.log_softmax(a * 2, -1), [(5, 1000)]),
    ("layer_norm", lambda a, w, b: torch.nn.functional.layer_norm(a, (64,), w, b), [(3, 7, 64), (64,), (64,)]),
    ("rms_norm", lambda a, w: torch.nn.functional.rms_norm(a, (64,), w, 1e-5), [(6, 64), (64,)]),
    ("sum_and_pointwise", lambda a: ((a * a).sum(-1), a.exp() * 2), [(4, 50)]),
    ("amax_amin", lambda a: (a.sin().amax(-1) - a.cos().amin(-1)), [(4, 50)]),
    # Column sums (bias gradients): sums over every dim but the last, with other outputs.
    ("column_sum", lambda a, b: ((a * b).sum(0), (a + b).relu()), [(37, 24), (24,)]),
    ("column_sum_3d", lambda a: (a.exp() * 0.5).sum((0, 1)), [(3, 5, 40)]),
    ("row_and_column_sums", lambda a: (torch.softmax(a, -1).sum(0), (a * a).sum(-1)), [(9, 70)]),
    ("column_sum_long_rows", lambda a: (a * 2 - 1).sum(0), [(3, 70000)]),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_cpu_fusion_matches_eager(name, fn, shapes):
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    _check(fn, *args)


def test_bias_gradient_fuses_into_the_backward_kernel():
    # gelu(x @ w + b): the backward's bias gradient (a column sum) joins the pointwise region.
    torch.manual_seed(0)
    x, w = torch.randn(6, 5, 16, dtype=torch.float64), torch.randn(16, 24, dtype=torch.float64)
    b = torch.randn(24, dtype=torch.float64, requires_grad=True)
    f = lambda x, w, b: torch.nn.functional.gelu(x @ w + b) * 2
    jf = thunder.jit(f, executors=["fuser"])
    g = torch.randn(6, 5, 24, dtype=torch.float64)
    (gb,) = torch.autograd.grad(jf(x, w, b), (b,), g)
    (eb,) = torch.autograd.grad(f(x, w, b), (b,), g)
    torch.testing.assert_close(gb, eb, rtol=1e-12, atol=1e-12)
    bw = thunder.last_backward_traces(jf)[-1]
    names = [n for n in bw.bound_symbol_names if n != "del"]
    assert names.count("cpuFusion0") == 1 and not any(n.startswith("torch.sum") for n in names), str(bw)


def test_column_sum_used_inside_a_region_starts_a_new_one():
    # The column sum's value feeds more math: that math goes to a second region.
    a = torch.randn(16, 12)
    _check(lambda x: (x.exp().sum(0) * 2).tanh() + 1, a, fusions=2)
    # Over 8 rows or fewer it is an unrolled sum (additions of loads): one kernel.
    _check(lambda x: (x.exp().sum(0) * 2).tanh() + 1, a[:8], fusions=1)


class _QkvBlock(torch.nn.Module):
    # timm's ViT attention: LayerNorm, a fused q/k/v projection with a bias, heads, attention.
    def __init__(self, C=64, H=4):
        super().__init__()
        self.H = H
        self.norm = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(self.norm(x)).reshape(B, N, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.proj(a.transpose(1, 2).reshape(B, N, C))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bias_gradient_of_an_earlier_value_does_not_split_a_region(dtype):
    # The q/k/v bias gradient sums the heads' gradient gathered before the LayerNorm's backward;
    # placed among that backward's calls it began their group, which then could not be fused as
    # a whole and ran as five kernels and three ATen products. It is passed over: the LayerNorm's
    # backward is one kernel, the sum a kernel of its own after it (an ATen reduction over the
    # leading dims of a bf16 [12544, 1152] gradient, Swin-T's, ran at a third of the bandwidth).
    torch.manual_seed(0)
    m = torch.nn.Sequential(_QkvBlock(), _QkvBlock()).to(dtype)
    ref = copy.deepcopy(m)
    x = torch.randn(2, 17, 64, dtype=dtype, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    jm = thunder.jit(m, executors=["fuser"])
    out, want = jm(x), ref(xr)
    tol = {} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(out, want, **tol)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    for p, r in zip([x, *m.parameters()], [xr, *ref.parameters()]):
        torch.testing.assert_close(p.grad, r.grad, **tol)
    bw = thunder.last_backward_traces(jm)[-1]
    names = [n for n in bw.bound_symbol_names if n != "del"]
    assert not [n for n in names if n in ("torch.mul", "torch.add", "torch.neg")], str(bw)
    # Per block: the heads' gather, the q/k/v bias gradient, the LayerNorm backward (with its
    # recomputed output) and the output projection's; and one for the residual's gradient.
    if dtype != torch.float32:  # (a float32 sum alone is no kernel: no conversions around it)
        assert "torch.sum" not in names, str(bw)
    assert sum(n.startswith("cpuFusion") for n in names) <= 9, str(bw)


# Sums of at most 8 elements per result over dims other than the last (an expand's gradient:
# grouped-query attention's key and value heads) are additions of loads at fixed offsets inside a
# kernel, fused like elementwise ops. (name, fn, input shapes, expected cpuFusion regions)
UNROLLED_SUM_CASES = [
    ("middle_dim", lambda a: (a * 2).sum(1), [(3, 4, 5, 6)], 1),
    ("two_dims", lambda a: a.exp().sum((0, 2)) + 1, [(2, 5, 3, 7)], 1),
    ("into_consumer", lambda a, b: (a.sum(1) * b).tanh(), [(3, 2, 8), (3, 8)], 1),
    ("keepdim_broadcast", lambda a: a - a.sum(1, keepdim=True) * 0.25, [(3, 4, 9)], 1),
    ("of_a_permute", lambda a: (a.permute(2, 0, 1) * 3).sum(1).sin(), [(4, 6, 5)], 1),
    ("reduced_twice", lambda a: a.sum(0).sum(0) * 2, [(2, 3, 10)], 1),
    ("eight_elements", lambda a: (a + 1).sum((0, 1)) * 2, [(2, 4, 33)], 1),
    # More than 8 elements: a reduction ATen computes (the pointwise ops around it still fuse).
    ("nine_elements", lambda a: ((a * 2 + 1).sum(1) * 2).exp(), [(2, 9, 33)], 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,fn,shapes,fusions", UNROLLED_SUM_CASES, ids=[c[0] for c in UNROLLED_SUM_CASES])
def test_unrolled_sums(name, fn, shapes, fusions, dtype):
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype) for s in shapes]
    jf = thunder.jit(fn, executors=["fuser"])
    out = jf(*args)
    # Low-precision sums accumulate in float32, as ATen's do.
    tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(out, fn(*args), **tol)
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert sum(n.startswith("cpuFusion") for n in names) == fusions, names
    assert ("torch.sum" in names) == (name == "nine_elements"), names


def test_unrolled_sum_of_negative_zeros_is_positive_zero():
    x = torch.full((2, 3, 4), -0.0)
    f = lambda a: (a * 1).sum(1)
    got = thunder.jit(f, executors=["fuser"])(x)
    assert not torch.signbit(got).any() and not torch.signbit(f(x)).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_expand_gradient_is_an_unrolled_sum_in_the_backward_kernel(dtype):
    # k [B, G, 1, T, D] expanded over 4 query heads per group: its gradient sums the 4 heads.
    torch.manual_seed(0)
    k = torch.randn(2, 3, 1, 5, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(2, 3, 4, 5, 8, dtype=dtype)
    f = lambda k, w: ((k.expand(2, 3, 4, 5, 8) * w).sin() * 2).sum()
    jf = thunder.jit(f, executors=["fuser"])
    (got,) = torch.autograd.grad(jf(k, w), (k,))
    (ref,) = torch.autograd.grad(f(k, w), (k,))
    tol = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(got, ref, **tol)
    names = [n for n in thunder.last_backward_traces(jf)[-1].bound_symbol_names if n != "del"]
    assert not any(n.startswith("torch.sum") for n in names), names


def test_unrolled_sum_of_non_contiguous_input():
    a = torch.randn(6, 4, 5).transpose(0, 2)  # [5, 4, 6], strided
    f = lambda x: (x * x).sum(1) - 1
    torch.testing.assert_close(thunder.jit(f, executors=["fuser"])(a), f(a))


# Reshapes and squeezes that only insert or remove length-1 dims relabel dims, so they fuse like
# broadcasts; other reshapes stay with torch. (name, fn, input shapes, expected cpuFusion regions)
UNIT_DIM_CASES = [
    ("unsqueeze_squeeze", lambda a: (a.exp().unsqueeze(1) * 2).squeeze(1).sin() + a, [(6, 9)], 1),
    ("reshape_unit_dims", lambda a: ((a * 2 + 1).reshape(4, 1, 8, 1).exp() + 1).reshape(4, 8).cos() * 3, [(4, 8)], 1),
    ("input_to_column", lambda a, b: (a.reshape(16, 1) * b).tanh() + b * (a.exp() + 1).reshape(16, 1), [(16,), (16, 33)], 1),
    ("scalar_to_unit", lambda a, b: ((a * 3 + 1).reshape(1, 1) + b).exp() * 2, [(), (1, 1)], 1),
    ("row_sum_reshaped", lambda a: a / a.abs().sum(-1).reshape(3, 5, 1) + 1, [(3, 5, 7)], 1),
    ("rows_as_output", lambda a: (a.exp().sum(-1).reshape(1, 3, 5) * 2).sin(), [(3, 5, 7)], 1),
    ("squeeze_middle", lambda a: torch.softmax(a * 2, -1).squeeze(1).exp() + 1, [(4, 1, 50)], 1),
    # The reduction's input has the iteration shape up to a leading length-1 dim.
    ("softmax_unit_view", lambda a: (torch.softmax(a, -1).reshape(1, 5, 40) * 2).exp(), [(5, 40)], 1),
    ("leading_unit_log_softmax", lambda a: torch.log_softmax(a.unsqueeze(0) * 2, -1).squeeze(0).exp() - 1, [(3, 70)], 1),
    # A reduction over a length-1 dim is its one element: a reshape, not a reduction phase.
    ("reduce_unit_dim", lambda a, b: (b * a.amax(-1, keepdim=True)).exp() + b.sum(-1, keepdim=True), [(16, 1), (16, 33)], 1),
    ("sum_of_unit_rows", lambda a: (a.exp().sum(-1) * 2).sin(), [(8, 1)], 1),
    # Merging dims: the kernel iterates over [4, 8] and stores [32] in the same order.
    ("merge_dims", lambda a: (a.exp() * 2).reshape(32).sin() + 1, [(4, 8)], 1),
    # Splitting dims: the kernel iterates over the finer [4, 2, 4] and reads [4, 8] through it.
    ("split_dims", lambda a: (a.exp() * 2).reshape(4, 2, 4).sin() + 1, [(4, 8)], 1),
    # A merge and a split that do not nest (4 x 6 -> 3 x 8): not one iteration space.
    ("reshape_not_nested", lambda a: (a.exp() * 2).reshape(3, 8).sin() + 1, [(4, 6)], 2),
    # Row sums read along columns are not one iteration space (one kernel of both was wrong): the
    # group is fused as its longest runs, the sums' kernel and the product's.
    ("row_sum_across_rows", lambda a: a.exp() * a.sum(-1)[None, :] + 1, [(6, 6)], 2),
]


@pytest.mark.parametrize("name,fn,shapes,fusions", UNIT_DIM_CASES, ids=[c[0] for c in UNIT_DIM_CASES])
def test_cpu_fusion_of_unit_dim_reshapes(name, fn, shapes, fusions):
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    _check(fn, *args, fusions=fusions)


def _rms_norm_with_bias(x, b, w):
    return torch.nn.functional.rms_norm(x + b, (x.shape[-1],), w, 1e-6)


# (name, () -> (fn, inputs), row reduction phases of the backward's second region). The bias
# gradient sums the full-size input gradient per row: a second phase after the first row sum.
RMS_NORM_TRAINING = [
    ("contiguous", lambda: (rms_norm_bf16, [torch.randn(64, 128), torch.randn(128)]), 1),
    ("transposed_input", lambda: (rms_norm_bf16, [torch.randn(128, 64).t(), torch.randn(128)]), 1),
    ("three_dims", lambda: (rms_norm_bf16, [torch.randn(4, 16, 128), torch.randn(128)]), 1),
    ("broadcast_bias", lambda: (_rms_norm_with_bias, [torch.randn(64, 128), torch.randn(64, 1), torch.randn(128)]), 2),
]


@pytest.mark.parametrize("name,make,phases", RMS_NORM_TRAINING, ids=[c[0] for c in RMS_NORM_TRAINING])
def test_rms_norm_training_fuses_row_math(name, make, phases):
    # The forward is one region, and so is the backward: the row sum, the per-row [M, 1] math, the
    # full-size input gradient and the weight gradient's column sum.
    torch.manual_seed(0)
    fn, inputs = make()
    args = [t.to(torch.float64).requires_grad_() for t in inputs]
    assert name != "transposed_input" or not args[0].is_contiguous()
    jf = thunder.jit(fn, executors=["fuser"])
    out = jf(*args)
    expected = fn(*args)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(out)
    grads = torch.autograd.grad(out, args, grad)
    for got, want in zip(grads, torch.autograd.grad(expected, args, grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    forward = [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n != "del"]
    assert forward == ["cpuFusion0"], forward
    backward = thunder.last_backward_traces(jf)[-1]
    names = [n for n in backward.bound_symbol_names if n != "del"]
    assert names == ["cpuFusion0"], str(backward)
    # The gradient of the [M] -> [M, 1] broadcast is a reshape, not a sum over the length-1 dim
    # (which would be one more reduction phase).
    sources = dict(_C.fusion_sources(backward))
    assert f"{phases} row reduction phase(s)" in sources["cpuFusion0"]
    assert "(column sum)" in sources["cpuFusion0"].splitlines()[2]


def test_non_contiguous_inputs():
    a = torch.randn(32, 16).t()  # transposed
    b = torch.randn(16, 64)[:, ::2]  # strided
    _check(lambda x, y: (x * y + 1).exp() - y, a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_low_and_high_precision(dtype):
    a, b = torch.randn(9, 17, dtype=dtype), torch.randn(17, dtype=dtype)
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype in (torch.bfloat16, torch.float16) else {}
    _check(lambda x, y: torch.nn.functional.gelu(x * y) + x.exp(), a, b, **tol)
    _check(lambda x: torch.softmax(x, -1), a, **tol)


def test_integer_and_bool_ops():
    a = torch.randint(-50, 50, (6, 7))
    b = torch.randint(1, 9, (6, 7))
    # integer % runs in ATen (eager's ZeroDivisionError, no SIGFPE): it splits the region in two
    _check(lambda x, y: ((x * y + 3) % y) - (x & 7) + (x > y).to(torch.int64), a, b, fusions=2)
    _check(lambda x, y: torch.logical_and(x > 0, y > 2) | (x == y), a, b)


def test_special_values():
    a = torch.tensor([[0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -3.5, 2.5]])
    _check(lambda x: (torch.maximum(x, x * 0.5) + torch.sign(x) * torch.isfinite(x)).abs(), a)
    _check(lambda x: torch.softmax(x.nan_to_num(0.0) if False else x, -1), a)


# The vectorizable float math of the C++ kernels (csrc/codegen/cpu_math.cpp) against float64
# PyTorch: within the ulp bounds tests/cpp/test_cpu_math.cpp measures over every float, with
# signed zeros, infinities, NaN, subnormals and the overflow/underflow edges.
CPU_MATH = [
    ("exp", torch.exp, 2), ("expm1", torch.expm1, 2), ("log", torch.log, 1), ("log1p", torch.log1p, 1),
    ("tanh", torch.tanh, 2), ("sigmoid", torch.sigmoid, 3), ("erf", torch.erf, 2), ("erfc", torch.erfc, 5),
    ("sin", torch.sin, 1), ("cos", torch.cos, 1),
]


def _math_inputs():
    torch.manual_seed(0)
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 1e-38, -1.0, 1.0, -2.0,
               88.72283, 88.72284, -87.33655, -103.97208, -104.0, 10.0546875, 9.19, -9.19, 0.875, -0.875, 2.2]
    grid = torch.linspace(-30, 30, 60001, dtype=torch.float64)
    # (with sin and cos's hardest: a float close to a multiple of pi/2 far out, the switch of
    # argument reduction at 2^28, the largest floats)
    special += [float.fromhex("0x1.9d2a36p+117"), 16367173.0, 2.0**28, 2.0**28 - 16, 3.4028235e38, -3.4028235e38, 1.5707964, 3.1415927]
    mags = torch.logspace(-45, 38, 2000, dtype=torch.float64)
    return torch.cat([torch.tensor(special, dtype=torch.float64), grid, mags, -mags, torch.randn(5000, dtype=torch.float64) * 4]).float()


@pytest.mark.parametrize("name,op,ulps", CPU_MATH, ids=[c[0] for c in CPU_MATH])
def test_cpu_vectorized_math_within_its_ulp_bound(name, op, ulps):
    x = _math_inputs()
    jf = thunder.jit(lambda t: op(t) * 1.0, executors=["fuser"])
    got = jf(x)
    assert "cpuFusion0" in thunder.last_traces(jf)[-1].bound_symbol_names
    assert f"thunder_{name}f(" in thunder.last_fusion_sources(jf)["cpuFusion0"]
    ref = op(x.double())
    # the error in ulps of the float nearest the reference (subnormals: units of 2^-149)
    ulp = torch.ldexp(torch.ones_like(ref), (torch.frexp(ref.float()).exponent.double() - 24).clamp(min=-149))
    finite = torch.isfinite(ref.float())
    err = ((got.double() - ref).abs() / ulp)[finite]
    assert err.max().item() <= ulps, f"{name}: {err.max().item():.2f} ulps at {x[finite][err.argmax()].item()!r}"
    assert torch.equal(got[~finite].nan_to_num(0.0, 1.0, -1.0), ref.float()[~finite].nan_to_num(0.0, 1.0, -1.0))
    assert torch.equal(got.isnan(), ref.isnan())
    zeros = ref == 0
    assert torch.equal(got[zeros].signbit(), ref[zeros].signbit()), f"{name}: sign of zero"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,op,ulps", CPU_MATH, ids=[c[0] for c in CPU_MATH])
def test_cpu_vectorized_math_in_16_bit_floats(name, op, ulps, dtype):
    x = (torch.randn(4, 257) * 3)[:, ::2].to(dtype)  # non-contiguous too
    _check(lambda t: op(t) * 1.0, x)


def _simd_loops_vectorized(source: str, tmp_path) -> list:
    """Whether the compiler (with the runtime's flags) reports each `omp simd` loop of a kernel's
    source vectorized, in source order."""
    path = tmp_path / "k.cpp"
    path.write_text(source)
    cxx = os.environ.get("CXX", "c++")
    flags = thunder._C.cpu_compile_flags() + " -c -fopt-info-vec-optimized"
    out = subprocess.run([cxx, *flags.split(), "-o", str(tmp_path / "k.o"), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = source.splitlines()
    reported = [int(m) for m in re.findall(r"k\.cpp:(\d+):\d+: optimized: loop vectorized", out.stderr)]
    found = []
    for i in [i for i, line in enumerate(lines) if "#pragma omp simd" in line]:
        first = i + 2  # 1-based: the for
        last = next(j for j in range(first, len(lines)) if lines[j] == "    }") + 1
        found.append(any(first <= line <= last for line in reported))  # GCC names a line of the loop
    return found


def _target_has_fma() -> bool:
    """Whether the kernels' target (-march of the runtime's flags) has a fused multiply-add
    instruction: without one (x86-64 up to v2) the vectorizable math calls the C library's fma and
    its loops stay scalar, with the same results (tests/cpp/test_cpu_math.cpp checks the bounds)."""
    march = [f for f in thunder._C.cpu_compile_flags().split() if f.startswith("-march=")]
    cxx = os.environ.get("CXX", "c++")
    out = subprocess.run([cxx, *march, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return "#define __FMA__ " in out.stdout or "#define __ARM_FEATURE_FMA " in out.stdout


def test_cpu_one_hot_kernel_vectorizes(tmp_path):
    # Cross-entropy's backward compares the class index with the target (64-bit integers) and
    # converts the bool to float: GCC 12 vectorized no loop with that cast (the kernel ran scalar,
    # 2.4 ns per element on one core, the slowest kernel of cpu_gpt_train); a select vectorizes.
    def f(x, t):
        one_hot = (torch.arange(x.shape[1]) == t[:, None]).float()
        return torch.exp(x) - one_hot

    jf = thunder.jit(f, executors=["fuser"])
    x, t = torch.randn(64, 256), torch.randint(0, 256, (64,))
    torch.testing.assert_close(jf(x, t), f(x, t))
    source = thunder.last_fusion_sources(jf)["cpuFusion0"]
    assert "m3 = n + 3 * h" in source, source
    assert _simd_loops_vectorized(source, tmp_path)[0], source


def test_cpu_transcendental_kernel_vectorizes(tmp_path):
    # The simd loop of a region with every vectorizable function, compiled with the runtime's
    # flags, is reported vectorized by the compiler: no libm call or branch is left in it.
    def f(x):
        y = torch.erf(torch.log1p(torch.exp(torch.sigmoid(x) - torch.tanh(x))))
        return y + torch.expm1(x) * torch.erfc(x) - torch.log(x.abs())

    jf = thunder.jit(f, executors=["fuser"])
    x = torch.randn(64, 64)
    torch.testing.assert_close(jf(x), f(x), equal_nan=True)
    if not _target_has_fma():
        pytest.skip("the kernels' target has no fused multiply-add: the math is scalar there")
    source = thunder.last_fusion_sources(jf)["cpuFusion0"]
    # Both loops: the one computing four interleaved parts of a chunk (a loop body four times as
    # long, whose calls must all be inlined) and the plain one for the rest.
    assert "m3 = n + 3 * h" in source, source
    assert _simd_loops_vectorized(source, tmp_path) == [True, True], source
    assert not re.search(r"(?<![\w])(expf|expm1f|logf|log1pf|tanhf|erff|erfcf)\(", source)



def test_cpu_trig_kernel_vectorizes(tmp_path):
    # sin and cos reduce arguments from 2^28 up with constants picked by selects: a table of them
    # was a gather, which GCC leaves scalar when it tunes for generic x86-64 (x86-64-v3, -v4) or
    # AMD Zen, and on NEON (the loops of sin and cos stayed scalar on an AVX2 EPYC).
    f = lambda x: torch.sin(x) * torch.cos(x * 3)
    jf = thunder.jit(f, executors=["fuser"])
    x = torch.cat([torch.randn(64, 64) * 10, torch.randn(64, 64) * 1e30])
    torch.testing.assert_close(jf(x), f(x))
    if not _target_has_fma():
        pytest.skip("the kernels' target has no fused multiply-add: the math is scalar there")
    source = thunder.last_fusion_sources(jf)["cpuFusion0"]
    assert "thunder_sinf(" in source and "thunder_cosf(" in source, source
    assert _simd_loops_vectorized(source, tmp_path) == [True, True], source


POW_EXPONENTS = [2, 3, 0.5, -0.5, -1, -2, 1, 2.5, 0]


@pytest.mark.parametrize("exponent", POW_EXPONENTS, ids=[str(e) for e in POW_EXPONENTS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_pow_by_a_constant(exponent, dtype):
    # x.pow(c) for the exponents ATen's pow_tensor_scalar computes without pow (HF's RMSNorm
    # squares with pow(2)) is a multiply, sqrt, rsqrt or reciprocal in both generated languages:
    # matches eager at zeros, negatives, infinities and NaN, and calls no pow.
    x = torch.tensor([0.0, -0.0, 1.5, -2.25, 3.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-20, 7e3],
                     dtype=dtype)
    f = lambda x: x.pow(exponent) + 1
    jf = _check(f, x, atol=0, rtol=0)
    cpp = thunder.last_fusion_sources(jf)["cpuFusion0"]
    jc = thunder.jit(f, executors=[])
    jc(x)
    (_, cuda), = _C.generate_fusion_sources(thunder.last_traces(jc)[1], "cuda")
    for source in (cpp, cuda):
        has_pow = re.search(r"(?<![\w])pow[f]?\(", source) is not None
        assert has_pow == (exponent == 2.5), source


def test_cpu_square_kernel_vectorizes(tmp_path):
    jf = thunder.jit(lambda x: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * x, executors=["fuser"])
    x = torch.randn(64, 256)
    jf(x)
    assert all(_simd_loops_vectorized(thunder.last_fusion_sources(jf)["cpuFusion0"], tmp_path))


# A CPU pointwise kernel writes its output into an input that dies with the call (a tensor the
# trace made, read by nothing later, of the output's shape and dtype, read element for element)
# instead of a new tensor; never into the caller's tensors, a value returned or read later, a
# broadcast read or a different dtype. (name, fn, shapes, outputs written into inputs per call)
INTO_INPUT_CASES = [
    ("matmul_gelu", lambda x, w, b: torch.nn.functional.gelu(x @ w + b), [(8, 16), (16, 32), (32,)], 1),
    ("mlp", lambda x, w, b: torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)) @ w, [(8, 32), (32, 32), (32,)], 1),
    # A linear of a 4-D input returns a view of addmm's 2-D result (ConvNeXt's MLP, channels last):
    # its base dies with it, so the GELU writes into it (the inference peak held both).
    ("mlp_4d", lambda x, w, b: torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)),
     [(2, 4, 4, 16), (64, 16), (64,)], 1),
    ("two_outputs", lambda x, w: (lambda t: (t.sin(), t.cos() * 2))(x @ w), [(8, 16), (16, 32)], 1),
    ("two_dead_inputs", lambda x, w: ((x @ w).sin() * 3, ((x + 1) @ w).cos() * 2), [(8, 16), (16, 32)], 2),
    # The same matmul twice is computed once (common subexpression elimination): one dead input.
    ("repeated_matmul", lambda x, w: ((x @ w).sin(), (x @ w).cos() * 2), [(8, 16), (16, 32)], 1),
    ("caller_input", lambda x, w: torch.sigmoid(x) * 2 + w, [(8, 16), (8, 16)], 0),
    ("returned", lambda x, w: (lambda t: (t, t.exp() * 2))(x @ w), [(8, 16), (16, 32)], 0),
    ("read_later", lambda x, w: (lambda t: (torch.sigmoid(t) * 2) @ t.T)(x @ w), [(8, 16), (16, 32)], 0),
    ("broadcast_read", lambda x, w: (lambda t: (t - t[:1]).tanh())(x @ w), [(8, 16), (16, 32)], 0),
    ("other_dtype", lambda x, w: ((x @ w).exp() * 2).to(torch.bfloat16), [(8, 16), (16, 32)], 0),
]


@pytest.mark.parametrize("name,fn,shapes,into", INTO_INPUT_CASES, ids=[c[0] for c in INTO_INPUT_CASES])
def test_cpu_kernel_output_into_dead_input(name, fn, shapes, into):
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    kept = [a.clone() for a in args]
    jf = thunder.jit(fn, executors=["fuser", "torch"])
    with torch.no_grad():
        jf(*args)
        before = _C.fusion_stats()["outputs_into_inputs"]
        out = jf(*args)
        assert _C.fusion_stats()["outputs_into_inputs"] - before == into, str(thunder.last_traces(jf)[-1])
        torch.testing.assert_close(out, fn(*args))
    for a, k in zip(args, kept):
        assert torch.equal(a, k), f"{name}: an input of the call was modified"
    # With gradients the forward keeps what the backward reads: values and gradients as eager's.
    ga = [a.clone().requires_grad_() for a in args]
    ea = [a.clone().requires_grad_() for a in args]
    got, want = jf(*ga), fn(*ea)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    torch.testing.assert_close(got, want)
    sum(g.float().sum() for g in got).backward()
    sum(w.float().sum() for w in want).backward()
    for g, e in zip(ga, ea):  # sums of products of the float math's rounding (exp's 1 ulp)
        torch.testing.assert_close(g.grad, e.grad, rtol=2e-5, atol=1e-5)


@pytest.mark.skipif(bool(os.environ.get("THUNDER_FUSER_NO_HUGEPAGES")), reason="huge-page outputs turned off")
def test_cpu_kernel_large_outputs_on_huge_pages():
    # Outputs from 4 MiB come from 2 MiB-aligned memory advised to be backed by huge pages; they
    # are ordinary tensors (values, resize, autograd). Smaller ones come from torch.
    def f(x, y):
        return torch.sigmoid(x) * 2 - y.tanh(), (x * y).exp()

    for n in (1 << 20, 1000):
        x, y = torch.randn(n), torch.randn(n)
        jf = thunder.jit(f, executors=["fuser"])
        got = jf(x, y)
        torch.testing.assert_close(got, f(x, y))
        if n == 1 << 20:
            assert all(t.data_ptr() % (2 << 20) == 0 for t in got), [t.data_ptr() for t in got]
            a = got[0]
            head = a[:10].clone()
            a.resize_(3 << 20)  # a storage that grows copies through the allocator
            assert torch.equal(a[:10], head)
            a.fill_(1.5)
            assert a.sum().item() == 1.5 * (3 << 20)
    x = torch.randn(1 << 20, requires_grad=True)
    y = torch.randn(1 << 20)
    out = thunder.jit(lambda x, y: f(x, y)[0] * f(x, y)[1])(x, y)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_()
    (f(xe, y)[0] * f(xe, y)[1]).sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)


@pytest.mark.skipif(bool(os.environ.get("THUNDER_FUSER_NO_HUGEPAGES")), reason="huge-page outputs turned off")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_large_full_on_huge_pages(dtype):
    # torch.full / zeros of 4 MiB and more (an embedding gradient's zeros in the backward) on
    # huge pages: mapped page by page, a 4 MiB fill took 1.5 ms on one core, 0.24 ms after.
    value = True if dtype == torch.bool else 3
    for n in (1 << 22, 1000):
        got = thunder.jit(lambda: torch.full((n,), value, dtype=dtype))()
        assert got.dtype == dtype and got.shape == (n,)
        assert torch.equal(got, torch.full((n,), value, dtype=dtype))
        big = n * got.element_size() >= 4 << 20
        assert (got.data_ptr() % (2 << 20) == 0) or not big, got.data_ptr()


def test_empty_tensors():
    a = torch.randn(0, 5)
    _check(lambda x: (x * 2 + 1).exp(), a)


def test_lone_ops_are_not_fused():
    # seed 002: a region of a single shape op (or a single elementwise op) stays with torch
    a = torch.randn(4, 5)
    jf = thunder.jit(lambda x: x.expand(3, 4, 5), executors=["fuser"])
    torch.testing.assert_close(jf(a), a.expand(3, 4, 5))
    assert not any(n.startswith("cpuFusion") for n in thunder.last_traces(jf)[-1].bound_symbol_names)
    jf = thunder.jit(lambda x: x.exp(), executors=["fuser"])
    jf(a)
    assert [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n != "del"] == ["torch.exp"]


def test_non_fusible_op_splits_regions_without_cycles():
    a, w = torch.randn(4, 8), torch.randn(8, 8)

    def f(x, w):
        y = (x * 2).exp() + 1  # region 1
        z = y @ w  # matmul: torch
        return (z.tanh() * y.sum(-1, keepdim=True)).relu()  # region 2 reads z and region 1

    jf = _check(f, a, w, fusions=2)
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert names.index("torch.matmul") > names.index("cpuFusion0")


def test_run_of_several_iteration_shapes_splits_into_one_kernel_per_shape():
    # A run of fusible calls over values of different shapes (a backward's recomputed forward is
    # one) cannot be one kernel; it becomes one kernel per shape, in an order where each reads
    # what is already computed, not a run of unfused calls.
    def f(x, y, w):
        a = (x * 2).exp() + 1  # [8, 16]
        wf = w.float()  # [16], alone: not worth a kernel
        b = (y * 3).sin() - 1  # [4, 4]
        c = (a * wf).tanh() + a  # [8, 16] again, reads the first group and wf
        d = (b.sum(-1, keepdim=True) * 2).sqrt()  # per-row values of the [4, 4] group
        return c, d

    args = (torch.randn(8, 16), torch.randn(4, 4), torch.randn(16, dtype=torch.float64))
    jf = _check(f, *args, fusions=2)
    assert "torch.mul" not in thunder.last_traces(jf)[-1].bound_symbol_names


def test_backward_recomputation_is_fused():
    from models import llama

    cfg = llama.Config(block_size=32, vocab_size=64, n_layer=2, n_head=4, n_query_groups=2, n_embd=32,
                       intermediate_size=64)
    torch.manual_seed(0)
    model = llama.GPT(cfg)
    idx = torch.randint(0, 64, (2, 32))
    jm = thunder.jit(model, executors=["fuser"])
    jm(idx).sum().backward()
    bw = thunder.last_backward_traces(jm)[-1]
    names = bw.bound_symbol_names
    # The recomputed RMSNorm, SiLU and residual math runs inside kernels.
    for op in ("torch.mul", "torchex.mul", "torch.sigmoid", "Tensor.float", "Tensor.to"):
        assert op not in names, (op, str(bw))
    expected = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model(idx).sum().backward()
    for got, p in zip(expected, model.parameters()):
        torch.testing.assert_close(got, p.grad, atol=1e-4, rtol=1e-4)


def test_trace_prints_fusion_and_source_is_available():
    jf = _check(gelu_chain, *_programs()["gelu_chain"][1])
    text = str(thunder.last_traces(jf)[-1])
    assert "[t" in text and "] = cpuFusion0(" in text and "# t" in text and "prims.erf" in text
    sources = thunder.last_fusion_sources(jf)
    assert list(sources) == ["cpuFusion0"] and 'extern "C" void cpuFusion0(' in sources["cpuFusion0"]


def test_new_process_reuses_the_disk_cache(tmp_path):
    script = (
        "import torch, thunder\n"
        "from thunder import _C\n"
        "jf = thunder.jit(lambda a: (a * 3).sin() + a.cos(), executors=['fuser'])\n"
        "jf(torch.randn(10, 10))\n"
        "s = _C.fusion_stats(); print(s['compiled'], s['disk_hits'])\n"
    )
    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path))
    run = lambda: subprocess.check_output([sys.executable, "-c", script], env=env, text=True).split()
    # Cold: the kernel (and the one-time probe of the C++ compiler) compiled, nothing loaded.
    compiled, hits = map(int, run())
    assert compiled >= 1 and hits == 0
    # A new process compiles nothing: everything comes from the disk cache.
    compiled, hits = map(int, run())
    assert compiled == 0 and hits >= 1


def test_repeated_layers_share_one_cpu_kernel(tmp_path):
    # Two layers of the same shapes make two regions that differ only in names: they are compiled
    # once (a 12-layer model's first call compiled each layer's kernels twelve times).
    script = (
        "import torch, thunder\n"
        "from thunder import _C\n"
        "thunder.jit(lambda a: a.exp() * 2, executors=['fuser'])(torch.randn(3))  # the compiler probe\n"
        "before = _C.fusion_stats()['compiled']\n"
        "w1, w2 = torch.randn(8, 8), torch.randn(8, 8)\n"
        "layer = lambda x, w: torch.tanh(x @ w) * 2 + 1\n"
        "f = lambda x: layer(layer(x, w1), w2)\n"
        "jf = thunder.jit(f, executors=['torch', 'fuser'])\n"
        "x = torch.randn(4, 8)\n"
        "torch.testing.assert_close(jf(x), f(x))\n"
        "names = thunder.last_traces(jf)[-1].bound_symbol_names\n"
        "print(sum(n.startswith('cpuFusion') for n in names), _C.fusion_stats()['compiled'] - before)\n"
    )
    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path))
    regions, compiled = map(int, subprocess.check_output([sys.executable, "-c", script], env=env, text=True).split())
    assert regions == 2 and compiled == 1, (regions, compiled)


def test_kernels_read_index_ranges_at_run_time(tmp_path):
    # A KV cache one token longer at each call (a cat along the sequence, then pointwise ops), a
    # pad of a growing row, a cat along an outer dim: programs that differ only in
    # where a piece ends. Their C++ kernels read those bounds at run time, so the first length
    # compiles them and the later ones compile nothing (before, every length compiled its own).
    script = (
        "import torch, thunder\n"
        "import torch.nn.functional as F\n"
        "from thunder import _C\n"
        "f = lambda past, new: (torch.cat([past, new], 1) * 2).relu() + 1\n"
        "g = lambda x: F.pad(x.exp(), (1, 2)) * 3\n"
        "h = lambda a, b: (torch.cat([a, b], 0) * 2).exp()\n"
        "jf, jg, jh = (thunder.jit(fn, executors=['fuser']) for fn in (f, g, h))\n"
        "counts = []\n"
        "for n in range(2, 8):\n"
        "    past, new = torch.randn(2, n, 4), torch.randn(2, 1, 4)\n"
        "    torch.testing.assert_close(jf(past, new), f(past, new))\n"
        "    x = torch.randn(3, n)\n"
        "    torch.testing.assert_close(jg(x), g(x))\n"
        "    a, b = torch.randn(n, 5), torch.randn(2, 5)\n"
        "    torch.testing.assert_close(jh(a, b), h(a, b))\n"
        "    counts.append(_C.fusion_stats()['compiled'])\n"
        "fused = [sum(n.startswith('cpuFusion') for n in thunder.last_traces(j)[-1].bound_symbol_names) for j in (jf, jg, jh)]\n"
        "print(*fused, *counts)\n"
    )
    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path))
    out = list(map(int, subprocess.check_output([sys.executable, "-c", script], env=env, text=True).split()))
    fused, counts = out[:3], out[3:]
    assert fused == [1, 1, 1], fused
    assert counts[0] > 0 and counts[-1] == counts[0], counts


_CACHE_SCRIPT = (
    "import torch, thunder\n"
    "from thunder import _C\n"
    "f = lambda a: (a * 3).sin() + a.exp()\n"
    "jf = thunder.jit(f, executors=['fuser'])\n"
    "x = torch.randn(10, 10)\n"
    "torch.testing.assert_close(jf(x), f(x))\n"
    "assert 'cpuFusion0' in thunder.last_traces(jf)[-1].bound_symbol_names\n"
    "s = _C.fusion_stats(); print(s['compiled'], s['disk_hits'], _C.cpu_compile_flags())\n"
)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 targets")
def test_cpu_kernel_cache_is_keyed_by_the_instruction_set(tmp_path):
    # The disk cache's key holds the instruction set -march resolves to, not the flag's text: two
    # machines sharing a cache (a home directory on NFS, a container image), each compiling with
    # -march=native, get a library for their own CPU (it handed an AVX-512 library to a CPU
    # without AVX-512). A compiler wrapper plays both machines: the same name and flags, with
    # -march=native meaning x86-64 or x86-64-v2 (both run on any x86-64 CPU) as FAKE_NATIVE says.
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {os.environ.get("CXX", "c++")} "$@" -march="$FAKE_NATIVE"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path / "cache"), CXX=str(wrapper), THUNDER_CPU_MARCH="")

    def run(native):
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=dict(env, FAKE_NATIVE=native),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        compiled, hits, *flags = out.stdout.split()
        assert "-march=native" in flags
        return int(compiled), int(hits)

    assert run("x86-64")[1] == 0
    compiled, hits = run("x86-64-v2")  # another CPU: compiles its own
    assert compiled >= 1 and hits == 0
    compiled, hits = run("x86-64")  # the first again: from the cache
    assert compiled == 0 and hits >= 1


def test_cpu_march_from_the_environment(tmp_path):
    # THUNDER_CPU_MARCH sets the kernels' -march (x86-64-v3: what an AVX2 CPU runs, on any machine
    # that runs it); a value the compiler rejects is a clear error, not CPU regions silently left
    # unfused; a value that is not a plain word is refused before it reaches a shell.
    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path))
    run = lambda march: subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=dict(env, THUNDER_CPU_MARCH=march),
                                       capture_output=True, text=True, timeout=300)
    march = {"x86_64": "x86-64-v2", "aarch64": "armv8-a"}.get(platform.machine())
    if march:
        out = run(march)
        assert out.returncode == 0, out.stderr
        assert f"-march={march}" in out.stdout.split()
    for bad, message in [("no-such-cpu", "THUNDER_CPU_MARCH: the C++ compiler"),
                         ("native;true", "THUNDER_CPU_MARCH: 'native;true' is not a value of -march=")]:
        out = run(bad)
        assert out.returncode != 0 and "ValueError" in out.stderr and message in out.stderr, out.stderr


# ---- CUDA (run on the GPU machine; skipped elsewhere) ------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_cuda_fusion_matches_eager(name, fn, shapes, dtype):
    torch.manual_seed(0)
    args = [torch.randn(s, device="cuda", dtype=dtype) for s in shapes]
    jf = thunder.jit(fn)  # the default executors fuse CUDA regions
    out = jf(*args)
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out, fn(*args), equal_nan=True, **tol)
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert any(n.startswith("cudaFusion") for n in names), names


@cuda
def test_cuda_vectorized_and_strided_paths():
    a = torch.randn(1 << 20, device="cuda")
    b = torch.randn(1 << 20, device="cuda")
    f = lambda x, y: (x * y + 1).exp() - y
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(a, b), f(a, b))  # contiguous, aligned: the _vec kernel
    a2 = torch.randn(1024, 2048, device="cuda").t()
    b2 = torch.randn(2048, 1024, device="cuda")
    torch.testing.assert_close(jf(a2, b2), f(a2, b2))  # transposed input: the strided kernel
    c = torch.randn((1 << 20) + 1, device="cuda")[1:]  # misaligned by 4 bytes
    # exp of large arguments: the fused multiply-add rounds once where eager rounds twice
    torch.testing.assert_close(jf(c, c), f(c, c), rtol=1e-5, atol=1e-5)


@cuda
@pytest.mark.parametrize("n", [1, 31, 1000, 4096, 65536, 262144])
def test_cuda_row_reductions_up_to_256k(n):
    x = torch.randn(3, n, device="cuda")
    for f in (lambda t: torch.softmax(t, -1), lambda t: torch.nn.functional.rms_norm(t, (n,), eps=1e-5)):
        torch.testing.assert_close(thunder.jit(f)(x), f(x), atol=1e-5, rtol=1e-4)
    # column sums over many rows (partial rows per block) and over rows too long to keep in
    # registers (atomics into one partial row)
    y = torch.randn(2000, n, device="cuda")
    f = lambda t: ((t * 2 + 1).sum(0), t.relu())
    torch.testing.assert_close(thunder.jit(f)(y), f(y), atol=1e-3, rtol=1e-4)


@cuda
@pytest.mark.parametrize("n,dtype,tpr", [(96, torch.bfloat16, 16), (40, torch.bfloat16, 8), (8, torch.bfloat16, 1),
                                         (12, torch.float32, 4), (24, torch.float32, 8)])
def test_cuda_short_rows_share_a_warp(n, dtype, tpr):
    # Rows of fewer than 32 chunks take that many lanes (a power of two), 32 / tpr rows per warp;
    # the last warp's lanes past the last row store nothing (1001 rows: not a multiple of the
    # rows per block). ConvNeXt's LayerNorm reads a channels-last convolution's output.
    torch.manual_seed(0)
    x = torch.randn(1001, 7, n, device="cuda", dtype=dtype)
    w, b = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
    img = torch.randn(3, n, 13, 11, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)

    def f(x, w, b, img):
        y = torch.nn.functional.layer_norm(x, (n,), w, b)
        z = torch.nn.functional.layer_norm(img.permute(0, 2, 3, 1), (n,), w, b)
        return y, x.softmax(-1), x.amax(-1), z

    jf = thunder.jit(f)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = jf(x, w, b, img)
    ref = f(*(t.double() for t in (x, w, b, img)))
    for a, r in zip(got, ref):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), r, atol=3e-2 if dtype == torch.bfloat16 else 1e-5, rtol=2e-2)
    names = {e.name for e in prof.events() if e.name.startswith("cudaFusion")}
    assert any(f"_p{tpr}" in nm for nm in names), names


@cuda
@pytest.mark.parametrize("rows,n", [(4096, 2048), (3000, 1000), (77, 512)])
def test_cuda_column_sums_per_block_match_and_repeat(rows, n):
    # Warp-per-row kernels (rows of 512) add their warps' column sums in shared memory and write
    # a partial row per block; block-per-row kernels (1000, 2048: more than two chunks per lane)
    # one per block. layer_norm's backward has two column outputs (weight and bias gradients).
    # The order of additions is fixed: two runs give the same bits.
    torch.manual_seed(0)
    x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    for f, params in ((lambda x, w, b: torch.nn.functional.rms_norm(x, (n,), w, 1e-6), (x, w)),
                      (lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b), (x, w, b))):
        jf = thunder.jit(f)
        got = torch.autograd.grad(jf(x, w, b), params, g)
        again = torch.autograd.grad(jf(x, w, b), params, g)
        dx, dw, db = (t.double().detach().requires_grad_() for t in (x, w, b))
        ref = torch.autograd.grad(f(dx, dw, db), (dx, dw, db)[: len(params)], g.double())
        for a, a2, r in zip(got, again, ref):
            assert torch.equal(a, a2)
            scale = r.abs().max().item()
            assert (a.double() - r).abs().max().item() <= 2e-2 * scale, (rows, n)


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_norm_backward_is_one_kernel_with_its_weight_gradient(dtype):
    x = torch.randn(64, 1024, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(1024, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(64, 1024, device="cuda", dtype=dtype)
    f = lambda x, w: torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)
    jf = thunder.jit(f)
    got = torch.autograd.grad(jf(x, w), (x, w), g)
    ref = torch.autograd.grad(f(x.double(), w.double()), (x, w), g.double())
    tol = {"atol": 1e-3, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    for a, r in zip(got, ref):
        torch.testing.assert_close(a.double(), r.double(), **tol)
    names = [n for n in thunder.last_backward_traces(jf)[-1].bound_symbol_names if n != "del"]
    assert sum(n.startswith("cudaFusion") for n in names) == 1, names


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_backward_converts_its_weight_gradient_in_the_kernel(dtype):
    # The weight's gradient is a column sum converted back to the weight's dtype after the sum
    # (the autodiff converts after summing, as eager rounds once): the conversion is the sum's
    # epilogue in the same kernel, not a second kernel and an ATen conversion.
    x = torch.randn(64, 256, dtype=dtype, requires_grad=True)
    w = torch.randn(256, dtype=dtype, requires_grad=True)
    g = torch.randn(64, 256, dtype=dtype)
    f = lambda x, w: torch.nn.functional.rms_norm(x, (256,), w, 1e-6)
    jf = thunder.jit(f, executors=["fuser"])
    got = torch.autograd.grad(jf(x, w), (x, w), g)
    ref = torch.autograd.grad(f(x.double(), w.double()), (x, w), g.double())
    tol = {"atol": 1e-3, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    for a, r in zip(got, ref):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), r.double(), **tol)
    names = [n for n in thunder.last_backward_traces(jf)[-1].bound_symbol_names if n != "del"]
    assert names == ["cpuFusion0"] or (len(names) == 1 and names[0].endswith("Fusion0")), names


def test_a_view_used_only_outside_is_no_kernel_input():
    # The reshape of w_flat is fusible and falls in the norm's run, but only the linear outside
    # reads it: it stays a view outside, and the kernel neither reads w_flat nor waits for it (a
    # sharded parameter's all-gather wait would otherwise come before the norm's kernel).
    def f(x, w_flat, b, g, bb):
        y = torch.nn.functional.layer_norm(x + 1, (32,), g, bb)
        return torch.nn.functional.linear(y, w_flat.reshape(96, 32), b)

    args = (torch.randn(2, 16, 32), torch.randn(96 * 32), torch.randn(96), torch.randn(32), torch.randn(32))
    jf = thunder.jit(f, executors=["fuser"])
    torch.testing.assert_close(jf(*args), f(*args))
    trace = str(thunder.last_traces(jf)[-1])
    calls = re.findall(r"^  \[\w+\] = \w+Fusion0\(([^)]*)\)", trace, re.M)
    assert len(calls) == 1, trace
    assert calls[0].split(", ") == ["t_0", "t_3", "t_4"], trace


def test_fused_where_of_two_numbers():
    # The predicate is where's only tensor: the numbers are of the output's dtype, not bool.
    f = lambda x: torch.where(x == 0, 0.0, -5.0) + torch.where(x > 0, x, -math.inf)
    x = torch.tensor([-1.0, 0.0, 2.0])
    torch.testing.assert_close(thunder.jit(f, executors=["fuser"])(x), f(x))


def test_backward_kernels_recompute_float32_values_instead_of_reading_them():
    # A bf16 SwiGLU MLP: the backward's SiLU-gradient kernel recomputes sigmoid(x.float()) and the
    # other float32 values from the bf16 matmul outputs it reads anyway; no kernel writes a
    # float32 intermediate for another kernel to read.
    import re

    torch.manual_seed(0)
    x = torch.randn(4, 8, 32, dtype=torch.bfloat16, requires_grad=True)
    w1, w2, w3 = (torch.randn(64, 32, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def mlp(x, w1, w2, w3):
        h = torch.nn.functional.silu(torch.nn.functional.linear(x, w1)) * torch.nn.functional.linear(x, w2)
        return torch.nn.functional.linear(h, w3.t())

    jf = thunder.jit(mlp, executors=["fuser"])
    g = torch.randn(4, 8, 32, dtype=torch.bfloat16)
    got = torch.autograd.grad(jf(x, w1, w2, w3), (x, w1, w2, w3), g)
    want = torch.autograd.grad(mlp(x, w1, w2, w3), (x, w1, w2, w3), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=5e-2, rtol=5e-2)
    src = str(thunder.last_backward_traces(jf)[-1])
    dtypes = dict(re.findall(r'# (t\w+): "cpu (\w+)\[', src))
    fusion_outputs, fusion_inputs = set(), set()
    for outs, args in re.findall(r"^  \[([^\]]*)\] = cpuFusion\d+\(([^)]*)\)", src, re.M):
        fusion_outputs.update(o.strip() for o in outs.split(","))
        fusion_inputs.update(a.strip() for a in args.split(","))
    passed = {t for t in fusion_outputs & fusion_inputs if dtypes.get(t) == "f32"}
    assert not passed, (passed, src)


@cuda
@pytest.mark.parametrize("T", [16, 2048])
def test_cuda_rope_gqa_matches_eager(T):
    # The many-input RoPE kernels (one row per thread) against eager, forward and backward.
    torch.manual_seed(0)
    qkv = torch.randn(2, T, 2 * 6 * 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cos, sin = (torch.randn(T, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    grads = [torch.randn(2, 8, T, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    fn = lambda *a: _rope_gqa(*a, T=T)  # noqa: E731
    jf = thunder.jit(fn)
    outs = jf(qkv, cos, sin)
    torch.autograd.backward(outs, grads)
    got = qkv.grad
    qkv.grad = None
    expected = fn(qkv, cos, sin)
    torch.autograd.backward(expected, grads)
    # The kernels compute in float32 and round once where eager rounds after each op: each element
    # as close to a float64 run as eager's. The backward keeps the rounding of the products that go
    # through the rotation's cat and drops the others: as a whole at least as close as eager's.
    x64 = qkv.detach().double().requires_grad_()
    ref = fn(x64, cos.double(), sin.double())
    torch.autograd.backward(ref, [g.double() for g in grads])
    assert_as_close_as_eager(outs, expected, ref, what="forward")
    assert_as_accurate_as_eager(got, qkv.grad, x64.grad, what="backward")
    assert any(n.startswith("cudaFusion") for n in thunder.last_backward_traces(jf)[-1].bound_symbol_names)


# ---- regions merged across calls that do not depend on each other ----------------------------


def _swiglu_like(a, b, W, x, W2):
    # The product a matmul reads (the SwiGLU product a weight gradient needs) and, after another
    # matmul, math over the same inputs: one kernel reads a and b once.
    h = torch.nn.functional.silu(a) * b
    m = h @ W
    g = x @ W2
    return m, torch.sigmoid(a) * g + b


def _norm_like(x, r, w, d1, d2):
    # Normalized rows stored as the [tokens, width] matrix a matmul reads, and a row reduction over
    # the same inputs: the row kernel stores the first output with its outer dims merged.
    n = x * r * w
    m = n.reshape(-1, x.shape[-1]).t() @ d1
    s = (x * d2).sum(-1, keepdim=True)
    return m, x * s + n * d2


def _dependent(a, b, W):
    # The second region needs the matmul of the first one's output: no merge.
    h = torch.tanh(a) * b
    m = h @ W
    return (a * m).exp() + b


MERGE_CASES = [
    ("swiglu", _swiglu_like, [(64, 32), (64, 32), (32, 16), (64, 8), (8, 32)], 1),
    ("norm_rows", _norm_like, [(2, 8, 32), (2, 8, 1), (32,), (16, 32), (2, 8, 32)], 1),
    ("dependent", _dependent, [(16, 16), (16, 16), (16, 16)], 2),
]


@pytest.mark.parametrize("name,fn,shapes,fusions", MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_independent_regions_over_the_same_rows_merge(name, fn, shapes, fusions):
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=torch.float64) for s in shapes]
    jf = _check(fn, *args, fusions=fusions)
    # The merged kernel runs where the second region was; the matmul reading the first region's
    # output moves after it.
    names = [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n != "del"]
    if fusions == 1:
        assert names.index("cpuFusion0") < max(i for i, n in enumerate(names) if "matmul" in n), names


def test_merged_regions_train_like_eager():
    # The SwiGLU MLP's backward: the product's recomputation and the activations' gradients share
    # one kernel; gradients match eager's.
    torch.manual_seed(0)
    fc1, fc2, proj = (torch.nn.Linear(16, 48, bias=False), torch.nn.Linear(16, 48, bias=False),
                      torch.nn.Linear(48, 16, bias=False))

    def mlp(x):
        return proj(torch.nn.functional.silu(fc1(x)) * fc2(x))

    x = torch.randn(4, 8, 16, requires_grad=True)
    jf = thunder.jit(mlp, executors=["fuser"])
    out = jf(x)
    grads = torch.autograd.grad(out.sum(), [x, fc1.weight, fc2.weight, proj.weight])
    ref = torch.autograd.grad(mlp(x).sum(), [x, fc1.weight, fc2.weight, proj.weight])
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)
    bw = [n for n in thunder.last_backward_traces(jf)[-1].bound_symbol_names if n.startswith("cpuFusion")]
    assert len(bw) == 1, bw


def test_llama_backward_keeps_each_layers_rope_in_one_kernel():
    # Common subexpression elimination leaves the rotary tables' slices and float32 conversions
    # repeated, one per use: made one value for every layer, the first layer's RoPE backward had
    # to store that [T, hs] value (not its iteration shape: not fusible), and the region fell
    # apart into unfused narrow/sum/cat calls.
    from models import llama

    torch.manual_seed(0)
    cfg = llama.Config(block_size=64, vocab_size=128, n_layer=2, n_head=4, n_query_groups=2, n_embd=64,
                       intermediate_size=96)
    model = llama.GPT(cfg).to(torch.bfloat16)
    idx = torch.randint(0, cfg.vocab_size, (2, 32))
    jf = thunder.jit(model, executors=["fuser"])
    jf(idx).float().square().mean().backward()
    bw = thunder.last_backward_traces(jf)[-1]
    unfused = [n for n in bw.bound_symbol_names if n in ("torch.cat", "torch.narrow", "torch.sum")]
    assert not unfused, str(bw)
    assert sum(n.startswith("cpuFusion") for n in bw.bound_symbol_names) == 13, str(bw)


def _gelu_tanh_residual(x, r):
    # GPT-2's NewGELUActivation as transformers writes it (eight bf16 ops), then a residual add
    return r + 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@cuda
def test_cuda_chains_of_bf16_ops_compute_in_float32(monkeypatch):
    # On CUDA a chain of bfloat16 ops computes in float32 and rounds once where it stores: the
    # kernel holds no intermediate rounding, its values and gradients are as close to a float64
    # run as eager's, element by element. Ops whose result jumps (floor, comparisons) still read
    # eager's rounded values, and THUNDER_FUSER_FLOAT32_CHAINS=0 rounds every step as eager does.
    torch.manual_seed(0)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16) * 3
    r = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    xs = [t.clone().requires_grad_() for t in (x, r)]
    xe = [t.clone().requires_grad_() for t in (x, r)]
    x64 = [t.double().requires_grad_() for t in (x, r)]
    jf = thunder.jit(_gelu_tanh_residual)
    got, eager, ref = jf(*xs), _gelu_tanh_residual(*xe), _gelu_tanh_residual(*x64)
    assert_as_close_as_eager(got, eager, ref, what="forward")
    assert len(thunder.last_fusion_sources(jf)) == 1 and _rounds(jf) == 0, thunder.last_fusion_sources(jf)
    g = torch.randn_like(x)
    assert_as_close_as_eager(torch.autograd.grad(got, xs, g), torch.autograd.grad(eager, xe, g),
                             torch.autograd.grad(ref, x64, g.double()), what="backward")
    # floor reads the rounded product, as eager's floor does: equal bit for bit.
    f = lambda a: torch.floor(a * 3.3) + a  # noqa: E731
    assert torch.equal(thunder.jit(f)(x), f(x))
    monkeypatch.setenv("THUNDER_FUSER_FLOAT32_CHAINS", "0")
    je = thunder.jit(_gelu_tanh_residual)
    out = je(x, r)
    assert _rounds(je) > 0
    # Rounded after each op as eager rounds: equal to eager's but for CUDA's transcendentals, which
    # differ from ATen's in the last place (a unit of bf16 at the largest intermediate values).
    eager = _gelu_tanh_residual(x, r)
    torch.testing.assert_close(out, eager, atol=2 ** -7 * eager.abs().max().item(), rtol=0)


def _explicit_casts(x):
    # Roundings the program asks for, inside a float32 chain: kept where chains compute in float32.
    return (x * 3.3).to(torch.bfloat16).float().exp() + x.bfloat16().float().sin()


def _rounds(jf):
    # Uses of the rounding helper in the generated kernels (its definition aside).
    return sum(s.count("thunder_round_bf16(") - s.count("float thunder_round_bf16(")
               for s in thunder.last_fusion_sources(jf).values())


def test_float32_chains_skip_the_roundings_inside_ops_and_keep_the_casts_asked_for(monkeypatch):
    # The CUDA rule (THUNDER_FUSER_FLOAT32_CHAINS=1 applies it to CPU kernels): a chain of bf16 ops
    # computes in float32 and rounds where it stores, as close to float64 as eager, forward and
    # backward; `x.to(torch.bfloat16)` and `x.bfloat16()` still round (the same kernel and values
    # as with eager's rounding everywhere); floor reads the rounded product, as eager's does.
    torch.manual_seed(0)
    x = torch.randn(64, 256, dtype=torch.bfloat16) * 3
    r = torch.randn(64, 256, dtype=torch.bfloat16)
    xf = torch.randn(1000) * 3
    floor = lambda a: torch.floor(a * 3.3) + a  # noqa: E731
    got = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("THUNDER_FUSER_FLOAT32_CHAINS", mode)
        jg = thunder.jit(_gelu_tanh_residual, executors=["fuser"])
        xs = [t.clone().requires_grad_() for t in (x, r)]
        y = jg(*xs)
        g = torch.autograd.grad(y, xs, torch.ones_like(y))
        je, jfl = thunder.jit(_explicit_casts, executors=["fuser"]), thunder.jit(floor, executors=["fuser"])
        got[mode] = dict(gelu=(y, g, _rounds(jg)), casts=(je(xf), thunder.last_fusion_sources(je)), floor=jfl(x))
    assert got["0"]["gelu"][2] > 0 and got["1"]["gelu"][2] == 0, (got["0"]["gelu"][2], got["1"]["gelu"][2])
    xe = [t.clone().requires_grad_() for t in (x, r)]
    x64 = [t.double().requires_grad_() for t in (x, r)]
    eager, ref = _gelu_tanh_residual(*xe), _gelu_tanh_residual(*x64)
    y, g, _ = got["1"]["gelu"]
    assert_as_close_as_eager(y, eager, ref, what="forward")
    assert_as_close_as_eager(g, torch.autograd.grad(eager, xe, torch.ones_like(eager)),
                             torch.autograd.grad(ref, x64, torch.ones_like(ref)), what="backward")
    assert torch.equal(got["0"]["casts"][0], got["1"]["casts"][0])
    assert got["0"]["casts"][1] == got["1"]["casts"][1]
    assert torch.equal(got["0"]["floor"], got["1"]["floor"])


def _scale_shift(x, w, b):
    # A weight and a bias along the rows: their gradients are column sums of a row kernel.
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b) * 2.0


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("rows,L", [(1, 64), (7, 768), (300, 96), (4096, 768), (8192, 3072), (33000, 256)])
def test_cuda_column_sums_finish_in_the_kernel(rows, L, dtype, monkeypatch):
    # With THUNDER_FUSER_KERNEL_COLUMN_SUMS=1 a row kernel's column sums (a LayerNorm's weight and
    # bias gradients) end in the kernel: the last block of each group adds its group's partial
    # rows, the last group the groups' (no ATen sum or conversion after it). As close to float64
    # as eager's, the same bits at every run, and right on a second stream too (which leaves the
    # partial rows to ATen), and close to the default (ATen's sum of the partial rows).
    monkeypatch.setenv("THUNDER_FUSER_KERNEL_COLUMN_SUMS", "1")
    torch.manual_seed(rows)
    x = torch.randn(rows, L, device="cuda", dtype=dtype)
    w, b = (torch.randn(L, device="cuda", dtype=dtype) for _ in range(2))
    g = torch.randn(rows, L, device="cuda", dtype=dtype)
    jf = thunder.jit(_scale_shift)

    def grads(f, *args):
        args = [a.detach().clone().requires_grad_() for a in args]
        return torch.autograd.grad(f(*args), args, g.to(args[0].dtype))

    got = grads(jf, x, w, b)
    eager = grads(_scale_shift, x, w, b)
    ref = grads(_scale_shift, x.double(), w.double(), b.double())
    assert_as_accurate_as_eager(got[1:], eager[1:], ref[1:], what="weight and bias gradients")
    assert_as_accurate_as_eager(got[0], eager[0], ref[0], what="input gradient")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        again = grads(jf, x, w, b)
        torch.cuda.synchronize()
    for a, c in zip(got, again):
        assert torch.equal(a, c)
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    # No ATen reduction or conversion after the kernel (the inputs' clones aside, a small trace
    # may run a pointwise op in ATen).
    assert any(k.startswith("cudaFusion") for k in kernels), kernels
    assert not [k for k in kernels if "reduce" in k or "Sum" in k or "copy" in k], kernels
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        other = grads(jf, x, w, b)
    torch.cuda.current_stream().wait_stream(side)

    def close_to(other):
        # The same partial rows added in another order (ATen's sum of them on a second stream or
        # by default): float32 sums of up to 33000 rows differ by a few units of their largest
        # value's last place (6.1e-5 at 33000 x 256 on the H200).
        for a, c in zip(got, other):
            torch.testing.assert_close(a, c, rtol=1e-5 if dtype == torch.float32 else 1e-2,
                                       atol=1e-6 * c.abs().max().item() if dtype == torch.float32 else 1e-5)

    close_to(other)
    monkeypatch.delenv("THUNDER_FUSER_KERNEL_COLUMN_SUMS")
    close_to(grads(thunder.jit(_scale_shift), x, w, b))


_CUDA_INTO_SCRIPT = r"""
import torch, thunder, torch.nn.functional as F
from thunder import _C
from test_fuser import INTO_INPUT_CASES

conv = lambda x, w: torch.relu(F.conv2d(x, w, padding=1) * 2 + 1)  # noqa: E731
cases = list(INTO_INPUT_CASES) + [("conv_channels_last", conv, None, 1)]
for name, fn, shapes, into in cases:
    torch.manual_seed(0)
    if shapes is None:  # a bf16 convolution runs channels-last: its output is dense in NHWC order
        args = [torch.randn(2, 8, 6, 6, device="cuda", dtype=torch.bfloat16),
                torch.randn(8, 8, 3, 3, device="cuda", dtype=torch.bfloat16)]
    else:
        args = [torch.randn(s, device="cuda") for s in shapes]
    kept = [a.clone() for a in args]
    jf = thunder.jit(fn)
    with torch.no_grad():
        jf(*args)
        before = _C.fusion_stats()["outputs_into_inputs"]
        out = jf(*args)
        torch.cuda.synchronize()
        got = _C.fusion_stats()["outputs_into_inputs"] - before
        want = fn(*args)
    # Never into the caller's tensors, a returned value or one read later; into a dead one where
    # the CPU writes into one (the CUDA partition may fuse differently: at least one then).
    assert (got == 0) if into == 0 else (got >= 1), (name, got, into, str(thunder.last_traces(jf)[-1]))
    torch.testing.assert_close(out, want, rtol=2e-2 if name.startswith("conv") else 1e-4, atol=1e-2)
    for a, k in zip(args, kept):
        assert torch.equal(a, k), f"{name}: an input of the call was modified"
print("ok")
"""


@cuda
def test_cuda_kernel_output_into_dead_input():
    # By default (THUNDER_FUSER_CUDA_INPLACE is read once per process: a subprocess, with the
    # variable unset whatever the caller's environment says), CUDA pointwise kernels
    # write into a dead input as the CPU's do, a channels-last one included.
    env = {**{k: v for k, v in os.environ.items() if k != "THUNDER_FUSER_CUDA_INPLACE"},
           "PYTHONPATH": os.pathsep.join([str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _CUDA_INTO_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-4000:]


# Random compositions of continuous bf16 ops (transcendentals, arithmetic, max/min, casts the
# program asks for, a row sum), fused with the CUDA rule on CPU: as a whole at least as close to
# float64 as eager (a fuzz of 450 programs, floor and where included, flagged one: a floor at
# its boundary).
_CHAIN_UNARY = {
    "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "neg": torch.neg, "abs": torch.abs,
    "sin": torch.sin, "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu, "sqrt": lambda x: torch.sqrt(x.abs() + 0.5), "log": lambda x: torch.log(x.abs() + 0.5),
    "cast": lambda x: (x.float() * 1.5).to(x.dtype),
}
_CHAIN_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": lambda a, b: a / (b.abs() + 0.5),
    "maximum": torch.maximum, "minimum": torch.minimum,
}


def _random_chain(seed):
    import random

    rng = random.Random(seed)
    n_in = rng.randint(1, 3)
    steps = []
    for i in range(rng.randint(3, 9)):
        if rng.random() < 0.55:
            steps.append((_CHAIN_UNARY[rng.choice(sorted(_CHAIN_UNARY))], rng.randrange(n_in + i)))
        else:
            steps.append((_CHAIN_BINARY[rng.choice(sorted(_CHAIN_BINARY))], rng.randrange(n_in + i), rng.randrange(n_in + i)))
    reduce = rng.random() < 0.35

    def f(*xs):
        vals = list(xs)
        for op, *args in steps:
            vals.append(op(*(vals[a] for a in args)))
        return vals[-1].sum(-1) if reduce else vals[-1]

    return n_in, f


@pytest.mark.parametrize("seed", range(24))
def test_float32_chains_of_random_bf16_programs_are_as_accurate_as_eager(seed, monkeypatch):
    monkeypatch.setenv("THUNDER_FUSER_FLOAT32_CHAINS", "1")
    n_in, f = _random_chain(seed)
    g = torch.Generator().manual_seed(seed)
    xs = [(torch.randn(16, 64, generator=g) * 2).to(torch.bfloat16) for _ in range(n_in)]
    got = thunder.jit(f, executors=["fuser"])(*xs)
    assert_as_accurate_as_eager(got, f(*xs), f(*[x.double() for x in xs]), slack=1.5, what=f"program {seed}")


# Pieces of a concatenation read through a reshape that splits the input's dim (a roll after a
# reshape: Swin's backward rolls the gradient back): a piece's offset in the merged source dim was
# read as a range of one iteration dim, and the piece was never loaded (zeros where it belonged).
def _split_cat(x):
    y = x.reshape(2, 8, 8, 32) * 3
    return torch.cat([y[:, 6:], y[:, :6]], 1) * 2


def _split_roll(x):
    return torch.roll(x.reshape(2, 8, 8, 32), (2, -3), (1, 2)).sin()


def _split_pad(x):
    return torch.nn.functional.pad(x.reshape(2, 8, 8, 32)[:, 2:], (0, 0, 1, 1, 2, 0)).exp()


def _merge_cat(x):
    y = x.reshape(2, 64, 32) * 3
    return torch.cat([y[:, 40:], y[:, :40]], 1) * 2


SHIFTED_RESHAPES = [("split_cat", _split_cat, (2, 64, 32)), ("split_roll", _split_roll, (2, 64, 32)),
                    ("split_pad", _split_pad, (2, 64, 32)), ("merge_cat", _merge_cat, (2, 8, 8, 32))]


@pytest.mark.parametrize("name,fn,shape", SHIFTED_RESHAPES, ids=[c[0] for c in SHIFTED_RESHAPES])
def test_shifted_pieces_of_a_reshaped_input(name, fn, shape):
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    x = torch.randn(*shape, dtype=torch.float64, device=device, requires_grad=True)
    executors = ["fuser"] if device == "cpu" else None  # (the tests' default leaves the CPU fuser off)
    jf = thunder.jit(fn, executors=executors)
    y = jf(x)
    g = torch.randn_like(y)
    torch.testing.assert_close(y, fn(x))
    torch.testing.assert_close(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(fn(x), x, g)[0])
    with torch.no_grad():
        jf = thunder.jit(fn, executors=executors)
        torch.testing.assert_close(jf(x), fn(x))
    assert "Fusion0(" in str(thunder.last_traces(jf)[-1]), "the program is to run as one fused kernel"


# `contiguous` copies into a layout and keeps every value: inside a kernel it reads through (Swin's
# window reverse, a permute made contiguous and added to the residual, was a copy kernel and an
# add kernel). Where its result is used outside the kernel it stays eager's call, laid out as eager's.
def _window_reverse(x, shortcut):
    y = x.view(2, 2, 2, 4, 4, 8).permute(0, 1, 3, 2, 4, 5).contiguous().view(2, 8, 8, 8)
    return shortcut + y * 2


def _contiguous_kept(x, shortcut):
    y = x.reshape(2, 8, 8, 8).transpose(1, 2).contiguous()
    return y, (y + shortcut).exp()


def _computed_contiguous_kept(x, shortcut):
    # On CUDA the kernel iterates in its channels-last input's order: y is still stored row-major.
    y = (x * 2).contiguous()
    return y, y.sin() + shortcut


@pytest.mark.parametrize("fn", [_window_reverse, _contiguous_kept, _computed_contiguous_kept],
                         ids=["window_reverse", "contiguous_kept", "computed_contiguous_kept"])
def test_contiguous_reads_through(fn):
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    x = torch.randn(8, 4, 4, 8, dtype=torch.float64, device=device)
    if fn is _computed_contiguous_kept:
        x = x.reshape(2, 8, 8, 8).to(memory_format=torch.channels_last)
    x.requires_grad_()
    s = torch.randn(2, 8, 8, 8, dtype=torch.float64, device=device, requires_grad=True)
    executors = ["fuser"] if device == "cpu" else None
    jf = thunder.jit(fn, executors=executors)
    got, want = jf(x, s), fn(x, s)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    gs = [torch.randn_like(w) for w in want]
    torch.testing.assert_close(torch.autograd.grad(got, (x, s), gs), torch.autograd.grad(want, (x, s), gs))
    trace = str(thunder.last_traces(jf)[-1])
    assert "Fusion0(" in trace and "Fusion1(" not in trace, trace


# A channel gradient (the sum of an [N, C, H, W] value over (0, 2, 3): a conv's bias, a layer
# scale, an affine) is a column sum of the values iterated with C last: on CUDA, in traces with
# half-type convolutions (whose activations the runtime keeps channels-last), the kernel that
# computes the value sums it (ATen summed a tensor the kernel wrote, 20-40 us a call, 60 calls in a
# ConvNeXt-T step). The full-size outputs of such a kernel are stored in that order. Other sums
# over several dims stay ATen's.
def _conv_bias(x, gamma, bias):
    y = torch.nn.functional.conv2d(x, gamma.view(-1, 1, 1, 1), groups=x.shape[1])  # (a per-channel scale)
    return (y + bias.view(1, -1, 1, 1)).relu() * 2


def _layer_scale(x, gamma, bias):
    return (x * gamma.view(1, -1, 1, 1) + bias.view(1, -1, 1, 1)).relu() * 2


def _middle_dim(x, gamma, bias):
    return x.sin() * gamma.view(1, 1, -1, 1) + bias.view(1, 1, -1, 1)


def _three_dims(x, gamma, bias):
    return (x.flatten(2) * gamma.view(1, -1, 1)).exp() + bias.view(1, -1, 1)


CHANNEL_SUMS = [("conv_bias", _conv_bias, 1), ("layer_scale", _layer_scale, 1), ("middle_dim", _middle_dim, 2),
                ("three_dims", _three_dims, 1)]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name,fn,dim", CHANNEL_SUMS, ids=[c[0] for c in CHANNEL_SUMS])
def test_channel_gradients_are_column_sums(name, fn, dim, dtype, layout):
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    x = torch.randn(4, 24, 6, 10, device=device, dtype=dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    c = x.shape[dim]
    gamma = torch.randn(c, device=device, dtype=dtype, requires_grad=True)
    bias = torch.randn(c, device=device, dtype=dtype, requires_grad=True)
    x.requires_grad_()
    executors = ["fuser"] if device == "cpu" else None
    jf = thunder.jit(fn, executors=executors)
    out = jf(x, gamma, bias)
    ct = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, gamma, bias), ct)
    want = torch.autograd.grad(fn(x, gamma, bias), (x, gamma, bias), ct)
    ref = torch.autograd.grad(fn(x.double(), gamma.double(), bias.double()), (x, gamma, bias), ct.double())
    for g, w, r in zip(got, want, ref):
        assert g.shape == w.shape and g.dtype == w.dtype
        # As close to float64 as eager is (summation orders differ), within a rounding of the dtype.
        err, eager_err = (g.double() - r).abs().max().item(), (w.double() - r).abs().max().item()
        assert err <= 2 * eager_err + 8 * torch.finfo(dtype).eps * r.abs().max().item(), (err, eager_err)
    if device == "cuda":
        bwd = str(thunder.last_backward_traces(jf)[-1])
        # Only in traces whose activations are channels-last (half-type convolutions run so).
        fused = name == "conv_bias" and dtype == torch.bfloat16
        assert ("torch.sum(" not in bwd) == fused, bwd


# GroupNorm in inference: its decomposition (statistics over [N, G, C/G * H * W] rows, the
# normalization over [N, C, H, W]) is no one kernel, and the norm ran as a dozen ATen calls. The
# partition takes such a composite one level flatter: a row kernel of the statistics, a pointwise
# kernel of the normalization, affine and activation.
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_group_norm_runs_as_kernels(dtype, channels_last):
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(8, 32).to(device=device, dtype=dtype)
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    fn = lambda x: torch.nn.functional.silu(gn(x)) * 2  # noqa: E731
    x = torch.randn(2, 32, 12, 12, device=device, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    executors = ["fuser"] if device == "cpu" else None
    gn64 = copy.deepcopy(gn).double()
    with torch.no_grad():
        jf = thunder.jit(fn, executors=executors)
        ref = torch.nn.functional.silu(gn64(x.double())) * 2
        got, eager = jf(x), fn(x)
        assert got.dtype == eager.dtype and got.shape == eager.shape
        got, eager = got.double(), eager.double()
    # As --check holds models: at most twice eager's largest error from float64 (the decomposition
    # rounds the mean, the variance and the product apart; eager's kernel folds them into one
    # scale and shift: the same order of error, not the same roundings).
    assert (got - ref).abs().max() <= 2 * (eager - ref).abs().max() + 1e-7
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert sum("Fusion" in n for n in names) >= 2, names
    assert not [n for n in names if n in ("torch.mean", "torchex.var", "torch.rsqrt", "torch.sub")], names


def test_group_norm_training_widens_its_weight_in_the_kernels():
    # A bfloat16 GroupNorm's weight, shaped [1, C, 1, 1] and widened to float32, is read by the
    # normalization's kernel and by its backward's: reshaped and widened there as they load it, not
    # by two ATen calls of their own in each trace (a diffusion UNet's 61 norms a step).
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(4, 32).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    x = torch.randn(2, 32, 8, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
    fn = lambda x: torch.nn.functional.silu(gn(x))  # noqa: E731
    jf = thunder.jit(fn, executors=["fuser"] if device == "cpu" else None)
    g = torch.randn(2, 32, 8, 8, device=device, dtype=torch.bfloat16)
    jf(x).backward(g)
    got = [x.grad, gn.weight.grad, gn.bias.grad]
    x.grad = gn.weight.grad = gn.bias.grad = None
    fn(x).backward(g)
    for a, b in zip(got, [x.grad, gn.weight.grad, gn.bias.grad]):
        torch.testing.assert_close(a, b, rtol=3e-2, atol=3e-2)
    for trace in (thunder.last_traces(jf)[-1], thunder.last_backward_traces(jf)[-1]):
        widened = re.findall(r"^  \w+ = (?:torchex\.convert_element_type|Tensor\.to)\(.*float32.*\[1, 32, 1, 1\]", str(trace), re.M)
        assert not widened, str(trace)


def test_no_kernel_is_left_that_nothing_reads():
    # A kernel whose values the kernels after it all compute again for themselves (Mistral's
    # rotary embedding: the negated half of q, recomputed where it is concatenated) is read by
    # nothing and goes; it ran as a launch of its own per layer.
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.MistralConfig(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = T.MistralForCausalLM(cfg).to(torch.bfloat16).train()
    ids = torch.randint(1, 128, (2, 32))
    jm = thunder.jit(model, executors=["fuser"] if os.environ.get("THUNDER_TEST_DEVICE", "cpu") == "cpu" else None)
    jm(input_ids=ids, labels=ids).loss.backward()
    for trace in (thunder.last_traces(jm)[-1], thunder.last_backward_traces(jm)[-1]):
        dead = re.findall(r"^  \[[_, ]+\] = \w+\(.*", str(trace), re.M)
        assert not dead, dead


# Row kernels over rows split finer than a value's own shape (kernel_ir's split of a row kernel's
# leading dims): a residual sum over [B, H * W, C] and the norm of its [B, H, W, C] view (Swin's
# blocks) are one kernel, and so are a window reverse (a permuted read of windows), the residual
# and the norm after it. (name, fn, shapes, kernels in the forward)
def _residual_then_norm_of_view(x, y, w, b):
    B, L, C = x.shape
    t = x + y
    r = t.reshape(B, 4, L // 4, C)
    return r, torch.nn.functional.layer_norm(r, (C,), w, b)


def _norm_then_finer_view(x, w, b):
    # A norm over [B, L, C] whose result is stored as [B, 2, L // 2, C] (a split of its rows).
    B, L, C = x.shape
    n = torch.nn.functional.layer_norm(x * 2, (C,), w, b)
    return n.reshape(B, 2, L // 2, C) + 1


def _window_reverse_residual_norm(a, s, w, b):
    # a: windows [B * 4, 9, C] of a [B, 6, 6, C] map (3 x 3 windows); s: the shortcut.
    B, H, W, C = s.shape
    x = a.view(B, 2, 2, 3, 3, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
    y = s + x
    return y, torch.nn.functional.layer_norm(y.view(B, H * W, C), (C,), w, b)


SPLIT_ROWS = [
    ("residual_then_norm_of_view", _residual_then_norm_of_view, [(2, 12, 16), (2, 12, 16), (16,), (16,)]),
    ("norm_then_finer_view", _norm_then_finer_view, [(3, 10, 24), (24,), (24,)]),
    ("window_reverse_residual_norm", _window_reverse_residual_norm, [(8, 9, 16), (2, 6, 6, 16), (16,), (16,)]),
]


@pytest.mark.parametrize("name,fn,shapes", SPLIT_ROWS, ids=[c[0] for c in SPLIT_ROWS])
def test_rows_split_for_reshapes(name, fn, shapes):
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    _check(fn, *args, fusions=1)
    # Training, float64: values and gradients as eager's, and the forward still one kernel.
    args = [a.double().requires_grad_() for a in args]
    jf = thunder.jit(fn, executors=["fuser"])
    out, expected = jf(*args), fn(*args)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    out, expected = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    grads_out = [torch.randn_like(o) for o in expected]
    got = torch.autograd.grad(out, args, grads_out)
    want = torch.autograd.grad(expected, args, grads_out)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)
    forward = [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n.startswith("cpuFusion")]
    assert len(forward) == 1, str(thunder.last_traces(jf)[-1])


def test_a_roll_split_from_its_neighbours_is_a_kernel_of_its_own():
    # Swin's shifted block: the window reverse (a copy through a merge of dims), the roll back,
    # then drop_path's random draw between the roll and the residual add + LayerNorm. The roll
    # cannot join the copy (it cannot read through the merged dims) nor the norm's row kernel
    # (no guarded loads there); alone it was left to ATen's roll kernel.
    def f(x, s, w, b):
        y = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, 16, 16, 32)
        y = torch.roll(y, (3, 3), (1, 2))
        r = torch.rand(y.shape[0], 1, 1, 1)
        h = s + y * ((r < 0.9).to(y.dtype) / 0.9)
        return r, h, torch.nn.functional.layer_norm(h, (32,), w, b)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 4, 4, 4, 4, 32, generator=g)
    s = torch.randn(8, 16, 16, 32, generator=g)
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    jf = thunder.jit(f, executors=["fuser"])
    r, h, n = jf(x, s, w, b)
    y = torch.roll(x.permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, 16, 32), (3, 3), (1, 2))
    want = s + y * ((r < 0.9).to(y.dtype) / 0.9)
    torch.testing.assert_close(h, want)
    torch.testing.assert_close(n, torch.nn.functional.layer_norm(want, (32,), w, b))
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert not [c for c in names if "roll" in c], names


def _roll_norm(x, s, w, b):
    # Swin's shifted block: the roll back, the residual add and the next LayerNorm.
    h = s + torch.roll(x, (3, 3), (1, 2))
    return h, torch.nn.functional.layer_norm(h, (32,), w, b)


def _cat_norm(x, w, b):
    # A cat along a dim before the last, normalized along the last; a pad of that dim, a softmax.
    y = torch.cat([x[:, 5:], x[:, :5] * 2], 1)
    z = torch.nn.functional.pad(x, (0, 0, 1, 2))
    return torch.nn.functional.layer_norm(y, (32,), w, b), torch.softmax(z, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_row_kernels_read_cat_pieces_by_whole_rows(dtype):
    # A cat's (or a roll's) pieces along a dim before the last are whole rows: a row kernel reads
    # each row from the piece that holds it (the others read as zeros), forward and backward.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, 16, 32, generator=g).to(dtype).requires_grad_()
    s = torch.randn(4, 16, 16, 32, generator=g).to(dtype)
    w, b = (torch.randn(32, generator=g).to(dtype).requires_grad_() for _ in range(2))
    x3 = torch.randn(4, 12, 32, generator=g).to(dtype)
    for fn, args in ((_roll_norm, (x, s, w, b)), (_cat_norm, (x3, w, b))):
        jf = thunder.jit(fn, executors=["fuser"])
        got = jf(*args)
        want = fn(*args)
        ref = fn(*(a.double() for a in args))
        # (The CPU kernel's float32 LayerNorm, roll or not, lands 1.1-1.2x eager's error norm.)
        assert_as_accurate_as_eager(got, want, ref, slack=1.5, what=f"{fn.__name__} forward")
        names = thunder.last_traces(jf)[-1].bound_symbol_names
        assert not [n for n in names if "roll" in n or "cat" in n or "pad" in n], names
    # _roll_norm: one kernel forward; gradients against float64
    jf = thunder.jit(_roll_norm, executors=["fuser"])
    h, n = jf(x, s, w, b)
    assert [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n.startswith("cpuFusion")] == ["cpuFusion0"]
    gh, gn = torch.randn_like(h), torch.randn_like(n)
    got = torch.autograd.grad((h, n), (x, w, b), (gh, gn))
    want = torch.autograd.grad(_roll_norm(x, s, w, b), (x, w, b), (gh, gn))
    x64, w64, b64 = (a.detach().double().requires_grad_() for a in (x, w, b))
    ref = torch.autograd.grad(_roll_norm(x64, s.double(), w64, b64), (x64, w64, b64), (gh.double(), gn.double()))
    assert_as_accurate_as_eager(got, want, ref, slack=1.5, what="_roll_norm backward")


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
def test_row_kernels_reading_cat_pieces_compile_with_nvrtc():
    x = torch.randn(4, 16, 16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, dtype=torch.bfloat16)
    jf = thunder.jit(_roll_norm, executors=[])
    jf(x, x, w, w)
    sources = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda", variants=True)
    rows = [(e, src) for e, src in sources if "_r" in e]
    assert rows and any("for (int z = 0; z < VEC; ++z)" in src for _, src in rows)
    for entry, source in sources:
        assert _C.nvrtc_compile(source, "sm_90") > 0, entry


# A drop-path mask in a bf16 residual block (timm's Swin): the backward widens the saved [B, 1, 1]
# mask and expands it over [B, N, C] where it scales the residual branch's gradient. That
# conversion and broadcast join the norm-backward kernel that reads them; alone they ran as an ATen
# conversion and an expanded view the kernel read with stride 0 along its rows, which on CUDA kept
# the row kernel from wide loads.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_broadcast_mask_joins_the_kernel_that_reads_it(dtype):
    import torch.nn.functional as F

    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    B, H, W, C = 2, 2, 2, 64

    def block(x, keep, w, nw, nb):
        mask = (keep > 0.3).to(x.dtype) / 0.7
        h = x + (x @ w) * mask
        return F.layer_norm(h.view(B, H, W, C), (C,), nw, nb)

    torch.manual_seed(0)
    x = torch.randn(B, H * W, C, dtype=torch.float64, device=device)
    keep = torch.rand(B, 1, 1, device=device)
    w = torch.randn(C, C, dtype=torch.float64, device=device) / C**0.5
    nw, nb = torch.randn(C, dtype=torch.float64, device=device), torch.randn(C, dtype=torch.float64, device=device)
    g = torch.randn(B, H, W, C, dtype=torch.float64, device=device)

    def run(fn, dt):
        args = [t.to(dt).requires_grad_() for t in (x, w, nw, nb)]
        y = fn(args[0], keep, *args[1:])
        return [y, *torch.autograd.grad(y, args, g.to(dt))]

    executors = ["fuser"] if device == "cpu" else None
    jf = thunder.jit(block, executors=executors)
    got = run(jf, dtype)
    assert_as_accurate_as_eager(got, run(block, dtype), run(block, torch.float64), slack=1.5)
    bw = str(thunder.last_backward_traces(jf)[-1])
    assert "torchex.broadcast_in_dim" not in bw and "torchex.convert_element_type" not in bw, bw


def _f32_values_between_kernels(trace_text, min_numel):
    # The float32 tensors one fused kernel stores and another reads, of at least min_numel elements.
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    from benchmarks.profile_step import wide_handoffs

    return [t for t, _ in wide_handoffs(trace_text, min_numel)]


def _norm_mlp(x, nw, nb, w1, b1, w2, b2):
    # A transformer's MLP branch in bf16 (ViT, Swin): the backward recomputes the norm's output for
    # fc1's weight gradient, and the norm's backward reads the same statistics and weight.
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), nw, nb)
    return x + torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(h, w1, b1)), w2, b2)


def _rolled_windows(x, nw, nb, w):
    # Swin's shifted windows: the norm's output rolled and cut into 2 x 2 windows for a linear
    # layer. The backward puts the windows back and rolls the gradient back in one kernel (the norm
    # backward's row kernel cannot read through both), widening it to float32 for the norm.
    B, H, W, C = x.shape
    h = torch.roll(torch.nn.functional.layer_norm(x, (C,), nw, nb), (-1, -1), (1, 2))
    h = h.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, C)
    return h @ w


def _swin_blocks(x, keep, *p):
    # Two Swin-style blocks (window attention with a position bias, MLP, drop-path masks) over
    # [B, H * W, C] tokens in 2 x 2 windows.
    B, C, H, W, heads, ws = x.shape[0], x.shape[2], 4, 4, 2, 2

    def block(x, n1w, n1b, wqkv, bqkv, table, wp, bp, n2w, n2b, w1, b1, w2, b2):
        idx = torch.arange(ws**4, device=x.device) % table.shape[0]
        h = torch.nn.functional.layer_norm(x, (C,), n1w, n1b).view(B, H // ws, ws, W // ws, ws, C)
        h = h.permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        q, k, v = torch.nn.functional.linear(h, wqkv, bqkv).reshape(-1, ws * ws, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
        bias = table[idx].view(ws * ws, ws * ws, heads).permute(2, 0, 1).unsqueeze(0)
        a = ((q * 0.3) @ k.transpose(-2, -1) + bias).softmax(-1)
        o = torch.nn.functional.linear((a @ v).transpose(1, 2).reshape(-1, ws * ws, C), wp, bp)
        o = o.view(B, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H * W, C)
        mask = (keep > 0.3).to(x.dtype) / 0.7
        x = x + o * mask
        h = torch.nn.functional.layer_norm(x, (C,), n2w, n2b)
        return x + torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(h, w1, b1)), w2, b2) * mask

    return block(block(x, *p[:13]), *p[13:])


_SWIN_PARAMS = [(32,), (32,), (96, 32), (96,), (9, 2), (32, 32), (32,), (32,), (32,), (128, 32), (128,), (32, 128), (32,)]

# (name, fn, argument shapes, how many such values remain): backward kernels pass no float32 value
# of the activations' size to each other; a value a later kernel can compute from what it reads
# (through other kernels' pointwise math) is computed there, and a widened one is stored narrow and
# widened as it is read. Two Swin blocks still pass three (from six): a norm's input gradient that
# ATen's bias-gradient sum reads too, and the norm weight's product with it.
FLOAT32_HANDOFF_CASES = [
    ("norm_mlp", _norm_mlp, [(2, 24, 64), (64,), (64,), (128, 64), (128,), (64, 128), (64,)], 0),
    ("rolled_windows", _rolled_windows, [(2, 4, 4, 64), (64,), (64,), (64, 64)], 0),
    ("swin_blocks", _swin_blocks, [(2, 16, 32), (2, 1, 1)] + _SWIN_PARAMS * 2, 3),
]


@pytest.mark.parametrize("name,fn,shapes,remain", FLOAT32_HANDOFF_CASES, ids=[c[0] for c in FLOAT32_HANDOFF_CASES])
def test_backward_kernels_hand_over_no_float32_activations(name, fn, shapes, remain):
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    ref = [torch.randn(s, dtype=torch.float64, device=device) for s in shapes]
    g = torch.randn_like(fn(*ref))

    if name == "swin_blocks":
        ref[1] = torch.rand(shapes[1], device=device)  # the drop-path draw, not differentiated

    def run(f, dt):
        args = [t.to(dt).requires_grad_() if t.dtype == torch.float64 else t for t in ref]
        y = f(*args)
        diff = [a for a in args if a.requires_grad]
        return [y, *torch.autograd.grad(y, diff, g.to(dt))]

    executors = ["fuser"] if device == "cpu" else None
    jf = thunder.jit(fn, executors=executors)
    assert_as_accurate_as_eager(run(jf, torch.bfloat16), run(fn, torch.bfloat16), run(fn, torch.float64), slack=1.5)
    bw = str(thunder.last_backward_traces(jf)[-1])
    activation = math.prod(shapes[0]) // 2
    assert len(_f32_values_between_kernels(bw, activation)) <= remain, (_f32_values_between_kernels(bw, activation), bw)


def test_drop_path_mask_is_one_draw_and_one_kernel():
    # timm's DropPath: x.new_empty((B, 1, 1)).bernoulli_(keep), divided by keep. The draw is one
    # call; the comparison, conversion and division join a kernel; the new_empty it fills (read for
    # its shape only) is not made at all.
    keep = 0.8

    def drop_path(x):
        mask = x.new_empty((x.shape[0], 1, 1)).bernoulli_(keep)
        mask.div_(keep)
        return (x * mask).exp()

    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    torch.manual_seed(0)
    x = torch.rand(64, 3, 8, device=device) + 0.5
    executors = ["fuser"] if device == "cpu" else None
    jf = thunder.jit(drop_path, executors=executors)
    y = jf(x)
    names = [n for n in thunder.last_traces(jf)[-1].bound_symbol_names if n != "del"]
    assert names.count("torchex.uniform") == 1, names
    for op in ("torchex.full", "torch.lt", "torchex.lt", "torchex.convert_element_type", "torch.div"):
        assert op not in names, (op, names)
    # Each sample is kept whole (scaled by 1 / keep) or dropped whole, about `keep` of them kept.
    ratio = (y.log() / x).reshape(64, -1)
    kept = (ratio - 1 / keep).abs().amax(1) < 1e-4
    dropped = (y == 1).reshape(64, -1).all(1)
    assert bool((kept | dropped).all()), ratio
    assert 30 <= int(kept.sum()) <= 64


def _long_chain(x, y):
    for _ in range(250):
        x = torch.sin(x) * 0.9 + y
    return x


def test_long_cpu_kernels_are_plain_loops_that_compile_quickly():
    # GCC's time grows steeply with a simd loop's length: RWKV's fused backward (a 1,700-line
    # body) compiled for more than 5 minutes as four interleaved simd parts, 1.8 s as a plain
    # loop. Long bodies are neither interleaved nor forced to simd; short ones keep both (the
    # golden gelu_chain.cpp).
    x, y = torch.randn(4, 300), torch.randn(300)
    (_, source), = _sources(_long_chain, (x, y), "cpp")
    assert "m3 = n + 3 * h" not in source and "#pragma omp simd" not in source
    assert "#define THUNDER_MATH static inline\n" in source  # (GCC chooses what to inline)
    (_, short), = _sources(_programs()["gelu_chain"][0], _programs()["gelu_chain"][1], "cpp")
    assert "m3 = n + 3 * h" in short and "#pragma omp simd" in short
    assert "#define THUNDER_MATH static inline\n" not in short
    # A short body with many math calls (RWKV: 24 exp calls, 61 s to compile interleaved, 3.8 s as
    # one simd loop): one simd loop
    (_, many), = _sources(_many_exps, (x, y), "cpp")
    assert "m3 = n + 3 * h" not in many and "#pragma omp simd" in many
    _check(_long_chain, x, y, atol=1e-5, rtol=1e-5)
    _check(_many_exps, x, y, atol=1e-5, rtol=1e-5)


def _many_exps(x, y):
    for _ in range(12):
        x = torch.exp(x * 0.1) - y
    return x
