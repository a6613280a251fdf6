"""The CI slice of the differential fuzzer: a fixed seed range, every executor set, no failure.
`make fuzz N=... START=...` runs more (tests/python/fuzz/fuzz.py)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz  # noqa: E402

SLICE = int(os.environ.get("THUNDER_FUZZ_SLICE", "40"))


def test_fuzz_slice(tmp_path):
    counts, failures = fuzz.run(range(SLICE), ["default", "fuser"], timeout=300, jobs=2,
                                out_dir=None, quiet=True)
    print(fuzz.summary(counts))
    report = "\n\n".join(f"seed {f['seed']} [{f['executors']}] {f['outcome']}: {f['detail']}\n{f['repro']}"
                         for f in failures[:5])
    assert not failures, f"{len(failures)} failures; the first:\n{report}"
    for name in ("default", "fuser"):
        assert sum(counts[name].values()) == SLICE


def test_a_crash_is_a_counted_failure(monkeypatch):
    # A worker killed by a signal while it runs a program: that program counts as a crash.
    monkeypatch.setenv("THUNDER_FUZZ_TEST_CRASH_SEED", "3")
    counts, failures = fuzz.run(range(2, 5), ["default"], timeout=300, jobs=1, out_dir=None, quiet=True)
    assert [(f["seed"], f["outcome"]) for f in failures] == [(3, "crash")]
    assert counts["default"]["crash"] == 1
    assert sum(counts["default"].values()) == 3
    assert "def prog(" in failures[0]["repro"]


def test_the_sign_of_a_nan_is_not_compared():
    # Seed 14472: copysign passes on the sign bit of a NaN, which IEEE 754 leaves unspecified
    # (eager's vectorized bfloat16 asin and the fuser's disagree): both runs read NaN as +1.0.
    src = "def prog(a, b):\n    t0 = torch.asin(b)\n    t2 = torch.copysign(a, t0)\n    return t2\n"
    assert fuzz._nan_signs_unspecified(src).splitlines()[2] == \
        "    t2 = torch.copysign(a, torch.nan_to_num(t0, nan=1.0))"
    program = ("import torch\n\n\ndef make_inputs():\n"
               "    return [torch.tensor([1.5, -2.0, 3.0]), -torch.tensor([float('nan'), 0.5, -0.25])]\n\n\n" + src)
    prog, make_inputs = fuzz._load(program)
    assert prog(*make_inputs()).tolist() == [1.5, -2.0, 3.0]  # the NaN (negative) reads as +1.0
    assert fuzz.check(program, ["fuser"], 0)[0] == "ok"
