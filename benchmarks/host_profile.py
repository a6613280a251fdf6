"""Where the host time of a small jitted call goes: back-to-back calls of the `overhead`
workload's function (20 x sin chain on [16, 16]) timed for eager, torch.compile and thunder,
then thunder's calls under cProfile.

    python -m benchmarks.host_profile [--device cuda] [--calls 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

import thunder


def f(x):
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


def add(a, b):
    return a + b


def per_call(fn, args, calls, sync):
    for _ in range(50):
        fn(*args)
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args(argv)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    x = torch.randn(16, 16, device=args.device)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    jf, ja = thunder.jit(f), thunder.jit(add)
    for name, fn, fargs in (("eager sin chain", f, (x,)), ("compile sin chain", torch.compile(f), (x,)),
                            ("thunder sin chain", jf, (x,)), ("eager cpu add", add, (a, b)),
                            ("thunder cpu add", ja, (a, b))):
        print(f"{name:22s} {per_call(fn, fargs, args.calls, sync):8.2f} us/call")
    print(thunder.last_traces(jf)[-1])
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        jf(x)
    sync()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    if args.device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(20):
                jf(x)
            sync()
        print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))


if __name__ == "__main__":
    main()
