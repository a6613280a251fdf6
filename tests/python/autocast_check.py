"""Comparing one call under torch.autocast with eager's: thunder.jit(fn) and fn run under the same
autocast region (and fn once more without it, the float32 reference); results' dtypes must be
equal exactly and thunder's values as close to float32 as eager autocast's (test_autocast.py's
rule); a call eager refuses under autocast must be refused by thunder too. Gradients: forward
under autocast, backward outside it, as users write it.

Used by test_autocast_ops.py (every op of the OpInfo tables, nn.functional calls models make).
"""

from __future__ import annotations

import torch

from thunder import _C

NOISE = 2.0


class Mismatch(AssertionError):
    pass


def leaves(x) -> list:
    return [t for t in _C.tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _real(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.double() if t.dtype != torch.float64 else t


def within_noise(actual: torch.Tensor, ref: torch.Tensor, f32: torch.Tensor, what: str) -> None:
    """thunder's `actual` against eager autocast's `ref` and eager float32's `f32`: same dtype and
    shape; where ref is not finite, the same value; elsewhere an error against f32 at most NOISE
    times ref's (the largest over the tensor) plus one rounding step of a half type at the values'
    magnitude and a float32 floor."""
    if actual.dtype != ref.dtype:
        raise Mismatch(f"{what}: dtype {actual.dtype}, eager's {ref.dtype}")
    if actual.shape != ref.shape:
        raise Mismatch(f"{what}: shape {tuple(actual.shape)}, eager's {tuple(ref.shape)}")
    if not actual.numel():
        return
    if not (actual.dtype.is_floating_point or actual.is_complex()):
        if f32.shape == ref.shape and torch.equal(ref, f32.to(ref.dtype)) and not torch.equal(actual, ref):
            raise Mismatch(f"{what}: {(actual != ref).sum().item()} of {ref.numel()} values differ from eager's")
        return
    a, r = _real(actual), _real(ref)
    f = _real(f32) if f32.shape == ref.shape else r
    if f.shape != r.shape:
        f = r
    bad = ~(torch.isfinite(r) & torch.isfinite(f))
    same = (a == r) | (torch.isnan(a) & torch.isnan(r))
    if (bad & ~same).any():
        n = (bad & ~same).sum().item()
        raise Mismatch(f"{what}: {n} values differ where eager's are not finite")
    ok = ~bad
    if not ok.any():
        return
    a, r, f = a[ok], r[ok], f[ok]
    if not torch.isfinite(a).all():
        raise Mismatch(f"{what}: {(~torch.isfinite(a)).sum().item()} values not finite where eager's are")
    noise = (r - f).abs().max().item()
    scale = f.abs().max().item()
    low = actual.dtype if actual.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    step = torch.finfo(low).eps * scale
    floor = 1e-5 * (1 + scale)
    err = (a - f).abs().max().item()
    if err > NOISE * noise + step + floor:
        raise Mismatch(f"{what}: differs from float32 by {err:.4g}; eager autocast by {noise:.4g} (step {step:.3g})")


def _copy(x, grad: bool, no_grad=(), upcast: bool = False):
    """A fresh copy of a call's arguments: floating-point tensors made leaves requiring grad;
    `upcast`: half-precision ones converted to float32 (the float32 reference)."""

    def one(v, g):
        if isinstance(v, torch.Tensor):
            v = v.detach().clone()
            if upcast and v.dtype in (torch.bfloat16, torch.float16):
                v = v.float()
            if g and (v.is_floating_point() or v.is_complex()):
                v.requires_grad_(True)
            return v
        if isinstance(v, (list, tuple)):
            return type(v)(one(y, g) for y in v)
        if isinstance(v, dict):
            return {k: one(y, g) for k, y in v.items()}
        return v

    args, kwargs = x
    return one(args, grad), {k: one(v, grad and k not in no_grad) for k, v in kwargs.items()}


def _call(fn, args, kwargs, device, dtype, enabled):
    with torch.autocast(device, dtype=dtype, enabled=enabled):
        return fn(*args, **kwargs)


def check_call(jfn, fn, args, kwargs, device: str, dtype: torch.dtype, what: str, *, grad: bool = False,
               random: bool = False, no_grad=(), reference=None) -> str:
    """Compares thunder's call with eager's under autocast(device, dtype); raises Mismatch.
    Returns "refused" when eager refuses the call under autocast (and thunder did too), else "ok"."""
    reference = reference or fn
    try:
        ref = _call(reference, *_copy((args, kwargs), False), device, dtype, True)
    except Exception as e:  # eager refuses: thunder must too
        try:
            _call(jfn, *_copy((args, kwargs), False), device, dtype, True)
        except Exception:
            return "refused"
        raise Mismatch(f"{what}: eager refuses under autocast ({type(e).__name__}: {str(e)[:200]}); thunder ran it")
    try:
        out = _call(jfn, *_copy((args, kwargs), False), device, dtype, True)
    except Exception as e:
        raise Mismatch(f"{what}: thunder raised {type(e).__name__}: {str(e)[:300]}") from None
    f32 = _call(reference, *_copy((args, kwargs), False, upcast=True), device, dtype, False)
    outs, refs, f32s = leaves(out), leaves(ref), leaves(f32)
    if len(outs) != len(refs):
        raise Mismatch(f"{what}: {len(outs)} tensor outputs, eager's {len(refs)}")
    for i, (o, r, f) in enumerate(zip(outs, refs, f32s)):
        if random:
            if o.dtype != r.dtype or o.shape != r.shape:
                raise Mismatch(f"{what} output {i}: {o.dtype}{tuple(o.shape)}, eager's {r.dtype}{tuple(r.shape)}")
        else:
            within_noise(o, r, f, f"{what} output {i}")
    if grad and not random:
        check_grads(jfn, reference, args, kwargs, device, dtype, what, no_grad)
    return "ok"


def check_grads(jfn, reference, args, kwargs, device, dtype, what, no_grad):
    probe_args = _copy((args, kwargs), True, no_grad)
    try:
        probe = leaves(_call(reference, *probe_args, device, dtype, True))
    except Exception:  # noqa: BLE001 - eager refuses the call (check_call compares refusals)
        return
    diff = [i for i, o in enumerate(probe) if o.requires_grad and o.is_floating_point()]
    wrt_probe = [t for t in leaves(probe_args) if t.requires_grad]
    if not diff or not wrt_probe:
        return
    g = torch.Generator().manual_seed(0)
    cots = [torch.randn(probe[i].shape, generator=g, dtype=torch.float64).to(probe[i].device) for i in diff]

    def grads(fn, enabled):
        a, k = _copy((args, kwargs), True, no_grad, upcast=not enabled)
        outs = leaves(_call(fn, a, k, device, dtype, enabled))
        sel = [outs[i] for i in diff]
        wrt = [t for t in leaves((a, k)) if t.requires_grad]
        # backward outside the autocast region, as users write it
        gs = torch.autograd.grad(sel, wrt, [c.to(o.dtype) for c, o in zip(cots, sel)], allow_unused=True)
        return list(gs), wrt

    try:
        ref_gs, wrt = grads(reference, True)
    except Exception:
        return  # eager has no backward for this case
    try:
        gs, _ = grads(jfn, True)
    except Exception as e:
        raise Mismatch(f"{what}: thunder's backward raised {type(e).__name__}: {str(e)[:300]}") from None
    f32_gs, _ = grads(reference, False)
    for i, (gt, gr, gf, leaf) in enumerate(zip(gs, ref_gs, f32_gs, wrt)):
        if gr is None:
            continue
        if gt is None:
            gt = torch.zeros_like(gr)
        if gt.dtype != leaf.dtype:
            raise Mismatch(f"{what} gradient {i}: dtype {gt.dtype}, its input's {leaf.dtype}")
        within_noise(gt, gr, gf if gf is not None else torch.zeros_like(gr), f"{what} gradient {i}")
