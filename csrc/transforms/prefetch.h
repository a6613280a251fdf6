// Prefetch: asynchronous transfers (the all-gathers of sharded parameters) issued ahead of use.
#pragma once

#include <cstdint>
#include <string>

#include "ir/trace.h"

namespace thunder {

/// Marks a symbol (by id) whose calls start an asynchronous transfer: its output is complete only
/// once a later call (its first reader, e.g. `wait`) completes it, so the call may be issued
/// earlier than where it was traced. `windowBytes` bounds the bytes of such outputs started and
/// not yet completed at any point once prefetch has moved them.
void markPrefetch(const std::string& symbolId, int64_t windowBytes);

/// Whether the trace calls a marked symbol.
bool hasPrefetchCalls(const Trace& trace);

/// Moves each call of a marked symbol (in trace order: s_1, s_2, ...) earlier: just after the
/// completion (first reader) of the earliest s_j whose later transfers s_j+1..s_k fit the window
/// with s_k, so that s_k runs while the calls between that completion and its own run (the
/// previous layer's compute). A call never moves before its inputs' producers or before the
/// previous marked call (the transfers keep their order, the same on every rank); producers of
/// its inputs that are recomputable (remat.h) and whose own inputs are ready move with it. Then
/// each completion (the first reader of a marked call's output that reads nothing else), with
/// the transfers issued right after it, moves down to just before the first reader of its
/// result. A trace without marked calls is returned unchanged.
Trace prefetch(const Trace& trace);

}  // namespace thunder
