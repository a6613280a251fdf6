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


def kernel_times(step, iters=3):
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    by_kernel = defaultdict(float)
    count = defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_kernel[e.name] += e.device_time_total / iters
            count[e.name] += 1
    cpu_total = sum(e.self_cpu_time_total for e in prof.key_averages()) / iters
    return by_kernel, {k: v // iters for k, v in count.items()}, cpu_total


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_train")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset of " + ", ".join(CONTENDERS))
    args = ap.parse_args(argv)
    for contender in args.contenders.split(","):
        step = WORKLOADS[args.workload]("cuda", contender)
        kernels, counts, cpu_us = kernel_times(step)
        total = sum(kernels.values())
        print(f"== {contender}: {total / 1e3:.2f} ms of kernels in {sum(counts.values())} launches, "
              f"{cpu_us / 1e3:.2f} ms host time per step")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {us / 1e3:8.3f} ms  x{counts[name]:<4d} {name[:110]}")


if __name__ == "__main__":
    main()
