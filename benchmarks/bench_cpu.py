"""CPU workloads with transcendentals: eager vs torch.compile vs thunder's fused C++ kernels, in one
process. Median wall time of repeated calls after warm-up; the first call (compile) is timed too.

- `trans_chain`: sigmoid, tanh, exp, log1p and erf chained elementwise on 16M float32.
- `gelu_mlp`: Linear(1024, 4096), GELU (erf), Linear(4096, 1024) on a [2048, 1024] float32 batch,
  forward under torch.no_grad().

    PYTHONPATH=python python benchmarks/bench_cpu.py [--only trans_chain,gelu_mlp] [--repeats 15]

`run(only, repeats)` returns the rows (dicts) for a driver that collects several benchmarks.
"""

import argparse
import os
import sys
import platform
import statistics
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder


def trans_chain(x):
    return torch.erf(torch.log1p(torch.exp(torch.sigmoid(x) - torch.tanh(x))) * 2.0 - 1.0)


class GeluMLP(torch.nn.Module):
    def __init__(self, width=1024, hidden=4096):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def workloads():
    """name -> (function, inputs, tolerance)."""
    torch.manual_seed(0)
    mlp = GeluMLP().eval()
    return {
        "trans_chain": (trans_chain, (torch.randn(1 << 24),), 1e-5),
        "gelu_mlp": (mlp, (torch.randn(2048, 1024),), 1e-3),
    }


def timed(fn, args, repeats):
    """(first call seconds, median seconds of `repeats` calls after two warm-up calls)."""
    with torch.no_grad():
        t0 = time.perf_counter()
        fn(*args)
        first = time.perf_counter() - t0
        fn(*args)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def run(only=None, repeats=15):
    rows = []
    for name, (fn, args, tol) in workloads().items():
        if only and name not in only:
            continue
        contenders = {"eager": fn, "torch.compile": torch.compile(fn), "thunder": thunder.jit(fn, executors=["fuser"])}
        with torch.no_grad():
            ref = fn(*args)
            torch.testing.assert_close(contenders["thunder"](*args), ref, atol=tol, rtol=tol)
        row = {"name": name, "device": "cpu", "threads": torch.get_num_threads()}
        for k, f in contenders.items():
            first, median = timed(f, args, repeats)
            row[k] = median
            row[k + " first call"] = first
        rows.append(row)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated workload names")
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    load = os.getloadavg()
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"commit {commit()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    rows = run(set(a.only.split(",")) - {""}, a.repeats)
    print(f"{'workload':<14} {'eager ms':>9} {'compile ms':>10} {'thunder ms':>10} {'vs eager':>9} {'vs compile':>10}"
          f" {'compile 1st s':>13} {'thunder 1st s':>13}")
    for r in rows:
        print(f"{r['name']:<14} {r['eager'] * 1e3:>9.2f} {r['torch.compile'] * 1e3:>10.2f} {r['thunder'] * 1e3:>10.2f}"
              f" {r['eager'] / r['thunder']:>8.2f}x {r['torch.compile'] / r['thunder']:>9.2f}x"
              f" {r['torch.compile first call']:>13.2f} {r['thunder first call']:>13.2f}")
    load = os.getloadavg()
    print(f"# load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
