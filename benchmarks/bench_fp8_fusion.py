"""User code that casts to FP8 (the per-tensor scaled cast of torchao-style training and of
inference quantization), eager vs torch.compile vs thunder, in one process:

    python benchmarks/bench_fp8_fusion.py [--device cuda] [--rows 16384] [--cols 2048]

Each case is a producer, a scaled saturating cast of its output to FP8 and each row's amax of the
unscaled values (the next step's scale). thunder fuses the cast and the amax into the producer's
kernel; before (session 38) FP8 tensors left the fuser and the cast ran as ATen ops. Prints a
markdown table (median ms of CUDA-event-timed calls) and the versions; --out writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _cast(y, scale, fp8):
    m = torch.finfo(fp8).max
    y32 = y.float()
    return (y32 * scale).clamp(-m, m).to(fp8), y32.abs().amax(-1)


def rms_norm_e4m3(x, w, scale):
    return _cast(torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6), scale, E4M3)


def swiglu_e4m3(a, b, scale):
    return _cast(torch.nn.functional.silu(a) * b, scale, E4M3)


def residual_e5m2(g, r, scale):
    return _cast(g + r, scale, E5M2)


def _time(fn, args, device, repeats=20, warmup=3):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(*args)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        else:
            import time

            t = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    dev, M, K = args.device, args.rows, args.cols
    dt = torch.bfloat16
    torch.manual_seed(0)
    scale = torch.tensor(4.0, device=dev)
    cases = {
        f"RMSNorm -> e4m3 [{M}, {K}]": (rms_norm_e4m3, (torch.randn(M, K, device=dev, dtype=dt), torch.randn(K, device=dev, dtype=dt), scale)),
        f"SwiGLU -> e4m3 [{M}, {4 * K}]": (swiglu_e4m3, (torch.randn(M, 4 * K, device=dev, dtype=dt), torch.randn(M, 4 * K, device=dev, dtype=dt), scale)),
        f"residual add -> e5m2 [{M}, {K}]": (residual_e5m2, (torch.randn(M, K, device=dev, dtype=dt), torch.randn(M, K, device=dev, dtype=dt), scale)),
    }
    rows = []
    for name, (fn, a) in cases.items():
        jt, tc = thunder.jit(fn), torch.compile(fn)
        (t8, tmax), (e8, emax) = jt(*a), fn(*a)
        # Bit-equal where thunder rounds as eager (the CPU); CUDA's float32 chains may move a value to
        # the neighbouring FP8 value (tests/python/test_fp8_fusion.py).
        differ = float((t8.view(torch.uint8) != e8.view(torch.uint8)).float().mean())
        row = {"case": name, "eager_ms": _time(fn, a, dev), "compile_ms": _time(tc, a, dev), "thunder_ms": _time(jt, a, dev),
               "fusions": str(thunder.last_traces(jt)[-1]).count("Fusion"), "fp8_values_differing": differ,
               # (CUDA's float32 chains skip the bfloat16 roundings between ops: up to two ulps apart)
               "amax_close": bool(torch.allclose(tmax, emax, rtol=2**-6))}
        rows.append(row)
    device = torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu"
    print(f"device {device}, torch {torch.__version__}, commit {commit()}")
    print("| case | eager ms | torch.compile ms | thunder ms | vs eager | vs compile | thunder kernels | FP8 values differing from eager |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['eager_ms']:.3f} | {r['compile_ms']:.3f} | {r['thunder_ms']:.3f} | "
              f"{r['eager_ms'] / r['thunder_ms']:.2f}x | {r['compile_ms'] / r['thunder_ms']:.2f}x | {r['fusions']} | "
              f"{100 * r['fp8_values_differing']:.2f}% |")
        assert r["amax_close"], r
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "commit": commit, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
