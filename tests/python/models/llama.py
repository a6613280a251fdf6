"""A Llama-style decoder in the style of Lightning's lit-gpt (litgpt/model.py): RMSNorm, rotary
embeddings from a cos/sin cache, grouped-query attention, a SwiGLU MLP, and a KV cache held in
buffers and updated with index_copy_ at the positions given as a tensor. `rope="complex"` applies
the rotary embedding the way Meta's llama does (torch.polar, view_as_complex, view_as_real)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    block_size: int = 64
    vocab_size: int = 96
    n_layer: int = 2
    n_head: int = 4
    n_query_groups: int = 2
    n_embd: int = 32
    intermediate_size: int = 88
    rope_base: int = 10000
    norm_eps: float = 1e-5
    rope: str = "halves"  # or "complex"

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, size: int, dim: int = -1, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        return (x_normed * self.weight.float()).to(dtype=dtype)


def build_rope_cache(seq_len: int, n_elem: int, device=None, base: int = 10000):
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))
    seq_idx = torch.arange(seq_len, device=device).float()
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    head_size = x.size(-1)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb_complex(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(x_ * freqs_cis).flatten(-2)
    return out.type_as(x)


class KVCache(nn.Module):
    def __init__(self, k_shape, v_shape, device=None, dtype=None) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(k_shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(v_shape, device=device, dtype=dtype), persistent=False)

    def forward(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        # move the buffer to the activation dtype for when AMP is used
        self.k = self.k.to(k.dtype)
        self.v = self.v.to(v.dtype)
        # update the cache
        k = self.k.index_copy_(2, input_pos, k)
        v = self.v.index_copy_(2, input_pos, v)
        return k, v


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        shape = (config.n_head + 2 * config.n_query_groups) * config.head_size
        self.attn = nn.Linear(config.n_embd, shape, bias=False)
        self.proj = nn.Linear(config.n_head * config.head_size, config.n_embd, bias=False)
        self.kv_cache = None
        self.config = config

    def forward(self, x, cos, sin, mask=None, input_pos=None):
        B, T, C = x.size()
        cfg = self.config
        qkv = self.attn(x)
        q_per_kv = cfg.n_head // cfg.n_query_groups
        total_qkv = q_per_kv + 2
        qkv = qkv.view(B, T, cfg.n_query_groups, total_qkv, cfg.head_size)
        qkv = qkv.permute(0, 2, 3, 1, 4)  # (B, n_query_groups, total_qkv, T, hs)
        q, k, v = qkv.split((q_per_kv, 1, 1), dim=2)
        # grouped-query attention: repeat k and v per query head
        if cfg.n_query_groups != cfg.n_head and (input_pos is None or cfg.n_query_groups != 1):
            k = k.expand(B, cfg.n_query_groups, q_per_kv, T, cfg.head_size)
            v = v.expand(B, cfg.n_query_groups, q_per_kv, T, cfg.head_size)
        q = q.reshape(B, -1, T, cfg.head_size)
        k = k.reshape(B, -1, T, cfg.head_size)
        v = v.reshape(B, -1, T, cfg.head_size)
        if cfg.rope == "complex":
            q = apply_rotary_emb_complex(q, cos)
            k = apply_rotary_emb_complex(k, cos)
        else:
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
        if input_pos is not None:
            if not isinstance(self.kv_cache, KVCache):
                raise TypeError("You need to call `gpt.set_kv_cache()`")
            k, v = self.kv_cache(input_pos, k, v)
        scale = 1.0 / math.sqrt(cfg.head_size)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=mask is None)
        y = y.transpose(1, 2).reshape(B, T, cfg.head_size * cfg.n_head)
        return self.proj(y)


class LLaMAMLP(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.fc_2 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = F.silu(x_fc_1) * x_fc_2
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = LLaMAMLP(config)

    def forward(self, x, cos, sin, mask=None, input_pos=None):
        x = self.attn(self.norm_1(x), cos, sin, mask, input_pos) + x
        return self.mlp(self.norm_2(x)) + x


class GPT(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=RMSNorm(config.n_embd, eps=config.norm_eps),
        ))
        if config.rope == "complex":
            self.register_buffer("freqs_cis", precompute_freqs_cis(config.head_size, config.block_size), persistent=False)
        else:
            cos, sin = build_rope_cache(config.block_size, config.head_size, base=config.rope_base)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        self.mask_cache = None

    def set_kv_cache(self, batch_size: int, device=None, dtype=None) -> None:
        cfg = self.config
        heads = 1 if cfg.n_query_groups == 1 else cfg.n_head
        shape = (batch_size, heads, cfg.block_size, cfg.head_size)
        for block in self.transformer.h:
            block.attn.kv_cache = KVCache(shape, shape, device=device, dtype=dtype)
        ones = torch.ones((cfg.block_size, cfg.block_size), device=device, dtype=torch.bool)
        self.mask_cache = torch.tril(ones).unsqueeze(0).unsqueeze(0)

    def forward(self, idx: torch.Tensor, input_pos=None) -> torch.Tensor:
        T = idx.size(1)
        if self.config.block_size < T:
            raise ValueError(f"Cannot forward sequence of length {T}, max seq length is only {self.config.block_size}.")
        if input_pos is not None:
            rope = (self.freqs_cis.index_select(0, input_pos), None) if self.config.rope == "complex" else (
                self.cos.index_select(0, input_pos), self.sin.index_select(0, input_pos))
            mask = self.mask_cache.index_select(2, input_pos)
        else:
            rope = (self.freqs_cis[:T], None) if self.config.rope == "complex" else (self.cos[:T], self.sin[:T])
            mask = None
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x, *rope, mask, input_pos)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)


@torch.no_grad()
def generate(model, forward, prompt: torch.Tensor, max_returned_tokens: int) -> torch.Tensor:
    """Greedy decoding with the KV cache: the prompt in one call, then one token per call."""
    T = prompt.size(0)
    device = prompt.device
    tokens = [prompt]
    input_pos = torch.arange(0, T, device=device)
    logits = forward(prompt.view(1, -1), input_pos)
    token = logits[0, -1].argmax(dim=-1, keepdim=True)
    tokens.append(token)
    input_pos = torch.tensor([T], device=device)
    for _ in range(max_returned_tokens - T - 1):
        logits = forward(token.view(1, -1), input_pos)
        token = logits[0, -1].argmax(dim=-1, keepdim=True)
        tokens.append(token)
        input_pos = input_pos.add_(1)
    return torch.cat(tokens)
