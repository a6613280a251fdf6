"""The differential fuzzer: random programs run eagerly and under thunder.jit, compared.

    python tests/python/fuzz/fuzz.py --start 0 --count 200 [--executors default,fuser] [--jobs 2]

THUNDER_FUZZ_SYMBOLIC=1 marks every input dimension dynamic (size symbols in the traces).

Each program (programs.generate(seed)) runs in a worker subprocess, with every executor set:
forward, a second (cached) call on fresh inputs, and backward with random cotangents, each
compared with eager; where they differ beyond the dtype's tolerance, with a float64 reference
(eager's own error in float32 can be the larger). A worker that dies (a signal, an abort) or
stops answering (a hang) costs the program it was running a counted failure, and a new worker
goes on from the next seed. Each failure prints a minimal standalone repro (the program reduced
to the statements the failure needs) and is saved under --out.

Outcomes per program and executor set: ok; eager_error (both raise, same type); clear_error
(thunder rejects a program eager runs, with a message naming the op); and failures: mismatch,
cached_mismatch, grad_mismatch, error_type (both raise, other types), accepted_invalid (eager
raises, thunder returns), unclear_error (thunder rejects without naming an op, or an internal
error), crash, hang.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES = {"mismatch", "cached_mismatch", "grad_mismatch", "error_type", "accepted_invalid",
            "unclear_error", "crash", "hang"}

# ---- in the worker ---------------------------------------------------------------------------


def _tolerance(dtype):
    import torch

    return {torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2), torch.float32: (1e-4, 1e-4),
            torch.float64: (1e-9, 1e-9)}.get(dtype, (0, 0))


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    return []


def _grid(a, b):
    """The coarsest float dtype less precise than a's whose values hold every finite element of
    both a and b, or None: the outputs were rounded to it (a float32 result converted to float64
    carries float32's error, and is compared at float32's tolerance; seeds 33661 and 35140: silu
    and var of float32 tensors .to(torch.float64), eager and thunder an ulp of float32 apart).
    A value computed in float64 lies on the float32 grid by chance once in 2^29."""
    import torch

    bits = torch.finfo(a.dtype).bits
    for d in (torch.bfloat16, torch.float16, torch.float32):
        if torch.finfo(d).bits >= bits or (d == torch.float16 and a.dtype == torch.bfloat16):
            continue
        if all(bool((f.to(d).to(f.dtype) == f).all()) for f in (a[a.isfinite()], b[b.isfinite()])):
            return d
    return None


def _least_precise(a, b):
    """The less precise (larger eps) of two float dtypes (either may be None)."""
    import torch

    if a is None or b is None:
        return a if b is None else b
    return max(a, b, key=lambda d: torch.finfo(d).eps)


class _ComputedDTypes:
    """Context manager: records `least`, the least precise real float dtype of a tensor any torch
    call made while it was active (None if none)."""

    def __enter__(self):
        import torch
        from torch.overrides import TorchFunctionMode

        outer = self
        self.least = None

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in _tensors(out):
                    if t.dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
                        outer.least = _least_precise(outer.least, t.dtype)
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def _close(got, want, ref=None, floor=None, band=None) -> str | None:
    """None when `got` matches `want` (or is at least as close to the float64 `ref`, or within
    the `band` (lo, hi) of float64 references whose ill-conditioned ops' operands were moved by
    their rounding error: `_perturbed_band`); else why.
    Outputs whose values all lie on a coarser dtype's grid get that dtype's tolerance (`_grid`).
    `floor`: a dtype whose tolerance is the least used (a program that computes in bfloat16
    anywhere: eager's autograd formulas round their intermediates in the operands' dtypes, so
    even a float32 gradient carries bfloat16 rounding, which the float64 reference, running the
    program's own casts, repeats)."""
    import torch

    g, w = _tensors(got), _tensors(want)
    if len(g) != len(w):
        return f"{len(g)} tensors, eager {len(w)}"
    r = _tensors(ref) if ref is not None else [None] * len(w)
    lo, hi = (_tensors(band[0]), _tensors(band[1])) if band is not None else ([None] * len(w),) * 2
    if len(r) != len(w) or len(lo) != len(w) or len(hi) != len(w):
        r, lo, hi = [None] * len(w), [None] * len(w), [None] * len(w)
    for i, (a, b, c, lo_i, hi_i) in enumerate(zip(g, w, r, lo, hi)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {a.dtype}{list(a.shape)}, eager {b.dtype}{list(b.shape)}"
        if a.dtype.is_floating_point or a.dtype.is_complex:
            rtol, atol = _tolerance(a.dtype)
            grid = _grid(a, b) if a.dtype.is_floating_point else None
            for d in (floor, grid):
                if d is not None:
                    rtol, atol = max(rtol, _tolerance(d)[0]), max(atol, _tolerance(d)[1])
            if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                continue
            if c is not None and c.shape == a.shape:
                # eager's own rounding error can be the larger: compare both with float64
                a64, b64, c64 = a.double(), b.double(), c.double()
                # The error of each element against the reference, eager's and thunder's alike:
                # exact where both are NaN; unbounded where one is NaN and the other a number or
                # where one is infinite and the other finite. Thunder passes where its error is at
                # most twice eager's (plus the tolerance), so an unbounded error of thunder's passes
                # only where eager's is unbounded too, and eager's is never taken as exact (seed
                # 30649: eager's log of a sigmoid flushed to 0 is -inf, thunder's -99.98, the
                # float64 value -100; its gradient g / y * (1 - y) * y, the float64 one about g,
                # is NaN in eager (y = 0) and inf in thunder (y subnormal: g / y overflows), NaN
                # in both below -104 where thunder's y is 0 too). Where the reference is NaN or
                # infinite, thunder must be that same value.
                inf = float("inf")

                def err(x):
                    e = (x - c64).abs().nan_to_num(0.0, inf, inf)
                    return torch.where(x.isnan() != c64.isnan(), inf, e)

                ea, eb = err(a64), err(b64)
                special_kept = (a64 == c64) | c64.isfinite() | (c64.isnan() & a64.isnan())
                tol = atol + rtol * c64.abs().nan_to_num(0.0, 0.0, 0.0)
                ok = special_kept & (ea <= 2 * eb + tol)
                if lo_i is not None and lo_i.shape == a.shape and hi_i.shape == a.shape:
                    # Within the perturbed references' range (seed 25923: frac of a float32 norm
                    # of about 3e5, whose last bit, 0.03125, depends on the summation order).
                    ok |= (a64 >= lo_i.double() - tol) & (a64 <= hi_i.double() + tol)
                if bool(ok.all()):
                    continue
            diff = (a.double() - b.double()).abs()
            return f"output {i} ({a.dtype}{list(a.shape)}): max abs diff {diff.nan_to_num(float('inf')).max().item() if diff.numel() else 0}; thunder {a.flatten()[:6].tolist()} eager {b.flatten()[:6].tolist()}"
        elif not torch.equal(a, b):
            return f"output {i} ({a.dtype}{list(a.shape)}): thunder {a.flatten()[:6].tolist()} eager {b.flatten()[:6].tolist()}"
    return None


def _clear(e: BaseException) -> bool:
    msg = str(e)
    if "internal error" in msg.lower():
        return False
    return any(k in msg for k in ("ltorch.", "prims.", "thunder", "torch.", "clang.")) and len(msg) > 20


# The sign bit of a NaN is not specified (IEEE 754 leaves it to the implementation): eager's
# vectorized asin of bfloat16 makes a negative NaN where the fuser's makes a positive one, and
# copysign passes that bit on (seed 14472). Both runs read copysign's sign operand with NaN as +1.0,
# the one place a program's result shows the bit; everything else about copysign is compared.
_COPYSIGN = re.compile(r"torch\.copysign\((\w+), (\w+)\)")


def _nan_signs_unspecified(src: str) -> str:
    return _COPYSIGN.sub(r"torch.copysign(\1, torch.nan_to_num(\2, nan=1.0))", src)


def _plain_means():
    """A TorchFunctionMode for eager's forward runs: the mean of var_mean and std_mean where
    eager's is NaN and torch.mean's is not. Eager computes it with Welford's update, whose delta
    x - mean is inf - inf = NaN once two infinities meet (the mean of [inf, inf] is NaN, in
    float64 too); thunder computes sum / n, as torch.mean does (inf). Seed 43248:
    std_mean([inf, inf, inf, inf])[1], eager NaN, thunder inf. The runs whose gradients are
    taken read it too, so the ops after the mean differentiate at torch.mean's value (seed 44143);
    through torch.where, the replaced mean's gradient is torch.mean's, g / n, which is eager's
    gradient of var_mean's mean as well. Everything else about these ops is compared: their
    variances (NaN in both), finite means, gradients."""
    import torch
    from torch.overrides import TorchFunctionMode

    class PlainMeans(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func not in (torch.var_mean, torch.std_mean) or not out[1].is_floating_point():
                return out
            x = args[0]
            dim = args[1] if len(args) > 1 and not isinstance(args[1], bool) else kwargs.get("dim")
            keepdim = kwargs.get("keepdim", args[3] if len(args) > 3 else False)
            plain = x.mean() if dim is None else x.mean(dim, keepdim=keepdim)
            mean = torch.where(out[1].isnan() & ~plain.isnan(), plain.reshape(out[1].shape), out[1])
            return out[0], mean

    return PlainMeans()


def _gelu_inf_as_scalar():
    """A TorchFunctionMode for eager's runs: F.gelu (exact) of +inf is +inf, as eager's scalar
    loop and its float64 kernel give; its vectorized float32 loop gives NaN (the first elements of
    a buffer NaN, a lone element inf; seed 74642). Thunder gives inf."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class GeluInf(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is F.gelu and kwargs.get("approximate", args[1] if len(args) > 1 else "none") == "none":
                x = args[0] if args else kwargs["input"]
                if isinstance(x, torch.Tensor) and x.is_floating_point() and isinstance(out, torch.Tensor):
                    out = torch.where(x == float("inf"), x, out)
            return out

    return GeluInf()


def _nan_passes_hardtanh():
    """A TorchFunctionMode for eager's gradient runs: the gradient of F.hardtanh and F.relu6 at a
    NaN input passes, as it does in eager's scalar loop. Eager's CPU hardtanh_backward is not
    consistent there: its vectorized loop gives 0 and its scalar tail passes the gradient, so the
    same program's NaN elements get 0 or g by their position in the buffer (of 30 float32 NaNs,
    the first 16 get 0 and the last 14 g; seed 49251). Thunder passes the gradient at every NaN,
    as eager's relu (threshold_backward) does. Forward values are eager's own (NaN there)."""
    import inspect

    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class NanPasses(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func not in (F.hardtanh, F.relu6):
                return func(*args, **kwargs)
            bound = inspect.signature(func).bind(*args, **kwargs)
            bound.apply_defaults()
            x, inplace = bound.arguments["input"], bound.arguments["inplace"]
            if not x.is_floating_point():
                return func(*args, **kwargs)
            bound.arguments["inplace"] = False
            # hardtanh of a clone: the in-place version's copy_ below must not change what the
            # out-of-place op saved for its backward
            bound.arguments["input"] = x.clone()
            out = torch.where(x.isnan(), x, func(*bound.args, **bound.kwargs))
            return x.copy_(out) if inplace else out

    return NanPasses()


def _load(src: str):
    src = _nan_signs_unspecified(src)
    ns: dict = {}
    exec(compile(src, "<fuzz program>", "exec"), ns)  # noqa: S102 - generated program
    return ns["prog"], ns["make_inputs"]


def _float64(inputs):
    return [x.double() if x.is_floating_point() else x for x in inputs]


def _grad_inputs(inputs):
    import torch

    return [x.detach().requires_grad_(True) if x.dtype in (torch.float32, torch.float64, torch.bfloat16) else x
            for x in inputs]


# Ill-conditioned ops: a result that a rounding error of the operand changes by far more than
# the result's own tolerance allows. frac(x) and remainder(x, y) keep x's absolute error (frac of
# a float32 value of 3e5 is a multiple of 1/32), and floor, ceil, round, trunc, floor division and
# fmod jump by a whole unit where x is within its error of a step. Eager and thunder compute the
# operand in different orders (a sum's terms, a fused chain), so their results can differ by that
# much while each is as accurate as float32 allows (seed 25923: frac(norm(a * 1e4)) is 0.4375 in
# eager, 0.46875 in thunder, 1/32 apart). The float64 reference is then rerun twice with each
# such op's first operand moved down and up by its error bound (`_ill_deltas`), and a result
# within the range of the three references (plus the tolerance) passes: its difference from
# eager is what the operand's rounding can explain.
_ILL_CONDITIONED = {"frac", "floor", "ceil", "round", "trunc", "remainder", "fmod", "floor_divide",
                    "__mod__", "__floordiv__"}


def _ill_mode(deltas=None, sign=0):
    """A TorchFunctionMode over the ill-conditioned ops: records each call's operands (`deltas`
    None), or moves each call's first operand by sign * its delta."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Ill(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls, self.i = [], 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in _ILL_CONDITIONED and args and isinstance(args[0], torch.Tensor):
                a, b = args[0], args[1] if len(args) > 1 else None
                if deltas is None:
                    self.calls.append((a.detach().clone(), b.detach().clone() if isinstance(b, torch.Tensor) else b))
                elif self.i < len(deltas) and deltas[self.i] is not None:
                    d = deltas[self.i]
                    dt = torch.result_type(a, b) if b is not None else a.dtype
                    args = (a.to(dt) + sign * d.to(dt),) + tuple(args[1:])
                self.i += 1
            return func(*args, **kwargs)

    return Ill()


def _ill_deltas(calls32, calls64):
    """Per ill-conditioned call, the error bound of its first operand as the float64 run sees it
    (None where nothing is rounded): twice (eager's distance from the float64 operand plus one
    rounding, eps * |x|), and for a floating divisor y, |x| times y's relative error bound the
    same way (an error of y moves the quotient as that error of x does)."""
    import torch

    if len(calls32) != len(calls64):
        return None
    out = []
    for (a32, b32), (a64, b64) in zip(calls32, calls64):
        fa = a32.is_floating_point()
        fb = isinstance(b32, torch.Tensor) and b32.is_floating_point()
        dt = torch.result_type(a32, b32) if b32 is not None else a32.dtype
        if not dt.is_floating_point or not (fa or fb or isinstance(b32, float)):
            out.append(None)
            continue
        eps = torch.finfo(dt).eps
        x = a64.double()
        d = (a32.double() - x).abs() + eps * x.abs() if fa else eps * x.abs()
        if fb:
            y = b64.double()
            d = d + x.abs() * ((b32.double() - y).abs() + eps * y.abs()) / y.abs()
        out.append((2 * d).nan_to_num(0.0, 0.0, 0.0))
    return out


def _perturbed_band(run32, run64):
    """(lo, hi): the elementwise range of run64() and its reruns with each ill-conditioned op's
    operand moved down and up by its error bound; None where the program has no such op or a
    run fails. run32 repeats the computation at the program's own precision (the calls' dtypes
    and eager's operands)."""
    import torch

    try:
        rec32, rec64 = _ill_mode(), _ill_mode()
        with rec32:
            run32()
        if not rec32.calls:
            return None
        with rec64:
            ref = _tensors(run64())
        deltas = _ill_deltas(rec32.calls, rec64.calls)
        if deltas is None or all(d is None for d in deltas):
            return None
        runs = [ref]
        for sign in (-1, 1):
            with _ill_mode(deltas, sign):
                runs.append(_tensors(run64()))
    except Exception:  # noqa: BLE001
        return None
    if any(len(r) != len(ref) for r in runs):
        return None
    lo, hi = [], []
    for ts in zip(*runs):
        if any(t.shape != ts[0].shape for t in ts) or not all(t.is_floating_point() for t in ts):
            return None
        st = torch.stack([t.double() for t in ts])
        lo.append(st.amin(0))
        hi.append(st.amax(0))
    return lo, hi


def _marked(inputs):
    """With THUNDER_FUZZ_SYMBOLIC=1: every dimension of 2 or more of every tensor input marked
    dynamic (torch._dynamo.mark_dynamic), so thunder traces with size symbols (forward and
    backward) at the program's own sizes."""
    import torch

    if os.environ.get("THUNDER_FUZZ_SYMBOLIC") != "1":
        return inputs
    for x in inputs:
        if isinstance(x, torch.Tensor):
            for d, n in enumerate(x.shape):
                if n >= 2:
                    torch._dynamo.mark_dynamic(x, d)
    return inputs


def check(src: str, executors, seed: int) -> tuple[str, str]:
    """Runs one program with one executor set: (outcome, detail)."""
    import torch
    import thunder

    prog, make_inputs = _load(src)
    # The least precise float dtype the program computes in: its gradients are compared at that
    # dtype's tolerance (see _close). float32 matters for float64 gradients only: eager's in-place
    # op on a float32 tensor with a float64 operand rounds its gradient for the operand to float32
    # (seed 44752: `t1 = a.to(torch.float32); t1 *= a`, a float64: eager's grad * self is a
    # float32 product, thunder's the float64 one, 2e-8 apart; the float64 rerun repeats the cast).
    floor = next((d for n, d in (("bfloat16", torch.bfloat16), ("float16", torch.float16),
                                 ("float32", torch.float32)) if n in src), None)
    try:
        with _plain_means(), _gelu_inf_as_scalar(), _ComputedDTypes() as computed:
            want = prog(*make_inputs())
        eager_err = None
        # A float dtype the program computes in without naming it (an integer tensor's logsumexp
        # or mean is a float32 tensor, which the float64 rerun computes in float32 again: seed
        # 60964, logsumexp of int64 times a float64, thunder's and eager's float32 results an ulp
        # apart): its outputs carry that dtype's error and are compared at its tolerance.
        floor = _least_precise(floor, computed.least)
    except Exception as e:  # noqa: BLE001
        want, eager_err = None, e
    jf = thunder.jit(prog, executors=executors)
    try:
        got = jf(*_marked(make_inputs()))
    except Exception as e:  # noqa: BLE001
        if eager_err is not None:
            if isinstance(e, type(eager_err)) or isinstance(eager_err, type(e)):
                return "eager_error", ""
            return "error_type", f"thunder {type(e).__name__}: {str(e)[:300]} / eager {type(eager_err).__name__}: {str(eager_err)[:300]}"
        return ("clear_error" if _clear(e) else "unclear_error"), f"{type(e).__name__}: {str(e)[:400]}"
    if eager_err is not None:
        return "accepted_invalid", f"eager raised {type(eager_err).__name__}: {str(eager_err)[:300]}"
    ref = band = None
    why = _close(got, want, floor=floor)
    if why is not None:
        try:
            with _plain_means():
                ref = prog(*_float64(make_inputs()))
        except Exception:  # noqa: BLE001
            ref = None
        why = _close(got, want, ref, floor=floor)
        if why is not None:
            band = _perturbed_band(lambda: prog(*make_inputs()), lambda: prog(*_float64(make_inputs())))
            why = _close(got, want, ref, floor=floor, band=band)
        if why is not None:
            return "mismatch", why
    change = prog.__globals__.get("change")
    if change is not None:
        # A program reading containers (programs.container_program) sees them changed in place
        # before its second call, and must compute with the new values.
        inputs = make_inputs()
        change()
        with _plain_means(), _gelu_inf_as_scalar():
            want, ref, band = prog(*inputs), None, None
        inputs = make_inputs()
        change()
        got2 = jf(*_marked(inputs))
    else:
        got2 = jf(*_marked(make_inputs()))
    why = _close(got2, want, ref, floor=floor, band=band)
    if why is not None:
        return "cached_mismatch", why
    # backward with random cotangents, where an output is differentiable
    inputs = _grad_inputs(make_inputs())
    diff_in = [x for x in inputs if x.requires_grad]
    if not diff_in:
        return "ok", ""
    try:
        # Eager's forward again reads torch.mean's value where Welford's mean is NaN: the ops after
        # it differentiate at that value (seed 44143: exp of var_mean's mean over all -inf, whose
        # gradient g * exp(mean) is NaN at eager's NaN mean; var_mean's own gradient of the mean
        # is g / n in eager as in thunder).
        with _plain_means(), _gelu_inf_as_scalar(), _nan_passes_hardtanh():
            outs_e = _tensors(prog(*inputs))
    except Exception:  # noqa: BLE001
        return "ok", ""
    pick = [i for i, o in enumerate(outs_e) if o.requires_grad and o.numel() > 0]
    if not pick:
        return "ok", ""
    gen = torch.Generator().manual_seed(seed)
    cots = [torch.randn(outs_e[i].shape, generator=gen, dtype=torch.float64).to(outs_e[i].dtype) for i in pick]
    try:
        ge = torch.autograd.grad([outs_e[i] for i in pick], diff_in, cots, allow_unused=True)
        eager_gerr = None
    except Exception as e:  # noqa: BLE001
        ge, eager_gerr = None, e
    inputs_t = _grad_inputs(make_inputs())
    diff_t = [x for x in inputs_t if x.requires_grad]
    try:
        outs_t = _tensors(jf(*_marked(inputs_t)))
        gt = torch.autograd.grad([outs_t[i] for i in pick], diff_t, cots, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        if eager_gerr is not None:
            return "ok", ""
        return ("clear_error" if _clear(e) else "unclear_error"), f"backward {type(e).__name__}: {str(e)[:400]}"
    if eager_gerr is not None:
        return "ok", ""  # eager's autograd rejects it (a non-differentiable path); thunder's is its own
    zero = lambda g, x: torch.zeros_like(x) if g is None else g  # noqa: E731
    ge = [zero(g, x) for g, x in zip(ge, diff_in)]
    gt = [zero(g, x) for g, x in zip(gt, diff_t)]
    why = _close(gt, ge, floor=floor)
    if why is not None:
        def grads(wide):
            xs = _grad_inputs(_float64(make_inputs()) if wide else make_inputs())
            ds = [x for x in xs if x.requires_grad]
            with _plain_means(), _gelu_inf_as_scalar(), _nan_passes_hardtanh():
                os_ = _tensors(prog(*xs))
            gs = torch.autograd.grad([os_[i] for i in pick], ds, [c.double() if wide else c for c in cots],
                                     allow_unused=True)
            return [zero(g, x) for g, x in zip(gs, ds)]

        try:
            g64 = grads(True)
        except Exception:  # noqa: BLE001
            g64 = None
        why = _close(gt, ge, g64, floor=floor)
        if why is not None:
            band = _perturbed_band(lambda: grads(False), lambda: grads(True))
            why = _close(gt, ge, g64, floor=floor, band=band)
        if why is not None:
            return "grad_mismatch", why
    return "ok", ""


def minimize(program, executors, outcome: str) -> str:
    """The shortest prefix of the program, returning one value, with the same outcome; then the
    statements that value does not need are dropped."""
    import re

    for k in range(1, len(program.body) + 1):
        body = program.body[:k]
        src = program.source(body, [body[-1][0]])
        try:
            if check(src, executors, program.seed)[0] == outcome:
                break
        except Exception:  # noqa: BLE001
            continue
    else:
        return program.source()
    needed = {body[-1][0]}
    kept = []
    for t, e in reversed(body):
        if t in needed:
            kept.append((t, e))
            needed |= set(re.findall(r"\b(t\d+)\b", e))
    kept.reverse()
    src = program.source(kept, [kept[-1][0]])
    try:
        if check(src, executors, program.seed)[0] == outcome:
            return src
    except Exception:  # noqa: BLE001
        pass
    return program.source(body, [body[-1][0]])


def repro(src: str, executors) -> str:
    return (src + "\n\nimport thunder\n"
            f"eager = prog(*make_inputs())\n"
            f"jitted = thunder.jit(prog, executors={executors!r})(*make_inputs())\n"
            "print(eager)\nprint(jitted)\n")


def worker(executor_sets) -> None:
    """Reads seeds on stdin; for each, prints 'start <seed>' then one JSON line per executor set."""
    sys.path.insert(0, HERE)
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    import programs

    crash_seed = os.environ.get("THUNDER_FUZZ_TEST_CRASH_SEED")  # the harness's own test
    for line in sys.stdin:
        seed = int(line)
        print(f"start {seed}", flush=True)
        if crash_seed is not None and seed == int(crash_seed):
            print("exec default", flush=True)
            os.abort()
        program = programs.generate(seed)
        src = program.source()
        for name, ex in executor_sets:
            print(f"exec {name}", flush=True)
            try:
                outcome, detail = check(src, ex, seed)
            except Exception as e:  # noqa: BLE001 - a failure of the harness's own eager reruns
                outcome, detail = "ok", f"harness: {type(e).__name__}: {e}"
            rep = ""
            if outcome in FAILURES:
                try:
                    rep = repro(minimize(program, ex, outcome), ex)
                except Exception:  # noqa: BLE001
                    rep = repro(src, ex)
            print(json.dumps({"seed": seed, "executors": name, "outcome": outcome, "detail": detail,
                              "repro": rep}), flush=True)
        print("done", flush=True)


# ---- the driver ------------------------------------------------------------------------------

EXECUTOR_SETS = {"default": None, "fuser": ["fuser"], "torch": ["torch"]}


def _spawn(names: list[str]):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.Popen([sys.executable, __file__, "--worker", ",".join(names)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def run(seeds, names, timeout: float, jobs: int, out_dir: str | None, quiet: bool = False,
        budget: float | None = None, progress: float | None = None, recycle: int = 0):
    """Runs the seeds over `jobs` workers (no new seed after `budget` seconds; a summary line
    every `progress` seconds; a worker is replaced after `recycle` programs, 0: never); returns
    {executor set: Counter of outcomes} and the failures (dicts with seed, executors, outcome,
    detail, repro)."""
    import selectors

    started = time.time()
    last_progress = started

    counts = {n: collections.Counter() for n in names}
    failures = []
    pending = list(seeds)[::-1]
    sel = selectors.DefaultSelector()
    workers = []

    def record(r):
        counts[r["executors"]][r["outcome"]] += 1
        if r["outcome"] in FAILURES:
            failures.append(r)
            if not quiet:
                print(f"FAIL seed {r['seed']} [{r['executors']}] {r['outcome']}: {r['detail']}\n{r['repro']}",
                      flush=True)
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                with open(os.path.join(out_dir, f"seed{r['seed']}_{r['executors']}_{r['outcome']}.py"), "w") as f:
                    f.write(f"# {r['outcome']}: {r['detail']}\n" + (r["repro"] or ""))
        elif r["outcome"] == "clear_error" and out_dir:
            # not a failure, but each refusal's message is kept, to read that it is clear
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "clear_errors.txt"), "a") as f:
                f.write(f"seed {r['seed']} [{r['executors']}]: {r['detail']}\n")

    def start():
        if not pending:
            return
        p = _spawn(names)
        w = {"p": p, "seed": None, "done": set(), "exec": None, "since": time.time(), "buf": b"", "ran": 0}
        sel.register(p.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        feed(w)

    def feed(w):
        if budget is not None and time.time() - started > budget:
            pending.clear()
        if pending and recycle and w["ran"] >= recycle:
            # this worker ends (its stdin closed) and a fresh one takes the next seed
            w["seed"] = None
            w["p"].stdin.close()
            start()
        elif pending:
            w["ran"] += 1
            w["seed"], w["done"], w["exec"], w["since"] = pending.pop(), set(), None, time.time()
            w["p"].stdin.write(f"{w['seed']}\n")
            w["p"].stdin.flush()
        else:
            w["seed"] = None
            w["p"].stdin.close()

    def lost(w, outcome):
        # the worker died or hung: the current executor set (else the next) failed
        seed = w["seed"]
        name = w["exec"] or next((n for n in names if n not in w["done"]), names[0])
        sys.path.insert(0, HERE)
        import programs

        rep = repro(programs.generate(seed).source(), EXECUTOR_SETS[name])
        rc = w["p"].poll()
        record({"seed": seed, "executors": name, "outcome": outcome,
                "detail": f"worker {'exit code ' + str(rc) if rc is not None else 'stopped answering'}",
                "repro": rep})
        for n in names:
            if n not in w["done"] and n != name:
                counts[n]["not_run"] += 1
        sel.unregister(w["p"].stdout)
        if w["p"].poll() is None:
            w["p"].kill()
        w["p"].wait()
        workers.remove(w)
        start()

    for _ in range(min(jobs, len(pending))):
        start()
    while workers:
        if progress is not None and time.time() - last_progress >= progress:
            last_progress = time.time()
            print(f"progress {last_progress - started:.0f} s: " + summary(counts).replace("\n", " | "), flush=True)
        events = sel.select(timeout=1.0)
        for key, _ in events:
            w = key.data
            # Raw reads: a buffered readline would leave lines the selector never reports.
            chunk = os.read(w["p"].stdout.fileno(), 1 << 20)
            if not chunk:
                if w["seed"] is not None:
                    lost(w, "crash")
                else:
                    sel.unregister(w["p"].stdout)
                    w["p"].wait()
                    workers.remove(w)
                continue
            w["buf"] += chunk
            w["since"] = time.time()
            *lines, w["buf"] = w["buf"].split(b"\n")
            for raw in lines:
                line = raw.decode().strip()
                if line.startswith("exec "):
                    w["exec"] = line[5:]
                elif line.startswith("{"):
                    r = json.loads(line)
                    w["done"].add(r["executors"])
                    record(r)
                elif line == "done":
                    feed(w)
        for w in list(workers):
            if w["seed"] is not None and time.time() - w["since"] > timeout:
                lost(w, "hang")
    return counts, failures


def summary(counts) -> str:
    lines = []
    for name, c in counts.items():
        total = sum(v for k, v in c.items() if k != "not_run")
        fails = sum(v for k, v in c.items() if k in FAILURES)
        lines.append(f"{name}: {total} programs, {fails} failures; " +
                     ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--executors", default="default,fuser")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds without progress that count as a hang")
    ap.add_argument("--out", default=None, help="folder for the repro of each failure")
    ap.add_argument("--seconds", type=float, default=None, help="start no new program after this long")
    ap.add_argument("--progress", type=float, default=None, help="print the counts every this many seconds")
    ap.add_argument("--recycle", type=int, default=0,
                    help="programs per worker process before a fresh one (default 0: the worker lives on)")
    ap.add_argument("--family", default=None,
                    help="give every seed to this program family of programs.FAMILIES (default: each its share)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        worker([(n, EXECUTOR_SETS[n]) for n in a.worker.split(",")])
        return 0
    names = a.executors.split(",")
    if a.family:
        sys.path.insert(0, HERE)
        import programs

        known = [fn.__name__ for fn, _ in programs.FAMILIES]
        if a.family not in known:
            ap.error(f"unknown family {a.family!r}; choose from {known}")
        os.environ["THUNDER_FUZZ_FAMILY"] = a.family  # the workers inherit it
    for n in names:
        if n not in EXECUTOR_SETS:
            ap.error(f"unknown executor set {n!r}; choose from {sorted(EXECUTOR_SETS)}")
    t0 = time.time()
    counts, failures = run(range(a.start, a.start + a.count), names, a.timeout, a.jobs, a.out,
                           budget=a.seconds, progress=a.progress, recycle=a.recycle)
    print(summary(counts))
    print(f"seeds from {a.start} ({a.count} asked) in {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
