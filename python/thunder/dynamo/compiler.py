"""ThunderCompiler, the torch.compile backend, and thunderfx, torch.compile with it in one call."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._dynamo.utils import counters

from thunder.dynamo.report import Piece, SplitReason, SubgraphInfo, report
from thunder.dynamo.splitter import split


class ThunderCompiler:
    """A torch.compile backend: `torch.compile(fn, backend=ThunderCompiler(**options))`.

    Each FX graph dynamo gives it is split into pieces thunder takes, each compiled by
    thunder.jit(piece, **options) (thunder's executors, caching and autodiff), and pieces PyTorch
    runs as they are. subgraph_infos holds a SubgraphInfo per graph, in the order dynamo compiled
    them: the pieces, where each runs and the reason for each split.

    Sizes: when dynamo passes symbolic sizes (after a recompile for a new shape, torch.compile's
    automatic dynamic), the split graph receives them as ints at run time and each thunder piece
    compiles once per concrete input signature (thunder's cache keys on shapes and on the values
    of number inputs), so one dynamo graph serves every shape."""

    def __init__(self, **thunder_options):
        import thunder

        # Bad options fail here, as thunder.jit would, not on the first graph.
        thunder.jit(lambda: None, **thunder_options)
        self.thunder_options = thunder_options
        self.subgraph_infos: list[SubgraphInfo] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs) -> Callable:
        import thunder

        s = split(gm)
        info = SubgraphInfo(len(self.subgraph_infos), gm, s.split_gm)
        for name, thunder_runs in s.thunder_pieces.items():
            module = getattr(s.split_gm, name)
            if thunder_runs:
                module = thunder.jit(module, **self.thunder_options)
                setattr(s.split_gm, name, module)
            info.pieces.append(Piece(name, thunder_runs, s.nodes_of[name], module))
        info.split_reasons = [SplitReason(node, target, reason) for node, (target, reason) in s.reasons.items()]
        self.subgraph_infos.append(info)
        return s.split_gm

    @property
    def thunder_pieces(self) -> list:
        """Every thunder piece of every graph, in order."""
        return [m for info in self.subgraph_infos for m in info.thunder_pieces]

    def report(self) -> str:
        return report(self.subgraph_infos)


def _short(reason: str) -> str:
    """dynamo's graph break message in a line: its title and explanation."""
    lines = [line.strip() for line in reason.strip().splitlines()]
    why = next((line[len("Explanation:"):].strip() for line in lines if line.startswith("Explanation:")), "")
    return f"{lines[0]}: {why}" if why else lines[0]


class ThunderFX:
    """A function or module compiled by torch.compile with a ThunderCompiler backend (thunderfx)."""

    def __init__(self, fn: Callable, dynamic: bool | None = None, **thunder_options):
        self._backend = ThunderCompiler(**thunder_options)
        self._fn = fn
        self._compiled = torch.compile(fn, backend=self._backend, dynamic=dynamic)
        self.__wrapped__ = fn
        # dynamo's reasons for the graph breaks between the graphs it compiled -> how many
        self.graph_breaks: dict[str, int] = {}

    def __call__(self, *args, **kwargs) -> Any:
        # dynamo counts the graph breaks it makes, by reason, while it compiles: those new during
        # this call are this function's. (A break where the frame then returns, as after `if
        # t.max() > k:`, it counts as "unimplemented" only.)
        breaks, unimplemented = counters["graph_break"], counters["unimplemented"]
        before, before_unimplemented = breaks.copy(), unimplemented.copy()
        try:
            return self._compiled(*args, **kwargs)
        finally:
            if breaks != before or unimplemented != before_unimplemented:
                new = breaks - before
                for reason, n in (unimplemented - before_unimplemented).items():
                    new.setdefault(reason, n)
                for reason, n in new.items():
                    self.graph_breaks[_short(reason)] = self.graph_breaks.get(_short(reason), 0) + n

    @property
    def backend(self) -> ThunderCompiler:
        return self._backend

    @property
    def subgraph_infos(self) -> list[SubgraphInfo]:
        return self._backend.subgraph_infos

    @property
    def last_traces(self) -> list:
        """For each thunder piece (graphs in the order dynamo compiled them, pieces in program
        order), thunder.last_traces of its last call: computation trace first, final trace last.
        A piece not run yet has an empty list."""
        import thunder

        return [thunder.last_traces(m) for m in self._backend.thunder_pieces]

    @property
    def last_backward_traces(self) -> list:
        """thunder.last_backward_traces of each thunder piece, in the order of last_traces."""
        import thunder

        return [thunder.last_backward_traces(m) for m in self._backend.thunder_pieces]

    def report(self) -> str:
        """A readable account of the graphs dynamo compiled, dynamo's graph breaks between them,
        their pieces and the reasons for the splits."""
        return report(self._backend.subgraph_infos, self.graph_breaks)


def thunderfx(fn: Callable, dynamic: bool | None = None, **thunder_options) -> ThunderFX:
    """torch.compile(fn, backend=ThunderCompiler(**thunder_options), dynamic=dynamic), with the
    record of what thunder compiled: f.last_traces, f.last_backward_traces, f.report(),
    f.subgraph_infos. thunder_options are thunder.jit's (executors=..., cache_size=...)."""
    return ThunderFX(fn, dynamic=dynamic, **thunder_options)
