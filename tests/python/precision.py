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


def assert_as_accurate_as_eager(got, eager, ref, slack: float = 1.1, what: str = "") -> None:
    """Tensor by tensor: `got`'s error from the float64 `ref`, as a norm and at its largest, at most
    eager's times `slack` (the largest plus a unit in the last place at ref's largest magnitude).
    For results that keep some of eager's roundings and drop others (a rounded value that moves
    through a cat or a slice): at a cancellation eager's luck and the kept rounding can put one
    element a unit or two further from float64 than eager's, with the tensor closer as a whole."""
    gots, eagers, refs = _tensors(got), _tensors(eager), _tensors(ref)
    assert len(gots) == len(eagers) == len(refs), (what, len(gots), len(eagers), len(refs))
    for i, (g, e, r) in enumerate(zip(gots, eagers, refs)):
        assert g.shape == e.shape == r.shape and g.dtype == e.dtype, (what, i, g.shape, e.shape, r.shape)
        g64, e64, r64 = g.detach().double().cpu(), e.detach().double().cpu(), r.detach().double().cpu()
        assert torch.isfinite(r64).all() and torch.isfinite(g64).all(), f"{what} output {i}: not finite"
        gn, en = (g64 - r64).norm().item(), (e64 - r64).norm().item()
        gm, em = (g64 - r64).abs().max().item(), (e64 - r64).abs().max().item()
        ulp = torch.finfo(g.dtype).eps * r64.abs().max().item()
        assert gn <= slack * en + ulp, f"{what} output {i}: error norm {gn:.3g} vs eager's {en:.3g}"
        assert gm <= slack * em + ulp, f"{what} output {i}: largest error {gm:.3g} vs eager's {em:.3g} (ulp {ulp:.3g})"

