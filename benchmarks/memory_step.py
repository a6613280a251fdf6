"""Where a training step's peak memory comes from, per contender: memory held after building the
model, the forward's peak and what it leaves allocated (the saved tensors), the backward's peak
(CUDA).

    python -m benchmarks.memory_step [--workload gpt_train] [--contenders eager,torch.compile,thunder]
"""

from __future__ import annotations

import argparse
import gc

import torch

from benchmarks.run import CONTENDERS, _model, _wrap, _WithLoss


def gib(x):
    return f"{x / 2**30:6.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    args = ap.parse_args(argv)
    for contender in args.contenders.split(","):
        gc.collect()
        torch.cuda.empty_cache()
        cfg, model, idx, targets = _model("cuda")
        fwd = _wrap(_WithLoss(model, cfg.vocab_size), contender)
        for _ in range(2):  # compile and warm up
            fwd(idx, targets).backward()
            for p in model.parameters():
                p.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = fwd(idx, targets)
        torch.cuda.synchronize()
        after_fwd = torch.cuda.memory_allocated()
        fwd_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated()
        after_bwd = torch.cuda.memory_allocated()
        print(f"{contender:14s} GiB: model+inputs {gib(base)}  forward peak {gib(fwd_peak)}  after forward "
              f"{gib(after_fwd)} (saved {gib(after_fwd - base)})  backward peak {gib(bwd_peak)}  after backward "
              f"{gib(after_bwd)} (grads {gib(after_bwd - base)})")
        del loss, fwd, model


if __name__ == "__main__":
    main()
