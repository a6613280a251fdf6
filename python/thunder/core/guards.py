"""Guards: the Python values a trace depends on beyond its arguments.

A trace bakes in every Python value the program read while it was traced: a scalar in a closure
or a global, a module's `training` flag, a config object's attribute. `guard_for_function` and
`guard_for_module` collect readers of those values once; the compiled function calls the guard
before each cache lookup and the values join the key (thunder._C keys scalars by value and other
objects by identity), so a changed value traces again instead of returning a stale result.

What is read: the closure cells and the globals named by the function's code (and by the code of
the user functions, methods and nested functions it names, a few levels deep); attributes named
by that code on global modules and plain objects; and for an nn.Module, every submodule's
`training` and its scalar attributes. Containers are keyed by identity, so what the code reads
from them is guarded on its own (`_container_reads`, as torch.compile's guards do): items with
constant keys (`cfg['scale']`, `s[0]`, `cfg['a']['b']`, `cfg.get('k', d)`), reached from a
global, a closure cell, `self` or attributes of them (`cfg.sub.lr`, `self.cfg['eps']`), the
length of a container passed to `len`, a constant key tested with `in`, and the contents of a
container the code iterates (`for v in s`, `cfg.items()`, `sum(s)`, up to 64 items). An item
read with a key the code computes is not seen.
"""

from __future__ import annotations

import argparse
import builtins
import dis
import functools
import itertools
import os
import random
import sys
import types
import warnings
import weakref
from typing import Callable

import torch

_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device)
# Functions an object holds, keyed by identity (`self.act = torch.relu`, `cfg.fn = my_fn`).
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, functools.partial)
_MISSING = object()
_MAX_DEPTH = 8
_THUNDER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _library(obj) -> bool:
    """True for functions, modules and classes of torch, thunder and the standard library: their
    globals are not the user's program state."""
    mod = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else obj.__name__
    if not isinstance(mod, str):
        # A Python function without a module is the user's, run with exec in globals without a
        # __name__ (generated code); other objects without one are builtins.
        return not isinstance(obj, types.FunctionType)
    root = mod.split(".")[0]
    return root in ("torch", "thunder", "builtins", "typing", "functools", "math", "operator") or (
        root in sys.stdlib_module_names
    )


def _probe(obj, name: str):
    """getattr(obj, name, _MISSING) for the scan, which reads names in code that may never run: a
    library's __getattr__ may warn of a deprecated name the program does not read (diffusers'
    config attributes read as module attributes), and eager would print nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(obj, name, _MISSING)


def _user_data(value) -> bool:
    """Whether `value` is an object of the user's program whose attributes are its state: an
    instance of a class outside the libraries, or a namespace of the standard library (a
    SimpleNamespace or argparse.Namespace config)."""
    return isinstance(value, (types.SimpleNamespace, argparse.Namespace)) or not _library(type(value))


def _normalize(value, out: list) -> None:
    """Appends the key items of one guarded value: scalars by value, tensors and other objects by
    identity, tuples item by item."""
    if isinstance(value, _SCALARS):
        out.append(value)
    elif isinstance(value, tuple) and _AS_IS.issuperset(map(type, value)):
        out.append(value)  # (as the guard's fast path keeps it)
    elif isinstance(value, tuple) and len(value) <= 16:
        out.append(len(value))
        for v in value:
            _normalize(v, out)
    elif isinstance(value, torch.Tensor):
        # A closure tensor is a trace input captured with the entry: another tensor bound to the
        # same name must not reuse it.
        out.append(id(value))
    else:
        out.append(value)


_is_tuple = tuple.__instancecheck__


def _kept_as_is(v: tuple) -> bool:
    """Whether _normalize keeps every value of v as it is: no tensor, and tuples only of the
    values _AS_IS names (checked at C speed: the guard runs before every call)."""
    if any(issubclass(t, torch.Tensor) for t in set(map(type, v))):
        return False
    return _AS_IS.issuperset(map(type, itertools.chain.from_iterable(filter(_is_tuple, v))))


# The structure of the models jitted code reads: its version moves when one of their modules is
# given a submodule, a parameter or a buffer outside a trace (a head replaced, an adapter added,
# `layer.weight = nn.Parameter(...)`). The guard of every jitted function or module that reads a
# model keys on it, so the next call traces the new model instead of running the old one's trace
# (a jitted function holds the parameters it read as the tensors they were).
STRUCTURE = types.SimpleNamespace(version=0)
_watched: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def _structure_changed() -> None:
    from thunder.core import functionalize

    if functionalize.current() is None:  # (what a traced forward does is in its trace)
        STRUCTURE.version += 1


def _changed(module) -> None:
    """Moves the version where `module` belongs to a jitted model. (Not while torch.compile traces:
    dynamo would guard on the watched set's size, which thunder changes as it compiles the graph's
    pieces; "Guard failed on the same frame it was created".)"""
    if not torch.compiler.is_compiling() and module in _watched:
        _structure_changed()


def _registered(module, name, value):
    _changed(module)
    return None


torch.nn.modules.module.register_module_module_registration_hook(_registered)
torch.nn.modules.module.register_module_parameter_registration_hook(_registered)
torch.nn.modules.module.register_module_buffer_registration_hook(_registered)


# Submodules, parameters and buffers taken away (`del model.head`, `del layers[0]`) or moved
# without a registration (ModuleList.insert and ModuleDict's deletions write the module's dict
# directly) move the version too: the next call traced the old model's program, removed layers
# included.
def _moving_after(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        _changed(self)
        return out

    return wrapper


def _delattr(original):
    @functools.wraps(original)
    def wrapper(self, name):
        held = name in self._parameters or name in self._buffers or name in self._modules
        original(self, name)
        if held:
            _changed(self)

    return wrapper


# A function set on a jitted model's module (`block.act = torch.sigmoid`, `layer.forward =
# patched`, a bound method replacing one of its class's) moves the version: the trace ran the one
# it held. Other values set there are scalars (guarded by value) or registered (above).
def _setattr(original):
    @functools.wraps(original)
    def wrapper(self, name, value):
        original(self, name, value)
        if isinstance(value, _FUNCTIONS + (types.MethodType,)) or name == "forward":
            _changed(self)

    return wrapper


torch.nn.Module.__delattr__ = _delattr(torch.nn.Module.__delattr__)
torch.nn.Module.__setattr__ = _setattr(torch.nn.Module.__setattr__)
for _cls, _names in ((torch.nn.ModuleList, ("insert",)), (torch.nn.Sequential, ("insert",)),
                     (torch.nn.ModuleDict, ("__delitem__", "clear", "pop")),
                     (torch.nn.ParameterDict, ("__delitem__", "clear", "pop"))):
    for _name in _names:
        if _name in vars(_cls):
            setattr(_cls, _name, _moving_after(vars(_cls)[_name]))


# A model's hooks (forward and backward, a module's own or global) are traced into its program, as
# the code they run: one registered on a watched module, or a global one, or removed, outside a
# trace moves the version too. Before, a forward hook added after the first call was silently
# never run.
_MODULE_HOOK_METHODS = ("register_forward_pre_hook", "register_forward_hook", "register_full_backward_pre_hook",
                        "register_full_backward_hook", "register_backward_hook")
_GLOBAL_HOOK_FUNCTIONS = ("register_module_forward_pre_hook", "register_module_forward_hook",
                          "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
                          "register_module_backward_hook")


def _moving_the_version(register, method: bool):
    @functools.wraps(register)
    def wrapper(*args, **kwargs):
        handle = register(*args, **kwargs)
        if torch.compiler.is_compiling() or (method and args[0] not in _watched):
            return handle
        _structure_changed()
        remove = handle.remove

        def removed():
            remove()
            _structure_changed()

        handle.remove = removed  # (the handle's __exit__ calls it too)
        return handle

    return wrapper


for _name in _MODULE_HOOK_METHODS:
    setattr(torch.nn.Module, _name, _moving_the_version(getattr(torch.nn.Module, _name), True))
_module_module = sys.modules["torch.nn.modules.module"]
for _name in _GLOBAL_HOOK_FUNCTIONS:
    _wrapped = _moving_the_version(getattr(_module_module, _name), False)
    setattr(_module_module, _name, _wrapped)
    if getattr(torch.nn.modules, _name, None) is not None:
        setattr(torch.nn.modules, _name, _wrapped)


class _OptimizerState:
    """The values of an optimizer that a traced step holds as constants: each param group's
    hyperparameters (a scheduler's new `lr`, `betas`, `maximize`...) and parameter list, and the
    keys of each parameter's state with the tensors there by identity (the first step creates
    the momentum buffer or Adam's moments: a step traced before they existed took the branch that
    creates them). `key` is one hash, keyed by value."""

    def __init__(self, opt):
        self._opt = weakref.ref(opt)

    @property
    def key(self):
        opt = self._opt()
        if opt is None:
            return None
        items = []
        for group in opt.param_groups:
            for k, v in group.items():
                if k == "params":
                    items.append((len(v), tuple(map(id, v))))
                elif isinstance(v, torch.Tensor):
                    items.append((k, id(v)))
                elif isinstance(v, _SCALARS + (tuple,)):
                    items.append((k, v))
                else:
                    items.append((k, id(v)))
        for p, st in opt.state.items():
            items.append(id(p))
            for k, v in st.items():  # (LBFGS keeps lists there: by identity)
                items.append((k, v if isinstance(v, _SCALARS) else id(v)))
        return hash(tuple(items))


def optimizers_of(guard) -> list:
    """The optimizers a guard reads (_OptimizerState), alive."""
    readers = getattr(guard, "readers", ())
    opts = (r[1]._opt() for r in readers if r[0] == "attr" and isinstance(r[1], _OptimizerState))
    return [o for o in opts if o is not None]


class StepCreatesState:
    """While a call is traced: the state of the optimizers it steps, as it was. A traced step that
    created state (the first step's momentum buffers, Adam's moments) left proxies in it, which
    no later call can read: the state is put back, and the call refused with what to do."""

    def __init__(self, optimizers):
        self._before = [(o, {p: dict(st) for p, st in o.state.items()}) for o in optimizers]

    def check(self, proxy_type) -> None:
        for opt, before in self._before:
            if not any(isinstance(v, proxy_type) for st in opt.state.values() for v in st.values()):
                continue
            for p in [p for p in opt.state if p not in before]:
                del opt.state[p]
            for p, st in before.items():
                opt.state[p].clear()
                opt.state[p].update(st)
            raise NotImplementedError(
                f"thunder.jit: {type(opt).__name__}.step creates its state on this call (momentum buffers, moments, "
                f"step counts), which a trace cannot keep; run the first step as it is (`optimizer.step()`), then "
                f"call the jitted step"
            )


class _Collector:
    def __init__(self):
        # What the guard reads, in order: ("attr", obj, name), ("global", globals dict, name)
        # or ("cell", closure cell).
        self.readers: list[tuple] = []
        self._seen_code: set = set()
        self._seen_attr: set = set()
        self._seen_modules: set = set()

    def attr(self, obj, name: str) -> None:
        key = (id(obj), name)
        if key in self._seen_attr:
            return
        self._seen_attr.add(key)
        self.readers.append(("attr", obj, name))

    def module(self, module: torch.nn.Module, depth: int = 0) -> None:
        """Every submodule's `training` and scalar attributes, and the globals and containers
        its class's forward (and the methods it names) read."""
        self.attr(STRUCTURE, "version")
        for mod in module.modules():
            if id(mod) in self._seen_modules:
                continue
            self._seen_modules.add(id(mod))
            _watched.add(mod)
            self.attr(mod, "training")
            for name, v in vars(mod).items():
                if name != "training" and not name.startswith("_") and isinstance(v, _SCALARS + (tuple,)):
                    self.attr(mod, name)
            fwd = type(mod).forward
            if isinstance(fwd, types.FunctionType) and not _library(type(mod)):
                # The class's functions by identity: `Model.forward = patched` or `Block.helper =
                # other` after jitting traces again (a module's own attributes set later move the
                # structure version, _setattr).
                self.attr(type(mod), "forward")
                self.function(fwd, depth, self_obj=mod)
                for name in fwd.__code__.co_names:  # self.helper(...): methods of the class
                    m = getattr(type(mod), name, _MISSING)
                    if isinstance(m, types.FunctionType):
                        self.attr(type(mod), name)
                        self.function(m, depth + 1, self_obj=mod)
                    elif (isinstance(m, _SCALARS) and not name.startswith("_") and name not in vars(mod)
                          and not hasattr(torch.nn.Module, name)):
                        # a scalar the class holds (`scale = 2.0` in its body) that forward names:
                        # `Model.scale = 5` after jitting traces again
                        self.attr(mod, name)

    def optimizer(self, opt) -> None:
        """An optimizer the program steps: its hyperparameters and the structure of its state
        (_OptimizerState), which it reads with keys it computes (`group['lr']` of each group it
        iterates, `self.state[p]`)."""
        key = ("optimizer", id(opt))
        if key not in self._seen_attr:
            self._seen_attr.add(key)
            self.readers.append(("attr", _OptimizerState(opt), "key"))

    def function(self, fn, depth: int = 0, self_obj=_MISSING) -> None:
        if isinstance(fn, types.MethodType):
            if isinstance(fn.__self__, torch.optim.Optimizer):
                self.optimizer(fn.__self__)
            if isinstance(fn.__self__, torch.nn.Module):
                # thunder.jit(model.forward): the model's state is read as a jitted model's is
                self.module(fn.__self__, depth)
            self.obj_attrs(fn.__self__, fn.__func__.__code__)
            fn, self_obj = fn.__func__, fn.__self__
        if isinstance(fn, types.FunctionType) and fn.__closure__ and depth <= _MAX_DEPTH:
            # A step wrapped by a library (an LR scheduler replaces `optimizer.step` by a function
            # holding the optimizer through a weak reference and the class's step)
            for cell in fn.__closure__:
                v = cell.cell_contents if _cell_full(cell) else None
                v = v() if isinstance(v, weakref.ref) else v
                if isinstance(v, torch.optim.Optimizer):
                    self.optimizer(v)
        if not isinstance(fn, types.FunctionType) or _library(fn) or depth > _MAX_DEPTH:
            return
        # Its defaults are read as the closure is (`def helper(x, scale=2.0)`, then
        # `helper.__defaults__ = (3.0,)`; functools.partial's are the partial's own arguments).
        if fn.__defaults__:
            self.attr(fn, "__defaults__")
        if fn.__kwdefaults__:
            self.attr(fn, "__kwdefaults__")
        self.code(fn.__code__, fn.__globals__, fn.__closure__, depth, self_obj)

    def container_reads(self, code, globals_: dict, closure, self_obj) -> None:
        """Readers of what `code` reads from containers held in globals, closure cells or `self`
        (its first argument, when the object is known)."""
        cells = dict(zip(code.co_freevars, closure or ()))
        self_name = code.co_varnames[0] if self_obj is not _MISSING and code.co_argcount else None
        for (kind, name), steps, how, arg in _container_reads(code):
            if kind == "global":
                if name not in globals_ and name in builtins.__dict__:
                    continue
                root = ("global", globals_, name)
                value = globals_.get(name, _MISSING)
            elif kind == "deref" and name in cells:
                root = ("cell", cells[name])
                value = cells[name].cell_contents if _cell_full(cells[name]) else _MISSING
            elif kind == "fast" and name == self_name:
                root, value = ("obj", self_obj), self_obj
            else:
                continue
            if value is not _MISSING and not _container_path(value, steps, how):
                continue
            if how == "value" and all(op == "attr" for op, _ in steps):
                # Attribute chains: the first attribute of a plain object is obj_attrs' (a
                # module's, guard_for_module's); a longer chain from a plain object is read here.
                if len(steps) < 2 or kind == "fast" or isinstance(value, (types.ModuleType, type, types.FunctionType)):
                    continue
                if not _user_data(value) or isinstance(value, torch.nn.Module):
                    continue
            key = ("path", id(root[1]), root[2] if root[0] == "global" else None, steps, how, arg)
            if key in self._seen_attr:
                continue
            self._seen_attr.add(key)
            self.readers.append(("path", root, steps, how, arg))

    def obj_attrs(self, obj, code) -> None:
        """The scalar attributes of `obj` that `code` names (self.flag, cfg.eps)."""
        if isinstance(obj, torch.nn.Module):
            return  # modules: guard_for_module reads every submodule's scalars
        d = getattr(obj, "__dict__", None)
        if not isinstance(d, dict):
            return
        for name in code.co_names:
            if name in d:
                # (a function it holds by identity: `cfg.act = torch.tanh` after jitting)
                if isinstance(d[name], _SCALARS + (tuple,) + _FUNCTIONS):
                    self.attr(obj, name)
            elif not name.startswith("__") and isinstance(getattr(type(obj), name, _MISSING), _SCALARS):
                # a default its class holds (`class Cfg: k = 2.0`): read through the instance, so
                # `Cfg.k = 3` and a later `cfg.k = 4` both trace again
                self.attr(obj, name)

    def value(self, value, code, depth: int) -> None:
        """What a global or closure value leads to: the user code it names, a module's state
        (a function calling a model it closes over reads its `training` as the model would), or
        the attributes `code` reads from it."""
        if isinstance(value, torch.nn.Module):
            self.module(value, depth + 1)
        elif isinstance(value, torch.optim.Optimizer):
            self.optimizer(value)
        elif isinstance(value, (types.FunctionType, types.MethodType)):
            self.function(value, depth + 1)
        elif isinstance(value, types.ModuleType):
            if not _library(value):
                for name in code.co_names:
                    v = _probe(value, name)
                    if v is not _MISSING and isinstance(v, _SCALARS + (tuple,)):
                        self.attr(value, name)
                    elif isinstance(v, types.FunctionType):
                        self.function(v, depth + 1)
        elif isinstance(value, type):
            if not _library(value):
                for name in code.co_names:
                    v = value.__dict__.get(name, _MISSING)
                    if isinstance(v, _SCALARS):
                        self.attr(value, name)
                    elif isinstance(v, (types.FunctionType, staticmethod, classmethod)):
                        if not isinstance(v, classmethod):  # (a classmethod reads as a new bound method)
                            self.attr(value, name)
                        self.function(getattr(value, name), depth + 1)
        elif not isinstance(value, _SCALARS + (tuple, torch.Tensor)) and _user_data(value):
            self.obj_attrs(value, code)

    def code(self, code, globals_: dict, closure, depth: int, self_obj=_MISSING) -> None:
        if self_obj is not _MISSING and (code, id(self_obj)) not in self._seen_code:
            # Each instance's own containers (self.cfg['eps'] of every block of a model)
            self._seen_code.add((code, id(self_obj)))
            self.container_reads(code, globals_, closure, self_obj)
        if code in self._seen_code:
            return
        self._seen_code.add(code)
        if self_obj is _MISSING:
            self.container_reads(code, globals_, closure, self_obj)
        for name, cell in zip(code.co_freevars, closure or ()):
            self.readers.append(("cell", cell))
            if _cell_full(cell):
                self.value(cell.cell_contents, code, depth)
        for name in _global_names(code):
            present = name in globals_
            key = (id(globals_), name)
            # At the top level a name not defined yet may be a global defined before the call.
            if (present or (depth == 0 and name not in builtins.__dict__)) and key not in self._seen_attr:
                self._seen_attr.add(key)
                self.readers.append(("global", globals_, name))
            if present:
                self.value(globals_[name], code, depth)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                self.code(c, globals_, None, depth)


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS", "STORE_GLOBAL", "DELETE_GLOBAL"})


def _global_names(code) -> list:
    """The names `code` reads or writes as globals, in order: co_names less the attribute and
    method names (`x.reshape`, `self.size`), which are not globals the code depends on."""
    try:
        return list(dict.fromkeys(i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS))
    except Exception:  # an interpreter whose bytecode dis cannot read: every name, as before
        return list(code.co_names)


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


_CONTAINERS = (dict, list, tuple)


def _container_path(value, steps, how) -> bool:
    """Whether the reads of `steps` from `value` go through containers and plain objects only:
    an item of a dict, list or tuple, an attribute of the user's object; and the read at the end
    (`how`) one of a container, len() excepted. Indexing a tensor (self.weight[0]) or a ModuleList
    makes a new object per call, and a library object's attributes may be computed."""
    for op, key in steps:
        if value is os and op == "attr" and key == "environ":  # (the environment a program reads)
            value = os.environ
            continue
        if op == "item":
            if not isinstance(value, _CONTAINERS) and value is not os.environ:
                return False
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return True  # missing now: read as _M until it is there
        else:
            if not (_user_data(value) or isinstance(value, types.ModuleType) and not _library(value)):
                return False
            value = _probe(value, key)
            if value is _MISSING:
                return True
    return how in ("value", "len") or isinstance(value, _CONTAINERS) or value is os.environ or (
        how == "contents" and type(value).__name__ == "ndarray")


# Builtins whose result depends on every item of a container argument.
_READ_ALL = frozenset({"sum", "list", "tuple", "sorted", "min", "max", "any", "all", "enumerate", "zip",
                       "reversed", "set", "dict", "map", "filter", "iter"})
_MAX_CONTENTS = 64


# Instructions of later interpreters that do what an instruction the scan knows does, for the stack
# model: 3.12's checked local loads, 3.14's borrowed ones and small-int constants.
_OP_ALIASES = {"LOAD_FAST_CHECK": "LOAD_FAST", "LOAD_FAST_BORROW": "LOAD_FAST",
               "LOAD_FAST_BORROW_LOAD_FAST_BORROW": "LOAD_FAST_LOAD_FAST", "LOAD_SMALL_INT": "LOAD_CONST"}
# From 3.12 a method load is LOAD_ATTR with the low bit of its argument set (LOAD_METHOD is gone).
_METHOD_FLAG_IN_LOAD_ATTR = sys.version_info >= (3, 12)


@functools.lru_cache(maxsize=4096)  # once per code object: a model's blocks share their forward
def _container_reads(code) -> tuple:
    """What `code` reads from containers it names, as (root, steps, how, arg): root ("global" |
    "deref" | "fast", name); steps a tuple of ("item", constant key) and ("attr", name); how
    "value" (arg None), "get" (dict.get of the key arg), "len", "in" (the constant arg) or
    "contents" (every item). A scan of the bytecode with a model of the stack that knows only
    these patterns: any other instruction forgets what the stack holds (after recording the
    values it consumes), and so does a jump target."""
    reads = []
    stack: list = []  # ("path", root, steps) | ("const", v) | ("builtin", name) | ("method", path, name) | None

    def consumed(entry) -> None:
        if entry is not None and entry[0] == "path" and entry[2]:
            reads.append((entry[1], entry[2], "value", None))

    def forget() -> None:
        for entry in stack:
            consumed(entry)
        stack.clear()

    try:
        instructions = list(dis.get_instructions(code))
    except Exception:  # an interpreter whose bytecode dis cannot read: nothing is guarded here
        return ()
    for ins in instructions:
        op, arg = _OP_ALIASES.get(ins.opname, ins.opname), ins.argval
        if ins.is_jump_target:
            forget()
        if op in ("RESUME", "NOP", "PRECALL", "CACHE", "PUSH_NULL", "EXTENDED_ARG"):
            continue
        if op == "BINARY_OP" and ins.argrepr == "[]":  # 3.14 subscripts through BINARY_OP
            op = "BINARY_SUBSCR"
        elif op == "LOAD_ATTR" and _METHOD_FLAG_IN_LOAD_ATTR and ins.arg & 1:  # 3.12: LOAD_METHOD's successor
            op = "LOAD_METHOD"
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            stack.append(("builtin", arg) if arg == "len" or arg in _READ_ALL else ("path", ("global", arg), ()))
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            stack.append(("path", ("deref", arg), ()))
        elif op == "LOAD_FAST":
            stack.append(("path", ("fast", arg), ()))
        elif op == "LOAD_FAST_LOAD_FAST":  # 3.13: two locals in one instruction
            stack.extend(("path", ("fast", name), ()) for name in arg)
        elif op == "LOAD_CONST":
            stack.append(("const", arg))
        elif op == "BINARY_SUBSCR" and len(stack) >= 2 and stack[-1] is not None and stack[-1][0] == "const" \
                and stack[-2] is not None and stack[-2][0] == "path" and isinstance(stack[-1][1], (int, str, bool)):
            key, path = stack.pop()[1], stack.pop()
            stack.append(("path", path[1], path[2] + (("item", key),)))
        elif op == "LOAD_ATTR" and arg == "getenv" and stack and stack[-1] is not None and stack[-1][0] == "path":
            path = stack.pop()  # (3.11 loads a module's function as an attribute)
            stack.append(("method", ("path", path[1], path[2] + (("attr", "environ"),)), "get"))
        elif op == "LOAD_ATTR" and stack and stack[-1] is not None and stack[-1][0] == "path":
            path = stack.pop()
            stack.append(("path", path[1], path[2] + (("attr", arg),)))
        elif op == "LOAD_METHOD" and stack and stack[-1] is not None and stack[-1][0] == "path":
            path = stack.pop()
            if arg in ("get", "keys", "values", "items"):
                stack.append(("method", path, arg))
            elif arg == "getenv":  # os.getenv(k, d) reads os.environ.get(k, d)
                stack.append(("method", ("path", path[1], path[2] + (("attr", "environ"),)), "get"))
            else:
                consumed(path)
                stack.append(None)
        elif op in ("BINARY_SUBSCR", "STORE_SUBSCR") and stack and stack[-1] is not None and stack[-1][0] == "path":
            # x[IDX]: a list the program indexes with (its positions are the key's)
            path = stack.pop()
            reads.append((path[1], path[2], "contents", None))
            forget()
        elif op == "CONTAINS_OP" and len(stack) >= 2 and stack[-2] is not None and stack[-2][0] == "const" \
                and stack[-1] is not None and stack[-1][0] == "path":
            path, key = stack.pop(), stack.pop()[1]
            reads.append((path[1], path[2], "in", key))
            stack.append(None)
        elif op == "GET_ITER" and stack and stack[-1] is not None and stack[-1][0] == "path":
            path = stack.pop()
            reads.append((path[1], path[2], "contents", None))
            stack.append(None)
        elif op == "CALL" and len(stack) > arg:
            fn, args = stack[-arg - 1], stack[len(stack) - arg:]
            del stack[len(stack) - arg - 1:]
            paths = [a for a in args if a is not None and a[0] == "path"]
            if fn is not None and fn[0] == "builtin" and fn[1] == "len" and arg == 1 and paths:
                reads.append((paths[0][1], paths[0][2], "len", None))
            elif fn is not None and fn[0] == "builtin" and fn[1] in _READ_ALL:
                for a in paths:
                    reads.append((a[1], a[2], "contents", None))
            elif fn is not None and fn[0] == "method":
                path = fn[1]
                if fn[2] == "get" and 1 <= arg <= 2 and args[0] is not None and args[0][0] == "const":
                    reads.append((path[1], path[2], "get", args[0][1]))
                    for a in args[1:]:
                        consumed(a)
                else:
                    reads.append((path[1], path[2], "contents", None))
            else:
                consumed(fn)
                for a in args:
                    consumed(a)
            stack.append(None)
        else:
            forget()
    forget()
    return tuple(reads)


def _read_path(reader):
    """A container reader's value, _MISSING where a step finds nothing (the general path, and
    the reference for the generated one)."""
    _, root, steps, how, arg = reader
    obj = reader[1][1] if root[0] == "obj" else _read(root)
    try:
        for op, key in steps:
            if obj is _MISSING:
                return _MISSING
            obj = getattr(obj, key) if op == "attr" else obj[key]
        if how == "value":
            return obj
        if how == "get":
            return obj.get(arg, _MISSING)
        if how == "len":
            return len(obj)
        if how == "in":
            return arg in obj
        return _contents(obj)
    except Exception:
        return _MISSING


def _read_paths(paths) -> tuple:
    """The key items of container readers, as the generated guard appends them."""
    out = ()
    for r in paths:
        value = _read_path(r)
        out += value if r[3] == "contents" and value is not _MISSING else (value,)
    return out


def _contents(obj) -> tuple:
    """The key of a container the code iterates: its length and items (a dict's keys and values),
    or the object (by identity) past _MAX_CONTENTS items or for other iterables."""
    if isinstance(obj, (list, tuple)) and len(obj) <= _MAX_CONTENTS:
        return (len(obj),) + tuple(obj)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray) and obj.size <= _MAX_CONTENTS:
        return (obj.ndim, *obj.shape, str(obj.dtype)) + tuple(obj.ravel().tolist())
    if isinstance(obj, dict) and len(obj) <= _MAX_CONTENTS:
        return (len(obj),) + tuple(x for kv in obj.items() for x in kv)
    return (obj,)


# Values whose key item is the value itself (_normalize appends them as they are): the guard
# appends them without the walk through _normalize's cases. It runs before every call.
_AS_IS = frozenset(_SCALARS + (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, object, dict,
                                list))


def _read(reader):
    """One reader's value (the general path, and the reference for the generated one)."""
    kind = reader[0]
    if kind == "attr":
        return getattr(reader[1], reader[2], _MISSING)
    if kind == "global":
        return reader[1].get(reader[2], _MISSING)
    return reader[1].cell_contents if _cell_full(reader[1]) else _MISSING


def _instance_attr(obj, name: str) -> bool:
    """Whether getattr(obj, name) is obj.__dict__[name] (or missing) as long as the class keeps its
    attributes: the name is in the instance dict, the class looks attributes up as object does,
    and no class on the MRO defines the name (a data descriptor there would win over the instance
    dict)."""
    d = getattr(obj, "__dict__", None)
    if not isinstance(d, dict) or name not in d:
        return False
    if type(obj).__getattribute__ is not object.__getattribute__:  # (HF's configs map aliases there)
        return False
    return not any(name in vars(k) for k in type(obj).__mro__)


def _make_guard(readers) -> Callable[[], tuple] | None:
    """The guard: one generated function returning the readers' values as a tuple. It runs before
    every call, when the host's caches are cold from the previous step's work: a module's
    `training` flags and scalars are read straight from the instance dicts they live in (each
    reader a closure call and a getattr cost 90-120 us per call on gpt_train's 132 values after a
    backward, against 20 warm), and values other than plain scalars take the normalizing path."""
    if not readers:
        return None
    readers = tuple(readers)
    names, values, items = [], [], []

    def bind(obj) -> str:
        names.append(f"_o{len(names)}")
        values.append(obj)
        return names[-1]

    paths = tuple(r for r in readers if r[0] == "path")
    readers = tuple(r for r in readers if r[0] != "path")
    path_items = []
    for _, root, steps, how, arg in paths:
        if root[0] == "global":
            expr = f"{bind(root[1])}[{root[2]!r}]"
        elif root[0] == "cell":
            expr = f"{bind(root[1])}.cell_contents"
        else:
            expr = bind(root[1])
        for op, key in steps:
            expr += f".{key}" if op == "attr" else f"[{key!r}]"
        if how == "contents":
            path_items.append(f"_contents({expr})")
            continue
        if how == "get":
            expr = f"{expr}.get({arg!r}, _M)"
        elif how == "len":
            expr = f"len({expr})"
        elif how == "in":
            expr = f"({arg!r} in {expr})"
        path_items.append(f"({expr},)")
    for r in readers:
        if r[0] == "attr" and _instance_attr(r[1], r[2]):
            items.append(f"{bind(vars(r[1]))}.get({r[2]!r}, _M)")
        elif r[0] == "attr":
            items.append(f"_getattr({bind(r[1])}, {r[2]!r}, _M)")
        elif r[0] == "global":
            items.append(f"{bind(r[1])}.get({r[2]!r}, _M)")
        else:
            items.append(f"{bind(r[1])}.cell_contents")
    params = ", ".join(f"{n}={n}" for n in names)
    body = ",\n        ".join(items)
    source = f"def guard({params}):\n"
    if items:
        source += (
            f"    try:\n"
            f"        v = ({body},)\n"
            f"    except ValueError:  # an empty closure cell\n"
            f"        v = tuple(_read(r) for r in _readers)\n"
        )
    else:
        source += "    v = ()\n"
    if path_items:
        # Reads from containers: a missing key, index or attribute anywhere takes the general
        # path, which reads it as _M.
        source += (
            f"    try:\n"
            f"        v += {' + '.join(path_items)}\n"
            f"    except Exception:\n"
            f"        v += _read_paths(_paths)\n"
        )
    # The values as they are where _normalize would keep each as it is: no tensors (keyed by
    # identity), tuples only of scalars (a convolution's kernel_size, a LayerNorm's
    # normalized_shape). The loop through _normalize cost ViT's and BERT's 533-737 values 76-94
    # us a call on the CI machine, for a logger, a lock or a tuple among them.
    source += (
        f"    if _as_is.issuperset(map(type, v)) or _kept(v):\n"
        f"        return v\n"
        f"    out = []\n"
        f"    for x in v:\n"
        f"        _normalize(x, out)\n"
        f"    return tuple(out)\n"
    )
    namespace = dict(zip(names, values), _M=_MISSING, _getattr=getattr, _read=_read, _readers=readers,
                     _as_is=_AS_IS, _kept=_kept_as_is, _normalize=_normalize, _contents=_contents, _read_paths=_read_paths,
                     _paths=paths)
    exec(compile(source, "<thunder guard>", "exec"), namespace)
    # Taken out of the namespace that is its globals: left there, guard and namespace would be a
    # cycle that only the garbage collector frees, and the guard holds the module (a dropped
    # jitted model kept its parameters until a full collection ran).
    guard = namespace.pop("guard")
    guard.readers = readers + paths
    return guard


def guard_for_function(fn: Callable) -> Callable[[], tuple] | None:
    """The guard of a jitted function: None when its code reads no outside value."""
    c = _Collector()
    c.function(fn)
    if not isinstance(fn, (types.FunctionType, types.MethodType)) and not _library(type(fn)):
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType):
            c.obj_attrs(fn, call.__code__)
            c.function(call)
    return _make_guard(c.readers)


def guard_for_module(module: torch.nn.Module) -> Callable[[], tuple] | None:
    """The guard of a jitted module: every submodule's `training` and scalar attributes, and the
    globals its classes' forward code reads."""
    c = _Collector()
    c.module(module)
    return _make_guard(c.readers)


def random_states() -> tuple:
    """The states of Python's and (where it is imported) NumPy's global random generators, as
    comparable values: a traced call that drew from one (`random.random() < p` in a layer-drop)
    changed it, and holds the value it drew."""
    # (numpy.random only where the program imported it: numpy imports it lazily, and an import
    # made while tracing holds the import lock, which a process forked meanwhile finds taken)
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return random.getstate(), None
    kind, keys, pos, has_gauss, gauss = np_random.get_state(legacy=True)
    return random.getstate(), (kind, keys.tobytes(), pos, has_gauss, gauss)


def drew_since(before: tuple) -> bool:
    """Whether a random generator's state moved since `before` (random_states): NumPy's only where
    it was imported then (a trace may import numpy.random without drawing from it)."""
    now = random_states()
    return now[0] != before[0] or (before[1] is not None and now[1] != before[1])


def user_location() -> str:
    """'file:line: source' of the innermost frame of the user's program (outside thunder and
    torch), or '' when there is none."""
    import linecache

    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith(_THUNDER_DIR) and not path.startswith(_TORCH_DIR) and not path.startswith("<frozen"):
            line = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            return f"{f.f_code.co_filename}:{f.f_lineno}" + (f": {line}" if line else "")
        f = f.f_back
    return ""
