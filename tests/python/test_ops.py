"""Tests generated from the OpInfos (opinfo_framework.py; tables opinfos.py and opinfos_*.py): per op
x executor x device x dtype, thunder.jit against eager PyTorch. `pytest test_ops.py -k NAME` runs
one op's tests (every id starts with the op's name)."""

from __future__ import annotations

import contextlib
import re
from numbers import Number

import pytest
import torch

import thunder
from thunder import _C
from thunder.core import outputs, prims
from thunder.core.proxies import _resolve

from opinfo_framework import (
    CUDA_DTYPES,
    DEVICE,
    EXECUTORS,
    collect_opinfos,
    describe,
    device_dtypes,
    first_dtype,
    is_reflected,
    param,
)

opinfos = collect_opinfos()
DEVICETYPE = DEVICE.split(":")[0]
ON_CPU = DEVICETYPE == "cpu"
on_cpu_only = pytest.mark.skipif(not ON_CPU, reason="checks the CPU table (dtypes, errors)")
f32, f64 = torch.float32, torch.float64


def assert_same(actual, expected, *, random=False, **tol):
    """Same structure, shapes and dtypes; same values (nan == nan) unless random."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual).__name__}"
        assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        assert actual.device == expected.device, f"device {actual.device} != {expected.device}"
        if not random:
            torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"expected a sequence, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{len(actual)} outputs != {len(expected)}"
        for a, e in zip(actual, expected):
            assert_same(a, e, random=random, **tol)
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def tensor_inputs(args, kwargs) -> list[torch.Tensor]:
    """The trace's inputs: the tensors among the flattened arguments, in order."""
    leaves, _ = _C.tree_flatten((args, kwargs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def tensor_leaves(x) -> list[torch.Tensor]:
    return [t for t in _C.tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


SHORT_DTYPES = {
    torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
    torch.float64: "f64", torch.complex64: "c64", torch.complex128: "c128",
}


def type_string(t: torch.Tensor) -> str:
    device = f"cuda:{t.device.index or 0}" if t.device.type == "cuda" else t.device.type
    return f"{device} {SHORT_DTYPES[t.dtype]}[{', '.join(str(n) for n in t.shape)}]"


def assert_metadata(src: str, result):
    """The type comments of the final trace's outputs (shape, dtype, device: what thunder's
    proxies promise; they carry no strides) describe what the runtime returned."""
    ret = [line.strip() for line in src.split("\n") if line.strip().startswith("return")][-1]
    names = re.findall(r"\b(t_?\w+)\b", ret[len("return"):])
    outs = tensor_leaves(result)
    assert len(names) == len(outs), f"{ret} vs {len(outs)} tensor outputs"
    for name, t in zip(names, outs):
        m = re.search(rf'# {name}: "([^"]*)"', src)
        assert m, f"no type comment for {name}"
        assert m.group(1) == type_string(t), f"trace says {name}: {m.group(1)}, runtime gave {type_string(t)}"


def _dtype_executor_params(test_name):
    """op x executor x dtype on the test device: every dtype with the default executors; the fuser
    in one dtype per op on CPU (it compiles C++ per case), in the CUDA dtypes on CUDA."""
    for op in opinfos:
        for dtype in device_dtypes(op):
            yield param(op, test_name, dtype, "default", dtype=dtype, executor="default")
        fuser_dtypes = [first_dtype(op)] if ON_CPU else [d for d in CUDA_DTYPES if d in op.dtypes]
        for dtype in fuser_dtypes:
            if dtype is not None:
                yield param(op, test_name, dtype, "fuser", dtype=dtype, executor="fuser")


# ---- consistency with the reference, and the outputs' metadata ------------------------------------


def _run_sample(op, jf, args, kwargs):
    what = f"{op.name}{describe(args, kwargs)}"
    try:
        expected = op.reference(*args, **kwargs)
    except Exception as e:  # the table is wrong, not thunder
        pytest.fail(f"table error: eager {what} raised {type(e).__name__}: {e}")
    try:
        actual = jf(*args, **kwargs)
    except Exception as e:
        pytest.fail(f"thunder {what} raised {type(e).__name__}: {e}")
    return what, expected, actual


@pytest.mark.parametrize("op,dtype,executor", list(_dtype_executor_params("test_core_vs_torch_consistency")))
def test_core_vs_torch_consistency(op, dtype, executor):
    samples = op.samples(dtype)
    assert samples, f"{op.name} has no samples for {dtype}"
    jf = thunder.jit(op.op, executors=EXECUTORS[executor])
    for args, kwargs in samples:
        what, expected, actual = _run_sample(op, jf, args, kwargs)
        try:
            assert_same(actual, expected, random=op.random, **op.tolerance(dtype))
            if op.check is not None:
                op.check(actual, args, kwargs)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None


@pytest.mark.parametrize("op,dtype,executor", list(_dtype_executor_params("test_output_metadata")))
def test_output_metadata(op, dtype, executor):
    """What the runtime returns has the shape, dtype and device the final trace's outputs say."""
    jf = thunder.jit(op.op, executors=EXECUTORS[executor])
    for args, kwargs in op.samples(dtype):
        what = f"{op.name}{describe(args, kwargs)}"
        try:
            actual = jf(*args, **kwargs)
        except Exception as e:
            pytest.fail(f"thunder {what} raised {type(e).__name__}: {e}")
        try:
            assert_metadata(str(thunder.last_traces(jf)[-1]), actual)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None


# ---- gradients against torch.autograd -------------------------------------------------------------


def _grad_params():
    """float64 with the default executors and the fuser."""
    for op in opinfos:
        if op.supports_grad:
            for executor in ("default", "fuser"):
                yield param(op, "test_vjp_correctness", executor, dtype=f64, executor=executor)


def _lowp_grad_params():
    """float32 (and bfloat16 on CUDA) with the default executors."""
    for op in opinfos:
        if op.supports_grad:
            for dtype in (f32,) if ON_CPU else (f32, torch.bfloat16):
                if dtype in op.dtypes:
                    yield param(op, "test_vjp_correctness_lowp", dtype, dtype=dtype, executor="default")


def _leaves(op, args, kwargs, dtype=None, device=None):
    """A copy of a sample: tensors moved to `device`, floating-point ones converted to `dtype` and
    made leaves requiring grad (but for the keyword arguments in op.no_grad_kwargs)."""

    def one(x, grad):
        if isinstance(x, torch.Tensor):
            x = x.detach().to(device=device or x.device)
            if not x.is_floating_point():
                return x
            return x.to(dtype or x.dtype).clone().requires_grad_(grad)
        if isinstance(x, (list, tuple)):
            return type(x)(one(y, grad) for y in x)
        if isinstance(x, dict):
            return {k: one(v, grad) for k, v in x.items()}
        return x

    return one(args, True), {k: one(v, k not in op.no_grad_kwargs) for k, v in kwargs.items()}


def _outputs_and_grads(fn, args, kwargs, diff, cotangents, who):
    """The differentiable outputs of fn(*args, **kwargs) and the gradients of its inputs that
    require grad, for the cotangents (float64, converted to each output's dtype). For eager
    PyTorch on CUDA, where its CUDA kernels have no derivative for a case (cuDNN batch norm
    without a weight) the reference comes from the same values on the CPU."""
    if who.startswith("eager") and any(t.is_cuda for t in tensor_inputs(args, kwargs)):
        try:
            return _outputs_and_grads_once(fn, args, kwargs, diff, cotangents, who)
        except _Raised:
            cpu_args, cpu_kwargs = _moved(args, "cpu"), _moved(kwargs, "cpu")
            cuda = next(t.device for t in tensor_inputs(args, kwargs) if t.is_cuda)
            got = _outputs_and_grads(fn, cpu_args, cpu_kwargs, diff, [c.cpu() for c in cotangents],
                                     who.replace("eager", "eager (on the CPU)", 1))
            return [None if g is None else g.to(cuda) for g in got]
    return _outputs_and_grads_once(fn, args, kwargs, diff, cotangents, who)


class _Raised(Exception):
    pass


def _moved(x, device):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y
    if isinstance(x, (list, tuple)):
        return type(x)(_moved(y, device) for y in x)
    if isinstance(x, dict):
        return {k: _moved(v, device) for k, v in x.items()}
    return x


def _outputs_and_grads_once(fn, args, kwargs, diff, cotangents, who):
    cuda_retry = who.startswith("eager") and any(t.is_cuda for t in tensor_inputs(args, kwargs))
    try:
        outs = tensor_leaves(fn(*args, **kwargs))
    except Exception as e:
        pytest.fail(f"{who} raised {type(e).__name__}: {e}")
    selected = [outs[i] for i in diff]
    for i, o in zip(diff, selected):
        assert o.requires_grad, f"{who}: output {i} does not require grad"
    wrt = [t for t in tensor_inputs(args, kwargs) if t.requires_grad]
    try:
        grads = torch.autograd.grad(selected, wrt, [c.to(o.dtype) for c, o in zip(cotangents, selected)],
                                    allow_unused=True)
    except Exception as e:
        if cuda_retry:
            raise _Raised() from e
        pytest.fail(f"{who}: backward raised {type(e).__name__}: {e}")
    return selected + list(grads)


def vjp_cases(op, executor, dtype, device=None):
    """Per sample with a differentiable input and output: its description and, per differentiable
    output and per input requiring grad, (label, thunder's, eager's, eager's in float64 from the
    same values). Random cotangents; thunder differentiates real floating-point outputs only."""
    jf = thunder.jit(op.op, executors=EXECUTORS[executor])
    for args, kwargs in op.grad_samples(dtype):
        what = f"{op.name}{describe(args, kwargs)}"
        eargs, ekwargs = _leaves(op, args, kwargs, device=device)
        wrt = [t for t in tensor_inputs(eargs, ekwargs) if t.requires_grad]
        if not wrt:
            continue
        probe = tensor_leaves(op.grad_reference(*eargs, **ekwargs))
        diff = [i for i, o in enumerate(probe) if o.requires_grad and o.is_floating_point()]
        if not diff:
            continue
        cotangents = [torch.randn(probe[i].shape, dtype=f64, device=probe[i].device) for i in diff]
        eager = _outputs_and_grads(op.grad_reference, eargs, ekwargs, diff, cotangents, f"eager {what}")
        thunder_ = _outputs_and_grads(jf, *_leaves(op, args, kwargs, device=device), diff, cotangents,
                                      f"thunder {what}")
        reference = eager if dtype == f64 else _outputs_and_grads(
            op.grad_reference, *_leaves(op, args, kwargs, f64, device), diff, cotangents, f"eager float64 {what}")
        labels = [f"output {i}" for i in diff] + [f"gradient of input {k}" for k in range(len(wrt))]
        yield what, list(zip(labels, thunder_, eager, reference))


def _absent_or_zero(what, label, a, r):
    """Where the reference has no gradient (or an empty one, which thunder may leave as None)."""
    if r is None:
        assert a is None or torch.count_nonzero(a) == 0, f"{what}: {label}: thunder has one, eager none"
        return True
    if a is None and r.numel() == 0:
        return True
    assert a is not None, f"{what}: {label}: thunder has none"
    return False


@pytest.mark.parametrize("op,executor", list(_grad_params()))
def test_vjp_correctness(op, executor):
    """Outputs and vector-Jacobian products with random cotangents against torch.autograd, in
    float64."""
    tested = 0
    for what, entries in vjp_cases(op, executor, f64):
        for label, a, e, _ in entries:
            if _absent_or_zero(what, label, a, e):
                continue
            try:
                # A tolerance is its tensor's dtype's (mixed-dtype samples).
                torch.testing.assert_close(a, e, equal_nan=True, **op.grad_tolerance(e.dtype))
            except AssertionError as err:
                raise AssertionError(f"{what}: {label}: {err}") from None
        tested += 1
    assert tested, f"{op.name}: no sample has a differentiable input and output"


def check_lowp(what, entries, dtype):
    """Thunder's low-precision outputs and gradients against eager's float64 ones from the same
    values: thunder's error is at most twice eager's plus a small multiple of the scale (1e-5 in
    float32, 1% in bfloat16), and in float32 within 1e-4 of the scale whatever eager does."""
    slack = 1e-5 if dtype == f32 else 1e-2
    for label, a, e, r in entries:
        if _absent_or_zero(what, label, a, r):
            continue
        assert a.shape == r.shape and a.dtype == e.dtype, f"{what}: {label}: {a.shape} {a.dtype} vs {e.dtype}"
        if not r.numel():
            continue
        finite = torch.isfinite(r) & torch.isfinite(e.double())
        assert torch.isfinite(a[finite]).all(), f"{what}: {label}: thunder is not finite where eager is"
        if not finite.any():
            continue
        scale = max(1.0, r[finite].abs().max().item())
        t_err = (a.double() - r)[finite].abs().max().item()
        e_err = (e.double() - r)[finite].abs().max().item()
        assert t_err <= 2 * e_err + slack * scale, \
            f"{what}: {label}: thunder error {t_err:.3g} vs eager {e_err:.3g} (scale {scale:.3g})"
        if dtype == f32:
            assert t_err <= 1e-4 * scale, f"{what}: {label}: thunder error {t_err:.3g} (scale {scale:.3g})"


@contextlib.contextmanager
def full_float32():
    """float32 convolutions and matmuls in float32, not TF32: cuDNN convolutions use TF32 by
    default (torch.backends.cudnn.allow_tf32), about 5e-4 relative error, and the float32 bound
    is 1e-4 of the scale. thunder runs them through the same ATen calls, so the flags hold for
    both it and eager."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("op,dtype", list(_lowp_grad_params()))
def test_vjp_correctness_lowp(op, dtype):
    tested = 0
    with full_float32():
        for what, entries in vjp_cases(op, "default", dtype):
            check_lowp(what, entries, dtype)
            tested += 1
    assert tested, f"{op.name}: no sample has a differentiable input and output"


# ---- error inputs ---------------------------------------------------------------------------------


def _error_params():
    for op in opinfos:
        if op.error_inputs:
            yield param(op, "test_errors")


@on_cpu_only
@pytest.mark.parametrize("op", list(_error_params()))
def test_errors(op):
    """Every error input raises its exception type with its message, in eager too where PyTorch
    refuses it, and never as an internal error."""
    errors = op.errors()
    assert errors, f"{op.name}: the error generator yields nothing"
    jf = thunder.jit(op.op)
    for err in errors:
        what = f"{op.name}{describe(err.args, err.kwargs)}"
        if err.eager_raises:
            # eager raises the same type (or a subclass): a caller's `except` catches both
            with pytest.raises(Exception) as eager:
                op.reference(*err.args, **err.kwargs)
            assert isinstance(eager.value, err.exc), (
                f"{what}: eager raises {type(eager.value).__name__}: {eager.value}, thunder is expected "
                f"to raise {err.exc.__name__}")
        with pytest.raises(err.exc, match=err.match) as info:
            jf(*err.args, **err.kwargs)
        assert "internal error" not in str(info.value), f"{what}: {info.value}"


@on_cpu_only
@pytest.mark.parametrize("op", [param(op, "test_unsupported_dtypes") for op in opinfos])
def test_unsupported_dtypes(op):
    """Where PyTorch refuses a dtype, thunder refuses it too, with a user error; so do the
    dtypes PyTorch takes and thunder documents as unsupported (OpInfo.thunder_unsupported)."""
    from opinfos import ALL

    for dtype in ALL:
        if dtype in op.dtypes:
            continue
        samples = op.samples(dtype)
        if not samples:
            continue
        args, kwargs = samples[0]
        what = f"{op.name}{describe(args, kwargs)}"
        try:
            op.reference(*args, **kwargs)
        except Exception:
            pass
        else:
            if dtype not in op.thunder_unsupported:
                pytest.fail(f"table error: eager {what} works, but {dtype} is not among {op.name}'s dtypes")
        with pytest.raises((RuntimeError, TypeError, ValueError, NotImplementedError)) as info:
            thunder.jit(op.op)(*args, **kwargs)
        assert "internal error" not in str(info.value), f"{what}: {info.value}"


# ---- every PyTorch name of an op: torch.X, Tensor.X, dunders, aliases ------------------------------


def _variant_params():
    for op in opinfos:
        for qualname, fn in op.variants_to_test():
            yield pytest.param(op, qualname, fn, marks=op.marks("test_variant", devicetype=DEVICETYPE),
                               id=f"{op.name}-{qualname}")


def _variant_samples(op, qualname, dtype):
    name = qualname.rsplit(".", 1)[-1]
    for args, kwargs in op.samples(dtype):
        if qualname.startswith("torch.Tensor.") and (not args or not isinstance(args[0], torch.Tensor)):
            continue
        if name.startswith("__") and name != "__getitem__":
            if kwargs:
                continue
            if is_reflected(qualname):
                # number OP tensor: the tensor's reflected dunder.
                if len(args) != 2 or not isinstance(args[1], Number):
                    continue
            elif op.name in ("abs", "neg", "bitwise_not"):
                if len(args) != 1:
                    continue
            elif len(args) != 2:
                continue
        yield args, kwargs


@pytest.mark.parametrize("op,qualname,fn", list(_variant_params()))
def test_variant(op, qualname, fn):
    tested = 0
    dts = device_dtypes(op) or pytest.skip(f"{op.name}: no dtype for {DEVICE}")
    for dtype in dict.fromkeys((first_dtype(op), dts[0], dts[-1])):
        jf = thunder.jit(fn)
        for args, kwargs in _variant_samples(op, qualname, dtype):
            what = f"{qualname}{describe(args, kwargs)}"
            try:
                expected = fn(*args, **kwargs)
            except TypeError:
                continue  # a call form this name does not take (e.g. varargs shapes of torch.reshape)
            try:
                actual = jf(*args, **kwargs)
            except Exception as e:
                pytest.fail(f"thunder {what} raised {type(e).__name__}: {e}")
            try:
                assert_same(actual, expected, random=op.random, **op.tolerance(dtype))
            except AssertionError as e:
                raise AssertionError(f"{what}: {e}") from None
            tested += 1
    assert tested > 0, f"no sample of {op.name} exercises {qualname}"


# ---- every trace compiles; the final trace run as Python matches the runtime ---------------------


@pytest.mark.parametrize("op", [param(op, "test_final_trace_as_python") for op in opinfos])
def test_final_trace_as_python(op):
    dt = first_dtype(op) or pytest.skip(f"{op.name}: no dtype for {DEVICE}")
    cases = [(dt, s) for s in op.samples(dt)]
    for dtype in device_dtypes(op):
        cases += [(dtype, s) for s in op.samples(dtype)[:2]]
    for dtype, (args, kwargs) in cases:
        what = f"{op.name}{describe(args, kwargs)}"
        jf = thunder.jit(op.op)
        torch.manual_seed(1234)
        runtime = jf(*args, **kwargs)
        traces = thunder.last_traces(jf)
        assert traces, f"{what}: no traces"
        for i, trace in enumerate(traces):
            src = str(trace)
            try:
                code = compile(src, f"<{op.name} trace {i}>", "exec")
            except SyntaxError as e:
                pytest.fail(f"{what}: trace {i} is not valid Python: {e}\n{src}")
        # Fusions (cudaFusion0, ...) and executors' operators (apex_cross_entropy, ...) are not
        # imported by the program: the scope binds them to what the runtime calls.
        scope: dict = thunder.extend.execution_scope(traces[-1])
        exec(code, scope)
        torch.manual_seed(1234)
        try:
            # A named tuple or other structured output comes back as thunder's caller rebuilds it.
            result = outputs.finish(scope["computation"](*tensor_inputs(args, kwargs)))
        except Exception as e:
            pytest.fail(f"{what}: the final trace run as Python raised {type(e).__name__}: {e}\n{src}")
        try:
            # Bitwise equal on CPU; CUDA reductions may round their last bit differently.
            tol = dict(rtol=0, atol=0) if ON_CPU else dict(rtol=1e-6, atol=1e-7)
            assert_same(result, runtime, random=op.random and op.check is None, **tol)
        except AssertionError as e:
            raise AssertionError(f"{what}: Python and C++ runtime differ: {e}\n{src}") from None


# ---- the decompositions: the computation trace's prims, run through torchex, against eager -------


def prim_program(src: str) -> str:
    """The computation trace as a program of its prims: every statement replaced by the leaves of
    its subsymbol tree (printed as nested comments)."""
    lines = src.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("def computation"))
    body = []
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" ")) - 2) // 2
        text = line.strip()
        if text.startswith("# "):
            if depth == 0:
                continue  # an input's type comment
            text = text[2:]
        body.append((depth, text))
    leaves = [code for i, (d, code) in enumerate(body) if i + 1 == len(body) or body[i + 1][0] <= d]
    for code in leaves:
        assert code.startswith("return") or "= prims." in code, f"not a prim: {code}"
    return "\n".join([lines[start]] + ["  " + code for code in leaves])


def _decomposition_params():
    for op in opinfos:
        for dtype in device_dtypes(op):
            yield param(op, "test_decomposition", dtype, dtype=dtype)


@pytest.mark.parametrize("op,dtype", list(_decomposition_params()))
def test_decomposition(op, dtype):
    """The decomposition to prims computes what PyTorch computes (what a fusion executor or
    autodiff sees when the torch executor does not claim the whole op)."""
    from thunder.core import devices, dtypes
    from thunder.executors import torchex

    scope = dict(torch=torch, prims=torchex, dtypes=dtypes, devices=devices)
    jf = thunder.jit(op.op)
    for args, kwargs in op.samples(dtype):
        what = f"{op.name}{describe(args, kwargs)}"
        expected = op.reference(*args, **kwargs)
        jf(*args, **kwargs)
        src = prim_program(str(thunder.last_traces(jf)[0]))
        exec(compile(src, f"<{op.name} prims>", "exec"), scope)
        actual = outputs.finish(scope["computation"](*tensor_inputs(args, kwargs)))
        try:
            assert_same(actual, expected, random=op.random, **op.tolerance(dtype))
            if op.check is not None:
                op.check(actual, args, kwargs)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}\n{src}") from None


# ---- coverage of the mapped names ---------------------------------------------------------------


def test_all_mapped_names_resolve():
    unresolved = sorted(q for q, _, _ in _C.torch_names() if _resolve(q) is None)
    assert not unresolved, f"mapped names that are not PyTorch callables: {unresolved}"


def test_coverage():
    mapped = {q: sym for q, sym, _ in _C.torch_names() if _resolve(q) is not None}
    covered = {q for op in opinfos for q, _ in op.variant_list()}
    missing = sorted(set(mapped) - covered)
    assert not missing, f"mapped torch names without an OpInfo: {missing}"
    stale = sorted(covered - set(mapped))
    assert not stale, f"OpInfo names that thunder does not map: {stale}"


def test_variants_map_to_one_symbol():
    """All names of one OpInfo map to one ltorch symbol."""
    by_name = {q: sym for q, sym, _ in _C.torch_names()}
    for op in opinfos:
        syms = {by_name[q] for q, _ in op.variant_list() if q in by_name}
        assert len(syms) == 1, f"{op.name} covers several symbols: {sorted(syms)}"


def test_grad_rules_are_tested():
    """Every op whose symbol has a grad rule and floating-point dtypes has its vjp tested."""
    by_name = {q: sym for q, sym, _ in _C.torch_names()}
    untested = []
    for op in opinfos:
        syms = {by_name[q] for q, _ in op.variant_list() if q in by_name}
        if any(_C.has_grad_rule(s) for s in syms) and f64 in op.dtypes and not op.random:
            if not op.supports_grad:
                untested.append(op.name)
    assert not untested, f"ops with a grad rule whose OpInfo does not test the gradient: {untested}"


# ---- random ops ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_uniform_prim(dtype):
    jf = thunder.jit(lambda: prims.uniform((4000,), -2.0, 3.0, device="cpu", dtype=dtype))
    x = jf()
    assert x.shape == (4000,) and x.dtype == dtype
    x = x.double()
    assert x.min() >= -2 and x.max() <= 3
    assert abs(x.mean().item() - 0.5) < 0.15
    assert abs(x.var().item() - 25 / 12) < 0.2
    # Two calls draw different numbers.
    assert not torch.equal(jf(), jf())


def test_rand_follows_the_seed():
    jf = thunder.jit(lambda a: torch.rand(3, 4) + torch.randn_like(a))
    a = torch.zeros(3, 4)
    torch.manual_seed(0)
    x = jf(a)
    torch.manual_seed(0)
    y = jf(a)
    assert torch.equal(x, y)
    assert not torch.equal(x, jf(a))


# ---- docs/ops.md ----------------------------------------------------------------------------------


def test_ops_doc_is_current():
    """docs/ops.md is what tests/python/gen_ops_doc.py writes today."""
    import gen_ops_doc

    with open(gen_ops_doc.DOC) as f:
        current = f.read()
    assert current == gen_ops_doc.render(), "docs/ops.md is out of date: run python tests/python/gen_ops_doc.py"
