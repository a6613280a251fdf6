"""thunder.extend: executors written in Python.

    myex = OperatorExecutor("myex", version="0.1")
    multimul = myex.register_operator("multimul", like=multimul_like, fn=multimul_impl)
    myex.register_implementation(ltorch.mul, checker=..., execution_transform=...)
    thunder.jit(fn, executors=[myex])

An executor lives in the C++ executor registry from its construction (thunder.jit names
executors to C++); `register_executor` adds it to the registry that `get_executor` and
`get_all_executors` read. Every user callable (like, meta, fn, checker, execution transform,
fusion pass) is wrapped so that its errors name the executor and the operator.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Callable, Sequence

import torch

from thunder import _C
from thunder.core import functionalize
from thunder.core.proxies import TensorProxy

__all__ = [
    "Executor",
    "OperatorExecutor",
    "FusionExecutor",
    "RegionExecutor",
    "register_executor",
    "deregister_executor",
    "get_all_executors",
    "get_executor",
    "get_default_executors",
    "set_default_executors",
    "add_default_executor",
    "remove_default_executor",
    "get_always_executors",
    "declined",
    "execution_scope",
]

_ALWAYS = ("torch",)


class Executor:
    """An executor: a name and a version. Priority is its place in `executors=[...]`."""

    def __init__(self, name: str, *, version: Any = None, _builtin: bool = False):
        if not _builtin and (not isinstance(name, str) or not name.isidentifier()):
            raise ValueError(f"an executor's name must be a Python identifier, got {name!r}")
        self._name = name
        self._version = version
        if not _builtin:
            self._add_to_registry()

    def _add_to_registry(self) -> None:
        _C.extend_add_executor(self._name, "" if self._version is None else str(self._version), self._fusion_hook())

    def _fusion_hook(self):
        return None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> Any:
        return self._version

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r}, version={self._version!r})"


def _error(what: str, e: BaseException) -> BaseException:
    """The same kind of exception as e with `what` in front of its message (RuntimeError when the
    type cannot be built from a message)."""
    msg = f"{what}: {type(e).__name__}: {e}"
    try:
        new = type(e)(msg)
    except Exception:
        new = RuntimeError(msg)
    if not isinstance(new, Exception) or new.args != (msg,):
        new = RuntimeError(msg)
    return new


def _guard(what: str, f: Callable, check: Callable | None = None) -> Callable:
    """f with its exceptions (and those of check(result)) reraised naming `what`."""

    def guarded(*args, **kwargs):
        try:
            with functionalize.thunder_code():
                result = f(*args, **kwargs)
        except Exception as e:
            raise _error(what, e) from e
        if check is not None:
            check(result)
        return result

    guarded.__wrapped__ = f
    return guarded


def _params(what: str, f: Callable) -> list[tuple]:
    """f's signature as (name, kind, has_default, default) for the C++ symbol."""
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: cannot read the signature of {f!r}: {e}") from None
    out = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            raise TypeError(f"{what}: **{p.name} parameters are not supported")
        kind = {p.VAR_POSITIONAL: "varargs", p.KEYWORD_ONLY: "keyword"}.get(p.kind, "positional")
        has_default = p.default is not p.empty
        out.append((p.name, kind, has_default, p.default if has_default else None))
    return out


def _is_leaf_ok(x) -> bool:
    return x is None or isinstance(x, (TensorProxy, bool, int, float, complex))


def _check_meta_output(what: str, inputs: tuple):
    def check(out):
        items = out if isinstance(out, (tuple, list)) else (out,)
        for i, x in enumerate(items):
            if isinstance(x, (tuple, list)) or not _is_leaf_ok(x):
                kind = "a torch.Tensor" if isinstance(x, torch.Tensor) else type(x).__name__
                raise TypeError(
                    f"{what}: the meta function must return a TensorProxy, a number or a tuple of "
                    f"them, but output {i} is {kind}; make tensors with TensorProxy(like=..., shape=...)"
                )
            if isinstance(x, TensorProxy) and any(x is y for y in inputs):
                raise ValueError(
                    f"{what}: the meta function returned its input {x.name} as output {i}; "
                    f"return a new proxy such as TensorProxy(like={x.name})"
                )

    return check


def _meta_guard(what: str, meta: Callable) -> Callable:
    def guarded(*args, **kwargs):
        try:
            with functionalize.thunder_code():
                out = meta(*args, **kwargs)
        except Exception as e:
            raise _error(what, e) from e
        _check_meta_output(what, args + tuple(kwargs.values()))(out)
        return out

    guarded.__wrapped__ = meta
    return guarded


def _to_torch(x):
    """NumPy arrays returned by an fn become tensors (NumPy is only loaded if the fn used it)."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return x


def _fn_guard(what: str, fn: Callable) -> Callable:
    def guarded(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            raise _error(what, e) from e
        if isinstance(out, (tuple, list)):
            return tuple(_to_torch(x) for x in out)
        return _to_torch(out)

    guarded.__wrapped__ = fn
    return guarded


def _bool_result(what: str):
    def check(r):
        if not isinstance(r, bool):
            raise TypeError(f"{what}: the checker must return a bool, but returned {type(r).__name__} ({r!r})")

    return check


def _tag_names(tags) -> list[str]:
    if tags is None:
        return []
    return [t if isinstance(t, str) else t.name for t in tags]


def _symbol_id(symbol_or_id) -> str:
    if isinstance(symbol_or_id, str):
        return symbol_or_id
    if isinstance(symbol_or_id, _C.Symbol):
        return symbol_or_id.id
    raise TypeError(f"expected a thunder symbol or a symbol id, but got {type(symbol_or_id).__name__}")


# Each operator's fn by its symbol's id: what a printed execution trace's call of it runs.
_OPERATOR_FNS: dict[str, Callable] = {}


def execution_scope(trace) -> dict[str, Callable]:
    """The objects an execution trace's printed program names besides its imports, by the names it
    prints them with: a callable launching each fusion's compiled kernel (cudaFusion0, ...) and
    each executor operator's fn (apex_cross_entropy, ...). `exec(str(trace), scope)` with these
    defines `computation`, which computes what the runtime computes."""
    scope = dict(_C.fusion_callables(trace))
    for name, sym_id in zip(trace.bound_symbol_names, trace.bound_symbol_ids):
        fn = _OPERATOR_FNS.get(sym_id)
        if fn is None:
            continue
        if name.isidentifier():
            scope[name] = fn
        else:
            # A call printed as the callable it runs (a custom autograd Function's
            # `mymodule.Scale.apply`): the program reaches it through its module.
            root = name.split(".")[0]
            if root in sys.modules and root not in ("torch", "thunder"):
                scope.setdefault(root, sys.modules[root])
    return scope


class OperatorExecutor(Executor):
    """An executor with per-symbol implementations: operators of its own (register_operator)
    and ways to run existing symbols (register_implementation)."""

    def __init__(self, name: str, *, version: Any = None):
        super().__init__(name, version=version)
        self._operators: dict[str, Any] = {}
        self._implementations: dict[str, dict] = {}

    def register_operator(
        self,
        name: str,
        *,
        like: Callable | None = None,
        meta: Callable | None = None,
        fn: Callable,
        tags: Sequence | None = None,
    ):
        """Adds an operator: a symbol callable inside jitted code that records one call (its
        decomposition traced from `like`, if given) and runs `fn` when this executor is active."""
        what = f"executor '{self.name}', operator '{name}'"
        if (like is None) == (meta is None):
            raise TypeError(f"{what}: give exactly one of like= and meta=")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"executor '{self.name}': an operator's name must be a Python identifier, got {name!r}")
        if name in self._operators:
            raise ValueError(f"{what} is already registered")
        if not callable(fn):
            raise TypeError(f"{what}: fn must be callable, got {type(fn).__name__}")
        traced = like if like is not None else meta
        if not callable(traced):
            raise TypeError(f"{what}: {'like' if like is not None else 'meta'} must be callable")
        params = _params(what, traced)
        guarded_fn = _fn_guard(what + " (fn)", fn)
        sym = _C.extend_register_operator(
            self.name,
            name,
            params,
            _guard(what + " (like)", like) if like is not None else None,
            _meta_guard(what + " (meta)", meta) if meta is not None else None,
            guarded_fn,
            _tag_names(tags),
        )
        self._operators[name] = sym
        _OPERATOR_FNS[sym.id] = guarded_fn
        return sym

    def get_operator(self, name: str):
        return self._operators[name]

    def register_implementation(
        self,
        symbol_or_id,
        op=None,
        *,
        checker: Callable | None = None,
        execution_transform: Callable | None = None,
        grad_transform: Callable | None = None,
    ) -> None:
        """Says how this executor runs an existing symbol: with `op` (same arguments) or by the
        calls `execution_transform` makes, when `checker` (if any) returns True. A grad_transform
        replaces the symbol's grad rule while this executor is active, for the calls `checker`
        accepts; there a tensor argument's `requires_grad` says whether it is on the gradient path
        (an intermediate computed from a parameter too), so a grad transform that gives some
        argument no gradient can decline the calls where that argument needs one."""
        sym_id = _symbol_id(symbol_or_id)
        what = f"executor '{self.name}', operator '{sym_id}'"
        if op is not None and not isinstance(op, _C.Symbol):
            raise TypeError(f"{what}: op must be a symbol (from register_operator), got {type(op).__name__}")
        for label, f in (("checker", checker), ("execution_transform", execution_transform), ("grad_transform", grad_transform)):
            if f is not None and not callable(f):
                raise TypeError(f"{what}: {label} must be callable, got {type(f).__name__}")
        if op is None and execution_transform is None and grad_transform is None:
            raise TypeError(f"{what}: give op=, execution_transform= or grad_transform=")
        register_grad = None
        if grad_transform is not None:
            from thunder.core import transforms

            register_grad = getattr(transforms, "_register_executor_grad_transform", None)
            if register_grad is None:
                raise NotImplementedError(f"{what}: grad transforms need thunder.core.transforms._register_executor_grad_transform")
        guarded_checker = _guard(what + " (checker)", checker, _bool_result(what)) if checker is not None else None
        if op is not None or execution_transform is not None:
            _C.extend_register_implementation(
                self.name,
                sym_id,
                op,
                guarded_checker,
                _guard(what + " (execution transform)", execution_transform) if execution_transform is not None else None,
            )
        if register_grad is not None:
            # The checker gates the grad transform too (a grad transform alone was applied to
            # every call, whatever its checker said).
            register_grad(self.name, _C.get_symbol(sym_id), _guard(what + " (grad transform)", grad_transform),
                          guarded_checker)
        self._implementations[sym_id] = {
            "op": op,
            "checker": checker,
            "execution_transform": execution_transform,
            "grad_transform": grad_transform,
        }

    @property
    def implmap(self) -> dict:
        return dict(self._implementations)


class FusionExecutor(Executor):
    """An executor that rewrites a whole trace: subclasses define `fusion_pass(trace) -> trace`,
    which runs before operator executors claim the remaining calls."""

    def __init__(self, name: str, *, version: Any = None):
        super().__init__(name, version=version)

    def _fusion_hook(self):
        what = f"executor '{self._name}', fusion pass"

        def hook(trace):
            try:
                out = self.fusion_pass(trace)
            except Exception as e:
                raise _error(what, e) from e
            if not isinstance(out, _C.Trace):
                raise TypeError(f"{what}: fusion_pass must return a trace, but returned {type(out).__name__}")
            return out

        return hook

    def fusion_pass(self, trace):
        raise NotImplementedError(f"executor '{self._name}': FusionExecutor subclasses define fusion_pass(trace)")


class RegionExecutor(FusionExecutor):
    """A fusion executor on thunder's fusion partition: the regions of calls that the torch
    executor can run (no random or effectful ones) are formed as for the fuser, and each region
    worth fusing is handed to `compile_region(name, source, device)` as the Python source of a
    function `name` (e.g. "TorchCompile0") of the region's input tensors returning a tuple of its
    outputs. compile_region returns a callable computing that function, or None to leave the
    region's calls to the other executors. Traces print `[t2, t5] = TorchCompile0(t0, t1)`."""

    def __init__(self, name: str, *, prefix: str, compile_region: Callable, version: Any = None):
        if not isinstance(prefix, str) or not prefix.isidentifier():
            raise ValueError(f"executor '{name}': the region prefix must be a Python identifier, "
                             f"got {prefix!r}")
        if not callable(compile_region):
            raise TypeError(f"executor '{name}': compile_region must be callable")
        self._prefix = prefix
        self._compile_region = compile_region
        super().__init__(name, version=version)

    def _add_to_registry(self) -> None:
        what = f"executor '{self._name}', compile_region"
        _C.extend_add_region_executor(self._name, "" if self._version is None else str(self._version),
                                      self._prefix, _guard(what, self._compile_region))

    def fusion_pass(self, trace):
        raise NotImplementedError(f"executor '{self._name}': a region executor's pass runs in C++")


# ---- the registries ------------------------------------------------------------------------------

_executor_map: dict[str, Executor] = {}
_default_executors: list[Executor] = []


def _builtin(name: str) -> Executor:
    version, is_fusion = _C.extend_executor_info(name)
    cls = FusionExecutor if is_fusion else OperatorExecutor
    ex = cls.__new__(cls)
    Executor.__init__(ex, name, version=version or None, _builtin=True)
    if isinstance(ex, OperatorExecutor):
        ex._operators, ex._implementations = {}, {}
    return ex


def _resolve(ex: Executor | str) -> Executor:
    if isinstance(ex, Executor):
        return ex
    if isinstance(ex, str):
        return get_executor(ex)
    raise TypeError(f"expected an executor or an executor's name, but got {type(ex).__name__}")


def register_executor(ex: Executor) -> Executor:
    """Adds ex to the registry read by get_executor and get_all_executors; returns ex."""
    if not isinstance(ex, Executor):
        raise TypeError(f"register_executor: expected an Executor, but got {type(ex).__name__}")
    _executor_map[ex.name] = ex
    return ex


def deregister_executor(ex: Executor | str) -> None:
    """Removes an executor from every registry (C++ included); its name may then be reused."""
    name = ex if isinstance(ex, str) else _resolve(ex).name
    if name in _ALWAYS:
        raise ValueError(f"deregister_executor: the '{name}' executor is always active and cannot be removed")
    if name not in _C.executor_names():
        raise ValueError(f"deregister_executor: unknown executor '{name}'")
    _executor_map.pop(name, None)
    _default_executors[:] = [e for e in _default_executors if e.name != name]
    _C.extend_remove_executor(name)


def get_all_executors() -> tuple[Executor, ...]:
    """Every registered executor (the always-active ones included)."""
    return tuple(_executor_map.values())


def get_executor(name: str) -> Executor | None:
    """The registered executor with this name, or None."""
    return _executor_map.get(name)


def get_always_executors() -> tuple[Executor, ...]:
    """The executors active in every jitted function, last: the torch executor."""
    return tuple(_executor_map[n] for n in _ALWAYS)


_defaults_settled = False


def _settle_defaults() -> None:
    """Adds the Python executors that are on by default where their hardware is, on a CUDA
    machine: cuDNN attention where PyTorch has cuDNN (eager PyTorch picks the same kernel for
    causal half-precision attention, faster than ATen's flash kernel), and the fused cross-entropy
    of apex_ex where NVRTC can compile its kernels. Done at the first use of the defaults, so that
    importing thunder does not import the executors' modules."""
    global _defaults_settled
    if _defaults_settled:
        return
    _defaults_settled = True
    if torch.cuda.is_available():
        from thunder.executors import apexex, cudnnex

        if _C.nvrtc_available() and apexex.apex_ex not in _default_executors:
            _default_executors.insert(0, apexex.apex_ex)
        if cudnnex.cudnn_available() and cudnnex.cudnn_ex not in _default_executors:
            _default_executors.insert(0, cudnnex.cudnn_ex)


def get_default_executors() -> tuple[Executor, ...]:
    """The executors thunder.jit uses when given none, in priority order (before the always-active ones)."""
    _settle_defaults()
    return tuple(_default_executors)


def set_default_executors(executors: Sequence[Executor | str]) -> None:
    """Replaces the default executors."""
    global _defaults_settled
    _defaults_settled = True
    resolved = [_resolve(e) for e in executors]
    for e in resolved:
        if e is None:
            raise ValueError("set_default_executors: unknown executor")
    _default_executors[:] = [e for e in resolved if e.name not in _ALWAYS]


def add_default_executor(ex: Executor | str) -> None:
    """Puts ex first among the default executors."""
    _settle_defaults()
    e = _resolve(ex)
    if e is None:
        raise ValueError(f"add_default_executor: unknown executor {ex!r}")
    remove_default_executor(e)
    if e.name not in _ALWAYS:
        _default_executors.insert(0, e)


def remove_default_executor(ex: Executor | str) -> None:
    _settle_defaults()
    name = ex if isinstance(ex, str) else ex.name
    _default_executors[:] = [e for e in _default_executors if e.name != name]


for _name in _C.executor_names():
    register_executor(_builtin(_name))
del _name


def _default_fuser() -> str:
    """The fuser on by default: "fuser" fuses CUDA regions (NVRTC) and CPU regions (C++ built by the
    system compiler; where none is found, CPU regions run through ATen as before). THUNDER_CPU_FUSER=0
    keeps CPU regions on ATen: the default is then "cudafuser", which fuses CUDA regions only."""
    return "cudafuser" if os.environ.get("THUNDER_CPU_FUSER", "1") == "0" else "fuser"


# cuDNN attention and apex_ex's cross-entropy join on CUDA machines (_settle_defaults).
if _default_fuser() in _executor_map:
    _default_executors.append(_executor_map[_default_fuser()])


def declined(executor: Executor | str, symbol: str, reason: str) -> bool:
    """For checkers: returns False, first saying on stderr why `executor` declined a call of
    `symbol` when THUNDER_DEBUG_CLAIMS=1 (`return declined(ex, "ltorch.cross_entropy", "logits
    on cpu")`)."""
    if os.environ.get("THUNDER_DEBUG_CLAIMS") == "1":
        name = executor if isinstance(executor, str) else executor.name
        print(f"thunder: executor '{name}' declined {symbol}: {reason}", file=sys.stderr)
    return False
