"""A workload's thunder step under cProfile: where the host time of the Python front door goes.

    python -m benchmarks.cprofile_step [--workload gpt_decode] [--device cuda] [--steps 5]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from benchmarks.run import WORKLOADS


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_decode")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    step = WORKLOADS[args.workload](args.device, "thunder")
    for _ in range(2):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
