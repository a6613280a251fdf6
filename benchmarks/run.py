"""Whole-model and kernel workloads: eager vs torch.compile vs thunder, measured side by side in
one process. For each: median time, speedup over eager, peak memory (CUDA), first-call time.

    python -m benchmarks.run [--device cuda|cpu] [--only NAME,...] [--json out.json] [--repeats N]
                             [--graphs]

--graphs adds, for gpt_infer, gpt_decode and overhead on CUDA, two contenders that replay CUDA
graphs: torch.compile(mode="reduce-overhead") and thunder.jit(plugins="reduce-overhead"); the
table then has a column for each and the ratio of the two.

Workloads (fixed, so results compare across commits):
  gpt_train     Llama-3.2-1B-shaped decoder, 4 layers (vocab 128256, width 2048, 32 heads, 8 KV
                heads, MLP 8192), batch 2 x 2048 tokens, bf16 weights, logits in float32 for the
                cross-entropy; forward + backward. The model and its loss are one compiled module
                (since session 5; before, the loss ran eagerly for every contender). (CPU: a small
                GPT of the same form.)
  gpt_infer     the same model, forward under torch.no_grad()
  gpt_decode    greedy decoding of 64 tokens with a KV cache, batch 1, ms per token
  rmsnorm       RMSNorm [8192, 4096] bf16 computed in f32, forward + backward (x and w grads)
  gelu_chain    gelu(x * w + b) on 64M bf16, forward + backward
  softmax       softmax over [16384, 4096] f32
  overhead      20 x `x = torch.sin(x) * 1.01 + 0.1` on a [16, 16] tensor, us per call
  cpu_chain     (CPU) erf(log1p(exp(sigmoid(x) - tanh(x))) * 2 - 1) on 16M float32 (the chain of
                bench_cpu.py; before the cpu branch it was erf(log1p(exp(tanh(sigmoid(x))))))
  cpu_mlp       (CPU) Linear 1024->4096, GELU (erf), Linear 4096->1024 on [2048, 1024], no_grad
  cpu_gpt_train (CPU) the nanoGPT of the tests (tests/python/models/nanogpt.py): 4 layers, width
                256, 8 heads, vocab 4096, batch 4 x 128 tokens, float32, its own cross-entropy
                loss; forward + backward

On the CPU each contender runs with the threads torch uses (torch.get_num_threads()); the
contenders are timed in interleaved rounds (one step of each per round) and the load average is
printed with the table: on a shared machine the absolute figures move with it.

On CUDA the contenders are timed in interleaved rounds too (since session 12): each is built,
called once (the first-call time) and warmed up on its own (its peak memory is measured then,
above what was allocated before it was built), then every round times one synchronized step of
each with CUDA events, so that clock and thermal drift over the run falls on every contender
alike. `--sequential` keeps the old order (all steps of one contender, then the next).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# First-call times count the kernel compiles of both compilers: thunder's disk cache and
# torch.compile's (inductor's) start empty unless the caller names them (THUNDER_CACHE_DIR,
# TORCHINDUCTOR_CACHE_DIR). Before session 9 only thunder's did: on a machine that had run the
# benchmark before, torch.compile's first call read its kernels from its cache.
import tempfile

if "THUNDER_CACHE_DIR" not in os.environ:
    os.environ["THUNDER_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-bench-cache-")
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-cache-")
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder  # noqa: E402
from models import llama, nanogpt  # noqa: E402


class Timer:
    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn, repeats: int, warmup: int = 3) -> float:
        """Median seconds per call of fn()."""
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


# ---- workloads: each returns {contender: callable making one step} ----------------------------


def _llama_config(device):
    if device == "cuda":
        return llama.Config(block_size=2048, vocab_size=128256, n_layer=4, n_head=32, n_query_groups=8, n_embd=2048,
                            intermediate_size=8192, rope_base=500000), 2, 2048, torch.bfloat16
    return llama.Config(block_size=256, vocab_size=4096, n_layer=2, n_head=8, n_query_groups=2, n_embd=256,
                        intermediate_size=688), 2, 128, torch.float32


def _model(device):
    cfg, B, T, dtype = _llama_config(device)
    torch.manual_seed(0)
    with torch.device(device):
        model = llama.GPT(cfg).to(dtype)
    idx = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    targets = torch.randint(0, cfg.vocab_size, (B * T,), device=device)
    return cfg, model, idx, targets


class _WithLoss(torch.nn.Module):
    """The model and its loss as one module, so each contender compiles the whole training step's
    forward: logits cast to float32 for the cross-entropy, as Llama training code does."""

    def __init__(self, model, vocab_size):
        super().__init__()
        self.model, self.vocab_size = model, vocab_size

    def forward(self, idx, targets):
        logits = self.model(idx)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab_size).float(), targets)


def gpt_train(device, contender):
    cfg, model, idx, targets = _model(device)
    fwd = _wrap(_WithLoss(model, cfg.vocab_size), contender)

    def step():
        loss = fwd(idx, targets)
        loss.backward()
        for p in model.parameters():
            p.grad = None

    step.jitted = fwd
    return step


def gpt_infer(device, contender):
    cfg, model, idx, _ = _model(device)
    fwd = _wrap(model, contender)

    def step():
        with torch.no_grad():
            fwd(idx)

    step.jitted = fwd
    return step


def gpt_decode(device, contender):
    cfg, model, idx, _ = _model(device)
    model.eval()
    dtype = next(model.parameters()).dtype
    model.set_kv_cache(1, device=device, dtype=dtype)
    fwd = _wrap(model, contender)
    prompt = idx[0, :16]
    n_new = 64 if device == "cuda" else 16

    def step():
        llama.generate(model, fwd, prompt, prompt.numel() + n_new)

    step.per = n_new  # report per token
    step.jitted = fwd
    return step


def _wrap(model, contender):
    if contender == "eager":
        return model
    if contender == "torch.compile":
        return torch.compile(model)
    if contender == COMPILE_GRAPHS:
        return torch.compile(model, mode="reduce-overhead")
    if contender == THUNDER_GRAPHS:
        return thunder.jit(model, plugins="reduce-overhead")
    return thunder.jit(model)


_fn = _wrap


def rmsnorm(device, contender):
    shape = (8192, 4096) if device == "cuda" else (2048, 1024)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(shape, device=device, dtype=dt, requires_grad=True)
    w = torch.randn(shape[-1], device=device, dtype=dt, requires_grad=True)
    g = torch.randn(shape, device=device, dtype=dt)

    def f(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    jf = _fn(f, contender)
    return lambda: torch.autograd.grad(jf(x, w), (x, w), g)


def gelu_chain(device, contender):
    n = 64 * 2**20 if device == "cuda" else 4 * 2**20
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(n // 4096, 4096, device=device, dtype=dt, requires_grad=True)
    w = torch.randn(4096, device=device, dtype=dt, requires_grad=True)
    b = torch.randn(4096, device=device, dtype=dt, requires_grad=True)
    g = torch.randn_like(x)
    jf = _fn(lambda x, w, b: torch.nn.functional.gelu(x * w + b), contender)
    return lambda: torch.autograd.grad(jf(x, w, b), (x, w, b), g)


def softmax(device, contender):
    shape = (16384, 4096) if device == "cuda" else (4096, 1024)
    x = torch.randn(shape, device=device)
    jf = _fn(lambda x: torch.softmax(x, -1), contender)
    return lambda: jf(x)


def overhead(device, contender):
    x = torch.randn(16, 16, device=device)

    def f(x):
        for _ in range(20):
            x = torch.sin(x) * 1.01 + 0.1
        return x

    jf = _fn(f, contender)
    calls = 100

    def step():
        # Back-to-back calls, as a training or serving loop makes them: the host time per call
        # (a lone call followed by a synchronization would time the GPU's wake-up instead).
        for _ in range(calls):
            jf(x)

    step.per = calls
    return step


def module_overhead(device, contender):
    """A jitted module's fixed cost per call: 400 small parameters (ResNet-50 has 320 parameters
    and buffers, BERT-base about 200), one of them used. Every call reads the module's state and
    keys the cache on all of it."""

    class Many(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(4, device=device)) for _ in range(400)])

        def forward(self, x):
            return x + self.ps[0]

    model = Many().eval()
    jm = _fn(model, contender)
    x = torch.randn(4, device=device)
    calls = 100

    def step():
        with torch.no_grad():
            for _ in range(calls):
                jm(x)

    step.per = calls
    return step


def cpu_chain(device, contender):
    x = torch.randn(16 * 2**20, device=device)
    jf = _fn(lambda x: torch.erf(torch.log1p(torch.exp(torch.sigmoid(x) - torch.tanh(x))) * 2.0 - 1.0), contender)
    return lambda: jf(x)


def cpu_mlp(device, contender):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(device)
    x = torch.randn(2048, 1024, device=device)
    f = _wrap(mlp, contender)

    def step():
        with torch.no_grad():
            f(x)

    return step


def cpu_gpt_train(device, contender):
    torch.manual_seed(0)
    cfg = nanogpt.GPTConfig(block_size=128, vocab_size=4096, n_layer=4, n_head=8, n_embd=256, dropout=0.0)
    model = nanogpt.GPT(cfg).to(device)
    idx = torch.randint(0, cfg.vocab_size, (4, 128), device=device)
    targets = torch.randint(0, cfg.vocab_size, (4, 128), device=device)
    fwd = _wrap(model, contender)

    def step():
        _, loss = fwd(idx, targets)
        loss.backward()
        for p in model.parameters():
            p.grad = None

    step.jitted = fwd
    return step


WORKLOADS = {
    "gpt_train": gpt_train,
    "gpt_infer": gpt_infer,
    "gpt_decode": gpt_decode,
    "rmsnorm": rmsnorm,
    "gelu_chain": gelu_chain,
    "softmax": softmax,
    "overhead": overhead,
    "module_overhead": module_overhead,
    "cpu_chain": cpu_chain,
    "cpu_mlp": cpu_mlp,
    "cpu_gpt_train": cpu_gpt_train,
}
CPU_ONLY = {"cpu_chain", "cpu_mlp", "cpu_gpt_train"}
CONTENDERS = ("eager", "torch.compile", "thunder")
# With --graphs: the contenders that replay CUDA graphs, and the workloads they run.
COMPILE_GRAPHS, THUNDER_GRAPHS = "torch.compile(reduce-overhead)", "thunder(reduce-overhead)"
GRAPH_CONTENDERS = (COMPILE_GRAPHS, THUNDER_GRAPHS)
GRAPH_WORKLOADS = {"gpt_infer", "gpt_decode", "overhead"}


def error_text(e: BaseException) -> str:
    """The class and first line of an exception, for a table cell."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def measure(name, device, contender, repeats):
    timer = Timer(device)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        step = WORKLOADS[name](device, contender)
        t0 = time.perf_counter()
        step()
        timer.sync()
        first = time.perf_counter() - t0
        t = timer(step, repeats)
    except Exception as e:  # a contender that fails is reported, not hidden
        return {"error": error_text(e)}
    per = getattr(step, "per", 1)
    out = {"median_s": t / per, "first_call_s": first}
    if device == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def time_interleaved(builders, device, repeats=20, warmup=2):
    """builders: {contender: a callable that builds its step}. The contenders are built and
    warmed up one by one (first-call time; on CUDA the peak memory, above what was allocated
    before the contender was built), then timed in rounds of one step each, so that each median
    sees the same load (a shared CPU) or the same clocks and heat (a GPU). CUDA steps are
    synchronized and timed with events; the host's time inside each step (from an idle GPU, no
    synchronization in it) is kept too: a step whose host time is its step time is host-bound. A
    contender that fails, when built or in any round, gets its error instead of a time and drops
    out of the later rounds."""
    cuda = device == "cuda"
    steps, out = {}, {}
    for c, build in builders.items():
        step = None  # a contender that failed keeps nothing alive while the next one is measured
        if cuda:
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        try:
            step = build()
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            out[c] = {"first_call_s": time.perf_counter() - t0}
            for _ in range(warmup):
                step()
            if cuda:
                torch.cuda.synchronize()
                out[c]["peak_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
            steps[c] = step
        except Exception as e:  # a contender that fails is reported, not hidden
            out[c] = {"error": error_text(e)}
    times = {c: [] for c in steps}
    host = {c: [] for c in steps}
    for _ in range(repeats):
        for c, step in list(steps.items()):
            try:
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    h0 = time.perf_counter()
                    step()
                    host[c].append(time.perf_counter() - h0)
                    end.record()
                    torch.cuda.synchronize()
                    times[c].append(start.elapsed_time(end) / 1e3)
                else:
                    t0 = time.perf_counter()
                    step()
                    times[c].append(time.perf_counter() - t0)
            except Exception as e:
                out[c]["error"] = error_text(e)
                del steps[c], times[c], host[c]
    for c, ts in times.items():
        out[c]["median_s"] = statistics.median(ts) / getattr(steps[c], "per", 1)
        if host[c]:
            out[c]["host_median_s"] = statistics.median(host[c]) / getattr(steps[c], "per", 1)
    return out


def measure_interleaved(name, device, contenders=CONTENDERS, repeats=20, warmup=2):
    """time_interleaved over the contenders of one workload."""
    return time_interleaved({c: (lambda c=c: WORKLOADS[name](device, c)) for c in contenders}, device, repeats, warmup)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--graphs", action="store_true", help="add the CUDA-graph contenders (CUDA only)")
    ap.add_argument("--contenders", default="", help="comma-separated subset of the contenders (CUDA; default all)")
    ap.add_argument("--sequential", action="store_true",
                    help="CUDA: time all steps of one contender, then the next (before session 12)")
    args = ap.parse_args(argv)
    if args.graphs and args.device != "cuda":
        ap.error("--graphs needs --device cuda")
    names = [n for n in (args.only.split(",") if args.only else WORKLOADS) if n]
    if args.device == "cuda":
        names = [n for n in names if n not in CPU_ONLY]
    load = "load average %.2f %.2f %.2f" % os.getloadavg()
    results = {}
    for name in names:
        if args.device == "cpu":
            results[name] = measure_interleaved(name, args.device, repeats=args.repeats)
        else:
            contenders = CONTENDERS + (GRAPH_CONTENDERS if args.graphs and name in GRAPH_WORKLOADS else ())
            if args.contenders:
                contenders = tuple(c for c in contenders if c in args.contenders.split(","))
            if args.sequential:
                results[name] = {c: measure(name, args.device, c, args.repeats) for c in contenders}
            else:
                results[name] = measure_interleaved(name, args.device, contenders, args.repeats, warmup=3)
    if args.device == "cuda":
        dev = torch.cuda.get_device_name()
    else:
        dev = f"{platform.processor() or platform.machine()} x{os.cpu_count()}, {torch.get_num_threads()} threads"
    header = f"device {dev}, torch {torch.__version__}, commit {commit()}, {time.strftime('%Y-%m-%d %H:%M')}"
    header += f", {load} before, %.2f %.2f %.2f after" % os.getloadavg()
    print(header)
    graphs = any(COMPILE_GRAPHS in r for r in results.values())
    shown = CONTENDERS + (GRAPH_CONTENDERS if graphs else ())
    ratios = [("thunder vs eager", "eager", "thunder"), ("thunder vs compile", "torch.compile", "thunder")]
    if graphs:
        ratios.append(("graphs: thunder vs compile", COMPILE_GRAPHS, THUNDER_GRAPHS))
    print("| workload | " + " | ".join(shown) + " | " + " | ".join(r[0] for r in ratios)
          + " | peak GiB " + "/".join(shown) + " | first call s " + "/".join(shown) + " |")
    print("|---" * (1 + len(shown) + len(ratios) + 2) + "|")
    for name, r in results.items():
        unit, k = ("us", 1e6) if name == "overhead" else ("ms", 1e3)

        def cell(c):
            if c not in r:
                return "-"
            return f"{r[c]['median_s'] * k:.3f} {unit}" if "median_s" in r[c] else f"fails: {r[c]['error']}"

        def ratio(a, b):
            ok = a in r and b in r and "median_s" in r[a] and "median_s" in r[b]
            return f"{r[a]['median_s'] / r[b]['median_s']:.2f}x" if ok else "-"

        peak = "/".join(f"{r[c]['peak_gib']:.2f}" if "peak_gib" in r.get(c, {}) else "-" for c in shown)
        first = "/".join(f"{r[c]['first_call_s']:.2f}" if "first_call_s" in r.get(c, {}) else "-" for c in shown)
        print("| " + name + " | " + " | ".join(cell(c) for c in shown) + " | "
              + " | ".join(ratio(a, b) for _, a, b in ratios) + f" | {peak} | {first} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
