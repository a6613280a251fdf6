"""Where a workload's time goes: CUDA kernel time grouped by kernel, for eager, torch.compile and
thunder side by side, and the host time per call.

    python -m benchmarks.profile_step [--workload gpt_train] [--top 25]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.run import CONTENDERS, WORKLOADS


def wide_handoffs(trace_text, min_numel=1):
    """The float32 and float64 tensors one fused kernel of a printed trace stores and another reads
    (of at least min_numel elements), as (name, elements) pairs: what a kernel could have computed
    from what it reads, or read at 16 bits."""
    import math
    import re

    dtypes = dict(re.findall(r'# (t\w+): "\S+ (\w+)\[', trace_text))
    shapes = dict(re.findall(r'# (t\w+): "\S+ \w+\[([^\]]*)\]', trace_text))
    outs, ins = set(), set()
    for o, a in re.findall(r"^  \[([^\]]*)\] = \w+Fusion\d+\(([^)]*)\)", trace_text, re.M):
        outs.update(x.strip() for x in o.split(","))
        ins.update(x.strip() for x in a.split(","))
    found = []
    for t in sorted(outs & ins):
        if dtypes.get(t) not in ("f32", "f64"):
            continue
        n = math.prod(int(x) for x in shapes[t].split(",") if x.strip())
        if n >= min_numel:
            found.append((t, n))
    return found


def profiled_events(step, iters=3, warmup=2):
    """torch.profiler's events (host and CUDA) of `iters` steps after `warmup` unprofiled ones."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    return prof.events()


def kernel_times(step, iters=3):
    events = profiled_events(step, iters)
    by_kernel = defaultdict(float)
    count = defaultdict(int)
    spans, host = [], []
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if e.name.startswith("thunder::"):
                continue  # the GPU-side shadow of a runtime range (user annotation), not a kernel
            by_kernel[e.name] += e.device_time_total / iters
            count[e.name] += 1
            spans.append((e.time_range.start, e.time_range.end, e.name))
        else:
            host.append((e.time_range.start, e.time_range.end, e.name))
    cpu_total = sum(e.self_cpu_time_total for e in events) / iters
    idle = idle_gaps(spans, iters)
    idle["host"] = [host_during(host, s, e) for s, e in idle.pop("gap_ranges")]
    idle["waits"] = host_waits(host, iters)
    idle["by_symbol"] = host_by_symbol(host, iters)
    return by_kernel, {k: v // iters for k, v in count.items()}, cpu_total, idle


def host_during(host, start, end, top=4):
    """What the host did while the GPU sat idle in [start, end]: the longest host events that
    began in the gap (an op, a runtime call), with their durations in us."""
    inside = [(e - s, name) for s, e, name in host if start <= s <= end]
    inside.sort(key=lambda x: -x[0])
    return [f"{name[:40]} {d:.0f}" for d, name in inside[:top]]


def host_by_symbol(host, iters):
    """Host microseconds per step by thunder trace symbol (the runtime's `thunder::` ranges,
    kernel launch and output allocation included): the per-call cost of each executor."""
    by = defaultdict(lambda: [0, 0.0])
    for s, e, name in host:
        if name.startswith("thunder::"):
            kind = name[len("thunder::"):]
            kind = "fusion" if kind.startswith(("cudaFusion", "cpuFusion")) else kind
            by[kind][0] += 1
            by[kind][1] += e - s
    return {k: (c / iters, t / iters) for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])}


def host_waits(host, iters):
    """Host calls that wait for the GPU or copy through the host (synchronizations, memcpy,
    cudaMalloc/cudaFree): count and microseconds per step. Any of these in a step lets the GPU
    run dry while the host catches up."""
    waits = defaultdict(lambda: [0, 0.0])
    for s, e, name in host:
        if any(k in name for k in ("ynchronize", "Memcpy", "cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "aten::item", "_local_scalar_dense")):
            waits[name][0] += 1
            waits[name][1] += e - s
    return {k: (c / iters, t / iters) for k, (c, t) in sorted(waits.items(), key=lambda kv: -kv[1][1])}


def idle_gaps(spans, iters, top=8):
    """The GPU's idle time between kernels (union of kernel intervals against the first-to-last
    span), per step, and the longest gaps with the kernels around them."""
    spans.sort()
    gaps, busy, end, prev = [], 0.0, None, None
    for s, e, name in spans:
        if end is None:
            start0, end = s, e
            busy = e - s
        elif s > end:
            gaps.append((s - end, prev, name, end, s))
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
        prev = name
    wall = (end - start0) if spans else 0.0
    gaps.sort(key=lambda g: -g[0])
    return {"wall_us": wall / iters, "busy_us": busy / iters, "gaps": [g[:3] for g in gaps[:top]],
            "gap_ranges": [g[3:] for g in gaps[:top]]}


def host_step_time(step, iters=10):
    """Seconds the host spends inside step() (no synchronization inside), and the synchronized
    step time, both per step: equal when the step is host-bound."""
    import time
    torch.cuda.synchronize()
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(iters):
        h = time.perf_counter()
        step()
        host += time.perf_counter() - h
    torch.cuda.synchronize()
    return host / iters, (time.perf_counter() - t0) / iters


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_train")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset of " + ", ".join(CONTENDERS))
    args = ap.parse_args(argv)
    for contender in args.contenders.split(","):
        step = WORKLOADS[args.workload]("cuda", contender)
        kernels, counts, cpu_us, idle = kernel_times(step)
        host_s, step_s = host_step_time(step)
        total = sum(kernels.values())
        print(f"== {contender}: {total / 1e3:.2f} ms of kernels in {sum(counts.values())} launches, "
              f"{cpu_us / 1e3:.2f} ms profiled host time per step")
        print(f"   unprofiled: host inside step() {host_s * 1e3:.2f} ms, synchronized step {step_s * 1e3:.2f} ms; "
              f"profiled GPU span {idle['wall_us'] / 1e3:.2f} ms, busy {idle['busy_us'] / 1e3:.2f} ms")
        for (gap, before, after), doing in zip(idle["gaps"], idle["host"]):
            print(f"   idle {gap:8.1f} us  after {before[:60]}  before {after[:60]}")
            print(f"        host: {'; '.join(doing)}")
        for name, (n, us) in list(idle["waits"].items())[:8]:
            print(f"   host wait {name[:50]}: {n:g} per step, {us:.1f} us")
        for name, (n, us) in list(idle["by_symbol"].items())[:14]:
            print(f"   host {us:8.1f} us  x{n:<4g} {name[:60]}  ({us / n:.1f} us per call)")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {us / 1e3:8.3f} ms  x{counts[name]:<4d} {name[:110]}")


if __name__ == "__main__":
    main()
