"""Index remapping inside fused kernels: slices, pads, cats, permutes and reshapes that merge or split
dims are read by the kernel (csrc/codegen/kernel_ir.h, KInput) instead of materialized by ATen.

Each program is checked against eager (forward and gradients, several dtypes, contiguous and strided
inputs), and the final trace must show the index ops inside the fusion, not as ATen calls."""

import os
import re

import pytest
import torch

import thunder
from thunder import _C


def rope(x, cos, sin):  # Llama's rotate-half
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin


def qkv_rope(qkv, cos, sin):  # a fused qkv projection split, permuted, grouped, then RoPE
    B, T, _ = qkv.shape
    qkv = qkv.view(B, T, 2, 6, 8).permute(0, 2, 3, 1, 4)
    q, k, v = qkv.split((4, 1, 1), dim=2)
    k = k.expand(B, 2, 4, T, 8)
    q, k = q.reshape(B, -1, T, 8), k.reshape(B, -1, T, 8)
    return rope(q, cos, sin), rope(k, cos, sin)


def pad_exp(x):
    return torch.nn.functional.pad(x.exp(), (1, 2, 0, 3), value=-1.5) * 2


def crop_pad(x):  # negative pads crop
    return torch.nn.functional.pad(x.sin(), (-1, 2, 1, -2)) + 1


def cat_perm(a, b):
    return torch.cat([a.permute(0, 2, 1).exp(), b], 1) * 2


def cat_three(a, b, c):  # an empty piece and a length-1 piece
    return torch.cat([a.tanh(), b * 3, c.sigmoid()], -1) - 1


def slice_mul(x):
    return x[:, 2:7] * x[:, 1:6] + x[:, :5].cos()


def merge_split(x):  # a merge of dims, then a split into others
    y = (x * 2).reshape(x.shape[0], -1)
    return y.exp().reshape(x.shape[0], 4, -1) + 1


def transpose_add(x, y):
    return x.transpose(0, 1).sin() + y


def cat_rows(a, b, c):  # pieces along the first dim, each with its own math
    return torch.cat([a.exp(), b * 3, -c], 0) + 1


def pad_rows(x):  # zeros above and below, inside a row
    return torch.nn.functional.pad(x.sigmoid(), (8, 0, 3, 5)) * 2


PROGRAMS = {
    "rope": (rope, lambda dt: (torch.randn(2, 3, 5, 16, dtype=dt), torch.randn(5, 16, dtype=dt), torch.randn(5, 16, dtype=dt))),
    "qkv_rope": (qkv_rope, lambda dt: (torch.randn(2, 5, 96, dtype=dt), torch.randn(5, 8, dtype=dt), torch.randn(5, 8, dtype=dt))),
    "pad_exp": (pad_exp, lambda dt: (torch.randn(5, 7, dtype=dt),)),
    "crop_pad": (crop_pad, lambda dt: (torch.randn(6, 5, dtype=dt),)),
    "cat_perm": (cat_perm, lambda dt: (torch.randn(2, 8, 3, dtype=dt), torch.randn(2, 5, 8, dtype=dt))),
    "cat_three": (cat_three, lambda dt: (torch.randn(4, 6, dtype=dt), torch.randn(4, 0, dtype=dt), torch.randn(4, 1, dtype=dt))),
    "slice_mul": (slice_mul, lambda dt: (torch.randn(3, 8, dtype=dt),)),
    "merge_split": (merge_split, lambda dt: (torch.randn(3, 4, 6, dtype=dt),)),
    "transpose_add": (transpose_add, lambda dt: (torch.randn(6, 4, dtype=dt), torch.randn(4, 6, dtype=dt))),
    # Large enough for the CUDA kernels' tiled form (eight elements per access), whose code is
    # specialized per block of rows (a cat's pieces, a pad's inside along the first dims).
    "qkv_rope_large": (qkv_rope, lambda dt: (torch.randn(4, 128, 96, dtype=dt), torch.randn(128, 8, dtype=dt),
                                             torch.randn(128, 8, dtype=dt))),
    "cat_rows": (cat_rows, lambda dt: (torch.randn(300, 512, dtype=dt), torch.randn(1, 512, dtype=dt),
                                       torch.randn(211, 512, dtype=dt))),
    "pad_rows": (pad_rows, lambda dt: (torch.randn(250, 1016, dtype=dt),)),
}

# THUNDER_TEST_DEVICE=cuda runs the programs on the GPU (the CUDA kernels' guarded and shifted loads).
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
FUSION = "cudaFusion" if DEVICE == "cuda" else "cpuFusion"

INDEX_OPS = ("torch.cat", "torch.nn.functional.pad", "torch.neg", "torch.reshape", "torchex.slice")


def _strided(t):
    # The same values in a tensor with gaps between its rows (not contiguous).
    if t.dim() == 0 or t.numel() == 0:
        return t
    big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype, device=t.device)
    big[..., 1:2 * t.shape[-1] + 1:2] = t
    return big[..., 1::2]


def _flat(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_forward_and_grad_match_eager(name, dtype, layout):
    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    args = tuple(a.to(DEVICE) for a in make(dtype))
    if layout == "strided":
        args = tuple(_strided(a) for a in args)
        assert any(not a.is_contiguous() for a in args if a.numel() > 1)
    args = tuple(a.detach().requires_grad_(a.is_floating_point()) for a in args)
    eager_args = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
    jf = thunder.jit(fn, executors=["fuser"])
    out, ref = _flat(jf(*args)), _flat(fn(*eager_args))
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    if dtype == torch.float32 and DEVICE == "cuda":  # CUDA's exp, sin, tanh are a few ulps from ATen's
        tol = dict(atol=1e-5, rtol=1e-5)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, **tol)
    cots = [torch.randn_like(r) for r in ref]
    torch.autograd.backward(out, cots)
    torch.autograd.backward(ref, cots)
    exact = None
    for i, (a, e) in enumerate(zip(args, eager_args)):
        if not a.requires_grad:
            continue
        try:
            torch.testing.assert_close(a.grad, e.grad, **tol)
        except AssertionError:
            if dtype != torch.bfloat16:
                raise
            # A bfloat16 gradient summed over many rows (RoPE's cos and sin) differs from eager's
            # by rounding where the terms cancel: judged against float32, thunder's largest and
            # mean errors may be at most twice eager's.
            if exact is None:
                a32 = tuple(x.detach().float().requires_grad_(x.requires_grad) for x in eager_args)
                torch.autograd.backward(_flat(fn(*a32)), [c.float() for c in cots])
                exact = [x.grad for x in a32]
            ours, theirs = (a.grad.float() - exact[i]).abs(), (e.grad.float() - exact[i]).abs()
            assert ours.max() <= 2 * theirs.max() + 1e-2 and ours.mean() <= 2 * theirs.mean() + 1e-3, (
                ours.max(), theirs.max(), ours.mean(), theirs.mean())
    # The index ops run inside the kernel.
    final = str(thunder.last_traces(jf)[-1])
    calls = [line.split("=", 1)[-1].strip() for line in final.splitlines() if not line.strip().startswith("#")]
    assert not [c for c in calls if c.startswith(INDEX_OPS)], final
    assert FUSION in final


def test_rope_is_one_kernel():
    fn, make = PROGRAMS["qkv_rope"]
    jf = thunder.jit(fn, executors=["fuser"])
    args = tuple(a.to(DEVICE) for a in make(torch.float32))
    out = jf(*args)
    for o, r in zip(out, fn(*args)):
        torch.testing.assert_close(o, r)
    final = thunder.last_traces(jf)[-1]
    fusions = [n for n in final.bound_symbol_names if n.startswith(FUSION)]
    assert len(fusions) == 1, str(final)
    # The kernel reads the projection itself: no copy of q or k, no cat, no neg.
    assert "torch.reshape" not in str(final) and "torch.cat" not in str(final), str(final)


def test_a_view_used_outside_stays_a_view():
    # x[:, 1:] is returned as well as used in the kernel: it is a view of the input computed
    # outside (no copy), and the kernel reads the input at an offset.
    def f(x):
        s = x[:, 1:]
        return s, s.exp() * 2
    x = torch.randn(4, 6, device=DEVICE)
    jf = thunder.jit(f, executors=["fuser"])
    s, y = jf(x)
    assert s.data_ptr() == x.data_ptr() + 4  # one float in
    torch.testing.assert_close(y, x[:, 1:].exp() * 2)


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cuda_variants_compile(name):
    fn, make = PROGRAMS[name]
    jf = thunder.jit(fn, executors=[])
    jf(*make(torch.float32))
    trace = thunder.last_traces(jf)[1]
    sources = _C.generate_fusion_sources(trace, "cuda", variants=True)
    assert sources
    for entry, source in sources:
        # CUDA indices may be unsigned: a range test never compares with a negative bound
        assert not re.search(r"(\bi\d+|\bcol|\(col \+ k\)) [<>]=? -\d", source), entry
        assert _C.nvrtc_compile(source, "sm_90") > 0, entry


@pytest.mark.parametrize("name,blocks", [("cat_rows", 3), ("pad_rows", 3)])
def test_cuda_kernel_specialized_per_block_of_rows(name, blocks):
    # Each block of rows has its own branch: its range tests are constants there and it loads
    # only the inputs it reads.
    fn, make = PROGRAMS[name]
    jf = thunder.jit(fn, executors=[])
    jf(*make(torch.float32))
    ((entry, source),) = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda")
    assert len(re.findall(r"// rows of block \d", source)) == blocks, source
    assert "const bool" not in source or re.search(r"const bool v\d+ = (true|false);", source), source
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(source, "sm_90") > 0, entry


@pytest.mark.parametrize("fn,shapes", [
    (lambda a, b: torch.cat([a.exp(), b.exp()], 0) * 2, [(0, 3), (0, 3)]),
    (lambda a, b: torch.cat([a.exp(), b.exp()], 1) * 2, [(0, 3), (0, 2)]),
    (lambda a, b: torch.nn.functional.pad(a.exp(), (1, 1)) + 1, [(0, 3), (1,)]),
    # slices to nothing, then a cat of them (fuzzer seed 30121: no piece was read)
    (lambda a, b: torch.cat([torch.isfinite(a)[1:][1:] & torch.isfinite(a)[2:], torch.isfinite(a)[2:]]), [(2, 3), (1,)]),
])
def test_empty_pieces(fn, shapes):
    args = [torch.randn(*s, device=DEVICE) for s in shapes]
    out = thunder.jit(fn, executors=["fuser"])(*args)
    torch.testing.assert_close(out, fn(*args))
