"""Outputs of a traced function that the trace cannot hold as they are.

A trace returns tensors in tuples, lists and dicts. Programs return more: named tuples,
dataclass-like outputs (Hugging Face's ModelOutput), caches (objects whose attributes hold
tensors). Such an output is split, at trace time, into its tensors (what the trace returns) and a
spec that rebuilds the Python object around them on every call: the trace then returns
(MARK, key, tensors) and the caller rebuilds the object from the spec under `key`.
"""

from __future__ import annotations

import copy
import itertools
import threading
import types
import weakref

import torch
import torch.utils._pytree as pytree

from thunder import _C
from thunder.core import symbolic

MARK = "__thunder_rebuild__"

_specs: dict[int, "_Spec"] = {}
_keys = itertools.count()
_lock = threading.Lock()

_CONSTANT_TYPES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device)


class _Spec:
    def rebuild(self, it):
        raise NotImplementedError


class _Leaf(_Spec):
    def rebuild(self, it):
        return next(it)


class _Const(_Spec):
    def __init__(self, value):
        self.value = value

    def rebuild(self, it):
        return self.value


class _Seq(_Spec):
    def __init__(self, kind, items):
        self.kind, self.items = kind, items

    def rebuild(self, it):
        return self.kind(s.rebuild(it) for s in self.items)


class _Dict(_Spec):
    def __init__(self, keys, items):
        self.keys, self.items = keys, items

    def rebuild(self, it):
        return {k: s.rebuild(it) for k, s in zip(self.keys, self.items)}


class _Node(_Spec):
    """A type registered with torch's pytree (named tuples, ModelOutput, ...)."""

    def __init__(self, kind, context, items):
        self.kind, self.context, self.items = kind, context, items

    def rebuild(self, it):
        children = [s.rebuild(it) for s in self.items]
        return pytree.SUPPORTED_NODES[self.kind].unflatten_fn(children, self.context)


class _NamedTuple(_Spec):
    def __init__(self, kind, items):
        self.kind, self.items = kind, items

    def rebuild(self, it):
        return self.kind(*(s.rebuild(it) for s in self.items))


class _Object(_Spec):
    """Any other object: a shallow copy of the traced one, with its tensor-holding attributes
    rebuilt; or, for an object the function was given (`inplace`), that object itself, updated
    as the function updated it (a cache that creates its tensors on first use)."""

    def __init__(self, template, attrs, inplace=False):
        self.template, self.attrs, self.inplace = template, attrs, inplace

    def rebuild(self, it):
        obj = self.template if self.inplace else copy.copy(self.template)
        for name, s in self.attrs.items():
            setattr(obj, name, s.rebuild(it))
        return obj


class _Updates(_Spec):
    """The output, after the objects the function was given and set tensors on (attributes that
    now hold the trace's values) are updated in place: they must not keep this trace's proxies."""

    def __init__(self, out, objects):
        self.out, self.objects = out, objects

    def rebuild(self, it):
        out = self.out.rebuild(it)  # (its tensors come first)
        for o in self.objects:
            o.rebuild(it)
        return out


def _weak(obj):
    """A reference to obj that does not keep it alive where it can (a callable returning it)."""
    try:
        return weakref.ref(obj)
    except TypeError:  # (no weak references: the object stays with the guard)
        return (lambda o: lambda: o)(obj)


def state_guard(updated):
    """A guard reader for objects a trace set tensors on: the kinds their attributes hold. The
    trace may have branched on them (a cache that creates its tensors when it holds none yet), so a
    call finding them otherwise traces again instead of replaying that branch."""
    refs = [(_weak(obj), attrs) for obj, attrs in updated]

    def read():
        out = []
        for ref, attrs in refs:
            obj = ref()
            out.extend(type(getattr(obj, a, None)) if obj is not None else None for a in attrs)
        return tuple(out)

    return read


def tensor_slots(given) -> list:
    """(object, attribute, index or None, tensor) for each tensor the given objects hold in an
    attribute or in a list or tuple held in one: where a traced function may read a tensor that
    is not an argument of its own (a cache object's keys)."""
    slots = []
    for obj in given.values():
        for attr, v in vars(obj).items():
            if isinstance(v, torch.Tensor):
                slots.append((obj, attr, None, v))
            elif isinstance(v, (list, tuple)) and len(v) <= 1024:
                slots.extend((obj, attr, i, y) for i, y in enumerate(v) if isinstance(y, torch.Tensor))
    return slots


def get_slot(obj, attr, index):
    """What a slot (tensor_slots) holds: obj.attr, or obj.attr[index]."""
    v = vars(obj).get(attr)
    if index is None:
        return v
    return v[index] if isinstance(v, (list, tuple)) and len(v) > index else None


def set_slot(obj, attr, index, value) -> None:
    """Sets a slot (tensor_slots): obj.attr, or item `index` of the list or tuple it holds."""
    if index is None:
        vars(obj)[attr] = value
        return
    v = vars(obj)[attr]
    if isinstance(v, list):
        v[index] = value
    else:
        vars(obj)[attr] = v[:index] + (value,) + v[index + 1:]


def read_slots(slots, closures) -> dict:
    """The `slots` whose tensor became a closure of the trace (read by it, captured as a
    constant), by (object id, attribute, index): {key: (object reference, attribute, index)}."""
    read = {id(t) for t in closures}
    out = {}
    for obj, attr, index, t in slots:
        if id(t) not in read:
            continue
        out[(id(obj), attr, index)] = (_weak(obj), attr, index)
    return out


_SCALAR_TYPES = frozenset((bool, int, float, str, type(None)))
VALUE = "value"  # the `index` of a slot read for its scalar value (not a tensor's identity)


_NONE = object()


class ScalarReads:
    """While a call is traced: records the scalar attributes (bool, int, float, str, None) the
    program reads from the plain objects it was given (`given`, given_objects), which the trace
    bakes in as constants: {(object id, attribute, VALUE): (object reference, attribute, VALUE)}.
    Reads are seen through a recording __getattribute__ set on those objects' classes while any
    thread traces with one (counted per class, under a lock; each thread records into its own
    active recorders); a SimpleNamespace, whose type takes none, has every scalar attribute
    recorded."""

    _lock = threading.Lock()
    _hooked: dict = {}  # class -> [its own __getattribute__ or _NONE, number of traces using the hook]
    _local = threading.local()

    def __init__(self, given):
        self.given = {k: o for k, o in given.items() if not isinstance(o, type)}
        self.reads = {}
        self.first = {}  # the value each read attribute had when first read
        self._classes = []

    @staticmethod
    def _hook(original):
        scalars, local = _SCALAR_TYPES, ScalarReads._local

        def recording(obj, name):
            v = original(obj, name)
            if type(v) in scalars and not name.startswith("__"):
                for rec in getattr(local, "active", ()):
                    if id(obj) in rec.given:
                        rec.reads[(id(obj), name, VALUE)] = (_weak(obj), name, VALUE)
                        rec.first.setdefault((id(obj), name), v)
            return v

        return recording

    def __enter__(self):
        for obj in self.given.values():
            if type(obj) is types.SimpleNamespace:
                for attr, v in vars(obj).items():
                    if type(v) in _SCALAR_TYPES:
                        self.reads[(id(obj), attr, VALUE)] = (_weak(obj), attr, VALUE)
                        self.first.setdefault((id(obj), attr), v)
        with ScalarReads._lock:
            for cls in {type(o) for o in self.given.values()}:
                if cls is types.SimpleNamespace or cls.__module__ == "builtins":
                    continue
                entry = ScalarReads._hooked.get(cls)
                if entry is None:
                    own = cls.__dict__.get("__getattribute__", _NONE)
                    try:
                        cls.__getattribute__ = ScalarReads._hook(cls.__getattribute__)
                    except (TypeError, AttributeError):
                        continue
                    entry = ScalarReads._hooked[cls] = [own, 0]
                entry[1] += 1
                self._classes.append(cls)
        active = getattr(ScalarReads._local, "active", None)
        if active is None:
            active = ScalarReads._local.active = []
        active.append(self)
        return self

    def changed(self) -> bool:
        """Whether the program changed a scalar attribute it read (`box.k += 1`): the trace made
        that change once, a cached call would not make it again."""
        for (oid, name), v in self.first.items():
            obj = self.given.get(oid)
            if obj is not None and getattr(obj, name, v) != v:
                return True
        return False

    def __exit__(self, *exc):
        ScalarReads._local.active.remove(self)
        with ScalarReads._lock:
            for cls in self._classes:
                entry = ScalarReads._hooked[cls]
                entry[1] -= 1
                if entry[1] == 0:
                    del ScalarReads._hooked[cls]
                    if entry[0] is _NONE:
                        del cls.__getattribute__
                    else:
                        cls.__getattribute__ = entry[0]
        self._classes.clear()
        return False


def read_guard(refs):
    """A guard reader for what traces read from their arguments' attributes (read_slots,
    ScalarReads): the tensor each such attribute holds now, and the value of each scalar read.
    The compiled function keys a tensor by its metadata and hands it to the trace as an input
    (CompiledFunction::sourceFromGuard): a call finding another tensor of the same kind there
    (`box.t = new_tensor`, a cache's keys one token longer) runs the same trace on it. A changed
    scalar (`box.scale = 3.0`) traces again: the trace holds it as a constant."""
    refs = tuple(refs)

    def current():
        out = []
        for ref, attr, index in refs:
            obj = ref()
            v = getattr(obj, attr, None) if obj is not None else None
            if index == VALUE:
                # (another kind of value now: keyed by its identity, as a string no scalar equals)
                out.append(v if type(v) in _SCALAR_TYPES else f"\0{type(v).__name__}@{id(v)}")
                continue
            if index is not None:
                v = v[index] if isinstance(v, (list, tuple)) and len(v) > index else None
            out.append(v if isinstance(v, torch.Tensor) else None)
        return tuple(out)

    return current


def given_objects(args, depth=0, seen=None) -> dict:
    """The plain Python objects reachable from a call's arguments (through tuples, lists, dicts
    and attributes), by id: those a function may set tensors on, as a cache that fills itself."""
    seen = {} if seen is None else seen
    if depth > 6 or isinstance(args, (torch.Tensor, type, torch.nn.Module) + _CONSTANT_TYPES):
        return seen
    if isinstance(args, (tuple, list, dict)) and len(args) > 1024:
        return seen  # (a dataset's worth of items: no cache among them, and walking it would cost)
    if isinstance(args, (tuple, list)):
        for y in args:
            given_objects(y, depth + 1, seen)
    elif isinstance(args, dict):
        for y in args.values():
            given_objects(y, depth + 1, seen)
    elif hasattr(args, "__dict__") and id(args) not in seen and not callable(args):
        seen[id(args)] = args
        for y in vars(args).values():
            given_objects(y, depth + 1, seen)
    return seen


def _contains_proxy(x, depth=0) -> bool:
    if depth > 8:
        return False
    if isinstance(x, (_C.TensorProxy, symbolic.SymInt)):
        return True
    if isinstance(x, (tuple, list)):
        return any(_contains_proxy(y, depth + 1) for y in x)
    if isinstance(x, dict):
        return any(_contains_proxy(y, depth + 1) for y in x.values())
    if hasattr(x, "__dict__") and not isinstance(x, (type, torch.nn.Module)):
        return any(_contains_proxy(y, depth + 1) for y in vars(x).values())
    return False


class _Size(_Spec):
    """A torch.Size, or one with symbolic sizes (a SymSize): rebuilt as a torch.Size of the sizes
    the call computed."""

    def __init__(self, items):
        self.items = items

    def rebuild(self, it):
        return torch.Size(s.rebuild(it) for s in self.items)


def _spec(x, leaves, given=None, fresh=None) -> _Spec:
    if isinstance(x, (_C.TensorProxy, symbolic.SymInt)):
        # (a symbolic int is returned by the trace, which evaluates it at each call)
        leaves.append(x)
        return _Leaf()
    if type(x) in (symbolic.SymSize, torch.Size):
        return _Size([_spec(y, leaves, given, fresh) for y in x])
    if isinstance(x, _CONSTANT_TYPES) or isinstance(x, torch.Tensor):
        return _Const(x)
    given = given or {}
    fresh = fresh or (lambda v: v)
    if type(x) in (tuple, list):
        return _Seq(type(x), [_spec(y, leaves, given, fresh) for y in x])
    if type(x) is dict:
        return _Dict(list(x), [_spec(y, leaves, given, fresh) for y in x.values()])
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return _NamedTuple(type(x), [_spec(y, leaves, given, fresh) for y in x])
    if type(x) in pytree.SUPPORTED_NODES:
        children, context = pytree.SUPPORTED_NODES[type(x)].flatten_fn(x)
        return _Node(type(x), context, [_spec(y, leaves, given, fresh) for y in children])
    if _contains_proxy(x) or (id(x) in given and isinstance(x, torch.nn.Module)):
        # An attribute's latest value: a tensor the function updated in place after setting it.
        attrs = {k: _spec(fresh(v), leaves, given, fresh) for k, v in vars(x).items() if _contains_proxy(v)}
        return _Object(x, attrs, inplace=id(x) in given)
    return _Const(x)


def _plain(x) -> bool:
    """Whether the trace can return x as it is: tensors and constants in tuples, lists and dicts."""
    if isinstance(x, (_C.TensorProxy,) + _CONSTANT_TYPES):
        return True
    if type(x) in (tuple, list):
        return all(_plain(y) for y in x)
    if type(x) is dict:
        return all(isinstance(k, str) and _plain(v) for k, v in x.items())
    return False


def updated(given) -> list:
    """Of the objects a call was given (given_objects), those a trace set tensors on, each with
    the names of those attributes (for state_guard)."""
    out = []
    for o in given.values():
        attrs = tuple(k for k, v in vars(o).items() if _contains_proxy(v))
        if attrs:
            out.append((o, attrs))
    return out


_ABSENT = object()


def snapshot(given) -> dict:
    """What the given objects' attributes hold before a call is traced (for restore): per object,
    its attributes, and a copy of each list it holds."""
    return {k: (dict(vars(o)), {a: list(v) for a, v in vars(o).items() if isinstance(v, list)})
            for k, o in given.items()}


def restore(updated, before: dict) -> None:
    """Puts back what the objects a trace set tensors on held before it (snapshot): the trace
    left proxies there, which the call's results replace when its program has run."""
    for o, attrs in updated:
        held, lists = before.get(id(o), ({}, {}))
        d = vars(o)
        for a in attrs:
            old = held.get(a, _ABSENT)
            if old is _ABSENT:
                d.pop(a, None)
            elif a in lists and d.get(a) is old:
                old[:] = lists[a]  # a list the trace changed in place
            else:
                d[a] = old


def prepare(out, updated=(), fresh=None):
    """The value a trace returns for `out`: out itself when the trace can hold it, else
    (MARK, key, tensors) with the spec that rebuilds out stored under key. `updated`: the objects
    the call was given and set tensors on (outputs.updated), updated in place on every call.
    `fresh`: a tensor's latest value (functionalize.TraceState.fresh)."""
    if _plain(out) and not updated:
        return out
    given = {id(o): o for o, _ in updated}
    leaves: list = []
    spec = _spec(out, leaves, given, fresh)
    if given:
        spec = _Updates(spec, [_spec(o, leaves, given, fresh) for o in given.values()])
    with _lock:
        key = next(_keys)
        _specs[key] = spec
    return (MARK, key, tuple(leaves))


def finish(result):
    """The caller's value for what a trace returned: the rebuilt object for a (MARK, key, tensors)."""
    if type(result) is tuple and len(result) == 3 and result[0] == MARK:
        return _specs[result[1]].rebuild(iter(result[2]))
    return result
