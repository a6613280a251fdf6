"""Tensor parallelism as transforms of the traced call (Megatron-style, over torch.distributed).

    jm = thunder.jit(model)
    thunder.distributed.column_parallel(jm, ["mlp.up", "attn.q", "attn.k", "attn.v", "wte"], group)
    thunder.distributed.row_parallel(jm, ["mlp.down", "attn.proj"], group)
    thunder.distributed.fsdp(jm, process_group=dp_group)    # optional: 2-D, FSDP across the TP groups

Both take a thunder.jit module and the qualified names of its nn.Linear and nn.Embedding
submodules, shard their parameters in place over the ranks of `process_group` (default: the
default group; each rank keeps chunk `rank` of the parameter as broadcast from the group's first
rank, so memory drops by the group size) and return the module. While a call is traced, hooks on
those submodules record the collectives around them as trace symbols:

    column_parallel Linear      x -> tp_copy(x) -> linear(., W[out/n], b[out/n]) -> tp_all_gather(., dim=-1)
    row_parallel Linear         x -> tp_split(x, dim=-1) -> linear(., W[:, in/n]) -> tp_all_reduce(.) + b
    column_parallel Embedding   ids -> embedding(ids, W[:, dim/n]) -> tp_all_gather(., dim=-1)
    row_parallel Embedding      ids -> embedding(where(local, ids - start, 0), W[vocab/n]) masked to 0
                                outside [start, start + vocab/n) -> tp_all_reduce(.)

Every rank of a group computes the same thing outside these layers (the same inputs, the same
loss), so a cotangent downstream of a collective is the same on all of them; the grad rules are:
tp_copy (identity) -> all-reduce of the cotangent (each rank's input gradient is a partial sum over
its output features); tp_all_gather -> this rank's slice of the cotangent; tp_split -> all-gather
of the cotangent; tp_all_reduce -> identity.

A column-parallel output that reaches a row-parallel layer only through ops that compute on
shards (elementwise ops such as an activation or SwiGLU's product; a reshape that splits the
features into heads, transposes, attention over the heads: _SHARD_RULES) is not gathered: the ops
run on the shards and the row-parallel layer takes the shard as its input (no split), so an MLP or
an attention block communicates once in the forward (the all-reduce) and once in the backward.
The gathers recorded for the intermediate results are then unused and removed by dead-code
elimination.

The collectives are not the data-parallel all_gather / reduce_scatter of fsdp: those work on flat
shards and average the gradient over the ranks (each rank saw other data), where here the ranks of
a group saw the same data and the gradient is not averaged.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
import torch
import torch.distributed as tdist

import thunder
from thunder.core import proxies
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grad
from thunder.distributed import _ex, _group_id, _groups

__all__ = ["column_parallel", "row_parallel", "tp_copy", "tp_all_reduce", "tp_all_gather", "tp_split"]


# ---- the collectives -------------------------------------------------------------------------------


def _world(group: int) -> int:
    return tdist.get_world_size(_groups[group])


def _same_meta(a, *, group: int):
    return TensorProxy(like=a)


def _check_dim(op: str, a, dim: int) -> None:
    if not isinstance(a, TensorProxy):
        raise TypeError(f"{op}: expected a tensor, but got {type(a).__name__}")
    if not 0 <= dim < a.ndim:
        raise ValueError(f"{op}: dim {dim} out of range for a tensor of shape {tuple(a.shape)}")


def _all_gather_meta(a, *, dim: int, group: int):
    _check_dim("tp_all_gather", a, dim)
    shape = list(a.shape)
    shape[dim] *= _world(group)
    return TensorProxy(like=a, shape=tuple(shape))


def _split_meta(a, *, dim: int, group: int):
    _check_dim("tp_split", a, dim)
    world = _world(group)
    if a.shape[dim] % world:
        raise ValueError(
            f"tp_split: dimension {dim} of shape {tuple(a.shape)} is not divisible by the tensor-parallel world "
            f"size {world}"
        )
    shape = list(a.shape)
    shape[dim] //= world
    return TensorProxy(like=a, shape=tuple(shape))


def _copy_fn(a, *, group: int):
    return a


def _all_reduce_fn(a, *, group: int):
    out = a.contiguous().clone()
    tdist.all_reduce(out, group=_groups[group])
    return out


def _all_gather_fn(a, *, dim: int, group: int):
    pg = _groups[group]
    a = a.contiguous()
    parts = [torch.empty_like(a) for _ in range(tdist.get_world_size(pg))]
    tdist.all_gather(parts, a, group=pg)
    return torch.cat(parts, dim)


def _split_fn(a, *, dim: int, group: int):
    pg = _groups[group]
    return a.chunk(tdist.get_world_size(pg), dim)[tdist.get_rank(pg)].contiguous()


# tp_copy(a, group=g): a itself (a shape op: it makes no new storage); its gradient is the sum of
# the cotangents over the ranks of g. tp_all_reduce(a, group=g): the sum of a over the ranks; its
# gradient is the cotangent. tp_all_gather(a, dim=d, group=g): the ranks' a concatenated along d, in
# rank order; its gradient is this rank's slice of the cotangent. tp_split(a, dim=d, group=g): this
# rank's chunk of a along d; its gradient is the all-gather of the cotangent.
tp_copy = _ex.register_operator("tp_copy", meta=_same_meta, fn=_copy_fn, tags=["SHAPE_OP"])
tp_all_reduce = _ex.register_operator("tp_all_reduce", meta=_same_meta, fn=_all_reduce_fn)
tp_all_gather = _ex.register_operator("tp_all_gather", meta=_all_gather_meta, fn=_all_gather_fn)
tp_split = _ex.register_operator("tp_split", meta=_split_meta, fn=_split_fn)


def _copy_grad(a, *, group: int):
    out = tp_copy(a, group=group)
    put_grad(a, tp_all_reduce(get_grad(out), group=group))
    return out


def _all_reduce_grad(a, *, group: int):
    out = tp_all_reduce(a, group=group)
    put_grad(a, get_grad(out))
    return out


def _all_gather_grad(a, *, dim: int, group: int):
    out = tp_all_gather(a, dim=dim, group=group)
    put_grad(a, tp_split(get_grad(out), dim=dim, group=group))
    return out


def _split_grad(a, *, dim: int, group: int):
    out = tp_split(a, dim=dim, group=group)
    put_grad(a, tp_all_gather(get_grad(out), dim=dim, group=group))
    return out


_ex.register_implementation(tp_copy, grad_transform=_copy_grad)
_ex.register_implementation(tp_all_reduce, grad_transform=_all_reduce_grad)
_ex.register_implementation(tp_all_gather, grad_transform=_all_gather_grad)
_ex.register_implementation(tp_split, grad_transform=_split_grad)


# ---- the plan: which submodules are parallel, and the hooks that trace them -----------------------


# How an op on tensors sharded along one dimension (all of them over one group) is computed on
# their shards, by the torch-language symbol's name: rule(args, kwargs, dims, world) gives the
# dimension along which the result is sharded and the arguments to call it with (a shard where a
# tensor was, shapes of shards), or None where the shards do not make the result's shards.


def _elementwise_rule(args, kwargs, dims, world):
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, TensorProxy)]
    if len({tuple(t.shape) for t in tensors}) != 1 or len(set(dims)) != 1:
        return None
    return dims[0], args, kwargs


def _shape_arg(args, kwargs):
    if set(kwargs) - {"shape", "size"}:
        return None
    shape = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:] or \
        kwargs.get("shape", kwargs.get("size"))
    return tuple(shape) if shape is not None and all(type(n) is int for n in shape) else None


def _on_first(rule):
    """A rule for ops of one tensor, given first."""
    def checked(args, kwargs, dims, world):
        return rule(args, kwargs, dims, world) if args and isinstance(args[0], TensorProxy) else None

    return checked


@_on_first
def _reshape_rule(args, kwargs, dims, world):
    """A reshape that keeps the sharded dimension's chunks contiguous blocks of one new dimension:
    the elements before it number the same, and the new dimension divides by the world size
    ((B, T, C) -> (B, T, H, D) with C sharded: H is)."""
    full, (d,) = args[0], dims
    shape = _shape_arg(args, kwargs)
    if shape is None:
        return None
    if -1 in shape:
        known = 1
        for n in shape:
            known *= n if n != -1 else 1
        shape = tuple(full.numel() // known if n == -1 else n for n in shape)
    before = 1
    for n in full.shape[:d]:
        before *= n
    prefix = 1
    for i, n in enumerate(shape):
        if prefix == before and n % world == 0 and n > 1:
            return i, (None, shape[:i] + (n // world,) + shape[i + 1:]), {}
        prefix *= n
    return None


@_on_first
def _transpose_rule(args, kwargs, dims, world):
    if len(args) != 3 or kwargs or not all(type(a) is int for a in args[1:]):
        return None
    ndim, (d,) = args[0].ndim, dims
    d0, d1 = (a % ndim for a in args[1:])
    return (d1 if d == d0 else d0 if d == d1 else d), args, kwargs


@_on_first
def _permute_rule(args, kwargs, dims, world):
    perm = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
    if kwargs or not all(type(a) is int for a in perm) or len(perm) != args[0].ndim:
        return None
    return [a % args[0].ndim for a in perm].index(dims[0]), args, kwargs


@_on_first
def _same_rule(args, kwargs, dims, world):
    return dims[0], args, kwargs


def _attention_rule(args, kwargs, dims, world):
    """Attention over heads sharded alike (no mask, no dropout: each head is computed alone)."""
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, TensorProxy)]
    q = tensors[0]
    heads = q.ndim - 3
    if (len(tensors) != 3 or q.ndim < 3 or any(d != heads for d in dims) or kwargs.get("dropout_p", 0.0) != 0.0
            or len(args) > 5 or (len(args) > 4 and args[4] != 0.0) or kwargs.get("enable_gqa")
            or len({t.shape[heads] for t in tensors}) != 1):
        return None
    return heads, args, kwargs


_SHARD_RULES = {
    **dict.fromkeys(("gelu", "relu", "silu", "tanh", "sigmoid", "mul", "add", "sub", "div", "neg", "exp",
                     "true_divide"), _elementwise_rule),
    "reshape": _reshape_rule,
    "view": _reshape_rule,
    "transpose": _transpose_rule,
    "permute": _permute_rule,
    "contiguous": _same_rule,
    "scaled_dot_product_attention": _attention_rule,
}


@dataclass
class _Target:
    name: str
    module: torch.nn.Module
    style: str  # "column" or "row"
    group: int
    world: int
    rank: int
    # row_parallel Embedding: the rows this rank holds are [start, start + rows)
    start: int = 0
    rows: int = 0
    stash: list = field(default_factory=list)  # what the pre-hook leaves for the forward hook


class _Plan:
    """The parallel submodules of one root module, and the state of the call being traced: the
    gathered column-parallel outputs (and what ops with a shard rule compute from them) by the id
    of their proxy, with their shards, so that a row-parallel layer takes the shard."""

    def __init__(self, root: torch.nn.Module):
        self.targets: dict[int, _Target] = {}  # id(module) -> target
        self.sharded: dict[int, tuple[TensorProxy, int, int]] = {}  # id(full) -> (shard, dim, group)
        self.copies: dict[tuple[int, int], TensorProxy] = {}  # (id(input), group) -> its tp_copy
        self.keep: list = []
        self.inner = None
        root.register_forward_pre_hook(self.root_pre_hook)
        root.register_forward_hook(self.root_hook, always_call=True)

    def tracing(self) -> bool:
        return any(isinstance(t.module.weight, TensorProxy) for t in self.targets.values())

    def root_pre_hook(self, mod, args):
        if self.inner is None and self.tracing():
            self.inner = proxies.dispatch
            proxies.dispatch = self.dispatch

    def root_hook(self, mod, args, out):
        if self.inner is not None:
            proxies.dispatch = self.inner
            self.inner = None
        self.sharded.clear()
        self.copies.clear()
        self.keep.clear()
        for t in self.targets.values():
            t.stash.clear()

    def gathered(self, shard: TensorProxy, dim: int, group: int) -> TensorProxy:
        full = tp_all_gather(shard, dim=dim, group=group)
        self.sharded[id(full)] = (shard, dim, group)
        self.keep.extend((shard, full))
        return full

    def dispatch(self, func, args, kwargs):
        """An op with a shard rule, on gathered tensors, runs on their shards (its result gathered
        as well, which dead-code elimination removes where only shards are used)."""
        out = self.on_shards(func, args, kwargs) if self.sharded else None
        return self.inner(func, args, kwargs) if out is None else out

    def on_shards(self, func, args, kwargs):
        entry = proxies._TORCH_MAP.get(func)
        rule = _SHARD_RULES.get(entry[0].name) if entry is not None else None
        if rule is None:
            return None
        tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, TensorProxy)]
        if not tensors or any(id(t) not in self.sharded for t in tensors):
            return None
        groups = {self.sharded[id(t)][2] for t in tensors}
        if len(groups) != 1:
            return None
        group = groups.pop()
        found = rule(args, kwargs, [self.sharded[id(t)][1] for t in tensors], _world(group))
        if found is None:
            return None
        dim, args, kwargs = found

        def shard(v):
            return self.sharded[id(v)][0] if isinstance(v, TensorProxy) else v

        # A rule's None first argument stands for the (only) tensor's shard.
        args = (shard(tensors[0]), *args[1:]) if args and args[0] is None else tuple(shard(v) for v in args)
        out = self.inner(func, args, {k: shard(v) for k, v in kwargs.items()})
        return self.gathered(out, dim, group) if isinstance(out, TensorProxy) else None

    def pre_hook(self, mod, args):
        t = self.targets[id(mod)]
        if not isinstance(mod.weight, TensorProxy):
            raise RuntimeError(f"thunder.distributed.{t.style}_parallel: {t.name} holds a shard of its parameters; "
                               "call the model through the thunder module")
        x, rest = args[0], args[1:]
        if isinstance(mod, torch.nn.Embedding):
            if t.style == "row":
                local = x - t.start
                outside = (local < 0) | (local >= t.rows)
                t.stash.append(outside)
                return (torch.where(outside, 0, local), *rest)
            return None
        if t.style == "column":
            # Layers reading one input (q, k and v) share its copy: their input gradients are
            # summed before the one all-reduce.
            copy = self.copies.get((id(x), t.group))
            if copy is None:
                copy = self.copies[(id(x), t.group)] = tp_copy(x, group=t.group)
                self.keep.extend((x, copy))
            return (copy, *rest)
        known = self.sharded.get(id(x))
        if known is not None and known[1:] == (x.ndim - 1, t.group):
            x = known[0]
        else:
            x = tp_split(x, dim=x.ndim - 1, group=t.group)
        # The bias is added once, after the sum over the ranks.
        t.stash.append(mod._parameters["bias"])
        mod._parameters["bias"] = None
        return (x, *rest)

    def hook(self, mod, args, out):
        t = self.targets[id(mod)]
        if t.style == "column":
            return self.gathered(out, out.ndim - 1, t.group)
        if isinstance(mod, torch.nn.Embedding):
            return tp_all_reduce(out.masked_fill(t.stash.pop().unsqueeze(-1), 0), group=t.group)
        bias = t.stash.pop()
        mod._parameters["bias"] = bias
        out = tp_all_reduce(out, group=t.group)
        return out if bias is None else out + bias


# root module -> its plan, both weakly: the root's hooks hold the plan, so that a dropped module
# and its plan are garbage together.
_plans: "weakref.WeakKeyDictionary[torch.nn.Module, weakref.ref[_Plan]]" = weakref.WeakKeyDictionary()


# ---- sharding at transform time -----------------------------------------------------------------------


# (style, module type) -> the dimension of the weight that is sharded, and what it is called
_SHARDED_DIM = {
    ("column", torch.nn.Linear): (0, "output features"),
    ("row", torch.nn.Linear): (1, "input features"),
    ("column", torch.nn.Embedding): (1, "embedding dims"),
    ("row", torch.nn.Embedding): (0, "vocabulary rows"),
}


def _shard_module(api: str, t: _Target, owners: dict[int, list[str]]) -> None:
    mod, world, rank = t.module, t.world, t.rank
    dim, what = _SHARDED_DIM[(t.style, type(mod))]
    w = mod.weight
    if w.shape[dim] % world:
        raise ValueError(f"{api}: {t.name}.weight of shape {tuple(w.shape)} has {w.shape[dim]} {what}, not divisible "
                         f"by the tensor-parallel world size {world}")
    for pname, p in mod.named_parameters(recurse=False):
        if len(owners.get(id(p), [])) > 1:
            raise NotImplementedError(f"{api}: {t.name}.{pname} is shared by {sorted(owners[id(p)])}; tied "
                                      "parameters cannot be sharded")
    if isinstance(mod, torch.nn.Embedding):
        if mod.max_norm is not None:
            raise NotImplementedError(f"{api}: {t.name} renormalizes rows (max_norm); it cannot be sharded")
        if t.style == "row":
            t.rows = w.shape[0] // world
            t.start = rank * t.rows
            if mod.padding_idx is not None:
                local = mod.padding_idx - t.start
                mod.padding_idx = local if 0 <= local < t.rows else None
    with torch.no_grad():
        for pname, p in list(mod.named_parameters(recurse=False)):
            # A row-parallel bias is added after the sum over the ranks: every rank keeps all of it.
            keep_whole = t.style == "row" and pname == "bias"
            value = p.detach() if keep_whole else p.detach().chunk(world, dim if pname == "weight" else 0)[rank]
            mod._parameters[pname] = torch.nn.Parameter(value.clone(), requires_grad=p.requires_grad)


def _parallelize(style: str, jitted_module, target_modules, process_group):
    api = f"thunder.distributed.{style}_parallel"
    from thunder.distributed import DDPModule, FSDPModule

    if isinstance(jitted_module, (DDPModule, FSDPModule)):
        raise TypeError(f"{api}: apply tensor parallelism to the thunder.jit module before ddp or fsdp")
    if not isinstance(jitted_module, thunder.ThunderModule):
        raise TypeError(f"{api}: expected a module returned by thunder.jit, but got {type(jitted_module).__name__}")
    if not tdist.is_available() or not tdist.is_initialized():
        raise RuntimeError(f"{api}: torch.distributed is not initialized; call torch.distributed.init_process_group "
                           "first")
    if isinstance(target_modules, str) or not all(isinstance(n, str) for n in target_modules):
        raise TypeError(f"{api}: target_modules must be a list of module names, got {target_modules!r}")
    root = jitted_module._model
    modules = dict(root.named_modules())
    plan = _plans[root]() if root in _plans else None
    targets = []
    for name in target_modules:
        mod = modules.get(name)
        if mod is None:
            raise ValueError(f"{api}: no submodule named {name!r} in {type(root).__name__}")
        if type(mod) not in (torch.nn.Linear, torch.nn.Embedding):
            raise TypeError(f"{api}: {name} is a {type(mod).__name__}; only nn.Linear and nn.Embedding can be "
                            "parallel")
        if plan is not None and id(mod) in plan.targets:
            raise ValueError(f"{api}: {name} is already {plan.targets[id(mod)].style}-parallel")
        gid = _group_id(process_group)
        targets.append(_Target(name, mod, style, gid, tdist.get_world_size(process_group),
                               tdist.get_rank(process_group)))
    owners: dict[int, list[str]] = {}
    for qual, p in root.named_parameters(remove_duplicate=False):
        owners.setdefault(id(p), []).append(qual)
    # Every rank of the group starts from its first rank's parameters and buffers (the sharded
    # ones hold different chunks already).
    sharded = {id(p) for t in (plan.targets.values() if plan else ()) for p in t.module.parameters(recurse=False)}
    src = 0 if process_group is None else tdist.get_global_rank(process_group, 0)
    with torch.no_grad():
        for v in itertools.chain(root.parameters(), root.buffers()):
            if id(v) not in sharded:
                tdist.broadcast(v.detach(), src=src, group=process_group)
    for t in targets:
        _shard_module(api, t, owners)
    if plan is None:
        plan = _Plan(root)
        _plans[root] = weakref.ref(plan)
    for t in targets:
        plan.targets[id(t.module)] = t
        t.module.register_forward_pre_hook(plan.pre_hook)
        t.module.register_forward_hook(plan.hook)
    if _ex.name not in jitted_module._executors:
        jitted_module._executors = [_ex.name] + list(jitted_module._executors)
    return jitted_module


def column_parallel(jitted_module, target_modules, process_group=None):
    """Makes the nn.Linear and nn.Embedding submodules named in `target_modules` (qualified names)
    of a thunder.jit module column-parallel over `process_group` (default: the default group):
    each rank keeps its chunk of the weight's output features (Linear; the bias alike) or embedding
    dims (Embedding), and the output is gathered along its last dimension, unless it reaches a
    row-parallel layer through elementwise ops only. Returns the module."""
    return _parallelize("column", jitted_module, target_modules, process_group)


def row_parallel(jitted_module, target_modules, process_group=None):
    """Makes the named nn.Linear and nn.Embedding submodules row-parallel over `process_group`:
    each rank keeps its chunk of the weight's input features (Linear; the bias is whole and added
    after the sum) or vocabulary rows (Embedding: ids outside them give zeros), takes its shard of
    the input along the last dimension (the shard itself when it comes from a column-parallel
    layer) and the output is summed over the ranks. Returns the module."""
    return _parallelize("row", jitted_module, target_modules, process_group)
