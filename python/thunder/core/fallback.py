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

import contextlib
import functools
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
# The names of the symbols whose runs call a C++ kernel instead of their Python function.
_NATIVE: set = set()

# Values a symbol argument can hold (thunder._C converts them); anything else is a constant of
# the symbol, kept in its closure (a torch.memory_format, a torch.Generator, ...).
# (Slices and Ellipsis are constants: the runtime has no kernel argument for them.)
_VALUE_TYPES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, devices.Device)


_STATIC_TYPES = (torch.dtype, torch.device, devices.Device, str)


def _is_value(x) -> bool:
    return isinstance(x, (_C.TensorProxy, torch.Tensor) + _VALUE_TYPES)


def _mixed(x) -> bool:
    """Whether a sequence holds tensors beside other values, or nested sequences with tensors."""
    if not isinstance(x, (tuple, list)):
        return False
    kinds = {isinstance(y, (_C.TensorProxy, torch.Tensor)) for y in x}
    return len(kinds) > 1 or any(isinstance(y, (tuple, list, dict)) and _has_tensor(y) for y in x)


def _has_tensor(x) -> bool:
    return any(isinstance(y, (_C.TensorProxy, torch.Tensor)) for y in pytree.tree_leaves(x))


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


# ---- autocast -----------------------------------------------------------------------------------
# A call traced under torch.autocast of an op with no thunder symbol runs under that autocast
# state, as eager runs it: ATen applies its policy to the op, or, for a composite op, to the ops it
# decomposes into (CPU's torch.linalg.multi_dot and matrix_power reach mm, in lower precision).
# Meta tensors have no autocast, so the outputs' metadata come from fake tensors on the call's
# device under the same state; a call fake tensors cannot run keeps autocast off.


def _autocast_state() -> tuple:
    return tuple((d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d))


@contextlib.contextmanager
def _autocast(state):
    """The traced autocast state (the runtime runs with autocast off); the cast cache off, as the
    call's inputs are the program's values of this run."""
    with contextlib.ExitStack() as stack:
        for device, dtype in state:
            stack.enter_context(torch.autocast(device, dtype=dtype, cache_enabled=False))
        yield


def _fake_outputs(call, state, args, kwargs):
    """The outputs of the call run on fake tensors under the autocast state `state`."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def leaf(x):
        if isinstance(x, _C.TensorProxy):
            with mode:
                return torch.empty(tuple(x._shape), dtype=x.dtype, device=x._device_str)
        return _to_torch_leaf(x)

    with torch._C.DisableTorchFunction():
        fargs, fkwargs = call.rebuild(call.leaves(args, kwargs), leaf)
        with mode, _autocast(state):
            return call.func(*fargs, **fkwargs)


def _autocast_probe(call, state) -> tuple:
    """`state` when fake tensors run the call under it, else () (autocast off for the call). A call
    meta tensors cannot run keeps the way it has without autocast (refused, or its meta rule)."""
    if not state:
        return ()
    try:
        def leaf(x):  # tensors the call holds as constants on the meta device too
            if isinstance(x, torch.Tensor) and not isinstance(x, _C.TensorProxy):
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            return _meta_leaf(x)

        with torch._C.DisableTorchFunction():
            margs, mkwargs = call.rebuild(call.leaves(call.args, call.kwargs), leaf)
            call.func(*margs, **mkwargs)
        _fake_outputs(call, state, call.args, call.kwargs)
    except Exception:  # noqa: BLE001 - data-dependent or unsupported for fake tensors
        return ()
    return state


def _ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
                   zero_infinity=False):
    batched = log_probs.dim() == 3
    shape = (log_probs.shape[1],) if reduction == "none" and batched else ()
    return torch.empty(shape, dtype=log_probs.dtype, device="meta")


def _cov_meta(input, *args, **kwargs):
    n = input.shape[0] if input.dim() == 2 else 1
    dtype = input.dtype if input.dtype.is_floating_point or input.dtype.is_complex else torch.get_default_dtype()
    return torch.empty((n, n) if n > 1 else (), dtype=dtype, device="meta")


_C10_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.complex64: "ComplexFloat",
                    torch.complex128: "ComplexDouble", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _lstsq_check(A, B, driver):
    """torch.linalg.lstsq's checks, in its order and with its messages (PyTorch makes them in the
    kernel, which meta tensors do not reach)."""
    dim_diff = A.dim() - B.dim()
    if not 0 <= dim_diff <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if A.shape[-2] != B.shape[-1 if dim_diff else -2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size({-1 if dim_diff else -2})")
    if A.dtype != B.dtype:
        name = lambda d: _C10_DTYPE_NAMES.get(d, str(d))  # noqa: E731
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's "
                           f"dtype {name(A.dtype)} and other's dtype {name(B.dtype)}")
    if driver is not None and driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if A.dtype not in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        raise RuntimeError("This function doesn't handle types other than float and double")


def _lstsq_meta(device, A, B, rcond=None, *, driver=None):
    """torch.linalg.lstsq's (solution, residuals, rank, singular_values) on `device`, after its
    checks (_lstsq_check). Which outputs are empty depends on the driver: gelsy (the CPU's default) computes no residuals, gels (CUDA's only one)
    no rank, and only gelsd and gelss the singular values. Residuals (for m > n) are computed by
    gelsd and gelss only when every matrix has full rank, a shape that depends on the values."""
    _lstsq_check(A, B, driver)
    cuda = torch.device(_to_torch_leaf(device)).type == "cuda"
    driver = driver or ("gels" if cuda else "gelsy")
    if cuda and driver != "gels":
        raise RuntimeError("torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA")
    m, n = A.shape[-2:]
    vector = B.dim() == A.dim() - 1
    k = 1 if vector else B.shape[-1]
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-1] if vector else B.shape[:-2])
    real = A.real.dtype if A.is_complex() else A.dtype
    if m > n and driver in ("gelsd", "gelss"):
        raise NotImplementedError(
            f"thunder.jit: torch.linalg.lstsq with driver='{driver}' returns residuals only when every matrix "
            "has full rank, an output shape that depends on the tensors' values; driver='gels' or 'gelsy' can be "
            "traced (thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture)")

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    solution = empty((*batch, n) if vector else (*batch, n, k), A.dtype)
    residuals = empty((*batch, k) if m > n and driver != "gelsy" else (0,), real)
    rank = empty(batch if driver != "gels" else (0,), torch.int64)
    singular = empty((*batch, min(m, n)) if driver in ("gelsd", "gelss") else (0,), real)
    return torch.return_types.linalg_lstsq((solution, residuals, rank, singular))


def _foreach_pointwise_meta(self, *args, **kwargs):
    """torch._foreach_addcdiv / _foreach_addcmul (the out-of-place forms of Adam's foreach step):
    each result is like the tensor of `self` it updates. Their meta kernels refuse a list of step
    sizes held in a CPU tensor (`scalars`), which the values decide, not the shapes."""
    return [torch.empty_like(t) for t in self]


# The output metadata of ops PyTorch has no meta kernel for, whose outputs' shapes the arguments'
# shapes decide (not their values).
_META_RULES = {
    torch.nn.functional.ctc_loss: _ctc_loss_meta,
    torch.ctc_loss: _ctc_loss_meta,
    torch.cov: _cov_meta,
    torch.Tensor.cov: _cov_meta,
    torch.corrcoef: _cov_meta,
    torch.Tensor.corrcoef: _cov_meta,
    torch._foreach_addcdiv: _foreach_pointwise_meta,
    torch._foreach_addcmul: _foreach_pointwise_meta,
}
# Rules whose outputs depend on the device the call runs on: called with it first.
_DEVICE_META_RULES = {
    torch.linalg.lstsq: _lstsq_meta,
}


def indexes_as_int(k) -> bool:
    """Whether an index key's item `k` (a tensor or its proxy) is a 0-dim integer tensor, which
    eager's indexing reads as the Python int it holds (bool and uint8 ones are masks)."""
    return (k.ndim == 0 and not k.dtype.is_floating_point and not k.dtype.is_complex
            and k.dtype not in (torch.bool, torch.uint8))


def _scalar_index_tensors_as_ints(key):
    """An index key with its 0-dim integer tensors as ints: eager reads their values (x[t, idx] is
    x[int(t), idx]), which meta tensors do not have; the result's metadata does not depend on them."""
    def conv(k):
        return 0 if isinstance(k, torch.Tensor) and indexes_as_int(k) else k

    return tuple(conv(k) for k in key) if isinstance(key, tuple) else key


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


class _Call:
    """One fallback call: its arguments as symbol parameters (one per positional argument, one
    keyword-only parameter per keyword), with constants thunder cannot hold split out."""

    def __init__(self, func, qualname, args, kwargs):
        self.func, self.qualname = func, qualname
        self.nargs, self.kwnames = len(args), tuple(kwargs)
        self.autocast = ()  # the autocast state the call runs under (see _autocast_probe)
        leaves, self.spec = pytree.tree_flatten((args, kwargs))
        self.constants = {i: x for i, x in enumerate(leaves) if not _is_value(x)}
        # Dtypes, devices and strings stay arguments (the trace prints them), but the kernel gets
        # them as traced: the runtime hands a dtype over as its number.
        self.static = {i: x for i, x in enumerate(leaves) if isinstance(x, _STATIC_TYPES)}
        if self.constants:
            leaves = [None if i in self.constants else x for i, x in enumerate(leaves)]
            args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        self.args, self.kwargs = tuple(args), dict(kwargs)
        # A sequence argument mixing tensors with other values (an index tuple) has no kernel
        # argument type: such calls pass their flat leaves instead.
        self.flat = any(_mixed(x) for x in (*self.args, *self.kwargs.values()))
        if self.flat:
            self.args = tuple(pytree.tree_leaves((self.args, self.kwargs)))
            self.nargs, self.kwnames, self.kwargs = len(self.args), (), {}

    def key(self):
        consts = tuple((i, repr(x)) for i, x in sorted({**self.constants, **self.static}.items()))
        # (flat: the same structure with other kinds of leaves, x[1, idx] then x[idx0, idx1], passes
        # its leaves one by one; the second got the first's symbol, whose parameters differ)
        return (self.func, str(self.spec), consts, self.flat, self.autocast)

    def params(self):
        pos = [(f"a{i}", "positional", False, None) for i in range(self.nargs)]
        return pos + [(k, "keyword", False, None) for k in self.kwnames]

    def leaves(self, args, kwargs):
        """The flat argument leaves of a call of the symbol (as the symbol received them)."""
        if self.flat:
            return list(args)
        return pytree.tree_leaves((tuple(args), {k: kwargs[k] for k in self.kwnames}))

    def rebuild(self, leaves, leaf_fn):
        """(args, kwargs) for the torch callable from flat leaves, constants put back."""
        fixed = {**self.static, **self.constants}
        full = [leaf_fn(fixed[i]) if i in fixed else leaf_fn(x) for i, x in enumerate(leaves)]
        return pytree.tree_unflatten(full, self.spec)


def _device_of(values, kwargs_device):
    """The device of a fallback call's outputs: a device argument's, else the first tensor's."""
    if kwargs_device is not None:
        return devices.Device(kwargs_device)
    for x in values:
        if isinstance(x, (torch.device, devices.Device)):
            return devices.Device(x)
    for x in values:
        if isinstance(x, _C.TensorProxy):
            return x.device
    return devices.Device(torch.get_default_device())


def _make_symbol(call: _Call):
    func, qualname = call.func, call.qualname
    box = {}

    def meta(*args, **kwargs):
        if call.autocast:
            return outputs(_fake_outputs(call, call.autocast, args, kwargs), args, {})
        with torch._C.DisableTorchFunction():
            margs, mkwargs = call.rebuild(call.leaves(args, kwargs), _meta_leaf)
            if func is torch.Tensor.__getitem__ and len(margs) == 2:
                margs = (margs[0], _scalar_index_tensors_as_ints(margs[1]))
            try:
                out = func(*margs, **mkwargs)
            except (NotImplementedError, RuntimeError) as e:
                text = str(e)
                if isinstance(e, RuntimeError) and "meta" not in text.lower() and "data-dependent" not in text.lower():
                    raise
                rule = _META_RULES.get(func)
                if func in _DEVICE_META_RULES:
                    rule = functools.partial(_DEVICE_META_RULES[func], _device_of(pytree.tree_leaves(args), None))
                if rule is None:
                    raise NotImplementedError(
                        f"thunder.jit: {qualname} has no thunder symbol, and PyTorch cannot tell its output's "
                        f"metadata without running it ({text.splitlines()[0][:160]}); it cannot be traced "
                        f"(thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture)"
                    ) from None
                out = rule(*margs, **mkwargs)
        return outputs(out, args, mkwargs)

    def outputs(out, args, mkwargs):
        out_leaves, out_spec = pytree.tree_flatten(out)
        device = _device_of(pytree.tree_leaves(args), mkwargs.get("device"))
        proxies = []
        for x in out_leaves:
            if isinstance(x, torch.Tensor):
                proxies.append(_C.TensorProxy(shape=tuple(x.shape), dtype=x.dtype, device=device))
            elif x is None:
                proxies.append(None)
            else:
                raise NotImplementedError(
                    f"thunder.jit: {qualname} has no thunder symbol, and it returns a {type(x).__name__}, whose "
                    f"value may depend on the tensors' data or strides; it cannot be traced "
                    f"(thunder.dynamo.thunderfx runs such a program, split there by torch.compile's capture)"
                )
        box["spec"], box["none"] = out_spec, [p is None for p in proxies]
        tensors = tuple(p for p in proxies if p is not None)
        return tensors[0] if len(tensors) == 1 else tensors

    def fn(*args, **kwargs):
        rargs, rkwargs = call.rebuild(call.leaves(args, kwargs), _to_torch_leaf)
        with _autocast(call.autocast):
            out = func(*rargs, **rkwargs)
        tensors = tuple(x for x in pytree.tree_leaves(out) if x is not None)
        return tensors[0] if len(tensors) == 1 else tensors

    # The forward of a training call also returns the random number generator's state before the
    # call, so that the backward's rerun draws the same numbers (dropout-like ops).
    def meta_rng(*args, **kwargs):
        out = meta(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        device = _device_of(pytree.tree_leaves(args), kwargs.get("device"))
        n = _rng_state_size(device)
        return (*outs, _C.TensorProxy(shape=(n,), dtype=torch.uint8, device="cpu"))

    def fn_rng(*args, **kwargs):
        device = _device_of_tensors(pytree.tree_leaves((args, kwargs)))
        state = _get_rng_state(device)
        out = fn(*args, **kwargs)
        return (*(out if isinstance(out, tuple) else (out,)), state)

    sym_name = f"{_sanitize(qualname)}_{next(_counter)}"
    sym = _register(sym_name, call.params(), meta, fn, qualname)
    if _native_getitem(call) and _C.extend_use_native_kernel(sym, "Tensor.__getitem__"):
        # x[i0, i1] with index tensors (transformers' mask[batch_idx, kv_idx]): ATen's index
        # called from C++, not this Python function (a call back into Python each run).
        _NATIVE.add(sym.name)
    sym_rng = _register(sym_name + "_rng", call.params(), meta_rng, fn_rng)
    from thunder.core.transforms import _register_executor_grad_transform

    _register_executor_grad_transform(EXECUTOR, sym, _grad_rule(sym_rng, call))
    return sym, box


def _native_getitem(call: _Call) -> bool:
    """Whether a fallback call is `tensor[key]` with a key of tensors only (one, or a tuple), which
    the runtime's C++ getitem kernel takes as the symbol's two arguments."""
    if call.func is not torch.Tensor.__getitem__ or call.flat or call.constants or call.kwnames or call.nargs != 2:
        return False
    key = call.args[1]
    keys = key if isinstance(key, tuple) else (key,)
    return len(keys) > 0 and all(isinstance(k, (_C.TensorProxy, torch.Tensor)) for k in keys)


def _rng_state_size(device) -> int:
    if devices.Device(device).type == "cuda":
        return 16
    return torch.get_rng_state().numel()


def _device_of_tensors(leaves):
    for x in leaves:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _get_rng_state(device):
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


class _replay_rng:
    """Runs a block with the generator of `device` set to `state`, and leaves it as it was."""

    def __init__(self, device, state):
        self.device, self.state = torch.device(device), state

    def __enter__(self):
        cuda = self.device.type == "cuda"
        self._fork = torch.random.fork_rng(devices=[self.device] if cuda else [], device_type="cuda" if cuda else "cpu")
        self._fork.__enter__()
        if cuda:
            torch.cuda.set_rng_state(self.state, self.device)
        else:
            torch.set_rng_state(self.state)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)


def _is_diff(x) -> bool:
    return isinstance(x, _C.TensorProxy) and (x.dtype.is_floating_point or x.dtype.is_complex)


def _grad_rule(sym, call: _Call):
    """The grad rule of a fallback symbol: forward as traced, backward through torch.autograd."""
    vjps: dict = {}

    def rule(*args, **kwargs):
        from thunder.core.transforms import get_grad, put_grad

        with_state = sym(*args, **kwargs)
        outs, rng_state = with_state[:-1], with_state[-1]
        result = outs if len(outs) != 1 else outs[0]
        leaves = call.leaves(args, kwargs)
        diff_out = tuple(i for i, o in enumerate(outs) if _is_diff(o))
        diff_in = tuple(i for i, x in enumerate(leaves) if _is_diff(x))
        if not diff_out or not diff_in:
            return result
        cots = [get_grad(outs[i]) for i in diff_out]
        tensor_at = tuple(i for i, x in enumerate(leaves) if isinstance(x, _C.TensorProxy))
        consts = tuple((i, x) for i, x in enumerate(leaves) if not isinstance(x, _C.TensorProxy))
        key = (diff_in, diff_out, tensor_at, repr(consts))
        vjp = vjps.get(key)
        if vjp is None:
            vjp = vjps[key] = _make_vjp(call, len(leaves), tensor_at, dict(consts), diff_in, diff_out)
        grads = vjp(*[leaves[i] for i in tensor_at], rng_state, *cots)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for i, g in zip(diff_in, grads):
            put_grad(leaves[i], g)
        return result

    return rule


def _make_vjp(call: _Call, nleaves, tensor_at, consts, diff_in, diff_out):
    """vjp_<name>(input tensors..., cotangents...) -> the gradients of the differentiable inputs,
    computed by PyTorch's autograd on a rerun of the call."""
    qualname, n = call.qualname, len(tensor_at)

    def meta(*xs):
        by_leaf = dict(zip(tensor_at, xs[:n]))  # then the generator state, then the cotangents
        out = tuple(_C.TensorProxy(like=by_leaf[i]) for i in diff_in)
        return out[0] if len(out) == 1 else out

    # Inputs PyTorch refuses to differentiate (a batch norm's running stats): found on the first
    # call that meets the refusal, then left out (their gradient is zero).
    refused: set = set()

    def run(leaves, cots, wrt_at, state):
        # The rerun must not change anything the caller sees: a call that updates some input in
        # place (batch norm's running stats) updates a copy; it draws the forward's random numbers.
        leaves = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        with torch.enable_grad(), _replay_rng(_device_of_tensors(leaves), state):
            for i in wrt_at:
                leaves[i] = leaves[i].detach().requires_grad_(True)
            args, kwargs = call.rebuild(leaves, _to_torch_leaf)
            with _autocast(call.autocast):
                out = call.func(*args, **kwargs)
            outs = [x for x in pytree.tree_leaves(out) if x is not None]
            pairs = [(outs[i], c) for i, c in zip(diff_out, cots) if outs[i].requires_grad]
            wrt = [leaves[i] for i in wrt_at]
            if not pairs or not wrt:
                return [None] * len(wrt)
            return torch.autograd.grad([o for o, _ in pairs], wrt, [c for _, c in pairs], allow_unused=True)

    def fn(*xs):
        leaves = [None] * nleaves
        for i, x in zip(tensor_at, xs[:n]):
            leaves[i] = x
        for i, c in consts.items():
            leaves[i] = c
        state, cots = xs[n], xs[n + 1:]
        try:
            wrt_at = [i for i in diff_in if i not in refused]
            grads = run(leaves, cots, wrt_at, state)
        except RuntimeError as e:
            if "not differentiable with respect to" not in str(e):
                raise RuntimeError(f"thunder.jit: the gradient of {qualname} (computed by PyTorch) failed: {e}") from None
            for i in diff_in:
                try:
                    run(leaves, cots, [i], state)
                except RuntimeError:
                    refused.add(i)
            wrt_at = [i for i in diff_in if i not in refused]
            grads = run(leaves, cots, wrt_at, state)
        by_leaf = dict(zip(wrt_at, grads))
        out = tuple(torch.zeros_like(leaves[i]) if by_leaf.get(i) is None else by_leaf[i] for i in diff_in)
        return out[0] if len(out) == 1 else out

    name = f"vjp_{_sanitize(qualname)}_{next(_counter)}"
    params = [(f"a{i}", "positional", False, None) for i in range(n + 1 + len(diff_out))]
    return _register(name, params, meta, fn)


def _register(name, params, meta, fn, prints_as=""):
    """A fallback operator, and its function in the scope a printed execution trace runs in
    (thunder.extend.execution_scope), by the name it prints with."""
    from thunder.extend import _OPERATOR_FNS

    sym = _C.extend_register_operator(EXECUTOR, name, params, None, meta, fn, [], prints_as)
    _OPERATOR_FNS[sym.id] = fn
    return sym


class CheckFailed(ValueError, RuntimeError):
    """A value check traced as passing failed when the program ran (see assume_true); a ValueError
    as torch.distributions raises and a RuntimeError as torch._check_tensor_all raises."""


_check_symbol = None


def _check_meta(cond, what):
    return _C.TensorProxy(shape=tuple(cond._shape), dtype=torch.bool, device=cond.device)


def _check_fn(cond, what):
    if not bool(cond):
        raise CheckFailed(f"thunder.jit: the program's value check failed ({what}): eager PyTorch raises its "
                          f"own error here; thunder traced the check as passing and checks it as it runs")
    return cond


def assume_true(cond, what: str) -> bool:
    """A value check (a one-element bool tensor PyTorch's code tests, such as torch.distributions'
    `if not torch._is_all_true(valid): raise ValueError(...)`) taken as passing while tracing: the
    trace checks it where the program computes it, raising CheckFailed if it does not hold for the
    inputs of a call (a sync with the device there, as eager's check is). Returns True."""
    global _check_symbol
    _ensure_executor()
    with _lock:
        if _check_symbol is None:
            _check_symbol = _C.extend_register_operator(
                EXECUTOR, "check_true", [("cond", "positional", False, None), ("what", "positional", False, None)],
                None, _check_meta, _check_fn, ["DONT_DCE"])
            from thunder.extend import _OPERATOR_FNS

            _OPERATOR_FNS[_check_symbol.id] = _check_fn
    _check_symbol(cond, what)
    return True


def call(func, qualname: str, args: tuple, kwargs: dict):
    """Records a call of `func` (no thunder symbol) as a fallback symbol; returns its outputs as
    proxies in the structure PyTorch returns them."""
    _ensure_executor()
    c = _Call(func, qualname, args, kwargs)
    c.autocast = _autocast_probe(c, _autocast_state())
    key = c.key()
    with _lock:
        entry = _symbols.get(key)
        if entry is None:
            entry = _make_symbol(c)
            _symbols[key] = entry
    sym, box = entry
    out = sym(*c.args, **c.kwargs)
    outs = list(out) if isinstance(out, tuple) else [out]
    it = iter(outs)
    full = [None if none else next(it) for none in box["none"]]
    return pytree.tree_unflatten(full, box["spec"])
