"""Row kernels over short rows with no wide access (CUDA): Swin-T's stage-1 attention softmax,
`(s + bias).softmax(-1)` over [4096, 3, 49, 49] bfloat16 with a [1, 3, 49, 49] bias, forward and
forward + backward, thunder against torch.compile. Rows of 49 elements load one element per access;
the row kernel's lanes per row follow THUNDER_FUSER_NARROW_CHUNKS (chunks per lane for such rows, 4
by default; 1 is one row per warp), read once per process:

    for n in 1 4; do THUNDER_FUSER_NARROW_CHUNKS=$n python -m benchmarks.bench_narrow_rows; done

Prints microseconds per call (CUDA events, mean of 50 after 3 warm-ups)."""

import os

import torch

import thunder
from benchmarks.bench_projections import _time


def attention_probs(s, bias):
    return (s + bias).softmax(-1)


def main():
    torch.manual_seed(0)
    s = torch.randn(4096, 3, 49, 49, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, 3, 49, 49, device="cuda", dtype=torch.bfloat16)
    sg = s.clone().requires_grad_()
    g = torch.randn_like(s)
    chunks = os.environ.get("THUNDER_FUSER_NARROW_CHUNKS", "4 (default)")
    for name, wrap in (("thunder", thunder.jit), ("torch.compile", torch.compile)):
        f = wrap(attention_probs)
        torch.testing.assert_close(f(s, bias), attention_probs(s, bias), atol=0.05, rtol=0.05)
        fwd = _time(lambda: f(s, bias), 50)
        both = _time(lambda: torch.autograd.grad(f(sg, bias), sg, g), 50)
        print(f"{name} (narrow chunks {chunks}) | forward {fwd:.1f} us | forward + backward {both:.1f} us")


if __name__ == "__main__":
    main()
