"""CUDA graphs for jitted calls: `thunder.jit(fn, plugins="reduce-overhead")`.

The first two calls with a new input signature run the jitted function as it is, on a side
stream (so its kernels are compiled and its allocations made); the third captures it into a CUDA
graph, which records kernels without running them, and replays the graph. Later calls with that
signature copy their tensor arguments into the graph's input buffers and replay it: one launch for
the whole program, no host work per op. Every call runs the program exactly once, as eager does: a
function that updates a buffer in place (a KV cache, a step counter, running statistics) updates
it once per call, never once more for a warm-up.

Tensors that live across calls at a fixed address (a module's parameters and buffers) are read in
place, so an optimizer stepping them in place between calls is seen by the next replay; a new
tensor in their place (a different address) captures again. Outputs are the graph's own buffers
and are overwritten by the next replay, as with torch.compile's "reduce-overhead": clone what you
keep. Calls that need autograd (an input requires grad while grad mode is on), and calls with
CPU tensors, run without graphs.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

PLUGIN_NAMES = ("reduce-overhead", "cudagraphs")


def _signature(leaves, stable_ids):
    sig = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            fixed = id(x) in stable_ids
            sig.append((tuple(x.shape), x.stride(), x.dtype, x.device, fixed, x.data_ptr() if fixed else 0))
        else:
            sig.append(("value", type(x), x if isinstance(x, (int, float, bool, str, type(None))) else id(x)))
    return tuple(sig)


WARMUP_CALLS = 2


class _Graph:
    """The calls of one input signature: warm-up calls, then one captured graph replayed."""

    def __init__(self):
        self.calls = 0
        self.graph = None

    def _capture(self, fn, leaves, spec, stable_ids):
        # Inputs copied on every call get buffers of their own; stable tensors are used in place.
        self.inputs = [x.clone() if isinstance(x, torch.Tensor) and id(x) not in stable_ids else x for x in leaves]
        self.copy_at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and id(x) not in stable_ids]
        args, kwargs = pytree.tree_unflatten(self.inputs, spec)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.output = fn(*args, **kwargs)
        self.graph = graph

    def __call__(self, fn, leaves, spec, stable_ids):
        if self.calls < WARMUP_CALLS:
            self.calls += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                args, kwargs = pytree.tree_unflatten(leaves, spec)
                out = fn(*args, **kwargs)
            torch.cuda.current_stream().wait_stream(side)
            return out
        if self.graph is None:
            self._capture(fn, leaves, spec, stable_ids)
        for i in self.copy_at:
            self.inputs[i].copy_(leaves[i])
        self.graph.replay()
        return self.output


class CUDAGraphRunner:
    """Calls `fn` through CUDA graphs, one per input signature (see the module docstring)."""

    def __init__(self, fn, stable_leaves=None):
        self.fn = fn
        # (args, kwargs) -> the leaves that are stable (parameters, buffers)
        self.stable_leaves = stable_leaves
        self.graphs: dict = {}

    def __call__(self, *args, **kwargs):
        leaves, spec = pytree.tree_flatten((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if (
            not tensors
            or any(not t.is_cuda for t in tensors)
            or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
        ):
            return self.fn(*args, **kwargs)
        stable_ids = {id(x) for x in self.stable_leaves(args, kwargs)} if self.stable_leaves else set()
        key = (str(spec), _signature(leaves, stable_ids))
        graph = self.graphs.get(key)
        if graph is None:
            graph = self.graphs[key] = _Graph()
        return graph(self.fn, leaves, spec, stable_ids)
