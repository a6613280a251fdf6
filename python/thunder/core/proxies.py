"""TensorProxy: the stand-in for a tensor while a function is traced.

The class is the C++ proxy itself (thunder._C.TensorProxy); this module gives it PyTorch's tensor
methods and operators, each a call of the ltorch symbol that the torch name maps to.
"""

import functools
import sys
import types

import torch
from torch.overrides import TorchFunctionMode

from thunder import _C
from thunder.core import aliasing, autocast, devices, fallback, functionalize, symbolic

TensorProxy = _C.TensorProxy
_isinstance = isinstance  # the interpreter's own: tracing replaces builtins.isinstance (thunder.__init__)

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
    if type(x) is TensorProxy:
        return True
    if _isinstance(x, (tuple, list)):
        for y in x:
            if type(y) is TensorProxy or (_isinstance(y, (tuple, list, dict)) and _has_proxy(y)):
                return True
        return False
    if _isinstance(x, dict):
        return _has_proxy(tuple(x.values()))
    return False


_NAMESPACES = (
    ("torch", torch),
    ("torch.Tensor", torch.Tensor),
    ("torch.nn.functional", torch.nn.functional),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
)


@functools.lru_cache(maxsize=1)
def _public_names() -> dict:
    """id(callable) -> its public name, for every callable of torch's public namespaces."""
    names = {}
    for prefix, namespace in reversed(_NAMESPACES):
        for name in dir(namespace):
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                continue
            try:
                obj = getattr(namespace, name)
            except Exception:
                continue
            if callable(obj):
                names[id(obj)] = f"{prefix}.{name}"
    return names


def _qualname(func) -> str:
    """The public name of a torch callable ("torch.cumsum", "torch.Tensor.add_")."""
    name = getattr(func, "__name__", None)
    for prefix, namespace in _NAMESPACES:
        if name is not None and getattr(namespace, name, None) is func:
            return f"{prefix}.{name}"
    public = _public_names().get(id(func))
    if public is not None:
        return public
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{mod}.{name}" if mod else name


def dispatch(func, args, kwargs):
    """Runs a torch callable on proxies: the mapped ltorch symbol, an in-place op made functional,
    or, for a callable with no thunder symbol, a fallback symbol that PyTorch runs. In a call
    traced with grad mode on, what the program computes with it off (torch.no_grad(),
    inference_mode, a function decorated with either) is detached, as eager records no graph
    for it: gradients do not flow through it. The result aliases its input as eager's does
    (aliasing.result)."""
    if not args and "tensor" in kwargs and getattr(func, "__module__", "") == "torch.nn.init":
        # (torch.nn.init's functions pass their tensor on by keyword)
        args, kwargs = (kwargs["tensor"],), {k: v for k, v in kwargs.items() if k != "tensor"}
    st = functionalize.current()
    if st is None:
        return _dispatch(func, args, kwargs)
    held, held_kwargs = args, kwargs
    if (st.latest or st.stale or st.pending) and not st.replaying:
        # A tensor the program updated in place is a name: its value now is what the op reads.
        # Ops thunder replays (an in-place op's functional value, a view recomputed) get values.
        args, kwargs = st.fresh(args), st.fresh(kwargs)
    if "_stacklevel" in kwargs:
        # torch.nn.functional.softmax and friends pass their warning stack level along.
        kwargs = {k: v for k, v in kwargs.items() if k != "_stacklevel"}
    if func not in _SPECIAL:
        r = _maybe_inplace(st, func, (held[0] if held else None, held_kwargs.get("out")), args, kwargs)
        if r is not _NOT_INPLACE:
            return r
    out = _dispatch(func, args, kwargs)
    if st.grad_enabled and not torch.is_grad_enabled() and functionalize.user_code():
        out = _detached(out, args)
    return aliasing.result(st, func, held, args, kwargs, out, dispatch)


def _has_symbolic(x) -> bool:
    if symbolic.is_symbolic(x):
        return True
    return isinstance(x, (list, tuple)) and any(_has_symbolic(y) for y in x)


def _tensor_of_sizes(func, args, kwargs):
    """torch.tensor([x.shape[0], x.shape[1]]), torch.tensor(x.shape[-2:]): a flat sequence of ints,
    some symbolic, is a stack of 0-dim tensors each computed at each run. Any other data (nested,
    floats among the sizes) pins the sizes: the trace serves those sizes only."""
    data = args[0]
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    device = args[2] if len(args) > 2 else kwargs.get("device")
    rest = {k: v for k, v in kwargs.items() if k not in ("dtype", "device")}
    if not rest and len(data) and all(type(y) is int or symbolic.is_symbolic(y) for y in data):
        items = [_dispatch(torch.full, ((), y), {"dtype": torch.int64, "device": device}) for y in data]
        out = _dispatch(torch.stack, (items,), {})
        return out if dtype is None or dtype is torch.int64 else _dispatch(torch.Tensor.to, (out, dtype), {})

    def pinned(x):
        if symbolic.is_symbolic(x):
            return int(x)
        return type(x)(pinned(y) for y in x) if isinstance(x, (list, tuple)) else x

    with torch._C.DisableTorchFunction():
        return func(pinned(data), *args[1:], **kwargs)


def _detached(out, args):
    """out with each tensor proxy detached, except an argument returned as it is (an in-place op
    returns the tensor it updated)."""
    if isinstance(out, TensorProxy):
        if any(out is a for a in args):
            return out
        return _C.get_symbol("ltorch.detach")(out)
    if isinstance(out, (tuple, list)):
        items = [_detached(o, args) for o in out]
        # A namedtuple takes its fields one by one; a tuple, a list or torch.return_types a sequence.
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


# The dtypes torch's argument parser reads Python's scalar types as (float is float64 whatever
# the default dtype).
_PYTHON_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}


# A backward taken inside the program (`loss.backward()` in a jitted training step, forces as
# `torch.autograd.grad(energy, pos)`) ran as an opaque call on the trace's tensors, which record no
# graph: PyTorch's "element 0 of tensors does not require grad and does not have a grad_fn".
_AUTOGRAD_CALLS = {torch.Tensor.backward: "Tensor.backward()", torch.autograd.backward: "torch.autograd.backward",
                   torch.autograd.grad: "torch.autograd.grad"}


def _dispatch(func, args, kwargs):
    """The value of func(*args, **kwargs) on values (no in-place op): a special case, the
    mapped ltorch symbol, or the fallback."""
    if func in _AUTOGRAD_CALLS:
        raise NotImplementedError(
            f"thunder.jit: {_AUTOGRAD_CALLS[func]} inside the jitted program: a trace computes no autograd graph to "
            f"run it on. Jit the model or the loss and call backward on its result outside the jitted function "
            f"(the jitted call's gradients are PyTorch autograd's); thunder.dynamo.thunderfx(fn) runs such a "
            f"program, with PyTorch taking the gradient"
        )
    special = _SPECIAL.get(func)
    if special is not None:
        out = special(*args, **kwargs)
        _note_known(func, getattr(func, "__name__", ""), args, kwargs, out)
        return out
    if "_stacklevel" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "_stacklevel"}
    if type(kwargs.get("dtype")) is type and kwargs["dtype"] in _PYTHON_DTYPES:
        # torch.zeros(n, dtype=int) (transformers' chunked masks): Python's types as torch reads them
        kwargs = dict(kwargs, dtype=_PYTHON_DTYPES[kwargs["dtype"]])
    if func is torch.Tensor.__getitem__ and len(args) == 2:
        args = (args[0], _index_lists_as_tensors(args[0], args[1]))
    if func is torch.where and len(args) + len(kwargs) == 1:
        _refuse_where_of_condition(args, kwargs)
    if func in (torch.tensor, torch.as_tensor) and args and symbolic.is_symbolic(args[0]):
        # torch.tensor(x.shape[1]): a 0-dim tensor of the size, computed at each run
        return _dispatch(torch.full, ((), args[0]), {"dtype": kwargs.get("dtype") or torch.int64,
                                                      "device": kwargs.get("device")})
    if func in (torch.tensor, torch.as_tensor) and args and type(args[0]) in (list, tuple, symbolic.SymSize) \
            and _has_symbolic(args[0]):
        return _tensor_of_sizes(func, args, kwargs)
    if func is torch.as_tensor and args and type(args[0]) is TensorProxy:
        # as_tensor(t, dtype, device) of a tensor: t itself, or converted (torch.distributions)
        dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
        device = args[2] if len(args) > 2 else kwargs.get("device")
        return _to(args[0], device=device, dtype=dtype)
    entry = _TORCH_MAP.get(func)
    if entry is None and func in _TRACED_THROUGH:
        return _traced_through(func)(*args, **kwargs)
    if entry is None:
        owner = getattr(func, "__self__", None)
        if (type(owner).__name__ == "getset_descriptor" and getattr(func, "__name__", "") == "__get__" and args
                and isinstance(args[0], _C.TensorProxy)):
            # A property (x.shape) of a tensor the function updated in place, now its latest value.
            return getattr(args[0], owner.__name__)
        if not _has_proxy(args) and not _has_proxy(kwargs):
            if _draws(func, args, kwargs):
                # A random factory with no thunder symbol (torch.randint, randperm): a call of the
                # program, drawn anew at each run as eager draws it. Run now, its draw would be a
                # constant of the trace, the same numbers at every call.
                return fallback.call(func, _qualname(func), args, kwargs)
            # Only real tensors and constants: run it as PyTorch would (e.g. a property of a
            # tensor the function closes over).
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        cargs, ckwargs = autocast.apply(getattr(func, "__name__", ""), args, kwargs)
        out = fallback.call(func, _qualname(func), cargs, ckwargs)
        _note_known(func, getattr(func, "__name__", ""), cargs, ckwargs, out)
        return out
    sym, swapped = entry
    if "memory_format" in kwargs and sym.name in _MEMORY_FORMAT_FREE:
        # A result's values do not depend on the memory format it is laid out in; a clone's layout
        # is the one asked for, as eager's (x.t().clone(memory_format=torch.contiguous_format).view(-1))
        fmt = kwargs["memory_format"]
        kwargs = {k: v for k, v in kwargs.items() if k != "memory_format"}
        if sym.name == "clone" and fmt is not None and fmt is not torch.preserve_format:
            return _dispatch(func, args, kwargs).contiguous(memory_format=fmt)
    if "memory_format" in kwargs and sym.name in _CONVERSION_METHODS:
        # x.half(memory_format=...), x.float(...): converted, then laid out as asked
        fmt = kwargs["memory_format"]
        out = _dispatch(func, args, {k: v for k, v in kwargs.items() if k != "memory_format"})
        return out if fmt is None or fmt is torch.preserve_format else out.contiguous(memory_format=fmt)
    if sym.name in ("var", "std", "var_mean", "std_mean"):
        args, kwargs = _unbiased_to_correction(args, kwargs)
    sargs, skwargs = args, kwargs
    if swapped:
        sargs = (args[1], args[0], *args[2:])
    if "axis" in kwargs and "dim" not in kwargs:
        # PyTorch's NumPy-style alias (torch.cat(xs, axis=1), x.sum(axis=0)): thunder's symbols say dim
        skwargs = {("dim" if k == "axis" else k): v for k, v in skwargs.items()}
    if "size" in kwargs and sym.name in _SIZED_FACTORIES:
        # torch.zeros(size=(2, 3)): the shape by keyword (thunder's symbols take it positionally)
        skwargs = dict(skwargs)
        size = skwargs.pop("size")
        sargs = (size, *sargs)
    if sym.name in _FACTORIES and kwargs.get("device") is None:
        # Factories follow torch's default device (`with torch.device("cuda"):`), as in eager.
        default = torch.get_default_device()
        if default.type != "cpu":
            skwargs = dict(skwargs, device=default)
    if (sym.name in _FACTORIES or sym.name == "tensor") and kwargs.get("dtype") is None \
            and torch.get_default_dtype() is not torch.float32:
        # ... and its default dtype (torch.set_default_dtype(torch.float64)): the dtype eager's
        # call makes, found on the meta device (thunder's symbols default to float32).
        dtype = _eager_factory_dtype(func, args, kwargs)
        if dtype is not None:
            skwargs = dict(skwargs, dtype=dtype)
    if (sym.name in ("add", "mul") and len(sargs) == 2 and type(sargs[1]) is TensorProxy and sargs[1]._sym
            and type(sargs[0]) is not TensorProxy and skwargs.get("alpha", 1) == 1):
        # 16 + t of a symbolic t: as t + 16, which the runtime runs whole (number-first calls are
        # decomposed, and a decomposition serves only the sizes it was traced at).
        sargs = (sargs[1], sargs[0])
    if sym.name in _VARARG_FACTORIES and len(sargs) > 1 and not _isinstance(sargs[0], (tuple, list)):
        # torch.zeros(n, 4) with a symbolic n (only symbolic sizes reach here: a call of plain
        # ints makes a constant): the sizes as the one shape argument thunder's symbol takes.
        sargs = (tuple(sargs),)
    if sym.name == "arange" and len(sargs) == 1 and "end" not in skwargs and symbolic.is_symbolic(sargs[0]):
        # torch.arange(n) of a symbolic n: as arange(0, n), the form the runtime runs whole.
        sargs = (0, sargs[0])
    if sym.name in _NUMBERS_AS_TENSORS and sargs and _is_number(sargs[0]) \
            and not any(_is_tensor(a) for a in (*sargs, *skwargs.values())):
        # torch.div(x.size(1), 4, rounding_mode="trunc") (Longformer's, LED's chunk counts): for
        # these functions PyTorch's argument parser takes numbers for tensors, and the result is a
        # 0-dim tensor of the numbers' type (int64, the default float dtype, bool).
        sargs = (_number_tensor(sargs[0]), *sargs[1:])
    try:
        # Under torch.autocast, the arguments cast as autocast casts them for this op.
        sargs, skwargs = autocast.apply(sym.name, sargs, skwargs)
        out = sym(*sargs, **skwargs)
    except NotImplementedError as e:
        # A case the thunder symbol does not cover (an indexing form, an option, a cast autocast
        # makes inside the op): PyTorch runs it.
        if not _has_proxy(args) and not _has_proxy(kwargs):
            raise
        try:
            cargs, ckwargs = autocast.apply(sym.name, args, kwargs, for_fallback=True)
            out = fallback.call(func, _qualname(func), cargs, ckwargs)
        except Exception:  # noqa: BLE001 - PyTorch (on meta tensors) cannot run it either:
            raise e from None  # the symbol's error names the case and has eager's type
    except TypeError as e:
        # A 0-dim tensor where the op takes a number (Funnel's torch.arange(pooled_pos[0] - pos[0],
        # ...)): its value when the program computed it from constants, else the data's, unknown
        # while tracing.
        if "but got tensor" not in str(e):
            raise
        nargs, nkwargs = _known_numbers(sargs), _known_numbers(skwargs)
        if nargs is not None and nkwargs is not None:
            out = sym(*nargs, **nkwargs)
            out = _named_result(func, out)
            _note_known(func, sym.name, _known_numbers(args), _known_numbers(kwargs), out)
            return out
        raise NotImplementedError(
            f"thunder.jit: {_qualname(func)} takes a number where it was given a tensor ({e}); a number "
            f"read from a tensor's values is data-dependent and cannot be traced: pass a Python number"
        ) from None
    out = _named_result(func, out)
    _note_range(sym.name, sargs, skwargs, out)
    _note_known(func, sym.name, args, kwargs, out)
    return out


# torch functions written in Python over other torch functions, with no symbol of their own:
# traced through, so their parts become symbols that fuse, claim fused attention and differentiate
# in thunder, instead of one opaque fallback call whose gradient torch.autograd computes.
# nn.MultiheadAttention (and nn.Transformer*Layer, torchvision's ViT, CLIP-style attention pools)
# computes through multi_head_attention_forward: its projections, scaled_dot_product_attention
# (need_weights=False) or the explicit softmax(q k^T) v with averaged weights. The others are
# compositions of pooling, padding and pointwise math. (Not here: functions whose Python asks the
# data a question, as gaussian_nll_loss's `torch.any(var < 0)` (_gaussian_nll_loss), and thin
# wrappers of one ATen op.)
_TRACED_THROUGH = {
    torch.nn.functional.multi_head_attention_forward,
    torch.nn.functional.local_response_norm,
    torch.nn.functional.lp_pool1d,
    torch.nn.functional.lp_pool2d,
    torch.nn.functional.lp_pool3d,
    torch.nn.functional.multilabel_soft_margin_loss,
    torch.nn.functional.softmin,
    torch.nn.functional.triplet_margin_with_distance_loss,
}
_NO_OVERRIDES = {
    "has_torch_function": lambda *a: False,
    "has_torch_function_unary": lambda *a: False,
    "has_torch_function_variadic": lambda *a: False,
}


@functools.lru_cache(maxsize=None)
def _traced_through(func):
    """func's own code, run on proxies: a copy whose check for __torch_function__ overrides
    answers no (the check would hand the call back to thunder's dispatch, as the one call it is
    tracing). The torch functions its body calls dispatch as any call does."""
    globals_ = dict(func.__globals__)
    globals_.update(_NO_OVERRIDES)
    body = types.FunctionType(func.__code__, globals_, func.__name__, func.__defaults__, func.__closure__)
    body.__kwdefaults__ = func.__kwdefaults__
    return body


def _eager_factory_dtype(func, args, kwargs):
    """The dtype func(*args, **kwargs), a factory, makes in eager under the current default
    dtype; None where the call cannot run on the meta device (a symbolic size)."""
    try:
        with torch._C.DisableTorchFunction():
            return func(*args, **dict(kwargs, device="meta")).dtype
    except Exception:  # noqa: BLE001 - the symbol's own default then
        return None


def _refuse_where_of_condition(args, kwargs):
    """torch.where(condition) is torch.nonzero(condition, as_tuple=True): its output's length is
    the count of true elements, known only from the data."""
    cond = args[0] if args else next(iter(kwargs.values()))
    shape = list(cond.shape) if isinstance(cond, (TensorProxy, torch.Tensor)) else cond
    raise NotImplementedError(
        f"thunder.jit: torch.where(condition) with one argument (condition of shape {shape}) is "
        f"torch.nonzero(condition, as_tuple=True), whose output's shape depends on the tensor's values "
        f"(data-dependent); it cannot be traced. torch.where(condition, input, other) is supported; "
        f"thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture"
    )


# ---- values known while tracing -------------------------------------------------------------
# A uniform sample lies in [0, 1): a comparison of it with a number outside that range has one
# answer whatever is drawn, and Python control flow may branch on it. Hugging Face's LayerDrop,
# `if torch.rand([]) < self.layerdrop: skip the layer`, with layerdrop 0 never skips. A comparison
# whose answer depends on the draw still cannot be traced (Tensor.__bool__ raises).
_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}  # the comparison with its operands swapped


def uniform_range(dtype):
    """(lo, hi, hi included) of torch.rand's values: float16 and bfloat16 samples may round up to 1."""
    return (0.0, 1.0, dtype in (torch.float16, torch.bfloat16))


def comparison_answer(name, a, b, range_of):
    """The answer of `a <name> b` (name "lt", "le", "gt" or "ge") when one operand is a tensor
    whose values lie in range_of(it) and the other a number outside that range; else None."""
    if name not in _SWAPPED:
        return None
    r = range_of(a)
    if r is None:
        a, b, name = b, a, _SWAPPED[name]
        r = range_of(a)
    if r is None or isinstance(b, bool) or not isinstance(b, (int, float)):
        return None
    return known_comparison(name, r, b)


def _value_range(x):
    return getattr(x, "_value_range", None) if type(x) is TensorProxy else None


def _note_range(name, args, kwargs, out):
    if type(out) is not TensorProxy:
        return
    if name in ("rand", "rand_like"):
        out._value_range = uniform_range(out.dtype)
    elif len(args) == 2 and not kwargs:
        known = comparison_answer(name, *args, _value_range)
        if known is not None:
            out._static_bool = known


# A tensor the program computes from constants alone (factories of Python numbers, and ops of
# such tensors: Funnel's relative positions, `pos = torch.arange(n)`, `pos[0] - pos[-1]`) has
# values known while tracing: a small one keeps them (`_known`, a CPU tensor), and reading a number
# from it (`.item()`, int(), a branch, an op's number argument) gives that number, a constant of
# the trace as it is of the program. Tensors read from the program's inputs, parameters, buffers
# or the random generators are never known; nor is anything of a symbolic size.
_KNOWN_MAX_NUMEL = 4096
_RANDOM_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "poisson", "uniform", "exponential",
                 "geometric", "cauchy", "rrelu", "fractional")
_UNKNOWN_WORDS = _RANDOM_WORDS + ("empty",)  # (an empty tensor's values are whatever memory held)


def _draws(func, args, kwargs) -> bool:
    """Whether a call of no tensors draws random numbers (by its name, as _RANDOM_WORDS)."""
    name = getattr(func, "__name__", "")
    if not any(w in name for w in _RANDOM_WORDS):
        return False
    import torch.utils._pytree as pytree

    return not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs)))


def known_value(x):
    """The values of a traced tensor computed from constants alone (a CPU tensor), or None."""
    if type(x) is not TensorProxy:
        return None
    return getattr(_latest(x), "_known", None)


def _note_known(func, name, args, kwargs, out):
    if args is None or kwargs is None or any(w in name for w in _UNKNOWN_WORDS):
        return
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not outs or not all(type(o) is TensorProxy and not o._sym for o in outs):
        return
    if sum(o.numel() for o in outs) > _KNOWN_MAX_NUMEL:
        return
    if any(type(a) is TensorProxy and known_value(a) is None for a in args):
        return  # (the common case, before the arguments' walk)
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((args, kwargs))
    values = []
    for x in leaves:
        if type(x) is TensorProxy:
            v = known_value(x)
            if v is None:
                return
            values.append(v)
        elif symbolic.is_symbolic(x) or isinstance(x, torch.Tensor):
            return  # a symbolic size, or a real tensor the program closes over (it may change)
        elif isinstance(x, (torch.device, devices.Device)) or (func is torch.Tensor.to and isinstance(x, str)):
            values.append(torch.device("cpu"))  # (values only: a CUDA tensor's are computed on the CPU)
        else:
            values.append(x)
    cargs, ckwargs = pytree.tree_unflatten(values, spec)
    if "device" in ckwargs:
        ckwargs["device"] = "cpu"
    # (All torch calls here with torch functions off: the program's mode would trace them.)
    with torch._C.DisableTorchFunction(), torch.no_grad():
        try:
            real = func(*cargs, **ckwargs)
        except Exception:  # noqa: BLE001 - what PyTorch cannot compute here is simply not known
            return
        reals = real if isinstance(real, (tuple, list)) else (real,)
        if len(reals) != len(outs):
            return
        for o, r in zip(outs, reals):
            if not isinstance(r, torch.Tensor) or tuple(r.shape) != tuple(o._shape) or r.dtype != o.dtype:
                return
        for o, r in zip(outs, reals):
            o._known = r.detach().clone()


def _known_numbers(x):
    """x with each known 0-dim tensor a Python number; None where some tensor is not known."""
    if type(x) is TensorProxy:
        v = known_value(x)
        if v is not None and v.dim() == 0:
            with torch._C.DisableTorchFunction():
                return v.item()
        return None if x.ndim == 0 else x
    if isinstance(x, (tuple, list, dict)):
        keys = list(x) if isinstance(x, dict) else range(len(x))
        items = {k: _known_numbers(x[k]) for k in keys}
        if any(items[k] is None and x[k] is not None for k in keys):
            return None
        return items if isinstance(x, dict) else (tuple if isinstance(x, tuple) else list)(items.values())
    return x


def known_comparison(name, value_range, b):
    """The answer of `x <name> b` ("lt", "le", "gt", "ge") for every x in `value_range` (lo, hi,
    hi included), or None when it depends on x."""
    lo, hi, closed = value_range
    below = hi < b or (not closed and hi <= b)  # every value < b
    at_most = hi <= b  # every value <= b
    return {
        "lt": True if below else False if lo >= b else None,
        "le": True if at_most else False if lo > b else None,
        "gt": True if lo > b else False if at_most else None,
        "ge": True if lo >= b else False if below else None,
    }[name]


def _bool(self):
    known = getattr(self, "_static_bool", None)
    if known is not None and self.numel() == 1:
        return known
    value = known_value(self)
    if value is not None:
        with torch._C.DisableTorchFunction():
            return bool(value)
    if getattr(self, "_validity", None) is not None:
        return fallback.assume_true(self, self._validity)
    return _unsupported("Tensor.__bool__")(self)


def _validity(reduce, what):
    """torch._is_all_true / _is_any_true: what PyTorch's value checks ask (torch.distributions'
    argument validation, torch._check_tensor_all). The reduction's truth is taken as holding
    (the check passes) and checked at run time (fallback.assume_true), where a failure raises."""

    def f(self):
        from thunder.core.guards import user_location

        out = getattr(self, reduce)()
        where = user_location()
        out._validity = f"torch.{what}" + (f" at {where}" if where else "")
        return out

    return f


def _item(self):
    if getattr(self, "_validity", None) is not None and known_value(self) is None:
        return fallback.assume_true(self, self._validity)
    return _unsupported("Tensor.item")(self)


# The dtype conversion methods, which take a memory_format too.
_CONVERSION_METHODS = frozenset({"half", "float", "double", "bfloat16", "int", "long", "short", "char", "byte",
                                 "bool", "cfloat", "cdouble"})
# Symbols whose memory_format argument only chooses the strides of their result.
_MEMORY_FORMAT_FREE = frozenset({"clone", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"})


def _unbiased_to_correction(args, kwargs):
    """torch.var(x, unbiased=False), torch.var(x, False) and torch.var(x, dim, False, keepdim):
    PyTorch's older overloads, as correction=0 (or 1)."""
    kwargs = dict(kwargs)
    if "unbiased" in kwargs:
        kwargs["correction"] = int(bool(kwargs.pop("unbiased")))
    if len(args) >= 2 and isinstance(args[1], bool):
        kwargs["correction"] = int(args[1])
        args = args[:1]
    elif len(args) >= 3 and isinstance(args[2], bool):
        kwargs["correction"] = int(args[2])
        if len(args) >= 4:
            kwargs["keepdim"] = args[3]
        args = args[:2]
    return args, kwargs


def _named_result(func, out):
    """torch.max(x, dim) and the like return a named tuple (torch.return_types.max, with .values
    and .indices); the symbol's plain tuple gets the same type."""
    if type(out) is tuple:
        named = getattr(torch.return_types, getattr(func, "__name__", ""), None)
        if isinstance(named, type) and issubclass(named, tuple) and getattr(named, "n_fields", 0) == len(out):
            return named(out)
    return out


def _index_lists_as_tensors(x, key):
    """x[[0, 2]] and x[:, [-1]]: a list of ints indexes like the tensor it spells; in a tuple, a list
    of lists of ints too (x[:, [[0, 1], [2, 3]]]). A list of bools is a mask whose positions are
    known while tracing (x[[True, False, True]]: x[[0, 2]]), and True an index that adds a dim
    (None). A list holding lists, slices, None or Ellipsis is a tuple, as eager (still) reads it
    (x[[[0, 1], [2, 3]]] is x[[0, 1], [2, 3]])."""
    def ints(k):
        return isinstance(k, int) and not isinstance(k, bool) or (
            isinstance(k, list) and bool(k) and all(ints(i) for i in k))

    def conv(k):
        if k is True:
            return None
        if isinstance(k, list) and k and all(type(i) is bool for i in k):
            k = [i for i, b in enumerate(k) if b]
            if not k:
                with torch._C.DisableTorchFunction():
                    return torch.zeros(0, dtype=torch.int64, device=x._device_str)
        if isinstance(k, list) and all(ints(i) for i in k):
            with torch._C.DisableTorchFunction():
                return torch.tensor(k, dtype=torch.int64, device=x._device_str)
        return k

    key = aliasing.eager_key(key)
    if isinstance(key, tuple):
        return tuple(conv(k) for k in key)
    return conv(key)


_NOT_INPLACE = object()

# Python's augmented assignments and the out-of-place operator each stands for.
_IOPS = {
    "__iadd__": "__add__", "__isub__": "__sub__", "__imul__": "__mul__", "__itruediv__": "__truediv__",
    "__ifloordiv__": "__floordiv__", "__imod__": "__mod__", "__ipow__": "__pow__", "__iand__": "__and__",
    "__ior__": "__or__", "__ixor__": "__xor__", "__ilshift__": "__lshift__", "__irshift__": "__rshift__",
    "__idiv__": "__truediv__",
}


def _inplace_functional(func):
    """(qualname, functional callable or a rule) when func updates its first argument in place."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        return None
    if name in _IOPS and getattr(torch.Tensor, name, None) is func:
        return f"Tensor.{name}", getattr(torch.Tensor, _IOPS[name])
    if not name.endswith("_") or name.endswith("__"):
        return None
    if name.startswith("_"):
        if name.startswith("_foreach_") and getattr(torch, name, None) is func:
            # torch._foreach_add_(tensors, ...) (the optimizers' foreach path): each tensor of the
            # list takes its value in torch._foreach_add's result
            functional = getattr(torch, name[:-1], None)
            return (f"torch.{name}", _Foreach(functional or _on_a_copy(func, f"torch.{name}")))
        return None
    if getattr(torch.Tensor, name, None) is func:
        rule = _INPLACE_RULES.get(name)
        if rule is not None:
            return f"Tensor.{name}", rule
        functional = getattr(torch.Tensor, name[:-1], None)
        return f"Tensor.{name}", functional if functional is not None else _on_a_copy(func, f"Tensor.{name}")
    if getattr(torch, name, None) is func:
        functional = getattr(torch, name[:-1], None)
        if functional is None:
            functional = getattr(torch.nn.functional, name[:-1], None)
        return f"torch.{name}", functional if functional is not None else _on_a_copy(func, f"torch.{name}")
    if getattr(torch.nn.functional, name, None) is func:
        functional = getattr(torch.nn.functional, name[:-1], None)
        return (f"torch.nn.functional.{name}", functional) if functional is not None else None
    if getattr(torch.nn.init, name, None) is func:
        # torch.nn.init.constant_(w, 0.3), kaiming_uniform_(w), ... in the program
        return f"torch.nn.init.{name}", _on_a_copy(func, f"torch.nn.init.{name}")
    return None


_ON_A_COPY: dict = {}


def _on_a_copy(func, qual):
    """An in-place op with no out-of-place form thunder knows (fill_diagonal_, random_,
    torch.nn.init's initializers): PyTorch runs it on a copy of its target (a fallback call
    printed as `<op>_on_a_copy`), whose result becomes the target's new value. (Recorded as
    an ordinary fallback call, its update was dropped: the call's result went unused.)"""
    rule = _ON_A_COPY.get(func)
    if rule is None:
        def run(x, *args, **kwargs):
            if isinstance(x, (list, tuple)):  # (a _foreach_ op's list of tensors)
                y = [t.clone() for t in x]
            else:
                y = x.clone()
            func(y, *args, **kwargs)
            return y

        name = "".join(c if c.isalnum() else "_" for c in qual) + "_on_a_copy"
        rule = _ON_A_COPY[func] = _Rule(lambda *a, **k: fallback.call(run, name, a, k))
    return rule


def _held(t):
    """A tensor as the trace holds it: a real tensor (closed over) as its captured proxy."""
    return _C.capture_tensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, TensorProxy) else t


class _Foreach:
    """A torch._foreach_*_ op: its out-of-place twin (or a _Rule), whose list of results are the
    new values of the tensors of its first argument."""

    def __init__(self, functional):
        self.functional = functional


def _inplace_kwarg(func, args, kwargs):
    """For torch.nn.functional ops with an `inplace` parameter: (args, kwargs) of the same call
    with inplace=False when it asked for inplace=True, else None."""
    try:
        sig = _signature(func)
    except (TypeError, ValueError):
        return None
    if sig is None or "inplace" not in sig.parameters:
        return None
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    if not bound.arguments.get("inplace", False):
        return None
    bound.arguments["inplace"] = False
    return bound.args, bound.kwargs


@functools.lru_cache(maxsize=None)
def _signature(func):
    import inspect

    if getattr(func, "__module__", "") != "torch.nn.functional":
        return None
    return inspect.signature(func)


def _maybe_inplace(st, func, held, args, kwargs):
    """An in-place op (x.add_(y), x[k] = v, out=, inplace=True) as its functional value committed
    to the tensor it updates; _NOT_INPLACE for other ops. `held`: the call's first argument and
    its out= as the program passed them."""
    if func is torch.Tensor.__setitem__:
        x, key, value = args
        with st.replay():
            # A key that covers the whole tensor (x[0] = v of a dim of length 1) overwrites it
            result = _overwritten(x, aliasing.setitem_value(x, key, value))
        functionalize.commit(st, "Tensor.__setitem__", held[0], _own_value(result, args, kwargs))
        return None
    out = kwargs.get("out") if kwargs else None
    if out is not None and isinstance(out, (TensorProxy, torch.Tensor)):
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        with st.replay():
            result = dispatch(func, args, rest)
        return functionalize.commit(st, f"{_qualname(func)}(out=)", held[1], _own_value(result, args, rest, out))
    hit = _inplace_functional(func)
    if hit is not None:
        qual, functional = hit
        if functional is _RETURN_SELF:
            return held[0]
        if isinstance(functional, _Foreach):
            f = functional.functional
            # (tensors the program closes over, an optimizer's parameters and states: as the trace
            # holds them, so that the results are the program's values)
            args = tuple([_held(t) for t in a] if isinstance(a, (list, tuple)) else _held(a) for a in args)
            with st.replay():
                results = f.rule(*args, **kwargs) if isinstance(f, _Rule) else dispatch(f, args, kwargs)
            for target, r in zip(held[0], results):
                functionalize.commit(st, qual, target, _own_value(r, (target,), {}))
            return list(held[0])  # (eager returns the list's tensors, updated)
        with st.replay():
            result = functional.rule(*args, **kwargs) if isinstance(functional, _Rule) else dispatch(functional, args, kwargs)
        return functionalize.commit(st, qual, held[0], _own_value(result, args, kwargs))
    redo = _inplace_kwarg(func, args, kwargs)
    if redo is not None:
        with st.replay():
            result = dispatch(func, redo[0], redo[1])
        return functionalize.commit(st, f"{_qualname(func)}(inplace=True)", held[0], _own_value(result, args, kwargs))
    return _NOT_INPLACE


def _own_value(result, args, kwargs, target=None):
    """The new value of an in-place op's target: y.copy_(z) (z of y's dtype and shape) makes y's
    value z's, shared while neither changes (a later update of either is a new value). Only a
    buffer the trace writes itself is copied: an input (written back at the end of the trace)
    or a view (of one, maybe). A copy of a computed tensor would keep the reinplace pass from
    turning `buf.copy_(buf.index_copy(...))` back into one in-place update."""
    target = args[0] if target is None else target
    if result is not target and any(result is a for a in (*args, *kwargs.values())):
        st = functionalize.current()
        if st is None or st.is_input(result) or id(result) in st.view_of:
            return torch.clone(result)
    return result


def _is_tensor(x) -> bool:
    return isinstance(x, (TensorProxy, torch.Tensor))


class _Rule:
    """An in-place method with no out-of-place twin of the same name: how to compute its value."""

    def __init__(self, rule):
        self.rule = rule


_RETURN_SELF = object()


def _overwritten(self, value):
    """The value of an in-place op that may write every element of self without reading it
    (copy_, fill_, zero_, uniform_, normal_, x[k] = v). In a training call eager's result stays differentiable with
    respect to self, with a zero gradient (`y = x * 1; y.zero_(); y.sum().backward()` runs); as
    value alone it depended on no input, so thunder returned a tensor without a gradient and the
    caller's backward raised. where(True, value, self) is value, and passes self a zero gradient."""
    st = functionalize.current()
    if (st is None or not isinstance(self, TensorProxy) or not (st.grad_enabled and torch.is_grad_enabled())
            or st.trace is None or not any(p.requires_grad for p in st.trace.inputs)):
        return value
    return torch.where(torch.ones((), dtype=torch.bool, device=self.device), value, self)


def _copy_rule(self, src, non_blocking=False):
    if not isinstance(src, (TensorProxy, torch.Tensor)):
        return _overwritten(self, torch.full_like(self, src))
    return _overwritten(self, src.to(self.dtype).expand(self.shape))


def _fill_rule(self, value):
    if isinstance(value, (TensorProxy, torch.Tensor)):
        return _overwritten(self, value.to(self.dtype).expand(self.shape))
    return _overwritten(self, torch.full_like(self, value))


_INPLACE_RULES = {
    "copy_": _Rule(_copy_rule),
    "fill_": _Rule(_fill_rule),
    "zero_": _Rule(lambda self: _overwritten(self, torch.zeros_like(self))),
    "uniform_": _Rule(lambda self, a=0.0, b=1.0, generator=None:
                      _overwritten(self, torch.rand_like(self) * (b - a) + a)),
    "normal_": _Rule(lambda self, mean=0.0, std=1.0, generator=None:
                     _overwritten(self, torch.randn_like(self) * std + mean)),
    "requires_grad_": _RETURN_SELF,
    "retain_grad": _RETURN_SELF,
    "share_memory_": _RETURN_SELF,
}


# The torch functions whose tensor arguments PyTorch's argument parser also takes as numbers
# (its should_allow_numbers_as_tensors list): torch.add(2, 3) is tensor(5), where torch.exp(2)
# and torch.remainder(7, 2) are errors.
_NUMBERS_AS_TENSORS = frozenset({"add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
                                 "floor_divide"})


def _is_number(x):
    return isinstance(x, (bool, int, float)) or isinstance(x, symbolic.SymInt)


def _number_tensor(x):
    """A Python number (or a symbolic int) as PyTorch wraps it: a 0-dim tensor of its type."""
    dtype = torch.bool if isinstance(x, bool) else torch.get_default_dtype() if isinstance(x, float) else torch.int64
    return _dispatch(torch.full, ((), x), {"dtype": dtype})


# Torch-language factories with no tensor argument: they take the default device.
_SIZED_FACTORIES = frozenset({"zeros", "ones", "empty", "rand", "randn", "full"})
_VARARG_FACTORIES = frozenset({"zeros", "ones", "empty", "rand", "randn"})
_FACTORIES = frozenset({"full", "zeros", "ones", "empty", "arange", "rand", "randn", "eye", "linspace", "logspace"})


_GRAD_ATTRIBUTE = torch._C.TensorBase.__dict__["grad"]


class ThunderTorchMode(TorchFunctionMode):
    """Routes every torch call made while tracing to thunder's torch language. `grad_reads`: the
    tensors outside the program (parameters a function closes over, an optimizer's) whose `.grad`
    it read: a value the trace holds, which `zero_grad(set_to_none=True)` then backward replace
    by a new tensor; the caller guards on what each holds (a jitted `optimizer.step` kept
    stepping with the first call's gradients)."""

    def __init__(self):
        super().__init__()
        self.grad_reads = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is _GRAD_ATTRIBUTE and args and not isinstance(args[0], TensorProxy):
            self.grad_reads.append(args[0])
        return dispatch(func, args, kwargs or {})


# ---- methods and properties of TensorProxy --------------------------------------------------


def _make_method(name):
    """A TensorProxy method that dispatches the torch.Tensor method of the same name, so that
    x.foo(...) traces exactly as torch.Tensor.foo(x, ...) does (in-place, views, fallback)."""
    attr = getattr(torch.Tensor, name)

    def method(self, *args, **kwargs):
        return dispatch(attr, (self, *args), kwargs)

    method.__name__ = name
    return method


# Tensor attributes that are not methods, as a proxy answers them.
_PROPERTIES = {
    "layout": lambda self: torch.strided,
    "is_sparse": lambda self: False,
    "is_quantized": lambda self: False,
    "is_meta": lambda self: self._device_str == "meta",
    "is_mps": lambda self: False,
    "is_xpu": lambda self: False,
    "is_mkldnn": lambda self: False,
    "is_nested": lambda self: False,
    "itemsize": lambda self: torch.empty((), dtype=self.dtype).element_size(),
    "nbytes": lambda self: torch.empty((), dtype=self.dtype).element_size() * self.numel(),
    "real": lambda self: dispatch(torch.real, (self,), {}),
    "imag": lambda self: dispatch(torch.imag, (self,), {}),
    "grad": lambda self: _grad(self, sys._getframe(2)),
    "grad_fn": lambda self: None,
    "is_leaf": lambda self: not self.requires_grad,
    "names": lambda self: (None,) * self.ndim,
}


_MODULE_APPLY = torch.nn.Module._apply.__code__


def _grad(self, reader):
    """x.grad: None for what the program computes (as eager answers for a non-leaf). The gradient
    of a tensor the program is given (a parameter, an argument) that requires grad is a value
    the trace does not hold, and None in its place made an update loop skip every parameter
    (`if p.grad is None: continue`): a jitted hand-written SGD step did nothing, silently. Refused
    instead, except where nn.Module._apply reads it (`self.to(dtype)` in a forward converts the
    parameters' gradients too, which are no value of the program)."""
    st = functionalize.current()
    if st is not None and self.requires_grad and reader.f_code is not _MODULE_APPLY and st.is_input(self):
        raise NotImplementedError(
            f"thunder.jit: the program reads {self.name}.grad, the gradient of a tensor it is given, which a trace "
            f"does not hold; pass the gradients as arguments (`step(params, [p.grad for p in params])`), or run "
            f"the optimizer's step outside the jitted function"
        )
    return None


def _getattr(self, name):
    """Tensor methods thunder has no symbol for: dispatched like the others (they fall back to
    PyTorch); other attributes of torch.Tensor as a proxy can answer them."""
    prop = _PROPERTIES.get(name)
    if prop is not None:
        return prop(self)
    attr = getattr(torch.Tensor, name, None) if not name.startswith("__") else None
    if attr is not None and callable(attr):
        return _bound(attr, self)
    raise AttributeError(f"'TensorProxy' object has no attribute '{name}'")


def _bound(attr, self):
    def method(*args, **kwargs):
        return dispatch(attr, (self, *args), kwargs)

    return method


def _set_data(self, value):
    """x.data = value: x takes value's values, with no gradient through the assignment. The
    assignment nn.Module.to makes for each parameter (its own value when there is nothing to
    convert) is nothing to trace."""
    if value is self:
        return
    name = getattr(self, "name", "a tensor")
    if not _is_tensor(value):
        raise TypeError(f"Tensor.data: expected a tensor for {name}.data, but got {type(value).__name__}")
    if tuple(value.shape) != tuple(self.shape) or value.dtype != self.dtype or str(value.device) != self._device_str:
        raise NotImplementedError(
            f"thunder.jit: assigning a value of shape {tuple(value.shape)} and dtype {value.dtype} on "
            f"{value.device} to {name}.data (shape {tuple(self.shape)}, {self.dtype} on {self._device_str}) "
            f"is not supported; only values like it can be assigned"
        )
    st = functionalize.current()
    if st is None:
        raise NotImplementedError("thunder.jit: Tensor.data can only be assigned while a function is traced")
    if st.grad_enabled and self.requires_grad:
        raise NotImplementedError(
            f"thunder.jit: assigning {name}.data while its gradient is computed is not supported (eager keeps "
            f"differentiating with respect to {name} with the new values)"
        )
    functionalize.commit(st, "Tensor.data =", self, dispatch(torch.Tensor.detach, (value,), {}))


def _setitem(self, key, value):
    """x[key] = value, traced as a functional scatter of value into x."""
    dispatch(torch.Tensor.__setitem__, (self, key, value), {})


def _latest(self):
    """The proxy's value now: a tensor the program changed the shape of in place (y.unsqueeze_(1))
    answers shape questions with its new value."""
    st = functionalize.current()
    if st is not None and st.latest:
        e = st.latest.get(id(self))
        if e is not None and e[0] is self:
            return e[1]
    return self


def _shape(self):
    """torch.Size of the proxy's sizes; a SymSize (thunder/core/symbolic.py) where some are
    symbolic. (A tensor the program holds, not a proxy: its sizes, `table.size(0)` of a tensor
    it closes over or made from constants.)"""
    if type(self) is not TensorProxy:
        with torch._C.DisableTorchFunction():
            return self.shape
    return symbolic.shape_of(_latest(self))


def _size(self, dim=None):
    shape = _shape(self)
    return shape if dim is None else shape[dim]


def _to(self, *args, **kwargs):
    """Tensor.to(dtype) / to(device) / to(device, dtype) / to(other)."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    fmt = kwargs.pop("memory_format", None)
    dtype = _PYTHON_DTYPES.get(dtype, dtype) if type(dtype) is type else dtype
    for a in args:
        if type(a) is type and a in _PYTHON_DTYPES:
            dtype = _PYTHON_DTYPES[a]  # x.to(int)
        elif isinstance(a, TensorProxy):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (torch.dtype,)) or hasattr(a, "_thunder_dtype"):
            dtype = a
        elif isinstance(a, (str, torch.device, devices.Device)):
            device = a
        elif a is not None and not isinstance(a, bool):
            raise TypeError(f"Tensor.to: unexpected argument {a!r}")
    out = _METHODS["to"][0](self, _concrete_device(device), dtype)
    if fmt is not None and fmt is not torch.preserve_format:
        # x.to(dtype, memory_format=torch.contiguous_format): laid out so, as eager's (a .view after)
        out = out.contiguous(memory_format=fmt)
    return out


def _concrete_device(device):
    """A device as eager resolves it: "cuda" (or an int) is the current CUDA device."""
    if device is None or isinstance(device, devices.Device):
        return device
    d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """Tensor.type(): the legacy type name ("torch.FloatTensor", "torch.cuda.HalfTensor");
    Tensor.type(dtype or type name or legacy class): a conversion, as Tensor.to."""
    if dtype is None:
        with torch._C.DisableTorchFunction():
            name = torch.empty(0, dtype=self.dtype).type()
        return name.replace("torch.", "torch.cuda.", 1) if self.device.type == "cuda" else name
    if isinstance(dtype, torch.dtype):
        return _to(self, dtype)
    legacy = dtype
    if isinstance(dtype, str):
        legacy = torch
        for part in dtype.split(".")[1:] if dtype.startswith("torch.") else dtype.split("."):
            legacy = getattr(legacy, part, None)
    if not isinstance(getattr(legacy, "dtype", None), torch.dtype):
        raise ValueError(f"Tensor.type: invalid type {dtype!r}")
    if getattr(legacy, "is_cuda", False):
        return _to(self, "cuda" if self.device.type != "cuda" else None, legacy.dtype)
    return _to(self, "cpu", legacy.dtype)


def _weight_norm(v, g, dim=0):
    """torch._weight_norm (nn.utils.weight_norm and its parametrization): v * g / ||v||, the norm
    over every dim but `dim` (over all of them for dim -1)."""
    if dim < -1:
        dim += v.ndim  # (ATen's norm_except_dim reads -1 as "every dim", other negatives as dims)
    dims = [d for d in range(v.ndim) if d != dim] if dim != -1 else list(range(v.ndim))
    norm = torch.linalg.vector_norm(v, 2, dim=dims, keepdim=True) if dims else v.abs()
    return v * (g / norm)


def _broadcast_tensors(*tensors):
    """torch.broadcast_tensors: each tensor expanded to the common shape (views, as eager's), so
    that a tensor whose expansion goes unused gets no gradient (None), as in eager (torch.
    distributions' broadcast_all)."""
    for i, t in enumerate(tensors):
        if not _is_tensor(t):
            raise TypeError(f"broadcast_tensors(): expected Tensor as element {i}, but got {type(t).__name__}")
    shape = torch.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


def _cuda(self, device=None, non_blocking=False, memory_format=None):
    """Tensor.cuda(device=None): a copy on that CUDA device (the current one by default)."""
    return _to(self, _concrete_device("cuda" if device is None else device))


def _unsupported(what):
    def f(self, *args, **kwargs):
        from thunder.core.guards import user_location

        value = known_value(self)
        if value is not None and what != "Tensor.__bool__":
            # Tensor.item, tolist, numpy, __float__, __int__, __index__ of values known while tracing
            with torch._C.DisableTorchFunction():
                return getattr(value, what.removeprefix("Tensor."))(*args, **kwargs)

        where = user_location()
        raise NotImplementedError(
            f"thunder.jit: {what} needs the value of a tensor while tracing ({self.name}), which is not supported"
            + (f", at {where}" if where else "")
            + ". A program that branches on tensor values runs under thunder.dynamo.thunderfx(fn), which leaves "
            "such code to PyTorch and compiles the rest with thunder."
        )
    return f


def _register_hook(self, hook):
    from thunder.core.guards import user_location

    where = user_location()
    raise NotImplementedError(
        f"thunder.jit: Tensor.register_hook on a tensor the program computes ({self.name}) is not supported"
        + (f", at {where}" if where else "")
        + ": thunder's backward is one compiled program, with no autograd graph inside it to hook. A hook on the "
        "jitted call's inputs, outputs or parameters runs as in eager, and under thunder.dynamo.thunderfx(fn) "
        "this one does too."
    )


def _mT(self):
    # As eager's: a RuntimeError on a 1-D tensor (fuzzer seed 12509), the identity on a 0-D one
    if self.ndim == 1:
        raise RuntimeError("thunder: tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
    return self if self.ndim == 0 else self.transpose(-2, -1)


def _T(self):
    # Eager's x.T reverses the dims; on a 0-D or 1-D tensor that is x itself (a view of it)
    return self.permute(tuple(reversed(range(self.ndim))))


def _H(self):
    # As eager's: the conjugate transpose of a matrix, the conjugate of a 0-D tensor, and a
    # RuntimeError on other ranks
    if self.ndim not in (0, 2):
        raise RuntimeError(f"thunder: tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
    return self.conj() if self.ndim == 0 else self.transpose(0, 1).conj()


def _mH(self):
    if self.ndim == 1:
        raise RuntimeError("thunder: tensor.mH is only supported on matrices or batches of matrices. Got 1-D tensor.")
    return self.conj() if self.ndim == 0 else self.transpose(-2, -1).conj()


def _contiguous(self, memory_format=None):
    contiguous = _METHODS["contiguous"][0]
    # Channels-last as eager lays it out: channels innermost, so that is_contiguous, strides and
    # views answer as in eager (the copy is eager's too).
    if memory_format == torch.channels_last and self.ndim == 4 and not _is_contiguous(self, memory_format):
        return contiguous(self.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    if memory_format == torch.channels_last_3d and self.ndim == 5 and not _is_contiguous(self, memory_format):
        return contiguous(self.permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
    return contiguous(self)


def _is_contiguous(self, memory_format=torch.contiguous_format):
    """Whether eager's tensor would be laid out densely in `memory_format`, from the strides thunder
    gives each proxy as eager's (the ones `view` is checked against). Programs ask it to decide
    whether to copy (`if not x.is_contiguous(): x = x.contiguous()`): either answer computes the
    same values."""
    if type(self) is not TensorProxy:  # a real tensor (thunder's own meta tensors)
        with torch._C.DisableTorchFunction():
            return self.is_contiguous(memory_format=memory_format)
    shape, strides = tuple(self.shape), self._strides
    order = list(range(len(shape) - 1, -1, -1))  # innermost first
    if memory_format == torch.channels_last and len(shape) == 4:
        order = [1, 3, 2, 0]
    elif memory_format == torch.channels_last_3d and len(shape) == 5:
        order = [1, 4, 3, 2, 0]
    expected = 1
    for d in order:
        if shape[d] != 1 and strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def _where(self, condition, other):
    """Tensor.where(condition, other) is torch.where(condition, self, other)."""
    return _METHODS["where"][0](condition, self, other)


def _install_methods():
    for name in _METHODS:
        setattr(TensorProxy, name, _make_method(name))
    for name in _IOPS:
        if hasattr(torch.Tensor, name):
            setattr(TensorProxy, name, _make_method(name))
    TensorProxy.__getattr__ = _getattr
    # Through dispatch, as every method: they read a tensor's value now and alias as eager's.
    for name in ("to", "contiguous", "detach", "where"):
        setattr(TensorProxy, name, _make_method(name))
    # Python's operators with no thunder symbol of their own: PyTorch's (the fallback)
    for name in ("__lshift__", "__rshift__", "__rlshift__", "__rrshift__", "__pos__"):
        if not hasattr(TensorProxy, name) or name not in TensorProxy.__dict__:
            setattr(TensorProxy, name, _make_method(name))
    TensorProxy.shape = property(_shape)
    TensorProxy.size = _size
    ndim = TensorProxy.ndim
    TensorProxy.ndim = property(lambda self: ndim.__get__(_latest(self)))
    TensorProxy.dim = lambda self: self.ndim
    TensorProxy.ndimension = lambda self: self.ndim
    numel = TensorProxy.numel
    TensorProxy.numel = lambda self: symbolic.shape_of(self).numel() if self._sym else numel(self)
    TensorProxy.nelement = lambda self: self.numel()
    TensorProxy.device = property(_device)
    TensorProxy.is_cuda = property(lambda self: self._device_str.startswith("cuda"))
    TensorProxy.is_cpu = property(lambda self: self._device_str == "cpu")
    TensorProxy.is_floating_point = lambda self: self.dtype.is_floating_point
    TensorProxy.is_complex = lambda self: self.dtype.is_complex
    TensorProxy.element_size = lambda self: torch.empty((), dtype=self.dtype).element_size()
    TensorProxy.T = property(_T)
    TensorProxy.mT = property(_mT)
    TensorProxy.H = property(_H)
    TensorProxy.mH = property(_mH)
    TensorProxy.__len__ = lambda self: int(_shape(self)[0]) if self._shape else _raise_len()
    TensorProxy.__iter__ = lambda self: iter(self.unbind(0))
    TensorProxy.__hash__ = object.__hash__
    for name in ("tolist", "numpy", "__float__", "__int__", "__index__"):
        setattr(TensorProxy, name, _unsupported(f"Tensor.{name}"))
    TensorProxy.item = _item
    TensorProxy.__bool__ = _bool
    TensorProxy.__setitem__ = _setitem
    TensorProxy.data = property(lambda self: dispatch(torch.Tensor.detach, (self,), {}), _set_data)
    TensorProxy.__torch_function__ = classmethod(lambda cls, func, types, args=(), kwargs=None: dispatch(func, args, kwargs or {}))


def _device(self):
    """A torch.device while the user's program is traced (PyTorch's own functions, such as
    torch.arange(n, device=x.device), accept nothing else); a thunder Device elsewhere (executor
    checkers compare a.device.devicetype)."""
    if functionalize.user_code():
        return torch.device(self._device_str)
    return devices.Device(self._device_str)


def _raise_len():
    raise TypeError("len() of a 0-d tensor")


def _gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """F.gaussian_nll_loss as torch writes it, its check that var has no negative entry (`if
    torch.any(var < 0): raise ValueError`, a question to the data: the call was refused) taken as
    passing while tracing and checked where the program computes it (fallback.assume_true: a
    negative entry raises CheckFailed, a ValueError)."""
    import math

    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * torch.ones_like(input)
    else:
        fallback.assume_true(torch.logical_not(torch.any(var < 0)),
                             "torch.nn.functional.gaussian_nll_loss: var has negative entry/entries")
    if var.size() != input.size():
        if input.size()[:-1] == var.size():
            var = torch.unsqueeze(var, -1)
        elif input.ndim == var.ndim and sum(y for x, y in zip(input.size(), var.size()) if x != y) == 1:
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction != "none" and reduction != "mean" and reduction != "sum":
        raise ValueError(reduction + " is not valid")
    var = var.clone()
    with torch.no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (torch.log(var) + (input - target) ** 2 / var)
    if full:
        loss += 0.5 * math.log(2 * math.pi)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


_SPECIAL = {
    torch.Tensor.size: _size,
    torch.Tensor.dim: lambda self: self.ndim,
    torch.Tensor.numel: lambda self: self.numel(),
    torch.numel: lambda self: self.numel(),
    torch.Tensor.to: _to,
    # nn.Module.to asks it before assigning each converted parameter to .data.
    torch._has_compatible_shallow_copy_type: lambda a, b: _is_tensor(a) and _is_tensor(b),
    torch.Tensor.cpu: lambda self, memory_format=None: _to(self, "cpu"),
    torch.Tensor.cuda: _cuda,
    torch.Tensor.contiguous: _contiguous,
    torch.Tensor.is_contiguous: _is_contiguous,
    torch.Tensor.where: _where,
    torch.Tensor.detach: lambda self: _C.get_symbol("ltorch.detach")(self),
    torch.Tensor.register_hook: _register_hook,
    torch.detach: lambda self: _C.get_symbol("ltorch.detach")(self),
    torch.Tensor.__len__: lambda self: len(self),
    torch.Tensor.type: _type,
    torch._weight_norm: _weight_norm,
    torch.nn.functional.gaussian_nll_loss: _gaussian_nll_loss,
    torch.broadcast_tensors: _broadcast_tensors,
    torch._is_all_true: _validity("all", "_is_all_true"),
    torch.Tensor._is_all_true: _validity("all", "_is_all_true"),
    torch._is_any_true: _validity("any", "_is_any_true"),
    torch.Tensor._is_any_true: _validity("any", "_is_any_true"),
    # Answers of the dtype alone (multi_head_attention_forward's mask checks, XLNet).
    torch.is_floating_point: lambda self: self.dtype.is_floating_point,
    torch.Tensor.is_floating_point: lambda self: self.dtype.is_floating_point,
    torch.is_complex: lambda self: self.dtype.is_complex,
    torch.Tensor.is_complex: lambda self: self.dtype.is_complex,
    # other - alpha * input, traced as the subtraction (its number may be a symbolic size)
    torch.rsub: lambda input, other, alpha=1: dispatch(torch.sub, (other, input), {"alpha": alpha}),
}

_build_maps()
_install_methods()
