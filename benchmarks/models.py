"""Models users bring, from the libraries they come from: eager vs torch.compile vs thunder.jit,
side by side in one process, training and inference (issue 28).

    python -m benchmarks.models [--device cuda|cpu] [--only NAME,...] [--mode train|infer|both]
                                [--repeats N] [--warmup N] [--json out.json] [--out DIR]
                                [--markdown] [--shard I/N] [--time-limit S] [--small]
                                [--check [--check-dtype float32|bfloat16|float16]]
    python -m benchmarks.models --merge a.json b.json ... [--out DIR] [--markdown]

Every model is built from its library's own code with random initialisation from a config (no
weights are downloaded): transformers, timm, torchvision, diffusers. A library that is not
installed skips its models with a printed line. On CUDA the parameters are bfloat16 and the sizes
are those of a real training run on an 80 GB GPU (the six models of issue 28's table keep its
settings: BERT B 32 T 256, ResNet-50 B 64 224², ConvNeXt-T B 64, GPT-2 B 8 T 1024, Llama 2 layers
of 3.2-1B B 4 T 1024, ViT-B/16 B 64); on the CPU (or with --small) float32 and tiny sizes.

  train  the model and its loss (the library's own where it has one: masked-LM, causal-LM and
         seq2seq losses from `labels`; cross-entropy of the logits in float32 for classifiers; the
         noise-prediction MSE for the UNet) as one module that each contender compiles, then
         backward; gradients dropped after each step. Dropout as the library's config has it.
  infer  the model's forward (eval mode) under torch.no_grad(), returning its main output.

Each model/mode is timed as benchmarks/run.py times whole models: each contender built (its own
copy of the model) and called once (first-call time, with empty disk caches for thunder and
inductor: fresh THUNDER_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR per model and mode unless the caller
set them; what each compiler keeps in memory stays for the process), warmed up (peak memory above
what was allocated before it was built), then all timed in interleaved rounds. The table reports
the median step time, ratios (eager time / thunder time: above 1 thunder is faster), peak memory,
first-call time and a geomean row per mode. A contender that fails shows its error in its cell and
the run goes on. After each model the caches of dynamo and the CUDA allocator are emptied.

--check compares thunder with eager instead of timing: each model in float32 (TF32 off; or in
--check-dtype bfloat16 / float16), dropout off, one training step (loss, every parameter's
gradient, buffers such as BatchNorm statistics) and one inference call, both measured against the
same model in float64; thunder's error may be at most twice eager's plus the tolerance. Before
an inference check, BatchNorm's running statistics are set from one batch, so that a fresh CNN's
output depends on its convolutions. The exit status is 1 if any model fails.

A full CUDA run takes longer than one 10-minute call: --shard I/N runs every N-th model from the
I-th; --time-limit (default 450 s on CUDA, which leaves room for the slowest model before 10
minutes) starts no model but the first after that many seconds and prints the --only list of
those left; --out DIR writes DIR/models.json and DIR/models.md after every model, so a run cut
short keeps what it measured. --merge joins the JSON files of several runs into one table.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

# The disk caches the caller named, seen before benchmarks.run names its own.
_USER_CACHES = {k: k in os.environ for k in ("THUNDER_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}

from benchmarks.libraries import import_library
from benchmarks.run import commit, error_text, time_interleaved

import thunder  # (benchmarks.run puts the in-tree package on sys.path)

CONTENDERS = ("eager", "torch.compile", "thunder")
LIBRARIES = ("transformers", "timm", "torchvision", "diffusers")
MODES = ("train", "infer")
ALL_MODES = MODES + ("amp",)  # amp: training under torch.autocast, timed only (--mode amp)


# ---- the models --------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One model with its inputs: `train(model, **train_inputs)` returns the loss,
    `infer(model, **infer_inputs)` the main output. `make` builds the model (build_case calls it
    on the device and keeps the result in `model`)."""

    make: Callable[[], torch.nn.Module]
    setting: str
    train: Callable
    train_inputs: dict
    infer: Callable
    infer_inputs: dict
    model: torch.nn.Module | None = None


class Step(torch.nn.Module):
    """A model and what a step computes with it, as one module: each contender compiles the
    loss together with the model, as a training script that compiles its step would."""

    def __init__(self, model, fn):
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, **inputs):
        return self.fn(self.model, **inputs)


class Inputs:
    """Deterministic random inputs, made on the CPU (the same values on every device)."""

    def __init__(self, device, dtype, seed=0):
        self.device, self.dtype = device, dtype
        self.g = torch.Generator().manual_seed(seed)

    def ints(self, high, shape, low=0):
        return torch.randint(low, high, shape, generator=self.g).to(self.device)

    def floats(self, *shape):
        return torch.randn(*shape, generator=self.g).to(self.device, self.dtype)

    def uniform(self, *shape):
        return torch.rand(*shape, generator=self.g).to(self.device)


def _upcast(t):
    """A loss's input in float32, as training code computes losses (float64, --check's reference,
    stays float64)."""
    return t if t.dtype == torch.float64 else t.float()


def _causal_lm(make, inp, vocab, B, T):
    ids = inp.ints(vocab, (B, T))
    return Case(make, f"B {B}, T {T}",
                lambda m, input_ids: m(input_ids=input_ids, labels=input_ids, use_cache=False).loss,
                {"input_ids": ids},
                lambda m, input_ids: m(input_ids=input_ids, use_cache=False).logits, {"input_ids": ids})


def _seq2seq(make, inp, src, tgt, vocab, B, setting):
    """An encoder-decoder: `src` ({name: encoder input}), labels of `tgt` tokens (the model
    shifts them into its decoder's inputs); inference runs the decoder on the same tokens."""
    labels = inp.ints(vocab, (B, tgt))
    return Case(make, setting,
                lambda m, labels, **enc: m(**enc, labels=labels, use_cache=False).loss, {**src, "labels": labels},
                lambda m, decoder_input_ids, **enc: m(**enc, decoder_input_ids=decoder_input_ids,
                                                      use_cache=False).logits,
                {**src, "decoder_input_ids": labels})


def _classifier(make, inp, B, res, classes, logits=lambda out: out):
    x, y = inp.floats(B, 3, res, res), inp.ints(classes, (B,))
    return Case(make, f"B {B}, {res}²",
                lambda m, x, y: F.cross_entropy(_upcast(logits(m(x))), y), {"x": x, "y": y},
                lambda m, x: logits(m(x)), {"x": x})


def bert(lib, inp, big, dropout):
    if big:
        cfg, B, T = lib.BertConfig(), 32, 256
    else:
        cfg, B, T = lib.BertConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=128, max_position_embeddings=64), 2, 32
    if not dropout:
        cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
    ids = inp.ints(cfg.vocab_size, (B, T))
    # A padded batch, as a tokenizer makes it: every other sequence ends between T/2 and T.
    positions = torch.arange(T, device=inp.device)
    lengths = torch.where(torch.arange(B, device=inp.device) % 2 == 0, T, inp.ints(T, (B,), low=T // 2))
    mask = (positions[None, :] < lengths[:, None]).long()
    # Masked-LM labels: 15% of the real tokens, the rest ignored (-100).
    labels = torch.where((inp.uniform(B, T) < 0.15) & mask.bool(), ids, -100)
    return Case(lambda: lib.BertForMaskedLM(cfg), f"B {B}, T {T}",
                lambda m, input_ids, attention_mask, labels: m(input_ids=input_ids, attention_mask=attention_mask,
                                                               labels=labels).loss,
                {"input_ids": ids, "attention_mask": mask, "labels": labels},
                lambda m, input_ids, attention_mask: m(input_ids=input_ids, attention_mask=attention_mask).logits,
                {"input_ids": ids, "attention_mask": mask})


def gpt2(lib, inp, big, dropout):
    if big:
        cfg, B, T = lib.GPT2Config(), 8, 1024
    else:
        cfg, B, T = lib.GPT2Config(vocab_size=1024, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                                   eos_token_id=0), 2, 32
    if not dropout:
        cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
    return _causal_lm(lambda: lib.GPT2LMHeadModel(cfg), inp, cfg.vocab_size, B, T)


_TINY_DECODER = dict(vocab_size=1024, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                     num_attention_heads=4, max_position_embeddings=64)


def llama(lib, inp, big, dropout):
    # Two layers of Llama-3.2-1B: width 2048, 32 query heads sharing 8 KV heads, tied embeddings.
    if big:
        cfg, B, T = lib.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=2,
                                    num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
                                    rope_theta=500000.0, tie_word_embeddings=True), 4, 1024
    else:
        cfg, B, T = lib.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, **_TINY_DECODER), 2, 32
    return _causal_lm(lambda: lib.LlamaForCausalLM(cfg), inp, cfg.vocab_size, B, T)


def qwen2(lib, inp, big, dropout):
    # Four layers of Qwen2.5-0.5B: width 896, 14 query heads sharing 2 KV heads, biased q/k/v.
    if big:
        cfg, B, T = lib.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=4,
                                    num_attention_heads=14, num_key_value_heads=2, rms_norm_eps=1e-6,
                                    rope_theta=1000000.0, tie_word_embeddings=True), 4, 1024
    else:
        cfg, B, T = lib.Qwen2Config(num_key_value_heads=1, tie_word_embeddings=True, **_TINY_DECODER), 2, 32
    return _causal_lm(lambda: lib.Qwen2ForCausalLM(cfg), inp, cfg.vocab_size, B, T)


def mistral(lib, inp, big, dropout):
    # Two layers of Mistral-7B: width 4096, 32 query heads sharing 8 KV heads, and a sliding
    # window shorter than the sequence (the attention mask is a band, not only causal).
    if big:
        cfg, B, T = lib.MistralConfig(vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                      num_attention_heads=32, num_key_value_heads=8, sliding_window=512), 4, 1024
    else:
        cfg, B, T = lib.MistralConfig(num_key_value_heads=2, sliding_window=16, **_TINY_DECODER), 2, 32
    return _causal_lm(lambda: lib.MistralForCausalLM(cfg), inp, cfg.vocab_size, B, T)


def t5(lib, inp, big, dropout):
    if big:
        cfg, B, S, T = lib.T5Config(decoder_start_token_id=0), 32, 512, 128  # t5-small
    else:
        cfg, B, S, T = lib.T5Config(vocab_size=1024, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                    decoder_start_token_id=0), 2, 32, 16
    if not dropout:
        cfg.dropout_rate = 0.0
    src = {"input_ids": inp.ints(cfg.vocab_size, (B, S))}
    return _seq2seq(lambda: lib.T5ForConditionalGeneration(cfg), inp, src, T, cfg.vocab_size, B, f"B {B}, T {S} -> {T}")


def whisper(lib, inp, big, dropout):
    if big:
        cfg, B, T = lib.WhisperConfig(), 16, 128  # whisper-tiny: 30 s of audio, 80 mel bins
    else:
        cfg, B, T = lib.WhisperConfig(vocab_size=1024, num_mel_bins=16, d_model=64, encoder_layers=2,
                                      decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                      encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
                                      max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                      decoder_start_token_id=1), 2, 16
    if not dropout:
        cfg.dropout = cfg.attention_dropout = cfg.activation_dropout = 0.0
    # The encoder's convolutions halve the frames once: it takes twice its positions.
    src = {"input_features": inp.floats(B, cfg.num_mel_bins, 2 * cfg.max_source_positions)}
    frames = 2 * cfg.max_source_positions
    return _seq2seq(lambda: lib.WhisperForConditionalGeneration(cfg), inp, src, T, cfg.vocab_size, B,
                    f"B {B}, {frames} frames -> T {T}")


def vit_hf(lib, inp, big, dropout):
    if big:
        cfg, B, res = lib.ViTConfig(num_labels=1000), 64, 224  # ViT-B/16
    else:
        cfg, B, res = lib.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=128, num_labels=10), 2, 32
    return _classifier(lambda: lib.ViTForImageClassification(cfg), inp, B, res, cfg.num_labels, lambda out: out.logits)


def _timm(name, res=224, B=64, **small):
    """A timm classifier: at `res`² and batch B on CUDA; `small` are its config's changes for the
    CPU sizes (batch 2, img_size or 64²)."""
    def build(lib, inp, big, dropout):
        kwargs = {**({} if big else small), **({} if dropout else {"drop_rate": 0.0, "drop_path_rate": 0.0})}
        return _classifier(lambda: lib.create_model(name, pretrained=False, **kwargs), inp, B if big else 2,
                           res if big else small.get("img_size", 64), 1000)

    return build


def _torchvision(name):
    def build(lib, inp, big, dropout):
        kwargs = {}
        if not dropout and name != "resnet50":  # the classifier's dropout; EfficientNet's stochastic depth
            kwargs = {"dropout": 0.0, **({"stochastic_depth_prob": 0.0} if name == "efficientnet_b0" else {})}
        make = lambda: getattr(lib.models, name)(weights=None, **kwargs)  # noqa: E731
        return _classifier(make, inp, 64 if big else 2, 224 if big else 64, 1000)

    return build


def unet(lib, inp, big, dropout):
    # A latent-diffusion UNet of Stable Diffusion's form with narrower channels: three cross-
    # attending levels and one plain one, text conditioning of 77 tokens of width 768.
    if big:
        cfg = dict(sample_size=64, block_out_channels=(128, 256, 512, 512), layers_per_block=2, cross_attention_dim=768,
                   attention_head_dim=8)
        B, size, ctx, width = 8, 64, 77, 768
    else:
        cfg = dict(sample_size=16, block_out_channels=(16, 32), layers_per_block=1, cross_attention_dim=24,
                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=8, attention_head_dim=4)
        B, size, ctx, width = 2, 16, 5, 24
    x, noise, text = inp.floats(B, 4, size, size), inp.floats(B, 4, size, size), inp.floats(B, ctx, width)
    t = inp.ints(1000, (B,))
    return Case(lambda: lib.UNet2DConditionModel(**cfg), f"B {B}, {size}² latents",
                lambda m, x, t, text, noise: F.mse_loss(_upcast(m(x, t, encoder_hidden_states=text).sample),
                                                        _upcast(noise)),
                {"x": x, "t": t, "text": text, "noise": noise},
                lambda m, x, t, text: m(x, t, encoder_hidden_states=text).sample, {"x": x, "t": t, "text": text})


@dataclasses.dataclass
class Spec:
    library: str
    title: str
    build: Callable  # (library module, Inputs, big: bool, dropout: bool) -> Case
    # Runs only where this library is missing (a stand-in for its models).
    instead_of: str = ""


MODELS = {
    "bert": Spec("transformers", "BERT-base masked LM", bert),
    "gpt2": Spec("transformers", "GPT-2 small", gpt2),
    "llama": Spec("transformers", "Llama, 2 layers of 3.2-1B's shape (GQA)", llama),
    "qwen2": Spec("transformers", "Qwen2, 4 layers of 2.5-0.5B's shape (GQA)", qwen2),
    "mistral": Spec("transformers", "Mistral, 2 layers of 7B's shape (GQA, sliding window)", mistral),
    "t5": Spec("transformers", "T5-small", t5),
    "whisper": Spec("transformers", "Whisper-tiny", whisper),
    "vit_hf": Spec("transformers", "ViT-B/16 (transformers)", vit_hf, instead_of="timm"),
    "resnet50_timm": Spec("timm", "ResNet-50 (timm)", _timm("resnet50")),
    "convnext_tiny": Spec("timm", "ConvNeXt-Tiny (timm)", _timm("convnext_tiny")),
    "vit_b16": Spec("timm", "ViT-B/16 (timm)", _timm("vit_base_patch16_224", img_size=64)),
    "efficientnet_b0_timm": Spec("timm", "EfficientNet-B0 (timm)", _timm("efficientnet_b0")),
    "swin_tiny": Spec("timm", "Swin-T (timm)", _timm("swin_tiny_patch4_window7_224", img_size=64, window_size=4)),
    "resnet50_tv": Spec("torchvision", "ResNet-50 (torchvision)", _torchvision("resnet50")),
    "mobilenet_v3": Spec("torchvision", "MobileNetV3-Large (torchvision)", _torchvision("mobilenet_v3_large")),
    "efficientnet_b0_tv": Spec("torchvision", "EfficientNet-B0 (torchvision)", _torchvision("efficientnet_b0")),
    "unet": Spec("diffusers", "UNet2DConditionModel, SD-like, narrower", unet),
}


_libraries: dict[str, object] = {}


def library(name):
    """The library's module, or None (a line printed once) where it cannot be imported."""
    if name not in _libraries:
        try:
            _libraries[name] = import_library(name)
            if name in ("transformers", "diffusers"):  # notes on configs made up for a benchmark
                _libraries[name].logging.set_verbosity_error()
        except Exception as e:  # a missing or broken library skips its models
            print(f"{name} not usable ({error_text(e)}): its models are skipped", flush=True)
            _libraries[name] = None
    return _libraries[name]


def selected(only, shard=None):
    """The models to run, in order: --only's (all by default), those whose library imports, and
    with shard (i, n) every n-th from the i-th (1-based)."""
    names = [n for n in only.split(",") if n] if only else list(MODELS)
    for n in names:
        if n not in MODELS:
            raise SystemExit(f"unknown model {n!r}; the models are: {', '.join(MODELS)}")
    names = [n for n in names if library(MODELS[n].library) is not None]
    names = [n for n in names if not MODELS[n].instead_of or library(MODELS[n].instead_of) is None
             or (only and n in only.split(","))]
    if shard:
        i, n = shard
        names = names[i - 1::n]
    return names


def build_case(name, device, big, dtype, dropout=True):
    spec = MODELS[name]
    case = spec.build(library(spec.library), Inputs(device, dtype), big, dropout)
    torch.manual_seed(0)
    with torch.device(device):
        case.model = case.make().to(dtype=dtype)
    if not big and spec.library in ("transformers", "diffusers"):
        case.setting = "tiny config, " + case.setting  # (timm's and torchvision's keep their shapes)
    return case


# ---- timing ------------------------------------------------------------------------------------


def _wrap(module, contender):
    if contender == "eager":
        return module
    if contender == "torch.compile":
        return torch.compile(module)
    return thunder.jit(module)


def make_step(case, mode, contender):
    """The step of one contender, on its own copy of the model."""
    model = copy.deepcopy(case.model)
    if mode == "train":
        model.train()
        fwd = _wrap(Step(model, case.train), contender)
        params = [p for p in model.parameters() if p.requires_grad]

        def step():
            fwd(**case.train_inputs).backward()
            for p in params:
                p.grad = None
        step.compiled = fwd  # (for benchmarks.profile_model's traces)
    elif mode == "amp":
        # Mixed precision as training scripts run it: float32 parameters and inputs, the step under
        # torch.autocast (bfloat16), gradients in float32.
        model = model.float().train()
        fwd = _wrap(Step(model, case.train), contender)
        params = [p for p in model.parameters() if p.requires_grad]
        inputs = {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v
                  for k, v in case.train_inputs.items()}
        device_type = next(iter(model.parameters())).device.type

        def step():
            with torch.autocast(device_type, dtype=torch.bfloat16):
                loss = fwd(**inputs)
            loss.backward()
            for p in params:
                p.grad = None
        step.compiled = fwd
    else:
        model.eval()
        fwd = _wrap(Step(model, case.infer), contender)

        def step():
            with torch.no_grad():
                fwd(**case.infer_inputs)
        step.compiled = fwd

    return step


def fresh_caches():
    """New, empty disk caches for both compilers (those the caller named are kept)."""
    for var, named in _USER_CACHES.items():
        if not named:
            os.environ[var] = tempfile.mkdtemp(prefix=var.lower().split("_")[0] + "-models-")


def release():
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def bench(name, modes, device, big, dtype, contenders, repeats, warmup):
    """Yields (mode, entry) for each mode of one model: its setting and each contender's times,
    or the error that stopped the model from being built."""
    release()
    entry = {"library": MODELS[name].library, "title": MODELS[name].title}
    try:
        case = build_case(name, device, big, dtype)
    except Exception as e:
        entry["error"] = error_text(e)
        for mode in modes:
            yield mode, entry
        return
    entry["setting"] = case.setting
    for mode in modes:
        fresh_caches()
        t0 = time.perf_counter()
        builders = {c: (lambda c=c, mode=mode: make_step(case, mode, c)) for c in contenders}
        result = time_interleaved(builders, device, repeats, warmup)
        del builders
        release()
        yield mode, {**entry, "contenders": result, "wall_s": time.perf_counter() - t0}
    case = None  # freed before the allocator's cache is emptied
    release()


# ---- correctness -------------------------------------------------------------------------------


def _results(model, case, mode, inputs, fn=None):
    """{what: tensor} of one step: the loss, each parameter's gradient and each buffer after a
    training step, or the output of an inference call."""
    if mode == "train":
        model.train()
        loss = (fn or Step(model, case.train))(**inputs)
        loss.backward()
        out = {"loss": loss.detach()}
        out.update((f"grad of {n}", p.grad) for n, p in model.named_parameters())
        out.update((f"buffer {n}", b) for n, b in model.named_buffers())
        return out
    model.eval()
    with torch.no_grad():
        return {"output": (fn or Step(model, case.infer))(**inputs)}


def _nudged(model, inputs, dtype=torch.float32, seed=0):
    """The model and inputs with every floating value moved by dtype's rounding, up or down at
    random: a dtype value to its neighbour (one unit in the last place), a float64 one by dtype's
    unit roundoff (a relative 2**-24 for float32, 2**-8 for bfloat16). What rounding the data alone
    does."""
    g = torch.Generator().manual_seed(seed)
    roundoff = torch.finfo(dtype).eps / 2

    def nudge(t):
        up = torch.randint(0, 2, t.shape, generator=g).to(t.device).bool()
        if t.dtype != torch.float64:
            return torch.nextafter(t, torch.where(up, math.inf, -math.inf).to(t.dtype))
        return t * (1 + (up.to(t.dtype) * 2 - 1) * roundoff)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(nudge(p))
    return model, {k: nudge(v) if v.is_floating_point() else v for k, v in inputs.items()}


def _calibrate_batch_norms(model, case, inputs):
    """BatchNorm's running statistics set to those of one batch of `inputs` (a forward in training
    mode, without gradients). A freshly built CNN's statistics (mean 0, variance 1) make its
    inference layers near-identities, and with default initialization the activations then shrink
    layer after layer until a deep net's output is its classifier's bias: Inception-v3's float64
    and bfloat16 outputs agreed to 5e-6, whatever the convolutions computed. Inference checks
    compare nothing there unless the statistics are those of real activations."""
    norms = [m for m in model.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: after one batch, that batch's statistics
    model.train()
    with torch.no_grad():
        Step(model, case.infer)(**inputs)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum


def check(name, mode, device, big, tol, floor=1e-3, dtype=torch.float32):
    """thunder against eager on one model in dtype (float32 unless told), dropout off. Both are
    measured against the same model in float64: thunder's error (the largest difference, relative
    to the largest magnitude of the float64 value, at least floor) may be at most twice dtype's
    noise floor plus tol. The floor is the largest of eager's own error, eager's error when its
    parameters and inputs move to their dtype neighbours, and the model's conditioning: how far the
    float64 result moves when its parameters and inputs move by dtype's unit roundoff (`_nudged`).
    A bfloat16 check catches what a float32 one cannot: thunder takes other paths for half types
    (channels-last convolutions and the kernels after them, fused attention). A
    model whose float32 result rounding moves far (BatchNorm over a few pixels, a deep net without
    zero-initialised residual branches, ReLU gradients of a randomly initialised T5, where eager
    can land near float64 by chance) is held to that, a well-conditioned one to tol. Returns {'ok', 'thunder', 'eager', 'nudged', 'worst'}
    or {'ok', 'error'}."""
    case = build_case(name, device, big, dtype, dropout=False)
    if mode == "infer":
        _calibrate_batch_norms(case.model, case, case.infer_inputs)
    model, ref, exact = case.model, copy.deepcopy(case.model), copy.deepcopy(case.model).double()
    ref_moved, exact_moved = copy.deepcopy(ref), copy.deepcopy(exact)  # copies before any step
    inputs = case.train_inputs if mode == "train" else case.infer_inputs
    inputs64 = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    jitted = thunder.jit(Step(model, case.train if mode == "train" else case.infer))
    got = _results(model, case, mode, inputs, jitted)
    expected = _results(ref, case, mode, inputs)
    truth = _results(exact, case, mode, inputs64)
    model64, inputs64_moved = _nudged(exact_moved, inputs64, dtype)
    moved = _results(model64, case, mode, inputs64_moved)
    model32, inputs32_moved = _nudged(ref_moved, inputs, dtype)
    eager_moved = _results(model32, case, mode, inputs32_moved)
    # In a half type one element's rounding says little (a gradient summed over a batch in
    # bfloat16 can be off by its own size in places), so the errors there are norm-wise: the
    # difference's 2-norm over the float64 value's. A wrong kernel still moves that by its size.
    normwise = dtype in (torch.bfloat16, torch.float16)
    # The item most over its bound, where one is; else the one where thunder is furthest off.
    worst = {"ok": True, "thunder": -1.0, "eager": 0.0, "nudged": 0.0, "worst": ""}
    for what, x in truth.items():
        t, e = got[what], expected[what]
        if x is None or t is None or e is None:
            if not (x is None and t is None and e is None):
                return {"ok": False, "error": f"{what}: None for " + ", ".join(
                    k for k, v in (("thunder", t), ("eager", e), ("float64", x)) if v is None)}
            continue
        if t.shape != x.shape:
            return {"ok": False, "error": f"{what}: shape {tuple(t.shape)}, eager's {tuple(x.shape)}"}
        if not x.is_floating_point():
            if not torch.equal(t, x):
                return {"ok": False, "error": f"{what} differs"}
            continue
        x = x.detach().double()
        if normwise:
            scale = max(x.norm().item(), floor * math.sqrt(x.numel())) if x.numel() else 1.0
        else:
            scale = max(x.abs().max().item(), floor) if x.numel() else 1.0

        def err(r, x=x, scale=scale):
            if not x.numel() or r is None:
                return 0.0
            d = r.detach().double() - x
            return (d.norm() if normwise else d.abs().max()).item() / scale
        t_err, e_err, n_err = err(t), err(e), max(err(moved[what]), err(eager_moved[what]))
        noise = max(e_err, n_err)
        ok = t_err <= 2 * noise + tol  # False for a NaN
        if worst["ok"] and (not ok or t_err > worst["thunder"]) or not ok and t_err - 2 * noise > worst["excess"]:
            worst = {"ok": ok, "thunder": t_err, "eager": e_err, "nudged": n_err, "worst": what,
                     "excess": t_err - 2 * noise}
    worst.pop("excess", None)
    return worst


# ---- report ------------------------------------------------------------------------------------


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _cell(text):
    """Text for a markdown table's cell (an error message may hold a '|')."""
    return text.replace("|", "\\|")


def _ms(r):
    return f"{r['median_s'] * 1e3:.2f}" if "median_s" in r else "fails: " + _cell(r.get("error", "?"))


def table(results, mode):
    """A markdown table of one mode's results, with its geomean row."""
    rows = results.get(mode, {})
    lines = [("| model | setting | eager ms | torch.compile ms | thunder ms | thunder vs eager | vs compile "
              "| peak GiB e/c/t | first call s e/c/t | first call t/c | host ms e/c/t |"), "|---" * 11 + "|"]
    ratios = {"eager": [], "torch.compile": [], "first": []}
    for entry in rows.values():
        if "error" in entry:
            lines.append(f"| {entry['title']} | - | fails to build: {_cell(entry['error'])} | | | | | | | | |")
            continue
        r = entry["contenders"]
        ok = {c: "median_s" in r.get(c, {}) for c in CONTENDERS}

        def ratio(base, key="median_s", inverse=False):
            if not (base in r and "thunder" in r and key in r[base] and key in r["thunder"]
                    and (key != "median_s" or ok[base] and ok["thunder"])):
                return None
            return r["thunder"][key] / r[base][key] if inverse else r[base][key] / r["thunder"][key]

        def fmt(x):
            return f"{x:.2f}x" if x is not None else "-"

        vs = {c: ratio(c) for c in ("eager", "torch.compile")}
        first = ratio("torch.compile", "first_call_s", inverse=True)
        for k, x in (("eager", vs["eager"]), ("torch.compile", vs["torch.compile"]), ("first", first)):
            if x is not None:
                ratios[k].append(x)
        peak = "/".join(f"{r[c]['peak_gib']:.2f}" if "peak_gib" in r.get(c, {}) else "-" for c in CONTENDERS)
        firsts = "/".join(f"{r[c]['first_call_s']:.1f}" if "first_call_s" in r.get(c, {}) else "-" for c in CONTENDERS)
        hosts = "/".join(f"{r[c]['host_median_s'] * 1e3:.2f}" if "host_median_s" in r.get(c, {}) else "-"
                         for c in CONTENDERS)
        cells = [_ms(r[c]) if c in r else "-" for c in CONTENDERS]
        lines.append(f"| {entry['title']} | {entry['setting']} | " + " | ".join(cells)
                     + f" | {fmt(vs['eager'])} | {fmt(vs['torch.compile'])} | {peak} | {firsts} | {fmt(first)} | {hosts} |")
    g = {k: _geomean(v) for k, v in ratios.items()}
    lines.append(f"| **geomean** ({len(ratios['eager'])} of {len(rows)} models) | | | | | "
                 + " | ".join(f"**{x:.2f}x**" if x is not None else "-" for x in (g["eager"], g["torch.compile"]))
                 + " | | | " + (f"**{g['first']:.2f}x**" if g["first"] is not None else "-") + " | |")
    return "\n".join(lines)


def report(doc, markdown):
    out = []
    if markdown:
        out += [f"## {doc['date']}: model suite ({doc['device']}, torch {doc['torch']})", "",
                f"`{doc['command']}`; {doc['device']}, torch {doc['torch']}, "
                + ", ".join(f"{k} {v}" for k, v in doc["libraries"].items())
                + f"; commit {doc['commit']}, {doc['date']}; {doc['dtype']}; median of {doc['repeats']} after "
                f"{doc['warmup']} warm-ups, contenders interleaved; {doc['load']}. Ratios are eager (or "
                "torch.compile) time over thunder's: above 1 thunder is faster; first call t/c is thunder's "
                "first-call time over torch.compile's; host ms is the host's time inside a step (CUDA): "
                "equal to the step time where the step is host-bound, or where it makes more launches than "
                "CUDA's launch queue holds (the host then waits for the GPU)."]
    else:
        out.append(f"device {doc['device']}, torch {doc['torch']}, commit {doc['commit']}, {doc['date']}, "
                   f"{doc['load']}")
    for mode, heading in (("train", "Training (forward, loss, backward)"), ("infer", "Inference (no_grad forward)"),
                          ("amp", "Training under torch.autocast (float32 parameters, bfloat16 autocast)")):
        if doc["results"].get(mode):
            out += ["", f"**{heading}**", "", table(doc["results"], mode)]
    if doc.get("not_run"):
        out += ["", f"Not run (time limit): `--only {','.join(doc['not_run'])}`"]
    return "\n".join(out)


def _versions():
    out = {}
    for name in LIBRARIES:
        mod = _libraries.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    return out


def _device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} x{os.cpu_count()}, {torch.get_num_threads()} threads"


def _write(doc, args):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "models.json"), "w") as f:
            json.dump(doc, f, indent=1)
        with open(os.path.join(args.out, "models.md"), "w") as f:
            f.write(report(doc, markdown=True) + "\n")


def merge(paths):
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    doc = dict(docs[0])
    doc["results"] = {m: {} for m in ALL_MODES}
    for d in docs:
        for m in ALL_MODES:
            doc["results"][m].update(d["results"].get(m, {}))
    doc["command"] = " + ".join(d["command"] for d in docs)
    doc["not_run"] = [n for d in docs for n in d.get("not_run", []) if not any(n in doc["results"][m] for m in ALL_MODES)]
    doc["load"] = "; ".join(d["load"] for d in docs)
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    ap.add_argument("--only", default="", help="comma-separated model names (default all): " + ",".join(MODELS))
    ap.add_argument("--mode", default="both", choices=("train", "infer", "amp", "both"),
                    help="both: train and infer; amp: training under torch.autocast, float32 parameters")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--small", action="store_true", help="the CPU's sizes on any device")
    ap.add_argument("--shard", default="", help="I/N: every N-th model from the I-th")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds after which no model is started (default 450 on CUDA, none on the CPU)")
    ap.add_argument("--json", default="")
    ap.add_argument("--out", default="", help="a folder for models.json and models.md, written after every model")
    ap.add_argument("--markdown", action="store_true", help="print the tables with a heading for RESULTS.md")
    ap.add_argument("--check", action="store_true", help="compare thunder with eager instead of timing")
    ap.add_argument("--tolerance", type=float, default=None, help="--check's bound (default 1e-4 CPU, 1e-3 CUDA)")
    ap.add_argument("--check-dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                    help="--check's precision: the models' parameters and inputs (the reference is float64)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="join earlier runs' JSON files")
    args = ap.parse_args(argv)

    if args.merge:
        doc = merge(args.merge)
        _write(doc, args)
        print(report(doc, args.markdown))
        return 0

    shard = None
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        if not 1 <= i <= n:
            ap.error("--shard I/N needs 1 <= I <= N")
        shard = (i, n)
    modes = MODES if args.mode == "both" else (args.mode,)
    if args.check and "amp" in modes:
        ap.error("--check compares float32/float64 steps; --mode amp is timed only")
    big = args.device == "cuda" and not args.small
    names = selected(args.only, shard)

    if args.check:
        if args.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        tol = args.tolerance or (1e-3 if args.device == "cuda" else 1e-4)
        failures, results = 0, {}
        for name in names:
            for mode in modes:
                t0 = time.perf_counter()
                try:
                    r = check(name, mode, args.device, big, tol, dtype=getattr(torch, args.check_dtype))
                except Exception as e:
                    r = {"ok": False, "error": error_text(e)}
                release()
                results.setdefault(mode, {})[name] = r
                failures += not r["ok"]
                what = r.get("error") or (f"error against float64 {r['thunder']:.2e}, eager's {r['eager']:.2e}, "
                                          f"with data moved by {args.check_dtype} rounding {r['nudged']:.2e}"
                                          f" ({r['worst']})")
                status = "ok  " if r["ok"] else "FAIL"
                print(f"{status} {name} {mode}: {what}, {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"{len(names) * len(modes) - failures} passed, {failures} failed "
              f"({args.check_dtype}, tolerance {tol:g})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        return 1 if failures else 0

    contenders = [c for c in args.contenders.split(",") if c]
    for c in contenders:
        if c not in CONTENDERS:
            ap.error(f"unknown contender {c!r}; the contenders are: {', '.join(CONTENDERS)}")
    limit = args.time_limit if args.time_limit is not None else (450.0 if args.device == "cuda" else math.inf)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    doc = {"device": _device_name(args.device), "torch": torch.__version__, "libraries": _versions(),
           "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python -m benchmarks.models " + " ".join(argv if argv is not None else sys.argv[1:]),
           "dtype": f"{str(dtype).replace('torch.', '')} parameters", "repeats": args.repeats, "warmup": args.warmup,
           "results": {m: {} for m in modes}, "not_run": []}
    if "amp" in modes:
        doc["dtype"] += "; amp: float32 parameters under bfloat16 autocast"
    load = doc["load"] = "load average {:.2f} {:.2f} {:.2f} before".format(*os.getloadavg())
    start = time.perf_counter()
    for i, name in enumerate(names):
        if i and time.perf_counter() - start > limit:
            doc["not_run"].append(name)
            continue
        for mode, entry in bench(name, modes, args.device, big, dtype, contenders, args.repeats, args.warmup):
            doc["results"][mode][name] = entry
            cells = entry.get("error") or ", ".join(
                f"{c} " + (f"{r['median_s'] * 1e3:.2f} ms" if "median_s" in r else r.get("error", "?"))
                for c, r in entry["contenders"].items())
            print(f"{name} {mode}: {cells} ({entry.get('wall_s', 0):.0f} s)", flush=True)
            doc["load"] = load + ", {:.2f} {:.2f} {:.2f} after".format(*os.getloadavg())
            _write(doc, args)
    doc["load"] = load + ", {:.2f} {:.2f} {:.2f} after".format(*os.getloadavg())
    doc["libraries"] = _versions()
    _write(doc, args)
    print(report(doc, args.markdown))
    if doc["not_run"]:
        print(f"time limit of {limit:.0f} s reached; the rest: --only {','.join(doc['not_run'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
