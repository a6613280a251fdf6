"""The fp8 executor's cast kernel (Triton): a matrix x [M, K] times a float32 scale, saturated at
the format's largest value and rounded to FP8, in the layouts cuBLASLt's FP8 matmuls read, with
the largest |x| of each tile, in one read of x.

cuBLASLt's FP8 kernels (torch._scaled_mm) take the first operand row-major and the second
column-major only, so a linear's backward needs each tensor in both layouts: the weight gradient
multiplies the transposes of the output gradient and of the input. Casting to the row-major copy
and then transposing it in FP8 took ATen's strided copy (`float8_copy_kernel_cuda`), one byte per
access: 32 ms of a 4-layer Llama step of 102 ms on an H200. Here each program loads a tile of x
once (coalesced along its rows) and stores the FP8 tile row-major and transposed (Triton stages
the transpose through shared memory so that both stores are coalesced), and the tile's amax.

This module imports without Triton; `cast` needs it.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the fp8 executor then casts with torch ops
    triton = None

__all__ = ["available", "cast"]

# (BLOCK_M, BLOCK_K, TILES, warps): tiles of BLOCK_M x BLOCK_K elements, TILES of them along K per
# program: the transposed store writes BLOCK_M bytes per row of the tile (two 32-byte sectors),
# and a program's amaxes of TILES tiles become one partial amax (a [16384, 128256] gradient has
# 64k of them, not 256k). `benchmarks/bench_fp8.py --parts casts` times others.
CONFIG = (64, 128, 4, 4)


def available() -> bool:
    """Whether Triton could be imported."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _cast_kernel(x_ptr, y_ptr, yt_ptr, scale_ptr, part_ptr, M, K, M_PAD, stride_m, stride_k, fp8_max,
                     OUT: tl.constexpr, WIDE_INPUT: tl.constexpr, ROW: tl.constexpr, COL: tl.constexpr, AMAX: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, TILES: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_k = tl.program_id(1)
        # 64-bit offsets: a [16384, 128256] gradient has more than 2**31 elements.
        rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        scale = tl.load(scale_ptr)
        top = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
        for t in tl.static_range(TILES):
            cols = (pid_k.to(tl.int64) * TILES + t) * BLOCK_K + tl.arange(0, BLOCK_K)
            inside = (rows[:, None] < M) & (cols[None, :] < K)
            # Rows from M to M_PAD are the zero rows cuBLASLt's multiples of 16 need.
            x = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :] * stride_k, mask=inside,
                        other=0.0).to(tl.float32)
            # In float32 (a bfloat16 product would round twice), saturating: out of range an e5m2
            # value would become inf and an e4m3 one nan. NaN stays nan, as in torch's clamp.
            y32 = tl.clamp(x * scale, -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
            y = y32.to(OUT)
            if ROW:
                tl.store(y_ptr + rows[:, None] * K + cols[None, :], y,
                         mask=(rows[:, None] < M_PAD) & (cols[None, :] < K))
            if COL:
                if WIDE_INPUT:
                    # From a float32 x, Triton 3.6 on an H200 miscompiles a transposed float32 or
                    # FP8 tile next to the row-major store (both copies came out wrong, rows of
                    # zeros or of one value): the transposed tile is loaded again, transposed in
                    # the addresses (from L2, just read), and rounded on its own.
                    xt = tl.load(x_ptr + rows[None, :] * stride_m + cols[:, None] * stride_k,
                                 mask=(cols[:, None] < K) & (rows[None, :] < M), other=0.0).to(tl.float32)
                    yt = tl.clamp(xt * scale, -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL).to(OUT)
                else:
                    # From 16-bit inputs the FP8 transpose is right, and moves a quarter of the bytes.
                    yt = tl.trans(y)
                tl.store(yt_ptr + cols[:, None] * M_PAD + rows[None, :], yt,
                         mask=(cols[:, None] < K) & (rows[None, :] < M_PAD))
            if AMAX:
                # nan counts as inf: either way the scale computed from this amax is not used.
                top = tl.maximum(top, tl.where(x == x, tl.abs(x), float("inf")))
        if AMAX:
            tl.store(part_ptr + pid_m * tl.num_programs(1) + pid_k, tl.max(top))

    _OUT = {torch.float8_e4m3fn: tl.float8e4nv, torch.float8_e5m2: tl.float8e5, torch.float32: tl.float32}


def cast(x: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype, fp8_max: float, m_pad: int, row: bool,
         col: bool, amax: bool, config: tuple[int, int, int, int] = CONFIG):
    """x [M, K] (M, K > 0, any strides) times `scale` (one float32 element), clamped to [-fp8_max, fp8_max],
    in out_dtype and padded with zero rows to m_pad >= M: (the result [m_pad, K] row-major or None,
    its transpose [K, m_pad] row-major or None, float32 partial amaxes whose largest is max |x|
    (nan counted as inf) or None). out_dtype float32 (no rounding) serves tests of the layouts."""
    M, K = x.shape
    block_m, block_k, tiles, warps = config
    grid = (triton.cdiv(m_pad, block_m), triton.cdiv(K, block_k * tiles))
    y = torch.empty(m_pad, K, dtype=out_dtype, device=x.device) if row else None
    yt = torch.empty(K, m_pad, dtype=out_dtype, device=x.device) if col else None
    parts = torch.empty(grid[0] * grid[1], dtype=torch.float32, device=x.device) if amax else None
    # Pointers the kernel does not use (its flags say so) are given some tensor of the call.
    _cast_kernel[grid](x, y if row else yt, yt if col else y, scale, parts if amax else scale, M, K, m_pad,
                       x.stride(0), x.stride(1), fp8_max, OUT=_OUT[out_dtype], WIDE_INPUT=x.element_size() > 2, ROW=row, COL=col, AMAX=amax,
                       BLOCK_M=block_m, BLOCK_K=block_k, TILES=tiles, num_warps=warps)
    return y, yt, parts
