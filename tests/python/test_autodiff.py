"""Autodiff: every differentiable op against torch.autograd.grad (float64, CPU), the grad() API of
seed 001, and its errors."""

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


def unit(*shape):
    return t(*shape, low=-0.9, high=0.9)


def idx(high, *shape):
    return torch.randint(0, high, shape)


CE_WEIGHT = pos(4)  # a closure: eager cannot differentiate nll_loss with respect to the weight

# (name, fn, args): every floating tensor argument is differentiated.
CASES = [
    # unary elementwise
    ("abs", torch.abs, [t(3, 4)]),
    ("acos", torch.acos, [unit(3, 4)]),
    ("acosh", torch.acosh, [t(3, 4, low=1.5, high=3.0)]),
    ("asin", torch.asin, [unit(3, 4)]),
    ("asinh", torch.asinh, [t(3, 4)]),
    ("atan", torch.atan, [t(3, 4)]),
    ("atanh", torch.atanh, [unit(3, 4)]),
    ("ceil", torch.ceil, [t(3, 4)]),
    ("floor", torch.floor, [t(3, 4)]),
    ("round", torch.round, [t(3, 4)]),
    ("trunc", torch.trunc, [t(3, 4)]),
    ("sign", torch.sign, [t(3, 4)]),
    ("cos", torch.cos, [t(3, 4)]),
    ("cosh", torch.cosh, [t(3, 4)]),
    ("erf", torch.erf, [t(3, 4)]),
    ("erfc", torch.erfc, [t(3, 4)]),
    ("erfinv", torch.erfinv, [unit(3, 4)]),
    ("exp", torch.exp, [t(3, 4)]),
    ("exp2", torch.exp2, [t(3, 4)]),
    ("expm1", torch.expm1, [t(3, 4)]),
    ("lgamma", torch.lgamma, [pos(3, 4)]),
    ("log", torch.log, [pos(3, 4)]),
    ("log10", torch.log10, [pos(3, 4)]),
    ("log1p", torch.log1p, [pos(3, 4)]),
    ("log2", torch.log2, [pos(3, 4)]),
    ("neg", torch.neg, [t(3, 4)]),
    ("reciprocal", torch.reciprocal, [pos(3, 4)]),
    ("rsqrt", torch.rsqrt, [pos(3, 4)]),
    ("sin", torch.sin, [t(3, 4)]),
    ("sinh", torch.sinh, [t(3, 4)]),
    ("sqrt", torch.sqrt, [pos(3, 4)]),
    ("tan", torch.tan, [unit(3, 4)]),
    ("tanh", torch.tanh, [t(3, 4)]),
    ("sigmoid", torch.sigmoid, [t(3, 4)]),
    ("square", torch.square, [t(3, 4)]),
    # binary elementwise, with broadcasting and numbers
    ("add", torch.add, [t(3, 4), t(4)]),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), [t(3, 4), t(3, 1)]),
    ("add_scalar", lambda a: a + 2.0, [t(3, 4)]),
    ("sub", torch.sub, [t(2, 3, 4), t(3, 1)]),
    ("rsub", lambda a: 1.0 - a, [t(3, 4)]),
    ("mul", torch.mul, [t(3, 4), t(1, 4)]),
    ("mul_same", lambda a: a * a, [t(3, 4)]),
    ("div", torch.div, [t(3, 4), pos(4)]),
    ("rdiv", lambda a: 2.0 / a, [pos(3, 4)]),
    ("pow", torch.pow, [pos(3, 4), t(3, 4)]),
    ("pow_scalar_exp", lambda a: a**3, [t(3, 4)]),
    ("pow_scalar_base", lambda b: torch.pow(2.0, b), [t(3, 4)]),
    ("atan2", torch.atan2, [t(3, 4), t(3, 4)]),
    ("maximum", torch.maximum, [t(3, 4), t(3, 4)]),
    ("minimum", torch.minimum, [t(3, 4), t(4)]),
    ("copysign", torch.copysign, [t(3, 4), t(3, 4)]),
    ("fmod", torch.fmod, [t(3, 4), pos(3, 4)]),
    ("remainder", torch.remainder, [t(3, 4), pos(3, 4)]),
    ("lerp", torch.lerp, [t(3, 4), t(3, 4), t(3, 4)]),
    ("where", lambda c, a, b: torch.where(c, a, b), [t(3, 4) > 0, t(3, 4), t(4)]),
    ("where_scalar", lambda c, a: torch.where(c, a, 0.5), [t(3, 4) > 0, t(3, 4)]),
    ("masked_fill", lambda a, m: a.masked_fill(m, 3.0), [t(3, 4), t(3, 4) > 0]),
    ("clamp", lambda a: torch.clamp(a, -0.5, 0.7), [t(3, 4)]),
    # activations
    ("relu", F.relu, [t(3, 4)]),
    ("relu6", F.relu6, [t(3, 4, low=-3, high=8)]),
    ("gelu", F.gelu, [t(3, 4)]),
    ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [t(3, 4)]),
    ("silu", F.silu, [t(3, 4)]),
    ("softplus", F.softplus, [t(3, 4)]),
    ("leaky_relu", F.leaky_relu, [t(3, 4)]),
    ("elu", F.elu, [t(3, 4)]),
    ("hardswish", F.hardswish, [t(3, 4, low=-4, high=4)]),
    ("mish", F.mish, [t(3, 4)]),
    # conversions
    ("to_float32", lambda a: a.to(torch.float32) * 2, [t(3, 4)]),
    ("type_as", lambda a, b: a.type_as(b) + b, [t(3, 4, dtype=torch.float32), t(3, 4)]),
    # shapes
    ("reshape", lambda a: a.reshape(4, 3), [t(3, 4)]),
    ("view", lambda a: a.view(-1), [t(3, 4)]),
    ("flatten", lambda a: a.flatten(1), [t(2, 3, 4)]),
    ("unsqueeze", lambda a: a.unsqueeze(1), [t(3, 4)]),
    ("squeeze", lambda a: a.squeeze(1), [t(3, 1, 4)]),
    ("permute", lambda a: a.permute(2, 0, 1), [t(2, 3, 4)]),
    ("transpose", lambda a: a.transpose(0, 2), [t(2, 3, 4)]),
    ("t", lambda a: a.t(), [t(3, 4)]),
    ("mT", lambda a: a.mT, [t(2, 3, 4)]),
    ("movedim", lambda a: torch.movedim(a, 0, -1), [t(2, 3, 4)]),
    ("expand", lambda a: a.expand(2, 3, 4), [t(3, 1)]),
    ("broadcast_to", lambda a: torch.broadcast_to(a, (5, 4)), [t(4)]),
    ("contiguous", lambda a: a.t().contiguous(), [t(3, 4)]),
    ("cat", lambda a, b: torch.cat([a, b], 1), [t(3, 2), t(3, 4)]),
    ("stack", lambda a, b: torch.stack([a, b], -1), [t(3, 4), t(3, 4)]),
    ("split", lambda a: torch.split(a, [1, 3], 1), [t(3, 4)]),
    ("chunk", lambda a: torch.chunk(a, 2, 0), [t(4, 3)]),
    ("unbind", lambda a: torch.unbind(a, 1), [t(3, 4)]),
    ("narrow", lambda a: torch.narrow(a, 1, 1, 2), [t(3, 4)]),
    ("flip", lambda a: torch.flip(a, (0, 1)), [t(3, 4)]),
    ("repeat", lambda a: a.repeat(2, 1, 3), [t(3, 4)]),
    ("index_select", lambda a, i: torch.index_select(a, 1, i), [t(3, 4), torch.tensor([0, 2, 2, 3])]),
    ("gather", lambda a, i: torch.gather(a, 1, i), [t(3, 4), idx(4, 3, 5)]),
    ("take_along_dim", lambda a, i: torch.take_along_dim(a, i, 0), [t(3, 4), idx(3, 2, 4)]),
    ("scatter_add", lambda a, i, s: torch.scatter_add(a, 1, i, s), [t(3, 4), idx(4, 3, 2), t(3, 2)]),
    ("pad", lambda a: F.pad(a, (1, 2, 0, 3)), [t(3, 4)]),
    ("pad_negative", lambda a: F.pad(a, (-1, 2, 1, -1)), [t(3, 4)]),
    ("tril", lambda a: torch.tril(a, 1), [t(4, 4)]),
    ("triu", lambda a: torch.triu(a), [t(3, 4)]),
    ("getitem_slices", lambda a: a[1:, ::2], [t(4, 5)]),
    ("getitem_int_none", lambda a: a[1, None, :, -1], [t(3, 4, 5)]),
    ("getitem_ellipsis", lambda a: a[..., 1:3], [t(2, 3, 4)]),
    ("getitem_tensor", lambda a, i: a[i], [t(5, 3), torch.tensor([[0, 4], [4, 1]])]),
    # reductions
    ("sum", torch.sum, [t(3, 4)]),
    ("sum_dim", lambda a: a.sum(1, keepdim=True), [t(3, 4)]),
    ("sum_dims", lambda a: a.sum((0, 2)), [t(2, 3, 4)]),
    ("prod", lambda a: a.prod(1), [t(3, 4)]),
    ("amax", lambda a: a.amax(1), [t(3, 4)]),
    ("amin", lambda a: a.amin((0, 1), keepdim=True), [t(3, 4)]),
    ("amax_ties", lambda a: a.amax(1), [torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=D)]),
    ("mean", lambda a: a.mean(-1), [t(3, 4)]),
    ("var", lambda a: a.var(1), [t(3, 4)]),
    ("var_correction0", lambda a: torch.var(a, (0, 1), correction=0), [t(3, 4)]),
    ("std", lambda a: a.std(0, keepdim=True), [t(3, 4)]),
    ("var_mean", lambda a: torch.var_mean(a, 1), [t(3, 4)]),
    ("logsumexp", lambda a: torch.logsumexp(a, 1), [t(3, 4)]),
    ("softmax", lambda a: torch.softmax(a, -1), [t(3, 4)]),
    ("log_softmax", lambda a: F.log_softmax(a, 0), [t(3, 4)]),
    # matmul
    ("matmul_vv", torch.matmul, [t(4), t(4)]),
    ("matmul_vm", torch.matmul, [t(4), t(4, 3)]),
    ("matmul_mv", torch.matmul, [t(3, 4), t(4)]),
    ("matmul_mm", torch.matmul, [t(3, 4), t(4, 5)]),
    ("matmul_batched_broadcast", torch.matmul, [t(2, 1, 3, 4), t(5, 4, 2)]),
    ("matmul_bv", torch.matmul, [t(2, 3, 4), t(4)]),
    ("matmul_vb", torch.matmul, [t(4), t(2, 4, 3)]),
    ("mm", torch.mm, [t(3, 4), t(4, 2)]),
    ("bmm", torch.bmm, [t(2, 3, 4), t(2, 4, 5)]),
    ("linear", F.linear, [t(2, 3, 4), t(5, 4), t(5)]),
    ("linear_nobias", F.linear, [t(3, 4), t(5, 4)]),
    ("linear_1d_input", F.linear, [t(4), t(5, 4), t(5)]),
    # nn
    ("layer_norm", lambda a, w, b: F.layer_norm(a, (4,), w, b), [t(2, 3, 4), t(4), t(4)]),
    ("layer_norm_2d", lambda a: F.layer_norm(a, (3, 4)), [t(2, 3, 4)]),
    ("rms_norm", lambda a, w: F.rms_norm(a, (4,), w), [t(3, 4), t(4)]),
    ("embedding", F.embedding, [idx(6, 2, 3), t(6, 4)]),
    ("embedding_padding", lambda i, w: F.embedding(i, w, padding_idx=1), [torch.tensor([[1, 2], [3, 1]]), t(6, 4)]),
    ("cross_entropy", F.cross_entropy, [t(5, 7), idx(7, 5)]),
    ("cross_entropy_weight_ignore", lambda a, y: F.cross_entropy(a, y, CE_WEIGHT, ignore_index=2),
     [t(5, 4), torch.tensor([0, 2, 3, 1, 2])]),
    ("cross_entropy_nd_sum", lambda a, y: F.cross_entropy(a, y, reduction="sum"), [t(2, 4, 3), idx(4, 2, 3)]),
    ("nll_loss", lambda a, y: F.nll_loss(a, y, reduction="none"), [t(5, 4), idx(4, 5)]),
    ("mse_loss", F.mse_loss, [t(3, 4), t(3, 4)]),
    ("sdpa", F.scaled_dot_product_attention, [t(2, 2, 5, 4), t(2, 2, 6, 4), t(2, 2, 6, 4)]),
    ("sdpa_causal_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [t(1, 2, 4, 3), t(1, 2, 4, 3), t(1, 2, 4, 3), t(4, 4)]),
    ("sdpa_is_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [t(2, 4, 3), t(2, 4, 3), t(2, 4, 3)]),
    ("dropout_eval", lambda a: F.dropout(a, 0.5, training=False) * 3, [t(3, 4)]),
    # several outputs, some not differentiable
    ("argmax_and_value", lambda a: (a.argmax(1), a.amax(1) * 2), [t(3, 4)]),
    ("chain", lambda a, b: torch.tanh(a @ b).sum(0).exp(), [t(3, 4), t(4, 2)]),
    ("reuse", lambda a: (a.sin() * a).cos() + a, [t(3, 4)]),
    # prod at zeros: no zero, one zero and two zeros in a reduced group
    ("prod_with_zeros", lambda a: (a.prod(-1), a.prod(0), a.prod()),
     [torch.tensor([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 4.0]], dtype=D)]),
    # clamp passes the gradient at its bounds; tensor bounds get the clamped part
    ("clamp_at_bounds", lambda a: torch.clamp(a, -1.0, 1.0) * 3, [torch.tensor([-2.0, -1.0, 0.5, 1.0, 2.0], dtype=D)]),
    ("clamp_tensor_bounds", torch.clamp, [torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], dtype=D), t(5) * 0, t(5) * 0 + 1]),
]


def _requires_grad(args):
    return [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args]


def _float_outputs(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]


@pytest.mark.parametrize("executors", [None, ["fuser"]], ids=["default", "fuser"])
@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_grad_matches_torch_autograd(name, fn, args, executors):
    """Forward and backward against eager; with ["fuser"] the forward and backward traces run
    their fusible regions as generated C++ kernels."""
    eager_args, thunder_args = _requires_grad(args), _requires_grad(args)
    expected = fn(*eager_args)
    actual = thunder.jit(fn, executors=executors)(*thunder_args)
    eager_outs, thunder_outs = _float_outputs(expected), _float_outputs(actual)
    assert len(eager_outs) == len(thunder_outs)
    for e, a in zip(eager_outs, thunder_outs):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
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
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9)


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
