"""Aliasing after in-place ops, op by op against eager (aliasing.TABLE): an alias-returning op
taken after the update, before it, and the alias itself updated; values and gradients."""

import pytest
import torch

import thunder

# alias-returning ops: name -> fn(y) (y is a contiguous float32 tensor of shape (3, 4))
ALIASES = {
    "contiguous": lambda y: y.contiguous(),
    "to_same": lambda y: y.to(torch.float32),
    "float": lambda y: y.float(),
    "type_as": lambda y: y.type_as(y),
    "reshape": lambda y: y.reshape(12),
    "reshape_same": lambda y: y.reshape(3, 4),
    "view": lambda y: y.view(4, 3),
    "view_as": lambda y: y.view_as(y),
    "expand_as": lambda y: y.expand_as(y),
    "flatten": lambda y: y.flatten(),
    "unsqueeze": lambda y: y.unsqueeze(0),
    "transpose": lambda y: y.transpose(0, 1),
    "permute": lambda y: y.permute(1, 0),
    "t": lambda y: y.t(),
    "getitem": lambda y: y[1:],
    "select": lambda y: y.select(1, 2),
    "narrow": lambda y: y.narrow(1, 1, 2),
    "chunk": lambda y: y.chunk(2, 1)[1],
    "unbind": lambda y: y.unbind(0)[2],
    "detach": lambda y: y.detach(),
    # a diagonal is written back with diagonal_scatter (an update of it was refused)
    "diagonal": lambda y: y.diagonal(),
    "diagonal_offset": lambda y: y.diagonal(1),
    # a 0-dim integer tensor indexes as the int it holds: a view (thunder's copy dropped updates)
    "getitem_0d_tensor": lambda y: y[torch.tensor(1)],
    "getitem_0d_tensor_and_slice": lambda y: y[torch.tensor(-1), 1:],
    # pieces written back as split's (an update of one was refused)
    "hsplit": lambda y: torch.hsplit(y, 2)[1],
    "vsplit": lambda y: torch.vsplit(y, [1])[1],
    "split_with_sizes": lambda y: torch.split_with_sizes(y, [1, 3], 1)[0],
    # of a real tensor: views (H, mH), or the tensor itself (positive, real, conj, resolve_*)
    "ravel": lambda y: y.ravel(),
    "positive": lambda y: y.positive(),
    "H": lambda y: y.H,
    "mH": lambda y: y.mH,
    "real": lambda y: y.real,
    "conj": lambda y: y.conj(),
    "resolve_neg": lambda y: y.resolve_neg(),
}


def _setitem(y):
    y[0] = 5.0
    return y


INPLACE = {
    "add_": lambda y: y.add_(1),
    "mul_": lambda y: y.mul_(2),
    "relu_": lambda y: y.relu_(),
    "clamp_": lambda y: y.clamp_(-0.5, 0.5),
    "leaky_relu": lambda y: torch.nn.functional.leaky_relu(y, 0.1, inplace=True),
    "setitem": _setitem,
    "copy_": lambda y: y.copy_(torch.ones_like(y) * 3),
    "zero_": lambda y: y.zero_(),
    "fill_": lambda y: y.fill_(2.5),
}


def _after(alias, update):
    def f(x):
        y = x * 1
        update(y)
        return alias(y) * 1, y * 1
    return f


def _before(alias, update):
    def f(x):
        y = x * 1
        z = alias(y)
        update(y)
        return z * 1, y * 1
    return f


def _through(alias, update):
    def f(x):
        y = x * 1
        z = alias(y)
        update(z)
        return z * 1, y * 1
    return f


@pytest.mark.parametrize("update", INPLACE, ids=str)
@pytest.mark.parametrize("alias", ALIASES, ids=str)
@pytest.mark.parametrize("order", [_after, _before, _through], ids=lambda f: f.__name__.strip("_"))
def test_alias_after_inplace_matches_eager(order, alias, update):
    fn = order(ALIASES[alias], INPLACE[update])
    # Eager's autograd refuses an in-place update of an output of split/chunk/unbind (or of its base
    # while the output is used); without grad eager runs it, and thunder matches that.
    multi = alias in ("chunk", "unbind", "hsplit", "vsplit", "split_with_sizes") and order is not _after
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=not multi)
    try:
        want = fn(x)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            thunder.jit(fn)(x)
        return
    got = thunder.jit(fn)(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
        assert a.dtype == b.dtype
    # Gradients as eager's; an output with no gradient path (y.zero_()) contributes zeros. Where
    # eager's autograd refuses the backward (an output of split/unbind updated in place), thunder's
    # functional trace has one; only the values are compared then.
    try:
        gw = _grad(want, x)
    except RuntimeError:
        return
    torch.testing.assert_close(_grad(got, x), gw)


def _grad(outs, x):
    loss = sum(o.sum() * (i + 1) for i, o in enumerate(outs) if o.requires_grad)
    if not isinstance(loss, torch.Tensor):
        return torch.zeros_like(x)
    g = torch.autograd.grad(loss, x, allow_unused=True)[0]
    return torch.zeros_like(x) if g is None else g


@pytest.mark.parametrize("part", ["real", "imag", "conj", "view_as_real"])
def test_complex_views_updated_in_place_write_back(part):
    # (view_as_real: its update was refused)
    def f(z):
        w = z * 1
        v = torch.view_as_real(w) if part == "view_as_real" else getattr(w, part) if part != "conj" else w.conj()
        v[..., 1].mul_(2) if part == "view_as_real" else v.mul_(2) if part != "conj" else v.add_(1j)
        return w * 1, v * 1

    z = torch.randn(3, dtype=torch.complex128)
    got, want = thunder.jit(f)(z), f(z)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.resolve_conj())


def test_contiguous_of_a_non_contiguous_tensor_is_a_copy():
    def f(x):
        y = (x * 1).t()
        z = y.contiguous()
        z.add_(1)
        return y * 1, z * 1

    x = torch.randn(3, 4)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


@pytest.mark.parametrize("update", ["clamp_", "add_", "setitem"])
@pytest.mark.parametrize("strided", ["input", "intermediate"])
def test_layout_of_a_tensor_updated_in_place_decides_contiguous_and_reshape(update, strided):
    # An in-place op keeps its tensor's strides: .contiguous() and .reshape() of a strided tensor
    # updated in place copy in eager, though thunder's new value for it is laid out contiguously.
    # Before, they returned the tensor itself, and the copy showed the later updates (fuzzer seed
    # 74850: an input's clamp_, .contiguous(), then a write into the input).
    def f(x):
        t = x if strided == "input" else (x * 1).transpose(0, 1)
        if update == "setitem":
            t[0] = 2.0
        else:
            getattr(t, update)(-1.0) if update == "add_" else t.clamp_(-1.0, 1.0)
        c, r = t.contiguous(), t.reshape(-1)
        t.mul_(10)
        return c * 1, r * 1, t * 1

    base = torch.randn(3, 4, 4, dtype=torch.float64)
    xe, xt = base.clone()[..., ::2], base.clone()[..., ::2]
    torch.testing.assert_close(thunder.jit(f)(xt), f(xe))
    torch.testing.assert_close(xt, xe)


def test_to_with_copy_and_cat_of_one_are_new_tensors():
    def f(x):
        y = x * 1
        a, b = y.to(torch.float32, copy=True), torch.cat([y])
        a.add_(1)
        b.mul_(3)
        y.sub_(1)
        return y * 1, a * 1, b * 1

    x = torch.randn(3, 4)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def test_copy_of_another_tensor_does_not_follow_its_later_updates():
    def f(x):
        y, z = x * 1, x * 2
        y.copy_(z)
        z.add_(1)
        y.mul_(2)
        return y, z

    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def _inf_input():
    return torch.tensor([1.0, float("inf"), -float("inf"), 3.0], requires_grad=True)


def test_update_through_a_detached_view_keeps_infinities():
    # x.detach().mul_(2) changes x's values and x keeps its gradient path; the new values were
    # computed as nv + (x - x.detach()), which is nan wherever x is infinite.
    def f(a):
        t0 = a * 1
        t0.detach().mul_(2)
        return t0 * 3

    a, b = _inf_input(), _inf_input()
    got, want = thunder.jit(f)(a), f(b)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_input_updated_with_grad_off_keeps_infinities():
    # `with torch.no_grad(): w.mul_(2)` in a forward: eager differentiates with respect to w at
    # its new values; thunder's new value must not turn w's infinities into nan.
    def f(x, w):
        with torch.no_grad():
            w.mul_(2)
        return x * w

    x = torch.ones(4)
    w1, w2 = _inf_input(), _inf_input()
    got, want = thunder.jit(f)(x, w1), f(x, w2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(w1.detach(), w2.detach())
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad)


def test_detached_view_updated_from_a_tensor_needing_grad_keeps_that_history():
    # Fuzzer seed 111316: t1 = t0.detach(); t1.copy_(t0) gives t1 the copy's gradient history in
    # eager, and a later in-place update of t0 changes t1's values but not that history.
    def f(a):
        t0 = a * 1
        t1 = t0.detach()
        t1.copy_(t0)
        t3 = t1.reshape(-1)
        torch.nn.functional.leaky_relu(t0, 0.1, inplace=True)
        return t3, t1, t0

    a1 = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    a2 = a1.detach().clone().requires_grad_()
    got, want = thunder.jit(f)(a1), f(a2)
    torch.testing.assert_close(got, want)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
    seeds = [torch.randn_like(t) for t in want]
    torch.testing.assert_close(torch.autograd.grad(got, a1, seeds), torch.autograd.grad(want, a2, seeds))


@pytest.mark.parametrize("form", ["data", "detach"])
def test_an_input_updated_through_its_detach_gives_the_source_no_gradient(form):
    # x.data.copy_(v) changes x's values outside autograd: x + 1 differentiates to x only (v got
    # the gradient through x's new values); the detached tensor itself keeps the copy's history.
    def f(x, v):
        d = x.data if form == "data" else x.detach()
        d.copy_(v)
        return x + 1, d * 2

    args = [torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    ours = [a.detach().clone().requires_grad_() for a in args]
    got, want = thunder.jit(f)(*ours), f(*args)
    torch.testing.assert_close(got, want)
    seeds = [torch.randn_like(t) for t in want]
    torch.testing.assert_close(torch.autograd.grad(got, ours, seeds, allow_unused=True, materialize_grads=True),
                               torch.autograd.grad(want, args, seeds, allow_unused=True, materialize_grads=True))
    torch.testing.assert_close(ours[0].detach(), args[0].detach())


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_update_of_a_leaf_through_a_view_of_its_detach(grad):
    # Fuzzer seed 131614: `a.detach()[..., -1:].add_(1)` updates a leaf that requires grad outside
    # autograd, as eager allows (it refuses a view of the leaf itself); thunder refused it.
    def f(a):
        t1 = a.detach()
        t1[..., -1:].add_(1)
        return a * 2, t1 * 1

    a1 = torch.randn(3, 2).transpose(0, 1).requires_grad_()
    a2 = a1.detach().clone().requires_grad_()
    with torch.set_grad_enabled(grad):
        got, want = thunder.jit(f)(a1), f(a2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a1.detach(), a2.detach())
    if grad:
        seeds = [torch.randn_like(t) for t in want]
        torch.testing.assert_close(torch.autograd.grad(got[0], a1, seeds[0]), torch.autograd.grad(want[0], a2, seeds[0]))


def test_pass_gradient_keeps_values_and_passes_the_gradient_to_both():
    # ltorch.pass_gradient(a, b): a's values (b's infinities do not leak into them), the result's
    # gradient to a and to b; a and b of one shape and dtype.
    import thunder.torch as ltorch

    def f(a, b):
        return ltorch.pass_gradient(a * 1, b) * 3

    a = torch.randn(3, requires_grad=True)
    b = torch.tensor([1.0, float("inf"), -2.0], requires_grad=True)
    out = thunder.jit(f)(a, b)
    torch.testing.assert_close(out, a.detach() * 3)
    out.sum().backward()
    torch.testing.assert_close(a.grad, torch.full((3,), 3.0))
    torch.testing.assert_close(b.grad, torch.full((3,), 3.0))
    with pytest.raises(RuntimeError, match=r"ltorch.pass_gradient: expected a and b of one shape and dtype, "
                                           r"but got cpu f32\[3\] and cpu f32\[4\]"):
        thunder.jit(f)(a, torch.randn(4))


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_update_through_the_detach_of_a_view_of_an_input(grad):
    # Fuzzer seed 145842: `a[0].detach().add_(1)` was taken for an update of `a` itself (as
    # `a.data.add_(1)` is) and failed on the shapes ([3] against []).
    def f(a):
        t = a[0].detach()
        t.add_(1)
        return t * 1, a * 2

    a1 = torch.tensor([float("inf"), 1.0, 2.0], requires_grad=grad)
    a2 = a1.detach().clone().requires_grad_(grad)
    got, want = thunder.jit(f)(a1), f(a2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a1.detach(), a2.detach())
    if grad:
        torch.testing.assert_close(torch.autograd.grad(got[1].sum(), a1), torch.autograd.grad(want[1].sum(), a2))


def test_view_as_complex_updated_in_place_writes_back_with_eager_gradients():
    # an update of view_as_complex(y) changes y (it was refused)
    def f(r):
        y = r * 1
        c = torch.view_as_complex(y)
        c[0] = 5 + 2j
        c.mul_(1j)
        return y.sum(-1)

    r1 = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    r2 = r1.detach().clone().requires_grad_()
    got, want = thunder.jit(f)(r1), f(r2)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, r1, g)[0], torch.autograd.grad(want, r2, g)[0])
