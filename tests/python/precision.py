"""Comparing a low-precision result with eager's the way the project's rule reads: as close to a
float64 run as eager is.

The fuser computes a chain of bfloat16 or float16 ops in float32 and rounds once, where eager
rounds after every op, so the two differ by a few units in the last place; neither is the truth.
The referee is the same function run in float64."""

from __future__ import annotations

import torch


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    return []


def assert_as_close_as_eager(got, eager, ref, ulps: float = 1.0, what: str = "") -> None:
    """Each element of `got` is at most eager's own error from the float64 `ref` plus `ulps` units in
    the last place of got's dtype at that value (a float32 computation rounded once is within half
    a unit). NaN where the referee has NaN, and infinities where its value overflows got's dtype."""
    gots, eagers, refs = _tensors(got), _tensors(eager), _tensors(ref)
    assert len(gots) == len(eagers) == len(refs), (what, len(gots), len(eagers), len(refs))
    for i, (g, e, r) in enumerate(zip(gots, eagers, refs)):
        assert g.shape == e.shape == r.shape, (what, i, g.shape, e.shape, r.shape)
        assert g.dtype == e.dtype, (what, i, g.dtype, e.dtype)
        if not g.is_floating_point():
            assert torch.equal(g, e), (what, i)
            continue
        g64, e64, r64 = g.detach().double().cpu(), e.detach().double().cpu(), r.detach().double().cpu()
        nan = r64.isnan()
        assert torch.equal(g64.isnan(), nan), f"{what} output {i}: NaN where float64 has none, or none where it has"
        # Infinities where float64's value rounds to one in the result's dtype (an overflow).
        rounded = r64.to(g.dtype).double()
        inf = rounded.isinf()
        assert torch.equal(g64[inf], rounded[inf]), f"{what} output {i}: infinities differ from float64's"
        finite = ~(nan | inf)
        fi = torch.finfo(g.dtype)
        allowed = (e64 - r64).abs().nan_to_num(posinf=0.0) + ulps * fi.eps * r64.abs() + fi.tiny
        err = (g64 - r64).abs()
        bad = finite & ~(err <= allowed)
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            raise AssertionError(
                f"{what} output {i}: {int(bad.sum())} of {g.numel()} elements further from float64 than eager; "
                f"at {idx}: got {g64[idx].item()!r}, eager {e64[idx].item()!r}, float64 {r64[idx].item()!r}")
