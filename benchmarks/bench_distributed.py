"""Data-parallel training step on 2 GPUs (NCCL): thunder.distributed vs PyTorch's
DistributedDataParallel and FSDP2 (fully_shard), eager and torch.compile'd, side by side in one
run. For each contender: median step time (forward, cross-entropy, backward, AdamW step), tokens/s
per GPU, the per-GPU peak memory, the memory held between steps (parameters and optimizer states)
beside what the contender's own model should hold (its parameters on this rank and AdamW's two
states), and for thunder the peaks its traces predict (thunder.core.transforms.live_bytes). First,
the per-GPU memory by kind from the model's shapes (memory_model): what sharding divides by the
world size and what it does not (activations).

    python benchmarks/bench_distributed.py [--world 2] [--steps 10] [--only ddp,fsdp2,...] [--json out.json]
        [--scaling] [--profile] [--order given|reverse] [--device cuda|cpu] [--small | --tiny]
    (or under torchrun: torchrun --nproc-per-node 2 benchmarks/bench_distributed.py)

--scaling first runs every contender on one GPU (a world of 1, same per-GPU batch) and reports the
scaling efficiency: tokens/s per GPU at --world against that. --order reverse runs the contenders
in reverse order: each builds and frees its own model, so its between-step memory must not depend
on which contenders ran before it (a model an earlier contender left alive would show there).
--profile profiles one more step of each contender (CUDA): the time in NCCL kernels and the share of
it that runs while compute kernels run (communication hidden behind compute).

Workload: the 4-layer Llama of benchmarks/run.py's gpt_train (Llama-3.2-1B-shaped: vocab 128256,
width 2048, 32 heads, 8 KV heads, MLP 8192), bf16 weights, batch 2 x 2048 tokens per GPU, logits
in float32 for the cross-entropy. `--small` runs a small model (and works on CPU with gloo).

Contenders: torch_ddp (torch.nn.parallel.DistributedDataParallel over the eager model),
torch_ddp_compiled (torch.compile of that DistributedDataParallel: compiled with DDPOptimizer's
graph breaks at the buckets), thunder_ddp (thunder.distributed.ddp), torch_fsdp2
(torch.distributed.fsdp.fully_shard per block and on the model), torch_fsdp2_compiled (the same,
then torch.compile), thunder_fsdp_zero2 / thunder_fsdp_zero3 (thunder.distributed.fsdp).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import weakref

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import thunder  # noqa: E402
import thunder.distributed  # noqa: E402
from models import llama  # noqa: E402

sys.path.insert(0, os.path.join(HERE, ".."))
from benchmarks.run import _WithLoss  # noqa: E402

CONTENDERS = ["torch_ddp", "torch_ddp_compiled", "thunder_ddp", "torch_fsdp2", "torch_fsdp2_compiled",
              "thunder_fsdp_zero2", "thunder_fsdp_zero3"]
GIB = 2**30


def memory_model(cfg, B: int, T: int, world: int, param_bytes: int = 2) -> list[tuple[str, float]]:
    """Per-GPU memory of the workload by kind, in GiB, from the model's shapes: what parameter
    sharding can divide by the world size (parameters, gradients, AdamW's two states, all in the
    parameters' dtype) and what it cannot (activations; the loss's are the largest: logits over the
    vocabulary, their float32 copy for the cross-entropy, its log-softmax and their gradients)."""
    C, V, L, I = cfg.n_embd, cfg.vocab_size, cfg.n_layer, cfg.intermediate_size
    qkv = (cfg.n_head + 2 * cfg.n_query_groups) * cfg.head_size
    block = C * qkv + C * C + 3 * C * I + 2 * C
    params = 2 * V * C + L * block + C
    n = B * T  # tokens per GPU
    logits = n * V
    # Saved per block (parameters' dtype): the norms' inputs, qkv, roped q and k, attention output, the MLP's
    # two inputs and silu(fc_1) * fc_2, plus a float32 rstd per token per norm.
    per_block = n * (2 * C + qkv + 2 * C + C + 3 * I) * param_bytes + 2 * n * 4
    return [
        ("parameters", params * param_bytes / GIB),
        ("parameters, sharded", params * param_bytes / world / GIB),
        ("gradients + AdamW states (x3 parameters)", 3 * params * param_bytes / GIB),
        ("  sharded", 3 * params * param_bytes / world / GIB),
        ("largest gathered parameter (lm_head / wte)", V * C * param_bytes / GIB),
        ("one block's parameters", block * param_bytes / GIB),
        ("block activations saved for backward", L * per_block / GIB),
        ("logits (parameters' dtype)", logits * param_bytes / GIB),
        ("logits in float32 (.float()) and log-softmax, each", logits * 4 / GIB),
        ("loss backward: d log-softmax + d logits f32 + d logits", logits * (4 + 4 + param_bytes) / GIB),
    ]


def _config(size: str):
    if size == "tiny":  # CPU smoke runs of the whole script
        return llama.Config(block_size=32, vocab_size=256, n_layer=2, n_head=4, n_query_groups=2, n_embd=64,
                            intermediate_size=128), 2, 32
    if size == "small":
        return llama.Config(block_size=256, vocab_size=4096, n_layer=2, n_head=8, n_query_groups=2, n_embd=256,
                            intermediate_size=688), 2, 128
    return llama.Config(block_size=2048, vocab_size=128256, n_layer=4, n_head=32, n_query_groups=8, n_embd=2048,
                        intermediate_size=8192, rope_base=500000), 2, 2048


def _wrap(name, model):
    """The callable of a training forward and the module whose parameters the optimizer steps."""
    if name in ("torch_ddp", "torch_ddp_compiled"):
        from torch.nn.parallel import DistributedDataParallel

        cuda = next(model.parameters()).is_cuda
        m = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if cuda else None)
        return (torch.compile(m) if name.endswith("_compiled") else m), model
    if name in ("thunder_ddp", "thunder_ddp_dense"):
        m = thunder.distributed.ddp(model)
        if name.endswith("_dense"):  # ablation: the embedding table reduced densely in a bucket
            for b in m._buckets:
                b.embedding = False
        return m, model
    if name in ("torch_fsdp2", "torch_fsdp2_compiled"):
        from torch.distributed.fsdp import fully_shard

        for block in model.model.transformer.h:
            fully_shard(block)
        fully_shard(model)
        return (torch.compile(model) if name.endswith("_compiled") else model), model
    if name.startswith("thunder_fsdp"):
        strategy = getattr(thunder.distributed.FSDPType, name.split("_")[2].upper())
        m = thunder.distributed.fsdp(model, sharding_strategy=strategy)
        for _, _, info in m._shard_slots:  # ablations: the table gathered, every parameter gathered again
            info.lookup = info.lookup and not name.endswith("_dense")
            info.kept = info.kept and not name.endswith("_regather")
        return m, m
    raise ValueError(f"unknown contender {name}")


def _own_bytes(owner) -> int:
    """The bytes this rank holds between steps for the contender's own model: its parameters (the
    local shards of sharded ones) and AdamW's two states of each."""
    total = 0
    for p in owner.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return 3 * total


def _measure(name, args, device, dtype):
    cfg, B, T = _config(args.size)
    torch.manual_seed(0)
    with torch.device(device):
        model = llama.GPT(cfg).to(dtype)
    # The model and its loss as one module (as benchmarks/run.py's gpt_train): every contender
    # compiles or wraps the cross-entropy over float32 logits with the model.
    fwd, owner = _wrap(name, _WithLoss(model, cfg.vocab_size))
    opt = torch.optim.AdamW(owner.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(dist.get_rank())
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g).to(device)
    targets = torch.randint(0, cfg.vocab_size, (B * T,), generator=g).to(device)

    def step():
        loss = fwd(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    step()
    if cuda:
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / GIB if cuda else float("nan")
    comm = (float("nan"), float("nan"), float("nan"))
    if args.profile and cuda:
        try:
            comm, exposed = _overlap(step)
        except Exception as e:  # the profile is an extra: its failure does not lose the timings
            exposed = [(f"profile failed: {type(e).__name__}: {e}", 0.0, 0.0, 0.0)]
        if dist.get_rank() == 0:  # where communication is not hidden: the longest exposed kernels
            print(f"# {name}: NCCL kernels with the most time exposed (rank 0; start ms into the step, "
                  "ms, exposed ms): " + "; ".join(f"{k} @{t0:.1f} {d:.2f} ({x:.2f})" for k, t0, d, x in exposed),
                  flush=True)
    # Between steps: parameters and optimizer states (gradients are set to None); what the
    # allocator holds beyond that in use at the start (the process's own buffers) is the
    # contender's, and must match its own model's parameters and AdamW states.
    static = (torch.cuda.memory_allocated() - args.baseline_bytes) / GIB if cuda else float("nan")
    own = _own_bytes(owner) / GIB
    # thunder's own estimate, from its traces: the peak bytes of live tensors in the forward and
    # in the backward (each counting its inputs), and of live gathered parameters (ZeRO-3).
    traced = [float("nan")] * 3
    if isinstance(fwd, thunder.ThunderModule):
        from thunder.core.transforms import live_bytes

        f, b = thunder.last_traces(fwd)[-1], thunder.last_backward_traces(fwd)[-1]
        gathers = ("all_gather_zero3", "all_gather_many_zero3")
        traced = [live_bytes(f)["peak"] / GIB, live_bytes(b)["peak"] / GIB,
                  max(live_bytes(t, op)["peak"] for t in (f, b) for op in gathers) / GIB]
    # The slowest rank's median and the largest peak: what the job sees.
    stats = torch.tensor([statistics.median(times), peak, first, static, own, *traced, *comm], dtype=torch.float64,
                         device=device)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    # Each contender frees its own model before the next builds one: checked, since a model left
    # alive would count in the next contender's memory.
    freed = weakref.ref(model)
    del fwd, owner, opt, model, step
    if name.endswith("_compiled"):
        torch._dynamo.reset()  # the compiled graphs and their guards hold the module
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    median, peak, first, static, own, fpeak, bpeak, gathered, comm_ms, overlapped_ms, busy_ms = stats.tolist()
    return {"contender": name, "median_s": median, "tokens_per_s_per_gpu": B * T / median, "peak_gib": peak,
            "first_call_s": first, "static_gib": static, "own_model_gib": own, "model_freed": freed() is None,
            "trace_forward_peak_gib": fpeak, "trace_backward_peak_gib": bpeak, "trace_gathered_peak_gib": gathered,
            "comm_kernel_ms": comm_ms, "comm_overlapped_ms": overlapped_ms, "compute_kernel_ms": busy_ms}


def _overlap(step):
    """One profiled step: the time the GPU spends in communication kernels (NCCL's), how much of it
    runs while a compute kernel runs on another stream (the overlap the schedule buys), and the
    time some compute kernel runs, in ms (the report takes the maximum over ranks); and the six
    communication kernels with the most time not overlapped, as (name, start, ms, exposed ms)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and e.time_range.end > e.time_range.start]
    comm = sorted((e.time_range.start, e.time_range.end, e.name) for e in kernels if "nccl" in e.name.lower())
    compute = sorted((e.time_range.start, e.time_range.end) for e in kernels if "nccl" not in e.name.lower()
                     and not e.name.startswith("Memcpy") and not e.name.startswith("Memset"))
    busy = []  # the union of the compute kernels' intervals
    for a, b in compute:
        if busy and a <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], b)
        else:
            busy.append([a, b])
    overlapped = 0.0
    exposed = []
    origin = min([a for a, _, _ in comm] + [a for a, _ in busy], default=0.0)
    for a, b, name in comm:
        hidden = 0.0
        for c, d in busy:  # few hundred intervals: quadratic is fine
            if c >= b:
                break
            hidden += max(0.0, min(b, d) - max(a, c))
        overlapped += hidden
        short = name.split("(")[0].replace("ncclDevKernel_", "").replace("ncclKernel_", "")[:40]
        exposed.append((short, (a - origin) / 1e3, (b - a) / 1e3, (b - a - hidden) / 1e3))
    total = sum(b - a for a, b, _ in comm)
    exposed = sorted(exposed, key=lambda e: -e[3])[:6]
    return (total / 1e3, overlapped / 1e3, sum(d - c for c, d in busy) / 1e3), exposed


# Ablations, run only when --only names them: thunder without the embedding lookups on gathered rows
# or shards (the table reduced or gathered whole), ZeRO-3 gathering every parameter again in the backward.
ABLATIONS = ["thunder_ddp_dense", "thunder_fsdp_zero2_dense", "thunder_fsdp_zero3_dense", "thunder_fsdp_zero3_regather"]


def _names(args) -> list[str]:
    only = args.only.split(",") if args.only else []
    names = [n for n in CONTENDERS if not only or any(n.startswith(o) or n == o for o in only)]
    names += [n for n in ABLATIONS if n in only]
    return names[::-1] if args.order == "reverse" else names


def _worker(rank, world, port, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    # NVLink multicast stays off (the shared machines require it).
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    if cuda:
        dist.barrier()  # NCCL's own buffers, allocated before the first contender
        args.baseline_bytes = torch.cuda.memory_allocated()
    results = []
    for name in _names(args):
        try:
            results.append(_measure(name, args, device, dtype))
        except Exception as e:  # one contender failing does not hide the others
            results.append({"contender": name, "error": f"{type(e).__name__}: {e}"})
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    if rank == 0:
        _report(results, world, args, cuda, dtype)
    dist.destroy_process_group()


def _report(results, world, args, cuda, dtype):
    base = {r["contender"]: r for r in results if "error" not in r}
    one = {}
    if args.single:
        with open(args.single) as f:
            one = {r["contender"]: r for r in json.load(f)["results"] if "error" not in r}
    print(f"# {world} x {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}, "
          f"{ {'tiny': 'tiny model', 'small': 'small model'}.get(args.size, '4-layer Llama-3.2-1B shape')}, "
          f"{args.steps} steps, contenders in {args.order} order")
    cfg, B, T = _config(args.size)
    print(f"# per-GPU memory by kind (GiB, from the shapes; B={B}, T={T}, world {world}):")
    for what, gib in memory_model(cfg, B, T, world, torch.tensor([], dtype=dtype).element_size()):
        print(f"#   {what:62} {gib:7.2f}")
    print("# vs torch: against the same kind of torch contender (compiled against compiled); scaling: tokens/s per "
          "GPU against the same contender's on one GPU; own model: its parameters and AdamW states on this rank")
    print(f"{'contender':28} {'step ms':>9} {'tok/s/GPU':>10} {'vs torch':>9} {'vs compiled':>12} {'scaling':>8} "
          f"{'peak GiB/GPU':>13} {'between steps':>14} {'own model':>10} {'freed':>6} {'first s':>8}  "
          "traces: fwd / bwd / gathered peak GiB" + ("   NCCL ms (overlapped) / compute ms" if args.profile else ""))
    for r in results:
        if "error" in r:
            print(f"{r['contender']:28} error: {r['error']}")
            continue
        name = r["contender"]
        kind = "torch_fsdp2" if "fsdp" in name else "torch_ddp"
        ratios = []
        for ref in (base.get(kind), base.get(kind + "_compiled")):
            ratios.append(f"{ref['median_s'] / r['median_s']:.2f}x" if ref else "-")
        single = one.get(name)
        scaling = f"{100 * r['tokens_per_s_per_gpu'] / single['tokens_per_s_per_gpu']:.0f}%" if single else "-"
        print(f"{name:28} {r['median_s'] * 1e3:9.1f} {r['tokens_per_s_per_gpu']:10.0f} {ratios[0]:>9} "
              f"{ratios[1]:>12} {scaling:>8} {r['peak_gib']:13.2f} {r['static_gib']:14.2f} "
              f"{r['own_model_gib']:10.2f} {'yes' if r['model_freed'] else 'NO':>6} {r['first_call_s']:8.1f}  "
              f"{r['trace_forward_peak_gib']:.2f} / {r['trace_backward_peak_gib']:.2f} / "
              f"{r['trace_gathered_peak_gib']:.2f}" + (
                  f"   {r['comm_kernel_ms']:.1f} ({100 * r['comm_overlapped_ms'] / max(r['comm_kernel_ms'], 1e-9):.0f}%)"
                  f" / {r['compute_kernel_ms']:.1f}" if args.profile else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world": world, "torch": torch.__version__, "order": args.order, "results": results,
                       "single_gpu": list(one.values())}, f, indent=1)


def _spawn(world, args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_worker, args=(world, port, args), nprocs=world)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--order", choices=["given", "reverse"], default="given",
                    help="the order the contenders run in (their between-step memory must not depend on it)")
    ap.add_argument("--scaling", action="store_true",
                    help="first run the contenders on one GPU, for the scaling efficiency")
    ap.add_argument("--single", default="", help="a JSON of a world-1 run of this script, for the scaling efficiency")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more step of each contender: NCCL kernel time and how much of it overlaps compute")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--small", dest="size", action="store_const", const="small", help="a small model")
    size.add_argument("--tiny", dest="size", action="store_const", const="tiny", help="a tiny model (CPU smoke runs)")
    ap.add_argument("--cpu", dest="device", action="store_const", const="cpu", help="the same as --device cpu")
    ap.set_defaults(size="llama")
    args = ap.parse_args()
    args.baseline_bytes = 0
    if "RANK" in os.environ:  # under torchrun (--scaling: give --single a world-1 run's JSON instead)
        _worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 0, args)
        return
    if args.scaling and args.world > 1:
        with tempfile.TemporaryDirectory() as tmp:
            single = argparse.Namespace(**{**vars(args), "json": os.path.join(tmp, "single.json")})
            _spawn(1, single)
            args.single = single.json
            _spawn(args.world, args)
        return
    _spawn(args.world, args)


if __name__ == "__main__":
    main()
