"""Float32 parameter gradients of CNNs with BatchNorm in training mode, measured against a float64
referee: the same model, weights and input in float64, run by eager PyTorch.

The rule (test_bn_cnn_gradients_as_close_to_float64_as_eagers): for every parameter p whose true
gradient is not zero, with err(g) = max|g - g64| / max|g64| over p's elements,

    err(thunder) <= 4 * max(err(eager), median over parameters of err(eager)),

and the median over parameters of err(thunder) / err(eager) is at most 1.5. The median term is
eager's own float32 error level: a parameter where eager happens to land within an ulp or two of
float64 does not set a bar no float32 computation meets. Exempt are gradients that are zero in
exact arithmetic (max|g64| below 1e-6 of the model's largest), the bias of a BatchNorm followed,
through a 1x1 convolution, by another BatchNorm: both errors are rounding noise there.

The rule holds only where no ReLU input lies within float32's reach of 0 (asserted on the float64
run: |v| > 64 eps_f32 max|v| per layer). Where one does, the gradient is discontinuous there: a
float32 run whose rounding gives that unit the other sign, eager's or thunder's, changes the
gradient of every parameter before it by O(1/n) (n: the values per BatchNorm channel), hundreds of
times eager's usual error. In such a case (a copy of torchvision's shufflenet_v2_x0_5 at batch 1,
224x224: one unit at -1.4e-5 in float64) eager itself with channels_last memory is off plain
eager by the same factors as thunder; thunder's trace run in float64 matches eager's float64
gradients to 1e-11, so it is neither a formula nor a reduction order of thunder's.
"""

import copy
import statistics

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def conv_bn(cin, cout, k=1, stride=1, groups=1, relu=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


def channel_shuffle(x, groups):
    b, c, h, w = x.shape
    return torch.transpose(x.view(b, groups, c // groups, h, w), 1, 2).contiguous().view(b, -1, h, w)


class ShuffleBlock(nn.Module):
    """torchvision's ShuffleNetV2 block: chunk (stride 1) or two branches (stride 2), depthwise
    convolutions, cat, channel shuffle."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride, half = stride, cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, relu=False), conv_bn(cin, half))
        self.branch2 = nn.Sequential(conv_bn(cin if stride > 1 else half, half),
                                     conv_bn(half, half, 3, stride, groups=half, relu=False), conv_bn(half, half))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ResidualBlock(nn.Module):
    """ResNet's basic block: conv-BN-ReLU, conv-BN, the input added, ReLU."""

    def __init__(self, c):
        super().__init__()
        self.a, self.b, self.act = conv_bn(c, c, 3), conv_bn(c, c, 3, relu=False), nn.ReLU()

    def forward(self, x):
        return self.act(self.b(self.a(x)) + x)


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Sequential(conv_bn(3, 16, 3, 2), ShuffleBlock(16, 32, 2), ShuffleBlock(32, 32, 1),
                                  ResidualBlock(32), ShuffleBlock(32, 64, 2), ShuffleBlock(64, 64, 1),
                                  conv_bn(64, 128))
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        return self.fc(self.body(x).mean([2, 3]))


def _grads(model, x, y):
    out = model(x)
    F.cross_entropy(out, y).backward()
    return {n.removeprefix("_model."): p.grad for n, p in model.named_parameters()}


def _relu_inputs_clear_of_zero(model, x):
    """Whether every ReLU input of a float64 run is further from 0 than float32's rounding
    reaches (64 eps_f32 of the largest value of its tensor)."""
    worst = []

    def hook(module, args):
        v = args[0].detach().abs()
        worst.append((v.min() / v.max()).item())

    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    handles = [m.register_forward_pre_hook(hook) for m in relus]
    model(x)
    for h in handles:
        h.remove()
    return min(worst) > 64 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("offset", [8.0, 30.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bn_cnn_gradients_as_close_to_float64_as_eagers(seed, offset, executors):
    # Uncentred inputs, as pixels: the stem's BatchNorm sees means of many standard deviations, where
    # a variance computed as E[x^2] - E[x]^2 cancels (it fails this test: at offset 30, seed 2, a
    # median of 4.0 times eager's error and one parameter 19 times over the bound).
    torch.manual_seed(seed)
    model = Net()
    x, y = torch.randn(4, 3, 16, 16) + offset, torch.randint(0, 10, (4,))
    m64 = copy.deepcopy(model).double()
    assert _relu_inputs_clear_of_zero(copy.deepcopy(m64), x.double()), "a ReLU input within float32's reach of 0"
    g64 = _grads(m64, x.double(), y)
    ge = _grads(copy.deepcopy(model), x, y)
    gt = _grads(thunder.jit(copy.deepcopy(model), executors=executors), x, y)
    assert gt.keys() == g64.keys()
    largest = max(g.abs().max().item() for g in g64.values())
    names = [n for n, g in g64.items() if g.abs().max().item() > 1e-6 * largest]
    assert len(names) > 40

    def err(g, n):
        return (g[n].double() - g64[n]).abs().max().item() / g64[n].abs().max().item()

    eager = {n: err(ge, n) for n in names}
    level = statistics.median(eager.values())
    ratios = []
    for n in names:
        e, t = eager[n], err(gt, n)
        assert t <= 4 * max(e, level), f"{n}: thunder's error {t:.2e}, eager's {e:.2e} (median {level:.2e})"
        ratios.append(t / e)
    assert statistics.median(ratios) <= 1.5, f"median of thunder's error over eager's: {statistics.median(ratios):.2f}"


def test_bn_cnn_gradients_in_float64_match_eagers():
    # The same model in float64: thunder's trace computes eager's gradients (a wrong formula would
    # show here at any size; float32 differences beyond it are rounding).
    torch.manual_seed(0)
    model = Net().double()
    x, y = torch.randn(2, 3, 16, 16, dtype=torch.float64) + 8, torch.randint(0, 10, (2,))
    ge = _grads(copy.deepcopy(model), x, y)
    gt = _grads(thunder.jit(copy.deepcopy(model)), x, y)
    largest = max(g.abs().max().item() for g in ge.values())
    for n, g in ge.items():
        torch.testing.assert_close(gt[n], g, rtol=1e-9, atol=1e-12 * largest, msg=n)
