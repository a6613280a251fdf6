// A concatenation of flattened pieces as the flattening of their concatenation.
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Rewrites `ltorch.cat([reshape(x_0, s_0), reshape(x_1, s_1), ...], last dim)` where each piece
/// `x_i` is `[..., H_i, D]` (the same leading dims and D) flattened to `[..., H_i * D]`, as
/// `reshape(ltorch.cat([x_0, x_1, ...], dim of H), [..., sum(H_i) * D])`: the same values. The
/// backward of a fused q/k/v projection split into heads (GPT-2's `c_attn`) gathered the three
/// head-major gradients this way: a kernel flattened each permuted piece into a copy, then ATen
/// concatenated the copies. Concatenated first, the permuted pieces are read once by one kernel
/// that writes the result, as ViT's `qkv` gradient already was. Returns nothing when no
/// concatenation matches.
std::optional<Trace> catOfFlattenedPieces(const Trace& trace);

}  // namespace thunder
