// Helpers of the passes that replace single calls by traced expressions (column_sums,
// cat_reshapes, grad_layout) and of cse.
#pragma once

#include <functional>
#include <unordered_map>

#include "ir/trace.h"

namespace thunder {

/// A reshape of a tensor: ltorch.reshape or ltorch.view, prims.reshape.
bool isReshapeCall(const BoundSymbol& b);

/// The tensor `b` reads, where `b` only moves whole rows of it (its last dim's runs of elements)
/// to other places: each of its prims a reshape that keeps the last dim's length, a transpose that
/// keeps the last dim last, or a copy into a layout (`contiguous`); else null. A window partition
/// (reshape, permute, reshape) is one; a sum over every dim but the last reads the same elements
/// into the same columns from either side of it.
TensorPtr rowsMovedFrom(const BoundSymbol& b);

/// A call that only converts its one tensor's dtype: prims.convert_element_type, or a call whose
/// one subsymbol is such a call (ltorch.to, Tensor.float).
bool convertsOnly(const BoundSymbol& b);

/// The tensor `b` widens, where `b` only converts it to a dtype that holds every one of its values
/// (float16/bfloat16 to float32 or float64, float32 to float64: converting back is the identity);
/// else null.
TensorPtr widenedFrom(const BoundSymbol& b);

/// A copy of `trace` with each call at a position in `replace` replaced by what its function
/// traces (which must return a tensor of the call's output's shape and dtype; the later calls
/// read it under the old name). `pass` names the pass in an internal error.
Trace replaceCalls(const Trace& trace, const std::unordered_map<size_t, std::function<Value()>>& replace,
                   const std::string& pass);

}  // namespace thunder
