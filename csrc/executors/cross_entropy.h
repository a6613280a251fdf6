// The fused cross-entropy kernels of the apex executor (python/thunder/executors/apexex.py): CUDA
// source compiled at run time with NVRTC, like the fuser's kernels. One block per row of the
// [rows, classes] logits; the forward reads each row once, keeping a running maximum and a running
// sum of exponentials rescaled when the maximum grows (online softmax), and writes the row's loss
// and its max-log-sum-exp; the backward reads the row once more and writes its gradient.
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace thunder::xent {

/// Threads per block for rows of `classes` logits: a warp for short rows, up to 1024 for long ones.
int blockSize(int64_t classes);

/// The CUDA source of the two kernels for one logits dtype (float32, bfloat16 or float16), one
/// label dtype (int32 or int64) and one block size:
///
///   thunder_xent_fwd(const T* logits, const L* labels, float* loss, float* mlse, int64_t classes,
///                    int64_t stride, float smoothing, int64_t ignoreIndex)
///     loss[r] = (1 - s) * (lse_r - x[r, y_r]) + s * (lse_r - mean_j x[r, j]), with lse_r the
///     row's log-sum-exp (written to mlse[r]); 0 for ignored rows (a label equal to ignoreIndex, or
///     negative); NaN for a label >= classes.
///   thunder_xent_bwd(const float* grad, const T* logits, const L* labels, const float* mlse,
///                    T* out, int64_t classes, int64_t stride, int64_t outStride, float smoothing)
///     out[r, j] = grad[r] * (exp(x[r, j] - mlse[r]) - (1 - s) * [j == y_r] - s / classes), and 0
///     for rows with a negative label (rows ignored for another label get grad[r] = 0).
///
/// Row r of the logits starts at logits + r * stride, of the output at out + r * outStride (a
/// padded matmul's logits are rows of a wider tensor). `vec` is 1 (scalar loads) or
/// vectorWidth(logits): then every thread moves 16 bytes per load and store, which needs strides
/// that are multiples of `vec` and 16-byte aligned logits and output (the launcher checks); the
/// last `classes % vec` of a row are scalar.
///
/// A user error for another dtype, a block size that is not a power of two in [32, 1024], or
/// another vector width.
std::string cudaSource(DType logits, DType labels, int block, int vec = 1);

/// Elements per 16-byte vector of the logits dtype: 4 for float32, 8 for bfloat16 and float16.
int vectorWidth(DType logits);

}  // namespace thunder::xent
