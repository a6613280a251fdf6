"""FP8 tensors in the fuser's kernels: conversions to float8_e4m3fn and float8_e5m2 (and back) are
computed inside fused kernels, bit for bit as torch's `.to()` rounds (nearest even, e4m3fn
saturating at 448, e5m2 overflowing to inf, subnormals, NaN), from float32, bfloat16 and float16,
on the CPU fuser and on CUDA where present; a scaled cast fuses with the op that produces its
input. Other ops on FP8 tensors are not fused (eager computes none)."""

import pytest
import torch

import thunder
from thunder import _C

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _values(device):
    torch.manual_seed(0)
    x = torch.cat([torch.randn(20000) * s for s in (1e-4, 1e-2, 1.0, 30.0, 300.0, 3e4)])
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 448, 464, 465, 479.9, 480, 500,
                            57344, 61440, 61441, 65536, 2**-6, 2**-7, 2**-9, 2**-10, 1.5 * 2**-10, 2**-14, 2**-16,
                            2**-17, 1.0001 * 2**-17, 1e-30, 1e38])
    codes = torch.arange(256, dtype=torch.uint8)
    grids = []
    for dt in FP8:
        v = codes.view(dt).float()
        fin = v[torch.isfinite(v)].unique().sort().values.double()
        grids += [v, ((fin[1:] + fin[:-1]) / 2).float()]  # every value and every tie between neighbours
    x = torch.cat([x, special, *grids])
    return torch.cat([x, -x]).to(device)


def _same(got, want):
    """Bit-equal FP8 tensors, NaN's payload aside."""
    g, w = got.view(torch.uint8), want.view(torch.uint8)
    nan = got.float().isnan() & want.float().isnan()
    bad = (g != w) & ~nan
    return int(bad.sum())


def _fused(jf):
    return "Fusion" in str(thunder.last_traces(jf)[-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_conversion_to_fp8_is_torchs(fp8, src, device):
    x = _values(device).to(src)
    f = thunder.jit(lambda x: (x * 1).to(fp8), executors=["fuser"])
    got, want = f(x), (x * 1).to(fp8)
    assert got.dtype == fp8
    assert _same(got, want) == 0
    assert _fused(f)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dst", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_conversion_from_fp8_is_torchs(fp8, dst, device):
    x8 = torch.arange(256, dtype=torch.uint8, device=device).view(fp8)
    f = thunder.jit(lambda x8: x8.to(dst) * 2, executors=["fuser"])
    got, want = f(x8), x8.to(dst) * 2
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert _fused(f)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_scaled_cast_fuses_with_its_producer(fp8, device):
    # The delayed-scaling recipe's cast of an RMSNorm's output: scale, saturate, round, and each
    # row's amax of the unscaled values, in the kernel that normalizes (one fusion).
    torch.manual_seed(0)
    fp8_max = torch.finfo(fp8).max
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16) * 5
    w = torch.randn(256, device=device, dtype=torch.bfloat16)
    scale = torch.tensor(3.0, device=device)

    def f(x, w, scale):
        y = torch.nn.functional.rms_norm(x, (256,), w, 1e-6)
        y8 = (y.float() * scale).clamp(-fp8_max, fp8_max).to(fp8)
        return y8, y.float().abs().amax(-1)

    jf = thunder.jit(f, executors=["fuser"])
    (y8, amax), (r8, ramax) = jf(x, w, scale), f(x, w, scale)
    if device == "cpu":
        assert _same(y8, r8) == 0
        torch.testing.assert_close(amax, ramax, rtol=0, atol=0)
    else:
        # CUDA kernels compute RMSNorm's bfloat16 chain in float32 (kernel_ir.cpp, readUnrounded):
        # the cast reads y unrounded, so a value next to a rounding boundary of bfloat16 may land on
        # the neighbouring FP8 value, and the amax is the unrounded one.
        ulp = 2.0 ** -(3 if fp8 == torch.float8_e4m3fn else 2)
        tiny = torch.finfo(fp8).smallest_normal * ulp
        torch.testing.assert_close(y8.float(), r8.float(), rtol=ulp, atol=tiny)
        # (a bfloat16 ulp is 2**-5 of an e4m3 ulp: about that share of values may cross)
        assert _same(y8, r8) < 0.05 * y8.numel()
        torch.testing.assert_close(amax, ramax, rtol=2.0 ** -8, atol=0)
    assert str(thunder.last_traces(jf)[-1]).count("Fusion") == 1


@pytest.mark.parametrize("device", DEVICES)
def test_ops_on_fp8_tensors_are_not_fused(device):
    # Only conversions read or write FP8 in a kernel: a view of an FP8 tensor stays with ATen, and
    # the conversion after it is fused.
    x8 = torch.randn(4, 8, device=device).to(torch.float8_e4m3fn)
    f = thunder.jit(lambda x8: x8.t().float() + 1, executors=["fuser"])
    torch.testing.assert_close(f(x8), x8.t().float() + 1)


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_fp8_kernels_compile_with_nvrtc_in_every_variant(fp8):
    def f(x, s):
        return (x * s).clamp(-448, 448).to(fp8), x.abs().amax(-1), x.to(fp8).to(torch.bfloat16)

    jf = thunder.jit(f, executors=[])
    jf(torch.randn(8, 64), torch.tensor(2.0))
    sources = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda", variants=True)
    assert len(sources) >= 3
    for entry, source in sources:
        assert "thunder_float_to_" in source
        for arch in ("sm_80", "sm_90"):
            assert _C.nvrtc_compile(source, arch) > 0, (entry, arch)
