"""The sweeps' models (tools/hf_sweep.py, timm_sweep.py, torchvision_sweep.py, diffusers_sweep.py)
on a device in a narrow dtype: one training step and one inference call each, eager and thunder.jit,
both against a float64 run of the same model (the narrow model's own weights and inputs, widened).

    PYTHONPATH=python python tools/device_sweep.py SUITE[,SUITE...] [name ...] [--device cuda]
        [--dtype bfloat16|float16|float32] [--shard I/N] [--time-limit S] [--fx]

SUITE: hf, timm, torchvision, diffusers or all. The CPU sweeps compare thunder with eager at float64
or float32, where both run the same kernels; on a GPU in a half type thunder takes other paths
(its own CUDA kernels, channels-last convolutions and the ATen kernels after them, fused
attention) which only this sweep reaches on code we did not write. A half-type run is not equal to
eager's, so each side is measured against float64: for the output and for every parameter's
gradient, the norm-wise error |x - x64| / |x64|. thunder passes a tensor when its error is at most
twice eager's plus two units of the dtype's rounding (a slack for sums rounded in another order),
where eager's error is the larger of eager's own and that of eager with every weight and input
moved by about half a rounding (what rounding alone moves this step by: a chaotic net's);
where eager's own error is above 50% the tensor is not compared (ill-conditioned in the dtype:
BatchNorm over 2 values at a net's 1x1 end) and counted.
Prints per model: ok / FAIL (the tensors out of bound, the worst first) / ERR (the exception), the
largest thunder-to-eager error ratio, and the seconds taken. --fx: under thunder.dynamo.thunderfx.
Models whose thunder.jit refusal hf_sweep.REFUSED lists run under thunderfx.
"""
import copy
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import thunder  # noqa: E402
from float64_sweep import prepare  # noqa: E402


def flag(name, default=None):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


DEVICE = flag("--device", "cuda" if torch.cuda.is_available() else "cpu")
DTYPE = getattr(torch, flag("--dtype", "bfloat16"))
FLOOR = 2 * torch.finfo(DTYPE).eps  # bfloat16 0.0078, float16 0.002, float32 2.4e-7
FX = "--fx" in sys.argv
_VALUED = {"--device", "--dtype", "--shard", "--time-limit", "--without"}


def positional():
    out, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a in _VALUED:
            skip = True
        elif not a.startswith("--"):
            out.append(a)
    return out


# ---- the suites: name -> builder() -> (model, inputs, pick), on the CPU in any float dtype ----

def hf_suite():
    import hf_sweep as H

    def build(name):
        def b():
            model = H.MODELS[name]()
            raw = H.inputs(name, torch.Generator().manual_seed(1))
            return model, raw, H.out_tensor
        return b
    return {n: build(n) for n in H.MODELS}


def timm_suite():
    import timm_sweep as S
    return {n: (lambda n=n: (*S.make(n), lambda out: out)) for n in S.DEFAULT}


def torchvision_suite():
    import torchvision_sweep as S
    return {n: (lambda n=n: (*S.make(n), S.logits)) for n in S.IMAGE + S.VIDEO + S.SEGMENTATION}


def diffusers_suite():
    import diffusers_sweep as S
    return {n: (lambda n=n: S.build(n)) for n in S.CASES}


SUITES = {"hf": hf_suite, "timm": timm_suite, "torchvision": torchvision_suite, "diffusers": diffusers_suite}


# ---- one model ----

def _cast(v, dtype):
    if torch.is_tensor(v):
        return v.to(DEVICE, dtype) if v.is_floating_point() else v.to(DEVICE)
    if isinstance(v, dict):  # (SDXL's added_cond_kwargs)
        return {k: _cast(x, dtype) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_cast(x, dtype) for x in v)
    return v


def executors():
    """The default executors less those --without names (comma-separated), to bisect a failure."""
    without = set(flag("--without", "").split(",")) - {""}
    return [e for e in thunder.get_default_executors() if e.name not in without] if without else None


def _nudge(v):
    """v with each element moved by about half a rounding step of its dtype, rounded back."""
    if not torch.is_tensor(v) or not v.is_floating_point():
        return v
    eps = torch.finfo(v.dtype).eps
    return (v.double() * (1 + 0.5 * eps * torch.randn(v.shape, dtype=torch.float64, device=v.device))).to(v.dtype)


def _err(x, ref, floor=1e-30):
    """|x - ref| / |ref|, the norm at least `floor` (a gradient that is 0 in float64, as
    DeepSeek-V3's last query projection's, against rounding noise of 1e-37 is no error)."""
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(floor)).item()


def _run(model, call, inputs, pick, train):
    if train:
        model.zero_grad(set_to_none=True)
        out = pick(call(**inputs))
        (out.double() ** 2).mean().backward()
        return out.detach(), {n: p.grad for n, p in model.named_parameters()}
    with torch.no_grad():
        return pick(call(**inputs)), {}


def _wrap(model, name, refused):
    if FX or name in refused:
        from thunder.dynamo import thunderfx
        torch._dynamo.reset()
        return thunderfx(model)
    return thunder.jit(model, executors=executors())


def _referee_context(name):
    """What the float64 referee's runs are made under: diffusers computes its timestep embedding in
    float32 in a float64 model too, and the referee then shared eager's float32 rounding of it
    (AuraFlow's and Qwen-Image's, at scale 1000, are 0.67% off the exact embedding in eager and in
    thunder alike, 0.2% apart: eager looked exact and thunder 4000x worse). The referee computes
    it in float64."""
    import contextlib

    if "diffusers" not in sys.modules:
        return contextlib.nullcontext()
    from diffusers_sweep import exact_embeddings

    return exact_embeddings()


def check(name, builder, refused):
    """Returns (status, detail)."""
    torch.manual_seed(0)
    model, raw, pick = builder()
    model = prepare(model).to(DEVICE, DTYPE)
    narrow = {k: _cast(v, DTYPE) for k, v in raw.items()}
    eager_m, thunder_m = model, copy.deepcopy(model)
    # Eager again with every weight and input moved by about one rounding of the dtype: how far
    # eager's own result moves when nothing but rounding changes (the step's conditioning)
    moved_m, moved = copy.deepcopy(model), {k: _nudge(v) for k, v in narrow.items()}
    with torch.no_grad():
        for p in moved_m.parameters():
            p.copy_(_nudge(p))
    wide_dtype = torch.float64
    try:  # the referee: the narrow weights and inputs, widened (tried on a copy: BatchNorm's statistics move)
        probe = copy.deepcopy(model).double()
        _run(probe, probe, {k: _cast(v, torch.float64) for k, v in narrow.items()}, pick, True)
    except RuntimeError:  # (torch._grouped_mm takes no float64: a float32 referee)
        wide_dtype = torch.float32
    ref_m = copy.deepcopy(model).to(wide_dtype)
    wide = {k: _cast(v, wide_dtype) for k, v in narrow.items()}
    jitted = _wrap(thunder_m, name, refused)
    bad, worst, secs, vague = [], 0.0, {}, 0

    def timed(what, *args):
        torch.manual_seed(0)
        t0 = time.time()
        r = _run(*args)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        secs[what] = secs.get(what, 0.0) + time.time() - t0
        return r

    for train in (True, False):
        for m in (ref_m, eager_m, moved_m, thunder_m):
            m.train(train)
        with _referee_context(name):
            r_out, r_g = timed("float64", ref_m, ref_m, wide, pick, train)
        try:
            e_out, e_g = timed("eager", eager_m, eager_m, narrow, pick, train)
        except Exception as e:
            return "n/a ", f"eager fails in {DTYPE}: {type(e).__name__}: {str(e).strip()[:200]}"
        m_out, m_g = timed("eager", moved_m, moved_m, moved, pick, train)
        t_out, t_g = timed("thunder", thunder_m, jitted, narrow, pick, train)
        pairs = [("output" if train else "eval output", t_out, e_out, r_out, m_out)]
        for n in r_g:
            if (t_g[n] is None) != (e_g[n] is None):
                bad.append((math.inf, f"grad of {n}: thunder {'None' if t_g[n] is None else 'set'}, "
                                      f"eager {'None' if e_g[n] is None else 'set'}"))
            elif r_g[n] is not None and e_g[n] is not None:
                pairs.append((n, t_g[n], e_g[n], r_g[n], m_g[n]))
        # Norms below a millionth of the largest gradient's count as that much
        floor = 1e-6 * max([float(p[3].double().norm()) for p in pairs[1:]] + [1e-24])
        for what, t, e, r, mv in pairs:
            if t.shape != r.shape:
                bad.append((math.inf, f"{what}: thunder's shape {tuple(t.shape)}, float64's {tuple(r.shape)}"))
                continue
            f = floor if what in r_g else 1e-30
            et, ee = _err(t, r, f), max(_err(e, r, f), _err(mv, r, f) if mv is not None else 0.0)
            if not ee <= 0.5:  # (NaN too: eager's or float64's own result is NaN there)
                # Eager itself is more than 50% off float64: the tensor is ill-conditioned in this
                # dtype (a BatchNorm over a batch of 2 at 1x1: its input gradient is 0 in exact
                # arithmetic, rounding noise in any other); no bar to hold thunder to
                vague += 1
                continue
            ratio = et / (2 * ee + FLOOR)
            worst = max(worst, ratio)
            if not ratio <= 1.0:  # (NaN fails too)
                bad.append((ratio, f"{what}: thunder {et:.3g}, eager {ee:.3g}"))
    bad.sort(key=lambda b: -b[0] if b[0] == b[0] else -math.inf)
    took = (f"; {vague} tensors not compared (eager >50% off float64)" if vague else "") + \
        "; s: " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items())
    if bad:
        return "FAIL", f"worst {worst:.2f}; {len(bad)} out of bound: " + "; ".join(b[1] for b in bad[:6]) + took
    return "ok  ", f"worst {worst:.2f}" + took


def main():
    suites = positional()
    names = suites[1:]
    chosen = list(SUITES) if suites[0] == "all" else suites[0].split(",")
    refused = {}
    if "hf" in chosen:
        import hf_sweep
        refused = hf_sweep.REFUSED
    models = {}
    for s in chosen:
        models.update({f"{s}/{n}": b for n, b in SUITES[s]().items()})
    if names:
        models = {k: v for k, v in models.items() if k.split("/", 1)[1] in names or k in names}
    keys = sorted(models)
    shard = flag("--shard")
    if shard:
        i, n = map(int, shard.split("/"))
        keys = keys[i::n]
    limit = float(flag("--time-limit", "inf"))
    start = time.time()
    chosen_ex = executors()
    ex = [e.name for e in (thunder.get_default_executors() if chosen_ex is None else chosen_ex)]
    print(f"device_sweep: {len(keys)} models, {DEVICE}, {DTYPE}, {'thunderfx' if FX else 'thunder.jit'} "
          f"({', '.join(ex)}), torch {torch.__version__}", flush=True)
    counts = {}
    for key in keys:
        if time.time() - start > limit:
            print(f"time limit: {key} and after not run", flush=True)
            break
        t0 = time.time()
        try:
            status, detail = check(key.split("/", 1)[1], models[key], refused)
        except Exception as e:
            status, detail = "ERR ", f"{type(e).__name__}: {str(e).strip()[:300]}"
            if len(keys) == 1:
                traceback.print_exc()
        counts[status] = counts.get(status, 0) + 1
        print(f"{status} {key}: {detail} ({time.time() - t0:.1f} s)", flush=True)
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    print("summary: " + ", ".join(f"{k.strip()} {v}" for k, v in sorted(counts.items())), flush=True)


if __name__ == "__main__":
    main()
