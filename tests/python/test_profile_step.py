"""benchmarks/profile_step.py's accounting on synthetic timelines (the GPU figures it prints come
from torch.profiler on a GPU; these check the arithmetic on spans we know)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.profile_step import host_by_symbol, host_during, host_waits, idle_gaps  # noqa: E402


def test_idle_gaps_counts_the_time_between_kernels_per_step():
    # Two steps: kernels [0, 10), [5, 12) overlap; gaps of 8 (12 -> 20) and 30 (25 -> 55).
    spans = [(0, 10, "a"), (5, 12, "b"), (20, 25, "c"), (55, 60, "d")]
    idle = idle_gaps(spans, iters=2)
    assert idle["wall_us"] == 30 and idle["busy_us"] == (12 + 5 + 5) / 2
    assert idle["gaps"] == [(30, "c", "d"), (8, "b", "c")]
    assert idle["gap_ranges"] == [(25, 55), (12, 20)]


def test_host_during_a_gap_lists_the_longest_host_events_that_began_in_it():
    host = [(0, 100, "step"), (12, 15, "aten::empty"), (13, 19, "thunder::cudaFusion0"), (30, 31, "late")]
    assert host_during(host, 12, 20) == ["thunder::cudaFusion0 6", "aten::empty 3"]


def test_host_waits_and_time_by_symbol_per_step():
    host = [(0, 40, "cudaDeviceSynchronize"), (50, 52, "cudaMemcpyAsync"), (60, 70, "aten::mm"),
            (0, 8, "thunder::cudaFusion3"), (10, 14, "thunder::cudaFusion7"), (20, 30, "thunder::torch.matmul")]
    waits = host_waits(host, iters=2)
    assert waits == {"cudaDeviceSynchronize": (0.5, 20.0), "cudaMemcpyAsync": (0.5, 1.0)}
    by = host_by_symbol(host, iters=2)
    assert by == {"fusion": (1.0, 6.0), "torch.matmul": (0.5, 5.0)}
    assert list(by) == ["fusion", "torch.matmul"]  # most time first
