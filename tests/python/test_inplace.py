"""In-place ops and mutation under thunder.jit: results and mutated tensors equal eager's, or a
clear error naming the op. Every case runs the same function eagerly and jitted on copies of the
same inputs and compares outputs and every input afterwards."""

import copy

import numpy as np
import pytest
import torch

import thunder


def _clone(xs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def check_inplace(fn, *inputs, calls=2):
    """fn(*inputs) eagerly and jitted: outputs and inputs (mutated ones included) agree, on a
    first call and on cached calls."""
    jf = thunder.jit(fn)
    eager_in, jit_in = _clone(inputs), _clone(inputs)
    for _ in range(calls):
        expected = fn(*eager_in)
        actual = jf(*jit_in)
        torch.testing.assert_close(actual, expected)
        for a, e in zip(jit_in, eager_in):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(a, e)
    return jf


def _inplace_cases():
    def add_(x, y):
        x.add_(y, alpha=2)
        return x * 3

    def chain(x, y):
        z = x * 2
        z.mul_(y).sub_(1).clamp_(min=-0.5)
        return z

    def iadd(x, y):
        x += y
        x *= 2
        return x.sum()

    def setitem_slice(x, v):
        x[1:3, ::2] = v
        return x + 1

    def setitem_int_and_ellipsis(x):
        x[0] = 7.0
        x[..., -1] = -1.0
        return x

    def setitem_mask(x):
        x[x < 0] = 0.0
        return x

    def setitem_index_tensor(x, idx, v):
        x[idx] = v
        return x

    def setitem_intermediate(x):
        y = x * 2
        y[:, 0] = 0
        return y

    def relu_inplace(x):
        y = x * 2
        torch.nn.functional.relu(y, inplace=True)
        return y

    def relu_inplace_on_input(x):
        return torch.nn.functional.relu(x, inplace=True) + 1

    def masked_fill_(x, m):
        x.masked_fill_(m, -1e4)
        return x.softmax(-1)

    def masked_fill_broadcast(x, m):
        return x.masked_fill_(m[None, :], 0.5)

    def kv_cache(cache, pos, k):
        cache.index_copy_(1, pos, k)
        return cache.sum(1)

    def kv_cache_slice(cache, k):
        cache[:, 2:4] = k
        return cache.mean()

    def kv_cache_positions(cache, pos, k):  # gpt-fast's KVCache.update: k_out[:, :, input_pos] = k_val
        cache[:, :, pos] = k
        return cache.sum(2)

    def setitem_positions_broadcast(x, pos):  # the value broadcast over the positions' rows
        x[..., pos, :] = torch.arange(4.0)
        return x * 2

    def setitem_position_0d(x, pos, v):  # a 0-d index drops its dim from the value's shape
        x[:, pos] = v
        return x

    def zero_fill_copy(x, y):
        x.zero_()
        y.fill_(3)
        return x + y

    def copy_(x, src):
        x.copy_(src)
        return x * 2

    def out_kwarg(x, y, out):
        torch.add(x, y, out=out)
        return out * 2

    def int_inplace(x):
        x.add_(1)
        x.mul_(3)
        return x

    def sigmoid_(x):
        return torch.sigmoid_(x * 1) + x.exp_()

    # x[key] = v for keys mixing index tensors with ints, slices, None, masks: as eager's index_put_
    # on the view the ints and slices make (they were refused)
    def setitem_int_and_tensor(x, idx, v):
        x[1, idx] = v
        return x

    def setitem_slice_and_list(x):
        x[1:3, [0, 2, 0]] += 1
        return x

    def setitem_separated_tensors(x, i, j, v):  # the indexed dims first in the value, as eager's
        x[i, :, j] = v
        return x

    def setitem_adjacent_after_slice(x, i, j, v):
        x[:, i, j] *= v
        return x

    def setitem_mask_on_dim_1(x, m):
        x[:, m] = 0.0
        return x

    def setitem_mask_rows_with_a_row(x, m, row):
        x[m] = row
        return x

    def setitem_0d_tensor_and_tensor(x, i, idx):
        x[i, :, idx] = -1.0
        return x

    def setitem_true_false(x):  # (True is no int 1 here: it adds a dim, as None; False selects nothing)
        x[True] = 1.0
        x[False] = 2.0
        x[0, True] = 3.0
        return x

    def setitem_numpy_and_range(x):
        x[np.array([0, -1])] = 1.0
        x[:, range(1, 3)] += 2.0
        return x

    f32 = lambda *s: torch.randn(*s)  # noqa: E731
    return [
        ("setitem_true_false", setitem_true_false, (f32(3, 4),)),
        ("setitem_numpy_and_range", setitem_numpy_and_range, (f32(3, 4),)),
        ("setitem_int_and_tensor", setitem_int_and_tensor, (f32(3, 6), torch.tensor([4, -1]), f32(2))),
        ("setitem_slice_and_list", setitem_slice_and_list, (f32(4, 5),)),
        ("setitem_separated_tensors", setitem_separated_tensors,
         (f32(4, 5, 6), torch.tensor([0, 3]), torch.tensor([[1], [-2]]), f32(2, 2, 5))),
        ("setitem_adjacent_after_slice", setitem_adjacent_after_slice,
         (f32(4, 5, 6), torch.tensor([0, 3]), torch.tensor([1, 2]), f32(2))),
        ("setitem_mask_on_dim_1", setitem_mask_on_dim_1, (f32(3, 5, 2), torch.rand(5) > 0.5)),
        ("setitem_mask_rows_with_a_row", setitem_mask_rows_with_a_row, (f32(4, 3), torch.rand(4) > 0.5, f32(3))),
        ("setitem_0d_tensor_and_tensor", setitem_0d_tensor_and_tensor, (f32(3, 4, 5), torch.tensor(-1), torch.tensor([0, 4]))),
        ("add_", add_, (f32(3, 4), f32(4))),
        ("chained", chain, (f32(3, 4), f32(3, 4))),
        ("augmented_assignment", iadd, (f32(5), f32(5))),
        ("setitem_slice", setitem_slice, (f32(4, 6), f32(2, 3))),
        ("setitem_int_and_ellipsis", setitem_int_and_ellipsis, (f32(3, 4),)),
        ("setitem_mask", setitem_mask, (f32(4, 5),)),
        ("setitem_index_tensor", setitem_index_tensor, (f32(6, 3), torch.tensor([0, 4]), f32(2, 3))),
        ("setitem_intermediate", setitem_intermediate, (f32(3, 3),)),
        ("relu_inplace", relu_inplace, (f32(3, 4),)),
        ("relu_inplace_on_input", relu_inplace_on_input, (f32(3, 4),)),
        ("masked_fill_", masked_fill_, (f32(2, 5), torch.rand(2, 5) > 0.5)),
        ("masked_fill_broadcast_mask", masked_fill_broadcast, (f32(3, 5), torch.rand(5) > 0.5)),
        ("kv_cache_index_copy_", kv_cache, (torch.zeros(2, 8, 4), torch.tensor([3]), f32(2, 1, 4))),
        ("kv_cache_slice", kv_cache_slice, (torch.zeros(2, 8, 4), f32(2, 2, 4))),
        ("kv_cache_positions", kv_cache_positions, (torch.zeros(1, 2, 8, 4), torch.tensor([5, -1]), f32(1, 2, 2, 4))),
        ("kv_cache_positions_int32", kv_cache_positions, (torch.zeros(1, 2, 8, 4), torch.tensor([3], dtype=torch.int32), f32(1, 2, 1, 4))),
        ("setitem_positions_broadcast", setitem_positions_broadcast, (f32(2, 5, 4), torch.tensor([4, 0]))),
        ("setitem_position_0d", setitem_position_0d, (f32(3, 6, 2), torch.tensor(2), f32(3, 2))),
        ("zero_fill_", zero_fill_copy, (f32(3), f32(3))),
        ("copy_", copy_, (f32(2, 3), f32(3))),
        ("out_kwarg", out_kwarg, (f32(3), f32(3), torch.empty(3))),
        ("integer", int_inplace, (torch.arange(6),)),
        ("torch_function_", sigmoid_, (f32(4),)),
    ]


@pytest.mark.parametrize("name,fn,inputs", _inplace_cases(), ids=[c[0] for c in _inplace_cases()])
def test_inplace_matches_eager(name, fn, inputs):
    check_inplace(fn, *inputs)


def test_mutated_input_is_written_back_in_the_trace():
    def f(x, y):
        x.add_(y)
        return y * 2

    jf = thunder.jit(f)
    jf(torch.randn(3), torch.randn(3))
    src = str(thunder.last_traces(jf)[-1])
    # A copy back into x, or (the reinplace pass) the update run in place on x.
    assert "copy_(" in src or "Tensor.add_(t_0, t_1" in src, src


def test_module_buffer_updated_in_forward():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
            self.register_buffer("ema", torch.zeros(4))
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            self.steps += 1
            self.ema.mul_(0.9).add_(0.1 * x.detach().mean(0))
            return self.lin(x)

    m = Counter()
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    for _ in range(3):
        x = torch.randn(5, 4)
        torch.testing.assert_close(tm(x), ref(x))
    assert int(m.steps) == 3
    torch.testing.assert_close(m.ema, ref.ema)


def test_module_buffer_reassigned_in_forward():
    class Reassign(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("last", torch.zeros(3))

        def forward(self, x):
            self.last = x.detach() * 2
            return x + 1

    m, ref = Reassign(), Reassign()
    tm = thunder.jit(m)
    x = torch.randn(3)
    torch.testing.assert_close(tm(x), ref(x))
    torch.testing.assert_close(m.last, ref.last)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batch_norm_running_stats(train):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True))
    m.train(train)
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3, 8, 8)
        out, expected = tm(x), ref(x)
        torch.testing.assert_close(out, expected)
        if train:
            out.sum().backward()
            expected.sum().backward()
    for name, buf in m.named_buffers():
        torch.testing.assert_close(buf, dict(ref.named_buffers())[name], msg=name)
    if train:
        torch.testing.assert_close(m[0].weight.grad, ref[0].weight.grad)


def test_inplace_in_training_matches_eager_gradients():
    def f(x, w):
        h = x @ w
        h.mul_(2)
        h[:, 0] = 0
        h.add_(x.sum(1, keepdim=True))
        return h.tanh().sum()

    x = torch.randn(4, 3, dtype=torch.float64)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    jf = thunder.jit(f)
    out = jf(x, w)
    out.backward()
    g = w.grad.clone()
    w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(g, w.grad)


@pytest.mark.parametrize("update", ["t.fill_(1.5)", "t.zero_()", "t.copy_(b)", "t.copy_(c)", "t.fill_(c.sum())",
                                    "t.normal_()", "t.uniform_()"])
def test_a_tensor_overwritten_in_place_keeps_its_gradient(update):
    # Fuzzer family inplace_alias_program, seeds 2, 35, 41, 43: eager's y.fill_(v) (zero_, copy_ of
    # a tensor without a gradient) on a tensor that requires grad returns a tensor that still does,
    # with a zero gradient. Thunder's value depended on no input: its result had no gradient and
    # the caller's backward raised "element 0 of tensors does not require grad".
    def f(a, b, c):
        t = a * 1
        return eval(update)

    a, c = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    b = torch.ones(3)
    jf = thunder.jit(f)
    got, want = jf(a, b, c), f(a, b, c)
    assert got.requires_grad and want.requires_grad
    if "normal_" not in update and "uniform_" not in update:  # the random fills draw other numbers
        torch.testing.assert_close(got, want)
    gt = torch.autograd.grad(got.sum(), [a, c], allow_unused=True)
    ge = torch.autograd.grad(want.sum(), [a, c], allow_unused=True)
    for x, y in zip(gt, ge):
        assert (x is None) == (y is None)
        if y is not None:
            torch.testing.assert_close(x, y)


def test_a_tensor_overwritten_through_setitem_keeps_its_gradient():
    # Fuzzer seeds 40691, 40710: t[0] = 2.0 on a tensor whose first dim has length 1 writes every
    # element; eager's result still requires grad (a zero gradient), thunder's had none.
    def f(a):
        t = a.sin()
        t[0] = 2.0
        return t.permute(2, 1, 0)

    a = torch.randn(1, 5, 2, requires_grad=True)
    got, want = thunder.jit(f)(a), f(a)
    assert got.requires_grad and want.requires_grad
    torch.testing.assert_close(got, want)
    cot = torch.randn(want.shape)
    torch.testing.assert_close(torch.autograd.grad(got, a, cot)[0], torch.autograd.grad(want, a, cot)[0])


def test_closure_tensor_mutated():
    state = torch.zeros(3)
    ref_state = torch.zeros(3)

    def make(s):
        def f(x):
            s.add_(x)
            return s * 1

        return f

    jf = thunder.jit(make(state))
    f = make(ref_state)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(jf(x), f(x))
    torch.testing.assert_close(state, ref_state)


# ---- what thunder refuses, with the op named ----------------------------------------------------


def test_inplace_on_leaf_requiring_grad_raises_like_eager():
    def f(w):
        w.add_(1)
        return w * 2

    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        f(w.clone().detach().requires_grad_())
    with pytest.raises(RuntimeError, match="Tensor.add_: a leaf Variable that requires grad"):
        thunder.jit(f)(w)


def _view_updates():
    def flat_fill(x):
        x.view(-1)[:2].fill_(0)
        return x

    def row_mul(x):
        x[0].mul_(3)
        return x.sum(1)

    def column_add_then_read_view(x):
        v = x[:, 1]
        v.add_(1)
        return v * 2

    def transposed_zero(x):
        x.t()[1].zero_()
        return x + 1

    def unsqueezed_masked_fill(x):
        x.unsqueeze(0).masked_fill_(x.unsqueeze(0) > 0, -1.0)
        return x.clone()

    def piece_of_split(x):
        a, b = x.split(1, 0)
        b.add_(a)
        return x

    def after_an_update_of_the_input(x):
        x.add_(1)
        x[:, 0] *= 2
        return x

    def twice_through_two_views(x):
        x[0].add_(1)
        x[:, 2].mul_(-1)
        return x

    return [flat_fill, row_mul, column_add_then_read_view, transposed_zero, unsqueezed_masked_fill, piece_of_split,
            after_an_update_of_the_input, twice_through_two_views]


@pytest.mark.parametrize("f", _view_updates(), ids=lambda f: f.__name__)
def test_inplace_through_view_of_input_updates_the_input(f):
    # An update of a view of an input updates the input, as in eager: the input's new value is
    # written back into it at the end of the call (before, refused with NotImplementedError).
    jf = thunder.jit(f)
    for seed in (0, 1):  # the second call runs the cached trace
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
        xe, xt = x.clone(), x.clone()
        want, got = f(xe), jf(xt)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xt, xe)
    assert thunder.cache_misses(jf) == 1


def test_inplace_through_view_of_leaf_requiring_grad_raises_as_eager():
    def f(x):
        x[0].mul_(2)
        return x

    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        f(torch.randn(3, requires_grad=True))
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        thunder.jit(f)(torch.randn(3, requires_grad=True))


@pytest.mark.parametrize("case", ["diagonal", "transposed_row", "view_read_after", "module_weight"])
def test_leaf_requiring_grad_updated_through_a_view_under_no_grad(case):
    # eager changes the leaf's values and keeps differentiating to it (it was refused)
    def f(x):
        v = x[:, 1:]  # (taken with grad mode on: read after the update, it differentiates to x)
        with torch.no_grad():
            if case == "diagonal":
                x.diagonal().fill_(1.0)
            elif case == "transposed_row":
                x.t()[1] = 3.0
            else:
                v.mul_(2)
        y = x * x
        return (y[:, 1:] + v * 5) if case == "view_read_after" else y

    if case == "module_weight":
        lin = torch.nn.Linear(4, 4).double()

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = lin

            def forward(self, x):
                with torch.no_grad():
                    self.lin.weight[:, 0].zero_()
                return self.lin(x)

        m1, m2 = M(), copy.deepcopy(M())
        x = torch.randn(2, 4, dtype=torch.float64)
        got, want = thunder.jit(m2)(x), m1(x)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(m2.lin.weight, m1.lin.weight)
        torch.testing.assert_close(m2.lin.weight.grad, m1.lin.weight.grad)
        return
    x1 = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    got, want = thunder.jit(f)(x1), f(x2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x1.detach(), x2.detach())
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, x1, g)[0], torch.autograd.grad(want, x2, g)[0])


def test_a_view_read_after_its_base_changed_sees_the_update():
    def f(x):
        y = x * 1
        v = y[0]
        y.add_(1)
        return v * 2  # eager sees the update through the view

    x = torch.randn(2, 3)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def test_inplace_shape_and_dtype_errors_match_eager():
    def grow(x, y):
        return x.add_(y)

    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        grow(torch.randn(3), torch.randn(2, 3))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        thunder.jit(grow)(torch.randn(3), torch.randn(2, 3))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        grow(torch.arange(3), torch.randn(3))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        thunder.jit(grow)(torch.arange(3), torch.randn(3))


def test_inplace_update_of_an_input_the_backward_needs_is_refused():
    def f(x, w):
        y = x * w  # the gradient of w needs x as it was
        x.add_(1)
        return y.sum()

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"backward needs the value that t_0 held before"):
        thunder.jit(f)(x, w)
    # Without grad there is no backward: it runs, and x is updated.
    with torch.no_grad():
        x2 = x.clone()
        out = thunder.jit(f)(x, w)
        torch.testing.assert_close(out, f(x2, w))
        torch.testing.assert_close(x, x2)


def test_outputs_keep_their_type_after_an_in_place_update():
    # A pytree-registered dict subclass (Hugging Face's ModelOutput, an OrderedDict) returned
    # after an in-place op was rebuilt as a plain dict: T5's, Falcon's and Mixtral's outputs
    # had no `.logits`.
    import collections

    def f(x):
        y = x.clone()
        y.mul_(2)
        return collections.OrderedDict(a=y, b=(y + 1, [y])), {"c": y}

    x = torch.randn(3)
    got, want = thunder.jit(f)(x), f(x)
    assert type(got[0]) is collections.OrderedDict and type(got[1]) is dict
    torch.testing.assert_close(got, want)


def test_requires_grad_can_be_set_on_a_traced_tensor():
    # wav2vec2's feature encoder sets requires_grad on a view of its input in training.
    w = torch.randn(4, requires_grad=True)

    def f(x):
        h = x[:, None]
        h.requires_grad = True
        return (h * w).sum(-1)

    x = torch.randn(3, 1)
    got, want = thunder.jit(f)(x), f(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    g = w.grad.clone()
    w.grad = None
    want.sum().backward()
    torch.testing.assert_close(g, w.grad)


# In-place updates of basic-index views of a tensor made while tracing are written through to
# the base (BEiT's relative position index: `coords[:, :, 0] += n - 1`, then the base read again).
def _relative_coords(x):
    rc = x * 1
    rc[:, :, 0] += 3
    rc[:, :, 1] *= 2
    rc[:, :, 0] *= 5
    return rc.sum(-1), rc


def _nested_views(x):
    rc = x + 0
    v = rc[1]
    w = v[:, 0]
    w += 5  # through two views: rc and v both see it
    v[0:2, 1:] -= 1
    return rc, v * 2


def _view_with_none_and_ellipsis(x):
    y = x.clone()
    y[None, ..., 1] += 1
    y[..., -1].mul_(3)
    return y


def _sized_factories(x):
    z = torch.zeros(size=(x.shape[0] + 1,) * 2, dtype=torch.long)
    z[1:, 1:] = 7
    z[0, 0:] = 3
    z[0:, 0] = 2
    return z, torch.full(size=(2,), fill_value=1.5) + x[0, 0, 0], torch.ones(size=[2]), torch.empty(size=(0,))


@pytest.mark.parametrize("fn", [_relative_coords, _nested_views, _view_with_none_and_ellipsis, _sized_factories],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_update_through_a_basic_view_writes_through(fn, dtype):
    x = (torch.randn(3, 4, 2) * 10).to(dtype)
    got, expected = thunder.jit(fn)(x), fn(x)
    for a, b in zip(got, expected):
        if b.numel():
            torch.testing.assert_close(a, b)
        assert a.shape == b.shape and a.dtype == b.dtype


def test_update_through_a_view_has_eager_gradients():
    def f(x, w):
        y = x * w
        y[:, 0] += w[0]
        y[1:, 1] *= x[0, 0]
        return (y * y).sum()

    x, w = torch.randn(3, 2, requires_grad=True), torch.randn(2, requires_grad=True)
    got = torch.autograd.grad(thunder.jit(f)(x, w), (x, w))
    expected = torch.autograd.grad(f(x, w), (x, w))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_a_sibling_view_taken_before_the_update_is_recomputed():
    def f(x):
        y = x * 1
        s, r = y[:, 1], y[0]
        y[:, 0] += 1  # s is unchanged, r sees the update: both are recomputed from y
        return s + 1, r

    x = torch.randn(2, 3)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def test_a_tensor_indexed_view_is_not_written_through():
    def f(x):
        y = x * 1
        y[torch.tensor([0, 1])].add_(1)  # a copy in eager: y is unchanged
        return y

    x = torch.randn(3, 2)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def test_update_through_a_view_of_an_updated_input_is_written_back():
    # x's value is a new tensor after add_; a view of that value updated in place changes x.
    def f(x):
        x.add_(1)
        x[:, 0] *= 2
        return x.sum()

    x, x2 = torch.randn(3, 2), None
    x2 = x.clone()
    got, expected = thunder.jit(f)(x), f(x2)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, x2)


def test_setitem_at_positions_errors_like_eager():
    def positions(x, pos):
        x[:, pos] = 1.0
        return x

    def two_after_slice(x, i, j):
        x[:, i, j] = 1.0
        return x

    jf = thunder.jit(positions)
    with pytest.raises(IndexError, match="index 6"):
        jf(torch.zeros(2, 6), torch.tensor([6]))
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        jf(torch.zeros(2, 6), torch.tensor([1.0]))
    # int8 and int16 index tensors: eager's IndexError (thunder wrote with them)
    for key in ((slice(None), torch.tensor([1], dtype=torch.int8)), (1, torch.tensor([1], dtype=torch.int16))):
        with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
            thunder.jit(lambda x: x.__setitem__(key, 1.0))(torch.zeros(2, 6))
    # a value of another dtype: eager's index_put_ refuses it where integer tensors index, or a
    # mask with a value of more than one element (thunder converted it); a one-element value
    # under a mask, and basic indexing, convert
    def put(key, value):
        def f(x):
            x[key] = value
            return x
        return f

    f64 = lambda *s: torch.ones(*s, dtype=torch.float64)  # noqa: E731
    for key, value in (((slice(None), torch.tensor([1])), f64(2, 1)), (torch.tensor([0, 1]), f64(())),
                       ((1, [0, 2]), torch.ones(2, dtype=torch.int64)), (torch.tensor([True, False]), f64(6))):
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            put(key, value)(torch.zeros(2, 6))
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            thunder.jit(put(key, value))(torch.zeros(2, 6))
    for key, value in ((torch.tensor([True, False]), f64(1)), (slice(0, 1), f64(6)), (torch.tensor(1), f64(6))):
        torch.testing.assert_close(thunder.jit(put(key, value))(torch.zeros(2, 6)), put(key, value)(torch.zeros(2, 6)))
    # several index tensors after a slice: as eager (it was refused)
    args = (torch.zeros(2, 3, 4), torch.tensor([0, 2]), torch.tensor([1, -1]))
    expected = two_after_slice(*(a.clone() for a in args))
    torch.testing.assert_close(thunder.jit(two_after_slice)(*args), expected)



def test_tensors_set_on_a_given_object_are_real_after_the_call():
    # A cache that creates its tensor on first use, inside the traced call, then updates it in
    # place: after the call the caller's object holds the updated real tensor (not a proxy of the
    # trace), and a later call that is traced again (another shape) reads it.
    class Cache:
        def __init__(self):
            self.buf = None
            self.steps = 0

    def f(cache, x):
        if cache.buf is None:
            cache.buf = torch.zeros(4)
        cache.buf.add_(x.sum(0))
        return x * 2

    cache, ref = Cache(), Cache()
    jf = thunder.jit(f)
    for rows in (3, 3, 3, 5):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(jf(cache, x), f(ref, x))
        assert type(cache.buf) is torch.Tensor
        torch.testing.assert_close(cache.buf, ref.buf)
    # The first trace created the tensor: the second call, finding one, traces again (the kinds of
    # the attributes a trace set join the cache key) instead of replaying that branch; the third
    # replays the second; rows 5 are another signature.
    assert thunder.cache_misses(jf) == 3


# ---- in-place shape changes ---------------------------------------------------------------------
# y.unsqueeze_(1) on a tensor the program made (BigBird's band mask): y has its new shape from then
# on, for ops and for shape questions. Before: "output with shape [2, 3] doesn't match ...".

_RESHAPING = ["unsqueeze_(1)", "squeeze_(0)", "transpose_(0, 1)", "t_()", "swapdims_(0, 1)", "swapaxes_(1, 0)",
              "as_strided_((3, 2), (1, 3))"]


@pytest.mark.parametrize("op", _RESHAPING)
def test_shape_changed_in_place_on_a_made_tensor_matches_eager(op):
    ns = {"torch": torch}
    exec(f"def f(x):\n    y = x * 2\n    y.{op}\n    y.mul_(3)\n"
         f"    return y + 1, tuple(y.shape), y.ndim, y.dim(), tuple(y.size())\n", ns)
    f = ns["f"]
    x = torch.randn(1, 3) if op.startswith("squeeze") else torch.randn(2, 3)
    out, expected = thunder.jit(f)(x), f(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:]


@pytest.mark.parametrize("case", ["input", "viewed"])
def test_shape_changed_in_place_on_an_input_or_a_viewed_tensor_says_so(case):
    def on_input(x):
        x.unsqueeze_(0)
        return x

    def viewed(x):
        y = x * 2
        v = y[0]
        y.t_()
        return v

    fn, what = (on_input, "an input") if case == "input" else (viewed, "a tensor with views")
    with pytest.raises(NotImplementedError, match=f"changes the shape of .* in place, {what}"):
        thunder.jit(fn)(torch.randn(2, 3))


def test_computed_tensor_updated_under_no_grad_keeps_its_gradient_path():
    # y = x * 2, then y.add_(1) with grad off: eager differentiates y as before, at its new values
    # (the update itself is not differentiated); thunder had cut the path (x's gradient was 1).
    def f(x):
        y = x * 2
        with torch.no_grad():
            y.add_(1)
        return (y * y).sum() + x.sum()

    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    got = torch.autograd.grad(thunder.jit(f)(x), x)[0]
    want = torch.autograd.grad(f(x), x)[0]
    torch.testing.assert_close(got, want)  # [13, 21, 29]

    def g(a):
        y = a * 2
        with torch.no_grad():
            y.add_(1)
        return y

    # made from a tensor needing no gradient: still none
    assert not thunder.jit(g)(x.detach()).requires_grad
    assert thunder.jit(g)(x).requires_grad


def test_foreach_updates_take_effect():
    # The optimizers' foreach path: the updated lists were dropped (a fallback call whose result
    # went unused)
    def f(ps, gs, ms):
        torch._foreach_mul_(ms, 0.9)
        torch._foreach_add_(ms, gs)
        out = torch._foreach_add_(ps, ms, alpha=-0.1)
        return sum(p.sum() for p in ps), out

    torch.manual_seed(0)
    ps = [torch.randn(3, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)]
    gs = [torch.randn_like(p) for p in ps]
    ms = [torch.randn_like(p) for p in ps]
    pe, me = [p.clone() for p in ps], [m.clone() for m in ms]
    jf = thunder.jit(f)
    for _ in range(2):
        want, got = f(pe, gs, me), jf(ps, gs, ms)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], ps)
        torch.testing.assert_close(ps, pe)
        torch.testing.assert_close(ms, me)


@pytest.mark.parametrize("op", ["fill_diagonal_", "nn.init.constant_", "nn.init.eye_", "set_"])
def test_inplace_ops_without_an_out_of_place_form_take_effect(op):
    # run by PyTorch on a copy of the target, whose value the target takes
    update = {
        "fill_diagonal_": lambda y: y.fill_diagonal_(0.0),
        "nn.init.constant_": lambda y: torch.nn.init.constant_(y, 0.3),
        "nn.init.eye_": lambda y: torch.nn.init.eye_(y),
        "set_": lambda y: y.set_(torch.ones(3, 3, dtype=y.dtype) * 2),
    }[op]

    def f(x, w):
        y = x * 1
        with torch.no_grad():
            update(x)
        return (y * w).sum() + (x * w).sum()

    x = torch.randn(3, 3, dtype=torch.float64)
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    xe = x.clone()
    want = f(xe, w)
    got = thunder.jit(f)(x, w)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, xe)


def test_fill_diagonal_has_eager_gradients():
    def g(x):
        y = x * 1
        y.fill_diagonal_(0.0)
        return (y * y).sum()

    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(torch.autograd.grad(thunder.jit(g)(x), x)[0], torch.autograd.grad(g(x), x)[0])


def test_random_inplace_ops_draw_at_each_call():
    jf = thunder.jit(lambda x: x.random_(0, 1000) * 1)
    x = torch.zeros(64)
    a = jf(x).clone()
    assert torch.equal(a, x)  # the input was updated
    b = jf(x)
    assert not torch.equal(a, b) and a.max() < 1000 and a.min() >= 0


def test_values_computed_before_an_input_update_are_saved_not_recomputed():
    # y = x * 1 (or x updated first, then used): the backward gets y as computed; recomputing it
    # from x, which the forward overwrites, was refused ("the backward needs the value that t_0
    # held before the function updated it")
    def before(x, w):
        y = x * 1
        with torch.no_grad():
            x.mul_(2)
        return (y * w).sum() + (x * w).sum()

    def after(x, w):
        x.mul_(2)
        return (x * w).sum()

    for f in (before, after):
        x, w = torch.arange(3.0, dtype=torch.float64), torch.ones(3, dtype=torch.float64, requires_grad=True)
        xe = x.clone()
        got = torch.autograd.grad(thunder.jit(f)(x, w), w)[0]
        want = torch.autograd.grad(f(xe, w), w)[0]
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x, xe)

    def needs_the_old_value(x, w):
        y = x * w  # its gradient with respect to w is x's value before the update
        with torch.no_grad():
            x.mul_(2)
        return y.sum()

    x, w = torch.arange(3.0, dtype=torch.float64), torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="the backward needs the value that .* held before"):
        thunder.jit(needs_the_old_value)(x, w)


def test_inputs_sharing_memory_with_an_updated_input_are_refused():
    # f(x, x) with `a.add_(1); return b * 2`: thunder traced a and b as separate values and read b's
    # old value (eager's b is a): refused, naming both, rather than silently wrong
    def f(a, b):
        a.add_(1)
        return b * 2

    jf = thunder.jit(f)
    x = torch.zeros(3)
    torch.testing.assert_close(jf(torch.zeros(3), torch.zeros(3)), torch.zeros(3))
    for other in (x, x[1:], x.view(1, 3)):
        with pytest.raises(NotImplementedError, match=r"updates t_0 in place, and t_1 shares its memory"):
            jf(x, other)
    torch.testing.assert_close(jf(x, x.clone()), torch.zeros(3))  # (separate tensors: fine)
    # a program that only reads may be given one tensor twice
    torch.testing.assert_close(thunder.jit(lambda a, b: a * b)(x, x), x * x)


def test_updating_a_computed_input_that_requires_grad_says_how_to_write_it():
    # A block jitted on its own whose input is computed outside (a non-leaf, which eager updates in
    # place): refused as a leaf's update was, now saying what to write instead.
    block = torch.nn.Linear(3, 3)

    def residual(x):
        x += block(torch.relu(x))
        return x

    x = torch.nn.Linear(2, 3)(torch.randn(4, 2))
    with pytest.raises(RuntimeError, match=r"x = x \+ f\(x\)"):
        thunder.jit(residual)(x)
