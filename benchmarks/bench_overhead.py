"""Per-call overhead: a jitted single `add` on small CPU tensors, against eager and torch.compile.

Prints a table in microseconds per call with ratios, and the device, versions and commit, so the
figures can be recorded. Run: `make bench` or `PYTHONPATH=python python benchmarks/bench_overhead.py`.
"""

import argparse
import os
import sys
import platform
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder


def per_call_us(fn, args, iters: int, repeats: int = 5) -> float:
    for _ in range(max(iters // 10, 10)):
        fn(*args)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = p.parse_args()

    def add(a, b):
        return a + b

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    rows = [("eager", per_call_us(add, (a, b), args.iters))]
    jadd = thunder.jit(add)
    torch.testing.assert_close(jadd(a, b), add(a, b))
    rows.append(("thunder.jit", per_call_us(jadd, (a, b), args.iters)))
    if not args.no_compile:
        try:
            cadd = torch.compile(add)
            cadd(a, b)
            rows.append(("torch.compile", per_call_us(cadd, (a, b), args.iters)))
        except Exception as e:  # no C++ compiler for inductor, say
            print(f"torch.compile unavailable: {type(e).__name__}: {e}")
    eager = rows[0][1]
    print(f"# per-call time of add on 4x4 float32 CPU tensors ({args.iters} calls, best of 5)")
    print(f"# device: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"python {platform.python_version()}, commit {commit()}")
    print(f"{'variant':<15}{'us/call':>10}{'vs eager':>10}")
    for name, us in rows:
        print(f"{name:<15}{us:>10.2f}{us / eager:>9.2f}x")
    assert thunder.cache_misses(jadd) == 1


if __name__ == "__main__":
    main()
