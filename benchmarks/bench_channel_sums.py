"""ATen's sums over every dim but the channel one (CUDA): what a channel gradient (a convolution's
bias, a layer scale, a norm's affine) costs when it runs as a reduction of its own, for the
activation shapes of ConvNeXt-T / Swin-T / T5 at batch 64 (32 for T5), in NCHW, channels-last and
a permuted view; beside it, the same sum as two ATen sums (the reduced dims innermost in memory
first). Prints microseconds per call (CUDA events, mean of 50 after 3 warm-ups).

    python -m benchmarks.bench_channel_sums
"""

import torch

from benchmarks.bench_projections import _time


def _cases():
    for dt in (torch.float32, torch.bfloat16):
        for shape in ((64, 768, 7, 7), (64, 96, 56, 56), (64, 384, 14, 14)):
            x = torch.randn(*shape, device="cuda", dtype=dt)
            yield f"nchw {shape} {dt} sum(0,2,3)", x, (0, 2, 3)
            yield f"nchw-permuted-to-nhwc {shape} {dt} sum(0,1,2)", x.permute(0, 2, 3, 1), (0, 1, 2)
            yield f"channels_last {shape} {dt} sum(0,2,3)", x.to(memory_format=torch.channels_last), (0, 2, 3)
        for shape, dims in (((64, 7, 7, 768), (0, 1, 2)), ((3136, 768), (0,)), ((64, 24, 49, 49), (0,)),
                            ((32, 8, 512, 512), (0,))):
            yield f"contiguous {shape} {dt} sum{dims}", torch.randn(*shape, device="cuda", dtype=dt), dims


def main():
    torch.manual_seed(0)
    print("case | ATen us | two ATen sums us | reduced dims inner, outer")
    for name, x, dims in _cases():
        base = _time(lambda: torch.sum(x, dims), 50)
        order = sorted(range(x.dim()), key=lambda d: x.stride(d))
        inner = []
        for d in order:
            if x.size(d) == 1:
                continue
            if d not in dims:
                break
            inner.append(d)
        outer = [d for d in dims if d not in inner]
        two = "-"
        if inner and outer:
            two = f"{_time(lambda: torch.sum(torch.sum(x, inner, keepdim=True, dtype=torch.float32), outer).to(x.dtype), 50):.1f}"
        print(f"{name} | {base:.1f} | {two} | {inner}, {outer}")


if __name__ == "__main__":
    main()
