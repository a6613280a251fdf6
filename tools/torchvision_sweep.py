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
import torch

from float64_sweep import exact_hardsigmoid_if_asked, import_library, names, report

import_library("torchvision")
import torchvision.models as M  # noqa: E402
import torchvision.models.video as V  # noqa: E402

IMAGE = """resnet18 resnext50_32x4d wide_resnet50_2 vgg11_bn alexnet squeezenet1_1 densenet121 mnasnet0_5 shufflenet_v2_x0_5
mobilenet_v2 mobilenet_v3_small efficientnet_b0 efficientnet_v2_s regnet_y_400mf regnet_x_400mf convnext_tiny
swin_t swin_v2_t vit_b_16 maxvit_t googlenet inception_v3""".split()
VIDEO = "r3d_18 r2plus1d_18 mc3_18 swin3d_t s3d mvit_v2_s".split()
# Segmentation: dict outputs, atrous convolutions, bilinear upsampling; the loss reads "out" and
# the auxiliary head's "aux". (RAFT's optical flow makes float32 grids: eager fails in float64.)
SEGMENTATION = "fcn_resnet50 deeplabv3_mobilenet_v3_large lraspp_mobilenet_v3_large".split()
SIZE = {"vit_b_16": 224, "maxvit_t": 224, "inception_v3": 299, "googlenet": 96, "alexnet": 96, "swin_v2_t": 64}
VSIZE = {"s3d": (1, 3, 16, 224, 224), "mvit_v2_s": (1, 3, 16, 224, 224)}



def make(name):
    if name in SEGMENTATION:
        import torchvision.models.segmentation as S

        m = getattr(S, name)(num_classes=5, weights=None, weights_backbone=None,
                             **({} if name.startswith("lraspp") else {"aux_loss": True}))
        return m.double().train(), {"input" if name.startswith("lraspp") else "x": torch.randn(2, 3, 64, 64, dtype=torch.float64)}
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
    return m.double().train(), {"x": x}


def logits(out):
    if isinstance(out, dict):  # segmentation: the main and the auxiliary head
        return out["out"] + out["aux"] if "aux" in out else out["out"]
    return out.logits if hasattr(out, "logits") else out


if __name__ == "__main__":
    exact_hardsigmoid_if_asked()
    for name in names(IMAGE + VIDEO + SEGMENTATION):
        report(name, lambda: (*make(name), logits), lambda inputs: str(tuple(next(iter(inputs.values())).shape[2:])))
