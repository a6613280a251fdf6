// Prims: the minimal operations every other op decomposes into. No broadcasting, no type
// promotion; each has a meta function that checks its inputs and makes its outputs.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "ir/symbol.h"
#include "ir/trace.h"

namespace thunder::prims {

/// Identifies a prim; the list lives in prims.def.
enum class PrimId : uint16_t {
#define UNARY(n, k, o) n,
#define BINARY(n, k, o) n,
#define PRIM(n, s, t) n,
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM
  NumPrims
};

/// Registers every prim (idempotent).
void registerPrims();
/// The symbol of a prim.
const Symbol& symbol(PrimId id);
/// The symbol of the `del` statement.
const Symbol& delSymbol();

// Typed callers, one per prim: each records a bound symbol in the current trace.
#define UNARY(n, k, o) Value n(const Value& a);
#define BINARY(n, k, o) Value n(const Value& a, const Value& b);
#define PRIM(n, s, t)
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM

Value where(const Value& pred, const Value& a, const Value& b);
Value convert_element_type(const Value& a, DType dtype);
/// The n-th derivative of digamma at a (a real floating tensor), n >= 0.
Value polygamma(int64_t n, const Value& a);
/// a's values on `device` (Tensor.to(device)).
Value device_put(const Value& a, Device device);
Value full(const Shape& shape, const Value& fill, Device device, DType dtype);
Value iota(int64_t length, int64_t start, int64_t step, Device device, DType dtype);
Value uniform(const Shape& shape, const Value& minval, const Value& maxval, Device device,
              DType dtype);
Value broadcast_in_dim(const Value& a, const Shape& shape, const std::vector<int64_t>& bdims);
Value reshape(const Value& a, const Shape& shape);
Value slice(const Value& a, const std::vector<int64_t>& start, const std::vector<int64_t>& end,
            const std::vector<int64_t>& strides);
Value squeeze(const Value& a, const std::vector<int64_t>& dims);
Value transpose(const Value& a, const std::vector<int64_t>& permutation);
Value flip(const Value& a, const std::vector<int64_t>& dims);
Value stride_order(const Value& a, const std::vector<int64_t>& order);
Value cat(const std::vector<Value>& tensors, int64_t dim);
/// padding_config: (low, high, interior) per dimension.
Value pad(const Value& a, const Value& padValue, const std::vector<std::array<int64_t, 3>>& config);
Value take(const Value& a, const Value& indices, int64_t dim);
Value gather(const Value& a, const Value& indices, int64_t dim);
Value scatter_add(const Value& a, const Value& indices, const Value& value, int64_t dim);
Value sum(const Value& a, const std::vector<int64_t>& dims);
Value prod(const Value& a, const std::vector<int64_t>& dims);
Value amax(const Value& a, const std::vector<int64_t>& dims);
Value amin(const Value& a, const std::vector<int64_t>& dims);
Value var(const Value& a, const std::vector<int64_t>& dims, double correction);
/// dim: std::nullopt reduces over the flattened tensor.
Value argmax(const Value& a, std::optional<int64_t> dim);
Value argmin(const Value& a, std::optional<int64_t> dim);
Value matmul(const Value& a, const Value& b);
Value linear(const Value& a, const Value& w, const Value& bias);
Value embedding(const Value& a, const Value& weight, std::optional<int64_t> paddingIdx);
// ---- nn ops ----
/// Convolution (transposed or not); lists have one entry per spatial dim. The other nn prims are
/// called through call(symbol(PrimId::...), args).
Value convolution(const Value& a, const Value& weight, const Value& bias,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                  const std::vector<int64_t>& dilation, bool transposed,
                  const std::vector<int64_t>& outputPadding, int64_t groups);
// ---- end nn ops ----
/// Writes src into dst (a trace input of the same shape, dtype and device); returns dst.
Value copy_(const Value& src, const Value& dst);

// ---- tensor ops ----
/// Inclusive cumulative sum along dim, in a's dtype.
Value cumsum(const Value& a, int64_t dim);
/// Inclusive cumulative product along dim, in a's dtype.
Value cumprod(const Value& a, int64_t dim);
/// (values, int64 indices) of a sorted along dim.
Value sort(const Value& a, int64_t dim, bool descending, bool stable);
/// (values, int64 indices) of the k largest (smallest unless largest) along dim, sorted.
Value topk(const Value& a, int64_t k, int64_t dim, bool largest);
/// a with value[i] written at indices[i] along dim (as torch.scatter with a src tensor).
Value scatter(const Value& a, const Value& indices, const Value& value, int64_t dim);

}  // namespace thunder::prims
