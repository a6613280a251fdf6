// PyTorch's type promotion for elementwise ops, and thunder's computation dtypes.
#pragma once

#include <utility>
#include <vector>

#include "ir/value.h"

namespace thunder {

/// How an elementwise op maps its promoted input dtype to its result dtype.
enum class PromotionKind {
  Default,         // the promoted dtype (add, mul, where)
  IntToFloat,      // integers and bools become the default float (exp, div, sqrt)
  AlwaysBool,      // comparisons
  ComplexToFloat,  // abs of complex is real
  BoolToLong,      // sum of bools is int64
};

/// torch.get_default_dtype() as of the trace being made (float32 unless set_default_dtype changed
/// it): the dtype of Python floats and of integers promoted to floats. The tracer sets it (the
/// compiled function's cache key holds torch's default dtype).
DType defaultFloat();
void setDefaultFloat(DType d);

/// PyTorch's promote_types lattice for two dtypes.
DType promoteTypes(DType a, DType b);

/// PyTorch's result_type over tensors and numbers: dimensioned tensors outrank 0-dim tensors,
/// which outrank Python numbers, unless a lower rank holds a higher category.
DType resultType(const std::vector<Value>& args);

/// (computation dtype, result dtype) of an elementwise op: low-precision floats are computed in
/// float32 and converted back.
std::pair<DType, DType> elementwiseTypePromotion(const std::vector<Value>& args,
                                                 PromotionKind kind);

}  // namespace thunder
