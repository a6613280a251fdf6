"""thunder.distributed.column_parallel / row_parallel (and with fsdp across, 2-D) against
single-process training of the same model: processes spawned by each test (torch.multiprocessing,
a free port), over gloo on CPU, or over NCCL with one GPU each (the cuda variants, skipped with
fewer GPUs than processes)."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import thunder
from test_distributed import _free_port, _run  # the ranks' setup and teardown

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not available"
)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs at least 2 GPUs"))]


def _with_world(rank, world, body, args):
    body(rank, world, *args)


def spawn(world, device, body, *args):
    """Runs body(rank, world, *args) in `world` processes of one group; a failure in any is raised."""
    if device == "cuda" and torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    mp.spawn(_run, args=(_free_port(), _with_world, (world, body, args), world, device), nprocs=world)


# ---- models ---------------------------------------------------------------------------------------------


class MLP(torch.nn.Module):
    def __init__(self, vocab=16, dim=8, hidden=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, dim)

    def forward(self, ids):
        return self.fc2(F.gelu(self.fc1(self.emb(ids)))).square().mean()


class Block(torch.nn.Module):
    """A transformer block between an embedding and an output projection."""

    def __init__(self, vocab=32, dim=16, heads=4, hidden=32):
        super().__init__()
        self.heads = heads
        self.wte = torch.nn.Embedding(vocab, dim)
        self.ln1 = torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, dim)
        self.k = torch.nn.Linear(dim, dim)
        self.v = torch.nn.Linear(dim, dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, hidden)
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, targets):
        x = self.wte(ids)
        h = self.ln1(x)
        B, T, C = h.shape

        def heads(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        h = self.ln2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))  # SwiGLU: both column outputs stay sharded
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


MLP_PLAN = {"column": ["emb", "fc1"], "row": ["fc2"]}
BLOCK_PLAN = {"column": ["q", "k", "v", "up", "gate", "head"], "row": ["wte", "proj", "down"]}


def _expected_shard(module, name: str, full: torch.Tensor, plan, world: int, rank: int) -> torch.Tensor:
    """The chunk of a parameter (or its gradient) of the unsharded model that a rank holds."""
    mod_name, _, pname = name.rpartition(".")
    sub = module.get_submodule(mod_name)
    if mod_name in plan["column"]:
        dim = 1 if isinstance(sub, torch.nn.Embedding) else 0
    elif mod_name in plan["row"]:
        if pname == "bias":
            return full
        dim = 0 if isinstance(sub, torch.nn.Embedding) else 1
    else:
        return full
    return full.chunk(world, dim)[rank]


def _parallelize(jm, plan, group):
    import thunder.distributed

    thunder.distributed.column_parallel(jm, plan["column"], group)
    return thunder.distributed.row_parallel(jm, plan["row"], group)


def _data(kind, steps, batch, generator):
    if kind == "mlp":
        return [(torch.randint(0, 16, (batch, 3), generator=generator, device="cpu"),) for _ in range(steps)]
    out = []
    for _ in range(steps):
        ids = torch.randint(0, 32, (batch, 9), generator=generator, device="cpu")
        out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    return out


def _make(kind):
    torch.manual_seed(1234)
    return MLP() if kind == "mlp" else Block()


def _train(rank, world, kind, tp_size):
    """Trains the model tensor-parallel over groups of tp_size ranks (and, when tp_size < world,
    with ZeRO-3 fsdp across the groups, each such group taking a slice of the batch) for 10
    steps, against single-process training on the whole batch."""
    import thunder.distributed

    device = torch.get_default_device()
    plan = MLP_PLAN if kind == "mlp" else BLOCK_PLAN
    dp_size = world // tp_size
    tp_rank, dp_rank = rank % tp_size, rank // tp_size
    # Every rank makes every group, in the same order.
    tp_groups = [dist.new_group(list(range(g * tp_size, (g + 1) * tp_size))) for g in range(dp_size)]
    dp_groups = [dist.new_group(list(range(r, world, tp_size))) for r in range(tp_size)]
    tp_group, dp_group = tp_groups[rank // tp_size], dp_groups[tp_rank]

    model = _make(kind)
    reference = _make(kind)
    full_numel = sum(p.numel() for p in model.parameters())
    if tp_rank != 0:
        # Other ranks start from other weights: column_parallel / row_parallel broadcast the group's first.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    jm = _parallelize(thunder.jit(model), plan, tp_group)
    names = [n for n, _ in reference.named_parameters()]
    # Sharded in place: memory drops by about the group size.
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, _expected_shard(reference, name, q.detach(), plan, tp_size, tp_rank),
                                   rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
    assert sum(p.numel() for p in model.parameters()) < 0.7 * full_numel
    if dp_size > 1:
        zero3 = thunder.distributed.FSDPType.ZERO3
        jm = thunder.distributed.fsdp(jm, sharding_strategy=zero3, process_group=dp_group)
    opt = torch.optim.SGD(jm.parameters(), lr=0.2, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.9)
    per_rank = 2
    batches = _data(kind, 10, per_rank * dp_size, torch.Generator().manual_seed(7))

    def shard_of(name, full):
        shard = _expected_shard(reference, name, full, plan, tp_size, tp_rank)
        return thunder.distributed._shard_of(shard, dp_size, dp_rank) if dp_size > 1 else shard

    for step, batch in enumerate(batches):
        batch = [b.to(device) for b in batch]
        mine = [b[dp_rank * per_rank:(dp_rank + 1) * per_rank] for b in batch]
        loss = jm(*mine)
        loss.backward()
        ref_loss = reference(*batch)
        ref_loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=dp_group)
        torch.testing.assert_close(mean / dp_size, ref_loss.detach(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"step {step}: {m}")
        if step == 0:
            for name, p, q in zip(names, model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, shard_of(name, q.grad), rtol=1e-4, atol=1e-6,
                                           msg=lambda m: f"gradient of {name}: {m}")
        opt.step()
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
    for name, p, q in zip(names, model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), shard_of(name, q.detach()), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")

    forward = str(thunder.last_traces(jm)[-1])
    backward = str(thunder.last_backward_traces(jm)[-1])
    # Inference runs the same collectives without the grad rules.
    with torch.no_grad():
        torch.testing.assert_close(jm(*mine), reference(*mine), rtol=1e-5, atol=1e-6)
    assert "tp_all_reduce(" in str(thunder.last_traces(jm)[-1])
    if rank == 0 and os.environ.get("THUNDER_TP_PRINT"):
        print(forward, backward, sep="\n")
    if kind == "mlp":
        # The embedding's output is gathered for fc1; fc1's output reaches fc2 through gelu as a
        # shard (no gather, no split): one all-reduce in the forward, fc1's input gradient summed in
        # the backward, the embedding's output gradient sliced.
        assert forward.count(" = tp_all_gather(") == 1 and "tp_split(" not in forward, forward
        assert forward.count(" = tp_all_reduce(") == 1 and " = tp_copy(" in forward, forward
        assert backward.count(" = tp_all_reduce(") == 1 and backward.count(" = tp_split(") == 1, backward
    else:
        # q, k and v reach proj as shards (split into heads, attention over this rank's heads,
        # merged again), as SwiGLU's product reaches down: only the logits are gathered; wte,
        # proj and down sum over the ranks.
        assert forward.count(" = tp_all_gather(") == 1 and "tp_split(" not in forward, forward
        assert forward.count(" = tp_all_reduce(") == 3, forward
        assert backward.count(" = tp_split(") == 1 and "tp_all_gather(" not in backward, backward
        # q, k and v share their input's copy (so do up and gate): one all-reduce each of the
        # input gradients of the attention, the MLP and the head.
        assert forward.count(" = tp_copy(") == 3 and backward.count(" = tp_all_reduce(") == 3, backward
    if dp_size > 1:
        assert "all_gather_zero3(" in forward and " = reduce_scatter(" in backward


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["mlp", "block"])
def test_tensor_parallel_matches_single_process_training(kind, world, device):
    if world == 4 and kind == "mlp" and device == "cpu":
        pytest.skip("the block at world 4 covers it; CPU time is shared")
    spawn(world, device, _train, kind, world)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_parallel_with_fsdp_2d(device):
    # world 4: tensor parallel in groups of 2 ({0, 1}, {2, 3}), ZeRO-3 across ({0, 2}, {1, 3})
    spawn(4, device, _train, "block", 2)


def _errors(rank, world):
    import thunder.distributed

    column = thunder.distributed.column_parallel
    with pytest.raises(ValueError, match=r"fc1.weight of shape \(15, 8\) has 15 output features, not divisible by "
                                         r"the tensor-parallel world size 2"):
        column(thunder.jit(torch.nn.Sequential(_named(fc1=torch.nn.Linear(8, 15)))), ["0.fc1"])
    with pytest.raises(ValueError, match=r"row_parallel: 0.weight of shape \(4, 7\) has 7 input features"):
        thunder.distributed.row_parallel(thunder.jit(torch.nn.Sequential(torch.nn.Linear(7, 4))), ["0"])
    with pytest.raises(ValueError, match=r"emb.weight of shape \(9, 4\) has 9 vocabulary rows"):
        thunder.distributed.row_parallel(thunder.jit(_named(emb=torch.nn.Embedding(9, 4))), ["emb"])
    mlp = thunder.jit(_make("mlp"))
    ids = torch.tensor([[1, 5, 15], [0, 9, 8]])
    expected = mlp(ids)  # compiled unsharded first: sharding makes the next call compile again
    with pytest.raises(ValueError, match="column_parallel: no submodule named 'fc3' in MLP"):
        column(mlp, ["fc1", "fc3"])
    # Nothing was sharded by the failed call.
    assert mlp._model.fc1.weight.shape == (16, 8)
    with pytest.raises(TypeError, match="only nn.Linear and nn.Embedding"):
        column(mlp, [""])
    with pytest.raises(TypeError, match="expected a module returned by thunder.jit, but got MLP"):
        column(MLP(), ["fc1"])
    column(mlp, ["fc1"])
    with pytest.raises(ValueError, match="fc1 is already column-parallel"):
        thunder.distributed.row_parallel(mlp, ["fc1"])
    thunder.distributed.row_parallel(mlp, ["fc2"])
    torch.testing.assert_close(mlp(ids), expected)
    assert "tp_all_reduce(" in str(thunder.last_traces(mlp)[-1])
    with pytest.raises(RuntimeError, match="fc1 holds a shard of its parameters"):
        mlp._model(ids)
    # A dropped parallel module is freed (its hooks and plan make only cycles the collector sees).
    import gc
    import weakref

    refs = [weakref.ref(mlp), weakref.ref(mlp._model), weakref.ref(mlp._model.fc1.weight)]
    del mlp
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    with pytest.raises(ValueError, match=r"tp_split: dimension 1 of shape \(2, 3\) is not divisible"):
        split = thunder.distributed.tensor_parallel.tp_split
        thunder.jit(lambda x: split(x, dim=1, group=thunder.distributed._group_id(None)))(torch.zeros(2, 3))


def _named(**modules):
    m = torch.nn.Module()
    for k, v in modules.items():
        m.add_module(k, v)
    return m


def test_tensor_parallel_errors():
    spawn(2, "cpu", _errors)
