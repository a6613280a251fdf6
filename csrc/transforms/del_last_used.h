// Inserts `del` statements after each tensor's last use.
#pragma once

#include "ir/trace.h"

namespace thunder {

/// After the last bound symbol that reads a tensor, inserts `del` of it (trace outputs are never
/// deleted), so the runtime frees memory as early as the program allows.
Trace delLastUsed(const Trace& trace);

}  // namespace thunder
