"""Where a workload's first call goes: setup, first and second step times of the thunder contender
(run with THUNDER_DEBUG_FUSION=1 to list the kernels compiled late, at their first call).

    PYTHONPATH=python:tests/python python3 tools/first_call_probe.py [--workload gpt_train]
        [--contender thunder] [--cold] [--profile N]

--cold points the kernel cache at a fresh folder (a first run on a new machine); --profile N prints
the N most expensive functions of the first step under cProfile (cumulative and own time).
"""

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt_train")
    ap.add_argument("--contender", default="thunder")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    if args.cold:
        os.environ["THUNDER_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-cold-")
    from benchmarks.run import WORKLOADS

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.device == "cuda":  # the process's CUDA start-up is not the contender's
        torch.ones(1, device="cuda") @ torch.ones(1, device="cuda")
        sync()
    t0 = time.perf_counter()
    step = WORKLOADS[args.workload](args.device, args.contender)
    sync()
    t1 = time.perf_counter()
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    step()
    sync()
    if prof:
        prof.disable()
    t2 = time.perf_counter()
    step()
    sync()
    t3 = time.perf_counter()
    print(f"{args.workload} ({args.contender}{', cold cache' if args.cold else ''}): setup {t1 - t0:.2f} s, "
          f"first step {t2 - t1:.2f} s, second step {t3 - t2:.3f} s")
    jitted = getattr(step, "jitted", None)
    if args.contender.startswith("thunder") and jitted is not None:
        import thunder

        traces = thunder.last_traces(jitted) + (thunder.last_backward_traces(jitted) or [])
        for t in traces:  # the passes that took time, from each trace's provenance line
            prov = (getattr(t, "provenance", None) or "").strip()
            if "took" in prov and not prov.endswith("(took 0 milliseconds)"):
                print("  ", prov)
    if prof:
        for key in ("cumulative", "tottime"):
            print(f"-- first step by {key}")
            pstats.Stats(prof, stream=sys.stdout).sort_stats(key).print_stats(args.profile)


if __name__ == "__main__":
    main()
