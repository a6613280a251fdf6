// Partitions a trace into fusion regions.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "ir/trace.h"

namespace thunder {

/// A group of fusible prims that runs as one kernel.
struct FusionRegion {
  /// The prims, in program order (composite calls are flattened into their prims).
  std::vector<BoundSymbol> prims;
  /// The top-level calls the region was made of, to put back if it is not fused.
  std::vector<BoundSymbol> originals;
  /// Tensors read from outside the region, in order of first use.
  std::vector<TensorPtr> inputs;
  /// Tensors computed in the region and used after it or returned.
  std::vector<TensorPtr> outputs;
  /// Prims that compute (everything but shape ops: broadcasts, reshapes, squeezes).
  int computeOps = 0;

  /// The region as one call of `sym`: its inputs as arguments, a list of its outputs, its prims as
  /// the subsymbols (what a fusion executor's `fuse` returns for an accepted region).
  BoundSymbol asCall(const Symbol* sym) const;
};

/// Groups fusible calls into regions respecting data dependencies: a call that is not fusible and
/// does not read the open region's results runs before that region's kernel (which may read its
/// results), so no region waits on an op that depends on it. A composite call is fusible
/// when every prim of its decomposition is. `fuse` turns an accepted region into one bound symbol,
/// or returns nothing to leave the region's calls as they were.
///
/// A `terminal` prim (a column sum) ends its values' use in the region: they may only pass
/// through dtype conversions in the same call and leave the region; a later call that reads them
/// starts a new region.
///
/// A `pointwise` reduction (a sum over a few elements per result) iterates over its result's
/// shape, like an elementwise op; other reductions iterate over their input's.
Trace fusionPartition(const Trace& trace, const std::function<bool(const BoundSymbol&)>& fusible,
                      const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                      const std::function<bool(const BoundSymbol&)>& terminal = nullptr,
                      const std::function<bool(const BoundSymbol&)>& pointwise = nullptr);

}  // namespace thunder
