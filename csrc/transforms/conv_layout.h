// Which layout a trace's convolutions run in on CUDA: channels-last, or as their tensors come.
#pragma once

#include "ir/trace.h"

namespace thunder {

/// The layout of a trace's 2-D convolutions of half types on CUDA.
enum class ConvLayout {
  /// None in the trace: its convolutions (if any) run as their tensors come.
  None,
  /// cuDNN's tensor-core kernels read NHWC: the convolutions convert their operands to
  /// channels-last and leave their outputs so; the pointwise kernels that read an output iterate
  /// in its memory order, so the layout holds up to the next convolution.
  ChannelsLast,
  /// The layout would not hold: reshapes on the way group channels with pixels (GroupNorm's
  /// [N, C, H, W] -> [N, G, C/G * H * W] is a view of a row-major tensor and a copy of a
  /// channels-last one, and its row-major result costs a second copy into the next
  /// convolution). Where such reshapes are many against the convolutions (one for every four or
  /// more: every block of a diffusion UNet), the convolutions run as their tensors come (cuDNN
  /// transposes inside the call, without an allocation or a launch of ATen's); claiming calls
  /// the executors' as-laid-out forms. Also every such trace under THUNDER_CONV_NCHW=1 (A/B).
  AsLaidOut,
};

/// Decides from the trace before claiming (prims, or composites down to their prims): the fusion
/// executors plan their kernels and claiming picks the convolutions' forms from the same trace.
ConvLayout convolutionLayout(const Trace& trace);

/// Whether reshaping a channels-last tensor of `shape` (N, C, spatial...) to `to` is a view.
bool channelsLastReshapeIsView(const Shape& shape, const Shape& to);

}  // namespace thunder
