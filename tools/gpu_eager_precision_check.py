"""Where eager PyTorch's CUDA kernels compute differently from its CPU kernels, and what thunder
does there: the evidence behind the CUDA op-test references (tests/python/opinfos*.py).

    python3 tools/gpu_eager_precision_check.py        # on the GPU machine

Prints, per case, eager CUDA's and thunder's largest error against float64 computed on the CPU
(the exact value, rounded once), and a line saying which is closer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunder


def err(x: torch.Tensor, exact: torch.Tensor) -> float:
    return (x.double().cpu() - exact).abs().max().item()


def report(name: str, fn, args, exact_fn) -> None:
    eager = fn(*args)
    jitted = thunder.jit(fn)(*args)
    exact = exact_fn(*[a.double().cpu() if isinstance(a, torch.Tensor) else a for a in args])
    e, t = err(eager, exact), err(jitted, exact)
    closer = "thunder" if t < e else "eager" if e < t else "equal"
    print(f"{name:48s} eager CUDA error {e:.3g}   thunder error {t:.3g}   closer: {closer}")


def main() -> None:
    assert torch.cuda.is_available(), "run this on the GPU machine"
    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        # Two values per group, one value per channel: GroupNorm1dForward rounds mean and rstd.
        x = torch.randn(64, 6, device="cuda", dtype=dtype)
        report(f"group_norm {dtype} [64, 6], 3 groups", lambda a: F.group_norm(a, 3), (x,),
               lambda a: F.group_norm(a, 3))
    x = torch.linspace(-5, 5, 1001, device="cuda", dtype=torch.float64)
    report("hardswish float64", F.hardswish, (x,), F.hardswish)
    # trunc(x / 0.1) at multiples of 0.1: the CUDA kernel multiplies by 1 / 0.1.
    x = torch.arange(-50, 51, device="cuda", dtype=torch.float64) * 0.1
    eager = torch.div(x, 0.1, rounding_mode="trunc")
    jitted = thunder.jit(lambda a: torch.div(a, 0.1, rounding_mode="trunc"))(x)
    cpu = torch.div(x.cpu(), 0.1, rounding_mode="trunc")
    print(f"{'div trunc by 0.1 float64':48s} eager CUDA vs eager CPU: {int((eager.cpu() != cpu).sum())} of "
          f"{x.numel()} differ; thunder vs eager CUDA: {int((jitted != eager).sum())} differ")
    # huber_loss in float16: the runtime's number operands as eager's (a float, not a half).
    a, b = (torch.randn(3, 4, device="cuda", dtype=torch.float16) for _ in range(2))
    jf = thunder.jit(lambda p, q: F.huber_loss(p, q, delta=0.7))
    print(f"{'huber_loss float16 delta=0.7':48s} eager {F.huber_loss(a, b, delta=0.7).item():.6f}   "
          f"thunder {jf(a, b).item():.6f}")


if __name__ == "__main__":
    main()
