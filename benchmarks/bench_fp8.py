"""FP8 training with the fp8 executor (thunder/executors/fp8ex.py), in one process:

(a) step: the 4-layer Llama training workload (Llama-3.2-1B's width: n_embd 2048, 32 heads over
    8 KV groups, SwiGLU 8192, vocabulary 128256; batch 8, sequence 2048, bfloat16): one training
    step (forward, loss, backward, an in-place SGD update so that each step's weights are new and
    FP8 casts them again) for thunder FP8 (--recipe, and current scaling), thunder bf16 and
    torch.compile bf16. Median step ms (CUDA events) and peak memory allocated.
(c) casts (not by default): the FP8 casts of one step's tensor shapes alone, each to both layouts
    with its amax: the Triton kernel the fp8 executor runs on CUDA, and torch's ops (the cast, the
    amax and a transposed copy); ms and GB/s (bytes read and written).
(b) loss: 200 AdamW steps of a small Llama on a fixed synthetic token stream (a random Markov chain
    whose rows put their weight on a few successors, so there is something to learn) from one
    initialization, bf16 and FP8: both loss curves and the gap of the final loss (mean of the
    last 10 steps) in percent of bf16's.

    python benchmarks/bench_fp8.py --out fp8.json            # GPU: both parts
    python benchmarks/bench_fp8.py --device cpu --smoke      # toy sizes, checks the script

On CPU (or a GPU without FP8) the FP8 contender runs through the fp8 executor, whose linears then
all stay in the usual precision (the table's "fp8 linears" column says how many ran in FP8).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder  # noqa: E402
from models import llama  # noqa: E402
from thunder.executors import fp8ex  # noqa: E402


def _recipe(name: str, skip: tuple[str, ...]):
    return fp8ex.DelayedScaling(skip=skip) if name == "delayed" else fp8ex.CurrentScaling(skip=skip)


class WithLoss(torch.nn.Module):
    """The model and its loss as one module (logits to float32 for the cross-entropy)."""

    def __init__(self, model, vocab_size):
        super().__init__()
        self.model, self.vocab_size = model, vocab_size

    def forward(self, idx, targets):
        logits = self.model(idx)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab_size).float(), targets.reshape(-1))


def wrap(module, contender: str, recipe):
    # "thunder fp8 traced casts": the input and gradient casts written into the trace, fused by the
    # fuser into their producers (THUNDER_FP8_FUSED_CASTS=1 while it runs; the default keeps the
    # executor's Triton casts).
    if contender in ("thunder fp8", "thunder fp8 current", "thunder fp8 traced casts"):
        if contender.endswith("current"):
            recipe = fp8ex.CurrentScaling(skip=recipe.skip)
        return thunder.jit(module, executors=["fp8", *thunder.get_default_executors()], fp8_recipe=recipe)
    if contender == "thunder bf16":
        return thunder.jit(module)
    if contender == "torch.compile bf16":
        return torch.compile(module)
    raise ValueError(contender)


def fp8_linears(jitted) -> str:
    """'k of n': the linears of the last forward trace that ran in FP8, of all its linears."""
    try:
        text = str(thunder.last_traces(jitted)[-1])
    except TypeError:  # not a thunder function
        return ""
    fp8 = text.count("= fp8_linear(") + text.count("= fp8_linear_cast(")
    other = text.count("= linear_not_fp8(") + text.count("= torch.nn.functional.linear(")
    return f"{fp8} of {fp8 + other}"


class _casts_env:
    """THUNDER_FP8_FUSED_CASTS=1 while the "thunder fp8 traced casts" contender runs."""

    def __init__(self, contender):
        self.on = contender == "thunder fp8 traced casts"

    def __enter__(self):
        self.old = os.environ.get("THUNDER_FP8_FUSED_CASTS")
        if self.on:
            os.environ["THUNDER_FP8_FUSED_CASTS"] = "1"

    def __exit__(self, *exc):
        if self.on:
            if self.old is None:
                os.environ.pop("THUNDER_FP8_FUSED_CASTS", None)
            else:
                os.environ["THUNDER_FP8_FUSED_CASTS"] = self.old
        return False


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _release():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- (a) step time and memory ------------------------------------------------------------------


def step_config(device: str, smoke: bool):
    if smoke:
        cfg = llama.Config(block_size=64, vocab_size=512, n_layer=2, n_head=4, n_query_groups=2, n_embd=128,
                           intermediate_size=256)
        return cfg, 2, 64, (torch.bfloat16 if device == "cuda" else torch.float32)
    cfg = llama.Config(block_size=2048, vocab_size=128256, n_layer=4, n_head=32, n_query_groups=8, n_embd=2048,
                       intermediate_size=8192, rope_base=500000)
    return cfg, 8, 2048, torch.bfloat16


def time_step(contender, device, smoke, recipe, repeats, warmup):
    cfg, B, T, dtype = step_config(device, smoke)
    torch.manual_seed(0)
    with torch.device(device):
        model = llama.GPT(cfg).to(dtype)
    idx = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    targets = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    fwd = wrap(WithLoss(model, cfg.vocab_size), contender, recipe)
    # An in-place update per step: the weights change, so FP8 casts them once per step as in training.
    opt = torch.optim.SGD(model.parameters(), lr=1e-6, foreach=device == "cuda")

    def step():
        loss = fwd(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()
    _sync(device)
    first_s = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    _sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    row = {"contender": contender, "median_ms": statistics.median(times), "min_ms": min(times),
           "first_call_s": first_s, "peak_gib": peak, "fp8_linears": fp8_linears(fwd)}
    del fwd, model, opt
    _release()
    return row


# ---- (b) loss curves ---------------------------------------------------------------------------


def loss_config(smoke: bool):
    if smoke:
        return llama.Config(block_size=64, vocab_size=256, n_layer=2, n_head=4, n_query_groups=2, n_embd=128,
                            intermediate_size=256), 4, 64
    return llama.Config(block_size=256, vocab_size=2048, n_layer=4, n_head=8, n_query_groups=4, n_embd=512,
                        intermediate_size=1536), 16, 256


def markov_batches(vocab: int, B: int, T: int, steps: int, successors: int = 4, seed: int = 1234):
    """`steps` batches of (tokens, next tokens) from one stream of a fixed random Markov chain, and
    the chain's entropy rate in nats (the lowest loss a model can reach on it). Each token is
    followed by one of `successors` tokens, with weights from a Dirichlet(1)."""
    import bisect

    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, vocab, (vocab, successors), generator=g).tolist()
    # Dirichlet(1) weights: normalized exponential draws, from the generator (the stream does not
    # depend on the global random state).
    e = -torch.rand(vocab, successors, generator=g, dtype=torch.float64).log()
    probs = (e / e.sum(1, keepdim=True)).float()
    cum = probs.cumsum(1).tolist()
    n = steps * B * (T + 1)
    u = torch.rand(n, generator=g, dtype=torch.float64).tolist()
    out = [0] * n
    tok = 0
    for i in range(n):
        out[i] = tok
        tok = nxt[tok][min(bisect.bisect_right(cum[tok], u[i]), successors - 1)]
    stream = torch.tensor(out, dtype=torch.long)
    # Entropy of each token's successor distribution (successors that coincide merged), weighted
    # by how often the stream visits the token.
    row = torch.zeros(vocab, vocab, dtype=torch.float64)
    row.scatter_add_(1, torch.tensor(nxt), probs.double())
    row_entropy = -(row * row.clamp_min(1e-300).log()).sum(1)
    visits = torch.bincount(stream, minlength=vocab).double()
    entropy_rate = float((visits * row_entropy).sum() / visits.sum())
    seqs = stream.view(steps, B, T + 1)
    return [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in seqs], entropy_rate


def loss_curve(contender, device, smoke, recipe, steps, batches, lr=1e-3):
    cfg, _, _ = loss_config(smoke)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = llama.GPT(cfg).to(dtype)
    fwd = wrap(WithLoss(model, cfg.vocab_size), contender, recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for idx, targets in batches[:steps]:
        loss = fwd(idx.to(device), targets.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    linears = fp8_linears(fwd)
    del fwd, model, opt
    _release()
    return losses, linears


# ---- report ------------------------------------------------------------------------------------


def cast_shapes(smoke: bool) -> list[tuple[str, int, int]]:
    """(what, rows, columns) of the tensors one Llama step casts to FP8."""
    cfg, B, T, _ = step_config("cuda", smoke)
    M, C, H, V = B * T, cfg.n_embd, cfg.intermediate_size, cfg.vocab_size
    qkv = (cfg.n_head + 2 * cfg.n_query_groups) * cfg.head_size
    return [("activation [tokens, n_embd]", M, C), ("activation [tokens, intermediate]", M, H),
            ("gradient [tokens, qkv]", M, qkv), ("gradient [tokens, intermediate]", M, H),
            ("weight [intermediate, n_embd]", H, C), ("logits gradient [tokens, vocab]", M, V)]


CAST_CONFIGS = [(64, 128, 4, 8), (128, 64, 4, 8), (64, 64, 8, 4), (128, 128, 2, 8), (32, 128, 4, 4)]


def time_casts(device, smoke, repeats):
    from thunder.executors import fp8_triton

    rows = []
    for what, m, k in cast_shapes(smoke):
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        scale = torch.tensor([2.0], device=device)

        def with_torch():
            x8 = fp8ex._saturated(x, scale, torch.float8_e4m3fn)
            return x8, x8.t().contiguous(), x.abs().amax()

        ways = [("torch ops", with_torch)]
        if device == "cuda" and fp8_triton.available():
            # The executor's tiles, then others (BLOCK_M, BLOCK_K, TILES, warps) to choose from.
            for config in dict.fromkeys([fp8_triton.CONFIG, *CAST_CONFIGS]):
                ways.append((f"triton {config}", lambda config=config: fp8_triton.cast(
                    x, scale, torch.float8_e4m3fn, 448.0, m, True, True, True, config)))
        for name, fn in ways:
            fn()
            _sync(device)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                fn()
                _sync(device)
                times.append((time.perf_counter() - t) * 1e3)
            ms = statistics.median(times)
            rows.append({"tensor": what, "shape": [m, k], "way": name, "median_ms": ms,
                         "gb_s": 4 * m * k / ms / 1e6})  # 2 bytes read, 2 written per element
        del x
        _release()
    return rows


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help="toy sizes (checks the script end to end)")
    ap.add_argument("--parts", default="step,loss", help="comma-separated: step, loss, casts")
    ap.add_argument("--recipe", default="delayed", choices=["delayed", "current"])
    ap.add_argument("--skip", default="", help="comma-separated weight names kept out of FP8 (e.g. lm_head)")
    ap.add_argument("--contenders", default="thunder fp8,thunder fp8 current,thunder bf16,torch.compile bf16",
                    help="'thunder fp8' uses --recipe, 'thunder fp8 current' current scaling")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200, help="training steps of the loss comparison")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    args = ap.parse_args(argv)

    device, smoke = args.device, args.smoke
    skip = tuple(s for s in args.skip.split(",") if s)
    recipe = _recipe(args.recipe, skip)
    parts = set(args.parts.split(","))
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    if smoke and device == "cpu":
        # torch.compile's CPU build of the toy step takes minutes on a small machine; the wrapper is
        # the same on GPU.
        contenders = [c for c in contenders if not c.startswith("torch.compile")]
    steps = min(args.steps, 20) if smoke else args.steps
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "commit": commit(), "smoke": smoke, "recipe": recipe.key, "skip": list(skip),
        "fp8_available": fp8ex.fp8_available() if device == "cuda" else False,
    }
    print(f"# FP8 training, {doc['device']}, torch {doc['torch']}, commit {doc['commit']}, recipe {recipe.key}"
          + (" (smoke)" if smoke else ""))

    if "step" in parts:
        cfg, B, T, dtype = step_config(device, smoke)
        rows = []
        for c in contenders:
            try:
                with _casts_env(c):
                    rows.append(time_step(c, device, smoke, recipe, args.repeats, args.warmup))
            except Exception as e:  # one failing contender still leaves the others' numbers
                rows.append({"contender": c, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                _release()
            print(f"  {c}: {rows[-1]}", file=sys.stderr)
        doc["step"] = {"config": {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "intermediate": cfg.intermediate_size,
                                  "vocab": cfg.vocab_size, "batch": B, "seq": T, "dtype": str(dtype)}, "rows": rows}
        base = {r["contender"]: r.get("median_ms") for r in rows}
        fp8_ms = base.get("thunder fp8")
        print(f"\n## (a) training step: {cfg.n_layer}-layer Llama, n_embd {cfg.n_embd}, batch {B}, sequence {T}, "
              f"{str(dtype).removeprefix('torch.')}\n")
        print("| contender | median ms | min ms | thunder fp8's speedup over it | peak GiB | first call s "
              "| fp8 linears |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if "error" in r:
                print(f"| {r['contender']} | error: {r['error'][:120]} | | | | | |")
                continue
            speed = fp8_ms and r["median_ms"] / fp8_ms
            print(f"| {r['contender']} | {r['median_ms']:.2f} | {r['min_ms']:.2f} | {_fmt(speed, '.3f')}x | "
                  f"{_fmt(r['peak_gib'], '.2f')} | {r['first_call_s']:.1f} | {r['fp8_linears']} |")

    if "casts" in parts:
        rows = time_casts(device, smoke, args.repeats)
        doc["casts"] = rows
        print("\n## (c) FP8 casts to both layouts with the amax, bfloat16 in\n")
        print("| tensor | shape | way | median ms | GB/s |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['tensor']} | {r['shape'][0]} x {r['shape'][1]} | {r['way']} | {r['median_ms']:.3f} | "
                  f"{r['gb_s']:.0f} |")

    if "loss" in parts:
        cfg, B, T = loss_config(smoke)
        batches, entropy_rate = markov_batches(cfg.vocab_size, B, T, steps)
        curves, linears = {}, {}
        for c in ("thunder bf16", "thunder fp8"):
            with _casts_env(c):
                curves[c], linears[c] = loss_curve(c, device, smoke, recipe, steps, batches)
        tail = min(10, steps)
        final = {c: statistics.fmean(v[-tail:]) for c, v in curves.items()}
        gap = 100.0 * (final["thunder fp8"] - final["thunder bf16"]) / final["thunder bf16"]
        doc["loss"] = {"config": {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "vocab": cfg.vocab_size, "batch": B,
                                  "seq": T, "steps": steps, "optimizer": "AdamW lr 1e-3"},
                       "curves": curves, "final_mean_last": tail, "final": final, "gap_percent": gap,
                       "fp8_linears": linears["thunder fp8"], "initial_loss_uniform": math.log(cfg.vocab_size),
                       "entropy_rate": entropy_rate}
        print(f"\n## (b) loss, {steps} AdamW steps of a {cfg.n_layer}-layer Llama (n_embd {cfg.n_embd}, vocabulary "
              f"{cfg.vocab_size}) on a Markov-chain token stream, batch {B} x {T}\n")
        marks = sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1})
        print("| step | " + " | ".join(str(s + 1) for s in marks) + f" | final (mean of last {tail}) |")
        print("|---" * (len(marks) + 2) + "|")
        for c, v in curves.items():
            print(f"| {c} | " + " | ".join(f"{v[s]:.4f}" for s in marks) + f" | {final[c]:.4f} |")
        print(f"\nFP8 final loss gap: {gap:+.2f}% of bf16's (fp8 linears: {linears['thunder fp8']}); uniform guess "
              f"{math.log(cfg.vocab_size):.3f}, the chain's entropy rate (best possible) {entropy_rate:.3f}")

    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
