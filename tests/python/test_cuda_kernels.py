"""Thunder's own CUDA kernels outside the fuser, against ATen's: max pooling without indices (what
inference runs). Their sources compile with NVRTC on any machine; running them needs a GPU."""

import pytest
import torch

import thunder
from thunder import _C

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.skipif(not _C.nvrtc_available(), reason="libnvrtc is not installed (make setup installs it)")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_max_pool_source_compiles_with_nvrtc(dtype):
    src = _C.max_pool2d_cuda_source(dtype)
    for arch in ("sm_80", "sm_90"):
        assert _C.nvrtc_compile(src, arch) > 0, arch


def test_max_pool_source_names_the_dtypes_it_takes():
    with pytest.raises(ValueError, match="max_pool2d_cuda_source: expected float32, bfloat16 or float16, but got 'int32'"):
        _C.max_pool2d_cuda_source("int32")


# (shape, kernel_size, stride, padding, dilation, ceil_mode)
POOLS = [
    ((2, 16, 112, 112), 3, 2, 1, 1, False),  # ResNet's stem
    ((3, 5, 9, 7), 2, None, 0, 1, False),  # stride = kernel
    ((3, 5, 9, 7), 3, 2, 1, 1, True),  # ceil_mode: a last window that starts inside the input
    ((1, 8, 10, 11), (3, 2), (1, 2), (1, 0), (2, 1), False),  # per-dim windows, dilation
    ((4, 3, 5, 5), 5, 1, 2, 1, False),  # windows mostly padding
    ((0, 3, 6, 6), 2, 2, 0, 1, False),  # an empty batch
]


@cuda
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", POOLS, ids=lambda c: "x".join(map(str, c[0])) + f"_k{c[1]}_s{c[2]}_p{c[3]}_d{c[4]}_c{int(c[5])}")
def test_max_pool2d_inference_equals_aten(case, dtype, layout):
    # Bit for bit, NaN and -inf included, in the input's memory format; and the kernel that ran is
    # thunder's.
    shape, k, s, p, d, ceil = case
    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda").to(dtype)
    if x.numel():
        flat = x.view(-1)
        flat[:: 7] = float("nan")
        flat[3:: 11] = float("-inf")
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":
        x = torch.cat([x, x], dim=3)[..., ::2]

    def f(t):
        return torch.nn.functional.max_pool2d(t, k, s, p, d, ceil)

    jf = thunder.jit(f)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = jf(x)
        torch.cuda.synchronize()
    expected = f(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert got.is_contiguous(memory_format=torch.channels_last) == expected.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(0.0), expected.nan_to_num(0.0))
    kernels = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    if x.numel():
        assert any(n.startswith("thunder_max_pool2d") for n in kernels), kernels


@cuda
def test_max_pool2d_training_keeps_aten_indices():
    # With a gradient to compute, the pooling keeps ATen's kernel and its indices.
    x = torch.randn(2, 4, 9, 9, device="cuda", requires_grad=True)
    f = lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1)  # noqa: E731
    jf = thunder.jit(f)
    g = torch.randn(2, 4, 5, 5, device="cuda")
    (got,) = torch.autograd.grad(jf(x), x, g)
    (expected,) = torch.autograd.grad(f(x), x, g)
    torch.testing.assert_close(got, expected)
