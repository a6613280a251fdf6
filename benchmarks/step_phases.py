"""gpt_train's kernel time by phase (forward, backward) and by kernel, for torch.compile and thunder
side by side: each phase is synchronized, so a kernel is counted in the phase that launched it.
The step is the benchmark's (benchmarks.run gpt_train). CUDA only.

    python -m benchmarks.step_phases [--rounds 3] [--top 40]
"""
import argparse
import re
from collections import defaultdict
import torch
from torch.profiler import ProfilerActivity, profile, record_function
from benchmarks.run import _model, _wrap, _WithLoss

def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    contenders = ["torch.compile", "thunder"]
    steps = {}
    for c in contenders:
        cfg, model, idx, targets = _model("cuda")
        fwd = _wrap(_WithLoss(model, cfg.vocab_size), c)
        steps[c] = (fwd, model, idx, targets)
        for _ in range(3):
            fwd(idx, targets).backward()
            for p in model.parameters(): p.grad = None
        torch.cuda.synchronize()
    R = args.rounds
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in range(R):
            for c in contenders:
                fwd, model, idx, targets = steps[c]
                torch.cuda.synchronize()
                with record_function(f"PH:{c}:fwd"):
                    loss = fwd(idx, targets); torch.cuda.synchronize()
                with record_function(f"PH:{c}:bwd"):
                    loss.backward(); torch.cuda.synchronize()
                for p in model.parameters(): p.grad = None
    windows, kern = [], []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if e.name.startswith(("thunder::", "PH:")): continue
            kern.append((e.time_range.start, e.time_range.end, e.name))
        elif e.name.startswith("PH:"):
            windows.append((e.time_range.start, e.time_range.end, e.name))
    def cat(n):
        if n.startswith("nvjet") or "gemm" in n or "cutlass" in n or "splitKreduce" in n: return "gemm"
        if "sdpa" in n or "cudnn" in n or "flash" in n or "fmha" in n: return "attention"
        if n.startswith(("cudaFusion", "triton")): return "fusion"
        if "Memset" in n or "Memcpy" in n: return "mem"
        return "aten:" + re.sub(r"<.*", "", n.replace("void ", ""))[:40]
    per = {}
    for ws, we, wn in windows:
        d = per.setdefault(wn, defaultdict(lambda: [0.0, 0]))
        for s, e, n in kern:
            if ws <= s <= we:
                d[n][0] += (e - s) / R; d[n][1] += 1
    for wn in sorted(per):
        d = per[wn]
        cats = defaultdict(float)
        for n, (t, k) in d.items(): cats[cat(n)] += t
        print(f"== {wn}: {sum(t for t, _ in d.values())/1e3:.3f} ms kernels, {sum(k for _, k in d.values())//R} launches")
        for k, v in sorted(cats.items(), key=lambda kv: -kv[1]):
            if v > 5: print(f"   {k:50s} {v:8.1f} us")
        for n, (t, k) in sorted(d.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"      {t:8.1f} us x{k//R:<4d} {n[:110]}")


if __name__ == "__main__":
    main()
