"""Transforms of traced programs: reverse-mode autodiff.

    grad(fn)(*args)     -> the gradients of fn's floating-point tensor arguments, as a list, with
                           every tensor output's cotangent a tensor of ones
    get_grad(out)       -> inside a grad rule: the cotangent of a forward output
    put_grad(x, g)      -> inside a grad rule: the gradient of a forward input
    put_grads(xs, gs)   -> put_grad for each pair

A grad rule computes the forward, returns it, and describes the backward with get_grad and
put_grad(s): everything it traces after the first get_grad belongs to the backward. The rules
live in C++ (csrc/transforms/grad_rules.cpp), keyed by symbol; executors add their own with
_register_executor_grad_transform.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from thunder import _C

__all__ = ["grad", "get_grad", "put_grad", "put_grads"]


def get_grad(x):
    """The cotangent of the forward output `x` (inside a grad rule)."""
    return _C.get_grad(x)


def put_grad(x, grad) -> None:
    """Gives the gradient of the forward input `x` (inside a grad rule). Numbers are ignored."""
    _C.put_grad(x, grad)


def put_grads(xs: Sequence, grads: Sequence) -> None:
    """put_grad for each (input, gradient) pair."""
    xs, grads = tuple(xs), tuple(grads)
    if len(xs) != len(grads):
        raise ValueError(f"put_grads: got {len(xs)} inputs but {len(grads)} gradients")
    for x, g in zip(xs, grads):
        put_grad(x, g)


def _register_executor_grad_transform(executor_name: str, symbol, fn: Callable, checker: Callable | None = None) -> None:
    """Makes `fn` the grad rule of `symbol` (a thunder symbol or its id) while the executor named
    `executor_name` is active, for the calls `checker` accepts (all where None); it takes
    precedence over thunder's own rule for that symbol. The checker sees each tensor argument's
    requires_grad as whether the argument is on the gradient path."""
    if not callable(fn):
        raise TypeError(f"_register_executor_grad_transform: expected a callable, but got {type(fn).__name__}")
    _C.register_executor_grad_transform(executor_name, symbol, fn, checker)


class _GradFunction:
    """grad(fn): called like fn, returns the gradients of its floating-point tensor arguments."""

    def __init__(self, fn: Callable):
        import thunder

        if isinstance(fn, thunder.ThunderModule):
            raise TypeError("grad: expected a function, not a module (differentiate a function of its parameters)")
        if isinstance(fn, thunder.ThunderFunction):
            self._fn, self._executors = fn._fn, fn._executors
        elif callable(fn):
            self._fn, self._executors = fn, thunder._executor_names(None)
        else:
            raise TypeError(f"grad: expected a function, but got {type(fn).__name__}")
        self._cfn = _C.CompiledFunction(thunder._weak_hook(self._compile))
        self.__wrapped__ = fn
        self.__name__ = "grad_" + getattr(self._fn, "__name__", "fn")

    def _compile(self, args, kwargs):
        import thunder

        trace, sources, closures, _ = thunder._trace(self._fn, args, kwargs, ())
        num_args = sum(1 for s in sources if s >= 0)
        traces = _C.run_grad_pipeline(trace, self._executors, num_args, thunder._VERIFY)
        thunder._dump(traces)
        return traces, sources, closures

    def __call__(self, *args, **kwargs) -> list:
        return self._cfn(*args, **kwargs)


def grad(fn: Callable) -> Callable:
    """Returns a function computing the gradients of `fn` (a function or a thunder.jit of one)
    with respect to its floating-point tensor arguments, as a list in argument order."""
    return _GradFunction(fn)


def _pipeline(trace, sources, closures, executors, verify: bool):
    """The passes after acquisition: a training plan (forward and backward joined to autograd by
    one autograd function) when grad mode is on and an input requires grad."""
    import torch

    import thunder

    if torch.is_grad_enabled() and any(p.requires_grad for p in trace.inputs):
        mutated = thunder.mutated_input_names()
        plan = _C.run_training_pipeline(trace, executors, verify, sorted(mutated))
        thunder._dump(list(plan.forward_traces) + list(plan.backward_traces))
        overwritten = sorted(mutated & set(plan.saved_names))
        if overwritten:
            # The forward writes the new value into the caller's tensor before the backward runs.
            raise NotImplementedError(
                f"thunder.jit: the backward needs the value that {', '.join(overwritten)} held before the "
                f"function updated it in place; clone it before the in-place update"
            )
        return plan.forward_traces, sources, closures, plan
    traces = _C.run_pipeline(trace, executors, verify)
    thunder._dump(traces)
    return traces, sources, closures


def saved_for_backward(f) -> dict[str, Any]:
    """What the last training call of a jitted function saved for its backward: the number,
    bytes and names of the saved tensors, and the same numbers without rematerialization."""
    import thunder

    plan = thunder._cfn(f).last_training_plan()
    if plan is None:
        raise ValueError("saved_for_backward: the last call was not a training call (no input required grad)")
    return {
        "count": plan.num_saved,
        "bytes": plan.saved_bytes,
        "names": list(plan.saved_names),
        "count_without_remat": plan.num_saved_without_remat,
        "bytes_without_remat": plan.saved_bytes_without_remat,
    }


def live_bytes(trace, produced_by: str | None = None) -> dict[str, Any]:
    """Memory of an execution trace (one of thunder.last_traces / last_backward_traces, with its
    `del` statements), from the tensors' metadata: `after` holds the bytes of live tensors after
    each statement, `peak` the largest, `peak_index` where it is first reached. Views (outputs of
    shape ops) share their base's storage; inputs count until deleted. With `produced_by` (a
    symbol name such as "all_gather_zero3"), only tensors made by calls of that symbol count."""
    return dict(_C.live_bytes(trace, produced_by or ""))
