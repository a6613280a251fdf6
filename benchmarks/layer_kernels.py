"""Kernel time of one Llama layer's pointwise pieces, forward and backward, at gpt_train's shapes
(CUDA): RMSNorm over [4096, 2048] bf16 computed in float32 (HF's form, squaring with pow(2)), and
the fused qkv projection's split into grouped-query heads with RoPE ([2, 2048, 3072] bf16 in, 32
query heads in 8 groups of head size 64). Eager, torch.compile and thunder; GPU time summed over
the kernels of a step (torch.profiler), with the four largest kernels.

    python -m benchmarks.layer_kernels [--only rms,rope] [--contenders thunder,...] [--device cpu]

With --device cpu (a check that the script runs; not the figures it is for) the median wall time
of a step is printed instead, at the same shapes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import thunder

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from models.llama import apply_rope  # noqa: E402

B, T, GROUPS, Q_PER_KV, HEAD = 2, 2048, 8, 4, 64


def rms(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(torch.bfloat16)


def rope(qkv, cos, sin):
    qkv = qkv.view(B, T, GROUPS, Q_PER_KV + 2, HEAD).permute(0, 2, 3, 1, 4)
    q, k, v = qkv.split((Q_PER_KV, 1, 1), dim=2)
    k = k.expand(B, GROUPS, Q_PER_KV, T, HEAD)
    v = v.expand(B, GROUPS, Q_PER_KV, T, HEAD)
    q, k, v = (t.reshape(B, -1, T, HEAD) for t in (q, k, v))
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def kernel_time(fn, args, grads, steps=20, device="cuda"):
    def step():
        outs = fn(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.autograd.backward(outs, grads)

    for _ in range(5):
        step()
    if device != "cuda":
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times), []
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("thunder::"):
            per[e.name] = per.get(e.name, 0.0) + e.device_time / steps
    return sum(per.values()), sorted(per.items(), key=lambda kv: -kv[1])[:4]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="rms,rope")
    ap.add_argument("--contenders", default="eager,torch.compile,thunder")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    dev, bf16 = args.device, torch.bfloat16
    torch.manual_seed(0)
    cases = {
        "rms": (rms, (torch.randn(4096, 2048, device=dev, dtype=bf16, requires_grad=True),
                      torch.randn(2048, device=dev, dtype=bf16, requires_grad=True)),
                [torch.randn(4096, 2048, device=dev, dtype=bf16)]),
        "rope": (rope, (torch.randn(B, T, GROUPS * (Q_PER_KV + 2) * HEAD, device=dev, dtype=bf16, requires_grad=True),
                        torch.randn(T, HEAD, device=dev, dtype=bf16), torch.randn(T, HEAD, device=dev, dtype=bf16)),
                 [torch.randn(B, GROUPS * Q_PER_KV, T, HEAD, device=dev, dtype=bf16) for _ in range(3)]),
    }
    make = {"eager": lambda f: f, "torch.compile": torch.compile, "thunder": thunder.jit}
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu (wall time per step)"
    print(f"device {name}, torch {torch.__version__}")
    for name in args.only.split(","):
        fn, inputs, grads = cases[name]
        for c in args.contenders.split(","):
            total, top = kernel_time(make[c](fn), inputs, grads, steps=20 if dev == "cuda" else 3, device=dev)
            print(f"{name:5s} {c:14s} {total:8.1f} us  " + "; ".join(f"{k[:40]} {v:.1f}" for k, v in top), flush=True)


if __name__ == "__main__":
    main()
