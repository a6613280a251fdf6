"""Where a workload's first call goes: setup, first and second step times of the thunder contender
(run with THUNDER_DEBUG_FUSION=1 to list the kernels compiled late, at their first call).

    PYTHONPATH=python:tests/python python3 tools/first_call_probe.py [--workload gpt_train]
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from benchmarks.run import WORKLOADS  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_train")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    step = WORKLOADS[args.workload](args.device, "thunder")
    sync()
    t1 = time.perf_counter()
    step()
    sync()
    t2 = time.perf_counter()
    step()
    sync()
    t3 = time.perf_counter()
    print(f"{args.workload}: setup {t1 - t0:.2f} s, first step {t2 - t1:.2f} s, second step {t3 - t2:.3f} s")


if __name__ == "__main__":
    main()
