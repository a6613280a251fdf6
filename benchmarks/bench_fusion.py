"""Fused kernels against eager PyTorch and torch.compile, in one run.

GPU (CUDA): a GELU chain, RMSNorm forward+backward and softmax, as achieved bandwidth against the
measured device-to-device copy bandwidth. CPU: a chain of 8 elementwise ops on 16M float32
elements. Also the cold compile of 30 kernels with an empty disk cache, and a new process that
reuses the disk cache. Prints one table with ratios, the device, versions and commit.

    PYTHONPATH=python python benchmarks/bench_fusion.py [--cpu] [--gpu] [--compile-time]
"""

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder


def cuda_time(fn, *args, iters=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / iters / 1e3)
    return best


def cpu_time(fn, *args, iters=10):
    fn(*args)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn(*args)
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def gelu_chain(x, w, b):
    return torch.nn.functional.gelu(x * w + b)


def softmax(x):
    return torch.softmax(x, dim=-1)


def rms_norm(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)


def fwd_bwd(f):
    """A training step of f: forward, then the gradients of x and w for the cotangent g."""

    def step(x, w, g):
        return torch.autograd.grad(f(x, w), (x, w), g)

    return step


def chain8(a, b):
    return ((((a * b + 1.0) * 0.5 - b).abs() + a) / 3.0 - a * a).relu()


def variants(fn, compile_ok=True):
    out = [("eager", fn), ("thunder", thunder.jit(fn))]
    if compile_ok:
        try:
            out.append(("torch.compile", torch.compile(fn)))
        except Exception as e:
            print(f"torch.compile unavailable: {e}")
    return out


def row(name, size_bytes, times, copy_bw=None):
    eager = times.get("eager")
    parts = [f"{name:<22}"]
    for k in ("eager", "thunder", "torch.compile"):
        t = times.get(k)
        parts.append(f"{t * 1e6:>10.1f}" if t else f"{'-':>10}")
    parts.append(f"{eager / times['thunder']:>8.2f}x")
    tc = times.get("torch.compile")
    parts.append(f"{tc / times['thunder']:>8.2f}x" if tc else f"{'-':>9}")
    if copy_bw:
        bw = size_bytes / times["thunder"] / 1e9
        parts.append(f"{bw:>9.0f} GB/s {100 * bw / copy_bw:>5.1f}% of copy")
    print(" ".join(parts))


def gpu(args):
    dev = "cuda"
    n = 1 << 28  # bytes for the copy
    src = torch.empty(n // 4, device=dev)
    dst = torch.empty_like(src)
    t = cuda_time(lambda: dst.copy_(src))
    copy_bw = 2 * n / t / 1e9
    print(f"device-to-device copy: {copy_bw:.0f} GB/s (read + write)")
    print(f"{'case':<22} {'eager us':>10} {'thunder us':>10} {'compile us':>10} {'vs eager':>9} {'vs compile':>9}  bandwidth")
    for dtype in (torch.float32, torch.bfloat16):
        tag = "f32" if dtype == torch.float32 else "bf16"
        x = torch.randn(16384, 8192, device=dev, dtype=dtype)
        w = torch.randn(8192, device=dev, dtype=dtype)
        b = torch.randn(8192, device=dev, dtype=dtype)
        times = {k: cuda_time(f, x, w, b) for k, f in variants(gelu_chain, not args.no_compile)}
        torch.testing.assert_close(thunder.jit(gelu_chain)(x, w, b), gelu_chain(x, w, b), atol=2e-2, rtol=2e-2)
        row(f"gelu chain {tag}", 2 * x.numel() * x.element_size(), times, copy_bw)
        times = {k: cuda_time(f, x) for k, f in variants(softmax, not args.no_compile)}
        torch.testing.assert_close(thunder.jit(softmax)(x), softmax(x), atol=2e-2, rtol=2e-2)
        row(f"softmax {tag}", 2 * x.numel() * x.element_size(), times, copy_bw)
        xr = torch.randn(16384, 4096, device=dev, dtype=dtype, requires_grad=True)
        wr = torch.randn(4096, device=dev, dtype=dtype, requires_grad=True)
        g = torch.randn(16384, 4096, device=dev, dtype=dtype)
        try:
            fns = [(k, fwd_bwd(f)) for k, f in variants(rms_norm, not args.no_compile)]
            ref = fwd_bwd(rms_norm)(xr, wr, g)
            got = dict(fns)["thunder"](xr, wr, g)
            torch.testing.assert_close(got[0], ref[0], atol=5e-2, rtol=5e-2)
            times = {k: cuda_time(f, xr, wr, g, iters=20) for k, f in fns}
            # the least traffic: forward reads x and writes y; backward reads x and g and writes
            # gx (w, gw and the saved per-row statistics are small)
            row(f"rms_norm fwd+bwd {tag}", 5 * xr.numel() * xr.element_size(), times, copy_bw)
        except Exception as e:
            print(f"rms_norm fwd+bwd {tag}: {type(e).__name__}: {str(e)[:200]}")


def cpu(args):
    a = torch.randn(1 << 24)
    b = torch.randn(1 << 24)
    fused = thunder.jit(chain8, executors=["fuser"])
    torch.testing.assert_close(fused(a, b), chain8(a, b))
    times = {"eager": cpu_time(chain8, a, b), "thunder": cpu_time(fused, a, b)}
    if not args.no_compile:
        try:
            c = torch.compile(chain8)
            times["torch.compile"] = cpu_time(c, a, b)
        except Exception as e:
            print(f"torch.compile unavailable: {e}")
    print(f"{'case':<22} {'eager us':>10} {'thunder us':>10} {'compile us':>10} {'vs eager':>9} {'vs compile':>9}")
    row("8 ops, 16M f32 (CPU)", 0, times)


COLD = """
import os, sys, time, torch, thunder
from thunder import _C
dev = sys.argv[1]
x = torch.randn(64, 64, device=dev)
w = torch.randn(64, 64, device=dev)
def f(x, w):
    for i in range(30):  # 30 regions, each a distinct kernel, separated by matmuls
        x = ((x * (1.0 + i / 64) + i).tanh() * 0.5 + 0.25) @ w
    return x
jf = thunder.jit(f, executors=["fuser"])
t0 = time.perf_counter(); jf(x, w)
if dev == "cuda": torch.cuda.synchronize()
t = time.perf_counter() - t0
s = _C.fusion_stats()
print(f"{t:.3f} {s['compiled']} {s['disk_hits']}")
"""


def compile_time(device):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, THUNDER_CACHE_DIR=d)
        run = lambda: subprocess.check_output([sys.executable, "-c", COLD, device], env=env, text=True).split()
        cold = run()
        warm = run()
    print(f"cold first call, 30 kernels ({device}): {float(cold[0]):.2f} s wall, {cold[1]} compiled")
    print(f"new process, warm disk cache ({device}): {float(warm[0]):.2f} s wall, {warm[1]} compiled, {warm[2]} loaded from disk")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--compile-time", action="store_true")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = p.parse_args()
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine()
    print(f"# {name}, torch {torch.__version__}, python {platform.python_version()}, commit {commit()}")
    if args.gpu:
        gpu(args)
    if args.cpu:
        cpu(args)
    if args.compile_time:
        compile_time("cuda" if torch.cuda.is_available() else "cpu")


if __name__ == "__main__":
    main()
