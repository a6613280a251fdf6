// A CUDA convolution's bias as an addition the fuser can take (inference).
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Rewrites each top-level `ltorch.conv1d/2d/3d` call on a CUDA tensor of a floating dtype with
/// a bias as the call without it followed by `ltorch.add` of the bias, shaped (1, C, 1, ...).
/// ATen adds a convolution's bias in a kernel of its own after cuDNN's; as an addition it joins
/// the fused kernel of what reads the convolution (ConvNeXt's LayerNorm, BatchNorm in eval
/// mode), as torch.compile's does. For inference traces: a training trace would compute the
/// bias gradient with a reduction of its own and save the biased output for the backward.
/// THUNDER_CONV_BIAS_ADD=0 keeps the bias in the convolution, =all splits it on every device
/// (tests on CPU). Returns nothing when no call matches.
std::optional<Trace> convBiasToAdd(const Trace& trace);

}  // namespace thunder
