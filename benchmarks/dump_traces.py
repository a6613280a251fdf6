"""Writes the final forward and backward traces of a workload's thunder step, with a count of the
symbols that run outside fusions, so a profile's kernels can be matched to trace lines.

    python -m benchmarks.dump_traces [--workload gpt_train] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re

import thunder
from benchmarks.run import WORKLOADS


def unfused_counts(src: str) -> collections.Counter:
    counts = collections.Counter()
    for line in src.splitlines():
        m = re.match(r"\s*(?:[\w, ()\[\]]+=\s*)?([\w.]+)\(", line)
        if m and not re.match(r"(fusion|Fusion|cudaFusion|cpuFusion)\w*$", m.group(1).split(".")[-1]):
            counts[m.group(1)] += 1
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_train")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    step = WORKLOADS[args.workload]("cuda", "thunder")
    step()
    jitted = step.jitted
    os.makedirs(args.out, exist_ok=True)
    for kind, traces in (("forward", thunder.last_traces(jitted)), ("backward", thunder.last_backward_traces(jitted))):
        if not traces:
            continue
        src = str(traces[-1])
        with open(os.path.join(args.out, f"{args.workload}_{kind}.py"), "w") as f:
            f.write(src)
        print(f"== {kind}: {len(src.splitlines())} lines; outside fusions:")
        for name, n in unfused_counts(src).most_common(30):
            print(f"  {n:4d} {name}")


if __name__ == "__main__":
    main()
