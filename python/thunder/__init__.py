"""thunder: a source-to-source compiler for PyTorch with a C++ core.

    tfn = thunder.jit(fn_or_module)
    y = tfn(x)
    print(thunder.last_traces(tfn)[-1])
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import copy
import os
import itertools
import threading
import types
import weakref
from typing import Any, Callable, Sequence

import torch as pytorch

from thunder import _C
# (batchnorm: imported with thunder, not by the first trace, as every module a trace uses: an import
# holds Python's import lock, and a process forked meanwhile, a DataLoader's worker, found it taken
# and hung in its own first call)
from thunder.core import batchnorm, devices, dtypes, functionalize, guards, outputs
from thunder.core.devices import Device
from thunder.core import proxies, symbolic as _symbolic
from thunder.core.proxies import TensorProxy, ThunderTorchMode
from thunder.core import transforms as _transforms
from thunder.core.cudagraphs import PLUGIN_NAMES as CUDA_GRAPH_PLUGINS, CUDAGraphRunner

__all__ = ["jit", "get_default_executors", "examine", "last_traces", "last_backward_traces", "cache_hits", "cache_misses", "compile_stats"]

_C.set_hooks(Device)


def _find_nvrtc() -> None:
    """Points the fuser at the libnvrtc of the nvidia-cuda-nvrtc wheel when no other is set."""
    if "THUNDER_NVRTC" in os.environ:
        return
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
    except ImportError:
        return
    for root in nvidia.__path__:
        for rel in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12"):
            if os.path.exists(os.path.join(root, rel)):
                os.environ["THUNDER_NVRTC"] = os.path.join(root, rel)
                return


_find_nvrtc()


# Executors written in Python, by name: their modules are imported when a name is first used
# (executors=["torchcompile"]), as importing thunder does not import them.
_PYTHON_EXECUTOR_MODULES = {
    "apex": "thunder.executors.apexex",
    "cudnn": "thunder.executors.cudnnex",
    "fp8": "thunder.executors.fp8ex",
    "torchcompile": "thunder.executors.torch_compile",
    "triton": "thunder.executors.triton_crossentropy",
}


def _executor_names(executors) -> list[str]:
    if executors is None:
        from thunder.extend import get_default_executors

        executors = get_default_executors()
    names = []
    for ex in executors:
        names.append(ex if isinstance(ex, str) else ex.name)
        if isinstance(ex, str) and ex in _PYTHON_EXECUTOR_MODULES:
            import importlib

            importlib.import_module(_PYTHON_EXECUTOR_MODULES[ex])
    # Calls with no thunder symbol run in the fallback executor; the torch executor takes
    # whatever the others leave. Both are always there, last.
    from thunder.core import fallback

    fallback._ensure_executor()
    names = [n for n in names if n not in ("torch", fallback.EXECUTOR)] + [fallback.EXECUTOR, "torch"]
    return names


def _compiling():
    """While the user's program is traced, torch.compiler.is_compiling() is True, as under
    torch.compile: libraries then skip checks that read tensor values (Hugging Face's mask
    shortcuts, for one)."""
    return _CompilingFlag()


class _CompilingFlag:
    """Makes torch.compiler.is_compiling() answer True for the duration of a trace: the function
    is replaced (versions differ in what it reads), and the module flag set where there is one.
    The other replacements make library code that tests for torch.compile or for tensors take the
    paths proxies can follow:
    - TorchScript functions (`@torch.jit.script`, as DeBERTa's helpers) called with proxies run
      their Python source, traced like the rest of the program;
    - torch's associative_scan (a higher-order op for torch.compile, which Mamba takes when
      is_compiling() is True) runs as a log-depth scan of proxies;
    - isinstance(proxy, torch.Tensor) (and torch.is_tensor) is True in the user's program, as for
      the tensor the proxy stands for: library code branches on it (transformers returns a 4D
      attention mask it was given as it is only when it is a torch.Tensor; diffusers' UNets test
      their timestep). Python's builtin is replaced, which Python code calls; C code's checks
      (PyObject_IsInstance, torch's THPVariable_Check) are left alone: they would take a proxy
      for the tensor object it is not. torch.Tensor's metaclass cannot be patched."""

    def __enter__(self):
        import importlib

        c = pytorch.compiler
        patches = [(c, "is_compiling", _always_compiling), (builtins, "isinstance", _isinstance_for_proxies)]
        if hasattr(c, "_is_compiling_flag"):
            patches.append((c, "_is_compiling_flag", True))
        script = getattr(pytorch.jit, "ScriptFunction", None)
        if script is not None:
            patches.append((script, "__call__", _script_call_for(script.__call__)))
        function = pytorch.autograd.function.Function
        patches.append((function, "apply", classmethod(_function_apply_for(function.__dict__["apply"].__func__))))
        # torch.utils.checkpoint (Hugging Face's gradient_checkpointing_enable, checkpoint_sequential):
        # both forms hand the proxies to autograd machinery that takes only tensors (saved-tensor
        # hooks; CheckpointFunction, whose rerun would also miss the gradients of the parameters
        # the function closes over). While traced, the function's calls are traced as the rest
        # of the program is: the same values and gradients.
        ckpt = importlib.import_module("torch.utils.checkpoint")
        if hasattr(ckpt, "_checkpoint_without_reentrant_generator"):
            patches.append((ckpt, "_checkpoint_without_reentrant_generator", _checkpoint_traced_generator))
        if hasattr(ckpt, "CheckpointFunction"):
            patches.append((ckpt, "CheckpointFunction", _CheckpointTraced))
        try:
            # (the package's own `associative_scan` attribute is the function, not this module)
            scan = importlib.import_module("torch._higher_order_ops.associative_scan")
            patches.append((scan, "associative_scan", _associative_scan_for(scan.associative_scan)))
        except ImportError:
            pass
        # Module backward hooks: PyTorch sets them up on the autograd graph of the module's call,
        # which a trace has none of (they silently never ran). Full hooks and backward pre-hooks
        # (and their global forms) run as the gradients of two opaque identity calls around the
        # module's call (_traced_backward_hook_for); the non-full form (register_backward_hook),
        # which PyTorch hangs on the output's grad_fn, is refused with a message.
        module = pytorch.nn.Module
        patches.append((module, "_get_backward_hooks", _non_full_backward_hooks_refused(module.__dict__["_get_backward_hooks"])))
        module_module = importlib.import_module("torch.nn.modules.module")
        patches.append((module_module, "BackwardHook", _traced_backward_hook_for(module_module.BackwardHook)))
        # BatchNorm with momentum=None: the cumulative average's factor, 1 / num_batches_tracked,
        # computed in the trace (core/batchnorm.py); eager's forward reads the counter's value.
        bn = pytorch.nn.modules.batchnorm._BatchNorm
        patches.append((bn, "forward", batchnorm.traced_forward(bn.__dict__["forward"])))
        # Factories given a symbolic size (torch.zeros(n, 4)): PyTorch's argument parser takes
        # only ints in a size, before any torch function mode sees the call.
        for name in _SIZED_TORCH_FACTORIES:
            if hasattr(pytorch, name):
                patches.append((pytorch, name, _factory_for(getattr(pytorch, name))))
        # (A class's own attribute as its __dict__ holds it: getattr would give a classmethod
        # bound to the class, which put back would bind every subclass's call to the base.)
        self._old = [(owner, name, owner.__dict__[name] if isinstance(owner, type) and name in owner.__dict__
                      else getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, value in patches:
            setattr(owner, name, value)
        return self

    def __exit__(self, *exc):
        for owner, name, value in reversed(self._old):
            setattr(owner, name, value)
        return False


_builtin_isinstance = builtins.isinstance

# A jitted function called in a program torch.compile traces (transformers compiles the forward
# it decodes with when the cache is static) runs as it is: dynamo does not trace thunder's
# tracing. The reference is taken here: while thunder traces, torch.compiler.is_compiling is
# replaced (_CompilingFlag) and answers True.
_dynamo_compiling = pytorch.compiler.is_compiling


_opaque = None


def _opaque_to_dynamo(call, *args, **kwargs):
    # torch.compiler.disable imports dynamo (a second at `import thunder`): made on first use,
    # when dynamo is running.
    global _opaque
    if _opaque is None:
        _opaque = pytorch.compiler.disable(_call_through)
    return _opaque(call, *args, **kwargs)


def _call_through(call, *args, **kwargs):
    return call(*args, **kwargs)


def _names_tensor(classinfo) -> bool:
    """Whether isinstance's classinfo names torch.Tensor itself (a tuple or union including it)."""
    if classinfo is pytorch.Tensor:
        return True
    if type(classinfo) is tuple or _builtin_isinstance(classinfo, types.UnionType):
        return any(_names_tensor(c) for c in getattr(classinfo, "__args__", classinfo))
    return False


def _isinstance_for_proxies(obj, classinfo):
    if type(obj) is _C.TensorProxy and _names_tensor(classinfo) and functionalize.user_code():
        return True
    return _builtin_isinstance(obj, classinfo)


def _associative_scan_for(original):
    def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise", **kwargs):
        from thunder.core.proxies import _has_proxy
        import torch.utils._pytree as pytree

        if not _has_proxy(xs):
            return original(combine_fn, xs, dim, reverse=reverse, combine_mode=combine_mode, **kwargs)
        # Hillis-Steele: after the step of width w each position holds the combination of the w
        # before it and itself (earlier operands on the left), so log2(n) steps scan n elements.
        leaves, spec = pytree.tree_flatten(xs)
        if reverse:
            leaves = [x.flip(dim) for x in leaves]
        n, w = leaves[0].shape[dim], 1
        while w < n:
            left = pytree.tree_unflatten([x.narrow(dim, 0, n - w) for x in leaves], spec)
            right = pytree.tree_unflatten([x.narrow(dim, w, n - w) for x in leaves], spec)
            combined = pytree.tree_leaves(combine_fn(left, right))
            leaves = [pytorch.cat([x.narrow(dim, 0, w), c], dim) for x, c in zip(leaves, combined)]
            w *= 2
        if reverse:
            leaves = [x.flip(dim) for x in leaves]
        return pytree.tree_unflatten(leaves, spec)

    return associative_scan


@contextlib.contextmanager
def _checkpointed():
    """The calls traced inside are marked for the backward to run again rather than have their
    outputs saved (BoundSymbol::checkpointRegion; the rematerialization's cut then may recompute a
    matmul from what enters the region): the memory torch.utils.checkpoint saves in eager. Random
    draws stay saved."""
    from thunder.core import functionalize

    state = functionalize.current()
    trace = getattr(state, "trace", None)
    first = trace.num_bound_symbols if trace is not None else 0
    yield
    if trace is not None:
        trace.mark_checkpointed(first, trace.num_bound_symbols)


def _checkpoint_traced_generator(function, *args, **kwargs):
    """torch.utils.checkpoint's non-reentrant form, while a program is traced: checkpoint runs
    `function(*args)` between this generator's two steps, as a checkpointed region."""
    with _checkpointed():
        yield


class _CheckpointTraced:
    """torch.utils.checkpoint's reentrant form (CheckpointFunction.apply), while traced."""

    @staticmethod
    def apply(function, preserve_rng_state, *args):
        with _checkpointed():
            return function(*args)


def _non_full_backward_hooks_refused(original):
    """nn.Module._get_backward_hooks while a program is traced: a call under grad mode of a module
    with non-full backward hooks (register_backward_hook) is refused with a message naming it."""

    def get(self):
        full, non_full = original(self)
        if non_full and pytorch.is_grad_enabled():
            from thunder.core.guards import user_location

            where = user_location()
            raise NotImplementedError(
                f"thunder.jit: the {type(self).__name__} module has a non-full backward hook (register_backward_hook, "
                "or its global form), which PyTorch attaches to its output's grad_fn, and a traced output has none"
                + (f" (called at {where})" if where else "")
                + ". register_full_backward_hook, PyTorch's replacement for it, runs under thunder.jit."
            )
        return full, non_full

    return get


def _proxy_or_tensor(x) -> bool:
    return isinstance(x, (_C.TensorProxy, pytorch.Tensor))


def _may_need_grad(t) -> bool:
    """Whether eager's t would require a gradient, as far as the trace tells: a proxy computed in
    the program carries no requires_grad of its own, and is taken to need one when a floating-point
    input of the trace does (a module's hooks then see a gradient where eager may see None)."""
    if not _builtin_isinstance(t, _C.TensorProxy):  # (isinstance(proxy, torch.Tensor) is True while tracing)
        return t.requires_grad
    st = functionalize.current()
    if st is None or not st.grad_enabled or st.trace is None or not pytorch.is_grad_enabled():
        return False
    if not getattr(t.dtype, "is_floating_point", False) and not getattr(t.dtype, "is_complex", False):
        return False
    inputs = {p.name: p for p in st.trace.inputs if _builtin_isinstance(p, _C.TensorProxy)}
    if t.name in inputs:
        return bool(t.requires_grad)
    return any(p.requires_grad for p in inputs.values())


# The hooks of traced module calls by id: the opaque calls take the id, a number argument, and
# share one fallback symbol. (Given the state itself, a constant, each call made a symbol of its own
# in the process-wide table, keyed by the state's repr: its address.) Each state is held by its
# module, so it lives as long as the module.
_MODULE_HOOKS: "weakref.WeakValueDictionary[int, _ModuleHooks]" = weakref.WeakValueDictionary()
_module_hook_ids = itertools.count()


class _ModuleHooks:
    """A module call's backward hooks while traced (PyTorch's torch.utils.hooks.BackwardHook does
    the same on autograd's graph): the gradients of the call's outputs go through the backward
    pre-hooks, then, with the gradients of its inputs, through the full hooks. Both run inside
    the backward trace, as the gradients of two opaque identity calls (_HookedOutputs,
    _HookedInputs: thunder runs a custom autograd Function's own backward)."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.id = next(_module_hook_ids)
        _MODULE_HOOKS[self.id] = self
        module.__dict__.setdefault("_thunder_traced_hooks", []).append(self)
        self.n_inputs = self.n_outputs = 0
        self.input_index = self.output_index = None  # positions of the tensors among the args
        self.output_floating = ()  # whether each output tensor is floating-point (or complex)
        self.grad_outputs = None

    @staticmethod
    def _spread(index, values, n):
        full = [None] * n
        for i, v in zip(index, values):
            full[i] = v
        return tuple(full)

    @staticmethod
    def _checked(kind, got, expected):
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        if len(got) != len(expected):
            raise RuntimeError(f"Backward {kind} hook returned an invalid number of grad_{'output' if kind == 'pre' else 'input'}, "
                               f"got {len(got)}, but expected {len(expected)}")
        return got

    def outputs_backward(self, grads):
        # (an integer output's gradient is None, as eager's identity marks it non-differentiable)
        grads = [g if f else None for g, f in zip(grads, self.output_floating)]
        grad_outputs = self._spread(self.output_index, grads, self.n_outputs)
        for hook in self.pre_hooks:
            r = hook(self.module, grad_outputs)
            if r is not None:
                grad_outputs = self._checked("pre", r, grad_outputs)
        if self.input_index is None:
            # No input needs a gradient: the full hooks run now, given None for every input.
            none = (None,) * self.n_inputs
            for hook in self.hooks:
                r = hook(self.module, none, grad_outputs)
                if r is not None and not (isinstance(r, tuple) and all(x is None for x in r)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                       "return None or None for all gradients.")
        else:
            self.grad_outputs = grad_outputs
        return tuple(grad_outputs[i] for i in self.output_index)

    def inputs_backward(self, grads):
        grad_inputs = self._spread(self.input_index, grads, self.n_inputs)
        if self.grad_outputs is not None:  # (None: the gradient did not come through the outputs)
            for hook in self.hooks:
                r = hook(self.module, grad_inputs, self.grad_outputs)
                if r is not None:
                    grad_inputs = self._checked("full", r, grad_inputs)
            self.grad_outputs = None
        return tuple(grad_inputs[i] for i in self.input_index)


class _Hooked(pytorch.autograd.Function):
    """The identity on a hooked module call's tensors, whose backward hands their gradients to the
    call's _ModuleHooks (`_stage`: its method for them)."""

    _stage = ""

    @staticmethod
    def forward(ctx, hooks_id, *tensors):
        ctx.hooks = _MODULE_HOOKS[hooks_id]
        return tuple(t.clone() for t in tensors)  # (copies: the runtime takes no output as an alias)

    @classmethod
    def backward(cls, ctx, *grads):
        return (None, *getattr(ctx.hooks, cls._stage)(grads))


class _HookedOutputs(_Hooked):
    _stage = "outputs_backward"


class _HookedInputs(_Hooked):
    _stage = "inputs_backward"


def _traced_backward_hook_for(original):
    """torch.nn.modules.module.BackwardHook while a program is traced: a module called with proxies
    gets its backward hooks from _ModuleHooks; one called with tensors (a constant computed while
    tracing) from PyTorch's own."""

    class TracedBackwardHook:
        def __init__(self, module, user_hooks, user_pre_hooks):
            self.hooks = _ModuleHooks(module, user_hooks, user_pre_hooks)
            self.eager = None

        def _wrap(self, function, args):
            index = [i for i, a in enumerate(args) if _proxy_or_tensor(a)]
            tensors = [args[i] for i in index]
            if not (any(_may_need_grad(t) for t in tensors) and pytorch.is_grad_enabled()):
                return args, None
            new = function.apply(self.hooks.id, *tensors)
            out = list(args)
            for i, t in zip(index, new):
                out[i] = t
            return (tuple(out) if type(args) is tuple else type(args)(*out)), index

        def setup_input_hook(self, args):
            from thunder.core.proxies import _has_proxy

            if self.eager is not None or not _has_proxy(args):
                self.eager = self.eager or original(self.hooks.module, self.hooks.hooks, self.hooks.pre_hooks)
                return self.eager.setup_input_hook(args)
            args, self.hooks.input_index = self._wrap(_HookedInputs, args)
            self.hooks.n_inputs = len(args)
            return args

        def setup_output_hook(self, result):
            if self.eager is not None:
                return self.eager.setup_output_hook(result)
            single = not isinstance(result, tuple)
            outs = (result,) if single else result
            outs, self.hooks.output_index = self._wrap(_HookedOutputs, outs)
            self.hooks.n_outputs = len(outs)
            self.hooks.output_floating = tuple(outs[i].dtype.is_floating_point or outs[i].dtype.is_complex
                                               for i in self.hooks.output_index or ())
            return outs[0] if single else outs

    return TracedBackwardHook


def _function_apply_for(original):
    """torch.autograd.Function.apply while a program is traced: a call with proxies is one opaque
    fallback call of the function (thunder.core.fallback), whose outputs' metadata come from its
    forward run on meta tensors, which runs as PyTorch runs it, and whose gradient is the user's
    own backward (PyTorch's autograd on a rerun of the call), not the derivative of the forward's
    operations: a straight-through estimator or a clipped gradient stays what its author wrote.
    PyTorch's apply would hand the proxies to C++ code that takes only tensors (transformers'
    BLOOM GELU, PhiMoE's router, RecurrentGemma's scan)."""

    def apply(cls, *args, **kwargs):
        from thunder.core import fallback
        from thunder.core.proxies import _has_proxy

        if not (_has_proxy(args) or _has_proxy(kwargs)):
            return original(cls, *args, **kwargs)
        # The original apply bound to the class: bound methods of one function and class compare
        # equal, so the fallback's symbol of this Function is shared by its calls.
        fn = types.MethodType(original, cls)
        # (By its module and class: `transformers.models.bloom.modeling_bloom.GeLUFunction.apply`; a
        # class defined inside a function by its own name.)
        where = f"{cls.__module__}.{cls.__qualname__}" if "<locals>" not in cls.__qualname__ else cls.__name__
        return fallback.call(fn, f"{where}.apply", args, kwargs)

    return apply


def _script_call_for(original):
    def call(self, *args, **kwargs):
        from thunder.core.proxies import _has_proxy

        source = getattr(self, "_torchdynamo_inline", None)  # the Python function it was compiled from
        if source is not None and (_has_proxy(args) or _has_proxy(kwargs)):
            return source(*args, **kwargs)
        return original(self, *args, **kwargs)

    return call


_SIZED_TORCH_FACTORIES = ("zeros", "ones", "empty", "full", "rand", "randn", "randint", "eye")


def _has_symint(args) -> bool:
    for a in args:
        if type(a) is _symbolic.SymInt or (type(a) in (tuple, list, _symbolic.SymSize) and _has_symint(a)):
            return True
    return False


def _factory_for(original):
    """torch.zeros and friends while tracing: a call with a symbolic size is traced as the symbol
    it maps to (thunder/core/symbolic.py); others run as they are."""

    def factory(*args, **kwargs):
        if _has_symint(args) or _has_symint(tuple(kwargs.values())):
            return proxies.dispatch(original, args, kwargs)
        return original(*args, **kwargs)

    factory.__wrapped__ = original
    return factory


def _always_compiling() -> bool:
    return True


_mutated = threading.local()


def _write_back(state) -> None:
    """Inputs updated in place get their new value written back (prims.copy_) at the end."""
    copy_ = _C.get_symbol("prims.copy_")
    mutated = state.mutated_inputs()
    for original, latest in mutated:
        copy_(latest, original)
    # The pipeline checks that no backward needs a value these writes replace.
    _mutated.names = {original.name for original, _ in mutated}


def mutated_input_names() -> set:
    """Names of the inputs the last trace acquired on this thread updates in place."""
    return getattr(_mutated, "names", set())


def _symbolic_dims(tensor, auto, key) -> list[int]:
    """The dimensions of an input that are size symbols of the trace: those marked with
    torch._dynamo.mark_dynamic, and with cache="symbolic values" (`auto`) those whose size
    changed since the input known as `key` was last traced."""
    dims = set(getattr(tensor, "_dynamo_dynamic_indices", ()) or ())
    if auto is not None:
        dims.update(auto.dims(key, tuple(tensor.shape)))
    return sorted(dims)


class _AutoDynamic:
    """thunder.jit(fn, cache="symbolic values"): a dimension whose size differs from the size the
    same input had at the previous trace becomes a size symbol of the traces after it (as
    torch.compile's automatic dynamic shapes): a program called at growing lengths traces at the
    first length, again at the second, and then serves every length from that trace. Inputs are
    the call's tensor leaves by position, and the tensors held by its arguments' attributes
    (outputs.tensor_slots: a cache's keys and values) by their order there."""

    def __init__(self):
        self._seen: dict = {}  # input -> shape at the last trace
        self._dims: dict = {}  # input -> dimensions made symbolic so far

    def dims(self, key, shape: tuple) -> list[int]:
        prev = self._seen.get(key)
        self._seen[key] = shape
        if prev is not None and len(prev) == len(shape):
            changed = {d for d, (a, b) in enumerate(zip(prev, shape)) if a != b}
            if changed:
                self._dims[key] = self._dims.get(key, set()) | changed
        return sorted(self._dims.get(key, ()))



def _put_back(substituted) -> None:
    """The tensors that symbolic-size proxies stood in for while tracing, back in their slots
    (where the program did not set the slot itself: not an update)."""
    for obj, attr, index, t, p in substituted:
        if outputs.get_slot(obj, attr, index) is p:
            outputs.set_slot(obj, attr, index, t)

def _trace(fn: Callable, args: tuple, kwargs: dict, input_names: Sequence[str | None], on_exit=None,
           holders=(), reads=None, auto: _AutoDynamic | None = None):
    """Calls fn on proxies; returns (computation trace, input sources, closure tensors, the given
    objects the call set tensors on: outputs.updated). `holders`: more objects the call may set
    tensors on (a jitted module's submodules). `reads`: a list that gets what the call read from
    its arguments' attributes, the tensors (outputs.read_slots) and the scalars
    (outputs.ScalarReads), for the guard (outputs.read_guard); None: not recorded."""
    leaves, spec = _C.tree_flatten((args, kwargs))
    # (the dtype Python floats and promoted integers take: part of the cache key)
    _C.set_default_float(str(pytorch.get_default_dtype()).removeprefix("torch."))
    trace = _C.Trace()
    sources = []
    ctx = _C.TracingContext(trace)
    with ctx, _symbolic.tracing_scope():
        new_leaves = []
        counter = 0
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, pytorch.Tensor):
                name = input_names[i] if i < len(input_names) and input_names[i] else None
                if name is None:
                    name = f"t_{counter}"
                    counter += 1
                new_leaves.append(trace.add_input(leaf, name, _symbolic_dims(leaf, auto, ("leaf", i))))
                sources.append(i)
            else:
                new_leaves.append(leaf)
        pargs, pkwargs = _C.tree_unflatten(spec, new_leaves)
        given = outputs.given_objects((args, kwargs))
        held = {**given, **{id(h): h for h in holders}}
        # (the holders' too: a module's plain tensor attribute, `self.table = torch.zeros(4)`, replaced
        # after jitting, was read as the tensor the first trace captured)
        slots = outputs.tensor_slots(held)  # before the call replaces any of them
        before = outputs.snapshot(held)
        # A tensor held by an argument's attribute with symbolic sizes is its proxy while the
        # program runs: every size the program reads from it is symbolic (read from the tensor
        # itself, `cache.keys.shape[-2]` would be the traced length, baked into the trace).
        substituted = []
        for k, (obj, attr, index, t) in enumerate(slots):
            dims = _symbolic_dims(t, auto, ("slot", k, attr, index))
            if dims:
                ctx.mark_dynamic(t, dims)
                p = _C.capture_tensor(t)
                outputs.set_slot(obj, attr, index, p)
                substituted.append((obj, attr, index, t, p))
        scalar_reads = outputs.ScalarReads(given if reads is not None else {})  # (not the holders)
        drawn_from = guards.random_states()
        trace.set_provenance("Constructed by Trace acquisition")
        trace.records_guards = True
        # Grad mode as the call found it, put back when the program has run: a program that
        # leaves it switched (a dynamo piece ending inside `torch.no_grad()`, which the next piece
        # leaves) changed it only while traced, and the call is a training call by the mode it
        # was made in (its outputs computed before the switch were returned without a gradient).
        grad_mode = pytorch.is_grad_enabled()
        try:
            with functionalize.tracing_state(trace) as state, _compiling():
                with ThunderTorchMode() as mode, scalar_reads:
                    out = fn(*pargs, **pkwargs)
                    if on_exit is not None:
                        on_exit(state)
                out = state.fresh(out)
                _write_back(state)
        except BaseException:
            # A trace that stopped (a data-dependent shape refused, an error in the program) leaves
            # the objects as they were: proxies it set on them (torchvision's AnchorGenerator caches
            # its anchors on itself) made the model fail in eager afterwards.
            _put_back(substituted)
            outputs.restore(outputs.updated(held), before)
            raise
        finally:
            pytorch._C._set_grad_enabled(grad_mode)
        _put_back(substituted)
        updated = outputs.updated(held)
        trace.set_output(outputs.prepare(out, updated, state.fresh))
        trace.records_guards = False
        # The objects hold what they held before the call until its program runs (outputs.finish
        # sets the results): the guard read after tracing sees the call's own tensors, not proxies.
        outputs.restore(updated, before)
        closures = ctx.closures()
    sources += [-(k + 1) for k in range(len(closures))]
    if reads is not None:
        # (the `.grad` of tensors outside the program that it read: the tensor each holds is keyed and
        # given to the trace as the one it captured, None traces again)
        grads = {(id(t), "grad", None): (outputs._weak(t), "grad", None) for t in mode.grad_reads}
        reads.append({**outputs.read_slots(slots, closures), **scalar_reads.reads, **grads})
        # A draw from Python's or NumPy's random generator (`if random.random() < p`) is a value the
        # trace holds as a constant, and a state the program changes: the entry serves this call only.
        reads.append(scalar_reads.changed() or guards.drew_since(drawn_from))
    return trace, sources, closures, updated


def _serves_once(compiled, reads):
    """A compiled call (traces, sources, closures[, plan]) marked to serve only the call that traced
    it where the program changed a scalar attribute it read (the compiled function traces every
    call then, as its guard on the globals it reads does for those)."""
    if not reads[1]:
        return compiled
    compiled = tuple(compiled)
    return (*compiled[:3], compiled[3] if len(compiled) > 3 else None, True)


def _weak_hook(method):
    """A callable that calls the bound `method` through a weak reference to its object: a C++
    object (CompiledFunction, GraphCache) holding it does not own that object. Python's garbage
    collector cannot see references held in C++, so a strong one would make a cycle it never
    frees (a discarded jitted module kept its parameters alive)."""
    ref = weakref.WeakMethod(method)

    def hook(*args):
        # Tracing makes hundreds of thousands of short-lived objects, and the cyclic collector,
        # run every few hundred of them, walked the whole heap: 14% of a decoding loop that
        # traced each new length (a 4-layer Llama) went to gc_collect_main. Paused while a call
        # is traced and compiled; what became garbage is collected at the next collection after.
        if not gc.isenabled():
            return ref()(*args)
        gc.disable()
        try:
            return ref()(*args)
        finally:
            gc.enable()

    return hook


class ThunderFunction(_C.CompiledFunction):
    """A jitted function: call it like the original. Calls go straight to the C++ cache lookup
    and runtime (CompiledFunction.__call__); Python runs only to trace on a cache miss."""

    def __init__(self, fn: Callable, executors=None, cudagraphs: bool = False):
        # The C++ side holds the compile hook; a weak reference keeps it from owning self.
        super().__init__(_weak_hook(self._compile))
        self._fn = fn
        self._executors = _executor_names(executors)
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)
        guard = guards.guard_for_function(fn)
        self.set_guard(guard)
        self._base_guard, self._state_guards = guard, []
        self._read_slots, self._read_guard = {}, None
        self._trace_scopes, self._jit_options = [], {}
        self._graphs = None
        self._auto_dynamic = None
        if cudagraphs:
            # Weak references, as for the compile hook: the runner does not keep self alive.
            call, written = weakref.WeakMethod(self._call_compiled), weakref.WeakMethod(self.last_written_leaves)
            devices = weakref.WeakMethod(self.last_devices)
            self._graphs = CUDAGraphRunner(lambda *a, **k: call()(*a, **k), guard=guard, written=lambda: written()(),
                                           devices=lambda: devices()())

    @property
    def _cfn(self):
        return self

    def __call__(self, *args, **kwargs):
        if functionalize.current() is not None:
            # Called from a program thunder traces: traced through, as part of that program.
            return self._fn(*args, **kwargs)
        if _dynamo_compiling():
            # (inside the disabled frame is_compiling() is False: this same call, run as it is)
            return _opaque_to_dynamo(self, *args, **kwargs)
        if self._graphs is not None:
            return self._graphs.cache(*args, **kwargs)
        return outputs.finish(_C.CompiledFunction.__call__(self, *args, **kwargs))

    def _call_compiled(self, *args, **kwargs):
        return outputs.finish(_C.CompiledFunction.__call__(self, *args, **kwargs))

    def _compile(self, args, kwargs):
        with _trace_scopes(self):
            reads = []
            stepped = guards.StepCreatesState(guards.optimizers_of(self._base_guard))
            try:
                trace, sources, closures, updated = _trace(self._fn, args, kwargs, (), reads=reads,
                                                           auto=self._auto_dynamic)
            finally:
                stepped.check(TensorProxy)
            _guard_updated_objects(self, self, updated, reads[0])
            return _serves_once(_transforms._pipeline(trace, sources, closures, self._executors, _VERIFY), reads)


def _trace_scopes(owner):
    """The context managers executors attached to a jitted object (its fp8 recipe), entered
    while it traces and transforms a call."""
    import contextlib

    stack = contextlib.ExitStack()
    for make in owner._trace_scopes:
        stack.enter_context(make())
    return stack


def _state_reader(slots):
    """A function returning the tensors in `slots` ((module, "_parameters" or "_buffers", name,
    qualified name) each) as a tuple, run before every call (C++: 0.01 us a slot; ResNet-50 has
    320 slots)."""
    return _C.StateReader([(m, kind, name) for m, kind, name, _ in slots])


def _guard_updated_objects(owner, cfn, updated, read=None) -> None:
    """After a trace that set tensors on objects it was given (outputs.updated), the kinds of those
    attributes join the cache key (outputs.state_guard): the trace may have branched on them. So
    do the identities of the tensors and the values of the scalars it read from their attributes
    (`read`, outputs.read_guard)."""
    if read:
        # Objects gone (a generation's cache) are dropped first: their ids may be reused.
        for k in [k for k, (ref, _, _) in owner._read_slots.items() if ref() is None]:
            del owner._read_slots[k]
    new_reads = {k: v for k, v in (read or {}).items() if k not in owner._read_slots}
    # The same objects and attributes set again (each step of a decoding loop): already guarded,
    # while those objects live (a new object may get a dead one's id).
    state_key = tuple((id(o), attrs) for o, attrs in updated)
    seen = owner.__dict__.setdefault("_state_keys", {})
    refs = seen.get(state_key)
    if updated and refs is not None and all(r() is o for r, (o, _) in zip(refs, updated)):
        updated = []
    if not updated and not new_reads:
        return
    if updated:
        seen[state_key] = [outputs._weak(o) for o, _ in updated]
        owner._state_guards.append(outputs.state_guard(updated))
    if new_reads:
        # One reader over every attribute any trace read, extended only by attributes not read
        # before: the key's layout changes once per new attribute, not once per trace.
        owner._read_slots.update(new_reads)
        owner._read_guard = outputs.read_guard(owner._read_slots.values())
    _install_guard(owner, cfn)


def _install_guard(owner, cfn) -> None:
    """The compiled function's guard: the owner's base guard, then its state and read guards."""
    base, extra = owner._base_guard, tuple(owner._state_guards) + ((owner._read_guard,) if owner._read_slots else ())

    def guard():
        values = base() if base is not None else ()
        for g in extra:
            values = values + g()
        return values

    cfn.set_guard(guard)
    if owner._graphs is not None:
        owner._graphs.guard = guard
        owner._graphs.cache.set_guard(guard)


def _sanitize(name: str) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in name)


class ThunderModule(pytorch.nn.Module):
    """A jitted nn.Module: parameters and buffers become inputs of the trace."""

    def __init__(self, module: pytorch.nn.Module, executors=None, cudagraphs: bool = False):
        super().__init__()
        self._model = module
        self._executors = _executor_names(executors)
        self._cfn = _C.CompiledFunction(_weak_hook(self._compile))
        guard = guards.guard_for_module(module)
        self._cfn.set_guard(guard)
        self._base_guard, self._state_guards = guard, []
        self._read_slots, self._read_guard = {}, None
        self._trace_scopes, self._jit_options = [], {}
        self._auto_dynamic = None
        # Parameters and buffers (the first argument) stay where they are between calls.
        self._graphs = (CUDAGraphRunner(self._call_compiled, stable_first=True, guard=guard,
                                        written=self._cfn.last_written_leaves, devices=self._cfn.last_devices)
                        if cudagraphs else None)
        self._take_slots()

    def _take_slots(self):
        self._structure = guards.STRUCTURE.version
        self._slots = self._collect_slots()
        self._read_state = _state_reader(self._slots)

    def _restructured(self):
        """A submodule, parameter or buffer was registered in the model after it was jitted
        (`model.fc = nn.Linear(...)`, a LoRA adapter added): the slots and the guard are taken
        again, and the guard's structure version makes the next call trace the new model."""
        self._take_slots()
        self._base_guard = guards.guard_for_module(self._model)
        _install_guard(self, self._cfn)

    def _collect_slots(self):
        # One slot per module attribute: a module registered under two names (CoaT's shared
        # convolutional position encodings, `self.cpe1` and each serial block's `cpe`) holds one
        # parameter, which is one input of the trace, named by its first path. (Two slots of one
        # attribute got two proxies, and the one set last looked like an assignment to the other.)
        slots, seen = [], set()
        for mod_name, mod in self._model.named_modules(remove_duplicate=False):
            for kind in ("_parameters", "_buffers"):
                for name, value in getattr(mod, kind).items():
                    if value is not None and (id(mod), kind, name) not in seen:
                        seen.add((id(mod), kind, name))
                        slots.append((mod, kind, name, f"{mod_name}.{name}" if mod_name else name))
        return slots

    def _state(self):
        return self._read_state()

    def __deepcopy__(self, memo):
        # A copy of the original module, jitted alike (compiled again on its first call).
        return _rejit_module(copy.deepcopy(self._model, memo), *self._rejit_options())

    def _rejit_options(self):
        return (self._executors, self._graphs is not None, self._jit_options, self._auto_dynamic is not None,
                self._cfn.cache_limit)

    def __reduce__(self):
        # pickle.dumps(tm), torch.save(tm): the original module and the jit options; loading jits it
        # again (the compiled entries are not saved, and the first call compiles).
        if type(self) is not ThunderModule:
            raise TypeError(f"cannot pickle a {type(self).__name__}; save its state_dict() instead")
        return (_rejit_module, (self._model, *self._rejit_options()))

    # The wrapper answers for the original's parameters, buffers and state dict under the
    # original's names ("fc.weight", not "_model.fc.weight"), so that a checkpoint saved from either
    # loads into the other, and optimizers and logging see the model's own names.
    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._model.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._model.named_buffers(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        # (the model's, as the names above: a parameter's name is its module's name and its own, as
        # code grouping parameters by module builds it, nanoGPT's configure_optimizers)
        return self._model.named_modules(memo=memo, prefix=prefix, remove_duplicate=remove_duplicate)

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        return self._model.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name):
        # What the wrapper lacks is the original module's (its config, a submodule, a parameter,
        # a method), as torch.compile's wrapper answers. A method runs as written: one that calls
        # the module (transformers' generate) calls the original; jit its forward instead
        # (`model.forward = thunder.jit(model.forward)`) to compile what it calls.
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__["_modules"].get("_model")
            if model is None or name == "_model":
                raise
            return getattr(model, name)

    def __call__(self, *args, **kwargs):
        # The wrapper runs the model's hooks, global ones included, inside its program; run by
        # nn.Module.__call__, the global ones ran a second time, for the wrapper. Hooks registered
        # on the wrapper itself run as for any module.
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        if functionalize.current() is not None:
            # Called from a program thunder traces: traced through, as part of that program.
            return self._model(*args, **kwargs)
        if _dynamo_compiling():
            return _opaque_to_dynamo(self.forward, *args, **kwargs)
        if self._structure != guards.STRUCTURE.version:
            self._restructured()
        if self._graphs is not None:
            return self._graphs.cache(self._state(), *args, **kwargs)
        return outputs.finish(self._cfn(self._state(), *args, **kwargs))

    def _call_compiled(self, state, *args, **kwargs):
        return outputs.finish(self._cfn(state, *args, **kwargs))

    def _compile(self, args, kwargs):
        with _trace_scopes(self):
            return self._compile_in_scope(args, kwargs)

    def _compile_in_scope(self, args, kwargs):
        state, user_args = args[0], args[1:]
        names = [_sanitize(qual) for _, _, _, qual in self._slots]

        replaced = []  # (slot, proxy it held, value forward assigned to it)

        attributes = []  # (module name, attribute, tensor it held, value forward assigned to it)

        def run(state_proxies, *a, **k):
            saved = []
            # Tensor attributes forward may reassign: plain ones, and parameters and buffers made
            # after thunder.jit (not inputs of the trace, so captured like any tensor it reads).
            slot_keys = {(id(m), kind, name) for m, kind, name, _ in self._slots}
            before = []
            for n, m in self._model.named_modules():
                held = {("__dict__", key): v for key, v in vars(m).items() if isinstance(v, pytorch.Tensor)}
                for kind in ("_parameters", "_buffers"):
                    held.update({(kind, key): v for key, v in getattr(m, kind).items()
                                 if v is not None and (id(m), kind, key) not in slot_keys})
                before.append((n, m, held))
            try:
                for (mod, kind, name, _), p in zip(self._slots, state_proxies):
                    saved.append((mod, kind, name, getattr(mod, kind)[name]))
                    getattr(mod, kind)[name] = p
                return self._model(*a, **k)
            finally:
                for slot, p in zip(self._slots, state_proxies):
                    now = getattr(slot[0], slot[1]).get(slot[2])
                    if now is not p:
                        replaced.append((slot, p, now))
                for mod, kind, name, old in saved:
                    getattr(mod, kind)[name] = old
                # The module keeps its tensors: a proxy never stays behind in an attribute.
                for mod_name, mod, tensors in before:
                    for (kind, key), old in tensors.items():
                        now = (vars(mod) if kind == "__dict__" else getattr(mod, kind)).get(key)
                        if (now is not old and kind == "__dict__" and isinstance(now, TensorProxy)
                                and (old.requires_grad or now.shape != old.shape or now.dtype != old.dtype)):
                            # `self.weight = compute(...)` over one computed before (the old
                            # weight_norm's and spectral_norm's pre-hooks): the attribute is rebound,
                            # as in eager, to the call's new tensor (outputs.updated), not written
                            # into the old one, which is part of an autograd graph or of another
                            # shape or dtype (spectral_norm's, left float32 by module.double()).
                            continue
                        if now is not old:
                            attributes.append((mod_name, key, old, now))
                            if kind == "__dict__":
                                vars(mod)[key] = old
                            else:
                                getattr(mod, kind)[key] = old

        def reassigned(fstate):
            # `self.buf = new_value` in forward: the buffer takes the new value, as in eager.
            for (mod, kind, name, qual), p, now in replaced:
                if now is not None:
                    if (kind == "_buffers" and isinstance(now, TensorProxy)
                            and (now.shape != p.shape or now.dtype != p.dtype)):
                        # A buffer forward replaces by a table of another shape (ConViT's relative
                        # indices, made for the token count on the first call): the module holds
                        # the new tensor after every call, as in eager; the next call, with a
                        # buffer of the new shape, is traced again.
                        getattr(mod, kind)[name] = now
                        continue
                    if not isinstance(now, TensorProxy) or now.shape != p.shape or now.dtype != p.dtype:
                        raise NotImplementedError(
                            f"thunder.jit: forward replaced the {kind[1:-1]} {qual} by a value of another "
                            f"shape, dtype or kind; only values like it can be written back"
                        )
                    functionalize.commit(fstate, f"assignment to {qual}", p, now)
            for mod_name, key, old, now in attributes:
                qual = f"{mod_name}.{key}" if mod_name else key
                if isinstance(now, TensorProxy) and now is _C.capture_tensor(old):
                    continue  # reassigned to itself (self.cache = self.cache.to(x.dtype))
                if not isinstance(now, TensorProxy) or now.shape != old.shape or now.dtype != old.dtype:
                    raise NotImplementedError(
                        f"thunder.jit: forward replaced the tensor attribute {qual} by a value of another shape, "
                        f"dtype or kind; make it a buffer, or keep its shape and dtype"
                    )
                functionalize.commit(fstate, f"assignment to {qual}", old, now)

        # A tensor forward stores on a submodule where it held none (a table computed on the
        # first call, as Wav2Vec2-Conformer's rotary embedding) is the module's after every call.
        reads = []
        trace, sources, closures, updated = _trace(run, (state, *user_args), kwargs, names, on_exit=reassigned,
                                                   holders=list(self._model.modules()), reads=reads,
                                                   auto=self._auto_dynamic)
        _guard_updated_objects(self, self._cfn, updated, reads[0])
        return _serves_once(_transforms._pipeline(trace, sources, closures, self._executors, _VERIFY), reads)


def _rejit_module(model, executors, cudagraphs, jit_options, symbolic, cache_limit):
    """A ThunderModule copied or unpickled: the model jitted again with the same options."""
    new = ThunderModule(model, executors, cudagraphs)
    _attach_executors(new, model, jit_options)
    if symbolic:
        new._auto_dynamic = _AutoDynamic()
    new._cfn.cache_limit = cache_limit
    return new


_VERIFY = os.environ.get("THUNDER_VERIFY", "0") == "1"


def _dump(traces):
    if "passes" in os.environ.get("THUNDER_DUMP", ""):
        for t in traces:
            print(t)


CACHE_OPTIONS = ("constant values", "symbolic values")


def jit(fn: Callable | pytorch.nn.Module, executors=None, plugins=None, cache_size: int | None = None,
        cache: str = "constant values", **kwargs) -> Any:
    """Compiles a function or an nn.Module. The result is called like the original.

    plugins="reduce-overhead" (or "cudagraphs" among the executors) replays CUDA calls from CUDA
    graphs (thunder/core/cudagraphs.py). cache_size bounds the compiled entries kept (one per input
    signature and guarded Python values; least recently used evicted first); default
    THUNDER_CACHE_SIZE, else 256. cache="symbolic values": a dimension whose size changed
    between two traced calls is a size symbol of the later traces, which serve every size their
    guards allow (docs/symbolic_sizes.md); dimensions marked with torch._dynamo.mark_dynamic are
    size symbols either way. Other keyword arguments are options of the executors that
    declare them: `fp8_recipe=` of the "fp8" executor (thunder/executors/fp8ex.py)."""
    if cache not in CACHE_OPTIONS:
        raise ValueError(f"thunder.jit: cache must be one of {', '.join(map(repr, CACHE_OPTIONS))}, but got {cache!r}")
    if cache_size is not None and (not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size <= 0):
        raise ValueError(f"thunder.jit: cache_size must be a positive int, but got {cache_size!r}")
    plugins = [plugins] if isinstance(plugins, str) else list(plugins or [])
    for p in plugins:
        if p not in CUDA_GRAPH_PLUGINS:
            raise ValueError(f"thunder.jit: unknown plugin {p!r}; known: {', '.join(CUDA_GRAPH_PLUGINS)}")
    names = [e if isinstance(e, str) else getattr(e, "name", None) for e in (executors or [])]
    cudagraphs = bool(plugins) or "cudagraphs" in names
    if executors is not None and "cudagraphs" in names:
        executors = [e for e, n in zip(executors, names) if n != "cudagraphs"]
    # torch.compile's wrappers: thunder compiles what they wrap (dynamo cannot trace thunder's proxies).
    if type(fn).__name__ == "OptimizedModule" and isinstance(getattr(fn, "_orig_mod", None), pytorch.nn.Module):
        fn = fn._orig_mod
    elif callable(getattr(fn, "_torchdynamo_orig_callable", None)):
        fn = fn._torchdynamo_orig_callable
    if isinstance(fn, ThunderModule):
        # Already jitted (by thunder.jit, thunder.distributed.ddp or fsdp): returned as it is.
        if cudagraphs or kwargs or (executors is not None and _executor_names(executors) != fn._executors):
            raise TypeError("thunder.jit: the module is already jitted with other executors or plugins; give them "
                            "to the first thunder.jit (or to thunder.distributed.ddp/fsdp)")
        return fn
    if isinstance(fn, pytorch.nn.Module):
        jfn = ThunderModule(fn, executors, cudagraphs)
    elif not callable(fn):
        raise TypeError(f"thunder.jit: expected a function or an nn.Module, but got {type(fn).__name__}")
    else:
        jfn = ThunderFunction(fn, executors, cudagraphs)
    _attach_executors(jfn, fn, kwargs)
    if cache == "symbolic values":
        jfn._auto_dynamic = _AutoDynamic()
    if cache_size is not None:
        jfn._cfn.cache_limit = cache_size
    return jfn


def _attach_executors(jfn, fn, options: dict) -> None:
    """Executors with state of their own in the jitted object (the fp8 executor's recipe and
    scaling buffers) take it, with the jit options they declare (`jit_options`), by `attach`."""
    from thunder.extend import get_executor

    jfn._jit_options = dict(options)
    options = dict(options)
    for name in jfn._executors:
        ex = get_executor(name)
        attach = getattr(ex, "attach", None)
        if attach is None:
            continue
        attach(jfn, fn, **{k: options.pop(k) for k in list(options) if k in getattr(ex, "jit_options", ())})
    if options:
        raise TypeError(f"thunder.jit: unexpected keyword arguments {sorted(options)} (an executor's options, such "
                        f"as fp8_recipe=, need that executor among executors=)")


def get_default_executors() -> tuple:
    """The executors thunder.jit uses when given none (thunder.extend.get_default_executors), for
    lists that put one first: `executors=["fp8", *thunder.get_default_executors()]`."""
    from thunder.extend import get_default_executors as defaults

    return defaults()


def _cfn(f):
    c = getattr(f, "_cfn", None)
    if c is None:
        raise TypeError(f"expected a function or module returned by thunder.jit, but got {type(f).__name__}")
    return c


def last_backward_traces(f) -> list:
    """The backward traces of the last call when it was a training call (else empty): the
    backward trace first, the final execution trace last."""
    plan = _cfn(f).last_training_plan()
    return [] if plan is None else list(plan.backward_traces)


def last_traces(f) -> list:
    """The traces of the last call: computation trace first, final execution trace last."""
    return list(_cfn(f).last_traces())


def last_fusion_sources(f) -> dict:
    """The generated source (CUDA or C++) of each fusion in the last call's final trace, by name."""
    traces = last_traces(f)
    return dict(_C.fusion_sources(traces[-1])) if traces else {}


def cache_hits(f) -> int:
    return _cfn(f).cache_hits


def cache_misses(f) -> int:
    return _cfn(f).cache_misses


def compile_stats(f) -> dict:
    c = _cfn(f)
    return {"cache_hits": c.cache_hits, "cache_misses": c.cache_misses, "cache_size": c.cache_size,
            "cache_evictions": c.cache_evictions}

# The torch language, importable as thunder.torch (which is why PyTorch is `pytorch` above).
import thunder.torch  # noqa: E402,F401
import thunder.core.prims  # noqa: E402,F401
from thunder.examine import examine  # noqa: E402
