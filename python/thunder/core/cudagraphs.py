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
keep. An input the program updates in place (other than a stable one) is updated in the graph's
buffer and copied back into the caller's tensor after each replay, so the caller sees the update
as in eager. Calls that need autograd (an input requires grad while grad mode is on), calls
with CPU tensors, and programs that move tensors to the host or compute there run without
graphs. The signature also holds grad and autocast modes and the
values the jitted function's guard reads (thunder/core/guards.py), so a changed global or a
module's `training` flag captures again instead of replaying a stale program.

The per-call path is C++ (thunder._C.GraphCache): it keys a call whose leaves (in tuples, lists
and dicts) are tensors and scalars, and replays the graph installed under that key after copying
the other tensors into its buffers. Calls it has no graph for come here: warm-up, capture (which
installs the graph there), and calls with other leaves (custom containers, objects), which this
module keys with torch's pytree and replays itself.
"""

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.utils._pytree as pytree

from thunder import _C

PLUGIN_NAMES = ("reduce-overhead", "cudagraphs")

WARMUP_CALLS = 2

_VALUE_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _signature(leaves, stable_at):
    """The key of a call on the general path (leaves from torch's pytree)."""
    sig = []
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor):
            fixed = i in stable_at
            sig.append((tuple(x.shape), x.stride(), x.dtype, x.device, fixed, x.data_ptr() if fixed else 0))
        else:
            sig.append(("value", type(x), x if isinstance(x, _VALUE_TYPES) else id(x)))
    return tuple(sig)


class CUDABackend:
    """Where graphs are made: CUDA streams and torch.cuda.CUDAGraph. The tests of the call logic
    give the runner a CPU stand-in with the same three members."""

    device = "cuda"

    @staticmethod
    @contextlib.contextmanager
    def side_stream():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side):
                yield
        finally:
            torch.cuda.current_stream().wait_stream(side)

    @staticmethod
    def capture(thunk):
        """Records thunk() into a new graph; returns (graph, thunk's output)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = thunk()
        return graph, out

    @staticmethod
    def rng_offset():
        """The current device's default CUDA generator's offset: a call that draws random numbers
        advances it."""
        return torch.cuda.default_generators[torch.cuda.current_device()].get_offset()

    @staticmethod
    def direct_handle(graph):
        """(cudaGraphExec_t as an integer, device) for launching `graph` without replay(), or
        (0, -1) where this torch cannot say."""
        try:
            return int(graph.raw_cuda_graph_exec()), torch.cuda.current_device()
        except (AttributeError, RuntimeError):
            return 0, -1


class _Graph:
    """The calls of one input signature: warm-up calls, then one captured graph replayed."""

    def __init__(self):
        self.calls = 0
        self.graph = None
        self.plain = False
        # Whether a warm-up call drew random numbers from the default generator (unknown: True).
        self.draws = False

    def __call__(self, runner, key, leaves, unflatten, stable_at):
        if self.plain:
            args, kwargs = unflatten(leaves)
            return runner.fn(*args, **kwargs)
        if self.calls < WARMUP_CALLS:
            self.calls += 1
            rng_offset = getattr(runner.backend, "rng_offset", None)
            before = rng_offset() if rng_offset else None
            with runner.backend.side_stream():
                args, kwargs = unflatten(leaves)
                out = runner.fn(*args, **kwargs)
            self.draws = self.draws or before is None or rng_offset() != before
            # The inputs the program updates in place: the graph updates their buffers, which
            # every replay copies back (stable tensors are updated where they are).
            written = runner.written_leaves(args, kwargs)
            self.write_back = [i for i, x in enumerate(leaves) if id(x) in written and i not in stable_at]
            # A program that moves tensors to the host or computes there (x.cpu(), a CPU buffer
            # made inside) cannot be recorded: its calls run without a graph.
            devices = runner.devices() if runner.devices is not None else ()
            self.plain = any(not d.startswith(runner.backend.device) for d in devices)
            return out
        if self.graph is None:
            # Inputs copied on every call get buffers of their own; stable tensors are used in place.
            self.copy_at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and i not in stable_at]
            self.inputs = list(leaves)
            for i in self.copy_at:
                self.inputs[i] = leaves[i].clone()
            args, kwargs = unflatten(self.inputs)
            self.graph, self.output = runner.backend.capture(lambda: runner.fn(*args, **kwargs))
            if key is not None:
                buffers = [None] * len(leaves)
                for i in self.copy_at:
                    buffers[i] = self.inputs[i]
                # A graph that draws no random numbers is launched directly by the C++ path: its
                # replay() would refill the generator's seed and offset tensors first (two fill
                # kernels and their dispatch on every call), which only graphs that draw read.
                direct = getattr(runner.backend, "direct_handle", None)
                exec_, device = direct(self.graph) if direct and not self.draws else (0, -1)
                runner.cache.install(key, buffers, self.graph.replay, self.output, self.graph, self.write_back,
                                     exec=exec_, device=device)
        for i in self.copy_at:
            self.inputs[i].copy_(leaves[i])
        self.graph.replay()
        for i in self.write_back:
            leaves[i].copy_(self.inputs[i])
        return self.output


class CUDAGraphRunner:
    """Calls `fn` through CUDA graphs, one per input signature (see the module docstring). Call
    it through `runner.cache` (the C++ per-call path); `runner.cache.fast = False` keys every
    call here instead (the path before the C++ one, kept for comparison)."""

    def __init__(self, fn, stable_first: bool = False, guard=None, backend=CUDABackend, written=None, devices=None):
        self.fn = fn
        # () -> the devices the last call of fn computed on (CompiledFunction.last_devices).
        self.devices = devices
        # () -> positions of the (args, kwargs) leaves (thunder._C.tree_flatten's order) that the
        # last call of fn updated in place (CompiledFunction.last_written_leaves).
        self.written = written
        self.stable_first = stable_first
        self.guard = guard
        self.backend = backend
        self.graphs: dict = {}
        # The C++ cache holds its callbacks through a weak reference: it does not own the runner.
        ref = weakref.ref(self)

        def plain(*args, **kwargs):
            return ref().fn(*args, **kwargs)

        def slow(key, args, kwargs):
            return ref()._call(key, args, kwargs)

        self.cache = _C.GraphCache(plain, slow, stable_first, backend.device)
        self.cache.set_guard(guard)

    def __call__(self, *args, **kwargs):
        return self.cache(*args, **kwargs)

    def written_leaves(self, args, kwargs) -> set:
        """The ids of the tensors of (args, kwargs) that the last call of fn updated in place."""
        if self.written is None:
            return set()
        leaves = _C.tree_flatten((args, kwargs))[0]
        return {id(leaves[i]) for i in self.written()}

    def _call(self, key, args, kwargs):
        """A call the C++ cache has no graph for: `key` from C++, or None (this module keys it)."""
        if key is not None:
            leaves, spec = _C.tree_flatten((args, kwargs))
            n_stable = len(_C.tree_flatten(args[0])[0]) if self.stable_first else 0
            stable_at = range(n_stable)

            def unflatten(xs):
                return _C.tree_unflatten(spec, list(xs))
        else:
            leaves, spec = pytree.tree_flatten((args, kwargs))
            tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
            if (
                not tensors
                or any(x.device.type != self.backend.device for x in tensors)
                or (torch.is_grad_enabled() and any(x.requires_grad for x in tensors))
            ):
                return self.fn(*args, **kwargs)
            stable_ids = {id(x) for x in pytree.tree_leaves(args[0])} if self.stable_first else set()
            stable_at = {i for i, x in enumerate(leaves) if id(x) in stable_ids}
            values = self.guard() if self.guard is not None else ()
            key = (
                str(spec),
                _signature(leaves, stable_at),
                torch.is_grad_enabled(),
                tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cuda", "cpu")),
                tuple(v if isinstance(v, _VALUE_TYPES) else id(v) for v in values),
            )

            def unflatten(xs):
                return pytree.tree_unflatten(list(xs), spec)
        graph = self.graphs.get(key)
        if graph is None:
            graph = self.graphs[key] = _Graph()
        return graph(self, key if isinstance(key, bytes) else None, leaves, unflatten, stable_at)
