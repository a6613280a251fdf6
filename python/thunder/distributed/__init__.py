"""thunder.distributed: data-parallel training over torch.distributed.

    torch.distributed.init_process_group("gloo")      # or "nccl"; e.g. under torchrun
    model = thunder.distributed.ddp(model)             # a jitted module (thunder.jit is not needed)
    loss = model(x).sum(); loss.backward()             # gradients averaged over the ranks
    with model.no_sync():                              # gradient accumulation without communication
        model(x).sum().backward()

ddp is a transform of the training call's traces. At wrap time, parameters and buffers are
broadcast from rank 0 and the parameters that require grad are put in buckets (about
`bucket_size_in_mb` each, in reverse registration order, as PyTorch's DDP does). While the
forward is traced, two calls per bucket are recorded:

    token = bucket_token(p0, p1, ..., bucket=3)          # first thing the forward does
    (q0, q1, ...) = sync_bucket(p0, p1, ..., token=token, bucket=3)
                                                          # just before the first use of a
                                                          # parameter of the bucket

Both are identities in the forward (the token is a zero-stride placeholder). Their grad rules
put the communication into the backward: the backward of `sync_bucket` runs as soon as the
gradients of the bucket's parameters are complete (after the backward of their first use) and
packs them into one flat tensor, divides it by the world size and starts `all_reduce` on it
(asynchronously); the flat tensor travels to the backward of `bucket_token` as the token's
cotangent. That backward comes last, since `bucket_token` comes first in the forward: it is where
`wait` completes the reduction and the flat tensor is split back into the parameters' gradients.
So the backward prints as

    t120 = all_reduce(t119, group=0)      # bucket 0: issued while the backward goes on
    ...
    t301 = wait(t120)                      # near the end

Parameters must reach the computation through torch calls (as modules use them): a use is
routed to the synchronized value by the tracing dispatcher.

fsdp (see FSDPModule) shards every parameter; a traced call gathers a block's parameters (an
entry of the model's ModuleLists and Sequentials: a transformer layer) with one coalesced
collective just before the block runs, and any other parameter just before the module that owns
it runs (`all_gather_many` / `all_gather`, asynchronous, completed by `wait` there; the Prefetch
pass issues it earlier, while the previous block computes, with at most one block's parameters in
flight), and the gathered parameters' gradients are reduce-scattered to the shards
(`reduce_scatter_many` / `reduce_scatter`, asynchronous, with `wait` at the end of the backward
through the same token scheme as ddp's buckets). Under ZeRO-3 the blocks' gathers are marked
recomputable, so the forward frees the gathered parameters after their last use and the backward
gathers them again (rematerialization, which places each recomputed call just before its first use
in the backward, where the gathered parameter is freed after its last use as well, and Prefetch
issues it ahead): about two blocks' gathered parameters are alive at a time. The parameters outside
the blocks (embeddings, final norm, head) are kept from the forward for the backward.

An untied nn.Embedding's table is never gathered or reduced whole while its lookups take fewer ids
than it has rows: under fsdp each rank looks up, for every rank's ids, the rows its shard holds and
a reduce-scatter sums them (`fsdp_embedding`); under ddp the table's gradient is summed on every
rank from the looked-up rows' gradients and ids gathered from all ranks (`ddp_embedding`).
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as tdist

import thunder
from thunder import _C
from thunder.core import proxies
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import has_symbolic_size
from thunder.core.transforms import get_grad, put_grad
from thunder.extend import OperatorExecutor, register_executor

__all__ = ["ddp", "DDPModule", "fsdp", "FSDPModule", "FSDPType", "all_reduce", "wait", "all_gather", "reduce_scatter",
           "column_parallel", "row_parallel"]


# ---- process groups and buckets, by the ids the traces print ----------------------------------


_groups: dict[int, Any] = {}  # id -> process group (None: the default group)
_group_ids: dict[int, int] = {}  # id(process group or None) -> id
_buckets: "weakref.WeakValueDictionary[int, _Bucket]" = weakref.WeakValueDictionary()  # owned by their DDPModule
_bucket_ids = itertools.count()
# (group id, data_ptr of the result) -> (work of a collective in flight, what completes it after
# the work, or None)
_pending: dict[tuple[int, int], tuple[Any, Any]] = {}


def _group_id(group) -> int:
    key = id(group)
    if key not in _group_ids:
        _group_ids[key] = len(_groups)
        _groups[_group_ids[key]] = group
    return _group_ids[key]


@dataclass
class _Bucket:
    """Parameters whose gradients are reduced together: the parameters, each with the module
    slots (module, name) that hold it, as (parameter, (module, name)) pairs."""

    index: int
    slots: list[tuple[torch.Tensor, tuple[torch.nn.Module, str]]]
    params: list[torch.Tensor]
    group_id: int
    world_size: int
    bytes: int = 0
    # The weight of an nn.Embedding held by no other slot, in a bucket of its own: while its only uses
    # are embedding lookups, its gradient is made from the ranks' gathered rows (embedding_grad_rows)
    # and the bucket is never started.
    embedding: bool = False
    # The parameter and the size of each segment of the packed gradient, as last traced (a tied
    # parameter held by two slots has a segment for each).
    layout: list[torch.Tensor] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


# ---- the operators -------------------------------------------------------------------------------


_ex = OperatorExecutor("distributed", version="0.1")
register_executor(_ex)


def _all_reduce_meta(a, *, group: int):
    if not isinstance(a, TensorProxy):
        raise TypeError(f"all_reduce: expected a tensor, but got {type(a).__name__}")
    return TensorProxy(like=a)


def _all_reduce_fn(a, *, group: int):
    if not a.is_contiguous():
        raise ValueError(f"all_reduce: expected a contiguous tensor, got strides {a.stride()}")
    work = tdist.all_reduce(a, group=_groups[group], async_op=True)
    _pending[(group, a.data_ptr())] = (work, None)
    return a


def _wait_meta(a, *, group: int):
    return TensorProxy(like=a)


def _wait_fn(a, *, group: int):
    work, finish = _pending.pop((group, a.data_ptr()), (None, None))
    if work is None:
        # Complete already: a gathered parameter whose wait the backward runs again (ZeRO-3's
        # recomputation, where the backward gathers again only what it did not keep).
        return a
    work.wait()
    if finish is not None:
        finish()
    return a


# all_reduce(a, group=g): starts summing `a` over the ranks of group g, in place, asynchronously;
# wait(a, group=g) completes it (and the all_gather and reduce_scatter below). Both print and run
# like any other call of the trace.
all_reduce = _ex.register_operator("all_reduce", meta=_all_reduce_meta, fn=_all_reduce_fn, tags=["DONT_DCE"])
# wait returns its argument (the same storage, complete): tagged a shape op, it counts as a view
# (thunder.core.transforms.live_bytes) and may run again in the backward (rematerialization: the
# backward of ZeRO-3 gathers a parameter again).
wait = _ex.register_operator("wait", meta=_wait_meta, fn=_wait_fn, tags=["SHAPE_OP"])


def _bucket_token_meta(*params, bucket: int):
    return TensorProxy(like=params[0], shape=(sum(p.numel() for p in params),))


def _bucket_token_fn(*params, bucket: int):
    numel = sum(p.numel() for p in params)
    return torch.zeros((), dtype=params[0].dtype, device=params[0].device).expand(numel)


def _sync_bucket_meta(*params, token, bucket: int):
    return tuple(TensorProxy(like=p) for p in params)


def _sync_bucket_fn(*params, token, bucket: int):
    return tuple(params)


def _add_unsynced_grads_meta(a, *, bucket: int):
    return TensorProxy(like=a)


def _add_unsynced_grads_fn(a, *, bucket: int):
    """The gradients accumulated under no_sync, added to this step's (their .grad is taken, so
    that autograd stores the reduced sum there)."""
    b = _buckets[bucket]
    parts, seen = [], set()
    for p, n in zip(b.layout, b.sizes):
        g = p.grad if id(p) not in seen else None
        seen.add(id(p))
        parts.append(torch.zeros(n, dtype=a.dtype, device=a.device) if g is None else g.reshape(-1).to(a.dtype))
    for p in b.params:
        p.grad = None
    return a + torch.cat(parts)


bucket_token = _ex.register_operator("bucket_token", meta=_bucket_token_meta, fn=_bucket_token_fn)
sync_bucket = _ex.register_operator("sync_bucket", meta=_sync_bucket_meta, fn=_sync_bucket_fn)
add_unsynced_grads = _ex.register_operator(
    "add_unsynced_grads", meta=_add_unsynced_grads_meta, fn=_add_unsynced_grads_fn
)



def _gather_rows_meta(a, *, group: int):
    if not isinstance(a, TensorProxy) or a.ndim < 1:
        raise TypeError(f"gather_rows: expected a tensor of at least one dimension, but got {a!r}")
    return TensorProxy(like=a, shape=(a.shape[0] * tdist.get_world_size(_groups[group]), *a.shape[1:]))


def _gather_rows_fn(a, *, group: int):
    """The ranks' `a` concatenated along the first dimension (in rank order), now."""
    pg = _groups[group]
    world = tdist.get_world_size(pg)
    a = a.contiguous()
    if _is_nccl(pg):
        out = a.new_empty((a.shape[0] * world, *a.shape[1:]))
        tdist.all_gather_into_tensor(out, a, group=pg)
        return out
    parts = [torch.empty_like(a) for _ in range(world)]
    tdist.all_gather(parts, a, group=pg)
    return torch.cat(parts)


# gather_rows(a, group=g): the ranks' tensors concatenated along the first dimension. The gradient
# of an embedding table is made from the looked-up rows' gradients: gathering those (and the ids)
# from every rank and summing them into the table on each rank gives the table's gradient summed
# over the ranks, exchanging N rows where an all-reduce of the dense gradient exchanges the table.
gather_rows = _ex.register_operator("gather_rows", meta=_gather_rows_meta, fn=_gather_rows_fn)


def _ddp_embedding_meta(ids, weight, *, padding_idx, group: int, world: int):
    return TensorProxy(like=weight, shape=(*ids.shape, weight.shape[1]))


def _ddp_embedding_fn(ids, weight, *, padding_idx, group: int, world: int):
    return torch.nn.functional.embedding(ids, weight, padding_idx)


def _ddp_embedding_grad(ids, weight, *, padding_idx, group: int, world: int):
    out = ddp_embedding(ids, weight, padding_idx=padding_idx, group=group, world=world)
    rows = thunder.torch.reshape(get_grad(out), (-1, weight.shape[1]))
    if world > 1:
        rows = thunder.torch.div(rows, world)  # averaged over the ranks, as the buckets are
    all_ids = gather_rows(thunder.torch.reshape(ids, (-1,)), group=group)
    all_rows = gather_rows(rows, group=group)
    put_grad(weight, _C.get_symbol("prims.embedding_backward")(all_rows, all_ids, weight.shape[0], padding_idx))
    return out


# ddp_embedding(ids, weight, ...): an embedding lookup of a weight that ddp synchronizes through the
# rows: the forward is the lookup, the backward gathers the rows' gradients and ids of every rank.
ddp_embedding = _ex.register_operator("ddp_embedding", meta=_ddp_embedding_meta, fn=_ddp_embedding_fn)
_ex.register_implementation(ddp_embedding, grad_transform=_ddp_embedding_grad)

_EMBEDDING_ARGS = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")


def _embedding_call(args, kwargs) -> dict | None:
    """The arguments of a torch.nn.functional.embedding call by name, where the lookup can run on
    gathered rows (integer ids, no max_norm renormalization, no frequency scaling, a dense
    gradient, static sizes); else None."""
    if len(args) > len(_EMBEDDING_ARGS) or not set(kwargs) <= set(_EMBEDDING_ARGS):
        return None
    bound = {"padding_idx": None, "max_norm": None, "scale_grad_by_freq": False, "sparse": False,
             **dict(zip(_EMBEDDING_ARGS, args)), **kwargs}
    ids = bound.get("input")
    if (not isinstance(ids, TensorProxy) or ids.dtype.is_floating_point or ids.dtype.is_complex
            or ids.dtype == torch.bool or has_symbolic_size(ids, bound.get("weight"))
            or bound["max_norm"] is not None or bound["scale_grad_by_freq"] or bound["sparse"]):
        return None
    return bound


def _rows_pay(ids, world: int, rows: int) -> bool:
    """Whether exchanging every rank's looked-up rows moves less than the table would."""
    return 0 < ids.numel() * world < rows

_tracing = {"accumulated": False}


def _spread(args: tuple) -> tuple:
    """The tensors of a varargs parameter: grad rules get them as one tuple."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _sync_bucket_grad(*params, token, bucket: int):
    params = _spread(params)
    outs = sync_bucket(*params, token=token, bucket=bucket)
    b = _buckets[bucket]
    flat = thunder.torch.cat([thunder.torch.reshape(get_grad(o), (-1,)) for o in outs])
    if _tracing["accumulated"]:
        flat = add_unsynced_grads(flat, bucket=bucket)
    if b.world_size > 1:
        flat = thunder.torch.div(flat, b.world_size)
    put_grad(token, all_reduce(flat, group=b.group_id))
    return outs


def _bucket_token_grad(*params, bucket: int):
    params = _spread(params)
    token = bucket_token(*params, bucket=bucket)
    b = _buckets[bucket]
    flat = wait(get_grad(token), group=b.group_id)
    pieces = thunder.torch.split(flat, [p.numel() for p in params])
    for p, piece in zip(params, pieces):
        put_grad(p, thunder.torch.reshape(piece, tuple(p.shape)))
    return token


_ex.register_implementation(sync_bucket, grad_transform=_sync_bucket_grad)
_ex.register_implementation(bucket_token, grad_transform=_bucket_token_grad)


# ---- tracing a synchronized training call -----------------------------------------------------


class _SyncTracing:
    """The state of one synchronized trace: the bucket tokens recorded at the start of the
    forward, and the parameters' proxies routed to their sync_bucket outputs once a bucket is
    started (at the first use of one of its parameters)."""

    def __init__(self, module: "DDPModule"):
        self.module = module
        self.pending: dict[int, _Bucket] = {}  # id(parameter proxy) -> its bucket, not started
        self.synced: dict[int, TensorProxy] = {}  # id(parameter proxy) -> its synchronized value
        self.keep: list = []  # keeps the proxies (and so their ids) alive
        self.original: list[tuple[torch.nn.Module, str, Any]] = []
        self.tokens: dict[int, tuple[list[TensorProxy], TensorProxy]] = {}

    def pre_hook(self, mod, args):
        # Tokens in reverse bucket order: the backward, which reverses the forward, then waits
        # for the buckets in the order they were (typically) issued.
        for b in reversed(self.module._buckets):
            proxies_, layout = [], []
            for param, (m, name) in b.slots:
                p = m._parameters.get(name)
                if not isinstance(p, TensorProxy) or any(p is q for q in proxies_):
                    continue
                proxies_.append(p)
                layout.append(param)
            if not proxies_:
                continue
            b.layout, b.sizes = layout, [p.numel() for p in proxies_]
            token = bucket_token(*proxies_, bucket=b.index)
            self.tokens[b.index] = (proxies_, token)
            self.keep.extend(proxies_)
            for p in proxies_:
                self.pending[id(p)] = b

    def post_hook(self, mod, args, out):
        for m, name, p in self.original:
            m._parameters[name] = p
        self.original.clear()

    def start(self, b: _Bucket) -> None:
        proxies_, token = self.tokens[b.index]
        outs = sync_bucket(*proxies_, token=token, bucket=b.index)
        self.keep.extend(outs)
        for p, q in zip(proxies_, outs):
            self.pending.pop(id(p), None)
            self.synced[id(p)] = q
        for _, (m, name) in b.slots:
            p = m._parameters.get(name)
            if isinstance(p, TensorProxy) and id(p) in self.synced:
                self.original.append((m, name, p))
                m._parameters[name] = self.synced[id(p)]

    def embedding(self, args, kwargs):
        """The lookup of an embedding bucket's weight, not started, through ddp_embedding (its
        gradient made from the gathered rows); None where the call does not qualify."""
        bound = None if _tracing["accumulated"] else _embedding_call(args, kwargs)
        if bound is None:
            return None
        ids, weight = bound["input"], bound["weight"]
        b = self.pending.get(id(weight)) if isinstance(weight, TensorProxy) else None
        if b is None or not b.embedding or weight.ndim != 2 or not _rows_pay(ids, b.world_size, weight.shape[0]):
            return None
        pad = bound["padding_idx"]
        if pad is not None and pad < 0:
            pad += weight.shape[0]
        ids = self.route(ids)
        return ddp_embedding(ids, weight, padding_idx=pad, group=b.group_id, world=b.world_size)

    def route(self, x):
        """x with parameter proxies replaced by their synchronized values (starting buckets)."""
        if isinstance(x, TensorProxy):
            b = self.pending.get(id(x))
            if b is not None:
                self.start(b)
            return self.synced.get(id(x), x)
        if type(x) in (tuple, list):
            items = [self.route(v) for v in x]
            return x if all(a is b for a, b in zip(items, x)) else type(x)(items)
        if type(x) is dict:
            items = {k: self.route(v) for k, v in x.items()}
            return x if all(items[k] is x[k] for k in x) else items
        return x

    @contextlib.contextmanager
    def installed(self, accumulated: bool):
        model = self.module._model
        handles = [model.register_forward_pre_hook(self.pre_hook),
                   model.register_forward_hook(self.post_hook)]
        inner = proxies.dispatch

        def dispatch(func, args, kwargs):
            if func is torch.nn.functional.embedding and self.pending:
                out = self.embedding(args, kwargs)
                if out is not None:
                    return out
            if self.pending or self.synced:
                args, kwargs = self.route(args), self.route(kwargs)
            return inner(func, args, kwargs)

        proxies.dispatch = dispatch
        _tracing["accumulated"] = accumulated
        try:
            yield
        finally:
            proxies.dispatch = inner
            _tracing["accumulated"] = False
            for h in handles:
                h.remove()
            self.post_hook(None, None, None)


# ---- the module ---------------------------------------------------------------------------------


class DDPModule(thunder.ThunderModule):
    """A module jitted for data-parallel training (made by thunder.distributed.ddp): training calls
    average the gradients over the process group's ranks; `no_sync()` skips that for gradient
    accumulation. thunder.last_traces / last_backward_traces show the last call's traces."""

    def __init__(self, module: torch.nn.Module, executors, bucket_size_in_mb: float, process_group):
        names = thunder._executor_names(executors)
        super().__init__(module, executors=[_ex.name] + [n for n in names if n != _ex.name])
        self._group = process_group
        self._world_size = tdist.get_world_size(process_group)
        self._no_sync = False
        self._unsynced = False
        self._local_cfn = self._cfn
        self._sync_cfn = _C.CompiledFunction(thunder._weak_hook(self._compile_synced_once))
        self._accumulated_cfn = _C.CompiledFunction(thunder._weak_hook(self._compile_synced_accumulated))
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._buckets = self._make_buckets(bucket_size_in_mb)

    def _make_buckets(self, bucket_size_in_mb: float) -> list[_Bucket]:
        slots: dict[int, list] = {}
        for mod_name, mod in self._model.named_modules(remove_duplicate=False):
            for name, p in mod._parameters.items():
                if p is not None and p.requires_grad:
                    slots.setdefault(id(p), []).append((mod, name))
        cap = bucket_size_in_mb * 2**20
        gid = _group_id(self._group)
        buckets, open_by_kind = [], {}
        # Reverse registration order: the last layers' gradients are complete first.
        for p in reversed(self._params):
            kind = (p.dtype, p.device)
            b = open_by_kind.get(kind)
            size = p.numel() * p.element_size()
            where = slots.get(id(p), [])
            if len(where) == 1 and isinstance(where[0][0], torch.nn.Embedding) and where[0][1] == "weight":
                b = _Bucket(next(_bucket_ids), [], [], gid, self._world_size, embedding=True)
                _buckets[b.index] = b
                buckets.append(b)
            elif b is None or (b.params and b.bytes + size > cap):
                b = _Bucket(next(_bucket_ids), [], [], gid, self._world_size)
                _buckets[b.index] = b
                buckets.append(b)
                open_by_kind[kind] = b
            b.params.append(p)
            b.bytes += size
            b.slots.extend((p, s) for s in slots.get(id(p), []))
        return buckets

    def _compile_synced_once(self, args, kwargs):
        return self._compile_synced(args, kwargs, False)

    def _compile_synced_accumulated(self, args, kwargs):
        return self._compile_synced(args, kwargs, True)

    def _compile_synced(self, args, kwargs, accumulated: bool):
        tracing = _SyncTracing(self)
        with tracing.installed(accumulated):
            return self._compile(args, kwargs)

    def forward(self, *args, **kwargs):
        from thunder.core import outputs

        training = torch.is_grad_enabled() and bool(self._params)
        if not training or self._no_sync:
            cfn = self._local_cfn
            self._unsynced = self._unsynced or training
        elif self._unsynced:
            cfn = self._accumulated_cfn
            self._unsynced = False
        else:
            cfn = self._sync_cfn
        self._cfn = cfn
        return outputs.finish(cfn(self._state(), *args, **kwargs))

    @contextlib.contextmanager
    def no_sync(self):
        """Training calls inside accumulate their gradients locally, with no communication; the
        first synchronized call after them reduces the accumulated gradients with its own."""
        old = self._no_sync
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = old


def _unwrap(what: str, model, executors):
    """The plain module to wrap and its executors (a thunder.jit module's own unless given);
    checks that torch.distributed is initialized."""
    if not tdist.is_available() or not tdist.is_initialized():
        raise RuntimeError(f"thunder.distributed.{what}: torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group first")
    if isinstance(model, thunder.ThunderModule):
        if executors is None:
            executors = list(model._executors)
        model = model._model
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"thunder.distributed.{what}: expected an nn.Module, but got {type(model).__name__}")
    return model, executors


def ddp(model, bucket_size_in_mb: float = 25, *, process_group=None, executors=None) -> DDPModule:
    """Wraps `model` (an nn.Module, or a module returned by thunder.jit, whose executors are kept)
    for distributed data-parallel training over `process_group` (default: the default group,
    which must be initialized): parameters and buffers are broadcast from the group's first rank,
    and training calls average gradients over the ranks, in buckets of about `bucket_size_in_mb`."""
    model, executors = _unwrap("ddp", model, executors)
    if not (isinstance(bucket_size_in_mb, (int, float)) and bucket_size_in_mb > 0):
        raise ValueError(
            f"thunder.distributed.ddp: bucket_size_in_mb must be a positive number, got {bucket_size_in_mb!r}"
        )
    src = 0 if process_group is None else tdist.get_global_rank(process_group, 0)
    with torch.no_grad():
        for t in itertools.chain(model.parameters(), model.buffers()):
            tdist.broadcast(t.detach(), src=src, group=process_group)
    return DDPModule(model, executors, bucket_size_in_mb, process_group)


# ---- fully sharded data parallel ------------------------------------------------------------------


class FSDPType(enum.Enum):
    """ZERO2: gathered parameters are kept from the forward for the backward. ZERO3: the
    forward frees each gathered parameter after its last use and the backward gathers it again."""

    ZERO2 = 2
    ZERO3 = 3


def _is_nccl(group) -> bool:
    return tdist.get_backend(group) == "nccl"


def _all_gather_meta(a, *, token, group: int):
    if not isinstance(a, TensorProxy) or a.ndim != 1:
        raise TypeError(f"all_gather: expected a 1-D tensor (a shard), but got {a!r}")
    return TensorProxy(like=a, shape=(a.numel() * tdist.get_world_size(_groups[group]),))


def _all_gather_fn(a, *, token=None, group: int):
    """Starts the all-gather asynchronously; wait(out, group=g) completes it."""
    pg = _groups[group]
    world = tdist.get_world_size(pg)
    a = a.contiguous()
    out = torch.empty(a.numel() * world, dtype=a.dtype, device=a.device)
    if _is_nccl(pg):
        work = tdist.all_gather_into_tensor(out, a, group=pg, async_op=True)
        _pending[(group, out.data_ptr())] = (work, None)
        return out
    parts = [torch.empty_like(a) for _ in range(world)]
    work = tdist.all_gather(parts, a, group=pg, async_op=True)
    _pending[(group, out.data_ptr())] = (work, lambda: torch.cat(parts, out=out))
    return out


def _gather_now(a, group: int):
    return _wait_fn(_all_gather_fn(a, group=group), group=group)


def _reduce_scatter_meta(a, *, group: int):
    world = tdist.get_world_size(_groups[group])
    if not isinstance(a, TensorProxy) or a.ndim != 1 or a.numel() % world:
        raise TypeError(
            f"reduce_scatter: expected a 1-D tensor whose length divides by the world size {world}, but got {a!r}"
        )
    return TensorProxy(like=a, shape=(a.numel() // world,))


def _reduce_scatter_fn(a, *, group: int):
    """Starts the reduce-scatter asynchronously; wait(out, group=g) completes it."""
    pg = _groups[group]
    world = tdist.get_world_size(pg)
    a = a.contiguous()
    out = torch.empty(a.numel() // world, dtype=a.dtype, device=a.device)
    if _is_nccl(pg):
        work = tdist.reduce_scatter_tensor(out, a, group=pg, async_op=True)
        _pending[(group, out.data_ptr())] = (work, None)
        return out
    # gloo has no reduce-scatter: a sum over all ranks, of which this rank keeps its chunk.
    total = a.clone()
    work = tdist.all_reduce(total, group=pg, async_op=True)
    rank = tdist.get_rank(pg)
    _pending[(group, out.data_ptr())] = (work, lambda: out.copy_(total.chunk(world)[rank]))
    return out


# all_gather(shard, token=t, group=g): starts gathering the shards of the ranks of g, concatenated
# (in rank order), which wait(...) completes; the Prefetch pass (csrc/transforms/prefetch.h) issues
# it ahead of its wait, while the previous block computes. reduce_scatter(a, group=g): starts
# computing this rank's chunk of the sum of `a` over the ranks, which wait(...) completes.
# all_gather's gradient is the reduce_scatter of its cotangent (divided by the world size: the
# gradients are averaged over the ranks, as in ddp), started as soon as the cotangent is complete
# and handed to the token (made by shard_token at the start of the forward), whose backward, at the
# end, waits for it: the reduction overlaps the rest of the backward.
# all_gather_zero3 is all_gather marked recomputable, so that the backward gathers the parameter
# again (just before its first use there) instead of keeping it from the forward.
all_gather = _ex.register_operator("all_gather", meta=_all_gather_meta, fn=_all_gather_fn)
all_gather_zero3 = _ex.register_operator("all_gather_zero3", meta=_all_gather_meta, fn=_all_gather_fn)
_C.mark_recomputable(all_gather_zero3.id)
reduce_scatter = _ex.register_operator("reduce_scatter", meta=_reduce_scatter_meta, fn=_reduce_scatter_fn)


def _coalesced(pg, collective, outs, ins):
    """Starts collective(out, in) for each pair as one coalesced collective (one launch); returns
    what completes it, or None where the backend cannot (gloo has no coalesced reduce-scatter)."""
    if (pg, collective) in _uncoalesced_ops:
        return None
    try:
        # No `device`: with one, the manager ends by a second work of its own, and the one that
        # holds the tensors is never waited (it keeps them until the group's next collective).
        with tdist.distributed_c10d._coalescing_manager(group=pg, async_ops=True) as cm:
            for out, a in zip(outs, ins):
                collective(out, a, group=pg)
    except (RuntimeError, NotImplementedError, ValueError):
        _uncoalesced_ops.add((pg, collective))
        return None
    return cm


_uncoalesced_ops: set = set()  # (process group, collective) pairs its backend does not coalesce


def _one_by_one(collective_fn, ins, group: int) -> tuple:
    """Where the backend cannot coalesce: one collective per tensor (_all_gather_fn,
    _reduce_scatter_fn), their works completed together by the first wait."""
    outs = [collective_fn(a, group=group) for a in ins]
    _Once(group, outs, [_pending.pop((group, o.data_ptr())) for o in outs])
    return tuple(outs)


class _Once:
    """The work of a coalesced collective, registered as pending for each of its outputs: the
    first wait completes it and drops every output's entry (an output the trace does not use
    has no wait of its own, and its entry would keep the work and its tensors alive)."""

    def __init__(self, group: int, outs, entries: list):
        self.keys = [(group, o.data_ptr()) for o in outs]
        self.entries = entries  # (work, what completes it after the work, or None), as _pending's
        for k in self.keys:
            _pending[k] = (self, None)

    def wait(self):
        if self.entries is not None:
            for work, finish in self.entries:
                work.wait()
                if finish is not None:
                    finish()
            self.entries = None
            for k in self.keys:
                if _pending.get(k, (None,))[0] is self:
                    del _pending[k]


def _all_gather_many_meta(*args, group: int):
    args = _spread(args)
    if len(args) % 2:
        raise TypeError("all_gather_many: expected (shard, token) pairs")
    return tuple(_all_gather_meta(a, token=t, group=group) for a, t in zip(args[0::2], args[1::2]))


def _all_gather_many_fn(*args, group: int):
    """Starts gathering several shards in one coalesced collective (one launch and one completion
    for a block's parameters); wait(out, group=g) on each output completes it."""
    pg = _groups[group]
    world = tdist.get_world_size(pg)
    shards = [a.contiguous() for a in args[0::2]]
    outs = [torch.empty(a.numel() * world, dtype=a.dtype, device=a.device) for a in shards]
    cm = _coalesced(pg, tdist.all_gather_into_tensor, outs, shards)
    if cm is None:
        return _one_by_one(_all_gather_fn, shards, group)
    _Once(group, outs, [(cm, None)])
    return tuple(outs)


def _reduce_scatter_many_meta(*grads, group: int):
    return tuple(_reduce_scatter_meta(g, group=group) for g in _spread(grads))


def _reduce_scatter_many_fn(*grads, group: int):
    """Starts reduce-scattering several tensors in one coalesced collective; wait(out, group=g) on
    each output completes it."""
    pg = _groups[group]
    world = tdist.get_world_size(pg)
    grads = [g.contiguous() for g in grads]
    outs = [torch.empty(g.numel() // world, dtype=g.dtype, device=g.device) for g in grads]
    cm = _coalesced(pg, tdist.reduce_scatter_tensor, outs, grads)
    if cm is None:
        return _one_by_one(_reduce_scatter_fn, grads, group)
    _Once(group, outs, [(cm, None)])
    return tuple(outs)


# reduce_scatter_many(g0, g1, ..., group=g): reduce_scatter of several tensors as one coalesced
# collective: the gradients of a block's parameters, complete together at the end of the block's
# backward (where the backward of its all_gather_many runs).
reduce_scatter_many = _ex.register_operator("reduce_scatter_many", meta=_reduce_scatter_many_meta,
                                            fn=_reduce_scatter_many_fn)


def _all_gather_many_grad_rule(op):
    def rule(*args, group: int):
        args = _spread(args)
        outs = op(*args, group=group)
        world = tdist.get_world_size(_groups[group])
        grads = [get_grad(out) for out in outs]
        if world > 1:
            grads = [thunder.torch.div(g, world) for g in grads]
        for token, shard in zip(args[1::2], reduce_scatter_many(*grads, group=group)):
            put_grad(token, shard)
        return outs

    return rule


# all_gather_many(s0, t0, s1, t1, ..., group=g): all_gather of several shards (each with its token)
# as one coalesced collective: fsdp gathers a block's parameters with one call, where one call per
# parameter cost a launch, a completion and the host's bookkeeping each (the 4-layer Llama's ZeRO-2
# forward spent 16 ms on the host against DDP's 2.4 on an H200). Its _zero3 twin is recomputable.
all_gather_many = _ex.register_operator("all_gather_many", meta=_all_gather_many_meta, fn=_all_gather_many_fn)
all_gather_many_zero3 = _ex.register_operator("all_gather_many_zero3", meta=_all_gather_many_meta,
                                              fn=_all_gather_many_fn)
_C.mark_recomputable(all_gather_many_zero3.id)


def _shard_token_meta(a, *, group: int):
    return TensorProxy(like=a)


def _shard_token_fn(a, *, group: int):
    return torch.zeros((), dtype=a.dtype, device=a.device).expand(a.shape)


shard_token = _ex.register_operator("shard_token", meta=_shard_token_meta, fn=_shard_token_fn)
# A zero-stride placeholder, free to make again: the backward's gathers read it without the forward
# saving it (saving it would count, to the rematerialization, as many bytes as the shard).
_C.mark_recomputable(shard_token.id)


def _all_gather_grad_rule(op):
    def rule(a, *, token, group: int):
        out = op(a, token=token, group=group)
        g = get_grad(out)
        world = tdist.get_world_size(_groups[group])
        if world > 1:
            g = thunder.torch.div(g, world)
        put_grad(token, reduce_scatter(g, group=group))
        return out

    return rule


def _wait_grad(a, *, group: int):
    """A gathered parameter's wait passes its cotangent through (a reduction's wait is in the
    backward only, never differentiated)."""
    out = wait(a, group=group)
    put_grad(a, get_grad(out))
    return out


def _shard_token_grad(a, *, group: int):
    token = shard_token(a, group=group)
    put_grad(a, wait(get_grad(token), group=group))
    return token


_ex.register_implementation(all_gather, grad_transform=_all_gather_grad_rule(all_gather))
_ex.register_implementation(all_gather_zero3, grad_transform=_all_gather_grad_rule(all_gather_zero3))
_ex.register_implementation(all_gather_many, grad_transform=_all_gather_many_grad_rule(all_gather_many))
_ex.register_implementation(all_gather_many_zero3, grad_transform=_all_gather_many_grad_rule(all_gather_many_zero3))
_ex.register_implementation(shard_token, grad_transform=_shard_token_grad)
_ex.register_implementation(wait, grad_transform=_wait_grad)


@dataclass
class _Shard:
    """How a sharded parameter is rebuilt: its shape and number of elements before sharding;
    `lookup`: the weight of an nn.Embedding held by no other slot, whose lookups run on the shards
    (fsdp_embedding) without gathering the table."""

    shape: tuple
    numel: int
    lookup: bool = False
    # ZeRO-3 keeps this parameter gathered from the forward to the backward: it lies outside the
    # model's repeated blocks (the embeddings, the final norm and head of a transformer), as
    # FSDP2 keeps its root module's. The head is used last in the forward and first in the
    # backward, where gathering it again would wait with nothing to overlap.
    kept: bool = False
    # The repeated block (its index) whose parameters are gathered together, in one collective.
    block: int | None = None


def _span(shard: torch.Tensor, rank: int, rows: int, cols: int) -> tuple[int, int, int, int]:
    """The flat elements [start, end) of a (rows, cols) table that this rank's shard holds (its
    padding excluded; none: end <= start), and the rows [first, last) they touch."""
    start = rank * shard.numel()
    end = min(start + shard.numel(), rows * cols)
    return start, end, start // cols, -(-end // cols)


def _rows_of_shard(shard: torch.Tensor, rank: int, rows: int, cols: int) -> tuple[torch.Tensor, int]:
    """The rows of a (rows, cols) table that this rank's flat shard covers, as a (k, cols) tensor
    (zeros where a row's elements lie in a neighbour's shard), and the first one's index."""
    start, end, first, last = _span(shard, rank, rows, cols)
    if end <= start:
        return shard.new_zeros((0, cols)), rows
    if start % cols == 0 and end % cols == 0:
        return shard[: end - start].view(last - first, cols), first
    table = shard.new_zeros((last - first) * cols)
    table[start - first * cols: end - first * cols] = shard[: end - start]
    return table.view(last - first, cols), first


def _local_ids(ids: torch.Tensor, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    local = ids - first
    mine = (local >= 0) & (local < count)
    return torch.where(mine, local, count), mine  # the others to a row past the local table


def _fsdp_embedding_meta(ids, shard, *, rows: int, cols: int, padding_idx, group: int):
    return TensorProxy(like=shard, shape=(*ids.shape, cols))


def _fsdp_embedding_fn(ids, shard, *, rows: int, cols: int, padding_idx, group: int):
    """Each rank looks up the rows its shard holds for the ids of every rank (zeros for the
    others); a reduce-scatter sums them, so that each rank gets its own ids' rows, exactly."""
    pg = _groups[group]
    world, rank = tdist.get_world_size(pg), tdist.get_rank(pg)
    all_ids = _gather_rows_fn(ids.reshape(-1), group=group)
    table, first = _rows_of_shard(shard, rank, rows, cols)
    local, mine = _local_ids(all_ids, first, table.shape[0])
    found = torch.nn.functional.embedding(torch.where(mine, local, 0), table) if table.shape[0] else \
        shard.new_zeros((all_ids.numel(), cols))
    found = torch.where(mine.unsqueeze(-1), found, 0).contiguous()
    out = found.new_empty((ids.numel(), cols))
    if _is_nccl(pg):
        tdist.reduce_scatter_tensor(out, found, group=pg)
    else:
        tdist.all_reduce(found, group=pg)
        out.copy_(found.chunk(world)[rank])
    return out.view(*ids.shape, cols)


def _fsdp_embedding_backward_meta(g, ids, shard, *, rows: int, cols: int, padding_idx, group: int):
    return TensorProxy(like=shard)


def _fsdp_embedding_backward_fn(g, ids, shard, *, rows: int, cols: int, padding_idx, group: int):
    """The shard of the table's gradient averaged over the ranks: the rows' gradients and ids of
    every rank gathered, each rank sums those of the rows its shard holds."""
    pg = _groups[group]
    world, rank = tdist.get_world_size(pg), tdist.get_rank(pg)
    all_ids = _gather_rows_fn(ids.reshape(-1), group=group)
    all_g = _gather_rows_fn(g.reshape(-1, cols) / world, group=group)
    start, end, first, last = _span(shard, rank, rows, cols)
    out = torch.zeros_like(shard)
    if end <= start:
        return out
    local, _ = _local_ids(all_ids, first, last - first)
    pad = padding_idx - first if padding_idx is not None and first <= padding_idx < last else last - first
    # One row past the table takes the other shards' ids (and is the padding row when this shard
    # holds none: its gradient is dropped either way).
    table = torch.ops.aten.embedding_dense_backward(all_g, local, last - first + 1, pad, False)
    out[: end - start] = table[:-1].reshape(-1)[start - first * cols: end - first * cols]
    return out


def _fsdp_embedding_grad(ids, shard, *, rows: int, cols: int, padding_idx, group: int):
    out = fsdp_embedding(ids, shard, rows=rows, cols=cols, padding_idx=padding_idx, group=group)
    put_grad(shard, fsdp_embedding_backward(get_grad(out), ids, shard, rows=rows, cols=cols,
                                            padding_idx=padding_idx, group=group))
    return out


# fsdp_embedding(ids, shard, ...): an embedding lookup of a sharded table without gathering it (the
# ranks exchange the ids and the looked-up rows, N per rank, where gathering the table moves all of
# its rows); its backward gathers the rows' gradients and sums each rank's part into its shard.
fsdp_embedding = _ex.register_operator("fsdp_embedding", meta=_fsdp_embedding_meta, fn=_fsdp_embedding_fn)
fsdp_embedding_backward = _ex.register_operator("fsdp_embedding_backward", meta=_fsdp_embedding_backward_meta,
                                                fn=_fsdp_embedding_backward_fn)
_ex.register_implementation(fsdp_embedding, grad_transform=_fsdp_embedding_grad)


class _ShardTracing:
    """While a call of an FSDPModule is traced: each module's sharded parameters are gathered
    just before the module runs (a forward pre-hook), and any other use of a shard is routed to
    its gathered value by the tracing dispatcher."""

    def __init__(self, module: "FSDPModule"):
        self.module = module
        self.full: dict[int, TensorProxy] = {}  # id(shard proxy) -> the gathered parameter
        self.tokens: dict[int, TensorProxy] = {}  # id(shard proxy) -> its shard_token
        self.blocks: dict[int, list[TensorProxy]] = {}  # block index -> its shards' proxies
        self.alias: dict[int, TensorProxy] = {}  # id(proxy of a tied slot) -> the first slot's proxy
        self.keep: list = []
        self.original: list[tuple[torch.nn.Module, str, Any]] = []

    def gather(self, p: TensorProxy) -> TensorProxy:
        if id(p) in self.alias:
            return self.gather(self.alias[id(p)])
        full = self.full.get(id(p))
        if full is None:
            by_proxy, gid = self.module._shard_info_by_proxy, self.module._group_id
            info = by_proxy[id(p)]
            zero3 = self.module._strategy is FSDPType.ZERO3 and not info.kept
            # The block's parameters not gathered yet, p among them, in one collective.
            members = [q for q in self.blocks.get(info.block, ()) if id(q) not in self.full and q is not p]
            if members:
                members.insert(0, p)
                op = all_gather_many_zero3 if zero3 else all_gather_many
                args = [x for q in members for x in (q, self.tokens[id(q)])]
                flats = op(*args, group=gid)
            else:
                members = [p]
                flats = [(all_gather_zero3 if zero3 else all_gather)(p, token=self.tokens[id(p)], group=gid)]
            for q, flat in zip(members, flats):
                qi = by_proxy[id(q)]
                done = wait(flat, group=gid)
                self.full[id(q)] = thunder.torch.reshape(thunder.torch.narrow(done, 0, 0, qi.numel), qi.shape)
                self.keep.extend((q, self.full[id(q)]))
            full = self.full[id(p)]
        return full

    def pre_hook(self, mod, args):
        for name, p in mod._parameters.items():
            if isinstance(p, TensorProxy) and id(p) in self.module._shard_info_by_proxy:
                if self.module._shard_info_by_proxy[id(p)].lookup and id(p) not in self.full:
                    continue  # an embedding's table: its lookups run on the shard (dispatch)
                self.original.append((mod, name, p))
                mod._parameters[name] = self.gather(p)

    def embedding(self, args, kwargs):
        """A lookup of a table not gathered (yet) through fsdp_embedding; None where the call does
        not qualify (the table is then gathered)."""
        bound = _embedding_call(args, kwargs)
        if bound is None:
            return None
        ids, weight = bound["input"], bound["weight"]
        info = self.module._shard_info_by_proxy.get(id(weight)) if isinstance(weight, TensorProxy) else None
        if info is None or not info.lookup or id(weight) in self.full or len(info.shape) != 2:
            return None
        rows, cols = info.shape
        if not _rows_pay(ids, self.module._world_size, rows):
            return None
        pad = bound["padding_idx"]
        return fsdp_embedding(self.route(ids), weight, rows=rows, cols=cols,
                              padding_idx=None if pad is None else pad + rows if pad < 0 else pad,
                              group=self.module._group_id)

    def route(self, x):
        if isinstance(x, TensorProxy):
            return self.gather(x) if id(x) in self.module._shard_info_by_proxy else x
        if type(x) in (tuple, list):
            items = [self.route(v) for v in x]
            return x if all(a is b for a, b in zip(items, x)) else type(x)(items)
        if type(x) is dict:
            items = {k: self.route(v) for k, v in x.items()}
            return x if all(items[k] is x[k] for k in x) else items
        return x

    def restore(self, *unused):
        for m, name, p in reversed(self.original):
            m._parameters[name] = p
        self.original.clear()

    def root_pre_hook(self, mod, args):
        # The shards' proxies of this trace, by the module slots the ThunderModule filled.
        by_proxy = self.module._shard_info_by_proxy
        by_proxy.clear()
        first: dict[int, TensorProxy] = {}  # id(info) -> the proxy of its first slot
        for m, name, info in self.module._shard_slots:
            p = m._parameters.get(name)
            if isinstance(p, TensorProxy) and id(p) not in by_proxy:
                by_proxy[id(p)] = info
                self.keep.append(p)
                if id(info) in first:
                    # A tied parameter's other slot (GPT-2's head and embedding): a proxy of its
                    # own, gathered once through the first's.
                    self.alias[id(p)] = first[id(info)]
                    continue
                first[id(info)] = p
                # First in the forward, so that its backward (the wait) comes last.
                self.tokens[id(p)] = shard_token(p, group=self.module._group_id)
                if info.block is not None:
                    self.blocks.setdefault(info.block, []).append(p)
        self.pre_hook(mod, args)

    @contextlib.contextmanager
    def installed(self):
        model = self.module._model
        handles = [model.register_forward_pre_hook(self.root_pre_hook), model.register_forward_hook(self.restore)]
        handles += [m.register_forward_pre_hook(self.pre_hook) for m in model.modules()
                    if m is not model and any(p is not None for p in m._parameters.values())]
        inner = proxies.dispatch

        def dispatch(func, args, kwargs):
            if func is torch.nn.functional.embedding:
                out = self.embedding(args, kwargs)
                if out is not None:
                    return out
            return inner(func, self.route(args), self.route(kwargs))

        proxies.dispatch = dispatch
        try:
            yield
        finally:
            proxies.dispatch = inner
            for h in handles:
                h.remove()
            self.restore()
            self.module._shard_info_by_proxy.clear()


class FSDPModule(thunder.ThunderModule):
    """A module jitted for fully sharded data-parallel training (made by thunder.distributed.fsdp):
    each rank holds a flat, padded 1/world_size shard of every parameter (the module's parameters
    are these shards: give them to the optimizer); calls gather the parameters they use
    (all_gather) and training calls reduce-scatter the gradients to the shards, averaged over the
    ranks. full_state_dict / load_full_state_dict convert to and from an unsharded checkpoint."""

    def __init__(self, module: torch.nn.Module, executors, strategy: FSDPType, process_group):
        world, rank = tdist.get_world_size(process_group), tdist.get_rank(process_group)
        prefetch_bytes = _block_bytes(module, world)
        shards = _shard_parameters(module, world, rank)
        names = thunder._executor_names(executors)
        super().__init__(module, executors=[_ex.name] + [n for n in names if n != _ex.name])
        self._group = process_group
        self._group_id = _group_id(process_group)
        self._world_size, self._rank = world, rank
        self._strategy = strategy
        self._prefetch_bytes = prefetch_bytes
        self._shards = shards  # qualified name -> (shard parameter, _Shard)
        self._shard_slots = [(m, name, info) for m, name, info in _slots_of_shards(module, shards)]
        held = {}
        for m, name, info in self._shard_slots:
            held.setdefault(id(info), []).append((m, name))
        for m, name, info in self._shard_slots:
            info.lookup = held[id(info)] == [(m, name)] and isinstance(m, torch.nn.Embedding) and name == "weight"
        blocks = _blocks(module)
        block_of = {}  # id(shard) -> the outermost block holding it (modules() lists outer ones first)
        for i, b in enumerate(blocks):
            for q in b.parameters():
                block_of.setdefault(id(q), i)
        for m, name, info in self._shard_slots:
            q = m._parameters[name]
            info.kept = bool(blocks) and id(q) not in block_of
            info.block = block_of.get(id(q)) if q.requires_grad and not info.lookup else None
        self._shard_info_by_proxy: dict[int, _Shard] = {}
        self._cfn = _C.CompiledFunction(thunder._weak_hook(self._compile_sharded))

    def _compile_sharded(self, args, kwargs):
        # Prefetch keeps at most the parameters of about one block in flight ahead of their use.
        for op in (all_gather, all_gather_zero3, all_gather_many, all_gather_many_zero3):
            _C.mark_prefetch(op.id, self._prefetch_bytes)
        with _ShardTracing(self).installed():
            return self._compile(args, kwargs)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The unsharded state dict (every rank gets it): what the original module's
        state_dict() would hold, with tied parameters under each of their names."""
        out = {}
        gathered = {}
        for key, value in self._model.state_dict(keep_vars=True).items():
            if isinstance(value, torch.nn.Parameter) and id(value) in self._shard_info_by_param:
                if id(value) not in gathered:
                    info = self._shard_info_by_param[id(value)]
                    flat = _gather_now(value.detach(), self._group_id)
                    gathered[id(value)] = flat[: info.numel].reshape(info.shape).clone()
                out[key] = gathered[id(value)]
            else:
                out[key] = value.detach().clone()
        return out

    def load_full_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Loads an unsharded state dict: each rank keeps its shard of every parameter."""
        own = self._model.state_dict(keep_vars=True)
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if missing or unexpected:
            raise KeyError(f"load_full_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        with torch.no_grad():
            for key, value in own.items():
                src = state_dict[key]
                info = self._shard_info_by_param.get(id(value))
                if info is None:
                    value.copy_(src)
                    continue
                if tuple(src.shape) != info.shape:
                    raise ValueError(f"load_full_state_dict: {key} has shape {tuple(src.shape)}, expected {info.shape}")
                value.copy_(_shard_of(src, self._world_size, self._rank))

    @property
    def _shard_info_by_param(self) -> dict[int, _Shard]:
        return {id(p): info for p, info in self._shards.values()}


def _blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the entries of its ModuleLists and Sequentials (a
    transformer's layers)."""
    return [b for m in module.modules() if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) for b in m]


def _block_bytes(module: torch.nn.Module, world: int = 1) -> int:
    """The bytes of the largest repeated block of an unsharded module (an entry of a ModuleList or
    Sequential: a transformer layer), or of its largest parameter when there is none, as gathered
    (each parameter padded to a multiple of the world size)."""
    def gathered(p):
        return -(-p.numel() // world) * world * p.element_size()

    largest = max((sum(gathered(p) for p in b.parameters()) for b in _blocks(module)), default=0)
    return largest or max((gathered(p) for p in module.parameters()), default=0)


def _shard_of(t: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """This rank's chunk of t flattened and padded with zeros to a multiple of world."""
    n = t.numel()
    chunk = -(-n // world)
    flat = t.detach().reshape(-1)
    if chunk * world != n:
        flat = torch.cat([flat, flat.new_zeros(chunk * world - n)])
    return flat[rank * chunk:(rank + 1) * chunk].clone()


def _shard_parameters(module: torch.nn.Module, world: int, rank: int) -> dict:
    """Replaces every parameter of module (in each slot holding it) by this rank's shard."""
    shards: dict[int, tuple[str, torch.nn.Parameter, _Shard]] = {}
    for qual, p in module.named_parameters():
        info = _Shard(tuple(p.shape), p.numel())
        shards[id(p)] = (qual, torch.nn.Parameter(_shard_of(p, world, rank), requires_grad=p.requires_grad), info)
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None and id(p) in shards:
                mod._parameters[name] = shards[id(p)][1]
    return {qual: (shard, info) for qual, shard, info in shards.values()}


def _slots_of_shards(module: torch.nn.Module, shards: dict):
    info_by_param = {id(p): info for p, info in shards.values()}
    for mod in module.modules():
        for name, p in mod._parameters.items():
            if p is not None and id(p) in info_by_param:
                yield mod, name, info_by_param[id(p)]


def fsdp(model, sharding_strategy: FSDPType = FSDPType.ZERO2, *, process_group=None, executors=None) -> FSDPModule:
    """Wraps `model` (an nn.Module, or a module returned by thunder.jit, whose executors are kept)
    for fully sharded data-parallel training over `process_group` (default: the default group):
    parameters and buffers are broadcast from the group's first rank, then each parameter is
    replaced in the module by this rank's shard (create the optimizer after wrapping)."""
    model, executors = _unwrap("fsdp", model, executors)
    if not isinstance(sharding_strategy, FSDPType):
        raise TypeError(
            "thunder.distributed.fsdp: sharding_strategy must be FSDPType.ZERO2 or FSDPType.ZERO3, "
            f"got {sharding_strategy!r}"
        )
    src = 0 if process_group is None else tdist.get_global_rank(process_group, 0)
    with torch.no_grad():
        for t in itertools.chain(model.parameters(), model.buffers()):
            tdist.broadcast(t.detach(), src=src, group=process_group)
    return FSDPModule(model, executors, sharding_strategy, process_group)


from thunder.distributed.tensor_parallel import column_parallel, row_parallel  # noqa: E402  (uses the above)
