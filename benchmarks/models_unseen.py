"""Models outside the suite: the same timing and checks as `benchmarks.models`, over architectures
nobody tuned for (other attention forms, norms, position encodings, losses, network shapes).

    python -m benchmarks.models_unseen [benchmarks.models' options]    (--only NAME,... among these)

The suite (`benchmarks.models`) is what each session measures against; these models are the test
of how thunder does on code it was not tuned on. On CUDA the sizes are a real run's (bfloat16,
batches as a training script on one 80 GB GPU would use), with fewer layers for the large
decoders; on the CPU (or with --small) tiny configs of the same classes. The timed contenders
default to eager and thunder (torch.compile's first calls cost minutes over this many models);
pass --contenders to add it.
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

from benchmarks import models as M
from benchmarks.models import Case, Spec, _causal_lm, _classifier, _seq2seq, _timm, _upcast


def _mlm(cls, cfg_cls, big_cfg, tiny_cfg, B_T_big=(32, 256), B_T_tiny=(2, 32), mask=True):
    """A masked-LM model on a padded batch (every other sequence ends between T/2 and T), 15% of
    the real tokens labelled."""

    def build(lib, inp, big, dropout):
        cfg = getattr(lib, cfg_cls)(**(big_cfg if big else tiny_cfg))
        B, T = B_T_big if big else B_T_tiny
        for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
            if not dropout and hasattr(cfg, k):
                setattr(cfg, k, 0.0)
        ids = inp.ints(cfg.vocab_size, (B, T), low=3)
        positions = torch.arange(T, device=inp.device)
        lengths = torch.where(torch.arange(B, device=inp.device) % 2 == 0, T, inp.ints(T, (B,), low=T // 2))
        am = (positions[None, :] < lengths[:, None]).long()
        labels = torch.where((inp.uniform(B, T) < 0.15) & am.bool(), ids, -100)
        make = lambda: getattr(lib, cls)(cfg)  # noqa: E731
        if not mask:
            return Case(make, f"B {B}, T {T}",
                        lambda m, input_ids, labels: m(input_ids=input_ids, labels=labels).loss,
                        {"input_ids": ids, "labels": labels},
                        lambda m, input_ids: m(input_ids=input_ids).logits, {"input_ids": ids})
        return Case(make, f"B {B}, T {T}, padded",
                    lambda m, input_ids, attention_mask, labels: m(input_ids=input_ids, attention_mask=attention_mask,
                                                                   labels=labels).loss,
                    {"input_ids": ids, "attention_mask": am, "labels": labels},
                    lambda m, input_ids, attention_mask: m(input_ids=input_ids, attention_mask=attention_mask).logits,
                    {"input_ids": ids, "attention_mask": am})

    return build


_TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)


def _decoder(cls, cfg_cls, big_cfg, tiny_cfg, B_T_big=(4, 1024)):
    def build(lib, inp, big, dropout):
        cfg = getattr(lib, cfg_cls)(**(big_cfg if big else tiny_cfg))
        for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout",
                  "attention_probs_dropout_prob", "hidden_dropout_prob", "dropout", "activation_dropout"):
            if not dropout and isinstance(getattr(cfg, k, None), float):
                setattr(cfg, k, 0.0)
        B, T = B_T_big if big else (2, 32)
        return _causal_lm(lambda: getattr(lib, cls)(cfg), inp, cfg.vocab_size, B, T)

    return build


def bart(lib, inp, big, dropout):
    if big:  # bart-base
        cfg, B, S, T = lib.BartConfig(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                                      decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072), 16, 512, 128
    else:
        cfg, B, S, T = lib.BartConfig(vocab_size=512, d_model=64, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                      decoder_ffn_dim=128, max_position_embeddings=64), 2, 32, 16
    if not dropout:
        cfg.dropout = cfg.attention_dropout = cfg.activation_dropout = 0.0
    src = {"input_ids": inp.ints(cfg.vocab_size, (B, S), low=3)}
    return _seq2seq(lambda: lib.BartForConditionalGeneration(cfg), inp, src, T, cfg.vocab_size, B, f"B {B}, T {S} -> {T}")


def segformer(lib, inp, big, dropout):
    # SegFormer-B0's shape (a mix-transformer encoder with reduced-key attention, an all-MLP decoder),
    # per-pixel cross-entropy at a quarter of the input's resolution.
    if big:
        cfg, B, res = lib.SegformerConfig(num_labels=150), 16, 512
    else:
        cfg, B, res = lib.SegformerConfig(num_labels=5, hidden_sizes=[8, 16, 24, 32], decoder_hidden_size=32,
                                          num_attention_heads=[1, 1, 2, 2]), 2, 64
    if not dropout:
        cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = cfg.classifier_dropout_prob = 0.0
        cfg.drop_path_rate = 0.0
    x, y = inp.floats(B, 3, res, res), inp.ints(cfg.num_labels, (B, res // 4, res // 4))
    return Case(lambda: lib.SegformerForSemanticSegmentation(cfg), f"B {B}, {res}²",
                lambda m, x, y: F.cross_entropy(_upcast(m(pixel_values=x).logits), y), {"x": x, "y": y},
                lambda m, x: m(pixel_values=x).logits, {"x": x})


def wav2vec2(lib, inp, big, dropout):
    # wav2vec2-base with a CTC head: a convolutional feature encoder over raw audio, then a
    # transformer with a convolutional position embedding; the CTC loss over 32 characters.
    if big:
        cfg, B, samples, L = lib.Wav2Vec2Config(vocab_size=32), 8, 16000 * 8, 80
    else:
        cfg, B, samples, L = lib.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=64,
                                                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4), 2, 800, 8
    cfg.mask_time_prob = 0.0  # SpecAugment draws its masks with numpy
    cfg.layerdrop = 0.0
    if not dropout:
        cfg.hidden_dropout = cfg.attention_dropout = cfg.activation_dropout = cfg.feat_proj_dropout = 0.0
        cfg.final_dropout = 0.0
    audio, labels = inp.floats(B, samples), inp.ints(cfg.vocab_size, (B, L), low=1)
    return Case(lambda: lib.Wav2Vec2ForCTC(cfg), f"B {B}, {samples / 16000:g} s of 16 kHz audio",
                lambda m, audio, labels: m(input_values=audio, labels=labels).loss, {"audio": audio, "labels": labels},
                lambda m, audio: m(input_values=audio).logits, {"audio": audio})


def _torchvision(name, res=224, B=64, small_res=64, **kw):
    def build(lib, inp, big, dropout):
        make = lambda: getattr(lib.models, name)(weights=None, **kw)  # noqa: E731
        return _classifier(make, inp, B if big else 2, res if big else small_res, 1000,
                           lambda out: out.logits if hasattr(out, "logits") else out)

    return build


_BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)

EXTRA = {
    # transformers: encoders
    "roberta": Spec("transformers", "RoBERTa-base masked LM",
                    _mlm("RobertaForMaskedLM", "RobertaConfig", dict(vocab_size=50265, max_position_embeddings=514,
                                                                     pad_token_id=1),
                         dict(_TINY, max_position_embeddings=72, pad_token_id=1))),
    "distilbert": Spec("transformers", "DistilBERT-base masked LM",
                       _mlm("DistilBertForMaskedLM", "DistilBertConfig", {},
                            dict(vocab_size=512, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                                 max_position_embeddings=64))),
    "deberta_v3": Spec("transformers", "DeBERTa-v3-base masked LM (disentangled attention)",
                       _mlm("DebertaV2ForMaskedLM", "DebertaV2Config",
                            dict(vocab_size=128100, relative_attention=True, position_buckets=256,
                                 pos_att_type=["p2c", "c2p"], max_relative_positions=-1, norm_rel_ebd="layer_norm",
                                 share_att_key=True, position_biased_input=False, **_BERT_BASE),
                            dict(_TINY, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"],
                                 max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
                                 position_biased_input=False), B_T_big=(16, 256))),
    "albert": Spec("transformers", "ALBERT-base masked LM (shared layers)",
                   _mlm("AlbertForMaskedLM", "AlbertConfig", dict(embedding_size=128, **_BERT_BASE),
                        dict(_TINY, embedding_size=32))),
    "bart": Spec("transformers", "BART-base", bart),
    # transformers: decoders (fewer layers than the released models, their widths)
    "opt": Spec("transformers", "OPT-125M",
                _decoder("OPTForCausalLM", "OPTConfig", {},
                         dict(vocab_size=512, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                              max_position_embeddings=64, word_embed_proj_dim=64), B_T_big=(8, 1024))),
    "gpt_neox": Spec("transformers", "GPT-NeoX, 6 layers of Pythia-410M's shape (partial rotary)",
                     _decoder("GPTNeoXForCausalLM", "GPTNeoXConfig",
                              dict(vocab_size=50304, hidden_size=1024, num_hidden_layers=6, num_attention_heads=16,
                                   intermediate_size=4096, rotary_pct=0.25, max_position_embeddings=2048),
                              _TINY, B_T_big=(8, 1024))),
    "phi": Spec("transformers", "Phi, 2 layers of Phi-2's shape (parallel block, partial rotary)",
                _decoder("PhiForCausalLM", "PhiConfig",
                         dict(vocab_size=51200, hidden_size=2560, intermediate_size=10240, num_hidden_layers=2,
                              num_attention_heads=32, partial_rotary_factor=0.4), _TINY)),
    "gemma2": Spec("transformers", "Gemma 2, 2 layers of 2B's shape (soft-capping, local attention)",
                   _decoder("Gemma2ForCausalLM", "Gemma2Config",
                            dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=2,
                                 num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=512),
                            dict(_TINY, num_key_value_heads=2, head_dim=16, sliding_window=16))),
    "qwen3": Spec("transformers", "Qwen3, 4 layers of 0.6B's shape (q/k norms)",
                  _decoder("Qwen3ForCausalLM", "Qwen3Config",
                           dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=4,
                                num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
                           dict(_TINY, num_key_value_heads=2, head_dim=16))),
    "falcon": Spec("transformers", "Falcon, 2 layers of 7B's shape (multi-query, parallel block)",
                   _decoder("FalconForCausalLM", "FalconConfig", dict(num_hidden_layers=2),
                            dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4))),
    "bloom": Spec("transformers", "BLOOM, 4 layers of 560M's shape (ALiBi)",
                  _decoder("BloomForCausalLM", "BloomConfig",
                           dict(vocab_size=250880, hidden_size=1024, n_layer=4, n_head=16),
                           dict(vocab_size=512, hidden_size=64, n_layer=2, n_head=4), B_T_big=(8, 1024))),
    # transformers: vision and audio
    "segformer": Spec("transformers", "SegFormer-B0, semantic segmentation", segformer),
    "wav2vec2": Spec("transformers", "wav2vec2-base, CTC", wav2vec2),
    # timm
    "deit_s": Spec("timm", "DeiT-S (timm)", _timm("deit_small_patch16_224", img_size=64)),
    "beit_b": Spec("timm", "BEiT-B (timm, relative position bias)", _timm("beit_base_patch16_224", img_size=64)),
    "convnextv2_t": Spec("timm", "ConvNeXt-V2-T (timm, global response norm)", _timm("convnextv2_tiny")),
    "regnety_032": Spec("timm", "RegNetY-3.2GF (timm, squeeze-excite)", _timm("regnety_032")),
    "maxvit_t": Spec("timm", "MaxViT-T (timm)", _timm("maxvit_tiny_tf_224", img_size=64)),
    "coatnet_0": Spec("timm", "CoAtNet-0 (timm)", _timm("coatnet_0_rw_224", img_size=64)),
    "levit_256": Spec("timm", "LeViT-256 (timm)", _timm("levit_256", img_size=64)),
    "mobilevitv2": Spec("timm", "MobileViT-v2 1.0 (timm)", _timm("mobilevitv2_100", res=256)),
    "efficientnetv2_s": Spec("timm", "EfficientNetV2-S (timm)", _timm("efficientnetv2_rw_s")),
    # torchvision
    "resnet18": Spec("torchvision", "ResNet-18 (torchvision)", _torchvision("resnet18", B=128)),
    "densenet121": Spec("torchvision", "DenseNet-121 (torchvision)", _torchvision("densenet121")),
    "vgg16_bn": Spec("torchvision", "VGG-16-BN (torchvision)", _torchvision("vgg16_bn", dropout=0.0)),
    "shufflenet": Spec("torchvision", "ShuffleNetV2 1.0 (torchvision)", _torchvision("shufflenet_v2_x1_0", B=128)),
    "inception_v3": Spec("torchvision", "Inception-v3 (torchvision, no auxiliary head)",
                         _torchvision("inception_v3", res=299, small_res=96, aux_logits=False, init_weights=False)),
    "swin_v2_t": Spec("torchvision", "Swin-V2-T (torchvision)", _torchvision("swin_v2_t", res=256)),
    "vit_b_16_tv": Spec("torchvision", "ViT-B/16 (torchvision)", _torchvision("vit_b_16", small_res=224)),
}


@contextlib.contextmanager
def these_models(keep_suite=False):
    """benchmarks.models' table holding these models (and the suite's too with keep_suite), for the
    length of the block."""
    saved = dict(M.MODELS)
    if not keep_suite:
        M.MODELS.clear()
    M.MODELS.update({k: v for k, v in EXTRA.items() if k not in M.MODELS})
    try:
        yield
    finally:
        M.MODELS.clear()
        M.MODELS.update(saved)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--contenders" not in argv and "--check" not in argv:
        argv += ["--contenders", "eager,thunder"]
    with these_models():
        return M.main(argv)


if __name__ == "__main__":
    sys.exit(main())
