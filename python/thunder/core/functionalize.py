"""In-place ops and mutation while tracing, made functional.

Proxies are immutable: `x.add_(y)` traces `t1 = x + y` and from then on every use of `x` reads
`t1` (the tracing state keeps, for each mutated tensor, its latest value). When tracing ends,
each mutated input of the trace (an argument, a module parameter or buffer, a tensor the
function closes over) gets `prims.copy_(latest, input)`, so the caller's tensor holds what eager
PyTorch would have written. `x[key] = v` becomes a functional scatter of v into x.

Views (aliasing.py owns which ops return their input, a view of it, or a new tensor): an update
of a base is seen by its views, which are recomputed from its new value at their next read; an
update of a view is written into its base where the view is a one-to-one image of part of it. What
thunder cannot represent is refused with an error naming the op: an in-place update of a view of
an input, and a read of a base changed through a view with no write-back.
"""

from __future__ import annotations

import threading

import torch
import torch.utils._pytree as pytree

from thunder import _C
import thunder.torch as ltorch
from thunder.core import aliasing

_tls = threading.local()


class TraceState:
    """What tracing one function knows about mutation: the latest value of each mutated tensor,
    and which proxies are views of which."""

    def __init__(self, trace=None):
        self.trace = trace
        # id(original) -> (original, latest): original is a proxy or a real (closure) tensor.
        self.latest: dict[int, tuple] = {}
        # id(view) -> aliasing.View, for each view the program holds
        self.view_of: dict[int, aliasing.View] = {}
        # id(base) -> [views the program took of it]
        self.views: dict[int, list] = {}
        # ids of views whose base changed since they were computed: recomputed at their next read
        self.pending: set[int] = set()
        # True while thunder recomputes views and write-backs: the ops it runs take no views
        self.replaying = False
        # id(stale proxy) -> message of why it may no longer be read
        self.stale: dict[int, str] = {}
        # Grad mode of the call traced: a result the program computes with it off (under
        # torch.no_grad() or inference_mode) gets no gradient (proxies.dispatch).
        self.grad_enabled = torch.is_grad_enabled()

    def fresh(self, x):
        """x with every mutated tensor replaced by its latest value (through tuples, lists, dicts)."""
        if not self.latest and not self.stale and not self.pending:
            return x
        return self._fresh(x)

    def replay(self):
        """Context manager: ops run inside compute values for thunder, not views for the program."""
        return _Replay(self)

    def _fresh(self, x, depth=0):
        """Containers keep their type: a Hugging Face ModelOutput (a dict subclass registered with
        torch's pytree) stays one (it became a plain dict: T5's output had no `.logits`). Other
        objects are returned as they are."""
        if isinstance(x, (_C.TensorProxy, torch.Tensor)):
            msg = self.stale.get(id(x))
            if msg is not None:
                raise NotImplementedError(msg)
            if id(x) in self.pending:
                return aliasing.refresh(self, x)
            e = self.latest.get(id(x))
            return x if e is None else e[1]
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

    def root(self, p):
        """The tensor p is a view of (through views of views), or p."""
        while (rec := self.view_of.get(id(p))) is not None:
            p = rec.base
        return p

    def is_input(self, p) -> bool:
        return self.trace is not None and any(q is p for q in self.trace.inputs)

    def mutated_inputs(self):
        """(input proxy, latest value) for every input of the trace updated in place."""
        return [(o, v) for o, v in self.latest.values() if isinstance(o, _C.TensorProxy) and self.is_input(o) and v is not o]


class _Replay:
    def __init__(self, state):
        self.state = state

    def __enter__(self):
        self.prev, self.state.replaying = self.state.replaying, True

    def __exit__(self, *exc):
        self.state.replaying = self.prev
        return False


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
    result = state.fresh(result)  # a tensor the program holds (`self.buf = y` in forward): its value now
    if tuple(result.shape) != tuple(cur.shape) and op_name in _RESHAPING_INPLACE:
        # y.unsqueeze_(1) on a tensor the program made (BigBird's band mask): y is its new shape
        # from here on. The caller's tensors and views keep their shapes, as thunder returns new
        # tensors: changing those in place is refused.
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
    if view is not None and view.op == "detach" and state.is_input(view.base):
        # `w.data.clamp_(...)` (x.data is x.detach()): an update of the input itself, recorded as
        # eager records it, without a gradient. (A detach of a view of the input, `a[0].detach()
        # .add_(1)`, is written back through that view below: fuzzer seed 145842.)
        root = state.root(proxy)
        if not _same_layout(view.base, proxy):
            raise NotImplementedError(f"thunder.jit: {op_name} updates {proxy.name}, a detached view of {root.name} "
                                      f"of another shape; update {root.name} itself")
        with state.replay():
            # the input takes the new values only: `x.data.copy_(v)` gives v no gradient through x
            values = result.detach()
        with torch.no_grad():
            commit(state, op_name, root, values)
        state.latest[id(proxy)] = (proxy, result)
        return target
    if (view is None and state.grad_enabled and not torch.is_grad_enabled()
            and (proxy.requires_grad if state.is_input(proxy) else not real)):
        # An input that requires grad, or a tensor the program computed, updated with grad mode
        # off (`with torch.no_grad(): w.mul_(2)` in a forward, `y = x * 2` then `y.add_(1)` under
        # no_grad): eager keeps differentiating with respect to it, at its new values. The new
        # value passes the gradient to the old one unchanged (ltorch.pass_gradient).
        with torch.enable_grad():
            result = ltorch.pass_gradient(result, cur)
    if view is None and torch.is_grad_enabled() and proxy.requires_grad and state.is_input(proxy):
        raise RuntimeError(
            f"{op_name}: a leaf Variable that requires grad ({proxy.name}) is being used in an in-place operation. "
            f"(Where {proxy.name} is a tensor computed outside the jitted call, which eager updates in place, as "
            f"the input of a block jitted on its own: thunder.jit does not update such an input in place; write "
            f"the update out of place (`x = x + f(x)` for `x += f(x)`, inplace=False), or jit the whole model.)"
        )
    if view is not None:
        root = state.root(proxy)
        # A view of an input is written through as a view of a tensor the program made; the
        # input's new value is then written back into it at the end (x[:, 0] *= 2, x.unsqueeze(0)
        # .masked_fill_(m, 0)), as eager's update of the view updates x. An input that requires
        # grad is a leaf eager refuses to update through a view too.
        # Through a detached view (`x.detach()[0].add_(1)`) eager updates the leaf's values
        # outside autograd: written back below as any view's update, the leaf keeping its path.
        detached = aliasing.through_detach(state, proxy)
        if state.is_input(root) and root.requires_grad and torch.is_grad_enabled() and not detached:
            raise RuntimeError(
                f"{op_name}: a view of a leaf Variable that requires grad ({proxy.name}, a view of {root.name} "
                f"made by {view.op}) is being used in an in-place operation."
            )
        leaf_no_grad = state.is_input(root) and root.requires_grad and not detached and not real
        if state.is_input(root) and id(root) not in state.latest:
            state.latest[id(root)] = (root, root)
        if leaf_no_grad:
            # `with torch.no_grad(): w.diagonal().fill_(1)`, `w.t()[0] = 0`: the leaf takes the new
            # values and keeps differentiating as itself (ltorch.pass_gradient, as an update of the
            # leaf itself with grad mode off), its views recomputed from it at their next read
            cur = state.fresh(root)
            if not aliasing.write_through(state, proxy, result):
                raise NotImplementedError(
                    f"thunder.jit: {op_name} updates {proxy.name} in place, a view of the input {root.name} "
                    f"(made by {view.op}), which requires grad, with grad mode off; writing through such a view "
                    f"is not supported: update {root.name} itself"
                )
            if state.grad_enabled:
                with torch.enable_grad(), state.replay():
                    state.latest[id(root)] = (root, ltorch.pass_gradient(state.latest[id(root)][1].detach(), cur))
            aliasing.invalidate(state, root)
            p = proxy
            while p is not root:
                state.pending.add(id(p))
                p = state.view_of[id(p)].base
            return target
        if not aliasing.write_through(state, proxy, result):
            state.stale[id(root)] = (
                f"thunder.jit: {root.name} was changed by {op_name} through its view {proxy.name} (made by "
                f"{view.op}), which thunder cannot write back; reading {root.name} again is not supported "
                f"(update it directly, or clone the view first)"
            )
    state.latest[id(proxy)] = (proxy, result)
    aliasing.invalidate(state, proxy)
    if real:
        state.latest[id(target)] = (target, result)
    return target


# In-place ops that change a tensor's shape, not its values.
_RESHAPING_INPLACE = {f"Tensor.{op}_" for op in ("unsqueeze", "squeeze", "transpose", "t", "swapdims", "swapaxes",
                                                    "as_strided")}


def _same_layout(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def _dtype_title(dt) -> str:
    names = {
        torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
        torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
        torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    }
    return names.get(dt, str(dt))


