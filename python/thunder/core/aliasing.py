"""Aliasing: which torch ops return their input itself, a view of it, or a new tensor, as eager
PyTorch decides it, and how thunder keeps a view and its base consistent through in-place updates.

`TABLE` is the one list of aliasing ops. Each entry says what eager returns:
- SELF: the input object itself (`x.contiguous()` of a contiguous x, `x.to(x.dtype)`,
  `x.float()` of a float32 x, dropout in eval). The program gets the very tensor it passed, so an
  in-place update through either name is one update, seen by both.
- VIEW: a new tensor sharing the input's storage (`view`, `reshape` where the layout allows,
  `transpose`, `x[0]`, `detach`, ...). A view whose op returned its input unchanged (`reshape` to
  the same shape, `expand_as` of the same shape) covers the whole tensor in its own order: it is
  given the input itself, as SELF. Otherwise thunder records how to compute the view from its base
  (the op, run again) and, where the view is a one-to-one image of part of its base, how to write
  an update of the view into the base (`View.write_back`).
- NEW: a tensor of its own (`clone`, `contiguous` of a non-contiguous tensor, `to` another dtype,
  `to(copy=True)`). Every op not in the table is NEW: where its thunder decomposition returns an
  input as it is (`torch.cat` of one tensor, a pad by zero), the program gets a copy.
Where eager's answer depends on the input's layout (`contiguous`, `reshape`), eager itself decides
it, on a meta tensor of the proxy's shape, strides and dtype.

Proxies are immutable values, so a tensor that the program updates in place is a name whose value
changes (functionalize.TraceState.latest). An update of a base makes its views recomputed from the
base's new value at their next read; an update of a view is written into its base (and the base's
base...), after which the base's other views are recomputed too, as eager's share the storage. A
view with no write-back (`unfold`, `as_strided`) updated in place makes its base
unreadable (a NotImplementedError naming both).
"""

from __future__ import annotations

import builtins

import torch

from thunder import _C
import thunder.torch as ltorch
from thunder.core import fallback, prims, symbolic

SELF, VIEW, NEW = "self", "view", "new"


class View:
    """A view the program holds: its base (the tensor the program took it of), how eager computes
    it from the base's value (`forward`), and how an update of the view changes the base's value
    (`write_back(base value, view value) -> base value`; None: not representable)."""

    __slots__ = ("view", "base", "op", "forward", "_write_back", "_make", "grad_enabled")

    def __init__(self, view, base, op, forward, write_back, make=None):
        self.view, self.base, self.op = view, base, op
        self.forward, self._write_back = forward, write_back
        # Made when an update of the view needs it: a view's write-back reads its sizes as ints,
        # which for symbolic sizes pins them (thunder/core/symbolic.py) in every trace that takes
        # a view, not only in those that update one.
        self._make = make
        # The grad mode the view was taken in: recomputed in it (a view taken under no_grad stays detached).
        self.grad_enabled = torch.is_grad_enabled()

    @property
    def write_back(self):
        if self._make is not None:
            self._write_back, self._make = self._make(), None
        return self._write_back


def _is_tensor(x) -> bool:
    return isinstance(x, (_C.TensorProxy, torch.Tensor))


def _meta(x):
    """A meta tensor of x's shape, strides and dtype: eager's layout decisions, without data."""
    if isinstance(x, _C.TensorProxy):
        return torch.empty_strided(x._shape, x._strides, dtype=x.dtype, device="meta")
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_meta(y) for y in x)
    if isinstance(x, symbolic.SymInt):
        # (at the hint, unguarded: whether a result shares its input's storage is decided for
        # the sizes the trace was made at)
        return x.hint
    return x


def _shares_storage(func, args, kwargs) -> bool:
    """Whether eager's func(*args, **kwargs) returns a tensor sharing args[0]'s storage."""
    with torch._C.DisableTorchFunction():
        m = _meta(args[0])
        try:
            r = func(m, *_meta(args[1:]), **kwargs)
        except Exception:  # noqa: BLE001 - eager rejects it: thunder's symbol has already said why
            return False
        return isinstance(r, torch.Tensor) and r.untyped_storage()._cdata == m.untyped_storage()._cdata


# ---- what eager returns: rules of the table ------------------------------------------------
# A rule takes (func, the fresh input, the symbol's result, args, kwargs) and returns SELF, VIEW or NEW.

def _converted(func, x, out, args, kwargs):
    """to / type / float / ...: x itself where nothing changes (dtype, device, and a memory format
    x is already in), else a converted copy; to(copy=True) always copies."""
    if kwargs.get("copy"):
        return NEW
    fmt = kwargs.get("memory_format")
    if out is x and (fmt in (None, torch.preserve_format) or _meta(x).is_contiguous(memory_format=fmt)):
        return SELF
    return NEW


def _contiguous(func, x, out, args, kwargs):
    fmt = args[1] if len(args) > 1 else kwargs.get("memory_format") or torch.contiguous_format
    return SELF if _meta(x).is_contiguous(memory_format=fmt) else NEW


def _unchanged(func, x, out, args, kwargs):
    """Ops that eager skips where they would change nothing (dropout in eval, conj of a real
    tensor): thunder's symbols return their input exactly then."""
    return SELF if out is x else NEW


def _of_real(func, x, out, args, kwargs):
    """real / conj / resolve_conj / resolve_neg: x itself for a real x (eager returns it); of a
    complex x, real and conj are views (conj's a conjugate bit over the same storage), and
    resolve_* a copy (thunder's values carry no conjugate bit)."""
    if out is x or not x.dtype.is_complex:
        return SELF
    return VIEW if func.__name__ in ("real", "conj") else NEW


def _reshaped(func, x, out, args, kwargs):
    """reshape / reshape_as / flatten: a view where x's layout allows one, else a copy."""
    return VIEW if _shares_storage(func, args, kwargs) else NEW


def _indexed(func, x, out, args, kwargs):
    """x[key]: a view for ints, slices, None and Ellipsis; tensor (advanced) indices copy. A 0-dim
    integer tensor indexes as the int it holds (eager reads its value): x[torch.tensor(1)] is a
    view, which an update writes into x."""
    return NEW if len(args) > 1 and _has_tensor_index(eager_key(args[1])) else VIEW


def _int_tensor(k) -> bool:
    """A 0-dim integer tensor, which eager's indexing reads as a Python int."""
    return _is_tensor(k) and fallback.indexes_as_int(k)


def _has_tensor_index(key) -> bool:
    if isinstance(key, list):
        return True
    if isinstance(key, (_C.TensorProxy, torch.Tensor)):
        return not _int_tensor(key)
    if isinstance(key, tuple):
        return any(_has_tensor_index(k) for k in key)
    return False


# ---- how an update of a view changes its base --------------------------------------------
# A write-back maker takes (the fresh base, the view, the index of the view among the op's
# results, all results, args, kwargs) and returns write_back(base value, view value) or None.

def _arg(args, kwargs, i, name, default=None):
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def _dims(args, kwargs, i, name):
    """A dims argument given as a sequence or spread out (x.permute(1, 0) or x.permute((1, 0)))."""
    rest = args[i:]
    if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)):
        return tuple(rest[0])
    return tuple(rest) if rest else tuple(kwargs.get(name, ()))


def _wb_reshape(x, v, i, outs, args, kwargs):
    # A view of the same elements in the same order: the base is the update reshaped back.
    shape = tuple(x.shape)
    return lambda b, nv: nv.reshape(shape)


def _wb_real(x, v, i, outs, args, kwargs):
    if not x.dtype.is_complex:
        return None
    return lambda b, nv: torch.complex(nv, torch.imag(b))


def _wb_conj(x, v, i, outs, args, kwargs):
    if not x.dtype.is_complex or kwargs or len(args) > 1:
        return None
    return lambda b, nv: torch.conj_physical(nv)


def _wb_imag(x, v, i, outs, args, kwargs):
    return lambda b, nv: torch.complex(torch.real(b), nv)


def _wb_expand(x, v, i, outs, args, kwargs):
    if v.numel() == x.numel():  # only dims of length 1 added: the same elements
        return _wb_reshape(x, v, i, outs, args, kwargs)
    return _overlapping


def _overlapping(b, nv):
    raise RuntimeError(
        "unsupported operation: more than one element of the written-to tensor refers to a single memory "
        "location. Please clone() the tensor before performing the operation."
    )


def _wb_transpose(x, v, i, outs, args, kwargs):
    d0, d1 = _arg(args, kwargs, 1, "dim0"), _arg(args, kwargs, 2, "dim1")
    return lambda b, nv: nv.transpose(d0, d1)


def _wb_t(x, v, i, outs, args, kwargs):
    return lambda b, nv: nv.transpose(-2, -1) if nv.ndim == 2 else nv


def _wb_permute(x, v, i, outs, args, kwargs):
    dims = [d % x.ndim for d in _dims(args, kwargs, 1, "dims")]
    inverse = tuple(sorted(range(len(dims)), key=dims.__getitem__))
    return lambda b, nv: nv.permute(inverse)


def _wb_movedim(x, v, i, outs, args, kwargs):
    src, dst = _arg(args, kwargs, 1, "source"), _arg(args, kwargs, 2, "destination")
    return lambda b, nv: nv.movedim(dst, src)


def _key_at(x, dim, k):
    """The basic index that takes k (an int or a slice) along dim of x."""
    return (slice(None),) * (dim % x.ndim) + (k,)


def _wb_index(key):
    return lambda b, nv: setitem_value(b, key, nv)


def _wb_getitem(x, v, i, outs, args, kwargs):
    key = args[1]
    if _basic_key(key):
        return _wb_index(key)
    keys = key if isinstance(key, tuple) else (key,)
    if all(_int_tensor(k) or _basic_key(k) for k in keys):  # x[torch.tensor(1)], x[i, :2]
        return _wb_index(key)
    return None


def _wb_narrow(x, v, i, outs, args, kwargs):
    dim, start = _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "start")
    if not isinstance(start, int):
        return None
    n = x.shape[dim]
    start = start % n if n else 0
    return _wb_index(_key_at(x, dim, slice(start, start + v.shape[dim])))


def _wb_select(x, v, i, outs, args, kwargs):
    dim, index = _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    return _wb_index(_key_at(x, dim, index)) if isinstance(index, int) else None


def _wb_unbind(x, v, i, outs, args, kwargs):
    return _wb_index(_key_at(x, _arg(args, kwargs, 1, "dim", 0), i))


def _wb_split(x, v, i, outs, args, kwargs):
    # split, chunk, tensor_split, split_with_sizes: consecutive pieces along dim, at the sum of the
    # pieces before.
    return _wb_split_along(x, v, i, outs, args, kwargs, dim=_arg(args, kwargs, 2, "dim", 0))


def _wb_split_along(x, v, i, outs, args, kwargs, dim):
    # (hsplit, vsplit and dsplit: along dim 1 (0 of a 1-D tensor), 0 and 2)
    start = sum(o.shape[dim] for o in outs[:i])
    return _wb_index(_key_at(x, dim, slice(start, start + v.shape[dim])))


def _wb_diagonal(x, v, i, outs, args, kwargs):
    # x.diagonal().fill_(0), x.diagonal(1).add_(eps): the diagonal's elements are distinct places
    offset, dim1, dim2 = _arg(args, kwargs, 1, "offset", 0), _arg(args, kwargs, 2, "dim1", 0), _arg(args, kwargs, 3, "dim2", 1)
    if not all(isinstance(a, int) for a in (offset, dim1, dim2)):
        return None
    return lambda b, nv: torch.diagonal_scatter(b, nv, offset, dim1, dim2)


def _wb_view_as_real(x, v, i, outs, args, kwargs):
    # the same elements as real pairs: the base is the update read back as complex numbers
    return lambda b, nv: torch.view_as_complex(nv.contiguous())


def _wb_view_as_complex(x, v, i, outs, args, kwargs):
    return lambda b, nv: torch.view_as_real(nv)


def _wb_detach(x, v, i, outs, args, kwargs):
    # x.detach() shares x's storage outside autograd: an update through it changes x's values, and
    # x keeps its gradient path (ltorch.pass_gradient: the new values, x's gradient path).
    # Intermediate proxies do not say whether they require grad: every floating x keeps its path.
    if not (torch.is_grad_enabled() and x.dtype.is_floating_point):
        return lambda b, nv: nv
    return lambda b, nv: ltorch.pass_gradient(nv.detach(), b)


# ---- the table ---------------------------------------------------------------------------
# op name (torch callable's __name__) -> (rule or constant kind, write-back maker or None).

_CONVERSIONS = ("to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "short", "char",
                "byte", "bool", "cpu", "cuda")
_SKIPPED_WHEN_NOOP = ("dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d",
                      "atleast_1d", "atleast_2d", "atleast_3d", "sum_to_size")

# The rules that decide by the input's layout (strides), not by its value.
_BY_LAYOUT = (_contiguous, _reshaped)

TABLE = {
    **dict.fromkeys(_CONVERSIONS, (_converted, None)),
    "contiguous": (_contiguous, None),
    **dict.fromkeys(_SKIPPED_WHEN_NOOP, (_unchanged, None)),
    # views of the same elements in the same order
    **dict.fromkeys(("view", "view_as", "unflatten", "squeeze", "unsqueeze"), (VIEW, _wb_reshape)),
    **dict.fromkeys(("reshape", "reshape_as", "flatten", "ravel"), (_reshaped, _wb_reshape)),
    "conj": (_of_real, _wb_conj),
    **dict.fromkeys(("resolve_conj", "resolve_neg"), (_of_real, None)),
    "real": (_of_real, _wb_real),
    "imag": (VIEW, _wb_imag),
    **dict.fromkeys(("positive", "__pos__"), (SELF, None)),
    **dict.fromkeys(("expand", "expand_as", "broadcast_to"), (VIEW, _wb_expand)),
    # permutations of the dims
    **dict.fromkeys(("transpose", "swapaxes", "swapdims"), (VIEW, _wb_transpose)),
    "t": (VIEW, _wb_t),
    "permute": (VIEW, _wb_permute),
    **dict.fromkeys(("movedim", "moveaxis"), (VIEW, _wb_movedim)),
    # parts
    "__getitem__": (_indexed, _wb_getitem),
    "narrow": (VIEW, _wb_narrow),
    "select": (VIEW, _wb_select),
    "unbind": (VIEW, _wb_unbind),
    **dict.fromkeys(("split", "chunk", "tensor_split", "split_with_sizes"), (VIEW, _wb_split)),
    "hsplit": (VIEW, lambda x, *a: _wb_split_along(x, *a, dim=1 if x.ndim > 1 else 0)),
    "vsplit": (VIEW, lambda x, *a: _wb_split_along(x, *a, dim=0)),
    "dsplit": (VIEW, lambda x, *a: _wb_split_along(x, *a, dim=2)),
    "detach": (VIEW, _wb_detach),
    # views an update cannot be written back through (several elements share a place, or another dtype)
    "diagonal": (VIEW, _wb_diagonal),
    "view_as_real": (VIEW, _wb_view_as_real),
    "view_as_complex": (VIEW, _wb_view_as_complex),
    **dict.fromkeys(("as_strided", "unfold", "adjoint"), (VIEW, None)),
    "clone": (NEW, None),
}


def kind_of(func, x, out, args, kwargs) -> str:
    """What eager's func(*args, **kwargs) returns with x = args[0]: SELF, VIEW or NEW."""
    entry = TABLE.get(getattr(func, "__name__", ""))
    if entry is None:
        return NEW
    rule = entry[0]
    return rule if isinstance(rule, str) else rule(func, x, out, args, kwargs)


def result(state, func, held, args, kwargs, out, call):
    """The value the program gets from func: `out` (the symbol's result on the fresh `args`), with
    eager's aliasing. `held`: the arguments as the program passed them (a tensor it updated in
    place is a name; args holds its value now). Records the views the program takes, each
    recomputed later as call(func, args, kwargs) with its base's new value."""
    if state is None or not args or state.replaying:
        return out
    x = args[0]
    if not _isinstance(x, _C.TensorProxy):
        return _copies_of_inputs(out, args, kwargs) if _has_input(out, args, kwargs) else out
    h = held[0]
    if (type(h) is _C.TensorProxy and h is not x and TABLE.get(getattr(func, "__name__", ""), (None,))[0] in _BY_LAYOUT
            and tuple(h.shape) == tuple(x.shape)):
        # A tensor updated in place keeps its layout: eager decides by the strides of the tensor
        # the program holds, not by those of thunder's new value (clamp_ of a strided input, then
        # .contiguous(): a copy in eager, where the new value's contiguous layout said the tensor
        # itself; the copy then showed later updates of the input: fuzzer seed 74850).
        kind = kind_of(func, h, out, (h, *args[1:]), kwargs)
    else:
        kind = kind_of(func, x, out, args, kwargs)
    if kind == SELF or (kind == VIEW and out is x):
        return held[0]
    if kind == NEW:
        return _copies_of_inputs(out, args, kwargs) if _has_input(out, args, kwargs) else out
    base = held[0]
    if not _isinstance(base, _C.TensorProxy):
        return out  # a view of a tensor the function closes over: its update is refused where it is made
    make = TABLE[func.__name__][1]
    outs = list(out) if _isinstance(out, (tuple, list)) else [out]
    for i, v in enumerate(outs):
        if not _isinstance(v, _C.TensorProxy):
            continue
        if v is x:  # one piece that is the whole tensor (x.split(n) with n >= len)
            outs[i] = base
            continue
        lazy = (lambda v, i: lambda: make(x, v, i, outs, args, kwargs))(v, i) if make is not None else None
        rest = args[1:]
        if _isinstance(out, (tuple, list)):
            forward = (lambda j: lambda b: call(func, (b, *rest), kwargs)[j])(i)
        else:
            forward = lambda b: call(func, (b, *rest), kwargs)  # noqa: E731
        state.view_of[id(v)] = View(v, base, func.__name__, forward, None, lazy)
        state.views.setdefault(id(base), []).append(v)
    if _isinstance(out, (tuple, list)) and any(a is not b for a, b in zip(outs, out)):
        return type(out)(*outs) if hasattr(out, "_fields") else type(out)(outs)
    return out


# These run for every op traced (hundreds of thousands of checks for a model): the interpreter's
# own isinstance, not the one tracing installs (thunder.__init__), which costs a Python call.
_isinstance = builtins.isinstance


def _leaves(x, out, depth=0):
    """Appends the tensor proxies in x (nested tuples, lists and dict values, four levels) to out."""
    if type(x) is _C.TensorProxy:
        out.append(x)
    elif depth < 4:
        if _isinstance(x, (tuple, list)):
            for y in x:
                if type(y) is _C.TensorProxy:
                    out.append(y)
                elif _isinstance(y, (tuple, list, dict)):
                    _leaves(y, out, depth + 1)
        elif _isinstance(x, dict):
            _leaves(tuple(x.values()), out, depth)
    return out


def _has_input(out, args, kwargs) -> bool:
    outs = _leaves(out, [])
    if not outs:
        return False
    inputs = {id(a) for a in _leaves(kwargs, _leaves(args, []))}
    return any(id(o) in inputs for o in outs)


def _copies_of_inputs(out, args, kwargs):
    """out with each tensor that is one of the inputs replaced by a copy of it: eager's op made a
    new tensor where thunder's decomposition had nothing to compute."""
    inputs = {id(a) for a in _leaves(kwargs, _leaves(args, []))}

    def copy(o):
        if isinstance(o, _C.TensorProxy) and id(o) in inputs:
            return torch.clone(o)
        if isinstance(o, (tuple, list)):
            items = [copy(y) for y in o]
            return type(o)(*items) if hasattr(o, "_fields") else type(o)(items)
        return o

    return copy(out)


# ---- keeping views and bases consistent -------------------------------------------------

def refresh(state, v):
    """Recomputes the view v from its base's value now (its base, or a sibling, changed)."""
    rec = state.view_of[id(v)]
    state.pending.discard(id(v))
    base = state.fresh(rec.base)
    with torch.set_grad_enabled(rec.grad_enabled), state.replay():
        value = rec.forward(base)
    own = state.latest.get(id(v))
    if rec.op == "detach" and own is not None and own[1] is not v and value.dtype.is_floating_point:
        # A detached view updated in place from a tensor that needs a gradient (`t1 = t0.detach();
        # t1.copy_(t0)`) has that update's gradient history in eager, and an update of its base
        # changes its values but not that history: the base's values, the update's gradient
        # (fuzzer seed 111316). (Proxies do not say whether they need a gradient: where the
        # update needed none, the gradient passed is none.)
        with torch.enable_grad(), state.replay():
            value = ltorch.pass_gradient(value, own[1])
    state.latest[id(v)] = (v, value)
    return value


def through_detach(state, proxy) -> bool:
    """Whether the chain of views from proxy to its root passes through a detach."""
    p = proxy
    while (rec := state.view_of.get(id(p))) is not None:
        if rec.op == "detach":
            return True
        p = rec.base
    return False


def write_through(state, proxy, value) -> bool:
    """The update of `proxy` (now `value`), a view, written into its base and up the chain of
    bases. False (nothing changed) where some view of the chain has no write-back."""
    chain = []
    p = proxy
    while (rec := state.view_of.get(id(p))) is not None:
        if rec.write_back is None:
            return False
        chain.append(rec)
        p = rec.base
    updates = []
    with state.replay():
        for rec in chain:
            value = rec.write_back(state.fresh(rec.base), value)
            updates.append((rec.base, value))
    for base, value in updates:
        state.latest[id(base)] = (base, value)
    return True


def invalidate(state, proxy):
    """After an update of proxy (and, written through, of its bases): every other view in its
    tree of views is recomputed at its next read, as eager's share the storage."""
    path = {id(proxy)}
    root = proxy
    while (rec := state.view_of.get(id(root))) is not None:
        root = rec.base
        path.add(id(root))
    stack = [root]
    while stack:
        for v in state.views.get(id(stack.pop()), ()):
            if id(v) not in path:
                state.pending.add(id(v))
            stack.append(v)


def _basic_key(key) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    for k in keys:
        if k is None or k is Ellipsis:
            continue
        if isinstance(k, slice):
            if all(x is None or (isinstance(x, int) and not isinstance(x, bool)) for x in (k.start, k.stop, k.step)):
                continue
            return False
        if not isinstance(k, int) or isinstance(k, bool):
            return False
    return True


# ---- the value of x after x[key] = value -------------------------------------------------

def eager_key(key):
    """An index key as eager's indexing reads it: a NumPy array or a range as the list it spells, a
    tuple inside the key as a list, and a list holding lists, tensors, slices, None or Ellipsis
    as a tuple (x[[[0, 1], [2, 3]]] is x[[0, 1], [2, 3]])."""
    def seq(k):
        if isinstance(k, range) or (type(k).__module__ == "numpy" and hasattr(k, "tolist") and getattr(k, "ndim", 0)):
            return list(k) if isinstance(k, range) else k.tolist()
        return k

    key = seq(key)
    if isinstance(key, list) and any(isinstance(k, (list, tuple, slice, range, _C.TensorProxy, torch.Tensor))
                                     or k is None or k is Ellipsis for k in key):
        key = tuple(key)
    if isinstance(key, tuple):
        return tuple(list(k) if isinstance(k, tuple) else seq(k) for k in key)
    return key


def setitem_value(x, key, value):
    """The value of x after x[key] = value, computed without mutation."""
    if isinstance(value, (list, tuple)):
        with torch._C.DisableTorchFunction():
            value = torch.tensor(value, dtype=x.dtype, device=str(x.device))
    keys = eager_key(key)
    keys = keys if isinstance(keys, tuple) else (keys,)
    if any(k is False for k in keys):  # x[False] = v selects nothing
        return x
    # (True adds a dim, as None does: x[True] = v sets every element; bool is an int to Python)
    keys = tuple(None if k is True else k for k in keys)
    if _is_tensor(value) and value.dtype != x.dtype:
        _check_index_put_dtypes(x, keys, value)
    if len(keys) == 1 and _is_tensor(keys[0]) and keys[0].dtype == torch.bool:
        mask = keys[0]
        if mask.ndim < x.ndim:
            mask = mask.reshape(tuple(mask.shape) + (1,) * (x.ndim - mask.ndim))
        if not _is_tensor(value) or value.numel() == 1:
            if _is_tensor(value):
                value = value.reshape(()).to(x.dtype)
            return torch.where(mask, value, x)
        # x[mask] = row: a value that broadcasts to each selected element's trailing dims
    if any(_is_tensor(k) or isinstance(k, list) for k in keys):
        return _index_put_value(x, keys, value)
    return _basic_setitem_value(x, keys, value)


def _check_index_put_dtypes(x, keys, value):
    """Eager's index_put_ takes a value of x's dtype only, where the key indexes by integer tensors,
    or by a mask with a value of more than one element (a one-element value is a masked_fill)."""
    ints = any(isinstance(k, list) or (_is_tensor(k) and not _int_tensor(k) and k.dtype not in (torch.bool, torch.uint8))
               for k in keys)
    masks = any(_is_tensor(k) and k.dtype in (torch.bool, torch.uint8) for k in keys)
    if ints or (masks and value.numel() != 1):
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_title(x.dtype)} for the destination and {_title(value.dtype)} for the source.")


def _title(dtype):
    from thunder.core.functionalize import _dtype_title

    return _dtype_title(dtype)


def _full(shape, value, dtype, device):
    return _C.get_symbol("ltorch.full")(shape, value, device=device, dtype=dtype)


def _expand_ellipsis(keys, ndim):
    # (a boolean mask indexes as many dims as it has)
    n_real = sum(k.ndim if _is_tensor(k) and k.dtype in (torch.bool, torch.uint8) else 1
                 for k in keys if k is not None and k is not Ellipsis)
    out = []
    for k in keys:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - n_real))
        else:
            out.append(k)
    if not any(k is Ellipsis for k in keys):
        out.extend([slice(None)] * (ndim - n_real))
    return out


def _index_put_value(x, keys, value):
    expanded = _expand_ellipsis(keys, x.ndim)
    for p, k in enumerate(expanded):
        if _int_tensor(k) and not (p > 0 and len(expanded) == x.ndim and all(
                isinstance(j, slice) and j == slice(None) for q, j in enumerate(expanded) if q != p)):
            # (x[:, pos] = v of a 0-dim pos, a KV cache's position: index_copy below)
            # x[i, ...] = v with a 0-dim integer tensor i: eager reads i as an int, a view of x without
            # that dim, which the rest of the key indexes: that row updated, then written back
            d = sum(1 for j in expanded[:p] if j is not None)
            n = x.shape[d]
            i = k.reshape(1).long()
            i = torch.where(i < 0, i + n, i)
            row = torch.index_select(x, d, i).squeeze(d)
            rest = tuple(expanded[:p]) + tuple(expanded[p + 1:])
            new_row = setitem_value(row, rest if rest else (Ellipsis,), value)
            return torch.index_copy(x, d, i, new_row.unsqueeze(d))
    expanded = [_key_tensor(k, x) for k in expanded]
    mixed = any(k is None or isinstance(k, int) or (isinstance(k, slice) and k != slice(None)) for k in expanded)
    tpos = [p for p, k in enumerate(expanded) if _is_tensor(k)]
    masks = any(expanded[p].dtype in (torch.bool, torch.uint8) for p in tpos)
    one_row_index = (len(tpos) == 1 and len(expanded) == x.ndim and tpos[0] > 0 and expanded[tpos[0]].ndim <= 1
                     and not mixed and not masks)  # x[:, :, pos] = v: index_copy below
    if not one_row_index and (mixed or masks or tpos[0] > 0 or tpos != list(range(len(tpos)))):
        return _mixed_index_put_value(x, expanded, value)
    tensors = [i for i, k in enumerate(expanded) if _is_tensor(k)]
    if (len(tensors) == 1 and len(expanded) == x.ndim and tensors[0] > 0 and expanded[tensors[0]].ndim <= 1
            and expanded[tensors[0]].dtype in (torch.int64, torch.int32)
            and all(isinstance(k, slice) and k == slice(None) for i, k in enumerate(expanded) if i != tensors[0])):
        # x[:, :, pos] = v (a KV cache written at its positions): the rows of one dim, as
        # x.index_copy(d, pos, v), which the fuser stores from the kernel computing v.
        return _index_copy_value(x, tensors[0], expanded[tensors[0]], value)
    indices = []
    for k in expanded:
        if k is None:
            raise NotImplementedError("thunder.jit: Tensor.__setitem__ with None and tensor indices together is not supported")
        if isinstance(k, list):
            with torch._C.DisableTorchFunction():
                k = torch.tensor(k, device=str(x.device))
        if _is_tensor(k):
            indices.append(k)
        elif isinstance(k, slice) and k == slice(None):
            indices.append(None)
        else:
            raise NotImplementedError(
                f"thunder.jit: Tensor.__setitem__ mixing tensor indices with {k!r} is not supported"
            )
    while indices and indices[-1] is None:
        indices.pop()
    for k in indices:
        if k is not None and (k.dtype.is_floating_point or k.dtype.is_complex or k.dtype in (torch.int8, torch.int16)):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if any(k is None for k in indices):
        raise NotImplementedError(
            "thunder.jit: Tensor.__setitem__ with tensor indices after a full slice is supported for one "
            "index tensor (x[:, idx] = v), not several")
    if not _is_tensor(value):
        value = _full((), value, x.dtype, x.device)
    return torch.index_put(x, tuple(indices), value.to(x.dtype))


def _key_tensor(k, x):
    """A list in an index as the tensor eager makes of it (ints: positions; bools: a mask)."""
    if isinstance(k, list):
        with torch._C.DisableTorchFunction():
            return torch.tensor(k, device=str(x.device), dtype=None if k else torch.int64)
    return k


def _mixed_index_put_value(x, expanded, value):
    """x[key] = value for a key of tensors with ints, slices or None (x[1, idx] = v, x[:, mask] = 0,
    x[idx, :, idx2] += 1), as eager runs it: the ints, slices and None index a view of x, whose
    dims the tensors then index (index_put_ on the view)."""
    basic, adv = [], []  # the basic key; per dim of x[basic], its index tensor or None
    for k in expanded:
        if _is_tensor(k):
            if k.dtype.is_floating_point or k.dtype.is_complex or k.dtype in (torch.int8, torch.int16):
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            m = k.ndim if k.dtype in (torch.bool, torch.uint8) else 1  # a mask indexes as many dims as it has
            basic.extend([slice(None)] * m)
            adv.extend([k] + [None] * (m - 1))
        elif isinstance(k, int):
            basic.append(k)
        else:  # a slice or None
            basic.append(k)
            adv.append(None)
    basic = tuple(basic)
    y = x[basic]
    new_y = _advanced_put_value(y, adv + [None] * (y.ndim - len(adv)), value)
    return _basic_setitem_value(x, basic, new_y)


def _advanced_put_value(y, adv, value):
    """y[adv] = value, adv holding one index tensor or None (a full slice) per dim of y."""
    if not _is_tensor(value):
        value = _full((), value, y.dtype, y.device)
    value = value.to(y.dtype)
    pos = [d for d, k in enumerate(adv) if k is not None]
    tensors = [adv[d] for d in pos]
    if any(t.dtype in (torch.bool, torch.uint8) for t in tensors):
        if len(tensors) != 1:
            raise NotImplementedError("thunder.jit: Tensor.__setitem__ with a boolean mask beside other index "
                                      "tensors is not supported")
        # one mask over dims [p, p + m): the selected elements take the value, which must not depend
        # on how many the mask selects (its dim for them of length 1)
        mask, p = tensors[0].bool(), pos[0]
        m, post = mask.ndim, y.ndim - pos[0] - tensors[0].ndim
        v = value.reshape((1,) * max(0, p + 1 + post - value.ndim) + tuple(value.shape))
        if v.ndim > p + 1 + post or v.shape[p] != 1:
            raise NotImplementedError(
                "thunder.jit: Tensor.__setitem__ with a boolean mask and a value of shape "
                f"{list(value.shape)} depends on how many elements the mask selects; use torch.where")
        v = v.reshape(tuple(v.shape[:p]) + (1,) * m + tuple(v.shape[p + 1:]))
        mask = mask.reshape((1,) * p + tuple(mask.shape) + (1,) * post)
        return torch.where(mask, v, y)
    # Eager's result y[adv]: the broadcast index shape in place of the indexed dims where they are
    # adjacent, else in front. The indexed dims are moved to the front, index_put there.
    bshape = tuple(torch.broadcast_shapes(*[tuple(t.shape) for t in tensors]))
    rest = [d for d in range(y.ndim) if d not in pos]
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    front = pos[0] if adjacent else 0
    shape = tuple(y.shape[d] for d in rest[:front]) + bshape + tuple(y.shape[d] for d in rest[front:])
    v = value.expand(shape)
    nb = len(bshape)
    if front:
        v = v.movedim(tuple(range(front, front + nb)), tuple(range(nb)))
    perm = pos + rest
    out = torch.index_put(y.permute(perm), tuple(tensors), v)
    inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return out.permute(inverse)


def _index_copy_value(x, d, index, value):
    n, scalar = x.shape[d], index.ndim == 0
    index = index.reshape(-1).long()
    index = torch.where(index < 0, index + n, index)  # eager's negative positions count from the end
    if not _is_tensor(value):
        value = _full((), value, x.dtype, x.device)
    value = value.to(x.dtype)
    if scalar:  # x[:, i] with a 0-d i drops the dim: the value has x's shape without it
        value = value.expand(tuple(x.shape[:d]) + tuple(x.shape[d + 1:])).unsqueeze(d)
    else:
        value = value.expand(tuple(x.shape[:d]) + (index.shape[0],) + tuple(x.shape[d + 1:]))
    return torch.index_copy(x, d, index, value)


def _basic_setitem_value(x, keys, value):
    shape = tuple(x.shape)
    dims = []  # per dim of x: (start, length, step, is_int)
    view_shape = []  # the shape of x[key]
    d = 0
    for k in _expand_ellipsis(keys, x.ndim):
        if k is None:
            view_shape.append(1)
            continue
        if d >= len(shape):
            raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
        n = shape[d]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            length = len(range(start, stop, step))
            dims.append((start, length, step, False))
            view_shape.append(length)
        else:
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
            dims.append((i % n, 1, 1, True))
        d += 1
    region = [length for _, length, _, _ in dims]
    if _is_tensor(value):
        v = value.to(x.dtype)
        if tuple(v.shape) != tuple(view_shape):
            v = v.expand(tuple(view_shape))
        v = v.reshape(tuple(region))
    else:
        v = _full(tuple(region), value, x.dtype, x.device)
    if any(length == 0 for length in region):
        return x
    if all(start == 0 and length == n and step == 1 for (start, length, step, _), n in zip(dims, shape)):
        return v
    config = [(start, n - (start + (length - 1) * step + 1), step - 1) for (start, length, step, _), n in zip(dims, shape)]
    padded = prims.pad(v, 0, config)
    mask = prims.pad(_full(tuple(region), True, torch.bool, x.device), False, config)
    return torch.where(mask, padded, x)
