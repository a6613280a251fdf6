"""Autodiff beyond the per-op tables (test_ops.py tests every differentiable OpInfo against
torch.autograd): compositions, known divergences, the grad() API of seed 001, and its errors."""

import re
from numbers import Number

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import thunder
import thunder.torch as ltorch
from thunder.core.transforms import get_grad, grad, put_grad, put_grads

torch.manual_seed(0)
D = torch.float64


def t(*shape, low=-2.0, high=2.0, dtype=D):
    return torch.empty(shape, dtype=dtype).uniform_(low, high)


def pos(*shape):
    return t(*shape, low=0.5, high=2.0)


def idx(high, *shape):
    return torch.randint(0, high, shape)


# Per-op gradients are tested from the OpInfos (test_ops.py::test_vjp_correctness). These are the
# calls that are not one op's sample: reflected operators on numbers, one tensor used twice,
# properties, chains of ops, outputs of which only some are differentiable.
# (name, fn, args): every floating tensor argument is differentiated.
CASES = [
    ("rsub", lambda a: 1.0 - a, [t(3, 4)]),
    ("rdiv", lambda a: 2.0 / a, [pos(3, 4)]),
    ("mul_same", lambda a: a * a, [t(3, 4)]),
    ("mT", lambda a: a.mT, [t(2, 3, 4)]),
    ("argmax_and_value", lambda a: (a.argmax(1), a.amax(1) * 2), [t(3, 4)]),
    ("chain", lambda a, b: torch.tanh(a @ b).sum(0).exp(), [t(3, 4), t(4, 2)]),
    ("reuse", lambda a: (a.sin() * a).cos() + a, [t(3, 4)]),
    # rounded division has a zero gradient, also where the divisor is 0 (issue 14)
    ("floor_division_by_zero", lambda a, b: torch.div(a, b, rounding_mode="floor"),
     [t(4), torch.tensor([0.0, 1.5, 0.0, 2.0], dtype=D)]),
    ("trunc_division_by_zero", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
     [t(4), torch.tensor([0.0, 1.5, 0.0, 2.0], dtype=D)]),
    # where min > max the result is max, so min gets no gradient
    ("clamp_min_above_max", torch.clamp, [t(3), torch.full((3,), 1.0, dtype=D), torch.full((3,), -1.0, dtype=D)]),
    ("clamp_mixed_bounds", torch.clamp, [t(6), torch.tensor([1.0, -1.0, 0.0, 2.0, -3.0, 0.5], dtype=D),
                                         torch.tensor([-1.0, 1.0, 0.0, 3.0, -4.0, 0.5], dtype=D)]),
    # one element with correction 1: a NaN gradient, as eager
    ("var_of_a_0_dim_tensor", lambda a: torch.var(a), [t()]),
    ("std_of_a_0_dim_tensor", lambda a: torch.std(a), [t()]),
]

# Known divergences from eager's gradients (kept out of the OpInfos' gradient samples): each must
# fail until thunder is fixed, then move into the tables.
SCATTER_INDEX = idx(3, 2, 3)
DIVERGENCES = [
    # eager: zero gradient where the index does not reach the source; thunder: a gradient of the
    # index's shape, which torch.autograd refuses
    ("scatter_add_source_larger_than_index", lambda a, s: torch.scatter_add(a, 0, SCATTER_INDEX, s),
     [t(3, 4), t(3, 4)]),
]


def _requires_grad(args):
    return [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args]


def _float_outputs(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]


def _check_against_autograd(fn, args, executors):
    eager_args, thunder_args = _requires_grad(args), _requires_grad(args)
    expected = fn(*eager_args)
    actual = thunder.jit(fn, executors=executors)(*thunder_args)
    eager_outs, thunder_outs = _float_outputs(expected), _float_outputs(actual)
    assert len(eager_outs) == len(thunder_outs)
    for e, a in zip(eager_outs, thunder_outs):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10, equal_nan=True)
        assert a.requires_grad
    cotangents = [torch.randn_like(o) for o in eager_outs]
    wrt_e = [a for a in eager_args if isinstance(a, torch.Tensor) and a.requires_grad]
    wrt_t = [a for a in thunder_args if isinstance(a, torch.Tensor) and a.requires_grad]
    ge = torch.autograd.grad(eager_outs, wrt_e, cotangents, allow_unused=True)
    gt = torch.autograd.grad(thunder_outs, wrt_t, cotangents, allow_unused=True)
    for e, a in zip(ge, gt):
        if e is None:
            assert a is None or torch.count_nonzero(a) == 0
            continue
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_grad_matches_torch_autograd(name, fn, args, executors):
    """Forward and backward against eager; with ["fuser"] the forward and backward traces run
    their fusible regions as generated C++ kernels."""
    _check_against_autograd(fn, args, executors)


@pytest.mark.xfail(strict=True, reason="thunder's gradient differs from eager's here (see DIVERGENCES)")
@pytest.mark.parametrize("name,fn,args", DIVERGENCES, ids=[c[0] for c in DIVERGENCES])
def test_known_gradient_divergences(name, fn, args):
    _check_against_autograd(fn, args, None)


def test_an_op_without_a_gradient_says_so():
    # An executor's operator registered without a grad rule (every differentiable prim has one):
    # differentiating it is a clear error, never a silent zero.
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor, register_executor

    ex = OperatorExecutor("no_grad_rule_ex", version="0.1")
    register_executor(ex)
    double = ex.register_operator("double", meta=lambda a: TensorProxy(like=a), fn=lambda a: a * 2)
    x = t(3).requires_grad_()
    with pytest.raises(NotImplementedError,
                       match=r"thunder cannot differentiate no_grad_rule_ex.double: it has no grad rule"):
        thunder.jit(double, executors=[ex])(x)


def test_scatter_add_with_a_source_larger_than_the_index():
    # Eager autograd rejects this case; the source's gradient is the gathered cotangent, zero
    # where the index does not reach.
    a, i, s = t(3, 4), idx(3, 2, 3), t(3, 4)
    ga, gs = grad(lambda a, s: torch.scatter_add(a, 0, i, s))(a, s)
    torch.testing.assert_close(ga, torch.ones(3, 4, dtype=D))
    expected = torch.zeros(3, 4, dtype=D)
    expected[:2, :3] = 1.0
    torch.testing.assert_close(gs, expected)


def test_grad_api_matches_autograd():
    def f(a, b):
        return (a.sin() * b).sum(), torch.tanh(b)

    a, b = t(3, 4), t(3, 4)
    ga, gb = grad(f)(a, b)
    ea, eb = a.clone().requires_grad_(), b.clone().requires_grad_()
    out1, out2 = f(ea, eb)
    expected = torch.autograd.grad((out1, out2), (ea, eb), (torch.ones_like(out1), torch.ones_like(out2)))
    torch.testing.assert_close(ga, expected[0])
    torch.testing.assert_close(gb, expected[1])


def test_grad_of_input_not_reaching_the_output_is_zero():
    g = grad(lambda a, b: a * 2)(t(2), t(3))
    torch.testing.assert_close(g[0], torch.full((2,), 2.0, dtype=D))
    torch.testing.assert_close(g[1], torch.zeros(3, dtype=D))


def test_grad_without_differentiable_input_raises():
    with pytest.raises(ValueError, match="no differentiable input"):
        grad(lambda i: i * 2)(torch.arange(3))


def test_grad_without_differentiable_output_raises():
    with pytest.raises(ValueError, match="no output of the function depends on a differentiable input"):
        grad(lambda a: a.argmax())(t(3))


def test_get_grad_outside_a_rule_raises():
    with pytest.raises(RuntimeError, match="get_grad can only be called inside a grad rule"):
        get_grad(1)


def test_detach_stops_the_gradient():
    def f(a):
        return a * a.detach()

    a = t(3)
    (g,) = grad(f)(a)
    torch.testing.assert_close(g, a)


@pytest.mark.parametrize("outputs", ["a, a.reshape(-1), a.detach()", "a.detach(), a", "a.detach(), a * 2",
                                     "a, a.detach(), a.detach()"])
def test_an_output_detached_from_another_keeps_the_others_gradient(outputs):
    # Fuzzer family inplace_alias_program, seed 40: `return a, a.detach()` with a requiring grad.
    # The detach runs as nothing, so both outputs were one tensor, and marking the detached one
    # as not differentiable took the gradient from the other too (its backward raised).
    def f(a):
        return eval(outputs)

    a = torch.randn(3, requires_grad=True)
    got, want = thunder.jit(f)(a), f(a)
    assert [x.requires_grad for x in got] == [x.requires_grad for x in want]
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    pick = [i for i, y in enumerate(want) if y.requires_grad]
    cots = [torch.randn(want[i].shape) for i in pick]
    (gt,) = torch.autograd.grad([got[i] for i in pick], [a], cots)
    (ge,) = torch.autograd.grad([want[i] for i in pick], [a], cots)
    torch.testing.assert_close(gt, ge)


# ---- seed 001: the grad cells, as written -----------------------------------------------------

def _calls(trace):
    return [n for n in trace.bound_symbol_names if n != "del"]


def test_seed_001_grad_cells():
    from thunder.core.devices import DeviceType
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor, register_executor

    myex = OperatorExecutor("myex_autodiff_seed", version="0.1")
    register_executor(myex)

    def multimul_impl(a, b, c, d):
        return np.multiply(a, b), np.multiply(c, d)

    def multimul_like(a, b, c, d):
        return a * b, c * d

    multimul = myex.register_operator("multimul", like=multimul_like, fn=multimul_impl)

    def foo(a, b, c, d):
        return multimul(a, b, c, d)

    a = torch.randn((2, 2))
    b = torch.randn((2, 2))
    cfoo = thunder.jit(foo, executors=[myex])
    cfoo(a, b, a, b)

    cfoo_grad = grad(cfoo)
    result = cfoo_grad(a, b, a, b)
    trace = thunder.last_traces(cfoo_grad)[-1]
    assert _calls(trace) == ["torch.full", "torch.mul", "torch.mul", "torch.full", "torch.mul", "torch.mul"]
    text = str(trace)
    assert re.search(r"= torch\.mul\(t_1, (\w+)\).*\n(.*\n)*.*= torch\.mul\(t_0, \1\)", text)
    assert isinstance(result, list) and len(result) == 4
    for r, e in zip(result, (b, a, b, a)):
        torch.testing.assert_close(r, e)

    def mul_to_multimul(a: Number | TensorProxy, b: Number | TensorProxy) -> TensorProxy:
        result, _ = multimul(a, b, 0, 0)
        return result

    def mul_to_multimul_checker(a: Number | TensorProxy, b: Number | TensorProxy) -> bool:
        def is_cpu(x: Number | TensorProxy) -> bool:
            if isinstance(a, TensorProxy):
                return a.device.devicetype == DeviceType.CPU
            return True

        return all(is_cpu(x) for x in (a, b))

    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker, execution_transform=mul_to_multimul)

    def bar(a, b):
        return a * b

    cbar = thunder.jit(bar, executors=[myex])
    cbar(a, b)
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    assert _calls(thunder.last_traces(cbar_grad)[-1]) == ["torch.full", "multimul", "multimul"]
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)

    def mymul_grad(a: TensorProxy, b: TensorProxy) -> TensorProxy:
        fwd = a * b

        g = get_grad(fwd)
        a_grad, b_grad = multimul(b, g, a, g)
        put_grads((a, b), (a_grad, b_grad))

        return fwd

    myex.register_implementation(
        ltorch.mul, checker=mul_to_multimul_checker, execution_transform=mul_to_multimul, grad_transform=mymul_grad
    )
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    trace = thunder.last_traces(cbar_grad)[-1]
    assert _calls(trace) == ["torch.full", "multimul"]
    assert re.search(r"\((\w+), (\w+)\) = multimul\(t_1, (\w+), t_0, \3\)", str(trace))
    assert re.search(r"return \[\w+, \w+\]", str(trace))
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)


def test_python_grad_rule_used_in_training():
    from thunder.extend import OperatorExecutor, register_executor

    ex = OperatorExecutor("autodiff_sin_rule", version="0.1")
    register_executor(ex)
    calls = []

    def sin_grad(a):
        fwd = ltorch.sin(a)
        g = get_grad(fwd)
        calls.append(1)
        put_grad(a, g * ltorch.cos(a) * 3)  # deliberately not sin's derivative
        return fwd

    ex.register_implementation(ltorch.sin, grad_transform=sin_grad)
    x = t(4).requires_grad_()
    y = thunder.jit(lambda a: a.sin(), executors=[ex])(x)
    y.sum().backward()
    assert calls
    torch.testing.assert_close(x.grad, 3 * x.detach().cos())
    # Without the executor, thunder's own rule.
    x.grad = None
    thunder.jit(lambda a: a.sin())(x).sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_fuser_runs_forward_and_backward_regions():
    """The fused variant above is not vacuous: layer norm's forward and backward both run
    generated kernels."""
    a, w, b = _requires_grad([t(4, 16), t(16), t(16)])
    jf = thunder.jit(lambda x, w, b: F.layer_norm(x, (16,), w, b).tanh(), executors=["fuser"])
    jf(a, w, b).sum().backward()
    forward = thunder.last_traces(jf)[-1].bound_symbol_names
    backward = thunder.last_backward_traces(jf)[-1].bound_symbol_names
    assert any(n.startswith("cpuFusion") for n in forward), forward
    assert any(n.startswith("cpuFusion") for n in backward), backward


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("classes", [1, 7])
def test_cross_entropy_rule_matches_eager(reduction, ignore_index, label_smoothing, dtype, classes):
    # The class-index cross-entropy rule (row reductions forward, one pointwise backward), also
    # with bf16 logits upcast by .float() as Llama training code writes it.
    import torch.nn.functional as F

    torch.manual_seed(0)
    x = torch.randn(6, classes, dtype=dtype, requires_grad=True)
    t = torch.randint(0, classes, (6,))
    t[1] = ignore_index if ignore_index < 0 else min(ignore_index, classes - 1)

    def f(x, t):
        return F.cross_entropy(x.float() if x.dtype == torch.bfloat16 else x, t, reduction=reduction,
                               ignore_index=ignore_index, label_smoothing=label_smoothing)

    jf = thunder.jit(f)
    got, want = jf(x, t), f(x, t)
    torch.testing.assert_close(got, want, equal_nan=True)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(want, x, g)[0], equal_nan=True)
    # The backward reads the logits and the per-row log-sum-exp, not [N, C] log-probabilities.
    bw = thunder.last_backward_traces(jf)[-1]
    assert "scatter" not in str(bw) and "log_softmax" not in str(bw)


@pytest.mark.parametrize("name", ["fmin", "fmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fmin_fmax_give_a_tie_gradient_to_self(name, dtype):
    """Eager's fmin/fmax route the whole gradient of a tie (signed zeros included) to `self`, and a
    NaN loses to a number; minimum/maximum split a tie's gradient in two. (Which zero a tie of
    signed zeros returns differs between eager's own float32 and bfloat16 kernels: not compared.)"""
    fn = getattr(torch, name)
    nan = float("nan")
    a0 = torch.tensor([1.0, 0.0, -0.0, nan, 2.0, -1.5, nan], dtype=dtype)
    b0 = torch.tensor([1.0, -0.0, 0.0, 3.0, nan, 4.0, nan], dtype=dtype)
    g = torch.tensor([0.5, 1.5, -2.0, 3.0, 0.25, 1.0, 2.0], dtype=dtype)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    out = thunder.jit(fn)(a, b)
    ga, gb = torch.autograd.grad(out, (a, b), g)
    ea, eb = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    eout = fn(ea, eb)
    ra, rb = torch.autograd.grad(eout, (ea, eb), g)
    torch.testing.assert_close(out, eout, equal_nan=True)
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


# ---- grad mode inside the program ------------------------------------------------------------
# What a program computes with grad mode off records no graph in eager: the gradient does not flow
# through it. Before, thunder differentiated through it (12 where eager gives 6: silently wrong).


@torch.no_grad()
def _scale_of(x):
    return (x * 2).sum()


def _nograd_block(x):
    with torch.no_grad():
        s = (x * 2).sum()
    return (x * s).sum()


def _inference_block(x):
    with torch.inference_mode():
        s = (x * 2).sum()
    return (x * s.clone()).sum()


def _set_grad_enabled_calls(x):
    torch.set_grad_enabled(False)
    s = (x * 2).sum()
    torch.set_grad_enabled(True)
    return (x * s).sum()


def _structured_result(x):
    with torch.no_grad():
        m = torch.max(x, 1)
        values, indices = m.values, m.indices
        a, b = x.split(2, 1)
    return (x * values[:, None]).sum() + indices.sum() + (x[:, :2] * a).sum() + b.sum()


def _enable_grad_inside_no_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            s = (x * 2).sum()
    return (x * s).sum()


@pytest.mark.parametrize("fn", [
    _nograd_block, lambda x: (x * _scale_of(x)).sum(), _inference_block, _set_grad_enabled_calls,
    _structured_result, _enable_grad_inside_no_grad,
], ids=["no_grad", "decorated", "inference_mode", "set_grad_enabled", "structured", "enable_inside"])
def test_values_computed_without_grad_get_no_gradient(fn):
    x = torch.randn(3, 4, requires_grad=True)
    fn(x).backward()
    expected, x.grad = x.grad, None
    thunder.jit(fn)(x).backward()
    torch.testing.assert_close(x.grad, expected)
    assert torch.is_grad_enabled()


def test_buffer_updated_under_no_grad_in_training():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            with torch.no_grad():
                self.calls.add_(1)
                scale = self.lin.weight.norm()
            return self.lin(x) * scale

    m = Counter()
    ref = Counter()
    ref.load_state_dict(m.state_dict())
    tm = thunder.jit(m)
    x = torch.randn(2, 3)
    for _ in range(2):
        tm(x).sum().backward()
        ref(x).sum().backward()
    assert m.calls.item() == ref.calls.item() == 2
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


class _RescalesInForward(torch.nn.Module):
    # transformers' RWKV rescales its weights in place under no_grad inside forward; Gemma3n's
    # AltUp clamps a weight through `.data` in training.
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if self.how == "no_grad":
            with torch.no_grad():
                self.lin.weight.mul_(2)
        else:
            self.lin.weight.data.clamp_(-0.1, 0.1)
        return torch.tanh(self.lin(x))


@pytest.mark.parametrize("how", ["no_grad", "data"])
def test_parameter_updated_without_grad_in_forward_trains_like_eager(how):
    # Eager keeps differentiating with respect to the parameter, at its new values.
    torch.manual_seed(0)
    m = _RescalesInForward(how)
    ref = _RescalesInForward(how)
    ref.load_state_dict(m.state_dict())
    tm = thunder.jit(m)
    for _ in range(2):
        x = torch.randn(3, 4)
        tm(x).sum().backward()
        ref(x).sum().backward()
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, msg=name)
            torch.testing.assert_close(p.grad, q.grad, msg=f"grad {name}")


def test_cat_of_only_empty_tensors_keeps_the_gradient_path():
    # Fuzzer seed 136322: eager skips 1-D empty tensors in cat; with every one skipped, thunder
    # returned the first (a bool tensor) converted, and the result lost the float input's
    # gradient path: backward raised "does not require grad".
    def f(b, a, c):
        return torch.cat([b, a, c]).mean(-1)

    a = torch.zeros(0, requires_grad=True)
    b, c = torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.float64)
    got, want = thunder.jit(f)(b, a, c), f(b, a, c)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got.requires_grad and got.dtype == want.dtype
    torch.testing.assert_close(torch.autograd.grad(got, a), torch.autograd.grad(want, a))
