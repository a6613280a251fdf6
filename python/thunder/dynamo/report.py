"""The record of what thunder.dynamo did with each graph dynamo gave it, and its text report."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SplitReason:
    """A node of a dynamo graph that runs in PyTorch, and why thunder does not take it."""

    node: str
    target: str
    reason: str


@dataclass
class Piece:
    """One piece of a split graph: the submodule the split graph calls, where it runs, its nodes
    (names in the original graph) and, for a thunder piece, the thunder.jit'ed module."""

    name: str
    thunder: bool
    nodes: list
    module: torch.nn.Module


@dataclass
class SubgraphInfo:
    """One graph dynamo compiled with ThunderCompiler: the graph as dynamo gave it, the split graph
    that runs instead, its pieces in order and the reasons for the splits."""

    index: int
    original_graph_module: torch.fx.GraphModule
    split_graph_module: torch.fx.GraphModule
    pieces: list = field(default_factory=list)
    split_reasons: list = field(default_factory=list)

    @property
    def thunder_pieces(self) -> list:
        return [p.module for p in self.pieces if p.thunder]

    @property
    def torch_pieces(self) -> list:
        return [p.module for p in self.pieces if not p.thunder]


def _names(nodes: list, limit: int = 12) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f", ... ({len(nodes) - limit} more)" if len(nodes) > limit else "")


def report(infos: list, graph_breaks: dict | None = None) -> str:
    """The graphs dynamo compiled, dynamo's graph breaks between them (reason -> count), the
    pieces of each graph (where each ran, which nodes it holds) and why each node PyTorch runs was
    not taken by thunder."""
    if not infos:
        return "thunder.dynamo: no graph compiled yet (the function has not been called)"
    lines = [f"thunder.dynamo: {len(infos)} graph(s) from dynamo"]
    if graph_breaks:
        lines.append("dynamo's graph breaks (Python runs between the graphs):")
        lines += [f"  {reason} (x{n})" for reason, n in graph_breaks.items()]
    for info in infos:
        n_thunder = sum(p.thunder for p in info.pieces)
        lines.append(f"graph {info.index}: {len(info.pieces)} piece(s), {n_thunder} in thunder, "
                     f"{len(info.pieces) - n_thunder} in PyTorch")
        for p in info.pieces:
            lines.append(f"  {p.name} [{'thunder' if p.thunder else 'torch'}]: {_names(p.nodes)}")
        if info.split_reasons:
            lines.append("  split reasons:")
            for r in info.split_reasons:
                lines.append(f"    {r.node} ({r.target}): {r.reason}")
    return "\n".join(lines)
