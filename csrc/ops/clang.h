// The core language (clang): helpers above the prims that add broadcasting, PyTorch's type
// promotion and dimension handling. Clang functions are not symbols: they record the prims they
// call into the enclosing symbol's subsymbols.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/value.h"
#include "ops/prims.h"
#include "ops/type_promotion.h"

namespace thunder::clang {

using PrimUnary = Value (*)(const Value&);
using PrimBinary = Value (*)(const Value&, const Value&);

/// Converts a tensor with convert_element_type, or a number to the Python type of `dtype`'s
/// category; no-op when the dtype already matches.
Value maybeConvert(const Value& a, DType dtype);
/// PyTorch's broadcasting of shapes; `op` names the op in the error message.
Shape broadcastShapes(const std::vector<Shape>& shapes, const std::string& op);
/// Expands a tensor to `shape` with broadcast_in_dim (no-op when equal).
Value expandTo(const Value& a, const Shape& shape, const std::string& op);
/// Broadcasts every tensor among `args` to their common shape.
std::vector<Value> maybeBroadcast(const std::vector<Value>& args, const std::string& op);
/// An index tensor on the CPU that indexes a tensor on another device, moved there: PyTorch's
/// advanced indexing (`cuda_table[torch.arange(n)]`, `x[idx] = v`) reads CPU indices so.
Value indexOnDeviceOf(const Value& index, const TensorProxy& indexed);

/// Elementwise unary op with promotion, computing low-precision floats in float32.
Value unary(PrimUnary prim, const Value& a, PromotionKind kind, const std::string& op);
/// Elementwise binary op with broadcasting and promotion. A Python number operand of a 16-bit
/// float op is first rounded to that dtype, as PyTorch's kernels do (not by mul and div, nor
/// where `exactNumbers`).
Value binary(PrimBinary prim, const Value& a, const Value& b, PromotionKind kind,
             const std::string& op, bool exactNumbers = false);
/// A number rounded to bfloat16 or float16 (through float, to nearest even), as a double.
double roundToLowPrecision(double v, DType d);
/// where(pred, a, b) with broadcasting and promotion of a and b.
Value where(const Value& pred, const Value& a, const Value& b, const std::string& op);

/// Dims of a reduction: None means all; canonicalized.
std::vector<int64_t> reductionDims(const TensorProxy& a, const Value& dim, const std::string& op);
/// Re-inserts reduced dims of length 1 (keepdim=True).
Value keepDims(const Value& reduced, const Shape& original, const std::vector<int64_t>& dims);

Value reshape(const Value& a, const Shape& shape, const std::string& op);
Value unsqueeze(const Value& a, int64_t dim, const std::string& op);
Value transpose(const Value& a, int64_t d0, int64_t d1, const std::string& op);
Value permute(const Value& a, const std::vector<int64_t>& dims, const std::string& op);
/// Full slice along one dim: start:stop:step with Python semantics (clamping, negatives).
Value sliceInDim(const Value& a, int64_t dim, std::optional<int64_t> start,
                 std::optional<int64_t> stop, int64_t step, const std::string& op);
/// Tensor filled with `fill` like `a` (same shape, device; dtype given or a's).
Value fullLike(const Value& a, const Value& fill, std::optional<DType> dtype = std::nullopt);

}  // namespace thunder::clang
