"""Sharded checkpoints through torch.distributed.checkpoint (DCP), as PyTorch users write them:

    import torch.distributed.checkpoint as dcp
    from thunder.distributed.checkpoint import get_model_state_dict, get_optimizer_state_dict

    dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)},
             checkpoint_id=path)                                   # on every rank
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.load(state, checkpoint_id=path)                            # in place, on any world size

The state dicts hold the original module's keys and shapes, whatever the wrapper: a checkpoint
saved from fsdp on N ranks loads into fsdp on M ranks, into ddp, or into the plain module
(dcp.load(module.state_dict(), checkpoint_id=path, no_dist=True) in one process).

An fsdp shard is a flat, padded chunk of the flattened parameter: the elements [rank * chunk,
(rank + 1) * chunk) in row-major order, which is not a rectangular block of the parameter. DCP
stores and reads rectangular blocks, so each shard is described as the few blocks its flat range
covers (a partial first row, whole rows, a partial last row, recursively in the inner dimensions),
each a view of the shard: a ShardedTensor with several local shards. Loading copies into these
views, so it writes the module's shards (and the optimizer's states) in place.
"""

from __future__ import annotations

import torch
import torch.distributed as tdist
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardedTensorMetadata
from torch.distributed._shard.sharded_tensor.metadata import TensorProperties

import thunder

__all__ = ["get_model_state_dict", "get_optimizer_state_dict"]


def _blocks(start: int, stop: int, shape: tuple) -> list[tuple[tuple, tuple, int]]:
    """The rectangular blocks (offsets, sizes, flat start) covering the row-major elements
    [start, stop) of a tensor of `shape`; each block is contiguous in that order."""
    if start >= stop:
        return []
    if not shape:
        return [((), (), start)]
    inner = 1
    for s in shape[1:]:
        inner *= s
    first, last = start // inner, (stop - 1) // inner

    def within(row, a, b):
        return [((row, *o), (1, *s), row * inner + f) for o, s, f in _blocks(a, b, shape[1:])]

    if first == last:
        return within(first, start - first * inner, stop - first * inner)
    out = []
    full_from = first
    if start % inner:
        out += within(first, start % inner, inner)
        full_from = first + 1
    full_to = stop // inner
    if full_to > full_from:
        out.append(((full_from,) + (0,) * (len(shape) - 1), (full_to - full_from, *shape[1:]), full_from * inner))
    if stop % inner:
        out += within(full_to, 0, stop % inner)
    return out


def _sharded(local: torch.Tensor, shape: tuple, numel: int, world: int, rank: int, group) -> ShardedTensor:
    """The flat shard `local` (this rank's chunk of a parameter of `shape`, padded) as a
    ShardedTensor of that shape, its local shards views of `local`."""
    chunk = local.numel()
    flat = local.detach().reshape(-1)
    metadata, mine = [], []
    device = local.device
    for r in range(world):
        blocks = _blocks(r * chunk, min((r + 1) * chunk, numel), shape)
        if not blocks and shape:
            # A rank holding only padding: an empty block past the end, since DCP leaves a
            # ShardedTensor without local shards out of this rank's state dict.
            blocks = [((shape[0],) + (0,) * (len(shape) - 1), (0, *shape[1:]), r * chunk)]
        for offsets, sizes, begin in blocks:
            md = ShardMetadata(list(offsets), list(sizes), f"rank:{tdist.get_global_rank(group, r) if group else r}/{device}")
            metadata.append(md)
            if r == rank:
                n = 1
                for s in sizes:
                    n *= s
                mine.append(Shard(flat[begin - r * chunk: begin - r * chunk + n].view(sizes), md))
    props = TensorProperties(dtype=local.dtype, layout=torch.strided, requires_grad=False,
                             memory_format=torch.contiguous_format, pin_memory=False)
    st_md = ShardedTensorMetadata(metadata, torch.Size(shape), props)
    return ShardedTensor._init_from_local_shards_and_global_metadata(mine, st_md, process_group=group)


def _module(model) -> tuple[torch.nn.Module, dict[int, tuple]]:
    """The original module and, for fsdp, its shards by id: (shape, numel, world, rank, group)."""
    from thunder.distributed import FSDPModule

    if isinstance(model, FSDPModule):
        info = {id(p): (i.shape, i.numel, model._world_size, model._rank, model._group)
                for p, i in model._shards.values()}
        return model._model, info
    if isinstance(model, thunder.ThunderModule):
        return model._model, {}
    if isinstance(model, torch.nn.Module):
        return model, {}
    raise TypeError(f"thunder.distributed.checkpoint: expected a module, but got {type(model).__name__}")


def get_model_state_dict(model) -> dict[str, torch.Tensor]:
    """The state dict of a jitted, ddp or fsdp module under the original module's keys and
    shapes, for torch.distributed.checkpoint's save and (in place) load: fsdp's shards as
    ShardedTensors viewing them, other entries the module's own tensors."""
    module, shards = _module(model)
    out = {}
    for key, value in module.state_dict(keep_vars=True).items():
        info = shards.get(id(value))
        out[key] = value.detach() if info is None else _sharded(value, *info)
    return out


def get_optimizer_state_dict(model, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state keyed by the parameters' names (as torch.distributed.checkpoint's
    get_optimizer_state_dict keys it): {"state": {name: {key: value}}, "param_groups": [...]},
    each state tensor of an fsdp shard a ShardedTensor of the parameter's shape. States must
    exist (after a step) for a load to fill them in place."""
    module, shards = _module(model)
    names = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), name)
    state, groups = {}, []
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(f"get_optimizer_state_dict: the optimizer steps a parameter of shape "
                                 f"{tuple(p.shape)} that the model does not hold")
            params.append(names[id(p)])
            info = shards.get(id(p))
            entries = {}
            for k, v in optimizer.state.get(p, {}).items():
                if isinstance(v, torch.Tensor) and info is not None and v.shape == p.shape:
                    entries[k] = _sharded(v, *info)
                else:
                    entries[k] = v
            state[names[id(p)]] = entries
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    return {"state": state, "param_groups": groups}
