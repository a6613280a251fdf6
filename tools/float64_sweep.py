"""What the float64 model sweeps (tools/timm_sweep.py, torchvision_sweep.py, diffusers_sweep.py)
share: preparing a model for an exact comparison, one training step under eager and under
thunder.jit, and the comparison of their losses and gradients with eager's own conditioning."""
import copy
import os
import sys
import time

import torch

import thunder

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.libraries import import_library  # noqa: E402,F401 (the sweeps import their library through it)


def names(default):
    """The models named on the command line (flags aside), else `default`."""
    return [a for a in sys.argv[1:] if not a.startswith("--")] or list(default)


def exact_hardsigmoid_if_asked():
    """--exact-hardsigmoid: ATen's hardsigmoid backward multiplies by float32's 1/6 whatever the
    dtype; an exact one in both runs compares the rest of the model."""
    if "--exact-hardsigmoid" not in sys.argv:
        return
    import torch.nn.functional as F

    def exact(x, inplace=False):
        return F.relu6(x + 3.0) / 6.0

    F.hardsigmoid = exact
    torch.nn.Hardsigmoid.forward = lambda self, x: exact(x)


def prepare(model):
    """Dropout, stochastic depth and label dropout (DiT's class labels) at 0; zero-initialized parameters (heads, layer scales,
    ControlNet's outputs, adaLN-Zero), which hide what feeds them, drawn again."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout) or type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
        for attr in ("stochastic_depth_prob", "dropout_prob"):
            if isinstance(getattr(mod, attr, None), float):
                setattr(mod, attr, 0.0)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and not p.any():
                p.normal_(0, 0.05)
    return model


def step(model, call, inputs, pick=lambda out: out):
    """One training step of `model` run through `call` on the keyword `inputs`: the loss (the
    mean square of what `pick` takes of the output) and each parameter's gradient."""
    model.zero_grad(set_to_none=True)
    loss = (pick(call(**inputs)).double() ** 2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def compare(model, inputs, pick=lambda out: out):
    """Thunder's step against eager's: (worst relative difference, where, a gradient set by one
    side only or "", eager's own movement when every input and parameter moves by a few float64
    roundings). Differences are relative to the largest gradient (the loss: to itself)."""
    le, ge = step(model, model, inputs, pick)
    lt, gt = step(model, thunder.jit(model), inputs, pick)
    scale = max([g.abs().max().item() for g in ge.values() if g is not None] + [1e-30])
    worst, where = abs(lt - le).item() / max(abs(le.item()), 1e-30), "loss"
    for n in ge:
        if (ge[n] is None) != (gt[n] is None):
            return worst, where, f"grad of {n}: thunder {'None' if gt[n] is None else 'set'}, eager {'None' if ge[n] is None else 'set'}", 0.0
        if ge[n] is not None:
            e = (gt[n] - ge[n]).abs().max().item() / scale
            if e > worst:
                worst, where = e, n
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():
            p.mul_(1 + 4e-16 * torch.randn_like(p))
    nudged = {k: v * (1 + 4e-16 * torch.randn_like(v)) if torch.is_tensor(v) and v.is_floating_point() else v
              for k, v in inputs.items()}
    _, gs = step(moved, moved, nudged, pick)
    sens = max([(gs[n] - ge[n]).abs().max().item() / scale for n in ge if ge[n] is not None] + [0.0])
    return worst, where, "", sens


def report(name, build, what=None):
    """Runs `build()` -> (model, inputs, pick) and prints one line (with `what(inputs)`, the size,
    after the name where given): ok where thunder is within 1e-9
    of eager or within ten times eager's own movement, FAIL otherwise, ERR with the exception."""
    try:
        torch.manual_seed(0)
        t0 = time.time()
        model, inputs, pick = build()
        worst, where, bad, sens = compare(prepare(model), inputs, pick)
        status = "ok  " if (worst < 1e-9 or worst <= 10 * sens) and not bad else "FAIL"
        size = f" {what(inputs)}" if what else ""
        print(f"{status} {name}{size}: worst {worst:.2e} ({where}), eager moved by rounding {sens:.2e} "
              f"{bad} {time.time() - t0:.1f} s", flush=True)
    except Exception as e:
        print(f"ERR  {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
