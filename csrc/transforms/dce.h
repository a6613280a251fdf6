// Dead code elimination.
#pragma once

#include "ir/trace.h"

namespace thunder {

/// Removes bound symbols none of whose outputs are used (unless tagged kDontDce), walking
/// backwards from the trace's output. Unused tensors among a kept call's several outputs are
/// replaced by None, which prints as `_`.
Trace dce(const Trace& trace);

}  // namespace thunder
