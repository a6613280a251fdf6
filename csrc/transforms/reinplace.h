// Reinplacing: an in-place update that functionalization made out of place is run in place again.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "ir/trace.h"

namespace thunder {

/// A call with several outputs whose other form writes some of them into its own arguments
/// instead (ATen's training-mode batch_norm updating the running statistics it is given).
struct UpdatingVariant {
  const Symbol* sym = nullptr;
  /// (output index, argument index): each output the form writes into that argument and returns.
  std::vector<std::pair<size_t, size_t>> outputToArg;
};

/// What the pass needs to know about the calls of an execution trace; the executors provide it.
struct ReinplaceRules {
  /// The in-place form of a call: same arguments, writes the result into its first argument and
  /// returns it (`Tensor.index_copy_` for `torch.index_copy`); nullptr when it has none.
  std::function<const Symbol*(const BoundSymbol&)> inplaceVariant;
  /// Whether the call's outputs are new tensors, sharing no storage with its inputs. Calls for
  /// which it says false (views, conversions that may return their input) are assumed to alias
  /// every tensor they read.
  std::function<bool(const BoundSymbol&)> freshOutputs;
  /// The updating form of a call with several outputs, or nullptr.
  std::function<const UpdatingVariant*(const BoundSymbol&)> updatingVariant;
};

/// Finds each write-back `copy_(x, b)` of an input b (the end of a functionalized in-place
/// update) where x comes from a chain of calls with in-place forms starting at b
/// (x1 = f1(b, ...), ..., x = fn(x_{n-1}, ...)), and runs that chain in place on b instead: the
/// calls become their in-place forms and the copy_ goes. So `buf.index_copy_(dim, i, v)` writes
/// the rows of v into buf rather than copying all of buf twice. Only where nothing can tell:
///   - b is an input of the trace and the copy_ is its only write-back;
///   - the trace returns neither b nor any tensor that may alias it (a view of b);
///   - what reads b or such an alias after the chain's first call (the old value: a fused
///     region may have been placed after the update) comes before anything reads the chain's
///     results and before the copy_: the chain then moves down past the last of those reads;
///   - each intermediate x_k is read only by the next call of the chain, as its first argument;
///   - no call of the chain reads b (or an alias of it) through another argument;
///   - x is not returned (a functional update returns a new tensor, not the caller's).
/// Readers of x after the chain see b, which holds x's value from then on.
///
/// A call with an updating form (outputs o_k written into arguments b_k) becomes that form where,
/// for every k, o_k is read only by its write-back `copy_(o_k, b_k)`, b_k is an input with no
/// other write-back, neither b_k nor an alias of it is returned or read after the call.
///
/// `training`: the trace is a training forward, whose returned tensors include what the
/// backward saves, and the caller's buffers change before that backward runs: a chain's result
/// may then be read by nothing but its write-back.
Trace reinplace(const Trace& trace, const ReinplaceRules& rules, bool training = false);

}  // namespace thunder
