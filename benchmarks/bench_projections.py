"""Vocabulary projections on CUDA, the matmul shapes behind transforms/pad_matmuls.h: a weight of
N rows (N not a multiple of 8, as GPT-2's 50257 or BERT's 30522) computed unpadded (rows of the
result not 16-byte aligned), with the weight padded to N' rows and the result a sliced view, padded
and then copied to a contiguous result, and with the weight transposed into a padded [K, N'] buffer;
and the backward's two matmuls with an unaligned or a padded gradient. Aligned vocabularies for
comparison. Microseconds per call, the mean of 20 after 3 warm-ups (CUDA events).

    python benchmarks/bench_projections.py
"""

import torch
import torch.nn.functional as F

SHAPES = [(8192, 768, 50257, False), (8192, 768, 30522, True), (4096, 2048, 128256, False), (8192, 768, 32000, False)]


def _time(fn, n=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n * 1e3


def main():
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; bf16, us per call")
    for m, k, n, bias in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
        np_ = (n + 7) // 8 * 8
        wp = torch.zeros(np_, k, device="cuda", dtype=torch.bfloat16)
        wp[:n] = w
        bp = None if b is None else torch.cat([b, b.new_zeros(np_ - n)])
        wt = torch.zeros(k, np_, device="cuda", dtype=torch.bfloat16)
        wt[:, :n] = w.t()
        gy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        gyp = torch.zeros(m, np_, device="cuda", dtype=torch.bfloat16)
        gyp[:, :n] = gy
        rows = {
            "unpadded": lambda: F.linear(x, w, b),
            "padded, sliced view": lambda: F.linear(x, wp, bp)[:, :n],
            "padded + contiguous copy": lambda: F.linear(x, wp, bp)[:, :n].contiguous(),
            "x @ w.t() padded to [K, N']": lambda: (torch.matmul(x, wt[:, :n]) if b is None
                                                     else torch.addmm(b, x, wt[:, :n])),
            "dx, unaligned gradient": lambda: gy @ w,
            "dx, padded gradient": lambda: gyp @ wp,
            "dw, unaligned gradient": lambda: gy.t() @ x,
            "dw, padded gradient": lambda: gyp.t() @ x,
        }
        print(f"{m} x {k} -> {n}{', bias' if bias else ''}: "
              + ", ".join(f"{name} {_time(fn):.0f}" for name, fn in rows.items()))


if __name__ == "__main__":
    main()
