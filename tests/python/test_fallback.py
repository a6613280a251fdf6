"""Torch calls with no thunder symbol fall back to PyTorch, forward and backward; thunder.examine
reports which calls are native, which fall back and which cannot run."""

import re

import numpy as np
import pytest
import torch

import thunder


def _grads(fn, *inputs):
    out = fn(*inputs)
    loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum() for o in (out if isinstance(out, tuple) else (out,)))
    return out, torch.autograd.grad(loss, [x for x in inputs if x.requires_grad])


# Calls with no thunder symbol (chosen among ops thunder is unlikely to map soon).
FALLBACK_CASES = [
    ("i0e", lambda x: torch.special.i0e(x) * 2, ((3, 4),)),
    ("cumulative_trapezoid", lambda x: torch.cumulative_trapezoid(x, dim=1).sin(), ((3, 5),)),
    ("cummax_values", lambda x: torch.cummax(x, 0).values + x, ((4, 3),)),
    ("kron", lambda a, b: torch.kron(a, b).tanh(), ((2, 3), (3, 2))),
    ("method", lambda x: x.i0() * x, ((5,),)),
    ("keyword_only", lambda x: torch.special.multigammaln(x.abs() + 2, 2), ((4,),)),
]


def _matches_eager(fn, shapes):
    """thunder.jit(fn) on float64 inputs of `shapes`: outputs and gradients as eager's, then the
    cached call without gradients. Returns the jitted function and the inputs."""
    torch.manual_seed(0)
    inputs = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]
    jf = thunder.jit(fn)
    out, grads = _grads(jf, *inputs)
    expected, expected_grads = _grads(fn, *inputs)
    torch.testing.assert_close(out, expected)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e)
    with torch.no_grad():
        torch.testing.assert_close(jf(*inputs), fn(*inputs))
    return jf, inputs


@pytest.mark.parametrize("name,fn,shapes", FALLBACK_CASES, ids=[c[0] for c in FALLBACK_CASES])
def test_fallback_forward_and_backward_match_eager(name, fn, shapes):
    _matches_eager(fn, shapes)


def test_fallback_prints_by_its_torch_name_and_backward_calls_pytorch():
    def f(x):
        return torch.cumulative_trapezoid(x, dim=0) * 2

    x = torch.randn(4, requires_grad=True)
    jf = thunder.jit(f)
    with torch.no_grad():
        jf(x)
    fwd = str(thunder.last_traces(jf)[-1])
    assert re.search(r"t0 = torch\.cumulative_trapezoid\(t_0, dim=0\)", fwd), fwd
    # In training the forward also keeps the generator's state, for the backward's rerun.
    jf(x).sum().backward()
    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert re.search(r"\(t0, t\d+\) = torch_cumulative_trapezoid_\d+_rng\(t_0, dim=0\)", fwd), fwd
    assert re.search(r"vjp_torch_cumulative_trapezoid_\d+\(t_0, t\d+, t\d+\)", bwd), bwd


def test_random_fallback_backward_replays_the_forward_random_numbers():
    def f(x):
        return torch.nn.functional.gumbel_softmax(x, tau=0.5) * x  # draws noise; no thunder symbol

    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    jf = thunder.jit(f)
    torch.manual_seed(7)
    out = jf(x)
    (g,) = torch.autograd.grad((out * out).sum(), x)
    after = torch.rand(1)
    torch.manual_seed(7)
    ref = f(x)
    (ref_g,) = torch.autograd.grad((ref * ref).sum(), x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, ref_g)
    # The backward's rerun leaves the generator where the eager program leaves it.
    torch.testing.assert_close(after, torch.rand(1))


def test_fallback_inside_a_module_trains_like_eager():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(6, 6)
            self.b = torch.nn.Linear(6, 2)

        def forward(self, x):
            h = torch.special.i0e(self.a(x))  # no thunder symbol
            return self.b(torch.special.i1e(h))

    torch.manual_seed(0)
    net = Net()
    ref = Net()
    ref.load_state_dict(net.state_dict())
    tnet = thunder.jit(net)
    opt, ref_opt = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 6)
        loss, ref_loss = tnet(x).square().mean(), ref(x).square().mean()
        torch.testing.assert_close(loss, ref_loss)
        loss.backward()
        ref_loss.backward()
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)


def test_fallback_without_a_pytorch_derivative_names_the_op():
    def f(x, q):
        return torch.special.zeta(x, q)  # PyTorch has no derivative for x

    x = torch.rand(3, dtype=torch.float64, requires_grad=True) + 2
    q = torch.rand(3, dtype=torch.float64) + 1
    out = thunder.jit(f)(x, q)
    torch.testing.assert_close(out, f(x, q))
    with pytest.raises(RuntimeError, match=r"gradient of torch\.special\.zeta .*failed.*not implemented"):
        out.sum().backward()


def test_fallback_refuses_data_dependent_shapes():
    with pytest.raises(NotImplementedError, match=r"torch\.unique has no thunder symbol"):
        thunder.jit(lambda x: torch.unique(x))(torch.randn(4))


def test_a_number_read_from_a_tensor_is_refused_by_name():
    # torch.arange of a 0-dim tensor the data decides (one computed from constants alone is known
    # while tracing: test_jit.py).
    def f(x):
        return torch.arange(x.abs().sum().long(), 100) * 2

    with pytest.raises(NotImplementedError, match=r"torch.arange takes a number .* tensor t\d+: cpu i64\[\]"):
        thunder.jit(f)(torch.randn(3))


def test_fallback_with_non_value_constants():
    def f(x):
        return torch.randint_like(x, 10, memory_format=torch.contiguous_format) * 2  # a memory_format argument

    x = torch.randn(2, 3).t()
    jf = thunder.jit(f)
    torch.manual_seed(3)
    out = jf(x)
    torch.manual_seed(3)
    torch.testing.assert_close(out, f(x))


def test_examine_reports_native_fallback_and_failing():
    def f(x):
        y = torch.sin(x) + torch.special.i0e(x)
        y.add_(1)
        n = torch.nonzero(x > 0)
        return y, n

    report = thunder.examine(f, torch.randn(5))
    assert "torch.sin" in report.native and "torch.Tensor.add_" in report.native
    assert "torch.special.i0e" in report.fallback
    assert list(report.failing) == ["torch.nonzero"]
    assert report.num_calls == sum(report.native.values()) + 1 + 1
    assert "1 cannot run" in str(report)


def test_examine_a_cnn_has_no_failing_calls():
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    )
    report = thunder.examine(m, torch.randn(2, 3, 16, 16))
    assert report.failing == {} and report.num_calls >= 7


@pytest.mark.parametrize("case", ["mask", "float_grad", "one_tensor_2d", "negative", "out_of_range"])
def test_getitem_with_index_tensors_runs_atens_index_from_cpp(case):
    # x[i0, i1] with index tensors has no thunder decomposition: the fallback records it, and the
    # runtime runs ATen's index from C++ (no call back into Python): eager's values, gradient and
    # error.
    from thunder.core import fallback

    torch.manual_seed(0)
    if case == "mask":  # transformers' padding mask: mask[batch_idx, kv_idx]
        x = torch.rand(3, 16) > 0.3
        key = (torch.arange(3)[:, None, None, None], torch.arange(16)[None, None, None, :])
    elif case == "float_grad":
        x = torch.randn(4, 3, 2, requires_grad=True)
        key = (torch.tensor([[0], [3]]), torch.tensor([[1, 2]]))
    elif case == "one_tensor_2d":
        x = torch.randn(5, 4)
        key = (torch.tensor([[0, 4], [2, 2]]), torch.tensor([1, 3]))
    elif case == "negative":
        x = torch.randn(4, 3)
        key = (torch.tensor([-1, 0]), torch.tensor([-3, 2]))
    else:
        x = torch.randn(4, 3)
        key = (torch.tensor([0, 4]), torch.tensor([1, 1]))

    def f(x, i, j):
        return x[i, j]

    jf = thunder.jit(f)
    if case == "out_of_range":
        with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
            jf(x, *key)
        return
    out = jf(x, *key)
    assert torch.equal(out, f(x, *key))
    if not x.requires_grad:
        # (a call whose gradient is taken runs the Python function that also saves the random state)
        assert "torch.Tensor.__getitem__(" in str(thunder.last_traces(jf)[-1])
        recorded = fallback._Call(torch.Tensor.__getitem__, "torch.Tensor.__getitem__", (x, key), {}).key()
        assert fallback._symbols[recorded][0].name in fallback._NATIVE
    else:
        g = torch.randn_like(out)
        torch.testing.assert_close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(f(x, *key), x, g)[0])


def test_native_getitem_takes_only_keys_of_tensors():
    from thunder.core import fallback

    t = torch.zeros(2, 3)
    i = torch.tensor([0, 1])
    call = lambda *args: fallback._Call(torch.Tensor.__getitem__, "torch.Tensor.__getitem__", args, {})  # noqa: E731
    assert fallback._native_getitem(call(t, (i, i)))
    assert fallback._native_getitem(call(t, i))
    assert not fallback._native_getitem(call(t, (i, slice(None))))  # a slice: a constant of the symbol
    assert not fallback._native_getitem(call(t, (i, None)))  # mixed: flat leaves
    assert not fallback._native_getitem(fallback._Call(torch.Tensor.__setitem__, "x", (t, i, 1.0), {}))


def test_getitem_keys_of_one_structure_and_other_leaves_get_their_own_symbols():
    # x[1, i] (an int beside a tensor: flat leaves) and x[i, j] (tensors only) have one pytree
    # structure; the second got the first's symbol, with another parameter list (TypeError, shown
    # as getitem's refusal), in any later program of the process.
    i, j = torch.tensor([0, 1]), torch.tensor([2, -1])
    x = torch.randn(4, 5)
    assert torch.equal(thunder.jit(lambda x: x[1, j])(x), x[1, j])
    assert torch.equal(thunder.jit(lambda x: x[i, j])(x), x[i, j])


@pytest.mark.parametrize("key", ["0d_and_tensor", "0d_slice_tensor", "none_tensor", "bool_list", "list_of_lists",
                                 "true", "negative_list", "numpy", "numpy_bools", "range", "tuple_in_tuple",
                                 "list_of_0d_tensors"])
def test_getitem_keys_as_eager_reads_them(key):
    # 0-dim integer tensors are read as ints (meta tensors have no value: refused before), lists of
    # bools are masks known while tracing, a list of lists is a tuple (eager's deprecated reading),
    # True adds a dim, negative positions count from the end
    keys = {
        "0d_and_tensor": (torch.tensor(2), torch.tensor([0, -1])),
        "0d_slice_tensor": (torch.tensor(-1), slice(None), torch.tensor([1, 0])),
        "none_tensor": (None, torch.tensor([0, 1])),
        "bool_list": [True, False, True, False],
        "list_of_lists": [[0, 1], [2, 3]],
        "true": (True, 1),
        "negative_list": [-1, 0, -4],
        # (NumPy arrays and ranges: the lists they spell; were a SystemError and a TypeError)
        "numpy": np.array([3, -1]),
        "numpy_bools": (slice(None), np.array([True, False, True, True, False])),
        "range": (slice(None), range(1, 4)),
        "tuple_in_tuple": ((0, 1),),
        "list_of_0d_tensors": [torch.tensor(1), torch.tensor(2)],
    }
    key = keys[key]

    def f(x):
        return x[key] * 2

    x = torch.randn(4, 5, 3, dtype=torch.float64, requires_grad=True)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a list of lists: eager's deprecation warning)
        want = f(x)
        got = thunder.jit(f)(x)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(want, x, g)[0])


# ---- torch.autograd.Function ----------------------------------------------------------------------


class _RoundSTE(torch.autograd.Function):
    """A straight-through estimator: the forward rounds, the backward passes the gradient where
    |x| < limit (the derivative of the forward's ops would be zero everywhere)."""

    @staticmethod
    def forward(ctx, x, scale, limit=1.0):
        ctx.save_for_backward(x)
        ctx.limit = limit
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.abs() < ctx.limit).to(g.dtype), None, None


class _TanhGelu(torch.autograd.Function):
    """BLOOM's GELU as transformers writes it: an analytic backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)) * g


class _SplitScale(torch.autograd.Function):
    """Two outputs, one of them marked non-differentiable."""

    @staticmethod
    def forward(ctx, x, w, factor):
        ctx.factor = factor
        ctx.save_for_backward(w)
        y = x * w * factor
        mask = y > 0
        ctx.mark_non_differentiable(mask)
        return y, mask

    @staticmethod
    def backward(ctx, gy, gmask):
        (w,) = ctx.saved_tensors
        return gy * w * ctx.factor * 3.0, gy * 0.5, None  # not the forward's derivative: the rule is the author's


AUTOGRAD_FUNCTION_CASES = [
    ("ste", lambda x, w: _RoundSTE.apply(x @ w, 4.0) * 2, ((6, 8), (8, 5))),
    ("ste_three_arguments", lambda x, w: _RoundSTE.apply(x * w, 2.0, 0.5).sin(), ((6, 8), (6, 8))),
    ("gelu", lambda x, w: _TanhGelu.apply(x @ w).sum(-1), ((6, 8), (8, 5))),
    ("two_outputs", lambda x, w: (lambda y, m: (y * m, m))(*_SplitScale.apply(x, w, 0.5)), ((4, 3), (4, 3))),
]


@pytest.mark.parametrize("name,fn,shapes", AUTOGRAD_FUNCTION_CASES, ids=[c[0] for c in AUTOGRAD_FUNCTION_CASES])
def test_autograd_function_runs_its_own_backward(name, fn, shapes):
    # A torch.autograd.Function called with proxies is one fallback call: the forward as PyTorch
    # runs it, the gradient from the author's backward (PyTorch's autograd on a rerun), which here
    # differs from the derivative of the forward's operations.
    jf, inputs = _matches_eager(fn, shapes)
    # The call prints by its name (`t1 = test_fallback._RoundSTE.apply(t0, 4.0)` without gradients).
    assert re.search(r"= test_fallback\._\w+\.apply\(", str(thunder.last_traces(jf)[-1]))
    # Outside thunder.jit, apply is PyTorch's again (for subclasses too).
    out, grads = _grads(fn, *inputs)
    torch.testing.assert_close(out, _grads(jf, *inputs)[0])


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_printed_programs_with_fallback_calls_run(grad):
    # A trace is a runnable program: with thunder.extend.execution_scope, the forward of a call of
    # a custom Function (printed `test_fallback._RoundSTE.apply(...)` without gradients, its
    # random-state-saving form `..._rng(...)` in training) computes what the runtime computed, and
    # the backward's scope binds the call that reruns it for the gradient.
    from thunder import extend

    def fn(x):
        return _TanhGelu.apply(torch.sin(x)) * 2

    x = torch.randn(3, 5, requires_grad=grad)
    jf = thunder.jit(fn)
    want = jf(x)
    fwd = thunder.last_traces(jf)[-1]
    scope = extend.execution_scope(fwd)
    exec(compile(str(fwd), "<forward>", "exec"), scope)
    got = scope["computation"](x.detach())
    torch.testing.assert_close(got[0] if grad else got, want.detach(), rtol=0, atol=0)
    if grad:
        bwd = thunder.last_backward_traces(jf)[-1]
        scope = extend.execution_scope(bwd)
        called = re.findall(r"^  .*= (vjp_\w+)\(", str(bwd), re.M)
        assert called and all(callable(scope.get(n)) for n in called), (called, sorted(scope))


def test_autograd_function_with_data_dependent_forward_names_it():
    class Nonzero(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x[x > 0]

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(NotImplementedError, match="Nonzero.apply"):
        thunder.jit(lambda x: Nonzero.apply(x) * 2)(torch.randn(5))


@pytest.mark.parametrize("case", ["ctc_mean", "ctc_sum", "ctc_none", "cov", "corrcoef", "cov_1d", "cov_weights"])
def test_ops_without_meta_kernels_whose_shapes_the_arguments_decide(case):
    # ctc_loss, cov and corrcoef have no meta kernel: their output metadata comes from a rule
    # (fallback._META_RULES); PyTorch runs them, and their gradients go through torch.autograd
    import torch.nn.functional as F

    tg, il, tl = torch.tensor([[1, 2, 2], [3, 1, 1]]), torch.tensor([6, 6]), torch.tensor([3, 2])
    fns = {
        "ctc_mean": lambda x: F.ctc_loss(x.log_softmax(-1), tg, il, tl),
        "ctc_sum": lambda x: F.ctc_loss(x.log_softmax(-1), tg, il, tl, reduction="sum", zero_infinity=True),
        "ctc_none": lambda x: F.ctc_loss(x.log_softmax(-1), tg, il, tl, reduction="none"),
        "cov": lambda x: torch.cov(x[0].t() * 2),
        "corrcoef": lambda x: x[0].t().corrcoef(),
        "cov_1d": lambda x: torch.cov(x[0, 0]),
        "cov_weights": lambda x: torch.cov(x[0], correction=0, aweights=x[1, 0].abs()),
    }
    fn = fns[case]
    x = torch.randn(6, 2, 5, dtype=torch.float64, requires_grad=True)
    want, got = fn(x), thunder.jit(fn)(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])


# torch.linalg.lstsq has no meta kernel: its outputs' metadata come from a rule (fallback.
# _DEVICE_META_RULES; which outputs are empty depends on the driver, whose default is the
# device's), PyTorch runs it, and the solution's and residuals' gradients go through
# torch.autograd. (A, B shapes, driver)
LSTSQ_CASES = {
    "tall_default": ((5, 3), (5, 2), None),
    "tall_gels": ((5, 3), (5, 2), "gels"),
    "wide_gelsy": ((3, 5), (3, 2), "gelsy"),
    "square_gelsd": ((4, 4), (4, 1), "gelsd"),
    "square_gelss": ((3, 3), (3, 2), "gelss"),
    "wide_gelsd": ((3, 5), (3, 2), "gelsd"),
    "vector_gels": ((5, 3), (5,), "gels"),
    "batched_vector": ((2, 5, 3), (2, 5), "gels"),
    "broadcast_batch": ((1, 5, 3), (2, 5, 2), "gels"),
    "batched_default": ((2, 4, 3), (2, 4, 2), None),
    "empty_rows": ((0, 3), (0, 2), "gels"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", sorted(LSTSQ_CASES))
def test_linalg_lstsq_matches_eager(case, dtype):
    a_shape, b_shape, driver = LSTSQ_CASES[case]
    torch.manual_seed(0)
    a = torch.randn(*a_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(*b_shape, dtype=dtype, requires_grad=True)
    fn = lambda a, b: torch.linalg.lstsq(a, b, driver=driver)  # noqa: E731
    want, got = fn(a, b), thunder.jit(fn)(a, b)
    assert type(got) is type(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        torch.testing.assert_close(g, w)

    def loss(r):
        return (r.solution * torch.linspace(-1, 1, r.solution.numel(), dtype=dtype).reshape(r.solution.shape)).sum() \
            + r.residuals.sum()

    for g, w in zip(torch.autograd.grad(loss(got), (a, b)), torch.autograd.grad(loss(want), (a, b))):
        torch.testing.assert_close(g, w)


LSTSQ_ERRORS = {
    "1d_input": (lambda: (torch.randn(5), torch.randn(5)), {}, RuntimeError, r"input must have at least 2 dimensions"),
    "rows": (lambda: (torch.randn(5, 3), torch.randn(4, 2)), {}, RuntimeError,
             r"input.size\(-2\) should match other.size\(-2\)"),
    "dtypes": (lambda: (torch.randn(5, 3), torch.randn(5, 2, dtype=torch.float64)), {}, RuntimeError,
               r"Expected input and other to have the same dtype"),
    "driver": (lambda: (torch.randn(5, 3), torch.randn(5, 2)), dict(driver="foo"), RuntimeError,
               r"parameter `driver` should be one of"),
    "dims": (lambda: (torch.randn(5, 3), torch.randn(5, 2, 2, 2)), {}, RuntimeError,
             r"input.dim\(\) must be greater or equal to other.dim\(\)"),
    "vector_rows": (lambda: (torch.randn(5, 3), torch.randn(4)), {}, RuntimeError,
                    r"input.size\(-2\) should match other.size\(-1\)"),
    "integers": (lambda: (torch.ones(5, 3, dtype=torch.int32), torch.ones(5, 2, dtype=torch.int32)), {}, RuntimeError,
                 r"doesn't handle types other than float and double"),
    "batch": (lambda: (torch.randn(2, 5, 3), torch.randn(3, 5, 2)), {}, RuntimeError, r"size|broadcast|[Mm]ismatch"),
    # the residuals of gelsd and gelss exist only where every matrix has full rank: a shape that
    # depends on the values (eager runs it)
    "rank_dependent_residuals": (lambda: (torch.randn(5, 3), torch.randn(5, 2)), dict(driver="gelsd"),
                                 NotImplementedError, r"lstsq with driver='gelsd' returns residuals only when"),
}


@pytest.mark.parametrize("case", sorted(LSTSQ_ERRORS))
def test_linalg_lstsq_errors(case):
    make, kwargs, exc, match = LSTSQ_ERRORS[case]
    args = make()
    fn = lambda a, b: torch.linalg.lstsq(a, b, **kwargs)  # noqa: E731
    if exc is RuntimeError:
        with pytest.raises(exc, match=match):
            fn(*args)
    with pytest.raises(exc, match=match):
        thunder.jit(fn)(*args)
