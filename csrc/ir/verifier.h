// The trace verifier: checks a trace's invariants after a pass.
#pragma once

#include "ir/trace.h"

namespace thunder {

/// Checks that every tensor is defined (as an input or an earlier output) before use, that no
/// name is defined twice, that a deleted name is not used again, and that each name stands for
/// one proxy. Throws an internal error naming the trace and the offending statement.
void verify(const Trace& trace);

}  // namespace thunder
