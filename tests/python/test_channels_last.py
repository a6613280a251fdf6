"""Channels-last on CUDA: half-type 2-D convolutions run in channels-last (cuDNN's tensor-core
kernels read NHWC), and the fuser's pointwise kernels iterate in their inputs' memory order, so
the layout holds from one convolution to the next without transposes. Values against eager
(outputs and gradients), and the layouts the kernels write. Skipped without a GPU."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CL = torch.channels_last


def _bias_relu(x, b):
    return torch.relu(x * 2 + b.view(1, -1, 1, 1))


def _two_outputs(x, y):
    s = x + y
    return s * 0.5, torch.sigmoid(s) * y


def _mixed(x, y):
    return torch.tanh(x) - y * 3


def _residual(x, y, s, t):
    return torch.relu(x * s.view(1, -1, 1, 1) + t.view(1, -1, 1, 1) + y)


def _inputs(shape, x_cl, y_cl, dtype, extra=0):
    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = torch.randn(shape, device="cuda", dtype=dtype)
    x = x.contiguous(memory_format=CL) if x_cl else x
    y = y.contiguous(memory_format=CL) if y_cl else y
    vecs = [torch.randn(shape[1], device="cuda", dtype=dtype) for _ in range(extra)]
    return x, y, vecs


def _cat_relu(x, y, b):
    # Inception's and DenseNet's block output: branches joined along the channels.
    return torch.cat([torch.relu(x + b.view(1, -1, 1, 1)), y * 2, x.sigmoid()], 1)


def _cat_unaligned(x, y):
    # Pieces of 3 channels: no piece starts on a vector boundary.
    return torch.cat([x[:, :3].exp(), y, x[:, 3:] - 1], 1)


def _pad_relu(x, y):
    return F.pad(torch.relu(x) + y, (1, 2, 0, 1))


CASES = [
    # name, fn, x channels-last, y channels-last, vectors, outputs channels-last
    ("bias_relu", lambda x, y, v: _bias_relu(x, v[0]), True, None, 1, True),
    ("two_outputs", lambda x, y, v: _two_outputs(x, y), True, True, 0, True),
    ("mixed_layouts", lambda x, y, v: _mixed(x, y), True, False, 0, None),
    ("contiguous_stays", lambda x, y, v: _mixed(x, y), False, False, 0, False),
    ("residual", lambda x, y, v: _residual(x, y, v[0], v[1]), True, True, 2, True),
    ("cat_channels", lambda x, y, v: _cat_relu(x, y, v[0]), True, True, 1, True),
    ("cat_unaligned", lambda x, y, v: _cat_unaligned(x, y), True, True, 0, True),
    ("cat_contiguous_stays", lambda x, y, v: _cat_relu(x, y, v[0]), False, False, 1, False),
    ("pad", lambda x, y, v: _pad_relu(x, y), True, True, 0, True),
]


@pytest.mark.parametrize("shape", [(4, 16, 7, 9), (1, 8, 1, 5), (2, 32, 1, 1)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn,x_cl,y_cl,extra,out_cl", CASES, ids=[c[0] for c in CASES])
def test_pointwise_kernels_follow_their_inputs_layout(name, fn, x_cl, y_cl, extra, out_cl, dtype, shape):
    x, y, vecs = _inputs(shape, x_cl, y_cl if y_cl is not None else False, dtype, extra)
    jf = thunder.jit(fn)
    actual, expected = jf(x, y, vecs), fn(x, y, vecs)
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    # bfloat16: the kernel computes in float32 and rounds once, eager rounds after every op.
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, **tol)
        assert a.shape == e.shape
        # (With dims of length 1 the fuser may iterate a smaller shape: the layout is its own.)
        if out_cl is True and 1 not in shape:
            assert a.is_contiguous(memory_format=CL), (name, a.stride())
        if out_cl is False:
            assert a.is_contiguous(), (name, a.stride())
    assert "cudaFusion" in str(thunder.last_traces(jf)[-1])


class _Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(y)) + x)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.blocks = nn.Sequential(_Block(32), nn.MaxPool2d(2), _Block(32))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class _Mixed(nn.Module):
    """An Inception block: four branches (1x1, 1x1 then 3x3, 3x3 twice, pooling then 1x1), each
    convolution with BatchNorm and ReLU, joined along the channels; the next block reads the cat
    in four places."""

    def __init__(self, c, w):
        super().__init__()

        def conv(i, o, k):
            return nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2, bias=False), nn.BatchNorm2d(o), nn.ReLU())

        self.b1 = conv(c, w, 1)
        self.b2 = nn.Sequential(conv(c, w, 1), conv(w, w, 3))
        self.b3 = nn.Sequential(conv(c, w, 1), conv(w, w, 3), conv(w, w, 3))
        self.b4 = nn.Sequential(nn.AvgPool2d(3, 1, 1), conv(c, w, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class _InceptionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.blocks = nn.Sequential(_Mixed(32, 8), _Mixed(32, 8), nn.MaxPool2d(2), _Mixed(32, 12))
        self.head = nn.Linear(48, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def _step(model, x, y, call=None):
    """One training step of `model` run through `call` (the jitted module, or the model)."""
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy((call or model)(x).float(), y)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().double() for n, p in model.named_parameters()}


@pytest.mark.parametrize("net", [_Net], ids=["residual"])
def test_cnn_training_in_channels_last_matches_eager_against_float64(net):
    # A bfloat16 CNN (stem, residual blocks with a depthwise conv, or Inception blocks whose
    # branches join in a channel cat; BatchNorm, pooling) trained by thunder (its convolutions in
    # channels-last) and by eager: thunder's loss, gradients and running statistics are as close
    # to a float64 run of the same model as eager's, within twice eager's error plus one bfloat16
    # step of the value's size.
    torch.manual_seed(0)
    ref = net().cuda().double()
    x64 = torch.randn(8, 3, 32, 32, device="cuda", dtype=torch.float64)
    y = torch.randint(0, 10, (8,), device="cuda")
    eager = copy.deepcopy(ref).to(torch.bfloat16)
    model = copy.deepcopy(ref).to(torch.bfloat16)
    tm = thunder.jit(model)
    x = x64.to(torch.bfloat16)
    l64, g64 = _step(ref, x64, y)
    le, ge = _step(eager, x, y)
    lt, gt = _step(model, x, y, tm)
    eps = torch.finfo(torch.bfloat16).eps

    def err(a, b):
        return (a.double() - b.double()).abs().max().item()

    assert err(lt, l64) <= 2 * err(le, l64) + eps * abs(l64.item()), (lt, le, l64)
    for n in g64:
        bound = 2 * err(ge[n], g64[n]) + eps * g64[n].abs().max().item()
        assert err(gt[n], g64[n]) <= bound, (n, err(gt[n], g64[n]), err(ge[n], g64[n]))
    for (n, b), be, b64 in zip(model.named_buffers(), eager.buffers(), ref.buffers()):
        if b.is_floating_point():
            assert err(b, b64) <= 2 * err(be, b64) + eps * b64.abs().max().item(), n
        else:
            assert torch.equal(b, be), n
    # Two more steps with an optimizer: the parameters stay with eager's.
    opt_t = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(2):
        _step(model, x, y, tm)
        opt_t.step()
        _step(eager, x, y)
        opt_e.step()
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, atol=5e-2, rtol=5e-2, msg=n)


def test_inception_blocks_in_channels_last_match_eager_against_float64():
    # Each block of the Inception net alone (its branches joined by a channel cat, a padded
    # average pool, 1x1 and 3x3 convolutions with BatchNorm), from the float64 net's activations,
    # in bfloat16 by thunder (channels-last) and by eager (row-major): output, input gradient and
    # parameter gradients against float64, norm-wise, within twice eager's error. Block by block,
    # because the whole net at initialization is chaotic in bfloat16 (eager's own gradient of the
    # stem is 40% off float64's, and any other rounding lands as far again); a wrong kernel (the
    # padded average pool's backward, pytorch/pytorch#188344) moves a block's gradient by its size.
    torch.manual_seed(0)
    net = _InceptionNet().cuda().double().train()
    blocks = [net.stem, *net.blocks]
    x = torch.randn(8, 3, 32, 32, device="cuda", dtype=torch.float64)
    eps = torch.finfo(torch.bfloat16).eps
    for i, block in enumerate(blocks):
        results = []
        for kind in ("eager", "thunder", "float64"):
            b = copy.deepcopy(block).to(torch.float64 if kind == "float64" else torch.bfloat16)
            xs = x.to(torch.float64 if kind == "float64" else torch.bfloat16).requires_grad_()
            out = (thunder.jit(b) if kind == "thunder" else b)(xs)
            g = torch.randn(out.shape, generator=torch.Generator().manual_seed(i)).to(out)
            grads = torch.autograd.grad(out, [xs, *b.parameters()], g)
            results.append([out.double(), *(t.double() for t in grads)])
        names = ["output", "grad of the input", *(n for n, _ in block.named_parameters())]
        for what, e, t, r in zip(names, *results):
            scale = r.norm().item()
            e_err, t_err = (e - r).norm().item(), (t - r).norm().item()
            assert t_err <= 2 * e_err + 4 * eps * scale, (i, what, t_err, e_err, scale)
        with torch.no_grad():
            x = block(x)


def test_first_convolution_gets_a_contiguous_input_and_the_weights_keep_their_layout():
    # The caller's tensors are converted for the kernels, never changed: the input stays as it
    # was, and the parameters' gradients have the parameters' layout (autograd's contract).
    torch.manual_seed(0)
    model = _Net().cuda().to(torch.bfloat16)
    tm = thunder.jit(model)
    x = torch.randn(4, 3, 16, 16, device="cuda", dtype=torch.bfloat16)
    before = x.clone()
    tm(x).float().sum().backward()
    assert torch.equal(x, before) and x.is_contiguous()
    for n, p in model.named_parameters():
        # (autograd's layout contract: strides agree on every dim longer than 1)
        same = all(g == s for g, s, d in zip(p.grad.stride(), p.stride(), p.shape) if d > 1)
        assert same, (n, p.grad.stride(), p.stride())


def test_results_have_eager_layouts():
    # A feature map thunder computed in channels-last is returned as eager returns it
    # (contiguous for an NCHW input), so that the caller's `.view(n, -1)` works as with eager.
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()).cuda().to(torch.bfloat16)
    x = torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.bfloat16)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            out = thunder.jit(conv)(x)
            assert out.is_contiguous(), out.stride()
            torch.testing.assert_close(out.view(2, -1), conv(x).view(2, -1), atol=2e-2, rtol=2e-2)
    # A channels-last input returned as it is stays the caller's tensor.
    y = x.contiguous(memory_format=CL)
    assert thunder.jit(lambda t: t)(y) is y or thunder.jit(lambda t: t)(y).data_ptr() == y.data_ptr()


class _GroupNormBlock(nn.Module):
    """A diffusion UNet's residual block: GroupNorm, SiLU, convolution, twice, and the skip."""

    def __init__(self, c, groups=4):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, c), nn.Conv2d(c, c, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(groups, c), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        y = self.conv1(F.silu(self.norm1(x)))
        return x + self.conv2(F.silu(self.norm2(y)))


class _GroupNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(4, 32, 3, padding=1)
        self.blocks = nn.Sequential(_GroupNormBlock(32), _GroupNormBlock(32))
        self.conv_out = nn.Conv2d(32, 4, 3, padding=1)

    def forward(self, x):
        return self.conv_out(F.silu(self.blocks(self.conv_in(x))))


def _calls(trace):
    return [line.split("=", 1)[-1].strip().split("(")[0] for line in str(trace).splitlines()
            if "convolution" in line and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_group_norm_networks_keep_their_layout(train):
    # GroupNorm groups channels with pixels by a reshape: a copy of a channels-last tensor and a
    # second one into the next convolution. Such traces call the convolutions as laid out (NCHW
    # here, cuDNN transposing inside the call); a BatchNorm network still runs channels-last.
    # Values against a float64 run of the same model, as close as eager's bfloat16 run is.
    torch.manual_seed(0)
    ref = _GroupNormNet().cuda().double()
    x64 = torch.randn(2, 4, 16, 16, device="cuda", dtype=torch.float64)
    eager = copy.deepcopy(ref).to(torch.bfloat16)
    model = copy.deepcopy(ref).to(torch.bfloat16)
    tm = thunder.jit(model)
    x = x64.to(torch.bfloat16)
    eps = torch.finfo(torch.bfloat16).eps

    def err(a, b):
        return (a.double() - b.double()).abs().max().item()

    with torch.set_grad_enabled(train):
        out64, oute, outt = ref(x64), eager(x), tm(x)
    assert err(outt, out64) <= 2 * err(oute, out64) + eps * out64.abs().max().item()
    assert outt.is_contiguous()
    fwd = _calls(thunder.last_traces(tm)[-1])
    assert fwd and all(c == "torchex.convolution_as_laid_out" for c in fwd), fwd
    if train:
        for m, o in ((ref, out64), (eager, oute), (model, outt)):
            (o.double() ** 2).mean().backward()
        for (n, p), pe, p64 in zip(model.named_parameters(), eager.parameters(), ref.parameters()):
            bound = 2 * err(pe.grad, p64.grad) + eps * p64.grad.abs().max().item()
            assert err(p.grad, p64.grad) <= bound, (n, err(p.grad, p64.grad), err(pe.grad, p64.grad))
        bwd = _calls(thunder.last_backward_traces(tm)[-1])
        assert bwd and all(c.endswith("_as_laid_out") for c in bwd), bwd
    # The BatchNorm network of the tests above: channels-last.
    bn = thunder.jit(_Net().cuda().to(torch.bfloat16))
    bn(torch.randn(2, 3, 16, 16, device="cuda", dtype=torch.bfloat16))
    assert all(c == "torchex.convolution" for c in _calls(thunder.last_traces(bn)[-1]))


# What follows a convolution in the models we run: pools, upsampling, normalizations, shuffles.
# Under thunder their input is channels-last where eager's is row-major, so ATen runs its NHWC
# kernels on them; CUDA's avg_pool2d backward for a channels-last input is wrong when the pool pads
# (pytorch/pytorch#188344, in torch 2.11), which is why padded pools take the row-major kernel.
AFTER_CONVOLUTIONS = {
    "avg3s1p1": lambda y: F.avg_pool2d(y, 3, 1, 1),  # Inception's branch pool: overlapping, padded
    "avg3s1p1_nopad": lambda y: F.avg_pool2d(y, 3, 1, 1, count_include_pad=False),
    "avg3s2": lambda y: F.avg_pool2d(y, 3, 2),
    "avg3s2p1_ceil": lambda y: F.avg_pool2d(y, 3, 2, 1, ceil_mode=True),
    "avg2s2": lambda y: F.avg_pool2d(y, 2, 2),  # DenseNet's transition: tiled
    "max3s1p1": lambda y: F.max_pool2d(y, 3, 1, 1),
    "max3s2p1": lambda y: F.max_pool2d(y, 3, 2, 1),  # ResNet's stem
    "max2s2_ceil": lambda y: F.max_pool2d(y, 2, 2, ceil_mode=True),
    "max3_dilated": lambda y: F.max_pool2d(y, 3, 1, 1, dilation=2),
    "adaptive_avg1": lambda y: F.adaptive_avg_pool2d(y, 1),
    "adaptive_avg3": lambda y: F.adaptive_avg_pool2d(y, 3),  # windows that overlap
    "adaptive_max3": lambda y: F.adaptive_max_pool2d(y, 3),
    "nearest2x": lambda y: F.interpolate(y, scale_factor=2, mode="nearest"),
    "nearest_size": lambda y: F.interpolate(y, size=(11, 13), mode="nearest-exact"),
    "bilinear2x": lambda y: F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False),
    "bilinear_corners": lambda y: F.interpolate(y, size=(13, 11), mode="bilinear", align_corners=True),
    "bicubic": lambda y: F.interpolate(y, scale_factor=1.5, mode="bicubic"),
    "bilinear_down": lambda y: F.interpolate(y, size=(5, 5), mode="bilinear", antialias=True),
    "pixel_shuffle": lambda y: F.pixel_shuffle(y, 2),
    "pixel_unshuffle": lambda y: F.pixel_unshuffle(y, 2),
    "batch_norm": lambda y: F.batch_norm(y, None, None, training=True),
    "group_norm": lambda y: F.group_norm(y, 4),
    "instance_norm": lambda y: F.instance_norm(y),
    "channel_softmax": lambda y: torch.softmax(y, 1),
    "flatten_linear_in": lambda y: y.flatten(1) * 2,
    "transpose_conv": lambda y: F.conv_transpose2d(y, torch.ones(16, 8, 2, 2, device=y.device, dtype=y.dtype) * 0.1, stride=2),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", list(AFTER_CONVOLUTIONS), ids=str)
def test_ops_after_channels_last_convolutions_have_eager_accuracy(op, dtype):
    # Output and both gradients against float64: thunder's error at most twice eager's, plus a
    # little of the dtype's rounding.
    after = AFTER_CONVOLUTIONS[op]
    torch.manual_seed(0)
    x = torch.randn(4, 16, 10, 10, device="cuda", dtype=dtype)
    w = torch.randn(16, 16, 3, 3, device="cuda", dtype=dtype) * 0.1

    def f(x, w):
        return after(F.conv2d(x, w, padding=1))

    results = []
    for fn, cast in ((f, dtype), (thunder.jit(f), dtype), (f, torch.float64)):
        xs, ws = x.to(cast).requires_grad_(), w.to(cast).requires_grad_()
        out = fn(xs, ws)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
        results.append([r.double() for r in (out, *torch.autograd.grad(out, (xs, ws), g))])
    # Norm-wise: a max pool whose window holds a near-tie may pick another element than float64
    # in either program, which moves one gradient element by its size and the norm by little.
    eps = torch.finfo(dtype).eps
    for what, e, t, x64 in zip(("output", "grad of x", "grad of w"), *results):
        scale = x64.norm().item()
        e_err, t_err = (e - x64).norm().item(), (t - x64).norm().item()
        assert t_err <= 2 * e_err + 4 * eps * scale, (op, what, t_err, e_err, scale)
