"""Splits a dynamo FX graph into pieces thunder takes and pieces PyTorch runs.

Whether thunder takes a node is asked of thunder itself: the node's call is traced by thunder's
trace acquisition (thunder._trace) on tensors with the metadata dynamo recorded for its inputs
(node.meta["example_value"]). A call thunder maps to its symbols, or records as a fallback
symbol, traces; one thunder refuses (an output whose shape depends on the data, a value read from
a tensor) raises, and its message is the reason the node runs in PyTorch. A node whose output
dynamo could only describe with unbacked symbols (nonzero, x[mask], .item() when dynamo captures
scalar outputs) is data-dependent and runs in PyTorch without being asked.

Consecutive nodes of the same kind form one piece (torch.fx.passes.split_module, program order).
Nodes that set PyTorch's global state (autocast regions, grad mode), and nodes computing on sizes
and numbers only (dynamo's size arithmetic and checks), join the piece they are in:
split_module repeats the region's entry and exit in every piece inside it, and thunder traces a
piece under the state its region sets, as eager runs it.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch < 2.12 (the GPU machine's 2.11): the size dynamo recorded, if any

    def optimization_hint(s, fallback=None):
        hint = s.node.hint
        return int(hint) if hint is not None else fallback
from torch.fx.passes.split_module import split_module
from torch.multiprocessing.reductions import StorageWeakRef

_STATE_NODES = (torch.amp._enter_autocast, torch.amp._exit_autocast, torch._C._set_grad_enabled)

# The size given to a dimension dynamo knows only as an unbacked symbol (the length of x[mask])
# when a node that reads such a tensor is traced to ask thunder: any size answers that question.
_UNBACKED_SIZE = 4


@dataclass
class NodeSupport:
    """Where one FX node runs, and why it runs in PyTorch when it does."""

    thunder: bool
    reason: str = ""


def _example(node: Node):
    return node.meta.get("example_value", node.meta.get("val"))


def _hint(s):
    if isinstance(s, torch.SymInt):
        return optimization_hint(s, fallback=_UNBACKED_SIZE)
    if isinstance(s, torch.SymFloat):
        return float(s.node.hint) if s.node.hint is not None else 1.0
    if isinstance(s, torch.SymBool):
        return bool(s.node.hint) if s.node.hint is not None else True
    return s


def _concrete(value):
    """A real value standing for a node's example value: a tensor of its shape, strides, dtype and
    device (uninitialized: tracing reads metadata only), a number for a symbolic one."""
    if isinstance(value, torch.Tensor):
        shape = [_hint(s) for s in value.shape]
        stride = [_hint(s) for s in value.stride()]
        t = torch.empty_strided(shape, stride, dtype=value.dtype, device=value.device)
        if value.requires_grad:
            t.requires_grad_(True)
            if not value.is_leaf:
                # A computed tensor, as in the graph: an in-place update of it is legal.
                t = t.clone()
        return t
    return _hint(value)


class _NoExample(Exception):
    pass


def _input_value(gm: GraphModule, arg: Node):
    if arg.op == "get_attr":
        return getattr(gm, arg.target)
    value = _example(arg)
    if value is None:
        raise _NoExample(arg.name)
    return pytree.tree_map(_concrete, value)


def _call_of(node: Node, gm: GraphModule):
    if node.op == "call_function":
        return node.target
    if node.op == "call_method":
        return lambda self, *args, **kwargs: getattr(self, node.target)(*args, **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)
    raise AssertionError(f"internal error, please report: no call for FX node {node.op}")


def _target_name(node: Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        return node.target
    from thunder.core.proxies import _qualname

    return _qualname(node.target)


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _unbacked(value) -> set:
    try:
        return set(free_unbacked_symbols(value))
    except Exception:  # noqa: BLE001 - a value free_unbacked_symbols cannot walk has no symbols
        return set()


def _introduces_unbacked(node: Node) -> bool:
    """Whether node's output has a size or value known only from tensor data that none of its
    inputs had: the node reads data (nonzero, x[mask], .item()). A node computing on such a tensor
    (the sum of x[mask]) is asked of thunder like any other: it compiles for each size it meets."""
    out = _unbacked(_example(node))
    if not out:
        return False
    for arg in node.all_input_nodes:
        out -= _unbacked(_example(arg))
    return bool(out)


def _is_scalar_node(node: Node) -> bool:
    """Whether node computes on Python numbers and sizes only (dynamo's size arithmetic and its
    checks of unbacked sizes, _assert_scalar): it stays in the piece it is in."""
    values = [_example(a) for a in node.all_input_nodes] + [_example(node)]
    leaves = pytree.tree_leaves(values)
    return bool(node.all_input_nodes) and not any(isinstance(v, torch.Tensor) for v in leaves)


def _on_a_copy(call):
    def on_a_copy(target, *args, **kwargs):
        return call(target.clone(), *args, **kwargs)

    return on_a_copy


class _State:
    """PyTorch's global state at a node of the graph, as the graph's state nodes set it: the
    autocast regions it is in and grad mode. thunder is asked about a node in that state (under
    autocast, a matmul of a float32 and a bfloat16 tensor is legal)."""

    def __init__(self):
        self.autocasts: list = []  # the arguments of each _enter_autocast in force
        self.grad = torch.is_grad_enabled()

    def update(self, node: Node) -> None:
        if node.target is torch.amp._enter_autocast:
            self.autocasts.append(node.args)
        elif node.target is torch.amp._exit_autocast and self.autocasts:
            self.autocasts.pop()
        elif node.target is torch._C._set_grad_enabled:
            self.grad = bool(node.args[0])

    def key(self) -> tuple:
        return (tuple(self.autocasts), self.grad)

    def enter(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.set_grad_enabled(self.grad))
        for device_type, dtype, enabled, cache_enabled in self.autocasts:
            stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled))
        return stack


def node_support(node: Node, gm: GraphModule, state: _State | None = None) -> NodeSupport:
    """Whether thunder takes node, asked by tracing its call with thunder (in the autocast and grad
    state the graph sets at node)."""
    import thunder

    name = _target_name(node)
    if _introduces_unbacked(node):
        return NodeSupport(False, f"data-dependent: the shape or value of {name}'s output depends on tensor data")
    try:
        args = map_arg(node.args, lambda a: _input_value(gm, a))
        kwargs = map_arg(node.kwargs, lambda a: _input_value(gm, a))
    except _NoExample as e:
        return NodeSupport(False, f"dynamo recorded no example value for {e.args[0]}, an input of {name}")
    except RuntimeError as e:
        # A graph compiled inside a functorch transform (the body of Mamba's associative scan, a
        # higher-order op): example inputs that require grad cannot be made there.
        return NodeSupport(False, f"its example inputs cannot be made here: {_first_line(e)}")
    call = _call_of(node, gm)
    if _updates_in_place(node) and args and isinstance(args[0], torch.Tensor):
        # The tensor it updates is made in the same piece (split() keeps it so, or sends both to
        # PyTorch): thunder is asked about an update of a tensor the trace made, not of an input.
        call = _on_a_copy(call)
    try:
        with (state or _State()).enter():
            thunder._trace(call, args, kwargs, ())
    except Exception as e:  # noqa: BLE001 - whatever thunder refuses runs in PyTorch
        return NodeSupport(False, f"thunder cannot trace {name}: {_first_line(e)}")
    return NodeSupport(True)


@dataclass
class Split:
    """A graph split into pieces: split_gm calls them in order (its submodules submod_<i>)."""

    split_gm: GraphModule
    # piece name -> whether thunder runs it
    thunder_pieces: dict
    # piece name -> names of the original graph's nodes it holds
    nodes_of: dict
    # node name -> (target name, reason), for each node PyTorch runs
    reasons: dict


# ATen's size queries, as dynamo writes them in graphs with symbolic sizes, and the tensor
# methods that answer them in thunder (a proxy's size is its trace's).
_SIZE_QUERIES = {
    torch.ops.aten.sym_size.int: "size",
    torch.ops.aten.sym_stride.int: "stride",
    torch.ops.aten.sym_numel.default: "numel",
}


_SIZE_METHODS = ("size", "stride", "numel", "dim")


def _size_queries_as_methods(gm: GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SIZE_QUERIES:
            node.op, node.target = "call_method", _SIZE_QUERIES[node.target]
    gm.recompile()


_INPLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                       operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                       operator.ixor, operator.ilshift, operator.irshift, operator.imatmul}


def _updates_in_place(node: Node) -> bool:
    """Whether node updates its first argument in place (x[i] = v, x += y, x.add_(y), relu_)."""
    if node.op == "call_function" and node.target in _INPLACE_OPERATORS:
        return True
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if node.op in ("call_function", "call_method") and isinstance(name, str):
        if name.endswith("_") and not name.endswith("__") and name != "requires_grad_":
            return True
    return node.kwargs.get("inplace") is True


def _storage(value):
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        try:
            return StorageWeakRef(value.untyped_storage())
        except Exception:  # noqa: BLE001 - a tensor without storage (sparse) aliases nothing here
            return None
    return None


def _meta_of(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.dtype, value.device, value.requires_grad,
                value.is_leaf)
    return value


def _signature(node: Node, gm: GraphModule) -> str:
    """What thunder's answer for node depends on: its call and its inputs' metadata (the layers of
    a model repeat the same calls on the same shapes; thunder is asked once for each)."""
    def arg(a):
        if a.op == "get_attr":
            return ("attr", id(getattr(gm, a.target)))
        return pytree.tree_map(_meta_of, _example(a))

    target = id(gm.get_submodule(node.target)) if node.op == "call_module" else node.target
    return repr((node.op, target, map_arg(node.args, arg), map_arg(node.kwargs, arg), _introduces_unbacked(node)))


def _functorch_call(node: Node) -> bool:
    """A call of functorch's transform machinery (vmap levels, batched tensors: the body of
    Mamba's associative scan), not asked by tracing: the call would change the process's state."""
    return node.op == "call_function" and (getattr(node.target, "__module__", None) or "").startswith("torch._C._functorch")


def _decide(gm: GraphModule) -> dict:
    """node -> NodeSupport for each node that starts or joins a piece by its kind (not the nodes
    that stay in the piece they are in: state, size and scalar nodes)."""
    decided: dict = {}
    answers: dict = {}
    state = _State()
    transforms = 0  # functorch transforms (vmap levels) the graph is inside at a node
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _STATE_NODES:
            state.update(node)
        nesting = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
        transforms -= nesting.endswith("_decrement_nesting")
        inside = transforms > 0 or nesting.endswith("_increment_nesting")
        transforms += nesting.endswith("_increment_nesting")
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if inside or _functorch_call(node):
            # The nesting calls, what they enclose (scalar nodes too) and functorch's own calls:
            # thunder runs a piece as a C++ autograd function, which functorch's transforms refuse.
            decided[node] = NodeSupport(False, "inside a functorch transform (vmap): PyTorch runs it")
            continue
        if _stays(node):
            continue
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], Node) \
                and not isinstance(_example(node.args[0]), torch.Tensor) and node.args[0] in decided:
            # An element of a call's tuple output goes where the call went (the call's reason holds).
            decided[node] = NodeSupport(decided[node.args[0]].thunder, "")
        else:
            key = (_signature(node, gm), state.key())
            if key not in answers:
                depth = torch._C._functorch.get_dynamic_layer_stack_depth()
                try:
                    answers[key] = node_support(node, gm, state)
                finally:
                    # A call traced to ask (a higher-order op built on vmap: Mamba's associative
                    # scan) can fail with functorch levels still pushed; dynamo's guard on the
                    # frame then fails. The process's functorch state is put back.
                    if torch._C._functorch.get_dynamic_layer_stack_depth() > depth:
                        torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)
            decided[node] = answers[key]
    return decided


def _alias_classes(gm: GraphModule) -> list:
    """For each node that updates a tensor in place: the nodes whose outputs share that tensor's
    storage (the tensor, its base, its views, the update itself). An update and the views it goes
    through must run in one piece: thunder updates a tensor in place only if its trace made it
    (an input that requires grad, or a view of an input, it refuses), and a thunder piece returns
    new tensors (outputs of its autograd function), not views of one another."""
    by_storage: dict = {}
    for node in gm.graph.nodes:
        storage = _storage(_example(node))
        if storage is not None:
            by_storage.setdefault(storage.cdata, []).append(node)
    classes = []
    for node in gm.graph.nodes:
        if _updates_in_place(node) and isinstance(node.args[0], Node):
            storage = _storage(_example(node.args[0]))
            if storage is not None:
                classes.append((node, by_storage.get(storage.cdata, []) + [node]))
    return classes


def _stays(node: Node) -> bool:
    return (node.op == "call_function" and node.target in _STATE_NODES) or _is_scalar_node(node) or (
        node.op == "call_method" and node.target in _SIZE_METHODS)


def _partition(gm: GraphModule, decided: dict):
    """node -> piece index, and whether thunder runs each piece."""
    partition: dict = {}
    kinds: list = []
    waiting: list = []  # state nodes since the last decided node
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op == "call_method" and node.target in _SIZE_METHODS and node.args[0] in partition:
            # The size of a tensor is read where the tensor is made: a size known only from the data
            # (x[mask]'s length) is bound by the first node that reads it, and split_module makes
            # every piece that uses it depend on that node's piece.
            partition[node] = partition[node.args[0]]
            continue
        if node not in decided:
            if node.op == "call_function" and node.target in _STATE_NODES:
                # A state change joins the piece of the node after it. In a thunder piece that
                # ended in one (`torch.no_grad()` entered just before a split: Switch
                # Transformers' router), thunder traced the piece's outputs in the new grad mode
                # and returned them detached, so the input got no gradient. (split_module sets
                # the state in force at the start of each piece after it.)
                waiting.append(node)
            else:
                partition[node] = max(len(kinds) - 1, 0)
            continue
        thunder_runs = decided[node].thunder
        if not kinds or kinds[-1] != thunder_runs:
            kinds.append(thunder_runs)
        partition[node] = len(kinds) - 1
        for w in waiting:
            partition[w] = len(kinds) - 1
        waiting.clear()
    if waiting and kinds and kinds[-1]:
        kinds.append(False)  # state changes after the last node: PyTorch makes them, not a thunder piece
    for w in waiting:
        partition[w] = max(len(kinds) - 1, 0)
    return partition, kinds


def split(gm: GraphModule) -> Split:
    """gm split into maximal runs of consecutive nodes that thunder takes or PyTorch runs. gm's
    ATen size queries (aten.sym_size.int, ...) become the tensor methods that answer them, in
    place: thunder's proxies answer x.size(d), not the ATen op."""
    _size_queries_as_methods(gm)
    decided = _decide(gm)
    classes = _alias_classes(gm)
    while True:
        partition, kinds = _partition(gm, decided)
        moved = False
        for update, nodes in classes:
            pieces = {partition.get(n) for n in nodes}
            if len(pieces) == 1 and None not in pieces and kinds[pieces.pop()]:
                continue  # one thunder piece holds the tensor, its views and the update
            for n in nodes:
                if n in decided and decided[n].thunder:
                    target = update.args[0].name
                    what = (f"updates {target} in place" if n is update else
                            f"shares storage with {target}, which {update.name} updates in place")
                    decided[n] = NodeSupport(False, f"{what}: the tensor, its views and its updates run in one "
                                                    f"piece, and some of them cannot run in thunder")
                    moved = True
        if not moved:
            break
    reasons = {node.name: (_target_name(node), s.reason) for node, s in decided.items() if s.reason}
    if not kinds:
        kinds.append(True)
    split_gm = split_module(gm, None, lambda n: partition.get(n, 0), keep_original_order=True)
    nodes_of = {f"submod_{i}": [] for i in range(len(kinds))}
    for node, i in partition.items():
        if node.op == "call_function" and node.target in _STATE_NODES:
            continue  # (split_module repeats a region's entry and exit in each piece inside it)
        nodes_of[f"submod_{i}"].append(node.name)
    present = {name for name, _ in split_gm.named_children()}
    thunder_pieces = {f"submod_{i}": k for i, k in enumerate(kinds) if f"submod_{i}" in present}
    return Split(split_gm, thunder_pieces, {k: v for k, v in nodes_of.items() if k in present}, reasons)
