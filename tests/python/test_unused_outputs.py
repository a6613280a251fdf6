"""Multi-output ops with one output used (issue 33): an output no gradient reaches gives none. Eager
runs no backward formula for it; thunder's rules read a zero cotangent for it, and a local
derivative that is infinite or NaN there (var_mean's variance over a dim of length 1 with
correction=1: 2 / (n - correction) is inf) made 0 * inf = NaN in the used output's gradient.
Each row compares values and gradients with eager's."""

import warnings

import pytest
import torch

import thunder


def _x(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype)


def _gather_mean(x):
    return torch.gather(torch.var_mean(x, 1)[1], 0, torch.tensor([0, 0, 2]))


CASES = [
    # var_mean and std_mean over a dim of length 1 (the variance is NaN or inf), each output alone
    ("var_mean_len1_corr1_mean", lambda x: torch.var_mean(x, 1, correction=1)[1], _x(3, 1)),
    ("var_mean_len1_corr2_mean", lambda x: torch.var_mean(x, 1, correction=2)[1], _x(3, 1)),
    ("var_mean_len1_corr0_mean", lambda x: torch.var_mean(x, 1, correction=0)[1], _x(3, 1)),
    ("var_mean_len1_keepdim_mean", lambda x: torch.var_mean(x, 1, correction=1, keepdim=True)[1], _x(3, 1, 2)),
    ("var_mean_len2_corr2_mean", lambda x: torch.var_mean(x, -1, correction=2)[1], _x(3, 2)),
    ("var_mean_all_len1_mean", lambda x: torch.var_mean(x, correction=1)[1], _x(1, 1)),
    ("var_mean_mean_then_gather", _gather_mean, _x(3, 1)),
    ("var_mean_var", lambda x: torch.var_mean(x, 1, correction=1)[0], _x(3, 4)),
    # no degrees of freedom: NaN as eager's (the fuser's var divided by n - correction = -1)
    ("var_mean_len1_corr2_var", lambda x: torch.var_mean(x, 1, correction=2)[0], _x(3, 1)),
    ("var_mean_len2_corr3_var", lambda x: torch.var_mean(x, 1, correction=3)[0] * 2, _x(3, 2)),
    ("std_mean_len1_corr2_std", lambda x: torch.std_mean(x, 1, correction=2)[0], _x(3, 1)),
    ("std_mean_len1_mean", lambda x: torch.std_mean(x, 1, correction=1)[1], _x(3, 1)),
    ("std_mean_len1_corr2_mean", lambda x: torch.std_mean(x, 0, correction=2)[1] * 2, _x(1, 3)),
    ("std_mean_std", lambda x: torch.std_mean(x, 1)[0], _x(3, 4)),
    # values or indices alone
    ("max_values", lambda x: torch.max(x, 1)[0], _x(3, 4)),
    ("max_indices_then_values_of_x", lambda x: x * torch.max(x, 1, keepdim=True).indices, _x(3, 4)),
    ("min_values", lambda x: torch.min(x, 0).values, _x(3, 4)),
    ("sort_values", lambda x: torch.sort(x, 1, descending=True)[0], _x(3, 4)),
    ("topk_values", lambda x: torch.topk(x, 2, 1)[0], _x(3, 4)),
    ("aminmax_min", lambda x: torch.aminmax(x, dim=1).min, _x(3, 4)),
    ("aminmax_max", lambda x: torch.aminmax(x, dim=0).max, _x(1, 4)),
    ("median_values", lambda x: torch.median(x, 1).values, _x(3, 5)),
    ("kthvalue_values", lambda x: torch.kthvalue(x, 2, 1)[0], _x(3, 4)),
    ("cummax_values", lambda x: torch.cummax(x, 1)[0], _x(3, 4)),
    # normalization outputs alone: the output, the mean, the inverse std
    ("native_layer_norm_out", lambda x: torch.native_layer_norm(x, [1], None, None, 1e-5)[0], _x(3, 1)),
    ("native_layer_norm_mean", lambda x: torch.native_layer_norm(x, [4], None, None, 1e-5)[1], _x(3, 4)),
    ("native_layer_norm_rstd", lambda x: torch.native_layer_norm(x, [4], None, None, 1e-5)[2], _x(3, 4)),
    ("native_batch_norm_out", lambda x: torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)[0],
     _x(4, 3)),
    ("native_batch_norm_mean", lambda x: torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)[1],
     _x(4, 3)),
    ("batch_norm_one_per_channel", lambda x: torch.nn.functional.batch_norm(x, None, None, training=True),
     _x(2, 3, 1)),
]


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_an_unused_output_gives_no_gradient(name, fn, x, executors):
    xe, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's degrees-of-freedom warning
        want = fn(xe)
        got = thunder.jit(fn, executors=executors)(xt)
    torch.testing.assert_close(got, want, equal_nan=True)
    if not want.requires_grad:
        return
    cot = torch.randn_like(want)
    try:
        (ge,) = torch.autograd.grad(want, xe, cot)
    except RuntimeError as e:
        if "is not implemented" not in str(e):
            raise
        pytest.skip(f"eager has no gradient here in torch {torch.__version__}: {e}")  # aminmax before 2.13
    (gt,) = torch.autograd.grad(got, xt, cot)
    torch.testing.assert_close(gt, ge, equal_nan=True)


# A module returning a second output the loss does not read (GoogLeNet's and Inception-v3's
# auxiliary logits in training mode): the parameters only that output reaches keep no gradient
# (None, as eager leaves them: an optimizer skips them, where zeros would still decay them), also
# through the nn ops' backward prims (batch norm, convolution, pooling, embedding, upsampling).
def _aux(*layers):
    return lambda: torch.nn.Sequential(*layers)


AUX_HEADS = [
    ("linear", _aux(torch.nn.Linear(6, 5))),
    ("conv_batchnorm", _aux(torch.nn.Conv2d(6, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())),
    ("conv_avgpool", _aux(torch.nn.Conv2d(6, 4, 1), torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16, 3))),
    ("maxpool_adaptive", _aux(torch.nn.MaxPool2d(2), torch.nn.Conv2d(6, 4, 1), torch.nn.AdaptiveAvgPool2d(1))),
    ("adaptive_max_upsample", _aux(torch.nn.Conv2d(6, 4, 1), torch.nn.AdaptiveMaxPool2d(2), torch.nn.Upsample(scale_factor=2))),
]


class _TwoHeads(torch.nn.Module):
    def __init__(self, aux):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 6)
        self.trunk = torch.nn.Conv2d(6, 6, 3, padding=1)
        self.main = torch.nn.Linear(6, 2)
        self.aux_emb = torch.nn.Embedding(10, 6)
        self.aux = aux

    def forward(self, x, ids):
        h = torch.relu(self.trunk(x + self.emb(ids)[:, :, None, None]))
        aux_in = h if not isinstance(self.aux[0], torch.nn.Linear) else h.mean((2, 3))
        aux = self.aux(aux_in + self.aux_emb(ids).reshape((-1, 6) + (1,) * (aux_in.dim() - 2)))
        return self.main(h.mean((2, 3))), aux


@pytest.mark.parametrize("name,aux", AUX_HEADS, ids=[c[0] for c in AUX_HEADS])
def test_parameters_only_an_unread_output_reaches_keep_no_gradient(name, aux):
    import copy

    torch.manual_seed(0)
    m = _TwoHeads(aux()).double().train()
    ref = copy.deepcopy(m)
    x, ids = torch.randn(3, 6, 4, 4, dtype=torch.float64), torch.tensor([1, 4, 7])
    thunder.jit(m)(x, ids)[0].square().sum().backward()
    ref(x, ids)[0].square().sum().backward()
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), (n, p.grad is None, q.grad is None)
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, msg=n)
    assert all(p.grad is None for p in m.aux.parameters()) and m.aux_emb.weight.grad is None


# The unread output selected by indices (torchvision's RPN: the objectness logits of the sampled
# anchors, `objectness[sampled_inds]`, in a loss the training step left out): the index's gradient
# is zeros scattered into zeros, and the parameters before it keep no gradient either.
_IDX = torch.tensor([0, 2, 2])
INDEXED_AUX = [
    ("getitem_tensor", lambda y: y[_IDX]),
    ("getitem_flat", lambda y: y.flatten()[_IDX * 3]),
    ("index_select", lambda y: y.index_select(1, _IDX)),
    ("gather", lambda y: y.gather(1, _IDX.expand(y.shape[0], 3))),
    ("take_along_dim", lambda y: torch.take_along_dim(y, _IDX[None].expand(y.shape[0], 3), 1)),
    ("index_put", lambda y: y.index_put((_IDX[:2],), torch.zeros(2, y.shape[1], dtype=y.dtype))),
    ("scatter", lambda y: y.scatter(1, _IDX[None, :2].expand(y.shape[0], 2), 0.0)),
    ("bce_of_selected", lambda y: torch.nn.functional.binary_cross_entropy_with_logits(
        y.flatten()[_IDX], torch.tensor([1.0, 0.0, 1.0]))),
]


@pytest.mark.parametrize("name,select", INDEXED_AUX, ids=[c[0] for c in INDEXED_AUX])
def test_parameters_only_an_unread_indexed_output_reaches_keep_no_gradient(name, select):
    import copy

    torch.manual_seed(0)
    m = torch.nn.ModuleDict({"trunk": torch.nn.Linear(4, 4), "main": torch.nn.Linear(4, 2),
                             "aux": torch.nn.Linear(4, 5)}).double()

    def step(mod):
        def f(x):
            h = torch.tanh(mod["trunk"](x))
            return mod["main"](h).square().mean(), select(mod["aux"](h)).square().mean()
        return f

    x = torch.randn(3, 4, dtype=torch.float64)
    ref = copy.deepcopy(m)
    main, aux = thunder.jit(step(m))(x)
    main.backward()
    want_main, want_aux = step(ref)(x)
    want_main.backward()
    torch.testing.assert_close((main, aux), (want_main, want_aux))
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), (n, p.grad is None, q.grad is None)
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, msg=n)
    assert m["aux"].weight.grad is None and m["aux"].bias.grad is None
