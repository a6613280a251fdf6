"""What a user brings beside the classifiers and LMs the other sweeps cover: Hugging Face task
heads with their losses (regression / single / multi-label classification, token classification,
question answering, multiple choice, pre-training heads, seq2seq with labels, CLIP's and SigLIP's
contrastive loss, audio classification and x-vectors, vision-encoder-decoder), their options
(output_attentions / output_hidden_states, return_dict=False, gradient checkpointing, reentrant
or not), timm's feature extractors and heads (features_only, forward_features / forward_head,
forward_intermediates, global pool variants, num_classes=0, grad checkpointing, drop path in
eval) and torchvision's detectors (train: the loss dict; eval: boxes after NMS). One step each,
float64, CPU, thunder against eager: every output tensor and every parameter's gradient relative
to its largest value; ok under 1e-9.

    PYTHONPATH=python python tools/task_sweep.py [name ...] [--hf] [--timm] [--detection] [--exact-hardsigmoid]

Programs thunder.jit refuses with a message naming thunder.dynamo.thunderfx (value-dependent
code: torchvision's transform draws its size with .item(), detection heads select boxes by
score) run under thunderfx as the message says, and must equal eager there. torchvision's
compiled nms cannot load beside a CPU torch (benchmarks/libraries.py): the detectors' NMS is
replaced by a greedy one over torch ops, in both runs. Dropout is 0, random draws are seeded
alike in both runs.

Session 46 (transformers 5.17, timm 1.0.29, torchvision 0.28, torch 2.13 CPU): all ok. Found on
the way: binary_cross_entropy_with_logits gave a float64 loss where eager's is float32 (ELECTRA's
discriminator passes `labels.float()` beside float64 logits; ATen computes into `1 - target`);
torch.where(condition)'s refusal did not name thunderfx (Faster R-CNN in eval). Left out: models
that compute in float32 inside a float64 model, where eager's float32 rounding and thunder's differ
by 1e-8 to 4e-7 of the scale: ELECTRA's loss, the heads of the Llama family (rotary cos/sin in
float32: thunder's are correctly rounded, eager's 1 ulp off at 5% of positions) and any loss
through transformers' `logits.float()`; and transformers' MoE experts (torch._grouped_mm takes no
float64). The R-CNNs' RPN objectness loss is float32 too (its labels are): compared to 1e-6 (eager
and thunder differ by up to 4e-7) and left out of the loss.
"""
import copy
import os
import sys
import time

import torch

import thunder
from float64_sweep import exact_hardsigmoid_if_asked, import_library, prepare

T = None


def _tensors(o, pre=""):
    if torch.is_tensor(o):
        yield pre, o
    elif hasattr(o, "items"):
        for k, v in o.items():
            yield from _tensors(v, f"{pre}.{k}")
    elif isinstance(o, (list, tuple)):
        for i, v in enumerate(o):
            yield from _tensors(v, f"{pre}[{i}]")


def _mean_squares(out):
    return sum((t ** 2).mean() for _, t in _tensors(out) if t.is_floating_point() and t.requires_grad)


def _step(model, call, inputs, loss, train):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(123)
    with torch.enable_grad() if train else torch.no_grad():
        out = in_box_order(call(**inputs))
        if train:
            loss(out).backward()
    return dict(_tensors(out)), {n: p.grad for n, p in model.named_parameters()}


def in_box_order(out):
    """A detector's eval output, each image's detections in the order of their boxes: boxes of
    equal score (Mask R-CNN's random heads give two a score 2e-16 apart) may come in either order
    from a sort by score."""
    if not (isinstance(out, list) and out and isinstance(out[0], dict) and "boxes" in out[0]):
        return out
    res = []
    for d in out:
        n = len(d["boxes"])
        order = sorted(range(n), key=lambda i: [round(v, 6) for v in d["boxes"][i].tolist()])
        res.append({k: v[order] if torch.is_tensor(v) and len(v) == n else v for k, v in d.items()})
    return res


def check(name, build, train=True, loss=_mean_squares, float32=()):
    """One line: ok / FAIL (worst relative difference and where) / ERR, and how thunder ran it.
    `float32`: outputs the model computes in float32 (compared to 1e-6, left out of the loss)."""
    t0 = time.time()
    try:
        torch.manual_seed(0)
        model, inputs = build()
        model = prepare(model.double()).train(train)
        oe, ge = _step(model, model, inputs, loss, train)
        how = "jit"
        try:
            ot, gt = _step(model, thunder.jit(model), inputs, loss, train)
        except NotImplementedError as e:
            if "thunder.dynamo.thunderfx" not in str(e):
                raise
            from thunder.dynamo import thunderfx

            torch._dynamo.reset()
            how = "thunderfx (jit refuses: " + str(e).split(":")[1].strip()[:60] + ")"
            ot, gt = _step(model, thunderfx(model), inputs, loss, train)
        bad = [f"outputs {sorted(set(oe) ^ set(ot))}"] if set(oe) != set(ot) else []
        worst, where = 0.0, ""
        pairs = [(k, oe[k], ot[k]) for k in oe if k in ot]
        pairs += [(k, ge[k], gt[k]) for k in ge if ge[k] is not None and gt[k] is not None]
        bad += [f"grad of {k}: eager {ge[k] is not None}, thunder {gt[k] is not None}" for k in ge
                if (ge[k] is None) != (gt[k] is None)]
        # (an output relative to its largest value, a gradient to the largest gradient: some are
        # zero but for rounding, as attention's key bias, whose softmax does not see it)
        top = max([g.abs().max().item() for g in ge.values() if g is not None and g.numel()] + [1e-30])
        for k, a, b in pairs:
            if a.shape != b.shape or a.dtype != b.dtype:
                bad.append(f"{k}: {tuple(a.shape)} {a.dtype} in eager, {tuple(b.shape)} {b.dtype} from thunder")
            elif not a.is_floating_point():
                bad += [] if torch.equal(a, b) else [f"{k}: integers differ"]
            elif a.numel():
                scale = top if k in ge else a.abs().max().item()
                e = (a - b).abs().max().item() / max(scale, 1e-30)
                if k in float32:
                    bad += [f"{k} (float32) {e:.1e} off"] if e > 1e-6 else []
                    continue
                if e > worst:
                    worst, where = e, k
        ok = worst < 1e-9 and not bad
        print(f"{'ok  ' if ok else 'FAIL'} {name} [{'train' if train else 'eval'}, {how}]: worst {worst:.1e} ({where}) "
              f"{'; '.join(bad[:3])} {time.time() - t0:.1f} s", flush=True)
    except Exception as e:  # noqa: BLE001 - one line per model
        print(f"ERR  {name} [{'train' if train else 'eval'}]: {type(e).__name__}: {str(e)[:300]}", flush=True)


def hf_cases():
    global T
    T = import_library("transformers")
    T.logging.set_verbosity_error()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 128, (2, 16), generator=g)
    am = torch.ones_like(ids)
    am[1, 12:] = 0
    short = ids[:, :8].contiguous()
    img = lambda: torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64)  # noqa: E731
    two = torch.tensor([0, 2])
    bert = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=64)
    enc_dec = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                   dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    t5 = dict(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
              decoder_start_token_id=0)
    vit = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    w2v = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
               conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
               mask_time_prob=0.0, layerdrop=0.0, hidden_dropout=0, attention_dropout=0, activation_dropout=0,
               feat_proj_dropout=0, final_dropout=0)
    whisper = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                   max_source_positions=32, max_target_positions=32, dropout=0, attention_dropout=0,
                   activation_dropout=0, decoder_start_token_id=1, pad_token_id=0)
    text_vision = dict(text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=32),
                       vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4))

    def gc(m, **kw):
        m.gradient_checkpointing_enable(**kw)
        return m

    def seq(problem, n):
        labels = {"regression": torch.randn(2, n, generator=g, dtype=torch.float64).squeeze(-1),
                  "single_label_classification": two,
                  "multi_label_classification": (torch.rand(2, n, generator=g) > 0.5).double()}[problem]
        return lambda: (T.BertForSequenceClassification(T.BertConfig(**bert, num_labels=n, problem_type=problem)),
                        dict(input_ids=ids, attention_mask=am, labels=labels))

    def ved():
        m = T.VisionEncoderDecoderModel(encoder=T.ViTModel(T.ViTConfig(**vit)), decoder=T.GPT2LMHeadModel(T.GPT2Config(
            vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True, is_decoder=True,
            resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)))
        m.config.decoder_start_token_id, m.config.pad_token_id = 1, 0
        return m, dict(pixel_values=img(), labels=short)

    L = lambda o: o.loss  # noqa: E731
    return {
        "bert_regression": (seq("regression", 1), L),
        "bert_regression3": (seq("regression", 3), L),
        "bert_single_label": (seq("single_label_classification", 3), L),
        "bert_multi_label": (seq("multi_label_classification", 3), L),
        "bert_token_classification": (lambda: (T.BertForTokenClassification(T.BertConfig(**bert, num_labels=5)), dict(
            input_ids=ids, attention_mask=am, labels=torch.where(am.bool(), ids % 5, -100))), L),
        # (a start position past the sequence: clamped to it and ignored, in eager)
        "bert_question_answering": (lambda: (T.BertForQuestionAnswering(T.BertConfig(**bert)), dict(
            input_ids=ids, attention_mask=am, start_positions=torch.tensor([2, 20]), end_positions=torch.tensor([5, 7]))), L),
        "bert_multiple_choice": (lambda: (T.BertForMultipleChoice(T.BertConfig(**bert)), dict(
            input_ids=torch.randint(3, 128, (2, 3, 8), generator=g), labels=two)), L),
        "bert_pretraining": (lambda: (T.BertForPreTraining(T.BertConfig(**bert)), dict(
            input_ids=ids, attention_mask=am, labels=torch.where(am.bool(), ids, -100),
            next_sentence_label=torch.tensor([0, 1]))), L),
        "bert_attentions_hidden_states": (lambda: (T.BertModel(T.BertConfig(**bert, attn_implementation="eager")), dict(
            input_ids=ids, attention_mask=am, output_attentions=True, output_hidden_states=True)), _mean_squares),
        "bert_return_dict_false": (lambda: (T.BertForSequenceClassification(T.BertConfig(**bert, num_labels=2)), dict(
            input_ids=ids, attention_mask=am, labels=torch.tensor([0, 1]), return_dict=False)), lambda o: o[0]),
        "bert_grad_checkpointing_reentrant": (lambda: (gc(T.BertForSequenceClassification(T.BertConfig(**bert, num_labels=3)),
                                                          gradient_checkpointing_kwargs={"use_reentrant": True}),
                                                       dict(input_ids=ids, attention_mask=am, labels=two)), L),
        "albert_pretraining_sop": (lambda: (T.AlbertForPreTraining(T.AlbertConfig(**bert, embedding_size=16, classifier_dropout_prob=0)), dict(
            input_ids=ids, attention_mask=am, labels=torch.where(am.bool(), ids, -100), sentence_order_label=torch.tensor([0, 1]))), L),
        "deberta_v2_question_answering": (lambda: (T.DebertaV2ForQuestionAnswering(T.DebertaV2Config(
            **bert, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"])), dict(
            input_ids=ids, attention_mask=am, start_positions=torch.tensor([1, 4]), end_positions=torch.tensor([3, 9]))), L),
        "gpt2_double_heads": (lambda: (T.GPT2DoubleHeadsModel(T.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                                          resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, summary_first_dropout=0)),
                               dict(input_ids=torch.randint(3, 128, (2, 3, 8), generator=g), mc_token_ids=torch.tensor([[7, 5, 3], [1, 2, 7]]),
                                    labels=torch.randint(3, 128, (2, 3, 8), generator=g), mc_labels=two)), lambda o: o.loss + o.mc_loss),
        "t5_labels": (lambda: (T.T5ForConditionalGeneration(T.T5Config(**t5)), dict(input_ids=ids, attention_mask=am, labels=short)), L),
        "t5_sequence_classification": (lambda: (T.T5ForSequenceClassification(T.T5Config(**t5, num_labels=3, eos_token_id=1)), dict(
            input_ids=torch.cat([ids[:, :15], torch.ones(2, 1, dtype=torch.long)], 1), labels=two)), L),
        "t5_grad_checkpointing": (lambda: (gc(T.T5ForConditionalGeneration(T.T5Config(**t5))), dict(input_ids=ids, attention_mask=am, labels=short)), L),
        "bart_labels_attentions": (lambda: (T.BartForConditionalGeneration(T.BartConfig(**enc_dec, attn_implementation="eager")), dict(
            input_ids=ids, attention_mask=am, labels=short, output_attentions=True, output_hidden_states=True)), L),
        "bart_sequence_classification": (lambda: (T.BartForSequenceClassification(T.BartConfig(**enc_dec, num_labels=3, eos_token_id=2)), dict(
            input_ids=torch.cat([ids[:, :15], torch.full((2, 1), 2)], 1), labels=two)), L),
        "marian_labels": (lambda: (T.MarianMTModel(T.MarianConfig(**enc_dec, pad_token_id=0, decoder_start_token_id=0)), dict(
            input_ids=ids, attention_mask=am, labels=short)), L),
        "pegasus_labels": (lambda: (T.PegasusForConditionalGeneration(T.PegasusConfig(**enc_dec, pad_token_id=0, decoder_start_token_id=0)), dict(
            input_ids=ids, attention_mask=am, labels=short)), L),
        "vit_interpolate_pos_encoding": (lambda: (T.ViTForImageClassification(T.ViTConfig(**vit, num_labels=3)), dict(
            pixel_values=torch.randn(2, 3, 48, 48, generator=g, dtype=torch.float64), labels=two, interpolate_pos_encoding=True)), L),
        "vit_masked_image_modeling": (lambda: (T.ViTForMaskedImageModeling(T.ViTConfig(**vit, encoder_stride=8)), dict(
            pixel_values=img(), bool_masked_pos=torch.rand(2, 16, generator=g) > 0.5)), L),
        "swin_image_classification": (lambda: (T.SwinForImageClassification(T.SwinConfig(
            image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=3,
            hidden_dropout_prob=0, attention_probs_dropout_prob=0, drop_path_rate=0)), dict(pixel_values=img(), labels=two)), L),
        "segformer_semantic_segmentation_labels": (lambda: (T.SegformerForSemanticSegmentation(T.SegformerConfig(
            num_labels=3, hidden_sizes=[8, 16, 24, 32], decoder_hidden_size=32, num_attention_heads=[1, 1, 2, 2],
            hidden_dropout_prob=0, attention_probs_dropout_prob=0, classifier_dropout_prob=0, drop_path_rate=0)), dict(
            pixel_values=torch.randn(2, 3, 64, 64, generator=g, dtype=torch.float64), labels=torch.randint(0, 3, (2, 64, 64), generator=g))), L),
        "wav2vec2_sequence_classification": (lambda: (T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(**w2v, num_labels=3, classifier_proj_size=16)),
                                                      dict(input_values=torch.randn(2, 800, generator=g, dtype=torch.float64), labels=two)), L),
        "wav2vec2_xvector": (lambda: (T.Wav2Vec2ForXVector(T.Wav2Vec2Config(**w2v, num_labels=3, tdnn_dim=(16, 16), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1),
                                                                             xvector_output_dim=8)),
                                      dict(input_values=torch.randn(2, 800, generator=g, dtype=torch.float64), labels=two)), L),
        "whisper_audio_classification": (lambda: (T.WhisperForAudioClassification(T.WhisperConfig(**whisper, num_labels=3)), dict(
            input_features=torch.randn(2, 16, 64, generator=g, dtype=torch.float64), labels=two)), L),
        "whisper_labels": (lambda: (T.WhisperForConditionalGeneration(T.WhisperConfig(**whisper)), dict(
            input_features=torch.randn(2, 16, 64, generator=g, dtype=torch.float64), labels=short)), L),
        "clip_contrastive_loss": (lambda: (T.CLIPModel(T.CLIPConfig(**text_vision, projection_dim=16)), dict(
            input_ids=ids, attention_mask=am, pixel_values=img(), return_loss=True)), L),
        "siglip_contrastive_loss": (lambda: (T.SiglipModel(T.SiglipConfig(**text_vision)), dict(
            input_ids=ids, pixel_values=img(), return_loss=True)), L),
        "vision_encoder_decoder": (ved, L),
    }


def timm_cases():
    timm = import_library("timm")
    g = torch.Generator().manual_seed(2)
    x = lambda s=64: torch.randn(2, 3, s, s, generator=g, dtype=torch.float64)  # noqa: E731
    cm = lambda name, **kw: timm.create_model(name, pretrained=False, **kw)  # noqa: E731

    class Call(torch.nn.Module):
        def __init__(self, m, fn):
            super().__init__()
            self.m, self.fn = m, fn

        def forward(self, x):
            return self.fn(self.m, x)

    def ckpt(m):
        m.set_grad_checkpointing(True)
        return m

    vit = dict(img_size=64)
    return {
        "resnet18_features_only": lambda: (cm("resnet18", features_only=True), dict(x=x())),
        "convnext_atto_features_only_out_indices": lambda: (cm("convnext_atto", features_only=True, out_indices=(1, 3)), dict(x=x())),
        "efficientnet_b0_features_only": lambda: (cm("efficientnet_b0", features_only=True), dict(x=x())),
        "vit_tiny_features_only": lambda: (cm("vit_tiny_patch16_224", **vit, features_only=True, out_indices=(-2, -1)), dict(x=x())),
        "swin_tiny_features_only": lambda: (cm("swin_tiny_patch4_window7_224", img_size=56, features_only=True), dict(x=x(56))),
        "resnet18_forward_features_head": lambda: (Call(cm("resnet18", num_classes=7), lambda m, x: m.forward_head(m.forward_features(x))), dict(x=x())),
        "vit_forward_head_pre_logits": lambda: (Call(cm("vit_tiny_patch16_224", **vit, num_classes=7),
                                                     lambda m, x: m.forward_head(m.forward_features(x), pre_logits=True)), dict(x=x())),
        "vit_forward_intermediates": lambda: (Call(cm("vit_tiny_patch16_224", **vit, num_classes=7),
                                                   lambda m, x: m.forward_intermediates(x, indices=2)), dict(x=x())),
        "resnet18_num_classes_0": lambda: (cm("resnet18", num_classes=0), dict(x=x())),
        "resnet18_pool_catavgmax": lambda: (cm("resnet18", num_classes=5, global_pool="catavgmax"), dict(x=x())),
        "resnet18_pool_max": lambda: (cm("resnet18", num_classes=5, global_pool="max"), dict(x=x())),
        "resnet18_no_pool": lambda: (cm("resnet18", num_classes=0, global_pool=""), dict(x=x())),
        "convnext_atto_pool_max": lambda: (cm("convnext_atto", num_classes=5, global_pool="max"), dict(x=x())),
        "vit_pool_map": lambda: (cm("vit_tiny_patch16_224", **vit, num_classes=5, global_pool="map"), dict(x=x())),
        "vit_dynamic_img_size": lambda: (cm("vit_tiny_patch16_224", **vit, num_classes=5, dynamic_img_size=True), dict(x=x(48))),
        "vit_grad_checkpointing": lambda: (ckpt(cm("vit_tiny_patch16_224", **vit, num_classes=5)), dict(x=x())),
        "efficientnet_b0_grad_checkpointing": lambda: (ckpt(cm("efficientnet_b0", num_classes=5)), dict(x=x())),
    }


def detection_cases():
    import_library("torchvision")
    import torchvision.models.detection as D
    import torchvision.ops as O
    import torchvision.ops.boxes as B

    def greedy_nms(boxes, scores, iou_threshold):
        iou, keep = B.box_iou(boxes, boxes), []
        gone = torch.zeros(len(boxes), dtype=torch.bool)
        for i in scores.argsort(descending=True).tolist():
            if not gone[i]:
                keep.append(i)
                gone |= iou[i] > iou_threshold
        return torch.tensor(keep, dtype=torch.long)

    B.nms = O.nms = greedy_nms
    g = torch.Generator().manual_seed(3)

    def data(train, masks=False, keypoints=False):
        images = [torch.rand(3, 64, 64 + 8 * i, generator=g, dtype=torch.float64) for i in range(2)]
        if not train:
            return dict(images=images)
        targets = []
        for i in range(2):
            xy = torch.rand(3, 2, generator=g, dtype=torch.float64) * 32
            t = dict(boxes=torch.cat([xy, xy + torch.rand(3, 2, generator=g, dtype=torch.float64) * 32 + 4], 1),
                     labels=torch.tensor([1, 2, 3]))
            if masks:
                t["masks"] = torch.zeros(3, 64, 64 + 8 * i, dtype=torch.uint8)
                for j, (x0, y0, x1, y1) in enumerate(t["boxes"].long().tolist()):
                    t["masks"][j, y0:y1, x0:x1] = 1
            if keypoints:
                k = (torch.rand(3, 17, 3, generator=g) * 32).float()  # (torchvision takes float32 keypoints only)
                k[..., 2] = 1
                t["keypoints"] = k
            targets.append(t)
        return dict(images=images, targets=targets)

    small = dict(min_size=64, max_size=96, weights=None, weights_backbone=None, num_classes=5)

    def model(fn, train, **kw):
        def build():
            m = fn(**small)
            # (random heads score under the default thresholds: every box kept)
            (m.roi_heads if hasattr(m, "roi_heads") else m).score_thresh = 0.0
            return m, data(train, **kw)
        return build

    cases = {}
    for name, kw in (("retinanet_resnet50_fpn", {}), ("fcos_resnet50_fpn", {}), ("fasterrcnn_mobilenet_v3_large_fpn", {}),
                     ("maskrcnn_resnet50_fpn", dict(masks=True)), ("keypointrcnn_resnet50_fpn", dict(keypoints=True))):
        cases[name + "_train"] = (model(getattr(D, name), True, **kw), True)
        cases[name + "_eval"] = (model(getattr(D, name), False), False)
    return cases


if __name__ == "__main__":
    exact_hardsigmoid_if_asked()  # (Faster R-CNN's MobileNetV3: ATen's hardsigmoid backward is float32's 1/6)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    groups = [f for f in ("--hf", "--timm", "--detection") if f in sys.argv] or ["--hf", "--timm", "--detection"]
    if "--hf" in groups:
        for name, (build, loss) in hf_cases().items():
            if not args or name in args:
                check(name, build, loss=loss)
    if "--timm" in groups:
        for name, build in timm_cases().items():
            if not args or name in args:
                check(name, build)
    if "--detection" in groups:
        for name, (build, train) in detection_cases().items():
            if not args or name in args:
                # (the RPN's objectness loss is float32: its labels are, and ATen's loss takes their dtype)
                check(name, build, train=train, float32={".loss_objectness"},
                      loss=lambda out: sum(v for k, v in out.items() if k != "loss_objectness"))
