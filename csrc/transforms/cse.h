// Common subexpression elimination.
#pragma once

#include "ir/trace.h"

namespace thunder {

/// Drops a call that repeats an earlier one (the same symbol on the same arguments: the same
/// tensors, equal scalars bit for bit) and renames its outputs to the earlier call's. Calls that
/// draw random numbers, are kept for their effects, make new tensors from nothing (a buffer a later
/// op may fill) or belong to an executor are left alone, and so are slices, broadcasts and
/// conversions of the trace's inputs (a rotary table in float32: each kernel computes its own).
/// (The autodiff converts one gradient to bfloat16 once per consumer; a fused kernel then stored
/// the same values twice.) Two calls whose results are both returned stay two calls: the caller
/// gets two tensors, as from eager. A value widened and narrowed back to its dtype (bfloat16
/// through float32) is the value itself, unless the narrowing is returned and the value is an
/// input or returned as well; a widening only such round trips read is then dropped too.
Trace cse(const Trace& trace);

}  // namespace thunder
