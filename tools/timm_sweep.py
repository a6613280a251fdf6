"""timm models at a small size, one training step each under thunder.jit against eager (CPU,
float64, batch 2, 64x64 where the model takes it): the loss and every parameter's gradient,
relative to the largest gradient, beside how far eager's own gradients move when every input and
parameter moves by a few float64 roundings (the step's conditioning at this size).

    PYTHONPATH=python python tools/timm_sweep.py [name ...] [--exact-hardsigmoid]

Dropout and stochastic depth are 0; zero-initialized parameters (Hiera's head, layer scales) are
drawn again. ok: within 1e-9 or ten times eager's own movement. Session 37 (timm 1.0.31, torch
2.13 CPU): 51 of the 57 models below ok; the other six not by thunder's fault: VoVNet-ese, HardCoReNAS,
LCNet and GhostNetV2 (up to 8e-9) because ATen's hardsigmoid backward multiplies by float32's
1/6 even in float64 (thunder's gradient is g / 6; with an exact hardsigmoid in both runs they
match to 3e-15), EfficientViT-MIT (9e-8) and XCiT (2e-9) because their attention and Fourier
features compute in float32 inside the model.
"""
import torch

from float64_sweep import exact_hardsigmoid_if_asked, import_library, names, report

timm = import_library("timm")

DEFAULT = """levit_128s pvt_v2_b0 poolformer_s12 efficientformer_l1 edgenext_xx_small mobilevit_xxs mobilevitv2_050
fastvit_t8 repvit_m1 efficientvit_b0 tiny_vit_5m_224 hiera_tiny_224 davit_tiny focalnet_tiny_srf gcvit_xxtiny
maxvit_nano_rw_256 coatnet_nano_rw_224 xcit_nano_12_p16_224 cait_xxs24_224 eva02_tiny_patch14_224 sequencer2d_s
mixer_s16_224 resmlp_12_224 gmlp_ti16_224 twins_svt_small crossvit_tiny_240 pit_ti_224 tnt_s_patch16_224
visformer_tiny volo_d1_224 regnetz_b16 res2net50_14w_8s resnest14d skresnet18 dla34 dpn68 hrnet_w18_small
cspresnet50 ese_vovnet19b_dw nf_resnet26 lambda_resnet26t botnet26t_256 halonet26t gernet_s repvgg_a0 mobileone_s0
ghostnetv2_100 hardcorenas_a lcnet_050 selecsls42b xception41 convmixer_768_32 mambaout_femto starnet_s1 rdnet_tiny
vit_little_patch16_reg4_gap_256 samvit_base_patch16""".split()


def make(name):
    """The model in float64 and an input it takes: 64x64 (built with img_size=64 where the model
    takes one), else its default size; without drop_path_rate where the model has none."""
    kw = dict(pretrained=False, num_classes=10, drop_rate=0.0, drop_path_rate=0.0)
    last = None
    for extra, size in ((dict(img_size=64), 64), ({}, 64), ({}, None)):
        for args in (kw, {k: v for k, v in kw.items() if k != "drop_path_rate"}):
            try:
                m = timm.create_model(name, **args, **extra).double().train()
                s = size or m.default_cfg["input_size"][-1]
                x = torch.randn(2, 3, s, s, dtype=torch.float64)
                with torch.no_grad():
                    m(x)
                return m, {"x": x}
            except Exception as e:
                last = e
    raise RuntimeError(f"no size fits: {last}")


if __name__ == "__main__":
    exact_hardsigmoid_if_asked()
    for name in names(DEFAULT):
        report(name, lambda: (*make(name), lambda out: out), lambda inputs: f"({inputs['x'].shape[-1]}²)")
