"""Fallback to PyTorch: a torch call with no thunder symbol becomes an opaque bound symbol.

The symbol prints by its torch name (`t3 = torch.nn.functional.hardtanh(t2, -1.0, 1.0)`), gets
its outputs' metadata by running the callable on meta tensors, and runs the real callable in the
`fallback` executor (always active, just before the torch executor). Its gradient goes through
torch.autograd: the backward trace calls `vjp_<name>(inputs..., cotangents...)`, which reruns the
call with autograd on and asks PyTorch for the vector-Jacobian product. A call whose output
metadata cannot be known without the data (nonzero, unique, .item(), ...) is refused at trace
time with an error naming it; so is one whose derivative PyTorch lacks, when its gradient is
needed (PyTorch's own message says which).
"""

from __future__ import annotations

import itertools
import threading

import torch
import torch.utils._pytree as pytree

from thunder import _C
from thunder.core import devices

EXECUTOR = "fallback"

_lock = threading.Lock()
# (qualname, structure, constants) -> the fallback symbol of those calls.
_symbols: dict = {}
_counter = itertools.count()

# Values a symbol argument can hold (thunder._C converts them); anything else is a constant of
# the symbol, kept in its closure (a torch.memory_format, a torch.Generator, ...).
_VALUE_TYPES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, devices.Device, slice, type(Ellipsis))


def _is_value(x) -> bool:
    return isinstance(x, (_C.TensorProxy, torch.Tensor) + _VALUE_TYPES)


def _ensure_executor():
    if EXECUTOR not in _C.executor_names():
        _C.extend_add_executor(EXECUTOR, "1", None)


def _to_torch_leaf(x):
    if isinstance(x, devices.Device):
        return devices.to_torch_device(x)
    return x


def _meta_leaf(x):
    if isinstance(x, _C.TensorProxy):
        return torch.empty(tuple(x._shape), dtype=x.dtype, device="meta")
    return _to_torch_leaf(x)


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


class _Call:
    """One fallback call's structure: the flattened arguments with constants split out."""

    def __init__(self, func, qualname, args, kwargs):
        self.func, self.qualname = func, qualname
        leaves, self.spec = pytree.tree_flatten((args, kwargs))
        self.constants = {i: x for i, x in enumerate(leaves) if not _is_value(x)}
        self.values = [None if i in self.constants else x for i, x in enumerate(leaves)]

    def key(self):
        consts = tuple((i, repr(x)) for i, x in sorted(self.constants.items()))
        return (self.func, str(self.spec), consts)

    def rebuild(self, leaves, leaf_fn):
        full = [self.constants[i] if i in self.constants else leaf_fn(x) for i, x in enumerate(leaves)]
        return pytree.tree_unflatten(full, self.spec)


def _device_of(values, kwargs_device):
    if kwargs_device is not None:
        return devices.Device(kwargs_device)
    for x in values:
        if isinstance(x, _C.TensorProxy):
            return x.device
    return devices.Device(torch.get_default_device())


def _make_symbol(call: _Call):
    func, qualname, spec, constants = call.func, call.qualname, call.spec, dict(call.constants)
    n = len(call.values)
    out_spec_box = {}

    def meta(*leaves):
        args, kwargs = _rebuild(leaves, _meta_leaf)
        with torch._C.DisableTorchFunction():
            try:
                out = func(*args, **kwargs)
            except NotImplementedError as e:
                raise NotImplementedError(
                    f"thunder.jit: {qualname} has no thunder symbol, and PyTorch cannot tell its output's "
                    f"metadata without running it ({e}); it cannot be traced"
                ) from None
            except RuntimeError as e:
                if "meta" in str(e).lower() or "data-dependent" in str(e).lower():
                    raise NotImplementedError(
                        f"thunder.jit: {qualname} has no thunder symbol, and its output's metadata depends on "
                        f"the values of its inputs ({e}); it cannot be traced"
                    ) from None
                raise
        out_leaves, out_spec = pytree.tree_flatten(out)
        device = _device_of(leaves, kwargs.get("device") if isinstance(kwargs, dict) else None)
        proxies = []
        for i, x in enumerate(out_leaves):
            if isinstance(x, torch.Tensor):
                proxies.append(_C.TensorProxy(shape=tuple(x.shape), dtype=x.dtype, device=device))
            elif x is None:
                proxies.append(None)
            else:
                raise NotImplementedError(
                    f"thunder.jit: {qualname} has no thunder symbol, and it returns a {type(x).__name__}, whose "
                    f"value would depend on the tensors' data or strides; it cannot be traced"
                )
        out_spec_box["spec"] = out_spec
        out_spec_box["none"] = [p is None for p in proxies]
        return tuple(p for p in proxies if p is not None)

    def _rebuild(leaves, leaf_fn):
        full = [constants[i] if i in constants else leaf_fn(leaves[i]) for i in range(n)]
        return pytree.tree_unflatten(full, spec)

    def fn(*leaves):
        args, kwargs = _rebuild(leaves, _to_torch_leaf)
        out = func(*args, **kwargs)
        return tuple(x for x in pytree.tree_leaves(out) if x is not None)

    sym_name = f"{_sanitize(qualname)}_{next(_counter)}"
    params = [("args", "varargs", False, None)]
    sym = _C.extend_register_operator(EXECUTOR, sym_name, params, None, meta, fn, [], qualname)
    from thunder.core.transforms import _register_executor_grad_transform

    _register_executor_grad_transform(EXECUTOR, sym, _grad_rule(sym, call, _rebuild))
    return sym, out_spec_box


def _is_diff(x) -> bool:
    return isinstance(x, _C.TensorProxy) and (x.dtype.is_floating_point or x.dtype.is_complex)


def _grad_rule(sym, call: _Call, rebuild):
    """The grad rule of a fallback symbol: forward as traced, backward through torch.autograd."""
    func, qualname = call.func, call.qualname
    vjp_syms: dict = {}

    def rule(leaves):
        from thunder.core.transforms import get_grad, put_grad

        outs = sym(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        diff_out = [i for i, o in enumerate(outs) if _is_diff(o)]
        diff_in = [i for i, x in enumerate(leaves) if _is_diff(x)]
        if not diff_out or not diff_in:
            return outs if len(outs) != 1 else outs[0]
        cots = [get_grad(outs[i]) for i in diff_out]
        key = (tuple(diff_in), tuple(diff_out), tuple(type(x).__name__ if not isinstance(x, _C.TensorProxy) else "T" for x in leaves))
        vjp = vjp_syms.get(key)
        if vjp is None:
            vjp = _make_vjp(func, qualname, rebuild, leaves, diff_in, diff_out)
            vjp_syms[key] = vjp
        grads = vjp(*leaves, *cots)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for i, g in zip(diff_in, grads):
            put_grad(leaves[i], g)
        return outs if len(outs) != 1 else outs[0]

    return lambda leaves: rule(tuple(leaves))


def _make_vjp(func, qualname, rebuild, leaves, diff_in, diff_out):
    n = len(leaves)

    def meta(*xs):
        return tuple(_C.TensorProxy(like=xs[i]) for i in diff_in)

    def fn(*xs):
        ins, cots = list(xs[:n]), xs[n:]
        with torch.enable_grad():
            for i in diff_in:
                ins[i] = ins[i].detach().requires_grad_(True)
            args, kwargs = rebuild(ins, _to_torch_leaf)
            out = func(*args, **kwargs)
            outs = [x for x in pytree.tree_leaves(out) if x is not None]
            pairs = [(outs[i], c) for i, c in zip(diff_out, cots) if outs[i].requires_grad]
            wrt = [ins[i] for i in diff_in]
            if not pairs:
                return tuple(torch.zeros_like(w) for w in wrt)
            try:
                grads = torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True)
            except RuntimeError as e:
                raise RuntimeError(f"thunder.jit: the gradient of {qualname} (run by PyTorch) failed: {e}") from None
        return tuple(torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads))

    name = f"vjp_{_sanitize(qualname)}_{next(_counter)}"
    params = [("args", "varargs", False, None)]
    return _C.extend_register_operator(EXECUTOR, name, params, None, meta, fn, [], "")


def call(func, qualname: str, args: tuple, kwargs: dict):
    """Records a call of `func` (no thunder symbol) as a fallback symbol; returns its outputs as
    proxies in the structure PyTorch returns them."""
    _ensure_executor()
    c = _Call(func, qualname, args, kwargs)
    key = c.key()
    with _lock:
        entry = _symbols.get(key)
        if entry is None:
            entry = _make_symbol(c)
            _symbols[key] = entry
    sym, box = entry
    out = sym(*c.values)
    outs = list(out) if isinstance(out, tuple) else [out]
    it = iter(outs)
    full = [None if none else next(it) for none in box["none"]]
    return pytree.tree_unflatten(full, box["spec"])


def has_fallback(func) -> bool:
    """Whether calls of `func` can fall back (any callable can; the meta run decides per call)."""
    return callable(func)
