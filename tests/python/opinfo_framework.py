"""The OpInfo framework: what an op's tests need to know about it, and the collection of every
OpInfo table (tests/python/opinfos.py and every tests/python/opinfos_*.py).

An OpInfo describes one op: the callable thunder traces, the PyTorch reference it must agree with,
the dtypes to test, a generator of sample inputs, a generator of error inputs (with the exception
type and message each must raise), whether it is differentiable, tolerances, and test directives
(DecorateInfo: an xfail or skip mark for one generated test, narrowed by dtype, device type and
executor). tests/python/test_ops.py generates the tests from it, per op x executor x device x dtype.

Two spellings are accepted. The one of seed 003:

    OpInfo(ltorch.acos, sample_input_generator=gen, error_input_generator=errors,
           torch_reference=torch.acos, dtypes=..., domain=(-1, 1), supports_grad=True,
           test_directives=(DecorateInfo(pytest.mark.xfail, "test_core_vs_torch_consistency",
                                         dtypes=(torch.float16,)),))

where gen(op, device, dtype, requires_grad, **kw) yields SampleInput(*args, **kwargs) and
errors(op, device, dtype=..., **kw) yields ErrorInput(SampleInput(...), exc_type, match) (or the
tuple (sample, exc_type, match)); and the table's older one:

    OpInfo("relu", ("torch.nn.functional.relu", "torch.relu"), samples, dtypes, error_inputs=errors)

where the variants are PyTorch names (the first is the callable traced and the reference),
samples(dtype) yields (args, kwargs) and errors() yields ErrorInput(args, kwargs, exc, match).
"""

from __future__ import annotations

import importlib
import operator
import os
import sys
from typing import Callable

import pytest
import torch

from thunder import _C
from thunder.core.proxies import _resolve

# The device the tests run on: THUNDER_TEST_DEVICE=cuda runs them on the GPU, in the dtypes below.
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Executor sets of the generated tests: the default list (the torch executor, with the CUDA fuser
# on CUDA) and our fuser (generated C++ on CPU, NVRTC kernels on CUDA).
EXECUTORS = {"default": None, "fuser": ["fuser"]}

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- inputs -------------------------------------------------------------------------------------


class SampleInput:
    """One call of an op: positional and keyword arguments. Unpacks as (args, kwargs)."""

    __slots__ = ("args", "kwargs")

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __iter__(self):
        return iter((self.args, self.kwargs))

    def __repr__(self) -> str:
        return f"SampleInput{describe(self.args, self.kwargs)}"


class ErrorInput:
    """An input the op must refuse with `exc` and a message matching the regex `match`.

    ErrorInput(SampleInput(...), exc, match) or ErrorInput(args, kwargs, exc, match).
    eager_raises=False marks an input PyTorch accepts and thunder refuses (an unsupported feature):
    the tests check eager raises too unless it is False.
    """

    __slots__ = ("sample", "exc", "match", "eager_raises")

    def __init__(self, sample, *rest, eager_raises: bool | None = None):
        if isinstance(sample, SampleInput):
            exc, match, *more = rest
        else:
            kwargs, exc, match, *more = rest
            sample = SampleInput(*sample, **kwargs)
        if more:
            assert len(more) == 1 and eager_raises is None, "ErrorInput: too many arguments"
            eager_raises = more[0]
        self.sample = sample
        self.exc = exc
        self.match = match
        self.eager_raises = True if eager_raises is None else bool(eager_raises)

    @property
    def args(self) -> tuple:
        return self.sample.args

    @property
    def kwargs(self) -> dict:
        return self.sample.kwargs

    exc_type = property(lambda self: self.exc)

    def __repr__(self) -> str:
        return f"ErrorInput({self.sample!r}, {self.exc.__name__}, {self.match!r})"


def _to_error_input(item) -> ErrorInput:
    if isinstance(item, ErrorInput):
        return item
    sample, exc, match, *rest = item  # seed 003's (SampleInput, exc_type, match) tuples
    return ErrorInput(sample, exc, match, *rest)


def _to_sample(item) -> SampleInput:
    if isinstance(item, SampleInput):
        return item
    args, kwargs = item
    return SampleInput(*args, **kwargs)


# ---- test directives ----------------------------------------------------------------------------


def _torch_dtype(d) -> torch.dtype:
    if isinstance(d, torch.dtype):
        return d
    from thunder.core.dtypes import to_torch_dtype

    return to_torch_dtype(d)


def _devicetype_name(d) -> str:
    return d if isinstance(d, str) else d.value  # thunder.core.devices.DeviceType


class DecorateInfo:
    """A pytest mark (pytest.mark.xfail, pytest.mark.skip, or one built with a reason) for one
    generated test of an op, where its dtype, device type and executor are among the given ones
    (None: any). dtypes take torch or thunder dtypes, devicetypes DeviceType or "cpu"/"cuda",
    executors the names of EXECUTORS."""

    def __init__(self, decorator, test_name: str, *, dtypes=None, devicetypes=None, executors=None,
                 active_if: bool = True):
        self.decorator = decorator
        self.test_name = test_name
        self.dtypes = None if dtypes is None else {_torch_dtype(d) for d in dtypes}
        self.devicetypes = None if devicetypes is None else {_devicetype_name(d) for d in devicetypes}
        self.executors = None if executors is None else set(executors)
        unknown = (self.executors or set()) - set(EXECUTORS)
        assert not unknown, f"DecorateInfo: unknown executors {sorted(unknown)}"
        self.active_if = active_if

    def applies(self, test_name: str, dtype=None, devicetype: str | None = None,
                executor: str | None = None) -> bool:
        return (
            self.active_if
            and test_name == self.test_name
            and (self.dtypes is None or dtype is None or dtype in self.dtypes)
            and (self.devicetypes is None or devicetype is None or devicetype in self.devicetypes)
            and (self.executors is None or executor is None or executor in self.executors)
        )


# ---- the OpInfo ---------------------------------------------------------------------------------


def _dunder(name):
    reflected = {
        "__radd__": operator.add, "__rsub__": operator.sub, "__rmul__": operator.mul,
        "__rtruediv__": operator.truediv, "__rdiv__": operator.truediv, "__rfloordiv__": operator.floordiv,
        "__rmod__": operator.mod,
        "__rpow__": operator.pow, "__rand__": operator.and_, "__ror__": operator.or_, "__rxor__": operator.xor,
    }
    if name in reflected:
        f = reflected[name]
        return lambda a, b: f(b, a)
    plain = {
        "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
        "__truediv__": operator.truediv, "__floordiv__": operator.floordiv, "__mod__": operator.mod,
        "__pow__": operator.pow, "__and__": operator.and_, "__or__": operator.or_, "__xor__": operator.xor,
        "__matmul__": operator.matmul, "__eq__": operator.eq, "__ne__": operator.ne, "__lt__": operator.lt,
        "__le__": operator.le, "__gt__": operator.gt, "__ge__": operator.ge, "__getitem__": operator.getitem,
        "__abs__": operator.abs, "__neg__": operator.neg, "__invert__": operator.invert,
    }
    return plain[name]


def variant_callable(qualname: str) -> Callable:
    """The callable that exercises one PyTorch name: a method call for torch.Tensor.X, the Python
    operator for a dunder (reflected dunders are called as `number OP tensor`), else the object."""
    if qualname.startswith("torch.Tensor."):
        name = qualname[len("torch.Tensor."):]
        if name.startswith("__"):
            return _dunder(name)
        return lambda a, *args, **kwargs: getattr(a, name)(*args, **kwargs)
    obj = _resolve(qualname)
    assert obj is not None, f"{qualname} does not resolve"
    return obj


def is_reflected(qualname: str) -> bool:
    return qualname.startswith("torch.Tensor.__r") and qualname not in ("torch.Tensor.__rshift__",)


def _torch_names_of(reference) -> tuple:
    """The mapped PyTorch names whose callable is `reference`."""
    return tuple(q for q, _, _ in _C.torch_names() if _resolve(q) is reference)


class OpInfo:
    """One op and how to test it (see the module docstring for the two spellings).

    op: what thunder.jit traces (a thunder symbol such as ltorch.acos, or a torch callable).
    torch_reference: the eager callable results are compared with (default: op).
    grad_reference: the eager callable the gradient tests differentiate (default: the reference):
        the same function made of ops eager differentiates, where eager's own op has no
        derivative in some PyTorch versions.
    name: the name in test ids (default: the symbol's or callable's name).
    variants: PyTorch names covered, one variant test per name after the first; a
        (name, callable) pair gives a variant whose call differs from the default.
    dtypes: the dtypes PyTorch supports on CPU (CUDA runs those among CUDA_DTYPES).
    domain: (low, high) of the values sample generators should draw (for seed-style generators).
    supports_grad: the op is differentiable (a grad rule or a differentiable decomposition): its
        vjp is tested against torch.autograd in float64 and float32.
    grad_sample_inputs / grad_sample_input_generator: samples for the gradient tests (default:
        the samples), in the old or the seed spelling.
    no_grad_kwargs: keyword arguments never differentiated (eager cannot, e.g. a loss's weight).
    tol: dtype -> dict(rtol=, atol=) for forward comparisons; grad_tol the same for gradients.
    random: results are random: compared by shape and dtype, and `check(result, args, kwargs)`
        asserts their distribution.
    thunder_unsupported: dtypes PyTorch supports and thunder refuses with a clear error.
    test_directives: DecorateInfo marks.
    """

    def __init__(self, op=None, variants=None, sample_inputs=None, dtypes=None, *, name=None,
                 sample_input_generator=None, error_input_generator=None, error_inputs=None,
                 torch_reference=None, grad_reference=None, domain=(None, None), supports_grad: bool = False,
                 grad_sample_inputs=None, grad_sample_input_generator=None, no_grad_kwargs=(),
                 test_directives=(), tol=None, grad_tol=None, random: bool = False, check=None,
                 thunder_unsupported=()):
        if isinstance(op, str):
            # The table's spelling: a name, then PyTorch names of which the first is traced.
            assert variants, f"OpInfo {op}: the old spelling needs variants"
            name, op = op, None
        self._variants = tuple(variants) if variants is not None else None
        self._op = op
        self._reference = torch_reference
        self.name = name or getattr(op, "name", None) or getattr(op, "__name__", None)
        assert self.name, "OpInfo: cannot name the op; pass name="
        assert (sample_inputs is None) != (sample_input_generator is None), \
            f"OpInfo {self.name}: give exactly one of sample_inputs and sample_input_generator"
        self._samples_old = sample_inputs
        self._samples_new = sample_input_generator
        self.sample_inputs = sample_inputs  # the table's field names, kept for its users
        self.sample_input_generator = sample_input_generator
        self.error_input_generator = error_input_generator
        self.torch_reference = torch_reference
        self._grad_reference = grad_reference
        assert error_inputs is None or error_input_generator is None, \
            f"OpInfo {self.name}: give at most one of error_inputs and error_input_generator"
        self._errors_old = error_inputs
        self._errors_new = error_input_generator
        self.error_inputs = error_inputs or error_input_generator
        self.grad_sample_inputs = grad_sample_inputs
        self.grad_sample_input_generator = grad_sample_input_generator
        self.dtypes = tuple(_torch_dtype(d) for d in (dtypes if dtypes is not None else _FLOATS))
        self.domain = domain
        self.supports_grad = supports_grad
        self.no_grad_kwargs = tuple(no_grad_kwargs)
        self.test_directives = tuple(test_directives)
        self.tol = {_torch_dtype(k): v for k, v in (tol or {}).items()}
        self.grad_tol = {_torch_dtype(k): v for k, v in (grad_tol or {}).items()}
        self.random = random
        self.check = check
        self.thunder_unsupported = tuple(_torch_dtype(d) for d in thunder_unsupported)

    # -- callables

    def variant_list(self) -> list[tuple[str, Callable]]:
        """The PyTorch names covered, with their callables. By default: the names thunder maps to
        the op's symbol, or else the names of its torch_reference."""
        names = self._variants
        if names is None:
            sym = getattr(self._op, "id", None)
            names = tuple(q for q, s, _ in _C.torch_names() if s == sym) if sym else ()
            names = names or _torch_names_of(self._reference)
        return [v if isinstance(v, tuple) else (v, variant_callable(v)) for v in names]

    @property
    def variants(self) -> tuple:
        """The PyTorch names covered (the table's field)."""
        return tuple(q for q, _ in self.variant_list())

    def variants_to_test(self) -> list[tuple[str, Callable]]:
        """The variants the variant test runs: every name, but the one the op itself is (the
        first name of the table's spelling, tested by the consistency tests)."""
        variants = self.variant_list()
        return variants[1:] if self._op is None else variants

    @property
    def op(self) -> Callable:
        """What thunder.jit traces."""
        if self._op is not None:
            return self._op
        return self.variant_list()[0][1]

    @property
    def reference(self) -> Callable:
        """What eager PyTorch runs."""
        if self._reference is not None:
            return self._reference
        if self._op is not None:
            return self._op
        return self.variant_list()[0][1]

    @property
    def grad_reference(self) -> Callable:
        """What the gradient tests differentiate with torch.autograd."""
        return self._grad_reference if self._grad_reference is not None else self.reference

    @grad_reference.setter
    def grad_reference(self, fn: Callable) -> None:
        self._grad_reference = fn

    # -- inputs

    def samples(self, dtype, device: str = DEVICE, requires_grad: bool = False) -> list[SampleInput]:
        if self._samples_new is not None:
            return [_to_sample(s) for s in self._samples_new(self, device, dtype, requires_grad)]
        return [_to_sample(s) for s in self._samples_old(dtype)]

    def grad_samples(self, dtype, device: str = DEVICE) -> list[SampleInput]:
        if self.grad_sample_input_generator is not None:
            return [_to_sample(s) for s in self.grad_sample_input_generator(self, device, dtype, True)]
        if self.grad_sample_inputs is not None:
            return [_to_sample(s) for s in self.grad_sample_inputs(dtype)]
        return self.samples(dtype, device, requires_grad=True)

    def errors(self, device: str = DEVICE) -> list[ErrorInput]:
        if self._errors_new is not None:
            return [_to_error_input(e) for e in self._errors_new(self, device)]
        if self._errors_old is not None:
            return [_to_error_input(e) for e in self._errors_old()]
        return []

    # -- tolerances and directives

    def tolerance(self, dtype) -> dict:
        return self.tol.get(dtype, {})

    def grad_tolerance(self, dtype) -> dict:
        default = GRAD_TOL.get(dtype, {})
        return {**default, **self.grad_tol.get(dtype, {})}

    def marks(self, test_name: str, dtype=None, devicetype: str | None = None, executor: str | None = None):
        return [d.decorator for d in self.test_directives if d.applies(test_name, dtype, devicetype, executor)]

    def __repr__(self) -> str:
        return f"OpInfo({self.name})"


_FLOATS = (torch.bfloat16, torch.float16, torch.float32, torch.float64)

# Gradients against torch.autograd: float64 agrees to rounding; float32 to a few ulps of the
# values a backward sums.
GRAD_TOL = {torch.float64: dict(rtol=1e-9, atol=1e-9), torch.float32: dict(rtol=1e-4, atol=1e-5)}


# ---- collection ---------------------------------------------------------------------------------


def table_modules(directory: str = HERE) -> list[str]:
    """The OpInfo tables: opinfos, then every opinfos_*.py of `directory`, by name."""
    extra = sorted(f[:-3] for f in os.listdir(directory) if f.startswith("opinfos_") and f.endswith(".py"))
    return ["opinfos", *extra]


def collect_opinfos(directory: str = HERE) -> list[OpInfo]:
    """Every OpInfo of the tables in `directory` (each module's list `opinfos`); names are unique."""
    if directory not in sys.path:
        sys.path.insert(0, directory)
    ops: list[OpInfo] = []
    for module_name in table_modules(directory):
        if not os.path.exists(os.path.join(directory, module_name + ".py")):
            continue
        module = importlib.import_module(module_name)
        table = getattr(module, "opinfos", None)
        assert isinstance(table, list), f"{module_name}.py has no list `opinfos`"
        for op in table:
            assert isinstance(op, OpInfo), f"{module_name}.opinfos holds {op!r}, not an OpInfo"
            ops.append(op)
    seen: dict[str, int] = {}
    for op in ops:
        seen[op.name] = seen.get(op.name, 0) + 1
    dups = sorted(n for n, c in seen.items() if c > 1)
    assert not dups, f"OpInfo names defined twice: {dups}"
    return ops


# ---- describing inputs --------------------------------------------------------------------------

DTYPE_NAMES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
    torch.float64: "float64", torch.complex64: "complex64", torch.complex128: "complex128",
}


def describe(args, kwargs) -> str:
    """A call's arguments as a short string: tensors by dtype, shape and layout."""

    def one(x):
        if isinstance(x, torch.Tensor):
            layout = "" if x.is_contiguous() else " noncontig"
            return f"{DTYPE_NAMES.get(x.dtype, x.dtype)}{list(x.shape)}{layout}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(y) for y in x) + "]"
        return repr(x)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def param(op: OpInfo, test_name: str, *values, dtype=None, executor=None, device: str = DEVICE, id_parts=()):
    """A pytest.param for one generated test, with the op's directives as marks and an id that
    starts with the op's name."""
    devicetype = device.split(":")[0]
    marks = op.marks(test_name, dtype, devicetype, executor)
    parts = [op.name, *id_parts]
    if executor is not None:
        parts.append(executor)
    parts.append(devicetype)
    if dtype is not None:
        parts.append(DTYPE_NAMES[dtype])
    return pytest.param(op, *values, marks=marks, id="-".join(parts))


def device_dtypes(op: OpInfo, device: str = DEVICE) -> list:
    """The op's dtypes that the device runs (float32, bfloat16, float16 on CUDA)."""
    if device.startswith("cpu"):
        return list(op.dtypes)
    return [d for d in op.dtypes if d in CUDA_DTYPES]


def first_dtype(op: OpInfo, device: str = DEVICE):
    """One dtype for tests that run once per op: float32 where the op takes it."""
    dts = device_dtypes(op, device)
    for d in (torch.float32, torch.int64):
        if d in dts:
            return d
    return dts[0] if dts else None

