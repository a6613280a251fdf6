"""Every mapped torch op through thunder.jit against eager PyTorch on CPU, from the OpInfo table."""

from __future__ import annotations

import re
from numbers import Number

import pytest
import torch

import thunder
from thunder import _C
from thunder.core import outputs, prims
from thunder.core.proxies import _resolve

from opinfos import ALL, CUDA_DTYPES, DEVICE, OPS, f32, i64, is_reflected, opinfos
from opinfos_tensor import opinfos as _tensor_opinfos  # until the OpInfo framework collects opinfos_*.py
opinfos = opinfos + _tensor_opinfos

on_cpu_only = pytest.mark.skipif(DEVICE != "cpu", reason="checks the CPU table (dtypes, errors)")

DTYPE_NAMES = {d: str(d).replace("torch.", "") for d in ALL}


def describe(args, kwargs) -> str:
    def one(x):
        if isinstance(x, torch.Tensor):
            return f"{DTYPE_NAMES.get(x.dtype, x.dtype)}{list(x.shape)}{'' if x.is_contiguous() else ' noncontig'}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(y) for y in x) + "]"
        return repr(x)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


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


def device_dtypes(op):
    """The op's dtypes that the test device runs (float32, bfloat16, float16 on CUDA)."""
    dts = [d for d in op.dtypes if DEVICE == "cpu" or d in CUDA_DTYPES]
    return dts or pytest.skip(f"{op.name}: no dtype for {DEVICE}")


def first_dtype(op):
    if DEVICE != "cpu":  # the GPU table runs in the dtypes CUDA supports for every op
        return next((d for d in CUDA_DTYPES if d in op.dtypes), None) or pytest.skip("no CUDA dtype")
    return f32 if f32 in op.dtypes else (i64 if i64 in op.dtypes else op.dtypes[0])


def tensor_inputs(args, kwargs) -> list[torch.Tensor]:
    """The trace's inputs: the tensors among the flattened arguments, in order."""
    leaves, _ = _C.tree_flatten((args, kwargs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


SHORT_DTYPES = {
    torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
    torch.float64: "f64", torch.complex64: "c64", torch.complex128: "c128",
}


def type_string(t: torch.Tensor) -> str:
    device = f"cuda:{t.device.index or 0}" if t.device.type == "cuda" else t.device.type
    return f"{device} {SHORT_DTYPES[t.dtype]}[{', '.join(str(n) for n in t.shape)}]"


def assert_metadata(src: str, result):
    """The type comments of the trace's outputs describe what the runtime returned."""
    ret = [line.strip() for line in src.split("\n") if line.strip().startswith("return")][-1]
    names = re.findall(r"\b(t_?\w+)\b", ret[len("return"):])
    outs = [x for x in _C.tree_flatten(result)[0] if isinstance(x, torch.Tensor)]
    assert len(names) == len(outs), f"{ret} vs {len(outs)} tensor outputs"
    for name, t in zip(names, outs):
        m = re.search(rf'# {name}: "([^"]*)"', src)
        assert m, f"no type comment for {name}"
        assert m.group(1) == type_string(t), f"trace says {name}: {m.group(1)}, runtime gave {type_string(t)}"


# ---- 1. consistency with eager ------------------------------------------------------------


def _consistency_params():
    for op in opinfos:
        for dtype in op.dtypes:
            if DEVICE != "cpu" and dtype not in CUDA_DTYPES:
                continue
            yield pytest.param(op, dtype, id=f"{op.name}-{DTYPE_NAMES[dtype]}")


def _fused_params():
    # The fuser (C++ kernels on CPU, NVRTC on CUDA) over every op, in float32 and bfloat16.
    for op in opinfos:
        for dtype in (f32, torch.bfloat16):
            if dtype in op.dtypes:
                yield pytest.param(op, dtype, ["fuser"], id=f"{op.name}-{DTYPE_NAMES[dtype]}-fuser")


@pytest.mark.parametrize(
    "op,dtype,executors",
    [pytest.param(op, dtype, None, id=id_) for (op, dtype), id_ in
     ((p.values, p.id) for p in _consistency_params())] + list(_fused_params()),
)
def test_consistency(op, dtype, executors):
    samples = op.samples(dtype)
    assert samples, f"{op.name} has no samples for {dtype}"
    jf = thunder.jit(op.op, executors=executors)
    for args, kwargs in samples:
        what = f"{op.name}{describe(args, kwargs)}"
        try:
            expected = op.op(*args, **kwargs)
        except Exception as e:  # the table is wrong, not thunder
            pytest.fail(f"table error: eager {what} raised {type(e).__name__}: {e}")
        try:
            actual = jf(*args, **kwargs)
        except Exception as e:
            pytest.fail(f"thunder {what} raised {type(e).__name__}: {e}")
        try:
            assert_same(actual, expected, random=op.random, **op.tolerance(dtype))
            assert_metadata(str(thunder.last_traces(jf)[-1]), actual)
            if op.check is not None:
                op.check(actual, args, kwargs)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None


# ---- every PyTorch name of an op: torch.X, Tensor.X, dunders, aliases ---------------------


def _variant_params():
    for op in opinfos:
        for qualname, fn in op.variant_list()[1:]:
            yield pytest.param(op, qualname, fn, id=qualname)


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
    dts = device_dtypes(op)
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


# ---- 2. every trace compiles; the final trace run as Python matches the runtime -----------


@pytest.mark.parametrize("op", opinfos, ids=lambda op: op.name)
def test_final_trace_as_python(op):
    cases = [(first_dtype(op), s) for s in op.samples(first_dtype(op))]
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
        # Fusions (cudaFusion0, ...) are not Python functions: the scope gets callables that
        # launch their compiled kernels, as the runtime does.
        scope: dict = dict(_C.fusion_callables(traces[-1]))
        exec(code, scope)
        torch.manual_seed(1234)
        try:
            # A named tuple or other structured output comes back as thunder's caller rebuilds it.
            result = outputs.finish(scope["computation"](*tensor_inputs(args, kwargs)))
        except Exception as e:
            pytest.fail(f"{what}: the final trace run as Python raised {type(e).__name__}: {e}\n{src}")
        try:
            # Bitwise equal on CPU; CUDA reductions may round their last bit differently.
            tol = dict(rtol=0, atol=0) if DEVICE == "cpu" else dict(rtol=1e-6, atol=1e-7)
            assert_same(result, runtime, random=op.name in ("empty", "empty_like"), **tol)
        except AssertionError as e:
            raise AssertionError(f"{what}: Python and C++ runtime differ: {e}\n{src}") from None


# ---- the decompositions: the computation trace's prims, run through torchex, against eager ----


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


@pytest.mark.parametrize("op,dtype", list(_consistency_params()))
def test_decomposition(op, dtype):
    """The decomposition to prims computes what PyTorch computes (what a fusion executor or
    autodiff sees when the torch executor does not claim the whole op)."""
    from thunder.core import devices, dtypes
    from thunder.executors import torchex

    scope = dict(torch=torch, prims=torchex, dtypes=dtypes, devices=devices)
    jf = thunder.jit(op.op)
    for args, kwargs in op.samples(dtype):
        what = f"{op.name}{describe(args, kwargs)}"
        expected = op.op(*args, **kwargs)
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


# ---- 3. error inputs ------------------------------------------------------------------------


def _error_params():
    for op in opinfos:
        if op.error_inputs:
            yield pytest.param(op, id=op.name)


@on_cpu_only
@pytest.mark.parametrize("op", list(_error_params()))
def test_errors(op):
    errors = op.errors()
    assert errors
    for err in errors:
        what = f"{op.name}{describe(err.args, err.kwargs)}"
        if err.eager_raises:
            with pytest.raises(Exception):
                op.op(*err.args, **err.kwargs)
        jf = thunder.jit(op.op)
        with pytest.raises(err.exc, match=err.match) as info:
            jf(*err.args, **err.kwargs)
        assert "internal error" not in str(info.value), f"{what}: {info.value}"


@on_cpu_only
@pytest.mark.parametrize("op", opinfos, ids=lambda op: op.name)
def test_unsupported_dtypes(op):
    """Where PyTorch refuses a dtype, thunder refuses it too, with a user error; so do the
    dtypes PyTorch takes and thunder documents as unsupported (OpInfo.thunder_unsupported)."""
    for dtype in ALL:
        if dtype in op.dtypes:
            continue
        samples = op.samples(dtype)
        if not samples:
            continue
        args, kwargs = samples[0]
        what = f"{op.name}{describe(args, kwargs)}"
        try:
            op.op(*args, **kwargs)
        except Exception:
            pass
        else:
            if dtype not in op.thunder_unsupported:
                pytest.fail(f"table error: eager {what} works, but {dtype} is not among {op.name}'s dtypes")
        with pytest.raises((RuntimeError, TypeError, ValueError, NotImplementedError)) as info:
            thunder.jit(op.op)(*args, **kwargs)
        assert "internal error" not in str(info.value), f"{what}: {info.value}"


# ---- 4. coverage of the mapped names --------------------------------------------------------


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


# ---- random ops ---------------------------------------------------------------------------


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
