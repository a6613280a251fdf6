"""torchvision classification and video models at a small size, one training step each under
thunder.jit against eager (CPU, float64, batch 2): the loss and every parameter's gradient,
relative to the largest gradient, beside how far eager's own gradients move when every input and
parameter moves by a few float64 roundings (the step's conditioning at this size).

    PYTHONPATH=python python tools/torchvision_sweep.py [name ...] [--exact-hardsigmoid]

Dropout and stochastic depth are 0, zero-initialized parameters are drawn again; GoogLeNet and Inception-v3 return their auxiliary logits in
training, of which the loss reads only the main ones (eager leaves the auxiliary heads' gradients
None, as thunder must). ok: within 1e-9 or ten times eager's own movement. --exact-hardsigmoid:
ATen's hardsigmoid backward multiplies by float32's 1/6 whatever the dtype (MobileNetV3's
squeeze-excitation); an exact one in both runs compares the rest of the model.
"""
import copy
import sys
import time

import torch
import torchvision.models as M
import torchvision.models.video as V

import thunder

IMAGE = """resnet18 resnext50_32x4d wide_resnet50_2 vgg11_bn alexnet squeezenet1_1 densenet121 mnasnet0_5 shufflenet_v2_x0_5
mobilenet_v2 mobilenet_v3_small efficientnet_b0 efficientnet_v2_s regnet_y_400mf regnet_x_400mf convnext_tiny
swin_t swin_v2_t vit_b_16 maxvit_t googlenet inception_v3""".split()
VIDEO = "r3d_18 r2plus1d_18 mc3_18 swin3d_t s3d mvit_v2_s".split()
SIZE = {"vit_b_16": 224, "maxvit_t": 224, "inception_v3": 299, "googlenet": 96, "alexnet": 96, "swin_v2_t": 64}
VSIZE = {"s3d": (1, 3, 16, 224, 224), "mvit_v2_s": (1, 3, 16, 224, 224)}

NAMES = [a for a in sys.argv[1:] if not a.startswith("--")] or IMAGE + VIDEO
if "--exact-hardsigmoid" in sys.argv:
    import torch.nn.functional as F

    def _exact(x, inplace=False):
        return F.relu6(x + 3.0) / 6.0

    F.hardsigmoid = _exact
    torch.nn.Hardsigmoid.forward = lambda self, x: _exact(x)


def make(name):
    kw = {"num_classes": 10}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=True, init_weights=True)
    if name in VIDEO:
        m = getattr(V, name)(**kw)
        x = torch.randn(*VSIZE.get(name, (2, 3, 4, 32, 32)), dtype=torch.float64)
    else:
        m = getattr(M, name)(**kw)
        s = SIZE.get(name, 64)
        x = torch.randn(2, 3, s, s, dtype=torch.float64)
    m = m.double().train()
    with torch.no_grad():  # zero-initialized heads (ViT's) hide what feeds them
        for p in m.parameters():
            if p.numel() > 1 and not p.any():
                p.normal_(0, 0.05)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if hasattr(mod, "stochastic_depth_prob"):
            mod.stochastic_depth_prob = 0.0
        if type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    return m, x


def logits(out):
    return out.logits if hasattr(out, "logits") else out


def step(model, call, x):
    model.zero_grad(set_to_none=True)
    loss = (logits(call(x)).double() ** 2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


for name in NAMES:
    try:
        torch.manual_seed(0)
        t0 = time.time()
        m, x = make(name)
        le, ge = step(m, m, x)
        lt, gt = step(m, thunder.jit(m), x)
        scale = max([g.abs().max().item() for g in ge.values() if g is not None] + [1e-30])
        worst, where = abs(lt - le).item() / max(abs(le.item()), 1e-30), "loss"
        bad = ""
        for n in ge:
            if (ge[n] is None) != (gt[n] is None):
                bad = f"grad of {n}: thunder {'None' if gt[n] is None else 'set'}, eager {'None' if ge[n] is None else 'set'}"
                break
            if ge[n] is not None:
                e = (gt[n] - ge[n]).abs().max().item() / scale
                if e > worst:
                    worst, where = e, n
        m2 = copy.deepcopy(m)
        with torch.no_grad():
            for p in m2.parameters():
                p.mul_(1 + 4e-16 * torch.randn_like(p))
        _, gs = step(m2, m2, x * (1 + 4e-16 * torch.randn_like(x)))
        sens = max((gs[n] - ge[n]).abs().max().item() / scale for n in ge if ge[n] is not None)
        status = "ok  " if (worst < 1e-9 or worst <= 10 * sens) and not bad else "FAIL"
        print(f"{status} {name} {tuple(x.shape[2:])}: worst {worst:.2e} ({where}), eager moved by rounding {sens:.2e} "
              f"{bad} {time.time() - t0:.1f} s", flush=True)
    except Exception as e:
        print(f"ERR  {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
