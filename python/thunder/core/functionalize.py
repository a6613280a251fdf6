"""In-place ops and mutation while tracing, made functional.

Proxies are immutable: `x.add_(y)` traces `t1 = x + y` and from then on every use of `x` reads
`t1` (the tracing state keeps, for each mutated tensor, its latest value). When tracing ends,
each mutated input of the trace (an argument, a module parameter or buffer, a tensor the
function closes over) gets `prims.copy_(latest, input)`, so the caller's tensor holds what eager
PyTorch would have written. `x[key] = v` becomes a functional scatter of v into x.

Views are where functionalization could go silently wrong: eager PyTorch writes through a view
into its base and sees a base's update through its views. Thunder does not model storage, so it
refuses what it cannot represent, with an error naming the op: an in-place update of a view of
an input, and any use of a view (or base) after the other was updated in place.
"""

from __future__ import annotations

import threading

import torch
import torch.utils._pytree as pytree

from thunder import _C

# Ops whose result may share storage with their first argument (as PyTorch's views do).
VIEW_OPS = frozenset(
    """view view_as reshape reshape_as flatten unflatten squeeze unsqueeze permute transpose t T mT
    swapaxes swapdims movedim moveaxis expand expand_as broadcast_to narrow select split chunk
    unbind tensor_split diagonal detach __getitem__ as_strided contiguous real imag unfold
    view_as_real view_as_complex to type float double half bfloat16 int long bool""".split()
)

_tls = threading.local()


class TraceState:
    """What tracing one function knows about mutation: the latest value of each mutated tensor,
    and which proxies are views of which."""

    def __init__(self, trace=None):
        self.trace = trace
        # id(original) -> (original, latest): original is a proxy or a real (closure) tensor.
        self.latest: dict[int, tuple] = {}
        # id(view proxy) -> (view, base proxy, op name)
        self.view_of: dict[int, tuple] = {}
        # id(base proxy) -> [view proxies]
        self.views: dict[int, list] = {}
        # id(stale proxy) -> message of why it may no longer be read
        self.stale: dict[int, str] = {}
        # Grad mode of the call traced: a result the program computes with it off (under
        # torch.no_grad() or inference_mode) gets no gradient (proxies.dispatch).
        self.grad_enabled = torch.is_grad_enabled()

    def fresh(self, x):
        """x with every mutated tensor replaced by its latest value (through tuples, lists, dicts)."""
        if not self.latest and not self.stale:
            return x
        return self._fresh(x)

    def _fresh(self, x, depth=0):
        """Containers keep their type: a Hugging Face ModelOutput (a dict subclass registered with
        torch's pytree) stays one (it became a plain dict: T5's output had no `.logits`). Other
        objects are returned as they are."""
        if isinstance(x, (_C.TensorProxy, torch.Tensor)):
            msg = self.stale.get(id(x))
            if msg is not None:
                raise NotImplementedError(msg)
            return self._latest_value(x)
        if depth > 8:
            return x
        if type(x) in (tuple, torch.Size, list):
            return type(x)(self._fresh(y, depth + 1) for y in x)
        if type(x) is dict:
            return {k: self._fresh(v, depth + 1) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*(self._fresh(y, depth + 1) for y in x))
        node = pytree.SUPPORTED_NODES.get(type(x))
        if node is not None:
            children, context = node.flatten_fn(x)
            fresh = [self._fresh(c, depth + 1) for c in children]
            return x if all(a is b for a, b in zip(fresh, children)) else node.unflatten_fn(fresh, context)
        return x

    def _latest_value(self, x):
        """x's latest value. A value updated through a view after it became another's latest
        (x.add_(1), then x[:, 0] *= 2 updates x's new value) has a latest of its own."""
        v = x
        for _ in range(64):
            e = self.latest.get(id(v))
            if e is None or e[1] is v:
                break
            v = e[1]
        return v

    def root(self, p):
        e = self.view_of.get(id(p))
        while e is not None:
            p = e[1]
            e = self.view_of.get(id(p))
        return p

    def is_input(self, p) -> bool:
        return self.trace is not None and any(q is p for q in self.trace.inputs)

    def record_views(self, op_name: str, base, out, key=None):
        """`key`: the index of a __getitem__ view (an update of the view is written through to
        its base when it is basic: ints, slices, None, ...)."""
        if not isinstance(base, _C.TensorProxy):
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for o in outs:
            if isinstance(o, _C.TensorProxy) and o is not base and id(o) not in self.view_of:
                self.view_of[id(o)] = (o, base, op_name, key)
                self.views.setdefault(id(base), []).append(o)

    def mutated_inputs(self):
        """(input proxy, latest value) for every input of the trace updated in place."""
        return [(o, v) for o, _ in self.latest.values()
                if isinstance(o, _C.TensorProxy) and self.is_input(o) and (v := self._latest_value(o)) is not o]


def user_code() -> bool:
    """True while tracing runs the user's program (not thunder's own callbacks such as an executor's
    checker or meta function): proxies then answer like torch.Tensors (device is a torch.device,
    which PyTorch's argument parser accepts); elsewhere like thunder's (a thunder Device)."""
    return bool(getattr(_tls, "stack", None)) and not getattr(_tls, "thunder_depth", 0)


class thunder_code:
    """Context manager: thunder API code runs inside (an executor's callbacks)."""

    def __enter__(self):
        _tls.thunder_depth = getattr(_tls, "thunder_depth", 0) + 1

    def __exit__(self, *exc):
        _tls.thunder_depth -= 1
        return False


def current() -> TraceState | None:
    stack = getattr(_tls, "stack", None)
    return stack[-1] if stack else None


class tracing_state:
    """Context manager: a fresh TraceState for one trace acquisition."""

    def __init__(self, trace=None):
        self._trace = trace

    def __enter__(self) -> TraceState:
        if not hasattr(_tls, "stack"):
            _tls.stack = []
        st = TraceState(self._trace)
        _tls.stack.append(st)
        return st

    def __exit__(self, *exc):
        _tls.stack.pop()
        return False


def _shape_str(p) -> str:
    return str(list(p.shape))


def commit(state: TraceState, op_name: str, target, result):
    """Makes `result` the new value of `target` after an in-place op named op_name: checks that
    PyTorch would accept it (shape, dtype cast) and that no view makes it ambiguous. Returns
    target, as PyTorch's in-place ops return self."""
    real = isinstance(target, torch.Tensor) and not isinstance(target, _C.TensorProxy)
    proxy = _C.capture_tensor(target) if real else target
    cur = state.fresh(proxy)
    if not isinstance(result, _C.TensorProxy):
        raise NotImplementedError(f"thunder.jit: {op_name} did not produce a tensor")
    if tuple(result.shape) != tuple(cur.shape) and op_name in _RESHAPING_INPLACE:
        # y.unsqueeze_(1) on a tensor the program made (BigBird's band mask): y is its new shape
        # from here on. The caller's tensors and views keep their shapes, as thunder returns new
        # tensors: changing those in place is refused.
        # (the out-of-place op's result was noted as a view of proxy: it is proxy's new value)
        if state.view_of.get(id(result), (None, None))[1] is proxy:
            del state.view_of[id(result)]
            state.views[id(proxy)] = [v for v in state.views.get(id(proxy), ()) if v is not result]
        of_input = state.is_input(state.root(proxy))
        if of_input or state.view_of.get(id(proxy)) or state.views.get(id(proxy)):
            raise NotImplementedError(
                f"thunder.jit: {op_name} changes the shape of {proxy.name} in place, "
                f"{'an input or a view of one' if of_input else 'a tensor with views'}; "
                f"this is not supported: use the out-of-place op ({op_name[:-1]}) and the tensor it returns"
            )
        state.latest[id(proxy)] = (proxy, result)
        return target
    if tuple(result.shape) != tuple(cur.shape):
        raise RuntimeError(
            f"{op_name}: output with shape {list(cur.shape)} doesn't match the broadcast shape {list(result.shape)}"
        )
    if result.dtype != cur.dtype:
        if not torch.can_cast(result.dtype, cur.dtype):
            raise RuntimeError(
                f"{op_name}: result type {_dtype_title(result.dtype)} can't be cast to the desired output type "
                f"{_dtype_title(cur.dtype)}"
            )
        result = result.to(cur.dtype)
    view = state.view_of.get(id(proxy))
    if view is not None and view[2] == "detach" and state.is_input(state.root(proxy)):
        # `w.data.clamp_(...)` (x.data is x.detach()): an update of the input itself, recorded as
        # eager records it, without a gradient.
        root = state.root(proxy)
        if not _same_layout(view[1], proxy):
            raise NotImplementedError(f"thunder.jit: {op_name} updates {proxy.name}, a detached view of {root.name} "
                                      f"of another shape; update {root.name} itself")
        with torch.no_grad():
            commit(state, op_name, root, result)
        state.latest[id(proxy)] = (proxy, result)
        return target
    if (view is None and state.grad_enabled and not torch.is_grad_enabled() and proxy.requires_grad
            and state.is_input(proxy)):
        # An input that requires grad updated with grad mode off (`with torch.no_grad(): w.mul_(2)`
        # in a forward): eager keeps differentiating with respect to it, at its new values. The new
        # value passes the gradient to the old one unchanged (cur - cur.detach() is zero).
        with torch.enable_grad():
            result = result + (cur - cur.detach())
    if view is None and torch.is_grad_enabled() and proxy.requires_grad and state.is_input(proxy):
        raise RuntimeError(
            f"{op_name}: a leaf Variable that requires grad ({proxy.name}) is being used in an in-place operation."
        )
    if view is not None:
        root = state.root(proxy)
        if state.is_input(root):
            raise NotImplementedError(
                f"thunder.jit: {op_name} updates {proxy.name} in place, a view of the input {root.name} "
                f"(made by {view[2]}); writing through a view of an input is not supported: update {root.name} itself"
            )
        if not _write_through(state, proxy, result, op_name):
            state.stale[id(root)] = (
                f"thunder.jit: {root.name} was changed by {op_name} through its view {proxy.name}; reading it "
                f"again is not supported (update it directly, or clone the view first)"
            )
    for v in state.views.get(id(proxy), ()):
        state.stale[id(v)] = (
            f"thunder.jit: {v.name} is a view of {proxy.name}, which {op_name} updated in place after the view "
            f"was taken; reading the view again is not supported (clone it before the update, or take it after)"
        )
    state.latest[id(proxy)] = (proxy, result)
    if real:
        state.latest[id(target)] = (target, result)
    return target


# In-place ops that change a tensor's shape, not its values.
_RESHAPING_INPLACE = {f"Tensor.{op}_" for op in ("unsqueeze", "squeeze", "transpose", "t", "swapdims", "swapaxes",
                                                    "as_strided")}


def _same_layout(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


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


def _write_through(state: TraceState, proxy, result, op_name: str) -> bool:
    """An in-place update of `proxy`, a chain of basic-index views (x[:, :, 0] += 1) of a tensor
    made while tracing: each base up the chain gets the updated view scattered into it, as eager
    PyTorch writes through the view. Other views taken of those bases before the update read
    stale values: they may no longer be read. False (nothing changed) for other views."""
    chain = []
    p = proxy
    while (e := state.view_of.get(id(p))) is not None:
        if e[2] != "__getitem__" or e[3] is None or not _basic_key(e[3]):
            return False
        chain.append(e)
        p = e[1]
    from thunder.core.proxies import _setitem_value

    value, updates = result, []
    for view, base, _, key in chain:
        value = _setitem_value(state.fresh(base), key, value)
        updates.append((base, value))
    members = {id(view) for view, *_ in chain} | {id(base) for _, base, *_ in chain}
    for base, value in updates:
        state.latest[id(base)] = (base, value)
        for v in state.views.get(id(base), ()):
            if id(v) not in members:
                state.stale[id(v)] = (
                    f"thunder.jit: {v.name} is a view of {base.name}, which {op_name} updated through another "
                    f"view ({proxy.name}) after {v.name} was taken; reading {v.name} again is not supported "
                    f"(take it after the update)"
                )
    return True


def _dtype_title(dt) -> str:
    names = {
        torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
        torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
        torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    }
    return names.get(dt, str(dt))


