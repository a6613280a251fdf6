"""A convolution's bias as an addition in inference (transforms/conv_bias.h): ATen adds it in a
kernel of its own after cuDNN's; as an addition it joins the fused kernel that reads the
convolution (ConvNeXt's LayerNorm, an eval-mode BatchNorm). On CUDA by default;
THUNDER_CONV_BIAS_ADD=all applies it on CPU, which is how CI tests the rewrite."""

import pytest
import torch
import torch.nn.functional as F

import thunder
from precision import assert_as_accurate_as_eager


def _convnext_block(x, cw, cb, w, lb):
    # timm's ConvNeXt block up to its norm: a depthwise 7x7 convolution with a bias, the
    # channels moved last, LayerNorm.
    y = F.conv2d(x, cw, cb, padding=3, groups=x.shape[1])
    return F.layer_norm(y.permute(0, 2, 3, 1), (x.shape[1],), w, lb, 1e-6)


def _conv_bn_relu(x, cw, cb, mean, var, w, b):
    return torch.relu(F.batch_norm(F.conv2d(x, cw, cb, padding=1), mean, var, w, b, False, 0.1, 1e-5))


def _check(got, eager, ref, what):
    # float32 (CPU): the fused LayerNorm's sums differ from ATen's in the last bits. bfloat16
    # (CUDA): as close to float64 as eager's, as a whole (a LayerNorm's output near zero is the
    # difference of two numbers of the row's scale: an element's error is a unit of that scale).
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5, msg=what)
    else:
        assert_as_accurate_as_eager(got, eager, ref, what=what)


def _conv_relu(x, cw, cb):
    return torch.relu(F.conv2d(x, cw, cb, padding=1)) * 2


def _args(device, dtype, C=16):
    torch.manual_seed(0)
    x = torch.randn(2, C, 10, 10, device=device).to(dtype=dtype, memory_format=torch.channels_last)
    return x, [torch.randn(C, 1, 7, 7, device=device, dtype=dtype), torch.randn(C, device=device, dtype=dtype),
               torch.randn(C, device=device, dtype=dtype), torch.randn(C, device=device, dtype=dtype)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_convolution_bias_joins_the_kernel_that_reads_it(device, monkeypatch):
    # On CPU the fuser is named: conftest turns the CPU fuser off as a default (read once per process).
    kw = {} if device == "cuda" else {"executors": ["fuser"]}
    if device == "cpu":
        monkeypatch.setenv("THUNDER_CONV_BIAS_ADD", "all")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x, rest = _args(device, dtype)
    jf = thunder.jit(_convnext_block, **kw)
    with torch.no_grad():
        got = jf(x, *rest)
    eager = _convnext_block(x, *rest)
    ref = _convnext_block(x.double(), *[t.double() for t in rest])
    _check(got, eager, ref, "ConvNeXt block")
    text = str(thunder.last_traces(jf)[-1])
    conv = [line for line in text.splitlines() if "convolution(" in line and not line.lstrip().startswith("#")]
    assert len(conv) == 1 and ", None, " in conv[0], text
    fusion = "cudaFusion" if device == "cuda" else "cpuFusion"
    # The addition is inside the fused kernel, before the LayerNorm's sums.
    assert fusion in text and "prims.add(t" in text.split(fusion, 1)[1], text

    # Eval-mode BatchNorm after a biased convolution; an unbatched (3-d) input before a ReLU.
    C = 8
    cw = torch.randn(C, 3, 3, 3, device=device, dtype=dtype)
    stats = [torch.randn(C, device=device, dtype=dtype) for _ in range(5)]
    stats[2] = stats[2].abs() + 0.5
    cases = [(_conv_bn_relu, torch.randn(2, 3, 9, 9, device=device, dtype=dtype), stats),
             (_conv_relu, torch.randn(3, 9, 9, device=device, dtype=dtype), stats[:1])]
    for fn, xin, more in cases:
        jg = thunder.jit(fn, **kw)
        with torch.no_grad():
            got = jg(xin, cw, *more)
        eager = fn(xin, cw, *more)
        ref = fn(xin.double(), cw.double(), *[t.double() for t in more])
        _check(got, eager, ref, f"{fn.__name__} {tuple(xin.shape)}")
        assert ", None, " in str(thunder.last_traces(jg)[-1])


def test_training_keeps_the_bias_in_the_convolution(monkeypatch):
    # A training trace would reduce the bias gradient on its own and save the biased output:
    # the rewrite is for inference only.
    monkeypatch.setenv("THUNDER_CONV_BIAS_ADD", "all")
    x, rest = _args("cpu", torch.float32)
    rest = [t.requires_grad_() for t in rest]
    jf = thunder.jit(_convnext_block)
    out = jf(x, *rest)
    out.sum().backward()
    text = str(thunder.last_traces(jf)[-1])
    conv = [line for line in text.splitlines() if "convolution(" in line and not line.lstrip().startswith("#")]
    assert conv and all(", None, " not in c for c in conv), text
    got = [t.grad for t in rest]
    for t in rest:
        t.grad = None
    _convnext_block(x, *rest).sum().backward()
    for g, t in zip(got, rest):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-4)


def test_the_rewrite_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("THUNDER_CONV_BIAS_ADD", "0")
    x, rest = _args("cpu", torch.float32)
    jf = thunder.jit(_convnext_block)
    with torch.no_grad():
        jf(x, *rest)
    assert ", None, " not in str(thunder.last_traces(jf)[-1])
