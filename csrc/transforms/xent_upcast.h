// Cross-entropy of upcast logits: `F.cross_entropy(logits.float().view(-1, V), targets)` with
// bfloat16 or float16 logits, rewritten so that a fused cross-entropy can read the logits as they
// are and no float32 copy of them (nor of their gradient) is made.
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Where the logits of an `ltorch.cross_entropy` call are float32 values converted from bfloat16
/// or float16 ones (`.float()`, `.to(torch.float32)`, ...) with reshapes (`view`, `reshape`,
/// `flatten`, `squeeze`) before or after the conversion, and nothing else reads the converted
/// values, the call becomes `ltorch.cross_entropy_upcast` of the low-precision logits reshaped to
/// the call's logits shape: the same loss, computed in float32, whose decomposition is the
/// conversion and the cross-entropy (what runs when no executor claims it). Its gradient with
/// respect to the low-precision logits is the same as the original's (the gradient of a
/// conversion is the conversion back). Returns nothing when no call matches.
std::optional<Trace> foldCrossEntropyUpcast(const Trace& trace);

/// Whether a call with one tensor input and one tensor output only reshapes it: its prims are
/// reshapes and squeezes, which keep the elements in order.
bool onlyReshapes(const BoundSymbol& b);

}  // namespace thunder
