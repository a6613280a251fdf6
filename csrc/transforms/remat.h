// Rematerialization: which forward tensors a backward gets saved, and which it recomputes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder {

/// What the backward gets from the forward.
struct RematPlan {
  /// Tensors the forward saves for the backward.
  std::vector<TensorPtr> saved;
  /// Forward calls the backward runs again before its own, in forward order.
  std::vector<BoundSymbol> recompute;
};

/// Bytes of a tensor's elements.
int64_t tensorBytes(const TensorProxy& t);

/// True for calls cheap to run again: elementwise, shape and non-random creation ops, calls of
/// symbols marked recomputable, and composites made only of them; and for calls made inside
/// torch.utils.checkpoint (BoundSymbol::checkpointRegion) that draw no random numbers.
bool isRecomputable(const BoundSymbol& b);

/// Marks a symbol (by id) whose calls the backward may run again rather than have their outputs
/// saved, though it is none of the kinds above: e.g. the all-gather of a parameter shard (ZeRO-3
/// gathers parameters again in the backward instead of keeping them from the forward).
void markRecomputable(const std::string& symbolId);

/// Chooses the saved tensors by a minimum cut of the forward's dataflow graph, each tensor
/// weighted by its bytes (inputs almost free: they live anyway): a tensor the backward `needs`
/// is either saved or recomputed from saved ones through recomputable calls. Falls back to
/// saving `needed` as is unless the cut saves strictly fewer bytes.
/// `overwritten` names inputs the program updates in place: the backward has no value of
/// theirs, so what it needs of them is saved as computed (y of `y = x * 1; x.mul_(2)`), not
/// recomputed from them.
RematPlan rematerialize(const std::vector<BoundSymbol>& forward,
                        const std::vector<TensorPtr>& inputs, const std::vector<TensorPtr>& needed,
                        const std::vector<std::string>& overwritten = {});

}  // namespace thunder
