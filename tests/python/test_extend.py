"""thunder.extend: executors written in Python, their operators and implementations, and the
errors a user's callables can cause (each names the executor and the operator, and leaves
thunder usable)."""

import itertools
import re

import numpy as np
import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder import extend
from thunder.extend import FusionExecutor, OperatorExecutor

_ids = itertools.count()


def fresh(prefix="ex"):
    return OperatorExecutor(f"{prefix}{next(_ids)}", version="1.0")


def trace_text(jfn) -> str:
    return str(thunder.last_traces(jfn)[-1])


def call_lines(jfn) -> list[str]:
    """Top-level statements of the final trace (no comments, no del)."""
    out = []
    for line in trace_text(jfn).splitlines():
        if line.startswith("  ") and not line.startswith("   ") and not line.strip().startswith(("#", "del", "return")):
            out.append(line.strip())
    return out


x = torch.randn(3, 4)
y = torch.randn(3, 4)
_REAL = torch.zeros(2)


# ---- registries ------------------------------------------------------------------------------


def test_registry_functions():
    ex = fresh()
    assert extend.get_executor(ex.name) is None
    assert extend.register_executor(ex) is ex
    assert extend.get_executor(ex.name) is ex
    assert ex in extend.get_all_executors()
    torch_ex = extend.get_executor("torch")
    assert torch_ex is not None and torch_ex.name == "torch"
    assert extend.get_always_executors() == (torch_ex,)
    assert torch_ex in extend.get_all_executors()
    assert ex.version == "1.0" and "OperatorExecutor" in repr(ex)

    extend.deregister_executor(ex)
    assert extend.get_executor(ex.name) is None
    assert ex not in extend.get_all_executors()
    # The name is free again.
    again = OperatorExecutor(ex.name)
    assert again.name == ex.name
    with pytest.raises(ValueError, match="always active"):
        extend.deregister_executor("torch")
    with pytest.raises(ValueError, match="unknown executor"):
        extend.deregister_executor("no_such_executor")


def test_duplicate_executor_name():
    ex = fresh()
    with pytest.raises(ValueError, match=f"executor named '{ex.name}' is already registered"):
        OperatorExecutor(ex.name)
    with pytest.raises(ValueError, match="identifier"):
        OperatorExecutor("not a name")


def test_default_executors_used_by_jit():
    ex = fresh()
    calls = []

    def impl(a, b):
        calls.append(1)
        return a * b + 1

    plus1 = ex.register_operator("mul_plus1", like=lambda a, b: a * b + 1, fn=impl)

    def f(a, b):
        return plus1(a, b)

    before = extend.get_default_executors()
    extend.add_default_executor(ex)
    try:
        assert extend.get_default_executors()[0] is ex
        jf = thunder.jit(f)
        torch.testing.assert_close(jf(x, y), x * y + 1)
        assert calls == [1]
        assert " = mul_plus1(t_0, t_1)" in call_lines(jf)[0]
    finally:
        extend.remove_default_executor(ex)
    assert extend.get_default_executors() == before
    # Without the executor the operator is run by its decomposition.
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(x, y), x * y + 1)
    assert calls == [1]
    assert [l.split(" = ")[1].split("(")[0] for l in call_lines(jf)] == ["torch.mul", "torch.add"]

    extend.set_default_executors([ex])
    try:
        assert extend.get_default_executors() == (ex,)
    finally:
        extend.set_default_executors(before)


# ---- operators -------------------------------------------------------------------------------


def test_python_executor_and_torch_in_one_trace():
    ex = fresh()
    seen = []

    def impl(a, b):
        seen.append((a.shape, b.shape))
        return np.multiply(a, b), np.add(a, b)

    mulsum = ex.register_operator("mulsum", like=lambda a, b: (a * b, a + b), fn=impl)

    def f(a, b):
        p, s = mulsum(a.exp(), b)
        return p.sin() + s

    jf = thunder.jit(f, executors=[ex])
    torch.testing.assert_close(jf(x, y), (x.exp() * y).sin() + (x.exp() + y))
    assert seen == [(torch.Size([3, 4]), torch.Size([3, 4]))]
    lines = call_lines(jf)
    heads = [l.split(" = ", 1)[1].split("(")[0] for l in lines]
    assert heads == ["torch.exp", "mulsum", "torch.sin", "torch.add"]
    assert lines[1].startswith("(t1, t2) = mulsum(t0, t_1)")
    # The cached program runs again without tracing.
    torch.testing.assert_close(jf(y, x), (y.exp() * x).sin() + (y.exp() + x))
    assert thunder.cache_misses(jf) == 1 and len(seen) == 2


def test_meta_operator_and_tensor_proxy_api():
    ex = fresh()
    seen = {}

    def meta(a, dim, *, keep=False):
        seen["shape"] = a.shape
        seen["dtype"] = a.dtype
        seen["ndim"] = a.ndim
        seen["cpu"] = a.device.devicetype == DeviceType.CPU
        shape = [s for i, s in enumerate(a.shape) if i != dim]
        return TensorProxy(like=a, shape=shape), TensorProxy(like=a, shape=shape, dtype=torch.int64)

    def impl(a, dim, *, keep=False):
        return torch.max(a, dim, keepdim=keep)

    mymax = ex.register_operator("mymax", meta=meta, fn=impl, tags=["REDUCTION_OP"])
    assert mymax.param_names == ["a", "dim", "keep"]

    def f(a):
        v, i = mymax(a, 1)
        return v * 2, i

    jf = thunder.jit(f, executors=[ex])
    v, i = jf(x)
    torch.testing.assert_close(v, x.max(1).values * 2)
    torch.testing.assert_close(i, x.max(1).indices)
    assert seen == {"shape": torch.Size([3, 4]), "dtype": torch.float32, "ndim": 2, "cpu": True}
    text = trace_text(jf)
    assert "(t0, t1) = mymax(t_0, 1, keep=False)" in text

    # Without its executor a meta-only operator cannot run.
    with pytest.raises(NotImplementedError, match=f"{ex.name}.mymax"):
        thunder.jit(f)(x)


def test_meta_operator_outputs_typed_and_bound_in_the_printed_trace():
    """A multi-output operator registered with a meta function has no subsymbols: its statement
    carries the type comments of the outputs it names, and the printed final trace runs as Python
    with thunder.extend.execution_scope, computing what the runtime computed."""
    ex = fresh()

    def meta(a, k):
        return TensorProxy(like=a, shape=(a.shape[0],)), TensorProxy(like=a, shape=(a.shape[0],), dtype=torch.int64)

    def impl(a, k):
        v, i = torch.topk(a, k, dim=1)
        return v[:, -1].contiguous(), i[:, -1].contiguous()

    kth = ex.register_operator("kth_largest", meta=meta, fn=impl)

    def both(a):
        v, i = kth(a, 2)
        return v + 1, i

    def values_only(a):
        v, _ = kth(a, 2)
        return v

    for f, line in ((both, r'\(t0, t1\) = kth_largest\(t_0, 2\)  # t0: "cpu f32\[3\]"  # t1: "cpu i64\[3\]"\n'),
                    (values_only, r'\(t0, _\) = kth_largest\(t_0, 2\)  # t0: "cpu f32\[3\]"\n')):
        jf = thunder.jit(f, executors=[ex])
        runtime = jf(x)
        trace = thunder.last_traces(jf)[-1]
        text = str(trace)
        assert re.search(line, text), text
        scope = extend.execution_scope(trace)
        assert scope["kth_largest"].__wrapped__ is impl
        exec(compile(text, "<trace>", "exec"), scope)
        got = scope["computation"](x)
        for g, r in zip(got if isinstance(got, tuple) else (got,), runtime if isinstance(runtime, tuple) else (runtime,)):
            torch.testing.assert_close(g, r, rtol=0, atol=0)
        torch.testing.assert_close(runtime[0] if f is both else runtime, impl(x, 2)[0] + (1 if f is both else 0))


def test_tensor_proxy_constructor_checks():
    with pytest.raises(RuntimeError, match="only be called while tracing"):
        TensorProxy(shape=(2,), dtype=torch.float32)
    ex = fresh()
    bad = ex.register_operator("bad_ctor", meta=lambda a: TensorProxy(like=a, shape=(-1,)), fn=lambda a: a)
    with pytest.raises(ValueError, match="non-negative"):
        thunder.jit(lambda a: bad(a), executors=[ex])(x)
    named = ex.register_operator(
        "named", meta=lambda a: TensorProxy("out", shape=(2,), dtype=ltorch.to_thunder_dtype(torch.float64)), fn=lambda a: torch.zeros(2, dtype=torch.float64)
    )
    jf = thunder.jit(lambda a: named(a), executors=[ex])
    torch.testing.assert_close(jf(x), torch.zeros(2, dtype=torch.float64))
    assert 'out = named(t_0)  # out: "cpu f64[2]"' in trace_text(jf)


def test_register_operator_argument_errors():
    ex = fresh()
    with pytest.raises(TypeError, match=f"executor '{ex.name}', operator 'op'.*exactly one of like= and meta="):
        ex.register_operator("op", fn=lambda a: a)
    with pytest.raises(TypeError, match="exactly one"):
        ex.register_operator("op", like=lambda a: a, meta=lambda a: a, fn=lambda a: a)
    with pytest.raises(ValueError, match="unknown tag 'FAST'"):
        ex.register_operator("op", like=lambda a: a * 2, fn=lambda a: a * 2, tags=["FAST"])


def test_register_operator_twice():
    ex = fresh()
    twice = ex.register_operator("twice", like=lambda a: a * 2, fn=lambda a: a * 2)
    with pytest.raises(ValueError, match=f"executor '{ex.name}', operator 'twice' is already registered"):
        ex.register_operator("twice", like=lambda a: a * 3, fn=lambda a: a * 3)
    # The first registration still works.
    jf = thunder.jit(lambda a: twice(a), executors=[ex])
    torch.testing.assert_close(jf(x), x * 2)
    assert "twice(t_0)" in trace_text(jf)


def test_operator_with_varargs_and_defaults():
    ex = fresh()
    got = []

    def impl(a, *scales, offset=0.5):
        got.append((scales, offset))
        out = a
        for s in scales:
            out = out * s
        return out + offset

    def like(a, *scales, offset=0.5):
        out = a
        for s in scales:
            out = out * s
        return out + offset

    scaled = ex.register_operator("scaled", like=like, fn=impl)
    jf = thunder.jit(lambda a: scaled(a, 2.0, 3.0, offset=1.0), executors=[ex])
    torch.testing.assert_close(jf(x), x * 6 + 1)
    assert got == [((2.0, 3.0), 1.0)]


def test_operator_not_active_runs_decomposition():
    ex = fresh()
    called = []
    op = ex.register_operator("op", like=lambda a: a.exp(), fn=lambda a: called.append(1) or a.exp())
    jf = thunder.jit(lambda a: op(a))
    torch.testing.assert_close(jf(x), x.exp())
    assert called == []
    assert call_lines(jf)[0].startswith("t0 = torch.exp(t_0)")


# ---- implementations ---------------------------------------------------------------------------


def test_register_implementation_with_op():
    ex = fresh()
    runs = []

    def impl(a, b):
        runs.append(1)
        return torch.add(a, b)

    myadd = ex.register_operator("myadd", like=lambda a, b: a + b, fn=impl)
    seen = []

    def checker(a, b, *, alpha=1):
        seen.append((type(a), type(b), alpha))
        return isinstance(a, TensorProxy) and isinstance(b, TensorProxy) and alpha == 1

    assert ltorch.add.param_names == ["a", "b", "alpha"]
    # ltorch.add has an alpha parameter: the op takes the same arguments.
    with pytest.raises(TypeError, match="myadd takes 2 arguments but ltorch.add has 3"):
        ex.register_implementation(ltorch.add, myadd, checker=checker)
    myadd = ex.register_operator("myadd3", like=lambda a, b, alpha=1: a + b, fn=lambda a, b, alpha=1: impl(a, b))
    ex.register_implementation(ltorch.add, myadd, checker=checker)
    jf = thunder.jit(lambda a, b: (a + b) + 1.0, executors=[ex])
    torch.testing.assert_close(jf(x, y), x + y + 1.0)
    assert runs == [1]
    lines = call_lines(jf)
    assert f" = {myadd.name}(t_0, t_1, 1)" in lines[0]
    assert " = torch.add(t0, 1.0" in lines[1]  # declined: b is a number
    assert len(seen) == 2 and seen[1][1] is float


def test_register_implementation_errors():
    ex = fresh()
    with pytest.raises(ValueError, match=f"executor '{ex.name}': no symbol named 'ltorch.nope'"):
        ex.register_implementation("ltorch.nope", execution_transform=lambda a: a)
    with pytest.raises(TypeError, match="give op=, execution_transform= or grad_transform="):
        ex.register_implementation(ltorch.sin)
    with pytest.raises(TypeError, match="checker must be callable"):
        ex.register_implementation(ltorch.sin, execution_transform=lambda a: a.sin(), checker=3)
    two = ex.register_operator("two", like=lambda a, b: a * b, fn=lambda a, b: a * b)
    with pytest.raises(TypeError, match="takes 2 arguments but ltorch.sin has 1"):
        ex.register_implementation(ltorch.sin, two)


def test_false_checker_passes_to_next_executor():
    first, second = fresh("first"), fresh("second")
    log = []
    cos1 = first.register_operator("cos1", like=lambda a: a.cos(), fn=lambda a: log.append("first") or a.cos())
    cos2 = second.register_operator("cos2", like=lambda a: a.cos(), fn=lambda a: log.append("second") or a.cos())
    first.register_implementation(ltorch.cos, checker=lambda a: a.ndim == 1, execution_transform=lambda a: cos1(a))
    second.register_implementation(ltorch.cos, checker=lambda a: True, execution_transform=lambda a: cos2(a))

    jf = thunder.jit(lambda a: a.cos(), executors=[first, second])
    torch.testing.assert_close(jf(x), x.cos())
    assert log == ["second"] and call_lines(jf)[0].startswith("t0 = cos2(t_0)")
    torch.testing.assert_close(jf(x[0]), x[0].cos())
    assert log == ["second", "first"] and call_lines(jf)[0].startswith("t0 = cos1(t_0)")

    # Both decline: the torch executor runs it.
    second.register_implementation(ltorch.cos, checker=lambda a: False, execution_transform=lambda a: cos2(a))
    jf = thunder.jit(lambda a: a.cos(), executors=[first, second])
    torch.testing.assert_close(jf(x), x.cos())
    assert call_lines(jf)[0].startswith("t0 = torch.cos(t_0)")


def test_python_executor_torch_and_fuser_in_one_trace():
    ex = fresh()
    mulsum = ex.register_operator(
        "mulsum", like=lambda a, b: (a * b, a + b), fn=lambda a, b: (np.multiply(a, b), np.add(a, b))
    )

    def f(a, b, w):
        p, s = mulsum(a, b)  # the Python executor
        h = (p.exp() * 2 + s).tanh()  # the fuser: one generated kernel
        return h @ w  # the torch executor

    w = torch.randn(4, 5)
    jf = thunder.jit(f, executors=[ex, "fuser"])
    expected = ((x * y).exp() * 2 + (x + y)).tanh() @ w
    torch.testing.assert_close(jf(x, y, w), expected)
    heads = [l.split(" = ", 1)[1].split("(")[0] for l in call_lines(jf)]
    assert heads == ["mulsum", "cpuFusion0", "torch.matmul"], heads


def test_execution_transform_with_torch_calls_around_operator():
    ex = fresh()
    seen = []

    def impl(a):
        seen.append(a.is_contiguous())
        return torch.from_numpy(np.tanh(a.numpy()))

    nptanh = ex.register_operator("nptanh", like=lambda a: a.tanh(), fn=impl)
    ex.register_implementation(ltorch.tanh, execution_transform=lambda a: nptanh(a.contiguous()) * 1.0)
    jf = thunder.jit(lambda a: a.t().tanh(), executors=[ex])
    torch.testing.assert_close(jf(x), x.t().tanh())
    assert seen == [True]
    heads = [l.split(" = ", 1)[1].split("(")[0] for l in call_lines(jf)]
    assert heads[1:] == ["Tensor.contiguous", "nptanh", "torch.mul"]


# ---- errors from user callables ----------------------------------------------------------------


def test_checker_that_raises():
    ex = fresh()
    op = ex.register_operator("negop", like=lambda a: -a, fn=lambda a: -a)
    state = {"raise": True}

    def checker(a):
        if state["raise"]:
            raise KeyError("boom")
        return True

    ex.register_implementation(ltorch.neg, checker=checker, execution_transform=lambda a: op(a))
    jf = thunder.jit(lambda a: -a, executors=[ex])
    with pytest.raises(KeyError, match=f"executor '{ex.name}', operator 'ltorch.neg' \\(checker\\): KeyError"):
        jf(x)
    # Unrelated functions still compile and run.
    torch.testing.assert_close(thunder.jit(lambda a: a + 1)(x), x + 1)
    state["raise"] = False
    torch.testing.assert_close(jf(x), -x)
    assert call_lines(jf)[0].startswith("t0 = negop(t_0)")


def test_checker_that_returns_a_non_bool():
    ex = fresh()
    op = ex.register_operator("absop", like=lambda a: a.abs(), fn=lambda a: a.abs())
    ex.register_implementation(ltorch.abs, checker=lambda a: 1, execution_transform=lambda a: op(a))
    jf = thunder.jit(lambda a: a.abs(), executors=[ex])
    with pytest.raises(TypeError, match=f"executor '{ex.name}', operator 'ltorch.abs': the checker must return a bool, but returned int"):
        jf(x)
    ex.register_implementation(ltorch.abs, checker=lambda a: True, execution_transform=lambda a: op(a))
    torch.testing.assert_close(jf(x), x.abs())


def test_fn_that_raises():
    ex = fresh()
    state = {"raise": True}

    class MyError(Exception):
        pass

    def impl(a):
        if state["raise"]:
            raise MyError("numpy said no")
        return a.sqrt()

    op = ex.register_operator("sqrtop", like=lambda a: a.sqrt(), fn=impl)
    jf = thunder.jit(lambda a: op(a) + 1, executors=[ex])
    with pytest.raises(MyError, match=f"executor '{ex.name}', operator 'sqrtop' \\(fn\\): MyError: numpy said no") as info:
        jf(x.abs())
    assert isinstance(info.value.__cause__, MyError)
    state["raise"] = False
    # The compiled program is cached and runs again.
    torch.testing.assert_close(jf(x.abs()), x.abs().sqrt() + 1)
    assert thunder.cache_misses(jf) == 1


def test_fn_that_returns_the_wrong_structure():
    ex = fresh()
    state = {"out": "one"}

    def impl(a, b):
        if state["out"] == "one":
            return a * b
        if state["out"] == "three":
            return a * b, a, b
        if state["out"] == "number":
            return a * b, 3
        return a * b, a + b

    op = ex.register_operator("pair", like=lambda a, b: (a * b, a + b), fn=impl)
    jf = thunder.jit(lambda a, b: op(a, b), executors=[ex])
    with pytest.raises(TypeError, match=f"executor '{ex.name}', operator 'pair': fn returned a single value, but the operator returns a tuple"):
        jf(x, y)
    state["out"] = "three"
    with pytest.raises(TypeError, match="fn returned 3 values, but the operator has 2 outputs"):
        jf(x, y)
    state["out"] = "number"
    with pytest.raises(TypeError, match="fn returned int for output 1, but the traced call made a tensor there"):
        jf(x, y)
    state["out"] = "ok"
    p, s = jf(x, y)
    torch.testing.assert_close(p, x * y)
    torch.testing.assert_close(s, x + y)


def test_like_that_raises():
    ex = fresh()

    def like(a):
        raise IndexError("bad like")

    op = ex.register_operator("likeop", like=like, fn=lambda a: a)
    with pytest.raises(IndexError, match=f"executor '{ex.name}', operator 'likeop' \\(like\\): IndexError: bad like"):
        thunder.jit(lambda a: op(a), executors=[ex])(x)
    torch.testing.assert_close(thunder.jit(lambda a: a * 2)(x), x * 2)


@pytest.mark.parametrize(
    "meta, match",
    [
        (lambda a: "text", "output 0 is str"),
        (lambda a: _REAL, "output 0 is a torch.Tensor"),
        (lambda a: (TensorProxy(like=a), [TensorProxy(like=a)]), "output 1 is list"),
        (lambda a: {"out": TensorProxy(like=a)}, "output 0 is dict"),
    ],
)
def test_meta_that_returns_the_wrong_structure(meta, match):
    ex = fresh()
    op = ex.register_operator("metaop", meta=meta, fn=lambda a: a.clone())
    with pytest.raises(TypeError, match=f"executor '{ex.name}', operator 'metaop' \\(meta\\): the meta function must return a TensorProxy.*{match}"):
        thunder.jit(lambda a: op(a), executors=[ex])(x)
    torch.testing.assert_close(thunder.jit(lambda a: a - 1)(x), x - 1)


def test_meta_that_returns_its_input():
    ex = fresh()
    op = ex.register_operator("idop", meta=lambda a: a, fn=lambda a: a.clone())
    with pytest.raises(ValueError, match=f"operator 'idop' \\(meta\\): the meta function returned its input t_0"):
        thunder.jit(lambda a: op(a), executors=[ex])(x)


def test_meta_that_raises():
    ex = fresh()

    def meta(a):
        if a.ndim != 1:
            raise ValueError(f"expected a vector, got {a.ndim} dims")
        return TensorProxy(like=a)

    op = ex.register_operator("vecop", meta=meta, fn=lambda a: a * 3)
    jf = thunder.jit(lambda a: op(a), executors=[ex])
    with pytest.raises(ValueError, match=f"executor '{ex.name}', operator 'vecop' \\(meta\\): ValueError: expected a vector, got 2 dims"):
        jf(x)
    torch.testing.assert_close(jf(x[0]), x[0] * 3)


def test_execution_transform_that_raises():
    ex = fresh()

    def transform(a):
        raise RuntimeError("cannot transform")

    ex.register_implementation(ltorch.log, execution_transform=transform)
    jf = thunder.jit(lambda a: a.abs().log(), executors=[ex])
    with pytest.raises(RuntimeError, match=f"executor '{ex.name}', operator 'ltorch.log' \\(execution transform\\): RuntimeError: cannot transform"):
        jf(x)
    extend.deregister_executor(ex)
    with pytest.raises(ValueError, match=f"unknown executor '{ex.name}'"):
        jf(x)
    torch.testing.assert_close(thunder.jit(lambda a: a.abs().log())(x), x.abs().log())


# ---- fusion executors --------------------------------------------------------------------------


def test_fusion_executor_pass():
    seen = []

    class Spy(FusionExecutor):
        def fusion_pass(self, trace):
            seen.append(trace.bound_symbol_names)
            return trace

    spy = Spy(f"spy{next(_ids)}", version=2)
    assert spy.version == 2
    jf = thunder.jit(lambda a: a.sin() + 1, executors=[spy])
    torch.testing.assert_close(jf(x), x.sin() + 1)
    assert seen == [["ltorch.sin", "ltorch.add"]]

    class Bad(FusionExecutor):
        def fusion_pass(self, trace):
            return None

    bad = Bad(f"badfusion{next(_ids)}")
    with pytest.raises(TypeError, match=f"executor '{bad.name}', fusion pass: fusion_pass must return a trace"):
        thunder.jit(lambda a: a.sin(), executors=[bad])(x)
    plain = FusionExecutor(f"plainfusion{next(_ids)}")
    with pytest.raises(NotImplementedError, match="define fusion_pass"):
        thunder.jit(lambda a: a.sin(), executors=[plain])(x)


def test_execution_transform_that_returns_its_input():
    ex = fresh()
    ex.register_implementation(ltorch.exp, execution_transform=lambda a: a)
    jf = thunder.jit(lambda a: a.exp() * 2, executors=[ex])
    with pytest.raises(RuntimeError, match=f"executor '{ex.name}': the execution transform for ltorch.exp returned t_0 for output t0, but did not compute it"):
        jf(x)
    ex.register_implementation(ltorch.exp, execution_transform=lambda a: (a * 0.5).exp() ** 2)
    torch.testing.assert_close(jf(x), x.exp() * 2)
    heads = [l.split(" = ", 1)[1].split("(")[0] for l in call_lines(jf)]
    assert heads == ["torch.mul", "torch.exp", "torch.pow", "torch.mul"]


def test_fn_returning_numpy_arrays():
    ex = fresh()
    op = ex.register_operator("npmul", like=lambda a, b: a * b, fn=lambda a, b: np.multiply(a.numpy(), b.numpy()))
    jf = thunder.jit(lambda a, b: op(a, b) + 1, executors=[ex])
    torch.testing.assert_close(jf(x, y), x * y + 1)


def test_grad_transform_is_handed_to_autodiff(monkeypatch):
    import sys
    import types

    import thunder.core

    try:
        import thunder.core.transforms as transforms
    except ImportError:  # autodiff not built yet: stand in for its module
        transforms = types.ModuleType("thunder.core.transforms")
        monkeypatch.setitem(sys.modules, "thunder.core.transforms", transforms)
        monkeypatch.setattr(thunder.core, "transforms", transforms, raising=False)
    recorded = []
    monkeypatch.setattr(transforms, "_register_executor_grad_transform", lambda *a: recorded.append(a), raising=False)

    ex = fresh()

    def sin_grad(a):
        raise ArithmeticError("no grad today")

    ex.register_implementation(ltorch.sin, grad_transform=sin_grad)
    ((name, sym, fn, checker),) = recorded
    assert name == ex.name and sym.id == "ltorch.sin" and fn.__wrapped__ is sin_grad
    assert checker is None
    with pytest.raises(ArithmeticError, match=f"executor '{ex.name}', operator 'ltorch.sin' \\(grad transform\\): ArithmeticError: no grad today"):
        fn(1.0)
    # A grad transform alone does not claim the symbol for execution.
    jf = thunder.jit(lambda a: a.sin(), executors=[ex])
    torch.testing.assert_close(jf(x), x.sin())
    assert " = torch.sin(t_0)" in call_lines(jf)[0]

    monkeypatch.delattr(transforms, "_register_executor_grad_transform")
    with pytest.raises(NotImplementedError, match="_register_executor_grad_transform"):
        ex.register_implementation(ltorch.sin, grad_transform=sin_grad)


def test_python_kernel_in_a_training_call():
    ex = fresh()
    runs = []

    def impl(a, b):
        runs.append(1)
        return torch.from_numpy(np.multiply(a.detach().numpy(), b.detach().numpy()))

    npmul = ex.register_operator("npmul_train", like=lambda a, b: a * b, fn=impl)
    jf = thunder.jit(lambda a, b: npmul(a, b).sum(), executors=[ex])
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    loss = jf(a, b)
    loss.backward()
    torch.testing.assert_close(loss, (a * b).sum())
    torch.testing.assert_close(a.grad, b)
    assert runs == [1]
    assert " = npmul_train(t_0, t_1)" in call_lines(jf)[0]


def test_checker_sees_which_arguments_are_on_the_gradient_path():
    # A grad transform that gives no gradient to its second argument may claim only calls whose
    # second argument needs none. Here that argument is an intermediate computed from a parameter:
    # its `requires_grad` must say so when the checker runs (it said False for every intermediate,
    # and the parameter silently got no gradient through the call).
    from thunder.core.transforms import get_grad, put_grads

    ex = fresh()
    seen = []

    def checker(a, b):
        seen.append(b.requires_grad)
        return not b.requires_grad

    def grad_transform(a, b):
        out = ltorch.mul(a, b)
        put_grads((a,), (ltorch.mul(get_grad(out), b),))
        return out

    ex.register_implementation(ltorch.mul, checker=checker, grad_transform=grad_transform)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    jf = thunder.jit(lambda x, w: (x * w.exp()).sum(), executors=[ex, *thunder.get_default_executors()])
    jf(x, w).backward()
    torch.testing.assert_close(w.grad, x.detach() * w.detach().exp())
    torch.testing.assert_close(x.grad, w.detach().exp())
    assert True in seen
    # The same call with a constant second argument is claimed, and x's gradient comes from it.
    x.grad = None
    seen.clear()
    jc = thunder.jit(lambda x, c: (x * c.exp()).sum(), executors=[ex, *thunder.get_default_executors()])
    c = torch.randn(3)
    jc(x, c).backward()
    torch.testing.assert_close(x.grad, c.exp())
    assert seen and not any(seen)
