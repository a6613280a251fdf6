"""diffusers models at small sizes, one training step each under thunder.jit against eager (CPU,
float64): the loss and every parameter's gradient, relative to the largest gradient.

    PYTHONPATH=python python tools/diffusers_sweep.py [name ...] [--embedding64]

Dropout is set to 0 and zero-initialized parameters (ControlNet's output convolutions, adaLN-Zero)
are drawn again, so that what feeds them is compared too. --embedding64: diffusers computes the
sinusoidal timestep embedding in float32 whatever the model's dtype; with this flag it runs in
float64, so that the models compare to float64's rounding. Prints ok / FAIL / ERR per model, with eager's
own movement under a few float64 roundings of its inputs and parameters beside (tools/float64_sweep.py).

Session 37 (diffusers 0.42.1, torch 2.13 CPU): with --embedding64 all 12 models that run in eager
in float64 match to 4e-15 or better (AutoencoderTiny fails in eager in float64); without it DiT,
PixArt, SD3 and Flux differ by up to 3e-6, the float32 embedding's rounding, as far from float64
in eager as in thunder.

Session 43 added nine (Sana, AuraFlow, HunyuanDiT, Lumina2, CogVideoX, LTX-Video, Wan, DC-AE,
Qwen-Image). With --embedding64: CogVideoX and DC-AE match to 5e-16; Sana, AuraFlow, HunyuanDiT,
LTX-Video, Wan and Qwen-Image differ from eager by 2e-9 to 5e-8, because each computes inside in
float32 whatever the model's dtype (FP32LayerNorm, float32 RoPE, Sana's linear attention, the
`.float()` of Wan's modulations): float32's rounding, which eager moved by float64 roundings does
not show. Their float32 runs against float64 (`tools/device_sweep.py diffusers ... --device cpu
--dtype float32`): Sana, HunyuanDiT, LTX-Video, Wan within eager's error; AuraFlow and Qwen-Image
not at first, from their timestep embedding (scale 1000: sin and cos of arguments up to 1e6 in
float32), which in float32 is 0.67% off the exact embedding in eager and in thunder alike and
differs between the two by 0.2%, while the float64 reference computed it with eager's very float32
ops. device_sweep's referee now computes it in float64 (`exact_embeddings`): both ok.
Lumina2 reads per-sample caption lengths as Python numbers (`.tolist()`): thunder.jit refuses it
by name; under thunderfx (`--fx`) it matches.
"""
import math
import sys

import diffusers as D
import torch

from float64_sweep import names, prepare, report

torch.manual_seed(0)
B = 2


def r(*s):
    return torch.randn(*s, dtype=torch.float64)


def t_(n=1000):
    return torch.randint(0, n, (B,))


CASES = {
    "AutoencoderKL": (lambda: D.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                               up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                                               latent_channels=4, norm_num_groups=4, sample_size=16),
                      lambda: dict(sample=r(B, 3, 16, 16)), lambda o: o.sample),
    "VQModel": (lambda: D.VQModel(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                   up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), latent_channels=4,
                                   norm_num_groups=4, num_vq_embeddings=16, vq_embed_dim=4, sample_size=16),
                lambda: dict(sample=r(B, 3, 16, 16)), lambda o: o.sample),
    "AutoencoderTiny": (lambda: D.AutoencoderTiny(in_channels=3, out_channels=3, encoder_block_out_channels=(8, 8),
                                                   decoder_block_out_channels=(8, 8), num_encoder_blocks=(1, 1),
                                                   num_decoder_blocks=(1, 1), latent_channels=4),
                        lambda: dict(sample=r(B, 3, 16, 16)), lambda o: o.sample),
    "UNet2DModel": (lambda: D.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                                           down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                           up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4,
                                           attention_head_dim=4, layers_per_block=1),
                    lambda: dict(sample=r(B, 3, 16, 16), timestep=t_()), lambda o: o.sample),
    "UNet2DCondition-SDXL": (lambda: D.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4, cross_attention_dim=16, attention_head_dim=4, transformer_layers_per_block=(1, 2),
        addition_embed_type="text_time", addition_time_embed_dim=4, projection_class_embeddings_input_dim=16 + 6 * 4,
        use_linear_projection=True),
        lambda: dict(sample=r(B, 4, 16, 16), timestep=t_(), encoder_hidden_states=r(B, 5, 16),
                     added_cond_kwargs={"text_embeds": r(B, 16), "time_ids": r(B, 6)}), lambda o: o.sample),
    "UNet2DCondition-simple": (lambda: D.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"),
        up_block_types=("SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D"), mid_block_type="UNetMidBlock2DSimpleCrossAttn",
        norm_num_groups=4, cross_attention_dim=16, attention_head_dim=4, resnet_time_scale_shift="scale_shift",
        class_embed_type="timestep"),
        lambda: dict(sample=r(B, 4, 16, 16), timestep=t_(), encoder_hidden_states=r(B, 5, 16), class_labels=t_()),
        lambda o: o.sample),
    "UNet3DCondition": (lambda: D.UNet3DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"), up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
        norm_num_groups=4, cross_attention_dim=16, attention_head_dim=4),
        lambda: dict(sample=r(B, 4, 3, 8, 8), timestep=t_(), encoder_hidden_states=r(B, 5, 16)), lambda o: o.sample),
    "ControlNet": (lambda: D.ControlNetModel(
        in_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), norm_num_groups=4, cross_attention_dim=16,
        attention_head_dim=4, conditioning_embedding_out_channels=(4, 8)),
        lambda: dict(sample=r(B, 4, 8, 8), timestep=t_(), encoder_hidden_states=r(B, 5, 16), controlnet_cond=r(B, 3, 16, 16)),
        lambda o: torch.cat([d.flatten() for d in o.down_block_res_samples] + [o.mid_block_res_sample.flatten()])),
    "DiT": (lambda: D.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
                                             num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10),
            lambda: dict(hidden_states=r(B, 4, 8, 8), timestep=t_(), class_labels=torch.randint(0, 10, (B,))),
            lambda o: o.sample),
    "PixArt": (lambda: D.PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                                   num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=16,
                                                   caption_channels=12),
               lambda: dict(hidden_states=r(B, 4, 8, 8), encoder_hidden_states=r(B, 5, 12), timestep=t_(),
                            added_cond_kwargs={"resolution": None, "aspect_ratio": None}), lambda o: o.sample),
    "SD3Transformer": (lambda: D.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                                                        attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                                        caption_projection_dim=16, pooled_projection_dim=8, out_channels=4,
                                                        pos_embed_max_size=16),
                       lambda: dict(hidden_states=r(B, 4, 8, 8), encoder_hidden_states=r(B, 5, 16),
                                    pooled_projections=r(B, 8), timestep=t_()), lambda o: o.sample),
    "Flux": (lambda: D.FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                               attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                               pooled_projection_dim=8, axes_dims_rope=(2, 2, 4)),
             lambda: dict(hidden_states=r(B, 16, 4), encoder_hidden_states=r(B, 5, 16), pooled_projections=r(B, 8),
                          timestep=torch.rand(B, dtype=torch.float64), img_ids=torch.zeros(16, 3, dtype=torch.float64),
                          txt_ids=torch.zeros(5, 3, dtype=torch.float64)), lambda o: o.sample),
    "PriorTransformer": (lambda: D.PriorTransformer(num_attention_heads=2, attention_head_dim=8, num_layers=2,
                                                     embedding_dim=16, num_embeddings=5, additional_embeddings=4),
                         lambda: dict(hidden_states=r(B, 16), timestep=t_(), proj_embedding=r(B, 16),
                                      encoder_hidden_states=r(B, 5, 16), attention_mask=torch.ones(B, 5, dtype=torch.bool)),
                         lambda o: o.predicted_image_embedding),
    # Session 43: nine more, the diffusion transformers and video models of 2024-25 and DC-AE.
    "Sana": (lambda: D.SanaTransformer2DModel(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8,
                                               num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=8,
                                               cross_attention_dim=16, caption_channels=12, sample_size=8, patch_size=1),
             lambda: dict(hidden_states=r(B, 4, 8, 8), encoder_hidden_states=r(B, 5, 12), timestep=t_()), lambda o: o.sample),
    "AuraFlow": (lambda: D.AuraFlowTransformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=1,
                                                       num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=2,
                                                       joint_attention_dim=16, caption_projection_dim=16, out_channels=4,
                                                       pos_embed_max_size=16),
                 lambda: dict(hidden_states=r(B, 4, 8, 8), encoder_hidden_states=r(B, 5, 16), timestep=t_()), lambda o: o.sample),
    "HunyuanDiT": (lambda: D.HunyuanDiT2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, patch_size=2,
                                                sample_size=8, hidden_size=16, num_layers=2, cross_attention_dim=16,
                                                cross_attention_dim_t5=16, pooled_projection_dim=8, text_len=5, text_len_t5=6,
                                                use_style_cond_and_image_meta_size=False),
                   lambda: dict(hidden_states=r(B, 4, 8, 8), timestep=t_().double(), encoder_hidden_states=r(B, 5, 16),
                                text_embedding_mask=torch.ones(B, 5, dtype=torch.bool), encoder_hidden_states_t5=r(B, 6, 16),
                                text_embedding_mask_t5=torch.ones(B, 6, dtype=torch.bool),
                                image_rotary_emb=None), lambda o: o.sample),
    "Lumina2": (lambda: D.Lumina2Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, hidden_size=16, num_layers=2,
                                                     num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16,
                                                     axes_dim_rope=(4, 2, 2), axes_lens=(32, 32, 32), cap_feat_dim=12),
                lambda: dict(hidden_states=r(B, 4, 8, 8), timestep=torch.rand(B, dtype=torch.float64), encoder_hidden_states=r(B, 5, 12),
                             encoder_attention_mask=torch.ones(B, 5, dtype=torch.bool)), lambda o: o.sample),
    "CogVideoX": (lambda: D.CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
                                                         time_embed_dim=8, text_embed_dim=16, num_layers=2, sample_width=8,
                                                         sample_height=8, sample_frames=5, patch_size=2, max_text_seq_length=5,
                                                         temporal_compression_ratio=4),
                  lambda: dict(hidden_states=r(B, 2, 4, 8, 8), encoder_hidden_states=r(B, 5, 16), timestep=t_()), lambda o: o.sample),
    "LTXVideo": (lambda: D.LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8,
                                                       cross_attention_dim=16, num_layers=2, caption_channels=12),
                 lambda: dict(hidden_states=r(B, 2 * 4 * 4, 8), encoder_hidden_states=r(B, 5, 12), timestep=t_(),
                              encoder_attention_mask=torch.ones(B, 5), num_frames=2, height=4, width=4), lambda o: o.sample),
    "Wan": (lambda: D.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                             out_channels=4, text_dim=12, freq_dim=16, ffn_dim=32, num_layers=2, rope_max_seq_len=32),
            lambda: dict(hidden_states=r(B, 4, 2, 8, 8), timestep=t_(), encoder_hidden_states=r(B, 5, 12)), lambda o: o.sample),
    "AutoencoderDC": (lambda: D.AutoencoderDC(in_channels=3, latent_channels=4, attention_head_dim=4,
                                               encoder_block_types=("ResBlock", "EfficientViTBlock"),
                                               decoder_block_types=("ResBlock", "EfficientViTBlock"),
                                               encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
                                               encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
                                               encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
                                               decoder_norm_types="rms_norm", decoder_act_fns="silu"),
                      lambda: dict(sample=r(B, 3, 16, 16)), lambda o: o.sample),
    "QwenImage": (lambda: D.QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                                         attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                                         axes_dims_rope=(2, 2, 4)),
                  lambda: dict(hidden_states=r(B, 16, 16), encoder_hidden_states=r(B, 5, 16),
                               encoder_hidden_states_mask=torch.ones(B, 5), timestep=torch.rand(B, dtype=torch.float64),
                               img_shapes=[[(1, 4, 4)]] * B), lambda o: o.sample),
}


def exact_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1,
                             max_period=10000):
    """diffusers' sinusoidal timestep embedding computed in float64 (diffusers computes it in
    float32 whatever the model's dtype)."""
    half = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float64, device=timesteps.device)
    exponent = exponent / (half - downscale_freq_shift)
    emb = scale * (timesteps[:, None].double() * torch.exp(exponent)[None, :])
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if embedding_dim % 2 == 1:
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


class exact_embeddings:
    """While entered, diffusers' timestep embedding computes in float64 (a float64 referee's runs:
    at scale 1000, AuraFlow's and Qwen-Image's, its float32 rounding is 0.67% of the embedding)."""

    def __enter__(self):
        import diffusers.models.embeddings as E
        self._old = E.get_timestep_embedding
        E.get_timestep_embedding = exact_timestep_embedding
        return self

    def __exit__(self, *exc):
        import diffusers.models.embeddings as E
        E.get_timestep_embedding = self._old
        return False


if "--embedding64" in sys.argv:
    # The sinusoidal timestep embedding computes in float32 whatever the model's dtype: in float64
    # here, so that thunder and eager can be compared to float64's rounding.
    exact_embeddings().__enter__()


def build(name):
    make, inputs_fn, pick = CASES[name]
    model = prepare(make().double().train())  # (drawn again before the inputs are drawn)
    return model, inputs_fn(), pick


if __name__ == "__main__":
    for name in names(CASES):
        report(name, lambda: build(name))
