"""Losses given an input and a target of different floating dtypes: the loss's dtype, value and the
input's gradient as eager's. ATen's binary_cross_entropy_with_logits computes into `1 - target` in
place, so its loss has the target's dtype (float32 for a float64 input), unlike the losses built on
type-promoting arithmetic (ELECTRA's discriminator passes `labels.float()` beside float64 logits)."""

import pytest
import torch
import torch.nn.functional as F

import thunder

W = torch.rand(5, dtype=torch.float64)
LOSSES = {
    "bce_with_logits": lambda x, t: F.binary_cross_entropy_with_logits(x, t),
    "bce_with_logits_none": lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"),
    "bce_with_logits_sum": lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="sum"),
    "bce_with_logits_pos_weight64": lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=W),
    "bce_with_logits_pos_weight32": lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=W.float()),
    "bce_with_logits_weight32": lambda x, t: F.binary_cross_entropy_with_logits(x, t, weight=W.float()),
    "bce_with_logits_weight64": lambda x, t: F.binary_cross_entropy_with_logits(x, t, weight=W),
    "mse": F.mse_loss,
    "l1": F.l1_loss,
    "smooth_l1": F.smooth_l1_loss,
    "soft_margin": F.soft_margin_loss,
    "multilabel_soft_margin": F.multilabel_soft_margin_loss,
    "soft_cross_entropy": F.cross_entropy,
}


@pytest.mark.parametrize("dtypes", [(torch.float64, torch.float32), (torch.float32, torch.float64)],
                         ids=["f64_input_f32_target", "f32_input_f64_target"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_mixed_dtype_loss_matches_eager(name, dtypes):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64).to(dtypes[0]).requires_grad_()
    t = torch.rand(4, 5, generator=g, dtype=torch.float64).to(dtypes[1])
    f = LOSSES[name]
    e = f(x, t)
    (ge,) = torch.autograd.grad(e.sum(), x)
    r = thunder.jit(f)(x, t)
    (gr,) = torch.autograd.grad(r.sum(), x)
    assert r.dtype == e.dtype and gr.dtype == ge.dtype, (r.dtype, e.dtype, gr.dtype, ge.dtype)
    # (float32 rounding apart: eager rounds each in-place step to the target's dtype)
    torch.testing.assert_close(r, e, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gr, ge, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", [torch.tensor([0, 1, 1]), torch.tensor([True, False, True])], ids=["int64", "bool"])
def test_bce_with_logits_refuses_a_target_that_is_not_floating(target):
    x = torch.randn(3)
    with pytest.raises(RuntimeError):
        F.binary_cross_entropy_with_logits(x, target)
    with pytest.raises(RuntimeError, match=r"binary_cross_entropy_with_logits.*floating-point target.*shape \(?\[?3"):
        thunder.jit(F.binary_cross_entropy_with_logits)(x, target)


@pytest.mark.parametrize("weight", [None, torch.float32, torch.float64], ids=["no_weight", "weight32", "weight64"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtypes", [(torch.float64, torch.float32), (torch.float32, torch.float64)],
                         ids=["f64_input_f32_target", "f32_input_f64_target"])
def test_huber_loss_has_the_inputs_dtype(dtypes, reduction, weight):
    # (eager's huber_loss has its input's dtype; its backward refuses mixed dtypes, so values only)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 2).to(dtypes[0])
    t = torch.randn(4, 5, generator=g, dtype=torch.float64).to(dtypes[1])
    kw = dict(reduction=reduction, delta=0.7)
    if weight is not None:
        kw["weight"] = torch.rand(4, 5, generator=g, dtype=torch.float64).to(weight)
    e = F.huber_loss(x, t, **kw)
    r = thunder.jit(lambda x, t: F.huber_loss(x, t, **kw))(x, t)
    assert r.dtype == e.dtype, (r.dtype, e.dtype)
    torch.testing.assert_close(r, e, rtol=1e-6, atol=1e-6)
