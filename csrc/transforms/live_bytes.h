// Memory held by a trace's tensors as it runs, computed from their metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder {

/// Bytes held by live tensors along a trace.
struct LiveBytes {
  /// Bytes live after each bound symbol of the trace (del statements included) runs.
  std::vector<int64_t> after;
  /// The most bytes live at once: the largest entry of `after`, or more while a call's outputs
  /// that nothing reads are alive (they die as it returns); the inputs' bytes for a trace without
  /// calls. With the index of the first bound symbol where it is reached.
  int64_t peak = 0;
  size_t peakIndex = 0;
};

/// Walks an execution trace (with the `del` statements of del_last_used): a tensor is live from
/// the call that makes it (inputs: from the start) until the `del` naming it, or to the end. The
/// output of a shape op (kShapeOp: reshape, view, narrow, ...) is a view sharing its first tensor
/// argument's storage, which is freed when the last of the tensors sharing it is deleted; each
/// storage counts its base tensor's bytes (an estimate: an op such as reshape may copy).
/// When `producedBy` is not empty, only storages made by calls of the symbols of that name
/// (Symbol::name, e.g. "all_gather_zero3") are counted.
LiveBytes liveBytes(const Trace& trace, const std::string& producedBy = "");

}  // namespace thunder
