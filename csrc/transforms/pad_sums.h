// Sums of zero-padded pieces become concatenations: the gradient of a split, of slices, of a
// rotate-half (RoPE) arrives as `pad(g0) + pad(g1) + ...`, each pad a full-size zero tensor
// written around its piece. The same values are `cat([g1, g0, ...])`: one pass, no fills.
#pragma once

#include <optional>

#include "ir/trace.h"

namespace thunder {

/// Rewrites every maximal tree of same-shape, same-dtype additions (`ltorch.add` with alpha 1,
/// `prims.add`) whose leaves include two or more zero pads (`prims.pad`, padding value 0, no
/// interior padding, one padded dimension, read by nothing else) along one dimension with
/// disjoint ranges: those pads become one `ltorch.cat` of their pieces in order (zero pieces
/// fill gaps), added to the other leaves. Each position of the result receives the same addends
/// as before minus exact zeros. When the tree's only reader is a permutation that a reshape
/// reads, the pieces are permuted before the concatenation, so the concatenation is laid out
/// as the reshape needs and the reshape is a view, not a copy. Returns nothing when no tree
/// matches.
std::optional<Trace> padSumsToCat(const Trace& trace);

}  // namespace thunder
