// Prints traces as readable, runnable Python in the seeds' format.
#pragma once

#include <string>

#include "ir/trace.h"

namespace thunder {

/// Python's repr of a float ("1.0", "1e-05", "float('inf')").
std::string pythonFloatRepr(double d);
/// A value as a Python expression; dtypes and devices print per style.
std::string printValue(const Value& v, PrintStyle style);
/// One call without output or comment: "torch.mul(t_1, t8)".
std::string printCall(const BoundSymbol& b);
/// The whole trace: provenance header, imports, decorators, signature, input comments,
/// statements with type comments, subsymbols as nested comments, del lines and return.
std::string printTrace(const Trace& trace);

}  // namespace thunder
