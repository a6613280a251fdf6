// Tensor element types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace thunder {

/// Element type of a tensor; the list lives in dtypes.def.
enum class DType : uint8_t {
#define X(E, N, S, T, SZ, K) E,
#include "ir/dtypes.def"
#undef X
};

/// Number of dtypes in the closed list.
constexpr int kNumDTypes = 14;

/// Category used by type promotion, ordered: bool < integer < float < complex.
enum class DTypeKind : uint8_t { Bool = 0, Integer = 1, Float = 2, Complex = 3 };

/// Thunder's name of a dtype ("float32").
std::string_view dtypeName(DType d);
/// Short name used in type comments ("f32").
std::string_view dtypeShortName(DType d);
/// PyTorch's attribute name ("float32" for torch.float32).
std::string_view dtypeTorchName(DType d);
/// Size of one element in bytes.
int dtypeItemSize(DType d);
/// Promotion category of a dtype.
DTypeKind dtypeKind(DType d);
/// Looks up a dtype by thunder or torch name.
std::optional<DType> dtypeFromName(std::string_view name);

inline bool isFloating(DType d) { return dtypeKind(d) == DTypeKind::Float; }
inline bool isComplex(DType d) { return dtypeKind(d) == DTypeKind::Complex; }
inline bool isIntegral(DType d) { return dtypeKind(d) == DTypeKind::Integer; }
inline bool isBoolean(DType d) { return d == DType::Bool; }
/// float8_e4m3fn and float8_e5m2.
inline bool isFloat8(DType d) { return d == DType::Float8E4M3FN || d == DType::Float8E5M2; }
/// bfloat16 and float16: computed in float32 by the prims' decompositions.
inline bool isLowPrecision(DType d) { return d == DType::BFloat16 || d == DType::Float16; }
/// The real dtype of a complex dtype's parts (complex64 -> float32).
DType complexToReal(DType d);
/// The complex dtype whose parts are of a float dtype (float64 -> complex128).
DType realToComplex(DType d);

}  // namespace thunder
