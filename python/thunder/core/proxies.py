"""TensorProxy: the stand-in for a tensor while a function is traced.

The class is the C++ proxy itself (thunder._C.TensorProxy); this module gives it PyTorch's tensor
methods and operators, each a call of the ltorch symbol that the torch name maps to.
"""

import functools

import torch
from torch.overrides import TorchFunctionMode

from thunder import _C
from thunder.core import devices

TensorProxy = _C.TensorProxy

# torch callable -> (ltorch symbol, swapped); built from the C++ table of mapped names.
_TORCH_MAP: dict = {}
# Tensor method name -> (symbol, swapped)
_METHODS: dict = {}


def _resolve(qualname: str):
    obj = None
    parts = qualname.split(".")
    try:
        obj = __import__(parts[0])
        for p in parts[1:]:
            obj = getattr(obj, p)
    except (ImportError, AttributeError):
        return None
    return obj


def _build_maps():
    for qualname, symbol_id, swapped in _C.torch_names():
        sym = _C.get_symbol(symbol_id)
        obj = _resolve(qualname)
        if obj is not None:
            _TORCH_MAP[obj] = (sym, swapped)
        if qualname.startswith("torch.Tensor."):
            _METHODS[qualname[len("torch.Tensor."):]] = (sym, swapped)


def _has_proxy(x) -> bool:
    if isinstance(x, TensorProxy):
        return True
    if isinstance(x, (tuple, list)):
        return any(_has_proxy(y) for y in x)
    if isinstance(x, dict):
        return any(_has_proxy(y) for y in x.values())
    return False


def _qualname(func) -> str:
    """The public name of a torch callable ("torch.cumsum", "torch.Tensor.add_")."""
    for prefix, namespace in (
        ("torch", torch),
        ("torch.Tensor", torch.Tensor),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.special", torch.special),
        ("torch.linalg", torch.linalg),
        ("torch.fft", torch.fft),
    ):
        name = getattr(func, "__name__", None)
        if name is not None and getattr(namespace, name, None) is func:
            return f"{prefix}.{name}"
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{mod}.{name}" if mod else name


def dispatch(func, args, kwargs):
    """Runs a torch callable on proxies: the mapped ltorch symbol, or a clear error."""
    special = _SPECIAL.get(func)
    if special is not None:
        return special(*args, **kwargs)
    # torch.nn.functional.softmax and friends pass their warning stack level along.
    if "_stacklevel" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "_stacklevel"}
    entry = _TORCH_MAP.get(func)
    if entry is None:
        if not _has_proxy(args) and not _has_proxy(kwargs):
            # Only real tensors and constants: run it as PyTorch would (e.g. a property of a
            # tensor the function closes over).
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        raise NotImplementedError(f"thunder.jit: {_qualname(func)} is not supported: it has no mapping to a thunder operation")
    sym, swapped = entry
    if swapped:
        args = (args[1], args[0], *args[2:])
    if sym.name in _FACTORIES and kwargs.get("device") is None:
        # Factories follow torch's default device (`with torch.device("cuda"):`), as in eager.
        default = torch.get_default_device()
        if default.type != "cpu":
            kwargs = dict(kwargs, device=default)
    return sym(*args, **kwargs)


# Torch-language factories with no tensor argument: they take the default device.
_FACTORIES = frozenset({"full", "zeros", "ones", "empty", "arange", "rand", "randn"})


class ThunderTorchMode(TorchFunctionMode):
    """Routes every torch call made while tracing to thunder's torch language."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


# ---- methods and properties of TensorProxy --------------------------------------------------


def _make_method(sym, swapped):
    if swapped:
        def method(self, other, *args, **kwargs):
            return sym(other, self, *args, **kwargs)
    else:
        def method(self, *args, **kwargs):
            return sym(self, *args, **kwargs)
    method.__name__ = sym.name
    return method


def _size(self, dim=None):
    shape = self._shape
    if dim is None:
        return torch.Size(shape)
    return shape[dim]


def _to(self, *args, **kwargs):
    """Tensor.to(dtype) / to(device) / to(device, dtype) / to(other)."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    kwargs.pop("memory_format", None)
    for a in args:
        if isinstance(a, TensorProxy):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (torch.dtype,)) or hasattr(a, "_thunder_dtype"):
            dtype = a
        elif isinstance(a, (str, torch.device, devices.Device)):
            device = a
        elif a is not None and not isinstance(a, bool):
            raise TypeError(f"Tensor.to: unexpected argument {a!r}")
    return _METHODS["to"][0](self, device, dtype)


def _unsupported(what):
    def f(self, *args, **kwargs):
        raise NotImplementedError(
            f"thunder.jit: {what} needs the value of a tensor while tracing ({self.name}), which is not supported"
        )
    return f


def _contiguous(self, memory_format=None):
    return _METHODS["contiguous"][0](self)


def _where(self, condition, other):
    """Tensor.where(condition, other) is torch.where(condition, self, other)."""
    return _METHODS["where"][0](condition, self, other)


def _install_methods():
    for name, (sym, swapped) in _METHODS.items():
        if name in ("to", "contiguous", "where"):
            continue
        setattr(TensorProxy, name, _make_method(sym, swapped))
    TensorProxy.to = _to
    TensorProxy.contiguous = _contiguous
    TensorProxy.detach = _SPECIAL[torch.Tensor.detach]
    TensorProxy.where = _where
    TensorProxy.shape = property(lambda self: torch.Size(self._shape))
    TensorProxy.size = _size
    TensorProxy.dim = lambda self: self.ndim
    TensorProxy.ndimension = lambda self: self.ndim
    TensorProxy.nelement = lambda self: self.numel()
    TensorProxy.device = property(lambda self: devices.Device(self._device_str))
    TensorProxy.is_cuda = property(lambda self: self._device_str.startswith("cuda"))
    TensorProxy.is_cpu = property(lambda self: self._device_str == "cpu")
    TensorProxy.is_floating_point = lambda self: self.dtype.is_floating_point
    TensorProxy.is_complex = lambda self: self.dtype.is_complex
    TensorProxy.element_size = lambda self: torch.empty((), dtype=self.dtype).element_size()
    TensorProxy.T = property(lambda self: self.permute(*reversed(range(self.ndim))))
    TensorProxy.mT = property(lambda self: self.transpose(-2, -1))
    TensorProxy.__len__ = lambda self: self._shape[0] if self._shape else _raise_len()
    TensorProxy.__iter__ = lambda self: iter(self.unbind(0))
    TensorProxy.__hash__ = object.__hash__
    for name in ("__bool__", "item", "tolist", "numpy", "__float__", "__int__", "__index__"):
        setattr(TensorProxy, name, _unsupported(f"Tensor.{name}"))
    TensorProxy.__setitem__ = lambda self, k, v: (_ for _ in ()).throw(
        NotImplementedError("thunder.jit: in-place assignment (Tensor.__setitem__) is not supported")
    )
    TensorProxy.__torch_function__ = classmethod(lambda cls, func, types, args=(), kwargs=None: dispatch(func, args, kwargs or {}))


def _raise_len():
    raise TypeError("len() of a 0-d tensor")


_SPECIAL = {
    torch.Tensor.size: _size,
    torch.Tensor.dim: lambda self: self.ndim,
    torch.Tensor.numel: lambda self: self.numel(),
    torch.numel: lambda self: self.numel(),
    torch.Tensor.to: _to,
    torch.Tensor.contiguous: _contiguous,
    torch.Tensor.where: _where,
    torch.Tensor.detach: lambda self: _C.get_symbol("ltorch.detach")(self),
    torch.detach: lambda self: _C.get_symbol("ltorch.detach")(self),
    torch.Tensor.__len__: lambda self: len(self),
}

_build_maps()
_install_methods()
