"""`view` is legal in thunder exactly where eager's is (torch's computeStride over eager's strides):
a view of a layout that cannot be viewed raises as eager does, instead of returning a copy.
Thunder follows eager's strides from the inputs through views, elementwise ops (TensorIterator's
layout), clone and flip; reductions are contiguous, as eager's (issue 14)."""

import pytest
import torch
import torch.nn.functional as F

import thunder


def _x(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)), dtype=dtype)


# (name, inputs, program): eager decides whether the view is legal
CASES = [
    ("contiguous", lambda: [_x(2, 3)], lambda a: a.view(-1)),
    ("t_view_flat", lambda: [_x(2, 3)], lambda a: a.t().view(-1)),
    ("t_view_same_shape", lambda: [_x(2, 3)], lambda a: a.t().view(3, 2)),
    ("t_view_split_dim", lambda: [_x(2, 3)], lambda a: a.t().view(3, 1, 2)),
    ("mT_3d_merge_batch", lambda: [_x(4, 2, 3)], lambda a: a.mT.view(4, 6)),
    ("mT_3d_merge_lead", lambda: [_x(4, 2, 3)], lambda a: a.mT.view(-1, 2)),
    ("permute_merge_ok", lambda: [_x(2, 3, 4)], lambda a: a.permute(1, 2, 0).view(12, 2)),
    ("permute_merge_bad", lambda: [_x(2, 3, 4)], lambda a: a.permute(2, 0, 1).view(8, 3)),
    ("step_slice_last", lambda: [_x(4, 6)], lambda a: a[:, ::2].view(-1)),
    ("step_slice_first", lambda: [_x(4, 3)], lambda a: a[::2].view(-1)),
    ("step_slice_first_split", lambda: [_x(4, 3)], lambda a: a[::2].view(2, 3, 1)),
    ("narrow_rows", lambda: [_x(4, 3)], lambda a: a[1:3].view(-1)),
    ("narrow_cols", lambda: [_x(4, 3)], lambda a: a[:, 1:].view(-1)),
    ("expand", lambda: [_x(1, 3)], lambda a: a.expand(2, 3).view(-1)),
    ("expand_split", lambda: [_x(1, 3)], lambda a: a.expand(2, 3).view(2, 3, 1)),
    ("unsqueeze_t", lambda: [_x(2, 3)], lambda a: a.t().unsqueeze(1).view(3, 2)),
    ("squeeze_t", lambda: [_x(2, 1, 3)], lambda a: a.transpose(0, 2).squeeze(1).view(-1)),
    ("contiguous_after_t", lambda: [_x(2, 3)], lambda a: a.t().contiguous().view(-1)),
    ("reshape_after_t", lambda: [_x(2, 3)], lambda a: a.t().reshape(6).view(2, 3)),
    ("reshape_view_of_t", lambda: [_x(4, 2, 3)], lambda a: a.mT.reshape(12, 2).view(-1)),
    # elementwise results take the layout of their operands, the first deciding
    ("unary_of_t", lambda: [_x(2, 3)], lambda a: torch.exp(a.t()).view(-1)),
    ("scalar_op_of_t", lambda: [_x(2, 3)], lambda a: (a.t() * 2).view(-1)),
    ("t_plus_contig", lambda: [_x(2, 3), _x(3, 2)], lambda a, b: (a.t() + b).view(-1)),
    ("contig_plus_t", lambda: [_x(2, 3), _x(3, 2)], lambda a, b: (b + a.t()).view(-1)),
    ("t_plus_broadcast_row", lambda: [_x(2, 3), _x(2)], lambda a, b: (a.t() + b).view(-1)),
    ("cast_of_t", lambda: [_x(2, 3)], lambda a: a.t().to(torch.float64).view(-1)),
    ("where_of_t", lambda: [_x(2, 3)], lambda a: torch.where(a.t() > 0, a.t(), 0.0).view(-1)),
    ("sliced_unary", lambda: [_x(4, 6)], lambda a: torch.sin(a[:, ::2]).view(-1)),
    ("t_of_sliced_unary", lambda: [_x(6, 4)], lambda a: torch.sin(a.t()[::2]).view(-1)),
    # clone and flip keep the layout (empty_like's preserve_format); reductions, cumsum and
    # softmax are contiguous
    ("clone_of_t", lambda: [_x(2, 3)], lambda a: a.t().clone().view(-1)),
    ("flip_of_t", lambda: [_x(2, 3)], lambda a: a.t().flip(0).view(-1)),
    ("cumsum_of_t", lambda: [_x(2, 3)], lambda a: a.t().cumsum(0).view(-1)),
    ("softmax_of_t", lambda: [_x(2, 3)], lambda a: a.t().softmax(1).view(-1)),
    ("log_softmax_of_t", lambda: [_x(2, 3)], lambda a: a.t().log_softmax(0).view(-1)),
    ("layer_norm_of_t", lambda: [_x(2, 3)], lambda a: F.layer_norm(a.t(), (2,)).view(-1)),
    ("logsigmoid_of_t", lambda: [_x(2, 3)], lambda a: F.logsigmoid(a.t()).view(-1)),
    ("tril_of_t", lambda: [_x(3, 3)], lambda a: a.t().tril().view(-1)),
    ("masked_fill_of_t", lambda: [_x(2, 3)], lambda a: a.t().masked_fill(a.t() > 0, 1.0).view(-1)),
    # composite ops that eager runs through TensorIterator keep the layout
    ("gelu_of_t", lambda: [_x(2, 3)], lambda a: F.gelu(a.t()).view(-1)),
    ("softplus_of_t", lambda: [_x(2, 3)], lambda a: F.softplus(a.t()).view(-1)),
    ("normalize_of_t", lambda: [_x(2, 3)], lambda a: F.normalize(a.t(), dim=1).view(-1)),
    ("nan_to_num_of_t", lambda: [_x(2, 3)], lambda a: torch.nan_to_num(a.t()).view(-1)),
    ("sum_of_permuted", lambda: [_x(2, 3, 4)], lambda a: a.permute(2, 0, 1).sum(1).view(-1)),
    ("sum_keep_of_permuted", lambda: [_x(2, 3, 4)], lambda a: a.permute(1, 2, 0).sum(2).view(-1)),
    ("amax_of_permuted", lambda: [_x(2, 3, 4)], lambda a: a.permute(1, 2, 0).amax(0).view(-1)),
    ("mean_of_t", lambda: [_x(2, 3, 4)], lambda a: a.transpose(0, 2).mean(1).view(-1)),
]


def _run(fn, inputs):
    try:
        return fn(*inputs), None
    except RuntimeError as e:
        return None, e


@pytest.mark.parametrize("name,make,fn", CASES, ids=[c[0] for c in CASES])
def test_view_legality_matches_eager(name, make, fn):
    want, eager_err = _run(fn, make())
    jf = thunder.jit(fn)
    got, err = _run(jf, make())
    if eager_err is not None:
        assert err is not None, f"{name}: eager raises ({eager_err}), thunder returned {got}"
        assert "view size is not compatible" in str(err) and "ltorch.view" in str(err), str(err)
        return
    assert err is None, f"{name}: eager returns, thunder raised {err}"
    torch.testing.assert_close(got, want)
    # the gradient of a legal view, as eager's
    ins = [x.detach().requires_grad_(True) for x in make()]
    ins_t = [x.detach().requires_grad_(True) for x in make()]
    cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(0))
    ge = torch.autograd.grad(fn(*ins), ins, cot, allow_unused=True)
    gt = torch.autograd.grad(jf(*ins_t), ins_t, cot, allow_unused=True)
    for a, b in zip(gt, ge):
        torch.testing.assert_close(a, b)


def test_some_views_are_illegal_and_some_legal():
    # The table above must exercise both outcomes (else it could not fail).
    outcomes = {_run(fn, make())[1] is None for _, make, fn in CASES}
    assert outcomes == {True, False}


def test_input_layout_is_part_of_the_cache_key():
    # A square input: contiguous and transposed have one shape. A trace made for the contiguous
    # one must not serve the transposed one, whose view eager refuses.
    jf = thunder.jit(lambda a: a.view(-1))
    x = _x(3, 3)
    torch.testing.assert_close(jf(x), x.view(-1))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(-1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jf(x.t())
    # a transposed input's legal view, then the contiguous one again: both right
    torch.testing.assert_close(jf(x.t().contiguous()), x.t().reshape(-1))
    torch.testing.assert_close(jf(x), x.view(-1))


@pytest.mark.parametrize("reps", [(1, 1), (2, 1), (1, 1, 1)])
def test_repeat_returns_a_contiguous_tensor_that_views(reps):
    # Eager's repeat always makes a new contiguous tensor (WavLM views the repeat of a transpose);
    # with every repeat 1 thunder's result kept the transpose's strides and the view was refused.
    def f(x):
        return x.t().repeat(*reps).view(-1) * 2

    x = torch.randn(3, 4)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))
