"""Gradients of thunder.jit against torch.autograd in float64 for the neural-network ops, and a
ResNet-like block (written as torchvision writes it) in train and eval mode."""

import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder

f64 = torch.float64


def t(*shape, low=-2.0, high=2.0, requires_grad=True):
    x = torch.empty(shape, dtype=f64).uniform_(low, high)
    return x.requires_grad_(requires_grad)


def idx(high, *shape):
    return torch.randint(0, high, shape)


# (id, fn, args builder): fn's float tensor args that require grad are differentiated.
CASES = [
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), lambda: (t(2, 4, 9), t(6, 4, 3), t(6))),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1, dilation=2), lambda: (t(2, 3, 7, 6), t(4, 3, 3, 3), t(4))),
    ("conv2d_groups_nobias", lambda x, w: F.conv2d(x, w, stride=(2, 1), groups=2), lambda: (t(1, 4, 6, 5), t(6,
        2, 3, 2))),
    ("conv2d_same", lambda x, w: F.conv2d(x, w, padding="same"), lambda: (t(2, 3, 5, 6), t(2, 3, 4, 3))),
    ("conv2d_unbatched", lambda x, w: F.conv2d(x, w, padding="valid"), lambda: (t(3, 5, 5), t(2, 3, 3, 3))),
    ("conv3d", lambda x, w, b: F.conv3d(x, w, b, padding=1), lambda: (t(1, 2, 4, 4, 4), t(3, 2, 3, 3, 3), t(3))),
    ("conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, output_padding=1),
     lambda: (t(2, 3, 5), t(3, 4, 3), t(4))),
    ("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, groups=2),
     lambda: (t(1, 4, 4, 3), t(4, 3, 3, 3), t(6))),
    ("conv_transpose3d", lambda x, w: F.conv_transpose3d(x, w, stride=2), lambda: (t(1, 2, 3, 2, 3), t(2, 2, 2, 2, 2))),
    ("batch_norm_train", lambda x, w, b: F.batch_norm(x, torch.zeros(3, dtype=f64), torch.ones(3, dtype=f64), w,
        b, True),
     lambda: (t(4, 3, 5, 5), t(3), t(3))),
    ("batch_norm_eval", lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, False),
     lambda: (t(4, 3, 5), t(3), t(3), t(3, requires_grad=False), t(3, low=0.5, requires_grad=False))),
    ("batch_norm_nostats", lambda x: F.batch_norm(x, None, None, training=True), lambda: (t(5, 2),)),
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda: (t(3, 4, 5, 2), t(4), t(4))),
    ("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), lambda: (t(2, 3, 6), t(3), t(3))),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: (t(2, 3, 4), t(4), t(4))),
    ("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, padding=1), lambda: (t(2, 3, 9),)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True), lambda: (t(2, 3, 8, 7),)),
    ("max_pool2d_dilation", lambda x: F.max_pool2d(x, 2, 1, dilation=2), lambda: (t(3, 6, 6),)),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2), lambda: (t(1, 2, 4, 4, 4),)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, padding=1, count_include_pad=False), lambda: (t(2, 3, 8),)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True), lambda: (t(2, 3, 7, 7),)),
    ("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda: (t(2, 6, 6),)),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2, 1), lambda: (t(1, 2, 3, 4, 4),)),
    ("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 4), lambda: (t(2, 3, 7),)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, None)), lambda: (t(2, 3, 7, 5),)),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, 2), lambda: (t(1, 2, 3, 5, 4),)),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (2, 3)), lambda: (t(2, 3, 7, 5),)),
    ("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3), lambda: (t(2, 7),)),
    ("interpolate_nearest", lambda x: F.interpolate(x, scale_factor=2), lambda: (t(1, 2, 3, 4),)),
    ("interpolate_nearest_size", lambda x: F.interpolate(x, size=(5, 7)), lambda: (t(1, 2, 3, 4),)),
    ("interpolate_bilinear", lambda x: F.interpolate(x, size=(5, 7), mode="bilinear"), lambda: (t(1, 2, 3, 4),)),
    ("interpolate_bilinear_ac", lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
     lambda: (t(2, 1, 4, 4),)),
    ("interpolate_linear", lambda x: F.interpolate(x, size=9, mode="linear"), lambda: (t(1, 2, 4),)),
    ("interpolate_bicubic", lambda x: F.interpolate(x, size=(6, 5), mode="bicubic"), lambda: (t(1, 1, 3, 3),)),
    ("interpolate_trilinear", lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), lambda: (t(1, 1, 2,
        3, 2),)),
    ("interpolate_area", lambda x: F.interpolate(x, size=(2, 3), mode="area"), lambda: (t(1, 2, 5, 6),)),
    ("pad_reflect", lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), lambda: (t(2, 3, 4, 5),)),
    ("pad_replicate", lambda x: F.pad(x, (3, 1), mode="replicate"), lambda: (t(2, 3, 4),)),
    ("pad_circular", lambda x: F.pad(x, (1, 2, 2, 0, 1, 1), mode="circular"), lambda: (t(1, 2, 3, 3, 4),)),
    ("pad_constant", lambda x: F.pad(x, (1, 2), value=1.5), lambda: (t(2, 3),)),
    ("embedding_padding_idx", lambda i, w: F.embedding(i, w, padding_idx=1), lambda: (torch.tensor([[0, 1, 2],
        [1, 3, 1]]), t(4, 3))),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 1.0), lambda: (t(3, 4),)),
    ("hardsigmoid", lambda x: F.hardsigmoid(x), lambda: (t(3, 4, low=-5, high=5),)),
    ("hardshrink", lambda x: F.hardshrink(x, 0.3), lambda: (t(3, 4),)),
    ("softshrink", lambda x: F.softshrink(x, 0.3), lambda: (t(3, 4),)),
    ("tanhshrink", lambda x: F.tanhshrink(x), lambda: (t(3, 4),)),
    ("logsigmoid", lambda x: F.logsigmoid(x), lambda: (t(3, 4, low=-30, high=30),)),
    ("softsign", lambda x: F.softsign(x), lambda: (t(3, 4),)),
    ("selu", lambda x: F.selu(x), lambda: (t(3, 4),)),
    ("celu", lambda x: F.celu(x, 0.7), lambda: (t(3, 4),)),
    ("prelu", lambda x, w: F.prelu(x, w), lambda: (t(2, 3, 4), t(3))),
    ("prelu_single", lambda x, w: F.prelu(x, w), lambda: (t(2, 3), t(1))),
    ("rrelu_eval", lambda x: F.rrelu(x), lambda: (t(3, 4),)),
    ("glu", lambda x: F.glu(x, 1), lambda: (t(2, 6, 3),)),
    ("threshold", lambda x: F.threshold(x, 0.2, -1.0), lambda: (t(3, 4),)),
    ("silu", lambda x: F.silu(x), lambda: (t(3, 4),)),
    ("mish", lambda x: F.mish(x), lambda: (t(3, 4),)),
    ("normalize", lambda x: F.normalize(x, dim=-1), lambda: (t(3, 4, low=0.5),)),
    ("normalize_p1", lambda x: F.normalize(x, p=1.0, dim=0), lambda: (t(3, 4, low=0.5),)),
    ("cosine_similarity", lambda a, b: F.cosine_similarity(a, b, dim=1), lambda: (t(3, 4, low=0.5), t(1, 4, low=0.5))),
    ("pairwise_distance", lambda a, b: F.pairwise_distance(a, b), lambda: (t(3, 4), t(3, 4))),
    ("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda: (t(2, 8, 3, 2),)),
    ("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), lambda: (t(2, 2, 4, 6),)),
    ("binary_cross_entropy", lambda x, y, w: F.binary_cross_entropy(x, y, w),
     lambda: (t(3, 4, low=0.05, high=0.95), t(3, 4, low=0, high=1), t(3, 4, low=0.1, high=1, requires_grad=False))),
    ("bce_with_logits", lambda x, y, pw: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw, reduction="sum"),
     lambda: (t(3, 4), t(3, 4, low=0, high=1), t(4, low=0.5, high=2, requires_grad=False))),
    ("bce_with_logits_weight", lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, w, reduction="none"),
     lambda: (t(3, 4), t(3, 4, low=0, high=1), t(4, low=0.5, high=2, requires_grad=False))),
    ("l1_loss", lambda x, y: F.l1_loss(x, y), lambda: (t(3, 4), t(3, 4))),
    ("smooth_l1_loss", lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), lambda: (t(3, 4), t(3, 4))),
    ("huber_loss", lambda x, y: F.huber_loss(x, y, delta=0.7, reduction="sum"), lambda: (t(3, 4), t(3, 4))),
    ("kl_div", lambda x, y: F.kl_div(x, y, reduction="batchmean"), lambda: (t(3, 4), t(3, 4, low=0.1, high=1))),
    ("kl_div_log_target", lambda x, y: F.kl_div(x, y, reduction="sum", log_target=True), lambda: (t(3, 4), t(3, 4))),
    ("cross_entropy_smoothing", lambda x, y, w: F.cross_entropy(x, y, w, ignore_index=2, label_smoothing=0.2),
     lambda: (t(6, 4), torch.tensor([0, 2, 1, 3, 2, 1]), t(4, low=0.5, high=2, requires_grad=False))),
    ("cross_entropy_probs", lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
     lambda: (t(3, 4, 2), torch.softmax(t(3, 4, 2, requires_grad=False), 1))),
    ("cross_entropy_probs_weight", lambda x, y, w: F.cross_entropy(x, y, w, reduction="sum"),
     lambda: (t(3, 4), torch.softmax(t(3, 4, requires_grad=False), 1), t(4, low=0.5, requires_grad=False))),
    ("nll_loss_weight_ignore", lambda x, y, w: F.nll_loss(x, y, w, ignore_index=1),
     lambda: (t(5, 3), torch.tensor([0, 1, 2, 2, 1]), t(3, low=0.5, requires_grad=False))),
    # (both were ignored: the summed gradient, not divided by each id's count; a dense gradient)
    ("embedding_scale_grad_by_freq", lambda i, w: F.embedding(i, w, padding_idx=0, scale_grad_by_freq=True),
     lambda: (torch.tensor([[0, 2, 2], [4, 2, 1]]), t(5, 3))),
    ("embedding_sparse", lambda i, w: F.embedding(i, w, sparse=True), lambda: (torch.tensor([[0, 2, 2], [4, 2, 1]]), t(5, 3))),
    # (its check that var has no negative entry asked the data: refused; var's smallest entries clamped)
    ("gaussian_nll_loss", lambda x, y, v: F.gaussian_nll_loss(x, y, v, full=True),
     lambda: (t(4, 3), t(4, 3), torch.cat([t(4, 2, low=0.1, high=2), t(4, 1, low=0, high=1e-7)], 1))),
    ("gaussian_nll_loss_homoscedastic", lambda x, y, v: F.gaussian_nll_loss(x, y, v, reduction="sum"),
     lambda: (t(4, 3), t(4, 3), t(4, low=0.1, high=2))),
]


@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
def test_grad_matches_autograd(name, fn, make):
    torch.manual_seed(0)
    args = make()
    expected = fn(*args)
    diff = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    cot = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, diff, cot)
    actual = thunder.jit(fn)(*args)
    torch.testing.assert_close(actual, expected)
    actual_grads = torch.autograd.grad(actual, diff, cot)
    for i, (a, e) in enumerate(zip(actual_grads, expected_grads)):
        torch.testing.assert_close(a, e, msg=lambda m: f"{name}: grad of input {i}: {m}")


def test_embedding_padding_row_gets_no_gradient():
    w = torch.randn(4, 3, dtype=f64, requires_grad=True)
    i = torch.tensor([0, 1, 1, 3])
    thunder.jit(lambda i, w: F.embedding(i, w, padding_idx=1))(i, w).sum().backward()
    assert torch.equal(w.grad[1], torch.zeros(3, dtype=f64))
    assert torch.equal(w.grad[0], torch.ones(3, dtype=f64))


def test_max_pool_indices_match_eager():
    x = torch.randn(2, 3, 9, 8)
    for fn in (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
               lambda x: F.max_pool1d(x[0], 2, return_indices=True),
               lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True)):
        actual, expected = thunder.jit(fn)(x), fn(x)
        torch.testing.assert_close(actual[0], expected[0])
        assert torch.equal(actual[1], expected[1])


# ---- a ResNet-like block, as torchvision writes it ----------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(planes)
        )

    def forward(self, x):
        identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class TinyResNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = BasicBlock(8, 16, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_resnet_block_matches_eager(train):
    torch.manual_seed(0)
    model = TinyResNet().to(f64)
    ref = TinyResNet().to(f64)
    ref.load_state_dict(model.state_dict())
    model.train(train)
    ref.train(train)
    x = torch.randn(4, 3, 32, 32, dtype=f64)
    jmodel = thunder.jit(model)
    for step in range(2):
        out, expected = jmodel(x), ref(x)
        torch.testing.assert_close(out, expected)
        cot = torch.randn_like(out)
        out.backward(cot)
        expected.backward(cot)
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"grad of {name}: {m}")
        # Running statistics (and num_batches_tracked) are updated as eager updates them.
        for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
            torch.testing.assert_close(b, c, msg=lambda m: f"buffer {name} after step {step}: {m}")
        model.zero_grad()
        ref.zero_grad()


# BatchNorm with momentum=None: a cumulative moving average, running stats mixed in with the factor
# 1 / num_batches_tracked of each step (eager reads the counter's value; thunder refused it).
CMA_MODELS = {
    "bn1d": (lambda: nn.BatchNorm1d(3, momentum=None), (6, 3)),
    "bn1d_seq": (lambda: nn.BatchNorm1d(3, momentum=None), (4, 3, 5)),
    "conv_bn2d": (lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3, momentum=None), nn.ReLU()), (2, 2, 6, 6)),
    "bn2d_no_affine": (lambda: nn.BatchNorm2d(3, momentum=None, affine=False), (2, 3, 4, 4)),
    "bn3d": (lambda: nn.BatchNorm3d(2, momentum=None), (2, 2, 3, 3, 3)),
    "bn2d_untracked": (lambda: nn.BatchNorm2d(3, momentum=None, track_running_stats=False), (2, 3, 4, 4)),
    "mixed_momenta": (lambda: nn.Sequential(nn.BatchNorm1d(4, momentum=None), nn.Linear(4, 4),
                                            nn.BatchNorm1d(4, momentum=0.3)), (5, 4)),
}


@pytest.mark.parametrize("dtype", [torch.float32, f64], ids=str)
@pytest.mark.parametrize("name", sorted(CMA_MODELS))
def test_batch_norm_cumulative_average_matches_eager(name, dtype):
    make, shape = CMA_MODELS[name]
    torch.manual_seed(0)
    model = make().to(dtype)
    ref = make().to(dtype)
    ref.load_state_dict(model.state_dict())
    jmodel = thunder.jit(model)
    for step in range(4):
        # eval after two steps, then training again: the running stats serve eval and keep averaging
        model.train(step != 2)
        ref.train(step != 2)
        x = torch.randn(*shape, dtype=dtype) * (step + 1) + step
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = jmodel(xj), ref(xe)
        torch.testing.assert_close(out, expected)
        if step != 2:
            cot = torch.randn_like(out)
            out.backward(cot)
            expected.backward(cot)
            torch.testing.assert_close(xj.grad, xe.grad)
            for (pname, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"grad of {pname}: {m}")
        for (bname, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
            torch.testing.assert_close(b, c, msg=lambda m: f"buffer {bname} after step {step}: {m}")
    assert thunder.cache_misses(jmodel) == 2  # one trace for training, one for eval


# ---- random ops: the seed decides, and the gradient is the mask that was drawn -----------------

RANDOM = [
    ("dropout1d", lambda x: F.dropout1d(x, 0.4)),
    ("dropout2d", lambda x: F.dropout2d(x, 0.4)),
    ("dropout3d", lambda x: F.dropout3d(x.unsqueeze(-1), 0.4)),
    ("alpha_dropout", lambda x: F.alpha_dropout(x, 0.3, True)),
    ("feature_alpha_dropout", lambda x: F.feature_alpha_dropout(x, 0.3, True)),
    ("rrelu_train", lambda x: F.rrelu(x, 0.1, 0.3, True)),
    ("bernoulli_p", lambda x: x.bernoulli(0.3)),
    ("bernoulli_probs", lambda x: torch.bernoulli(torch.sigmoid(x))),
    ("drop_path", lambda x: x * x.new_empty(x.shape[0], 1, 1).bernoulli_(0.7) / 0.7),
]


@pytest.mark.parametrize("name,fn", RANDOM, ids=[r[0] for r in RANDOM])
def test_random_ops_follow_the_seed(name, fn):
    x = torch.randn(4, 6, 5, dtype=f64)
    jf = thunder.jit(fn)
    torch.manual_seed(7)
    a = jf(x)
    torch.manual_seed(7)
    b = jf(x)
    assert torch.equal(a, b), f"{name}: the same seed gave different results"
    assert not torch.equal(a, jf(x)), f"{name}: two draws without reseeding were equal"


# Bernoulli draws (timm's DropPath: x.new_empty(shape).bernoulli_(keep)) as thunder calls, not the
# Python fallback: the value's dtype, the frequency of ones, probabilities read per element, the
# gradient through the kept rows, and the errors.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_bernoulli_with_p(dtype):
    x = torch.zeros(20000, dtype=dtype)
    jf = thunder.jit(lambda x: x.bernoulli(0.3))
    y = jf(x)
    assert y.dtype == dtype and y.shape == x.shape
    assert set(torch.unique(y.double()).tolist()) <= {0.0, 1.0}
    assert abs(y.double().mean().item() - 0.3) < 0.02
    assert "bernoulli" not in "".join(
        ln for ln in str(thunder.last_traces(jf)[-1]).splitlines() if not ln.strip().startswith("#")), \
        "the draw ran through the fallback"


def test_bernoulli_reads_each_probability():
    p = torch.tensor([0.0, 1.0] * 5000 + [0.5] * 10000, dtype=f64)
    y = thunder.jit(torch.bernoulli)(p)
    assert torch.equal(y[:10000], p[:10000])
    assert abs(y[10000:].mean().item() - 0.5) < 0.03


def test_drop_path_gradient_is_the_kept_rows():
    x = torch.randn(64, 3, 5, dtype=f64, requires_grad=True)
    y = thunder.jit(lambda x: x * x.new_empty(64, 1, 1).bernoulli_(0.6) / 0.6)(x)
    y.backward(torch.ones_like(y))
    kept = (y.detach() != 0).all(dim=(1, 2)).to(f64)[:, None, None].expand_as(x)
    torch.testing.assert_close(x.grad, kept / 0.6)
    assert 0 < kept[:, 0, 0].sum() < 64


@pytest.mark.parametrize("fn,err,msg", [
    (lambda x: x.bernoulli(1.5), RuntimeError, "p must be in [0, 1]"),
    (lambda x: torch.bernoulli(x.long()), NotImplementedError, "Long"),  # (eager's own error, via the fallback)
])
def test_bernoulli_errors(fn, err, msg):
    with pytest.raises(err, match=re.escape(msg)):
        thunder.jit(fn)(torch.rand(4, dtype=f64))


@pytest.mark.parametrize("shifts,dims", [((-3, 2), (1, 2)), (5, None), (1, 0), ((2,), (-1,))])
def test_roll_runs_whole(shifts, dims):
    # Swin's shifted windows: a roll is one kernel (a fused one, or ATen's roll), forward and
    # backward, not a slice and a concatenation per rolled dim.
    device = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
    x = torch.randn(3, 8, 6, 5, dtype=f64, device=device, requires_grad=True)
    fn = lambda x: torch.roll(x, shifts, dims) * 2  # noqa: E731
    jf = thunder.jit(fn)
    y = jf(x)
    (g,) = torch.autograd.grad(y, x, torch.arange(y.numel(), dtype=f64, device=device).view_as(y))
    ref = fn(x)
    (rg,) = torch.autograd.grad(ref, x, torch.arange(y.numel(), dtype=f64, device=device).view_as(y))
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(g, rg)
    for tr in (thunder.last_traces(jf)[-1], thunder.last_backward_traces(jf)[-1]):
        code = [ln for ln in str(tr).splitlines() if not ln.strip().startswith("#")]
        assert not any("cat(" in ln or "slice(" in ln for ln in code), "\n".join(code)


def test_dropout2d_gradient_is_the_scaled_mask():
    x = torch.randn(8, 6, 3, 3, dtype=f64, requires_grad=True)
    y = thunder.jit(lambda x: F.dropout2d(x, 0.25))(x)
    y.backward(torch.ones_like(y))
    kept = (y != 0).to(f64)
    torch.testing.assert_close(x.grad, kept / 0.75)
    torch.testing.assert_close(y, x.detach() * kept / 0.75)


@pytest.mark.parametrize("fn", [lambda x: F.dropout2d(x, 0.5, training=False), lambda x: F.dropout1d(x, 0.0),
                                lambda x: F.alpha_dropout(x, 0.5), lambda x: F.feature_alpha_dropout(x, 0.0, True)])
def test_dropout_identity_cases(fn):
    x = torch.randn(2, 3, 4)
    assert torch.equal(thunder.jit(fn)(x), x)


def test_dropout_p1_drops_everything():
    x = torch.randn(2, 3, 4)
    assert torch.equal(thunder.jit(lambda x: F.dropout2d(x, 1.0))(x), torch.zeros_like(x))


# ---- normalization modules: outputs, gradients and running statistics as eager -----------------

MODULES = [
    ("BatchNorm1d_2d", lambda: nn.BatchNorm1d(3), (4, 3)),
    ("BatchNorm1d_3d", lambda: nn.BatchNorm1d(3, momentum=0.3), (4, 3, 5)),
    ("BatchNorm2d_noaffine", lambda: nn.BatchNorm2d(3, affine=False), (2, 3, 4, 4)),
    ("BatchNorm3d", lambda: nn.BatchNorm3d(3), (2, 3, 2, 3, 2)),
    ("BatchNorm2d_no_running_stats", lambda: nn.BatchNorm2d(3, track_running_stats=False), (2, 3, 4, 4)),
    ("GroupNorm", lambda: nn.GroupNorm(2, 4), (2, 4, 3, 3)),
    ("InstanceNorm1d_running", lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), (2, 3, 6)),
    ("LayerNorm", lambda: nn.LayerNorm((3, 4)), (2, 3, 4)),
]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name,make,shape", MODULES, ids=[m[0] for m in MODULES])
def test_norm_modules_match_eager(name, make, shape, train):
    torch.manual_seed(0)
    model, ref = make().to(f64), make().to(f64)
    for p in model.parameters():
        p.data.uniform_(0.5, 1.5)
    ref.load_state_dict(model.state_dict())
    model.train(train)
    ref.train(train)
    jmodel = thunder.jit(model)
    for step in range(2):
        x = torch.randn(*shape, dtype=f64)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = jmodel(xa), ref(xb)
        torch.testing.assert_close(out, expected)
        cot = torch.randn_like(out)
        out.backward(cot)
        expected.backward(cot)
        torch.testing.assert_close(xa.grad, xb.grad)
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: grad of {n}: {m}")
        for (n, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
            torch.testing.assert_close(b, c, msg=lambda m: f"{name}: buffer {n} after step {step}: {m}")


def test_gaussian_nll_loss_checks_var_where_the_program_computes_it():
    f = thunder.jit(lambda x, y, v: F.gaussian_nll_loss(x, y, v))
    x, y = t(3, 2), t(3, 2)
    f(x, y, t(3, 2, low=0.5, high=1))
    with pytest.raises(ValueError, match="var has negative entry"):
        f(x, y, -t(3, 2, low=0.5, high=1, requires_grad=False))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        f(x, y, t(2, 2, low=0.5, high=1))
