"""Where a suite model's step time goes (CUDA): kernel time by kernel for each contender, and for
thunder the GPU time of each trace symbol (the runtime's `thunder::` ranges as the GPU saw them),
the GPU's idle time between kernels and the host time of a step.

    python -m benchmarks.profile_model --only gpt2,convnext_tiny --mode train [--contenders ...]

The models and their settings are `benchmarks.models`'s (and `benchmarks.models_unseen`'s). Writes one JSON file per model and mode
under --out when given, and prints a summary: the top kernels of each contender side by side,
then thunder's symbols by GPU time.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict

import torch
from benchmarks import models
from benchmarks.profile_step import (host_by_symbol, host_during, host_step_time, host_waits, idle_gaps,
                                     profiled_events, wide_handoffs)


def _profile(step, iters):
    kernels, counts, symbols, spans = defaultdict(float), defaultdict(int), defaultdict(lambda: [0, 0.0]), []
    host = []
    for e in profiled_events(step, iters, warmup=3):
        if e.device_type != torch.autograd.DeviceType.CUDA:
            host.append((e.time_range.start, e.time_range.end, e.name))
            continue
        if e.name.startswith("thunder::"):
            # The GPU-side span of a runtime range: from its first kernel's start to its last's end.
            kind = e.name[len("thunder::"):]
            symbols[kind][0] += 1
            symbols[kind][1] += e.device_time_total
            continue
        kernels[e.name] += e.device_time_total / iters
        counts[e.name] += 1
        spans.append((e.time_range.start, e.time_range.end, e.name))
    gaps = idle_gaps(spans, iters)
    during = [host_during(host, a, b) for a, b in gaps.pop("gap_ranges")]
    by_symbol = host_by_symbol(host, iters)
    return {
        "host_by_symbol_us": sorted(((k, t, c) for k, (c, t) in by_symbol.items()), key=lambda x: -x[1]),
        "host_waits": host_waits(host, iters),
        "kernel_us": sum(kernels.values()),
        "launches": sum(counts.values()) / iters,
        "gpu_wall_us": gaps["wall_us"], "gpu_busy_us": gaps["busy_us"],
        "longest_gaps": [(round(g, 1), a[:50], b[:50], h) for (g, a, b), h in zip(gaps["gaps"], during)],
        "kernels": sorted(((k, v, counts[k] // iters) for k, v in kernels.items()), key=lambda x: -x[1]),
        "symbols": sorted(((k, t / iters, c // iters) for k, (c, t) in symbols.items()), key=lambda x: -x[1]),
    }


def _dump_traces(step, folder, stem):
    """thunder's final forward (and backward) trace of a step, as text files."""
    import thunder

    os.makedirs(folder, exist_ok=True)
    fwd = thunder.last_traces(step.compiled)
    with open(os.path.join(folder, f"{stem}_forward.py"), "w") as f:
        f.write(str(fwd[-1]))
    bwd = thunder.last_backward_traces(step.compiled)
    if bwd:
        with open(os.path.join(folder, f"{stem}_backward.py"), "w") as f:
            f.write(str(bwd[-1]))


def run(name, mode, contenders, iters, top, traces=""):
    case = models.build_case(name, "cuda", True, torch.bfloat16)
    out = {"model": name, "mode": mode, "setting": case.setting, "contenders": {}}
    for c in contenders:
        models.release()
        try:
            step = models.make_step(case, mode, c)
            r = _profile(step, iters)
            for _ in range(3):  # (the first steps after the profiler ran slower: BERT 30 ms against 20)
                step()
            r["host_s"], r["step_s"] = host_step_time(step)
            if c == "thunder":
                import thunder

                bwd = thunder.last_backward_traces(step.compiled)
                if bwd:
                    found = wide_handoffs(str(bwd[-1]))
                    r["backward_wide_handoffs"] = [len(found), sum(n for _, n in found)]
            if traces and c == "thunder":
                _dump_traces(step, traces, f"{name}_{mode}")
        except Exception as e:
            r = {"error": models.error_text(e)}
        out["contenders"][c] = r
        step = None
    case = None
    models.release()
    print(f"\n== {name} {mode} ({out['setting']})")
    for c, r in out["contenders"].items():
        if "error" in r:
            print(f"  {c}: {r['error'][:300]}")
            continue
        print(f"  {c}: step {r['step_s'] * 1e3:.2f} ms (host {r['host_s'] * 1e3:.2f}), kernels "
              f"{r['kernel_us'] / 1e3:.2f} ms in {r['launches']:.0f} launches, GPU busy "
              f"{r['gpu_busy_us'] / 1e3:.2f} of {r['gpu_wall_us'] / 1e3:.2f} ms")
        for k, us, n in r["kernels"][:top]:
            print(f"      {us:9.1f} us {n:4d}x  {k[:110]}")
    t = out["contenders"].get("thunder", {})
    if "symbols" in t:
        print("  thunder by trace symbol (GPU span, us per step, calls):")
        for k, us, n in t["symbols"][:top]:
            print(f"      {us:9.1f} us {n:4d}x  {k[:110]}")
        print("  thunder's host time by trace symbol (us per step, calls; fusions together):")
        for k, us, n in t["host_by_symbol_us"][:top]:
            print(f"      {us:9.1f} us {n:6.0f}x  {k[:110]}")
        if "backward_wide_handoffs" in t:
            n, elems = t["backward_wide_handoffs"]
            print(f"  thunder's backward: {n} float32/float64 values one kernel stores for another ({elems} elements)")
        print("  host calls that wait (us per step):", {k[:40]: round(v[1]) for k, v in list(t["host_waits"].items())[:6]})
        print("  longest GPU gaps (us, kernel before, kernel after, host work in the gap):")
        for g in t["longest_gaps"][:5]:
            print(f"      {g}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", required=True, help="comma-separated models of the suite or of models_unseen")
    ap.add_argument("--mode", default="train", choices=("train", "infer", "amp", "both"),
                    help="amp: training under torch.autocast (bfloat16), float32 parameters")
    ap.add_argument("--contenders", default=",".join(models.CONTENDERS))
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--out", default="")
    ap.add_argument("--traces", action="store_true", help="write thunder's final traces under --out")
    args = ap.parse_args(argv)
    from benchmarks.models_unseen import these_models

    modes = models.MODES if args.mode == "both" else (args.mode,)
    with these_models(keep_suite=True):
        names = models.selected(args.only)
        return _profile_all(names, modes, args)


def _profile_all(names, modes, args):
    for name in names:
        for mode in modes:
            models.fresh_caches()
            r = run(name, mode, [c for c in args.contenders.split(",") if c], args.iters, args.top,
                    os.path.join(args.out, "traces") if args.traces and args.out else "")
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, f"profile_{name}_{mode}.json"), "w") as f:
                    json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
